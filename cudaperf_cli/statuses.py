"""The one ordered table of candidate statuses, read by every stage.

A candidate's status says how far it got through the pipeline (policy -> build -> guards
-> run -> verify -> time).  Every consumer reads this table instead of keeping its own
list: the evaluation workers (C and PyTorch) return these names, the optimize loop picks
its best candidate by :data:`ORDER`, ``bench`` ranks a problem's candidates by it, the
reward maps each status to its stage (:attr:`Status.reward_stage`), the renderer takes
its label and colour, the ranker its correct/incorrect split, the feedback its wording.

This module imports nothing from the package, so every stage can import it.

Order (:data:`ORDER`): the earliest failure first and ``correct`` last, so a later status
is "further along".  Problem-level statuses (the problem's or the machine's fault, not the
candidate's: ``no_device``, ``does_not_fit``, ``reference_error``) carry
``problem_level=True`` and reward stage ``excluded``.
"""

from __future__ import annotations

from dataclasses import dataclass

PENDING = "pending"  #: placeholder of a record whose evaluation never finished (a killed run)
REFUSED = "refused"  #: the policy produced no candidate
FORMAT_ERROR = "format_error"  #: a model's reply held no usable code
COMPILE_ERROR = "compile_error"  #: nvcc / load_inline failed, a Python syntax error, no ModelNew
COMPILE_TIMEOUT = "compile_timeout"  #: the build ran past its time limit
GUARD_REJECTED = "guard_rejected"  #: a reward-hack guard caught the candidate
NO_DEVICE = "no_device"  #: compiled; not verified (no usable CUDA device)
DOES_NOT_FIT = "does_not_fit"  #: the problem's planned memory exceeds the device's free memory
RUNTIME_ERROR = "runtime_error"  #: the candidate raised / returned a CUDA error
CRASH = "crash"  #: the evaluation process died (signal, exit status, no result)
TIMEOUT = "timeout"  #: the evaluation ran past its time limit and was killed
WRONG = "wrong"  #: some output differs from the reference (or an input was written)
#: verified, but compute-sanitizer (memcheck, initcheck) found a memory error when the
#: candidate was about to become the run's best (docs/evaluation.md, "compute-sanitizer stage")
SANITIZER_ERROR = "sanitizer_error"
REFERENCE_ERROR = "reference_error"  #: the reference itself failed (the problem's fault)
SLOW = "slow"  #: verified correct; timing stopped early: far slower than the best or the baseline
CORRECT = "correct"  #: verified on every configuration and timed
REFERENCE_ONLY = "reference_only"  #: a job without a candidate (baseline measurement), not a turn's status


@dataclass(frozen=True)
class Status:
    """One status of :data:`ORDER`.

    Attributes:
        name: the status string stored in records (``turns.jsonl``, ``candidates.jsonl``).
        label: short human text (the turn table's status column).
        style: Rich style of the label.
        reward_stage: the reward's stage (``reward.STAGES``): ``guard``, ``format``,
            ``compile``, ``runtime``, ``wrong``, ``correct`` or ``excluded`` (no reward).
        compiled: the candidate's code was built (a ranker pair needs at least one).
        verified: the outputs matched the reference on every configuration.
        problem_level: not the candidate's fault (no verdict on the policy).
    """

    name: str
    label: str
    style: str
    reward_stage: str
    compiled: bool
    verified: bool = False
    problem_level: bool = False


#: Every candidate status, earliest failure first, ``correct`` last.
ORDER: tuple[Status, ...] = (
    Status(PENDING, "pending", "dim", "excluded", False, problem_level=True),
    Status(REFUSED, "refused", "yellow", "format", False),
    Status(FORMAT_ERROR, "no code", "yellow", "format", False),
    Status(COMPILE_ERROR, "compile error", "yellow", "compile", False),
    Status(COMPILE_TIMEOUT, "compile timeout", "yellow", "compile", False),
    Status(GUARD_REJECTED, "guard rejected", "bold magenta", "guard", True),
    Status(NO_DEVICE, "compiled (no GPU)", "cyan", "excluded", True, problem_level=True),
    Status(DOES_NOT_FIT, "does not fit", "cyan", "excluded", True, problem_level=True),
    Status(RUNTIME_ERROR, "runtime error", "red", "runtime", True),
    Status(CRASH, "crash", "red", "runtime", True),
    Status(TIMEOUT, "timeout", "red", "runtime", True),
    Status(WRONG, "wrong", "red", "wrong", True),
    Status(SANITIZER_ERROR, "memory error", "red", "runtime", True),
    Status(REFERENCE_ERROR, "reference error", "magenta", "excluded", True, problem_level=True),
    Status(SLOW, "slow", "green", "correct", True, verified=True),
    Status(CORRECT, "correct", "bold green", "correct", True, verified=True),
)

#: name -> :class:`Status`.
BY_NAME: dict[str, Status] = {s.name: s for s in ORDER}
#: Every status name, in :data:`ORDER`.
NAMES: tuple[str, ...] = tuple(s.name for s in ORDER)
#: Statuses whose outputs were verified (``correct`` and ``slow``).
VERIFIED: frozenset[str] = frozenset(s.name for s in ORDER if s.verified)
#: Statuses of a compiled candidate that failed on its own account (a ranker's "incorrect").
INCORRECT: frozenset[str] = frozenset(
    s.name for s in ORDER if s.reward_stage in ("compile", "runtime", "wrong")
)
#: Statuses of a candidate whose code did not compile (or never existed).
NOT_COMPILED: frozenset[str] = frozenset(s.name for s in ORDER if not s.compiled)


def rank(status: str | None) -> int:
    """Position of ``status`` in :data:`ORDER` (higher is further along; -1: unknown)."""
    try:
        return NAMES.index(status or "")
    except ValueError:
        return -1


def info(status: str | None) -> Status | None:
    """The :class:`Status` named ``status``, or None for an unknown name."""
    return BY_NAME.get(status or "")


__all__ = [
    "BY_NAME",
    "COMPILE_ERROR",
    "COMPILE_TIMEOUT",
    "CORRECT",
    "CRASH",
    "DOES_NOT_FIT",
    "FORMAT_ERROR",
    "GUARD_REJECTED",
    "INCORRECT",
    "NAMES",
    "NOT_COMPILED",
    "NO_DEVICE",
    "ORDER",
    "PENDING",
    "REFERENCE_ERROR",
    "REFERENCE_ONLY",
    "REFUSED",
    "RUNTIME_ERROR",
    "SANITIZER_ERROR",
    "SLOW",
    "Status",
    "TIMEOUT",
    "VERIFIED",
    "WRONG",
    "info",
    "rank",
]
