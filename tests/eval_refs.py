"""Reference C functions and parameter lists shared by the evaluation tests (CPU host
emulation in test_evaluate.py and the GPU tests in test_gpu_evaluate.py).

Each ``cudaperf_ref_<fn>`` has the reference-library calling convention: the C function's
parameters with arrays as ``void *``.
"""

from cudaperf_cli.core import ArrayParam, ScalarKind, ScalarParam

REF_C = r"""
#include <stdint.h>
void cudaperf_ref_saxpy(int n, float a, void *xv, void *yv) {
  const float *x = xv; float *y = yv;
  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
void cudaperf_ref_mm(int n, int m, int k, void *Av, void *Bv, void *Cv) {
  double (*A)[k] = Av; double (*B)[m] = Bv; double (*C)[m] = Cv;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      double s = 0.0;
      for (int l = 0; l < k; l++) s += A[i][l] * B[l][j];
      C[i][j] = s;
    }
}
void cudaperf_ref_iadd(long n, void *av, void *bv, void *cv) {
  const int32_t *a = av, *b = bv; int32_t *c = cv;
  for (long i = 0; i < n; i++) c[i] = a[i] + 3 * b[i];
}
void cudaperf_ref_jacobi(int tsteps, int n, void *Av, void *Bv) {
  double *A = Av, *B = Bv;
  for (int t = 0; t < tsteps; t++) {
    for (int i = 1; i < n - 1; i++) B[i] = 0.33333 * (A[i-1] + A[i] + A[i+1]);
    for (int i = 1; i < n - 1; i++) A[i] = 0.33333 * (B[i-1] + B[i] + B[i+1]);
  }
}
void cudaperf_ref_daxpy(int n, double alpha, void *xv, void *yv) {
  const double *x = xv; double *y = yv;
  for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}
void cudaperf_init_daxpy(int n, double *alpha, void *xv, void *yv) {
  double *x = xv, *y = yv;
  *alpha = 2.5;
  for (int i = 0; i < n; i++) { x[i] = (double)(i % 17) / 17.0; y[i] = 1.0 + (i % 5); }
}
void cudaperf_ref_crash(int n, float a, void *x, void *y) { *(volatile int *)0 = n; }
"""

SAXPY_PARAMS = [
    ScalarParam("n", "int", ScalarKind.SIZE),
    ScalarParam("a", "float", ScalarKind.COEFFICIENT),
    ArrayParam("x", "float", ("n",), const=True),
    ArrayParam("y", "float", ("n",)),
]


def host_clock_verdict(status: str, message: str | None) -> bool:
    """A ``wrong`` verdict that came only from a rule comparing host wall time across the
    judge's and the candidate's processes (``timing.judge_clock``, ``timing.side_work``): on
    a badly loaded machine those fire for honest candidates too (docs/evaluation.md §6), so
    a test about something else treats such a verdict as inconclusive."""
    msg = message or ""
    return status == "wrong" and ("the judge's clock saw" in msg or "the device stayed busy" in msg)

