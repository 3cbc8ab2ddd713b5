// Cheat (memory safety): a write far outside the arrays the worker handed over, past its
// 64 KiB guard zones, into memory no comparison looks at.
#include <cuda_runtime.h>

__global__ void magnitude_far(int n, float scale, const float* __restrict__ u,
                              const float* __restrict__ v, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
  if (i == 0) out[(size_t)n + (1u << 18)] = 1.0f;  // 1 MiB past the end
}

extern "C" int magnitude_cuda(int n, float scale, const float* u, const float* v, float* out) {
  magnitude_far<<<(n + 255) / 256, 256>>>(n, scale, u, v, out);
  return (int)cudaGetLastError();
}
