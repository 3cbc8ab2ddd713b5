"""cudaperf_cli.torch_runtime on the CPU: launcher signatures, real nvcc builds, errors,
argument checks, the cache and relative paths.  Launching kernels needs a GPU
(tests/test_gpu_torch_eval.py)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cudaperf_cli.torch_runtime import (
    ARCH_ENV,
    BUILD_ROOT_ENV,
    CudaCompileError,
    LauncherSignatureError,
    compile_cuda,
    default_build_root,
    load_cuda,
    parse_launchers,
    resolve_arch,
)

KERNEL = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scaled_relu_kernel(const float *__restrict__ x, float *__restrict__ y,
                                   int64_t n, float scale)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f) * scale;
}

extern "C" int scaled_relu(const float *x, float *y, int64_t n, float scale, cudaStream_t stream)
{
    if (n > 0) scaled_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n, scale);
    return (int)cudaGetLastError();
}

extern "C" int return_code(int code, cudaStream_t stream) { return code; }
"""


# ---------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------


def test_parse_reads_single_and_block_declarations() -> None:
    src = r"""
    #include <cuda_runtime.h>
    #define API extern "C"
    // extern "C" int commented_out(float *x, cudaStream_t s);
    /* extern "C" int also_commented(float *x, cudaStream_t s); */
    static const char *note = "extern \"C\" int in_a_string(int n, cudaStream_t s);";
    __global__ void __launch_bounds__(256) k(const float *__restrict__ x, float *y) {}
    extern "C" __global__ void exported_kernel(float *x) {}
    extern "C" int relu(const float *__restrict__ x, float *y, int64_t n, cudaStream_t stream) {
        if (n > 0) { k<<<1, 1, 0, stream>>>(x, y); }
        return (int)cudaGetLastError();
    }
    extern "C" {
    int axpy(int n, double a, const double *x, double *y, cudaStream_t);
    static const char *helper(int code) { return "not a launcher"; }
    cudaError_t mixed(const __half *h, __nv_bfloat16 *b, void *any, unsigned int u,
                      std::size_t m, long long ll, bool flag, cudaStream_t s) { return cudaSuccess; }
    int axpy(int n, double a, const double *x, double *y, cudaStream_t stream) { return 0; }
    }
    """
    sigs = {s.name: s for s in parse_launchers(textwrap.dedent(src))}
    assert list(sigs) == ["relu", "axpy", "mixed"]
    relu = sigs["relu"]
    assert [(p.name, p.ctype, p.pointer, p.const, p.dtype) for p in relu.params] == [
        ("x", "float", True, True, "float32"),
        ("y", "float", True, False, "float32"),
        ("n", "int64_t", False, False, None),
    ]
    assert relu.describe() == (
        "int relu(const float *x, float *y, int64_t n, cudaStream_t stream)"
    )
    assert relu.argtypes() == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    axpy = sigs["axpy"]
    assert [p.ctype for p in axpy.params] == ["int", "double", "double", "double"]
    assert axpy.argtypes()[:2] == [ctypes.c_int32, ctypes.c_double]
    mixed = sigs["mixed"]
    assert mixed.return_type == "cudaError_t"
    assert [p.dtype for p in mixed.params if p.pointer] == ["float16", "bfloat16", None]
    assert [p.ctype for p in mixed.params if not p.pointer] == [
        "unsigned int", "size_t", "long long", "bool"
    ]


def test_parse_names_unnamed_parameters() -> None:
    (sig,) = parse_launchers('extern "C" int f(const float *, int, cudaStream_t);')
    assert [p.name for p in sig.params] == ["arg0", "arg1"]


@pytest.mark.parametrize(
    "src, words",
    [
        ("__global__ void k(float *x) {}", ['no extern "C" launcher found', "cudaStream_t stream"]),
        ('extern "C" int f(float &x, cudaStream_t s);', ["parameter 1 'float &x'", "supported:"]),
        ('extern "C" int f(float4 *x, cudaStream_t s);', ["type 'float4 *'"]),
        ('extern "C" int f(float **x, cudaStream_t s);', ["pointer to a pointer"]),
        ('struct P { int a; }; extern "C" int f(P p, cudaStream_t s);', ["type 'P'"]),
        ('extern "C" int f(float *x, int n);', ["does not take a cudaStream_t"]),
        ('extern "C" void f(float *x, cudaStream_t s) {}', ["returns 'void'"]),
        ('extern "C" int f(cudaStream_t s, float *x);', ["must be the last parameter"]),
        ('extern "C" int f(float x[], cudaStream_t s);', ["not supported"]),
    ],
)
def test_parse_errors_name_the_problem(src: str, words: list[str]) -> None:
    with pytest.raises(LauncherSignatureError) as ei:
        parse_launchers(src)
    for w in words:
        assert w in str(ei.value), str(ei.value)


# ---------------------------------------------------------------------------------------
# Building (real nvcc, no GPU needed)
# ---------------------------------------------------------------------------------------


@pytest.fixture
def kernel_file(tmp_path: Path, nvcc_path: str) -> Path:
    p = tmp_path / "kernel.cu"
    p.write_text(KERNEL)
    return p


def test_load_cuda_builds_caches_and_sets_argtypes(kernel_file: Path, tmp_path: Path) -> None:
    root = tmp_path / "builds"
    lib = load_cuda(kernel_file, build_root=root, arch="sm_90")
    assert sorted(lib.launchers) == ["return_code", "scaled_relu"]
    assert lib.path.is_file() and lib.path.parent.parent == root
    assert lib.build is not None and not lib.build.cached
    assert any("scaled_relu_kernel" in r.demangled for r in lib.build.resources)
    assert lib.scaled_relu._fn.argtypes == [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    ]
    assert lib.scaled_relu._fn.restype is ctypes.c_int
    assert "float scale" in lib.scaled_relu.__doc__
    with pytest.raises(AttributeError, match="launchers: return_code, scaled_relu"):
        lib.no_such_launcher  # noqa: B018
    t0 = time.monotonic()
    again = load_cuda(kernel_file, build_root=root, arch="sm_90")
    assert again is lib  # same library object, nothing rebuilt
    assert time.monotonic() - t0 < 5
    res = compile_cuda(KERNEL, build_root=root, arch="sm_90")
    assert res.cached and res.lib_path == lib.path


def test_source_text_and_env_defaults(tmp_path: Path, nvcc_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUILD_ROOT_ENV, str(tmp_path / "envroot"))
    monkeypatch.setenv(ARCH_ENV, "sm_80")
    assert default_build_root() == tmp_path / "envroot"
    assert resolve_arch() == "sm_80" and resolve_arch("sm_90") == "sm_90"
    lib = load_cuda('extern "C" int nothing(int n, cudaStream_t s) { return n; }\n')
    assert lib.path.parent.parent == tmp_path / "envroot"
    assert lib.build is not None and lib.build.arch == "sm_80"
    assert lib.source_path is None


def test_nonzero_return_raises_with_the_cuda_error_text(kernel_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    lib = load_cuda(kernel_file, build_root=tmp_path / "b", arch="sm_90")
    lib.return_code(0, stream=0)  # success returns None
    with pytest.raises(RuntimeError) as ei:
        lib.return_code(2, stream=0)
    assert str(ei.value) == "return_code failed: cudaErrorMemoryAllocation (2): out of memory"
    with pytest.raises(RuntimeError, match=r"cudaErrorInvalidValue \(1\): invalid argument"):
        lib.return_code(1, stream=0)


def test_argument_checks(kernel_file: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    lib = load_cuda(kernel_file, build_root=tmp_path / "b", arch="sm_90")
    x = torch.zeros(8)
    with pytest.raises(TypeError, match=r"takes 4 argument\(s\).*got 3"):
        lib.scaled_relu(x, x, 8)
    with pytest.raises(TypeError, match="needs a torch.Tensor, got list"):
        lib.scaled_relu([0.0], x, 8, 1.0)
    with pytest.raises(TypeError, match=r"torch.float64 tensor but the parameter is float\* \(torch.float32\)"):
        lib.scaled_relu(torch.zeros(8, dtype=torch.float64), x, 8, 1.0)
    with pytest.raises(ValueError, match="not contiguous"):
        lib.scaled_relu(torch.zeros(4, 4).t(), x, 8, 1.0)
    with pytest.raises(ValueError, match="is on cpu; it must be a CUDA tensor"):
        lib.scaled_relu(x, x, 8, 1.0)
    with pytest.raises(TypeError, match="is a scalar; pass a Python number"):
        lib.scaled_relu(None, None, torch.tensor(8), 1.0)  # None: a null pointer
    with pytest.raises(TypeError, match="needs an integer, got float"):
        lib.scaled_relu(None, None, 8.0, 1.0)
    with pytest.raises(TypeError, match="needs a number, got str"):
        lib.scaled_relu(None, None, 8, "1.0")
    with pytest.raises(ValueError, match="does not fit int"):
        lib.return_code(1 << 40, stream=0)


def test_compile_error_carries_nvcc_text_with_the_file_name(tmp_path: Path, nvcc_path: str) -> None:
    bad = tmp_path / "broken.cu"
    bad.write_text(
        'extern "C" int f(float *x, cudaStream_t s)\n{\n    undeclared_thing = 1;\n    return 0;\n}\n'
    )
    with pytest.raises(CudaCompileError) as ei:
        load_cuda(bad, build_root=tmp_path / "b", arch="sm_90")
    e = ei.value
    assert e.status == "compile_error"
    assert 'broken.cu(3): error: identifier "undeclared_thing" is undefined' in e.errors
    assert "candidate.cu" not in e.errors and "candidate.cu" not in e.log
    assert str(e).startswith("nvcc failed to compile broken.cu:\n")


def test_missing_launcher_is_refused_before_compiling(tmp_path: Path) -> None:
    p = tmp_path / "k.cu"
    p.write_text("__global__ void k(float *x) { x[0] = 1; }\n")
    with pytest.raises(LauncherSignatureError, match='no extern "C" launcher found in k.cu'):
        load_cuda(p, build_root=tmp_path / "never-created")
    assert not (tmp_path / "never-created").exists()


def test_compile_timeout(tmp_path: Path, nvcc_path: str) -> None:
    with pytest.raises(CudaCompileError) as ei:
        load_cuda(KERNEL, build_root=tmp_path / "b", arch="sm_90", timeout_s=0.05)
    assert ei.value.status == "compile_timeout"
    assert "within 0.05 s" in str(ei.value)


def test_missing_file_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope.cu")):
        load_cuda(tmp_path / "nope.cu")


def test_relative_path_resolves_against_the_calling_module(tmp_path: Path, nvcc_path: str) -> None:
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "kernel.cu").write_text(KERNEL)
    (cand / "model.py").write_text(
        "from cudaperf_cli.torch_runtime import load_cuda\n"
        f"lib = load_cuda('kernel.cu', build_root={str(tmp_path / 'b')!r}, arch='sm_90')\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('m', {str(cand / 'model.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(sorted(m.lib.launchers), m.lib.source_path)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"['return_code', 'scaled_relu'] {cand / 'kernel.cu'}"


def test_importing_the_runtime_does_not_import_torch() -> None:
    code = "import sys, cudaperf_cli.torch_runtime; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"

