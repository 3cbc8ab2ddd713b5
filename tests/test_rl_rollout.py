"""The multi-turn rollout of ``cudaperf train policy`` (cudaperf_cli/rl/rollout.py) with
recorded replies and a fake evaluator: rewards, discounted returns, group advantages and the
step's metrics, against numbers computed by hand from docs/reward.md (default RewardConfig:
guard -1.5, format -1.0, compile -0.6, wrong -0.2, correct 1 + 0.25*log2(x) + 0.2*structure,
discount 0.4; advantages (G - mean) / (sample std + 1e-4) over a problem's K*T turns).

No torch, no GPU: the tokenizer is a character-level fake, the evaluator reads the outcome
from a comment in the candidate.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cudaperf_cli.rl.config import PolicyTrainConfig
from cudaperf_cli.rl.metrics import MetricsLogger, console_line, step_metrics
from cudaperf_cli.rl.problems import load_problems
from cudaperf_cli.rl.rollout import (
    RETURN_FIELD, MultiTurnRollout, RecordedGenerator, prompt_key, unified_return,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class CharTokenizer:
    """One token per character (ord), EOS = 0; a visible chat template."""

    chat_template = "fake"
    eos_token_id = 0

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        text = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    @staticmethod
    def decode(ids):
        return "".join(chr(i) for i in ids if i)


def kernel(fn: str, outcome: str) -> str:
    return (f"Here is my kernel ({outcome}).\n\n```cuda\n#include <cuda_runtime.h>\n// outcome: {outcome}\n"
            f'extern "C" int {fn}_cuda(int n)\n{{\n    return 0;\n}}\n```\n')


NO_CODE = "I would launch one thread per element and loop over k inside the thread."


class FakeEvaluator:
    """Sets the record as the real evaluation would, from the ``// outcome:`` comment."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def evaluate(self, spec, record):
        self.calls.append((spec.name, record.turn))
        m = re.search(r"// outcome: (\S+)(?: speedup=(\S+))?(?: structure=(\S+))?", record.source or "")
        status, speedup, structure = m.group(1), m.group(2), m.group(3)
        record.status = status
        if status == "compile_error":
            record.build = {"errors": 'cand.cu(4): error: identifier "alpah" is undefined'}
            record.message = 'cand.cu(4): error: identifier "alpah" is undefined'
        elif status == "wrong":
            record.message = "max relative error 0.5 at C[3][7] (main)"
        elif status == "guard_rejected":
            record.guard, record.message = "torch_fallback", "PyTorch computed the result"
        elif status == "no_device":
            record.message = "compiled; not run (no CUDA device)"
        elif status == "correct":
            record.speedup_kernel = float(speedup)
            record.speedup_e2e = float(speedup) / 2
            record.structure_score = None if structure is None else float(structure)
            record.gpu_ms, record.max_rel_err = 1.0, 1e-7
            record.registers, record.spill_bytes, record.baseline = 32, 0, "gcc -O3, 1 thread"


@pytest.fixture(scope="module")
def problems():
    loaded = load_problems([EXAMPLES / "matmul.c", EXAMPLES / "elementwise.c"])
    assert loaded.skipped == []
    return loaded.problems


def replies_for(problems):
    """In the rollout's call order: turn 1 of (A traj 0, A traj 1, B traj 0, B traj 1),
    then turn 2 of the same."""
    a, b = problems[0].problem.function, problems[1].problem.function
    assert (a, b) == ("kernel_gemm", "magnitude")
    turn1 = [kernel(a, "compile_error"), NO_CODE, kernel(b, "guard_rejected"), kernel(b, "no_device")]
    turn2 = [kernel(a, "correct speedup=4 structure=0.5"), kernel(a, "wrong"),
             kernel(b, "correct speedup=2"), kernel(b, "compile_error")]
    return turn1 + turn2


def run_rollout(problems, config=None, evaluator=None):
    cfg = config or PolicyTrainConfig(turns=2, trajectories=2, problems_per_step=2, eval_workers=3)
    tok = CharTokenizer()
    ev = evaluator or FakeEvaluator()
    rollout = MultiTurnRollout(problems, tok, RecordedGenerator(replies_for(problems), tok), ev, cfg)
    prompts = [problems[0].messages] * 4 + [problems[1].messages] * 4  # TRL's RepeatSampler order
    return rollout, rollout.run(prompts), ev


# Hand computation (docs/reward.md, defaults):
#   A = matmul, traj 0: compile error r = -0.6, then correct 4x structure 0.5:
#       r = 1 + 0.25*log2(4) + 0.2*0.5 = 1.6.    G2 = 1.6, G1 = -0.6 + 0.4*1.6 = 0.04
#   A, traj 1: no code r = -1.0, then wrong r = -0.2.  G2 = -0.2, G1 = -1.0 + 0.4*(-0.2) = -1.08
#   B = elementwise, traj 0: guard r = -1.5, then correct 2x (no structure):
#       r = 1 + 0.25*1 = 1.25.                  G2 = 1.25, G1 = -1.5 + 0.4*1.25 = -1.0
#   B, traj 1: no_device r = None (excluded), then compile error -0.6.  G2 = -0.6, G1 = None
# Group A = [0.04, 1.6, -1.08, -0.2]: mean 0.36/4 = 0.09; deviations -0.05, 1.51, -1.17, -0.29;
#   sample var (0.0025 + 2.2801 + 1.3689 + 0.0841)/3 = 3.7356/3 = 1.2452, std 1.115885;
#   A_i = dev/(1.115885 + 0.0001) = -0.044803, 1.353064, -1.048401, -0.259860
# Group B = [-1.0, 1.25, None, -0.6]: mean -0.35/3 = -0.116667; deviations -0.883333, 1.366667,
#   -0.483333; sample var (0.780278 + 1.867778 + 0.233611)/2 = 1.440833, std 1.200347;
#   A_i = -0.735837, 1.138465, None, -0.402628
EXPECTED = [
    # problem, trajectory, turn, status, reward, return, advantage
    ("matmul:kernel_gemm", 0, 0, "compile_error", -0.6, 0.04, -0.044803),
    ("matmul:kernel_gemm", 0, 1, "correct", 1.6, 1.6, 1.353064),
    ("matmul:kernel_gemm", 1, 0, "format_error", -1.0, -1.08, -1.048401),
    ("matmul:kernel_gemm", 1, 1, "wrong", -0.2, -0.2, -0.259860),
    ("elementwise:magnitude", 0, 0, "guard_rejected", -1.5, -1.0, -0.735837),
    ("elementwise:magnitude", 0, 1, "correct", 1.25, 1.25, 1.138465),
    ("elementwise:magnitude", 1, 0, "no_device", None, None, None),
    ("elementwise:magnitude", 1, 1, "compile_error", -0.6, -0.6, -0.402628),
]


def approx(x):
    return None if x is None else pytest.approx(x, abs=1e-5)


def test_rewards_returns_and_advantages(problems):
    _, batch, ev = run_rollout(problems)
    got = [(s.problem, s.trajectory, s.turn, s.record.status, s.reward, s.ret, s.advantage)
           for s in batch.samples]
    want = [(p, k, t, st, approx(r), approx(g), approx(a)) for p, k, t, st, r, g, a in EXPECTED]
    assert got == want
    # the reply without code never reached the evaluator; the 7 others did
    assert len(ev.calls) == 7 and ("matmul:kernel_gemm", 0) in ev.calls
    assert batch.samples[2].record.message.startswith("Your reply had no usable code")
    assert batch.samples[4].breakdown.guard_rejected and batch.samples[4].breakdown.guard == "torch_fallback"


def test_trl_output_and_reward_function(problems):
    rollout, _, _ = run_rollout(problems)
    out = rollout(
        [problems[0].messages] * 4 + [problems[1].messages] * 4, trainer=None)
    assert set(out) >= {"prompt_ids", "completion_ids", "logprobs", RETURN_FIELD}
    assert out["logprobs"] is None  # recorded replies: no sampler log-probabilities
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == 8
    assert all(ids[-1] == 0 for ids in out["completion_ids"])  # each reply ends with EOS
    assert out["cudaperf_turn"] == [1, 2, 1, 2, 1, 2, 1, 2]
    returns = unified_return(prompts=None, completions=None, **{RETURN_FIELD: out[RETURN_FIELD]})
    assert returns == [approx(g) for *_, g, _a in EXPECTED]


def test_feedback_of_turn_1_is_in_the_prompt_of_turn_2(problems):
    rollout, batch, _ = run_rollout(problems)
    tok = CharTokenizer()
    first = tok.decode(batch.samples[0].prompt_ids)
    second = tok.decode(batch.samples[1].prompt_ids)
    assert first.count("<assistant>") == 1 and first.startswith("<system>")
    assert second.startswith(first[: -len("<assistant>")])  # same system + task
    reply1 = tok.decode(batch.samples[0].completion_ids)
    assert f"<assistant>{reply1}</assistant>" in second
    assert "did not compile with nvcc" in second and 'identifier "alpah" is undefined' in second
    assert "Fix the compile errors above" in second  # prompts/feedback.j2
    # the prompt is exactly what `cudaperf optimize --policy openai` would send
    from cudaperf_cli.policies.model_policy import ModelPolicy

    history = [batch.samples[0].record]
    messages, _ = ModelPolicy(None, "x", arch="sm_90").conversation(problems[0].problem, history)
    assert second == tok.apply_chat_template(messages)


def test_step_metrics(problems, tmp_path):
    _, batch, _ = run_rollout(problems)
    m = step_metrics(batch)
    assert m["samples"] == 8 and m["problems"] == ["matmul:kernel_gemm", "elementwise:magnitude"]
    # 8 samples: guard 1, format 1, compile 2, wrong 1, correct 2, excluded 1
    assert m["stage_share"] == {"guard": 1 / 8, "format": 1 / 8, "compile": 2 / 8, "runtime": 0.0,
                                "wrong": 1 / 8, "correct": 2 / 8, "excluded": 1 / 8}
    assert m["guard_share"] == 1 / 8
    assert m["speedup_mean"] == pytest.approx(3.0)  # (4x + 2x) / 2, kernel-only
    assert m["speedup_key"] == "kernel"
    # turn 1 rewards -0.6, -1.0, -1.5 (no_device excluded): mean -3.1/3 = -1.033333,
    #   population std sqrt((0.433333^2 + 0.033333^2 + 0.466667^2)/3) = sqrt(0.406667/3) = 0.368179
    # turn 2 rewards 1.6, -0.2, 1.25, -0.6: mean 2.05/4 = 0.5125,
    #   population std sqrt((1.0875^2 + 0.7125^2 + 0.7375^2 + 1.1125^2)/4) = sqrt(3.471875/4) = 0.931648
    t1, t2 = m["per_turn"]
    assert (t1["n"], t1["rewarded"], t2["n"], t2["rewarded"]) == (4, 3, 4, 4)
    assert t1["reward_mean"] == pytest.approx(-1.033333, abs=1e-5)
    assert t1["reward_std"] == pytest.approx(0.368179, abs=1e-5)
    assert t2["reward_mean"] == pytest.approx(0.5125, abs=1e-9)
    assert t2["reward_std"] == pytest.approx(0.931648, abs=1e-5)
    assert t2["correct_share"] == 0.5
    assert m["reward"]["excluded"] == 1 and m["reward"]["rewarded"] == 7
    # replies: EOS added to each; no reply was cut by max_new_tokens
    assert m["tokens_per_reply"]["truncated_share"] == 0.0
    line = {"step": 1, "steps": 2, **m}
    text = console_line(line)
    assert text.startswith("step 1/2") and "t1 -1.03" in text and "guard 12%" in text
    from cudaperf_cli.rl.metrics import _scalars  # what TensorBoard gets

    scalars = _scalars(line)
    assert scalars["stage/guard"] == 1 / 8 and scalars["reward/turn2_mean"] == pytest.approx(0.5125)
    log = MetricsLogger(tmp_path, 2, None, tensorboard=False)
    log.on_batch(batch)
    log.write(line)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["guard_share"] == 1 / 8
    turns = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [t["status"] for t in turns] == [e[3] for e in EXPECTED]
    assert turns[1]["reward"] == pytest.approx(1.6) and turns[0]["return"] == pytest.approx(0.04)


def test_turn_baseline(problems):
    cfg = PolicyTrainConfig(turns=2, trajectories=2, problems_per_step=2, turn_baseline=True)
    _, batch, _ = run_rollout(problems, cfg)
    # group A: turn 1 returns 0.04, -1.08 (mean -0.52) -> 0.56, -0.56; turn 2: 1.6, -0.2
    #   (mean 0.7) -> 0.9, -0.9.  Targets [0.56, 0.9, -0.56, -0.9]: mean 0; sample var
    #   (0.3136 + 0.81 + 0.3136 + 0.81)/3 = 0.749067, std 0.865486; A = t/0.865586
    a = [s for s in batch.samples if s.problem == "matmul:kernel_gemm"]
    assert [s.target for s in a] == [approx(0.56), approx(0.9), approx(-0.56), approx(-0.9)]
    assert [s.advantage for s in a] == [approx(0.646960), approx(1.039758), approx(-0.646960),
                                        approx(-1.039758)]
    # group B, turn 1: only -1.0 has a return -> target 0; turn 2: 1.25, -0.6 -> 0.925, -0.925
    b = [s for s in batch.samples if s.problem != "matmul:kernel_gemm"]
    assert [s.target for s in b] == [approx(0.0), approx(0.925), None, approx(-0.925)]


def test_an_evaluator_failure_costs_no_reward(problems):
    class Broken(FakeEvaluator):
        def evaluate(self, spec, record):
            if "wrong" in (record.source or ""):
                raise RuntimeError("disk full")
            super().evaluate(spec, record)

    _, batch, _ = run_rollout(problems, evaluator=Broken())
    s = batch.samples[3]  # matmul traj 1, turn 2 (was: wrong)
    assert s.record.status == "pending" and s.reward is None and s.ret is None and s.advantage is None
    assert "disk full" in s.record.message
    # matmul traj 1 turn 1 (no code, -1.0) now has nothing after it: G1 = -1.0 + 0.4*0 = -1.0
    assert batch.samples[2].ret == pytest.approx(-1.0)


def test_prompt_groups_are_checked(problems):
    rollout, _, _ = run_rollout(problems)
    with pytest.raises(ValueError, match="multiple"):
        rollout.groups([problems[0].messages] * 3)
    with pytest.raises(ValueError, match="not one problem"):
        rollout.groups([problems[0].messages] * 2 + [problems[1].messages] * 2)
    with pytest.raises(ValueError, match="not one of the training problems"):
        rollout.groups([[{"role": "user", "content": "other"}]] * 4)
    assert prompt_key(problems[0].messages) == problems[0].key


class FixedRanker:
    """A ranker whose score of a source is given by its ``speedup=`` tag (higher: better)."""

    def __init__(self):
        self.calls = []

    def scores(self, sources, problem_id=""):
        self.calls.append((len(sources), problem_id))
        return [0.9 if "speedup=4" in s else 0.3 for s in sources]


class TwoCorrect(FakeEvaluator):
    """As FakeEvaluator, but matmul's wrong candidate is correct (speedup 1) too."""

    def evaluate(self, spec, record):
        super().evaluate(spec, record)
        if record.status == "wrong":
            record.status, record.speedup_kernel, record.structure_score = "correct", 1.0, None
            record.speedup_e2e, record.gpu_ms, record.max_rel_err = 0.5, 2.0, 1e-7
            record.registers, record.spill_bytes, record.baseline = 32, 0, "gcc -O3, 1 thread"


def test_ranker_term_for_correct_candidates(problems):
    """With a ranker: w_ranker * (score - 0.5) is added to each correct candidate, the
    score coming from the group's correct candidates only (default w_ranker 0.2)."""
    cfg = PolicyTrainConfig(turns=2, trajectories=2, problems_per_step=2, eval_workers=3)
    tok = CharTokenizer()
    ranker = FixedRanker()
    rollout = MultiTurnRollout(problems, tok, RecordedGenerator(replies_for(problems), tok), TwoCorrect(), cfg,
                               ranker=ranker)
    batch = rollout.run([problems[0].messages] * 4 + [problems[1].messages] * 4)
    by = {(s.problem, s.trajectory, s.turn): s for s in batch.samples}
    # matmul: 2 correct (4x structure 0.5, scored 0.9; 1x, scored 0.3)
    #   4x: 1 + 0.25*2 + 0.2*0.5 + 0.2*(0.9-0.5) = 1.68;  1x: 1 + 0 + 0 + 0.2*(0.3-0.5) = 0.96
    a_fast, a_slow = by[("matmul:kernel_gemm", 0, 1)], by[("matmul:kernel_gemm", 1, 1)]
    assert a_fast.ranker_score == 0.9 and a_fast.reward == pytest.approx(1.68)
    assert a_slow.ranker_score == 0.3 and a_slow.reward == pytest.approx(0.96)
    # elementwise: one correct (2x); the ranker still scores it (0.3): 1 + 0.25 + 0.2*(0.3-0.5) = 1.21
    b_ok = by[("elementwise:magnitude", 0, 1)]
    assert b_ok.reward == pytest.approx(1.21)
    # failures get no ranker term and no score
    assert by[("matmul:kernel_gemm", 0, 0)].ranker_score is None
    assert by[("matmul:kernel_gemm", 0, 0)].reward == pytest.approx(-0.6)
    assert sorted(ranker.calls) == [(1, "elementwise.c:magnitude"), (2, "matmul.c:kernel_gemm")]
    assert a_fast.to_json()["ranker_score"] == 0.9
