/* Scale a vector to unit length, y = x / ||x||_2, with the norm accumulated in double.
 *
 * Written for cudaperf.  Two phases: a reduction over the whole vector (a scalar every
 * later element needs) followed by an elementwise map that reads it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N (1 << 24)

// cudaperf: x[n] y[n]
void vec_normalize(int n, const float *x, float *y)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    double r = 1.0 / sqrt(s);
    for (int i = 0; i < n; i++)
        y[i] = (float)(x[i] * r);
}

int main(void)
{
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    if (!x || !y)
        return 1;
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 1000) / 1000.0f - 0.5f;
    vec_normalize(N, x, y);
    printf("y[1] = %g, y[n-1] = %g\n", y[1], y[N - 1]);
    free(x); free(y);
    return 0;
}
