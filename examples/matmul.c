/* Dense matrix multiply, C = alpha * A * B + beta * C (the BLAS GEMM update).
 *
 * Written for cudaperf.  The default sizes are the ones main() passes; override with
 *   cudaperf optimize examples/matmul.c --size ni=2000 --size nj=2000 --size nk=2000
 * or at compile time with -D NI=... etc.  init_array() fills the data and returns
 * alpha and beta through pointers; cudaperf finds it because its parameters match.
 */
#include <stdio.h>
#include <stdlib.h>

#ifndef NI
#define NI 800
#endif
#ifndef NJ
#define NJ 900
#endif
#ifndef NK
#define NK 1000
#endif

static void init_array(int ni, int nj, int nk, double *alpha, double *beta,
                       double C[ni][nj], double A[ni][nk], double B[nk][nj])
{
    *alpha = 1.5;
    *beta = 1.2;
    for (int i = 0; i < ni; i++)
        for (int j = 0; j < nj; j++)
            C[i][j] = (double)((i * j + 1) % ni) / ni;
    for (int i = 0; i < ni; i++)
        for (int k = 0; k < nk; k++)
            A[i][k] = (double)(i * (k + 1) % nk) / nk;
    for (int k = 0; k < nk; k++)
        for (int j = 0; j < nj; j++)
            B[k][j] = (double)(k * (j + 2) % nj) / nj;
}

static void kernel_gemm(int ni, int nj, int nk, double alpha, double beta,
                        double C[ni][nj], const double A[ni][nk], const double B[nk][nj])
{
#pragma scop
    for (int i = 0; i < ni; i++)
        for (int j = 0; j < nj; j++) {
            C[i][j] *= beta;
            for (int k = 0; k < nk; k++)
                C[i][j] += alpha * A[i][k] * B[k][j];
        }
#pragma endscop
}

int main(void)
{
    double alpha, beta;
    double (*C)[NJ] = malloc(sizeof(double[NI][NJ]));
    double (*A)[NK] = malloc(sizeof(double[NI][NK]));
    double (*B)[NJ] = malloc(sizeof(double[NK][NJ]));
    if (!A || !B || !C)
        return 1;
    init_array(NI, NJ, NK, &alpha, &beta, C, A, B);
    kernel_gemm(NI, NJ, NK, alpha, beta, C, (const double (*)[NK])A, (const double (*)[NJ])B);
    double checksum = 0.0;
    for (int i = 0; i < NI; i++)
        for (int j = 0; j < NJ; j++)
            checksum += C[i][j];
    printf("checksum %.6f\n", checksum);
    free(A); free(B); free(C);
    return 0;
}
