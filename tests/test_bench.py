"""``cudaperf bench`` without a GPU: metrics on hand-computed values, suite discovery and
manifest errors, the GPU lock, a real run over two small C problems, and the runner's
behaviour (hang, crash, resume, Ctrl-C, compare) with a fake optimize
(``CUDAPERF_BENCH_OPTIMIZE``) that writes canned run folders in a fraction of a second.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cudaperf_cli.bench import metrics as M
from cudaperf_cli.bench.env import env_differences
from cudaperf_cli.bench.runner import PolicySettings
from cudaperf_cli.bench.suite import load_suite
from cudaperf_cli.core import CudaperfError, ProblemError, param_to_json
from cudaperf_cli.evaluate import (
    CORRECT,
    ConfigSpec,
    EvalJob,
    TimingSettings,
    run_evaluation,
)
from cudaperf_cli.evaluate.gpu_lock import gpu_lock, lock_path
from tests.conftest import cuda_device_status
from tests.eval_refs import REF_C, SAXPY_PARAMS

ROOT = Path(__file__).resolve().parents[1]


def rec(turn: int, status: str, sample: int = 0, gpu_ms: float | None = None,
        kernel: float | None = None, e2e: float | None = None, **kw: object) -> dict:
    """A turns.jsonl-like record."""
    return {"turn": turn, "sample": sample, "status": status, "gpu_ms": gpu_ms,
            "speedup_kernel": kernel, "speedup_e2e": e2e, **kw}


# ---------------------------------------------------------------------------------------
# metrics: hand-computed values
# ---------------------------------------------------------------------------------------


def test_geomean_by_hand() -> None:
    assert M.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert M.geomean([1.0, 10.0, 100.0]) == pytest.approx(10.0)
    assert M.geomean([]) is None
    assert M.geomean([4.0, 0.0, None, float("nan"), "nan"]) == pytest.approx(4.0)  # type: ignore[list-item]


def test_fast_p_counts_all_problems_and_is_strict() -> None:
    probs = [
        {"correct": True, "speedups": {"kernel": 3.0}},
        {"correct": True, "speedups": {"kernel": 0.5}},
        {"correct": False, "speedups": {}},
        {"correct": False, "speedups": {}, "status": "error"},
        {"correct": True, "speedups": {"kernel": 2.0}},  # 2.0 is not > 2
    ]
    assert M.fast_p(probs, 0) == pytest.approx(3 / 5)
    assert M.fast_p(probs, 1) == pytest.approx(2 / 5)
    assert M.fast_p(probs, 1.5) == pytest.approx(2 / 5)
    assert M.fast_p(probs, 2) == pytest.approx(1 / 5)
    assert M.fast_p(probs, 3) == 0.0
    assert M.fast_p(probs, 1, key="e2e") == 0.0  # no e2e speedup anywhere
    assert M.fast_p([], 1) is None


def test_suite_metrics_by_hand() -> None:
    probs = [
        {"status": "correct", "correct": True, "compiled": True, "baseline": "gcc -O3, 1 thread",
         "speedups": {"kernel": 3.0, "e2e": 1.5}},
        {"status": "correct", "correct": True, "compiled": True, "baseline": "gcc -O3, 1 thread",
         "speedups": {"kernel": 0.5, "e2e": 0.25}},
        {"status": "wrong", "correct": False, "compiled": True, "speedups": {}},
        {"status": "error", "correct": False, "compiled": False, "speedups": {}},
    ]
    m = M.suite_metrics(probs)
    assert (m["problems"], m["compiled"], m["correct"]) == (4, 3, 2)
    assert m["compile_rate"] == 0.75 and m["correct_rate"] == 0.5
    assert m["statuses"] == {"correct": 2, "error": 1, "wrong": 1}
    assert m["baselines"] == ["gcc -O3, 1 thread"]
    k = m["speedup"]["kernel"]
    assert k["n"] == 2
    assert k["geomean"] == pytest.approx(math.sqrt(1.5))  # sqrt(3 * 0.5)
    assert k["mean"] == pytest.approx(1.75) and k["median"] == pytest.approx(1.75)
    assert (k["min"], k["max"]) == (0.5, 3.0)
    assert k["fast_p"] == {"0": 0.5, "1": 0.25, "1.5": 0.25, "2": 0.25}
    e = m["speedup"]["e2e"]
    assert e["geomean"] == pytest.approx(math.sqrt(1.5 * 0.25))
    assert e["fast_p"] == {"0": 0.5, "1": 0.25, "1.5": 0.0, "2": 0.0}


def test_best_and_representative_candidates() -> None:
    records = [
        rec(0, "correct", gpu_ms=2.0, kernel=5.0),
        rec(1, "correct", gpu_ms=1.0, kernel=10.0),
        rec(2, "correct", gpu_ms=1.0, kernel=10.0),  # equal: the first one stays
        rec(3, "wrong"),
    ]
    assert M.best_correct(records) == 1
    assert M.representative(records) == 1
    failing = [rec(0, "compile_error"), rec(1, "wrong", structure_score=0.2),
               rec(2, "no_device", structure_score=0.9), rec(3, "refused")]
    assert M.best_correct(failing) is None
    assert M.representative(failing) == 1  # "wrong" got further than "no_device"
    tie = [rec(0, "no_device", structure_score=0.4), rec(1, "no_device", structure_score=0.7)]
    assert M.representative(tie) == 1
    assert M.representative([]) is None


def test_problem_summary_with_samples() -> None:
    records = [
        rec(0, "compile_error", 0, compile_s=1.5),
        rec(0, "wrong", 1, compile_s=1.0, eval_s=2.0),
        rec(1, "correct", 0, gpu_ms=4.0, kernel=2.0, e2e=1.0, compile_s=1.0, eval_s=3.0,
            structure_score=0.5, description="a", baseline="gcc -O3, 1 thread"),
        rec(1, "correct", 1, gpu_ms=2.0, kernel=4.0, e2e=1.5, compile_s=0.5, eval_s=3.0,
            structure_score=0.8, description="b", baseline="gcc -O3, 1 thread"),
        rec(1, "timeout", 2, eval_s=10.0),
    ]
    s = M.problem_summary(records)
    assert s["status"] == "correct" and s["correct"] and s["compiled"]
    assert s["best"]["turn"] == 2 and s["best"]["sample"] == 2 and s["best"]["description"] == "b"
    assert s["speedups"] == {"kernel": 4.0, "e2e": 1.5}
    assert s["structure_score"] == 0.8
    assert (s["turns_used"], s["candidate_count"], s["samples_per_turn"]) == (2, 5, 3)
    assert s["compile_s"] == pytest.approx(4.0) and s["eval_s"] == pytest.approx(18.0)
    killed = M.problem_summary(records, status=M.PROBLEM_TIMEOUT, message="killed")
    assert killed["status"] == M.PROBLEM_TIMEOUT and not killed["correct"]
    assert killed["speedups"] == {}
    none = M.problem_summary([])
    assert none["status"] == "no_candidate" and not none["compiled"] and none["best"] is None


def test_curves_by_hand() -> None:
    p1 = [rec(0, "wrong"), rec(1, "correct", gpu_ms=2.0, kernel=4.0),
          rec(2, "correct", gpu_ms=3.0, kernel=8 / 3)]  # turn 3 is slower: best stays 4
    p2 = [rec(0, "correct", gpu_ms=1.0, kernel=1.0)]  # stopped after one turn
    p3: list[dict] = []  # an error: no candidate
    assert M.best_so_far(p1, "kernel", 3) == [None, 4.0, 4.0]
    assert M.best_so_far(p2, "kernel", 3) == [1.0, 1.0, 1.0]
    c = M.suite_curves([p1, p2, p3], "kernel")
    assert c["turn"] == [1, 2, 3]
    assert c["correct_rate"] == pytest.approx([1 / 3, 2 / 3, 2 / 3])
    assert c["geomean_best"][0] == pytest.approx(1.0)
    assert c["geomean_best"][1] == pytest.approx(2.0) and c["geomean_best"][2] == pytest.approx(2.0)
    assert c["fast_1"] == pytest.approx([0.0, 1 / 3, 1 / 3])
    assert M.suite_curves([p1], "kernel", turns=1)["geomean_best"] == [None]


def test_speedups_of_reads_both_record_shapes() -> None:
    assert M.speedups_of({"speedup_kernel": 2.0, "speedup_e2e": "nan"}) == {"kernel": 2.0}
    assert M.speedups_of({"speedups": {"kernel": 3.0, "e2e": -1}}) == {"kernel": 3.0}


# ---------------------------------------------------------------------------------------
# suites and manifests
# ---------------------------------------------------------------------------------------

C_SCALE = "void scale(int n, double a, double x[n]) { for (int i = 0; i < n; i++) x[i] *= a; }\n"
C_ADD = ("void vadd(int n, const float a[n], const float b[n], float c[n]) "
         "{ for (int i = 0; i < n; i++) c[i] = a[i] + b[i]; }\n")
PY_MODEL = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_folder_discovery(tmp_path: Path) -> None:
    (tmp_path / "10_b.c").write_text(C_SCALE)
    (tmp_path / "2_a.c").write_text(C_SCALE)
    (tmp_path / "3_relu.py").write_text(PY_MODEL)
    (tmp_path / "helper.py").write_text("def f(): pass\n")
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "notes.txt").write_text("x")
    s = load_suite(tmp_path)
    assert [p.id for p in s.problems] == ["2_a.c", "3_relu.py", "10_b.c"]  # natural order
    assert [p.kind for p in s.problems] == ["c", "torch", "c"]
    assert s.skipped == [{"file": "helper.py", "reason": "no 'class Model' (not a KernelBench-format file)"}]
    assert s.name == tmp_path.name
    assert load_suite(tmp_path / "2_a.c").problems[0].id == "2_a.c"  # a suite of one


def test_manifest_settings_and_skip(tmp_path: Path) -> None:
    (tmp_path / "mm.c").write_text(C_SCALE)
    (tmp_path / "other.c").write_text(C_SCALE)
    (tmp_path / "big.c").write_text(C_SCALE)
    (tmp_path / "inc").mkdir()
    (tmp_path / "bench.toml").write_text(
        '[suite]\nname = "mine"\n\n'
        '[problems."mm.c"]\nfunction = "scale"\nsizes = { n = 4096 }\n'
        'defines = ["LARGE", "T=double"]\nincludes = ["inc"]\ninit = "init_x"\ntimeout = 60\n\n'
        '[problems."big.c"]\nskip = "needs 40 GB"\n'
    )
    (tmp_path / "other.bench.toml").write_text('defines = { FAST = true, N = 7 }\n')
    s = load_suite(tmp_path)
    assert s.name == "mine"
    assert [p.id for p in s.problems] == ["mm.c", "other.c"]
    assert s.skipped == [{"file": "big.c", "reason": "needs 40 GB"}]
    mm, other = s.problems
    assert mm.timeout_s == 60.0
    assert mm.optimize_args() == [
        "--function", "scale", "--size", "n=4096", "-D", "LARGE", "-D", "T=double",
        "-I", str((tmp_path / "inc").resolve()), "--init", "init_x",
    ]
    assert other.optimize_args() == ["-D", "FAST", "-D", "N=7"]
    assert other.settings_from == str(tmp_path / "other.bench.toml")


def test_manifest_file_with_globs(tmp_path: Path) -> None:
    lvl = tmp_path / "level1"
    lvl.mkdir()
    for name in ("1_a.py", "2_b.py", "12_c.py"):
        (lvl / name).write_text(PY_MODEL)
    (tmp_path / "x.c").write_text(C_SCALE)
    man = tmp_path / "suite.toml"
    man.write_text('[suite]\nfiles = ["level1/*.py", "x.c"]\n')
    s = load_suite(man)
    assert s.name == "suite"
    assert [p.id for p in s.problems] == ["level1/1_a.py", "level1/2_b.py", "level1/12_c.py", "x.c"]
    assert s.problems[0].safe_name == "level1_1_a.py"
    only = tmp_path / "only.toml"  # no [suite] files: the problems it has settings for
    only.write_text('[problems."x.c"]\nsizes = { n = 8 }\n')
    assert [p.id for p in load_suite(only).problems] == ["x.c"]


@pytest.mark.parametrize(
    "manifest, match",
    [
        ('[problems."a.c"]\nsize = { n = 1 }\n', "unknown key"),
        ('[problems."a.c"]\nsizes = { n = "big" }\n', "table of integers"),
        ('[problems."nope.c"]\nsizes = { n = 1 }\n', "not a problem of the suite"),
        ('[problems."a.c"]\ntimeout = -1\n', "positive number"),
        ('[problems."a.c"]\ndefines = "X"\n', "defines"),
        ('[suite]\nfiles = ["*.cu"]\n', "matches no"),
        ('[suite]\nfiles = ["missing.c"]\n', "does not exist"),
        ('[suite]\nfilez = []\n', "unknown key"),
        ('[problem]\n', "unknown table"),
        ('[problems."a.c"\n', "not valid TOML"),
        ('[problems."a.c"]\nskip = true\n', "every problem"),
    ],
)
def test_manifest_errors(tmp_path: Path, manifest: str, match: str) -> None:
    (tmp_path / "a.c").write_text(C_SCALE)
    (tmp_path / "bench.toml").write_text(manifest)
    with pytest.raises(ProblemError, match=match):
        load_suite(tmp_path)


def test_suite_errors(tmp_path: Path) -> None:
    with pytest.raises(ProblemError, match="no such file"):
        load_suite(tmp_path / "nope")
    with pytest.raises(ProblemError, match="no .c file"):
        load_suite(tmp_path)  # empty folder
    (tmp_path / "a.c").write_text(C_SCALE)
    (tmp_path / "bench.toml").write_text('[problems."a.c"]\nsizes = { n = 1 }\n')
    (tmp_path / "a.bench.toml").write_text("sizes = { n = 2 }\n")
    with pytest.raises(ProblemError, match="both"):
        load_suite(tmp_path)
    (tmp_path / "bench.toml").unlink()
    (tmp_path / "a.py").write_text(PY_MODEL)
    with pytest.raises(ProblemError, match="ambiguous"):
        load_suite(tmp_path)
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(ProblemError, match="a suite is"):
        load_suite(tmp_path / "x.txt")


def test_unknown_optimize_flag_is_refused() -> None:
    settings = PolicySettings(policy="builtin", turns=2, samples=4)
    assert settings.optimize_args({"--policy", "--turns", "--samples"}) == [
        "--policy", "builtin", "--turns", "2", "--samples", "4"]
    with pytest.raises(CudaperfError, match="--samples is not an option"):
        settings.optimize_args({"--policy", "--turns"})


def test_switches_and_ranker_pass_through() -> None:
    from cudaperf_cli.cli.bench import optimize_flags

    off = PolicySettings(turns=1, compile_baseline=False, ranker="/ck", ranker_top=2)
    args = off.optimize_args(optimize_flags())  # every flag is one optimize accepts
    assert args[-5:] == ["--ranker", "/ck", "--ranker-top", "2", "--no-compile-baseline"]
    assert PolicySettings(turns=1, compile_baseline=True).optimize_args(None)[-1] == "--compile-baseline"
    assert "--no-compile-baseline" in optimize_flags()


# ---------------------------------------------------------------------------------------
# the GPU lock
# ---------------------------------------------------------------------------------------


def test_lock_path_follows_cuda_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAPERF_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-ab/c")
    assert lock_path(0) == tmp_path / "gpu-3.lock"
    assert lock_path(1) == tmp_path / "gpu-GPU-ab_c.lock"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert lock_path(2) == tmp_path / "gpu-2.lock"


HOLD = """
import sys, time
from cudaperf_cli.evaluate.gpu_lock import gpu_lock
with gpu_lock(0):
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


def test_gpu_lock_excludes_another_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAPERF_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDAPERF_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "1.5"], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with gpu_lock(0) as waited:
            elapsed = time.monotonic() - t0
        assert elapsed > 0.8 and waited == pytest.approx(elapsed, abs=0.2)
        with gpu_lock(1) as other:  # another GPU: its own lock
            assert other < 0.2
    finally:
        holder.wait(timeout=30)
    monkeypatch.setenv("CUDAPERF_GPU_LOCK", "0")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "3"], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT, env={**os.environ, "CUDAPERF_GPU_LOCK": "1"})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with gpu_lock(0):  # switched off here: no wait
            pass
        assert time.monotonic() - t0 < 0.5
    finally:
        holder.kill()
        holder.wait()


def test_run_evaluation_waits_for_the_gpu_lock_only_with_a_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compile_c
) -> None:
    """The evaluate stage holds the lock around a candidate's worker (host emulation of the
    device here), not around a reference-only job."""
    monkeypatch.setenv("CUDAPERF_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDAPERF_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ref = compile_c(REF_C, "ref")
    cand = compile_c("int saxpy_cuda(int n, float a, float *x, float *y) "
                     "{ for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i]; return 0; }\n", "cand")
    fast = TimingSettings(warmup_reps=1, min_reps=3, max_reps=5, min_total_ms=1.0,
                          flush_bytes=1 << 16, e2e_reps=2, sync_reps=2)

    def job(cand_lib: Path | None) -> EvalJob:
        return EvalJob(ref_lib=str(ref), ref_symbol="cudaperf_ref_saxpy",
                       cand_lib=None if cand_lib is None else str(cand_lib), cand_symbol="saxpy_cuda",
                       params=[param_to_json(p) for p in SAXPY_PARAMS],
                       configs=[ConfigSpec("small", {"n": 100}, trials=1)], timing=fast, cpu_reps=1)

    host = {"CUDAPERF_WORKER_BACKEND": "host"}
    out: dict[str, object] = {}
    with gpu_lock(0):
        t = threading.Thread(target=lambda: out.setdefault("r", run_evaluation(job(cand), timeout_s=60, env=host)))
        t.start()
        ref_only = run_evaluation(job(None), timeout_s=60, env=host)  # not blocked
        assert ref_only.status == "reference_only"
        time.sleep(1.0)
        assert t.is_alive() and "r" not in out  # the candidate waits for the lock
    t.join(timeout=60)
    assert out["r"].status == CORRECT, out["r"].message  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------
# the command, with a fake optimize
# ---------------------------------------------------------------------------------------

FAKE_OPTIMIZE = r'''
"""A stand-in for `cudaperf optimize FILE ... --json --run-dir R --output O`."""
import json, os, signal, subprocess, sys, time
from pathlib import Path

args = sys.argv[1:]
file = Path(args[0])
run_root = Path(args[args.index("--run-dir") + 1])
output = Path(args[args.index("--output") + 1])
stem = file.stem
if os.environ.get("FAKE_LOG"):
    with open(os.environ["FAKE_LOG"], "a") as fh:
        fh.write(stem + " " + " ".join(args[1:]) + "\n")
run_dir = run_root / f"{stem}-f-1"
run_dir.mkdir(parents=True, exist_ok=True)

def rec(turn, status, sample=0, gpu_ms=None, k=None, e=None):
    return {"turn": turn, "sample": sample, "policy": "fake", "description": f"t{turn}s{sample}",
            "status": status, "message": "", "source": f"// {stem} {turn} {sample}\n",
            "gpu_ms": gpu_ms, "gpu_ms_iqr": None if gpu_ms is None else 0.01, "e2e_ms": None,
            "cpu_ms": 10.0, "speedup_kernel": k, "speedup_e2e": e, "baseline": "gcc -O3, 1 thread",
            "structure_score": 0.5, "structure_reasons": ["r"], "registers": 20, "spill_bytes": 0,
            "compile_s": 1.0, "eval_s": 0.5}

def write(records):
    with open(run_dir / "turns.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")

if stem == "hang" and not os.environ.get("FAKE_NOHANG"):
    write([rec(0, "wrong")])
    child = subprocess.Popen(["sleep", "600"])
    Path(os.environ["FAKE_PIDS"], "hang.pid").write_text(str(child.pid))
    time.sleep(600)
if stem == "crash":
    print("something went badly", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
if stem == "bad":
    print("error: bad.c: unsupported thing\nhint: do it differently", file=sys.stderr)
    sys.exit(2)
s = {"fast": 3.0, "slow": 0.25}.get(stem, 1.0)
records = [rec(0, "compile_error"), rec(1, "correct", 0, 2.0, s, s / 2), rec(1, "correct", 1, 1.0, 2 * s, s)]
write(records)
output.parent.mkdir(parents=True, exist_ok=True)
output.write_text("// kernel\n")
brief = [{k: v for k, v in r.items() if k != "source"} for r in records]
print(json.dumps({"file": str(file), "function": "f", "sizes": {"n": 8}, "arch": "sm_90",
                  "baseline": "gcc -O3, 1 thread",
                  "cpu_baseline": {"cpu_ms": {"main": 10.0}, "cpu_iqr_ms": {"main": 0.5}},
                  "turns": brief, "best": brief[2], "best_turn": 2, "output": str(output),
                  "run_dir": str(run_dir), "stop_reason": "ran all", "exit_code": 0}, indent=2))
'''


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, str]:
    """Environment for a bench that runs the fake optimize; FAKE_LOG lists its calls."""
    script = tmp_path / "fake_optimize.py"
    script.write_text(FAKE_OPTIMIZE)
    pids = tmp_path / "pids"
    pids.mkdir()
    return {
        "CUDAPERF_BENCH_OPTIMIZE": f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "FAKE_PIDS": str(pids),
        "CUDAPERF_GPU_LOCK_DIR": str(tmp_path / "locks"),
    }


def bench(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", "bench", *args],
        capture_output=True, text=True, cwd=cwd or ROOT, timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def make_suite(root: Path, names: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for n in names:
        (root / n).write_text(C_SCALE)
    return root


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


def calls(env: dict[str, str]) -> list[str]:
    p = Path(env["FAKE_LOG"])
    return [ln.split()[0] for ln in p.read_text().splitlines()] if p.exists() else []


def test_hang_crash_and_error_do_not_stop_the_suite(tmp_path: Path, fake: dict[str, str]) -> None:
    suite = make_suite(tmp_path / "s", ["bad.c", "crash.c", "fast.c", "hang.c", "slow.c"])
    out = tmp_path / "out"
    proc = bench(str(suite), "-o", str(out), "-j", "1", "--turns", "2", "--problem-timeout", "3",
                 "--json", env=fake)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # --json: report.json only
    assert report == json.loads((out / "report.json").read_text())
    assert calls(fake) == ["bad", "crash", "fast", "hang", "slow"]  # slow ran after the hang
    status = {p["id"]: p for p in report["problems"]}
    assert status["hang.c"]["status"] == "problem_timeout"
    assert "3 s" in status["hang.c"]["message"]
    assert not alive(int((Path(fake["FAKE_PIDS"]) / "hang.pid").read_text()))  # group killed
    assert status["crash.c"]["status"] == "error" and "SIGKILL" in status["crash.c"]["message"]
    assert "something went badly" in status["crash.c"]["stderr_tail"]
    # exit 2 without a result: the loader refused the file, with its one-line reason
    assert status["bad.c"]["status"] == "refused_at_load"
    assert status["bad.c"]["message"] == "bad.c: unsupported thing (hint: do it differently)"
    assert status["bad.c"]["exit_code"] == 2
    fast = status["fast.c"]
    assert fast["status"] == "correct" and fast["speedups"] == {"kernel": 6.0, "e2e": 3.0}
    assert fast["best"]["turn"] == 2 and fast["best"]["sample"] == 2
    assert (fast["turns_used"], fast["candidate_count"], fast["samples_per_turn"]) == (2, 3, 2)
    assert fast["cpu_baseline_ms"] == 10.0 and fast["cpu_baseline_iqr_ms"] == 0.5
    assert fast["compile_s"] == 3.0 and fast["eval_s"] == 1.5
    m = report["metrics"]
    assert (m["problems"], m["compiled"], m["correct"]) == (5, 3, 2)  # hang's "wrong" compiled
    k = m["speedup"]["kernel"]
    assert k["fast_p"] == {"0": 0.4, "1": 0.2, "1.5": 0.2, "2": 0.2}
    assert k["geomean"] == pytest.approx(math.sqrt(6.0 * 0.5))
    assert report["curves"]["correct_rate"] == [0.0, 0.4]
    assert report["curves"]["geomean_best"][0] is None
    assert report["curves"]["geomean_best"][1] == pytest.approx(math.sqrt(3.0))
    assert status["fast.c"]["curve"] == [None, 6.0]
    assert report["complete"] and not report["interrupted"]
    assert report["settings"]["turns"] == 2 and report["settings"]["policy"] == "builtin"
    env = report["env"]
    for key in ("gpu", "clocks", "nvcc", "cpu", "cudaperf_version", "timing_method"):
        assert key in env
    assert env["timing_method"]["settings"]["flush_l2"] is True
    # candidates.jsonl: every candidate, the hung problem's partial run included
    rows = [json.loads(ln) for ln in (out / "candidates.jsonl").read_text().splitlines()]
    assert [r["problem"] for r in rows] == ["fast.c"] * 3 + ["hang.c"] + ["slow.c"] * 3
    assert all(r["schema_version"] == 2 for r in rows)
    best = [r for r in rows if r["is_best"]]
    assert [(b["problem"], b["turn"], b["sample"]) for b in best] == [("fast.c", 1, 1), ("slow.c", 1, 1)]
    b = best[0]
    assert b["speedups"] == {"kernel": 6.0, "e2e": 3.0} and b["gpu_ms"] == 1.0
    assert b["cpu_ms"] == 10.0 and b["cpu_iqr_ms"] == 0.5 and b["baseline"] == "gcc -O3, 1 thread"
    assert b["source"] == "// fast 1 1\n" and len(b["source_sha256"]) == 64
    for key in ("gpu_ms_iqr", "e2e_ms", "structure_score", "structure_reasons", "registers",
                "spill_bytes", "compile_s", "eval_s", "policy", "status", "arch", "gpu"):
        assert key in b
    # the other report files
    md = (out / "report.md").read_text()
    assert "| fast_1 (kernel) | 20% |" in md and "| hang.c | problem_timeout:" in md
    assert "| bad.c | refused_at_load: bad.c: unsupported thing (hint: do it differently) |" in md
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "problems" / "fast.c.json").read_text())["status"] == "correct"


def test_flags_pass_through_to_optimize(tmp_path: Path, fake: dict[str, str]) -> None:
    suite = make_suite(tmp_path / "s", ["fast.c"])
    (suite / "bench.toml").write_text('[problems."fast.c"]\nsizes = { n = 64 }\ndefines = ["X=1"]\n')
    proc = bench(str(suite), "-o", str(tmp_path / "o"), "--turns", "4", "--samples", "2",
                 "--policy", "replay", "--replay", str(tmp_path / "r.jsonl"), "--timeout", "30",
                 "--patience", "2", "--target-speedup", "5", env=fake)
    assert proc.returncode == 0, proc.stderr
    line = Path(fake["FAKE_LOG"]).read_text().split(" ", 1)[1]
    for piece in ("--size n=64", "-D X=1", "--policy replay", "--turns 4", "--samples 2",
                  f"--replay {tmp_path / 'r.jsonl'}", "--timeout 30.0", "--patience 2",
                  "--target-speedup 5.0", "--json", "--force", "--yes"):
        assert piece in line, piece
    for bench_only in ("--jobs", "-j", "--problem-timeout", "--speedup", "--resume"):
        assert f" {bench_only} " not in f" {line} "
    assert f"--output {(tmp_path / 'o' / 'kernels' / 'fast.cu').resolve()}" in line
    assert "fast.c: correct 6x" in proc.stderr
    assert "geomean 6x" in proc.stderr  # the progress tallies


def test_resume_skips_done_problems_and_checks_settings(tmp_path: Path, fake: dict[str, str]) -> None:
    suite = make_suite(tmp_path / "s", ["fast.c", "slow.c", "other.c"])
    out = tmp_path / "out"
    assert bench(str(suite), "-o", str(out), "-j", "2", env=fake).returncode == 0
    assert sorted(calls(fake)) == ["fast", "other", "slow"]
    again = bench(str(suite), "-o", str(out), env=fake)  # not without --resume
    assert again.returncode == 2 and "--resume" in again.stderr
    (out / "problems" / "slow.c.json").unlink()
    Path(fake["FAKE_LOG"]).unlink()
    proc = bench(str(suite), "-o", str(out), "--resume", "--json", env=fake)
    assert proc.returncode == 0, proc.stderr
    assert calls(fake) == ["slow"]
    report = json.loads(proc.stdout)
    assert [p["id"] for p in report["problems"]] == ["fast.c", "other.c", "slow.c"]
    assert report["complete"]
    assert len((out / "candidates.jsonl").read_text().splitlines()) == 9
    changed = bench(str(suite), "-o", str(out), "--resume", "--turns", "5", env=fake)
    assert changed.returncode == 2 and "turns 3 -> 5" in changed.stderr
    missing = bench(str(suite), "--resume", env=fake)
    assert missing.returncode == 2 and "-o DIR" in missing.stderr


def test_ctrl_c_kills_children_writes_partial_report_and_resumes(
    tmp_path: Path, fake: dict[str, str]
) -> None:
    suite = make_suite(tmp_path / "s", ["fast.c", "hang.c"])
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cudaperf_cli", "bench", str(suite), "-o", str(out), "-j", "2"],
        cwd=ROOT, env={**os.environ, **fake}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    pid_file = Path(fake["FAKE_PIDS"]) / "hang.pid"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (pid_file.exists() and (out / "problems" / "fast.c.json").exists()):
        time.sleep(0.1)
    assert pid_file.exists(), "the fake optimize never started"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err
    time.sleep(0.2)
    assert not alive(int(pid_file.read_text()))
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] and not report["complete"]
    assert report["suite"]["not_run"] == ["hang.c"]
    assert [p["id"] for p in report["problems"]] == ["fast.c"]
    assert not (out / "problems" / "hang.c.json").exists()
    Path(fake["FAKE_LOG"]).unlink()
    done = bench(str(suite), "-o", str(out), "-j", "2", "--resume", env={**fake, "FAKE_NOHANG": "1"})
    assert done.returncode == 0, done.stderr
    assert calls(fake) == ["hang"]
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] and [p["status"] for p in report["problems"]] == ["correct", "correct"]


def test_compare_warns_and_refuses_other_gpus(tmp_path: Path, fake: dict[str, str]) -> None:
    suite = make_suite(tmp_path / "s", ["fast.c", "slow.c"])
    assert bench(str(suite), "-o", str(tmp_path / "a"), env=fake).returncode == 0
    a = json.loads((tmp_path / "a" / "report.json").read_text())
    b = json.loads(json.dumps(a))
    for p in b["problems"]:
        p["speedups"] = {k: 2 * v for k, v in p["speedups"].items()}
    b["env"]["gpu"]["driver_version"] = "999.1"
    b["env"]["nvcc"] = "Cuda compilation tools, release 99.0"
    bpath = tmp_path / "b.json"
    bpath.write_text(json.dumps(b))
    proc = bench("compare", str(tmp_path / "a" / "report.json"), str(bpath), "--json")
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 2 and any("driver" in w for w in warnings) and any("nvcc" in w for w in warnings)
    cmp = json.loads(proc.stdout)
    assert [r["ratio"] for r in cmp["problems"]] == [2.0, 2.0]
    assert cmp["geomean_ratio"] == pytest.approx(2.0)
    table = bench("compare", str(tmp_path / "a"), str(bpath))  # a folder works too
    assert table.returncode == 0 and "fast.c" in table.stdout and "fast_1.5 (kernel)" in table.stdout
    b["env"]["gpu"]["name"] = "Some Other GPU"
    bpath.write_text(json.dumps(b))
    refused = bench("compare", str(tmp_path / "a" / "report.json"), str(bpath))
    assert refused.returncode == 2
    assert any(ln.startswith("error: the reports were measured on different GPUs") for ln in refused.stderr.splitlines())
    assert "--force" in refused.stderr
    forced = bench("compare", str(tmp_path / "a" / "report.json"), str(bpath), "--force")
    assert forced.returncode == 0 and "GPU differs" in forced.stderr
    bad = bench("compare", str(tmp_path / "s" / "fast.c"), str(bpath))
    assert bad.returncode == 2 and "not JSON" in bad.stderr


def test_env_differences_lines() -> None:
    a = {"gpu": {"name": "H200", "driver_version": "580", "cuda_version": "13.0"}, "nvcc": "13.0",
         "clocks": {"max_sm_mhz": 1980, "sm_mhz": 345}, "timing_method": {"x": 1}, "cpu": "X"}
    b = json.loads(json.dumps(a))
    b["clocks"]["sm_mhz"] = 1980  # the current clock is recorded, not compared
    assert env_differences(a, b) == ([], False)
    b["clocks"]["max_sm_mhz"] = 1755
    b["timing_method"] = {"x": 2}
    lines, gpu = env_differences(a, b)
    assert not gpu and len(lines) == 2 and lines[0].startswith("clock max_sm_mhz differs")


def test_bad_input_exit_codes(tmp_path: Path) -> None:
    proc = bench(str(tmp_path / "nothing"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    (tmp_path / "a.c").write_text(C_SCALE)
    (tmp_path / "bench.toml").write_text('[problems."a.c"]\nsizes = 3\n')
    proc = bench(str(tmp_path))
    assert proc.returncode == 2 and "sizes" in proc.stderr and "hint: see docs/bench.md" in proc.stderr
    help_ = bench("--help")
    assert help_.returncode == 0 and "compare" in help_.stdout and "run" in help_.stdout


# ---------------------------------------------------------------------------------------
# a real run: two small C problems, the built-in policy, one turn
# ---------------------------------------------------------------------------------------


def test_real_run_over_two_small_c_problems(tmp_path: Path) -> None:
    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "scale.c").write_text(C_SCALE)
    (suite / "vadd.c").write_text(C_ADD)
    (suite / "bench.toml").write_text(
        '[problems."scale.c"]\nsizes = { n = 1000 }\n\n[problems."vadd.c"]\nsizes = { n = 2000 }\n')
    out = tmp_path / "out"
    proc = bench(str(suite), "--policy", "builtin", "--turns", "1", "-o", str(out), "-j", "2",
                 env={"CUDAPERF_GPU_LOCK_DIR": str(tmp_path / "locks")}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # 0 whatever the problems' statuses
    has_gpu, _ = cuda_device_status()
    report = json.loads((out / "report.json").read_text())
    want = "correct" if has_gpu else "no_device"
    assert [(p["id"], p["status"]) for p in report["problems"]] == [("scale.c", want), ("vadd.c", want)]
    for p in report["problems"]:
        assert p["compiled"] and p["candidate_count"] == 1 and p["exit_code"] == (0 if has_gpu else 4)
        assert p["sizes"] == {"n": 1000 if p["id"] == "scale.c" else 2000}
        assert p["structure_score"] is not None
        # no GPU: no CPU baseline either (nothing is timed against it)
        assert p["cpu_baseline_ms"] > 0 if has_gpu else p["cpu_baseline_ms"] is None
    rows = [json.loads(ln) for ln in (out / "candidates.jsonl").read_text().splitlines()]
    assert [r["problem"] for r in rows] == ["scale.c", "vadd.c"]
    assert all("__global__" in r["source"] and r["registers"] for r in rows)
    assert report["metrics"]["compile_rate"] == 1.0
    assert (out / "kernels" / "scale.cu").exists() == has_gpu
    assert "cudaperf bench: tiny" in proc.stdout and "report:" in proc.stdout
    assert (out / "report.md").read_text().startswith("# cudaperf bench: tiny")
    assert (out / "report.png").stat().st_size > 1000
    assert not (tmp_path / "cudaperf-runs").exists()  # run folders live in the output folder
    assert len(list((out / "runs" / "scale.c").iterdir())) == 1
