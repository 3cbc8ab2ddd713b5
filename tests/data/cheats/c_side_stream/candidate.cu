// Cheat: work on a private non-blocking stream the timing events do not wait for; nothing
// synchronizes before the call returns.
#include <cuda_runtime.h>

__global__ void magnitude_slow(int n, float scale, const float* __restrict__ u,
                               const float* __restrict__ v, float* __restrict__ out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float t = u[i];
  for (int k = 0; k < 20000; ++k) t = t * 0.999f + 0.001f;  // made slow, so the race shows
  float r = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
  out[i] = (t == -1.0f) ? 0.0f : r;
}

extern "C" int magnitude_cuda(int n, float scale, const float* u, const float* v, float* out) {
  static cudaStream_t side = nullptr;
  if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  magnitude_slow<<<(n + 255) / 256, 256, 0, side>>>(n, scale, u, v, out);
  return (int)cudaGetLastError();
}
