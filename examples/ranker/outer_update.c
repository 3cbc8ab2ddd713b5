/* Rank-1 update, A = A + alpha * x y^T (the BLAS GER update), double precision.
 *
 * Written for cudaperf.  Every element of A is read and written once; x and y are small
 * and reused across a row or a column.
 */
#include <stdio.h>
#include <stdlib.h>

#define N 4096
#define M 4096

void outer_update(int n, int m, double alpha, double A[n][m], const double x[n], const double y[m])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            A[i][j] += alpha * x[i] * y[j];
}

int main(void)
{
    double (*A)[M] = malloc(sizeof(double[N][M]));
    double *x = malloc(sizeof(double) * N), *y = malloc(sizeof(double) * M);
    if (!A || !x || !y)
        return 1;
    for (int i = 0; i < N; i++) {
        x[i] = 1.0 / (i + 1);
        for (int j = 0; j < M; j++)
            A[i][j] = (double)((i + j) % 13) / 13.0;
    }
    for (int j = 0; j < M; j++)
        y[j] = (double)(j % 7) / 7.0;
    outer_update(N, M, 0.75, A, x, y);
    printf("A[0][1] = %f\n", A[0][1]);
    free(A); free(x); free(y);
    return 0;
}
