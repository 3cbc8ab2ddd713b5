"""Tests of the built-in policy (CPU only).

Three layers:

* the plan: which mappings each test function gets, in which order, and the reasons for
  refusals (from the dependence test);
* the generated source: every mapping of every test function compiles with
  ``nvcc -arch=sm_90 -shared -Xcompiler -fPIC`` (skipped when nvcc is absent), the first
  ones with ``sm_80`` too, plus structural checks and a golden matmul kernel;
* numerics without a GPU: each generated source is also compiled as C++ against a small
  CPU emulation of the CUDA features it uses (threads of a block run as OS threads with
  real barriers, warps shuffle through a shared buffer, launches run block after block)
  and its results are compared with the C function compiled by gcc.  Skipped when g++
  (C++20 ``<barrier>``) or gcc is missing.
"""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from cudaperf_cli.core import (
    ArrayParam,
    CProblem,
    ProblemError,
    ToolchainError,
    ScalarKind,
    ScalarParam,
)
from cudaperf_cli.policies.base import PolicyRefusal, Proposal
from cudaperf_cli.policies.builtin import BuiltinPolicy, Mapping
from cudaperf_cli.policies.builtin.analysis import analyze
from cudaperf_cli.policies.builtin.emulate import build_emulated, have_emulation
from cudaperf_cli.policies.builtin.mapping import BLOCKS
from cudaperf_cli.policies.builtin.dependence import Dependence
from cudaperf_cli.policies.builtin import polyhedral
from cudaperf_cli.policies.builtin.ir import For, parse_function, walk

# ---------------------------------------------------------------------------------------
# Test problems
# ---------------------------------------------------------------------------------------


def size(name: str, ctype: str = "int") -> ScalarParam:
    return ScalarParam(name, ctype, ScalarKind.SIZE)


def coef(name: str, ctype: str = "double") -> ScalarParam:
    return ScalarParam(name, ctype, ScalarKind.COEFFICIENT)


def arr(name: str, extents, ctype: str = "double", const: bool = False,
        source: str = "c99") -> ArrayParam:
    return ArrayParam(name, ctype, tuple(extents), const, source)


def problem(fn: str, params, src: str, sizes: dict[str, int]) -> CProblem:
    return CProblem(Path(f"{fn}.c"), fn, tuple(params), dict(sizes),
                    function_source=textwrap.dedent(src).strip() + "\n")


MATMUL = problem(
    "gemm",
    [size("ni"), size("nj"), size("nk"), coef("alpha"), coef("beta"), arr("C", ("ni", "nj")),
     arr("A", ("ni", "nk"), const=True), arr("B", ("nk", "nj"), const=True)],
    """
    void gemm(int ni, int nj, int nk, double alpha, double beta,
              double C[ni][nj], const double A[ni][nk], const double B[nk][nj])
    {
    #pragma scop
        for (int i = 0; i < ni; i++)
            for (int j = 0; j < nj; j++) {
                C[i][j] *= beta;
                for (int k = 0; k < nk; k++)
                    C[i][j] += alpha * A[i][k] * B[k][j];
            }
    #pragma endscop
    }
    """,
    {"ni": 37, "nj": 29, "nk": 23},
)

MATVEC_ROW = problem(
    "matvec_row",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("x", ("m",), const=True),
     arr("y", ("n",))],
    """
    void matvec_row(int n, int m, const double A[n][m], const double x[m], double y[n])
    {
        for (int i = 0; i < n; i++) {
            y[i] = 0.0;
            for (int j = 0; j < m; j++)
                y[i] += A[i][j] * x[j];
        }
    }
    """,
    {"n": 37, "m": 45},
)

MATVEC_COL = problem(  # flat pointers with annotated extents, C89 declarations
    "matvec_col",
    [size("n"), size("m"), arr("A", ("n*m",), const=True, source="annotation"),
     arr("x", ("n",), const=True, source="annotation"), arr("y", ("m",), source="annotation")],
    """
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
    """,
    {"n": 41, "m": 33},
)

JACOBI = problem(
    "jacobi_2d",
    [size("tsteps"), size("n"), arr("A", ("n", "n")), arr("B", ("n", "n"))],
    """
    void jacobi_2d(int tsteps, int n, double A[n][n], double B[n][n])
    {
        for (int t = 0; t < tsteps; t++) {
            for (int i = 1; i < n - 1; i++)
                for (int j = 1; j < n - 1; j++)
                    B[i][j] = 0.2 * (A[i][j] + A[i][j - 1] + A[i][j + 1] + A[i + 1][j] + A[i - 1][j]);
            for (int i = 1; i < n - 1; i++)
                for (int j = 1; j < n - 1; j++)
                    A[i][j] = 0.2 * (B[i][j] + B[i][j - 1] + B[i][j + 1] + B[i + 1][j] + B[i - 1][j]);
        }
    }
    """,
    {"tsteps": 4, "n": 35},
)

SUM_SQUARES = problem(
    "sum_squares",
    [size("n"), arr("x", ("n",), "float", const=True, source="annotation"),
     arr("out", ("1",), source="annotation")],
    """
    // cudaperf: x[n] out[1]
    void sum_squares(int n, const float *x, double *out)
    {
        double s = 0.0;
        for (int i = 0; i < n; i++)
            s += (double)x[i] * x[i];
        out[0] = s;
    }
    """,
    {"n": 1000},
)

TRIANGULAR = problem(
    "syrk_lower",
    [size("n"), size("m"), coef("alpha"), coef("beta"), arr("C", ("n", "n")),
     arr("A", ("n", "m"), const=True)],
    """
    void syrk_lower(int n, int m, double alpha, double beta, double C[n][n], const double A[n][m])
    {
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) {
                C[i][j] *= beta;
                for (int k = 0; k < m; k++)
                    C[i][j] += alpha * A[i][k] * A[j][k];
            }
    }
    """,
    {"n": 37, "m": 21},
)

# The row-update order of the reference BLAS: k outside j, so the j loops of the row must be
# interchanged with k and fused before i and j can both map onto the grid (transform.py).
MATMUL_KJ = problem(
    "gemm_kj",
    [size("ni"), size("nj"), size("nk"), coef("alpha"), coef("beta"), arr("C", ("ni", "nj")),
     arr("A", ("ni", "nk"), const=True), arr("B", ("nk", "nj"), const=True)],
    """
    void gemm_kj(int ni, int nj, int nk, double alpha, double beta,
                 double C[ni][nj], const double A[ni][nk], const double B[nk][nj])
    {
        int i, j, k;
        for (i = 0; i < ni; i++) {
            for (j = 0; j < nj; j++)
                C[i][j] = beta * C[i][j];
            for (k = 0; k < nk; k++) {
                double a = alpha * A[i][k];
                for (j = 0; j < nj; j++)
                    C[i][j] = C[i][j] + a * B[k][j];
            }
        }
    }
    """,
    {"ni": 37, "nj": 29, "nk": 23},
)

TRIANGULAR_KJ = problem(  # the same for a lower-triangular rank-k update (j <= i)
    "syrk_kj",
    [size("n"), size("m"), coef("alpha"), coef("beta"), arr("C", ("n", "n")),
     arr("A", ("n", "m"), const=True)],
    """
    void syrk_kj(int n, int m, double alpha, double beta, double C[n][n], const double A[n][m])
    {
        for (int i = 0; i < n; i++) {
            for (int j = 0; j <= i; j++)
                C[i][j] *= beta;
            for (int k = 0; k < m; k++)
                for (int j = 0; j <= i; j++)
                    C[i][j] += alpha * A[i][k] * A[j][k];
        }
    }
    """,
    {"n": 37, "m": 21},
)

# Two products in one nest: s = A^T r (columns) and q = A p (rows).  Loop i carries s[j];
# distribution splits the nest so that q's rows are a row reduction and s's nest can be
# interchanged (transform.distribute).
TWO_PRODUCTS = problem(
    "two_products",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("r", ("n",), const=True),
     arr("p", ("m",), const=True), arr("s", ("m",)), arr("q", ("n",))],
    """
    void two_products(int n, int m, const double A[n][m], const double r[n],
                      const double p[m], double s[m], double q[n])
    {
        for (int j = 0; j < m; j++)
            s[j] = 0;
        for (int i = 0; i < n; i++) {
            q[i] = 0;
            for (int j = 0; j < m; j++) {
                s[j] = s[j] + r[i] * A[i][j];
                q[i] = q[i] + A[i][j] * p[j];
            }
        }
    }
    """,
    {"n": 37, "m": 29},
)

# y = A^T (A x) through a row temporary: the second statement group reads t[i], which the
# first writes in the same iteration only (a loop-independent flow: distribution is legal).
NORMAL_PRODUCT = problem(
    "normal_product",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("x", ("m",), const=True),
     arr("y", ("m",)), arr("t", ("n",))],
    """
    void normal_product(int n, int m, const double A[n][m], const double x[m], double y[m],
                        double t[n])
    {
        for (int j = 0; j < m; j++)
            y[j] = 0;
        for (int i = 0; i < n; i++) {
            t[i] = 0;
            for (int j = 0; j < m; j++)
                t[i] += A[i][j] * x[j];
            for (int j = 0; j < m; j++)
                y[j] += A[i][j] * t[i];
        }
    }
    """,
    {"n": 37, "m": 29},
)

NORMS = problem(  # a row reduction, a scalar sum, a map: a source-order fallback
    "norms",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("y", ("n",)), arr("z", ("n",))],
    """
    void norms(int n, int m, const double A[n][m], double y[n], double z[n])
    {
        for (int i = 0; i < n; i++) {
            y[i] = 0;
            for (int j = 0; j < m; j++)
                y[i] += A[i][j] * A[i][j];
        }
        double s = 0;
        for (int i = 0; i < n; i++)
            s += y[i];
        for (int i = 0; i < n; i++)
            z[i] = y[i] / s;
    }
    """,
    {"n": 40, "m": 33},
)


# Found by an attack pass on the transforms and the host-loop rule (each was wrong before).
HOSTLOOP_INIT = problem(  # t lives on the host at entry, on the device inside the loop
    "hostloop_init",
    [size("n"), arr("x", ("n",)), arr("y", ("n",), const=True), arr("out", ("1",))],
    """
    void hostloop_init(int n, double x[n], const double y[n], double out[1])
    {
        double t = 0.5;
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < n; j++)
                x[j] += t;
            t = y[i];
        }
        out[0] = t;
    }
    """,
    {"n": 9},
)

INDEX_LEAVES_RANGE = problem(  # k is assigned in its loop's body: its header range is no bound
    "kmod",
    [size("n"), size("m"), size("m2"), arr("X", ("n", "m2")), arr("Y", ("n", "m"))],
    """
    void kmod(int n, int m, int m2, double X[n][m2], double Y[n][m])
    {
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < m; j++)
                X[i][j] = 2.0 * X[i][j];
            for (int j = 0; j < m; j++)
                for (int k = m; k < m2; k++) {
                    k = k - m;
                    Y[i][j] += X[i][k];
                    k = k + m;
                }
        }
    }
    """,
    {"n": 5, "m": 5, "m2": 10},
)

FLOAT_FIRST = problem(  # C converts lo to int, then steps: (int)-1.5 + 2 is 1
    "float_first",
    [size("n"), coef("lo"), arr("x", ("n",))],
    """
    void float_first(int n, double lo, double x[n])
    {
        for (int i = lo; i < n - 2; i++)
            x[i + 2] = 2 * x[i + 2] + i;
    }
    """,
    {"n": 12},
)

FLOAT_BOUND = problem(  # i < 1.25 holds for i = 0 and 1
    "float_bound",
    [size("n"), coef("lim"), arr("x", ("n",))],
    """
    void float_bound(int n, double lim, double x[n])
    {
        for (int i = 0; i < lim; i++)
            x[i] = 2 * x[i];
        for (int i = 0; i <= lim - 1.75; i++)
            x[i] = 3 * x[i];
    }
    """,
    {"n": 8},
)

UNSIGNED_COMPARE = problem(  # -1 < n - 1u is false in C: i is converted to unsigned
    "unsigned_compare",
    [size("n", "unsigned int"), arr("x", ("n",))],
    """
    void unsigned_compare(unsigned int n, double x[n])
    {
        for (int i = -1; i < n - 1; i++)
            x[i + 1] *= 2;
    }
    """,
    {"n": 9},
)


def _lo_negative(data, sizes):
    data["lo"] = -1.5


AXPY = problem(  # elementwise map, single precision
    "saxpy",
    [size("n"), coef("a", "float"), arr("x", ("n",), "float", const=True), arr("y", ("n",), "float")],
    """
    void saxpy(int n, float a, const float x[n], float y[n])
    {
        for (int i = 0; i < n; i++)
            y[i] = a * x[i] + y[i];
    }
    """,
    {"n": 1001},
)

LU = problem(
    "lu",
    [size("n"), arr("A", ("n", "n"))],
    """
    void lu(int n, double A[n][n])
    {
        int i, j, k;
        for (k = 0; k < n; k++) {
            for (i = k + 1; i < n; i++) {
                A[i][k] /= A[k][k];
                for (j = k + 1; j < n; j++)
                    A[i][j] -= A[i][k] * A[k][j];
            }
        }
    }
    """,
    {"n": 33},
)

MAGNITUDE = problem(  # examples/elementwise.c: float math, static function
    "magnitude",
    [size("n"), coef("scale", "float"), arr("u", ("n",), "float", const=True),
     arr("v", ("n",), "float", const=True), arr("out", ("n",), "float")],
    """
    static void magnitude(int n, float scale, const float u[n], const float v[n], float out[n])
    {
        for (int i = 0; i < n; i++)
            out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]) + sqrt(u[i]);
    }
    """,
    {"n": 777},
)

NORMALIZE = problem(  # a reduction whose result a later parallel loop reads
    "normalize",
    [size("n"), arr("x", ("n",))],
    """
    void normalize(int n, double *x)
    {
        double s = 0;
        if (n <= 0)
            return;
        for (int i = 0; i < n; i++)
            s += x[i] * x[i];
        s = sqrt(s);
        for (int i = n - 1; i >= 0; i--)
            x[i] /= s;
    }
    """,
    {"n": 300},
)

CHOLESKY = problem(  # one-thread statement + two kernels inside a host loop
    "cholesky",
    [size("n"), arr("A", ("n", "n"))],
    """
    void cholesky(int n, double A[n][n])
    {
        for (int k = 0; k < n; k++) {
            A[k][k] = sqrt(A[k][k]);
            for (int i = k + 1; i < n; i++)
                A[i][k] /= A[k][k];
            for (int i = k + 1; i < n; i++)
                for (int j = k + 1; j <= i; j++)
                    A[i][j] -= A[i][k] * A[j][k];
        }
    }
    """,
    {"n": 29},
)

SPMV = problem(  # CSR: inner bounds read arrays, indirect gather
    "spmv",
    [size("n"), size("nnz"), arr("rowptr", ("n + 1",), "int", const=True),
     arr("col", ("nnz",), "int", const=True), arr("val", ("nnz",), const=True),
     arr("x", ("n",), const=True), arr("y", ("n",))],
    """
    void spmv(int n, int nnz, const int *rowptr, const int *col, const double *val,
              const double *x, double *y)
    {
        for (int i = 0; i < n; i++) {
            double sum = 0.0;
            for (int k = rowptr[i]; k < rowptr[i + 1]; k++)
                sum += val[k] * x[col[k]];
            y[i] = sum;
        }
    }
    """,
    {"n": 40, "nnz": 120},
)

TRANSPOSE = problem(  # grid2d with the outer loop on x (it indexes the written row)
    "transpose",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("B", ("m", "n"))],
    """
    void transpose(int n, int m, const double A[n][m], double B[m][n])
    {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++)
                B[j][i] = A[i][j];
    }
    """,
    {"n": 37, "m": 19},
)

SCAN_THEN_SCALE = problem(  # a sequential loop (one-thread kernel) before a parallel one
    "scan_scale",
    [size("n"), arr("x", ("n",)), arr("y", ("n",))],
    """
    void scan_scale(int n, double *x, double *y)
    {
        int i;
        for (i = 1; i < n; i++)
            x[i] = x[i - 1] + x[i];
        for (i = 0; i < n; i++)
            y[i] = 2.0 * x[i];
    }
    """,
    {"n": 100},
)

DECAY = problem(  # a time loop around an elementwise update: interchanged
    "decay",
    [size("n"), size("steps"), arr("x", ("n",))],
    """
    void decay(int n, int steps, double *x)
    {
        for (int t = 0; t < steps; t++)
            for (int i = 0; i < n; i++)
                x[i] = x[i] * 0.5 + 1.0;
    }
    """,
    {"n": 300, "steps": 5},
)

FLAT_MATMUL = problem(  # annotated flat pointers: rows delinearised by the dependence test
    "flat_matmul",
    [size("n"), size("m"), size("p"), arr("C", ("n*m",), source="annotation"),
     arr("A", ("n*p",), const=True, source="annotation"),
     arr("B", ("p*m",), const=True, source="annotation")],
    """
    // cudaperf: C[n*m] A[n*p] B[p*m]
    void flat_matmul(int n, int m, int p, double *C, const double *A, const double *B)
    {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0.0;
                for (int k = 0; k < p; k++)
                    acc += A[i * p + k] * B[k * m + j];
                C[i * m + j] = acc;
            }
    }
    """,
    {"n": 23, "m": 31, "p": 17},
)

PREFIX_SUM = problem(
    "prefix_sum",
    [size("n"), arr("x", ("n",))],
    """
    void prefix_sum(int n, double *x)
    {
        for (int i = 1; i < n; i++)
            x[i] = x[i - 1] + x[i];
    }
    """,
    {"n": 10},
)

UNKNOWN_CALL = problem(
    "apply",
    [size("n"), arr("x", ("n",))],
    """
    void apply(int n, double *x)
    {
        for (int i = 0; i < n; i++)
            x[i] = transform(x[i]);
    }
    """,
    {"n": 10},
)

BREAK = problem(
    "clip",
    [size("n"), arr("x", ("n",))],
    """
    void clip(int n, double *x)
    {
        for (int i = 0; i < n; i++) {
            if (x[i] < 0.0)
                break;
            x[i] = 2.0 * x[i];
        }
    }
    """,
    {"n": 10},
)


CHAINED = problem(  # deriche's `a1 = a5 = k;`: a chain becomes `a5 = k; a1 = a5;`
    "chained",
    [size("n"), coef("alpha", "float"), arr("x", ("n",), "float"), arr("y", ("n",), "float")],
    """
    void chained(int n, float alpha, float x[n], float y[n])
    {
        float a1, a5, c;
        int i;
        a1 = a5 = alpha * 0.5f;
        c = (a1 = 2.0f);
        for (i = 0; i < n; i++) {
            float t;
            x[i] = t = a1 * x[i] + a5 + c;
            y[i] = y[i] = t * 2;
        }
    }
    """,
    {"n": 37},
)


FWD_SUBST = problem(  # the row sum reads the accumulator's own array below the diagonal
    "fwd_subst",
    [size("n"), arr("L", ("n", "n"), const=True), arr("x", ("n",)), arr("b", ("n",), const=True)],
    """
    void fwd_subst(int n, const double L[n][n], double x[n], const double b[n])
    {
        for (int r = 0; r < n; r++) {
            x[r] = b[r];
            for (int c = 0; c < r; c++)
                x[r] -= L[r][c] * x[c];
            x[r] = x[r] / L[r][r];
        }
    }
    """,
    {"n": 45},
)

LU_ROWS = problem(  # row-by-row Doolittle: a sequential column loop of sums per row
    "lu_rows",
    [size("n"), arr("A", ("n", "n"))],
    """
    void lu_rows(int n, double A[n][n])
    {
        int r, c, p;
        for (r = 0; r < n; r++) {
            for (c = 0; c < r; c++) {
                for (p = 0; p < c; p++)
                    A[r][c] -= A[r][p] * A[p][c];
                A[r][c] /= A[c][c];
            }
            for (c = r; c < n; c++)
                for (p = 0; p < r; p++)
                    A[r][c] -= A[r][p] * A[p][c];
        }
    }
    """,
    {"n": 37},
)

CHOL_ROWS = problem(  # left-looking Cholesky by rows: only sums are parallel
    "chol_rows",
    [size("n"), arr("A", ("n", "n"))],
    """
    void chol_rows(int n, double A[n][n])
    {
        for (int r = 0; r < n; r++) {
            for (int c = 0; c < r; c++) {
                for (int p = 0; p < c; p++)
                    A[r][c] -= A[r][p] * A[c][p];
                A[r][c] /= A[c][c];
            }
            for (int p = 0; p < r; p++)
                A[r][r] -= A[r][p] * A[r][p];
            A[r][r] = sqrt(A[r][r]);
        }
    }
    """,
    {"n": 31},
)

SCRATCH = problem(  # a local array at the top of the body: a static __device__ array
    "scratch",
    [size("n"), arr("y", ("n",)), arr("w", ("n",), const=True)],
    """
    void scratch(int n, double y[n], const double w[n])
    {
        double tmp[64][2];
        double y1[64];  /* math.h declares y1(): the generated name is cp_la_y1 */
        double s;
        for (int t = 1; t < n; t++) {
            s = 0.0;
            for (int i = 0; i < t; i++)
                s += w[i] * y[i];
            for (int i = 0; i < t; i++)
                tmp[i][1] = y[i] + 1e-3 * s * y[t - i - 1];
            for (int i = 0; i < t; i++)
                y1[i] = tmp[i][1];
            for (int i = 0; i < t; i++)
                y[i] = y1[i];
            y[t] = 0.5 * s;
        }
    }
    """,
    {"n": 40},
)


EDIT_DISTANCE = problem(  # a table filled by anti-diagonals: wavefront i+j
    "edit_distance",
    [size("n"), size("m"), arr("a", ("n",), "int", const=True), arr("b", ("m",), "int", const=True),
     arr("D", ("n + 1", "m + 1"), "int")],
    """
    void edit_distance(int n, int m, const int a[n], const int b[m], int D[n + 1][m + 1])
    {
        for (int i = 1; i <= n; i++)
            for (int j = 1; j <= m; j++) {
                int sub = D[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
                int del = D[i - 1][j] + 1;
                int ins = D[i][j - 1] + 1;
                int best = sub < del ? sub : del;
                D[i][j] = best < ins ? best : ins;
            }
    }
    """,
    {"n": 23, "m": 31},
)

GAUSS_SEIDEL = problem(  # in-place sweeps over time: wavefront 2t+i+j
    "gauss_seidel",
    [size("steps"), size("n"), arr("A", ("n", "n"))],
    """
    void gauss_seidel(int steps, int n, double A[n][n])
    {
        int t, i, j;
        for (t = 0; t < steps; t++)
            for (i = 1; i < n - 1; i++)
                for (j = 1; j < n - 1; j++)
                    A[i][j] = 0.25 * (A[i - 1][j] + A[i + 1][j] + A[i][j - 1] + A[i][j + 1]);
    }
    """,
    {"steps": 4, "n": 19},
)

MIN_PLUS = problem(  # all-pairs shortest paths: row and column k change during step k
    "min_plus",
    [size("n"), arr("d", ("n", "n"))],
    """
    void min_plus(int n, double d[n][n])
    {
        for (int k = 0; k < n; k++)
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    d[i][j] = fmin(d[i][j], d[i][k] + d[k][j]);
    }
    """,
    {"n": 12},
)


GESUMMV = problem(  # PolyBench's gesummv: two sums in one loop, C89 indices, `t = e + t`
    "gesummv",
    [size("n"), coef("alpha"), coef("beta"), arr("A", ("n", "n"), const=True),
     arr("B", ("n", "n"), const=True), arr("tmp", ("n",)), arr("x", ("n",), const=True),
     arr("y", ("n",))],
    """
    void gesummv(int n, double alpha, double beta, const double A[n][n], const double B[n][n],
                 double tmp[n], const double x[n], double y[n])
    {
        int i, j;
        for (i = 0; i < n; i++) {
            tmp[i] = 0.0;
            y[i] = 0.0;
            for (j = 0; j < n; j++) {
                tmp[i] = A[i][j] * x[j] + tmp[i];
                y[i] = B[i][j] * x[j] + y[i];
            }
            y[i] = alpha * tmp[i] + beta * y[i];
        }
    }
    """,
    {"n": 45},
)

THREE_SUMS = problem(  # three sums of mixed forms and types, a private scalar, u not zeroed
    "three_sums",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("B", ("n", "m"), "float", const=True),
     arr("x", ("m",), const=True), arr("s", ("n",)), arr("t", ("n",), "float"), arr("u", ("n",))],
    """
    void three_sums(int n, int m, const double A[n][m], const float B[n][m], const double x[m],
                    double s[n], float t[n], double u[n])
    {
        for (int i = 0; i < n; i++) {
            s[i] = 0.0;
            t[i] = 1.0f;
            for (int j = 0; j < m; j++) {
                double a = A[i][j] * x[j];
                s[i] += a;
                t[i] -= B[i][j];
                u[i] = u[i] + a * a - x[j];
            }
            u[i] = u[i] / (s[i] + 1.0);
        }
    }
    """,
    {"n": 37, "m": 71},
)

ROW_STATS = problem(  # two scalar sums per row (mean and mean square), an int count
    "row_stats",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("mean", ("n",)),
     arr("var", ("n",)), arr("cnt", ("n",), "int")],
    """
    void row_stats(int n, int m, const double A[n][m], double mean[n], double var[n], int cnt[n])
    {
        for (int i = 0; i < n; i++) {
            double s = 0.0, q = 0.0;
            int c = 0;
            for (int j = 0; j < m; j++) {
                s += A[i][j];
                if (A[i][j] > 1.0)
                    c += 1;
                q += A[i][j] * A[i][j];
            }
            mean[i] = s / m;
            var[i] = q / m - mean[i] * mean[i];
            cnt[i] = c;
        }
    }
    """,
    {"n": 29, "m": 40},
)

def _lu_init(data, sizes):
    data["A"] += np.eye(sizes["n"]) * sizes["n"]


def _chol_init(data, sizes):
    a = data["A"]
    data["A"][:] = a @ a.T + np.eye(sizes["n"]) * sizes["n"]


def _fwd_init(data, sizes):
    data["L"] += np.eye(sizes["n"]) * sizes["n"]


def _spmv_init(data, sizes):
    data["rowptr"][:] = np.arange(sizes["n"] + 1) * (sizes["nnz"] // sizes["n"])
    data["col"][:] = np.random.default_rng(1).integers(0, sizes["n"], sizes["nnz"])


#: name -> (problem, data fix-up or None)
BATCHED_ROWS = problem(  # doitgen's shape: a scratch row written, then read, per (a, b)
    "batched_rows",
    [size("na"), size("nb"), size("nc"), arr("X", ("na", "nb", "nc")),
     arr("W", ("nc", "nc"), const=True), arr("t", ("nc",))],
    """
    void batched_rows(int na, int nb, int nc, double X[na][nb][nc], const double W[nc][nc],
                      double t[nc])
    {
        int a, b, c, d;
        for (a = 0; a < na; a++)
            for (b = 0; b < nb; b++) {
                for (c = 0; c < nc; c++) {
                    t[c] = 0.0;
                    for (d = 0; d < nc; d++)
                        t[c] += X[a][b][d] * W[d][c];
                }
                for (c = 0; c < nc; c++)
                    X[a][b][c] = 2.0 * t[c];
            }
    }
    """,
    {"na": 5, "nb": 7, "nc": 9},
)

BATCHED_STEPS = problem(  # BATCHED_ROWS inside a time loop kept on the host
    "batched_steps",
    [size("nt"), size("na"), size("nb"), size("nc"), arr("X", ("na", "nb", "nc")),
     arr("W", ("nc", "nc"), const=True), arr("t", ("nc",))],
    """
    void batched_steps(int nt, int na, int nb, int nc, double X[na][nb][nc],
                       const double W[nc][nc], double t[nc])
    {
        for (int s = 0; s < nt; s++)
            for (int a = 0; a < na; a++)
                for (int b = 0; b < nb; b++) {
                    for (int c = 0; c < nc; c++) {
                        t[c] = 0.0;
                        for (int d = 0; d < nc; d++)
                            t[c] += X[a][b][d] * W[d][c];
                    }
                    for (int c = 0; c < nc; c++)
                        X[a][b][c] = 0.5 * t[c];
                }
    }
    """,
    {"nt": 3, "na": 4, "nb": 5, "nc": 6},
)

SCRATCH_FROM = problem(  # the scratch row starts at 1 and the nest at a = 2: offsets
    "scratch_from",
    [size("na"), size("nc"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_from(int na, int nc, double X[na][nc], double t[nc])
    {
        for (int a = 2; a < na; a++) {
            for (int c = 1; c < nc; c++)
                t[c] = X[a][c] * X[a][c - 1];
            for (int c = 1; c < nc; c++)
                X[a][c] = t[c] - X[a][0];
        }
    }
    """,
    {"na": 6, "nc": 11},
)

SCRATCH_SHARED = problem(  # a scalar shared by every statement: the nest stays one kernel
    "scratch_shared",
    [size("na"), size("nc"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_shared(int na, int nc, double X[na][nc], double t[nc])
    {
        double s;
        for (int a = 0; a < na; a++) {
            s = X[a][0];
            for (int c = 0; c < nc; c++)
                t[c] = X[a][c] * s;
            for (int c = 0; c < nc; c++)
                X[a][c] = t[c] + s;
        }
    }
    """,
    {"na": 6, "nc": 11},
)

SCRATCH_TOO_BIG = problem(  # a copy of t per (a, b): n^3 elements against n^2 of arrays
    "scratch_too_big",
    [size("n"), arr("X", ("n", "n")), arr("W", ("n", "n"), const=True), arr("t", ("n",))],
    """
    void scratch_too_big(int n, double X[n][n], const double W[n][n], double t[n])
    {
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                for (int d = 0; d < n; d++)
                    t[d] = W[a][d] * W[b][d];
                for (int d = 0; d < n; d++)
                    X[a][b] += t[d];
            }
    }
    """,
    {"n": 9},
)

# An attack pass's cases (twelfth session): each gave wrong numbers before its fix.
SCRATCH_SKIPPED = problem(  # an iteration may skip the writing loop: its copy is not the last
    "scratch_skipped",
    [size("na"), size("nc"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_skipped(int na, int nc, double X[na][nc], double t[nc])
    {
        for (int a = 0; a < na; a++) {
            if (a >= 3) continue;
            for (int c = 0; c < nc; c++)
                t[c] = X[a][c] + 1.0;
            for (int c = 0; c < nc; c++)
                X[a][c] = t[c] * 2.0;
        }
    }
    """,
    {"na": 6, "nc": 11},
)

SCRATCH_INDEX_STEP = problem(  # the writing loop's index is also stepped in its body
    "scratch_index_step",
    [size("na"), size("nc"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_index_step(int na, int nc, double X[na][nc], double t[nc])
    {
        for (int a = 0; a < na; a++) {
            for (int c = 0; c < nc; c++) {
                t[c] = X[a][c] + 1.0;
                c = c + 1;
            }
            for (int c = 0; c < nc; c++)
                X[a][c] = t[c] * 2.0;
        }
    }
    """,
    {"na": 6, "nc": 11},
)

SCRATCH_DEVICE_BOUND = problem(  # the writing loop's bound is assigned on the device
    "scratch_device_bound",
    [size("na"), size("nc"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_device_bound(int na, int nc, double X[na][nc], double t[nc])
    {
        int m = nc;
        if (X[0][0] > 100.0)
            m = nc - 4;
        for (int a = 0; a < na; a++) {
            for (int c = 0; c < m; c++)
                t[c] = X[a][c] + 1.0;
            for (int c = 0; c < m; c++)
                X[a][c] = t[c] * 2.0;
        }
    }
    """,
    {"na": 6, "nc": 11},
)

SNAPSHOT_SIZE_CHANGED = problem(  # the function changes a size its array's shape names
    "snapshot_size_changed",
    [size("n"), size("m"), arr("B", ("n", "m"))],
    """
    void snapshot_size_changed(int n, int m, double B[n][m])
    {
        n = n - 1;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++)
                B[i][j] = B[i][j] + 0.5 * B[i + 1][j];
    }
    """,
    {"n": 12, "m": 7},
)

DEVICE_MAYBE_ASSIGNED = problem(  # a scalar set on the host, then perhaps on the device
    "device_maybe_assigned",
    [size("n"), arr("x", ("n",))],
    """
    void device_maybe_assigned(int n, double x[n])
    {
        int q = n - 1;
        if (x[0] > 100.0)
            q = n - 2;
        for (int i = 0; i < q; i++)
            x[i] = x[i] * 2.0;
    }
    """,
    {"n": 12},
)


# The second attack pass's cases (twelfth session).
SCRATCH_FLOAT_BOUND = problem(  # the writing loop runs to a floating bound: 13 of 12.5
    "scratch_float_bound",
    [size("na"), size("nc"), coef("alpha"), arr("X", ("na", "2*nc")), arr("t", ("2*nc",))],
    """
    void scratch_float_bound(int na, int nc, double alpha, double X[na][2*nc], double t[2*nc])
    {
        for (int a = 0; a < na; a++) {
            for (int c = 0; c < alpha * nc; c++)
                t[c] = X[a][c] + 1.0;
            for (int c = 0; c < alpha * nc; c++)
                X[a][c] = t[c] * 2.0;
        }
    }
    """,
    {"na": 6, "nc": 10},
)

SCRATCH_UNSIGNED_CHAIN = problem(  # -1 < na compares as unsigned: C runs no iteration
    "scratch_unsigned_chain",
    [size("na", "unsigned int"), size("nc"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_unsigned_chain(unsigned int na, int nc, double X[na][nc], double t[nc])
    {
        for (int a = -1; a < na; a++) {
            for (int c = 0; c < nc; c++)
                t[c] = X[a][c] + 1.0;
            for (int c = 0; c < nc; c++)
                X[a][c] = t[c] * 2.0;
        }
    }
    """,
    {"na": 6, "nc": 11},
)

SCRATCH_LOCAL = problem(  # a local array as the scratch: a static __device__ array
    "scratch_local",
    [size("na"), size("nc"), arr("X", ("na", "nc")), arr("Y", ("na",))],
    """
    void scratch_local(int na, int nc, double X[na][nc], double Y[na])
    {
        double t[8];
        for (int a = 0; a < na; a++) {
            for (int c = 0; c < 8; c++)
                t[c] = X[a][c] + 1.0;
            for (int c = 0; c < 8; c++)
                X[a][c] = t[c] * 2.0;
        }
        for (int a = 0; a < na; a++)
            Y[a] = t[a % 8];
    }
    """,
    {"na": 12, "nc": 9},
)

ROWS_UNSIGNED = problem(  # block_per_row's threads started at first + threadIdx.x
    "rows_unsigned",
    [size("n"), size("m", "unsigned int"), arr("X", ("n", "m"))],
    """
    void rows_unsigned(int n, unsigned int m, double X[n][m])
    {
        for (int i = 0; i < n; i++)
            for (int j = -1; j < m; j++)
                X[i][j] = X[i][j] + 1.0;
    }
    """,
    {"n": 4, "m": 9},
)


def _big_first(data, sizes):
    key = "X" if "X" in data else "x"
    data[key].flat[0] = 500.0  # takes the device-side branch


SCRATCH_EXPOSED = problem(  # t read before it is written: the last row's values flow in
    "scratch_exposed",
    [size("na"), size("nc"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_exposed(int na, int nc, double X[na][nc], double t[nc])
    {
        for (int a = 0; a < na; a++) {
            for (int c = 0; c < nc; c++)
                X[a][c] += t[c];
            for (int c = 0; c < nc; c++)
                t[c] = X[a][c] * 0.5;
        }
    }
    """,
    {"na": 6, "nc": 11},
)

SCRATCH_SHORT = problem(  # written for c < m only, read for c < nc: the rest flows in
    "scratch_short",
    [size("na"), size("nc"), size("m"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_short(int na, int nc, int m, double X[na][nc], double t[nc])
    {
        for (int a = 0; a < na; a++) {
            for (int c = 0; c < m; c++)
                t[c] = X[a][c] + 1.0;
            for (int c = 0; c < nc; c++)
                X[a][c] = t[c];
        }
    }
    """,
    {"na": 6, "nc": 11, "m": 7},
)

SCRATCH_BREAK = problem(  # the writing loop may stop early: the rest flows in
    "scratch_break",
    [size("na"), size("nc"), arr("X", ("na", "nc")), arr("t", ("nc",))],
    """
    void scratch_break(int na, int nc, double X[na][nc], double t[nc])
    {
        for (int a = 0; a < na; a++) {
            for (int c = 0; c < nc; c++) {
                t[c] = X[a][c] + 1.0;
                if (X[a][c] > 3.0)
                    break;
            }
            for (int c = 0; c < nc; c++)
                X[a][c] = t[c];
        }
    }
    """,
    {"na": 6, "nc": 11},
)

TRI_UPDATE = problem(  # trmm's shape: rows below row i are read before they are updated
    "tri_update",
    [size("m"), size("n"), coef("alpha"), arr("L", ("m", "m"), const=True), arr("B", ("m", "n"))],
    """
    void tri_update(int m, int n, double alpha, const double L[m][m], double B[m][n])
    {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                for (int k = i + 1; k < m; k++)
                    B[i][j] += L[k][i] * B[k][j];
                B[i][j] = alpha * B[i][j];
            }
    }
    """,
    {"m": 13, "n": 9},
)

SHIFT_UP = problem(  # row i + 1 is read before iteration i + 1 overwrites it: anti only
    "shift_up",
    [size("n"), size("m"), arr("B", ("n", "m"))],
    """
    void shift_up(int n, int m, double B[n][m])
    {
        for (int i = 0; i < n - 1; i++)
            for (int j = 0; j < m; j++)
                B[i][j] = B[i][j] + 0.5 * B[i + 1][j];
    }
    """,
    {"n": 12, "m": 7},
)

SHIFT_DOWN = problem(  # row i - 1 is read after iteration i - 1 wrote it: a true dependence
    "shift_down",
    [size("n"), size("m"), arr("B", ("n", "m"))],
    """
    void shift_down(int n, int m, double B[n][m])
    {
        for (int i = 1; i < n; i++)
            for (int j = 0; j < m; j++)
                B[i][j] = B[i][j] + 0.5 * B[i - 1][j];
    }
    """,
    {"n": 12, "m": 7},
)


def _break_init(data, sizes):
    data["X"][1, 3] = 5.0  # row 1 stops writing t at c = 3; the others write it all


LONG_ROWS = problem(  # gesummv's shape with few, long rows: a block per row first
    "long_rows",
    [size("n"), size("m"), coef("alpha"), arr("A", ("n", "m"), const=True),
     arr("B", ("n", "m"), const=True), arr("x", ("m",), const=True), arr("t", ("n",)),
     arr("y", ("n",))],
    """
    void long_rows(int n, int m, double alpha, const double A[n][m], const double B[n][m],
                   const double x[m], double t[n], double y[n])
    {
        for (int i = 0; i < n; i++) {
            t[i] = 0.0;
            y[i] = 1.0;
            for (int j = 0; j < m; j++) {
                t[i] += A[i][j] * x[j];
                y[i] = B[i][j] * x[j] + y[i];
            }
            y[i] = alpha * t[i] + y[i];
        }
    }
    """,
    {"n": 37, "m": 700},
)

LONG_COLS = problem(  # sums down few, long columns (atax's second product, bicg's s): split
    "long_cols",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("x", ("n",), const=True),
     arr("y", ("m",)), arr("M", ("n", "m"), "int", const=True), arr("c", ("m",), "int")],
    """
    void long_cols(int n, int m, const double A[n][m], const double x[n], double y[m],
                   const int M[n][m], int c[m])
    {
        for (int j = 0; j < m; j++) {
            y[j] = 0.5;
            c[j] = 0;
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
                y[j] -= A[i][j] * x[i];
                c[j] += M[i][j];
            }
    }
    """,
    {"n": 600, "m": 45},
)

COL_POST = problem(  # a column sum whose element is used after it: not split over blocks
    "col_post",
    [size("n"), size("m"), arr("A", ("n", "m"), const=True), arr("s", ("m",)),
     arr("r", ("m",))],
    """
    void col_post(int n, int m, const double A[n][m], double s[m], double r[m])
    {
        for (int j = 0; j < m; j++) {
            s[j] = 0.0;
            for (int i = 0; i < n; i++)
                s[j] = s[j] + A[i][j];
            r[j] = s[j] * 0.5;
        }
    }
    """,
    {"n": 530, "m": 40},
)


def test_few_long_rows_get_a_block_per_row_first():
    d = descriptions(LONG_ROWS)
    assert d[0] == "block_reduce i->block j->thread block 256 (tree sums into t[i], y[i])", d
    assert d[1] == "warp_reduce i->warp j->lane block 128 (shuffle sums into t[i], y[i])", d
    assert "block_reduce i->block j->thread block 128 (tree sums into t[i], y[i])" in d


def test_few_long_columns_are_split_over_blocks():
    d = descriptions(LONG_COLS)
    assert "col_reduce j->x i->y block 32x8 (tree sums into y[j], c[j], split over blocks: " \
        "atomicAdd) (loops i, j interchanged)" in d[0], d
    assert "grid1d j->x block 256 (loops i, j interchanged); i sequential" in d[1], d
    src = POLICY.propose(LONG_COLS, 0).source
    assert "atomicAdd(&y[j], -cp_part0);" in src and "atomicAdd(&c[j], cp_part1);" in src, src
    assert "dim3(cp_gx, cp_gy), dim3(32, 8)" in src


def test_a_column_sum_used_after_it_is_not_split():
    d = descriptions(COL_POST)
    assert d[0] == "col_reduce j->x i->y block 32x8 (tree sum into s[j])", d
    src = POLICY.propose(COL_POST, 0).source
    assert "atomicAdd" not in src and "const unsigned int cp_gy = 1;" in src


def test_short_sums_keep_a_warp_or_a_thread():
    """Sums under LONG_ROW terms at the problem's sizes get no block_reduce or col_reduce
    (the small test problems elsewhere in this file keep their plans)."""
    for prob in (MATVEC_ROW, MATVEC_COL, GESUMMV, SPMV):
        assert not any("block_reduce" in x or "col_reduce" in x for x in descriptions(prob))


TRI_EMPTY_ROWS = problem(  # rows past n have no element: their A rows are never read
    "tri_empty_rows",
    [size("n"), size("m"), arr("C", ("n", "n")), arr("A", ("n", "m"), const=True)],
    """
    void tri_empty_rows(int n, int m, double C[n][n], const double A[n][m])
    {
        for (int i = 0; i < n + 40; i++)
            for (int j = i; j < n; j++)
                for (int k = 0; k < m; k++)
                    C[i][j] += A[i][k] * A[j][k];
    }
    """,
    {"n": 70, "m": 37},
)

TRI_STEEP = problem(  # a bound moving by two a row: columns of the box no row reads
    "tri_steep",
    [size("n"), size("m"), arr("C", ("n", "2 * n")), arr("A", ("2 * n", "m"), const=True)],
    """
    void tri_steep(int n, int m, double C[n][2 * n], const double A[2 * n][m])
    {
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= 2 * i; j++)
                for (int k = 0; k < m; k++)
                    C[i][j] += A[i][k] * A[j][k];
    }
    """,
    {"n": 40, "m": 20},
)


def test_triangles_are_staged_with_their_rows_checked_and_empty_tiles_skipped():
    d = descriptions(TRI_EMPTY_ROWS)
    assert d[0].startswith("grid2d i->y j->x block 16x16 tile 4x4 smem"), d
    src = POLICY.propose(TRI_EMPTY_ROWS, 0).source
    assert "if ((i) < (n))  /* a row some iteration reads */" in src, src
    assert "continue;  /* the tile lies outside the triangle */" in src
    steep = descriptions(TRI_STEEP)
    assert not any("smem" in x for x in steep), steep
    assert steep[0].startswith("grid2d i->y j->x block 16x16 tile 2x2"), steep


def test_narrow_accumulators_indices_and_too_many_sums_keep_simple_mappings():
    """An attack pass on block_reduce/col_reduce (thirteenth session): a 16-bit column sum was
    split over blocks with a 64-bit atomicAdd on its 2-byte elements (wrong numbers next to
    them); 13 column sums passed the 48 KiB of shared memory; a short index strided by a
    block wrapped past 32767 and never ended.  Now: no group sum for 8/16-bit accumulators,
    at most MAX_COL_SUMS sums a col_reduce, no striding of an index narrower than int."""
    short_cols = problem(
        "short_cols", [size("n"), size("m"), arr("M", ("n", "m"), "short", const=True),
                       arr("c", ("m",), "short")],
        """
        void short_cols(int n, int m, const short M[n][m], short c[m])
        {
            for (int j = 0; j < m; j++)
                for (int i = 0; i < n; i++)
                    c[j] += M[i][j];
        }
        """, {"n": 600, "m": 45})
    assert not any("reduce" in x or "atomicAdd" in x for x in descriptions(short_cols))
    sums = "\n".join(f"                y{k}[j] += A[i][j] * {k + 1}.0;" for k in range(13))
    many = problem(
        "many_cols", [size("n"), size("m"), arr("A", ("n", "m"), const=True)]
        + [arr(f"y{k}", ("m",)) for k in range(13)],
        "void many_cols(int n, int m, const double A[n][m], "
        + ", ".join(f"double y{k}[m]" for k in range(13)) + ")\n{\n"
        "    for (int i = 0; i < n; i++)\n        for (int j = 0; j < m; j++) {\n"
        + sums + "\n        }\n}\n", {"n": 600, "m": 45})
    d = descriptions(many)
    assert not any("col_reduce" in x for x in d) and any("warp_reduce" in x for x in d), d
    short_index = problem(
        "short_index", [size("n"), size("m"), arr("A", ("n", "m"), const=True),
                        arr("y", ("m",))],
        """
        void short_index(int n, int m, const double A[n][m], double y[m])
        {
            for (int j = 0; j < m; j++)
                for (short i = 0; i < n; i++)
                    y[j] += A[i][j];
        }
        """, {"n": 32767, "m": 2})
    d = descriptions(short_index)
    assert d and not any("reduce" in x for x in d), d


def test_a_size_assigned_in_the_function_is_refused():
    """C fixes a VLA's extents at the call; the generated code indexes A[i * m + j] with m
    as it is then (found by the same attack pass)."""
    changed = problem(
        "size_changed", [size("n"), size("m"), arr("A", ("n", "m"), const=True),
                         arr("y", ("n",))],
        """
        void size_changed(int n, int m, const double A[n][m], double y[n])
        {
            m = m - 1;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < m; j++)
                    y[i] += A[i][j];
        }
        """, {"n": 4, "m": 6})
    with pytest.raises(PolicyRefusal, match="'m' is assigned in 'size_changed' and is in the "
                                            r"extents of 'A' \(A\[n\]\[m\]\)"):
        POLICY.plan(changed)


PORTABLE = {
    "matmul": (MATMUL, None),
    "matvec_row": (MATVEC_ROW, None),
    "matvec_col": (MATVEC_COL, None),
    "jacobi": (JACOBI, None),
    "sum_squares": (SUM_SQUARES, None),
    "triangular": (TRIANGULAR, None),
    "axpy": (AXPY, None),
    "lu": (LU, _lu_init),
    "magnitude": (MAGNITUDE, None),
    "normalize": (NORMALIZE, None),
    "cholesky": (CHOLESKY, _chol_init),
    "spmv": (SPMV, _spmv_init),
    "transpose": (TRANSPOSE, None),
    "scan_scale": (SCAN_THEN_SCALE, None),
    "decay": (DECAY, None),
    "flat_matmul": (FLAT_MATMUL, None),
    "matmul_kj": (MATMUL_KJ, None),
    "triangular_kj": (TRIANGULAR_KJ, None),
    "two_products": (TWO_PRODUCTS, None),
    "normal_product": (NORMAL_PRODUCT, None),
    "norms": (NORMS, None),
    "hostloop_init": (HOSTLOOP_INIT, None),
    "index_leaves_range": (INDEX_LEAVES_RANGE, None),
    "float_first": (FLOAT_FIRST, _lo_negative),
    "float_bound": (FLOAT_BOUND, None),
    "unsigned_compare": (UNSIGNED_COMPARE, None),
    "chained": (CHAINED, None),
    "fwd_subst": (FWD_SUBST, _fwd_init),
    "lu_rows": (LU_ROWS, _lu_init),
    "chol_rows": (CHOL_ROWS, _chol_init),
    "scratch": (SCRATCH, None),
    "edit_distance": (EDIT_DISTANCE, None),
    "gauss_seidel": (GAUSS_SEIDEL, None),
    "gesummv": (GESUMMV, None),
    "three_sums": (THREE_SUMS, None),
    "row_stats": (ROW_STATS, None),
    "batched_rows": (BATCHED_ROWS, None),
    "batched_steps": (BATCHED_STEPS, None),
    "scratch_from": (SCRATCH_FROM, None),
    "scratch_shared": (SCRATCH_SHARED, None),
    "scratch_too_big": (SCRATCH_TOO_BIG, None),
    "scratch_skipped": (SCRATCH_SKIPPED, None),
    "scratch_index_step": (SCRATCH_INDEX_STEP, None),
    "scratch_device_bound": (SCRATCH_DEVICE_BOUND, _big_first),
    "scratch_device_bound_host": (SCRATCH_DEVICE_BOUND, None),
    "snapshot_size_changed": (SNAPSHOT_SIZE_CHANGED, None),
    "device_maybe_assigned": (DEVICE_MAYBE_ASSIGNED, _big_first),
    "device_maybe_assigned_host": (DEVICE_MAYBE_ASSIGNED, None),
    "scratch_float_bound": (SCRATCH_FLOAT_BOUND, None),
    "scratch_unsigned_chain": (SCRATCH_UNSIGNED_CHAIN, None),
    "scratch_local": (SCRATCH_LOCAL, None),
    "rows_unsigned": (ROWS_UNSIGNED, None),
    "scratch_exposed": (SCRATCH_EXPOSED, None),
    "scratch_short": (SCRATCH_SHORT, None),
    "scratch_break": (SCRATCH_BREAK, _break_init),
    "tri_update": (TRI_UPDATE, None),
    "long_rows": (LONG_ROWS, None),
    "long_cols": (LONG_COLS, None),
    "col_post": (COL_POST, None),
    "tri_empty_rows": (TRI_EMPTY_ROWS, None),
    "tri_steep": (TRI_STEEP, None),
    "shift_up": (SHIFT_UP, None),
    "shift_down": (SHIFT_DOWN, None),
}

POLICY = BuiltinPolicy()


def descriptions(p: CProblem) -> list[str]:
    return [m.describe() for m in POLICY.plan(p)]


# ---------------------------------------------------------------------------------------
# The plan: mappings chosen, best first
# ---------------------------------------------------------------------------------------


def test_a_scratch_row_gets_a_copy_per_iteration_and_the_nest_runs_in_parallel():
    """doitgen's shape: ``t`` is written in full before it is read in every (a, b)
    iteration, so with a copy per iteration the nest is parallel (privatize.py); its two
    statements then run as two kernels with a block per (a, b) and threads over c."""
    d = descriptions(BATCHED_ROWS)
    assert d[0] == (
        "block_per_row cp_a_b->block c->thread block 128 (loops a, b collapsed, t privatised "
        "per (a, b) iteration); d sequential | block_per_row cp_a_b->block c->thread block 128 "
        "(loops a, b collapsed, t privatised per (a, b) iteration) | distributed: loop a into 2"), d
    assert all("t privatised per (a, b) iteration" in x for x in d), d
    src = POLICY.propose(BATCHED_ROWS, 0).source
    # the copies' layout t[a][b][c]: a block's threads (c) touch neighbouring elements
    assert "cp_pv0_t[((size_t)a * (((long long)(nb) - (long long)(0))) + b) * nc + c]" in src, src
    assert "a = (int)((0) + (cp_a_b / ((long long)((nb) - (0)))));" in src, src
    assert src.count("cudaMallocAsync((void **)&cp_pv0_t") == 1
    assert src.count("cudaFreeAsync(cp_pv0_t, 0)") == 1
    assert "cudaMemcpyAsync(t + (long long)(0), cp_pv0_t + " in src
    assert "host loop" not in d[0]


def test_a_privatised_nest_inside_a_host_loop_is_split_there_too():
    d = descriptions(BATCHED_STEPS)
    assert d[0].startswith("host loop s | block_per_row cp_a_b->block c->thread block 128 "
                           "(loops a, b collapsed, t privatised per (a, b) iteration)"), d


def test_a_scratch_row_whose_nest_cannot_split_is_laid_out_for_its_threads():
    """One group of statements (a scalar shared by all): one kernel, threads over the
    chain's index, so the copies are ``t[c][a]`` and the last one is copied back by rows."""
    d = descriptions(SCRATCH_SHARED)
    assert d[0].startswith("grid1d a->x block 256 (t privatised per (a) iteration)"), d
    src = POLICY.propose(SCRATCH_SHARED, 0).source
    assert "cp_pv1_t[(size_t)c * (((long long)(na) - (long long)(0))) + a]" in src, src
    assert "cudaMemcpy2DAsync(t + (long long)(0), sizeof(double), cp_pv1_t + " in src, src


def test_a_scratch_row_starting_past_zero_is_offset_in_its_copy():
    d = descriptions(SCRATCH_FROM)
    assert d[0].startswith("grid2d a->y c->x block 32x8 (t privatised per (a) iteration) |"), d
    src = POLICY.propose(SCRATCH_FROM, 0).source
    assert "(a - (2))" in src, src


def test_a_scratch_whose_copies_outweigh_the_arrays_is_not_privatised():
    """n copies of an n-element row for an n x n chain: more device memory than the
    function's arrays, which the evaluation's memory plan is made from; inside the host
    loop a, a copy per b (n^2 elements) fits."""
    d = descriptions(SCRATCH_TOO_BIG)
    assert d and not any("per (a, b)" in x for x in d), d
    assert d[0].startswith("host loop a | grid2d b->y d->x block 32x8 (t privatised per (b) "
                           "iteration)"), d


@pytest.mark.parametrize("prob", [SCRATCH_EXPOSED, SCRATCH_SHORT, SCRATCH_BREAK, SCRATCH_SKIPPED,
                                  SCRATCH_INDEX_STEP, SCRATCH_DEVICE_BOUND, SCRATCH_FLOAT_BOUND,
                                  SCRATCH_UNSIGNED_CHAIN, SCRATCH_LOCAL],
                         ids=["read_first", "written_in_part", "break", "skipped", "index_step",
                              "device_bound", "float_bound", "unsigned_chain", "local_array"])
def test_a_scratch_whose_old_values_can_be_read_is_not_privatised(prob):
    """Values of ``t`` from an earlier iteration reach a read (read before the write, a read
    past the written range, a write loop that may stop early): no copy per iteration."""
    assert not any("privatised" in x for x in descriptions(prob)), descriptions(prob)


def test_reads_of_values_a_later_iteration_overwrites_come_from_a_copy():
    """trmm's shape: row ``k > i`` of B is read before iteration ``k`` updates it (an anti
    dependence only): those reads use a copy taken before the nest, and both i and j run
    in parallel (privatize.snapshot)."""
    d = descriptions(TRI_UPDATE)
    assert d[0] == "grid2d i->y j->x block 32x8 (B's earlier values read from a copy); k sequential", d
    src = POLICY.propose(TRI_UPDATE, 0).source
    assert "cudaMemcpyAsync(cp_ss0_B, B, (size_t)cp_ss0_B_n * sizeof(double)" in src, src
    assert "const double *__restrict__ cp_ss0_B" in src
    # the own element stays in B; the rows below come from the copy
    assert "cp_ss0_B[(size_t)k * n + j]" in src and "B[(size_t)i * n + j] +=" in src, src
    assert descriptions(SHIFT_UP)[0].startswith("grid2d i->y j->x block 32x8 (B's earlier"), \
        descriptions(SHIFT_UP)


def test_a_return_under_a_device_condition_is_refused():
    """In a one-thread kernel, 'return' would end that kernel only: the launches after it
    would still run (an attack pass's wrong numbers)."""
    p = problem("ret_dev", [size("n"), arr("x", ("n",))],
                """
                void ret_dev(int n, double x[n])
                {
                    double s = 0.0;
                    for (int i = 0; i < n; i++)
                        s += x[i] * x[i];
                    if (s > 1.0) return;
                    for (int i = 0; i < n; i++)
                        x[i] = x[i] * 2.0;
                }
                """, {"n": 10})
    with pytest.raises(PolicyRefusal, match="'return' under a condition computed on the device"):
        POLICY.plan(p)


def test_threads_do_not_stride_a_signed_index_against_an_unsigned_bound():
    assert not any(d.startswith("block_per_row") for d in descriptions(ROWS_UNSIGNED))


def test_no_copy_of_an_array_whose_shape_names_a_size_the_function_changes():
    """The copy is sized on the host at the launch: with ``n`` changed by then it would be
    one row short."""
    assert not any("copy" in x for x in descriptions(SNAPSHOT_SIZE_CHANGED))


def test_reads_of_values_an_earlier_iteration_wrote_do_not_come_from_a_copy():
    assert not any("copy" in x for x in descriptions(SHIFT_DOWN)), descriptions(SHIFT_DOWN)


def test_matmul_plan():
    plan = POLICY.plan(MATMUL)
    # the tiled product first (tiling.py: 4x4 outputs per thread, operands staged in shared
    # memory), then one output per thread
    assert plan[0].describe() == "grid2d i->y j->x block 16x16 tile 4x4 smem; k sequential"
    assert [m.kind for m in plan[1:4]] == ["grid2d", "block_per_row", "grid1d"]
    assert plan[1].describe() == "grid2d i->y j->x block 32x8; k sequential"
    # the other tiles lead the variants, then the block shapes
    assert descriptions(MATMUL)[4:8] == [
        "grid2d i->y j->x block 16x16 tile 2x2 smem; k sequential",
        "grid2d i->y j->x block 16x16 tile 2x2; k sequential",
        "grid2d i->y j->x block 16x16 tile 4x4; k sequential",
        "grid2d i->y j->x block 32x8 tile 4x4; k sequential"]
    assert [m.block for m in plan[8:11]] == [(32, 4), (16, 16), (64, 4)]
    assert not any(m.nests[0].tile for m in plan[8:])
    assert descriptions(MATMUL)[11:] == [
        "block_per_row i->block j->thread block 256; k sequential",
        "grid1d i->x block 128; j, k sequential",
        "grid1d i->x block 512; j, k sequential",
    ]


def test_matvec_row_prefers_warp_reduce():
    assert descriptions(MATVEC_ROW) == [
        "warp_reduce i->warp j->lane block 128 (shuffle sum into y[i])",
        "grid1d i->x block 256; j sequential",
        "warp_reduce i->warp j->lane block 256 (shuffle sum into y[i])",
        "grid1d i->x block 128; j sequential",
        "grid1d i->x block 512; j sequential",
    ]



def test_several_sums_in_one_loop_share_a_warp():
    """gesummv: two independent sums per row become one warp_reduce with two partial sums
    a lane (not grid1d's one thread a row, whose rows are read with a stride); lane 0 adds
    each warp sum to its target in source order, then runs the rest of the row."""
    assert descriptions(GESUMMV) == [
        "warp_reduce i->warp j->lane block 128 (shuffle sums into tmp[i], y[i])",
        "grid1d i->x block 256; j sequential",
        "warp_reduce i->warp j->lane block 256 (shuffle sums into tmp[i], y[i])",
        "grid1d i->x block 128; j sequential",
        "grid1d i->x block 512; j sequential",
    ]
    m = POLICY.plan(GESUMMV)[0]
    assert m.nests[0].sums == 2 and m.to_json()["nests"][0]["sums"] == 2
    assert m.to_json()["nests"][0]["accumulator"] == "tmp[i], y[i]"
    src = POLICY.source(GESUMMV, m)
    assert "loop j (line 8): sum reductions into tmp[i], y[i]; not parallel" in src
    k = kernel_text(src, "gesummv_k0_warp_reduce")
    body = k[k.index("double cp_part0 = 0;"):]
    assert body.startswith(
        "double cp_part0 = 0;  /* this lane's share of the updates to tmp[i] */\n"
        "        double cp_part1 = 0;  /* this lane's share of the updates to y[i] */\n"
        "        for (j = cp_lane; j < n; j += 32) {\n"
        "            cp_part0 = A[(size_t)i * n + j] * x[j] + cp_part0;\n"
        "            cp_part1 = B[(size_t)i * n + j] * x[j] + cp_part1;\n"
        "        }\n"
        "        for (int cp_off = 16; cp_off > 0; cp_off >>= 1) {\n"
        "            cp_part0 += __shfl_down_sync(0xffffffffu, cp_part0, cp_off);\n"
        "            cp_part1 += __shfl_down_sync(0xffffffffu, cp_part1, cp_off);\n"
        "        }\n"
        "        if (cp_lane == 0) {\n"
        "            tmp[i] = tmp[i] + cp_part0;\n"
        "            y[i] = y[i] + cp_part1;\n"
        "            y[i] = alpha * tmp[i] + beta * y[i];\n"
        "        }\n"), body
    # the zeroing stores come first, from lane 0, before the warp's reads
    assert k.index("tmp[i] = 0.0;") < k.index("__syncwarp();") < k.index("cp_part0 = 0;")
    # a single sum keeps its one partial sum, named as before
    assert "cp_part0" not in POLICY.propose(MATVEC_ROW, 0).source
    # three sums of three forms (+=, -=, u = u + e - f) and two types, a private scalar
    assert descriptions(THREE_SUMS)[0] == (
        "warp_reduce i->warp j->lane block 128 (shuffle sums into s[i], t[i], u[i])")
    k = kernel_text(POLICY.propose(THREE_SUMS, 0).source, "three_sums_k0_warp_reduce")
    for line in ("float cp_part1 = 0;", "double a = A[(size_t)i * m + j] * x[j];",
                 "cp_part0 += a;", "cp_part1 += B[(size_t)i * m + j];",
                 "cp_part2 = cp_part2 + a * a - x[j];",
                 "s[i] += cp_part0;\n            t[i] -= cp_part1;\n            u[i] = u[i] + cp_part2;\n"
                 "            u[i] = u[i] / (s[i] + 1.0);"):
        assert line in k, line
    # scalar accumulators and an integer count under an if
    assert descriptions(ROW_STATS)[0] == (
        "warp_reduce i->warp j->lane block 128 (shuffle sums into s, c, q)")


def test_several_sums_keep_the_single_sums_rules():
    """Each accumulator passes every check of a single sum, and no term reads another sum:
    otherwise no warp_reduce (each thread then runs the row's sums in order)."""
    head = ("void f(int n, const double A[n][n], const double x[n], double tmp[n], double y[n])\n"
            "{\n    for (int i = 0; i < n; i++) {\n        tmp[i] = 0.0; y[i] = 0.0;\n"
            "        for (int j = 0; j < n; j++) {\n")
    params = [size("n"), arr("A", ("n", "n"), const=True), arr("x", ("n",), const=True),
              arr("tmp", ("n",)), arr("y", ("n",))]

    def verdict(inner: str) -> tuple[list, str, list[tuple[str, int]]]:
        p = problem("f", params, head + inner + "\n        }\n    }\n}\n", {"n": 9})
        _, dep, L = loops_of(p)
        reds, why = dep.reductions(L["j"])
        try:
            kinds = [(n.kind, n.sums) for m in POLICY.plan(p) for n in m.nests]
        except PolicyRefusal:
            kinds = []
        return reds, why, kinds

    reds, why, kinds = verdict("tmp[i] += A[i][j] * x[j]; y[i] += A[i][j] * x[j];")
    assert [r.acc_text for r in reds] == ["tmp[i]", "y[i]"] and why == ""
    assert [r.form for r in reds] == ["+=", "+="] and ("warp_reduce", 2) in kinds
    # (inner body, reason, loop i stays parallel: then no warp_reduce at all)
    cases = [
        # a sum that reads another target (its value changes during the loop)
        ("tmp[i] += A[i][j] * x[j]; y[i] += tmp[i] * x[j];", "tmp[i] is read in the loop", True),
        ("y[i] += tmp[i] * x[j]; tmp[i] += A[i][j] * x[j];", "tmp[i] is read in the loop", True),
        # another element of a target's array: may be the target's own element
        ("tmp[i] += A[i][j] * x[j]; y[i] += tmp[j];", "tmp[i] is read in the loop", False),
        # a target indexed by j is no accumulator
        ("tmp[i] += A[i][j] * x[j]; y[j] += A[i][j];",
         "the subscripts of y[j] change in the loop", False),
        # a product is no sum: one sum and another write
        ("tmp[i] += A[i][j] * x[j]; y[i] *= A[i][j];", "one accumulator (a single reduction)", True),
        ("tmp[i] += A[i][j]; y[i] += x[j]; y[i] *= 2.0;",
         "y[i] is assigned other than by accumulation", True),
        ("tmp[i] += A[i][j]; y[i] = y[i] * x[j] + 1.0;", "one accumulator (a single reduction)", True),
        # two elements of one array may be one element
        ("tmp[i] += A[i][j]; tmp[0] += x[j];", "accumulate into the same array tmp", False),
        ("tmp[i] += A[i][j]; y[i] += x[j]; x[j] = 0.0;", "x[j] is written in the loop", False),
    ]
    for inner, expect, i_parallel in cases:
        reds, why, kinds = verdict(inner)
        assert reds == [] and expect in why, (inner, why)
        assert kinds and not any(n > 1 for _, n in kinds), (inner, kinds)
        if i_parallel:
            assert all(k != "warp_reduce" for k, _ in kinds), (inner, kinds)
    # an integer sum of floating-point terms stays refused, as for one sum
    p = problem("g", [size("n"), arr("A", ("n", "n"), const=True), arr("c", ("n",), "int"),
                      arr("y", ("n",))],
                """
                void g(int n, const double A[n][n], int c[n], double y[n])
                {
                    for (int i = 0; i < n; i++)
                        for (int j = 0; j < n; j++) {
                            y[i] += A[i][j];
                            c[i] += A[i][j] * 2.0;
                        }
                }
                """, {"n": 9})
    _, dep, L = loops_of(p)
    reds, why = dep.reductions(L["j"])
    assert reds == [] and "c[i] is an integer summing floating-point terms" in why
    assert not any(n.kind == "warp_reduce" for m in POLICY.plan(p) for n in m.nests)
    # the source-order analysis keeps floating-point sums in one thread, several as one
    assert not any(o.kind == "warp_reduce" for s in analyze(GESUMMV, source_order=True).sites
                   for o in s.options)
    assert any(o.kind == "warp_reduce" for s in analyze(ROW_STATS).sites for o in s.options)

def test_matvec_col_interchanges_the_nest():
    plan = POLICY.plan(MATVEC_COL)
    first = plan[0]
    assert len(first.nests) == 2  # the zeroing loop, then the interchanged nest
    assert first.nests[0].describe() == "grid1d j->x block 256"
    nest = first.nests[1]
    assert nest.kind == "grid1d" and nest.interchanged == ("i", "j")
    assert nest.describe() == "grid1d j->x block 256 (loops i, j interchanged); i sequential"
    assert first.host_loops == ()
    an = analyze(MATVEC_COL)
    assert "loop i: y[j] is written in every iteration (loop-carried dependence)" in an.reasons
    # warp_reduce over the (column-strided) i loop is offered, but after grid1d
    assert any(m.nests[1].kind == "warp_reduce" for m in plan[1:])


def test_jacobi_time_loop_stays_on_host():
    plan = POLICY.plan(JACOBI)
    first = plan[0]
    assert first.host_loops == ("t",)
    assert [n.kind for n in first.nests] == ["grid2d", "grid2d"]
    assert all(n.host_loops == ("t",) for n in first.nests)
    assert first.describe() == (
        "host loop t | grid2d i->y j->x block 32x8 | grid2d i->y j->x block 32x8"
    )
    src = POLICY.propose(JACOBI, 0).source
    host = src[src.index('extern "C"'):]
    assert "for (int t = 0; t < tsteps; t++) {" in host
    assert host.index("jacobi_2d_k0_grid2d<<<") < host.index("jacobi_2d_k1_grid2d<<<")
    # the host passes nothing it does not have: t is not needed by the kernels
    assert "jacobi_2d_k0_grid2d<<<cp_grid, cp_block>>>(n, A, B);" in host


def test_sum_reduction_into_annotated_pointer():
    plan = POLICY.plan(SUM_SQUARES)
    assert [m.kind for m in plan] == ["grid_reduce", "grid_reduce"]
    assert plan[0].nests[0].accumulator == "s"
    src = POLICY.propose(SUM_SQUARES, 0).source
    assert "static __device__ double cp_red0;" in src
    assert "atomicAdd(&cp_red0, cp_part);" in src
    assert "__shfl_down_sync(0xffffffffu, cp_part, cp_off)" in src
    # the reset kernel, then the reduction, then the one-thread epilogue, in order
    host = src[src.index('extern "C"'):]
    order = [host.index(k) for k in ("_reset<<<1, 1>>>", "_grid_reduce<<<", "_serial0<<<1, 1>>>")]
    assert order == sorted(order)
    epilogue = src[src.index("sum_squares_serial0("):]
    assert "s += cp_red0;" in epilogue and "out[0] = s;" in epilogue
    # the accumulation is copied as written: (double)x[i] * x[i]
    assert "cp_part += (double)x[i] * x[i];" in src


def test_triangular_nest_maps_its_bounding_box():
    """j <= i: grid2d covers the box of the triangle (j's least and greatest values over
    i's range, computed from i's first and last values) and each thread skips an element
    outside it; the register-tiled form runs a tile's k loop unguarded when its corners lie
    in the triangle.  block_per_row (each block walks its row's own range) stays in the plan."""
    plan = POLICY.plan(TRIANGULAR)
    assert [m.describe() for m in plan[:4]] == [
        "grid2d i->y j->x block 16x16 tile 4x4 smem; k sequential",  # staged: rows checked
        "grid2d i->y j->x block 32x8; k sequential",
        "block_per_row i->block j->thread block 128; k sequential",
        "grid1d i->x block 256; j, k sequential",
    ]
    k = kernel_text(POLICY.propose(TRIANGULAR, 1).source, "syrk_lower_k0_grid2d")
    assert "const long long cp_trip_x = cp_q_hi - cp_q_lo + 1;  /* loop j */" in k
    assert "const int j = (int)(cp_q_lo + cp_tx);" in k
    assert "if (!(j >= (0) && j <= (i))) continue;  /* outside the triangle */" in k
    reg = next(m for m in plan if m.describe().startswith("grid2d i->y j->x block 16x16 tile 2x2;"))
    tiled = kernel_text(POLICY.source(TRIANGULAR, reg), "syrk_lower_k0_grid2d")
    assert "auto cp_in = [&](long long cp_ty, long long cp_tx) -> bool {" in tiled
    assert tiled.count("&& cp_in(") == 4 + 3  # four corners; PRE, k loop and POST guarded
    src = POLICY.propose(TRIANGULAR, 2).source
    assert "for (int j = (int)threadIdx.x; j <= i; j += (int)blockDim.x) {" in src


def test_triangle_that_starts_past_the_diagonal():
    """j from i + 1 (correlation's shape): the box starts at j = first + 1; a bound on an
    unsigned size keeps the rectangle-only mapping (the box is computed in long long)."""
    p = problem("upper", [size("n"), arr("C", ("n", "n")), arr("A", ("n", "n"), const=True)],
                """
                void upper(int n, double C[n][n], const double A[n][n])
                {
                    for (int i = 0; i < n; i++)
                        for (int j = i + 1; j < n; j++)
                            C[i][j] = A[i][j] + A[j][i];
                }
                """, {"n": 19})
    k = kernel_text(POLICY.propose(p, 0).source, "upper_k0_grid2d")
    assert "(long long)(cp_p_first + 1) < (long long)(cp_p_last + 1)" in k
    assert "if (!(j >= (i + 1) && j < (n))) continue;" in k
    u = problem("upper_u", [size("n", "unsigned"), arr("C", ("n", "n"))],
                """
                void upper_u(unsigned n, double C[n][n])
                {
                    for (int i = 0; i < n; i++)
                        for (int j = i + 1; j < n; j++)
                            C[i][j] = 1.0;
                }
                """, {"n": 19})
    assert not any(n.kind == "grid2d" for m in POLICY.plan(u) for n in m.nests)


def test_elementwise_map():
    assert descriptions(AXPY) == [
        "grid1d i->x block 256",
        "grid1d i->x block 128",
        "grid1d i->x block 512",
    ]


def test_only_sums_inside_a_sequential_loop_make_a_one_block_kernel():
    """Forward substitution: the row loop is sequential and its only parallel work is a
    sum that reads the accumulator's own array below the diagonal (x[c], c < r, never
    x[r]): one block runs the loop and adds each sum across its threads, instead of a
    launch per row; the source-order fallback keeps every sum in one thread."""
    assert descriptions(FWD_SUBST)[:2] == [
        "1-block kernel: loop r (line 3)",
        "sums in source order: 1-thread kernel: loop r (line 3)",
    ]
    src = POLICY.propose(FWD_SUBST, 0).source
    assert "fwd_subst_serial0<<<1, 256>>>" in src
    assert "__shfl_down_sync" in src and "if (threadIdx.x == 0) {" in src
    assert "__syncthreads();\n    __syncthreads();" not in src  # no barrier twice in a row
    # a row-by-row LU keeps its row loop on the host: the columns right of the diagonal
    # are parallel; the sequential column loop left of it becomes one block
    assert descriptions(LU_ROWS)[0] == ("host loop r | grid1d c->x block 256; p sequential | "
                                        "1-block kernel: loop c (line 5)")
    assert descriptions(CHOL_ROWS)[0] == "1-block kernel: loop r (line 3)"


def test_a_sum_whose_accumulator_array_is_read_elsewhere_needs_a_proof():
    """x[c] with c < r is never x[r]; x[c] with c <= r may be: no reduction then."""
    _, dep, L = loops_of(FWD_SUBST)
    red, why = dep.reduction(L["c"])
    assert red is not None and red.acc_text == "x[r]", why
    p = problem("f", [size("n"), arr("L", ("n", "n"), const=True), arr("x", ("n",))],
                """
                void f(int n, const double L[n][n], double x[n])
                {
                    for (int r = 0; r < n; r++)
                        for (int c = 0; c <= r; c++)
                            x[r] -= L[r][c] * x[c];
                }
                """, {"n": 8})
    _, dep, L = loops_of(p)
    red, why = dep.reduction(L["c"])
    assert red is None and "reads the accumulator" in why


def test_wavefronts_run_hyperplanes_in_parallel():
    """No loop of these nests is parallel; isl proves the points of one hyperplane
    independent and each dependence running from an earlier hyperplane to a later one."""
    assert descriptions(EDIT_DISTANCE)[0] == "host loop w=i+j | grid1d i->x block 256 (wavefront i+j)"
    assert descriptions(GAUSS_SEIDEL)[0] == ("host loop w=2t+i+j | grid2d t->y i->x block 32x8 "
                                             "(wavefront 2t+i+j)")
    src = POLICY.propose(EDIT_DISTANCE, 0).source
    # the wave range is exact: i + j runs from 2 to n + m
    assert "for (long long cp_w0 = (2LL); cp_w0 <= ((long long)m + (long long)n); cp_w0++)" in src, src
    # floyd-warshall's shape: inside the host loop k a wavefront would cost a launch per
    # hyperplane and step; no 3-D hyperplane is legal: refused
    with pytest.raises(PolicyRefusal, match="no loop of 'min_plus' can run in parallel"):
        POLICY.plan(MIN_PLUS)


def test_wavefront_legality_is_exact():
    """h = i + j is legal for the edit distance's table; h = i - j runs a dependence
    (D[i-1][j] -> D[i][j]) backwards; h = j alone puts two dependent points on one
    hyperplane."""
    from cudaperf_cli.policies.builtin.wavefront import _legal, perfect_nest_of

    fn, _, L = loops_of(EDIT_DISTANCE)
    nest = perfect_nest_of(L["i"])
    assert _legal(nest, (1, 1))
    assert not _legal(nest, (1, -1))
    assert not _legal(nest, (0, 1))


def test_a_sequential_loop_around_short_1d_loops_gets_a_one_block_entry():
    """durbin's shape: a time loop around a sum and two 1-D loops is a host loop with four
    launches an iteration; the plan's second entry runs the whole loop in one block."""
    plan = POLICY.plan(SCRATCH)
    assert plan[0].describe().startswith("host loop t | grid_reduce i->grid")
    assert plan[1].describe() == "1-block kernel: loop t (line 6)"
    assert plan[1].one_block_loops and plan[1].to_json()["one_block_loops"]
    src = POLICY.source(SCRATCH, plan[1])
    assert "scratch_serial0<<<1, 256>>>" in src and "<<<1, 1>>>" not in src
    # a 2-D loop inside (jacobi-2d's sweeps) keeps its launches: no such entry
    assert not any(m.one_block_loops for m in POLICY.plan(JACOBI))


def _refused(src: str, params, sizes) -> str:
    with pytest.raises(PolicyRefusal) as e:
        POLICY.plan(problem("f", params, src, sizes))
    return str(e.value)


def test_wavefronts_need_plain_signed_integer_bounds():
    """A double bound compares as a double (j < 7.5 runs j = 7), an unsigned one wraps:
    the wavefront's guards and isl's integer model would run other iterations."""
    body = """
        for (int i = 1; i < n; i++)
            for (int j = 1; j < lim; j++)
                A[i][j] = (A[i - 1][j] + 2 * A[i][j - 1] + 1) % 1000;
    }"""
    params = [size("n"), coef("lim"), arr("A", ("n", "n"), "int")]
    msg = _refused("void f(int n, double lim, int A[n][n]) {" + body, params, {"n": 9})
    assert "no loop of 'f' can run in parallel" in msg
    params = [size("n", "unsigned int"), coef("lim", "int"), arr("A", ("n", "n"), "int")]
    msg = _refused("void f(unsigned int n, int lim, int A[n][n]) {"
                   + body.replace("j < lim", "j < n"), params, {"n": 9})
    assert "no loop of 'f' can run in parallel" in msg


def test_sums_the_proofs_do_not_cover_stay_sequential():
    """An integer accumulator of floating-point terms (C truncates after every addition),
    a bound that reads the accumulator's array, a subscript through a cast of a double:
    no reduction."""
    fn, dep, L = loops_of(problem(
        "f", [size("n"), arr("x", ("n",)), arr("o", ("1",), "int"), coef("lim")],
        """
        void f(int n, double x[n], int o[1], double lim)
        {
            int s = 100;
            for (int i = 0; i < n; i++) s += x[i] - 1.0;
            o[0] = s;
            for (int j = 0; j < lim; j++) x[(int)lim] += x[j];
            for (int k = 0; k < x[2]; k++) x[2] -= 0.5;
        }
        """, {"n": 9}))
    red, why = dep.reduction(L["i"])
    assert red is None and "integer summing floating-point terms" in why
    red, why = dep.reduction(L["j"])
    assert red is None and "reads the accumulator" in why
    red, why = dep.reduction(L["k"])
    assert red is None and "its bound reads x" in why


def test_threads_never_stride_an_unsigned_index_down():
    """``for (unsigned j = i; j > 0; j--)`` started at ``i - threadIdx.x`` wraps past 0:
    no block_per_row, warp_reduce or one-block striding of such a loop."""
    p = problem("f", [size("n"), arr("A", ("n", "n")), arr("y", ("n",))],
                """
                void f(int n, double A[n][n], double y[n])
                {
                    for (int i = 0; i < n; i++)
                        for (unsigned j = i; j > 0; j--)
                            y[i] += A[i][j - 1];
                }
                """, {"n": 9})
    kinds = {nm.kind for m in POLICY.plan(p) for nm in m.nests}
    assert kinds == {"grid1d"}


def test_a_host_loop_needs_a_bound_its_body_leaves_alone():
    """``m`` changes in the body (on the device): the host would test a stale copy."""
    p = problem("f", [size("n"), arr("x", ("n",), "int"), arr("y", ("n",), "int")],
                """
                void f(int n, int x[n], int y[n])
                {
                    int m = n;
                    for (int i = 0; i < m; i++) {
                        m = x[i] % 3 + n - 4;
                        for (int j = 0; j < n; j++)
                            y[j] += i;
                    }
                }
                """, {"n": 9})
    assert not any(m.host_loops for m in POLICY.plan(p))


def test_local_array_lives_in_device_memory():
    src = POLICY.propose(SCRATCH, 0).source
    assert "static __device__ double cp_la_tmp[128];" in src
    assert "cp_la_tmp[(size_t)i * 2 + 1]" in src, src


def test_lu_k_loop_on_host_and_pivot_row_read_is_not_a_dependence():
    plan = POLICY.plan(LU)
    assert plan[0].describe() == "host loop k | block_per_row i->block j->thread block 128"
    assert plan[1].describe() == "host loop k | grid1d i->x block 256; j sequential"
    src = POLICY.propose(LU, 0).source
    host = src[src.index('extern "C"'):]
    assert "int k;" in host and "for (k = 0; k < n; k++) {" in host
    assert "lu_k0_block_per_row<<<cp_blocks(cp_trip, 1, 1048576), 128>>>(n, A, k);" in host
    kernel = src[src.index("lu_k0_block_per_row("):]
    # the statement before the inner loop runs on thread 0, then a barrier
    assert "if (threadIdx.x == 0) {\n            A[(size_t)i * n + k] /= A[(size_t)k * n + k];" in kernel
    assert "const int i = (int)(k + 1 + cp_b);" in kernel


def test_cholesky_mixes_one_thread_kernel_and_parallel_kernels():
    plan = POLICY.plan(CHOLESKY)
    assert plan[0].host_loops == ("k",)
    # the trailing update's triangle (k < j <= i) maps as grid2d over its bounding box
    assert [n.kind for n in plan[0].nests] == ["grid1d", "grid2d"]
    assert plan[0].serial == ("A[k][k] = sqrt(A[k][k])",)


def test_spmv_warp_reduce_and_grid1d():
    kinds = [m.kind for m in POLICY.plan(SPMV)]
    assert kinds[:2] == ["warp_reduce", "grid1d"]
    src = POLICY.propose(SPMV, 0).source
    assert "for (int k = rowptr[i] + cp_lane; k < rowptr[i + 1]; k += 32) {" in src
    assert "if (cp_lane == 0) {\n            sum += cp_part;\n            y[i] = sum;" in src


def test_normalize_device_scalar_and_early_return():
    plan = POLICY.plan(NORMALIZE)
    assert [n.kind for n in plan[0].nests] == ["grid_reduce", "grid1d"]
    src = POLICY.propose(NORMALIZE, 0).source
    assert "static __device__ double cp_dev_s;" in src
    assert "const double s = cp_dev_s;" in src  # the last kernel reads s on the device
    assert "if (n <= 0) {\n        return (int)cudaGetLastError();" in src
    assert "const int i = (int)(n - 1 - cp_t);" in src  # a downward loop


def test_transpose_puts_the_written_rows_index_on_x():
    assert descriptions(TRANSPOSE)[0] == "grid2d j->y i->x block 32x8"


def test_sequential_loop_runs_in_a_one_thread_kernel():
    plan = POLICY.plan(SCAN_THEN_SCALE)
    assert plan[0].describe() == "grid1d i->x block 256 | 1-thread kernel: loop i (line 4)"
    src = POLICY.propose(SCAN_THEN_SCALE, 0).source
    host = src[src.index('extern "C"'):]
    assert host.index("scan_scale_serial0<<<1, 1>>>(n, x);") < host.index("scan_scale_k0_grid1d<<<")
    assert "int i;" not in host  # i lives only on the device


def test_time_loop_around_elementwise_update_is_interchanged():
    assert descriptions(DECAY)[0] == "grid1d i->x block 256 (loops t, i interchanged); t sequential"


# ---------------------------------------------------------------------------------------
# Refusals and reasons
# ---------------------------------------------------------------------------------------


def test_prefix_sum_is_refused_with_reason():
    with pytest.raises(PolicyRefusal) as e:
        POLICY.plan(PREFIX_SUM)
    assert "loop i: x[i] is written and x[i - 1] is read by other iterations (loop-carried dependence)" in str(e.value)
    assert isinstance(e.value, ProblemError)


def test_unknown_function_is_refused_with_reason():
    with pytest.raises(PolicyRefusal) as e:
        POLICY.propose(UNKNOWN_CALL, 0)
    msg = str(e.value)
    assert "calls transform()" in msg
    assert "loop i: calls transform(), which may have side effects" in msg


def test_break_is_refused_with_reason():
    with pytest.raises(PolicyRefusal) as e:
        POLICY.plan(BREAK)
    assert "loop i: contains 'break' (line 5)" in str(e.value)


@pytest.mark.parametrize(
    "body, reason",
    [
        ("for (int i = 0; i < n; i += 2) x[i] = 0;", "step 'i += 2' is not a unit step"),
        ("int i = 0; while (i < n) { x[i] = 0; i++; }", "'while' loops are not supported"),
        ("for (int i = 0; i < n; i++) { double t[4]; t[0] = 1; x[i] = t[0]; }",
         "local arrays are supported at the top of the function body only"),
        ("double t[n]; for (int i = 0; i < n; i++) x[i] = 0;", "must be a positive integer constant"),
        ("double t[4] = {0}; for (int i = 0; i < n; i++) x[i] = t[0];", "initialised local arrays"),
        ("double *p; for (int i = 0; i < n; i++) x[i] = 0;", "local arrays and pointers are not supported"),
        # a parallel loop whose bound reads an element the loop writes ends early in C
        ("for (int j = 0; j < x[5]; j++) x[j] = 1;", "its bound reads x, which the body writes"),
        ("int k; for (x[0] = 0; x[0] < 3; x[0]++) k = 1;", "a loop header that writes an array"),
        ("for (int i = 0; i < n; i++) { x[i] = 0; if (x[i] > 1) return; }", "'return' inside a loop"),
        ("int new = 0; for (int i = 0; i < n; i++) x[i] = new;", "'new' is a C++ keyword"),
        ("for (int i = 0; i < n; i++) x[i] = x[n - 1 - i];", "x[i] is written and x[n - 1 - i] is read"),
        ("double s = 0; for (int i = 0; i < n; i++) { x[i] = s; s = x[i] * 2; }", "scalar s carries a value"),
        ("int i = 0; x[i] = i = 1;", "assignment inside an expression is not supported"),
        ("double s = 0; for (int i = 0; i < n; i++) x[i] = s += 1;", "scalar s carries a value"),
    ],
)
def test_refusal_reasons(body, reason):
    p = problem("f", [size("n"), arr("x", ("n",))], f"void f(int n, double *x) {{ {body} }}", {"n": 5})
    with pytest.raises(PolicyRefusal) as e:
        POLICY.plan(p)
    assert reason in str(e.value)


def test_non_void_function_is_refused():
    p = problem("f", [size("n"), arr("x", ("n",))],
                "double f(int n, double *x) { for (int i = 0; i < n; i++) x[i] = 0; return 1.0; }",
                {"n": 5})
    with pytest.raises(PolicyRefusal, match="returns a value"):
        POLICY.plan(p)


def test_propose_turns_and_exhaustion():
    plan = POLICY.plan(AXPY)
    for t, m in enumerate(plan):
        prop = POLICY.propose(AXPY, t)
        assert isinstance(prop, Proposal)
        assert prop.policy == "builtin" and prop.description == m.describe()
        assert prop.mapping == m.to_json()
        json.dumps(prop.mapping)
    with pytest.raises(PolicyRefusal, match="no more mappings to try"):
        POLICY.propose(AXPY, len(plan))
    assert BuiltinPolicy.name == "builtin"


# ---------------------------------------------------------------------------------------
# The dependence test, loop by loop
# ---------------------------------------------------------------------------------------


def loops_of(p: CProblem):
    fn = parse_function(p)
    return fn, Dependence(fn), {L.var: L for L in walk(fn.body) if isinstance(L, For)}


def test_dependence_matvec_row():
    _, dep, L = loops_of(MATVEC_ROW)
    assert dep.parallel(L["i"]).parallel
    v = dep.parallel(L["j"])
    assert not v.parallel
    assert v.reasons == ["loop j: y[i] is written in every iteration (loop-carried dependence)"]
    red, why = dep.reduction(L["j"])
    assert red is not None and why == "" and red.acc_text == "y[i]" and red.form == "+="


def test_dependence_lu_uses_loop_ranges():
    _, dep, L = loops_of(LU)
    assert not dep.parallel(L["k"]).parallel
    # A[k][k] and A[k][j] are read in loop i (which writes rows k+1..n-1): never written
    assert dep.parallel(L["i"]).parallel
    assert dep.parallel(L["j"]).parallel


def test_dependence_private_scalars_c89():
    p = problem(
        "mm", [size("n"), arr("C", ("n", "n")), arr("A", ("n", "n"), const=True)],
        """
        void mm(int n, double C[n][n], const double A[n][n])
        {
            int i, j, k;
            double t;
            for (i = 0; i < n; i++)
                for (j = 0; j < n; j++) {
                    t = 0.0;
                    for (k = 0; k < n; k++)
                        t = t + A[i][k] * A[j][k];
                    C[i][j] = t;
                }
        }
        """,
        {"n": 8},
    )
    _, dep, L = loops_of(p)
    assert dep.parallel(L["i"]).private == {"j", "k", "t"}
    red, _ = dep.reduction(L["k"])
    assert red is not None and red.form == "="
    assert POLICY.plan(p)[0].describe() == "grid2d i->y j->x block 32x8; k sequential"
    src = POLICY.propose(p, 0).source
    assert "int k;\n            double t;" in src


def test_dependence_scalar_live_after_loop():
    p = problem("f", [size("n"), arr("x", ("n",)), arr("out", ("1",))],
                """
                void f(int n, double *x, double *out)
                {
                    double last = 0;
                    for (int i = 0; i < n; i++) { last = x[i]; x[i] = 2 * last; }
                    out[0] = last;
                }
                """, {"n": 4})
    _, dep, L = loops_of(p)
    assert dep.parallel(L["i"]).reasons == [
        "loop i: scalar last is used after the loop (its last value is needed)"
    ]


def test_dependence_flat_rows():
    _, dep, L = loops_of(FLAT_MATMUL)
    assert dep.parallel(L["i"]).parallel  # C[i*m + j] with 0 <= j <= m-1: row i only
    assert dep.parallel(L["j"]).parallel  # i*m is invariant in loop j
    assert POLICY.plan(FLAT_MATMUL)[0].describe() == "grid2d i->y j->x block 32x8; k sequential"
    # writing one element past the row overlaps the next row: not provably disjoint
    over = problem("f", [size("n"), size("m"), arr("x", ("n*m+1",))],
                   "void f(int n, int m, double *x) { for (int i = 0; i < n; i++) "
                   "for (int j = 0; j <= m; j++) x[i * m + j] = 1.0; }", {"n": 3, "m": 4})
    _, dep, L = loops_of(over)
    assert not dep.parallel(L["i"]).parallel and dep.parallel(L["j"]).parallel
    # a row reads the previous one: i stays on the host, j is parallel
    prev = problem("f", [size("n"), size("m"), arr("x", ("n*m",))],
                   "void f(int n, int m, double *x) { for (int i = 1; i < n; i++) "
                   "for (int j = 0; j < m; j++) x[i * m + j] = x[(i - 1) * m + j] + 1; }",
                   {"n": 3, "m": 4})
    assert POLICY.plan(prev)[0].describe() == "host loop i | grid1d j->x block 256"


def test_interchange_refused_when_inner_is_not_parallel_over_the_nest():
    p = problem("f", [size("n"), arr("A", ("n", "n"))],
                """
                void f(int n, double A[n][n])
                {
                    for (int i = 1; i < n; i++)
                        for (int j = 0; j < n - 1; j++)
                            A[i][j] = A[i - 1][j + 1] + 1.0;
                }
                """, {"n": 4})
    _, dep, L = loops_of(p)
    assert not dep.parallel(L["i"]).parallel
    assert dep.parallel(L["j"]).parallel  # within one i
    ok, why = dep.interchange(L["i"])
    assert not ok and "loop j" in why
    # so i stays on the host with one launch of the parallel j loop per iteration
    assert POLICY.plan(p)[0].describe() == "host loop i | grid1d j->x block 256"


# ---------------------------------------------------------------------------------------
# Generated source: structure, precision, golden kernel
# ---------------------------------------------------------------------------------------


def kernel_text(src: str, name: str) -> str:
    start = src.index("__global__", src.index(f"\n{name}(") - 60)
    end = src.index("\n}\n", start)
    return src[start : end + 2]


def test_matmul_golden_kernel():
    """The grid2d kernel of matmul, exactly.

    Golden:
    __global__ void __launch_bounds__(256)
    gemm_k0_grid2d(
        int ni,
        int nj,
        int nk,
        double alpha,
        double beta,
        double *__restrict__ C,
        const double *__restrict__ A,
        const double *__restrict__ B)
    {
        const long long cp_trip_y = (long long)ni;  /* loop i */
        const long long cp_trip_x = (long long)nj;  /* loop j */
        for (long long cp_ty = (long long)blockIdx.y * blockDim.y + threadIdx.y; cp_ty < cp_trip_y;
             cp_ty += (long long)gridDim.y * blockDim.y) {
            const int i = (int)cp_ty;
            for (long long cp_tx = (long long)blockIdx.x * blockDim.x + threadIdx.x; cp_tx < cp_trip_x;
                 cp_tx += (long long)gridDim.x * blockDim.x) {
                const int j = (int)cp_tx;
                C[(size_t)i * nj + j] *= beta;
                for (int k = 0; k < nk; k++) {
                    C[(size_t)i * nj + j] += alpha * A[(size_t)i * nk + k] * B[(size_t)k * nj + j];
                }
            }
        }
    }
    """
    golden = textwrap.dedent(test_matmul_golden_kernel.__doc__.split("Golden:\n", 1)[1]).strip()
    src = POLICY.propose(MATMUL, 1).source  # turn 0 is the register-tiled kernel
    assert kernel_text(src, "gemm_k0_grid2d").strip() == golden


def test_header_comment_and_wrapper():
    src = POLICY.propose(MATMUL, 1).source
    head = src[: src.index("*/")]
    assert "Mapping: grid2d i->y j->x block 32x8; k sequential" in head
    assert "kernel 0 (grid2d): loop i -> y, loop j -> x; block 32x8" in head
    assert "sequential in each thread: loop k" in head
    assert "on the host: only the launches" in head
    assert "not to alias" in head
    assert ('extern "C" int gemm_cuda(int ni, int nj, int nk, double alpha, double beta, '
            "double *C, const double *A, const double *B)") in src
    assert "return (int)cudaGetLastError();" in src
    assert "cudaDeviceSynchronize" not in src and "cudaStream" not in src
    lu = POLICY.propose(LU, 0).source
    assert "on the host: loop k (one launch of each kernel inside per iteration)" in lu


def test_launch_bounds_match_blocks():
    for m in POLICY.plan(MATMUL):
        src = POLICY.source(MATMUL, m)
        threads = int(np.prod(m.block))
        assert f"__launch_bounds__({threads})" in src


def test_float_problem_keeps_single_precision():
    src = POLICY.propose(AXPY, 0).source
    kernel = kernel_text(src, "saxpy_k0_grid1d")
    assert "y[i] = a * x[i] + y[i];" in kernel
    assert "double" not in kernel
    mag = POLICY.propose(MAGNITUDE, 0).source
    # sqrtf stays single precision; C's double sqrt keeps its double argument
    assert "out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]) + sqrt((double)u[i]);" in mag


def test_k_outside_j_is_interchanged_and_fused_into_a_2d_nest():
    plan = descriptions(MATMUL_KJ)
    assert plan[0] == "grid2d i->y j->x block 32x8 (k, j interchanged, 2 j loops fused); k sequential"
    src = POLICY.propose(MATMUL_KJ, 0).source
    assert "rewritten: k, j interchanged, 2 j loops fused" in src
    assert POLICY.plan(MATMUL_KJ)[0].to_json()["nests"][0]["transforms"] == [
        "k, j interchanged", "2 j loops fused"]
    tri = descriptions(TRIANGULAR_KJ)
    assert tri[0] == ("grid2d i->y j->x block 16x16 tile 4x4 smem (k, j interchanged, "
                      "2 j loops fused); k sequential")


def _row_body(body: str, extra_params=()) -> CProblem:
    return problem(
        "rows", [size("n"), arr("A", ("n", "n")), arr("B", ("n", "n")), *extra_params],
        f"void rows(int n, double A[n][n], double B[n][n]{''.join(', double ' + q.name for q in extra_params)})\n"
        f"{{\n    for (int i = 0; i < n; i++) {{\n{textwrap.indent(textwrap.dedent(body), '        ')}    }}\n}}\n",
        {"n": 16})


@pytest.mark.parametrize("body,why", [
    # the second loop reads an element the first writes in another iteration
    ("for (int j = 0; j < n; j++) A[i][j] = 2 * B[i][j];\n"
     "for (int j = 0; j < n - 1; j++) B[i][j] = A[i][j + 1];\n", "headers differ"),
    ("for (int j = 1; j < n; j++) A[i][j] = 2 * B[i][j];\n"
     "for (int j = 1; j < n; j++) B[i][j] = A[i][j - 1];\n", "carried after fusion"),
    # a scalar flows from the first loop's last iteration into the second loop
    ("double t = 0;\nfor (int j = 0; j < n; j++) t = A[i][j];\n"
     "for (int j = 0; j < n; j++) B[i][j] = t;\n", "shared scalar"),
    # k carries a dependence along j too: no interchange
    ("for (int j = 0; j < n; j++) A[i][j] = 0;\n"
     "for (int k = 1; k < n; k++)\n    for (int j = 1; j < n; j++) A[i][j] += A[i][j - 1] * B[k][j];\n",
     "no interchange"),
])
def test_illegal_fusion_or_interchange_keeps_the_nest(body: str, why: str):
    plan = descriptions(_row_body(body))
    assert all("fused" not in d and "interchanged" not in d for d in plan), (why, plan)
    assert plan[0].startswith("grid1d i->x"), (why, plan)


def test_independent_statements_are_distributed():
    plan = descriptions(TWO_PRODUCTS)
    assert plan[0] == ("grid1d j->x block 256 | grid1d i->x block 256 | grid1d j->x block 256 "
                       "(loops i, j interchanged); i sequential | warp_reduce i->warp j->lane "
                       "block 128 (shuffle sum into q[i]) | distributed: loop i into 3")
    assert "loop i (line 6): distributed into 3 loops" in POLICY.propose(TWO_PRODUCTS, 0).source
    plan = descriptions(NORMAL_PRODUCT)  # t[i] flows from the first group into the last
    assert plan[0] == ("grid1d j->x block 256 | grid1d i->x block 256 | warp_reduce i->warp "
                       "j->lane block 128 (shuffle sum into t[i]) | grid1d j->x block 256 "
                       "(loops i, j interchanged); i sequential | distributed: loop i into 3")


def test_a_backward_carried_flow_is_not_distributed():
    """a[i] reads b[i - 1], which the second statement wrote one iteration earlier: the
    loops cannot run one after the other in this order (nor is the loop parallel)."""
    p = problem("backward", [size("n"), arr("a", ("n",)), arr("b", ("n",)), arr("c", ("n",), const=True)],
                """
                void backward(int n, double a[n], double b[n], const double c[n])
                {
                    for (int i = 1; i < n; i++) {
                        a[i] = b[i - 1];
                        b[i] = 2 * c[i];
                    }
                }
                """, {"n": 16})
    with pytest.raises(PolicyRefusal, match="b\\[i - 1\\] is read by other iterations"):
        POLICY.plan(p)


def test_c89_and_c99_loops_plan_alike():
    c99 = problem("f", [size("n"), size("m"), arr("A", ("n", "m"))],
                  "void f(int n, int m, double A[n][m]) { for (int i = 0; i < n; i++) "
                  "for (int j = 0; j < m; j++) A[i][j] = i + j; }", {"n": 3, "m": 4})
    c89 = problem("f", [size("n"), size("m"), arr("A", ("n", "m"))],
                  "void f(int n, int m, double A[n][m]) { int i, j; for (i = 0; i < n; ++i) "
                  "for (j = 0; j < m; j += 1) A[i][j] = i + j; }", {"n": 3, "m": 4})
    assert descriptions(c99) == descriptions(c89)


# ---------------------------------------------------------------------------------------
# Every source compiles with nvcc
# ---------------------------------------------------------------------------------------

NVCC = shutil.which("nvcc")


def nvcc_compile(src: str, out: Path, arch: str) -> subprocess.CompletedProcess:
    cu = out.with_suffix(".cu")
    cu.write_text(src)
    return subprocess.run(
        ["nvcc", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", "-o", str(out), str(cu)],
        capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("name", sorted(PORTABLE))
def test_every_mapping_compiles_with_nvcc(name, tmp_path):
    p, _ = PORTABLE[name]
    plan = POLICY.plan(p)
    jobs = [(POLICY.source(p, m), tmp_path / f"{name}_{t}.so") for t, m in enumerate(plan)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: nvcc_compile(j[0], j[1], "sm_90"), jobs))
    for (src, out), r in zip(jobs, results):
        assert r.returncode == 0, f"{out.name}:\n{r.stderr}\n{src}"
        assert out.exists()


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_first_mappings_compile_for_sm80(tmp_path):
    jobs = [(POLICY.propose(p, 0).source, tmp_path / f"{name}.so") for name, (p, _) in PORTABLE.items()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: nvcc_compile(j[0], j[1], "sm_80"), jobs))
    for (src, out), r in zip(jobs, results):
        assert r.returncode == 0, f"{out.name}:\n{r.stderr}"


# ---------------------------------------------------------------------------------------
# Numerics on the CPU: a small emulation of the CUDA subset the policy emits
# ---------------------------------------------------------------------------------------

HAVE_EMU = have_emulation()

_CTYPES = {"double": ctypes.c_double, "float": ctypes.c_float, "int": ctypes.c_int,
           "long": ctypes.c_long, "unsigned int": ctypes.c_uint}


def make_data(p: CProblem, fix) -> dict:
    rng = np.random.default_rng(0)
    data: dict = {}
    for prm in p.params:
        if isinstance(prm, ArrayParam):
            shape = prm.shape(p.sizes)
            if prm.dtype.startswith("float"):
                data[prm.name] = (rng.random(shape) + 0.5).astype(prm.dtype)
            else:
                data[prm.name] = rng.integers(0, 5, shape).astype(prm.dtype)
        elif prm.kind is ScalarKind.SIZE:
            data[prm.name] = p.sizes[prm.name]
        else:
            data[prm.name] = 1.25
    if fix:
        fix(data, p.sizes)
    return data


def call(lib_path: Path, symbol: str, p: CProblem, data: dict) -> int:
    fn = getattr(ctypes.CDLL(str(lib_path)), symbol)
    fn.restype = ctypes.c_int
    args = [data[q.name].ctypes.data_as(ctypes.c_void_p) if isinstance(q, ArrayParam)
            else _CTYPES[q.ctype](data[q.name]) for q in p.params]
    return fn(*args)


def _run_compare(name: str, libs: list[str], ref: str) -> None:
    """Child process body: run the C reference and each emulated candidate, compare."""
    p, fix = PORTABLE[name]
    want = make_data(p, fix)
    call(Path(ref), p.function, p, want)
    for lib in libs:
        got = make_data(p, fix)
        assert call(Path(lib), p.cuda_symbol, p, got) == 0
        for a in p.arrays:
            tol = 1e-4 if want[a.name].dtype == np.float32 else 1e-10
            np.testing.assert_allclose(got[a.name], want[a.name], rtol=tol, atol=tol,
                                       err_msg=f"{Path(lib).name}: {a.name}")


@pytest.mark.skipif(not HAVE_EMU, reason="needs gcc and g++ with C++20 <barrier>")
@pytest.mark.parametrize("name", sorted(PORTABLE))
def test_every_mapping_matches_c_on_cpu_emulation(name, tmp_path):
    p, _ = PORTABLE[name]
    ref_c = tmp_path / "ref.c"
    # the reference is the C function itself (made non-static so that ctypes finds it)
    ref_c.write_text("#include <math.h>\n#include <stdlib.h>\n"
                     + p.function_source.replace("static void", "void", 1))
    ref = tmp_path / "ref.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(ref), str(ref_c), "-lm"],
                   check=True, capture_output=True)
    plan = POLICY.plan(p)

    def build(t: int) -> tuple[Path, str]:
        try:
            return build_emulated(POLICY.source(p, plan[t]), tmp_path, f"cand{t}"), ""
        except ToolchainError as exc:
            return tmp_path / f"cand{t}.so", str(exc)

    with ThreadPoolExecutor(max_workers=4) as pool:
        built = list(pool.map(build, range(len(plan))))
    for (lib, err), m in zip(built, plan):
        assert not err, f"{m.describe()}:\n{err}"
    libs = [str(lib) for lib, _ in built]
    # a child process: a wrong barrier would hang, and each library keeps static state
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import test_builtin_policy as t; t._run_compare({name!r}, {libs!r}, {str(ref)!r})")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, "\n".join(m.describe() for m in plan) + "\n" + r.stderr[-3000:]


def test_mapping_is_a_mapping():
    assert all(isinstance(m, Mapping) for m in POLICY.plan(MATMUL))


def test_too_deep_nesting_is_a_refusal_not_a_crash():
    """An expression nested thousands deep exceeds Python's recursion limit: refused."""
    from cudaperf_cli.core import ArrayParam, CProblem, ScalarKind, ScalarParam
    from cudaperf_cli.policies.base import PolicyRefusal
    from cudaperf_cli.policies.builtin.policy import BuiltinPolicy

    expr = "(" * 3000 + "x[i]" + ")" * 3000
    src = f"void deep(int n, double *x) {{ for (int i = 0; i < n; i++) x[i] = {expr}; }}"
    prob = CProblem(
        path=Path("deep.c"), function="deep",
        params=(ScalarParam("n", "int", ScalarKind.SIZE), ArrayParam("x", "double", ("n",))),
        sizes={"n": 10}, function_source=src,
    )
    with pytest.raises(PolicyRefusal, match="too deeply"):
        BuiltinPolicy().propose(prob, 0)


REVERSE_UNSIGNED = problem(
    "reverse_scale",
    [size("n", "unsigned int"), arr("x", ("n",))],
    """
    void reverse_scale(unsigned int n, double x[n])
    {
        for (int i = n - 1; i >= 0; i--)
            x[i] = 2 * x[i];
    }
    """,
    {"n": 33},
)


def test_trip_count_converts_the_first_value_to_the_index_type():
    """C assigns ``n - 1`` to ``int i``: at n == 0 that is -1 and the loop runs no iteration;
    the trip count must not widen the unsigned 4294967295 instead."""
    src = POLICY.propose(REVERSE_UNSIGNED, 0).source
    assert "(long long)(int)(n - 1) - (long long)0 + 1" in src, src


@pytest.mark.skipif(not HAVE_EMU, reason="needs g++ with C++20 <barrier>")
def test_unsigned_reverse_loop_at_zero_runs_nothing(tmp_path):
    lib = build_emulated(POLICY.propose(REVERSE_UNSIGNED, 0).source, tmp_path)
    code = ("import ctypes, sys; f = ctypes.CDLL(sys.argv[1]).reverse_scale_cuda; "
            "f.argtypes = [ctypes.c_uint, ctypes.c_void_p]; x = (ctypes.c_double * 1)(1.5); "
            "assert f(0, ctypes.cast(x, ctypes.c_void_p)) == 0 and x[0] == 1.5; "
            "y = (ctypes.c_double * 3)(1, 2, 3); f(3, ctypes.cast(y, ctypes.c_void_p)); "
            "assert list(y) == [2, 4, 6], list(y)")
    r = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_parallel_float_sum_gets_a_source_order_fallback():
    """After the default-shape entries, a plan that adds a floating-point sum in parallel
    gets the entry that keeps every such sum in one thread, in the C code's order (an
    ill-conditioned problem verifies on nothing else), before the block-shape variants."""
    plan = POLICY.plan(SUM_SQUARES)
    assert [m.describe() for m in plan] == [
        "grid_reduce i->grid block 256 (atomicAdd sum into s) | 1-thread kernel: s += cp_red0; out[0] = s",
        "grid_reduce i->grid block 512 (atomicAdd sum into s) | 1-thread kernel: s += cp_red0; out[0] = s",
    ], "no fallback when nothing else would be parallel"
    p = NORMS
    plan = POLICY.plan(p)
    exact = [(t, m) for t, m in enumerate(plan) if m.source_order]
    assert len(exact) == 1
    t, m = exact[0]
    assert m.describe().startswith("sums in source order: ")
    assert all(n.kind not in ("grid_reduce", "warp_reduce") for n in m.nests)
    assert m.to_json()["source_order"] is True
    src = POLICY.source(p, m)
    assert "atomicAdd" not in src and "__shfl" not in src
    # the block-shape variants come after it
    assert all(x.block == BLOCKS[x.kind][0] for x in plan[:t])
    assert any(x.block != BLOCKS[x.kind][0] for x in plan[t + 1:])


def test_integer_sums_need_no_source_order_fallback():
    p = problem("count", [size("n"), arr("x", ("n",), "int", const=True), arr("c", ("n",), "int"),
                          arr("out", ("1",), "int", source="annotation")],
                """
                // cudaperf: out[1]
                void count(int n, const int x[n], int c[n], int *out)
                {
                    int s = 0;
                    for (int i = 0; i < n; i++)
                        s += x[i];
                    for (int i = 0; i < n; i++)
                        c[i] = x[i] + s;
                    out[0] = s;
                }
                """, {"n": 40})
    assert not any(m.source_order for m in POLICY.plan(p))



@pytest.mark.parametrize("body,params", [
    # a declaration in the first loop shadows the name the second loop reads
    ("for (int j = 0; j < m; j++) { double t = A[i][j]; B[i][j] = t; }\n"
     "for (int j = 0; j < m; j++) C[i][j] = t;\n", "t"),
])
def test_a_declaration_that_shadows_an_outer_one_is_refused(body, params):
    """The IR's scalar names are flat: an inner ``double t`` under an outer ``t`` became one
    variable (an attack pass found wrong numbers; fusion refused such bodies before)."""
    p = problem("shadow", [size("n"), size("m"), arr("A", ("n", "m"), const=True),
                           arr("B", ("n", "m")), arr("C", ("n", "m"))],
                "void shadow(int n, int m, const double A[n][m], double B[n][m], double C[n][m])\n"
                f"{{\n    double {params} = 1.5;\n    for (int i = 0; i < n; i++) {{\n"
                + textwrap.indent(body, "        ") + "    }\n}\n",
                {"n": 8, "m": 7})
    with pytest.raises(PolicyRefusal, match="shadowing is not supported"):
        descriptions(p)


def test_sibling_blocks_may_declare_the_same_name():
    p = problem("siblings", [size("n"), arr("x", ("n",)), arr("y", ("n",))],
                """
                void siblings(int n, double x[n], double y[n])
                {
                    for (int i = 0; i < n; i++) { double t = x[i]; y[i] = 2.0 * t; }
                    for (int i = 0; i < n; i++) { double t = y[i]; x[i] = t + 1.0; }
                    { double s = x[0]; y[0] = s; }
                    { double s = x[1]; y[1] = s; }
                }
                """, {"n": 8})
    assert descriptions(p)


def test_distribution_keeps_an_index_that_flows_between_statements():
    """B[i] reads the j the inner loop left (i); the parts would not share it."""
    p = problem("idx_flow", [size("n"), size("m"), arr("A", ("n", "m")), arr("B", ("n",)), arr("C", ("n",))],
                """
                void idx_flow(int n, int m, double A[n][m], double B[n], double C[n])
                {
                    int i, j;
                    for (i = 1; i < n; i++) {
                        for (j = 0; j < i; j++)
                            A[i][j] = 2.0 * A[i][j];
                        B[i] = j;
                        C[i] = C[i - 1] + 1.0;
                    }
                }
                """, {"n": 8, "m": 8})
    try:
        plan = descriptions(p)
    except PolicyRefusal:
        return
    assert all("distributed" not in d for d in plan), plan


def test_a_loop_bound_is_no_reduction_accumulator():
    p = problem("shrink", [size("n"), arr("x", ("n",)), arr("out", ("1",))],
                """
                void shrink(int n, double x[n], double out[1])
                {
                    int len = n;
                    for (int i = 0; i < len; i++)
                        len = len - 1;
                    for (int i = 0; i < n; i++)
                        x[i] = 2 * x[i];
                    out[0] = len;
                }
                """, {"n": 8})
    assert all("grid_reduce" not in d for d in descriptions(p))


# ---------------------------------------------------------------------------------------
# isl: exact independence where the subscript-form test cannot see it
# ---------------------------------------------------------------------------------------

SYM_TRIANGLE = problem(  # correlation's shape: row i and column i of a triangle
    "sym_triangle",
    [size("m"), size("n"), arr("data", ("n", "m"), const=True), arr("corr", ("m", "m"))],
    """
    void sym_triangle(int m, int n, const double data[n][m], double corr[m][m])
    {
        for (int i = 0; i < m - 1; i++) {
            corr[i][i] = 1.0;
            for (int j = i + 1; j < m; j++) {
                corr[i][j] = 0.0;
                for (int k = 0; k < n; k++)
                    corr[i][j] += data[k][i] * data[k][j];
                corr[j][i] = corr[i][j];
            }
        }
        corr[m - 1][m - 1] = 1.0;
    }
    """,
    {"m": 23, "n": 17},
)


def _outer_loop(p: CProblem) -> For:
    fn = parse_function(p)
    return next(s for s in walk(fn.body) if isinstance(s, For))


@pytest.mark.skipif(not polyhedral.available(), reason="islpy is not installed")
def test_isl_proves_a_triangles_row_and_column_disjoint():
    loop = _outer_loop(SYM_TRIANGLE)
    assert polyhedral.independent(loop, "corr") is True
    dep = Dependence(parse_function(SYM_TRIANGLE))
    v = dep.parallel(next(s for s in walk(dep.fn.body) if isinstance(s, For)))
    assert v.parallel, v.reasons
    plan = POLICY.plan(SYM_TRIANGLE)
    assert not plan[0].host_loops, plan[0].describe()  # no host loop over i or j any more


@pytest.mark.skipif(not polyhedral.available(), reason="islpy is not installed")
@pytest.mark.parametrize("array, body, expect", [
    # a true loop-carried dependence: isl finds the pair
    ("x", "for (int i = 1; i < n; i++) x[i] = x[i - 1] + 1.0;", False),
    # a transpose over the square: iteration i reads A[j][i], which iteration j writes
    ("A", "for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) A[i][j] = A[j][i];", False),
    # over the upper triangle only: writes above the diagonal, reads below it
    ("A", "for (int i = 0; i < n - 1; i++) for (int j = i + 1; j < n; j++) A[i][j] = A[j][i];",
     True),
    # a shifted read: x[i + n] is iteration i + n's x[i'] whenever n < n - ... (may meet)
    ("x", "for (int i = 0; i < 2 * n; i++) x[i] = x[i + n];", False),
    # disjoint: even elements written, odd ones read
    ("x", "for (int i = 0; i < n; i++) x[2 * i] = x[2 * i + 1];", True),
    # a subscript isl cannot encode (a product with the index): unknown
    ("x", "for (int i = 0; i < n; i++) x[i * i] = 1.0;", None),
    # a scalar written in the body, in a subscript: unknown
    ("x", "for (int i = 0; i < n; i++) { int t = i; x[t] = 1.0; }", None),
])
def test_isl_refuses_what_may_conflict(array, body, expect):
    p = problem("f", [size("n"), arr("x", ("4*n",)), arr("A", ("n", "n"))],
                f"void f(int n, double x[4*n], double A[n][n]) {{ {body} }}", {"n": 9})
    assert polyhedral.independent(_outer_loop(p), array) is expect


def test_source_order_products_are_never_contracted():
    """The source-order entry prints floating products as __dmul_rn (nvcc cannot fuse them
    into an FMA), so its rounding is the CPU reference's; the default entries keep a * b."""
    plan = POLICY.plan(NORMS)
    exact = next(m for m in plan if m.source_order)
    src = POLICY.source(NORMS, exact)
    assert "__dmul_rn(" in src
    body = src[src.index("__global__"):]
    assert " * " not in "".join(ln for ln in body.splitlines()
                               if "[" in ln and "+=" in ln and "size_t" not in ln.split("+=")[1])
    assert "__dmul_rn(" not in POLICY.source(NORMS, plan[0])


def test_register_tiled_product_kernel():
    """The tiled entry: a 4x4 accumulator tile per thread, loaded after PRE and stored
    before POST, the k loop once per tile (unguarded for a tile inside the space, guarded
    at the edges), and a grid of ceil(n / (block * tile)) blocks per dimension."""
    plan = POLICY.plan(MATMUL)
    m = next(m for m in plan if m.describe().startswith("grid2d i->y j->x block 16x16 tile 4x4;"))
    src = POLICY.source(MATMUL, m)
    k = kernel_text(src, "gemm_k0_grid2d")
    assert "double cp_acc[4][4];" in k and "__shared__" not in k
    assert k.count("for (int k = 0; k < nk; k++)") == 2  # full tiles, edge tiles
    assert "cp_acc[cp_r][cp_c] += alpha * A[(size_t)i * nk + k] * B[(size_t)k * nj + j];" in k
    assert k.index("*= beta;") < k.index("cp_acc[cp_r][cp_c] = C[") < k.index("for (int k")
    assert k.rindex("C[(size_t)i * nj + j] = cp_acc[cp_r][cp_c];") > k.rindex("for (int k")
    assert "if (cp_by + cp_tile_y <= cp_trip_y && cp_bx + cp_tile_x <= cp_trip_x)" in k
    assert "cp_blocks(cp_trip_x, 64, " in src and "cp_blocks(cp_trip_y, 64, " in src
    assert "register tile 4x4" in src[: src.index("*/")]


@pytest.mark.parametrize("body", [
    # the k loop's bound depends on the output row: threads of a tile would disagree
    "for (int i = 0; i < ni; i++) for (int j = 0; j < nj; j++) "
    "for (int k = 0; k < i; k++) C[i][j] += A[i][k] * B[k][j];",
    # the update reads the array it accumulates into
    "for (int i = 0; i < ni; i++) for (int j = 0; j < nj; j++) "
    "for (int k = 0; k < nk; k++) C[i][j] += C[i][j] * A[i][k];",
    # two statements in the k loop
    "for (int i = 0; i < ni; i++) for (int j = 0; j < nj; j++) "
    "for (int k = 0; k < nk; k++) { C[i][j] += A[i][k] * B[k][j]; C[i][j] *= 0.5; }",
])
def test_no_register_tile_outside_the_product_shape(body):
    p = problem("g", MATMUL.params, f"""
        void g(int ni, int nj, int nk, double alpha, double beta,
               double C[ni][nj], const double A[ni][nk], const double B[nk][nj])
        {{ {body} }}""", MATMUL.sizes)
    assert not any(n.tile for m in POLICY.plan(p) for n in m.nests)


def test_staged_tile_loads_operands_through_shared_memory():
    """The smem tile: A[i][k] (k and the y index) and B[k][j] (k and the x index) are
    loaded by the whole block, 16 values of k a step, along k for A (k is its last
    subscript) and along j for B, between two barriers; the updates read the cells in the
    order of k.  A triangle is staged only when its bounds move by at most one a row
    (test_triangles_are_staged_with_their_rows_checked_and_empty_tiles_skipped)."""
    plan = POLICY.plan(MATMUL)
    m = next(m for m in plan if m.describe().startswith("grid2d i->y j->x block 16x16 tile 2x2 smem"))
    src = POLICY.source(MATMUL, m)
    k = kernel_text(src, "gemm_k0_grid2d")
    # alpha * A[i][k] * B[k][j] is (alpha * A[i][k]) * B[k][j]: the cells hold that product
    assert "__shared__ double cp_sy0[32][17];  /* alpha * A[i][k], 16 values of k a step */" in k
    assert "__shared__ double cp_sx1[16][32];  /* B[k][j], 16 values of k a step */" in k
    assert "const int cp_a = cp_e / 16, cp_b = cp_e % 16;" in k  # A along k
    assert "const int cp_a = cp_e % 32, cp_b = cp_e / 32;" in k  # B along j
    assert re.search(r"cp_sy0\[cp_a\]\[cp_b\] = alpha \* A\[\(size_t\)i \* \S+ \+ k\];", k), k
    assert ("cp_acc[cp_r][cp_c] += cp_sy0[threadIdx.y + cp_r * 16][cp_kk] * "
            "cp_sx1[cp_kk][threadIdx.x + cp_c * 16];") in k
    assert k.count("__syncthreads();") == 4  # two per k step, full and edge tiles
    # a whole step runs 16 values of k, unrolled, the last step counts them; the update
    # reads only staged cells, so edge tiles run it unguarded too (an output outside the
    # space reads cells nobody loaded and is never stored)
    full = k[: k.index("} else {")]
    assert "if (cp_kn == 16) {" in full and "#pragma unroll\n" in full
    assert k.count("if (cp_kn == 16) {") == 2
    assert k.count("for (int cp_kk = 0; cp_kk < 16; cp_kk++) {") == 2
    assert k.count("for (int cp_kk = 0; cp_kk < cp_kn; cp_kk++) {") == 2
    assert "if (cp_ty < cp_trip_y && cp_tx < cp_trip_x) {\n" not in k[k.index("__syncthreads();"):k.rindex("__syncthreads();")]
    # an update that also reads an array outside shared memory keeps the guard at the edges
    scaled = problem("scaled", MATMUL.params, """
        void scaled(int ni, int nj, int nk, double alpha, double beta,
                    double C[ni][nj], const double A[ni][nk], const double B[nk][nj])
        {
            for (int i = 0; i < ni; i++)
                for (int j = 0; j < nj; j++)
                    for (int k = 0; k < nk; k++)
                        C[i][j] += A[i][k] * B[k][j] * A[i][j % nk];
        }""", MATMUL.sizes)
    sm = POLICY.plan(scaled)[0]
    assert any(n.staged for n in sm.nests), sm.describe()
    ks = kernel_text(POLICY.source(scaled, sm), "scaled_k0_grid2d")
    assert ks.count("if (cp_kn == 16) {") == 1
    edge = ks[ks.index("} else {", ks.index("if (cp_by + cp_tile_y")):]
    assert "if (cp_ty < cp_trip_y && cp_tx < cp_trip_x) {" in edge
    # six operands would pass the 48 KiB of static shared memory at the 4x4 tile: none staged
    many = problem("many", MATMUL.params, """
        void many(int ni, int nj, int nk, double alpha, double beta,
                  double C[ni][nj], const double A[ni][nk], const double B[nk][nj])
        {
            for (int i = 0; i < ni; i++)
                for (int j = 0; j < nj; j++)
                    for (int k = 0; k < nk - 2; k++)
                        C[i][j] += A[i][k] * B[k][j] + A[i][k + 1] * B[k + 1][j]
                                   + A[i][k + 2] * B[k + 2][j];
        }""", MATMUL.sizes)
    plan = POLICY.plan(many)
    assert plan[0].nests[0].tile and not any(n.staged for m in plan for n in m.nests)


@pytest.mark.parametrize("update, folded", [
    ("alpha * A[i][k] * B[k][j]", "alpha * A[i][k]"),          # (alpha * A) * B
    ("A[i][k] * 2.0 * B[k][j]", "A[i][k] * 2.0"),              # (A * 2.0) * B
    ("alpha * (A[i][k] * B[k][j])", None),                    # another rounding: not folded
    ("alpha * A[i][k] * B[k][j] + A[i][k]", None),             # A read twice
    ("beta * A[i][k] * B[k][j]", None),                        # beta is written in the body
])
def test_a_scalar_product_is_staged_only_when_the_update_computes_it_first(update, folded):
    """The staged cell holds ``s * X`` only when the C computes exactly that product first,
    with an unchanging ``s``: the same rounded value, so the same results."""
    p = problem("f", MATMUL.params, f"""
        void f(int ni, int nj, int nk, double alpha, double beta,
               double C[ni][nj], const double A[ni][nk], const double B[nk][nj])
        {{
            for (int i = 0; i < ni; i++)
                for (int j = 0; j < nj; j++) {{
                    beta = beta * 1.0;
                    for (int k = 0; k < nk; k++)
                        C[i][j] += {update};
                }}
        }}""", MATMUL.sizes)
    plan = POLICY.plan(p)
    staged = [m for m in plan if any(n.staged for n in m.nests)]
    if not staged:  # beta written in the nest: no tile at all is fine too
        assert folded is None
        return
    k = kernel_text(POLICY.source(p, staged[0]), "f_k0_grid2d")
    if folded is None:
        assert "/* A[i][k], 16 values of k a step */" in k
    else:
        assert f"/* {folded}, 16 values of k a step */" in k


def test_a_reduction_whose_index_is_read_after_it_is_not_split():
    """C leaves k at n after the loop; a grid or warp reduction would not (found by an attack
    pass: o[0] came out as s + garbage)."""
    p = problem("kl", [size("n"), arr("x", ("n",), const=True), arr("o", ("1",), source="annotation")],
                """
                // cudaperf: o[1]
                void kl(int n, const double x[n], double *o)
                {
                    int k;
                    double s = 0;
                    for (k = 0; k < n; k++)
                        s += x[k];
                    o[0] = s + k;
                }
                """, {"n": 19})
    try:
        plan = POLICY.plan(p)
    except PolicyRefusal as exc:  # nothing else in it is parallel
        assert "the final value of k is used after the loop" in str(exc)
        plan = []
    assert not any(n.kind in ("grid_reduce", "warp_reduce") for m in plan for n in m.nests)


def test_source_order_mul_assign_multiplies_in_cs_type():
    """float y *= double: C multiplies in double, then converts; so does the source-order
    entry (__dmul_rn, not __fmul_rn of a value rounded to float first)."""
    p = problem("so_muleq", [size("n"), size("m"), coef("a", "float"), arr("A", ("n", "m"), "float", const=True),
                             arr("y", ("n",), "float")],
                """
                void so_muleq(int n, int m, float a, const float A[n][m], float y[n])
                {
                    float s = 0;
                    for (int i = 0; i < n; i++) {
                        y[i] = 0;
                        for (int j = 0; j < m; j++)
                            y[i] += A[i][j] * a;
                        y[i] *= y[i] * 1.1;
                        s += y[i];
                    }
                    for (int i = 0; i < n; i++)
                        y[i] /= s;
                }
                """, {"n": 45, "m": 33})
    exact = [m for m in POLICY.plan(p) if m.source_order]
    assert exact
    src = POLICY.source(p, exact[0])
    assert "= __dmul_rn(y[i], __dmul_rn(y[i], 1.1));" in src
