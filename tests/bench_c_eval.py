"""Benchmark (prints figures, asserts nothing): seconds of one C candidate evaluation on the
GPU, split into preparation, GPU-lock wait and device work, at PolyBench-LARGE-like sizes.

    python tests/bench_c_eval.py [--reps 3] [--json FILE]

The problems are this project's own test references (tests/eval_refs.py) and hand-written
candidates (tests/test_gpu_evaluate.py), at sizes like PolyBench/C LARGE's: a double
matmul 1000 x 1100 x 1200 (gemm's), a 1-D Jacobi stencil of 500 steps on 2 Mi doubles,
saxpy on 64 Mi floats, and a 200 ms kernel with a 50 ms slow limit.  For each, as
``cudaperf optimize`` runs it: the reference-only baseline job (roles, reference outputs
stored in a folder, CPU baseline: ``cpu_reps`` 7, ``cpu_budget_s`` 20), then ``--reps``
candidate jobs one after the other (configurations ``small-odd`` x2 and ``main`` x1,
timed), then two candidate jobs at once on one GPU lock (as ``bench -j 2`` would).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cudaperf_cli.build import build_candidate, detect_arch  # noqa: E402
from cudaperf_cli.core import param_to_json  # noqa: E402
from cudaperf_cli.evaluate import ConfigSpec, EvalJob, EvalResult, run_evaluation  # noqa: E402
from tests.eval_refs import REF_C, SAXPY_PARAMS  # noqa: E402
from tests.test_gpu_evaluate import (  # noqa: E402
    JACOBI_CU, JACOBI_PARAMS, MM_CU, MM_PARAMS, NAP_CU, SAXPY_CU,
)

PROBLEMS: list[dict[str, Any]] = [
    {"name": "mm 1000x1100x1200 f64", "fn": "mm", "params": MM_PARAMS, "cu": MM_CU, "defines": (),
     "small": {"n": 37, "m": 29, "k": 13}, "main": {"n": 1000, "m": 1100, "k": 1200}},
    {"name": "jacobi-1d 500 x 2Mi f64", "fn": "jacobi", "params": JACOBI_PARAMS, "cu": JACOBI_CU,
     "defines": (), "small": {"tsteps": 3, "n": 101}, "main": {"tsteps": 500, "n": 1 << 21}},
    {"name": "saxpy 64Mi f32", "fn": "saxpy", "params": SAXPY_PARAMS, "cu": SAXPY_CU, "defines": (),
     "small": {"n": 1001}, "main": {"n": 1 << 26}},
    {"name": "200 ms kernel, slow limit 50 ms", "fn": "saxpy", "params": SAXPY_PARAMS, "cu": NAP_CU,
     "defines": ("NAP_MS 200",), "small": {"n": 1001}, "main": {"n": 1 << 20}, "slow_ms": 50.0},
]


def _job(ref: Path, cand: Path | None, p: dict[str, Any], **kw: Any) -> EvalJob:
    return EvalJob(
        ref_lib=str(ref), ref_symbol=f"cudaperf_ref_{p['fn']}",
        cand_lib=None if cand is None else str(cand), cand_symbol=f"{p['fn']}_cuda",
        params=[param_to_json(x) for x in p["params"]],
        configs=[ConfigSpec("small-odd", dict(p["small"]), trials=2),
                 ConfigSpec("main", dict(p["main"]), trials=1, time=True)],
        **kw,
    )


def _row(label: str, r: EvalResult) -> dict[str, Any]:
    prep = r.prepare_s or 0.0
    return {"problem": label, "status": r.status, "elapsed_s": round(r.elapsed_s, 2),
            "prepare_s": round(prep, 2), "lock_wait_s": round(r.lock_wait_s, 2),
            "device_s": round(r.elapsed_s - prep - r.lock_wait_s, 2),
            "gpu_ms": r.summary.get("gpu_ms"), "peak_gpu_mb": None if r.peak_gpu_bytes is None
            else round(r.peak_gpu_bytes / 1e6, 1),
            "footprint_mb": None if r.footprint_bytes is None else round(r.footprint_bytes / 1e6, 1),
            "message": r.message[:100]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    arch = detect_arch() or "sm_90"
    work = Path(tempfile.mkdtemp(prefix="cudaperf-bench-c-eval-"))
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("no C compiler", file=sys.stderr)
        return 2
    (work / "ref.c").write_text(REF_C)
    subprocess.run([cc, "-O3", "-shared", "-fPIC", "-o", str(work / "ref.so"), str(work / "ref.c")],
                   check=True)
    ref = work / "ref.so"
    rows: list[dict[str, Any]] = []
    for p in PROBLEMS:
        head = "".join(f"#define {d}\n" for d in p["defines"])
        built = build_candidate(head + p["cu"], arch=arch, cache_root=work / "builds")
        if not built.ok:
            print(f"{p['name']}: build failed: {built.errors[:300]}", file=sys.stderr)
            continue
        refs = work / f"refs-{len(rows)}"
        t0 = time.perf_counter()
        base = run_evaluation(_job(ref, None, p, cpu_reps=7, cpu_budget_s=20.0,
                                   reference_outputs=str(refs)), timeout_s=600)
        base_row = _row(p["name"] + " [baseline job]", base)
        base_row["elapsed_s"] = round(time.perf_counter() - t0, 2)
        if base.status != "reference_only":
            print(f"{p['name']}: baseline failed: {base.message}", file=sys.stderr)
            continue
        main_t = base.configs[-1].timing
        base_row["message"] = (f"cpu n={main_t.cpu.n} median {main_t.cpu.median_ms:.0f} ms, "
                               f"{main_t.cpu_total_s:.1f} s in all")
        rows.append(base_row)
        kw = dict(reference_outputs=str(refs), array_roles=base.array_roles,
                  cpu_baseline_ms={"main": main_t.cpu_median_ms}, slow_ms=p.get("slow_ms"))
        for _ in range(args.reps):
            rows.append(_row(p["name"], run_evaluation(_job(ref, built.lib_path, p, **kw), timeout_s=300)))
        pair: list[EvalResult] = []
        t0 = time.perf_counter()
        threads = [threading.Thread(target=lambda: pair.append(
            run_evaluation(_job(ref, built.lib_path, p, **kw), timeout_s=300))) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        for r in pair:
            row = _row(p["name"] + " [2 at once]", r)
            row["pair_wall_s"] = round(wall, 2)
            rows.append(row)
    cols = ["problem", "status", "elapsed_s", "prepare_s", "lock_wait_s", "device_s", "gpu_ms",
            "peak_gpu_mb", "footprint_mb"]
    print(" | ".join(cols) + " | message")
    for r in rows:
        print(" | ".join(str(r.get(c)) for c in cols) + f" | {r.get('pair_wall_s', '')} {r['message']}")
    cand = [r for r in rows if "[baseline" not in r["problem"] and "[2 at once]" not in r["problem"]]
    if cand:
        per = [r["elapsed_s"] - r["lock_wait_s"] for r in cand]
        print(f"candidate evaluations: {len(per)}, median {statistics.median(per):.2f} s, max "
              f"{max(per):.2f} s per candidate (lock wait excluded)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
