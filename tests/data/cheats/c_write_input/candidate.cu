// Cheat: an input is changed, so that a reference run after the candidate's (on the same
// buffers) would compute something else.
#include <cuda_runtime.h>

__global__ void magnitude_zero_u(int n, float scale, float* u, const float* v, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
  if (i % 7 == 3) u[i] = 0.0f;
}

extern "C" int magnitude_cuda(int n, float scale, const float* u, const float* v, float* out) {
  magnitude_zero_u<<<(n + 255) / 256, 256>>>(n, scale, (float*)u, v, out);
  return (int)cudaGetLastError();
}
