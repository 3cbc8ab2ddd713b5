"""PyTorch-problem evaluation on a real GPU (``@pytest.mark.gpu``; skipped without a CUDA
device or with a CPU-only torch).  Run: ``python -m pytest -m gpu tests/test_gpu_torch_eval.py``.

Correct candidates in both formats are verified and timed against PyTorch eager and
torch.compile; every dynamic cheat under ``tests/data/torch_cheats/dynamic_<guard>/`` is
rejected with that guard's id (static guards off, so the dynamic ones are what is tested);
wrong, failing, hanging and parameter-mismatched candidates get their status.  Each assertion
carries the evaluation's message and stderr tail, so one run on the GPU shows everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cudaperf_cli.evaluate import probe_device
from cudaperf_cli.evaluate.job import TimingSettings
from cudaperf_cli.evaluate.torch_job import (
    BASELINE_COMPILE,
    BASELINE_EAGER,
    DYNAMIC_GUARDS,
    FAST,
    GUARD_REJECTED,
    LOAD_INLINE,
    SHAPE_SPECIALISED,
    SIDE_STREAM,
    TIMED_RESULT,
    TorchEvalJob,
    TorchEvalResult,
    run_torch_evaluation,
)

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if torch.version.cuda is None:  # checked without initialising CUDA in this process
    pytest.skip("torch is a CPU-only build", allow_module_level=True)

DATA = Path(__file__).parent / "data"
PROBLEM = DATA / "torch_problems" / "scaled_relu.py"
BIAS_PROBLEM = DATA / "torch_problems" / "bias_relu.py"
CANDS = DATA / "torch_cands"
CHEATS = DATA / "torch_cheats"
MIB = 1 << 20
#: Enough timing for a stable median, short enough for the suite.
TIMING = TimingSettings(warmup_reps=3, min_reps=20, max_reps=200, min_total_ms=50.0)


@pytest.fixture(scope="module")
def arch() -> str:
    info = probe_device()
    if not info.get("available"):
        pytest.skip(f"needs a CUDA device: {info.get('reason')}")
    return str(info["arch"])


@pytest.fixture(scope="module")
def build_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("torch-gpu-builds")


def _files(d: Path) -> list[str]:
    return [str(p) for p in sorted(d.iterdir()) if p.suffix in (".py", ".cu")]


def _run(d: Path, arch: str, build_root: Path, *, problem: Path = PROBLEM, timeout_s: float = 300,
         **kw: Any) -> TorchEvalResult:
    files = kw.pop("files", None) or _files(d)
    fmt = FAST if any(f.endswith(".cu") for f in files) else LOAD_INLINE
    kw.setdefault("timing", TIMING)
    job = TorchEvalJob(problem=str(problem), candidate=files, format=fmt, arch=arch,
                       build_root=str(build_root), **kw)
    return run_torch_evaluation(job, timeout_s=timeout_s)


def _why(r: TorchEvalResult) -> str:
    return f"{r.status}: {r.message}\nwarnings: {r.warnings}\nstderr: {r.stderr_tail[-3000:]}"


def _check_timing(r: TorchEvalResult) -> None:
    t = r.timing
    assert t is not None, _why(r)
    assert t.config == "default" and t.candidate.n >= 20 and t.candidate.median_ms > 0
    assert t.eager is not None and t.eager.median_ms > 0
    assert t.speedup_eager == pytest.approx(t.eager.median_ms / t.candidate.median_ms)
    assert t.baselines == {"eager": BASELINE_EAGER, "compile": BASELINE_COMPILE}
    # torch.compile is timed, or its failure is reported and eager kept
    if t.compile is not None:
        assert t.compile.median_ms > 0 and t.compile_error is None
        assert t.speedup_compile == pytest.approx(t.compile.median_ms / t.candidate.median_ms)
    else:
        assert t.compile_error and t.speedup_compile is None
        assert any("torch.compile baseline failed" in w for w in r.warnings)
    assert t.flush_bytes >= 256 * MIB
    assert t.suspicious == any(s is not None and s > 10 for s in (t.speedup_eager, t.speedup_compile))
    assert t.sync_call is not None and t.sync_call.median_ms > 0
    assert r.summary["speedup_eager"] == t.speedup_eager
    # the timed calls rotated through two input sets; two of them were verified
    assert t.input_sets == 2 and min(t.input_set_calls) > 0 and len(t.checked_reps) == 2, t


def _check_profile(r: TorchEvalResult) -> None:
    p = r.profile
    assert p is not None, _why(r)
    assert any("scaled_relu_kernel" in k for k in p["custom_kernels"]), p
    assert p["current_streams"], p
    assert p["side_stream_launches"] == [] and p["disallowed_ops"] == [] and p["dtoh_copies"] == 0
    assert all(k["stream"] in p["current_streams"] for k in p["kernels"]), p


# ---------------------------------------------------------------------------------------
# Correct candidates
# ---------------------------------------------------------------------------------------


def test_fast_format_candidate_is_verified_and_timed(arch: str, build_root: Path) -> None:
    r = _run(CANDS / "fast_ok", arch, build_root, shapes=[{"batch_size": 7, "dim": 1000}])
    assert r.status == "correct", _why(r)
    assert [c.name for c in r.configs] == ["default", "alt1"]
    assert r.configs[0].inputs == [{"shape": [64, 16384], "dtype": "float32"}]
    assert r.configs[1].inputs == [{"shape": [7, 1000], "dtype": "float32"}]
    assert all(c.status == "correct" and c.trials_run == 3 for c in r.configs)
    assert r.device is not None and r.device["arch"] == arch
    assert r.build["format"] == "fast" and r.build["libs"][0]["file"] == "kernel.cu"
    lp = r.configs[-1].lower_precision  # the float64 comparison runs on the smallest config
    assert lp is not None and lp["candidate_rel_err"] <= lp["threshold"]
    _check_profile(r)
    _check_timing(r)
    # memory: within 3 x the footprint plus the flush buffer; the GPU was waited for apart
    assert r.footprint_bytes == 2 * 64 * 16384 * 4
    assert r.peak_gpu_bytes is not None and r.peak_gpu_bytes <= 3 * r.footprint_bytes + r.timing.flush_bytes
    assert r.prepare_s is not None and r.prepare_s > 0 and r.lock_wait_s >= 0


def test_load_inline_candidate_is_verified_and_timed(arch: str, build_root: Path) -> None:
    r = _run(CANDS / "inline_ok", arch, build_root, timeout_s=400, build_timeout_s=400)
    assert r.status == "correct", _why(r)
    assert r.build["format"] == "load_inline"
    ext = Path(r.build["extensions_dir"])
    assert ext.is_dir() and any(ext.rglob("*.so"))
    _check_profile(r)
    _check_timing(r)
    # The same candidate again: the extension is reused from its content-keyed directory.
    again = _run(CANDS / "inline_ok", arch, build_root, time=False)
    assert again.status == "correct", _why(again)
    assert again.build["cached"] and again.build["extensions_dir"] == str(ext)
    assert again.build["seconds"] < r.build["seconds"]


def test_parameters_are_copied_from_the_reference(arch: str, build_root: Path) -> None:
    ok = _run(CANDS / "bias_ok", arch, build_root, problem=BIAS_PROBLEM, time=False)
    assert ok.status == "correct", _why(ok)
    bad = _run(CANDS / "bias_badname", arch, build_root, problem=BIAS_PROBLEM, time=False,
               files=[str(CANDS / "bias_badname" / "model.py"), str(CANDS / "bias_ok" / "kernel.cu")])
    assert bad.status == "runtime_error", _why(bad)
    assert bad.message.startswith("ModelNew's parameters and buffers do not match Model's")
    assert bad.error is not None and bad.error["source"] == "state_dict"


# ---------------------------------------------------------------------------------------
# Failing candidates
# ---------------------------------------------------------------------------------------


def test_wrong_candidate_reports_the_worst_mismatch(arch: str, build_root: Path) -> None:
    r = _run(CANDS / "wrong", arch, build_root)
    assert r.status == "wrong", _why(r)
    w = r.worst_mismatch
    assert w is not None and w["index"] == [0, 5000] and w["path"] == "out", w
    assert w["got"] == pytest.approx(w["expected"] + 1.0, abs=1e-6)
    assert r.message.startswith("config 'default' trial 0: out: 1 of 1048576 elements differ"), r.message
    assert r.timing is None


def test_error_returning_launcher_is_a_runtime_error(arch: str, build_root: Path) -> None:
    r = _run(CANDS / "runtime_error", arch, build_root)
    assert r.status == "runtime_error", _why(r)
    # CUDA 12 reports a 2048-thread block as InvalidConfiguration, CUDA 13 as InvalidValue
    assert ("scaled_relu failed: cudaErrorInvalidConfiguration (9)" in r.message
            or "scaled_relu failed: cudaErrorInvalidValue (1)" in r.message), r.message
    assert r.error is not None and r.error["source"] == "forward"


def test_hanging_kernel_is_killed_at_the_time_limit(arch: str, build_root: Path, tmp_path: Path) -> None:
    (tmp_path / "kernel.cu").write_text(
        "#include <cuda_runtime.h>\n#include <cstdint>\n"
        "__global__ void spin(volatile int *flag) { while (*flag == 0) { } }\n"
        'extern "C" int hang(int *flag, cudaStream_t stream) {\n'
        "    spin<<<1, 1, 0, stream>>>(flag);\n    return (int)cudaGetLastError();\n}\n"
    )
    (tmp_path / "model.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom cudaperf_cli.torch_runtime import load_cuda\n"
        "lib = load_cuda('kernel.cu')\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, scale):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        flag = torch.zeros(1, dtype=torch.int32, device=x.device)\n"
        "        lib.hang(flag)\n        return torch.empty_like(x)\n"
    )
    r = _run(tmp_path, arch, build_root, timeout_s=60, static_guards=False)
    assert r.status == "timeout" and r.signal == "SIGKILL", _why(r)
    assert r.phase in ("candidate", "candidate.sync"), r.phase
    assert "(config 'default', trial 0)" in r.message


# ---------------------------------------------------------------------------------------
# Dynamic guards: one cheat per guard
# ---------------------------------------------------------------------------------------


def cheat_guard(folder: str) -> str:
    """The guard a cheat folder must be rejected by: ``dynamic_<id>`` or
    ``dynamic_<id>_<variant>`` (the longest guard id that fits: one guard may have several
    cheats)."""
    rest = folder.removeprefix("dynamic_")
    fits = [g for g in DYNAMIC_GUARDS if rest == g or rest.startswith(g + "_")]
    assert fits, f"{folder} names no dynamic guard"
    return max(fits, key=len)


CHEAT_FOLDERS = sorted(p.name for p in CHEATS.glob("dynamic_*") if p.is_dir())


def test_there_is_a_cheat_for_every_dynamic_guard() -> None:
    assert {cheat_guard(f) for f in CHEAT_FOLDERS} == set(DYNAMIC_GUARDS)
    assert cheat_guard("dynamic_side_stream_torch_stream") == SIDE_STREAM
    assert cheat_guard("dynamic_patching_dunder") == "patching"


@pytest.mark.parametrize("folder", [f.removeprefix("dynamic_") for f in CHEAT_FOLDERS])
def test_dynamic_cheat_is_rejected(folder: str, arch: str, build_root: Path) -> None:
    gid = cheat_guard(f"dynamic_{folder}")
    kw: dict[str, Any] = {}
    if not any((CHEATS / f"dynamic_{folder}").glob("*.cu")):  # load_inline: a longer build
        kw.update(timeout_s=400, build_timeout_s=400)
    if gid == SHAPE_SPECIALISED:
        kw["shapes"] = [{"batch_size": 65}]
    if gid == "result_cache":
        # A cache hit launches no kernel, so with every guard on the profiled forward catches
        # it first (no_custom_kernel, measured on the H200); the cache guard itself is
        # checked with that one off.
        first = _run(CHEATS / f"dynamic_{folder}", arch, build_root, static_guards=False, time=False)
        assert first.status == GUARD_REJECTED and first.guard["id"] in ("no_custom_kernel", gid), _why(first)
        kw["disabled_guards"] = ["no_custom_kernel"]
    kw.setdefault("time", gid == TIMED_RESULT)  # timed_result checks the timed calls
    r = _run(CHEATS / f"dynamic_{folder}", arch, build_root, static_guards=False, **kw)
    assert r.status == GUARD_REJECTED, _why(r)
    assert r.guard is not None and r.guard["id"] == gid and not r.guard.get("static"), _why(r)
    assert r.message.startswith(f"rejected by guard '{gid}'"), r.message
    print(folder, "->", r.guard)


def test_dunder_patch_does_not_fool_the_comparison(arch: str, build_root: Path) -> None:
    """With the patching guard off, the zero output of the cheat that replaced
    torch.Tensor.__int__/__index__/__float__ is still wrong: the comparison reads its counts
    through the C functions saved before the import."""
    r = _run(CHEATS / "dynamic_patching_dunder", arch, build_root, static_guards=False, time=False,
             disabled_guards=["patching"])
    assert r.status == "wrong", _why(r)
    assert r.worst_mismatch is not None and r.worst_mismatch["got"] == 0.0, r.worst_mismatch


@pytest.mark.parametrize("fmt", ["fast", "load_inline"])
def test_clean_controls_pass_every_dynamic_guard(fmt: str, arch: str, build_root: Path) -> None:
    """No false positive: the clean candidates of the static-guard suite, on
    examples/torch/swish_bias.py, verified and timed with every dynamic guard on (the fast
    one timed: the timed calls' thread watch and output check too)."""
    problem = Path(__file__).parent.parent / "examples" / "torch" / "swish_bias.py"
    if fmt == "fast":
        files = [str(CHEATS / "clean_fast.py"), str(CHEATS / "clean_fast.cu")]
        r = _run(CHEATS, arch, build_root, problem=problem, files=files, static_guards=True)
    else:
        r = _run(CHEATS, arch, build_root, problem=problem, files=[str(CHEATS / "clean_inline.py")],
                 static_guards=True, time=False, timeout_s=400, build_timeout_s=400)
    print(fmt, r.status, r.message, r.warnings, r.details.get("threads_first_call"))
    assert r.status == "correct", _why(r)


def test_timed_result_cache_needs_two_input_sets(arch: str, build_root: Path) -> None:
    """tests/data/torch_cheats/dynamic_timed_result: a result cache in kernel.cu keyed by the
    input pointer and its first and last 4 values (a hit launches a copy of the cached
    output).  With one input set every timed call hits and the cheat passes, as it did in
    issue 14's suite (15x on the H200); with two it is rejected, and the honest candidate
    still passes."""
    cheat = CHEATS / "dynamic_timed_result"
    one = _run(cheat, arch, build_root, static_guards=False, compile_baseline=False,
               timing=TimingSettings(warmup_reps=3, min_reps=20, max_reps=200, min_total_ms=50.0,
                                     input_sets=1))
    assert one.status == "correct", _why(one)
    assert one.timing is not None and one.timing.input_sets == 1
    r = _run(cheat, arch, build_root, static_guards=False)
    assert r.status == GUARD_REJECTED and r.guard is not None and r.guard["id"] == TIMED_RESULT, _why(r)
    assert "timed call " in r.message and "(input set " in r.message, r.message
    ok = _run(CANDS / "fast_ok", arch, build_root, static_guards=False, compile_baseline=False)
    assert ok.status == "correct", _why(ok)
    t = ok.timing
    assert t is not None and t.input_sets == 2 and min(t.input_set_calls) > 0, t
    assert len(t.checked_reps) == 2 and all(1 <= i <= t.candidate.n for i in t.checked_reps), t
    assert not any("one input set" in w for w in ok.warnings), ok.warnings


def test_private_stream_is_seen_by_the_profiler(arch: str, build_root: Path, tmp_path: Path) -> None:
    # Work on a private stream that is synchronized before returning: nothing is left
    # running (the output check passes), but the profiler sees a kernel on another stream.
    (tmp_path / "kernel.cu").write_text(
        (CANDS / "fast_ok" / "kernel.cu").read_text().replace(
            "    if (n > 0)\n        scaled_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n, scale);\n"
            "    return (int)cudaGetLastError();",
            "    static cudaStream_t own = nullptr;\n"
            "    if (own == nullptr) cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);\n"
            "    cudaStreamSynchronize(stream);  /* the inputs are written on the given stream */\n"
            "    if (n > 0)\n        scaled_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, own>>>(x, y, n, scale);\n"
            "    cudaStreamSynchronize(own);\n    return (int)cudaGetLastError();",
        )
    )
    assert "cudaStreamSynchronize(own)" in (tmp_path / "kernel.cu").read_text()
    (tmp_path / "model.py").write_text((CANDS / "fast_ok" / "model.py").read_text())
    r = _run(tmp_path, arch, build_root, static_guards=False, time=False)
    assert r.status == GUARD_REJECTED and r.guard is not None and r.guard["id"] == SIDE_STREAM, _why(r)
    assert r.profile is not None and r.profile["side_stream_launches"], r.profile
    assert "not on the current stream" in r.guard["reason"]


# ---------------------------------------------------------------------------------------
# Baseline once per run, slow candidates, memory bounds at KernelBench sizes
# ---------------------------------------------------------------------------------------


def test_baseline_job_times_eager_and_compile_once(arch: str, build_root: Path) -> None:
    job = TorchEvalJob(problem=str(PROBLEM), candidate=[], mode="baseline", arch=arch,
                       build_root=str(build_root), timing=TIMING)
    r = run_torch_evaluation(job, timeout_s=300)
    assert r.status == "reference_only", _why(r)
    t = r.timing
    assert t.candidate is None and t.eager.median_ms > 0
    assert t.compile is not None or t.compile_error
    assert r.degenerate is False and r.footprint_bytes == 2 * 64 * 16384 * 4
    # a candidate of the run then times itself alone against those numbers
    base = {"eager": t.eager.median_ms, "compile": t.compile.median_ms if t.compile else None}
    c = _run(CANDS / "fast_ok", arch, build_root, baseline_ms=base)
    assert c.status == "correct", _why(c)
    assert c.timing.eager is None and c.timing.speedup_eager == pytest.approx(
        base["eager"] / c.timing.candidate.median_ms)


def test_a_candidate_past_the_slow_limit_is_slow(arch: str, build_root: Path) -> None:
    r = _run(CANDS / "fast_ok", arch, build_root, slow_ms=1e-6, baseline_ms={"eager": 1.0})
    assert r.status == "slow", _why(r)
    assert r.timing.candidate.n == 1 and r.timing.warmup_reps == 1
    assert r.summary["gpu_ms"] == r.timing.candidate_estimate_ms > 1e-6


def test_a_large_problem_stays_within_three_footprints(arch: str, build_root: Path, tmp_path: Path) -> None:
    """scaled_relu at 4096 x 262144 float32: a 4.3 GB input, a 4.3 GB output (KernelBench
    level 1's activations are 6.4 GB each).  The evaluation holds one input set, both outputs
    and comparison chunks: at most 3 x footprint + flush."""
    big = tmp_path / "big_relu.py"
    big.write_text(PROBLEM.read_text().replace("batch_size = 64", "batch_size = 4096").replace(
        "dim = 16384", "dim = 262144"))
    r = _run(CANDS / "fast_ok", arch, build_root, problem=big, shapes=[{"batch_size": 2049, "dim": 131073}],
             timeout_s=600)
    assert r.status == "correct", _why(r)
    fp = 2 * 4096 * 262144 * 4
    assert r.footprint_bytes == fp
    assert r.peak_gpu_bytes <= 3 * fp + r.timing.flush_bytes, (r.peak_gpu_bytes / 1e9, fp / 1e9)
