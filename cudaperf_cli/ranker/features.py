"""Feature vector of one CUDA candidate, for the pairwise ranker.

Every candidate gets the same named features, in the order of :data:`FEATURE_NAMES`
(:data:`FEATURES_VERSION` changes whenever a name, an order or a definition changes; a
checkpoint trained on another version is refused).  A value that cannot be known is
``NaN`` (``null`` in JSON); the model imputes it (docs/ranker.md).

Sources of the values:

- ``score_<metric>`` / ``value_<metric>`` for each of the eight structural metrics of
  :data:`cudaperf_cli.structure.model.METRIC_KEYS`: the metric's score in [0, 1] and its
  static value (in the metric's unit: sectors/request, % occupancy, FLOP/B, barriers,
  % active lanes, ways, waves, registers/thread), from
  :func:`cudaperf_cli.structure.score.analyze_source` on the source alone (``sm_90``,
  H200, no ptxas resources: the same analysis ``cudaperf rank`` can run without a compile),
  averaged over the file's analysed kernels that know it.
- ``structure_score`` (mean kernel score, [0, 1]) and ``structure_coverage`` (mean fraction
  of the metric weight that was known, [0, 1]) of that analysis.
- ``registers`` (most registers per thread over the kernels) and ``spill_bytes`` (spill
  stores + loads, bytes per thread, summed over kernels): from the ptxas report recorded
  with the candidate (``candidates.jsonl`` fields ``registers``/``spill_bytes``, or a
  ``turns.jsonl`` record's ``build.resources``); ``NaN`` when not recorded.
- ``block_threads``: the largest compile-time-constant block size (threads) of the
  kernels' ``<<< >>>`` launches; ``NaN`` when no launch has a constant block.
- static counts over the whole file with comments and string literals removed:
  ``n_kernels`` (``__global__`` definitions analysed + not analysed), ``n_loops``
  (``for``/``while``/``do``), ``n_syncthreads`` (``__syncthreads*``), ``n_shared_decls``
  (``__shared__``), ``n_vector_types`` (``float2/4``, ``double2/4``, ``int2/4``,
  ``uint2/4``, ``half2``, ``__half2``, ``__nv_bfloat162``), ``n_atomics`` (``atomic*(``),
  ``n_shuffles`` (``__shfl*_sync``), ``n_unroll_pragmas`` (``#pragma unroll``),
  ``n_restrict`` (``__restrict__``), ``n_ldg`` (``__ldg``).
- ``source_bytes`` (UTF-8 length) and ``source_lines`` of the source as written.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from cudaperf_cli.structure.model import METRIC_KEYS

#: Changes whenever :data:`FEATURE_NAMES` or a definition above changes.
FEATURES_VERSION = 1

#: Analysis settings of the structural features (fixed: features must not depend on the host).
ANALYSIS_ARCH = "sm_90"
ANALYSIS_GPU = "H200"

_COUNT_PATTERNS: tuple[tuple[str, str], ...] = (
    ("n_loops", r"\b(?:for|while)\s*\(|\bdo\s*\{"),
    ("n_syncthreads", r"\b__syncthreads\w*\s*\("),
    ("n_shared_decls", r"\b__shared__\b"),
    ("n_vector_types", r"\b(?:float[24]|double[24]|u?int[24]|__half2|half2|__nv_bfloat162)\b"),
    ("n_atomics", r"\batomic[A-Z]\w*\s*\("),
    ("n_shuffles", r"\b__shfl\w*_sync\s*\("),
    ("n_unroll_pragmas", r"#\s*pragma\s+unroll\b"),
    ("n_restrict", r"\b__restrict__\b"),
    ("n_ldg", r"\b__ldg\s*\("),
)
_COUNTS = tuple((name, re.compile(rx)) for name, rx in _COUNT_PATTERNS)

#: The feature names, in vector order.
FEATURE_NAMES: tuple[str, ...] = (
    *(f"score_{k}" for k in METRIC_KEYS),
    *(f"value_{k}" for k in METRIC_KEYS),
    "structure_score",
    "structure_coverage",
    "registers",
    "spill_bytes",
    "block_threads",
    "n_kernels",
    *(name for name, _ in _COUNT_PATTERNS),
    "source_bytes",
    "source_lines",
)

_COMMENTS_STRINGS = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S
)


def strip_comments_and_strings(source: str) -> str:
    """``source`` without ``//`` and ``/* */`` comments and string/char literals (each
    replaced by one space), so that counts see code only."""
    return _COMMENTS_STRINGS.sub(" ", source)


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _mean(values: Sequence[float | None]) -> float:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else math.nan


def resources_of(record: Mapping[str, Any]) -> tuple[float, float]:
    """``(registers, spill_bytes)`` recorded with a candidate, ``NaN`` where unknown.

    Reads a ``candidates.jsonl`` row's ``registers``/``spill_bytes``, or else a
    ``turns.jsonl`` record's ptxas entries (``build.resources``, or ``build.libs[].resources``
    for a PyTorch candidate): max registers per thread, summed spill store + load bytes.
    """
    regs = _finite(record.get("registers"))
    spill = _finite(record.get("spill_bytes"))
    build = record.get("build") if isinstance(record.get("build"), Mapping) else {}
    entries = list(build.get("resources") or [])
    for lib in build.get("libs") or []:
        if isinstance(lib, Mapping):
            entries.extend(lib.get("resources") or [])
    entries = [e for e in entries if isinstance(e, Mapping)]
    if regs is None and entries:
        regs = max(float(e.get("registers") or 0) for e in entries)
    if spill is None and entries:
        spill = float(sum((e.get("spill_store_bytes") or 0) + (e.get("spill_load_bytes") or 0) for e in entries))
    return (math.nan if regs is None else regs, math.nan if spill is None else spill)


def source_features(
    source: str, *, registers: float | None = None, spill_bytes: float | None = None
) -> dict[str, float]:
    """The features of one CUDA source, ``{name: value}`` for every name of
    :data:`FEATURE_NAMES` (``NaN`` where unknown).

    Args:
        source: the candidate's CUDA source text.
        registers: most registers per thread over its kernels (ptxas), if known.
        spill_bytes: spill stores + loads, bytes per thread (ptxas), if known.

    The structural analysis never raises for an unparsable source: its metrics are then
    ``NaN`` and the counts still apply.
    """
    from cudaperf_cli.structure.score import analyze_source

    out: dict[str, float] = {name: math.nan for name in FEATURE_NAMES}
    try:
        report = analyze_source(source, arch=ANALYSIS_ARCH, gpu=ANALYSIS_GPU)
    except Exception:  # a source the analysis cannot take: counts only
        report = None
    if report is not None:
        kernels = report.kernels
        for key in METRIC_KEYS:
            scores, values = [], []
            for k in kernels:
                m = k.metric(key)
                scores.append(_finite(m.score))
                values.append(_finite(m.value))
            out[f"score_{key}"] = _mean(scores)
            out[f"value_{key}"] = _mean(values)
        out["structure_score"] = _mean([_finite(k.score) for k in kernels])
        out["structure_coverage"] = _mean([_finite(k.coverage) for k in kernels])
        blocks = [
            float(k.launch.block_threads)
            for k in kernels
            if k.launch is not None and k.launch.block is not None
        ]
        out["block_threads"] = max(blocks) if blocks else math.nan
        out["n_kernels"] = float(len(kernels) + len(report.not_analysed))
    else:
        out["n_kernels"] = float(len(re.findall(r"\b__global__\b", strip_comments_and_strings(source))))
    code = strip_comments_and_strings(source)
    for name, rx in _COUNTS:
        out[name] = float(len(rx.findall(code)))
    out["registers"] = math.nan if _finite(registers) is None else float(registers)  # type: ignore[arg-type]
    out["spill_bytes"] = math.nan if _finite(spill_bytes) is None else float(spill_bytes)  # type: ignore[arg-type]
    out["source_bytes"] = float(len(source.encode()))
    out["source_lines"] = float(source.count("\n") + (0 if source.endswith("\n") or not source else 1))
    return out


def vector(features: Mapping[str, Any]) -> list[float]:
    """The features as a list in :data:`FEATURE_NAMES` order (``None``/missing -> ``NaN``)."""
    out = []
    for name in FEATURE_NAMES:
        v = _finite(features.get(name))
        out.append(math.nan if v is None else v)
    return out


def to_json(features: Mapping[str, float]) -> dict[str, float | None]:
    """JSON-ready features: ``NaN`` -> ``None``."""
    return {name: (None if _finite(features.get(name)) is None else float(features[name])) for name in FEATURE_NAMES}


__all__ = [
    "ANALYSIS_ARCH",
    "ANALYSIS_GPU",
    "FEATURES_VERSION",
    "FEATURE_NAMES",
    "resources_of",
    "source_features",
    "strip_comments_and_strings",
    "to_json",
    "vector",
]
