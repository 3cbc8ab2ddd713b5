"""Timing statistics and repetition policy (pure Python, no device).

All times are milliseconds.
"""

from __future__ import annotations

from typing import Sequence

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
    more than ``max_reps``; stop early once ``max_total_ms`` is reached with >= 3 reps (or
    >= ``min_reps`` if that is smaller).
    """
    if n >= settings.max_reps:
        return False
    if total_ms >= settings.max_total_ms and n >= min(3, max(settings.min_reps, 1)):
        return False
    return n < settings.min_reps or total_ms < settings.min_total_ms


def flush_size(l2_bytes: int | None, settings: TimingSettings) -> int:
    """Bytes of the L2 flush buffer: ``settings.flush_bytes`` if given, else
    max(2 x ``l2_bytes``, 256 MiB); 0 when flushing is off."""
    if not settings.flush_l2:
        return 0
    if settings.flush_bytes is not None:
        return max(int(settings.flush_bytes), 0)
    return max(2 * int(l2_bytes or 0), MIN_FLUSH_BYTES)


def speedup(baseline_ms: float | None, ms: float | None) -> float | None:
    """``baseline_ms / ms`` or None when either is missing or ``ms`` is not positive."""
    if baseline_ms is None or ms is None or ms <= 0:
        return None
    return float(baseline_ms) / float(ms)


__all__ = [
    "MIN_FLUSH_BYTES",
    "SUSPICIOUS_SPEEDUP",
    "flush_size",
    "need_more_reps",
    "speedup",
    "summarize",
]
