"""The refine loop: each turn, candidate -> build -> verify & time -> record -> feedback.

Stage by stage (one function each, in the order they run)::

    propose   the policy writes n candidates (.cu sources)         policies/
    build     nvcc into a shared library, ptxas report             build/
    evaluate  child process: verify on every config, then time     evaluate/
    record    a TurnRecord (one JSONL line in the run folder)      agent/store.py
    feedback  text for the next turn, written for the model        agent/feedback.py

A turn holds ``n`` samples (candidates written from the same conversation; ``--samples``);
each is one :class:`TurnRecord` with its ``turn`` and ``sample`` index.  The loop keeps the
best *verified* candidate over all turns and samples (``statuses.VERIFIED``: ``correct``, or
``slow`` with its estimated time; lowest median GPU kernel time) and never dies on a bad
candidate: a refusal, compile error, crash or hang is recorded and the
next turn runs.  Only a missing toolchain, the user (interactive ``stop``/``accept``) or a
Ctrl-C stops it early.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Protocol

from cudaperf_cli import statuses

#: Statuses of a turn, earliest failure first (``cudaperf_cli.statuses.NAMES``: the one
#: ordered table every stage reads; kept here under its old name for callers).
STATUSES = statuses.NAMES


@dataclass
class TurnRecord:
    """What one turn produced.  Times in milliseconds (``*_ms``) or seconds (``*_s``).

    ``speedup_kernel`` = CPU reference median / GPU kernel median;
    ``speedup_e2e`` = CPU reference median / end-to-end median (copies in and out included);
    both against ``baseline`` (e.g. "gcc -O3, 1 thread").  For a PyTorch problem,
    ``speedup_kernel`` = PyTorch eager median / candidate median (``baseline`` = "PyTorch
    eager") and ``speedup_compile`` = torch.compile median / candidate median.  ``structure_score`` in [0, 1] and
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
    #: Of ``eval_s``: seconds waiting for the GPU lock (another evaluation held the GPU) and
    #: seconds of the evaluation's preparation before it (imports, CUDA context, loading).
    lock_wait_s: float | None = None
    prepare_s: float | None = None
    #: Of ``eval_s``: seconds in each phase of the worker (``startup``, ``device``,
    #: ``load_problem``, ``gpu_wait``, ``timing``, ...), where the evaluation's time went.
    phase_s: dict[str, float] = field(default_factory=dict)
    #: Peak device memory of the evaluation (bytes, the worker's allocations as the driver
    #: or PyTorch's allocator reports them) and the problem's footprint (bytes: inputs,
    #: outputs, parameters and buffers at the main configuration).
    peak_gpu_bytes: int | None = None
    footprint_bytes: int | None = None
    #: The comparison tolerances used: dtype -> {"atol", "rtol"}.
    tolerances: dict[str, Any] = field(default_factory=dict)
    #: The compute-sanitizer stage (C candidates about to become the run's best): its
    #: seconds, and its outcome (``{"result": "clean"|"rejected"|"skipped", "message",
    #: "seconds", "config", "tools": [...]}``, evaluate/sanitize.py); unset when it did not run.
    sanitize_s: float | None = None
    sanitize: dict[str, Any] = field(default_factory=dict)
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
    #: PyTorch problems: ``speedup_kernel`` is against PyTorch eager (``baseline``);
    #: these are the eager and torch.compile medians (ms) and the speedup over compile.
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_compile: float | None = None
    guard: str | None = None  #: the id of the guard that rejected the candidate
    access: dict[str, str] = field(default_factory=dict)
    structure_score: float | None = None
    structure_reasons: list[str] = field(default_factory=list)
    feedback: str = ""
    build: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
    mapping: dict[str, Any] = field(default_factory=dict)
    sample: int = 0  #: index of this candidate within its turn (0..samples-1)
    samples: int = 1  #: candidates per turn in this run (``--samples``)
    #: The sample whose reply the model's conversation continues from (one per turn).
    followed: bool = False
    #: On the followed record: the feedback message of the whole turn (all samples).
    turn_feedback: str = ""

    #: For a ``slow`` record (timing stopped early): what it was compared with,
    #: ``"best"`` (the run's best verified candidate) or ``"baseline"``; that time (ms,
    #: the best candidate's median GPU time, or the baseline's median); and the factor K
    #: (``--slow-factor``) its estimate passed.  None otherwise.
    slow_ref: str | None = None
    slow_ref_ms: float | None = None
    slow_factor: float | None = None

    @property
    def correct(self) -> bool:
        """Verified and fully timed (``status == "correct"``)."""
        return self.status == statuses.CORRECT

    @property
    def verified(self) -> bool:
        """Outputs verified on every configuration (``correct``, or ``slow``: timing stopped
        early, ``gpu_ms`` is the estimate); ``statuses.VERIFIED``."""
        return self.status in statuses.VERIFIED

    @property
    def label(self) -> str:
        """``"3"`` for turn 3's only candidate, ``"3.2"`` for its second sample."""
        if self.samples <= 1:
            return f"{self.turn + 1}"
        return f"{self.turn + 1}.{self.sample + 1}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TurnRecord":
        """A record read back from ``turns.jsonl`` (unknown keys, e.g. from a newer
        cudaperf, are ignored).

        Raises:
            KeyError, TypeError: ``data`` lacks ``turn``, ``policy``, ``description`` or
                ``status``.
        """
        if not isinstance(data, dict):
            raise TypeError("a turn record must be a JSON object")
        names = {f.name for f in fields(cls)}
        record = cls(**{k: v for k, v in data.items() if k in names})
        for f in fields(cls):  # numbers must be numbers (a damaged file is skipped, not run)
            value = getattr(record, f.name)
            kind = str(f.type)
            if value is None:
                continue
            if kind.startswith(("float", "int")) and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise TypeError(f"{f.name} must be a number, not {value!r}")
            if kind.startswith("str") and not isinstance(value, str):
                raise TypeError(f"{f.name} must be a string, not {value!r}")
            if kind.startswith("dict") and not isinstance(value, dict):
                raise TypeError(f"{f.name} must be an object, not {value!r}")
            if kind.startswith("list") and not isinstance(value, list):
                raise TypeError(f"{f.name} must be a list, not {value!r}")
        return record


class LoopObserver(Protocol):
    """Receives progress; the Rich renderer and the JSON sink implement it."""

    def stage(self, turn: int, name: str) -> None: ...

    def turn_done(self, record: TurnRecord) -> None: ...


@dataclass(frozen=True)
class Decision:
    """What the user chose after a turn (interactive runs; see ``agent/interact.py``).

    ``action``: ``"continue"`` (the next turn), ``"accept"`` (finish now with the best
    correct candidate) or ``"stop"`` (end the run without writing a result; it can be
    resumed).  ``hint``: text for the model's next turn (model policies), or ``None``.
    """

    action: str = "continue"
    hint: str | None = None


@dataclass
class LoopResult:
    """All candidates (every sample of every turn, in order) and the index of the best
    verified one (``None`` if none was verified, see :func:`best_index`);
    ``stopped_by_user``: the user accepted or stopped in an interactive run."""

    turns: list[TurnRecord]
    best_index: int | None
    stop_reason: str
    stopped_by_user: bool = False

    @property
    def best(self) -> TurnRecord | None:
        return None if self.best_index is None else self.turns[self.best_index]

    @property
    def turn_count(self) -> int:
        """Number of turns run (a turn holds ``n`` samples)."""
        return len({r.turn for r in self.turns})


def is_better(a: TurnRecord, b: TurnRecord | None) -> bool:
    """True if ``a`` is verified (``statuses.VERIFIED``), has a GPU time (``gpu_ms``, ms) and
    beats ``b``: ``b`` is None, has no time, or is slower.  A ``slow`` candidate's time is
    its estimate, at least ``--slow-factor`` times the best's, so it never beats a faster
    ``correct`` one; it is the best only when nothing faster was verified."""
    if not a.verified or a.gpu_ms is None:
        return False
    return b is None or b.gpu_ms is None or a.gpu_ms < b.gpu_ms


def best_index(records: list[TurnRecord]) -> int | None:
    """Index of the fastest verified record with a time (the first of equals), or
    ``None``: the candidate optimize writes."""
    best: int | None = None
    for i, r in enumerate(records):
        if is_better(r, None if best is None else records[best]):
            best = i
    return best


#: ``run_turn(turn, history)`` -> the turn's records (one per sample; a single record is
#: accepted too).  ``history`` holds every earlier record.
TurnFn = Callable[[int, list[TurnRecord]], "list[TurnRecord] | TurnRecord"]
#: ``ask(turn, records_of_turn, best_so_far)`` -> the user's :class:`Decision`.
AskFn = Callable[[int, list[TurnRecord], "TurnRecord | None"], Decision]


def run_loop(
    run_turn: TurnFn,
    *,
    turns: int,
    observer: LoopObserver,
    on_record: Callable[[TurnRecord], None] | None = None,
    target_speedup: float | None = None,
    patience: int | None = None,
    ask: AskFn | None = None,
    history: list[TurnRecord] | None = None,
) -> LoopResult:
    """Run turns ``len(turns already in history) .. turns-1`` of ``run_turn``; keep the best
    verified candidate over all of them (:func:`best_index`).

    ``run_turn`` does propose -> build -> evaluate for every sample of one turn and returns
    their records (see ``run_turn`` in :func:`cudaperf_cli.agent.optimize.run_optimize_command`).
    ``history``: records of a resumed run (``--resume``); they count for the best candidate
    and for ``patience`` and are not passed to ``on_record`` again.  ``ask`` (interactive
    runs) is called after every turn but the last.  Stops early, saying why in
    ``LoopResult.stop_reason``, when:

    - every sample of a turn was refused (no candidate, or no more candidates);
    - the best kernel-only speedup reaches ``target_speedup`` (x, against the run's baseline);
    - ``patience`` turns in a row brought no faster verified candidate;
    - the user accepted the best candidate or stopped the run.
    """
    records: list[TurnRecord] = list(history or [])
    best = best_index(records)
    done_turns = sorted({r.turn for r in records})
    stale = 0  # turns since the best improved
    if best is not None:
        stale = sum(1 for t in done_turns if t > records[best].turn)
    first = done_turns[-1] + 1 if done_turns else 0
    stop_reason = f"ran all {turns} turn(s)"
    by_user = False
    if first >= turns:
        stop_reason = f"the run already had {first} turn(s) (--turns {turns})"
    elif done_turns and all(r.status == "refused" for r in records if r.turn == done_turns[-1]):
        last = [r for r in records if r.turn == done_turns[-1]][0]
        if last.policy == "builtin":  # the built-in policy's refusals are final
            return LoopResult(records, best, f"the policy had no more candidates ({last.message})")
    for t in range(first, turns):
        out = run_turn(t, list(records))
        batch = [out] if isinstance(out, TurnRecord) else list(out)
        improved = False
        for record in batch:
            records.append(record)
            if on_record is not None:
                on_record(record)
            observer.turn_done(record)
            if is_better(record, None if best is None else records[best]):
                best, improved = len(records) - 1, True
        stale = 0 if improved else stale + 1
        if batch and all(r.status == "refused" for r in batch):  # builtin refusals are final
            stop_reason = (
                f"the policy had no more candidates after {t} turn(s)" if t
                else f"the policy produced no candidate: {batch[0].message}"
            )
            break
        speedup = None if best is None else records[best].speedup_kernel
        if target_speedup is not None and speedup is not None and speedup >= target_speedup:
            stop_reason = (
                f"candidate {records[best].label} reached the target speedup ({speedup:.3g}x >= "
                f"{target_speedup:g}x kernel-only)"
            )
            break
        if patience is not None and stale >= patience and t + 1 < turns:
            stop_reason = f"{stale} turn(s) in a row brought no faster correct candidate"
            break
        if ask is not None and t + 1 < turns:
            decision = ask(t, batch, None if best is None else records[best])
            if decision.action == "accept":
                stop_reason, by_user = f"the user accepted the best candidate after turn {t + 1}", True
                break
            if decision.action == "stop":
                stop_reason, by_user = f"the user stopped the run after turn {t + 1}", True
                break
    return LoopResult(records, best, stop_reason, by_user)
