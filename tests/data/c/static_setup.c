/* A static kernel in a file whose main does real set-up work. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "helpers.h"

#ifndef N
#define N 64
#endif

/*
 * Row sums of a square matrix, scaled.
 * cudaperf: a[n*n]
 * cudaperf: s[n]
 */
static void row_sums(int n, double scale, const double *a, double *s)
{
  for (int i = 0; i < n; i++) {
    double acc = 0.0;
    for (int j = 0; j < n; j++)
      acc += a[i * n + j];
    s[i] = scale * SQUARE(1.0) * acc;
  }
}

int main(int argc, char **argv)
{
  int size = N;
  int n = size;
  double *a = malloc(sizeof(double) * n * n);
  double *s = malloc(sizeof(double) * n);
  for (int i = 0; i < n * n; i++)
    a[i] = helper_value(i);
  row_sums(n, 0.5, a, s);
  double total = 0.0;
  for (int i = 0; i < n; i++)
    total += s[i];
  printf("%f\n", sqrt(total));
  free(a);
  free(s);
  return 0;
}
