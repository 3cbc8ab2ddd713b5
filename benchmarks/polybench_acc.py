"""PolyBench-ACC's hand-written CUDA beside cudaperf's kernels for PolyBench/C 4.2.1 (issue 13).

    python benchmarks/polybench_acc.py run --acc DIR --polybench DIR -o acc.json
                                           [--dataset LARGE] [--runs 3] [--arch sm_90]
                                           [--jobs 8] [--only NAME ...]
    python benchmarks/polybench_acc.py compare acc.json BENCH [BENCH ...] [--json FILE]

``--acc`` is a checkout of cavazos-lab/PolyBench-ACC (its ``CUDA/`` folder is used), and
``--polybench`` one of PolyBench/C 4.2.1 (MatthiasJReisinger/PolyBenchC-4.2.1); neither is
copied here, nor written to.  ``run`` builds the 19 kernels the two suites share in a
scratch folder, as PolyBench-ACC's own Makefiles build them (``nvcc -O3 FILE.cu
-I utilities``) plus ``-arch``, in **double** (PolyBench/C's type; PolyBench-ACC's default is
float) and at **PolyBench/C's sizes** for the dataset (PolyBench-ACC's own LARGE sizes are
different), by its size macros on the command line (its headers define sizes only when
none is given).  Each binary runs ``--runs`` times, one at a time, with
``CUDA_MODULE_LOADING=EAGER`` (so that the first launch inside its timed region does not load
its module); it times itself: wall clock (``gettimeofday``) around its launches and a
``cudaThreadSynchronize``, printed after ``GPU Time in seconds:``.  Its own check against its
CPU version (``Non-Matching CPU-GPU Outputs Beyond Error Threshold of 0.05 Percent: K``) is
kept, because a hand-written kernel written for square sizes can be wrong at PolyBench/C's.
The median of the runs is reported.

``compare`` joins those times with a ``cudaperf bench`` report of the PolyBench/C manifest
(``report.json`` or its folder; ``benchmarks/polybench.py manifest``): per kernel the
verdict, our best candidate's GPU time (median of CUDA-event timings, L2 flushed), the
hand-written time, their ratio (hand-written / ours: above 1 is faster than hand-written),
FLOP/s for the products and GB/s (compulsory traffic) for the matrix-vector kernels, and
the mapping (the candidate's description); then the geomean of the ratios over the kernels
with a time on both sides.

Exit 0 once the table is printed; 2 on bad input (a folder that is not the suite, a
report that is not a bench report).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

#: PolyBench/C 4.2.1 kernel -> (PolyBench-ACC CUDA source, relative to its CUDA/ folder;
#: {PolyBench-ACC size macro: the PolyBench/C macro of the same extent}).  The extents were
#: matched from the two suites' array declarations (atax: A[NX][NY] is A[M][N]; bicg:
#: A[NX][NY] is A[N][M]; syrk/syr2k: A[NI][NJ] is A[N][M]; gramschmidt: A[NI][NJ] is A[M][N]).
SHARED: dict[str, tuple[str, dict[str, str]]] = {
    "2mm": ("linear-algebra/kernels/2mm/2mm.cu", {m: m for m in ("NI", "NJ", "NK", "NL")}),
    "3mm": ("linear-algebra/kernels/3mm/3mm.cu", {m: m for m in ("NI", "NJ", "NK", "NL", "NM")}),
    "adi": ("stencils/adi/adi.cu", {"TSTEPS": "TSTEPS", "N": "N"}),
    "atax": ("linear-algebra/kernels/atax/atax.cu", {"NX": "M", "NY": "N"}),
    "bicg": ("linear-algebra/kernels/bicg/bicg.cu", {"NX": "N", "NY": "M"}),
    "correlation": ("datamining/correlation/correlation.cu", {"M": "M", "N": "N"}),
    "covariance": ("datamining/covariance/covariance.cu", {"M": "M", "N": "N"}),
    "doitgen": ("linear-algebra/kernels/doitgen/doitgen.cu", {m: m for m in ("NQ", "NR", "NP")}),
    "fdtd-2d": ("stencils/fdtd-2d/fdtd2d.cu", {m: m for m in ("TMAX", "NX", "NY")}),
    "gemm": ("linear-algebra/kernels/gemm/gemm.cu", {m: m for m in ("NI", "NJ", "NK")}),
    "gemver": ("linear-algebra/kernels/gemver/gemver.cu", {"N": "N"}),
    "gesummv": ("linear-algebra/kernels/gesummv/gesummv.cu", {"N": "N"}),
    "gramschmidt": ("linear-algebra/solvers/gramschmidt/gramschmidt.cu", {"NI": "M", "NJ": "N"}),
    "jacobi-1d": ("stencils/jacobi-1d-imper/jacobi1D.cu", {"TSTEPS": "TSTEPS", "N": "N"}),
    "jacobi-2d": ("stencils/jacobi-2d-imper/jacobi2D.cu", {"TSTEPS": "TSTEPS", "N": "N"}),
    "lu": ("linear-algebra/solvers/lu/lu.cu", {"N": "N"}),
    "mvt": ("linear-algebra/kernels/mvt/mvt.cu", {"N": "N"}),
    "syr2k": ("linear-algebra/kernels/syr2k/syr2k.cu", {"NI": "N", "NJ": "M"}),
    "syrk": ("linear-algebra/kernels/syrk/syrk.cu", {"NI": "N", "NJ": "M"}),
}

#: Floating-point operations of PolyBench/C 4.2.1's kernels (its loop nests, counted by
#: hand: a multiply-add is 2 FLOP), for the products.  Sizes: the PolyBench/C macros.
FLOP: dict[str, Callable[[dict[str, int]], float]] = {
    "gemm": lambda s: s["NI"] * s["NJ"] * (2.0 * s["NK"] + 1),
    "2mm": lambda s: 2.0 * s["NI"] * s["NJ"] * s["NK"] + s["NI"] * s["NL"] * (2.0 * s["NJ"] + 1),
    "3mm": lambda s: 2.0 * (s["NI"] * s["NJ"] * s["NK"] + s["NJ"] * s["NL"] * s["NM"]
                            + s["NI"] * s["NL"] * s["NJ"]),
    "syrk": lambda s: s["N"] * (s["N"] + 1) / 2 * (2.0 * s["M"] + 1),
    "syr2k": lambda s: s["N"] * (s["N"] + 1) / 2 * (4.0 * s["M"] + 1),
    "doitgen": lambda s: 2.0 * s["NR"] * s["NQ"] * s["NP"] * s["NP"],
    "symm": lambda s: 2.0 * s["M"] * s["N"] * s["M"],
    "trmm": lambda s: s["M"] * (s["M"] - 1) / 2 * s["N"] * 2.0,
    "covariance": lambda s: s["M"] * (s["M"] + 1) / 2 * 2.0 * s["N"],
    "correlation": lambda s: s["M"] * (s["M"] - 1) / 2 * 2.0 * s["N"],
}

#: Compulsory DRAM traffic of the matrix-vector kernels (each matrix read once, written once
#: where the kernel writes it; vectors left out: under 0.2% here), bytes of double.
BYTES: dict[str, Callable[[dict[str, int]], float]] = {
    "atax": lambda s: 8.0 * s["M"] * s["N"],
    "bicg": lambda s: 8.0 * s["M"] * s["N"],
    "mvt": lambda s: 8.0 * s["N"] * s["N"],
    "gemver": lambda s: 2 * 8.0 * s["N"] * s["N"],
    "gesummv": lambda s: 2 * 8.0 * s["N"] * s["N"],
}

#: Headers the wrapper includes before the size macros (those the kernels include).
WRAPPER_HEADERS = ("cuda.h", "cuda_runtime.h", "stdio.h", "stdlib.h", "string.h", "math.h",
                   "unistd.h", "sys/time.h", "time.h", "stdarg.h", "assert.h")

GPU_TIME = re.compile(r"GPU Time in seconds:\s*\n\s*([0-9.eE+-]+)")
NON_MATCHING = re.compile(r"Non-Matching CPU-GPU Outputs Beyond Error Threshold of [0-9.]+ Percent: (\d+)")


class InputError(Exception):
    """Bad input: a folder that is not the suite, a file that is not a report."""


def acc_cuda_root(path: str | Path) -> Path:
    """The ``CUDA/`` folder of a PolyBench-ACC checkout.

    Raises:
        InputError: ``path`` (or its ``CUDA/``) has no ``utilities/polybench.h``.
    """
    p = Path(path).expanduser().resolve()
    for cand in (p / "CUDA", p):
        if (cand / "utilities" / "polybench.h").is_file() and (cand / SHARED["gemm"][0]).is_file():
            return cand
    raise InputError(f"{path}: not a PolyBench-ACC checkout (no CUDA/utilities/polybench.h "
                     "and CUDA/linear-algebra/kernels/gemm/gemm.cu)")


def polybench_sizes(pb_root: Path, kernel: str, dataset: str = "LARGE") -> dict[str, int]:
    """The size macros of PolyBench/C 4.2.1 ``kernel`` at ``dataset`` ({macro: value}), read by
    preprocessing its header (``cc -E -dM -D<dataset>_DATASET``), as its build sees them.

    Raises:
        InputError: the kernel's header is not in ``pb_root``, or cc failed.
    """
    headers = [h for h in pb_root.rglob(f"{kernel}.h") if h.parent.name == kernel]
    if not headers:
        raise InputError(f"{pb_root}: no {kernel}/{kernel}.h (not PolyBench/C 4.2.1)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise InputError("no C compiler (cc) to read PolyBench/C's size macros")
    def macros(*extra: str) -> dict[str, int]:
        out = subprocess.run([cc, "-E", "-dM", f"-D{dataset}_DATASET", "-I",
                              str(pb_root / "utilities"), *extra], capture_output=True,
                             text=True, timeout=60)
        if out.returncode != 0:
            raise InputError(f"{headers[0]}: cc -E failed: {out.stderr.strip().splitlines()[-1:]}")
        found = {}
        for line in out.stdout.splitlines():
            m = re.fullmatch(r"#define (\w+) (\d+)", line.strip())
            if m:
                found[m.group(1)] = int(m.group(2))
        return found

    # the header's own macros: what it defines beyond the compiler's predefined ones
    predefined = macros("-x", "c", "/dev/null")
    return {k: v for k, v in macros(str(headers[0])).items()
            if k not in predefined and not k.endswith("_DATASET")}


@dataclass
class AccRun:
    """One PolyBench-ACC kernel built and run: ``gpu_s`` its own times (s, one per run),
    ``gpu_ms`` their median (ms), ``non_matching`` its own check (elements beyond 0.05%)."""

    kernel: str
    source: str
    defines: dict[str, int]
    built: bool = False
    build_error: str = ""
    gpu_s: list[float] = field(default_factory=list)
    gpu_ms: float | None = None
    non_matching: int | None = None
    error: str = ""
    wall_s: float = 0.0


def _build(cuda: Path, kernel: str, sizes: dict[str, int], out_dir: Path, arch: str,
           timeout: float) -> AccRun:
    src, macros = SHARED[kernel]
    defines = {acc: sizes[pb] for acc, pb in macros.items()}
    run = AccRun(kernel, src, defines)
    exe = out_dir / f"{kernel}.exe"
    # The size macros (N, M, ...) would also rename identifiers inside the CUDA and C headers,
    # so they are defined in a wrapper after those headers and before the kernel's source.
    # cudaThreadSynchronize (removed in CUDA 13) is its successor cudaDeviceSynchronize.
    wrapper = out_dir / f"{kernel}_wrap.cu"
    wrapper.write_text("".join(f"#include <{h}>\n" for h in WRAPPER_HEADERS)
                       + "#define cudaThreadSynchronize cudaDeviceSynchronize\n"
                       + "#define DATA_TYPE double\n#define DATA_PRINTF_MODIFIER \"%0.2lf \"\n"
                       + "".join(f"#define {k} {v}\n" for k, v in defines.items())
                       + f'#include "{cuda / src}"\n')
    cmd = ["nvcc", "-O3", f"-arch={arch}", str(wrapper), "-I", str(cuda / "utilities"),
           "-I", str((cuda / src).parent), "-o", str(exe)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             cwd=out_dir)
    except subprocess.TimeoutExpired:
        run.build_error = f"nvcc ran past {timeout:.0f} s"
        return run
    if res.returncode != 0:
        tail = [ln for ln in res.stderr.splitlines() if "error" in ln][:1] or res.stderr.splitlines()[-1:]
        run.build_error = f"nvcc exit {res.returncode}: {' '.join(tail)[:300]}"
        return run
    run.built = True
    return run


def _run(run: AccRun, out_dir: Path, runs: int, timeout: float) -> None:
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER")
    t0 = time.monotonic()
    for _ in range(runs):
        try:
            res = subprocess.run([str(out_dir / f"{run.kernel}.exe")], capture_output=True,
                                 text=True, timeout=timeout, env=env, cwd=out_dir)
        except subprocess.TimeoutExpired:
            run.error = f"ran past {timeout:.0f} s"
            break
        m = GPU_TIME.search(res.stdout)
        if res.returncode != 0 or not m:
            run.error = (f"exit {res.returncode}; " if res.returncode else "") + \
                "no 'GPU Time in seconds' in its output: " + (res.stdout + res.stderr)[-200:].strip()
            break
        run.gpu_s.append(float(m.group(1)))
        nm = NON_MATCHING.search(res.stdout)
        if nm:
            run.non_matching = max(run.non_matching or 0, int(nm.group(1)))
    run.wall_s = round(time.monotonic() - t0, 2)
    if run.gpu_s:
        run.gpu_ms = statistics.median(run.gpu_s) * 1e3


def run_acc(acc: Path, pb_root: Path, out: Path, *, dataset: str = "LARGE", runs: int = 3,
            arch: str = "sm_90", jobs: int = 8, only: Sequence[str] = (),
            build_timeout: float = 300, run_timeout: float = 180) -> dict[str, Any]:
    """Build the shared kernels in parallel (``jobs``), run them one at a time, write ``out``
    (JSON: ``kind "polybench-acc-times"``, the settings, the GPU and one row per kernel, see
    :class:`AccRun`) and return it.

    Raises:
        InputError: not the suites; an unknown kernel in ``only``; nvcc missing.
    """
    cuda = acc_cuda_root(acc)
    if not (pb_root / "utilities" / "polybench.h").is_file():
        raise InputError(f"{pb_root}: not a PolyBench/C 4.2.1 checkout (no utilities/polybench.h)")
    unknown = [k for k in only if k not in SHARED]
    if unknown:
        raise InputError(f"not a kernel both suites have: {', '.join(unknown)} "
                         f"(one of {', '.join(SHARED)})")
    if shutil.which("nvcc") is None:
        raise InputError("nvcc is not on PATH")
    names = list(only) or list(SHARED)
    sizes = {k: polybench_sizes(pb_root, k, dataset) for k in names}
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip() if shutil.which("nvidia-smi") else ""
    with tempfile.TemporaryDirectory(prefix="polybench-acc-") as tmp:
        build_dir = Path(tmp)
        print(f"building {len(names)} PolyBench-ACC kernels (double, PolyBench/C {dataset} sizes, "
              f"-arch={arch}) ...", file=sys.stderr, flush=True)
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            rows = list(pool.map(lambda k: _build(cuda, k, sizes[k], build_dir, arch, build_timeout),
                                 names))
        for i, row in enumerate(rows, 1):
            if row.built and gpu:
                _run(row, build_dir, runs, run_timeout)
            elif row.built:
                row.error = "no GPU (nvidia-smi not found): built, not run"
            print(f"[{i}/{len(rows)}] {row.kernel}: "
                  + (f"{row.gpu_ms:.3f} ms" if row.gpu_ms is not None else (row.build_error or row.error))
                  + (f", its check: {row.non_matching} non-matching" if row.non_matching else ""),
                  file=sys.stderr, flush=True)
    result = {"kind": "polybench-acc-times", "acc": str(cuda), "polybench": str(pb_root),
              "dataset": dataset, "runs": runs, "arch": arch, "gpu": gpu,
              "timing": "PolyBench-ACC's own: gettimeofday around its launches and a synchronize; "
                        "CUDA_MODULE_LOADING=EAGER; median of the runs",
              "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "sizes": sizes, "kernels": [asdict(r) for r in rows]}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=1))
    tmp_out.replace(out)
    return result


def _kernel_of(problem_id: str) -> str:
    """PolyBench/C kernel name of a bench problem id (``linear-algebra/blas/gemm/gemm.c``)."""
    return Path(problem_id).stem


def load_report(path: Path) -> dict[str, Any]:
    """A ``cudaperf bench`` report (``report.json`` or its folder).

    Raises:
        InputError: missing, not JSON, or not a bench report.
    """
    p = path / "report.json" if path.is_dir() else path
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{p}: not a readable JSON report ({exc.__class__.__name__})") from None
    if data.get("kind") != "cudaperf-bench-report":
        raise InputError(f"{p}: not a cudaperf bench report (kind {data.get('kind')!r})")
    return data


def merge_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report's ``problems`` from several (a re-run of some kernels after a change):
    each problem id from the last report that has it, in first-seen order."""
    merged: dict[str, dict[str, Any]] = {}
    for r in reports:
        for p in r.get("problems", []):
            merged[p["id"]] = p
    return {**reports[-1], "problems": list(merged.values())}


def compare(acc: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The per-kernel table of ``acc`` (from :func:`run_acc`) against ``report``: rows
    {kernel, status, ours_ms, acc_ms, ratio (acc_ms / ours_ms), gflops, gbs, acc_non_matching,
    mapping}, and ``geomean`` of ratio over the rows with both times (``n``)."""
    acc_rows = {r["kernel"]: r for r in acc.get("kernels", [])}
    sizes = acc.get("sizes", {})
    problems = {_kernel_of(p["id"]): p for p in report.get("problems", [])}
    rows = []
    for kernel in sorted(set(problems) | set(acc_rows)):
        p, a = problems.get(kernel), acc_rows.get(kernel)
        best = (p or {}).get("best") or {}
        ours = best.get("gpu_ms") if (p or {}).get("correct") else None
        acc_ms = (a or {}).get("gpu_ms")
        s = sizes.get(kernel) or {}
        row = {"kernel": kernel, "status": (p or {}).get("status", "not run"),
               "ours_ms": ours, "acc_ms": acc_ms,
               "ratio": acc_ms / ours if ours and acc_ms else None,
               "gflops": FLOP[kernel](s) / (ours * 1e6) if ours and kernel in FLOP and s else None,
               "gbs": BYTES[kernel](s) / (ours * 1e6) if ours and kernel in BYTES and s else None,
               "acc_non_matching": (a or {}).get("non_matching"),
               "acc_error": (a or {}).get("build_error") or (a or {}).get("error") or "",
               "mapping": best.get("description") or ""}
        rows.append(row)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    return {"rows": rows, "geomean": geomean, "n": len(ratios)}


def _f(x: float | None, fmt: str = "{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)


def compare_table(result: dict[str, Any]) -> str:
    """The table of :func:`compare` as text (one kernel a line)."""
    head = f"{'kernel':<12} {'verdict':<9} {'ours ms':>9} {'hand ms':>9} {'ratio':>7} " \
           f"{'GFLOP/s':>8} {'GB/s':>7}  mapping / note"
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        note = r["mapping"]
        if r["acc_non_matching"]:
            note += f"  [hand-written fails its own check: {r['acc_non_matching']} elements]"
        if r["acc_error"]:
            note += f"  [hand-written: {r['acc_error']}]"
        lines.append(f"{r['kernel']:<12} {r['status']:<9} {_f(r['ours_ms'])!s:>9} "
                     f"{_f(r['acc_ms'])!s:>9} {_f(r['ratio'], '{:.2f}x')!s:>7} "
                     f"{_f(r['gflops'], '{:.0f}')!s:>8} {_f(r['gbs'], '{:.0f}')!s:>7}  {note}")
    lines.append(f"geomean ratio (hand-written ms / ours ms) over {result['n']} kernels with both: "
                 + _f(result["geomean"], "{:.3f}x"))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="build and time PolyBench-ACC's CUDA at PolyBench/C's sizes")
    r.add_argument("--acc", required=True, help="a PolyBench-ACC checkout")
    r.add_argument("--polybench", default=os.environ.get("CUDAPERF_POLYBENCH"),
                   help="a PolyBench/C 4.2.1 checkout (default $CUDAPERF_POLYBENCH)")
    r.add_argument("-o", "--out", required=True, type=Path, help="the JSON file to write")
    r.add_argument("--dataset", default="LARGE", choices=["MINI", "SMALL", "MEDIUM", "LARGE", "EXTRALARGE"])
    r.add_argument("--runs", type=int, default=3, help="runs of each binary (median), default 3")
    r.add_argument("--arch", default="sm_90")
    r.add_argument("--jobs", type=int, default=8, help="parallel nvcc builds")
    r.add_argument("--only", nargs="+", default=[], metavar="NAME")
    c = sub.add_parser("compare", help="the per-kernel table against a bench report")
    c.add_argument("acc_json", type=Path)
    c.add_argument("bench", type=Path, nargs="+",
                   help="report.json of cudaperf bench (or its folder); with several, a "
                        "problem's result comes from the last report that has it")
    c.add_argument("--json", type=Path, help="also write the table as JSON")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            if not args.polybench:
                raise InputError("--polybench (or $CUDAPERF_POLYBENCH) is needed")
            if args.runs < 1:
                raise InputError("--runs must be at least 1")
            if args.out.exists() and not args.out.is_file():
                raise InputError(f"{args.out}: exists and is not a file")
            res = run_acc(Path(args.acc), Path(args.polybench).expanduser().resolve(), args.out,
                          dataset=args.dataset, runs=args.runs, arch=args.arch, jobs=args.jobs,
                          only=args.only)
            timed = sum(1 for k in res["kernels"] if k["gpu_ms"] is not None)
            print(f"{timed} of {len(res['kernels'])} kernels timed; written {args.out}")
        else:
            try:
                acc = json.loads(args.acc_json.read_text())
            except (OSError, ValueError) as exc:
                raise InputError(f"{args.acc_json}: not readable JSON ({exc.__class__.__name__})") from None
            if acc.get("kind") != "polybench-acc-times":
                raise InputError(f"{args.acc_json}: not written by polybench_acc.py run")
            result = compare(acc, merge_reports([load_report(b) for b in args.bench]))
            print(compare_table(result))
            if args.json:
                args.json.write_text(json.dumps(result, indent=1))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
