/* Elementwise map in single precision: the magnitude of a 2-D vector field, scaled.
 *
 * Written for cudaperf.  Every element is independent; the function is static and
 * main() does the set-up, so cudaperf reads the sizes from the call in main().
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N 20000000

static void magnitude(int n, float scale, const float u[n], const float v[n], float out[n])
{
    for (int i = 0; i < n; i++)
        out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
}

int main(void)
{
    int n = N;
    float *u = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    float *out = malloc(sizeof(float) * n);
    if (!u || !v || !out)
        return 1;
    for (int i = 0; i < n; i++) {
        u[i] = (float)(i % 100) / 100.0f;
        v[i] = (float)(i % 37) / 37.0f;
    }
    magnitude(n, 0.5f, u, v, out);
    printf("out[n-1] = %f\n", out[n - 1]);
    free(u); free(v); free(out);
    return 0;
}
