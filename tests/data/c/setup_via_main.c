/* The data is filled by a helper without "init" in its name, called by main first. */
#include <stdlib.h>

void fill(int n, int *v)
{
  for (int i = 0; i < n; i++)
    v[i] = i % 5;
}

void report(int n, int v[n])
{
  int s = 0;
  for (int i = 0; i < n; i++)
    s += v[i];
  (void) s;
}

void histogram(int n, int bins, const int v[n], long h[bins])
{
  for (int b = 0; b < bins; b++)
    h[b] = 0;
  for (int i = 0; i < n; i++)
    h[v[i] % bins] += 1;
}

int main(void)
{
  int n = 1 << 10;
  int bins = n / 128;
  int *v = malloc(sizeof(int) * n);
  long *h = malloc(sizeof(long) * bins);
  fill(n, v);
  for (int rep = 0; rep < 3; rep++)
    histogram(n, bins, v, h);
  report(n, v);
  return 0;
}
