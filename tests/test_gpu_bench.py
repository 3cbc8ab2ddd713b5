"""``cudaperf bench`` on a GPU: two bundled examples, the built-in policy, two turns.

Checks that both problems are verified, that the suite metrics agree with the problems and
with candidates.jsonl (fast_p, geomean, best candidate), that the machine was read, and
that the evaluations took the per-GPU lock.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.gpu


def test_bench_two_examples_on_the_gpu(tmp_path: Path) -> None:
    manifest = tmp_path / "suite.toml"
    manifest.write_text(
        '[suite]\nname = "two"\nfiles = ["%s", "%s"]\n'
        % (EXAMPLES / "matvec_row.c", EXAMPLES / "reduction.c")
    )
    out = tmp_path / "out"
    locks = tmp_path / "locks"
    proc = subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", "bench", str(manifest), "--turns", "2", "-j", "2",
         "-o", str(out), "--json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=1200,
        env={**os.environ, "CUDAPERF_GPU_LOCK_DIR": str(locks)},
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    probs = {p["id"]: p for p in report["problems"]}
    assert set(probs) == {"matvec_row.c", "reduction.c"}
    for p in probs.values():
        assert p["status"] == "correct" and p["correct"], (p["id"], p["message"])
        assert p["speedups"]["kernel"] > 0 and p["speedups"]["e2e"] > 0
        assert p["best"]["gpu_ms"] > 0 and p["eval_s"] > 0
        assert p["exit_code"] == 0 and Path(p["kernel"]).is_file()

    # suite metrics agree with the problems
    m = report["metrics"]
    assert m["correct"] == 2 and m["correct_rate"] == 1.0 and m["compile_rate"] == 1.0
    speeds = [p["speedups"]["kernel"] for p in probs.values()]
    k = m["speedup"]["kernel"]
    assert k["geomean"] == pytest.approx(math.exp(sum(map(math.log, speeds)) / 2))
    for p_str, value in k["fast_p"].items():
        assert value == sum(1 for s in speeds if s > float(p_str)) / 2
    fp = [k["fast_p"][p] for p in ("0", "1", "1.5", "2")]
    assert fp[0] == m["correct_rate"] and fp == sorted(fp, reverse=True)
    assert report["curves"]["correct_rate"][-1] == 1.0
    assert report["curves"]["geomean_best"][-1] == pytest.approx(k["geomean"])

    # candidates.jsonl: the best row of each problem is its fastest correct candidate
    rows = [json.loads(ln) for ln in (out / "candidates.jsonl").read_text().splitlines()]
    for pid, p in probs.items():
        mine = [r for r in rows if r["problem"] == pid]
        assert len(mine) == p["candidate_count"]
        correct = [r for r in mine if r["correct"]]
        fastest = min(correct, key=lambda r: r["gpu_ms"])
        assert [r for r in mine if r["is_best"]] == [fastest]
        assert fastest["speedups"]["kernel"] == pytest.approx(p["speedups"]["kernel"])
        assert fastest["gpu_ms_iqr"] is not None and fastest["cpu_ms"] > 0

    # the machine, and the lock the evaluations took
    env = report["env"]
    assert env["gpu"]["available"] and env["gpu"]["name"] and env["gpu"]["driver_version"]
    assert env["nvcc"] and "release" in env["nvcc"]
    assert list(locks.glob("gpu-*.lock")), "no evaluation took the GPU lock"
