"""Benchmark metrics: pure functions over candidate records and problem results.

A *candidate record* is one line of a run folder's ``turns.jsonl`` (a
:class:`~cudaperf_cli.agent.loop.TurnRecord` as a dict: ``turn``, ``sample``, ``status``,
``gpu_ms``, ``speedup_kernel``, ``speedup_e2e``, ``structure_score``, ...).  A *problem
result* is the dict :func:`problem_summary` returns (one per problem of a suite).

Definitions (docs/bench.md):

- **speedup** ``<key>``: the record's ``speedup_<key>`` field, baseline time / candidate
  time (``kernel``: CPU reference median / GPU kernel median; ``e2e``: copies included);
  the baseline is named by the record's ``baseline``.
- **best candidate** of a problem: the correct candidate with the lowest median GPU kernel
  time (the first of equals), the rule of the optimize loop; without a correct one, the
  *representative* is the candidate that got furthest (latest status in
  :data:`STATUS_ORDER`; ties: higher structural score, then the later candidate).
- **compile rate**: problems with at least one candidate that compiled / all problems.
- **correct rate**: problems with a correct candidate / all problems.
- **fast_p** (KernelBench): problems that are correct AND have speedup > ``p`` / ALL
  problems (errors and time-outs count in the denominator); ``fast_0`` = correct rate.
- **geometric-mean speedup**: over the correct problems only; mean and median likewise.
- **per-turn curves**: for turn ``t`` (1-based) the best candidate among the candidates of
  turns ``1..t`` (every sample), its speedup ("best so far"), and the fraction of all
  problems correct by turn ``t``; a problem that stopped early keeps its last value.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Mapping, Sequence

#: Candidate statuses, earliest failure first (the optimize loop's order).
STATUS_ORDER: tuple[str, ...] = (
    "pending",
    "refused",
    "format_error",
    "compile_error",
    "compile_timeout",
    "no_device",
    "runtime_error",
    "crash",
    "timeout",
    "wrong",
    "reference_error",
    "correct",
)
#: Statuses of a candidate whose source did not compile (or never existed).
NOT_COMPILED = frozenset({"pending", "refused", "format_error", "compile_error", "compile_timeout"})
#: Problem-level statuses that are not a candidate's (see docs/bench.md).
PROBLEM_TIMEOUT = "problem_timeout"  #: the whole optimize run passed its time limit; killed
PROBLEM_ERROR = "error"  #: optimize refused the problem or died without a result
INTERRUPTED = "interrupted"  #: Ctrl-C stopped it (never stored as done)
#: The thresholds p of fast_p reported for every suite.
FAST_P = (0.0, 1.0, 1.5, 2.0)


def status_rank(status: str | None) -> int:
    """Position of a candidate status in :data:`STATUS_ORDER` (-1 for an unknown one)."""
    try:
        return STATUS_ORDER.index(status or "")
    except ValueError:
        return -1


def _positive(x: Any) -> float | None:
    """``x`` as a float when it is a finite number > 0, else None (``"nan"``, None, 0)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) and x > 0 else None


def speedups_of(record: Mapping[str, Any]) -> dict[str, float]:
    """``{"kernel": 12.0, "e2e": 3.0}`` from a record's ``speedup_<key>`` fields (a
    ``turns.jsonl`` record) or its ``speedups`` table (a ``candidates.jsonl`` row); finite,
    positive values only."""
    out: dict[str, float] = {}
    table = record.get("speedups")
    if isinstance(table, Mapping):
        for key, value in table.items():
            v = _positive(value)
            if v is not None:
                out[str(key)] = v
    for key, value in record.items():
        if key.startswith("speedup_"):
            v = _positive(value)
            if v is not None:
                out[key[len("speedup_"):]] = v
    return out


def best_correct(records: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the correct record with the lowest ``gpu_ms`` (first of equals); a correct
    record without ``gpu_ms`` only when no timed one exists.  ``None``: none correct."""
    best: int | None = None
    for i, r in enumerate(records):
        if r.get("status") != "correct":
            continue
        if best is None:
            best = i
            continue
        mine, theirs = _positive(r.get("gpu_ms")), _positive(records[best].get("gpu_ms"))
        if mine is not None and (theirs is None or mine < theirs):
            best = i
    return best


def representative(records: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the record that stands for the problem: :func:`best_correct`, else the one
    with the latest status (ties: higher ``structure_score``, then the later one).  ``None``
    for no records."""
    if not records:
        return None
    best = best_correct(records)
    if best is not None:
        return best

    def key(i: int) -> tuple[int, float, int]:
        score = records[i].get("structure_score")
        score_v = float(score) if isinstance(score, (int, float)) and math.isfinite(score) else -1.0
        return status_rank(records[i].get("status")), score_v, i

    return max(range(len(records)), key=key)


def _num(x: Any) -> float:
    v = x if isinstance(x, (int, float)) and not isinstance(x, bool) else None
    return float(v) if v is not None and math.isfinite(v) else 0.0


def problem_summary(
    records: Sequence[Mapping[str, Any]],
    *,
    status: str | None = None,
    message: str = "",
) -> dict[str, Any]:
    """Per-problem metrics from its candidate records (in the order they ran).

    Args:
        records: the problem's candidate records.
        status: a problem-level status overriding the candidates' (``problem_timeout``,
            ``error``, ``interrupted``); None: the representative candidate's status
            (``no_candidate`` when there is none).
        message: why, for a problem-level status.

    Returns:
        ``{"status", "message", "correct", "compiled", "best": {turn (1-based), sample
        (1-based), description, status, gpu_ms, gpu_ms_iqr, e2e_ms, cpu_ms} | None,
        "speedups": {key: x} (of the best correct candidate; {} otherwise), "baseline",
        "structure_score" (representative's), "turns_used", "candidate_count",
        "samples_per_turn", "compile_s", "eval_s"}``; times in ms (``*_ms``) and seconds
        (``*_s``: sums over candidates; cached compiles count 0 s).
    """
    rep = representative(records)
    r = records[rep] if rep is not None else None
    correct = status is None and r is not None and r.get("status") == "correct"
    per_turn: dict[int, int] = {}
    for rec in records:
        t = int(rec.get("turn") or 0)
        per_turn[t] = per_turn.get(t, 0) + 1
    best = None
    if r is not None:
        best = {
            "turn": int(r.get("turn") or 0) + 1,
            "sample": int(r.get("sample") or 0) + 1,
            "description": r.get("description"),
            "status": r.get("status"),
            "gpu_ms": r.get("gpu_ms"),
            "gpu_ms_iqr": r.get("gpu_ms_iqr"),
            "e2e_ms": r.get("e2e_ms"),
            "cpu_ms": r.get("cpu_ms"),
        }
    if status is None:
        status = r.get("status") if r is not None else "no_candidate"
        message = r.get("message", "") if r is not None else "optimize recorded no candidate"
    return {
        "status": status,
        "message": message or "",
        "correct": bool(correct),
        "compiled": any(rec.get("status") not in NOT_COMPILED for rec in records),
        "best": best,
        "speedups": speedups_of(r) if correct and r is not None else {},
        "baseline": None if r is None else r.get("baseline"),
        "structure_score": None if r is None else r.get("structure_score"),
        "turns_used": len(per_turn),
        "candidate_count": len(records),
        "samples_per_turn": max(per_turn.values(), default=0),
        "compile_s": sum(_num(rec.get("compile_s")) for rec in records),
        "eval_s": sum(_num(rec.get("eval_s")) for rec in records),
    }


def best_so_far(records: Sequence[Mapping[str, Any]], key: str, turns: int) -> list[float | None]:
    """Speedup ``key`` of the best candidate among turns ``1..t`` for t = 1..``turns``
    (None while no candidate is correct); candidates of a turn are all its samples."""
    out: list[float | None] = []
    for t in range(turns):
        prefix = [r for r in records if int(r.get("turn") or 0) <= t]
        i = best_correct(prefix)
        out.append(None if i is None else speedups_of(prefix[i]).get(key))
    return out


def correct_by_turn(records: Sequence[Mapping[str, Any]], turns: int) -> list[bool]:
    """For t = 1..``turns``: whether some candidate of turns ``1..t`` is correct."""
    out = []
    for t in range(turns):
        out.append(any(r.get("status") == "correct" and int(r.get("turn") or 0) <= t for r in records))
    return out


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values (exp of the mean log); None for none."""
    vals = [v for v in (_positive(x) for x in values) if v is not None]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def fast_p(problems: Sequence[Mapping[str, Any]], p: float, key: str = "kernel") -> float | None:
    """KernelBench fast_p: problems that are correct AND have ``speedups[key] > p``, over
    ALL ``problems`` (None for an empty suite).  A correct problem without that speedup
    counts as not fast."""
    if not problems:
        return None
    hits = 0
    for pr in problems:
        s = (pr.get("speedups") or {}).get(key)
        if pr.get("correct") and s is not None and s > p:
            hits += 1
    return hits / len(problems)


def speedup_stats(problems: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    """Speedup ``key`` over the correct problems: ``n``, ``geomean``, ``mean``, ``median``,
    ``min``, ``max`` (None when n = 0) and ``fast_p`` {"0": .., "1": .., "1.5": .., "2": ..}
    over all problems."""
    vals = [
        float(pr["speedups"][key])
        for pr in problems
        if pr.get("correct") and key in (pr.get("speedups") or {})
    ]
    return {
        "n": len(vals),
        "geomean": geomean(vals),
        "mean": statistics.fmean(vals) if vals else None,
        "median": statistics.median(vals) if vals else None,
        "min": min(vals) if vals else None,
        "max": max(vals) if vals else None,
        "fast_p": {f"{p:g}": fast_p(problems, p, key) for p in FAST_P},
    }


def suite_metrics(problems: Sequence[Mapping[str, Any]], primary: str = "kernel") -> dict[str, Any]:
    """Suite metrics from the problem results (every problem of the suite, errors included).

    Returns:
        ``{"problems", "compiled", "correct", "compile_rate", "correct_rate", "statuses":
        {status: count}, "baselines": [names], "primary": key, "speedup": {key:
        speedup_stats}}``, a ``speedup`` entry for every key found in a correct problem
        (and always ``primary``).
    """
    n = len(problems)
    compiled = sum(1 for pr in problems if pr.get("compiled"))
    correct = sum(1 for pr in problems if pr.get("correct"))
    statuses: dict[str, int] = {}
    for pr in problems:
        st = str(pr.get("status"))
        statuses[st] = statuses.get(st, 0) + 1
    keys = [primary]
    for pr in problems:
        if pr.get("correct"):
            keys += [k for k in (pr.get("speedups") or {}) if k not in keys]
    baselines = sorted({str(pr["baseline"]) for pr in problems if pr.get("baseline")})
    return {
        "problems": n,
        "compiled": compiled,
        "correct": correct,
        "compile_rate": compiled / n if n else None,
        "correct_rate": correct / n if n else None,
        "statuses": dict(sorted(statuses.items())),
        "baselines": baselines,
        "primary": primary,
        "speedup": {k: speedup_stats(problems, k) for k in keys},
    }


def suite_curves(
    per_problem: Sequence[Sequence[Mapping[str, Any]]], key: str, turns: int | None = None
) -> dict[str, Any]:
    """Per-turn curves of a suite from each problem's candidate records.

    Args:
        per_problem: one list of candidate records per problem (an empty list for a
            problem without candidates: it counts as never correct).
        key: the speedup (``kernel``, ``e2e``, ...).
        turns: number of turns (default: the most any problem used).

    Returns:
        ``{"turn": [1..T], "correct_rate": [...], "geomean_best": [...] (over the problems
        correct by that turn; None while none is), "fast_1": [...]}``, each list of length T;
        rates over all problems.
    """
    if turns is None:
        turns = max((int(r.get("turn") or 0) + 1 for recs in per_problem for r in recs), default=0)
    n = len(per_problem)
    bests = [best_so_far(recs, key, turns) for recs in per_problem]
    oks = [correct_by_turn(recs, turns) for recs in per_problem]
    correct_rate, geo, fast1 = [], [], []
    for t in range(turns):
        correct_rate.append(sum(ok[t] for ok in oks) / n if n else None)
        vals = [b[t] for b, ok in zip(bests, oks) if ok[t] and b[t] is not None]
        geo.append(geomean(vals))
        fast1.append(sum(1 for v in vals if v > 1.0) / n if n else None)
    return {"turn": list(range(1, turns + 1)), "correct_rate": correct_rate,
            "geomean_best": geo, "fast_1": fast1}


__all__ = [
    "FAST_P",
    "INTERRUPTED",
    "NOT_COMPILED",
    "PROBLEM_ERROR",
    "PROBLEM_TIMEOUT",
    "STATUS_ORDER",
    "best_correct",
    "best_so_far",
    "correct_by_turn",
    "fast_p",
    "geomean",
    "problem_summary",
    "representative",
    "speedup_stats",
    "speedups_of",
    "status_rank",
    "suite_curves",
    "suite_metrics",
]
