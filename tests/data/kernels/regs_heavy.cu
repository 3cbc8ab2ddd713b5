// 128 independent accumulators per thread, fully unrolled, under a 1024-thread launch
// bound (at most 64 registers): ptxas must spill.
#define ACC 128

extern "C" __global__ void __launch_bounds__(1024, 1)
regs_heavy(float* __restrict__ y, const float* __restrict__ x, int n, int iters)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float acc[ACC];
#pragma unroll
    for (int k = 0; k < ACC; ++k)
        acc[k] = x[i] * (float)(k + 1);
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < ACC; ++k)
            acc[k] = acc[k] * acc[(k + 1) % ACC] + 1.0f;
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < ACC; ++k)
        s += acc[k];
    y[i] = s;
}
