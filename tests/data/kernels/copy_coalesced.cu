// Coalesced copy: consecutive threads read/write consecutive floats.
__global__ void copy_coalesced(float* __restrict__ out, const float* __restrict__ in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = in[i];
}

int main()
{
    const int n = 1 << 24;
    float *in, *out;
    cudaMalloc(&in, n * sizeof(float));
    cudaMalloc(&out, n * sizeof(float));
    copy_coalesced<<<(n + 255) / 256, 256>>>(out, in, n);
    cudaDeviceSynchronize();
    return 0;
}
