/* Largest element of every row: mx[i] = max_j A[i][j] (the first step of a softmax).
 *
 * Written for cudaperf.  A max is not a sum, so it is not recognised as a reduction: the
 * row loop is parallel and each row is scanned sequentially by one thread.
 */
#include <stdio.h>
#include <stdlib.h>

#define ROWS 16384
#define COLS 1024

void row_max(int rows, int cols, const float A[rows][cols], float mx[rows])
{
    for (int i = 0; i < rows; i++) {
        float m = A[i][0];
        for (int j = 1; j < cols; j++)
            if (A[i][j] > m)
                m = A[i][j];
        mx[i] = m;
    }
}

int main(void)
{
    float (*A)[COLS] = malloc(sizeof(float[ROWS][COLS]));
    float *mx = malloc(sizeof(float) * ROWS);
    if (!A || !mx)
        return 1;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            A[i][j] = (float)((i * 13 + j * 7) % 1009) / 1009.0f;
    row_max(ROWS, COLS, (const float (*)[COLS])A, mx);
    printf("mx[0] = %f, mx[ROWS-1] = %f\n", mx[0], mx[ROWS - 1]);
    free(A); free(mx);
    return 0;
}
