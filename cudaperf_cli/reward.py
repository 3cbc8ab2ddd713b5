"""The unified reward: one number per candidate kernel, for RL training of the policy.

The formula, its defaults, a worked example per branch and the reasons are in
``docs/reward.md``; this module is its implementation.  In short, for one candidate with
status ``s`` (``cudaperf_cli.statuses.ORDER``: each status's ``reward_stage``)::

    s = guard_rejected                          -> guard_penalty           (the lowest)
    s in {refused, format_error}                -> format_reward
    s in {compile_error, compile_timeout}       -> compile_reward
    s in {runtime_error, crash, timeout}        -> runtime_reward
    s = wrong                                   -> wrong_reward
    s in {no_device, does_not_fit, reference_error, pending}
                                                -> None  (no reward: leave it out of the batch)
    s in {correct, slow} -> correct_bonus
                   + w_speedup   * S(speedup_<speedup_key>)
                   + w_structure * structure_score          (in [0, 1]; missing -> 0)
                   + w_ranker    * (ranker_score - 0.5)     (only when a ranker score is given)

    S(x) = clip(log2 x, -speedup_clip, +speedup_clip)   (speedup_mode "log")
    S(x) = min(x, speedup_cap) / speedup_cap            (speedup_mode "capped")

where ``x`` is the speedup (baseline time / candidate time, dimensionless) against the
baseline ``speedup_key`` names; a correct candidate without that speedup is scored as 1x.
A ``slow`` candidate (verified, timing stopped early because it was already
``--slow-factor`` times slower than the run's best or the baseline) is a correct one: its
speedup is the one measured from its estimated time.

Multi-turn credit (:func:`turn_returns`) follows Baronio et al., *Kevin: multi-turn RL for
generating CUDA kernels*, 2025 (arXiv:2507.11948): a turn's return is its own reward plus
``discount`` times the return of the next turn, discount 0.4.  Group advantages
(:func:`group_advantages`) follow GRPO (Shao et al., *DeepSeekMath*, 2024, arXiv:2402.03300)
as TRL's ``GRPOTrainer`` computes them (``scale_rewards``; sample standard deviation plus
``1e-4``).

Pipeline place: ``reward`` sits after ``structure`` and before ``agent``
(docs/architecture.md), so this module imports neither ``agent`` nor ``bench``: a
:class:`~cudaperf_cli.agent.loop.TurnRecord` is read through its dataclass fields, and the
speedup lookup repeats the rule of ``bench.metrics.speedups_of``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudaperf_cli import statuses

if TYPE_CHECKING:  # typing only: reward must not import the agent stage at run time
    from cudaperf_cli.agent.loop import TurnRecord

#: Speedup baselines a record can carry (``speedup_<key>``, or the ``speedups`` table of a
#: ``candidates.jsonl`` row; docs/bench.md): ``kernel`` (C: gcc -O3 one thread / GPU kernel
#: time; PyTorch: eager / candidate), ``e2e`` (C: copies in and out included), ``compile``
#: (PyTorch: torch.compile / candidate).
SPEEDUP_KEYS = ("kernel", "e2e", "compile")
#: The two speedup shapes of ``RewardConfig.speedup_mode``.
SPEEDUP_MODES = ("log", "capped")
#: Reward stages, lowest reward first; ``excluded`` has no reward (None).
STAGES = ("guard", "format", "compile", "runtime", "wrong", "correct", "excluded")

#: Candidate status -> reward stage, read from the one status table
#: (``cudaperf_cli.statuses.ORDER``, each status's ``reward_stage``): ``slow`` is
#: ``correct``; ``no_device``, ``does_not_fit``, ``reference_error`` and ``pending`` are
#: ``excluded`` (not the policy's doing).
STAGE_OF_STATUS: dict[str, str] = {st.name: st.reward_stage for st in statuses.ORDER}
#: Why an excluded status has no reward (the reason line).
EXCLUDED_WHY: dict[str, str] = {
    statuses.NO_DEVICE: "compiled but not verified (no CUDA device)",
    statuses.DOES_NOT_FIT: "the problem does not fit the device's memory",
    statuses.REFERENCE_ERROR: "the reference failed",
    statuses.PENDING: "evaluation never finished",
}

#: Default multi-turn discount (Baronio et al., Kevin: multi-turn RL for generating CUDA
#: kernels, 2025: the discounted sum with gamma = 0.4 was their best reward aggregation).
DEFAULT_DISCOUNT = 0.4
#: Added to the group standard deviation before dividing (TRL GRPOTrainer: ``std + 1e-4``).
DEFAULT_ADV_EPS = 1e-4
#: Speedups above this are flagged in the reason line for a second look (../DESIGN.md,
#: "Measuring honestly": flag speedups above 10x).
SUSPICIOUS_SPEEDUP = 10.0


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class RewardConfig:
    """Constants of the reward (TRL config style: ``help`` metadata, checked in
    ``__post_init__``).  Rewards are dimensionless; speedups are ratios (baseline time /
    candidate time).  Frozen, so the default instance is safe as a default argument.

    Checked (``ValueError`` naming the field): every number finite; ``guard_penalty <
    format_reward < compile_reward < runtime_reward < wrong_reward < lowest correct reward``
    (:meth:`correct_range`); weights >= 0; ``speedup_clip > 0``; ``speedup_cap >= 1``;
    ``0 <= discount <= 1``; ``speedup_key`` in :data:`SPEEDUP_KEYS`; ``speedup_mode`` in
    :data:`SPEEDUP_MODES`.
    """

    guard_penalty: float = field(default=-1.5, metadata=_help(
        "Reward of a candidate a reward-hack guard rejected (status guard_rejected); must be "
        "below format_reward, so cheating pays less than writing nothing."))
    format_reward: float = field(default=-1.0, metadata=_help(
        "Reward when the reply held no usable code (format_error) or the policy produced no "
        "candidate (refused)."))
    compile_reward: float = field(default=-0.6, metadata=_help(
        "Reward of a candidate that did not compile (compile_error, compile_timeout); must be "
        "above format_reward."))
    runtime_reward: float = field(default=-0.4, metadata=_help(
        "Reward of a candidate that compiled but failed while running (runtime_error, crash, "
        "timeout); must be above compile_reward."))
    wrong_reward: float = field(default=-0.2, metadata=_help(
        "Reward of a candidate that ran to completion with a wrong result (wrong); must be "
        "above runtime_reward and below every correct candidate's reward."))
    correct_bonus: float = field(default=1.0, metadata=_help(
        "Base reward of a correct candidate, before the speedup, structure and ranker terms."))
    speedup_key: str = field(default="kernel", metadata=_help(
        "Baseline of the speedup term: 'kernel' (C: gcc -O3 one thread vs GPU kernel time; "
        "PyTorch: eager vs candidate), 'e2e' (C: copies in and out included) or 'compile' "
        "(PyTorch: torch.compile vs candidate)."))
    speedup_mode: str = field(default="log", metadata=_help(
        "Shape of the speedup term: 'log' = clip(log2(speedup), -speedup_clip, speedup_clip); "
        "'capped' = min(speedup, speedup_cap) / speedup_cap."))
    speedup_clip: float = field(default=3.0, metadata=_help(
        "'log' mode: |log2(speedup)| is clipped to this (3.0 = 1/8x .. 8x); > 0."))
    speedup_cap: float = field(default=8.0, metadata=_help(
        "'capped' mode: speedups above this count as this (x); >= 1."))
    w_speedup: float = field(default=0.25, metadata=_help(
        "Weight of the speedup term (reward per unit of log2 speedup in 'log' mode); >= 0."))
    w_structure: float = field(default=0.2, metadata=_help(
        "Weight of the structural score in [0, 1] (docs/structural-score.md; missing -> 0); "
        ">= 0."))
    w_ranker: float = field(default=0.2, metadata=_help(
        "Weight of the ranker's probability, centred (score - 0.5), when a ranker score is "
        "given; >= 0."))
    discount: float = field(default=DEFAULT_DISCOUNT, metadata=_help(
        "Multi-turn discount: a turn's return = its reward + discount * next turn's return "
        "(0.4: Baronio et al., Kevin, 2025); in [0, 1]."))

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("float", float):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"RewardConfig.{f.name} must be a number, not {value!r}")
                if not math.isfinite(value):
                    raise ValueError(f"RewardConfig.{f.name} must be finite, not {value!r}")
                object.__setattr__(self, f.name, float(value))
        if self.speedup_key not in SPEEDUP_KEYS:
            raise ValueError(
                f"RewardConfig.speedup_key must be one of {', '.join(SPEEDUP_KEYS)}, "
                f"not {self.speedup_key!r}")
        if self.speedup_mode not in SPEEDUP_MODES:
            raise ValueError(
                f"RewardConfig.speedup_mode must be one of {', '.join(SPEEDUP_MODES)}, "
                f"not {self.speedup_mode!r}")
        if self.speedup_clip <= 0:
            raise ValueError(f"RewardConfig.speedup_clip must be > 0, not {self.speedup_clip}")
        if self.speedup_cap < 1:
            raise ValueError(f"RewardConfig.speedup_cap must be >= 1, not {self.speedup_cap}")
        for name in ("w_speedup", "w_structure", "w_ranker"):
            if getattr(self, name) < 0:
                raise ValueError(f"RewardConfig.{name} must be >= 0, not {getattr(self, name)}")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"RewardConfig.discount must be in [0, 1], not {self.discount}")
        ladder = ("guard_penalty", "format_reward", "compile_reward", "runtime_reward",
                  "wrong_reward")
        for lower, higher in itertools.pairwise(ladder):
            if not getattr(self, lower) < getattr(self, higher):
                raise ValueError(
                    f"RewardConfig.{higher} ({getattr(self, higher)}) must be > {lower} "
                    f"({getattr(self, lower)}): failures are graded guard < format < compile "
                    f"< runtime < wrong")
        low, _ = self.correct_range()
        if not low > self.wrong_reward:
            raise ValueError(
                f"RewardConfig.correct_bonus ({self.correct_bonus}) is too low: the lowest "
                f"correct reward ({low:g}) must be > wrong_reward ({self.wrong_reward}); raise "
                f"correct_bonus or lower w_speedup/w_ranker")

    def speedup_range(self) -> tuple[float, float]:
        """Bounds of the speedup term ``w_speedup * S`` (for ``capped`` the low bound 0 is
        approached, never reached, since speedups are > 0)."""
        if self.speedup_mode == "log":
            return -self.w_speedup * self.speedup_clip, self.w_speedup * self.speedup_clip
        return 0.0, self.w_speedup

    def correct_range(self) -> tuple[float, float]:
        """(lowest, highest) reward of a correct candidate: ``correct_bonus`` + speedup
        term bounds + ``w_structure * [0, 1]`` + ``w_ranker * [-0.5, 0.5]``."""
        lo, hi = self.speedup_range()
        return (self.correct_bonus + lo - 0.5 * self.w_ranker,
                self.correct_bonus + hi + self.w_structure + 0.5 * self.w_ranker)

    def bounds(self) -> tuple[float, float]:
        """(lowest, highest) reward any candidate can get: ``guard_penalty`` and the top of
        :meth:`correct_range`."""
        return self.guard_penalty, self.correct_range()[1]

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for checkpoint metadata and logs)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RewardConfig:
        """A config from a dict (a TOML table, checkpoint metadata).

        Raises:
            ValueError: an unknown key (the message lists the known ones) or a bad value.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(
                f"unknown reward setting(s) {', '.join(unknown)}; known: {', '.join(names)}")
        return cls(**dict(data))


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward of one candidate and how it was made.

    ``total`` = ``stage_term + speedup_term + structure_term + ranker_term``, or ``None``
    for an excluded candidate (no reward: leave it out of the batch and its advantages).
    ``stage``: one of :data:`STAGES`.  ``speedup``: the speedup used (x, against
    ``speedup_key``), None when not correct or not measured.  ``guard_rejected``: a
    reward-hack guard rejected it (``guard``: the guard's id when the record names it).
    ``reason``: one line for logs.
    """

    total: float | None
    status: str
    stage: str
    stage_term: float
    speedup_term: float
    structure_term: float
    ranker_term: float
    guard_rejected: bool
    reason: str
    speedup: float | None = None
    speedup_key: str = "kernel"
    guard: str | None = None

    @property
    def excluded(self) -> bool:
        """True when the candidate has no reward (``total is None``)."""
        return self.total is None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (for the training metrics file)."""
        return dataclasses.asdict(self)


def _as_mapping(record: Mapping[str, Any] | TurnRecord) -> Mapping[str, Any]:
    if isinstance(record, Mapping):
        return record
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    raise TypeError(f"a record must be a mapping or a TurnRecord, not {type(record).__name__}")


def _positive(x: Any) -> float | None:
    """``x`` as a float when it is a finite number > 0, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) and x > 0 else None


def record_speedup(record: Mapping[str, Any] | TurnRecord, key: str) -> float | None:
    """Speedup ``key`` (x) of a record: its ``speedup_<key>`` field (a ``turns.jsonl``
    record or a :class:`TurnRecord`), else its ``speedups`` table (a ``candidates.jsonl``
    row), the precedence of ``bench.metrics.speedups_of``; None unless a finite number > 0."""
    data = _as_mapping(record)
    value = _positive(data.get(f"speedup_{key}"))
    if value is None:
        table = data.get("speedups")
        if isinstance(table, Mapping):
            value = _positive(table.get(key))
    return value


def speedup_score(speedup: float, config: RewardConfig) -> float:
    """``S(x)`` before the weight: ``clip(log2 x, -clip, clip)`` (``log``) or
    ``min(x, cap) / cap`` (``capped``); ``speedup`` x > 0 (baseline time / candidate time).

    Raises:
        ValueError: ``speedup`` is not a finite number > 0.
    """
    x = _positive(speedup)
    if x is None:
        raise ValueError(f"a speedup must be a finite number > 0, not {speedup!r}")
    if config.speedup_mode == "log":
        return max(-config.speedup_clip, min(config.speedup_clip, math.log2(x)))
    return min(x, config.speedup_cap) / config.speedup_cap


def _unit_score(value: Any, name: str) -> float | None:
    """A score in [0, 1] (None stays None); ValueError naming ``name`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number in [0, 1], not {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], not {value!r}")
    return float(value)


def reward(
    record: Mapping[str, Any] | TurnRecord,
    config: RewardConfig = RewardConfig(),
    ranker_score: float | None = None,
) -> RewardBreakdown:
    """The reward of one candidate (docs/reward.md).

    Args:
        record: a :class:`~cudaperf_cli.agent.loop.TurnRecord`, a ``turns.jsonl`` line or a
            ``candidates.jsonl`` row (docs/bench.md): ``status``, and for a correct one
            ``speedup_<key>`` or ``speedups``, ``structure_score``; ``guard`` (the guard's
            id) when a guard rejected it.
        config: the constants.
        ranker_score: the ranker's probability in [0, 1] that this candidate is the better
            one, or None without a ranker; used for correct candidates only.

    Returns:
        The :class:`RewardBreakdown` (``total`` None for an excluded candidate).

    Raises:
        ValueError: a missing or unknown ``status``; a ``structure_score`` or
            ``ranker_score`` that is not a number in [0, 1].
        TypeError: ``record`` is neither a mapping nor a dataclass record.
    """
    data = _as_mapping(record)
    status = data.get("status")
    if not isinstance(status, str) or status not in STAGE_OF_STATUS:
        raise ValueError(
            f"unknown candidate status {status!r}; known: {', '.join(STAGE_OF_STATUS)}")
    ranker = _unit_score(ranker_score, "ranker_score")
    structure = _unit_score(data.get("structure_score"), "structure_score")
    stage = STAGE_OF_STATUS[status]
    key = config.speedup_key
    guard_id = data.get("guard") if isinstance(data.get("guard"), str) else None

    def failure(term: float | None, why: str) -> RewardBreakdown:
        reason = f"{status}: {why} ({'no reward, excluded' if term is None else f'{term:+g}'})"
        return RewardBreakdown(
            total=term, status=status, stage=stage, stage_term=0.0 if term is None else term,
            speedup_term=0.0, structure_term=0.0, ranker_term=0.0,
            guard_rejected=stage == "guard", reason=reason, speedup_key=key,
            guard=guard_id if stage == "guard" else None)

    if stage == "guard":
        return failure(config.guard_penalty,
                       f"reward hack refused by guard {guard_id or '(unnamed)'}, lowest reward")
    if stage == "format":
        why = "no candidate" if status == "refused" else "no usable code in the reply"
        return failure(config.format_reward, why)
    if stage == "compile":
        return failure(config.compile_reward, "did not compile")
    if stage == "runtime":
        return failure(config.runtime_reward, "compiled, failed while running")
    if stage == "wrong":
        return failure(config.wrong_reward, "ran, wrong result")
    if stage == "excluded":
        return failure(None, EXCLUDED_WHY.get(status, "not the candidate's doing"))

    # correct (or slow: verified, timed from its warm-up estimate)
    speedup = record_speedup(data, key)
    if speedup is None:
        s_term = config.w_speedup * speedup_score(1.0, config)
        s_text = f"no {key} speedup, scored as 1x ({s_term:+.3g})"
    else:
        s_term = config.w_speedup * speedup_score(speedup, config)
        flag = f" (>{SUSPICIOUS_SPEEDUP:g}x: check)" if speedup > SUSPICIOUS_SPEEDUP else ""
        s_text = f"{speedup:.3g}x {key}{flag} ({s_term:+.3g})"
    st_term = config.w_structure * (structure if structure is not None else 0.0)
    st_text = ("no structure score (+0)" if structure is None
               else f"structure {structure:.3g} ({st_term:+.3g})")
    r_term = 0.0 if ranker is None else config.w_ranker * (ranker - 0.5)
    r_text = "" if ranker is None else f", ranker {ranker:.3g} ({r_term:+.3g})"
    total = config.correct_bonus + s_term + st_term + r_term
    what = "correct" if status == statuses.CORRECT else f"{status} (verified, estimated time)"
    return RewardBreakdown(
        total=total, status=status, stage=stage, stage_term=config.correct_bonus,
        speedup_term=s_term, structure_term=st_term, ranker_term=r_term,
        guard_rejected=False, speedup=speedup, speedup_key=key,
        reason=(f"{what}: bonus {config.correct_bonus:+g}, {s_text}, {st_text}{r_text} "
                f"= {total:.4g}"),
    )


def reward_value(
    record: Mapping[str, Any] | TurnRecord,
    config: RewardConfig = RewardConfig(),
    ranker_score: float | None = None,
) -> float | None:
    """``reward(record, config, ranker_score).total``: a float, or None (excluded)."""
    return reward(record, config, ranker_score).total


def turn_returns(rewards: Sequence[float | None], discount: float = DEFAULT_DISCOUNT
                 ) -> list[float | None]:
    """Discounted returns of one trajectory's turns (first turn first).

    ``G_t = r_t + discount * G_{t+1}`` (``G`` after the last turn = 0): each turn is
    credited with its own reward and the discounted rewards of the turns after it, as in
    Baronio et al., *Kevin: multi-turn RL for generating CUDA kernels*, 2025 (discount 0.4).

    A ``None`` reward (an excluded candidate) gets a ``None`` return (it is left out of
    training) and contributes 0 to earlier turns' returns, while still counting as one
    step of discount (the turn happened; its feedback shaped the next one).  So
    ``[1.0, None, 0.5]`` with 0.4 gives ``[1.0 + 0.4 * (0 + 0.4 * 0.5), None, 0.5] =
    [1.08, None, 0.5]``.

    Raises:
        ValueError: ``discount`` outside [0, 1], or a reward that is not a finite number.
    """
    if isinstance(discount, bool) or not isinstance(discount, (int, float)) or not (
            0.0 <= discount <= 1.0):
        raise ValueError(f"discount must be in [0, 1], not {discount!r}")
    out: list[float | None] = [None] * len(rewards)
    carried = 0.0  # G_{t+1}, with excluded turns counted as 0
    for t in range(len(rewards) - 1, -1, -1):
        r = rewards[t]
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float))
                              or not math.isfinite(r)):
            raise ValueError(f"reward of turn {t} must be a finite number or None, not {r!r}")
        carried = (0.0 if r is None else float(r)) + discount * carried
        out[t] = None if r is None else carried
    return out


def group_advantages(
    rewards: Sequence[float | None],
    eps: float = DEFAULT_ADV_EPS,
    scale: str | None = "std",
) -> list[float | None]:
    """GRPO advantages of one group (the samples of one prompt).

    ``A_i = (r_i - mean(r)) / (std(r) + eps)`` with ``scale="std"``, ``A_i = r_i -
    mean(r)`` with ``scale=None``; mean and std over the group's non-None rewards, std the
    sample standard deviation (n - 1, as ``torch.Tensor.std`` in TRL's ``GRPOTrainer``;
    Shao et al., *DeepSeekMath*, 2024, §4.1.2 outcome supervision).  None rewards get
    None advantages.  A group with one usable reward gets advantage 0 for it (no
    comparison); a group whose rewards are all equal gets 0 for each.

    Raises:
        ValueError: ``scale`` not ``"std"`` or None; ``eps`` < 0; a reward that is not a
            finite number.
    """
    if scale not in ("std", None):
        raise ValueError(f"scale must be 'std' or None, not {scale!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, not {eps!r}")
    for i, r in enumerate(rewards):
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float))
                              or not math.isfinite(r)):
            raise ValueError(f"reward {i} must be a finite number or None, not {r!r}")
    vals = [float(r) for r in rewards if r is not None]
    if not vals:
        return [None] * len(rewards)
    mean = statistics.fmean(vals)
    denom = 1.0
    if scale == "std":
        std = statistics.stdev(vals) if len(vals) > 1 else 0.0
        denom = std + eps
    out: list[float | None] = []
    for r in rewards:
        if r is None:
            out.append(None)
        else:
            dev = float(r) - mean
            out.append(0.0 if dev == 0.0 else dev / denom)
    return out


def batch_summary(breakdowns: Iterable[RewardBreakdown]) -> dict[str, Any]:
    """What a training step logs about its candidates' rewards.

    Returns:
        ``{"n": candidates, "rewarded": with a reward, "excluded": without,
        "reward_mean", "reward_std" (population std over the rewarded; None when none),
        "stage_share": {stage: share of all n, for every stage of STAGES},
        "guard_rejected": count, "guard_share": share of all n,
        "correct": count of the correct stage (``correct`` and ``slow``),
        "speedup_n": correct ones with a measured speedup,
        "speedup_mean", "speedup_geomean" (x, over those; None when none),
        "speedup_keys": the baselines used}``; shares are None for an empty batch.
    """
    items = list(breakdowns)
    n = len(items)
    rewards = [b.total for b in items if b.total is not None]
    counts = {s: 0 for s in STAGES}
    for b in items:
        counts[b.stage] = counts.get(b.stage, 0) + 1
    guarded = sum(1 for b in items if b.guard_rejected)
    speedups = [b.speedup for b in items if b.stage == "correct" and b.speedup is not None]
    return {
        "n": n,
        "rewarded": len(rewards),
        "excluded": n - len(rewards),
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if rewards else None,
        "stage_share": {s: (c / n if n else None) for s, c in counts.items()},
        "guard_rejected": guarded,
        "guard_share": guarded / n if n else None,
        "correct": counts["correct"],
        "speedup_n": len(speedups),
        "speedup_mean": statistics.fmean(speedups) if speedups else None,
        "speedup_geomean": (math.exp(statistics.fmean(math.log(s) for s in speedups))
                            if speedups else None),
        "speedup_keys": sorted({b.speedup_key for b in items if b.stage == "correct"}),
    }


__all__ = [
    "DEFAULT_ADV_EPS",
    "DEFAULT_DISCOUNT",
    "EXCLUDED_WHY",
    "SPEEDUP_KEYS",
    "SPEEDUP_MODES",
    "STAGES",
    "STAGE_OF_STATUS",
    "SUSPICIOUS_SPEEDUP",
    "RewardBreakdown",
    "RewardConfig",
    "batch_summary",
    "group_advantages",
    "record_speedup",
    "reward",
    "reward_value",
    "speedup_score",
    "turn_returns",
]
