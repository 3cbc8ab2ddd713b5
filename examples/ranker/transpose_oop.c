/* Out-of-place matrix transpose in single precision, B = A^T.
 *
 * Written for cudaperf.  No arithmetic: a pure data movement problem.  Reads of A are
 * contiguous along j while the writes to B stride by n (or the other way round), so the
 * mapping that puts the written array's last index on threadIdx.x coalesces the stores
 * and strides the loads.
 */
#include <stdio.h>
#include <stdlib.h>

#define N 4096
#define M 4096

void transpose_oop(int n, int m, const float A[n][m], float B[m][n])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            B[j][i] = A[i][j];
}

int main(void)
{
    float (*A)[M] = malloc(sizeof(float[N][M]));
    float (*B)[N] = malloc(sizeof(float[M][N]));
    if (!A || !B)
        return 1;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < M; j++)
            A[i][j] = (float)((i * 7 + j) % 101) / 101.0f;
    transpose_oop(N, M, (const float (*)[M])A, B);
    printf("B[1][0] = %f, B[M-1][N-1] = %f\n", B[1][0], B[M - 1][N - 1]);
    free(A); free(B);
    return 0;
}
