/* Multi-array triad in single precision, out = a * x + b * y + c * z + w (STREAM-like).
 *
 * Written for cudaperf.  Four input streams and one output, no reuse: the kernel is
 * bound by DRAM bandwidth.  The arrays are plain pointers, so their extents come from
 * the annotation above the function.
 */
#include <stdio.h>
#include <stdlib.h>

#define N (1 << 24)

// cudaperf: x[n] y[n] z[n] w[n] out[n]
void triad(int n, float a, float b, float c, const float *x, const float *y, const float *z,
           const float *w, float *out)
{
    for (int i = 0; i < n; i++)
        out[i] = a * x[i] + b * y[i] + c * z[i] + w[i];
}

int main(void)
{
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    float *z = malloc(sizeof(float) * N), *w = malloc(sizeof(float) * N);
    float *out = malloc(sizeof(float) * N);
    if (!x || !y || !z || !w || !out)
        return 1;
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 100) / 100.0f;
        y[i] = (float)(i % 37) / 37.0f;
        z[i] = (float)(i % 11) / 11.0f;
        w[i] = 1.0f;
    }
    triad(N, 0.5f, 1.5f, -2.0f, x, y, z, w, out);
    printf("out[n-1] = %f\n", out[N - 1]);
    free(x); free(y); free(z); free(w); free(out);
    return 0;
}
