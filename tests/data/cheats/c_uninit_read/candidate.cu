// Cheat (memory safety): a "result cache" in device memory that nothing ever filled: the
// kernel reads it, hoping for an earlier run's results, and uses them when they look valid.
// The values never match here, so the output is right and only initcheck sees the read.
#include <cuda_runtime.h>

__global__ void magnitude_stale(int n, float scale, const float* __restrict__ u,
                                const float* __restrict__ v, const float* stale, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float guess = stale[i % 4096];
  float r = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
  out[i] = (guess == -1234.5f) ? guess : r;
}

extern "C" int magnitude_cuda(int n, float scale, const float* u, const float* v, float* out) {
  static float* stale = nullptr;
  if (!stale && cudaMalloc(&stale, 4096 * sizeof(float)) != cudaSuccess) return (int)cudaGetLastError();
  magnitude_stale<<<(n + 255) / 256, 256>>>(n, scale, u, v, stale, out);
  return (int)cudaGetLastError();
}
