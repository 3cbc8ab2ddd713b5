"""evaluate + build on a real GPU (``@pytest.mark.gpu``; skipped without a CUDA device).

Also: a slow kernel ends ``slow`` after its warm-up, the worker's peak device bytes equal
``plan_c_memory``'s, a candidate job reads the baseline job's stored reference outputs.

Small C references (compiled with ``cc -O3 -shared -fPIC``, defining ``cudaperf_ref_<fn>``
directly) against hand-written CUDA candidates built with :func:`build_candidate`.  Each test
asserts with the evaluation's message and stderr tail so one run on the GPU shows everything.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from cudaperf_cli.build import build_candidate, detect_arch
from cudaperf_cli.core import (
    ArrayParam,
    ScalarKind,
    ScalarParam,
    param_to_json,
    to_jsonable,
)
from cudaperf_cli.evaluate import (
    CORRECT,
    CRASH,
    READ_ONLY,
    READ_WRITE,
    RUNTIME_ERROR,
    TIMEOUT,
    WRITE_ONLY,
    WRONG,
    ConfigSpec,
    EvalJob,
    EvalResult,
    TimingSettings,
    device_info,
    probe_device,
    run_evaluation,
)
from tests.eval_refs import REF_C, SAXPY_PARAMS

pytestmark = pytest.mark.gpu

MIB = 1 << 20
CHEATS = Path(__file__).parent / "data" / "cheats"


SAXPY_CU = r"""
#include <cuda_runtime.h>
#include <cstdio>
#ifndef LIMIT
#define LIMIT (i < n)
#endif
__global__ void saxpy_k(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef WILD
  if (i == 0) { float* p = (float*)0x10; p[0] = 1.0f; }
#endif
#ifdef SPIN
  if (i == 0) { volatile float* v = y; while (v[0] != -12345.0f) { } }
#endif
#ifdef HELLO
  if (i == 0) printf("hello from the GPU\n");
#endif
  if (LIMIT) y[i] = a * x[i] + y[i];
}
__global__ void poke(float* x) { x[3] = 0.0f; }
extern "C" int saxpy_cuda(int n, float a, float* x, float* y) {
#ifdef CACHE_HACK
  static int calls = 0;
  if (++calls > 4) return 0;
#endif
  if (n <= 0) return 0;
#ifdef BAD_CONFIG
  saxpy_k<<<(n + 2047) / 2048, 2048>>>(n, a, x, y);
#else
  saxpy_k<<<(n + 255) / 256, 256>>>(n, a, x, y);
#endif
#ifdef WRITE_INPUT
  poke<<<1, 1>>>(x);
#endif
  return (int)cudaGetLastError();
}
"""

SIDE_STREAM_CU = r"""
#include <cuda_runtime.h>
__global__ void slow_saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float t = x[i];
  for (int k = 0; k < 200000; ++k) t = t * 0.999f + 0.001f;
  if (t == -1.0f) y[i] = 0.0f;  // never true; keeps the loop
  y[i] = a * x[i] + y[i];
}
extern "C" int saxpy_cuda(int n, float a, float* x, float* y) {
  static cudaStream_t side = 0;
  if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  slow_saxpy<<<(n + 255) / 256, 256, 0, side>>>(n, a, x, y);
  return (int)cudaGetLastError();  // no synchronization: work hides from the timer
}
"""

MM_CU = r"""
#include <cuda_runtime.h>
__global__ void mm_k(int n, int m, int k, const double* A, const double* B, double* C) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= n || j >= m) return;
#ifdef SKIP_LAST
  if (i == n - 1 && j == m - 1) return;
#endif
  double s = 0.0;
  for (int l = 0; l < k; ++l) s += A[(size_t)i * k + l] * B[(size_t)l * m + j];
  C[(size_t)i * m + j] = s;
}
extern "C" int mm_cuda(int n, int m, int k, double* A, double* B, double* C) {
  dim3 block(16, 16);
  dim3 grid((m + 15) / 16, (n + 15) / 16);
  mm_k<<<grid, block>>>(n, m, k, A, B, C);
  return (int)cudaGetLastError();
}
"""

JACOBI_CU = r"""
#include <cuda_runtime.h>
__global__ void step_b(int n, const double* A, double* B) {
  int i = blockIdx.x * blockDim.x + threadIdx.x + 1;
  if (i < n - 1) B[i] = 0.33333 * (A[i-1] + A[i] + A[i+1]);
}
__global__ void step_a(int n, double* A, const double* B) {
  int i = blockIdx.x * blockDim.x + threadIdx.x + 1;
  if (i < n - 1) A[i] = 0.33333 * (B[i-1] + B[i] + B[i+1]);
}
extern "C" int jacobi_cuda(int tsteps, int n, double* A, double* B) {
  int blocks = (n + 255) / 256;
  for (int t = 0; t < tsteps; ++t) {
    step_b<<<blocks, 256>>>(n, A, B);
    step_a<<<blocks, 256>>>(n, A, B);
  }
  return (int)cudaGetLastError();
}
"""

IADD_CU = r"""
#include <cuda_runtime.h>
#include <cstdint>
__global__ void k(long n, const int32_t* a, const int32_t* b, int32_t* c) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + 3 * b[i];
}
extern "C" int iadd_cuda(long n, int32_t* a, int32_t* b, int32_t* c) {
  k<<<(unsigned)((n + 255) / 256), 256>>>(n, a, b, c);
  return (int)cudaGetLastError();
}
"""

DAXPY_CU = r"""
#include <cuda_runtime.h>
__global__ void k(int n, double alpha, const double* x, double* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += alpha * x[i];
}
extern "C" int daxpy_cuda(int n, double alpha, double* x, double* y) {
  k<<<(n + 255) / 256, 256>>>(n, alpha, x, y);
  return (int)cudaGetLastError();
}
"""

MM_PARAMS = [
    ScalarParam("n", "int", ScalarKind.SIZE),
    ScalarParam("m", "int", ScalarKind.SIZE),
    ScalarParam("k", "int", ScalarKind.SIZE),
    ArrayParam("A", "double", ("n", "k")),
    ArrayParam("B", "double", ("k", "m")),
    ArrayParam("C", "double", ("n", "m")),
]
JACOBI_PARAMS = [
    ScalarParam("tsteps", "int", ScalarKind.SIZE),
    ScalarParam("n", "int", ScalarKind.SIZE),
    ArrayParam("A", "double", ("n",)),
    ArrayParam("B", "double", ("n",)),
]
IADD_PARAMS = [
    ScalarParam("n", "long", ScalarKind.SIZE),
    ArrayParam("a", "int", ("n",)),
    ArrayParam("b", "int", ("n",)),
    ArrayParam("c", "int", ("n",)),
]
DAXPY_PARAMS = [
    ScalarParam("n", "int", ScalarKind.SIZE),
    ScalarParam("alpha", "double", ScalarKind.COEFFICIENT),
    ArrayParam("x", "double", ("n",)),
    ArrayParam("y", "double", ("n",)),
]

TIMING = TimingSettings(warmup_reps=3, min_reps=10, max_reps=100, min_total_ms=20.0)


# ---------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gpu_eval")


@pytest.fixture(scope="module")
def arch() -> str:
    a = detect_arch()
    assert a is not None, "detect_arch() found no GPU although the gpu marker did"
    return a


@pytest.fixture(scope="module")
def ref_lib(workdir: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = workdir / "ref.c"
    src.write_text(REF_C)
    lib = workdir / "ref.so"
    proc = subprocess.run(
        [cc, "-O3", "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return lib


@pytest.fixture(scope="module")
def cu(workdir: Path, arch: str) -> Callable[..., Path]:
    """``cu(source, *defines) -> Path`` of the built candidate library."""

    from cudaperf_cli.build import find_nvcc
    from cudaperf_cli.core import ToolchainError

    try:
        find_nvcc()
    except ToolchainError as exc:
        pytest.skip(f"GPU tests need nvcc to build candidates: {exc}")

    def build(source: str, *defines: str) -> Path:
        head = "".join(f"#define {d}\n" for d in defines)
        r = build_candidate(head + source, arch=arch, cache_root=workdir / "builds")
        assert r.ok, r.errors
        assert r.resources, r.log  # ptxas reported the kernels
        assert r.lib_path is not None
        return r.lib_path

    return build


def _job(ref: Path, cand: Path, fn: str, params: list[Any], configs: list[ConfigSpec],
         **kw: Any) -> EvalJob:
    kw.setdefault("timing", TIMING)
    kw.setdefault("cpu_reps", 3)
    return EvalJob(
        ref_lib=str(ref),
        ref_symbol=f"cudaperf_ref_{fn}",
        cand_lib=str(cand),
        cand_symbol=f"{fn}_cuda",
        params=[param_to_json(p) for p in params],
        configs=configs,
        **kw,
    )


def _run(job: EvalJob, timeout_s: float = 300) -> EvalResult:
    r = run_evaluation(job, timeout_s=timeout_s)
    json.dumps(r.to_json())
    print(f"\n[{r.status}] {r.message}\nwarnings: {r.warnings}\nstderr tail:\n{r.stderr_tail[-1500:]}")
    return r


def _info(r: EvalResult) -> str:
    return f"{r.status}: {r.message}\nerror={r.error}\nstderr:\n{r.stderr_tail[-2000:]}"


def _array(r: EvalResult, name: str, config: int = 0):  # noqa: ANN202
    return [a for a in r.configs[config].arrays if a.name == name][0]


# ---------------------------------------------------------------------------------------
# Device
# ---------------------------------------------------------------------------------------


def test_device_info(arch: str) -> None:
    info = probe_device()
    assert info["available"], info
    print("\ndevice:", json.dumps(info, indent=1))
    assert info["arch"] == arch
    assert info["name"] and info["sm_count"] > 0
    assert info["l2_bytes"] > 1 * MIB
    assert info["memory_total_bytes"] > 1 << 30 and info["memory_free_bytes"] > 0
    assert info["driver_cuda_version"] and re.match(r"\d+\.\d+", info["driver_cuda_version"])
    assert info["cuda_core_version"] not in ("unavailable", "unknown")
    again = device_info()
    assert again["available"] and again["name"] == info["name"]


# ---------------------------------------------------------------------------------------
# Correct candidates, with timing
# ---------------------------------------------------------------------------------------


def test_saxpy_correct_with_timing(ref_lib: Path, cu: Callable[..., Path]) -> None:
    job = _job(ref_lib, cu(SAXPY_CU), "saxpy", SAXPY_PARAMS, [
        ConfigSpec("tiny", {"n": 1}, trials=2),
        ConfigSpec("odd", {"n": 1000}, trials=3),
        ConfigSpec("main", {"n": 1 << 22}, trials=2, time=True),
    ])
    r = _run(job)
    assert r.status == CORRECT, _info(r)
    assert r.array_roles == {"x": READ_ONLY, "y": READ_WRITE}
    assert [c.status for c in r.configs] == [CORRECT] * 3
    t = r.configs[2].timing
    assert t is not None and t.gpu is not None and t.e2e is not None and t.cpu is not None
    print("timing:", json.dumps(to_jsonable(t), indent=1))
    assert t.gpu.n >= 10 and 0 < t.gpu.min_ms <= t.gpu.median_ms <= t.gpu.max_ms
    # 4 Mi floats read twice + written once = 48 MiB: at least microseconds, well below 1 s
    assert 0.002 < t.gpu.median_ms < 50, t.gpu
    assert t.e2e.median_ms > t.gpu.median_ms  # copies cost more than the kernel
    assert t.sync_call is not None and t.sync_call.median_ms >= t.gpu.median_ms * 0.5
    l2 = r.device["l2_bytes"]
    assert t.flush_bytes == max(2 * l2, 256 * MIB)
    assert t.bytes_in == 2 * 4 * (1 << 22) and t.bytes_out == 4 * (1 << 22)
    assert t.kernel_speedup and t.kernel_speedup == pytest.approx(t.cpu_median_ms / t.gpu.median_ms)
    assert t.e2e_speedup and t.e2e_speedup < t.kernel_speedup
    assert not any("outside the legacy default stream" in w for w in t.warnings), t.warnings
    assert r.device["arch"].startswith("sm_")
    assert r.summary["gpu_ms"] == t.gpu.median_ms and r.summary["timed_config"] == "main"


def test_matmul_correct_write_only_output(ref_lib: Path, cu: Callable[..., Path]) -> None:
    job = _job(ref_lib, cu(MM_CU), "mm", MM_PARAMS, [
        ConfigSpec("ragged", {"n": 37, "m": 29, "k": 13}, trials=2),
        ConfigSpec("main", {"n": 384, "m": 320, "k": 256}, trials=1, time=True),
    ])
    r = _run(job)
    assert r.status == CORRECT, _info(r)
    assert r.array_roles == {"A": READ_ONLY, "B": READ_ONLY, "C": WRITE_ONLY}
    c = _array(r, "C", 1)
    assert c.ok and c.max_rel_err < 1e-12
    assert r.configs[1].timing.gpu.median_ms > 0


def test_stencil_in_place_update(ref_lib: Path, cu: Callable[..., Path]) -> None:
    job = _job(ref_lib, cu(JACOBI_CU), "jacobi", JACOBI_PARAMS, [
        ConfigSpec("small", {"tsteps": 3, "n": 100}, trials=2),
        ConfigSpec("main", {"tsteps": 20, "n": 1 << 20}, trials=1, time=True),
    ])
    r = _run(job)
    assert r.status == CORRECT, _info(r)
    assert r.array_roles == {"A": READ_WRITE, "B": READ_WRITE}
    assert _array(r, "A", 1).max_abs_err == 0.0  # same operation order: bit-identical


def test_integer_arrays(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(IADD_CU), "iadd", IADD_PARAMS,
                  [ConfigSpec("main", {"n": 1_000_003}, trials=2, time=True)]))
    assert r.status == CORRECT, _info(r)
    assert _array(r, "c").exact and r.array_roles["c"] == WRITE_ONLY


def test_init_function(ref_lib: Path, cu: Callable[..., Path]) -> None:
    job = _job(ref_lib, cu(DAXPY_CU), "daxpy", DAXPY_PARAMS,
               [ConfigSpec("main", {"n": 10007}, trials=2, time=True)],
               init_symbol="cudaperf_init_daxpy",
               init={"name": "init_daxpy", "params": ["n", "alpha", "x", "y"],
                     "scalar_outputs": ["alpha"]})
    r = _run(job)
    assert r.status == CORRECT, _info(r)


def test_device_printf_does_not_corrupt_the_result(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(SAXPY_CU, "HELLO"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("s", {"n": 512}, trials=1)]))
    assert r.status == CORRECT, _info(r)
    assert "hello from the GPU" in r.stderr_tail


# ---------------------------------------------------------------------------------------
# Wrong candidates
# ---------------------------------------------------------------------------------------


def test_skips_last_element(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(SAXPY_CU, "LIMIT (i < n - 1)"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("s", {"n": 4096}, trials=2, time=True)]))
    assert r.status == WRONG, _info(r)
    y = _array(r, "y")
    assert not y.ok and y.n_mismatch == 1 and y.first_mismatch["index"] == [4095], y
    assert r.configs[0].timing is None  # wrong: never timed


def test_matmul_skipping_last_element_shows_poison(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(MM_CU, "SKIP_LAST"), "mm", MM_PARAMS,
                  [ConfigSpec("s", {"n": 33, "m": 17, "k": 8}, trials=1)]))
    assert r.status == WRONG, _info(r)
    c = _array(r, "C")
    assert c.first_mismatch["index"] == [32, 16] and c.first_mismatch["candidate"] == "nan"
    assert c.n_mismatch == 1 and c.n_nonfinite_mismatch == 1


def test_writes_an_input_array(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(SAXPY_CU, "WRITE_INPUT"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("s", {"n": 1000}, trials=1)]))
    assert r.status == WRONG, _info(r)
    x = _array(r, "x")
    assert not x.ok and x.role == READ_ONLY and x.first_mismatch["index"] == [3]
    assert _array(r, "y").ok


def test_out_of_bounds_write_hits_the_guard(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(SAXPY_CU, "LIMIT (i <= n)"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("s", {"n": 1000}, trials=1)]))
    assert r.status == WRONG, _info(r)
    assert {"array": "y", "side": "after", "offset": 0} in r.configs[0].guard_violations


def test_skipping_work_after_a_few_calls_is_caught(ref_lib: Path, cu: Callable[..., Path]) -> None:
    cfg = [ConfigSpec("s", {"n": 100000}, trials=2, time=True)]
    r = _run(_job(ref_lib, cu(SAXPY_CU, "CACHE_HACK"), "saxpy", SAXPY_PARAMS, cfg))
    assert r.status == WRONG, _info(r)
    assert re.search(r"timed call \d+ of \d+ \(input set [01]\): y: ", r.message), r.message
    # with no timed call verified, the check after the last one catches it
    r = _run(_job(ref_lib, cu(SAXPY_CU, "CACHE_HACK"), "saxpy", SAXPY_PARAMS, cfg,
                  timing=replace(TIMING, checked_reps=0)))
    assert r.status == WRONG, _info(r)
    assert "after the timed repetitions" in r.message


def test_timed_result_cache_cheat_is_caught(ref_lib: Path, cu: Callable[..., Path]) -> None:
    # tests/data/cheats/c_timing_cache/saxpy_cache.cu: a real kernel on a miss, then a cache
    # keyed by the pointers and the first and last 4 values of x and y; a hit only
    # cudaMemcpy's the cached output into y (measured 15x on the H200 in issue 14's suite).
    cfgs = [ConfigSpec("odd", {"n": 1000}, trials=2),
            ConfigSpec("main", {"n": 1 << 22}, trials=1, time=True)]
    cheat = cu((CHEATS / "c_timing_cache" / "saxpy_cache.cu").read_text())
    # the hole: with one input set every timed call after the first hits, and passes
    one = _run(_job(ref_lib, cheat, "saxpy", SAXPY_PARAMS, cfgs, timing=replace(TIMING, input_sets=1)))
    assert one.status == CORRECT, _info(one)
    assert one.configs[1].timing.input_sets == 1
    r = _run(_job(ref_lib, cheat, "saxpy", SAXPY_PARAMS, cfgs))
    assert r.status == WRONG, _info(r)
    assert re.fullmatch(r"config 'main': timed call \d+ of \d+ \(input set [01]\): y: \d+ of 4194304 "
                        r"elements differ.*", r.message), r.message
    t = r.configs[1].timing
    assert t is not None and t.input_sets == 2 and t.gpu is None, t
    # the honest control passes the same checks
    ok = _run(_job(ref_lib, cu(SAXPY_CU), "saxpy", SAXPY_PARAMS, cfgs))
    assert ok.status == CORRECT, _info(ok)
    t = ok.configs[1].timing
    assert t.input_sets == 2 and min(t.input_set_calls) > 0 and len(t.checked_reps) == 2, t
    assert not any("one input set" in w for w in ok.warnings), ok.warnings


def test_side_stream_work_is_flagged(ref_lib: Path, cu: Callable[..., Path]) -> None:
    ts = TimingSettings(warmup_reps=1, min_reps=5, max_reps=20, min_total_ms=1.0,
                        e2e_reps=3, sync_reps=3)
    r = _run(_job(ref_lib, cu(SIDE_STREAM_CU), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("s", {"n": 1 << 18}, trials=1, time=True)], timing=ts))
    # Verification synchronizes the whole device, so the trials pass.  In the timed
    # repetitions the side-stream kernels race with the restores on the legacy stream:
    # either a check after a timed call catches wrong results, or the results happen to be
    # right and the event time (which does not see the work) rejects the candidate.
    assert r.status == WRONG, _info(r)
    assert r.configs[0].trials_run == 1 and r.configs[0].failed_trial is None
    assert ("timed call" in r.message or "after the" in r.message
            or "work on a stream the launcher does not join is not timed" in r.message), r.message


# ---------------------------------------------------------------------------------------
# Failing candidates
# ---------------------------------------------------------------------------------------


def test_error_code_is_runtime_error(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(SAXPY_CU, "BAD_CONFIG"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("s", {"n": 1000}, trials=1)]))
    assert r.status == RUNTIME_ERROR, _info(r)
    assert r.error["source"] == "candidate_return"
    # A 2048-thread block: CUDA 12 reports cudaErrorInvalidConfiguration, CUDA 13.0 on an
    # H200 (driver 580) was seen reporting cudaErrorInvalidValue.
    expected = {"cudaErrorInvalidConfiguration": 9, "cudaErrorInvalidValue": 1}
    assert r.error["name"] in expected, r.error
    assert r.error["code"] == expected[r.error["name"]]
    assert r.error["config"] == "s" and r.error["trial"] == 0


def test_illegal_address(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(SAXPY_CU, "WILD"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("s", {"n": 1000}, trials=1)]))
    assert r.status in (RUNTIME_ERROR, CRASH), _info(r)
    if r.status == RUNTIME_ERROR:
        assert r.error["name"] in ("CUDA_ERROR_ILLEGAL_ADDRESS", "cudaErrorIllegalAddress"), r.error
        assert r.error["source"] in ("synchronize", "candidate_return", "driver_call")
    # The parent is unharmed: a correct candidate still evaluates.
    ok = _run(_job(ref_lib, cu(SAXPY_CU), "saxpy", SAXPY_PARAMS,
                   [ConfigSpec("s", {"n": 1000}, trials=1)]))
    assert ok.status == CORRECT, _info(ok)


def test_infinite_loop_kernel_times_out(ref_lib: Path, cu: Callable[..., Path]) -> None:
    t0 = time.monotonic()
    r = _run(_job(ref_lib, cu(SAXPY_CU, "SPIN"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("s", {"n": 1000}, trials=1)]), timeout_s=20)
    wall = time.monotonic() - t0
    assert r.status == TIMEOUT, _info(r)
    # the limit runs from the moment the worker held the GPU (after its preparation)
    assert 20 <= r.elapsed_s - r.prepare_s - r.lock_wait_s < 40 and wall < 60
    assert r.phase == "candidate" and "in the candidate call" in r.message
    # the GPU is usable again right after
    ok = _run(_job(ref_lib, cu(SAXPY_CU), "saxpy", SAXPY_PARAMS,
                   [ConfigSpec("s", {"n": 1000}, trials=1)]))
    assert ok.status == CORRECT, _info(ok)


def test_missing_extern_c_symbol(ref_lib: Path, cu: Callable[..., Path]) -> None:
    src = SAXPY_CU.replace('extern "C" int saxpy_cuda', "int saxpy_cuda")  # C++ mangled
    r = _run(_job(ref_lib, cu(src), "saxpy", SAXPY_PARAMS, [ConfigSpec("s", {"n": 10}, trials=1)]))
    assert r.status == RUNTIME_ERROR and r.error["name"] == "SYMBOL_NOT_FOUND", _info(r)


# ---------------------------------------------------------------------------------------
# Bounded in time and memory: slow candidates, the plan, the run's reference outputs, the gate
# ---------------------------------------------------------------------------------------

NAP_CU = r"""
#include <cuda_runtime.h>
__global__ void nap_saxpy(int n, float a, const float* x, float* y, int ms) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) for (int k = 0; k < ms; ++k) __nanosleep(1000000);  // about ms milliseconds
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" int saxpy_cuda(int n, float a, float* x, float* y) {
  nap_saxpy<<<(n + 255) / 256, 256>>>(n, a, x, y, NAP_MS);
  return (int)cudaGetLastError();
}
"""


def test_slow_kernel_stops_timing_early(ref_lib: Path, cu: Callable[..., Path]) -> None:
    r = _run(_job(ref_lib, cu(NAP_CU, "NAP_MS 40"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("main", {"n": 4096}, trials=1, time=True)], slow_ms=5.0))
    assert r.status == "slow", _info(r)
    t = r.configs[0].timing
    assert t.slow and t.estimate_ms > 5.0 and t.warmup_reps <= 6 and t.planned_reps == 0
    assert r.summary["gpu_ms"] == t.gpu.median_ms == pytest.approx(t.estimate_ms)
    assert t.e2e is None and "stopped timing after" in r.message
    fast = _run(_job(ref_lib, cu(NAP_CU, "NAP_MS 0"), "saxpy", SAXPY_PARAMS,
                     [ConfigSpec("main", {"n": 4096}, trials=1, time=True)], slow_ms=5.0))
    assert fast.status == CORRECT, _info(fast)


def test_a_long_first_call_is_timed_once(ref_lib: Path, cu: Callable[..., Path]) -> None:
    """A verification call that fills max_total_ms is the kernel, call + synchronize and
    end-to-end sample: the kernel runs once at the timed size."""
    ts = TimingSettings(max_total_ms=200.0)
    r = _run(_job(ref_lib, cu(NAP_CU, "NAP_MS 300"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("small", {"n": 1000}, trials=1),  # not the process's first call
                   ConfigSpec("main", {"n": 4096}, trials=1, time=True)], timing=ts))
    assert r.status == CORRECT, _info(r)
    t = r.configs[1].timing
    assert t.gpu.n == 1 and t.warmup_reps == 0 and t.sync_call.n == 1 and t.e2e.n == 1, t
    assert 290 <= t.gpu.median_ms <= t.sync_call.median_ms <= t.e2e.median_ms, t


def test_a_call_past_the_slow_stop_is_stopped_and_the_gpu_recovers(
    ref_lib: Path, cu: Callable[..., Path]
) -> None:
    """A 60 s kernel against a 5 ms slow limit (stop floor 1 s): the worker reports
    ``timeout`` after about 1 s and exits with the kernel still running; the driver ends
    it, and the next evaluation on the GPU is correct."""
    ts = TimingSettings(slow_stop_floor_ms=1000.0)
    t0 = time.monotonic()
    r = _run(_job(ref_lib, cu(NAP_CU, "NAP_MS 60000"), "saxpy", SAXPY_PARAMS,
                  [ConfigSpec("main", {"n": 4096}, trials=1, time=True)], timing=ts, slow_ms=5.0))
    took = time.monotonic() - t0
    assert r.status == TIMEOUT and "was stopped: not verified at this size" in r.message, _info(r)
    # From the GPU's go to the end (the lock wait and the preparation are left out: beside a
    # bench on the same GPU the lock alone took seconds); the kernel would run 60 s.
    ran = r.elapsed_s - r.lock_wait_s - (r.prepare_s or 0.0)
    assert ran < 30, (ran, took, r.lock_wait_s, r.prepare_s)
    t1 = time.monotonic()
    ok = _run(_job(ref_lib, cu(NAP_CU, "NAP_MS 0"), "saxpy", SAXPY_PARAMS,
                   [ConfigSpec("main", {"n": 4096}, trials=1, time=True)]))
    assert ok.status == CORRECT, _info(ok)
    print(f"stopped after {took:.1f} s ({ran:.1f} s after the go); the next evaluation took {time.monotonic() - t1:.1f} s")


def test_peak_gpu_bytes_is_the_plan(ref_lib: Path, cu: Callable[..., Path]) -> None:
    from cudaperf_cli.evaluate import plan_c_memory

    job = _job(ref_lib, cu(SAXPY_CU), "saxpy", SAXPY_PARAMS, [
        ConfigSpec("odd", {"n": 1000}, trials=2),
        ConfigSpec("main", {"n": 1 << 22}, trials=1, time=True),
    ])
    r = _run(job)
    assert r.status == CORRECT, _info(r)
    job.array_roles = dict(r.array_roles)
    plan = plan_c_memory(job, l2_bytes=r.device["l2_bytes"])
    assert r.footprint_bytes == plan.footprint_bytes == 2 * 4 * (1 << 22)
    assert r.peak_gpu_bytes == plan.gpu_bytes, (r.peak_gpu_bytes, plan)
    assert r.prepare_s is not None and r.prepare_s > 0 and r.lock_wait_s >= 0
    assert r.tolerances == {"float32": {"atol": 1e-4, "rtol": 1e-4}}


def test_candidate_uses_the_baselines_reference_outputs(
    ref_lib: Path, cu: Callable[..., Path], workdir: Path
) -> None:
    cfgs = [ConfigSpec("odd", {"tsteps": 3, "n": 101}, trials=2),
            ConfigSpec("main", {"tsteps": 20, "n": 1 << 20}, trials=1, time=True)]
    refs = workdir / "jacobi-refs"
    base = _job(ref_lib, cu(JACOBI_CU), "jacobi", JACOBI_PARAMS, cfgs, reference_outputs=str(refs))
    base.cand_lib = None
    b = _run(base)
    assert b.status == "reference_only", _info(b)
    job = _job(ref_lib, cu(JACOBI_CU), "jacobi", JACOBI_PARAMS, cfgs, reference_outputs=str(refs),
               array_roles=b.array_roles, cpu_baseline_ms={"main": b.configs[1].timing.cpu_median_ms})
    r = _run(job)
    assert r.status == CORRECT, _info(r)
    assert not any("not used" in w for w in r.warnings), r.warnings
    assert _array(r, "A", 1).max_abs_err == 0.0
