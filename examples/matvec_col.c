/* Transposed matrix-vector product with column access, y = A^T x.
 *
 * Written for cudaperf.  The arrays are plain pointers with row-major indexing done by
 * hand, so their extents come from the annotation comment above the function.  The
 * natural loop order walks A row by row while accumulating into every y[j].
 */
#include <stdio.h>
#include <stdlib.h>

// cudaperf: A[n*m] x[n] y[m]
void matvec_col(int n, int m, const double *A, const double *x, double *y)
{
    int i, j;
    for (j = 0; j < m; j++)
        y[j] = 0.0;
    for (i = 0; i < n; i++)
        for (j = 0; j < m; j++)
            y[j] += A[i * m + j] * x[i];
}

int main(void)
{
    const int n = 5000;
    const int m = 4000;
    double *A = malloc(sizeof(double) * n * m);
    double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * m);
    if (!A || !x || !y)
        return 1;
    for (long k = 0; k < (long)n * m; k++)
        A[k] = (double)(k % 13) / 13.0;
    for (int i = 0; i < n; i++)
        x[i] = 1.0 / (i + 1);
    matvec_col(n, m, A, x, y);
    printf("y[0] = %f, y[m-1] = %f\n", y[0], y[m - 1]);
    free(A); free(x); free(y);
    return 0;
}
