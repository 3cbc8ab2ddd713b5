// Cheat (with model.py): launched on a torch.cuda.Stream() that model.py creates and never
// waits for.  Block 0 spins first, so the work is still running when forward returns.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void slow_scaled_relu_kernel(const float *__restrict__ x, float *__restrict__ y,
                                        int64_t n, float scale)
{
    if (blockIdx.x == 0) {
        long long start = clock64();
        while (clock64() - start < 20000000LL) {  // ~10 ms at 2 GHz
        }
    }
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = fmaxf(x[i], 0.0f) * scale;
}

extern "C" int scaled_relu(const float *x, float *y, int64_t n, float scale, cudaStream_t stream)
{
    if (n > 0)
        slow_scaled_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n, scale);
    return (int)cudaGetLastError();
}
