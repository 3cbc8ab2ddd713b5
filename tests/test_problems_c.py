"""Tests of the C problem loader (cudaperf_cli.problems.c): CPU only."""

from __future__ import annotations

import ctypes
import hashlib
import random
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cudaperf_cli.core import (
    ArrayParam,
    CProblem,
    ProblemError,
    ScalarKind,
    ScalarParam,
    ToolchainError,
)
from cudaperf_cli.problems.c import (
    ReferenceLib,
    build_reference,
    init_argtypes,
    is_step_count,
    load_c_problem,
    reference_argtypes,
    small_sizes,
)

DATA = Path(__file__).parent / "data" / "c"
INCLUDE = ["-I", str(DATA / "include")]


def write_c(tmp_path: Path, text: str, name: str = "prob.c") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load_ref(ref: ReferenceLib, problem: CProblem):
    lib = ctypes.CDLL(str(ref.lib_path))
    fn = getattr(lib, ref.ref_symbol)
    fn.argtypes = reference_argtypes(problem)
    fn.restype = None
    init = None
    if ref.init_symbol is not None:
        init = getattr(lib, ref.init_symbol)
        init.argtypes = init_argtypes(problem)
        init.restype = None
    return fn, init


# ---------------------------------------------------------------------------------------
# Parameters and extents
# ---------------------------------------------------------------------------------------


def test_c99_extents_and_roles():
    p = load_c_problem(DATA / "c99_extents.c")
    assert p.function == "stencil"
    assert [type(q) for q in p.params] == [ScalarParam] * 3 + [ArrayParam] * 3
    assert [q.kind for q in p.size_params] == [ScalarKind.SIZE] * 3
    a, b, w = p.arrays
    assert (a.name, a.ctype, a.extents, a.const, a.extent_source) == (
        "A", "double", ("n", "m"), False, "c99"
    )
    assert b.extents == ("n", "m")
    # A macro extent is a literal after preprocessing; the text is kept as written.
    assert w.extents == ("(300)",) and w.const
    assert w.shape(p.sizes) == (300,)
    assert a.shape(p.sizes) == (1000, 2000)


def test_annotation_extents_and_coefficient():
    p = load_c_problem(DATA / "saxpy_annotated.c")
    n, a, x, y = p.params
    assert n == ScalarParam("n", "int", ScalarKind.SIZE)
    assert a == ScalarParam("a", "float", ScalarKind.COEFFICIENT)
    assert (x.extents, x.const, x.extent_source, x.dtype) == (("n",), True, "annotation", "float32")
    assert (y.extents, y.const) == (("n",), False)


def test_block_annotation_on_static_function_with_include():
    p = load_c_problem(DATA / "static_setup.c", cpp_args=INCLUDE)
    assert p.function == "row_sums"  # helper_value() of the header is not a candidate
    assert p.is_static
    assert p.param("a").extents == ("n*n",)
    assert p.param("s").extents == ("n",)
    assert p.function_source.startswith("static void row_sums(int n")
    assert "SQUARE" not in p.function_source  # macros expanded
    assert p.cpp_args == (f"-I{DATA / 'include'}",)


def test_annotation_on_prototype_and_multiple_lines(tmp_path):
    path = write_c(
        tmp_path,
        """
        // cudaperf: x[n]
        // cudaperf: y[n+1], z[2*n][m]
        void f(int n, int m, double *x, double *y, float *z);

        void f(int n, int m, double *x, double *y, float *z)
        {
          for (int i = 0; i < n; i++) { x[i] = y[i + 1]; z[i * m] = 0; }
        }
        """,
    )
    p = load_c_problem(path, sizes={"n": 4, "m": 3})
    assert p.param("x").extents == ("n",)
    assert p.param("y").extents == ("n+1",)
    assert p.param("z").extents == ("2*n", "m")
    assert p.param("z").shape(p.sizes) == (8, 3)


def test_missing_extent_error_and_hint():
    with pytest.raises(ProblemError) as err:
        load_c_problem(DATA / "scale_missing_extent.c", sizes={"n": 4, "m": 5})
    assert "'in'" in str(err.value) and "'out'" in str(err.value)
    assert err.value.hint == "add above the function: // cudaperf: in[n*m] out[n*m]"


def test_missing_outer_extent_hint_keeps_declared_inner(tmp_path):
    path = write_c(
        tmp_path,
        """
        void f(int n, int m, double A[][m])
        {
          for (int i = 0; i < n; i++) for (int j = 0; j < m; j++) A[i][j] = 0;
        }
        """,
    )
    with pytest.raises(ProblemError) as err:
        load_c_problem(path, sizes={"n": 2, "m": 2})
    assert "'A'" in str(err.value)
    assert err.value.hint.endswith("// cudaperf: A[n][m]")


def test_extent_must_use_size_parameters(tmp_path):
    path = write_c(
        tmp_path,
        """
        #define N 64
        // cudaperf: x[N]
        void f(int n, double *x) { for (int i = 0; i < n; i++) x[i] = 0; }
        """,
    )
    with pytest.raises(ProblemError, match=r"'N'.*size parameters \(n\)"):
        load_c_problem(path, sizes={"n": 8})


def test_annotation_of_unknown_array(tmp_path):
    path = write_c(
        tmp_path,
        """
        // cudaperf: x[n] q[n]
        void f(int n, double *x) { for (int i = 0; i < n; i++) x[i] = 0; }
        """,
    )
    with pytest.raises(ProblemError, match="'q'.*not an array parameter"):
        load_c_problem(path, sizes={"n": 8})


def test_bad_annotation_syntax(tmp_path):
    path = write_c(
        tmp_path,
        """
        // cudaperf: x[n
        void f(int n, double *x) { for (int i = 0; i < n; i++) x[i] = 0; }
        """,
    )
    with pytest.raises(ProblemError, match=r"prob\.c:2: unbalanced"):
        load_c_problem(path, sizes={"n": 8})


def test_pointer_to_pointer_rejected(tmp_path):
    path = write_c(tmp_path, "void f(int n, double **x) { for (int i = 0; i < n; i++) x[i][0] = 0; }\n")
    with pytest.raises(ProblemError, match="'x'.*pointers to pointers"):
        load_c_problem(path, sizes={"n": 8})


def test_unsupported_element_type(tmp_path):
    path = write_c(tmp_path, "void f(int n, long double x[n]) { for (int i = 0; i < n; i++) x[i] = 0; }\n")
    with pytest.raises(ProblemError, match="parameter 'x'.*unsupported element type"):
        load_c_problem(path, sizes={"n": 8})


# ---------------------------------------------------------------------------------------
# Function choice, malformed files
# ---------------------------------------------------------------------------------------


def test_function_by_scop_pragma_ignores_init_and_print():
    p = load_c_problem(DATA / "gemm.c")
    assert p.function == "kernel_gemm" and p.is_static
    assert "#pragma scop" in p.function_source
    assert p.function_source.rstrip().endswith("}")


def test_function_single_loop_nest(tmp_path):
    path = write_c(
        tmp_path,
        """
        static double sq(double v) { return v * v; }
        void apply(int n, double x[n]) { int i = 0; do { x[i] = sq(x[i]); } while (++i < n); }
        int main(void) { double x[7]; apply(7, x); for (int i = 0; i < 7; i++) ; return 0; }
        """,
    )
    p = load_c_problem(path)
    assert p.function == "apply" and p.sizes == {"n": 7}


def test_init_named_helper_is_not_a_candidate():
    p = load_c_problem(DATA / "init_and_kernel.c")
    assert p.function == "accumulate"
    assert p.init is not None and p.init.name == "init_data"
    assert p.sizes == {"n": 300}


def test_print_and_init_helpers_are_not_candidates():
    p = load_c_problem(DATA / "no_pragma_polybench.c")
    assert p.function == "kernel_mvt"
    assert p.init.name == "init_array" and p.init.params == ("n", "x", "A")
    assert p.sizes == {"n": 120}


def test_ambiguous_functions_listed():
    with pytest.raises(ProblemError) as err:
        load_c_problem(DATA / "two_kernels.c")
    assert "add, mul" in str(err.value)
    assert "--function NAME" in err.value.hint
    p = load_c_problem(DATA / "two_kernels.c", function="mul", sizes={"n": 5})
    assert p.function == "mul" and p.sizes_source == "cli"


def test_unknown_function_lists_available():
    with pytest.raises(ProblemError, match="'nope'.*add, mul, main"):
        load_c_problem(DATA / "two_kernels.c", function="nope")


def test_syntax_error_names_line():
    with pytest.raises(ProblemError, match=r"syntax_error\.c:4: syntax error"):
        load_c_problem(DATA / "syntax_error.c")


def test_syntax_error_line_after_include(tmp_path):
    path = write_c(tmp_path, "#include <stdio.h>\n\nvoid f(int n, double *x) {\n  x[0] = = 1;\n}\n")
    with pytest.raises(ProblemError, match=r"prob\.c:4:"):
        load_c_problem(path)


def test_preprocessor_failure_reports_first_error():
    with pytest.raises(ProblemError, match="helpers.h: No such file"):
        load_c_problem(DATA / "static_setup.c")


def test_non_void_function_rejected():
    with pytest.raises(ProblemError, match="write the result through a pointer parameter"):
        load_c_problem(DATA / "nonvoid.c")


def test_cpp_args_normalised_and_checked(tmp_path):
    p = load_c_problem(DATA / "gemm.c", cpp_args=["-DNI=20", "-D", "UNUSED", "-I", "rel/dir"])
    assert p.cpp_args == ("-DNI=20", "-DUNUSED", f"-I{Path('rel/dir').absolute()}")
    assert p.sizes["ni"] == 20
    with pytest.raises(ProblemError, match="unsupported preprocessor argument '-O2'"):
        load_c_problem(DATA / "gemm.c", cpp_args=["-O2"])


def test_missing_compiler():
    with pytest.raises(ToolchainError, match="not found"):
        load_c_problem(DATA / "gemm.c", cc="/nonexistent/cc-for-cudaperf-tests")


def test_main_cannot_be_ported():
    with pytest.raises(ProblemError, match="'main' cannot be ported"):
        load_c_problem(DATA / "gemm.c", function="main")


def test_missing_file():
    with pytest.raises(ProblemError, match="not found"):
        load_c_problem(DATA / "does_not_exist.c")


def test_file_never_modified():
    path = DATA / "gemm.c"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    load_c_problem(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


# ---------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------


def test_sizes_from_main_literal():
    p = load_c_problem(DATA / "saxpy_annotated.c")
    assert p.sizes == {"n": 1000} and p.sizes_source == "main"


def test_sizes_from_main_locals_and_macros():
    p = load_c_problem(DATA / "gemm.c")
    assert p.sizes == {"ni": 40, "nj": 50, "nk": 70}
    p = load_c_problem(DATA / "gemm.c", cpp_args=["-D", "NI=33"])
    assert p.sizes["ni"] == 33
    assert p.param("C").extents == ("33", "50")


def test_sizes_through_a_chain_of_locals():
    p = load_c_problem(DATA / "static_setup.c", cpp_args=INCLUDE)  # int size = N; int n = size;
    assert p.sizes == {"n": 64}
    p = load_c_problem(DATA / "static_setup.c", cpp_args=[*INCLUDE, "-DN=77"])
    assert p.sizes == {"n": 77}


def test_sizes_from_expressions_and_reassignment():
    p = load_c_problem(DATA / "c99_extents.c")  # m = n * 2; steps = steps + 10
    assert p.sizes == {"n": 1000, "m": 2000, "tsteps": 20}


def test_sizes_when_call_is_inside_a_loop():
    p = load_c_problem(DATA / "setup_via_main.c", function="histogram")
    assert p.sizes == {"n": 1024, "bins": 8}


def test_sizes_from_globals_and_forgotten_locals(tmp_path):
    path = write_c(
        tmp_path,
        """
        #include <stdio.h>
        static const int LEN = 77;
        int changing = 5;
        void bump(void) { changing++; }
        void f(int a, int b, int c, int d, double x[a]) { for (int i = 0; i < a; i++) x[i] = b + c + d; }
        int main(void)
        {
          int c = 9, d = 4;
          if (scanf("%d", &d) != 1) return 1;  /* d is read at run time */
          f(LEN, changing, c, d, 0);
          return 0;
        }
        """,
    )
    with pytest.raises(ProblemError) as err:
        load_c_problem(path)
    assert "size parameters b, d " in str(err.value)
    assert err.value.hint == "pass --size b=VALUE --size d=VALUE"
    p = load_c_problem(path, sizes={"b": 2, "d": 3})
    assert p.sizes == {"a": 77, "b": 2, "c": 9, "d": 3} and p.sizes_source == "cli+main"


def test_size_override_and_source():
    p = load_c_problem(DATA / "gemm.c", sizes={"nk": 9})
    assert p.sizes == {"ni": 40, "nj": 50, "nk": 9}
    assert p.sizes_source == "cli+main"
    p = load_c_problem(DATA / "gemm.c", sizes={"ni": 1, "nj": 2, "nk": 3})
    assert p.sizes_source == "cli"


def test_unknown_size_name():
    with pytest.raises(ProblemError, match="unknown size name N.*ni, nj, nk"):
        load_c_problem(DATA / "gemm.c", sizes={"N": 10})


def test_missing_size_lists_names_and_flag(tmp_path):
    path = write_c(
        tmp_path,
        """
        #include <stdlib.h>
        void f(int n, int m, double A[n][m]) { for (int i = 0; i < n * m; i++) A[0][i] = 0; }
        int main(int argc, char **argv) { int n = atoi(argv[1]); f(n, 3, 0); return 0; }
        """,
    )
    with pytest.raises(ProblemError) as err:
        load_c_problem(path)
    assert "size parameter n " in str(err.value)
    assert err.value.hint == "pass --size n=VALUE"
    assert load_c_problem(path, sizes={"n": 6}).sizes == {"n": 6, "m": 3}


def test_sizes_must_be_positive():
    with pytest.raises(ProblemError, match="must be positive"):
        load_c_problem(DATA / "gemm.c", sizes={"ni": 0})


# ---------------------------------------------------------------------------------------
# Init functions
# ---------------------------------------------------------------------------------------


def test_init_with_scalar_outputs():
    p = load_c_problem(DATA / "gemm.c")
    assert p.init is not None
    assert p.init.name == "init_array"  # not print_array, which writes nothing
    assert p.init.params == ("ni", "nj", "nk", "alpha", "beta", "C", "A", "B")
    assert p.init.scalar_outputs == ("alpha", "beta")


def test_init_called_by_main_without_init_name():
    p = load_c_problem(DATA / "setup_via_main.c", function="histogram")
    assert p.init is not None and p.init.name == "fill"
    assert p.init.params == ("n", "v") and p.init.scalar_outputs == ()
    assert p.param("h").dtype == "int64" and p.param("v").const


def test_explicit_init_and_errors():
    p = load_c_problem(DATA / "setup_via_main.c", function="histogram", init="report")
    assert p.init.name == "report"
    p = load_c_problem(DATA / "setup_via_main.c", function="histogram", init="none")
    assert p.init is None
    with pytest.raises(ProblemError, match="'nofunc' is not defined.*fill, report"):
        load_c_problem(DATA / "setup_via_main.c", function="histogram", init="nofunc")
    with pytest.raises(ProblemError, match="'main' cannot be the init function"):
        load_c_problem(DATA / "setup_via_main.c", function="histogram", init="main")


def test_incompatible_explicit_init(tmp_path):
    path = write_c(
        tmp_path,
        """
        void init(int n, double *x, int *flag) { for (int i = 0; i < n; i++) x[i] = *flag; }
        void k(int n, double x[n]) { for (int i = 0; i < n; i++) x[i] *= 2; }
        """,
    )
    with pytest.raises(ProblemError, match="'init' cannot initialise.*'flag'"):
        load_c_problem(path, function="k", init="init", sizes={"n": 3})
    # Not detected automatically either.
    assert load_c_problem(path, function="k", sizes={"n": 3}).init is None


def test_coefficient_by_value_is_not_an_init(tmp_path):
    path = write_c(
        tmp_path,
        """
        void init_x(int n, double a, double *x) { for (int i = 0; i < n; i++) x[i] = a; }
        void k(int n, double a, double x[n]) { for (int i = 0; i < n; i++) x[i] *= a; }
        """,
    )
    assert load_c_problem(path, function="k", sizes={"n": 3}).init is None


# ---------------------------------------------------------------------------------------
# small_sizes
# ---------------------------------------------------------------------------------------


def _problem_with_sizes(sizes: dict[str, int]) -> CProblem:
    params = tuple(ScalarParam(n, "int", ScalarKind.SIZE) for n in sizes)
    arr = ArrayParam("A", "double", (next(iter(sizes)),))
    return CProblem(Path("x.c"), "f", params + (arr,), dict(sizes))


def test_small_sizes_examples():
    p = load_c_problem(DATA / "c99_extents.c")
    assert small_sizes(p) == {"n": 49, "m": 99, "tsteps": 3}
    p = load_c_problem(DATA / "gemm.c")
    assert small_sizes(p) == {"ni": 39, "nj": 49, "nk": 69}
    assert small_sizes(_problem_with_sizes({"n": 4096, "m": 4096})) == {"n": 99, "m": 99}
    assert small_sizes(_problem_with_sizes({"n": 64})) == {"n": 63}
    assert small_sizes(_problem_with_sizes({"n": 99, "m": 100})) == {"n": 97, "m": 99}
    assert small_sizes(_problem_with_sizes({"ni": 1000, "nj": 1100, "nk": 1200})) == {
        "ni": 83, "nj": 91, "nk": 99,  # the example of docs/c-problems.md
    }


@pytest.mark.parametrize("seed", range(40))
def test_small_sizes_properties(seed):
    rng = random.Random(seed)
    names = ["n", "m", "k", "l", "p"][: rng.randint(1, 5)]
    pool = [rng.choice([32, 64, 100, 128, 500, 1000, 1024, 2000, 4096, 10000]) for _ in names]
    sizes = {name: rng.choice(pool) for name in names}
    if rng.random() < 0.5:
        sizes["tsteps"] = rng.choice([3, 10, 100, 500])
    small = small_sizes(_problem_with_sizes(sizes))
    assert small == small_sizes(_problem_with_sizes(sizes))  # deterministic
    assert list(small) == list(sizes)
    for name, value in small.items():
        assert 3 <= value <= sizes[name]
        assert value % 2 == 1 and value % 32 != 0
        assert value <= 100
    if "tsteps" in small:
        assert small["tsteps"] == 3
    others = [n for n in names]
    for a in others:
        for b in others:
            if sizes[a] == sizes[b]:
                assert small[a] == small[b]
            elif sizes[a] < sizes[b]:
                assert small[a] < small[b]


def test_small_sizes_keeps_extents_positive():
    params = (ScalarParam("n", "int", ScalarKind.SIZE), ArrayParam("A", "double", ("n-6",)))
    p = CProblem(Path("x.c"), "f", params, {"n": 4000})
    small = small_sizes(p)
    assert small["n"] % 2 == 1 and small["n"] > 6


def test_small_sizes_tiny_main_values():
    small = small_sizes(_problem_with_sizes({"n": 1, "m": 2, "k": 3, "t": 2}))
    assert small == {"n": 1, "m": 2, "k": 3, "t": 2}


def test_step_count_names():
    for name in ["t", "tsteps", "TSTEPS", "steps", "nsteps", "iter", "iters", "niter", "n_iter",
                 "max_iter", "timesteps"]:
        assert is_step_count(name), name
    for name in ["n", "m", "nx", "ni", "tile", "size", "nt_x"]:
        assert not is_step_count(name), name


# ---------------------------------------------------------------------------------------
# Reference library
# ---------------------------------------------------------------------------------------


def test_reference_gemm_with_init(tmp_path):
    p = load_c_problem(DATA / "gemm.c")
    ref = build_reference(p, tmp_path / "ref")
    assert ref.lib_path.is_file() and ref.lib_path.parent == (tmp_path / "ref").resolve()
    assert ref.ref_symbol == "cudaperf_ref_kernel_gemm"
    assert ref.init_symbol == "cudaperf_init_kernel_gemm"
    assert ref.baseline_name == "gcc -O3, 1 thread"
    assert ref.cflags == ("-O3",) and "-fopenmp" not in ref.command
    kernel, init = load_ref(ref, p)

    ni, nj, nk = 40, 50, 70
    C, A, B = np.zeros((ni, nj)), np.zeros((ni, nk)), np.zeros((nk, nj))
    alpha, beta = np.zeros(1), np.zeros(1)
    init(ni, nj, nk, alpha.ctypes.data, beta.ctypes.data, C.ctypes.data, A.ctypes.data,
         B.ctypes.data)
    assert (alpha[0], beta[0]) == (1.5, 1.2)
    i, j = np.meshgrid(np.arange(ni), np.arange(nj), indexing="ij")
    np.testing.assert_allclose(C, ((i * j + 1) % ni) / ni)

    rng = np.random.default_rng(0)
    A[:], B[:], C[:] = rng.random(A.shape), rng.random(B.shape), rng.random(C.shape)
    expected = 1.2 * C + 1.5 * A @ B
    kernel(ni, nj, nk, 1.5, 1.2, C.ctypes.data, A.ctypes.data, B.ctypes.data)
    np.testing.assert_allclose(C, expected, rtol=1e-12)


def test_reference_tiny_matmul_c99(tmp_path):
    path = write_c(
        tmp_path,
        """
        #include <stdio.h>
        void init_mm(int n, int m, int k, double *alpha, double A[n][k], double B[k][m])
        {
          *alpha = 0.5;
          for (int i = 0; i < n; i++) for (int p = 0; p < k; p++) A[i][p] = i + p;
          for (int p = 0; p < k; p++) for (int j = 0; j < m; j++) B[p][j] = p - j;
        }
        void mm(int n, int m, int k, double alpha, const double A[n][k], const double B[k][m],
                double C[n][m])
        {
        #pragma scop
          for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
              double acc = 0;
              for (int p = 0; p < k; p++) acc += A[i][p] * B[p][j];
              C[i][j] = alpha * acc;
            }
        #pragma endscop
        }
        int main(void) { printf("unused\\n"); return 0; }
        """,
    )
    p = load_c_problem(path, sizes={"n": 3, "m": 5, "k": 7})
    assert p.init.scalar_outputs == ("alpha",)
    ref = build_reference(p, tmp_path / "out")
    kernel, init = load_ref(ref, p)
    n, m, k = 3, 5, 7
    A, B, C = np.zeros((n, k)), np.zeros((k, m)), np.zeros((n, m))
    alpha = np.zeros(1)
    init(n, m, k, alpha.ctypes.data, A.ctypes.data, B.ctypes.data)
    kernel(n, m, k, alpha[0], A.ctypes.data, B.ctypes.data, C.ctypes.data)
    ii, pp = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    p2, jj = np.meshgrid(np.arange(k), np.arange(m), indexing="ij")
    np.testing.assert_allclose(C, 0.5 * (ii + pp) @ (p2 - jj))


def test_reference_static_function_with_setup_main(tmp_path):
    p = load_c_problem(DATA / "static_setup.c", cpp_args=INCLUDE)
    ref = build_reference(p, tmp_path)
    assert ref.init_symbol is None
    kernel, _ = load_ref(ref, p)
    n = 9
    a = np.random.default_rng(1).random(n * n)
    s = np.zeros(n)
    kernel(n, 0.5, a.ctypes.data, s.ctypes.data)
    np.testing.assert_allclose(s, 0.5 * a.reshape(n, n).sum(axis=1))


def test_reference_int_types(tmp_path):
    p = load_c_problem(DATA / "setup_via_main.c", function="histogram")
    ref = build_reference(p, tmp_path, cflags=("-O0",))
    assert ref.baseline_name == "gcc -O0, 1 thread"
    kernel, init = load_ref(ref, p)
    n, bins = 50, 7
    v = np.zeros(n, dtype=np.int32)
    h = np.full(bins, -1, dtype=np.int64)
    init(n, v.ctypes.data)
    np.testing.assert_array_equal(v, np.arange(n) % 5)
    kernel(n, bins, v.ctypes.data, h.ctypes.data)
    np.testing.assert_array_equal(h, np.bincount(v % bins, minlength=bins))


def test_reference_compile_error(tmp_path):
    path = write_c(
        tmp_path,
        """
        void missing_helper(double *x);
        void f(int n, double x[n]) { for (int i = 0; i < n; i++) x[i] = 1; missing_helper(x); }
        """,
    )
    p = load_c_problem(path, sizes={"n": 4})
    with pytest.raises(ProblemError, match="undefined reference to .missing_helper"):
        build_reference(p, tmp_path / "out")


# ---------------------------------------------------------------------------------------
# Hostile and careless inputs (found by trying to break the CLI)
# ---------------------------------------------------------------------------------------

SCALE_1D = "// cudaperf: x[n]\nvoid f(int n, double *x) { for (int i = 0; i < n; i++) x[i] = i; }\n"


def test_non_utf8_comment_loads_and_builds(tmp_path):
    path = tmp_path / "latin1.c"
    path.write_bytes(b"/* caf\xe9 */\n" + SCALE_1D.encode())
    p = load_c_problem(path, sizes={"n": 10})
    assert p.function == "f"
    build_reference(p, tmp_path / "ref")


def test_non_utf8_code_is_a_syntax_error(tmp_path):
    path = tmp_path / "binary.c"
    path.write_bytes(SCALE_1D.encode() + b"\xff\xfe\n")
    with pytest.raises(ProblemError, match="syntax error"):
        load_c_problem(path, sizes={"n": 10})


def test_size_must_fit_its_c_type(tmp_path):
    path = write_c(tmp_path, SCALE_1D)
    with pytest.raises(ProblemError, match=r"n=99999999999 .* does not fit its C type 'int'"):
        load_c_problem(path, sizes={"n": 99999999999})
    assert load_c_problem(path, sizes={"n": 2**31 - 1}).sizes == {"n": 2**31 - 1}
    small = write_c(
        tmp_path,
        "void f(unsigned char n, double x[n]) { for (int i = 0; i < n; i++) x[i] = i; }\n",
        "uc.c",
    )
    with pytest.raises(ProblemError, match="at most 255"):
        load_c_problem(small, sizes={"n": 256})


def test_file_without_c_suffix_is_read_as_c(tmp_path):
    path = write_c(tmp_path, SCALE_1D, "kernel_source")
    assert load_c_problem(path, sizes={"n": 4}).function == "f"


def test_quote_in_file_name_still_builds_the_reference(tmp_path):
    path = write_c(tmp_path, SCALE_1D, "we'ird \"name\".c")
    p = load_c_problem(path, sizes={"n": 4})
    ref = build_reference(p, tmp_path / "ref")
    fn, _ = load_ref(ref, p)
    x = np.zeros(4)
    fn(4, x.ctypes.data)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_comment_closer_in_path_does_not_break_the_wrapper(tmp_path):
    folder = tmp_path / "a*"  # the absolute path holds "*/"
    folder.mkdir()
    path = write_c(folder, SCALE_1D, "x.c")
    build_reference(load_c_problem(path, sizes={"n": 4}), tmp_path / "ref")


def test_newline_in_file_name_is_refused(tmp_path):
    path = write_c(tmp_path, SCALE_1D, "two\nlines.c")
    with pytest.raises(ProblemError, match="newline"):
        load_c_problem(path, sizes={"n": 4})


def test_unbalanced_quote_in_cc_is_a_toolchain_error(tmp_path):
    path = write_c(tmp_path, SCALE_1D)
    with pytest.raises(ToolchainError, match="No closing quotation"):
        load_c_problem(path, sizes={"n": 4}, cc='"gcc')


def test_include_of_dev_stdin_does_not_wait(tmp_path):
    """The preprocessor gets no stdin: a file including /dev/stdin cannot hang the CLI."""
    import os
    import subprocess
    import sys

    path = write_c(tmp_path, '#include "/dev/stdin"\n' + SCALE_1D)
    code = (
        "import sys; from pathlib import Path; from cudaperf_cli.problems.c import load_c_problem;"
        "print(load_c_problem(Path(sys.argv[1]), sizes={'n': 4}).function)"
    )
    read_end, write_end = os.pipe()  # held open: reading it would block
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path)], stdin=read_end, capture_output=True,
            text=True, timeout=60, check=False,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert proc.returncode == 0 and proc.stdout.strip() == "f", proc.stderr


def test_non_ascii_function_name_is_refused(tmp_path):
    src = tmp_path / "uni.c"
    src.write_text("void f\u00e9(int n, double x[n]) { for (int i = 0; i < n; i++) x[i] *= 2; }\n",
                   encoding="utf-8")
    with pytest.raises(ProblemError, match="not ASCII"):
        load_c_problem(src, sizes={"n": 8})


# ---------------------------------------------------------------------------------------
# edge_sizes
# ---------------------------------------------------------------------------------------


def test_edge_sizes_are_the_smallest_in_the_same_order():
    from cudaperf_cli.problems.c import edge_sizes

    assert edge_sizes(_problem_with_sizes({"ni": 1000, "nj": 1100, "nk": 1200})) == {
        "ni": 1, "nj": 2, "nk": 3}
    assert edge_sizes(_problem_with_sizes({"n": 4096, "m": 4096, "tsteps": 500})) == {
        "n": 1, "m": 1, "tsteps": 1}
    # an extent n - 6 needs n >= 7: every size is raised together, the order kept
    params = (ScalarParam("n", "int", ScalarKind.SIZE), ScalarParam("m", "int", ScalarKind.SIZE),
              ArrayParam("A", "double", ("n-6", "m")))
    p = CProblem(Path("x.c"), "f", params, {"n": 4000, "m": 10})
    assert edge_sizes(p) == {"n": 7, "m": 6}
    # nothing smaller than the small configuration: none
    assert edge_sizes(_problem_with_sizes({"n": 1, "m": 2})) is None


def test_verification_configs_start_with_the_edge_configuration():
    from cudaperf_cli.agent.kinds.c import verification_configs

    p = load_c_problem(DATA / "gemm.c")
    cfgs = verification_configs(p)
    assert [c["name"] for c in cfgs] == ["edge", "small-odd", "main"]
    assert cfgs[0]["sizes"] == {"ni": 1, "nj": 2, "nk": 3} and not cfgs[0]["time"]
    assert [c["time"] for c in cfgs] == [False, False, True]
