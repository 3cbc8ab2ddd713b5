/* A PolyBench-style gemm: C = alpha*A*B + beta*C. */
#include <stdio.h>
#include <stdlib.h>

#ifndef NI
#define NI 40
#endif
#define NJ 50
#define NK 70

static void init_array(int ni, int nj, int nk, double *alpha, double *beta,
                       double C[NI][NJ], double A[NI][NK], double B[NK][NJ])
{
  int i, j;
  *alpha = 1.5;
  *beta = 1.2;
  for (i = 0; i < ni; i++)
    for (j = 0; j < nj; j++)
      C[i][j] = (double) ((i*j+1) % ni) / ni;
  for (i = 0; i < ni; i++)
    for (j = 0; j < nk; j++)
      A[i][j] = (double) (i*(j+1) % nk) / nk;
  for (i = 0; i < nk; i++)
    for (j = 0; j < nj; j++)
      B[i][j] = (double) (i*(j+2) % nj) / nj;
}

static void print_array(int ni, int nj, double C[NI][NJ])
{
  for (int i = 0; i < ni; i++)
    for (int j = 0; j < nj; j++)
      fprintf(stderr, "%0.2lf ", C[i][j]);
}

static void kernel_gemm(int ni, int nj, int nk, double alpha, double beta,
                        double C[NI][NJ], double A[NI][NK], double B[NK][NJ])
{
  int i, j, k;
#pragma scop
  for (i = 0; i < ni; i++) {
    for (j = 0; j < nj; j++)
      C[i][j] *= beta;
    for (k = 0; k < nk; k++)
      for (j = 0; j < nj; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
  }
#pragma endscop
}

int main(int argc, char **argv)
{
  int ni = NI;
  int nj = NJ;
  int nk = NK;
  double alpha, beta;
  double (*C)[NJ] = malloc(sizeof(double) * NI * NJ);
  double (*A)[NK] = malloc(sizeof(double) * NI * NK);
  double (*B)[NJ] = malloc(sizeof(double) * NK * NJ);
  init_array(ni, nj, nk, &alpha, &beta, C, A, B);
  kernel_gemm(ni, nj, nk, alpha, beta, C, A, B);
  if (argc > 42) print_array(ni, nj, C);
  free(C); free(A); free(B);
  return 0;
}
