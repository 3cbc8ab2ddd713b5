/* Sum of squares of every row of a matrix: out[i] = sum_j A[i][j]^2.
 *
 * Written for cudaperf.  A row reduction over contiguous elements (one output per row),
 * accumulated in double from single-precision data.
 */
#include <stdio.h>
#include <stdlib.h>

#define ROWS 8192
#define COLS 2048

void row_sumsq(int rows, int cols, const float A[rows][cols], double out[rows])
{
    for (int i = 0; i < rows; i++) {
        out[i] = 0.0;
        for (int j = 0; j < cols; j++)
            out[i] += (double)A[i][j] * A[i][j];
    }
}

int main(void)
{
    float (*A)[COLS] = malloc(sizeof(float[ROWS][COLS]));
    double *out = malloc(sizeof(double) * ROWS);
    if (!A || !out)
        return 1;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            A[i][j] = (float)((i + 3 * j) % 29) / 29.0f;
    row_sumsq(ROWS, COLS, (const float (*)[COLS])A, out);
    printf("out[0] = %f, out[ROWS-1] = %f\n", out[0], out[ROWS - 1]);
    free(A); free(out);
    return 0;
}
