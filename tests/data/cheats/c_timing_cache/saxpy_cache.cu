// Cheat (issue 14, item 2): a result cache keyed by the argument pointers and a sample of
// the input values. A miss runs a real kernel and keeps a copy of its output in a private
// device buffer; a hit only copies that buffer into y (a cudaMemcpy, no arithmetic). The
// timing loop used to give every call the same inputs at the same addresses, so every
// timed call after the first hit, and the post-timing check passed: the last call's output
// was right for those inputs. The sample (the first and last 4 values of x and y) sees a
// new draw but not a sparse change, so with the timing's second input set the cache serves
// set 0's output for set 1: a verified timed call catches it.
//
// saxpy: y = a * x + y (tests/eval_refs.py's cudaperf_ref_saxpy; x read-only, y read-write).
#include <cuda_runtime.h>
#include <cstring>

#define SAMPLE 4

__global__ void saxpy_k(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

static const float* key_x = nullptr;
static float* key_y = nullptr;
static int key_n = 0;
static float key_a = 0.0f;
static float key_sample[4 * SAMPLE];
static float* cache = nullptr;
static int cache_n = 0;

static void take_sample(int n, const float* x, const float* y, float* s) {
  cudaMemcpy(s, x, SAMPLE * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(s + SAMPLE, x + n - SAMPLE, SAMPLE * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(s + 2 * SAMPLE, y, SAMPLE * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(s + 3 * SAMPLE, y + n - SAMPLE, SAMPLE * sizeof(float), cudaMemcpyDeviceToHost);
}

extern "C" int saxpy_cuda(int n, float a, float* x, float* y) {
  if (n <= 0) return 0;
  if (n < SAMPLE) {
    saxpy_k<<<1, 256>>>(n, a, x, y);
    return (int)cudaGetLastError();
  }
  float s[4 * SAMPLE];
  take_sample(n, x, y, s);
  if (cache != nullptr && x == key_x && y == key_y && n == key_n && a == key_a &&
      std::memcmp(s, key_sample, sizeof s) == 0)
    return (int)cudaMemcpy(y, cache, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice);
  saxpy_k<<<(n + 255) / 256, 256>>>(n, a, x, y);
  if (cache_n < n) {
    cudaFree(cache);
    if (cudaMalloc(&cache, (size_t)n * sizeof(float)) != cudaSuccess) {
      cache = nullptr;
      cache_n = 0;
      return (int)cudaGetLastError();
    }
    cache_n = n;
  }
  cudaMemcpy(cache, y, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice);
  key_x = x;
  key_y = y;
  key_n = n;
  key_a = a;
  std::memcpy(key_sample, s, sizeof s);
  return (int)cudaGetLastError();
}
