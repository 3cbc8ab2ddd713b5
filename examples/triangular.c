/* Symmetric rank-k update on the lower triangle, C = alpha * A * A^T + beta * C (SYRK).
 *
 * Written for cudaperf.  A triangular loop nest: the bound of j depends on i, so the
 * work per row grows with i.
 */
#include <stdio.h>
#include <stdlib.h>

#define N 1200
#define M 1000

void syrk_lower(int n, int m, double alpha, double beta, double C[n][n], const double A[n][m])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            C[i][j] *= beta;
            for (int k = 0; k < m; k++)
                C[i][j] += alpha * A[i][k] * A[j][k];
        }
}

int main(void)
{
    double (*C)[N] = malloc(sizeof(double[N][N]));
    double (*A)[M] = malloc(sizeof(double[N][M]));
    if (!A || !C)
        return 1;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++)
            C[i][j] = (double)((i * j + 2) % M) / M;
        for (int k = 0; k < M; k++)
            A[i][k] = (double)((i * k + 1) % N) / N;
    }
    syrk_lower(N, M, 1.5, 1.2, C, (const double (*)[M])A);
    printf("C[N-1][0] = %f\n", C[N - 1][0]);
    free(A); free(C);
    return 0;
}
