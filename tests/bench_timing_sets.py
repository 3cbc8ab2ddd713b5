"""Benchmark (prints figures, asserts nothing): what the timing's second input set and its
verified timed calls (issue 14, item 2; docs/evaluation.md §6, docs/pytorch-evaluation.md §5)
cost one candidate evaluation on the GPU.

    python tests/bench_timing_sets.py [--reps 2] [--skip-torch]

Each evaluation runs with ``timing.input_sets``/``checked_reps`` at (1, 0), (2, 0) and (2, 2)
and prints its status, seconds (whole evaluation; the worker's ``timing`` and ``reference``
phases), the kernel median, the peak device bytes and the calls per input set.  C: saxpy on
64 Mi floats and a double matmul 1000 x 1100 x 1200 against this project's test references
and hand-written candidates (tests/eval_refs.py, tests/test_gpu_evaluate.py), one timed
configuration, roles and the CPU median given, no stored reference outputs (so the
reference's run on input set 1 happens in the job, under ``reference``).  PyTorch:
``tests/data/torch_cands/fast_ok`` on ``scaled_relu.py`` at 64 x 16384 and 4096 x 16384, the
run's eager time given (eager and torch.compile are not timed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETTINGS = ((1, 0), (2, 0), (2, 2))


def _phases(r: object) -> dict[str, float]:
    ph = (getattr(r, "details", None) or {}).get("phase_s", {})
    return {k: round(v, 3) for k, v in ph.items()
            if k.startswith("timing") or k.startswith("reference") or k == "inputs"}


def bench_c(reps: int) -> None:
    from cudaperf_cli.build import build_candidate, detect_arch
    from cudaperf_cli.core import param_to_json
    from cudaperf_cli.evaluate import ConfigSpec, EvalJob, TimingSettings, run_evaluation
    from tests.eval_refs import REF_C, SAXPY_PARAMS
    from tests.test_gpu_evaluate import MM_CU, MM_PARAMS, SAXPY_CU

    arch = detect_arch()
    w = Path(tempfile.mkdtemp(prefix="bench-sets-"))
    (w / "ref.c").write_text(REF_C)
    subprocess.run(["cc", "-O3", "-shared", "-fPIC", "-o", str(w / "ref.so"), str(w / "ref.c")], check=True)

    def lib(src: str) -> Path:
        r = build_candidate(src, arch=arch, cache_root=w / "builds")
        assert r.ok and r.lib_path is not None, r.errors
        return r.lib_path

    cases = [("saxpy 64 Mi floats", lib(SAXPY_CU), "saxpy", SAXPY_PARAMS, {"n": 1 << 26},
              {"x": "read-only", "y": "read-write"}),
             ("matmul 1000x1100x1200", lib(MM_CU), "mm", MM_PARAMS, {"n": 1000, "m": 1100, "k": 1200},
              {"A": "read-only", "B": "read-only", "C": "write-only"})]
    for name, cand, fn, params, sizes, roles in cases:
        for sets, checks in SETTINGS:
            for _ in range(reps):
                job = EvalJob(ref_lib=str(w / "ref.so"), ref_symbol=f"cudaperf_ref_{fn}",
                              cand_lib=str(cand), cand_symbol=f"{fn}_cuda",
                              params=[param_to_json(p) for p in params],
                              configs=[ConfigSpec("main", sizes, trials=1, time=True)],
                              timing=TimingSettings(input_sets=sets, checked_reps=checks),
                              cpu_baseline_ms={"main": 100.0}, array_roles=roles)
                r = run_evaluation(job, timeout_s=600)
                t = r.configs[0].timing if r.configs else None
                print(f"C {name} sets={sets} checks={checks} {r.status} elapsed={r.elapsed_s:.2f} s "
                      f"kernel={t.gpu.median_ms if t and t.gpu else None} ms "
                      f"peak={(r.peak_gpu_bytes or 0) / 1e6:.0f} MB {_phases(r)} "
                      f"calls={t.input_set_calls if t else None} checked={t.checked_reps if t else None}",
                      flush=True)


def bench_torch(reps: int) -> None:
    from cudaperf_cli.build import detect_arch
    from cudaperf_cli.evaluate.job import TimingSettings
    from cudaperf_cli.evaluate.torch_job import TorchEvalJob, run_torch_evaluation

    arch, root = detect_arch(), tempfile.mkdtemp(prefix="bench-sets-torch-")
    cand = ROOT / "tests" / "data" / "torch_cands" / "fast_ok"
    base = ROOT / "tests" / "data" / "torch_problems" / "scaled_relu.py"
    big = Path(root) / "scaled_relu_4096.py"
    big.write_text(base.read_text().replace("batch_size = 64", "batch_size = 4096"))
    for name, prob in (("scaled_relu 64x16384", base), ("scaled_relu 4096x16384", big)):
        for sets, checks in SETTINGS:
            for _ in range(reps):
                job = TorchEvalJob(problem=str(prob), candidate=[str(cand / "model.py"), str(cand / "kernel.cu")],
                                   format="fast", arch=arch, build_root=root, static_guards=False,
                                   baseline_ms={"eager": 1.0, "compile": None},
                                   timing=TimingSettings(input_sets=sets, checked_reps=checks))
                r = run_torch_evaluation(job, timeout_s=300)
                t = r.timing
                print(f"torch {name} sets={sets} checks={checks} {r.status} elapsed={r.elapsed_s:.2f} s "
                      f"candidate={t.candidate.median_ms if t and t.candidate else None} ms "
                      f"peak={(r.peak_gpu_bytes or 0) / 1e6:.0f} MB {_phases(r)} "
                      f"calls={t.input_set_calls if t else None} checked={t.checked_reps if t else None}",
                      flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--skip-torch", action="store_true")
    args = ap.parse_args()
    bench_c(args.reps)
    if not args.skip_torch:
        bench_torch(args.reps)


if __name__ == "__main__":
    main()
