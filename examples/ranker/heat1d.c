/* One-dimensional heat equation: 3-point stencil with a time loop (two sweeps a step).
 *
 * Written for cudaperf.  The time loop carries a dependence, so it stays on the host and
 * each sweep is one kernel launch per step: 100 short launches over two 8 MB arrays that
 * stay in the GPU's L2, so launch overhead counts as much as bandwidth.
 */
#include <stdio.h>
#include <stdlib.h>

#define TSTEPS 50
#define N (1 << 20)

void heat_1d(int tsteps, int n, double A[n], double B[n])
{
    for (int t = 0; t < tsteps; t++) {
        for (int i = 1; i < n - 1; i++)
            B[i] = 0.25 * A[i - 1] + 0.5 * A[i] + 0.25 * A[i + 1];
        for (int i = 1; i < n - 1; i++)
            A[i] = 0.25 * B[i - 1] + 0.5 * B[i] + 0.25 * B[i + 1];
    }
}

int main(void)
{
    double *A = malloc(sizeof(double) * N), *B = malloc(sizeof(double) * N);
    if (!A || !B)
        return 1;
    for (int i = 0; i < N; i++) {
        A[i] = (double)(i % 1000) / 1000.0;
        B[i] = 0.0;
    }
    heat_1d(TSTEPS, N, A, B);
    printf("A[N/2] = %f\n", A[N / 2]);
    free(A); free(B);
    return 0;
}
