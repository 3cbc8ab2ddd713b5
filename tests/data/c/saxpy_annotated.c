#include <stddef.h>

// A flat-pointer kernel: the extents come from the annotation below.
// cudaperf: x[n] y[n]
void saxpy(int n, float a, const float *x, float *restrict y)
{
  for (int i = 0; i < n; i++)
    y[i] = a * x[i] + y[i];
}

int main(void)
{
  static float x[1000], y[1000];
  saxpy(1000, 2.0f, x, y);
  return 0;
}
