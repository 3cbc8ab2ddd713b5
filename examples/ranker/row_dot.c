/* Dot product of matching rows of two matrices: d[i] = sum_j A[i][j] * B[i][j].
 *
 * Written for cudaperf.  A row reduction that streams two matrices (no reuse), with the
 * sums accumulated in double.
 */
#include <stdio.h>
#include <stdlib.h>

#define ROWS 4096
#define COLS 4096

void row_dot(int rows, int cols, const float A[rows][cols], const float B[rows][cols], double d[rows])
{
    for (int i = 0; i < rows; i++) {
        d[i] = 0.0;
        for (int j = 0; j < cols; j++)
            d[i] += (double)A[i][j] * B[i][j];
    }
}

int main(void)
{
    float (*A)[COLS] = malloc(sizeof(float[ROWS][COLS]));
    float (*B)[COLS] = malloc(sizeof(float[ROWS][COLS]));
    double *d = malloc(sizeof(double) * ROWS);
    if (!A || !B || !d)
        return 1;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) {
            A[i][j] = (float)((i + j) % 17) / 17.0f;
            B[i][j] = (float)((i * j) % 23) / 23.0f;
        }
    row_dot(ROWS, COLS, (const float (*)[COLS])A, (const float (*)[COLS])B, d);
    printf("d[0] = %f, d[ROWS-1] = %f\n", d[0], d[ROWS - 1]);
    free(A); free(B); free(d);
    return 0;
}
