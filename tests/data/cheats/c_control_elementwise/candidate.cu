// Control: an honest candidate for examples/elementwise.c (out = scale * |(u, v)|).
#include <cuda_runtime.h>

__global__ void magnitude_k(int n, float scale, const float* __restrict__ u,
                            const float* __restrict__ v, float* __restrict__ out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
}

extern "C" int magnitude_cuda(int n, float scale, const float* u, const float* v, float* out) {
  if (n <= 0) return 0;
  magnitude_k<<<(n + 255) / 256, 256>>>(n, scale, u, v, out);
  return (int)cudaGetLastError();
}
