/* One sweep of a weighted 5-point stencil on a wide rectangular grid, single precision.
 *
 * Written for cudaperf.  Out of place and without a time loop: every interior point of
 * out is independent.  The grid is much wider than tall (2048 x 8192), so the block shape
 * of a 2-D mapping matters more than for a square one.
 */
#include <stdio.h>
#include <stdlib.h>

#define NY 2048
#define NX 8192

void stencil5_rect(int ny, int nx, float c0, float c1, const float in[ny][nx], float out[ny][nx])
{
    for (int i = 1; i < ny - 1; i++)
        for (int j = 1; j < nx - 1; j++)
            out[i][j] = c0 * in[i][j] + c1 * (in[i - 1][j] + in[i + 1][j] + in[i][j - 1] + in[i][j + 1]);
}

int main(void)
{
    float (*in)[NX] = malloc(sizeof(float[NY][NX]));
    float (*out)[NX] = malloc(sizeof(float[NY][NX]));
    if (!in || !out)
        return 1;
    for (int i = 0; i < NY; i++)
        for (int j = 0; j < NX; j++) {
            in[i][j] = (float)((i * 3 + j) % 64) / 64.0f;
            out[i][j] = 0.0f;
        }
    stencil5_rect(NY, NX, 0.6f, 0.1f, (const float (*)[NX])in, out);
    printf("out[NY/2][NX/2] = %f\n", out[NY / 2][NX / 2]);
    free(in); free(out);
    return 0;
}
