"""The compute-sanitizer stage on a real GPU (``@pytest.mark.gpu``; skipped without a CUDA
device or without compute-sanitizer): an honest candidate passes memcheck and initcheck; a
kernel writing 1 MiB past its output (beyond the 64 KiB guard zones) is caught by memcheck;
a kernel reading a cudaMalloc'd scratch buffer it never wrote is caught by initcheck, while
the ordinary evaluation calls it correct.  Each assertion carries the stage's record.

Run: ``python -m pytest -m gpu tests/test_gpu_sanitize.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cudaperf_cli.build import build_candidate, detect_arch
from cudaperf_cli.core import param_to_json
from cudaperf_cli.evaluate import ConfigSpec, EvalJob, TimingSettings, run_evaluation
from cudaperf_cli.evaluate.sanitize import find_compute_sanitizer, run_sanitizer, sanitizer_version
from tests.eval_refs import REF_C, SAXPY_PARAMS

pytestmark = pytest.mark.gpu

HONEST = r"""
#include <cuda_runtime.h>
__global__ void saxpy_k(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" int saxpy_cuda(int n, float a, float* x, float* y) {
  if (n <= 0) return 0;
  saxpy_k<<<(n + 255) / 256, 256>>>(n, a, x, y);
  return (int)cudaGetLastError();
}
"""

FAR_WRITE = r"""
#include <cuda_runtime.h>
__global__ void saxpy_far(int n, float a, const float* __restrict__ x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
  if (i == 0) y[(size_t)n + (1u << 18)] = 1.0f;  // 1 MiB past the end of y
}
extern "C" int saxpy_cuda(int n, float a, float* x, float* y) {
  saxpy_far<<<(n + 255) / 256, 256>>>(n, a, x, y);
  return (int)cudaGetLastError();
}
"""

UNINIT_READ = r"""
#include <cuda_runtime.h>
__global__ void saxpy_stale(int n, float a, const float* __restrict__ x, float* __restrict__ y,
                            const int* scratch) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int s = scratch[i % 1024];                     // never written by anyone
  float r = a * x[i] + y[i];
  y[i] = (s == 0x7fabcdef) ? 0.0f : r;           // (never true in practice)
}
extern "C" int saxpy_cuda(int n, float a, float* x, float* y) {
  static int* scratch = nullptr;
  if (!scratch && cudaMalloc(&scratch, 1024 * sizeof(int)) != cudaSuccess) return (int)cudaGetLastError();
  saxpy_stale<<<(n + 255) / 256, 256>>>(n, a, x, y, scratch);
  return (int)cudaGetLastError();
}
"""

TIMING = TimingSettings(warmup_reps=1, min_reps=5, max_reps=50, min_total_ms=10.0)


@pytest.fixture(scope="module")
def tool() -> str:
    exe = find_compute_sanitizer()
    if exe is None:
        pytest.skip("compute-sanitizer is not installed here")
    print(f"\ncompute-sanitizer: {exe} {sanitizer_version(exe)}")
    return exe


@pytest.fixture(scope="module")
def arch() -> str:
    a = detect_arch()
    if a is None:
        pytest.skip("no CUDA device")
    return a


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gpu_sanitize")


@pytest.fixture(scope="module")
def ref_lib(workdir: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (workdir / "ref.c").write_text(REF_C)
    lib = workdir / "ref.so"
    proc = subprocess.run([cc, "-O3", "-shared", "-fPIC", "-o", str(lib), str(workdir / "ref.c")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return lib


def _job(ref: Path, source: str, arch: str, workdir: Path) -> EvalJob:
    built = build_candidate(source, arch=arch, cache_root=workdir / "builds")
    assert built.ok, built.errors
    return EvalJob(ref_lib=str(ref), ref_symbol="cudaperf_ref_saxpy", cand_lib=str(built.lib_path),
                   cand_symbol="saxpy_cuda", params=[param_to_json(p) for p in SAXPY_PARAMS],
                   configs=[ConfigSpec("small-odd", {"n": 1001}, trials=2),
                            ConfigSpec("main", {"n": 1 << 20}, trials=1, time=True)],
                   timing=TIMING, cpu_reps=3)


def _show(out) -> str:  # noqa: ANN001
    return json.dumps(out.to_json(), indent=1)


def test_an_honest_candidate_is_clean(tool: str, arch: str, ref_lib: Path, workdir: Path) -> None:
    job = _job(ref_lib, HONEST, arch, workdir)
    out = run_sanitizer(job, exe=tool, timeout_s=300)
    print(_show(out))
    assert out.result == "clean", _show(out)
    assert [(t.tool, t.verdict, t.errors, t.worker_status) for t in out.tools] == [
        ("memcheck", "clean", 0, "correct"), ("initcheck", "clean", 0, "correct")], _show(out)
    assert out.config == {"name": "small-odd", "sizes": {"n": 1001}}
    print(f"stage: {out.seconds:.1f} s ({', '.join(f'{t.tool} {t.seconds:.1f} s' for t in out.tools)})")


def test_a_write_far_past_the_guard_zones_is_caught_by_memcheck(
        tool: str, arch: str, ref_lib: Path, workdir: Path) -> None:
    job = _job(ref_lib, FAR_WRITE, arch, workdir)
    plain = run_evaluation(job, timeout_s=300)
    print(f"without the tool: {plain.status}: {plain.message}")
    out = run_sanitizer(job, exe=tool, timeout_s=300)
    print(_show(out))
    assert out.rejected and out.tools[0].tool == "memcheck" and out.tools[0].verdict == "errors", _show(out)
    assert out.message.startswith("memcheck: Invalid __global__ write of size 4 bytes"), out.message
    assert "saxpy_far" in out.message and len(out.tools) == 1, _show(out)


def test_a_read_of_memory_nobody_wrote_is_caught_by_initcheck(
        tool: str, arch: str, ref_lib: Path, workdir: Path) -> None:
    job = _job(ref_lib, UNINIT_READ, arch, workdir)
    plain = run_evaluation(job, timeout_s=300)
    assert plain.status == "correct", f"{plain.status}: {plain.message}"  # the worker alone is fooled
    out = run_sanitizer(job, exe=tool, timeout_s=300)
    print(_show(out))
    assert [t.verdict for t in out.tools] == ["clean", "errors"], _show(out)  # memcheck sees nothing
    assert out.rejected and out.message.startswith("initcheck: Uninitialized __global__ memory read"), out.message
    assert "saxpy_stale" in out.message, out.message
