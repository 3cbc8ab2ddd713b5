/* The cheat of saxpy_cache.cu for the worker's host emulation (CUDAPERF_WORKER_BACKEND=host,
 * tests/test_evaluate.py): the "device" pointers are host pointers, so the kernel is a loop
 * and the copies are memcpy. Same key (pointers, n, a, the first and last 4 values of x and
 * y), same behaviour: a hit copies the cached output into y. */
#include <stdlib.h>
#include <string.h>

#define SAMPLE 4

static const float *key_x;
static float *key_y;
static int key_n;
static float key_a;
static float key_sample[4 * SAMPLE];
static float *cache;
static int cache_n;

int saxpy_cuda(int n, float a, float *x, float *y) {
  float s[4 * SAMPLE];
  if (n <= 0) return 0;
  if (n < SAMPLE) {
    for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
    return 0;
  }
  memcpy(s, x, SAMPLE * sizeof(float));
  memcpy(s + SAMPLE, x + n - SAMPLE, SAMPLE * sizeof(float));
  memcpy(s + 2 * SAMPLE, y, SAMPLE * sizeof(float));
  memcpy(s + 3 * SAMPLE, y + n - SAMPLE, SAMPLE * sizeof(float));
  if (cache && x == key_x && y == key_y && n == key_n && a == key_a &&
      memcmp(s, key_sample, sizeof s) == 0) {
    memcpy(y, cache, (size_t)n * sizeof(float));
    return 0;
  }
  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
  if (cache_n < n) {
    free(cache);
    cache = malloc((size_t)n * sizeof(float));
    if (!cache) { cache_n = 0; return 2; }
    cache_n = n;
  }
  memcpy(cache, y, (size_t)n * sizeof(float));
  key_x = x; key_y = y; key_n = n; key_a = a;
  memcpy(key_sample, s, sizeof s);
  return 0;
}
