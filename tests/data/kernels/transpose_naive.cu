// Naive transpose: reads are coalesced, writes stride n elements across threadIdx.x.
__global__ void transpose_naive(float* __restrict__ out, const float* __restrict__ in, int n)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < n && y < n)
        out[x * n + y] = in[y * n + x];
}

int main()
{
    const int n = 4096;
    float *in, *out;
    cudaMalloc(&in, n * n * sizeof(float));
    cudaMalloc(&out, n * n * sizeof(float));
    dim3 block(32, 8);
    dim3 grid(n / 32, n / 32);
    transpose_naive<<<grid, block>>>(out, in, n);
    cudaDeviceSynchronize();
    return 0;
}
