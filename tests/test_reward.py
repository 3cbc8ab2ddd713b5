"""The unified reward (cudaperf_cli/reward.py, docs/reward.md): every branch against values
computed by hand from the default constants

    guard -1.5 < format -1.0 < compile -0.6 < runtime -0.4 < wrong -0.2
    correct = 1.0 + 0.25 * clip(log2 x, -3, 3) + 0.2 * structure + 0.2 * (ranker - 0.5)

plus config validation, multi-turn returns (discount 0.4), GRPO group advantages, the
batch summary, and dict / TurnRecord inputs.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from cudaperf_cli.agent.loop import STATUSES, TurnRecord
from cudaperf_cli.bench.metrics import STATUS_ORDER
from cudaperf_cli.reward import (
    STAGE_OF_STATUS,
    STAGES,
    RewardConfig,
    batch_summary,
    group_advantages,
    record_speedup,
    reward,
    reward_value,
    speedup_score,
    turn_returns,
)

CAPPED = RewardConfig(speedup_mode="capped")


def correct(**kw):
    return {"status": "correct", **kw}


# ---------------------------------------------------------------------------------------
# Failure stages, guard, excluded
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, stage, value",
    [
        ("refused", "format", -1.0),
        ("format_error", "format", -1.0),
        ("compile_error", "compile", -0.6),
        ("compile_timeout", "compile", -0.6),
        ("runtime_error", "runtime", -0.4),
        ("crash", "runtime", -0.4),
        ("timeout", "runtime", -0.4),
        ("wrong", "wrong", -0.2),
    ],
)
def test_failure_stages(status, stage, value):
    # structure and ranker never lift a failed candidate (no reward for compile-only work)
    b = reward({"status": status, "structure_score": 0.9, "speedup_kernel": 5.0}, ranker_score=0.9)
    assert b.total == pytest.approx(value)
    assert b.stage == stage and b.status == status
    assert b.stage_term == pytest.approx(value)
    assert (b.speedup_term, b.structure_term, b.ranker_term) == (0.0, 0.0, 0.0)
    assert b.speedup is None and not b.guard_rejected and not b.excluded
    assert status in b.reason and "\n" not in b.reason


def test_failure_constants_are_configurable():
    cfg = RewardConfig(format_reward=-2.0, compile_reward=-1.0, runtime_reward=-0.5,
                       wrong_reward=-0.1, guard_penalty=-3.0)
    got = [reward_value({"status": s}, cfg)
           for s in ("guard_rejected", "format_error", "compile_error", "crash", "wrong")]
    assert got == pytest.approx([-3.0, -2.0, -1.0, -0.5, -0.1])


def test_guard_rejected_gets_the_lowest_reward_and_is_flagged():
    b = reward({"status": "guard_rejected", "guard": "torch_fallback", "structure_score": 1.0},
               ranker_score=1.0)
    assert b.total == pytest.approx(-1.5)
    assert b.stage == "guard" and b.guard_rejected and b.guard == "torch_fallback"
    assert "torch_fallback" in b.reason
    low, _ = RewardConfig().bounds()
    assert b.total == low
    for status in STAGE_OF_STATUS:
        v = reward_value({"status": status})
        assert v is None or v >= b.total
        if status != "guard_rejected":
            assert v is None or v > b.total


@pytest.mark.parametrize("status", ["no_device", "does_not_fit", "reference_error", "pending"])
def test_excluded_statuses_have_no_reward(status):
    b = reward({"status": status, "speedup_kernel": 3.0})
    assert b.total is None and b.excluded and b.stage == "excluded"
    assert reward_value({"status": status}) is None
    assert "excluded" in b.reason


def test_every_status_of_the_loop_and_bench_has_a_stage():
    for status in set(STATUSES) | set(STATUS_ORDER):
        assert STAGE_OF_STATUS[status] in STAGES


def test_the_stages_are_read_from_the_one_status_table():
    from cudaperf_cli import statuses

    assert STAGE_OF_STATUS == {s.name: s.reward_stage for s in statuses.ORDER}
    assert STAGE_OF_STATUS["slow"] == "correct" and STAGE_OF_STATUS["does_not_fit"] == "excluded"
    b = reward({"status": "does_not_fit"})
    assert "does not fit" in b.reason


def test_a_slow_candidate_is_rewarded_as_correct_with_its_speedup():
    # verified; timing stopped after the warm-up at 16x slower than the baseline:
    # 1.0 + 0.25 * clip(log2(1/16), -3, 3) + 0.2 * 0.5 = 1.0 - 0.75 + 0.1 = 0.35
    b = reward({"status": "slow", "speedup_kernel": 1 / 16, "structure_score": 0.5})
    assert b.stage == "correct" and not b.excluded
    assert b.total == pytest.approx(0.35)
    assert b.speedup == pytest.approx(1 / 16)
    assert b.reason.startswith("slow (verified, estimated time): bonus +1")
    # 4x slower than a correct candidate of the same problem: lower, and above every failure
    fast = reward_value(correct(speedup_kernel=4.0))
    slow = reward_value({"status": "slow", "speedup_kernel": 1.0})
    assert fast == pytest.approx(1.5) and slow == pytest.approx(1.0)
    assert slow > reward_value({"status": "wrong"})
    s = batch_summary([reward({"status": "slow", "speedup_kernel": 0.5}), reward(correct())])
    assert s["correct"] == 2 and s["speedup_n"] == 1


def test_failures_are_strictly_graded_and_below_every_correct_reward():
    cfg = RewardConfig()
    order = [reward_value({"status": s}, cfg)
             for s in ("guard_rejected", "format_error", "compile_error", "runtime_error", "wrong")]
    assert order == sorted(order) and len(set(order)) == len(order)
    # the worst correct candidate: 1/100x (clipped to 1/8x), no structure, ranker says 0
    worst = reward_value(correct(speedup_kernel=0.01), cfg, ranker_score=0.0)
    assert worst == pytest.approx(1.0 - 0.75 - 0.1)  # 0.15
    assert worst == pytest.approx(cfg.correct_range()[0])
    assert worst > order[-1]


# ---------------------------------------------------------------------------------------
# Correct candidates
# ---------------------------------------------------------------------------------------


def test_correct_log_speedup_with_structure():
    # 1.0 + 0.25 * log2(4) + 0.2 * 0.5 = 1.0 + 0.5 + 0.1 = 1.6
    b = reward(correct(speedup_kernel=4.0, structure_score=0.5))
    assert b.total == pytest.approx(1.6)
    assert b.stage_term == pytest.approx(1.0)
    assert b.speedup_term == pytest.approx(0.5)
    assert b.structure_term == pytest.approx(0.1)
    assert b.ranker_term == 0.0
    assert b.speedup == 4.0 and b.speedup_key == "kernel"
    assert b.total == pytest.approx(b.stage_term + b.speedup_term + b.structure_term + b.ranker_term)


def test_correct_slowdown_is_negative_in_log_mode():
    # 0.5x: 1.0 + 0.25 * log2(0.5) = 1.0 - 0.25 = 0.75 (structure missing -> 0)
    b = reward(correct(speedup_kernel=0.5))
    assert b.total == pytest.approx(0.75)
    assert b.speedup_term == pytest.approx(-0.25)
    assert b.structure_term == 0.0 and "no structure score" in b.reason


def test_log_speedup_is_clipped():
    # 20x: log2 20 = 4.32 -> clipped to 3 -> 0.25 * 3 = 0.75; total 1.75
    b = reward(correct(speedup_kernel=20.0))
    assert b.speedup_term == pytest.approx(0.75)
    assert b.total == pytest.approx(1.75)
    assert "check" in b.reason  # > 10x flagged for a second look (DESIGN.md)
    assert reward_value(correct(speedup_kernel=1000.0)) == pytest.approx(1.75)
    # 1/100x: log2 = -6.64 -> -3 -> -0.75; total 0.25
    assert reward_value(correct(speedup_kernel=0.01)) == pytest.approx(0.25)
    # a narrower clip: 1.0 (2x): 20x -> 0.25
    assert reward_value(correct(speedup_kernel=20.0), RewardConfig(speedup_clip=1.0)) == pytest.approx(1.25)
    assert speedup_score(1.5, RewardConfig()) == pytest.approx(math.log2(1.5))
    assert speedup_score(8.0, RewardConfig()) == pytest.approx(3.0)


def test_capped_speedup():
    # 4x, cap 8: min(4, 8) / 8 = 0.5 -> 0.25 * 0.5 = 0.125; + 0.2 * 0.5 -> 1.225
    b = reward(correct(speedup_kernel=4.0, structure_score=0.5), CAPPED)
    assert b.speedup_term == pytest.approx(0.125)
    assert b.total == pytest.approx(1.225)
    # 20x: min(20, 8) / 8 = 1 -> 0.25; total 1.25 (one outlier does not dominate)
    assert reward_value(correct(speedup_kernel=20.0), CAPPED) == pytest.approx(1.25)
    # 0.5x: 0.5 / 8 = 0.0625 -> 0.015625; total 1.015625 (capped is never negative)
    assert reward_value(correct(speedup_kernel=0.5), CAPPED) == pytest.approx(1.015625)
    # cap 2, weight 1: 3x -> min(3, 2) / 2 = 1 -> +1; total 2.0
    cfg = RewardConfig(speedup_mode="capped", speedup_cap=2.0, w_speedup=1.0)
    assert reward_value(correct(speedup_kernel=3.0), cfg) == pytest.approx(2.0)
    assert reward_value(correct(speedup_kernel=1.5), cfg) == pytest.approx(1.75)


def test_missing_speedup_counts_as_parity():
    b = reward(correct(structure_score=0.5))
    assert b.speedup is None and b.speedup_term == 0.0  # log2(1) = 0
    assert b.total == pytest.approx(1.1)
    assert "no kernel speedup" in b.reason
    # capped: 1x -> 1 / 8 * 0.25 = 0.03125
    assert reward_value(correct(), CAPPED) == pytest.approx(1.03125)
    # not finite or not positive: ignored (as bench.metrics.speedups_of does)
    for bad in (float("nan"), float("inf"), 0.0, -2.0, "4", True):
        assert reward(correct(speedup_kernel=bad)).speedup is None


def test_ranker_on_and_off():
    rec = correct(speedup_kernel=4.0, structure_score=0.5)
    assert reward_value(rec) == pytest.approx(1.6)  # off
    # on: 0.2 * (0.8 - 0.5) = +0.06 -> 1.66
    b = reward(rec, ranker_score=0.8)
    assert b.ranker_term == pytest.approx(0.06) and b.total == pytest.approx(1.66)
    assert "ranker 0.8" in b.reason
    assert reward_value(rec, ranker_score=0.5) == pytest.approx(1.6)  # centred: 0.5 adds 0
    assert reward_value(rec, ranker_score=0.0) == pytest.approx(1.5)  # -0.1
    assert reward_value(rec, ranker_score=1.0) == pytest.approx(1.7)  # +0.1
    assert reward_value(rec, RewardConfig(w_ranker=0.0), ranker_score=1.0) == pytest.approx(1.6)


def test_structure_weight():
    # 2x, structure 1.0: 1.0 + 0.25 + 0.2 = 1.45; with w_structure 0.5: 1.75
    rec = correct(speedup_kernel=2.0, structure_score=1.0)
    assert reward_value(rec) == pytest.approx(1.45)
    assert reward_value(rec, RewardConfig(w_structure=0.5)) == pytest.approx(1.75)
    assert reward_value(correct(speedup_kernel=2.0, structure_score=0.0)) == pytest.approx(1.25)


def test_speedup_key_picks_the_baseline():
    rec = correct(speedup_kernel=4.0, speedup_compile=0.5, speedup_e2e=2.0)
    assert reward_value(rec) == pytest.approx(1.5)  # kernel: +0.5
    b = reward(rec, RewardConfig(speedup_key="compile"))  # 0.5x vs torch.compile: -0.25
    assert b.total == pytest.approx(0.75) and b.speedup == 0.5 and b.speedup_key == "compile"
    assert reward_value(rec, RewardConfig(speedup_key="e2e")) == pytest.approx(1.25)


def test_correct_range_and_bounds():
    assert RewardConfig().correct_range() == pytest.approx((0.15, 2.05))
    assert RewardConfig().bounds() == pytest.approx((-1.5, 2.05))
    assert CAPPED.correct_range() == pytest.approx((0.9, 1.55))
    # the top is reached: >= 8x, structure 1, ranker 1
    top = reward_value(correct(speedup_kernel=9.0, structure_score=1.0), ranker_score=1.0)
    assert top == pytest.approx(2.05)


# ---------------------------------------------------------------------------------------
# Inputs: dicts of turns.jsonl / candidates.jsonl, TurnRecord
# ---------------------------------------------------------------------------------------


def test_candidates_row_speedups_table():
    row = {"schema_version": 1, "status": "correct", "correct": True,
           "speedups": {"kernel": 4.0, "e2e": 2.0}, "structure_score": 0.5}
    assert reward_value(row) == pytest.approx(1.6)
    assert reward_value(row, RewardConfig(speedup_key="e2e")) == pytest.approx(1.35)
    assert record_speedup(row, "kernel") == 4.0 and record_speedup(row, "compile") is None
    # the speedup_<key> field wins over the table (bench.metrics.speedups_of's order)
    assert record_speedup({**row, "speedup_kernel": 2.0}, "kernel") == 2.0


def test_dict_and_turn_record_agree():
    rec = TurnRecord(turn=1, policy="openai", description="tiled", status="correct",
                     speedup_kernel=4.0, speedup_e2e=2.0, structure_score=0.5, gpu_ms=0.1)
    as_dict = json.loads(json.dumps(dataclasses.asdict(rec)))  # a turns.jsonl line
    row = {"status": "correct", "speedups": {"kernel": 4.0, "e2e": 2.0}, "structure_score": 0.5}
    for cfg in (RewardConfig(), CAPPED, RewardConfig(speedup_key="e2e")):
        a = reward(rec, cfg, ranker_score=0.7)
        assert a == reward(as_dict, cfg, ranker_score=0.7)
        assert a == reward(TurnRecord.from_json(as_dict), cfg, ranker_score=0.7)
        assert a == reward(row, cfg, ranker_score=0.7)
    assert reward(rec).total == pytest.approx(1.6)
    guarded = TurnRecord(turn=0, policy="p", description="d", status="guard_rejected",
                         guard="side_stream")
    assert reward(guarded).guard == "side_stream"
    assert reward(guarded) == reward(dataclasses.asdict(guarded))


def test_bad_records():
    with pytest.raises(ValueError, match="status"):
        reward({"speedup_kernel": 2.0})
    with pytest.raises(ValueError, match="exploded"):
        reward({"status": "exploded"})
    with pytest.raises(ValueError, match="structure_score"):
        reward(correct(structure_score=1.5))
    with pytest.raises(ValueError, match="structure_score"):
        reward(correct(structure_score=float("nan")))
    with pytest.raises(ValueError, match="ranker_score"):
        reward(correct(), ranker_score=-0.1)
    with pytest.raises(ValueError, match="ranker_score"):
        reward(correct(), ranker_score=float("nan"))
    with pytest.raises(TypeError):
        reward(["correct"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        speedup_score(0.0, RewardConfig())


# ---------------------------------------------------------------------------------------
# RewardConfig validation
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field_name",
    [
        ({"compile_reward": -1.0}, "compile_reward"),  # == format_reward: not strictly above
        ({"format_reward": -0.7, "compile_reward": -0.8}, "compile_reward"),
        ({"runtime_reward": -0.7}, "runtime_reward"),
        ({"wrong_reward": -0.5}, "wrong_reward"),
        ({"guard_penalty": -0.5}, "guard_penalty"),  # above format_reward
        ({"guard_penalty": -1.0}, "guard_penalty"),  # equal to it
        ({"wrong_reward": 0.5}, "wrong_reward"),  # above the lowest correct reward
        ({"correct_bonus": 0.5}, "correct_bonus"),  # 0.5 - 0.75 - 0.1 = -0.35 < -0.2
        ({"speedup_key": "foo"}, "speedup_key"),
        ({"speedup_mode": "linear"}, "speedup_mode"),
        ({"speedup_clip": 0.0}, "speedup_clip"),
        ({"speedup_cap": 0.5}, "speedup_cap"),
        ({"w_speedup": -0.1}, "w_speedup"),
        ({"w_structure": -0.1}, "w_structure"),
        ({"w_ranker": -0.1}, "w_ranker"),
        ({"discount": 1.5}, "discount"),
        ({"discount": -0.1}, "discount"),
        ({"format_reward": float("nan")}, "format_reward"),
        ({"w_speedup": float("inf")}, "w_speedup"),
        ({"correct_bonus": "1"}, "correct_bonus"),
        ({"w_ranker": True}, "w_ranker"),
    ],
)
def test_config_validation(kwargs, field_name):
    with pytest.raises(ValueError, match=field_name):
        RewardConfig(**kwargs)


def test_config_validation_depends_on_mode():
    # capped: the lowest correct reward is 0.5 + 0 - 0.1 = 0.4 > -0.2, so this is valid
    cfg = RewardConfig(correct_bonus=0.5, speedup_mode="capped")
    assert cfg.correct_range()[0] == pytest.approx(0.4)
    # log with a bigger weight: 1.0 - 0.4 * 3 - 0.1 = -0.3 < -0.2
    with pytest.raises(ValueError, match="correct_bonus"):
        RewardConfig(w_speedup=0.4)


def test_config_fields_have_help_and_round_trip():
    for f in dataclasses.fields(RewardConfig):
        assert f.metadata.get("help"), f.name
    cfg = RewardConfig(speedup_mode="capped", speedup_cap=4, w_ranker=0)
    assert isinstance(cfg.speedup_cap, float) and cfg.speedup_cap == 4.0
    assert RewardConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="w_speed.*known"):
        RewardConfig.from_dict({"w_speed": 1.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.w_speedup = 2.0  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Multi-turn returns
# ---------------------------------------------------------------------------------------


def test_turn_returns_three_turns_discount_04():
    # compile error, wrong, then correct 4x with structure 0.25:
    # r = [-0.6, -0.2, 1.0 + 0.5 + 0.05 = 1.55]
    rs = [reward_value({"status": "compile_error"}), reward_value({"status": "wrong"}),
          reward_value(correct(speedup_kernel=4.0, structure_score=0.25))]
    assert rs == pytest.approx([-0.6, -0.2, 1.55])
    # G3 = 1.55; G2 = -0.2 + 0.4 * 1.55 = 0.42; G1 = -0.6 + 0.4 * 0.42 = -0.432
    assert turn_returns(rs, 0.4) == pytest.approx([-0.432, 0.42, 1.55])
    assert turn_returns(rs) == pytest.approx([-0.432, 0.42, 1.55])  # 0.4 is the default
    assert RewardConfig().discount == 0.4


def test_turn_returns_edge_discounts():
    rs = [-0.6, -0.2, 1.25]
    assert turn_returns(rs, 0.0) == pytest.approx(rs)  # own reward only
    assert turn_returns(rs, 1.0) == pytest.approx([0.45, 1.05, 1.25])  # suffix sums
    assert turn_returns([], 0.4) == []


def test_turn_returns_none_handling():
    # G3 = 0.5; turn 2 excluded: None, carries 0 + 0.4 * 0.5 = 0.2; G1 = 1.0 + 0.4 * 0.2
    assert turn_returns([1.0, None, 0.5], 0.4) == pytest.approx([1.08, None, 0.5])
    assert turn_returns([0.5, None], 0.4) == pytest.approx([0.5, None])
    assert turn_returns([None, None], 0.4) == [None, None]


def test_turn_returns_errors():
    for bad in (-0.1, 1.1, float("nan"), True):
        with pytest.raises(ValueError, match="discount"):
            turn_returns([1.0], bad)
    with pytest.raises(ValueError, match="turn 1"):
        turn_returns([1.0, float("nan")], 0.4)


# ---------------------------------------------------------------------------------------
# GRPO group advantages
# ---------------------------------------------------------------------------------------

GROUP = [2.0, 1.0, -0.2, -1.0]
# mean = 1.8 / 4 = 0.45; deviations 1.55, 0.55, -0.65, -1.45; squares sum to
# 2.4025 + 0.3025 + 0.4225 + 2.1025 = 5.23; sample variance 5.23 / 3; std = 1.32035349
HAND_STD = 1.3203534880225574
HAND_ADV = [1.1738391500, 0.4165235694, -0.4922551274, -1.0981075919]  # dev / (std + 1e-4)


def test_group_advantages_std_scaled():
    assert math.sqrt(5.23 / 3) == pytest.approx(HAND_STD)
    assert group_advantages(GROUP) == pytest.approx(HAND_ADV, rel=1e-9)
    assert group_advantages(GROUP, eps=1e-4, scale="std") == pytest.approx(
        [d / (HAND_STD + 1e-4) for d in (1.55, 0.55, -0.65, -1.45)], rel=1e-12)
    assert sum(group_advantages(GROUP)) == pytest.approx(0.0, abs=1e-12)


def test_group_advantages_unscaled():
    assert group_advantages(GROUP, scale=None) == pytest.approx([1.55, 0.55, -0.65, -1.45])


def test_group_advantages_none_handling():
    # a None reward is left out of the mean and std and gets None
    got = group_advantages([2.0, None, 1.0, -0.2, -1.0])
    assert got[1] is None
    assert [got[0], *got[2:]] == pytest.approx(HAND_ADV, rel=1e-9)
    assert group_advantages([None, None]) == [None, None]
    assert group_advantages([0.7, None]) == [0.0, None]  # one usable reward: no comparison
    assert group_advantages([0.3, 0.3, 0.3]) == [0.0, 0.0, 0.0]  # equal rewards: 0
    assert group_advantages([]) == []


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="scale"):
        group_advantages(GROUP, scale="group")
    with pytest.raises(ValueError, match="eps"):
        group_advantages(GROUP, eps=-1.0)
    with pytest.raises(ValueError, match="reward 1"):
        group_advantages([1.0, float("inf")])


def test_rollout_rewards_returns_and_advantages():
    """Four samples of one prompt, two turns each (the followed sample's chain), as a
    training step would see them: reward per turn, discounted returns, then advantages
    of the first turn's returns across the group."""
    trajectories = [
        [{"status": "compile_error"}, correct(speedup_kernel=2.0)],  # -0.6, 1.25
        [{"status": "wrong"}, {"status": "wrong"}],  # -0.2, -0.2
        [{"status": "format_error"}, {"status": "no_device"}],  # -1.0, None
        [{"status": "guard_rejected", "guard": "decoy"}, correct(speedup_kernel=8.0)],  # -1.5, 1.75
    ]
    returns = [turn_returns([reward_value(r) for r in traj], 0.4) for traj in trajectories]
    # -0.6 + 0.4 * 1.25 = -0.1; -0.2 + 0.4 * -0.2 = -0.28; -1.0 + 0.4 * 0 = -1.0;
    # -1.5 + 0.4 * 1.75 = -0.8
    assert returns == [pytest.approx([-0.1, 1.25]), pytest.approx([-0.28, -0.2]),
                       [pytest.approx(-1.0), None], pytest.approx([-0.8, 1.75])]
    first = [g[0] for g in returns]
    # mean = -2.18 / 4 = -0.545; deviations 0.445, 0.265, -0.455, -0.255
    # squares: 0.198025 + 0.070225 + 0.207025 + 0.065025 = 0.5403; std = sqrt(0.5403 / 3)
    std = 0.42438190267
    assert math.sqrt(0.5403 / 3) == pytest.approx(std)
    assert group_advantages(first) == pytest.approx(
        [d / (std + 1e-4) for d in (0.445, 0.265, -0.455, -0.255)], rel=1e-8)


# ---------------------------------------------------------------------------------------
# Batch summary
# ---------------------------------------------------------------------------------------


def test_batch_summary():
    batch = [
        reward(correct(speedup_kernel=4.0, structure_score=0.5)),  # 1.6
        reward(correct(speedup_kernel=2.0)),  # 1.25
        reward({"status": "wrong"}),  # -0.2
        reward({"status": "compile_error"}),  # -0.6
        reward({"status": "guard_rejected", "guard": "decoy"}),  # -1.5
        reward({"status": "no_device"}),  # None
    ]
    s = batch_summary(batch)
    assert (s["n"], s["rewarded"], s["excluded"]) == (6, 5, 1)
    # mean = 0.55 / 5 = 0.11; deviations 1.49, 1.14, -0.31, -0.71, -1.61;
    # squares sum to 6.712; population std = sqrt(6.712 / 5) = 1.15861987
    assert s["reward_mean"] == pytest.approx(0.11)
    assert s["reward_std"] == pytest.approx(1.1586198686)
    assert s["stage_share"] == pytest.approx({
        "guard": 1 / 6, "format": 0.0, "compile": 1 / 6, "runtime": 0.0, "wrong": 1 / 6,
        "correct": 2 / 6, "excluded": 1 / 6})
    assert s["guard_rejected"] == 1 and s["guard_share"] == pytest.approx(1 / 6)
    assert s["correct"] == 2 and s["speedup_n"] == 2
    assert s["speedup_mean"] == pytest.approx(3.0)
    assert s["speedup_geomean"] == pytest.approx(math.sqrt(8.0))
    assert s["speedup_keys"] == ["kernel"]
    json.dumps(s)  # loggable as is


def test_batch_summary_empty_and_all_excluded():
    s = batch_summary([])
    assert s["n"] == 0 and s["reward_mean"] is None and s["guard_share"] is None
    assert all(v is None for v in s["stage_share"].values())
    s = batch_summary([reward({"status": "no_device"})])
    assert s["reward_mean"] is None and s["reward_std"] is None
    assert s["stage_share"]["excluded"] == 1.0 and s["speedup_mean"] is None
