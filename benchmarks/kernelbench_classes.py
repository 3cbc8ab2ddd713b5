"""KernelBench results of ``cudaperf bench`` per operator class: files, accepted, correct,
geomean speedups against PyTorch eager and torch.compile, and the effective DRAM bandwidth
of the best candidates (a benchmark: it prints figures; it asserts nothing).

    python benchmarks/kernelbench_classes.py REPORT.json [REPORT.json ...] [--peak-gbs 4800] [--json FILE]

Each ``REPORT.json`` is a bench report (``cudaperf bench run <KernelBench>/level1 -o DIR``
writes ``DIR/report.json``); several reports (levels, or parts of a level run in separate
calls) are pooled, the last report winning for a file present twice.  No KernelBench code
is in this file: the class of a problem is read from its file name (KernelBench names each
file after its operators, ``23_Softmax.py``, ``11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_
GroupNorm.py``); a level-2 file (a GEMM or convolution with a tail) is classed by the
heaviest operator of its tail (norm, then pooling, then reduction/softmax, else elementwise).

Columns:

- ``accepted``: the policy wrote a candidate (not refused and not failed to load);
- ``correct``: its best candidate verified (``correct`` or ``slow``);
- ``vs eager``/``vs compile``: geometric means of the best verified candidate's speedups
  over the class's correct files (torch.compile only where the run timed it);
- ``GB/s``: the median over the class's correct files of the *effective bandwidth*, the
  problem's footprint (inputs, outputs, parameters and buffers, bytes; the report's
  ``footprint_bytes``) divided by the best candidate's time (``best.gpu_ms``): the
  compulsory traffic (each byte read or written once) per second, the usual figure of
  merit of a memory-bound kernel.  A kernel that reads its input twice (a two-pass
  variance) moves more than this.  ``% peak`` divides it by ``--peak-gbs`` (4800 GB/s: the
  H200 SXM's HBM3e, NVIDIA H200 datasheet).  For GEMM/convolution classes (compute-bound)
  the figure says little.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterable

#: (class, pattern on the file name) for level 1, first match wins.
LEVEL1_CLASSES: tuple[tuple[str, str], ...] = (
    ("attention", r"Attention"),
    ("loss", r"Loss"),
    ("scan", r"cumsum|cumprod"),
    ("index reduction", r"Argmax|Argmin"),
    ("softmax", r"Softmax"),
    ("norm", r"Norm"),
    ("pooling", r"Pooling"),
    ("reduction", r"reduction"),
    ("gemm/conv", r"[Mm]atmul|[Mm]atrix|[Cc]onv|Gemm|GEMM|multiplication"),
    ("activation", r"ReLU|Sigmoid|Tanh|Swish|GELU|Gelu|SELU|Softplus|Softsign|ELU|HardTanh"),
)

#: Tail classes of level 2, heaviest first.
LEVEL2_TAILS: tuple[tuple[str, str], ...] = (
    ("gemm/conv + norm", r"Norm"),
    ("gemm/conv + pooling", r"Pool"),
    ("gemm/conv + reduction/softmax", r"Sum|Mean|Max|Min|Softmax|LogSumExp|Logsumexp|Reduction"),
)

PEAK_GBS = 4800.0  # H200 SXM HBM3e (NVIDIA H200 Tensor Core GPU datasheet)
VERIFIED = ("correct", "slow")
NOT_ACCEPTED = ("refused", "refused_at_load", "error", "no_candidate", "does_not_fit")


def operator_class(file: str, level: str) -> str:
    """The class of a KernelBench file from its name (``level``: ``"level1"``/``"level2"``,
    read from the problem's path)."""
    name = Path(file).name
    if level == "level2":
        tail = re.sub(r"^\d+_(Matmul|Gemm|GEMM|ConvTranspose\dd|Conv\dd|Conv_?\dD|BMM|Bmm)_?", "", name)
        for cls, pat in LEVEL2_TAILS:
            if re.search(pat, tail):
                return cls
        return "gemm/conv + elementwise"
    for cls, pat in LEVEL1_CLASSES:
        if re.search(pat, name):
            return cls
    return "other"


def _level(p: dict[str, Any]) -> str:
    parts = Path(str(p.get("file") or "")).parts
    return next((x for x in reversed(parts) if re.fullmatch(r"level\d", x)), "level?")


def _geomean(xs: Iterable[float]) -> float | None:
    v = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def _median(xs: list[float]) -> float | None:
    v = sorted(xs)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def effective_gbs(p: dict[str, Any]) -> float | None:
    """Footprint (bytes) / best candidate time, GB/s (1e9 bytes); None without both."""
    ms = (p.get("best") or {}).get("gpu_ms")
    fp = p.get("footprint_bytes")
    if not ms or not fp or ms <= 0:
        return None
    return float(fp) / (float(ms) * 1e-3) / 1e9


def load_problems(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The reports' problems, pooled by (level, file name), the last report winning.

    Raises:
        SystemExit: a report that cannot be read (one line on stderr, exit 2).
    """
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        try:
            rep = json.loads(Path(path).read_text())
            problems = rep["problems"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"error: {path}: not a cudaperf bench report ({exc})", file=sys.stderr)
            raise SystemExit(2) from None
        for p in problems:
            by[(_level(p), Path(str(p.get("file") or p.get("id"))).name)] = p
    return list(by.values())


def class_table(problems: list[dict[str, Any]], peak_gbs: float = PEAK_GBS) -> list[dict[str, Any]]:
    """One row per (level, class), then one per level and one for everything: ``files``,
    ``accepted``, ``correct``, ``vs_eager``, ``vs_compile`` (geomeans; None when no file
    has one), ``gbs`` (median effective GB/s), ``peak`` (fraction of ``peak_gbs``),
    ``members`` (file names)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in problems:
        lv = _level(p)
        groups.setdefault((lv, operator_class(str(p.get("file") or p.get("id")), lv)), []).append(p)

    def row(level: str, cls: str, ps: list[dict[str, Any]]) -> dict[str, Any]:
        ok = [p for p in ps if p.get("status") in VERIFIED]
        gbs = _median([g for g in (effective_gbs(p) for p in ok) if g is not None])
        return {
            "level": level, "class": cls, "files": len(ps),
            "accepted": sum(1 for p in ps if p.get("status") not in NOT_ACCEPTED),
            "correct": len(ok),
            "vs_eager": _geomean((p.get("speedups") or {}).get("kernel") for p in ok),
            "vs_compile": _geomean((p.get("speedups") or {}).get("compile") for p in ok),
            "gbs": gbs, "peak": None if gbs is None else gbs / peak_gbs,
            "members": sorted(Path(str(p.get("file") or p.get("id"))).name for p in ps),
        }

    rows = [row(lv, cls, ps) for (lv, cls), ps in sorted(groups.items())]
    for lv in sorted({lv for lv, _ in groups}):
        rows.append(row(lv, "all", [p for (l2, _), ps in groups.items() if l2 == lv for p in ps]))
    rows.append(row("all", "all", problems))
    return rows


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}x"


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| level | class | files | accepted | correct | vs eager | vs compile | GB/s (median) | % of peak |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        gbs = "-" if r["gbs"] is None else f"{r['gbs']:.0f}"
        peak = "-" if r["peak"] is None else f"{100 * r['peak']:.0f}%"
        out.append(f"| {r['level']} | {r['class']} | {r['files']} | {r['accepted']} | {r['correct']} | "
                   f"{_x(r['vs_eager'])} | {_x(r['vs_compile'])} | {gbs} | {peak} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", type=Path, help="bench report.json files (KernelBench levels)")
    ap.add_argument("--peak-gbs", type=float, default=PEAK_GBS, help="DRAM peak, GB/s (default: H200, 4800)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--files", action="store_true", help="also print each file's status, speedups and GB/s")
    a = ap.parse_args(argv)
    if a.peak_gbs <= 0:
        print("error: --peak-gbs must be positive", file=sys.stderr)
        return 2
    problems = load_problems(a.reports)
    if not problems:
        print("error: the reports hold no problems", file=sys.stderr)
        return 2
    rows = class_table(problems, a.peak_gbs)
    print(markdown(rows))
    if a.files:
        print()
        for p in sorted(problems, key=lambda p: (_level(p), operator_class(str(p.get("file")), _level(p)), str(p.get("id")))):
            sp = p.get("speedups") or {}
            g = effective_gbs(p) if p.get("status") in VERIFIED else None
            print(f"{_level(p)} {operator_class(str(p.get('file')), _level(p)):32} {str(p.get('id')):48} "
                  f"{str(p.get('status')):10} {_x(sp.get('kernel')):>8} {_x(sp.get('compile')):>8} "
                  f"{'-' if g is None else f'{g:.0f} GB/s':>10}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
