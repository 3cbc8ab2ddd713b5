/* Tall-skinny matrix multiply, C = A * B with A of 16384 x 128 and B of 128 x 64 (double).
 *
 * Written for cudaperf.  Many rows, only 64 output columns and a short k loop: the
 * mappings differ in how rows and columns are spread over threads (one thread per row
 * walks all 64 columns in grid1d; a 2-D block covers 16 to 64 of them).
 */
#include <stdio.h>
#include <stdlib.h>

#define M 16384
#define K 128
#define N 64

void matmul_tall(int m, int n, int k, const double A[m][k], const double B[k][n], double C[m][n])
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0.0;
            for (int p = 0; p < k; p++)
                acc += A[i][p] * B[p][j];
            C[i][j] = acc;
        }
}

int main(void)
{
    double (*A)[K] = malloc(sizeof(double[M][K]));
    double (*B)[N] = malloc(sizeof(double[K][N]));
    double (*C)[N] = malloc(sizeof(double[M][N]));
    if (!A || !B || !C)
        return 1;
    for (int i = 0; i < M; i++)
        for (int p = 0; p < K; p++)
            A[i][p] = (double)((i + p) % 31) / 31.0;
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++)
            B[p][j] = (double)((p * j + 1) % 17) / 17.0;
    matmul_tall(M, N, K, (const double (*)[K])A, (const double (*)[N])B, C);
    printf("C[0][0] = %f, C[M-1][N-1] = %f\n", C[0][0], C[M - 1][N - 1]);
    free(A); free(B); free(C);
    return 0;
}
