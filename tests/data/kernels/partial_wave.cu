// 1024-thread blocks: 2 resident blocks per SM on sm_90, so 132 SMs run 264 blocks per
// wave.  300 blocks = 1.14 waves: the second wave is 14% full.
__global__ void scale_partial(float* __restrict__ x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= a;
}

int main()
{
    const int n = 300 * 1024;
    float* x;
    cudaMalloc(&x, n * sizeof(float));
    scale_partial<<<300, 1024>>>(x, 2.0f, n);
    cudaDeviceSynchronize();
    return 0;
}
