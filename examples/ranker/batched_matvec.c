/* Batched matrix-vector products: y[b] = A[b] x[b] for a batch of small square matrices.
 *
 * Written for cudaperf.  Three-dimensional arrays; the batch and row loops are both
 * parallel and the inner loop is a row reduction of length n.
 */
#include <stdio.h>
#include <stdlib.h>

#define BATCH 256
#define N 256

void batched_matvec(int batch, int n, const float A[batch][n][n], const float x[batch][n],
                    float y[batch][n])
{
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < n; i++) {
            y[b][i] = 0.0f;
            for (int j = 0; j < n; j++)
                y[b][i] += A[b][i][j] * x[b][j];
        }
}

int main(void)
{
    float (*A)[N][N] = malloc(sizeof(float[BATCH][N][N]));
    float (*x)[N] = malloc(sizeof(float[BATCH][N]));
    float (*y)[N] = malloc(sizeof(float[BATCH][N]));
    if (!A || !x || !y)
        return 1;
    for (int b = 0; b < BATCH; b++)
        for (int i = 0; i < N; i++) {
            x[b][i] = (float)((b + i) % 5) / 5.0f;
            for (int j = 0; j < N; j++)
                A[b][i][j] = (float)((b + i * j) % 23) / 23.0f;
        }
    batched_matvec(BATCH, N, (const float (*)[N][N])A, (const float (*)[N])x, y);
    printf("y[0][0] = %f, y[BATCH-1][N-1] = %f\n", y[0][0], y[BATCH - 1][N - 1]);
    free(A); free(x); free(y);
    return 0;
}
