"""The refine loop: each turn, candidate -> build -> verify & time -> record -> feedback.

Stage by stage (one function each, in the order they run)::

    propose   the policy writes a candidate (.cu source)           policies/
    build     nvcc into a shared library, ptxas report             build/
    evaluate  child process: verify on every config, then time     evaluate/
    record    a TurnRecord (one JSONL line in the run folder)      agent/store.py
    feedback  text for the next turn, written for the model        agent/feedback.py

The loop keeps the best *correct* candidate (lowest median GPU kernel time) and never dies
on a bad candidate: a refusal, compile error, crash or hang is recorded and the next turn
runs.  Only a missing toolchain or a Ctrl-C stops it early.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

#: Statuses of a turn, in the order a candidate can fail (first = earliest stage).
STATUSES = (
    "refused",  # the policy produced no candidate
    "format_error",  # a model's reply held no usable code
    "compile_error",
    "compile_timeout",
    "no_device",  # compiled; not verified (no CUDA device)
    "runtime_error",  # CUDA error, illegal address
    "crash",  # the evaluation process died
    "timeout",  # the evaluation exceeded its time limit
    "wrong",
    "reference_error",
    "correct",
)


@dataclass
class TurnRecord:
    """What one turn produced.  Times in milliseconds (``*_ms``) or seconds (``*_s``).

    ``speedup_kernel`` = CPU reference median / GPU kernel median;
    ``speedup_e2e`` = CPU reference median / end-to-end median (copies in and out included);
    both against ``baseline`` (e.g. "gcc -O3, 1 thread").  ``structure_score`` in [0, 1] and
    ``structure_reasons`` (most costly first) come from the static structural analysis
    (docs/structural-score.md).
    """

    turn: int
    policy: str
    description: str
    status: str
    message: str = ""
    source: str | None = None
    build_dir: str | None = None
    compile_s: float | None = None
    compile_cached: bool = False
    eval_s: float | None = None
    registers: int | None = None
    spill_bytes: int | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    gpu_ms: float | None = None
    gpu_ms_iqr: float | None = None
    e2e_ms: float | None = None
    cpu_ms: float | None = None
    speedup_kernel: float | None = None
    speedup_e2e: float | None = None
    baseline: str | None = None
    access: dict[str, str] = field(default_factory=dict)
    structure_score: float | None = None
    structure_reasons: list[str] = field(default_factory=list)
    feedback: str = ""
    build: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
    mapping: dict[str, Any] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.status == "correct"


class LoopObserver(Protocol):
    """Receives progress; the Rich renderer and the JSON sink implement it."""

    def stage(self, turn: int, name: str) -> None: ...

    def turn_done(self, record: TurnRecord) -> None: ...


@dataclass
class LoopResult:
    """All turns and the index of the best correct one (``None`` if none was correct)."""

    turns: list[TurnRecord]
    best_index: int | None
    stop_reason: str

    @property
    def best(self) -> TurnRecord | None:
        return None if self.best_index is None else self.turns[self.best_index]


def is_better(a: TurnRecord, b: TurnRecord | None) -> bool:
    """True if correct candidate ``a`` beats ``b`` (lower median GPU kernel time)."""
    if not a.correct or a.gpu_ms is None:
        return False
    return b is None or b.gpu_ms is None or a.gpu_ms < b.gpu_ms


TurnFn = Callable[[int, list[TurnRecord]], TurnRecord]


def run_loop(
    run_turn: TurnFn,
    *,
    turns: int,
    observer: LoopObserver,
    on_record: Callable[[TurnRecord], None] | None = None,
    target_speedup: float | None = None,
    patience: int | None = None,
) -> LoopResult:
    """Run up to ``turns`` turns of ``run_turn(turn, history)``; keep the best correct one.

    ``run_turn`` does propose -> build -> evaluate for one turn and returns its record (see
    ``run_turn`` in :func:`cudaperf_cli.agent.optimize.run_optimize_command`).  Stops early,
    saying why in ``LoopResult.stop_reason``, when:

    - the policy refuses (no candidate, or no more candidates);
    - the best kernel-only speedup reaches ``target_speedup`` (x, against the run's baseline);
    - ``patience`` turns in a row brought no faster correct candidate.
    """
    records: list[TurnRecord] = []
    best: int | None = None
    stale = 0  # turns since the best improved
    stop_reason = f"ran all {turns} turn(s)"
    for t in range(turns):
        record = run_turn(t, records)
        records.append(record)
        if on_record is not None:
            on_record(record)
        observer.turn_done(record)
        if is_better(record, None if best is None else records[best]):
            best, stale = t, 0
        else:
            stale += 1
        if record.status == "refused":  # the built-in policy's refusals are final
            stop_reason = (
                f"the policy had no more candidates after {t} turn(s)" if t
                else f"the policy produced no candidate: {record.message}"
            )
            break
        speedup = None if best is None else records[best].speedup_kernel
        if target_speedup is not None and speedup is not None and speedup >= target_speedup:
            stop_reason = (
                f"turn {best + 1} reached the target speedup ({speedup:.3g}x >= "
                f"{target_speedup:g}x kernel-only)"
            )
            break
        if patience is not None and stale >= patience and t + 1 < turns:
            stop_reason = f"{stale} turn(s) in a row brought no faster correct candidate"
            break
    return LoopResult(records, best, stop_reason)
