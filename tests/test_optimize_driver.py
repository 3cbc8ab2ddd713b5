"""The optimize driver over its problem kinds (agent/optimize.py, agent/kinds/), on the CPU:
``slow_ms`` as specified, what every job of a run gets (tolerances, the baseline's times,
the reference outputs), the does-not-fit refusal (exit 5, the JSON summary, nothing
measured or written), ``--resume`` of both kinds reading ``baseline.json``, and an
unreachable model server refused before any work without a resume hint.

The PyTorch runs use the host test backend (``CUDAPERF_WORKER_BACKEND=host``): the
baseline job and the candidate jobs run in the real worker, models on the CPU."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import shutil
import socket
from pathlib import Path

import pytest

from tests.conftest import cuda_device_status

from cudaperf_cli.agent import optimize
from cudaperf_cli.agent.kinds.base import (
    DeviceInfo, EvalSettings, Evaluation, Plan, check_fit, slow_limit_ms,
)
from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.agent.options import EXIT_DOES_NOT_FIT, OptimizeOptions
from cudaperf_cli.evaluate.memory import MemoryPlan
from cudaperf_cli.evaluate.tolerances import resolve_tolerances
from tests.test_cli import EXAMPLES, cli, error_lines

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
SCALE = "// cudaperf: x[n]\nvoid scale(int n, double *x) { for (int i = 0; i < n; i++) x[i] *= 2.0; }\n"


# ----------------------------------------------------------------------------- slow_ms

def test_slow_limit_is_the_factor_times_the_lower_of_best_and_baseline():
    assert slow_limit_ms(10, 2.0, 50.0) == 20.0
    assert slow_limit_ms(10, 80.0, 50.0) == 500.0
    assert slow_limit_ms(4, None, 3.0) == 12.0  # no correct candidate yet: the baseline
    assert slow_limit_ms(4, 3.0, None) == 12.0  # no baseline (no device for it): the best
    assert slow_limit_ms(10, None, None) is None
    assert slow_limit_ms(0, 2.0, 50.0) is None  # --slow-factor 0: never slow
    assert slow_limit_ms(10, 0.0, float("nan")) is None  # not times


class _Eval(Evaluation):
    baseline_name = "test"

    def measure_baseline(self):
        return None

    def baseline_ms(self):
        return self.baseline

    def _evaluate(self, record, stage, folder):
        record.status, record.gpu_ms = "correct", 1.5


def test_the_best_so_far_counts_verified_records_only(tmp_path):
    ev = _Eval(None, Plan(), EvalSettings(arch="sm_90", slow_factor=10), tmp_path)
    ev.baseline = 40.0
    assert ev.slow_ms() == 400.0
    for status, ms in [("wrong", 0.1), ("no_device", None), ("correct", 3.0), ("slow", 900.0)]:
        ev.note(TurnRecord(0, "p", "d", status, gpu_ms=ms))
    assert ev.best_ms == 3.0 and ev.slow_ms() == 30.0
    record = ev.evaluate(TurnRecord(1, "p", "d", "pending"))
    assert record.baseline == "test" and ev.best_ms == 1.5 and ev.slow_ms() == 15.0
    ev.refuse("x does not fit: ...")
    record = ev.evaluate(TurnRecord(2, "p", "d", "pending"))
    assert record.status == "does_not_fit" and record.message.startswith("x does not fit")


def test_settings_from_the_options_and_bad_values():
    device = DeviceInfo(ordinal=1, arch="sm_90")
    s = EvalSettings.from_options(OptimizeOptions(file=Path("a.c"), atol=1e-3, slow_factor=4), "sm_90", device)
    assert s.device == 1 and not s.device_missing and s.slow_factor == 4.0
    assert s.tolerances == resolve_tolerances(1e-3, None)
    assert s.tolerances["float32"] == {"atol": 1e-3, "rtol": 1e-4}
    assert EvalSettings.from_options(OptimizeOptions(file=Path("a.c")), "sm_90", DeviceInfo()).device_missing
    from cudaperf_cli.core import CudaperfError

    with pytest.raises(CudaperfError, match="--atol/--rtol"):
        EvalSettings.from_options(OptimizeOptions(file=Path("a.c"), rtol=-1.0), "sm_90", device)
    with pytest.raises(CudaperfError, match="--slow-factor"):
        EvalSettings.from_options(OptimizeOptions(file=Path("a.c"), slow_factor=math.inf), "sm_90", device)


# ----------------------------------------------------------------------------- what C jobs get

def test_c_jobs_carry_the_tolerances_slow_limit_and_reference_outputs(tmp_path):
    from cudaperf_cli.agent.kinds.c import Baseline, CKind
    from cudaperf_cli.problems.c import load_c_problem

    (tmp_path / "scale.c").write_text(SCALE)
    problem = load_c_problem(tmp_path / "scale.c", sizes={"n": 1000})
    kind = CKind()
    plan = kind.plan(problem, DeviceInfo())
    settings = EvalSettings(arch="sm_90", device=2, tolerances=resolve_tolerances(1e-3, 1e-3), slow_factor=5)
    ev = kind.open(problem, plan, settings, tmp_path / "run")
    base = ev.job(None)  # the baseline job: the reference alone, outputs written for the run
    assert base.cand_lib is None and base.device == 2 and base.tolerances == settings.tolerances
    assert base.reference_outputs == str(tmp_path / "run" / "reference" / "outputs")
    assert Path(base.reference_outputs).is_dir() and base.slow_ms is None
    first = ev.job(tmp_path / "cand.so")  # nothing known yet: no limit, the worker runs the reference
    assert first.slow_ms is None and first.reference_outputs is None and not first.cpu_baseline_ms
    ev.baseline = Baseline({"main": 8.0}, {"main": 0.1}, {"x": "read-write"}, base.reference_outputs)
    job = ev.job(tmp_path / "cand.so")
    assert job.slow_ms == 40.0 and job.cpu_baseline_ms == {"main": 8.0}
    assert job.array_roles == {"x": "read-write"} and job.reference_outputs == base.reference_outputs
    ev.note(TurnRecord(0, "p", "d", "correct", gpu_ms=0.5))
    assert ev.job(tmp_path / "cand.so").slow_ms == 2.5
    assert ev.baseline_ms() == 8.0


# ----------------------------------------------------------------------------- does not fit

def _run(capsys, opts, given=frozenset()):
    code = optimize.run_optimize_command(opts, given=frozenset(given))
    out, err = capsys.readouterr()
    gc.collect()  # the run folder's lock goes with its store
    return code, out, err


def test_a_problem_that_does_not_fit_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    from cudaperf_cli.agent.kinds.c import CEvaluation, CKind
    import cudaperf_cli.build

    (tmp_path / "scale.c").write_text(SCALE)
    huge = MemoryPlan(footprint_bytes=12_900_000_000, gpu_bytes=38_600_000_000, host_bytes=10**9,
                      flush_bytes=268_435_456, parts={"arrays": 12_900_000_000})
    real_plan = CKind.plan
    monkeypatch.setattr(CKind, "plan", lambda self, p, d: Plan(real_plan(self, p, d).configs, huge))

    def no_baseline(self):
        raise AssertionError("the baseline must not be measured")

    monkeypatch.setattr(CEvaluation, "measure_baseline", no_baseline)
    monkeypatch.setattr(CKind, "open", lambda *a: (_ for _ in ()).throw(AssertionError("nothing opened")))
    monkeypatch.setattr(cudaperf_cli.build, "detect_arch", lambda *a, **k: "sm_90")
    monkeypatch.setattr(optimize, "probe_run_device", lambda arch, ordinal=0: DeviceInfo(
        arch=arch, free_bytes=21_000_000_000, total_bytes=150_000_000_000, l2_bytes=60 << 20))
    opts = OptimizeOptions(file=tmp_path / "scale.c", sizes={"n": 10}, run_root=tmp_path / "runs",
                           json_output=True, output=tmp_path / "scale.cu")
    code, out, err = _run(capsys, opts)
    assert code == EXIT_DOES_NOT_FIT == 5
    assert err.strip().splitlines()[-1] == "hint: pass smaller sizes with --size NAME=VALUE"
    line = err.strip().splitlines()[-2].removeprefix("error: ")
    assert line == ("scale.c does not fit: one evaluation needs 38.6 GB of GPU memory (footprint "
                    "12.9 GB) and the GPU has 21.0 GB free")
    doc = json.loads(out)
    assert doc["problem_status"] == "does_not_fit" and doc["message"] == line and doc["exit_code"] == 5
    assert doc["memory"]["gpu_bytes"] == 38_600_000_000 and doc["footprint_bytes"] == 12_900_000_000
    assert doc["turns"] == [] and doc["output"] is None and doc["device"]["free_bytes"] == 21_000_000_000
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "summary.json").read_text())["problem_status"] == "does_not_fit"
    assert not (run / "baseline.json").exists() and not (run / "turns.jsonl").exists()
    assert not (run / "reference").exists() and not (tmp_path / "scale.cu").exists()


def test_without_a_device_only_the_host_is_checked():
    plan = Plan([], MemoryPlan(footprint_bytes=10, gpu_bytes=10**15, host_bytes=100))
    assert check_fit(plan, DeviceInfo(), "p") is None  # no GPU: its memory is not the question
    assert "of GPU memory" in check_fit(plan, DeviceInfo(arch="sm_90", free_bytes=10**9), "p")
    big_host = Plan([], MemoryPlan(footprint_bytes=10, gpu_bytes=10, host_bytes=10**16))
    assert "of host memory" in check_fit(big_host, DeviceInfo(), "p")
    assert check_fit(Plan(), DeviceInfo(arch="sm_90", free_bytes=0), "p") is None  # no plan


# ----------------------------------------------------------------------------- resume: C

@needs_nvcc
def test_c_resume_reads_the_baseline_back(tmp_path, capsys, monkeypatch):
    import cudaperf_cli.evaluate as evaluate

    (tmp_path / "scale.c").write_text(SCALE)
    jobs = []
    real = evaluate.run_evaluation

    def spy(job, **kw):
        jobs.append(job)
        return real(job, **kw)

    monkeypatch.setattr(evaluate, "run_evaluation", spy)
    opts = OptimizeOptions(file=tmp_path / "scale.c", sizes={"n": 1000}, run_root=tmp_path / "runs",
                           turns=1, json_output=True, output=tmp_path / "scale.cu")
    monkeypatch.delenv("CUDAPERF_WORKER_BACKEND", raising=False)
    if not cuda_device_status()[0]:  # no device: no baseline either (nothing is timed against it)
        code, out, _ = _run(capsys, opts)
        assert code == 4 and jobs == [] and not (Path(json.loads(out)["run_dir"]) / "baseline.json").exists()
    # the host test backend stands in for a device: the baseline is measured, then read back
    monkeypatch.setenv("CUDAPERF_WORKER_BACKEND", "host")
    opts = dataclasses.replace(opts, run_root=tmp_path / "runs-host")
    code, out, _ = _run(capsys, opts)
    first = json.loads(out)
    run = Path(first["run_dir"])
    assert [j.cand_lib is None for j in jobs] == [True, False]  # the baseline job, then the candidate's
    assert jobs[0].reference_outputs == str(run / "reference" / "outputs")
    stored = json.loads((run / "baseline.json").read_text())
    assert stored["cpu_ms"]["main"] > 0 and stored["reference_outputs"] == jobs[0].reference_outputs
    assert first["cpu_baseline"] == stored and first["tolerances"] == resolve_tolerances()
    jobs.clear()
    code, out, _ = _run(capsys, OptimizeOptions(file=Path("."), resume=run, turns=2, json_output=True),
                          {"turns"})
    doc = json.loads(out)
    assert jobs and all(j.cand_lib is not None for j in jobs)  # the baseline not measured again
    assert doc["cpu_baseline"] == stored and len(doc["turns"]) == 2 and doc["run_dir"] == str(run)


# ----------------------------------------------------------------------------- PyTorch

torch_problem = '''import torch
import torch.nn as nn

batch_size = 64
dim = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


@needs_nvcc
def test_torch_baseline_once_then_every_candidate_job_gets_it_and_resume_reads_it(
        tmp_path, capsys, monkeypatch):
    """The real worker on the host backend: the baseline job measures eager (and compile);
    the candidate jobs get ``baseline_ms``, the tolerances and ``slow_ms`` = 10 x eager;
    ``--resume`` reads ``baseline.json`` and measures nothing again."""
    pytest.importorskip("torch")
    import cudaperf_cli.evaluate.torch_job as torch_job
    from tests.test_torch_optimize import fast_reply

    monkeypatch.setenv("CUDAPERF_WORKER_BACKEND", "host")
    (tmp_path / "relu.py").write_text(torch_problem)
    replies = tmp_path / "r.jsonl"
    replies.write_text("".join(json.dumps({"text": fast_reply()}) + "\n" for _ in range(2)))
    jobs = []
    real = torch_job.run_torch_evaluation

    def spy(job, timeout_s, **kw):
        jobs.append(job)
        return real(job, timeout_s, **kw)

    monkeypatch.setattr(torch_job, "run_torch_evaluation", spy)
    opts = OptimizeOptions(file=tmp_path / "relu.py", policy="replay", replay=replies, turns=1,
                           run_root=tmp_path / "runs", json_output=True, output=tmp_path / "out",
                           compile_baseline=False, eval_timeout_s=120)
    code, out, err = _run(capsys, opts)
    doc = json.loads(out)
    assert [j.mode for j in jobs] == ["baseline", "candidate"], err
    run = Path(doc["run_dir"])
    stored = json.loads((run / "baseline.json").read_text())
    eager = stored["eager_ms"]
    assert stored["kind"] == "torch" and eager > 0 and stored["compile_ms"] is None
    assert doc["torch_baseline"]["eager_ms"] == eager and doc["degenerate"] is False
    cand = jobs[1]
    assert cand.baseline_ms == {"eager": eager, "compile": None}
    assert cand.slow_ms == pytest.approx(10 * eager) and cand.tolerances == resolve_tolerances()
    # the host backend hands CPU tensors to the fast format's launcher: it refuses them
    assert doc["turns"][0]["status"] == "runtime_error", doc["turns"][0]["message"]
    assert doc["turns"][0]["tolerances"] == resolve_tolerances()
    jobs.clear()
    code, out, err = _run(capsys, OptimizeOptions(file=Path("."), resume=run, turns=2, json_output=True),
                          {"turns"})
    doc = json.loads(out)
    assert [j.mode for j in jobs] == ["candidate"], err  # the baseline is read back, not measured
    assert jobs[0].baseline_ms == {"eager": eager, "compile": None}
    assert doc["torch_baseline"]["eager_ms"] == eager and len(doc["turns"]) == 2


def test_torch_does_not_fit_is_exit_5_with_the_summary(tmp_path, capsys, monkeypatch):
    """The PyTorch kind through the same check: a plan larger than the GPU's free memory."""
    pytest.importorskip("torch")
    import cudaperf_cli.build
    from cudaperf_cli.agent.kinds.pytorch import TorchEvaluation, TorchKind

    (tmp_path / "relu.py").write_text(torch_problem)
    huge = MemoryPlan(footprint_bytes=6_400_000_000, gpu_bytes=19_500_000_000, host_bytes=10**9)
    monkeypatch.setattr(TorchKind, "plan", lambda self, p, d: Plan([], huge))
    monkeypatch.setattr(TorchEvaluation, "measure_baseline",
                        lambda self: (_ for _ in ()).throw(AssertionError("no baseline")))
    monkeypatch.setattr(cudaperf_cli.build, "detect_arch", lambda *a, **k: "sm_90")
    monkeypatch.setattr(optimize, "probe_run_device",
                        lambda arch, ordinal=0: DeviceInfo(arch=arch, free_bytes=8_000_000_000))
    opts = OptimizeOptions(file=tmp_path / "relu.py", run_root=tmp_path / "runs", json_output=True,
                           output=tmp_path / "out")
    code, out, err = _run(capsys, opts)
    doc = json.loads(out)
    assert code == 5 and doc["kind"] == "torch" and doc["problem_status"] == "does_not_fit"
    assert f"error: {doc['message']}" == err.strip().splitlines()[-2]
    assert "needs 19.5 GB of GPU memory (footprint 6.4 GB) and the GPU has 8.0 GB free" in doc["message"]
    assert not (tmp_path / "out").exists() and not (Path(doc["run_dir"]) / "baseline.json").exists()


# ----------------------------------------------------------------------------- model server

def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_unreachable_server_is_refused_before_the_baseline(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    proc = cli("optimize", str(EXAMPLES / "elementwise.c"), "--size", "n=1000", "--policy", "openai",
               "--base-url", url, "--model", "m", "--json", "--run-dir", "runs", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    lines = error_lines(proc)
    assert lines[0].startswith(f"error: cannot reach the model server at {url}"), lines
    assert "resume" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "runs").exists()  # nothing was loaded, measured or written


@needs_nvcc
def test_a_server_failing_before_any_turn_gives_no_resume_hint(tmp_path):
    from cudaperf_cli.policies.replay_server import ReplayServer

    with ReplayServer([{"status": 500, "text": "boom"}] * 4) as server:
        proc = cli("optimize", str(EXAMPLES / "elementwise.c"), "--size", "n=1000", "--policy", "openai",
                   "--base-url", server.url, "--model", "m", "--max-retries", "0", "--json", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "HTTP 500" in error_lines(proc)[0] and "resume" not in proc.stderr


def test_the_kinds_never_import_the_driver():
    root = Path(__file__).resolve().parents[1] / "cudaperf_cli" / "agent" / "kinds"
    for f in root.glob("*.py"):
        text = f.read_text()
        for name in ("agent.optimize", "agent.proposals", "agent.resume", "agent import optimize"):
            assert name not in text, (f.name, name)


def test_rl_evaluates_through_the_kinds(tmp_path):
    """rl/evaluate.py plans, opens and evaluates through the kind interface."""
    from cudaperf_cli.rl.evaluate import LocalEvaluator
    from cudaperf_cli.rl.problems import ProblemSpec
    from cudaperf_cli.problems.c import load_c_problem

    (tmp_path / "scale.c").write_text(SCALE)
    problem = load_c_problem(tmp_path / "scale.c", sizes={"n": 100})
    spec = ProblemSpec(path=tmp_path / "scale.c", kind="c", name="scale:scale", problem=problem, sha256="0")
    ev = LocalEvaluator(arch="sm_90", device=0, device_missing=True, workdir=tmp_path / "w")
    ev.prepare([spec])
    session = ev._evals["scale:scale"]
    assert session.baseline is None and (tmp_path / "w" / "scale-scale" / "reference").is_dir()
    record = TurnRecord(0, "train", "x", "pending", source="this is not CUDA")
    if shutil.which("nvcc"):
        ev.evaluate(spec, record)
        assert record.status == "compile_error" and record.baseline == session.baseline_name
    ev._evals["scale:scale"].refuse("scale.c does not fit: ...")
    record = TurnRecord(1, "train", "x", "pending", source="x")
    ev.evaluate(spec, record)
    assert record.status == "does_not_fit"


def test_a_degenerate_problem_runs_with_a_warning_and_the_flag(tmp_path):
    """KernelBench ships files whose outputs ignore the inputs: evaluated as given, flagged."""
    pytest.importorskip("torch")
    (tmp_path / "degen.py").write_text(torch_problem.replace("torch.relu(x) * 2.0", "torch.relu(x - 1000.0)"))
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": "no code here"}) + "\n")
    proc = cli("optimize", "degen.py", "--policy", "replay", "--replay", "r.jsonl", "--turns", "1", "--json",
               cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the reply had no code: no correct candidate
    doc = json.loads(proc.stdout)
    assert doc["degenerate"] is True and doc["problem_status"] is None
    assert [t["status"] for t in doc["turns"]] == ["format_error"]
    warned = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(warned) == 1 and "do not depend on the inputs" in warned[0]
    assert any("do not depend on the inputs" in w for w in doc["warnings"])
