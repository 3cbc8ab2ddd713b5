"""Benchmark metrics: pure functions over candidate records and problem results.

A *candidate record* is one line of a run folder's ``turns.jsonl`` (a
:class:`~cudaperf_cli.agent.loop.TurnRecord` as a dict: ``turn``, ``sample``, ``status``,
``gpu_ms``, ``speedup_kernel``, ``speedup_e2e``, ``structure_score``, ...).  A *problem
result* is the dict :func:`problem_summary` returns (one per problem of a suite).

Definitions (docs/bench.md):

- **speedup** ``<key>``: the record's ``speedup_<key>`` field, baseline time / candidate
  time (``kernel``: CPU reference median / GPU kernel median; ``e2e``: copies included);
  the baseline is named by the record's ``baseline``.
- **verified**: status ``correct`` or ``slow`` (``cudaperf_cli.statuses.VERIFIED``; a
  ``slow`` candidate was verified, its timing stopped after the warm-up and its time is that
  estimate).  A problem's ``correct`` field means verified.
- **best candidate** of a problem: the verified candidate with the lowest median GPU kernel
  time (the first of equals), the rule of the optimize loop; without a verified one, the
  *representative* is the candidate that got furthest (latest status in
  :data:`STATUS_ORDER`, the one table ``cudaperf_cli.statuses.ORDER``; ties: higher
  structural score, then the later candidate).
- **compile rate**: problems with at least one candidate that compiled / all problems.
- **correct rate**: problems with a verified candidate / all problems.
- **fast_p** (KernelBench): problems that are correct AND have speedup > ``p`` / ALL
  problems (errors and time-outs count in the denominator); ``fast_0`` = correct rate.
- **geometric-mean speedup**: over the correct problems only; mean and median likewise.
- **per-turn curves**: for turn ``t`` (1-based) the best candidate among the candidates of
  turns ``1..t`` (every sample), its speedup ("best so far"), and the fraction of all
  problems correct by turn ``t``; a problem that stopped early keeps its last value.
- **verdicts**: how many problems end in each status (:func:`verdicts`), the reasons of the
  problem-level ones, the degenerate count.
- **memory**: peak GPU bytes of each evaluation against its problem's footprint, the worst
  ratios (:func:`memory_ratios`).
- **evaluation seconds**: median and p90 of each candidate's evaluation seconds, with the
  GPU-lock wait apart, per kind (:func:`eval_seconds`).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Mapping, Sequence

from cudaperf_cli import statuses as S

#: Candidate statuses, earliest failure first: the one table (``statuses.ORDER``).
STATUS_ORDER: tuple[str, ...] = S.NAMES
#: Statuses of a candidate whose source did not compile (or never existed).
NOT_COMPILED = S.NOT_COMPILED
#: Statuses of a verified candidate (``correct``, ``slow``).
VERIFIED = S.VERIFIED
#: Problem-level statuses of the bench itself (not a candidate's; see docs/bench.md).
PROBLEM_TIMEOUT = "problem_timeout"  #: the whole optimize run passed its time limit; killed
PROBLEM_ERROR = "error"  #: optimize died or ended without a result (a crash, a missing tool)
REFUSED_AT_LOAD = "refused_at_load"  #: optimize refused the problem (exit 2: bad input); its reason
NO_CANDIDATE = "no_candidate"  #: optimize ran no turn
INTERRUPTED = "interrupted"  #: Ctrl-C stopped it (never stored as done)
#: optimize stopped before any work: a package or tool it needs is missing here (exit 3:
#: torch for a PyTorch problem on a machine without it); the machine's, not the policy's
MISSING_TOOL = "missing_tool"
#: optimize reported the problem itself does not fit the device (``problem_status``, exit 5).
DOES_NOT_FIT = S.DOES_NOT_FIT
#: The bench's problem-level statuses: name -> (label, Rich style); after the candidate
#: statuses in :data:`VERDICT_ORDER`.
BENCH_STATUSES: dict[str, tuple[str, str]] = {
    REFUSED_AT_LOAD: ("refused at load", "yellow"),
    NO_CANDIDATE: ("no candidate", "yellow"),
    PROBLEM_TIMEOUT: ("problem timeout", "red"),
    PROBLEM_ERROR: ("error", "red"),
    MISSING_TOOL: ("missing tool", "cyan"),
    INTERRUPTED: ("interrupted", "dim"),
}
#: Order of the verdict table: the furthest status first (``correct``, ``slow``, ``wrong``,
#: ... ``refused``), then the bench's own; an unknown status goes last.
VERDICT_ORDER: tuple[str, ...] = (
    tuple(n for n in reversed(S.NAMES) if n != S.PENDING) + (S.PENDING, *BENCH_STATUSES))
#: Problem statuses whose ``message`` is the verdict's reason (listed in the reports).
WITH_REASON = frozenset({REFUSED_AT_LOAD, DOES_NOT_FIT, PROBLEM_ERROR, PROBLEM_TIMEOUT,
                         NO_CANDIDATE, S.REFERENCE_ERROR, S.REFUSED, MISSING_TOOL})
#: Of those, the statuses whose reasons the reports group by message (KernelBench level 1:
#: 65 policy refusals, most of them "nothing to fuse: conv2d is left to cuDNN").
GROUPED_REASONS = frozenset({S.REFUSED})
#: The thresholds p of fast_p reported for every suite.
FAST_P = (0.0, 1.0, 1.5, 2.0)
#: Worst memory ratios listed (:func:`memory_ratios`).
MEMORY_WORST = 5
#: Peak GPU memory bound of one evaluation (docs/bench.md, issue 21): this many times the
#: problem's footprint, plus the L2-flush buffer.
MEMORY_BOUND_FACTOR = 3.0


def status_rank(status: str | None) -> int:
    """Position of a candidate status in :data:`STATUS_ORDER` (-1 for an unknown one)."""
    return S.rank(status)


def status_label(status: str | None) -> str:
    """Short human label of a candidate or bench status (``"compile error"``,
    ``"refused at load"``); the name itself when unknown.  ``refused`` reads ``refused
    (policy)`` (the policy produced no candidate), apart from ``refused at load``."""
    name = status or "?"
    if name == S.REFUSED:
        return "refused (policy)"
    info = S.info(name)
    if info is not None:
        return info.label
    return BENCH_STATUSES.get(name, (name, ""))[0]


def status_style(status: str | None) -> str:
    """Rich style of a candidate or bench status ("" when unknown)."""
    info = S.info(status)
    if info is not None:
        return info.style
    return BENCH_STATUSES.get(status or "", ("", ""))[1]


def outcome_class(status: str | None) -> str:
    """How the progress tallies count a problem's status: ``"correct"`` (verified),
    ``"no_device"`` (compiled; not verified: no usable CUDA device, not a failure),
    ``"does_not_fit"`` (the problem's planned memory exceeds the device's: a verdict on the
    problem, not a failure), ``"missing_tool"`` (not run: a package or tool is missing
    here) or ``"failed"`` (everything else)."""
    if status in VERIFIED:
        return "correct"
    if status == S.NO_DEVICE:
        return "no_device"
    if status == S.DOES_NOT_FIT:
        return "does_not_fit"
    if status == MISSING_TOOL:
        return "missing_tool"
    return "failed"


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
    """Index of the verified record (``correct`` or ``slow``) with the lowest ``gpu_ms``
    (first of equals); a verified record without ``gpu_ms`` only when no timed one exists.
    ``None``: none verified.  A ``slow`` record's ``gpu_ms`` is its estimate, at least
    ``--slow-factor`` times the best's, so it is the best only when nothing faster is."""
    best: int | None = None
    for i, r in enumerate(records):
        if r.get("status") not in VERIFIED:
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


def _finite(x: Any) -> float | None:
    """``x`` as a float when it is a finite number (bools are not), else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


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
            ``error``, ``refused_at_load``, ``does_not_fit``, ``interrupted``); None: the
            representative candidate's status (``no_candidate`` when there is none).
        message: why, for a problem-level status.

    Returns:
        ``{"status", "message", "correct" (verified: correct or slow), "compiled", "best":
        {turn (1-based), sample (1-based), description, status, gpu_ms, gpu_ms_iqr, e2e_ms,
        cpu_ms} | None, "speedups": {key: x} (of the best verified candidate; {} otherwise),
        "baseline", "structure_score" (representative's), "turns_used", "candidate_count",
        "samples_per_turn", "compile_s", "eval_s", "lock_wait_s", "prepare_s",
        "peak_gpu_bytes" (the most of any evaluation; None when none reported it)}``; times
        in ms (``*_ms``) and seconds (``*_s``: sums over candidates, ``lock_wait_s`` and
        ``prepare_s`` being parts of ``eval_s``; cached compiles count 0 s).
    """
    rep = representative(records)
    r = records[rep] if rep is not None else None
    correct = status is None and r is not None and r.get("status") in VERIFIED
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
        status = r.get("status") if r is not None else NO_CANDIDATE
        message = r.get("message", "") if r is not None else "optimize recorded no candidate"
    peaks = [v for v in (_finite(rec.get("peak_gpu_bytes")) for rec in records) if v is not None]
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
        "lock_wait_s": sum(_num(rec.get("lock_wait_s")) for rec in records),
        "prepare_s": sum(_num(rec.get("prepare_s")) for rec in records),
        "peak_gpu_bytes": int(max(peaks)) if peaks else None,
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
    """For t = 1..``turns``: whether some candidate of turns ``1..t`` is verified."""
    out = []
    for t in range(turns):
        out.append(any(r.get("status") in VERIFIED and int(r.get("turn") or 0) <= t for r in records))
    return out


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values (exp of the mean log); None for none."""
    vals = [v for v in (_positive(x) for x in values) if v is not None]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def fast_p(problems: Sequence[Mapping[str, Any]], p: float, key: str = "kernel") -> float | None:
    """KernelBench fast_p: problems that are correct AND have ``speedups[key] > p``, over
    ALL ``problems`` that ran (None for an empty suite): a ``missing_tool`` problem (torch
    missing on this machine) is left out, as from the correct rate, so fast_0 stays the
    correct rate.  A correct problem without that speedup counts as not fast."""
    problems = [pr for pr in problems if pr.get("status") != MISSING_TOOL]
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
        ``{"problems", "ran" (not ``missing_tool``), "compiled", "correct" (verified),
        "compile_rate", "correct_rate" (both over ``ran``),
        "statuses": {status: count}, "outcomes": {correct, no_device, does_not_fit, failed}
        (:func:`outcome_class` counts), "baselines": [names], "primary": key, "speedup":
        {key: speedup_stats}, "verdicts": :func:`verdicts`, "degenerate": count,
        "memory": :func:`memory_ratios`, "eval_seconds": :func:`eval_seconds`}``, a
        ``speedup`` entry for every key found in a correct problem (and always
        ``primary``).  ``memory`` and ``eval_seconds`` read each problem's ``candidates``
        (the candidates.jsonl rows); a problem without them contributes nothing.
    """
    n = len(problems)
    # the rates are over the problems that ran: one whose package is missing here (torch)
    # says nothing about the policy
    ran = n - sum(1 for pr in problems if pr.get("status") == MISSING_TOOL)
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
    outcomes = {"correct": 0, "no_device": 0, "does_not_fit": 0, "missing_tool": 0, "failed": 0}
    for pr in problems:
        outcomes[outcome_class(pr.get("status"))] += 1
    rows = [c for pr in problems for c in (pr.get("candidates") or [])]
    v = verdicts(problems)
    return {
        "problems": n,
        "compiled": compiled,
        "correct": correct,
        "ran": ran,
        "compile_rate": compiled / ran if ran else None,
        "correct_rate": correct / ran if ran else None,
        "statuses": dict(sorted(statuses.items())),
        "outcomes": outcomes,
        "baselines": baselines,
        "primary": primary,
        "speedup": {k: speedup_stats(problems, k) for k in keys},
        "verdicts": v,
        "degenerate": v["degenerate"],
        "memory": memory_ratios(problems),
        "eval_seconds": eval_seconds(rows),
    }


def quantile(values: Iterable[float], q: float) -> float | None:
    """The ``q`` quantile (0 <= q <= 1) of ``values``, interpolating linearly between order
    statistics: position ``q * (n - 1)`` in the sorted values (Hyndman & Fan type 7, numpy's
    default ``linear`` method and ``statistics.quantiles(method="inclusive")``).  None for
    no values; non-finite values are left out.

    Raises:
        ValueError: ``q`` outside [0, 1].
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a quantile must be in [0, 1], not {q}")
    vals = sorted(v for v in (_finite(x) for x in values) if v is not None)
    if not vals:
        return None
    pos = q * (len(vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def _group_reasons(items: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    groups: dict[str, list[str]] = {}
    for it in items:
        groups.setdefault(it["message"] or "(no message)", []).append(it["problem"])
    return [{"message": msg, "count": len(ids), "problems": ids}
            for msg, ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def verdicts(problems: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How many problems end in each status, in :data:`VERDICT_ORDER` (``correct``,
    ``slow``, ``wrong`` ... then ``refused_at_load``, ``problem_timeout``, ``error``).

    Returns:
        ``{"order": [statuses present, in order], "counts": {status: n}, "labels": {status:
        label}, "by_kind": {kind: {status: n}} ("c", "torch"), "reasons": {status:
        [{"problem": id, "message": one line}]} for the statuses of :data:`WITH_REASON`,
        "grouped": {status: [{"message", "count", "problems": [ids]}]} for those of
        :data:`GROUPED_REASONS` (most frequent message first),
        "degenerate": problems flagged degenerate (outputs independent of the inputs),
        "degenerate_problems": [ids]}``.
    """
    counts: dict[str, int] = {}
    by_kind: dict[str, dict[str, int]] = {}
    reasons: dict[str, list[dict[str, str]]] = {}
    degenerate: list[str] = []
    for pr in problems:
        st = str(pr.get("status"))
        counts[st] = counts.get(st, 0) + 1
        kind = str(pr.get("kind") or "?")
        by_kind.setdefault(kind, {})
        by_kind[kind][st] = by_kind[kind].get(st, 0) + 1
        if st in WITH_REASON:
            reasons.setdefault(st, []).append(
                {"problem": str(pr.get("id")), "message": str(pr.get("message") or "")})
        if pr.get("degenerate"):
            degenerate.append(str(pr.get("id")))
    rank = {name: i for i, name in enumerate(VERDICT_ORDER)}
    order = sorted(counts, key=lambda st: (rank.get(st, len(rank)), st))
    return {
        "order": order,
        "counts": {st: counts[st] for st in order},
        "labels": {st: status_label(st) for st in order},
        "by_kind": {k: {st: v[st] for st in order if st in v} for k, v in sorted(by_kind.items())},
        "reasons": {st: reasons[st] for st in order if st in reasons},
        "grouped": {st: _group_reasons(reasons[st]) for st in order if st in reasons and st in GROUPED_REASONS},
        "degenerate": len(degenerate),
        "degenerate_problems": degenerate,
    }


def memory_ratios(problems: Sequence[Mapping[str, Any]], worst: int = MEMORY_WORST) -> dict[str, Any]:
    """Peak GPU memory of each evaluation against its problem's footprint.

    An evaluation counts when its candidate row has ``peak_gpu_bytes`` and a footprint
    (the row's ``footprint_bytes``, else the problem's), both > 0.  For each problem the
    evaluation with the highest ratio ``peak_gpu_bytes / footprint_bytes`` stands for it;
    the ``worst`` problems by that ratio are listed.  ``bound_bytes`` =
    :data:`MEMORY_BOUND_FACTOR` x footprint + the L2-flush buffer (the problem's
    ``memory.flush_bytes``), or the evaluation's own plan (``memory.gpu_bytes``) when that is
    larger (a C plan counts 128 KiB of guard zones per array: PolyBench's durbin, 32 KB of
    arrays, planned 0.269 GB with the flush and peaked there), None when the flush size is
    not recorded.  The footprint
    (inputs, outputs, parameters, buffers) leaves out what the reference itself needs while
    it runs: KernelBench's ``23_Conv3d_GroupNorm_Mean`` has a 38 MB footprint and a
    convolution output, cuDNN workspace and flush buffer that took the reference alone to
    793 MB on an H200.  Where the problem's ``reference_peak_gpu_bytes`` (the baseline job:
    the reference alone) is known, ``over_reference_bytes`` = peak - that, the evaluation's
    own addition, and the bound is the larger of the above and that peak +
    (MEMORY_BOUND_FACTOR - 1) x footprint (the candidate's outputs and a stored copy).

    Returns:
        ``{"evaluations": n counted, "problems": problems with one, "max_ratio", "worst":
        [{"problem", "kind", "turn", "sample" (1-based), "peak_gpu_bytes",
        "footprint_bytes", "ratio", "flush_bytes", "reference_peak_gpu_bytes",
        "over_reference_bytes", "bound_bytes", "within_bound"}], "with_bound": problems
        whose bound is known, "over_bound": those whose worst evaluation passed it}``;
        bytes are bytes, ratios dimensionless.
    """
    per_problem: list[dict[str, Any]] = []
    n = 0
    for pr in problems:
        memory = pr.get("memory") if isinstance(pr.get("memory"), Mapping) else {}
        flush = _finite(memory.get("flush_bytes"))
        planned = _positive(memory.get("gpu_bytes"))
        ref_peak = _positive(pr.get("reference_peak_gpu_bytes"))
        top: dict[str, Any] | None = None
        for c in pr.get("candidates") or []:
            peak = _positive(c.get("peak_gpu_bytes"))
            foot = _positive(c.get("footprint_bytes")) or _positive(pr.get("footprint_bytes"))
            if peak is None or foot is None:
                continue
            n += 1
            ratio = peak / foot
            if top is None or ratio > top["ratio"]:
                bound = None if flush is None else MEMORY_BOUND_FACTOR * foot + flush
                if bound is not None and planned is not None:
                    bound = max(bound, planned)
                if ref_peak is not None:
                    bound = max(bound or 0.0, ref_peak + (MEMORY_BOUND_FACTOR - 1) * foot)
                top = {
                    "problem": pr.get("id"), "kind": pr.get("kind"),
                    "turn": int(c.get("turn") or 0) + 1, "sample": int(c.get("sample") or 0) + 1,
                    "peak_gpu_bytes": int(peak), "footprint_bytes": int(foot), "ratio": ratio,
                    "flush_bytes": None if flush is None else int(flush),
                    "reference_peak_gpu_bytes": None if ref_peak is None else int(ref_peak),
                    "over_reference_bytes": None if ref_peak is None else int(peak - ref_peak),
                    "bound_bytes": None if bound is None else int(bound),
                    "within_bound": None if bound is None else peak <= bound,
                }
        if top is not None:
            per_problem.append(top)
    per_problem.sort(key=lambda x: -x["ratio"])
    bounded = [x for x in per_problem if x["within_bound"] is not None]
    return {
        "evaluations": n,
        "problems": len(per_problem),
        "max_ratio": per_problem[0]["ratio"] if per_problem else None,
        "worst": per_problem[:max(0, worst)],
        "with_bound": len(bounded),
        "over_bound": [x["problem"] for x in bounded if not x["within_bound"]],
    }


def _spread(values: Sequence[float]) -> dict[str, Any]:
    return {"n": len(values), "median": quantile(values, 0.5), "p90": quantile(values, 0.9),
            "max": max(values) if values else None}


def eval_seconds(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Seconds per candidate evaluation, per problem kind and over all.

    Over the candidate rows with an ``eval_s`` (the whole evaluation, GPU-lock wait
    included; candidates that never reached the evaluation have none), ``no_device`` rows
    left out (nothing was evaluated: on a machine without a GPU a PyTorch worker still
    imported torch before finding no device, about 5 s that measured nothing):

    - ``eval_s``: that time;
    - ``excl_lock_s``: ``eval_s - lock_wait_s`` (the evaluation's own time; a row without
      ``lock_wait_s`` counts its whole ``eval_s``);
    - ``lock_wait_s``: the wait for the GPU lock (rows that report it);
    - ``prepare_s``: the preparation before the lock (rows that report it);
    - ``phases``: ``{phase: spread}`` of the worker's seconds per phase (``phase_s``:
      ``startup``, ``device``, ``load_problem``, ``gpu_wait``, ``verify``, ``timing``, ...)
      over the rows that report it.

    Returns:
        ``{kind: {"eval_s", "excl_lock_s", "lock_wait_s", "prepare_s", "phases"}}`` for each
        kind present (``"c"``, ``"torch"``) and ``"all"``; each spread ``{"n", "median",
        "p90", "max"}`` in seconds (None when n = 0); p90 by :func:`quantile`.
    """
    groups: dict[str, dict[str, list[float]]] = {}
    phases: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        total = _finite(r.get("eval_s"))
        if total is None or r.get("status") == S.NO_DEVICE:
            continue
        wait = _finite(r.get("lock_wait_s"))
        prep = _finite(r.get("prepare_s"))
        for kind in (str(r.get("kind") or "?"), "all"):
            g = groups.setdefault(kind, {"eval_s": [], "excl_lock_s": [], "lock_wait_s": [],
                                         "prepare_s": []})
            g["eval_s"].append(total)
            g["excl_lock_s"].append(max(0.0, total - (wait or 0.0)))
            if wait is not None:
                g["lock_wait_s"].append(wait)
            if prep is not None:
                g["prepare_s"].append(prep)
            for name, sec in (r.get("phase_s") or {}).items():
                v = _finite(sec)
                if v is not None:
                    phases.setdefault(kind, {}).setdefault(str(name), []).append(v)
    order = sorted(k for k in groups if k != "all") + (["all"] if "all" in groups else [])
    return {k: {**{name: _spread(vals) for name, vals in groups[k].items()},
                "phases": {p: _spread(v) for p, v in sorted(phases.get(k, {}).items(),
                                                            key=lambda kv: -(quantile(kv[1], 0.5) or 0))}}
            for k in order}


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
    "BENCH_STATUSES",
    "DOES_NOT_FIT",
    "FAST_P",
    "INTERRUPTED",
    "MEMORY_BOUND_FACTOR",
    "MEMORY_WORST",
    "NOT_COMPILED",
    "NO_CANDIDATE",
    "PROBLEM_ERROR",
    "PROBLEM_TIMEOUT",
    "REFUSED_AT_LOAD",
    "STATUS_ORDER",
    "VERDICT_ORDER",
    "VERIFIED",
    "WITH_REASON",
    "best_correct",
    "best_so_far",
    "correct_by_turn",
    "eval_seconds",
    "fast_p",
    "geomean",
    "memory_ratios",
    "outcome_class",
    "problem_summary",
    "quantile",
    "representative",
    "speedup_stats",
    "speedups_of",
    "status_label",
    "status_rank",
    "status_style",
    "suite_curves",
    "suite_metrics",
    "verdicts",
]
