/* PolyBench layout without '#pragma scop': init, print and kernel all loop. */
#include <stdio.h>
#define N 120

static void init_array(int n, double x[N], double A[N][N])
{
  for (int i = 0; i < n; i++) {
    x[i] = i / (double) n;
    for (int j = 0; j < n; j++)
      A[i][j] = (i + j) % n;
  }
}

static void print_array(int n, double y[N])
{
  for (int i = 0; i < n; i++)
    fprintf(stderr, "%0.2lf ", y[i]);
}

static void kernel_mvt(int n, double x[N], double y[N], double A[N][N])
{
  for (int i = 0; i < n; i++) {
    y[i] = 0;
    for (int j = 0; j < n; j++)
      y[i] += A[i][j] * x[j];
  }
}

int main(void)
{
  static double x[N], y[N], A[N][N];
  init_array(N, x, A);
  kernel_mvt(N, x, y, A);
  print_array(N, y);
  return 0;
}
