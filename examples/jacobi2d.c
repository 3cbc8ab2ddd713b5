/* Two-dimensional Jacobi stencil with a time loop (5-point average, two sweeps a step).
 *
 * Written for cudaperf.  The time loop carries a dependence (each step reads the last
 * one's result), so it stays sequential; the two sweeps inside a step are parallel.
 */
#include <stdio.h>
#include <stdlib.h>

#define TSTEPS 100
#define N 1500

void jacobi_2d(int tsteps, int n, double A[n][n], double B[n][n])
{
    for (int t = 0; t < tsteps; t++) {
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                B[i][j] = 0.2 * (A[i][j] + A[i][j - 1] + A[i][j + 1] + A[i + 1][j] + A[i - 1][j]);
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                A[i][j] = 0.2 * (B[i][j] + B[i][j - 1] + B[i][j + 1] + B[i + 1][j] + B[i - 1][j]);
    }
}

int main(void)
{
    double (*A)[N] = malloc(sizeof(double[N][N]));
    double (*B)[N] = malloc(sizeof(double[N][N]));
    if (!A || !B)
        return 1;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            A[i][j] = ((double)i * (j + 2) + 2) / N;
            B[i][j] = ((double)i * (j + 3) + 3) / N;
        }
    jacobi_2d(TSTEPS, N, A, B);
    printf("A[N/2][N/2] = %f\n", A[N / 2][N / 2]);
    free(A); free(B);
    return 0;
}
