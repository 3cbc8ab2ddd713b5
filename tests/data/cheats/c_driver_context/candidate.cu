// Cheat: a private context (driver API) the worker's events and synchronizations do not
// see; the output is never written in the worker's context.
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void magnitude_k(int n, float scale, const float* __restrict__ u,
                            const float* __restrict__ v, float* __restrict__ out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
}

extern "C" int magnitude_cuda(int n, float scale, const float* u, const float* v, float* out) {
  static CUcontext mine = nullptr;
  CUdevice dev;
  if (!mine && cuDeviceGet(&dev, 0) == CUDA_SUCCESS) cuCtxCreate(&mine, nullptr, 0, dev);
  CUcontext theirs = nullptr;
  cuCtxGetCurrent(&theirs);
  if (mine) cuCtxSetCurrent(mine);
  magnitude_k<<<(n + 255) / 256, 256>>>(n, scale, u, v, out);
  cuCtxSetCurrent(theirs);
  return 0;
}
