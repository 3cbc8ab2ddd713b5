"""Run ``cudaperf optimize`` on every bundled C example and print one Markdown table.

    python examples/run_all.py [--turns 3] [--out DIR] [EXAMPLE.c ...]

Each example runs in its own ``cudaperf optimize --json`` process (so a crash in one does
not stop the others); the table gives, per example: the sizes, CPU -O3 ms (the reference,
one thread), GPU kernel ms (median), the kernel-only and end-to-end speedups against that
baseline, the best candidate, and the wall time of one evaluation (compile + verify + time)
of the best turn.  JSON documents and result files go to ``--out``.  This is a benchmark
that prints figures, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_one(example: Path, turns: int, out: Path, extra: list[str]) -> dict:
    cmd = [
        sys.executable, "-m", "cudaperf_cli", "optimize", str(example), "--turns", str(turns),
        "--json", "--force", "-o", str(out / f"{example.stem}.cu"),
        "--run-dir", str(out / "runs"), *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (out / f"{example.stem}.stderr.txt").write_text(proc.stderr)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        doc = {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    doc["exit_code"] = proc.returncode
    doc["command_wall_s"] = wall
    (out / f"{example.stem}.json").write_text(json.dumps(doc, indent=2))
    return doc


def fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("examples", nargs="*", type=Path)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("example-results"))
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="after --: passed to optimize")
    args = ap.parse_args()
    examples = args.examples or sorted(HERE.glob("*.c"))
    args.out.mkdir(parents=True, exist_ok=True)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra

    rows = []
    for ex in examples:
        print(f"running {ex.name} ...", file=sys.stderr, flush=True)
        doc = run_one(ex, args.turns, args.out, extra)
        best = doc.get("best") or {}
        sizes = ", ".join(f"{k}={v}" for k, v in (doc.get("sizes") or {}).items())
        eval_s = None
        if best:
            eval_s = (best.get("compile_s") or 0) + (best.get("eval_s") or 0)
        status = "verified" if doc.get("exit_code") == 0 else f"exit {doc.get('exit_code')}"
        if doc.get("error"):
            status += f": {doc['error']}"
        rows.append(
            f"| {ex.name} | {sizes} | {status} | {fmt(best.get('cpu_ms'))} | "
            f"{fmt(best.get('gpu_ms'))} | {fmt(best.get('speedup_kernel'))} | "
            f"{fmt(best.get('speedup_e2e'))} | {best.get('description', '-').replace('|', '/')} | "
            f"{fmt(eval_s)} | {fmt(doc.get('command_wall_s'))} |"
        )
    print(
        "| example | sizes | status | CPU -O3 ms | GPU ms | speedup kernel | speedup e2e "
        "| best candidate | one evaluation s | whole run s |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
