/* One-dimensional convolution (valid part) with a short 7-tap filter, single precision.
 *
 * Written for cudaperf.  out[i] = sum_k w[k] * x[i + k]: each output is a reduction of
 * only seven terms, so giving a whole warp to one output wastes most of its lanes.
 */
#include <stdio.h>
#include <stdlib.h>

#define N (1 << 23)
#define KW 7

// cudaperf: x[n+kw-1] w[kw] out[n]
void conv1d_small(int n, int kw, const float *x, const float *w, float *out)
{
    for (int i = 0; i < n; i++) {
        out[i] = 0.0f;
        for (int k = 0; k < kw; k++)
            out[i] += w[k] * x[i + k];
    }
}

int main(void)
{
    float *x = malloc(sizeof(float) * (N + KW - 1));
    float *w = malloc(sizeof(float) * KW), *out = malloc(sizeof(float) * N);
    if (!x || !w || !out)
        return 1;
    for (int i = 0; i < N + KW - 1; i++)
        x[i] = (float)(i % 50) / 50.0f;
    for (int k = 0; k < KW; k++)
        w[k] = 1.0f / (k + 1);
    conv1d_small(N, KW, x, w, out);
    printf("out[0] = %f, out[n-1] = %f\n", out[0], out[N - 1]);
    free(x); free(w); free(out);
    return 0;
}
