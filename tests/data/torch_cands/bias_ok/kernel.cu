#include <cuda_runtime.h>
#include <cstdint>

__global__ void bias_relu_kernel(const float *__restrict__ x, const float *__restrict__ bias,
                                 float *__restrict__ y, int64_t rows, int64_t dim)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < rows * dim)
        y[i] = fmaxf(x[i] + bias[i % dim], 0.0f);
}

extern "C" int bias_relu(const float *x, const float *bias, float *y, int64_t rows, int64_t dim,
                         cudaStream_t stream)
{
    int64_t n = rows * dim;
    if (n > 0)
        bias_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, bias, y, rows, dim);
    return (int)cudaGetLastError();
}
