/* Column sums of a matrix: s[j] = sum_i A[i][j], loops written column by column.
 *
 * Written for cudaperf.  The reduction runs down a column (stride m), so one thread per
 * column reads coalesced across the warp while one warp per column reads strided.
 */
#include <stdio.h>
#include <stdlib.h>

#define N 4096
#define M 4096

void col_sums(int n, int m, const double A[n][m], double s[m])
{
    for (int j = 0; j < m; j++) {
        s[j] = 0.0;
        for (int i = 0; i < n; i++)
            s[j] += A[i][j];
    }
}

int main(void)
{
    double (*A)[M] = malloc(sizeof(double[N][M]));
    double *s = malloc(sizeof(double) * M);
    if (!A || !s)
        return 1;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < M; j++)
            A[i][j] = (double)((i * j + 1) % 19) / 19.0;
    col_sums(N, M, (const double (*)[M])A, s);
    printf("s[0] = %f, s[M-1] = %f\n", s[0], s[M - 1]);
    free(A); free(s);
    return 0;
}
