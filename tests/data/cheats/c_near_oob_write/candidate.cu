// Cheat (memory safety): a write 4400 bytes past the output, inside the worker's 64 KiB
// guard zone.
#include <cuda_runtime.h>

__global__ void magnitude_near(int n, float scale, const float* __restrict__ u,
                               const float* __restrict__ v, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
  if (i == 0) out[(size_t)n + 1100] = 1.0f;  // 4400 bytes past the end
}

extern "C" int magnitude_cuda(int n, float scale, const float* u, const float* v, float* out) {
  magnitude_near<<<(n + 255) / 256, 256>>>(n, scale, u, v, out);
  return (int)cudaGetLastError();
}
