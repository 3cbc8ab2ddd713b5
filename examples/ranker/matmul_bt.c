/* Matrix multiply with B stored transposed, C = A * B^T, single precision.
 *
 * Written for cudaperf.  Both operands are read along their rows (k is the last index of
 * A and of B), so every C[i][j] is a contiguous dot product: a row reduction.
 */
#include <stdio.h>
#include <stdlib.h>

#define NI 512
#define NJ 512
#define NK 512

void matmul_bt(int ni, int nj, int nk, const float A[ni][nk], const float B[nj][nk], float C[ni][nj])
{
    for (int i = 0; i < ni; i++)
        for (int j = 0; j < nj; j++) {
            C[i][j] = 0.0f;
            for (int k = 0; k < nk; k++)
                C[i][j] += A[i][k] * B[j][k];
        }
}

int main(void)
{
    float (*A)[NK] = malloc(sizeof(float[NI][NK]));
    float (*B)[NK] = malloc(sizeof(float[NJ][NK]));
    float (*C)[NJ] = malloc(sizeof(float[NI][NJ]));
    if (!A || !B || !C)
        return 1;
    for (int i = 0; i < NI; i++)
        for (int k = 0; k < NK; k++)
            A[i][k] = (float)((i * k + 1) % NK) / NK;
    for (int j = 0; j < NJ; j++)
        for (int k = 0; k < NK; k++)
            B[j][k] = (float)((j + 2 * k) % NK) / NK;
    matmul_bt(NI, NJ, NK, (const float (*)[NK])A, (const float (*)[NK])B, C);
    printf("C[0][0] = %f, C[NI-1][NJ-1] = %f\n", C[0][0], C[NI - 1][NJ - 1]);
    free(A); free(B); free(C);
    return 0;
}
