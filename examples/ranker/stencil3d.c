/* One sweep of a 7-point stencil on a 3-D grid (a heat-equation step), double precision.
 *
 * Written for cudaperf.  Three perfectly nested parallel loops.  The mappings put at most
 * two of them on the grid (i and j) and leave k, the contiguous index, sequential in each
 * thread, so neighbouring threads of a warp read addresses a whole row apart.
 */
#include <stdio.h>
#include <stdlib.h>

#define N 256

void stencil3d(int n, const double A[n][n][n], double B[n][n][n])
{
    for (int i = 1; i < n - 1; i++)
        for (int j = 1; j < n - 1; j++)
            for (int k = 1; k < n - 1; k++)
                B[i][j][k] = 0.125 * (A[i + 1][j][k] - 2.0 * A[i][j][k] + A[i - 1][j][k])
                           + 0.125 * (A[i][j + 1][k] - 2.0 * A[i][j][k] + A[i][j - 1][k])
                           + 0.125 * (A[i][j][k + 1] - 2.0 * A[i][j][k] + A[i][j][k - 1])
                           + A[i][j][k];
}

int main(void)
{
    double (*A)[N][N] = malloc(sizeof(double[N][N][N]));
    double (*B)[N][N] = malloc(sizeof(double[N][N][N]));
    if (!A || !B)
        return 1;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            for (int k = 0; k < N; k++) {
                A[i][j][k] = (double)(i + j + (N - k)) * 10 / N;
                B[i][j][k] = 0.0;
            }
    stencil3d(N, (const double (*)[N][N])A, B);
    printf("B[N/2][N/2][N/2] = %f\n", B[N / 2][N / 2][N / 2]);
    free(A); free(B);
    return 0;
}
