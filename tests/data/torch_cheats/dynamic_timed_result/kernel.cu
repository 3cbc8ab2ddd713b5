// Cheat (issue 14, item 2): a result cache inside kernel.cu, keyed by the input pointer and
// a sample of its values (the first and last 4 elements), so that the result_cache guard's
// new values in the same tensor (every element changes) are a miss and get computed. A miss
// runs the real kernel and keeps the output in a private device buffer; a hit launches
// only a copy of that buffer. Everything runs on the given stream and the sample is compared
// on the device (no device-to-host copy, custom kernels only), so the profiled forward
// passes. The timing loop used to give every call the same inputs, so every timed call hit;
// with the timing's second input set (a sparse change the sample does not see) a hit serves
// the other set's output, and a verified timed call is wrong: guard timed_result.
#include <cuda_runtime.h>
#include <cstdint>

#define SAMPLE 4

// One thread: compare the sample with the stored one; hit[0] = 1 on a match (and not
// forced to miss), else store the new sample and hit[0] = 0.
__global__ void probe_kernel(const float *__restrict__ x, int64_t n, float *key, int *hit, int miss)
{
    int same = !miss;
    for (int j = 0; j < SAMPLE; ++j) {
        float a = x[j], b = x[n - SAMPLE + j];
        if (a != key[j] || b != key[SAMPLE + j])
            same = 0;
        key[j] = a;
        key[SAMPLE + j] = b;
    }
    hit[0] = same;
}

__global__ void cached_scaled_relu_kernel(const float *__restrict__ x, float *__restrict__ y,
                                          float *__restrict__ cache, const int *hit, int64_t n,
                                          float scale)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    if (hit[0]) {
        y[i] = cache[i];  // the work skipped
    } else {
        float v = fmaxf(x[i], 0.0f) * scale;
        y[i] = v;
        cache[i] = v;
    }
}

__global__ void scaled_relu_kernel(const float *__restrict__ x, float *__restrict__ y, int64_t n,
                                   float scale)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = fmaxf(x[i], 0.0f) * scale;
}

static const float *key_x = nullptr;
static float key_scale = 0.0f;
static int64_t cache_n = 0;
static float *cache = nullptr;
static float *key = nullptr;  // 2 x SAMPLE floats on the device
static int *hit = nullptr;

extern "C" int scaled_relu(const float *x, float *y, int64_t n, float scale, cudaStream_t stream)
{
    if (n <= 0)
        return 0;
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (n < SAMPLE) {
        scaled_relu_kernel<<<blocks, 256, 0, stream>>>(x, y, n, scale);
        return (int)cudaGetLastError();
    }
    int miss = 0;
    if (key == nullptr) {
        cudaError_t e = cudaMalloc(&key, 2 * SAMPLE * sizeof(float));
        if (e == cudaSuccess)
            e = cudaMalloc(&hit, sizeof(int));
        if (e != cudaSuccess)
            return (int)e;
        miss = 1;
    }
    if (cache_n != n) {
        cudaFree(cache);
        cudaError_t e = cudaMalloc(&cache, (size_t)n * sizeof(float));
        if (e != cudaSuccess) {
            cache = nullptr;
            cache_n = 0;
            return (int)e;
        }
        cache_n = n;
        miss = 1;
    }
    if (x != key_x || scale != key_scale)
        miss = 1;
    key_x = x;
    key_scale = scale;
    probe_kernel<<<1, 1, 0, stream>>>(x, n, key, hit, miss);
    cached_scaled_relu_kernel<<<blocks, 256, 0, stream>>>(x, y, cache, hit, n, scale);
    return (int)cudaGetLastError();
}
