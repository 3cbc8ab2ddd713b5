"""Timing statistics and repetition policy (pure Python, no device).

All times are milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from cudaperf_cli.evaluate.job import TimingSettings, TimingStats

MIB = 1 << 20
#: Smallest L2 flush buffer, bytes (the buffer is max(2 x L2, this)).
MIN_FLUSH_BYTES = 256 * MIB
#: Speedups above this are flagged for a second look.
SUSPICIOUS_SPEEDUP = 10.0


def summarize(samples_ms: Sequence[float]) -> TimingStats:
    """Median, min, max, quartiles (linear interpolation) and mean of samples in ms.

    Raises:
        ValueError: no samples.
    """
    a = np.asarray(list(samples_ms), dtype=np.float64)
    if a.size == 0:
        raise ValueError("no timing samples")
    p25, med, p75 = np.percentile(a, [25, 50, 75])
    return TimingStats(
        n=int(a.size),
        median_ms=float(med),
        min_ms=float(a.min()),
        max_ms=float(a.max()),
        p25_ms=float(p25),
        p75_ms=float(p75),
        mean_ms=float(a.mean()),
    )


def need_more_reps(n: int, total_ms: float, settings: TimingSettings) -> bool:
    """Whether to run another timed repetition after ``n`` reps summing to ``total_ms``.

    Keep going until at least ``min_reps`` reps *and* ``min_total_ms`` of timed time; never
    more than ``max_reps``; stop once ``max_total_ms`` is reached (at least 1 rep, as
    :func:`plan_reps`).
    """
    if n >= settings.max_reps:
        return False
    if total_ms >= settings.max_total_ms and n >= 1:
        return False
    return n < settings.min_reps or total_ms < settings.min_total_ms


#: Calls run for the estimate when the first call is shorter than ``warmup_ms``.
ESTIMATE_CALLS = 5
#: Timed repetitions enqueued between two synchronisations.
BATCH = 10


@dataclass
class RepTiming:
    """What :func:`time_repetitions` measured; every time in ms.

    Attributes:
        samples: the timed repetitions (the reported statistics); empty when ``slow``.
        warmup: the warm-up calls' times (the estimate's; not reported as the timing).
        estimate_ms: the time of one call estimated from the warm-up (the median of the
            calls after the first, or the first alone when it was long).
        planned: the repetitions planned from the estimate (``len(samples)``).
        slow: the estimate passed ``slow_ms``: nothing was timed after the warm-up.
    """

    samples: list[float] = field(default_factory=list)
    warmup: list[float] = field(default_factory=list)
    estimate_ms: float = 0.0
    planned: int = 0
    slow: bool = False


def plan_reps(estimate_ms: float, settings: TimingSettings) -> int:
    """Timed repetitions for a call of about ``estimate_ms``: enough to sum to
    ``min_total_ms`` (do_bench's ``rep / estimate``), within ``[min_reps, max_reps]``, and
    never planned past ``max_total_ms``; at least 1 (do_bench's ``max(1, rep / estimate)``:
    a 765 ms PolyBench kernel gets 2 repetitions in 2 s, a 15 s one 1)."""
    est = max(float(estimate_ms), 1e-4)
    lo, hi = max(int(settings.min_reps), 1), max(int(settings.max_reps), 1)
    n = min(max(math.ceil(settings.min_total_ms / est), lo), hi)
    cap = math.floor(settings.max_total_ms / est)
    return max(min(n, cap), 1)


def time_repetitions(
    run: Callable[[int], list[float]],
    settings: TimingSettings,
    *,
    slow_ms: float | None = None,
    warm: bool = False,
    first_ms: float | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> RepTiming:
    """The one timing loop of both workers (C and PyTorch).

    Args:
        run: ``run(k)`` enqueues ``k`` repetitions (each: the untimed set-up such as the L2
            flush, a start event, the call, an end event), synchronises, and returns the
            ``k`` event times in ms.  The worker supplies it (cuda.core events for C,
            ``torch.cuda.Event`` for PyTorch).
        settings: :class:`~cudaperf_cli.evaluate.job.TimingSettings`.
        slow_ms: stop after the warm-up when the estimate of one call passes this (the
            candidate is then ``slow``); None: never.
        warm: the callable already ran in this process (verification called the candidate:
            its module is loaded, nothing is compiled on the first call).  Then a first call
            that alone fills ``max_total_ms`` is the one sample; never for torch.compile,
            whose first call compiles.
        first_ms: the event time of a call already made on the same data (the C worker's
            verification call), used as the first call instead of running one; the worker
            passes it only when it alone fills ``max_total_ms`` (so it is neither skewed by
            lazy module loading nor by a cold L2 cache): then nothing runs here (with
            ``warm``: it is the one sample, or the ``slow`` estimate).
        on_plan: called with the number of planned repetitions after the warm-up, just
            before the first timed repetition (the workers' :class:`InputRotation` picks
            the calls it verifies then); not called when no repetition is planned (``slow``,
            or a first call that is the one sample).

    Order: one call alone (its time includes lazy module loading); if shorter than
    ``warmup_ms``, :data:`ESTIMATE_CALLS` more estimate a call (their median), then
    warm-up calls until ``warmup_ms`` is spent (at least ``warmup_reps``, at most
    ``max_reps``); then :func:`plan_reps` repetitions in batches of :data:`BATCH`.  With
    ``warm``, a first call that alone fills ``max_total_ms`` is the one sample (a second
    call of a 15 s kernel would only double the time the GPU lock is held).

    Returns:
        :class:`RepTiming`.  Exceptions raised by ``run`` (a CUDA error) propagate.
    """
    out = RepTiming()
    out.warmup += [float(first_ms)] if first_ms is not None else run(1)
    out.estimate_ms = out.warmup[0]
    slow = slow_ms is not None and slow_ms > 0
    if slow and out.estimate_ms > slow_ms:
        out.slow = True
        return out
    if warm and out.estimate_ms >= settings.max_total_ms > 0:
        out.samples, out.warmup, out.planned = out.warmup, [], 1
        return out
    if out.estimate_ms < settings.warmup_ms or len(out.warmup) < settings.warmup_reps:
        out.warmup += run(ESTIMATE_CALLS)
        out.estimate_ms = float(np.median(out.warmup[1:]))
        if slow and out.estimate_ms > slow_ms:
            out.slow = True
            return out
        per = max(out.estimate_ms, 1e-4)
        more = max(math.ceil((settings.warmup_ms - sum(out.warmup)) / per),
                   settings.warmup_reps - len(out.warmup), 0)
        more = min(more, max(int(settings.max_reps) - len(out.warmup), 0))
        while more > 0:
            k = min(more, BATCH * 10)
            out.warmup += run(k)
            more -= k
    out.planned = plan_reps(out.estimate_ms, settings)
    if on_plan is not None:
        on_plan(out.planned)
    left = out.planned
    while left > 0:
        k = min(left, BATCH)
        out.samples += run(k)
        left -= k
    return out


#: Share of a tensor's elements in which input set 1 differs from set 0 (at least
#: :data:`PERTURB_MIN` elements): few enough that a result cache keyed by a sample of the
#: input values misses the change (and serves a stale output, which a verified timed call
#: catches), many enough that the output changes.
PERTURB_FRACTION = 1.0 / 256.0
#: The fewest elements perturbed in a tensor (all of them when it has fewer).
PERTURB_MIN = 4


def perturb_positions(n: int, rng: np.random.Generator) -> np.ndarray:
    """Flat positions (C order) at which input set 1 differs from set 0 in an array of ``n``
    elements: ``max(ceil(n x PERTURB_FRACTION), min(n, PERTURB_MIN))`` positions drawn
    uniformly by ``rng`` (with repetition, so duplicates may occur), as an int64 array;
    empty when ``n`` is 0."""
    n = int(n)
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    m = max(math.ceil(n * PERTURB_FRACTION), min(n, PERTURB_MIN))
    return rng.integers(0, n, size=m, dtype=np.int64)


class InputRotation:
    """Which input set each candidate call of a timing gets, and which timed repetitions
    are verified (both workers; ``docs/evaluation.md`` §6).

    Every call (warm-up, timed, call + synchronize, end to end) asks :meth:`next` for its
    input set, drawn at random by a seeded generator (not alternating).  Once the
    repetitions are planned (:meth:`plan`, the ``on_plan`` hook of
    :func:`time_repetitions`), ``checks`` of them are picked at random to be verified;
    with two sets the verified calls cover both sets, and each gets a set other than the
    call before it (that call is steered when needed), so a result cached from the other
    set is what a verified call would return.

    Args:
        n_sets: the input sets (1: no rotation; the verified calls still run).
        seed: seeds the generator (ints, as for ``numpy.random.SeedSequence``).
        checks: timed repetitions to verify (fewer when fewer are planned).

    Attributes:
        last: the set of the latest call (0 before any: the verification used set 0).
        calls: calls per set so far.
        planned: the repetitions planned (0 before :meth:`plan`).
        checked: the 0-based indices of the timed repetitions chosen for verification.
        targets: timed index -> the set that verified call gets.
        verified: 1-based numbers of the timed repetitions :meth:`next` has handed out for
            verification so far (what the result records as ``checked_reps``).
    """

    def __init__(self, n_sets: int, seed: Sequence[int] | int, checks: int = 2):
        if n_sets < 1:
            raise ValueError("at least one input set")
        self.n_sets = int(n_sets)
        self.rng = np.random.default_rng(np.random.SeedSequence(seed))
        self.checks = max(int(checks), 0)
        self.last = 0
        self.calls = [0] * self.n_sets
        self.planned = 0
        self.timed: int | None = None  # timed repetitions handed out (None: not planned)
        self.checked: list[int] = []
        self.targets: dict[int, int] = {}
        self.verified: list[int] = []

    def _other(self, s: int) -> int:
        """A set other than ``s``, at random (``s`` itself with one set)."""
        if self.n_sets == 1:
            return 0
        return int((s + 1 + self.rng.integers(self.n_sets - 1)) % self.n_sets)

    def plan(self, planned: int) -> None:
        """Pick the verified repetitions among ``planned`` and the set each of them gets."""
        self.planned = max(int(planned), 0)
        self.timed = 0
        k = min(self.checks, self.planned)
        idx = self.rng.choice(self.planned, size=k, replace=False) if k else []
        self.checked = sorted(int(i) for i in idx)
        self.targets = {}
        prev: int | None = None
        for c in self.checked:
            if self.n_sets == 1:
                t = 0
            elif c == 0:  # the call before it (the last warm-up call) already ran
                t = self._other(self.last)
            elif prev is None:
                t = int(self.rng.integers(self.n_sets))
            else:
                t = self._other(prev)  # the verified calls cover the sets
            self.targets[c] = prev = t

    def next(self) -> tuple[int, int | None]:
        """The next call's input set, and its 0-based timed index when it is a verified
        repetition (else None)."""
        i: int | None = None
        if self.timed is not None and self.timed < self.planned:
            i = self.timed
            self.timed += 1
        if self.n_sets == 1:
            s = 0
        elif i is not None and i in self.targets:
            s = self.targets[i]
        elif i is not None and i + 1 in self.targets:
            s = self._other(self.targets[i + 1])
        else:
            s = int(self.rng.integers(self.n_sets))
        self.last = s
        self.calls[s] += 1
        check = i if i is not None and i in self.targets else None
        if check is not None:
            self.verified.append(check + 1)
        return s, check


def fit_reps(budget_ms: float, one_ms: float, most: int) -> int:
    """How many repetitions of a measurement that took ``one_ms`` fit ``budget_ms``: at
    least 1, at most ``most`` (the worker bounds its call + synchronize and end-to-end
    repetitions by ``max_total_ms`` this way, the CPU baseline by ``cpu_budget_s``)."""
    return max(1, min(max(int(most), 1), math.floor(float(budget_ms) / max(float(one_ms), 1e-6))))


def flush_size(l2_bytes: int | None, settings: TimingSettings) -> int:
    """Bytes of the L2 flush buffer: ``settings.flush_bytes`` if given, else
    max(2 x ``l2_bytes``, 256 MiB); 0 when flushing is off."""
    if not settings.flush_l2:
        return 0
    if settings.flush_bytes is not None:
        return max(int(settings.flush_bytes), 0)
    return max(2 * int(l2_bytes or 0), MIN_FLUSH_BYTES)


def untimed_work(gpu_ms: float, sync_ms: float, call: str = "call") -> str | None:
    """A warning when the event time is much shorter than call + synchronize, or None
    (both workers).

    Args:
        gpu_ms: median event time of a call (events on the stream the judge times), ms.
        sync_ms: median host wall time of the call and a device-wide synchronize, ms.
        call: what was called, for the message (``"call"``; ``"forward"`` for PyTorch).

    Returns:
        One line when ``gpu_ms < 0.5 * sync_ms - 0.05`` ms: work on the host, or on a
        stream the events do not see.  Only a warning: an honest launcher's host set-up
        (``cudaMalloc``) overlaps the untimed copies and L2 flush before an event-timed
        call but not the host clock of call + synchronize (found by an attack pass), so
        the verdict on other streams is :func:`side_work`'s.
    """
    if gpu_ms < 0.5 * sync_ms - 0.05:
        return (f"event time {gpu_ms:.4g} ms is much shorter than {call} + synchronize "
                f"{sync_ms:.4g} ms: is work running on the host, or outside the timed stream?")
    return None


#: Work still running this long after the timed stream's end event (median over the
#: timed calls, ms) is work the events did not time, when it is also a quarter of the
#: event time or more (:func:`side_work`).
SIDE_WORK_MS = 0.05


def side_work(tail_ms: Sequence[float], gpu_ms: float,
              floor_ms: Sequence[float] = ()) -> str | None:
    """Why the event times miss part of the candidate's work, or None.

    After each timed call the worker waits for the timed stream's end event, then for the
    whole device; ``tail_ms`` are the second waits.  An honest call leaves nothing behind
    (a few microseconds of synchronize); a kernel on a private non-blocking stream the
    launcher never joins keeps the device busy after the end event (the side-stream cheat:
    events 0.0016 ms).  Measured inside the very calls that are timed, so a candidate
    cannot behave differently here, and without the host's own set-up in it.  The waits
    are host wall time, which a busy host stretches (the process preempted mid-wait; one
    honest candidate was rejected so in CI): ``floor_ms`` are the same measurement repeated
    at once on the idle device, and the excess of the median tail over the median floor is
    what counts, when it is also more than the floor itself (noise that stretches the
    floor to milliseconds moves the two medians apart by a fraction of that).  Medians: to
    fake the median event time the work must be hidden in more than half of the timed
    calls, and then the median tail shows it.

    Args:
        tail_ms: per timed call, host ms from the end event's completion to the device's
            idle.
        gpu_ms: median event time, ms.
        floor_ms: per timed call, host ms of a second synchronize right after (none:
            taken as 0).

    Returns:
        One line when the median tail exceeds the median floor by more than
        :data:`SIDE_WORK_MS`, more than the median floor and more than a quarter of
        ``gpu_ms``; None otherwise (or with no samples).
    """
    if not tail_ms:
        return None
    tail = float(np.median(np.asarray(tail_ms, dtype=float)))
    floor = float(np.median(np.asarray(floor_ms, dtype=float))) if len(floor_ms) else 0.0
    excess = tail - floor
    if excess > max(SIDE_WORK_MS, floor, 0.25 * gpu_ms):
        return (f"the device stayed busy {tail:.4g} ms (median over {len(tail_ms)} timed "
                f"calls; {floor:.4g} ms on the idle device) after the timed stream's end "
                f"event ({gpu_ms:.4g} ms of events): work on a stream the launcher does not "
                "join is not timed")
    return None


#: Slack of :func:`judge_clock`, ms: scheduling of two processes on a busy host.
JUDGE_SLACK_MS = 2.0


def judge_clock(gpu_ms: float, sync_ms: float, judge_ms: float, ping_ms: float,
                what: str = "call + synchronize") -> str | None:
    """Why the candidate's process's figures disagree with the judge's own clock, or None.

    The candidate's process measures its calls (events; call + synchronize on its host
    clock) in the process where the candidate's host code runs; the judge times each call +
    synchronize request from its own process.  A request's round trip minus an empty
    request's (``ping_ms``) bounds what the call took; figures that claim far less were not
    measured honestly.

    Args:
        gpu_ms: median event ms of the timed calls (the candidate's process's).
        sync_ms: median call + synchronize ms on the candidate's process's clock.
        judge_ms: median judge-clock ms of the call + synchronize requests.
        ping_ms: judge-clock ms of an empty request.
        what: the requests timed (for the message; ``"end-to-end run"``: both figures are
            the end-to-end median).

    Returns:
        One line when ``judge_ms - ping_ms > 2 * max(gpu_ms, sync_ms) +``
        :data:`JUDGE_SLACK_MS`: the judge saw each call take more than twice what was
        reported, and by more than the slack; None otherwise.
    """
    seen = judge_ms - ping_ms
    claimed = max(gpu_ms, sync_ms)
    if seen > 2.0 * claimed + JUDGE_SLACK_MS:
        figures = (f"{sync_ms:.4g} ms (call + synchronize) and {gpu_ms:.4g} ms (events)"
                   if what == "call + synchronize" else f"{sync_ms:.4g} ms")
        return (f"the judge's clock saw each {what} take {seen:.4g} ms, against {figures} "
                "measured in the candidate's process: its figures are not the calls' time")
    return None


def speedup(baseline_ms: float | None, ms: float | None) -> float | None:
    """``baseline_ms / ms`` or None when either is missing or ``ms`` is not positive."""
    if baseline_ms is None or ms is None or ms <= 0:
        return None
    return float(baseline_ms) / float(ms)


__all__ = [
    "BATCH",
    "ESTIMATE_CALLS",
    "InputRotation",
    "MIN_FLUSH_BYTES",
    "PERTURB_FRACTION",
    "PERTURB_MIN",
    "RepTiming",
    "SUSPICIOUS_SPEEDUP",
    "fit_reps",
    "flush_size",
    "need_more_reps",
    "perturb_positions",
    "plan_reps",
    "speedup",
    "summarize",
    "time_repetitions",
]
