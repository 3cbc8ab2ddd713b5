// Cheat (or a hang): a kernel that never ends holds the GPU.
#include <cuda_runtime.h>

__global__ void magnitude_spin(int n, float scale, const float* __restrict__ u,
                               const float* __restrict__ v, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) {
    volatile float* w = out;
    while (w[0] != -12345.0f) { }
  }
  if (i < n) out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
}

extern "C" int magnitude_cuda(int n, float scale, const float* u, const float* v, float* out) {
  magnitude_spin<<<(n + 255) / 256, 256>>>(n, scale, u, v, out);
  return (int)cudaGetLastError();
}
