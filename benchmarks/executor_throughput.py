"""Candidates per minute through ``cudaperf bench`` with ``--executor local`` and ``--executor
ray`` at several worker counts, on one machine (issue 17, item 4).

For each worker count W: ``bench SUITE -j W`` (local), and ``bench SUITE -j W --executor ray
--per-gpu W`` against a Ray head this script starts on 127.0.0.1 with W CPUs (so at most W
problems run at once under both).  Each run is the whole command, Ray's connection included;
the head's own start is timed apart.  Every run starts from an empty build cache of its own
(``XDG_CACHE_HOME`` in the run's folder, set before the Ray head starts so its workers have
it too): a warm cache would turn the later runs' compiles into cache hits.  On a machine without a GPU the runs are compile-only
(candidates end ``no_device`` after their compile); with one they are whole evaluations.

    python benchmarks/executor_throughput.py examples/ --workers 1,2,4 --turns 1 --out /tmp/xt

Prints one row per run (problems, candidates, wall seconds, candidates per minute) and the
ray/local ratio per W, and says whether both executors gave every problem the same status.
Writes ``OUT/throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_bench(suite: Path, out: Path, workers: int, turns: int, extra: list[str]) -> dict[str, Any]:
    """One ``cudaperf bench`` run: its wall seconds, candidates and statuses."""
    cmd = [sys.executable, "-m", "cudaperf_cli", "bench", str(suite), "-o", str(out), "-j",
           str(workers), "--turns", str(turns), "--json", *extra]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}: "
                         f"{proc.stderr.strip().splitlines()[-1:]}")
    report = json.loads(proc.stdout)
    candidates = sum(1 for _ in (out / "candidates.jsonl").open())
    return {"wall_s": wall, "report_wall_s": report["wall_s"], "problems": len(report["problems"]),
            "candidates": candidates, "per_minute": candidates / wall * 60.0,
            "statuses": {p["id"]: p["status"] for p in report["problems"]},
            "executor": report.get("executor")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", type=Path)
    ap.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    ap.add_argument("--turns", type=int, default=1)
    ap.add_argument("--executors", default="local,ray")
    ap.add_argument("--out", type=Path, required=True, help="a new folder for the runs")
    ap.add_argument("--bench-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for every bench run (repeatable), e.g. "
                    "--bench-arg=--no-compile-baseline")
    args = ap.parse_args(argv)
    from cudaperf_cli.ray_cluster import local_head

    args.out.mkdir(parents=True, exist_ok=False)
    rows: list[dict[str, Any]] = []
    for w in (int(x) for x in args.workers.split(",")):
        for ex in args.executors.split(","):
            out = args.out / f"{ex}-{w}"
            os.environ["XDG_CACHE_HOME"] = str(args.out / f"cache-{ex}-{w}")  # cold, its own
            if ex == "local":
                row = run_bench(args.suite, out, w, args.turns, list(args.bench_arg))
            else:
                t0 = time.monotonic()
                with local_head(w) as address:
                    head_s = time.monotonic() - t0
                    row = run_bench(args.suite, out, w, args.turns,
                                    [*args.bench_arg, "--executor", "ray", "--ray-address", address,
                                     "--per-gpu", str(w)])
                row["head_start_s"] = head_s
            row.update(executor=ex, workers=w)
            rows.append(row)
            print(f"{ex:5s} W={w}: {row['problems']} problems, {row['candidates']} candidates, "
                  f"{row['wall_s']:.1f} s -> {row['per_minute']:.1f} candidates/min"
                  + (f" (head start {row['head_start_s']:.1f} s, not counted)" if ex == "ray" else ""),
                  flush=True)
    by = {(r["executor"], r["workers"]): r for r in rows}
    for w in sorted({r["workers"] for r in rows}):
        loc, ray = by.get(("local", w)), by.get(("ray", w))
        if loc and ray:
            same = loc["statuses"] == ray["statuses"]
            print(f"W={w}: ray/local candidates per minute {ray['per_minute'] / loc['per_minute']:.2f}; "
                  f"same statuses: {same}")
    (args.out / "throughput.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
