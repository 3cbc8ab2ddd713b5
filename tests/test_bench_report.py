"""The bench report of issue 21 without a GPU: problem-level verdicts (does not fit, refused
at load, degenerate), the verdict table, peak GPU memory against footprint, seconds per
candidate evaluation with the lock wait apart, the progress tallies, ``slow`` candidates,
``bench compare``'s flags and number format, and the optimize command line (extra C
sources, flags from the cli layer).  A fake optimize (``CUDAPERF_BENCH_OPTIMIZE``) writes
canned run folders; the figures are computed by hand here.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cudaperf_cli.bench import metrics as M
from cudaperf_cli.bench import report as R
from cudaperf_cli.bench.runner import BenchOptions, SuiteRun, problem_verdict
from cudaperf_cli.bench.suite import BenchProblem, Suite

ROOT = Path(__file__).resolve().parents[1]
C_SCALE = "void scale(int n, double a, double x[n]) { for (int i = 0; i < n; i++) x[i] *= a; }\n"
GB = 10**9

FAKE = r'''
"""A stand-in for `cudaperf optimize FILE ... --json --run-dir R --output O`."""
import json, sys
from pathlib import Path

args = sys.argv[1:]
file = Path(args[0])
run_root = Path(args[args.index("--run-dir") + 1])
output = Path(args[args.index("--output") + 1])
stem = file.stem
run_dir = run_root / f"{stem}-f-1"
run_dir.mkdir(parents=True, exist_ok=True)
GB = 10**9

def rec(turn, status, sample=0, gpu_ms=None, k=None, eval_s=None, wait=None, peak=None, foot=None, **kw):
    r = {"turn": turn, "sample": sample, "policy": "fake", "description": f"t{turn}s{sample}",
         "status": status, "message": kw.pop("message", ""), "source": f"// {stem} {turn} {sample}\n",
         "gpu_ms": gpu_ms, "gpu_ms_iqr": None if gpu_ms is None else 0.01, "cpu_ms": 10.0,
         "speedup_kernel": k, "baseline": "gcc -O3, 1 thread", "structure_score": 0.5,
         "compile_s": 1.0, "eval_s": eval_s, "lock_wait_s": wait, "prepare_s": None,
         "peak_gpu_bytes": peak, "footprint_bytes": foot, "tolerances": {"float32": {"atol": 1e-4, "rtol": 1e-4}}}
    r.update(kw)
    return r

doc = {"file": str(file), "function": "f", "sizes": {"n": 8}, "arch": "sm_90",
       "baseline": "gcc -O3, 1 thread", "cpu_baseline": {"cpu_ms": {"main": 10.0}, "cpu_iqr_ms": {"main": 0.5}},
       "run_dir": str(run_dir), "stop_reason": "ran all", "problem_status": None, "degenerate": False,
       "warnings": [], "tolerances": {"float32": {"atol": 1e-4, "rtol": 1e-4}}}
code = 0
if stem == "big":  # the problem's planned memory does not fit: exit 5, a result naming it
    line = "big.c needs 150.0 GB of GPU memory (footprint 50.0 GB); 140.0 GB free"
    print(f"error: {line}", file=sys.stderr)
    doc.update(problem_status="does_not_fit", message=line, footprint_bytes=50 * GB,
               memory={"footprint_bytes": 50 * GB, "gpu_bytes": 150 * GB, "host_bytes": GB, "flush_bytes": 0},
               turns=[], exit_code=5)
    print(json.dumps(doc))
    sys.exit(5)
if stem == "big2":  # the same, no JSON at all: exit 5 and the line
    print("error: big2.c needs 9 GB, 1 GB free", file=sys.stderr)
    sys.exit(5)
if stem == "typedef":
    print("error: typedef.c: unsupported element type 'base'", file=sys.stderr)
    sys.exit(2)
if stem == "nogpu":  # compiled, not verified: exit 4
    records = [rec(0, "no_device")]
    code = 4
elif stem == "slowonly":  # verified, but only slow candidates
    records = [rec(0, "slow", gpu_ms=800.0, k=0.0125, eval_s=3.0, wait=1.0, peak=2 * GB, foot=GB,
                   slow_ref="baseline", slow_ref_ms=10.0, slow_factor=10.0)]
elif stem == "degen":  # outputs independent of the inputs: evaluated, flagged
    doc["degenerate"] = True
    doc["reference_peak_gpu_bytes"] = int(2.5 * GB)  # the baseline job: the reference alone
    doc["warnings"] = ["degenerate: the outputs do not depend on the inputs"]
    records = [rec(0, "correct", gpu_ms=1.0, k=2.0, eval_s=2.0, wait=0.0, peak=3 * GB, foot=GB),
               rec(1, "slow", gpu_ms=50.0, k=0.04, eval_s=4.0, wait=2.0, peak=GB, foot=GB)]
elif stem == "huge":
    records = [rec(0, "correct", gpu_ms=0.01, k=1450.0, eval_s=10.0, wait=6.0, peak=GB // 2, foot=GB,
                   phase_s={"startup": 1.0, "timing": 3.0})]
elif stem == "guard":
    records = [rec(0, "compile_error"), rec(1, "guard_rejected", message="a decoy kernel")]
else:
    records = [rec(0, "correct", gpu_ms=2.0, k=5.0, eval_s=1.0, wait=0.5, peak=GB, foot=GB,
                   phase_s={"startup": 2.0})]
doc["footprint_bytes"] = GB
doc["memory"] = {"footprint_bytes": GB, "gpu_bytes": 3 * GB, "host_bytes": GB, "flush_bytes": GB // 2}
with open(run_dir / "turns.jsonl", "w") as fh:
    for r in records:
        fh.write(json.dumps(r) + "\n")
if any(r["status"] in ("correct", "slow") for r in records):
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("// kernel\n")
brief = [{k: v for k, v in r.items() if k != "source"} for r in records]
doc.update(turns=brief, output=str(output), exit_code=code)
print(json.dumps(doc))
sys.exit(code)
'''


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "fake_optimize.py"
    script.write_text(FAKE)
    return {"CUDAPERF_BENCH_OPTIMIZE": f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
            "CUDAPERF_GPU_LOCK_DIR": str(tmp_path / "locks")}


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudaperf_cli", "bench", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "COLUMNS": "250", **(env or {})})


def make_suite(root: Path, names: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for n in names:
        (root / n).write_text(C_SCALE)
    return root


# ---------------------------------------------------------------------------------------
# the report of a suite with every kind of verdict
# ---------------------------------------------------------------------------------------


def test_report_verdicts_memory_and_seconds(tmp_path: Path, fake: dict[str, str]) -> None:
    names = ["big.c", "big2.c", "degen.c", "guard.c", "huge.c", "nogpu.c", "ok.c", "slowonly.c",
             "typedef.c"]
    suite = make_suite(tmp_path / "s", names)
    out = tmp_path / "out"
    proc = bench(str(suite), "-o", str(out), "-j", "2", "--turns", "2", env=fake)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["schema_version"] == 2
    p = {x["id"]: x for x in report["problems"]}

    # problem-level verdicts, each with its one line
    assert p["big.c"]["status"] == "does_not_fit" and not p["big.c"]["correct"]
    assert p["big.c"]["message"] == "big.c needs 150.0 GB of GPU memory (footprint 50.0 GB); 140.0 GB free"
    assert p["big.c"]["exit_code"] == 5 and p["big.c"]["footprint_bytes"] == 50 * GB
    assert p["big2.c"]["status"] == "does_not_fit" and p["big2.c"]["message"] == "big2.c needs 9 GB, 1 GB free"
    assert p["typedef.c"]["status"] == "refused_at_load"
    assert p["typedef.c"]["message"] == "typedef.c: unsupported element type 'base'"
    # a guard-rejected candidate got further than a compile error (one status table)
    assert p["guard.c"]["status"] == "guard_rejected" and p["guard.c"]["compiled"]
    # slow counts as verified; degenerate is evaluated and flagged
    assert p["slowonly.c"]["status"] == "slow" and p["slowonly.c"]["correct"]
    assert p["slowonly.c"]["speedups"] == {"kernel": 0.0125}
    assert p["degen.c"]["status"] == "correct" and p["degen.c"]["degenerate"]
    assert p["degen.c"]["warnings"] == ["degenerate: the outputs do not depend on the inputs"]
    assert p["nogpu.c"]["status"] == "no_device"
    assert p["ok.c"]["tolerances"] == {"float32": {"atol": 1e-4, "rtol": 1e-4}}

    m = report["metrics"]
    assert m["correct"] == 4 and m["correct_rate"] == pytest.approx(4 / 9)  # degen, huge, ok, slowonly
    assert m["speedup"]["kernel"]["fast_p"]["0"] == pytest.approx(4 / 9)  # fast_0: slow included
    assert m["speedup"]["kernel"]["fast_p"]["1"] == pytest.approx(3 / 9)
    assert m["outcomes"] == {"correct": 4, "no_device": 1, "does_not_fit": 2, "missing_tool": 0, "failed": 2}
    v = m["verdicts"]
    assert v["counts"] == {"correct": 3, "slow": 1, "does_not_fit": 2, "no_device": 1,
                           "guard_rejected": 1, "refused_at_load": 1}
    assert v["order"] == ["correct", "slow", "does_not_fit", "no_device", "guard_rejected", "refused_at_load"]
    assert v["labels"]["refused_at_load"] == "refused at load"
    assert [r["problem"] for r in v["reasons"]["does_not_fit"]] == ["big2.c", "big.c"]  # suite order
    assert v["reasons"]["refused_at_load"] == [
        {"problem": "typedef.c", "message": "typedef.c: unsupported element type 'base'"}]
    assert m["degenerate"] == 1 and v["degenerate_problems"] == ["degen.c"]

    # peak GPU memory against footprint: per problem its worst evaluation, worst first
    mem = m["memory"]
    assert mem["evaluations"] == 5 and mem["problems"] == 4
    assert [(w["problem"], w["ratio"]) for w in mem["worst"]] == [
        ("degen.c", 3.0), ("slowonly.c", 2.0), ("ok.c", 1.0), ("huge.c", 0.5)]
    top = mem["worst"][0]
    assert (top["turn"], top["sample"], top["peak_gpu_bytes"], top["footprint_bytes"]) == (1, 1, 3 * GB, GB)
    # bound: max(3 x footprint + flush, the reference alone + 2 x footprint) = max(3.5, 4.5) GB
    assert top["reference_peak_gpu_bytes"] == int(2.5 * GB) and top["over_reference_bytes"] == GB // 2
    assert top["bound_bytes"] == int(4.5 * GB) and top["within_bound"] is True
    second = mem["worst"][1]  # no baseline peak: 3 x footprint + flush
    assert second["reference_peak_gpu_bytes"] is None and second["bound_bytes"] == int(3 * GB + GB // 2)

    # seconds per candidate evaluation: eval_s [1, 2, 4, 10, 3] (ok, degen x2, huge, slowonly)
    # and lock waits [0.5, 0, 2, 6, 1]; eval - wait = [0.5, 2, 2, 4, 2]
    e = m["eval_seconds"]
    assert list(e) == ["c", "all"]
    c = e["c"]
    assert c["eval_s"]["n"] == 5 and c["eval_s"]["median"] == 3.0
    assert c["eval_s"]["p90"] == pytest.approx(4 + 0.6 * (10 - 4))  # position 3.6 of [1,2,3,4,10]
    assert c["excl_lock_s"]["median"] == 2.0 and c["excl_lock_s"]["p90"] == pytest.approx(2 + 0.6 * 2)
    assert c["lock_wait_s"]["median"] == 1.0 and c["lock_wait_s"]["p90"] == pytest.approx(2 + 0.6 * 4)
    # the worker's seconds per phase (huge and ok report them), the largest median first
    assert list(c["phases"]) == ["timing", "startup"]
    assert c["phases"]["startup"]["n"] == 2 and c["phases"]["startup"]["median"] == 1.5

    # report.md: the tables and the reasons
    md = (out / "report.md").read_text()
    assert "## Verdicts" in md and "| refused at load (`refused_at_load`) | 1 |" in md
    assert "| does not fit (`does_not_fit`) | 2 |" in md
    assert "- typedef.c: typedef.c: unsupported element type 'base'" in md
    assert "Degenerate problems" in md and "(degen.c)" in md
    assert "Median seconds by phase of the worker, C: timing 3, startup 1.5." in md
    assert "| typedef.c | refused_at_load: typedef.c: unsupported element type 'base' |" in md
    assert "| big.c | does_not_fit: big.c needs 150.0 GB" in md
    assert "| degen.c | correct (degenerate) |" in md
    assert "| degen.c | turn 1.1 | 3 | 1 | 3 | 2.5 | 0.5 | 4.5 | yes |" in md
    assert "| slowonly.c | turn 1.1 | 2 | 1 | 2 | - | - | 3.5 | yes |" in md
    assert "| C | 5 | 3 | 7.6 | 2 | 3.2 | 1 | 4.4 |" in md
    assert "1450x (!)" in md and "e+03" not in md
    assert "## Warnings" in md and "- degen.c: degenerate: the outputs" in md

    # the terminal: tallies without counting no GPU or does-not-fit as failed, summary lines
    assert "done 9 · correct 4 · failed 2 · not verified (no GPU) 1 · does not fit 2" in proc.stderr
    assert "verdicts: correct 3, slow 1, does not fit 2, compiled (no GPU) 1, guard rejected 1, " \
           "refused at load 1; degenerate 1" in proc.stdout
    assert "seconds per candidate evaluation (C, 5): median 3, p90 7.6; excl. lock wait median 2, " \
           "p90 3.2; lock wait median 1, p90 4.4" in proc.stdout
    mem_line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("peak GPU memory"))
    assert mem_line.startswith("peak GPU memory / footprint: worst 3x (degen.c: 3 GB peak, 1 GB "
                               "footprint, 0.5 GB L2 flush) over "), mem_line
    assert mem_line.endswith(" over 5 evaluation(s); within the bound for 4 of 4 problem(s)"), mem_line
    assert "refused at load: typedef.c: typedef.c: unsupported element type 'base'" in proc.stdout

    # candidates.jsonl: the new per-candidate fields; correct means verified
    rows = [json.loads(ln) for ln in (out / "candidates.jsonl").read_text().splitlines()]
    slow = next(r for r in rows if r["problem"] == "slowonly.c")
    assert slow["correct"] and slow["is_best"] and slow["status"] == "slow"
    assert (slow["slow_ref"], slow["slow_ref_ms"], slow["slow_factor"]) == ("baseline", 10.0, 10.0)
    assert (slow["eval_s"], slow["lock_wait_s"], slow["peak_gpu_bytes"], slow["footprint_bytes"]) == (
        3.0, 1.0, 2 * GB, GB)
    assert all(r["degenerate"] == (r["problem"] == "degen.c") for r in rows)


def test_no_device_is_not_failed_and_compare_flags_every_speedup(tmp_path: Path, fake: dict[str, str]) -> None:
    suite = make_suite(tmp_path / "s", ["nogpu.c"])
    proc = bench(str(suite), "-o", str(tmp_path / "n"), env=fake)
    assert proc.returncode == 0, proc.stderr
    assert "done 1 · correct 0 · failed 0 · not verified (no GPU) 1" in proc.stderr

    suite = make_suite(tmp_path / "h", ["huge.c", "ok.c"])
    assert bench(str(suite), "-o", str(tmp_path / "a"), env=fake).returncode == 0
    a = json.loads((tmp_path / "a" / "report.json").read_text())
    b = json.loads(json.dumps(a))
    for p in b["problems"]:
        p["speedups"] = {k: 2 * x for k, x in p["speedups"].items()}
    bpath = tmp_path / "b.json"
    bpath.write_text(json.dumps(b))
    table = bench("compare", str(tmp_path / "a"), str(bpath))
    assert table.returncode == 0, table.stderr
    assert "1450x (!)" in table.stdout and "2900x (!)" in table.stdout
    ok_row = next(ln for ln in table.stdout.splitlines() if "ok.c" in ln)
    assert "5x" in ok_row and "10x" in ok_row and "(!)" not in ok_row  # 10x is not above 10
    assert "e+03" not in table.stdout
    old = json.loads(json.dumps(a))
    old["schema_version"] = 1  # a report of the previous schema still compares
    opath = tmp_path / "old.json"
    opath.write_text(json.dumps(old))
    assert bench("compare", str(opath), str(bpath), "--json").returncode == 0


def test_fmt_x_never_prints_an_exponent_above_one() -> None:
    assert R.fmt_x(1450.0) == "1450x (!)"
    assert R.fmt_x(123.4, flag=False) == "123x"
    assert R.fmt_x(12.34) == "12.3x (!)"
    assert R.fmt_x(10.0) == "10x"  # not above 10
    assert R.fmt_x(0.5123) == "0.512x"
    assert R.fmt_x(0.0001234) == "1.2e-04x"
    assert R.fmt_x(None) == "-" and R.fmt_x(float("nan")) == "-" and R.fmt_x(True) == "-"


# ---------------------------------------------------------------------------------------
# pure pieces
# ---------------------------------------------------------------------------------------


def test_problem_verdict_rules() -> None:
    err = "error: x.c needs 9 GB, 1 GB free\n"
    assert problem_verdict(None, None, True, "", 30) == ("problem_timeout", "killed after 30 s (this problem's time limit)")
    assert problem_verdict({"turns": [], "problem_status": "does_not_fit", "message": "m"}, 5, False, err, 1) == (
        "does_not_fit", "m")
    assert problem_verdict({"turns": [], "problem_status": "does_not_fit"}, 5, False, err, 1) == (
        "does_not_fit", "x.c needs 9 GB, 1 GB free")
    assert problem_verdict(None, 5, False, err, 1) == ("does_not_fit", "x.c needs 9 GB, 1 GB free")
    assert problem_verdict(None, 2, False, "error: bad\nhint: h\n", 1) == ("refused_at_load", "bad (hint: h)")
    assert problem_verdict(None, -9, False, "", 1) == ("error", "optimize was killed by SIGKILL without a result")
    # exit 3 without a result: a package or tool missing here (torch), not a failure of the policy
    assert problem_verdict(None, 3, False, "error: needs torch\nhint: pip install torch\n", 1) == (
        "missing_tool", "needs torch (hint: pip install torch)")
    assert problem_verdict({"turns": [], "problem_status": None}, 1, False, "", 1) == (None, "")
    # an unknown problem_status is not trusted: the candidates decide
    assert problem_verdict({"turns": [], "problem_status": "weird"}, 0, False, "", 1) == (None, "")


def test_quantile_is_linear_between_order_statistics() -> None:
    import statistics

    vals = [3.0, 1.0, 10.0, 4.0, 2.0]
    assert M.quantile(vals, 0.5) == 3.0
    assert M.quantile(vals, 0.9) == pytest.approx(statistics.quantiles(vals, n=10, method="inclusive")[8])
    assert M.quantile([7.0], 0.9) == 7.0 and M.quantile([], 0.5) is None
    assert M.quantile([1.0, float("nan"), 3.0], 0.5) == 2.0
    with pytest.raises(ValueError):
        M.quantile(vals, 1.5)


def test_eval_seconds_per_kind_and_without_lock_wait() -> None:
    rows = [
        {"kind": "torch", "eval_s": 12.0, "lock_wait_s": 2.0, "prepare_s": 5.0},
        {"kind": "torch", "eval_s": 20.0, "lock_wait_s": 10.0},
        {"kind": "c", "eval_s": 1.0},  # no lock wait reported: its whole eval_s counts
        {"kind": "c", "eval_s": None, "lock_wait_s": 3.0},  # never evaluated: left out
        # no GPU: the torch worker imported torch and found no device; nothing was evaluated
        {"kind": "torch", "status": "no_device", "eval_s": 5.4},
    ]
    e = M.eval_seconds(rows)
    assert list(e) == ["c", "torch", "all"]
    assert e["c"]["eval_s"]["n"] == 1 and e["c"]["excl_lock_s"]["median"] == 1.0
    assert e["c"]["lock_wait_s"]["n"] == 0 and e["c"]["lock_wait_s"]["median"] is None
    t = e["torch"]
    assert t["eval_s"]["median"] == 16.0 and t["excl_lock_s"]["median"] == 10.0
    assert t["lock_wait_s"]["p90"] == pytest.approx(2 + 0.9 * 8)
    assert t["prepare_s"] == {"n": 1, "median": 5.0, "p90": 5.0, "max": 5.0}
    assert e["all"]["eval_s"]["n"] == 3


def test_memory_ratios_use_the_problem_footprint_when_a_row_has_none() -> None:
    probs = [
        {"id": f"p{i}", "kind": "torch", "footprint_bytes": 100, "memory": None,
         "candidates": [{"turn": 0, "sample": 0, "peak_gpu_bytes": 100 * (i + 1)}]}
        for i in range(7)
    ]
    probs.append({"id": "none", "candidates": [{"peak_gpu_bytes": None}]})
    mem = M.memory_ratios(probs)
    assert mem["evaluations"] == 7 and mem["problems"] == 7 and mem["max_ratio"] == 7.0
    assert [w["problem"] for w in mem["worst"]] == ["p6", "p5", "p4", "p3", "p2"]  # five
    assert mem["worst"][0]["bound_bytes"] is None and mem["worst"][0]["within_bound"] is None
    assert mem["with_bound"] == 0 and mem["over_bound"] == []
    for i, pr in enumerate(probs[:7]):  # a 50-byte flush: the bound is 3 x 100 + 50 = 350
        pr["memory"] = {"flush_bytes": 50}
    mem = M.memory_ratios(probs)
    assert mem["with_bound"] == 7 and mem["over_bound"] == ["p6", "p5", "p4", "p3"]
    # a C evaluation's plan counts its guard zones: its own plan bounds it when larger
    probs[6]["memory"] = {"flush_bytes": 50, "gpu_bytes": 700}
    probs[5]["memory"] = {"flush_bytes": 50, "gpu_bytes": 500}
    mem = M.memory_ratios(probs)
    assert mem["over_bound"] == ["p5", "p4", "p3"]
    assert mem["worst"][0]["bound_bytes"] == 700 and mem["worst"][0]["within_bound"]


def test_slow_is_verified_but_never_beats_a_faster_correct_candidate() -> None:
    records = [
        {"turn": 0, "status": "slow", "gpu_ms": 40.0, "speedup_kernel": 0.05},
        {"turn": 1, "status": "correct", "gpu_ms": 2.0, "speedup_kernel": 1.0},
        {"turn": 2, "status": "slow", "gpu_ms": 25.0, "speedup_kernel": 0.08},
    ]
    assert M.best_correct(records) == 1
    assert M.best_correct([records[0], records[2]]) == 1  # among slow ones: the faster estimate
    s = M.problem_summary(records)
    assert s["status"] == "correct" and s["correct"] and s["best"]["turn"] == 2
    assert M.correct_by_turn(records, 3) == [True, True, True]  # turn 1's slow one is verified
    assert M.best_so_far(records, "kernel", 3) == [0.05, 1.0, 1.0]
    only_slow = M.problem_summary([records[0]])
    assert only_slow["status"] == "slow" and only_slow["correct"]
    assert M.outcome_class("slow") == "correct" and M.outcome_class("no_device") == "no_device"
    assert M.outcome_class("does_not_fit") == "does_not_fit" and M.outcome_class("error") == "failed"


# ---------------------------------------------------------------------------------------
# the optimize command line
# ---------------------------------------------------------------------------------------


def test_command_puts_sources_after_the_file_once_and_uses_known_flags(tmp_path: Path) -> None:
    f = tmp_path / "gemm.c"
    f.write_text(C_SCALE)
    src = str(tmp_path / "utilities" / "polybench.c")
    problem = BenchProblem(id="gemm.c", path=f, kind="c", function="kernel_gemm", sources=(src,))
    suite = Suite(name="s", root=tmp_path, source=tmp_path, problems=[problem], skipped=[])
    run = SuiteRun(suite, BenchOptions(), tmp_path / "out", {})
    cmd = run.command(problem, frozenset({"--yes", "--policy"}))
    i = cmd.index(str(f))
    assert cmd[i + 1] == src and cmd.count(src) == 1
    assert cmd[i + 2:i + 4] == ["--function", "kernel_gemm"]
    assert cmd[-1] == "--yes"
    assert "--yes" not in run.command(problem, frozenset({"--policy"}))

    class Legacy:  # a problem whose optimize_args() does not lead with its sources
        id, path, kind, safe_name, sources = "gemm.c", f, "c", "gemm.c", (src,)

        def optimize_args(self) -> list[str]:
            return ["--function", "kernel_gemm"]

    cmd = run.command(Legacy(), None)  # type: ignore[arg-type]
    assert cmd[cmd.index(str(f)) + 1] == src and cmd.count(src) == 1


def test_cli_layer_reads_optimize_flags() -> None:
    from cudaperf_cli.cli.bench import optimize_flags

    flags = optimize_flags()
    for flag in ("--policy", "--atol", "--rtol", "--slow-factor", "--yes", "--no-compile-baseline"):
        assert flag in flags


def test_policy_refusals_are_listed_by_reason() -> None:
    from cudaperf_cli.bench import metrics as M
    from cudaperf_cli.bench.report import status_cell, verdict_section

    conv = "nothing to fuse: conv2d is left to cuDNN"
    probs = [{"id": f"{i}_conv.py", "kind": "torch", "status": "refused", "message": conv} for i in range(5)]
    probs += [{"id": "51_Argmax.py", "kind": "torch", "status": "refused",
               "message": "cannot port torch.argmax (node 'argmax')"},
              {"id": "19_ReLU.py", "kind": "torch", "status": "correct", "message": ""}]
    v = M.verdicts(probs)
    assert v["grouped"]["refused"] == [
        {"message": conv, "count": 5, "problems": [f"{i}_conv.py" for i in range(5)]},
        {"message": "cannot port torch.argmax (node 'argmax')", "count": 1, "problems": ["51_Argmax.py"]}]
    md = "\n".join(verdict_section({"verdicts": v}))
    assert "refused (policy), by reason:" in md
    assert f"- 5 x {conv} (0_conv.py, 1_conv.py, 2_conv.py and 2 more)" in md
    assert "- 1 x cannot port torch.argmax (node 'argmax') (51_Argmax.py)" in md
    assert status_cell(probs[0]) == f"refused: {conv}"


def test_structure_scores_print_two_decimals() -> None:
    from cudaperf_cli.bench.report import fmt_score

    assert [fmt_score(v) for v in (1.0, 0.95, 0.9, None, float("nan"))] == ["1.00", "0.95", "0.90", "-", "-"]


def test_problems_not_run_for_a_missing_tool_leave_the_rates_alone() -> None:
    """14 PyTorch files on a machine without torch counted as 14 compile failures
    ('compile rate 33%'); they are 'missing_tool' now, listed, and outside the rates."""
    from cudaperf_cli.bench.metrics import outcome_class, suite_metrics

    problems = ([{"id": f"c{i}", "status": "no_device", "compiled": True} for i in range(7)]
                + [{"id": f"t{i}", "status": "missing_tool", "message": "needs torch"} for i in range(14)])
    m = suite_metrics(problems)
    assert (m["problems"], m["ran"], m["compile_rate"]) == (21, 7, 1.0)
    assert m["outcomes"]["missing_tool"] == 14 and m["outcomes"]["failed"] == 0
    assert outcome_class("missing_tool") == "missing_tool"
