// Control: an honest candidate for tests/data/c/saxpy_annotated.c (y = a * x + y), the
// problem c_timing_cache's cheat runs on.
#include <cuda_runtime.h>

__global__ void saxpy_k(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" int saxpy_cuda(int n, float a, const float* x, float* y) {
  if (n <= 0) return 0;
  saxpy_k<<<(n + 255) / 256, 256>>>(n, a, x, y);
  return (int)cudaGetLastError();
}
