"""The PyTorch evaluation worker on every KernelBench module, without a GPU: a benchmark
of the verification logic (it prints figures and a table; it asserts nothing).

    python benchmarks/kernelbench_host.py [--kernelbench DIR] [--levels level1 level2]
                                          [--only NAME ...] [--json FILE]

``DIR`` is a checkout of ScalingIntelligence/KernelBench (default ``$CUDAPERF_KERNELBENCH``);
no KernelBench code is in this file.  For every problem file of the levels:

1. the loader (``load_torch_problem``) finds its shapes on the meta device and its probe
   constants (small enough to run on this machine's CPU);
2. a copy of the file with the probe constants written into its assignments is evaluated
   by the real worker under the host test backend (``CUDAPERF_WORKER_BACKEND=host``: the
   models run on the CPU, the host clock stands in for CUDA events, the profiler guards are
   skipped): first the baseline job (``mode="baseline"``: eager timing, degenerate or
   not, footprint), then a candidate job whose ``ModelNew`` is ``Model`` itself (every
   dynamic guard disabled, since it *is* the reference) at the default and the loader's
   alternative shapes, with the baseline's eager time.

A worker that verifies correctly must call that candidate ``correct`` on every file the
loader accepts (training-mode modules, in-place forwards, tuple and scalar outputs,
BatchNorm's running buffers, the alternative shapes, the float64 comparison, the timing
loop); any other verdict is a bug in the worker or an honest limit, and the table shows
which.  Problems that do not shrink below the loader's data limit are listed as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV = "CUDAPERF_KERNELBENCH"


def _natural(p: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def shrunk_copy(path: Path, constants: dict[str, int], folder: Path) -> Path:
    """``path`` with ``constants`` written into its module-level assignments (a new file;
    ``a = b = 16`` and ``h, w = 32, 32`` are split into one assignment per name first, as
    the worker does: ``cudaperf_cli.problems.pytorch.override_constants``)."""
    import ast

    from cudaperf_cli.problems.pytorch import override_constants

    tree = override_constants(path.read_text(), constants, path.name)
    out = folder / path.name
    out.write_text(ast.unparse(tree) + "\n")
    return out


def evaluate_file(path: Path, work: Path, timeout_s: float = 600.0) -> dict[str, Any]:
    """One problem: load, shrink, baseline job, reference-as-candidate job (host backend).
    Returns a row: ``file``, ``status`` (``correct``... or ``load_error``/``skipped``),
    ``baseline`` status, ``degenerate``, ``message``, ``seconds``."""
    from cudaperf_cli.core import CudaperfError
    from cudaperf_cli.evaluate.job import TimingSettings
    from cudaperf_cli.evaluate.torch_job import DYNAMIC_GUARDS, TorchEvalJob, run_torch_evaluation
    from cudaperf_cli.problems.pytorch import load_torch_problem

    row: dict[str, Any] = {"file": path.name}
    t0 = time.monotonic()
    try:
        p = load_torch_problem(path, timeout_s=timeout_s)
    except CudaperfError as exc:
        row.update(status="load_error", message=str(exc), seconds=time.monotonic() - t0)
        return row
    if any(w.startswith("not checked on data here") for w in p.warnings):
        row.update(status="skipped", message="does not shrink below the loader's data limit",
                   seconds=time.monotonic() - t0)
        return row
    folder = work / path.stem
    folder.mkdir(parents=True, exist_ok=True)
    small = shrunk_copy(path, dict(p.probe_constants or {}), folder) if p.probe_constants else path
    ps = load_torch_problem(small, timeout_s=timeout_s) if small != path else p
    fast = TimingSettings(warmup_reps=1, warmup_ms=1.0, min_reps=3, max_reps=5, min_total_ms=1.0,
                          max_total_ms=200.0, flush_l2=False, sync_reps=2)
    base = run_torch_evaluation(
        TorchEvalJob(problem=str(small), candidate=[], mode="baseline", timing=fast,
                     compile_baseline=False, modifies_inputs=ps.modifies_inputs),
        timeout_s=timeout_s)
    row.update(baseline=base.status, degenerate=base.degenerate, footprint_bytes=base.footprint_bytes)
    cand = folder / "model.py"
    cand.write_text(small.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    eager = base.timing.eager.median_ms if base.timing and base.timing.eager else None
    job = TorchEvalJob(
        problem=str(small), candidate=[str(cand)], format="load_inline", timing=fast,
        shapes=[dict(ps.alt_shapes)] if ps.alt_shapes else [], static_guards=False,
        disabled_guards=list(DYNAMIC_GUARDS), compile_baseline=False,
        baseline_ms={"eager": eager, "compile": None} if eager else None,
        modifies_inputs=ps.modifies_inputs, build_root=str(work / "builds"),
    )
    r = run_torch_evaluation(job, timeout_s=timeout_s, footprint=ps.footprint_bytes)
    row.update(status=r.status, message=r.message, configs=[c.name for c in r.configs],
               warnings=r.warnings[:4], seconds=round(time.monotonic() - t0, 1),
               probe=p.probe_constants, alt=ps.alt_shapes)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", default=os.environ.get(ENV))
    ap.add_argument("--levels", nargs="+", default=["level1", "level2"])
    ap.add_argument("--only", nargs="*", default=None, help="file names (or stems) to run")
    ap.add_argument("--skip", type=int, default=0, help="leave out the first N files (to continue a run)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON lines")
    args = ap.parse_args(argv)
    if not args.kernelbench:
        print(f"error: no KernelBench checkout: pass --kernelbench or set ${ENV}", file=sys.stderr)
        return 2
    root = Path(args.kernelbench)
    root = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    os.environ["CUDAPERF_WORKER_BACKEND"] = "host"
    files = []
    for level in args.levels:
        d = root / level
        if not d.is_dir():
            print(f"error: {d} is not a folder of KernelBench problems", file=sys.stderr)
            return 2
        files += sorted(d.glob("*.py"), key=_natural)
    if args.only:
        want = set(args.only)
        files = [f for f in files if f.name in want or f.stem in want]
    files = files[args.skip:]
    out = open(args.json, "a" if args.skip else "w") if args.json else None
    counts: dict[str, int] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cudaperf-kb-host-") as tmp:
        for f in files:
            try:
                row = evaluate_file(f, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - one file never stops the benchmark
                row = {"file": f.name, "status": "benchmark_error",
                       "message": f"{type(exc).__name__}: {exc}"}
            row["level"] = f.parent.name
            counts[row["status"]] = counts.get(row["status"], 0) + 1
            print(f"{f.parent.name}/{f.name}: {row['status']} ({row.get('seconds', 0):.0f} s)"
                  + ("" if row["status"] == "correct" else f": {str(row.get('message', ''))[:200]}"),
                  flush=True)
            if out:
                out.write(json.dumps(row, default=str) + "\n")
                out.flush()
    print(f"{len(files)} files in {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
