"""The compute-sanitizer stage (cudaperf_cli/evaluate/sanitize.py), on the CPU: the command
line, the report formats of NVIDIA's documentation, the verdicts, the job the tools run,
finding the tool, and the stage end to end through the real child protocol and through
``cudaperf optimize`` with a stand-in compute-sanitizer (``tests``' fake below: it runs the
worker after ``--`` with the host test backend and writes a log in the tool's format).

The GPU side (a real compute-sanitizer on an honest candidate, a far write, an uninitialised
read) is tests/test_gpu_sanitize.py.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudaperf_cli.core import param_to_json
from cudaperf_cli.evaluate.job import ConfigSpec, EvalJob, EvalResult, TimingSettings
from cudaperf_cli.evaluate.sanitize import (
    ERROR_EXITCODE,
    PRINT_LIMIT,
    SANITIZER_ENV,
    TOOLS,
    find_compute_sanitizer,
    judge,
    parse_report,
    run_sanitizer,
    sanitize_config,
    sanitize_job,
    sanitizer_command,
    sanitizer_version,
)
from tests.eval_refs import REF_C, SAXPY_PARAMS, host_clock_verdict

# Report texts in the formats NVIDIA's Compute Sanitizer documentation shows (memcheck's
# "Understanding Memcheck Errors", the initcheck sample, API errors, leaks, racecheck), with
# this project's kernels and paths.
MEMCHECK_FAR_WRITE = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at far_write(float *, int)+0x1b0 in /tmp/cudaperf-build-3f2a/candidate.cu:12
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f4a2c300000 is out of bounds
=========     and is 1,048,577 bytes after the nearest allocation at 0x7f4a2c1fbf00 of size 4,004 bytes
=========     Device Frame: far_write(float *, int)+0x1b0 in candidate.cu:12
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f2d15] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
=========
========= ERROR SUMMARY: 2 errors
"""
MEMCHECK_OLD_FORMAT = """\
========= Invalid __global__ write of size 4 bytes
=========     at unaligned_kernel():0x160 in memcheck_demo.cu:6
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f6510c00001 is misaligned
=========
========= ERROR SUMMARY: 1 error
"""
INITCHECK_SCRATCH = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at vectorAdd(int *)+0x70 in /home/cuda/compute-sanitizer-samples/Initcheck/memset_error.cu:41
=========     by thread (31,0,0) in block (1,0,0)
=========     Address 0x7f3c7ec000fc
=========
========= ERROR SUMMARY: 1,024 errors
"""
CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
NOT_ATTACHED = """\
========= Error: No attachable process found. compute-sanitizer timed-out.
========= Default timeout can be adjusted with --launch-timeout. Awaiting target completion.
"""
NO_CUDA = "========= Error: Target application terminated before first instrumented API call\n"
LEAK = "========= Leaked 64 bytes at 0x400200200\n========= LEAK SUMMARY: 64 bytes leaked in 1 allocations\n"
RACE = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at reduce(float *)+0x460 in reduce.cu:41
=========     and Read access at reduce(float *)+0x7a0 in reduce.cu:51 [508 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def result(status: str, message: str = "", **kw) -> EvalResult:
    return EvalResult(status=status, message=message, **kw)


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------


def test_the_command_wraps_the_worker_and_logs_to_a_file():
    cmd = sanitizer_command("/opt/cuda/bin/compute-sanitizer", "memcheck", "/tmp/x/memcheck.log")
    assert cmd[0] == "/opt/cuda/bin/compute-sanitizer" and cmd[-1] == "--"
    opts = dict(zip(cmd[1:-1:2], cmd[2:-1:2]))
    assert opts["--tool"] == "memcheck" and opts["--error-exitcode"] == str(ERROR_EXITCODE)
    assert opts["--print-limit"] == str(PRINT_LIMIT) and opts["--log-file"] == "/tmp/x/memcheck.log"
    assert opts["--target-processes"] == "application-only" and opts["--require-cuda-init"] == "yes"
    assert opts["--check-exit-code"] == "no" and int(opts["--launch-timeout"]) >= 30
    assert opts["--report-api-errors"] == "no" and opts["--leak-check"] == "no"
    init = sanitizer_command("cs", "initcheck", "l.log")
    assert "--tool" in init and init[init.index("--tool") + 1] == "initcheck"
    assert "--report-api-errors" not in init and "--leak-check" not in init  # memcheck's own
    assert TOOLS == ("memcheck", "initcheck")
    with pytest.raises(ValueError, match="unknown compute-sanitizer tool"):
        sanitizer_command("cs", "nonsense", "l.log")


# ---------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------


def test_a_far_write_is_one_line_with_where_and_how_far():
    rep = parse_report(MEMCHECK_FAR_WRITE, "memcheck")
    assert rep.errors == 2 and rep.has_errors and rep.summary_found and rep.tool_error is None
    assert rep.first == (
        "memcheck: Invalid __global__ write of size 4 bytes at far_write(float *, int)+0x1b0 in "
        "candidate.cu:12 by thread (0,0,0) in block (0,0,0); Address 0x7f4a2c300000 is out of "
        "bounds and is 1,048,577 bytes after the nearest allocation at 0x7f4a2c1fbf00 of size "
        "4,004 bytes")
    assert "/tmp" not in rep.first and "Host Frame" not in rep.first
    assert rep.headlines[1].startswith("Program hit cudaErrorLaunchFailure")


def test_the_older_location_format_and_misaligned_accesses():
    rep = parse_report(MEMCHECK_OLD_FORMAT, "memcheck")
    assert rep.errors == 1
    assert rep.first == ("memcheck: Invalid __global__ write of size 4 bytes at unaligned_kernel():0x160 "
                         "in memcheck_demo.cu:6 by thread (0,0,0) in block (0,0,0); Address "
                         "0x7f6510c00001 is misaligned")


def test_an_uninitialised_read_and_a_count_with_commas():
    rep = parse_report(INITCHECK_SCRATCH, "initcheck")
    assert rep.errors == 1024 and rep.first is not None
    assert rep.first.startswith("initcheck: Uninitialized __global__ memory read of size 4 bytes at "
                                "vectorAdd(int *)+0x70 in memset_error.cu:41 by thread (31,0,0)")


def test_clean_tool_failures_leaks_and_races():
    clean = parse_report(CLEAN, "memcheck")
    assert clean.errors == 0 and not clean.has_errors and clean.first is None
    for text in (NOT_ATTACHED, NO_CUDA):
        rep = parse_report(text, "memcheck")
        assert rep.tool_error and rep.tool_error.startswith("Error: ") and not rep.has_errors, rep
        assert not rep.summary_found
    leak = parse_report(LEAK, "memcheck")
    assert leak.has_errors and leak.first == "memcheck: Leaked 64 bytes at 0x400200200"
    race = parse_report(RACE, "racecheck")
    assert race.errors == 1 and race.tool_error is None
    assert race.first is not None and race.first.startswith("racecheck: Error: Race reported between Write")
    # a summary of 0 wins over anything that looks like an error; no log at all is no summary
    assert not parse_report("========= Warning: something\n" + CLEAN, "memcheck").has_errors
    assert parse_report("", "memcheck").errors is None


def test_a_long_error_line_is_cut():
    text = "========= Invalid __global__ read of size 4 bytes\n=========     at " + "k" * 600 + "\n"
    rep = parse_report(text, "memcheck")
    assert rep.first is not None and len(rep.first) == 400 and rep.first.endswith("...")
    assert rep.errors is None and rep.has_errors  # killed before its summary: the headline counts


# ---------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------


def test_the_verdicts():
    clean, errors = parse_report(CLEAN, "memcheck"), parse_report(MEMCHECK_FAR_WRITE, "memcheck")
    assert judge("memcheck", result("correct"), clean) == ("clean", "memcheck: no errors")
    verdict, msg = judge("memcheck", result("runtime_error", "device synchronize failed"), errors)
    assert verdict == "errors" and msg.startswith("memcheck: Invalid __global__ write")
    # the candidate failed under the tool although the tool saw no error: rejected too
    verdict, msg = judge("initcheck", result("wrong", "config 'small-odd': 'y' differs"), clean)
    assert verdict == "failed" and "ended 'wrong': config 'small-odd'" in msg
    timeout = result("timeout", "timed out after 300 s", details={"state": {"candidate_started": True}})
    # ... but not a time-out: the tool slows kernels many times over, or hangs on its own
    assert judge("memcheck", timeout, parse_report("", "memcheck"))[0] == "tool_failure"
    # the tool could not check the run: not the candidate's fault
    v, m = judge("memcheck", result("correct"), parse_report(NOT_ATTACHED, "memcheck"))
    assert v == "tool_failure" and "No attachable process found" in m
    assert judge("memcheck", result("correct"), parse_report("", "memcheck"))[0] == "tool_failure"
    crash = result("crash", "the worker exited with status 1 while starting",
                   details={"state": {"candidate_started": False}})
    assert judge("memcheck", crash, parse_report(NO_CUDA, "memcheck"))[0] == "tool_failure"
    assert judge("memcheck", result("no_device", "no CUDA device"), clean)[0] == "tool_failure"


# ---------------------------------------------------------------------------------------
# The job the tools run
# ---------------------------------------------------------------------------------------


def saxpy_job(tmp_path: Path, cand: str | None = "cand.so", **kw) -> EvalJob:
    configs = [ConfigSpec("edge", {"n": 1}, trials=1, classify=False),
               ConfigSpec("small-odd", {"n": 1001}, trials=2),
               ConfigSpec("main", {"n": 1 << 20}, trials=1, time=True)]
    return EvalJob(ref_lib=str(tmp_path / "ref.so"), ref_symbol="cudaperf_ref_saxpy",
                   cand_lib=None if cand is None else str(tmp_path / cand), cand_symbol="saxpy_cuda",
                   params=[param_to_json(p) for p in SAXPY_PARAMS], configs=configs, **kw)


def test_the_sanitized_job_is_the_smallest_configuration_once_untimed(tmp_path):
    job = saxpy_job(tmp_path, slow_ms=4.0, reference_outputs=str(tmp_path / "refs"),
                    cpu_baseline_ms={"main": 3.0}, array_roles={"x": "read-only", "y": "read-write"},
                    tolerances={"float32": {"atol": 1e-3, "rtol": 1e-3}}, seed=7, device=1)
    assert sanitize_config(job).name == "small-odd"  # not the edge configuration
    s = sanitize_job(job)
    assert [(c.name, c.sizes, c.trials, c.time) for c in s.configs] == [("small-odd", {"n": 1001}, 1, False)]
    assert s.slow_ms is None and s.reference_outputs is None and s.cpu_reps == 0 and s.cpu_baseline_ms == {}
    assert s.array_roles == job.array_roles and s.tolerances == job.tolerances
    assert (s.seed, s.device, s.cand_lib) == (7, 1, job.cand_lib)
    assert len(job.configs) == 3 and job.slow_ms == 4.0  # the job itself is untouched
    only_edge = dataclasses.replace(job, configs=[ConfigSpec("edge", {"n": 1}, classify=False)])
    assert sanitize_config(only_edge).name == "edge"


def test_the_stage_runs_each_tool_and_stops_at_the_first_error(tmp_path):
    calls: list[tuple[str, EvalJob, dict]] = []
    logs = {"memcheck": CLEAN, "initcheck": INITCHECK_SCRATCH}

    def fake_run(job, *, timeout_s, wrapper, host_memory_limit_bytes, env):
        tool = wrapper[wrapper.index("--tool") + 1]
        Path(wrapper[wrapper.index("--log-file") + 1]).write_text(logs[tool])
        calls.append((tool, job, {"timeout_s": timeout_s, "limit": host_memory_limit_bytes, "env": env}))
        return result("correct" if tool == "memcheck" else "runtime_error", exit_code=0)

    job = saxpy_job(tmp_path)
    out = run_sanitizer(job, exe="/opt/cs/compute-sanitizer", timeout_s=42.0, run=fake_run)
    assert [c[0] for c in calls] == ["memcheck", "initcheck"]
    assert all(c[1].configs[0].name == "small-odd" and c[2]["timeout_s"] == 42.0 for c in calls)
    assert calls[0][2]["env"]["CUDAPERF_SANITIZER_DIR"].endswith("cs")
    assert calls[0][2]["limit"] > 4 << 30  # the worker's bound plus the tool's
    assert out.rejected and out.message.startswith("initcheck: Uninitialized __global__ memory read")
    assert [t.verdict for t in out.tools] == ["clean", "errors"] and out.tools[1].errors == 1024
    doc = out.to_json()
    assert doc["result"] == "rejected" and doc["config"] == {"name": "small-odd", "sizes": {"n": 1001}}
    json.dumps(doc)

    calls.clear()
    logs["memcheck"] = MEMCHECK_FAR_WRITE
    out = run_sanitizer(job, exe="/opt/cs/compute-sanitizer", timeout_s=42.0, run=fake_run)
    assert [c[0] for c in calls] == ["memcheck"] and out.rejected  # initcheck not run after it

    calls.clear()
    logs.update(memcheck=CLEAN, initcheck=CLEAN)
    out = run_sanitizer(job, exe="/opt/cs/compute-sanitizer", timeout_s=42.0,
                        run=lambda j, **kw: (fake_run(j, **kw), result("correct"))[1])
    assert out.result == "clean" and out.message == "memcheck + initcheck: no errors on config 'small-odd'"
    assert out.seconds >= 0 and len(out.tools) == 2

    skipped = run_sanitizer(job, exe=None, timeout_s=1.0, run=fake_run)
    assert skipped.result == "skipped" and not skipped.rejected and "not installed" in skipped.message
    with pytest.raises(ValueError):
        run_sanitizer(saxpy_job(tmp_path, cand=None), exe="cs", timeout_s=1.0, run=fake_run)


# ---------------------------------------------------------------------------------------
# Finding the tool
# ---------------------------------------------------------------------------------------


def fake_tool(folder: Path, body: str = "") -> Path:
    """A stand-in compute-sanitizer: ``--version``; otherwise the command after ``--`` runs
    (stdin, stdout and stderr inherited) and a log in the tool's format is written to
    ``--log-file``: clean, or an error for the tool named in ``$FAKE_SANITIZER_ERROR``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "compute-sanitizer"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent('''\
        import os, subprocess, sys
        args = sys.argv[1:]
        if args == ["--version"]:
            print("NVIDIA (R) Compute Sanitizer\\nVersion 2099.1.0 fake"); sys.exit(0)
        cut = args.index("--")
        opts = dict(zip(args[:cut:2], args[1:cut:2]))
        rc = subprocess.run(args[cut + 1:]).returncode
        tool = opts["--tool"]
        with open(opts["--log-file"], "w") as fh:
            fh.write("========= COMPUTE-SANITIZER\\n")
            if os.environ.get("FAKE_SANITIZER_ERROR") == tool:
                fh.write("========= Uninitialized __global__ memory read of size 4 bytes\\n"
                         "=========     at k(float *)+0x70 in /tmp/b/candidate.cu:9\\n"
                         "=========     by thread (0,0,0) in block (0,0,0)\\n"
                         "=========     Address 0x7f00\\n=========\\n"
                         "========= ERROR SUMMARY: 1 error\\n")
                sys.exit(rc or int(opts["--error-exitcode"]))
            fh.write("========= ERROR SUMMARY: 0 errors\\n")
        sys.exit(rc)
    ''') + body)
    path.chmod(0o755)
    return path


def test_finding_the_tool(tmp_path, monkeypatch):
    tool = fake_tool(tmp_path / "bin")
    monkeypatch.setenv(SANITIZER_ENV, str(tool))
    assert find_compute_sanitizer() == str(tool)
    assert sanitizer_version(str(tool)) == "Version 2099.1.0 fake"
    monkeypatch.setenv(SANITIZER_ENV, str(tmp_path / "missing"))
    assert find_compute_sanitizer() is None  # named but absent: missing, not looked for elsewhere
    monkeypatch.delenv(SANITIZER_ENV)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert find_compute_sanitizer() == str(tool)
    assert sanitizer_version(str(tmp_path / "missing")) is None


# ---------------------------------------------------------------------------------------
# End to end through the child protocol (host test backend, the stand-in tool)
# ---------------------------------------------------------------------------------------


def cc_lib(folder: Path, source: str, name: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src, lib = folder / f"{name}.c", folder / f"{name}.so"
    src.write_text(source)
    proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return lib


def test_the_stage_through_the_worker_and_the_wrapper(tmp_path, monkeypatch):
    cc_lib(tmp_path, REF_C, "ref")
    cc_lib(tmp_path, "int saxpy_cuda(int n, float a, float *x, float *y) "
                     "{ for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i]; return 0; }\n", "cand")
    tool = str(fake_tool(tmp_path / "cs"))
    monkeypatch.setenv("CUDAPERF_WORKER_BACKEND", "host")
    job = saxpy_job(tmp_path, cand="cand.so")
    out = run_sanitizer(job, exe=tool, timeout_s=120)
    assert out.result == "clean", out.to_json()
    assert [(t.tool, t.worker_status, t.errors) for t in out.tools] == [
        ("memcheck", "correct", 0), ("initcheck", "correct", 0)]
    monkeypatch.setenv("FAKE_SANITIZER_ERROR", "initcheck")
    out = run_sanitizer(job, exe=tool, timeout_s=120)
    assert out.rejected and out.tools[-1].exit_code == ERROR_EXITCODE, out.to_json()
    assert out.message == ("initcheck: Uninitialized __global__ memory read of size 4 bytes at "
                           "k(float *)+0x70 in candidate.cu:9 by thread (0,0,0) in block (0,0,0); "
                           "Address 0x7f00")


# ---------------------------------------------------------------------------------------
# Through cudaperf optimize (host test backend, a replayed host-code candidate)
# ---------------------------------------------------------------------------------------

SCALE_C = "// cudaperf: x[n]\nvoid scale(int n, double *x) { for (int i = 0; i < n; i++) x[i] *= 2.0; }\n"
# Host code standing in for a kernel: the host test backend hands it host pointers.
SCALE_REPLY = ("One loop.\n\n```cuda\nextern \"C\" int scale_cuda(int n, double *x) "
               "{ for (int i = 0; i < n; i++) x[i] *= 2.0; return 0; }\n```\n")

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


#: Timing kept short: the host backend flushes "L2" with a host memset per repetition.
FAST = TimingSettings(warmup_reps=1, min_reps=2, max_reps=3, min_total_ms=1.0, max_total_ms=50.0,
                      flush_bytes=1 << 16, e2e_reps=1, sync_reps=1)


def optimize_run(tmp_path: Path, capsys, monkeypatch, name: str, **kw):
    from cudaperf_cli.agent import optimize
    from cudaperf_cli.agent.kinds.c import CEvaluation
    from cudaperf_cli.agent.options import OptimizeOptions

    real_job = CEvaluation.job

    def fast_job(self, lib_path):
        job = real_job(self, lib_path)
        job.timing = FAST
        return job

    monkeypatch.setattr(CEvaluation, "job", fast_job)

    (tmp_path / "scale.c").write_text(SCALE_C)
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"text": SCALE_REPLY}) + "\n")
    opts = OptimizeOptions(file=tmp_path / "scale.c", sizes={"n": 3000}, turns=1, policy="replay",
                           replay=replies, run_root=tmp_path / f"runs-{name}", json_output=True,
                           output=tmp_path / f"{name}.cu", slow_factor=0.0, **kw)
    code = optimize.run_optimize_command(opts)
    out, err = capsys.readouterr()
    gc.collect()
    return code, json.loads(out), err


@needs_nvcc
def test_optimize_checks_the_new_best_and_rejects_a_memory_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CUDAPERF_WORKER_BACKEND", "host")
    tool = fake_tool(tmp_path / "cs")
    monkeypatch.setenv(SANITIZER_ENV, str(tool))
    code, doc, err = optimize_run(tmp_path, capsys, monkeypatch, "clean")
    best = doc["turns"][0]
    msg = best.get("message") or ""
    if host_clock_verdict(best["status"], msg):  # this test is not about those rules
        pytest.skip(f"inconclusive on a loaded host: {msg[:200]}")
    assert code == 0 and best["status"] == "correct", (best["status"], msg, err)
    assert best["sanitize"]["result"] == "clean" and best["sanitize_s"] > 0
    assert [t["tool"] for t in best["sanitize"]["tools"]] == ["memcheck", "initcheck"]
    assert doc["sanitize"] == {"enabled": True, "tool": str(tool), "note": None}
    assert doc["output"] and Path(doc["output"]).is_file()
    assert "compute-sanitizer" not in err  # no warning: the tool is here

    monkeypatch.setenv("FAKE_SANITIZER_ERROR", "memcheck")
    code, doc, err = optimize_run(tmp_path, capsys, monkeypatch, "bad")
    turn = doc["turns"][0]
    assert code == 1 and turn["status"] == "sanitizer_error", turn
    assert turn["message"].startswith("memcheck: Uninitialized __global__ memory read")
    assert [t["tool"] for t in turn["sanitize"]["tools"]] == ["memcheck"]
    assert doc["output"] is None and not (tmp_path / "bad.cu").exists()  # nothing written


@needs_nvcc
def test_optimize_without_the_tool_warns_once_and_no_sanitize_turns_it_off(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CUDAPERF_WORKER_BACKEND", "host")
    monkeypatch.setenv(SANITIZER_ENV, str(tmp_path / "no-such-tool"))
    code, doc, err = optimize_run(tmp_path, capsys, monkeypatch, "missing")
    turn = doc["turns"][0]
    assert code == 0 and turn["status"] == "correct", turn
    assert err.count("compute-sanitizer was not found") == 1, err
    assert turn["sanitize"]["result"] == "skipped" and turn["sanitize_s"] is None
    assert doc["sanitize"]["tool"] is None and "not found" in doc["sanitize"]["note"]
    assert any("compute-sanitizer was not found" in w for w in doc["warnings"])

    code, doc, err = optimize_run(tmp_path, capsys, monkeypatch, "off", sanitize=False)
    turn = doc["turns"][0]
    assert code == 0 and turn["status"] == "correct" and turn["sanitize"] == {}, turn
    assert "compute-sanitizer" not in err and doc["sanitize"]["enabled"] is False


def test_the_flag_on_the_command_line_in_the_config_file_and_in_bench():
    from cudaperf_cli.bench.runner import PolicySettings
    from tests.test_cli import cli

    assert "--no-sanitize" in cli("optimize", "--help").stdout
    assert "--no-sanitize" in cli("bench", "run", "--help").stdout
    assert PolicySettings(sanitize=False).optimize_args(None) == ["--policy", "builtin", "--turns", "3",
                                                                   "--no-sanitize"]
    assert "--sanitize" in PolicySettings(sanitize=True).optimize_args(None)
    assert "--sanitize" not in " ".join(PolicySettings().optimize_args(None))


def test_the_config_key(tmp_path):
    from tests.test_cli import cli

    (tmp_path / "cudaperf.toml").write_text("[optimize]\nsanitize = false\n")
    (tmp_path / "x.c").write_text(SCALE_C)
    proc = cli("optimize", "x.c", "--policy", "nonsense", cwd=tmp_path)
    # the key is known (an unknown key would be refused before the policy is)
    assert "unknown key" not in proc.stderr and "sanitize" in proc.stdout + proc.stderr, proc


def test_a_status_with_its_feedback_and_label():
    from cudaperf_cli import statuses
    from cudaperf_cli.agent.feedback import feedback_for
    from cudaperf_cli.agent.loop import TurnRecord
    from cudaperf_cli.agent.render import sanitize_line

    st = statuses.info("sanitizer_error")
    assert st is not None and st.label == "memory error" and st.reward_stage == "runtime" and not st.verified
    assert statuses.rank("wrong") < statuses.rank("sanitizer_error") < statuses.rank("slow")
    r = TurnRecord(2, "replay", "tiled", "sanitizer_error",
                   message="memcheck: Invalid __global__ write of size 4 bytes at k+0x10")
    text = feedback_for(r)
    assert text.startswith("Turn 3 (tiled) matched the reference, but compute-sanitizer found a memory error")
    assert "memcheck: Invalid __global__ write" in text
    ok = TurnRecord(0, "x", "y", "correct", sanitize_s=4.25,
                    sanitize={"result": "clean", "tools": [{"tool": "memcheck"}, {"tool": "initcheck"}]})
    assert sanitize_line(ok) == "compute-sanitizer memcheck + initcheck: no errors (4.2 s)"
    off = TurnRecord(0, "x", "y", "correct", sanitize={"result": "skipped", "message": "not installed"})
    assert sanitize_line(off) == "not checked by compute-sanitizer: not installed"
    assert TurnRecord.from_json(json.loads(json.dumps(dataclasses.asdict(ok)))).sanitize_s == 4.25


def test_a_tool_run_past_its_time_limit_is_not_the_candidates_fault():
    """The candidate was verified without the tool; a time-out under it (the tool hung, or
    slowed the kernel past the limit) leaves it unchecked, not rejected (an attack pass:
    a hang after the worker logged 0 errors was blamed on the candidate)."""
    from cudaperf_cli.evaluate.job import EvalResult
    from cudaperf_cli.evaluate.sanitize import judge, parse_report
    r = EvalResult(status="timeout", message="the evaluation ran past 300 s")
    verdict, msg = judge("memcheck", r, parse_report("", "memcheck"))
    assert verdict == "tool_failure" and "time limit" in msg
