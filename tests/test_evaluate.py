"""evaluate stage on the CPU: comparison rules, classification, timing statistics, the job
and result schema, and the worker/runner protocol (crash, timeout, no device...).

The worker's full pipeline runs here against a *host emulation* of the device
(``CUDAPERF_WORKER_BACKEND=host``): the "candidate" is a C function compiled with cc that
receives host pointers.  The same scenarios run on a real GPU in test_gpu_evaluate.py.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from cudaperf_cli.core import (
    ArrayParam,
    CProblem,
    InitSpec,
    ScalarKind,
    ScalarParam,
    param_to_json,
)
from cudaperf_cli.evaluate import (
    CORRECT,
    CRASH,
    NO_DEVICE,
    READ_ONLY,
    READ_WRITE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
    RUNTIME_ERROR,
    SLOW,
    TIMEOUT,
    WRITE_ONLY,
    WRONG,
    ConfigSpec,
    EvalJob,
    EvalResult,
    TimingSettings,
    classify_roles,
    compare_arrays,
    device_info,
    flush_size,
    need_more_reps,
    probe_device,
    run_evaluation,
    summarize,
    tolerance_for,
    verify,
)
from cudaperf_cli.evaluate.job import GUARD_BYTES
from cudaperf_cli.evaluate.timing import judge_clock, side_work, speedup, untimed_work
from tests.eval_refs import REF_C, SAXPY_PARAMS

HOST = {"CUDAPERF_WORKER_BACKEND": "host"}
HOOKS = {"CUDAPERF_TEST_HOOKS": "1"}
FAST = TimingSettings(
    warmup_reps=2, min_reps=5, max_reps=20, min_total_ms=1.0, flush_bytes=1 << 16,
    e2e_reps=3, sync_reps=3,
)

# ---------------------------------------------------------------------------------------
# Pure comparison rules
# ---------------------------------------------------------------------------------------


def test_exact_match_and_within_tolerance() -> None:
    ref = np.linspace(0, 1, 100)
    assert compare_arrays("a", ref.copy(), ref).ok
    c = compare_arrays("a", ref * (1 + 5e-8), ref)  # float64 rtol 1e-7
    assert c.ok and c.max_rel_err == pytest.approx(5e-8, rel=1e-3)
    c = compare_arrays("a", ref * (1 + 5e-7), ref)
    assert not c.ok and c.n_mismatch > 0


def test_first_mismatch_index_is_multidimensional() -> None:
    ref = np.zeros((4, 5, 6))
    cand = ref.copy()
    cand[2, 3, 1] = 1.0
    cand[3, 0, 0] = 5.0
    c = compare_arrays("T", cand, ref)
    assert not c.ok and c.n_mismatch == 2
    assert c.first_mismatch == {"index": [2, 3, 1], "candidate": 1.0, "reference": 0.0}
    assert c.worst_mismatch is not None and c.worst_mismatch["index"] == [3, 0, 0]
    assert c.max_abs_err == 5.0
    assert "first at [2,3,1]" in c.describe()


def test_first_mismatch_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "CHUNK", 7)
    ref = np.arange(60, dtype=np.float32).reshape(6, 10)
    cand = ref.copy()
    cand[4, 9] = -1
    cand[5, 2] = -100
    c = compare_arrays("M", cand, ref)
    assert c.first_mismatch["index"] == [4, 9]
    assert c.worst_mismatch["index"] == [5, 2]
    assert c.n_mismatch == 2


def test_nan_rules() -> None:
    ref = np.array([1.0, 2.0, np.nan, np.inf, -np.inf, 3.0])
    same = ref.copy()
    assert compare_arrays("a", same, ref).ok  # NaN where the reference has NaN; same infs
    cand = ref.copy()
    cand[1] = np.nan  # NaN where the reference is finite
    c = compare_arrays("a", cand, ref)
    assert not c.ok and c.n_mismatch == 1 and c.n_nonfinite_mismatch == 1
    assert c.first_mismatch == {"index": [1], "candidate": "nan", "reference": 2.0}
    cand = ref.copy()
    cand[3] = -np.inf
    assert not compare_arrays("a", cand, ref).ok
    cand = ref.copy()
    cand[2] = 0.0  # finite where the reference is NaN
    assert not compare_arrays("a", cand, ref).ok
    json.dumps(c.__dict__, allow_nan=False)  # reports stay strict JSON


def test_describe_counts_the_non_finite_mismatches() -> None:
    """The max errors are over finite pairs; a NaN in the reference where the candidate is
    finite (an ill-conditioned problem) is counted in words, not hidden behind a tiny error."""
    ref = np.array([1.0, np.nan, np.nan, 4.0])
    cand = np.array([1.0, -1.6e-15, 2.0, 4.0 + 1e-3])
    text = compare_arrays("A", cand, ref).describe()
    assert text.startswith("A: 3 of 4 elements differ; first at [1]: candidate -1.6e-15 vs reference nan")
    assert "(2 of them NaN/inf on one side only; over the finite ones: max abs err 0.001" in text


def test_poisoned_unwritten_elements_fail() -> None:
    ref = np.random.default_rng(0).random(1000)
    cand = ref.copy()
    tail = cand[990:]
    verify.poison(tail)  # the candidate "never wrote" the last 10 elements
    assert np.isnan(cand[990:]).all()
    c = compare_arrays("y", cand, ref, role=WRITE_ONLY)
    assert not c.ok and c.n_mismatch == 10 and c.first_mismatch["index"] == [990]
    assert c.n_nonfinite_mismatch == 10


def test_integers_are_exact() -> None:
    ref = np.arange(20, dtype=np.int32)
    cand = ref.copy()
    cand[7] += 1
    c = compare_arrays("i", cand, ref)
    assert not c.ok and c.exact and c.rtol == 0 and c.atol == 0
    assert c.first_mismatch == {"index": [7], "candidate": 8, "reference": 7}
    big = np.array([2**62, 5], dtype=np.int64)
    assert not compare_arrays("b", big + np.array([1, 0], dtype=np.int64), big).ok
    u = np.array([1, 2, 3], dtype=np.uint64)
    assert compare_arrays("u", u.copy(), u).ok


def test_read_only_arrays_are_bit_exact() -> None:
    ref = np.linspace(1, 2, 10)
    cand = ref.copy()
    cand[4] = np.nextafter(cand[4], 3)
    assert compare_arrays("x", cand, ref).ok  # within tolerance as an output
    c = compare_arrays("x", cand, ref, role=READ_ONLY)
    assert not c.ok and c.exact and c.first_mismatch["index"] == [4]


def test_tolerances_defaults_and_overrides() -> None:
    # (rtol, atol): the shared table of evaluate/tolerances.py (float32 as KernelBench)
    assert tolerance_for("float64") == (1e-7, 1e-9)
    assert tolerance_for("float32") == (1e-4, 1e-4)
    assert tolerance_for("int32") == (0.0, 0.0)
    assert tolerance_for("float32", {"float": {"rtol": 1e-2}}) == (1e-2, 1e-4)
    assert tolerance_for("float64", {"float64": {"atol": 0.5}}) == (1e-7, 0.5)
    assert verify.tolerances_used(["float32", "int32", "float64", "float32"]) == {
        "float32": {"atol": 1e-4, "rtol": 1e-4}, "float64": {"atol": 1e-9, "rtol": 1e-7}}
    ref = np.ones(4, dtype=np.float32)
    cand = ref * np.float32(1.001)
    assert not compare_arrays("a", cand, ref).ok
    assert compare_arrays("a", cand, ref, tolerances={"float32": {"rtol": 1e-2}}).ok
    # atol + rtol*|ref|: near zero the absolute part decides
    z = np.zeros(3, dtype=np.float32)
    assert compare_arrays("z", z + np.float32(5e-5), z).ok
    assert not compare_arrays("z", z + np.float32(5e-4), z).ok
    with pytest.raises(ValueError):
        tolerance_for("float32", {"float32": {"atol": -1.0}})


def test_poison_patterns() -> None:
    f = np.ones(5, dtype=np.float32)
    d = np.ones((2, 3))
    i = np.ones(4, dtype=np.int32)
    for a in (f, d):
        verify.poison(a)
        assert np.isnan(a).all()
    verify.poison(i)
    assert (i.view(np.uint8) == 0xA5).all()


# ---------------------------------------------------------------------------------------
# Output classification
# ---------------------------------------------------------------------------------------


def _inputs(**shapes: Any) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {k: rng.random(v) for k, v in shapes.items()}


def test_classify_saxpy_and_matmul() -> None:
    def saxpy(a: dict[str, np.ndarray]) -> None:
        a["y"][:] = 2.0 * a["x"] + a["y"]

    data = _inputs(x=8, y=8)
    before = {k: v.copy() for k, v in data.items()}
    roles = classify_roles(saxpy, data)
    assert roles == {"x": READ_ONLY, "y": READ_WRITE}
    assert all(np.array_equal(before[k], data[k]) for k in data)  # inputs untouched

    def mm(a: dict[str, np.ndarray]) -> None:
        a["C"][:] = a["A"] @ a["B"]

    assert classify_roles(mm, _inputs(A=(3, 4), B=(4, 2), C=(3, 2))) == {
        "A": READ_ONLY,
        "B": READ_ONLY,
        "C": WRITE_ONLY,
    }


def test_classify_partial_write_is_read_write() -> None:
    def interior(a: dict[str, np.ndarray]) -> None:  # boundary of B must be kept
        a["B"][1:-1] = (a["A"][:-2] + a["A"][1:-1] + a["A"][2:]) / 3

    assert classify_roles(interior, _inputs(A=10, B=10)) == {"A": READ_ONLY, "B": READ_WRITE}


def test_classify_const_and_known() -> None:
    calls = []

    def f(a: dict[str, np.ndarray]) -> None:
        calls.append(1)
        a["y"][:] = a["x"]

    roles = classify_roles(f, _inputs(x=4, y=4), const={"x"}, known={"y": READ_WRITE})
    assert roles == {"x": READ_ONLY, "y": READ_WRITE}
    assert len(calls) == 1  # nothing left to test after the base run


# ---------------------------------------------------------------------------------------
# Timing helpers
# ---------------------------------------------------------------------------------------


def test_summarize() -> None:
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.n, s.median_ms, s.min_ms, s.max_ms) == (5, 3.0, 1.0, 5.0)
    assert (s.p25_ms, s.p75_ms, s.iqr_ms, s.mean_ms) == (2.0, 4.0, 2.0, 3.0)
    one = summarize([0.25])
    assert one.median_ms == one.p25_ms == one.p75_ms == 0.25
    with pytest.raises(ValueError):
        summarize([])


def test_need_more_reps() -> None:
    ts = TimingSettings(min_reps=10, max_reps=100, min_total_ms=50.0, max_total_ms=1000.0)
    assert need_more_reps(0, 0.0, ts)
    assert need_more_reps(9, 500.0, ts)  # below min reps
    assert need_more_reps(10, 10.0, ts)  # below min total time
    assert not need_more_reps(10, 50.0, ts)
    assert not need_more_reps(100, 1.0, ts)  # max reps caps
    assert not need_more_reps(1, 1500.0, ts)  # a slow kernel: max total time caps
    assert need_more_reps(0, 1500.0, ts)  # ... after at least 1 rep


def test_flush_size_and_speedup() -> None:
    mib = 1 << 20
    assert flush_size(50 * mib, TimingSettings()) == 256 * mib  # H200: 60 MB L2 -> 256 MiB
    assert flush_size(200 * mib, TimingSettings()) == 400 * mib
    assert flush_size(50 * mib, TimingSettings(flush_bytes=1234)) == 1234
    assert flush_size(50 * mib, TimingSettings(flush_l2=False)) == 0
    assert speedup(10.0, 2.0) == 5.0
    assert speedup(None, 2.0) is None and speedup(1.0, 0.0) is None


# ---------------------------------------------------------------------------------------
# Job / result schema
# ---------------------------------------------------------------------------------------



def _job(ref: Path, cand: Path | None, fn: str = "saxpy", params: Any = None, **kw: Any) -> EvalJob:
    kw.setdefault("configs", [ConfigSpec("small", {"n": 1000}, trials=2, time=False)])
    kw.setdefault("timing", FAST)
    kw.setdefault("cpu_reps", 3)
    return EvalJob(
        ref_lib=str(ref),
        ref_symbol=f"cudaperf_ref_{fn}",
        cand_lib=str(cand) if cand is not None else None,
        cand_symbol=f"{fn}_cuda",
        params=[param_to_json(p) for p in (params or SAXPY_PARAMS)],
        **kw,
    )


def test_job_json_round_trip_and_validate(tmp_path: Path) -> None:
    job = _job(tmp_path / "r.so", tmp_path / "c.so", tolerances={"float32": {"rtol": 1e-3}})
    doc = json.loads(json.dumps(job.to_json()))
    back = EvalJob.from_json(doc)
    assert back == job
    back.validate()
    bad = _job(tmp_path / "r.so", None, configs=[ConfigSpec("a", {"m": 3})])
    with pytest.raises(ValueError, match="lacks sizes for n"):
        bad.validate()
    dup = _job(tmp_path / "r.so", None, configs=[ConfigSpec("a", {"n": 3})] * 2)
    with pytest.raises(ValueError, match="duplicate"):
        dup.validate()
    neg = _job(tmp_path / "r.so", None, configs=[ConfigSpec("a", {"n": -3})])
    with pytest.raises(ValueError, match="negative"):
        neg.validate()
    init = _job(tmp_path / "r.so", None, init={"name": "i", "params": ["q"]}, init_symbol="x")
    with pytest.raises(ValueError, match="init parameters"):
        init.validate()
    roles = _job(tmp_path / "r.so", None, array_roles={"y": "output"})
    with pytest.raises(ValueError, match="array_roles"):
        roles.validate()


def test_job_accepts_plain_dicts(tmp_path: Path) -> None:
    job = EvalJob(
        ref_lib=tmp_path / "r.so",
        ref_symbol="cudaperf_ref_saxpy",
        cand_lib=tmp_path / "c.so",
        cand_symbol="saxpy_cuda",
        params=[param_to_json(p) for p in SAXPY_PARAMS],
        configs=[{"name": "main", "sizes": {"n": 10}, "trials": 1, "time": True}],
        timing={"min_reps": 3},
        init=InitSpec("init", ("n", "x"), ()),
        init_symbol="cudaperf_init_saxpy",
    )
    assert job.configs == [ConfigSpec("main", {"n": 10}, trials=1, time=True)]
    assert job.timing == TimingSettings(min_reps=3)
    assert job.ref_lib == str(tmp_path / "r.so") and isinstance(job.cand_lib, str)
    assert job.init == {"name": "init", "params": ["n", "x"], "scalar_outputs": []}
    job.validate()
    assert EvalJob.from_json(json.loads(json.dumps(job.to_json()))) == job


def test_job_from_problem(tmp_path: Path) -> None:
    prob = CProblem(
        path=tmp_path / "p.c",
        function="daxpy",
        params=tuple(SAXPY_PARAMS),
        sizes={"n": 64},
        init=InitSpec("init_array", ("n", "a", "x", "y"), ("a",)),
    )
    job = EvalJob.from_problem(prob, ref_lib="r.so", cand_lib="c.so")
    assert job.ref_symbol == "cudaperf_ref_daxpy" and job.cand_symbol == "daxpy_cuda"
    assert job.init_symbol == "cudaperf_init_daxpy"
    assert job.init == {"name": "init_array", "params": ["n", "a", "x", "y"], "scalar_outputs": ["a"]}
    assert job.configs == [ConfigSpec("main", {"n": 64}, trials=2, time=True)]
    job.validate()

    class Ref:  # the problems stage's ReferenceLib, duck-typed
        lib_path = tmp_path / "libcudaperf_ref_daxpy.so"
        ref_symbol = "cudaperf_ref_daxpy"
        init_symbol = "cudaperf_init_daxpy"
        baseline_name = "clang -O3, 1 thread"

    job = EvalJob.from_problem(prob, ref_lib=Ref(), cand_lib=None, seed=7)
    assert job.ref_lib == str(Ref.lib_path) and job.baseline_label == "clang -O3, 1 thread"
    assert job.seed == 7 and job.cand_lib is None


# ---------------------------------------------------------------------------------------
# Worker pipeline on the host emulation
# ---------------------------------------------------------------------------------------


SAXPY_OK = "for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i]; return 0;"


def _saxpy(body: str, prelude: str = "") -> str:
    return (
        "#include <stdio.h>\n" + prelude +
        "int saxpy_cuda(int n, float a, float *x, float *y) {\n" + body + "\n}\n"
    )


@pytest.fixture
def ref_lib(compile_c: Callable[..., Path]) -> Path:
    return compile_c(REF_C, "ref")


def _host_run(job: EvalJob, timeout_s: float = 60, **env: str) -> EvalResult:
    r = run_evaluation(job, timeout_s=timeout_s, env={**HOST, **env})
    json.dumps(r.to_json())  # always serialisable
    return r


def test_host_correct_saxpy_with_timing(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy(SAXPY_OK), "cand")
    job = _job(ref_lib, cand, configs=[
        ConfigSpec("small", {"n": 100}, trials=3),
        ConfigSpec("main", {"n": 20000}, trials=1, time=True),
    ])
    r = _host_run(job)
    assert r.status == CORRECT, r.message + r.stderr_tail
    assert r.ok and r.array_roles == {"x": READ_ONLY, "y": READ_WRITE}
    small, main = r.configs
    assert small.trials_run == 3 and small.timing is None
    assert small.seed == [0, 0, 2]
    assert [a.name for a in small.arrays] == ["x", "y"]
    assert small.arrays[0].exact and not small.arrays[1].exact
    t = main.timing
    assert t is not None and t.gpu is not None and t.e2e is not None and t.cpu is not None
    assert 5 <= t.gpu.n <= 20
    assert t.gpu.min_ms <= t.gpu.p25_ms <= t.gpu.median_ms <= t.gpu.p75_ms <= t.gpu.max_ms
    assert t.e2e.n == 3 and t.sync_call is not None and t.sync_call.n == 3
    assert t.cpu.n == 3 and t.cpu_median_ms == t.cpu.median_ms
    assert t.kernel_speedup == pytest.approx(t.cpu_median_ms / t.gpu.median_ms)
    assert t.e2e_speedup == pytest.approx(t.cpu_median_ms / t.e2e.median_ms)
    assert t.baseline == "gcc -O3, 1 thread"
    # warm-up: 1 call, 5 for the estimate, then up to warmup_ms (25 ms), capped by max_reps
    assert t.flush_bytes == 1 << 16 and 6 <= t.warmup_reps <= 20
    assert t.planned_reps == t.gpu.n and t.estimate_ms > 0 and not t.slow
    assert t.cpu_total_s == pytest.approx(sum([t.cpu.mean_ms * t.cpu.n]) / 1e3)
    assert r.prepare_s is not None and 0 < r.prepare_s < r.elapsed_s
    assert r.lock_wait_s >= 0 and r.footprint_bytes == 2 * 20000 * 4
    phases = r.details["phase_s"]  # where the worker's time went
    assert {"startup", "timing", "gpu_wait"} <= set(phases) and sum(phases.values()) <= r.elapsed_s + 0.5
    assert r.tolerances == {"float32": {"atol": 1e-4, "rtol": 1e-4}}
    # device bytes held at once: the main arrays with their guards, the two input sets' copies
    # of x and y (copied into the candidate's arrays before each call), the flush buffer
    assert r.peak_gpu_bytes == 2 * (20000 * 4 + 2 * GUARD_BYTES) + 4 * 20000 * 4 + (1 << 16)
    # the timed calls rotated through both input sets; two timed calls were verified
    assert t.input_sets == 2 and min(t.input_set_calls) > 0, t
    assert len(t.checked_reps) == 2 and all(1 <= i <= t.planned_reps for i in t.checked_reps)
    assert t.bytes_in == 2 * 20000 * 4 and t.bytes_out == 20000 * 4
    assert r.device is not None and r.device["backend"] == "host"
    assert "correct" in r.message
    sm = r.summary
    assert sm["gpu_ms"] == t.gpu.median_ms and sm["gpu_ms_iqr"] == t.gpu.iqr_ms
    assert sm["e2e_ms"] == t.e2e.median_ms and sm["cpu_ms"] == t.cpu_median_ms
    assert sm["speedup_kernel"] == t.kernel_speedup and sm["speedup_e2e"] == t.e2e_speedup
    assert sm["timed_config"] == "main" and sm["baseline"] == "gcc -O3, 1 thread"
    assert sm["max_abs_err"] == max(a.max_abs_err for c in r.configs for a in c.arrays)
    assert r.exit_code == 0 and r.phase == "done"


def test_host_matmul_write_only_and_2d_first_index(
    ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    params = [
        ScalarParam("n", "int", ScalarKind.SIZE),
        ScalarParam("m", "int", ScalarKind.SIZE),
        ScalarParam("k", "int", ScalarKind.SIZE),
        ArrayParam("A", "double", ("n", "k")),
        ArrayParam("B", "double", ("k", "m")),
        ArrayParam("C", "double", ("n", "m")),
    ]
    body = (
        "int mm_cuda(int n, int m, int k, double *A, double *B, double *C) {\n"
        "  for (int i = 0; i < n; i++) for (int j = 0; j < m; j++) {\n"
        "    if (SKIP && i == n - 1 && j == m - 1) continue;\n"
        "    double s = 0; for (int l = 0; l < k; l++) s += A[i*k+l] * B[l*m+j];\n"
        "    C[i*m+j] = s; }\n  return 0; }\n"
    )
    cfg = [ConfigSpec("c", {"n": 7, "m": 5, "k": 3}, trials=2, time=True)]
    good = compile_c("#define SKIP 0\n" + body, "mm_ok")
    r = _host_run(_job(ref_lib, good, "mm", params, configs=cfg))
    assert r.status == CORRECT, r.message
    assert r.array_roles == {"A": READ_ONLY, "B": READ_ONLY, "C": WRITE_ONLY}
    assert r.configs[0].timing.bytes_out == 7 * 5 * 8

    bad = compile_c("#define SKIP 1\n" + body, "mm_skip")
    r = _host_run(_job(ref_lib, bad, "mm", params, configs=cfg))
    assert r.status == WRONG
    c = r.configs[0]
    assert c.failed_trial == 0 and c.timing is None
    (wrong,) = [a for a in c.arrays if not a.ok]
    assert wrong.name == "C" and wrong.n_mismatch == 1 and wrong.n_nonfinite_mismatch == 1
    assert wrong.first_mismatch["index"] == [6, 4]
    assert wrong.first_mismatch["candidate"] == "nan"  # the poison shows through
    assert "C: 1 of 35 elements differ; first at [6,4]" in r.message


def test_host_skip_last_element(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy("for (int i = 0; i < n - 1; i++) y[i] = a * x[i] + y[i]; return 0;"))
    r = _host_run(_job(ref_lib, cand))
    assert r.status == WRONG
    y = [a for a in r.configs[0].arrays if a.name == "y"][0]
    assert not y.ok and y.n_mismatch == 1 and y.first_mismatch["index"] == [999]
    assert r.configs[0].failed_trial == 0


def test_host_writes_an_input(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy(SAXPY_OK.replace("return 0;", "x[3] = 0.0f; return 0;")))
    r = _host_run(_job(ref_lib, cand))
    assert r.status == WRONG
    x = [a for a in r.configs[0].arrays if a.name == "x"][0]
    assert not x.ok and x.role == READ_ONLY and x.first_mismatch["index"] == [3]
    assert "input" in r.message


def test_host_out_of_bounds_write_hits_the_guard(
    ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    cand = compile_c(_saxpy(SAXPY_OK.replace("return 0;", "y[n + 1] = 1.0f; return 0;")))
    r = _host_run(_job(ref_lib, cand))
    assert r.status == WRONG
    assert r.configs[0].guard_violations == [{"array": "y", "side": "after", "offset": 4}]
    assert "past its end" in r.message
    assert all(a.ok for a in r.configs[0].arrays)


def test_host_error_code_is_runtime_error(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy("return 1;"))  # cudaErrorInvalidValue
    r = _host_run(_job(ref_lib, cand))
    assert r.status == RUNTIME_ERROR
    assert r.error is not None and r.error["source"] == "candidate_return"
    assert r.error["code"] == 1 and r.error["name"] == "cudaErrorInvalidValue"
    assert r.error["config"] == "small" and r.error["trial"] == 0
    assert "returned 1 (cudaErrorInvalidValue" in r.message


def test_host_missing_symbol(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c("int other_cuda(void) { return 0; }", "nosym")
    r = _host_run(_job(ref_lib, cand))
    assert r.status == RUNTIME_ERROR and r.error["name"] == "SYMBOL_NOT_FOUND"
    assert 'extern "C"' in r.message


def test_host_candidate_segfault_is_a_crash(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy('printf("about to crash\\n"); *(volatile int *)0 = 1; return 0;'))
    r = _host_run(_job(ref_lib, cand))
    assert r.status == CRASH
    assert "about to crash" in r.stderr_tail  # C stdout is line-buffered into stderr
    assert r.signal == "SIGSEGV" and r.exit_code == -11
    assert r.phase == "candidate"
    assert "SIGSEGV in the candidate call (config 'small', trial 0)" in r.message


# -- the judge and the candidate's process (docs/evaluation.md §3) ------------------------

# The candidate writes the right result only when it is not in the judge's process: the
# judge is `python -m cudaperf_cli.evaluate.worker`, the candidate's process is
# `python -m cudaperf_cli.evaluate.device_side`.
_WHERE_AM_I = r"""
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
static int in_judge(void) {
  char buf[4096] = {0};
  int fd = open("/proc/self/cmdline", O_RDONLY);
  if (fd < 0) return 1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  for (ssize_t i = 0; i < n; i++) if (!buf[i]) buf[i] = ' ';
  return strstr(buf, "evaluate.worker") != 0 || strstr(buf, "device_side") == 0;
}
"""


def test_host_candidate_runs_outside_the_judge(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy("if (in_judge()) return 0; " + SAXPY_OK, prelude=_WHERE_AM_I))
    job = _job(ref_lib, cand, configs=[ConfigSpec("small", {"n": 1000}, trials=2),
                                        ConfigSpec("main", {"n": 5000}, trials=1, time=True)])
    r = _host_run(job)
    assert r.status == CORRECT, r.message + r.stderr_tail
    procs = r.details["processes"]
    assert procs["judge"] != procs["candidate"]["pid"] and procs["ping_ms"] > 0
    t = r.configs[1].timing
    assert t is not None and t.judge_sync is not None and t.judge_ping_ms == procs["ping_ms"]
    assert t.judge_sync.n == t.sync_call.n  # type: ignore[union-attr]


def test_host_candidate_exit_is_a_crash(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy("exit(0);", prelude="#include <stdlib.h>\n"))
    r = _host_run(_job(ref_lib, cand))
    assert r.status == CRASH and "without a valid result" in r.message, r.message
    assert "the candidate's process ended" in r.stderr_tail


def test_host_forged_reply_is_a_crash(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    """Code in the candidate's process writes a reply of its own on every descriptor (the
    reply pipe among them): the reply answers no request of the judge's."""
    forge = ('const char *m = "{\\"ok\\": true, \\"id\\": 1, \\"rc\\": 0, \\"sync\\": 0}\\n"; '
             "for (int fd = 3; fd < 64; fd++) write(fd, m, strlen(m)); " + SAXPY_OK)
    cand = compile_c(_saxpy(forge, prelude="#include <string.h>\n#include <unistd.h>\n"))
    r = _host_run(_job(ref_lib, cand))
    assert r.status == CRASH, r.message
    assert "reply to no request" in r.stderr_tail


def test_judge_clock_rule() -> None:
    # honest: the judge's round trip minus an empty one is about the call + synchronize
    assert judge_clock(gpu_ms=1.0, sync_ms=1.05, judge_ms=1.2, ping_ms=0.1) is None
    assert judge_clock(gpu_ms=0.005, sync_ms=0.02, judge_ms=1.5, ping_ms=0.05) is None  # slack
    # figures that claim a twentieth of what the judge saw
    msg = judge_clock(gpu_ms=0.5, sync_ms=0.5, judge_ms=10.1, ping_ms=0.1)
    assert msg is not None and "10 ms" in msg and "not the calls' time" in msg
    e2e = judge_clock(0.005, 0.005, 5.2, 0.1, what="end-to-end run")
    assert e2e is not None and e2e.startswith("the judge's clock saw each end-to-end run take 5.1 ms")


def test_host_infinite_loop_times_out(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy("for (;;) { __asm__ volatile(\"\"); } return 0;"))
    t0 = time.monotonic()
    r = _host_run(_job(ref_lib, cand), timeout_s=3)
    assert time.monotonic() - t0 < 20
    assert r.status == TIMEOUT
    assert 3 <= r.elapsed_s < 15
    assert r.phase == "candidate"
    assert re.search(r"timed out after \d+\.\d s \(limit 3 s\) in the candidate call", r.message)


def test_host_candidate_stdout_does_not_corrupt_result(
    ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    body = 'printf("hello from the candidate\\n"); ' + SAXPY_OK  # no fflush: the worker does
    r = _host_run(_job(ref_lib, compile_c(_saxpy(body))))
    assert r.status == CORRECT, r.message
    assert "hello from the candidate" in r.stderr_tail


def test_host_results_cached_after_a_few_calls_are_caught(
    ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    # Correct for the first 4 calls, then skips the work (e.g. "cached by address").
    body = "static int calls; if (++calls > 4) return 0;\n" + SAXPY_OK
    cfg = [ConfigSpec("main", {"n": 500}, trials=2, time=True)]
    lib = compile_c(_saxpy(body))
    r = _host_run(_job(ref_lib, lib, configs=cfg))
    assert r.status == WRONG, r.message
    # a verified timed repetition sees it first ...
    assert re.search(r"config 'main': timed call \d+ of \d+ \(input set [01]\): y: ", r.message), r.message
    assert r.configs[0].timing is not None and r.configs[0].timing.gpu is None
    # ... and, with none verified, the check after the last timed call
    r = _host_run(_job(ref_lib, lib, configs=cfg, timing=replace(FAST, checked_reps=0)))
    assert r.status == WRONG, r.message
    assert "after the timed repetitions (input set" in r.message
    assert r.configs[0].timing.checked_reps == []


def test_host_int_arrays_and_long_size(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    params = [
        ScalarParam("n", "long", ScalarKind.SIZE),
        ArrayParam("a", "int", ("n",)),
        ArrayParam("b", "int", ("n",)),
        ArrayParam("c", "int", ("n",)),
    ]
    src = (
        "#include <stdint.h>\nint iadd_cuda(long n, int32_t *a, int32_t *b, int32_t *c) {\n"
        "  for (long i = 0; i < n; i++) c[i] = a[i] + 3 * b[i] + (i == n / 2 ? OFF : 0);\n"
        "  return 0; }\n"
    )
    cfg = [ConfigSpec("c", {"n": 1001}, trials=1, time=True)]
    r = _host_run(_job(ref_lib, compile_c("#define OFF 0\n" + src, "iok"), "iadd", params, configs=cfg))
    assert r.status == CORRECT, r.message
    assert r.array_roles["c"] == WRITE_ONLY
    r = _host_run(_job(ref_lib, compile_c("#define OFF 1\n" + src, "ibad"), "iadd", params, configs=cfg))
    assert r.status == WRONG
    c = [a for a in r.configs[0].arrays if a.name == "c"][0]
    assert c.exact and c.n_mismatch == 1 and c.first_mismatch["index"] == [500]
    assert c.first_mismatch["candidate"] == c.first_mismatch["reference"] + 1


def test_host_in_place_stencil(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    params = [
        ScalarParam("tsteps", "int", ScalarKind.SIZE),
        ScalarParam("n", "int", ScalarKind.SIZE),
        ArrayParam("A", "double", ("n",)),
        ArrayParam("B", "double", ("n",)),
    ]
    src = (
        "int jacobi_cuda(int tsteps, int n, double *A, double *B) {\n"
        "  for (int t = 0; t < tsteps; t++) {\n"
        "    for (int i = 1; i < n - 1; i++) B[i] = 0.33333 * (A[i-1] + A[i] + A[i+1]);\n"
        "    for (int i = 1; i < n - 1; i++) A[i] = 0.33333 * (B[i-1] + B[i] + B[i+1]);\n"
        "  } return 0; }\n"
    )
    cfg = [ConfigSpec("c", {"tsteps": 4, "n": 300}, trials=2, time=True)]
    r = _host_run(_job(ref_lib, compile_c(src, "jac"), "jacobi", params, configs=cfg))
    assert r.status == CORRECT, r.message
    assert r.array_roles == {"A": READ_WRITE, "B": READ_WRITE}


def test_host_init_function_with_scalar_output(
    ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    params = [
        ScalarParam("n", "int", ScalarKind.SIZE),
        ScalarParam("alpha", "double", ScalarKind.COEFFICIENT),
        ArrayParam("x", "double", ("n",)),
        ArrayParam("y", "double", ("n",)),
    ]
    src = (
        "int daxpy_cuda(int n, double alpha, double *x, double *y) {\n"
        "  for (int i = 0; i < n; i++) y[i] += ALPHA * x[i]; return 0; }\n"
    )
    kw = dict(
        init_symbol="cudaperf_init_daxpy",
        init={"name": "init_daxpy", "params": ["n", "alpha", "x", "y"], "scalar_outputs": ["alpha"]},
    )
    ok = compile_c("#define ALPHA alpha\n" + src, "dok")
    r = _host_run(_job(ref_lib, ok, "daxpy", params, **kw))
    assert r.status == CORRECT, r.message
    # A candidate that ignores alpha is only caught if alpha really comes from init (2.5).
    fixed = compile_c("#define ALPHA 1.0\n" + src, "dbad")
    r = _host_run(_job(ref_lib, fixed, "daxpy", params, **kw))
    assert r.status == WRONG
    y = [a for a in r.configs[0].arrays if a.name == "y"][0]
    assert y.first_mismatch["index"] == [1]  # x[0] == 0 in the init data
    assert y.first_mismatch["reference"] == pytest.approx(2.0 + 2.5 / 17)


def test_host_reference_only(ref_lib: Path) -> None:
    cfg = [ConfigSpec("s", {"n": 100}, trials=1), ConfigSpec("m", {"n": 5000}, trials=1, time=True)]
    r = _host_run(_job(ref_lib, None, configs=cfg))
    assert r.status == REFERENCE_ONLY, r.message
    assert r.array_roles == {"x": READ_ONLY, "y": READ_WRITE}
    t = r.configs[1].timing
    assert t is not None and t.gpu is None and t.cpu is not None and t.cpu.n == 3
    assert r.device is None  # no device needed


def test_given_cpu_baseline_is_used(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy(SAXPY_OK))
    cfg = [ConfigSpec("m", {"n": 1000}, trials=1, time=True)]
    r = _host_run(_job(ref_lib, cand, configs=cfg, cpu_baseline_ms={"m": 123.0}))
    t = r.configs[0].timing
    assert r.status == CORRECT and t.cpu is None and t.cpu_median_ms == 123.0
    assert t.kernel_speedup == pytest.approx(123.0 / t.gpu.median_ms)
    assert any("above 10x" in w for w in t.warnings)
    assert any("above 10x" in w for w in r.warnings)


def test_reference_crash_is_a_reference_error(
    ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    cand = compile_c(_saxpy(SAXPY_OK))
    job = _job(ref_lib, cand)
    job.ref_symbol = "cudaperf_ref_crash"
    r = _host_run(job)
    assert r.status == REFERENCE_ERROR, r.message
    assert r.signal == "SIGSEGV" and "before the candidate ran" in r.message


def test_missing_reference(tmp_path: Path, ref_lib: Path) -> None:
    r = _host_run(_job(tmp_path / "nope.so", tmp_path / "c.so"))
    assert r.status == REFERENCE_ERROR and "cannot load the reference library" in r.message
    job = _job(ref_lib, tmp_path / "c.so")
    job.ref_symbol = "cudaperf_ref_missing"
    r = _host_run(job)
    assert r.status == REFERENCE_ERROR and "does not export cudaperf_ref_missing" in r.message


# ---------------------------------------------------------------------------------------
# No device, process control
# ---------------------------------------------------------------------------------------


def test_no_device_is_reported_cleanly(ref_lib: Path, tmp_path: Path) -> None:
    # Real CUDA backend with no visible device (no driver here; CUDA_VISIBLE_DEVICES=""
    # hides the GPU on a GPU machine).
    r = run_evaluation(
        _job(ref_lib, tmp_path / "c.so"), timeout_s=60, env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert r.status == NO_DEVICE, r.message + r.stderr_tail
    assert r.message.startswith("no CUDA device: ")
    assert r.exit_code == 0 and r.configs == []


def test_probe_device_never_raises() -> None:
    info = probe_device(timeout_s=60)
    assert isinstance(info, dict) and "available" in info
    if not info["available"]:
        assert info["reason"]
        again = device_info()
        assert again["available"] is False and again["reason"]
    else:
        assert info["arch"].startswith("sm_") and info["l2_bytes"] > 0


def _hook_job(ref_lib: Path, hook: str) -> EvalJob:
    return _job(ref_lib, ref_lib, debug_hook=hook)


def test_hanging_worker_is_killed_at_the_timeout(ref_lib: Path) -> None:
    t0 = time.monotonic()
    r = _host_run(_hook_job(ref_lib, "sleep:120"), timeout_s=2, **HOOKS)
    assert time.monotonic() - t0 < 15
    assert r.status == TIMEOUT and 2 <= r.elapsed_s < 12 and r.signal == "SIGKILL"
    assert r.phase == "hook.sleep"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] == "Z"  # zombie: dead, not reaped
    except FileNotFoundError:
        return True


def test_timeout_kills_the_whole_process_group(ref_lib: Path) -> None:
    r = _host_run(_hook_job(ref_lib, "spawn-sleep:120"), timeout_s=3, **HOOKS)
    assert r.status == TIMEOUT
    m = re.search(r"spawned pid (\d+)", r.stderr_tail)
    assert m, r.stderr_tail
    pid = int(m.group(1))
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid), f"grandchild {pid} survived the timeout"


def test_worker_signal_is_a_crash(ref_lib: Path) -> None:
    r = _host_run(_hook_job(ref_lib, "segv"), **HOOKS)
    assert r.status == CRASH and r.signal == "SIGSEGV" and r.exit_code == -11
    assert "killed by SIGSEGV" in r.message
    r = _host_run(_hook_job(ref_lib, "abort"), **HOOKS)
    assert r.status == CRASH and r.signal == "SIGABRT"


def test_worker_exit_status_is_a_crash(ref_lib: Path) -> None:
    r = _host_run(_hook_job(ref_lib, "exit:3"), **HOOKS)
    assert r.status == CRASH and r.exit_code == 3 and r.signal is None
    assert "exited with status 3" in r.message
    assert "exiting on request" in r.stderr_tail


def test_worker_garbage_output_is_a_crash(ref_lib: Path) -> None:
    r = _host_run(_hook_job(ref_lib, "garbage"), **HOOKS)
    assert r.status == CRASH and "without a valid result" in r.message
    assert "this is not JSON" in r.message


def test_stderr_tail_is_bounded(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    job = _job(ref_lib, compile_c(_saxpy(SAXPY_OK)), debug_hook="stderr:300000")
    r = _host_run(job, **HOOKS)
    assert r.status == CORRECT
    assert len(r.stderr_tail) <= 4000
    assert "last line of the test hook" in r.stderr_tail


def test_hooks_are_ignored_without_the_env(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    job = _job(ref_lib, compile_c(_saxpy(SAXPY_OK)), debug_hook="segv")
    assert _host_run(job).status == CORRECT


def test_malformed_job_raises_in_the_parent(ref_lib: Path) -> None:
    with pytest.raises(ValueError):
        run_evaluation(_job(ref_lib, None, configs=[]), timeout_s=5)


def test_worker_main_rejects_unreadable_job(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "cudaperf_cli.evaluate.worker"],
        input="{not json", capture_output=True, text=True, timeout=60,
        env={**os.environ, **HOST},
    )
    doc = json.loads(proc.stdout)
    assert doc["status"] == CRASH and "unreadable job" in doc["message"]
    assert proc.stdout.count("\n") == 1  # exactly one JSON document


# ---------------------------------------------------------------------------------------
# CudaBackend against a fake driver (host memory behind the real cuda.bindings types)
# ---------------------------------------------------------------------------------------


class _FakeEvent:
    def __init__(self) -> None:
        self.t = 0.0

    def __sub__(self, other: "_FakeEvent") -> float:
        return (self.t - other.t) * 1e3

    def sync(self) -> None:  # cuda.core's Event.sync(): wait for the event
        pass


class _FakeBuffer:
    def __init__(self, size: int) -> None:
        self.mem = np.zeros(size + 256, dtype=np.uint8)
        self.handle = (self.mem.ctypes.data + 255) // 256 * 256
        self.closed = False

    def close(self, stream: Any = None) -> None:
        self.closed = True


class _FakeStream:
    def record(self, event: Any = None, options: Any = None) -> Any:
        event = event or _FakeEvent()
        event.t = time.perf_counter()
        return event


class _FakeDevice:
    buffers: list[_FakeBuffer] = []

    def __init__(self, ordinal: int = 0) -> None:
        self.ordinal = ordinal
        self.default_stream = _FakeStream()

    def set_current(self) -> None:
        pass

    def allocate(self, size: int, *, stream: Any) -> _FakeBuffer:
        assert isinstance(stream, _FakeStream)
        b = _FakeBuffer(size)
        _FakeDevice.buffers.append(b)
        return b

    def create_event(self, options: Any = None) -> _FakeEvent:
        assert options.timing_enabled
        return _FakeEvent()


def _fake_driver(monkeypatch: pytest.MonkeyPatch, *, count: int = 1, init_err: int = 0,
                 sync_err: int = 0) -> dict[str, list[Any]]:
    import ctypes
    import types

    from cuda.bindings import driver as drv

    from cudaperf_cli.evaluate import backend

    ok = drv.CUresult.CUDA_SUCCESS
    calls: dict[str, list[Any]] = {}
    monkeypatch.setattr(_FakeDevice, "buffers", [])

    def log(name: str, *args: Any) -> None:
        calls.setdefault(name, []).append(args)

    def ptr(p: Any) -> int:
        assert isinstance(p, drv.CUdeviceptr), type(p)
        return int(p)

    def stream(s: Any) -> None:
        assert isinstance(s, drv.CUstream) and int(s) == int(drv.CU_STREAM_LEGACY)

    attrs = {
        "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": 9,
        "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": 0,
        "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE": 50 << 20,
        "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": 132,
    }

    def get_attr(attr: Any, dev: Any) -> tuple[Any, int]:
        return ok, attrs.get(attr.name, 7)

    def h2d(dst: Any, src: int, n: int) -> tuple[Any]:
        log("h2d", n)
        ctypes.memmove(ptr(dst), src, n)
        return (ok,)

    def d2h(dst: int, src: Any, n: int) -> tuple[Any]:
        log("d2h", n)
        ctypes.memmove(dst, ptr(src), n)
        return (ok,)

    def d2d(dst: Any, src: Any, n: int, s: Any) -> tuple[Any]:
        stream(s)
        log("d2d", n)
        ctypes.memmove(ptr(dst), ptr(src), n)
        return (ok,)

    def memset32(dst: Any, v: int, n: int, s: Any) -> tuple[Any]:
        stream(s)
        log("memset32", v, n)
        np.ctypeslib.as_array((ctypes.c_uint32 * n).from_address(ptr(dst)))[:] = v
        return (ok,)

    def memset8(dst: Any, v: int, n: int, s: Any) -> tuple[Any]:
        stream(s)
        log("memset8", v, n)
        ctypes.memset(ptr(dst), v, n)
        return (ok,)

    fakes = {
        "cuInit": lambda flags: (drv.CUresult(init_err),),
        "cuDeviceGetCount": lambda: (ok, count),
        "cuDeviceGet": lambda i: (ok, drv.CUdevice(i)),
        "cuDeviceGetAttribute": get_attr,
        "cuDeviceGetName": lambda n, d: (ok, b"Fake H200\0\0\0"),
        "cuDeviceTotalMem": lambda d: (ok, 141 << 30),
        "cuMemGetInfo": lambda: (ok, 140 << 30, 141 << 30),
        "cuDriverGetVersion": lambda: (ok, 12080),
        "cuGetErrorString": lambda e: (ok, b"fake description of " + e.name.encode()),
        "cuMemcpyHtoD": h2d,
        "cuMemcpyDtoH": d2h,
        "cuMemcpyDtoDAsync": d2d,
        "cuMemsetD32Async": memset32,
        "cuMemsetD8Async": memset8,
        "cuCtxSynchronize": lambda: (drv.CUresult(sync_err),),
    }
    for name, fn in fakes.items():
        monkeypatch.setattr(drv, name, fn)
    from cuda.core import EventOptions

    core = types.SimpleNamespace(
        Device=_FakeDevice, EventOptions=EventOptions, LEGACY_DEFAULT_STREAM=_FakeStream()
    )
    monkeypatch.setattr(backend, "_import_core", lambda: core)
    return calls


def _in_process(job: EvalJob) -> EvalResult:
    from cudaperf_cli.evaluate.worker import State, Worker

    return Worker(job, State(None), "cuda").run()


def test_cuda_backend_on_a_fake_driver(
    monkeypatch: pytest.MonkeyPatch, ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    calls = _fake_driver(monkeypatch)
    cfg = [ConfigSpec("s", {"n": 1000}, trials=2), ConfigSpec("m", {"n": 4096}, trials=1, time=True)]
    ts = TimingSettings(warmup_reps=1, min_reps=3, max_reps=5, min_total_ms=0.0,
                        e2e_reps=2, sync_reps=2)
    r = _in_process(_job(ref_lib, compile_c(_saxpy(SAXPY_OK)), configs=cfg, timing=ts))
    assert r.status == CORRECT, r.message
    d = r.device
    assert d["name"] == "Fake H200" and d["arch"] == "sm_90" and d["compute_capability"] == "9.0"
    assert d["l2_bytes"] == 50 << 20 and d["sm_count"] == 132
    assert d["driver_cuda_version"] == "12.8" and d["memory_free_bytes"] == 140 << 30
    t = r.configs[1].timing
    assert t.flush_bytes == 256 << 20  # max(2 x 50 MiB, 256 MiB)
    assert ((0, (256 << 20) // 4)) in calls["memset32"]  # the L2 flush
    assert 3 <= t.gpu.n <= 5 and t.e2e.n == 2 and t.sync_call.n == 2
    assert ("d2d" in calls) and all(n == 4096 * 4 for (n,) in calls["d2d"])  # restore y
    assert (0x5C, GUARD_BYTES) in calls["memset8"]  # guards
    assert all(b.closed for b in _FakeDevice.buffers)  # everything freed


def test_a_failing_event_record_is_a_runtime_error_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    """After a kernel faults, cuda.core's event record raises its own error; the worker
    reports it as the driver error it names (runtime_error), not as its own crash."""
    _fake_driver(monkeypatch)

    def record(self: Any, event: Any = None, options: Any = None) -> Any:
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")

    monkeypatch.setattr(_FakeStream, "record", record)
    cfg = [ConfigSpec("s", {"n": 1000}, trials=1), ConfigSpec("m", {"n": 4096}, trials=1, time=True)]
    r = _in_process(_job(ref_lib, compile_c(_saxpy(SAXPY_OK)), configs=cfg))
    assert r.status == RUNTIME_ERROR, r.message
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in r.message and r.configs[0].status == CORRECT


def test_cuda_backend_fake_mm_poisons_write_only(
    monkeypatch: pytest.MonkeyPatch, ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    calls = _fake_driver(monkeypatch)
    params = [
        ScalarParam("n", "int", ScalarKind.SIZE),
        ScalarParam("m", "int", ScalarKind.SIZE),
        ScalarParam("k", "int", ScalarKind.SIZE),
        ArrayParam("A", "double", ("n", "k")),
        ArrayParam("B", "double", ("k", "m")),
        ArrayParam("C", "double", ("n", "m")),
    ]
    src = (
        "int mm_cuda(int n, int m, int k, double *A, double *B, double *C) {\n"
        "  for (int i = 0; i < n; i++) for (int j = 0; j < m; j++) {\n"
        "    if (i == 1 && j == 2) continue;\n"
        "    double s = 0; for (int l = 0; l < k; l++) s += A[i*k+l] * B[l*m+j];\n"
        "    C[i*m+j] = s; }\n  return 0; }\n"
    )
    r = _in_process(_job(ref_lib, compile_c(src, "mmf"), "mm", params,
                         configs=[ConfigSpec("s", {"n": 3, "m": 4, "k": 5})]))
    assert r.status == WRONG
    c = [a for a in r.configs[0].arrays if a.name == "C"][0]
    assert c.first_mismatch == {"index": [1, 2], "candidate": "nan", "reference": c.first_mismatch["reference"]}
    assert (0xFFFFFFFF, 3 * 4 * 2) in calls["memset32"]  # C poisoned as 32-bit words


def test_cuda_backend_fake_failed_synchronize(
    monkeypatch: pytest.MonkeyPatch, ref_lib: Path, compile_c: Callable[..., Path]
) -> None:
    _fake_driver(monkeypatch, sync_err=700)
    r = _in_process(_job(ref_lib, compile_c(_saxpy(SAXPY_OK))))
    assert r.status == RUNTIME_ERROR
    assert r.error["source"] == "synchronize" and r.error["name"] == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert "fake description of CUDA_ERROR_ILLEGAL_ADDRESS" in r.message


@pytest.mark.parametrize("kw,reason", [
    ({"count": 0}, "no CUDA device"),
    ({"init_err": 100}, "cuInit failed: CUDA_ERROR_NO_DEVICE"),
])
def test_cuda_backend_fake_no_device(
    monkeypatch: pytest.MonkeyPatch, ref_lib: Path, kw: dict[str, int], reason: str
) -> None:
    _fake_driver(monkeypatch, **kw)
    r = _in_process(_job(ref_lib, ref_lib))
    assert r.status == NO_DEVICE and reason in r.message


CHEATS = Path(__file__).parent / "data" / "cheats"


def test_host_timed_result_cache_is_caught(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    # A real computation on a miss, then a result cache keyed by the pointers and the first
    # and last 4 values of x and y (tests/data/cheats/c_timing_cache/, the host emulation's
    # copy of the GPU cheat): a hit copies the cached output into y.
    cheat = compile_c((CHEATS / "c_timing_cache" / "saxpy_cache_host.c").read_text(), "cache")
    honest = compile_c(_saxpy(SAXPY_OK), "honest")
    cfg = [ConfigSpec("small", {"n": 100}, trials=2), ConfigSpec("main", {"n": 5000}, trials=1, time=True)]
    # With one input set (the timing before issue 14) every call after the first hits, and
    # the output of the last call is right for its inputs: the cheat passes.
    one = replace(FAST, input_sets=1)
    r = _host_run(_job(ref_lib, cheat, configs=cfg, timing=one))
    assert r.status == CORRECT, r.message
    assert r.configs[1].timing.input_sets == 1 and r.configs[1].timing.input_set_calls[0] > 1
    # Two input sets at the same addresses: its sample cannot tell them apart, it serves the
    # other set's output, and a verified timed call (one on each set) catches it.
    r = _host_run(_job(ref_lib, cheat, configs=cfg))
    assert r.status == WRONG, r.message
    assert re.fullmatch(r"config 'main': timed call \d+ of \d+ \(input set [01]\): y: \d+ of 5000 "
                        r"elements differ.*", r.message), r.message
    assert r.configs[1].status == WRONG and r.configs[1].arrays[0].name == "y"
    t = r.configs[1].timing
    assert t is not None and t.gpu is None and t.input_sets == 2 and 1 <= len(t.checked_reps) <= 2
    assert r.summary["gpu_ms"] is None
    # The honest control passes with the same settings.
    r = _host_run(_job(ref_lib, honest, configs=cfg))
    assert r.status == CORRECT, r.message
    t = r.configs[1].timing
    assert t.input_sets == 2 and min(t.input_set_calls) > 0 and len(t.checked_reps) == 2


def test_host_second_input_set_that_does_not_fit_falls_back_to_one(
    ref_lib: Path, compile_c: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudaperf_cli.evaluate.backend import HostBackend
    from cudaperf_cli.evaluate.worker import State, Worker

    cand = compile_c(_saxpy(SAXPY_OK), "cand")
    cfg = [ConfigSpec("main", {"n": 4000}, trials=1, time=True)]
    # The device has room for the arrays but not for the second set and as much again.
    monkeypatch.setattr(HostBackend, "mem_free", lambda self: 3 * 4000 * 4)
    r = Worker(_job(ref_lib, cand, configs=cfg), State(None), "host").run()
    assert r.status == CORRECT, r.message
    t = r.configs[0].timing
    assert t.input_sets == 1 and t.input_set_calls[0] > 0 and len(t.checked_reps) == 2
    assert any(w.startswith("main: one input set in timing: the second needs") and "are free" in w
               for w in r.warnings), r.warnings
    # arrays with guards, y's pristine copy, the flush: no copy of either set beyond that
    assert r.peak_gpu_bytes == 2 * (4000 * 4 + 2 * GUARD_BYTES) + 4000 * 4 + (1 << 16)


def test_host_init_data_get_a_scaled_second_set(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    # Data an init function made (structured, not random) keep their structure: set 1 scales
    # a sparse subset of the non-zero floating elements instead of drawing new values.
    from cudaperf_cli.evaluate.worker import State, Worker

    cand = compile_c(
        "int daxpy_cuda(int n, double alpha, double *x, double *y) {\n"
        "  for (int i = 0; i < n; i++) y[i] += alpha * x[i];\n  return 0;\n}\n", "daxpy")
    params = [ScalarParam("n", "int", ScalarKind.SIZE), ScalarParam("alpha", "double", ScalarKind.COEFFICIENT),
              ArrayParam("x", "double", ("n",)), ArrayParam("y", "double", ("n",))]
    job = _job(ref_lib, cand, "daxpy", params, init_symbol="cudaperf_init_daxpy",
               init={"name": "init_daxpy", "params": ["n", "alpha", "x", "y"], "scalar_outputs": ["alpha"]},
               configs=[ConfigSpec("main", {"n": 3000}, trials=1, time=True)])
    w = Worker(job, State(None), "host")
    r = w.run()
    assert r.status == CORRECT, r.message
    assert r.configs[0].timing.input_sets == 2
    alt = w.preps[0].alt
    assert alt is not None
    x0, x1 = w.preps[0].trials[0].host.arrays["x"], alt.host.arrays["x"]
    diff = np.flatnonzero(x0 != x1)
    assert 0 < diff.size <= 3000 // 256 + 1
    assert np.allclose(x1[diff], x0[diff] * (1 + 2.0 ** -2), rtol=0, atol=0)
    assert w._input_set_spec(0)["rule"] == "scale"


# ---------------------------------------------------------------------------------------
# Bounded in time: the gate, the run's reference outputs, roles at the small config, slow,
# the adaptive CPU baseline (host emulation)
# ---------------------------------------------------------------------------------------

#: References that leave a trace: each call appends its n to $CUDAPERF_TEST_COUNT; nap
#: sleeps n ms; hang never returns.
COUNTING_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void note(int n) {
  const char *p = getenv("CUDAPERF_TEST_COUNT");
  if (p) { FILE *f = fopen(p, "a"); if (f) { fprintf(f, "%d\n", n); fclose(f); } }
}
void cudaperf_ref_saxpy(int n, float a, void *xv, void *yv) {
  const float *x = xv; float *y = yv;
  note(n);
  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
void cudaperf_ref_nap(int n, void *yv) {
  double *y = yv;
  note(n);
  usleep(n * 1000);
  y[0] = n;
}
void cudaperf_ref_hang(int n, float a, void *x, void *y) { for (;;) { usleep(1000); } }
"""

NAP_PARAMS = [ScalarParam("n", "int", ScalarKind.SIZE), ArrayParam("y", "double", ("4",))]


@pytest.fixture
def counting(compile_c: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """(the counting reference library, the file its calls are appended to)."""
    return compile_c(COUNTING_C, "counting"), tmp_path / "calls.txt"


def _calls(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _logged_calls(r: EvalResult) -> list[int]:
    """The candidate's calls that NAP_COUNT logged to the worker's stderr."""
    return [int(x) for x in re.findall(r"cudaperf-test-call (\d+)", r.stderr_tail or "")]


SMALL_MAIN = [ConfigSpec("small", {"n": 100}, trials=2), ConfigSpec("main", {"n": 5000}, trials=1, time=True)]


def test_roles_at_the_small_config_and_reference_outputs_reused(
    counting: tuple[Path, Path], compile_c: Callable[..., Path], tmp_path: Path
) -> None:
    lib, calls = counting
    env = {"CUDAPERF_TEST_COUNT": str(calls)}
    refs = tmp_path / "refs"
    base = _host_run(_job(lib, None, configs=SMALL_MAIN, cpu_reps=1, reference_outputs=str(refs)), **env)
    assert base.status == REFERENCE_ONLY, base.message
    assert base.array_roles == {"x": READ_ONLY, "y": READ_WRITE}
    # Classification at trial 0 of 'small' only (its first run is that trial's output), the
    # second small trial, main's trial 0 (also the one CPU run), main's input set 1 (the
    # timing's second set): 5 reference calls, main twice.
    assert _calls(calls) == [100, 100, 100, 5000, 5000]
    assert base.configs[1].timing.cpu.n == 1 and base.configs[1].timing.cpu_total_s > 0
    assert base.prepare_s is None and base.lock_wait_s == 0.0 and base.peak_gpu_bytes is None
    index = json.loads((refs / "index.json").read_text())
    assert [(e["config"], e["trial"], sorted(e["arrays"])) for e in index["entries"]] == [
        ("small", 0, ["y"]), ("small", 1, ["y"]), ("main", 0, ["y"])]  # x: read-only, not kept
    main_sets = index["entries"][2]["sets"]
    assert list(main_sets) == ["1"] and main_sets["1"]["spec"]["seed"] == [0, 1, 0, 1]
    assert sorted(p.name for p in refs.glob("*.npy")) == [
        "c0-t0-y.npy", "c0-t1-y.npy", "c1-t0-s1-y.npy", "c1-t0-y.npy"]

    cand = compile_c(_saxpy(SAXPY_OK), "cand")
    kw = dict(configs=SMALL_MAIN, reference_outputs=str(refs), array_roles=base.array_roles,
              cpu_baseline_ms={"main": base.configs[1].timing.cpu_median_ms})
    calls.unlink()
    r = _host_run(_job(lib, cand, **kw), **env)
    assert r.status == CORRECT, r.message
    assert _calls(calls) == []  # the reference never ran: its stored outputs were compared
    assert not any("not used" in w for w in r.warnings), r.warnings
    assert r.configs[0].ref_ms is not None and r.configs[1].trials_run == 1
    assert r.configs[1].timing.input_sets == 2  # set 1's outputs came from the folder too

    bad = compile_c(_saxpy("for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i] + (n > 1000); return 0;"), "bad")
    r = _host_run(_job(lib, bad, **kw), **env)
    assert r.status == WRONG and "config 'main' trial 0" in r.message and _calls(calls) == []

    # Another seed: the stored outputs do not match; the worker runs the reference itself
    # (main: trial 0 and input set 1).
    r = _host_run(_job(lib, cand, seed=5, **kw), **env)
    assert r.status == CORRECT, r.message
    assert _calls(calls) == [100, 100, 5000, 5000]
    assert any("not used" in w and "other sizes or seed" in w for w in r.warnings), r.warnings
    # A foreign index (another library) is not used at all.
    other = compile_c(COUNTING_C + "\nint cudaperf_unused;\n", "counting2")
    calls.unlink()
    r = _host_run(_job(other, cand, **kw), **env)
    assert r.status == CORRECT and _calls(calls) == [100, 100, 5000, 5000]
    assert any("written for another ref lib" in w for w in r.warnings), r.warnings


def test_single_config_classifies_there_and_reuses_the_first_run(
    counting: tuple[Path, Path], compile_c: Callable[..., Path]
) -> None:
    lib, calls = counting
    cand = compile_c(_saxpy(SAXPY_OK), "cand")
    cfg = [ConfigSpec("main", {"n": 3000}, trials=1, time=True)]
    r = _host_run(_job(lib, cand, configs=cfg, cpu_reps=1), CUDAPERF_TEST_COUNT=str(calls))
    assert r.status == CORRECT, r.message
    # classification (2 runs) gives trial 0's output and the CPU run; the third run is the
    # reference on the timing's input set 1
    assert _calls(calls) == [3000, 3000, 3000]


def test_slow_candidate_stops_timing_early(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy("usleep(20000);\n" + SAXPY_OK, "#include <unistd.h>\n"), "nap")
    cfg = [ConfigSpec("main", {"n": 1000}, trials=1, time=True)]
    r = _host_run(_job(ref_lib, cand, configs=cfg, slow_ms=5.0, cpu_baseline_ms={"main": 2.0}))
    assert r.status == SLOW, r.message
    t = r.configs[0].timing
    assert t.slow and t.warmup_reps == 1 and t.planned_reps == 0 and t.gpu.n == 1
    assert t.estimate_ms >= 15 and r.summary["gpu_ms"] == t.gpu.median_ms == t.estimate_ms
    assert t.kernel_speedup == pytest.approx(2.0 / t.estimate_ms)
    assert t.e2e is None and t.sync_call is None
    assert re.search(r"stopped timing after 1 call\(s\): ~\d+(\.\d+)? ms > slow limit 5 ms", r.message)
    assert r.verified and not r.ok
    fast = _host_run(_job(ref_lib, cand, configs=cfg, slow_ms=1000.0, cpu_baseline_ms={"main": 2.0},
                          timing=TimingSettings(min_reps=3, max_reps=5, min_total_ms=1.0, warmup_ms=0.0,
                                                e2e_reps=2, sync_reps=2, flush_bytes=1 << 12)))
    assert fast.status == CORRECT and not fast.configs[0].timing.slow


def test_e2e_and_sync_repetitions_fit_the_time_budget(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy("usleep(30000);\n" + SAXPY_OK, "#include <unistd.h>\n"), "nap30")
    ts = TimingSettings(warmup_reps=1, warmup_ms=0.0, min_reps=3, max_reps=10, min_total_ms=1.0,
                        max_total_ms=100.0, e2e_reps=10, sync_reps=10, flush_bytes=1 << 12)
    r = _host_run(_job(ref_lib, cand, configs=[ConfigSpec("main", {"n": 100}, trials=1, time=True)],
                       timing=ts, cpu_baseline_ms={"main": 1.0}))
    assert r.status == CORRECT, r.message
    t = r.configs[0].timing
    # never planned past max_total_ms: 3 when a call takes its 30 ms, 2 when a loaded
    # machine stretches the estimate past 33.3 ms
    assert 2 <= t.gpu.n <= 3 and t.gpu.n * t.estimate_ms <= ts.max_total_ms
    assert 1 <= t.sync_call.n <= 3 and 1 <= t.e2e.n <= 3  # ~30 ms each in a 100 ms budget


def test_a_call_longer_than_the_budget_is_timed_once(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    cand = compile_c(_saxpy("usleep(30000);\n" + SAXPY_OK, "#include <unistd.h>\n"), "nap30b")
    ts = TimingSettings(warmup_reps=1, warmup_ms=0.0, min_reps=10, max_reps=100, min_total_ms=1.0,
                        max_total_ms=20.0, e2e_reps=10, sync_reps=10, flush_bytes=1 << 12)
    r = _host_run(_job(ref_lib, cand, configs=[ConfigSpec("main", {"n": 100}, trials=1, time=True)],
                       timing=ts, cpu_baseline_ms={"main": 1.0}))
    assert r.status == CORRECT, r.message
    t = r.configs[0].timing
    assert t.gpu.n == 1 and t.warmup_reps == 0 and t.planned_reps == 1  # its first call is the sample
    assert t.e2e.n == 1 and t.sync_call.n == 1
    assert r.summary["gpu_ms"] >= 25 and r.summary["gpu_ms_iqr"] is None  # no spread from 1 sample


#: A candidate that naps ``NAP_US`` at the main size (n > 1000) and appends its n to the
#: line "cudaperf-test-call <n>" to stderr: the calls the evaluation made (a file would not
#: do: the worker is confined, the candidate can write no file of the user's).
NAP_COUNT = _saxpy(
    "fprintf(stderr, \"cudaperf-test-call %d\\n\", n); fflush(stderr);\n"
    "if (n > 1000) usleep(NAP_US);\n" + SAXPY_OK,
    "#include <stdlib.h>\n#include <unistd.h>\n")


def _nap(compile_c: Callable[..., Path], us: int) -> Path:
    return compile_c(f"#define NAP_US {us}\n" + NAP_COUNT, f"nap{us}")


def test_a_long_verification_call_is_every_first_sample(
    ref_lib: Path, compile_c: Callable[..., Path], tmp_path: Path
) -> None:
    """The verification's call at the timed size, when it alone fills max_total_ms, is
    the kernel sample, the call + synchronize and the end-to-end one: one call in all."""
    cand = _nap(compile_c, 120_000)
    ts = TimingSettings(warmup_reps=1, warmup_ms=0.0, min_reps=10, max_reps=100, min_total_ms=1.0,
                        max_total_ms=50.0, e2e_reps=10, sync_reps=10, flush_bytes=1 << 12)
    r = _host_run(_job(ref_lib, cand, configs=SMALL_MAIN, timing=ts, cpu_baseline_ms={"main": 1.0}))
    assert r.status == CORRECT, r.message
    assert _logged_calls(r) == [100, 100, 5000]  # small's two trials, then main's verification alone
    t = r.configs[1].timing
    assert t.gpu.n == 1 and t.planned_reps == 1 and t.warmup_reps == 0 and t.gpu.median_ms >= 115
    assert t.sync_call.n == 1 and t.sync_call.median_ms >= t.gpu.median_ms
    assert t.e2e.n == 1 and t.e2e.median_ms >= t.sync_call.median_ms
    assert t.bytes_in == 2 * 5000 * 4 and t.bytes_out == 5000 * 4
    # shorter than the budget: timed as before (its own warm-up and repetitions)
    r = _host_run(_job(ref_lib, _nap(compile_c, 10_000), configs=SMALL_MAIN, timing=ts,
                       cpu_baseline_ms={"main": 1.0}))
    assert r.status == CORRECT, r.message
    assert len(_logged_calls(r)) > 2 + 1 + 3 and r.configs[1].timing.gpu.n >= 2


def test_a_slow_verification_call_needs_no_timing_call(
    ref_lib: Path, compile_c: Callable[..., Path], tmp_path: Path
) -> None:
    cand = _nap(compile_c, 120_000)
    ts = TimingSettings(max_total_ms=50.0, flush_bytes=1 << 12)
    r = _host_run(_job(ref_lib, cand, configs=SMALL_MAIN, timing=ts, slow_ms=60.0,
                       cpu_baseline_ms={"main": 6.0}))
    assert r.status == SLOW, r.message
    assert _logged_calls(r) == [100, 100, 5000]
    t = r.configs[1].timing
    assert t.slow and t.gpu.n == 1 and t.estimate_ms >= 115 and t.e2e is None
    assert re.search(r"stopped timing after 1 call\(s\): ~\d+(\.\d+)? ms > slow limit 60 ms", r.message)


def test_a_call_past_the_slow_stop_is_stopped(
    ref_lib: Path, compile_c: Callable[..., Path], tmp_path: Path
) -> None:
    """PolyBench lu's one-thread candidate ran 132 s a call against a 40 s slow limit: the
    call is stopped at the limit (here its 0.3 s floor), the verdict `timeout`, the
    smaller configuration's verification kept."""
    cand = _nap(compile_c, 20_000_000)
    ts = TimingSettings(flush_bytes=1 << 12, slow_stop_floor_ms=300.0)
    t0 = time.monotonic()
    r = _host_run(_job(ref_lib, cand, configs=SMALL_MAIN, timing=ts, slow_ms=50.0,
                       cpu_baseline_ms={"main": 5.0}), timeout_s=60)
    took = time.monotonic() - t0
    assert r.status == TIMEOUT, r.message
    assert took < 10, took
    assert re.fullmatch(r"config 'main' trial 0: the candidate call ran past 300 ms \(the slow limit "
                        r"50 ms, at least 300 ms; far too slow, or hung\) and was stopped: not verified "
                        r"at this size", r.message)
    small, main = r.configs
    assert small.status == CORRECT and small.trials_run == 2
    assert main.status == TIMEOUT and main.trials_run == 1 and main.timing is None
    assert _logged_calls(r) == [100, 100, 5000] and r.phase == "done" and r.exit_code == 0
    assert not r.verified
    # the floor: a call under it is verified and ends `slow`
    r = _host_run(_job(ref_lib, _nap(compile_c, 100_000), configs=SMALL_MAIN, timing=ts,
                       slow_ms=20.0, cpu_baseline_ms={"main": 2.0}))
    assert r.status == SLOW, r.message


def test_cpu_baseline_adapts_its_run_count(counting: tuple[Path, Path]) -> None:
    lib, calls = counting
    job = EvalJob(
        ref_lib=str(lib), ref_symbol="cudaperf_ref_nap", cand_lib=None, cand_symbol="nap_cuda",
        params=[param_to_json(p) for p in NAP_PARAMS],
        configs=[ConfigSpec("main", {"n": 100}, trials=1, time=True)], cpu_reps=10, cpu_budget_s=0.35,
    )
    r = _host_run(job, CUDAPERF_TEST_COUNT=str(calls))
    assert r.status == REFERENCE_ONLY, r.message
    cpu = r.configs[0].timing.cpu
    assert cpu.n == 3 and cpu.median_ms >= 100  # floor(350 ms / ~100 ms)
    assert r.configs[0].timing.cpu_total_s == pytest.approx(cpu.mean_ms * 3 / 1e3)
    assert "over 3 run(s)" in r.configs[0].message
    assert _calls(calls) == [100] * 4  # 2 classification runs (the first is CPU run 1) + 2
    calls.unlink()
    job.configs = [ConfigSpec("main", {"n": 1}, trials=1, time=True)]
    r = _host_run(job, CUDAPERF_TEST_COUNT=str(calls))
    assert r.configs[0].timing.cpu.n == 10  # a 1 ms reference: cpu_reps bounds it


def test_gate_lock_wait_and_preparation_are_not_in_the_timeout(
    ref_lib: Path, compile_c: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from cudaperf_cli.evaluate.gpu_lock import gpu_lock

    monkeypatch.setenv("CUDAPERF_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDAPERF_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cand = compile_c(_saxpy(SAXPY_OK), "cand")
    got = threading.Event()

    def hold() -> None:
        with gpu_lock(0):
            got.set()
            time.sleep(6)

    t = threading.Thread(target=hold)
    t.start()
    got.wait(10)
    r = _host_run(_job(ref_lib, cand), timeout_s=4)
    t.join()
    assert r.status == CORRECT, r.message
    assert r.lock_wait_s >= 2.0 and r.prepare_s is not None and r.prepare_s > 0
    assert r.elapsed_s >= r.lock_wait_s + r.prepare_s


def test_reference_hanging_in_preparation_is_a_reference_error(
    counting: tuple[Path, Path], compile_c: Callable[..., Path]
) -> None:
    lib, _ = counting
    job = _job(lib, compile_c(_saxpy(SAXPY_OK), "cand"))
    job.ref_symbol = "cudaperf_ref_hang"
    t0 = time.monotonic()
    r = run_evaluation(job, timeout_s=60, prepare_timeout_s=5, env=HOST)
    assert time.monotonic() - t0 < 30
    assert r.status == REFERENCE_ERROR, r.message
    assert "preparation timed out after" in r.message and "(limit 5 s)" in r.message
    assert "before the candidate ran" in r.message and r.lock_wait_s == 0.0


def test_prepare_hook_hits_the_prepare_deadline(ref_lib: Path) -> None:
    r = run_evaluation(_hook_job(ref_lib, "prepare-sleep:60"), timeout_s=60, prepare_timeout_s=5,
                       env={**HOST, **HOOKS})
    assert r.status == TIMEOUT and r.phase == "hook.sleep" and r.signal == "SIGKILL"
    assert r.message.startswith("the worker's preparation timed out after")
    assert r.details["timeout_phase"] == "prepare"


def test_host_memory_watchdog_kills_the_worker(ref_lib: Path) -> None:
    t0 = time.monotonic()
    r = run_evaluation(_hook_job(ref_lib, f"hog:{800 << 20}"), timeout_s=60, env={**HOST, **HOOKS},
                       host_memory_limit_bytes=400 << 20)
    assert time.monotonic() - t0 < 30
    assert r.status == CRASH and r.details["host_memory_exceeded"], r.message
    assert re.search(r"killed: the worker's host memory reached \d+\.\d\d GB, above its limit of "
                     r"0\.42 GB, in phase 'hook.hog'", r.message)
    assert r.details["host_memory_peak_bytes"] > 400 << 20


def test_default_host_memory_limit_follows_the_plan(ref_lib: Path) -> None:
    from cudaperf_cli.evaluate import host_memory_limit, plan_c_memory

    job = _job(ref_lib, ref_lib)
    assert host_memory_limit(job) == int(1.5 * plan_c_memory(job, l2_bytes=0).host_bytes) + (4 << 30)


# ---------------------------------------------------------------------------------------
# Bounded in memory: the plan
# ---------------------------------------------------------------------------------------

MM_PARAMS = [
    ScalarParam("n", "int", ScalarKind.SIZE),
    ScalarParam("m", "int", ScalarKind.SIZE),
    ScalarParam("k", "int", ScalarKind.SIZE),
    ArrayParam("A", "double", ("n", "k")),
    ArrayParam("B", "double", ("k", "m")),
    ArrayParam("C", "double", ("n", "m")),
]


def test_plan_c_memory_by_hand(tmp_path: Path) -> None:
    from cudaperf_cli.evaluate import does_not_fit, plan_c_memory

    cfgs = [ConfigSpec("small", {"n": 4, "m": 3, "k": 2}, trials=2),
            ConfigSpec("main", {"n": 100, "m": 200, "k": 50}, trials=1, time=True)]
    ts = TimingSettings(flush_bytes=1 << 20)
    job = _job(tmp_path / "r.so", tmp_path / "c.so", "mm", MM_PARAMS, configs=cfgs, timing=ts)
    plan = plan_c_memory(job, l2_bytes=60 << 20)
    # main: A 100x50, B 50x200, C 100x200 doubles
    assert plan.footprint_bytes == (5000 + 10000 + 20000) * 8 == 280000
    # arrays + 2 guards of GUARD_BYTES each + the device copies of the timing's two input sets
    # (roles unknown: all read-write, so every array is copied in before a call) + flush
    assert plan.gpu_bytes == 280000 + 3 * 2 * GUARD_BYTES + 2 * 280000 + (1 << 20)
    assert plan.flush_bytes == 1 << 20
    assert plan.parts == {"arrays": 280000, "guards": 6 * GUARD_BYTES, "pristine": 280000,
                          "input_set_1": 280000, "flush": 1 << 20}
    assert plan.optional_bytes == 280000  # the second set, dropped when the device is short
    # inputs of every trial (small: 2 x 26 doubles) + their outputs + 2 working copies +
    # the comparison's temporaries for the largest array (20000 elements x 48 bytes) +
    # main's input set 1 and its reference outputs + the staging buffer shared with the
    # candidate's process (main's reads and outputs, 2 x 280000), resident in both processes
    inputs = 2 * 26 * 8 + 280000
    staging = 2 * 280000
    assert plan.host_bytes == (inputs + inputs + 2 * 280000 + 20000 * 48 + 2 * 280000
                               + 2 * staging) == 3760832
    # one input set: the pristine copies of the read-write arrays only, as before
    one = plan_c_memory(replace(job, timing=replace(ts, input_sets=1)), l2_bytes=60 << 20)
    assert one.gpu_bytes == 280000 + 6 * GUARD_BYTES + 280000 + (1 << 20) == plan.gpu_bytes - 280000
    assert one.optional_bytes == 0 and one.host_bytes == 2080832 + 2 * staging and one.parts["input_set_1"] == 0
    # the driver refuses only what cannot fit with one set
    assert does_not_fit(plan, gpu_free=one.gpu_bytes, host_total=None, what="mm") is None
    assert "does not fit" in does_not_fit(plan, gpu_free=one.gpu_bytes - 1, host_total=None, what="mm")
    roles = {"A": READ_ONLY, "B": READ_ONLY, "C": WRITE_ONLY}
    job.array_roles = roles
    known = plan_c_memory(job, l2_bytes=60 << 20)
    # A and B for set 0 and set 1; C is poisoned, never copied
    assert known.gpu_bytes == 280000 + 6 * GUARD_BYTES + 2 * 120000 + (1 << 20)
    assert known.host_bytes == (inputs + (2 * 12 * 8 + 160000) + 2 * 280000 + 20000 * 48
                                + 120000 + 160000 + 2 * (120000 + 160000))
    job.cand_lib = None
    ref_only = plan_c_memory(job, l2_bytes=60 << 20)
    assert ref_only.gpu_bytes == 0 and ref_only.host_bytes == 3 * 280000
    prob = CProblem(path=tmp_path / "mm.c", function="mm", params=tuple(MM_PARAMS),
                    sizes={"n": 100, "m": 200, "k": 50})
    p = plan_c_memory(prob, l2_bytes=60 << 20)  # default flush: max(2 x L2, 256 MiB)
    assert p.flush_bytes == 256 << 20 and p.gpu_bytes == 280000 + 6 * GUARD_BYTES + 2 * 280000 + (256 << 20)
    assert plan_c_memory(prob, cfgs, l2_bytes=200 << 20).flush_bytes == 400 << 20


def test_worker_keeps_to_the_plan(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    from cudaperf_cli.evaluate import plan_c_memory

    body = (
        "int mm_cuda(int n, int m, int k, double *A, double *B, double *C) {\n"
        "  for (int i = 0; i < n; i++) for (int j = 0; j < m; j++) {\n"
        "    double s = 0; for (int l = 0; l < k; l++) s += A[i*k+l] * B[l*m+j];\n"
        "    C[i*m+j] = s; }\n  return 0; }\n"
    )
    cfgs = [ConfigSpec("small", {"n": 5, "m": 3, "k": 4}, trials=2),
            ConfigSpec("main", {"n": 60, "m": 40, "k": 30}, trials=1, time=True)]
    job = _job(ref_lib, compile_c(body, "mm"), "mm", MM_PARAMS, configs=cfgs)
    r = _host_run(job)
    assert r.status == CORRECT, r.message
    plan = plan_c_memory(job, l2_bytes=0)
    assert r.footprint_bytes == plan.footprint_bytes == (60 * 30 + 30 * 40 + 60 * 40) * 8
    assert 0 < r.peak_gpu_bytes <= plan.gpu_bytes
    job.array_roles = dict(r.array_roles)  # C write-only: no pristine copy
    assert r.peak_gpu_bytes == plan_c_memory(job, l2_bytes=0).gpu_bytes


def test_bitwise_equal_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "CHUNK", 16)
    a = np.arange(100, dtype=np.float64)
    b = a.copy()
    assert verify.bitwise_equal(a, b)
    b[99] = -0.0 if a[99] == 0 else a[99] + 1
    assert not verify.bitwise_equal(a, b)
    assert not verify.bitwise_equal(a, a.astype(np.float32).astype(np.float64)[:50])


def test_repetitions_fit_the_budget_even_for_long_calls() -> None:
    from cudaperf_cli.evaluate.timing import plan_reps, time_repetitions

    ts = TimingSettings()  # 100 ms wanted, 2 s at most, [10, 1000] repetitions
    assert plan_reps(0.01, ts) == 1000 and plan_reps(5.0, ts) == 20 and plan_reps(150.0, ts) == 10 and plan_reps(400.0, ts) == 5
    assert plan_reps(765.0, ts) == 2 and plan_reps(15_000.0, ts) == 1

    def calls_of(ms: float) -> tuple[list[int], Any]:
        asked: list[int] = []

        def run(k: int) -> list[float]:
            asked.append(k)
            return [ms] * k

        return asked, run

    asked, run = calls_of(15_000.0)  # PolyBench correlation's 15 s candidate
    rt = time_repetitions(run, ts, warm=True)
    assert asked == [1] and rt.samples == [15_000.0] and rt.warmup == [] and rt.planned == 1
    asked, run = calls_of(15_000.0)
    rt = time_repetitions(run, ts)  # not warm (torch.compile's first call): one more call
    assert asked == [1, 1] and rt.samples == [15_000.0] and rt.warmup == [15_000.0]
    asked, run = calls_of(765.0)
    rt = time_repetitions(run, ts, warm=True)
    assert asked == [1, 2] and len(rt.samples) == 2
    asked, run = calls_of(15_000.0)
    assert time_repetitions(run, ts, slow_ms=10_000.0, warm=True).slow and asked == [1]


def test_input_rotation_covers_both_sets_and_steers_the_verified_calls() -> None:
    from cudaperf_cli.evaluate.timing import InputRotation, perturb_positions, time_repetitions

    for seed in range(40):
        rot = InputRotation(2, [seed, 0, 2], checks=2)
        sets: list[int] = []
        checked: dict[int, int] = {}

        def run(k: int) -> list[float]:
            for _ in range(k):
                s, check = rot.next()
                sets.append(s)
                if check is not None:
                    checked[len(sets) - 1] = check
            return [1.0] * k

        rt = time_repetitions(run, FAST, on_plan=rot.plan)
        assert rot.planned == rt.planned == len(rt.samples)
        warm = len(rt.warmup)
        assert sorted(checked.values()) == rot.checked and len(rot.checked) == 2
        assert rot.verified == [i + 1 for i in rot.checked]
        # each verified call gets a set other than the call before it, and the two cover both
        assert all(sets[i] != sets[i - 1] for i in checked), (seed, sets, checked)
        assert {sets[i] for i in checked} == {0, 1}
        assert all(i - warm == c for i, c in checked.items())
        assert rot.calls == [sets.count(0), sets.count(1)] and rot.last == sets[-1]
    # random, not alternating; reproducible from the seed
    a, b = InputRotation(2, [1, 2, 3]), InputRotation(2, [1, 2, 3])
    seq = [a.next()[0] for _ in range(64)]
    assert seq == [b.next()[0] for _ in range(64)]
    assert any(seq[i] == seq[i + 1] for i in range(63)) and 20 < sum(seq) < 44
    one = InputRotation(1, 0, checks=3)
    one.plan(2)
    assert [one.next() for _ in range(3)] == [(0, 0), (0, 1), (0, None)] and one.verified == [1, 2]
    none = InputRotation(2, 0, checks=0)
    none.plan(5)
    assert all(none.next()[1] is None for _ in range(5)) and none.verified == []
    # positions: 1 in 256, at least 4 (all of a smaller array), none of an empty one
    rng = np.random.default_rng(0)
    assert perturb_positions(0, rng).size == 0 and perturb_positions(3, rng).size == 3
    assert perturb_positions(100, rng).size == 4 and perturb_positions(2560, rng).size == 10
    p = perturb_positions(1 << 20, rng)
    assert p.size == 4096 and p.dtype == np.int64 and 0 <= p.min() and p.max() < 1 << 20


def test_fit_reps() -> None:
    from cudaperf_cli.evaluate.timing import fit_reps

    assert fit_reps(2000.0, 765.0, 10) == 2  # a 765 ms kernel: two more fit 2 s
    assert fit_reps(2000.0, 3000.0, 10) == 1  # always one
    assert fit_reps(2000.0, 0.001, 10) == 10  # at most `most`
    assert fit_reps(20_000.0, 9982.0, 7) == 2  # adi's CPU baseline at LARGE (measured 10 s)
    assert fit_reps(1.0, 0.0, 3) == 3


def test_fast_path_agrees_with_the_exact_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks cleared by the fast check and chunks decided by the exact rule give the same
    verdicts and the same largest errors (float32 within a rounding of the difference)."""
    rng = np.random.default_rng(3)
    ref = rng.random(5000).astype(np.float32)
    cand = ref.copy()
    cand[::3] += np.float32(4e-5)  # well within atol + rtol |ref| = 1e-4 + 1e-4 |ref|
    monkeypatch.setattr(verify, "CHUNK", 1000)
    fast = compare_arrays("a", cand, ref)
    monkeypatch.setattr(verify, "_within", lambda *a: None)  # the exact rule only
    slow = compare_arrays("a", cand, ref)
    assert fast.ok and slow.ok
    assert fast.max_abs_err == pytest.approx(slow.max_abs_err, rel=1e-6)
    assert fast.max_rel_err == pytest.approx(slow.max_rel_err, rel=1e-6)
    monkeypatch.undo()
    edge = ref.copy()
    edge[10] = ref[10] + np.float32(0.99999 * (1e-4 + 1e-4 * ref[10]))  # inside, past the margin
    edge[20] = ref[20] + np.float32(1.01 * (1e-4 + 1e-4 * ref[20]))  # outside
    c = compare_arrays("a", edge, ref)
    assert not c.ok and c.n_mismatch == 1 and c.first_mismatch["index"] == [20]
    inf_ref = ref.copy()
    inf_ref[5] = np.inf
    assert not compare_arrays("a", ref.copy(), inf_ref).ok  # finite vs inf: never "within"


CTOR_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
  const char *p = getenv("CUDAPERF_TEST_LOADED");
  if (p) { FILE *f = fopen(p, "a"); if (f) { fputs("loaded\n", f); fclose(f); } }
  if (getenv("CUDAPERF_TEST_CTOR_CRASH")) *(volatile int *)0 = 1;
}
"""


def test_candidate_library_is_loaded_only_after_go(
    ref_lib: Path, compile_c: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from cudaperf_cli.evaluate.gpu_lock import gpu_lock

    monkeypatch.setenv("CUDAPERF_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDAPERF_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cand = compile_c(CTOR_C + _saxpy(SAXPY_OK), "ctor")
    # In /dev/shm: the candidate's process is confined, and may write there but not here.
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    marker = Path("/dev/shm") / f"cudaperf-test-loaded-{os.getpid()}-{tmp_path.name}"
    marker.unlink(missing_ok=True)
    out: dict[str, EvalResult] = {}
    with gpu_lock(0):
        t = threading.Thread(target=lambda: out.setdefault(
            "r", _host_run(_job(ref_lib, cand), CUDAPERF_TEST_LOADED=str(marker))))
        t.start()
        time.sleep(3.0)  # the worker prepares and waits for the lock meanwhile
        assert not marker.exists()  # its static constructor (candidate code) has not run
    t.join(60)
    assert out["r"].status == CORRECT, out["r"].message
    assert marker.read_text() == "loaded\n"
    marker.unlink()
    r = _host_run(_job(ref_lib, cand), CUDAPERF_TEST_CTOR_CRASH="1")
    assert r.status == CRASH and r.signal == "SIGSEGV"
    assert "while loading the candidate library" in r.message, r.message


#: A reference whose init function leaves a trace (its n, negated) in $CUDAPERF_TEST_COUNT.
INIT_C = r"""
#include <stdio.h>
#include <stdlib.h>
static void note(int n) {
  const char *p = getenv("CUDAPERF_TEST_COUNT");
  if (p) { FILE *f = fopen(p, "a"); if (f) { fprintf(f, "%d\n", n); fclose(f); } }
}
void cudaperf_init_saxpy(int n, float *a, void *xv, void *yv) {
  float *x = xv, *y = yv;
  note(-n);
  *a = 1.5f;
  for (int i = 0; i < n; i++) { x[i] = (float)(i % 7); y[i] = (float)(i % 5); }
}
void cudaperf_ref_saxpy(int n, float a, void *xv, void *yv) {
  const float *x = xv; float *y = yv;
  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
"""


def test_init_made_inputs_come_from_the_runs_store(
    compile_c: Callable[..., Path], tmp_path: Path
) -> None:
    """PolyBench's cholesky, lu and ludcmp build their inputs in O(n^3): the baseline job
    stores the data the init made, and candidate jobs read it instead of running the init."""
    from cudaperf_cli.core import InitSpec, to_jsonable

    lib = compile_c(INIT_C, "initref")
    calls = tmp_path / "calls.txt"
    env = {"CUDAPERF_TEST_COUNT": str(calls)}
    refs = tmp_path / "refs"
    init = dict(init=to_jsonable(InitSpec("init_saxpy", ("n", "a", "x", "y"), ("a",))),
                init_symbol="cudaperf_init_saxpy")
    base = _host_run(_job(lib, None, configs=SMALL_MAIN, cpu_reps=1, reference_outputs=str(refs), **init), **env)
    assert base.status == REFERENCE_ONLY, base.message
    made = [c for c in _calls(calls) if c < 0]
    assert sorted(made) == [-5000, -100, -100]  # one init per trial
    assert sorted(p.name for p in refs.glob("*-in-*.npy")) == [
        "c0-t0-in-x.npy", "c0-t0-in-y.npy", "c0-t1-in-x.npy", "c0-t1-in-y.npy", "c1-t0-in-x.npy", "c1-t0-in-y.npy"]
    cand = compile_c(_saxpy(SAXPY_OK), "cand")
    calls.unlink()
    r = _host_run(_job(lib, cand, configs=SMALL_MAIN, reference_outputs=str(refs), array_roles=base.array_roles,
                       cpu_baseline_ms={"main": 1.0}, **init), **env)
    assert r.status == CORRECT, r.message
    assert _calls(calls) == []  # neither the init nor the reference ran
    assert r.details.get("inputs_from_store") == 3
    # a candidate that ignores the coefficient init wrote is still caught
    bad = compile_c(_saxpy("for (int i = 0; i < n; i++) y[i] = 1.0f * x[i] + y[i]; return 0;"), "bad")
    r = _host_run(_job(lib, bad, configs=SMALL_MAIN, reference_outputs=str(refs), array_roles=base.array_roles,
                       cpu_baseline_ms={"main": 1.0}, **init), **env)
    assert r.status == WRONG, r.message


#: A candidate whose host code reads the file named in $CAND_SECRET and writes beside it:
#: both must fail in the confined worker (the result is correct all the same).
SNOOP = _saxpy(
    "const char *p = getenv(\"CAND_SECRET\");\n"
    "FILE *f = p ? fopen(p, \"r\") : NULL; char buf[64] = {0};\n"
    "if (f) { fgets(buf, sizeof buf, f); fclose(f); fprintf(stderr, \"SNOOPED:%s\\n\", buf); }\n"
    "else fprintf(stderr, \"SNOOP-DENIED\\n\");\n"
    "char w[4096]; snprintf(w, sizeof w, \"%s.planted\", p ? p : \"\");\n"
    "FILE *o = p ? fopen(w, \"w\") : NULL; if (o) fclose(o);\n" + SAXPY_OK,
    "#include <stdlib.h>\n")


def test_candidate_host_code_cannot_read_or_write_the_users_files(
    ref_lib: Path, compile_c: Callable[..., Path], tmp_path: Path
) -> None:
    from cudaperf_cli.confine import landlock_abi

    if landlock_abi() == 0:
        pytest.skip("this kernel has no Landlock")
    secret = tmp_path / "secret.env"
    secret.write_text("OPENAI_API_KEY=sk-not-for-the-model\n")
    (tmp_path / "build").mkdir()  # the candidate's own folder, which it may read
    cand = compile_c(SNOOP, "snoop").rename(tmp_path / "build" / "snoop.so")
    r = _host_run(_job(ref_lib, cand), CAND_SECRET=str(secret))
    assert r.status == CORRECT, r.message
    if not r.details["confinement"]["applied"]:  # offered but refused (a container's seccomp)
        pytest.skip(r.details["confinement"]["reason"])
    assert "sk-not-for-the-model" not in (r.stderr_tail or "") and "SNOOP-DENIED" in r.stderr_tail
    assert not Path(str(secret) + ".planted").exists()
    assert r.details["confinement"]["applied"] is True
    assert r.details["confinement"]["threads"] == 1  # no BLAS pool left unconfined
    # the same candidate unconfined reads it: the check above can fail
    r = _host_run(_job(ref_lib, cand), CAND_SECRET=str(secret), CUDAPERF_NO_CONFINE="1")
    assert "SNOOPED:OPENAI_API_KEY=sk-not-for-the-model" in r.stderr_tail
    assert r.details["confinement"]["applied"] is False


def test_host_write_4400_bytes_past_the_end_hits_the_guard(ref_lib: Path, compile_c: Callable[..., Path]) -> None:
    """The attack pass's far write (4400 bytes past an output: beyond the 4 KiB guard of
    before, reported correct) lands in the guard now."""
    cand = compile_c(_saxpy(SAXPY_OK.replace("return 0;", "((char *)(y + n))[4400] = 1; return 0;")), "far")
    r = _host_run(_job(ref_lib, cand))
    assert r.status == WRONG, r.message
    assert {"array": "y", "side": "after", "offset": 4400} in r.configs[0].guard_violations


RAMP_REF = r"""
void cudaperf_ref_ramp(int n, float a, void *xv, void *yv) {
    float *x = (float *)xv, *y = (float *)yv;
    for (int i = 0; i < n; i++) y[i] += a * x[i] * (float)i;
}
"""

RAMP_FMA = ("#include <math.h>\nint ramp_cuda(int n, float a, float *x, float *y) {\n"
            "  for (int i = 0; i < n; i++) y[i] = fmaf(a * x[i], (float)i, y[i]);\n"
            "  return 0;\n}\n")


def test_roles_are_not_classified_on_the_edge_configuration(compile_c: Callable[..., Path]) -> None:
    """At n = 1 the reference leaves y as it was (y[0] += ... * 0): classified there, y would
    pass for read-only and be compared bit for bit; an FMA that rounds once less is then
    `wrong`.  The edge configuration does not classify (ConfigSpec.classify)."""
    ref = compile_c(RAMP_REF, "ramp_ref")
    cand = compile_c(RAMP_FMA, "ramp_cand")
    edge = ConfigSpec("edge", {"n": 1}, trials=1, classify=False)
    small = ConfigSpec("small", {"n": 301}, trials=1)
    r = _host_run(_job(ref, cand, fn="ramp", configs=[edge, small]))
    assert r.status == CORRECT, r.message
    assert r.array_roles == {"x": READ_ONLY, "y": READ_WRITE}
    # classified at n = 1 (what happened before the flag): y read-only, compared exactly
    r = _host_run(_job(ref, cand, fn="ramp", configs=[replace(edge, classify=True), small]))
    assert r.array_roles["y"] == READ_ONLY and r.status == WRONG, r.message


def test_events_much_shorter_than_call_and_synchronize_are_a_warning():
    """Call + synchronize also holds the launcher's host set-up, which the event-timed calls
    hide behind their untimed copies: only a warning (an attack pass's finding)."""
    assert "outside the timed stream" in untimed_work(1.0, 3.0)
    assert untimed_work(0.01, 0.04) is None      # a 10 us kernel, launch and wake-up
    assert untimed_work(2.0, 4.09) is None       # at the factor 2 and 0.05 ms
    assert untimed_work(2.0, 4.11) is not None


def test_work_left_running_after_the_end_event_is_side_work():
    """The side-stream cheat (tests/data/cheats/c_side_stream): events 0.0016 ms, the device
    busy for the kernel on its private stream after them; honest calls leave microseconds."""
    assert "not timed" in side_work([0.3, 0.31, 0.29], 0.0016)
    assert side_work([0.004, 0.006, 0.2], 0.0016) is None    # median, not one slow wake-up
    assert side_work([0.04] * 5, 0.001) is None              # under 0.05 ms
    assert side_work([0.2] * 5, 1.0) is None                 # under a quarter of the events
    # a busy host stretches both waits alike: the floor (an idle device's) takes it out
    assert side_work([3.1, 2.9, 4.0], 0.01, [2.6, 2.8, 3.9]) is None
    assert "not timed" in side_work([3.1, 2.9, 4.0], 0.01, [0.004, 0.005, 0.003])
    assert "not timed" in side_work([9.0, 9.5, 8.7], 0.01, [2.6, 2.8, 3.9])  # hidden beyond noise
    assert side_work([0.3] * 5, 1.0) is not None
    assert side_work([], 0.001) is None

