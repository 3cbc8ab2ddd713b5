/* Lower-triangular matrix-vector product, y = L x (row i uses L[i][0..i]), double.
 *
 * Written for cudaperf.  A row reduction whose length grows with the row index: the work
 * per row is unbalanced, from 1 to n terms.
 */
#include <stdio.h>
#include <stdlib.h>

#define N 6144

void trmv_lower(int n, const double L[n][n], const double x[n], double y[n])
{
    for (int i = 0; i < n; i++) {
        y[i] = 0.0;
        for (int j = 0; j <= i; j++)
            y[i] += L[i][j] * x[j];
    }
}

int main(void)
{
    double (*L)[N] = malloc(sizeof(double[N][N]));
    double *x = malloc(sizeof(double) * N), *y = malloc(sizeof(double) * N);
    if (!L || !x || !y)
        return 1;
    for (int i = 0; i < N; i++) {
        x[i] = 1.0 / (i + 1);
        for (int j = 0; j < N; j++)
            L[i][j] = (double)((i + 2 * j) % 15) / 15.0;
    }
    trmv_lower(N, (const double (*)[N])L, x, y);
    printf("y[0] = %f, y[N-1] = %f\n", y[0], y[N - 1]);
    free(L); free(x); free(y);
    return 0;
}
