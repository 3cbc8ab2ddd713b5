/* Matrix-vector product with row access, y = A x.
 *
 * Written for cudaperf.  Each y[i] is a dot product of row i of A with x: consecutive j
 * read consecutive addresses.  Data comes from seeded random values (no init function).
 */
#include <stdio.h>
#include <stdlib.h>

#define N 4000
#define M 5000

void matvec_row(int n, int m, const double A[n][m], const double x[m], double y[n])
{
    for (int i = 0; i < n; i++) {
        y[i] = 0.0;
        for (int j = 0; j < m; j++)
            y[i] += A[i][j] * x[j];
    }
}

int main(void)
{
    int n = N, m = M;
    double (*A)[M] = malloc(sizeof(double[N][M]));
    double *x = malloc(sizeof(double[M])), *y = malloc(sizeof(double[N]));
    if (!A || !x || !y)
        return 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            A[i][j] = (double)((i + j) % 17) / 17.0;
    for (int j = 0; j < m; j++)
        x[j] = 1.0 / (j + 1);
    matvec_row(n, m, (const double (*)[M])A, x, y);
    printf("y[0] = %f, y[n-1] = %f\n", y[0], y[n - 1]);
    free(A); free(x); free(y);
    return 0;
}
