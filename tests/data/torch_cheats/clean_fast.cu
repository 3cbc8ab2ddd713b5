// Clean candidate, fast format, for examples/torch/swish_bias.py (with clean_fast.py).
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void swish_bias_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                  float* __restrict__ y, int64_t n, int64_t dim) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v / (1.0f + expf(-v)) + bias[i % dim];
    }
}

extern "C" int swish_bias(const float* x, const float* bias, float* y, int64_t n, int64_t dim,
                          cudaStream_t stream) {
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    swish_bias_kernel<<<blocks, threads, 0, stream>>>(x, bias, y, n, dim);
    return (int)cudaGetLastError();
}
