"""C problems as suites ship them (CPU only): extra C sources linked into the reference
(PolyBench's utilities/polybench.c), typedef'd element types, canonical integer types."""

from __future__ import annotations

import ctypes
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cudaperf_cli.core import ArrayParam, ProblemError, ScalarKind, dtype_of, normalize_ctype
from cudaperf_cli.problems.c import (
    build_reference,
    init_argtypes,
    load_c_problem,
    reference_argtypes,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# A problem whose init function allocates scratch memory through a function that only an
# extra source defines (the shape of PolyBench's cholesky/lu/ludcmp and polybench.c).
ALLOC_PROBLEM = """\
    #include <stdlib.h>
    #include "alloc.h"

    static void init_array(int n, double A[n]) {
      double *tmp = scratch_alloc(n);
      for (int i = 0; i < n; i++) tmp[i] = i + 1;
      for (int i = 0; i < n; i++) A[i] = tmp[n - 1 - i] * SCALE;
      scratch_free(tmp);
    }

    static void kernel_twice(int n, double A[n]) {
    #pragma scop
      for (int i = 0; i < n; i++) A[i] = 2 * A[i];
    #pragma endscop
    }

    int main(void) {
      int n = 40;
      double *A = malloc(n * sizeof(double));
      init_array(n, A);
      kernel_twice(n, A);
      return 0;
    }
"""

ALLOC_HEADER = """\
    double *scratch_alloc(int n);
    void scratch_free(double *p);
"""

ALLOC_SOURCE = """\
    #include <stdlib.h>
    #include "alloc.h"
    #ifndef SCALE
    #error SCALE must come from the problem's -D flags
    #endif
    double *scratch_alloc(int n) { return calloc(n, sizeof(double)); }
    void scratch_free(double *p) { free(p); }
    int main(void) { return 0; }  /* a source's own main is renamed out of the way */
"""


@pytest.fixture
def alloc_files(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    prob = write(tmp_path / "prob" / "twice.c", ALLOC_PROBLEM)
    write(tmp_path / "util" / "alloc.h", ALLOC_HEADER)
    src = write(tmp_path / "util" / "alloc.c", ALLOC_SOURCE)
    return prob, src, ["-I", str(tmp_path / "util"), "-D", "SCALE=3"]


def _call(ref, problem, n: int) -> np.ndarray:
    lib = ctypes.CDLL(str(ref.lib_path))
    init = getattr(lib, ref.init_symbol)
    init.argtypes, init.restype = init_argtypes(problem), None
    fn = getattr(lib, ref.ref_symbol)
    fn.argtypes, fn.restype = reference_argtypes(problem), None
    a = np.zeros(n)
    init(n, a.ctypes.data)
    fn(n, a.ctypes.data)
    return a


def test_extra_source_is_compiled_and_linked(alloc_files, tmp_path: Path) -> None:
    prob, src, cpp = alloc_files
    problem = load_c_problem(prob, cpp_args=cpp, sources=[src])
    assert problem.sources == (src.resolve(),)
    assert problem.init is not None and problem.init.name == "init_array"
    ref = build_reference(problem, tmp_path / "ref")
    assert ref.sources == (src.resolve(),) and len(ref.source_commands) == 1
    assert "-DSCALE=3" in ref.source_commands[0] and "-c" in ref.source_commands[0]
    out = _call(ref, problem, 40)
    # init: A[i] = (n - i) * 3 (SCALE from -D reaches the problem), kernel doubles it
    np.testing.assert_array_equal(out, 2 * 3 * (40 - np.arange(40)))


def test_without_the_source_the_reference_does_not_link(alloc_files, tmp_path: Path) -> None:
    prob, _, cpp = alloc_files
    problem = load_c_problem(prob, cpp_args=cpp)
    with pytest.raises(ProblemError, match="undefined reference to .scratch_alloc"):
        build_reference(problem, tmp_path / "ref")


def test_source_given_twice_counts_once(alloc_files, tmp_path: Path) -> None:
    prob, src, cpp = alloc_files
    rel = os.path.relpath(src)  # relative to the current directory, as cc takes it
    problem = load_c_problem(prob, cpp_args=cpp, sources=[src, rel])
    assert problem.sources == (src.resolve(),)
    build_reference(problem, tmp_path / "ref")  # no duplicate symbols


def test_missing_source_is_one_line(alloc_files, tmp_path: Path) -> None:
    prob, _, cpp = alloc_files
    with pytest.raises(ProblemError, match=r"^extra C source not found: .*nothere\.c$"):
        load_c_problem(prob, cpp_args=cpp, sources=[tmp_path / "nothere.c"])


def test_folder_as_source_is_refused(alloc_files, tmp_path: Path) -> None:
    prob, _, cpp = alloc_files
    with pytest.raises(ProblemError, match="is not a file"):
        load_c_problem(prob, cpp_args=cpp, sources=[tmp_path / "util"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without read permission")
def test_unreadable_source_is_one_line(alloc_files) -> None:
    prob, src, cpp = alloc_files
    src.chmod(0)
    try:
        with pytest.raises(ProblemError, match="cannot read extra C source"):
            load_c_problem(prob, cpp_args=cpp, sources=[src])
    finally:
        src.chmod(0o644)


def test_problem_file_as_its_own_source_is_refused(alloc_files) -> None:
    prob, _, cpp = alloc_files
    with pytest.raises(ProblemError, match="is the problem file itself"):
        load_c_problem(prob, cpp_args=cpp, sources=[prob])


def test_source_that_does_not_compile_names_the_file(alloc_files, tmp_path: Path) -> None:
    prob, _, cpp = alloc_files
    bad = write(tmp_path / "util" / "broken.c", "int f(void) { return undeclared_name; }\n")
    problem = load_c_problem(prob, cpp_args=cpp, sources=[bad])
    with pytest.raises(ProblemError) as info:
        build_reference(problem, tmp_path / "ref")
    msg = str(info.value)
    assert msg.startswith(f"compiling the extra C source {bad.resolve()} failed:")
    assert "undeclared_name" in msg and "\n" not in msg


def test_source_removed_after_loading_is_one_line(alloc_files, tmp_path: Path) -> None:
    prob, src, cpp = alloc_files
    problem = load_c_problem(prob, cpp_args=cpp, sources=[src])
    src.unlink()
    with pytest.raises(ProblemError, match="extra C source not found"):
        build_reference(problem, tmp_path / "ref")


# ---------------------------------------------------------------------------------------
# Typedef'd element types
# ---------------------------------------------------------------------------------------


def test_typedef_char_resolves_like_nussinov(tmp_path: Path) -> None:
    prob = write(tmp_path / "seq.c", """\
        typedef char base;
        #define DATA_TYPE int
        static void init_array(int n, base seq[n], DATA_TYPE table[n][n]) {
          for (int i = 0; i < n; i++) { seq[i] = (base)((i + 1) % 4);
            for (int j = 0; j < n; j++) table[i][j] = 0; }
        }
        static void kernel_pairs(int n, base seq[n], DATA_TYPE table[n][n]) {
        #pragma scop
          for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) table[i][j] = seq[i] + seq[j];
        #pragma endscop
        }
        int main(void) { int n = 50; base s[50]; int t[50][50];
          init_array(n, s, t); kernel_pairs(n, s, t); return 0; }
    """)
    problem = load_c_problem(prob)
    seq, table = problem.arrays
    assert (seq.ctype, seq.dtype, seq.extents) == ("char", "int8", ("n",))
    assert (table.ctype, table.dtype) == ("int", "int32")  # DATA_TYPE: expanded by cpp
    assert problem.init is not None and problem.init.name == "init_array"
    assert problem.sizes == {"n": 50}
    ref = build_reference(problem, tmp_path / "ref")
    lib = ctypes.CDLL(str(ref.lib_path))
    init, fn = getattr(lib, ref.init_symbol), getattr(lib, ref.ref_symbol)
    init.argtypes, fn.argtypes = init_argtypes(problem), reference_argtypes(problem)
    s, t = np.zeros(7, np.int8), np.zeros((7, 7), np.int32)
    init(7, s.ctypes.data, t.ctypes.data)
    fn(7, s.ctypes.data, t.ctypes.data)
    expect = (np.arange(1, 8) % 4).astype(np.int32)
    np.testing.assert_array_equal(t, expect[:, None] + expect[None, :])


def test_typedef_chains_and_integer_spellings(tmp_path: Path) -> None:
    prob = write(tmp_path / "chain.c", """\
        typedef float real;
        typedef real real_t;
        typedef unsigned long int ulong_t;
        typedef long unsigned counter;
        typedef short int small;
        typedef const double cdouble;
        void axpy(counter n, real_t alpha, cdouble x[n], real_t y[n], ulong_t hits[n],
                  small tag[n]) {
          for (counter i = 0; i < n; i++) { y[i] += alpha * x[i]; hits[i]++; tag[i] = 1; }
        }
        int main(void) { return 0; }
    """)
    problem = load_c_problem(prob, sizes={"n": 10})
    by = {p.name: p for p in problem.params}
    assert (by["n"].ctype, by["n"].kind) == ("unsigned long", ScalarKind.SIZE)
    assert (by["alpha"].ctype, by["alpha"].kind) == ("float", ScalarKind.COEFFICIENT)
    assert (by["x"].ctype, by["x"].const) == ("double", True)  # const through the typedef
    assert (by["y"].dtype, by["hits"].dtype, by["tag"].dtype) == ("float32", "uint64", "int16")
    build_reference(problem, tmp_path / "ref")


def test_typedef_from_a_header(tmp_path: Path) -> None:
    write(tmp_path / "inc" / "types.h", "typedef double elem;\ntypedef elem vec3[3];\n")
    prob = write(tmp_path / "h.c", """\
        #include "types.h"
        void scale(int n, vec3 *p, elem s) {
          for (int i = 0; i < n; i++) for (int k = 0; k < 3; k++) p[i][k] *= s;
        }
        int main(void) { return 0; }
    """)
    with pytest.raises(ProblemError, match="no extent for array parameter 'p'") as info:
        load_c_problem(prob, cpp_args=["-I", str(tmp_path / "inc")], sizes={"n": 4})
    assert "p[n][3]" in (info.value.hint or "")  # the array typedef gives the inner extent
    prob.write_text("// cudaperf: p[n][3]\n" + prob.read_text())
    problem = load_c_problem(prob, cpp_args=["-I", str(tmp_path / "inc")], sizes={"n": 4})
    p = problem.param("p")
    assert isinstance(p, ArrayParam) and (p.ctype, p.extents) == ("double", ("n", "3"))
    assert problem.param("s").kind is ScalarKind.COEFFICIENT


def test_typedef_of_array_in_a_c99_declarator(tmp_path: Path) -> None:
    prob = write(tmp_path / "rows.c", """\
        typedef double row[8];
        typedef double *dptr;
        // cudaperf: out[n]
        void f(int n, row A[n], dptr out) {
          for (int i = 0; i < n; i++) out[i] = A[i][0] + A[i][7];
        }
        int main(void) { return 0; }
    """)
    problem = load_c_problem(prob, sizes={"n": 5})
    assert problem.param("A").extents == ("n", "8")
    assert problem.param("out").extents == ("n",)


def test_const_through_pointer_typedefs_follows_c(tmp_path: Path) -> None:
    prob = write(tmp_path / "c.c", """\
        typedef double *dp;
        typedef const double cd;
        typedef cd *cdp;
        typedef const dp const_ptr;
        // cudaperf: a[n] b[n] c[n] d[n]
        void f(int n, const dp a, cdp b, const_ptr c, dp d) {
          for (int i = 0; i < n; i++) { a[i] = b[i]; c[i] = 0; d[i] = 1; }
        }
        int main(void) { return 0; }
    """)
    problem = load_c_problem(prob, sizes={"n": 3})
    const = {a.name: a.const for a in problem.arrays}
    # const dp / const_ptr: a const pointer to writable data; cdp: pointer to const data
    assert const == {"a": False, "b": True, "c": False, "d": False}


@pytest.mark.parametrize(
    "decl, name, message",
    [
        ("typedef struct pt { double x, y; } pt_t;", "pt_t",
         r"parameter 'a': unsupported element type 'pt_t' \(a typedef of 'struct pt'\)"),
        ("typedef enum { RED, BLUE } color;", "color",
         r"parameter 'a': unsupported element type 'color' \(a typedef of 'anonymous enum'\)"),
        ("typedef long double quad;", "quad",
         r"unsupported element type 'quad' \(a typedef of 'long double'\)"),
        ("typedef double *dptr;", "dptr",
         "pointers to pointers and arrays of pointers are not supported"),
        ("typedef int fn_t(int);", "fn_t", "'fn_t' is a typedef of a function type"),
    ],
)
def test_unsupported_typedefs_are_one_line(
    tmp_path: Path, decl: str, name: str, message: str
) -> None:
    prob = write(tmp_path / "bad.c", f"""\
        {decl}
        // cudaperf: a[n]
        void f(int n, {name} *a, double *out) {{
          for (int i = 0; i < n; i++) out[i] = 0;
        }}
        int main(void) {{ return 0; }}
    """)
    with pytest.raises(ProblemError, match=message) as info:
        load_c_problem(prob, sizes={"n": 3})
    assert "\n" not in str(info.value)


def test_unknown_type_name_is_still_one_line(tmp_path: Path) -> None:
    prob = write(tmp_path / "u.c", """\
        void f(int n, __int128 *a) { for (int i = 0; i < n; i++) a[i] = 0; }
        int main(void) { return 0; }
    """)
    with pytest.raises(ProblemError, match=r"parameter 'a': unsupported element type '__int128'"):
        load_c_problem(prob, sizes={"n": 3})


def test_init_detection_with_typedefs_on_both_sides(tmp_path: Path) -> None:
    prob = write(tmp_path / "i.c", """\
        typedef float real;
        void init_data(int n, real *x) { for (int i = 0; i < n; i++) x[i] = i; }
        // cudaperf: x[n]
        void square(int n, float *x) { for (int i = 0; i < n; i++) x[i] *= x[i]; }
        int main(void) { float x[9]; init_data(9, x); square(9, x); return 0; }
    """)
    problem = load_c_problem(prob)
    assert problem.function == "square" and problem.init is not None
    assert problem.init.name == "init_data"


# ---------------------------------------------------------------------------------------
# Canonical integer spellings
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written, canonical, dtype",
    [
        ("unsigned long int", "unsigned long", "uint64"),
        ("long unsigned int", "unsigned long", "uint64"),
        ("long unsigned", "unsigned long", "uint64"),
        ("unsigned long long int", "unsigned long long", "uint64"),
        ("long long unsigned", "unsigned long long", "uint64"),
        ("long int long", "long long", "int64"),
        ("signed long", "long", "int64"),
        ("signed", "int", "int32"),
        ("unsigned", "unsigned int", "uint32"),
        ("signed int", "int", "int32"),
        ("const int", "int", "int32"),
        ("short int", "short", "int16"),
        ("unsigned short int", "unsigned short", "uint16"),
        ("signed char", "signed char", "int8"),
        ("char", "char", "int8"),
        ("char unsigned", "unsigned char", "uint8"),
        ("double", "double", "float64"),
    ],
)
def test_normalize_integer_spellings(written: str, canonical: str, dtype: str) -> None:
    assert normalize_ctype(written) == canonical
    assert dtype_of(written) == dtype


@pytest.mark.parametrize("written", ["long double", "short long", "unsigned signed int",
                                     "long long long", "char int"])
def test_invalid_or_non_integer_spellings_are_kept(written: str) -> None:
    assert normalize_ctype(written) == written
    with pytest.raises(ProblemError, match="unsupported element type"):
        dtype_of(written)
