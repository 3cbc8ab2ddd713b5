/* Sum of squares of a vector, accumulated in double and written through a pointer.
 *
 * Written for cudaperf.  A reduction: every iteration updates the same accumulator, so
 * the loop is not parallel as written; a GPU version reduces per block and combines.
 * x and out are plain pointers, so their extents come from the annotation.
 */
#include <stdio.h>
#include <stdlib.h>

#define N (1 << 24)

// cudaperf: x[n] out[1]
void sum_squares(int n, const float *x, double *out)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    out[0] = s;
}

int main(void)
{
    float *x = malloc(sizeof(float) * N);
    double out;
    if (!x)
        return 1;
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 1000) / 1000.0f;
    sum_squares(N, x, &out);
    printf("sum of squares = %f\n", out);
    free(x);
    return 0;
}
