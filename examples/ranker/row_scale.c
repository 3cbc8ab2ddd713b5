/* Scale every row of a matrix by its own factor, B = diag(s) A, single precision.
 *
 * Written for cudaperf.  Elementwise over a matrix with a vector broadcast along rows.
 */
#include <stdio.h>
#include <stdlib.h>

#define N 4096
#define M 4096

void row_scale(int n, int m, const float s[n], const float A[n][m], float B[n][m])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            B[i][j] = s[i] * A[i][j];
}

int main(void)
{
    float *s = malloc(sizeof(float) * N);
    float (*A)[M] = malloc(sizeof(float[N][M]));
    float (*B)[M] = malloc(sizeof(float[N][M]));
    if (!s || !A || !B)
        return 1;
    for (int i = 0; i < N; i++) {
        s[i] = 1.0f + (float)(i % 9) / 9.0f;
        for (int j = 0; j < M; j++)
            A[i][j] = (float)((i * 5 + j) % 41) / 41.0f;
    }
    row_scale(N, M, s, (const float (*)[M])A, B);
    printf("B[N-1][M-1] = %f\n", B[N - 1][M - 1]);
    free(s); free(A); free(B);
    return 0;
}
