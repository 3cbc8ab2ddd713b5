// Strided copy: thread i reads element i*stride, so a warp touches 32 different sectors.
__global__ void copy_strided(float* __restrict__ out, const float* __restrict__ in, int n, int stride)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = in[i * stride];
}

int main()
{
    const int n = 1 << 20;
    float *in, *out;
    cudaMalloc(&in, 32 * n * sizeof(float));
    cudaMalloc(&out, n * sizeof(float));
    copy_strided<<<(n + 255) / 256, 256>>>(out, in, n, 32);
    cudaDeviceSynchronize();
    return 0;
}
