"""The built-in PyTorch policy on every KernelBench module, without a GPU: what it accepts,
and whether its candidates compute the right thing (a benchmark: it prints figures and a
table; it asserts nothing).

    python benchmarks/kernelbench_policy.py [--kernelbench DIR] [--levels level1 level2]
                                            [--only NAME ...] [--turn 1] [--jobs 2] [--json FILE]
                                            [--host-cuda]

``DIR`` is a checkout of ScalingIntelligence/KernelBench (default ``$CUDAPERF_KERNELBENCH``);
no KernelBench code is in this file.  For every problem file of the levels, as
``cudaperf optimize`` would see it:

1. the loader (``load_torch_problem``) reads it at its own sizes (the meta device for the
   large ones) and finds its probe constants (small enough to run on this CPU);
2. the built-in PyTorch policy traces it (at shrunken constants when it is large, as in a
   real run), plans its fusion and writes the candidate of ``--turn``, or refuses;
3. the judge's static guards read the candidate (``guard``: it would be rejected unrun);
4. the candidate runs against ``Model`` on the CPU with its kernels *emulated*
   (``selfcheck.check_candidate(emulate=True)``: the plan's kernels interpreted with PyTorch
   CPU ops, called through the generated ``model.py`` with the launcher signatures of its
   ``kernel.cu``) at two small configurations: the probe constants, and the loader's
   alternative shapes found from them.  A size baked into the code from the trace shows up
   as a wrong or failed second configuration (the GPU judge's ``shape_specialised``).

With ``--host-cuda`` step 4 runs the candidate's CUDA text itself instead of the
interpreted plan: ``kernel.cu`` compiled for the CPU against a CUDA stand-in
(``selfcheck.check_candidate(host_cuda=True)``, ``cudaperf_cli/policies/builtin_torch/
hostcuda.py``: threads as fibers, a device of 4 SMs of 2 resident blocks), slower.

What this does not check: the CUDA text itself without ``--host-cuda`` (nvcc compiles it
in the unit tests; a GPU run executes it), and timing.  Rows: ``file``, ``status`` (``ok``, ``wrong``, ``error``,
``guard``, ``refused``, ``load_error``), ``fused`` / ``left`` (the plan), ``message``, ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ENV = "CUDAPERF_KERNELBENCH"


def _natural(p: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def check_file(path: Path, work: Path, turn: int = 1, timeout_s: float = 600.0, host_cuda: bool = False) -> dict[str, Any]:
    """One problem: load, plan and propose, emulate (or with ``host_cuda`` run the CUDA text
    on the CPU) at two small configurations (module docstring).  Returns its row; never
    raises for the problem's own faults."""
    from cudaperf_cli.core import CudaperfError
    from cudaperf_cli.evaluate.static_guards import LIBRARY_OPS, check_candidate_source
    from cudaperf_cli.policies.base import PolicyRefusal
    from cudaperf_cli.policies.builtin_torch import BuiltinTorchPolicy
    from cudaperf_cli.policies.builtin_torch.selfcheck import check_candidate
    from cudaperf_cli.problems.pytorch import load_torch_problem

    row: dict[str, Any] = {"file": path.name, "level": path.parent.name}
    t0 = time.monotonic()

    def done(**kw: Any) -> dict[str, Any]:
        row.update(kw, seconds=round(time.monotonic() - t0, 1))
        return row

    try:
        p = load_torch_problem(path, timeout_s=timeout_s, alt_shapes=False)
        probe = dict(p.probe_constants or p.constants)
        small = load_torch_problem(path, timeout_s=timeout_s, constants=probe)
    except CudaperfError as exc:
        return done(status="load_error", message=str(exc).splitlines()[0][:300])
    configs = [probe] + ([{**probe, **small.alt_shapes}] if small.alt_shapes else [])
    pol = BuiltinTorchPolicy()
    try:
        plan = pol.plan(p)
        row.update(fused=plan.fused_ops(), left=plan.left_ops())
        prop = pol.propose(p, turn)
        kernels = pol.variant_plan(p, pol.variants[turn].one_pass).kernels  # what prop was written from
    except PolicyRefusal as exc:
        return done(status="refused", message=str(exc).splitlines()[0][:300])
    except CudaperfError as exc:
        return done(status="refused", message=str(exc).splitlines()[0][:300])
    finally:
        pol.close()
    folder = work / path.stem
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in prop.files.items():
        (folder / name).write_text(text)
    violations = check_candidate_source(prop.files["model.py"], problem=p, allow_torch_ops=LIBRARY_OPS,
                                        cuda_sources={"kernel.cu": prop.files.get("kernel.cu", "")})
    if violations:  # the judge would reject it before running it
        return done(status="guard", message=str(violations[0])[:300])
    try:
        if host_cuda:
            r = check_candidate(path, folder / "model.py", configs, host_cuda=True, timeout_s=timeout_s)
        else:
            r = check_candidate(path, folder / "model.py", configs, emulate=True, kernels=kernels,
                                timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - a harness fault is a row, not the end
        return done(status="error", message=f"{type(exc).__name__}: {exc}"[:300])
    if r.get("error"):
        return done(status="error", message=str(r["error"]).splitlines()[0][:300], configs=configs)
    bad = [c for c in r.get("configs", []) if not c.get("ok")]
    return done(status="ok" if r.get("ok") and not bad else "wrong", configs=configs,
                message="; ".join(f"{c['constants']}: {c['message']}" for c in bad)[:300])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", default=os.environ.get(ENV))
    ap.add_argument("--levels", nargs="+", default=["level1", "level2"])
    ap.add_argument("--only", nargs="*", default=None, help="file names (or stems) to run")
    ap.add_argument("--turn", type=int, default=1, help="the policy's candidate of this turn (0-based)")
    ap.add_argument("--jobs", type=int, default=2, help="files at once")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON lines")
    ap.add_argument("--host-cuda", action="store_true",
                    help="run the candidate's kernel.cu on the CPU (a CUDA stand-in) instead of the emulated plan")
    args = ap.parse_args(argv)
    if not args.kernelbench:
        print(f"error: no KernelBench checkout: pass --kernelbench or set ${ENV}", file=sys.stderr)
        return 2
    root = Path(args.kernelbench)
    root = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    files: list[Path] = []
    for level in args.levels:
        d = root / level
        if not d.is_dir():
            print(f"error: {d} is not a folder of KernelBench problems", file=sys.stderr)
            return 2
        files += sorted(d.glob("*.py"), key=_natural)
    if args.only:
        want = set(args.only)
        files = [f for f in files if f.name in want or f.stem in want]
    if not files:
        print("error: no problem files selected", file=sys.stderr)
        return 2
    out = open(args.json, "w") if args.json else None
    counts: dict[str, int] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cudaperf-kb-policy-") as tmp, \
            ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        def one(f: Path) -> dict[str, Any]:
            try:
                return check_file(f, Path(tmp), turn=args.turn, host_cuda=args.host_cuda)
            except Exception as exc:  # noqa: BLE001 - one file never stops the benchmark
                return {"file": f.name, "level": f.parent.name, "status": "error",
                        "message": f"{type(exc).__name__}: {exc}"[:300]}

        for k, row in enumerate(pool.map(one, files), 1):
            counts[row["status"]] = counts.get(row["status"], 0) + 1
            print(f"[{k}/{len(files)}] {row['level']}/{row['file']}: {row['status']}"
                  + (f" {row.get('fused')}" if row["status"] == "ok" else f": {row.get('message', '')}"),
                  flush=True)
            if out is not None:
                out.write(json.dumps(row) + "\n")
                out.flush()
    if out is not None:
        out.close()
    n = len(files)
    accepted = n - counts.get("refused", 0) - counts.get("load_error", 0)
    print(f"\n{n} files in {time.monotonic() - t0:.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    how = "the CUDA text run on the CPU" if args.host_cuda else "emulated"
    print(f"accepted {accepted} ({100 * accepted / n:.0f}%); {how}: correct at both small configurations "
          f"{counts.get('ok', 0)} of {accepted}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
