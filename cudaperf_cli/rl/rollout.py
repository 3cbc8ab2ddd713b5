"""The multi-turn rollout: TRL's ``rollout_func`` for ``cudaperf train policy``.

Per-turn samples, after Baronio et al., *Kevin: multi-turn RL for generating CUDA kernels*,
2025 (arXiv:2507.11948).  TRL hands the rollout one generation batch of prompts: each
problem's first prompt repeated ``num_generations = K * T`` times in a row (its
``RepeatSampler``).  For every problem the rollout runs ``K`` independent trajectories of
``T`` turns, step-synchronously over all problems and trajectories::

    for turn t in 0..T-1:
        conversation   every trajectory's messages: system + task + earlier replies and
                       their feedback, built by ModelPolicy.conversation (the exact
                       request `cudaperf optimize --policy openai` sends)
        generate       all conversations in one batched call (the trainer's model, or vLLM)
        propose        the reply -> a Proposal (ModelPolicy.propose_samples: code
                       extraction, format errors), then a TurnRecord as optimize builds it
        evaluate       the candidates in parallel threads (build, verify, time: child
                       processes with time limits; one GPU run at a time per GPU)
        feedback       agent.feedback.feedback_for + follow: the next turn's user message

Each turn is one GRPO completion: ``prompt_ids`` = that turn's conversation (chat template,
generation prompt added), ``completion_ids`` = its reply, reward = its discounted return
``G_t = r_t + discount * G_{t+1}`` (:func:`cudaperf_cli.reward.turn_returns`) with
``r_t`` = :func:`cudaperf_cli.reward.reward` of the turn's record.  The GRPO group of one
problem is all ``K * T`` turns of its trajectories; TRL normalises the returns over it
(mean, sample std + 1e-4: :func:`cudaperf_cli.reward.group_advantages` computes the same for
the logs).  A turn without a reward (``no_device``, ``reference_error``, ``pending``) gets
return None: TRL turns it into NaN, leaves it out of the group's mean and std and gives it
advantage 0 (it is not trained on).  With ``turn_baseline`` the value TRL sees is the return
minus the mean return of the problem's trajectories at the same turn (docs/rl.md, "Groups
and advantages").  Trajectories never stop early: after a correct candidate the next turns
try to make it faster.

Output order (what TRL expects): problem ``b``'s completions fill positions ``b*K*T ..
(b+1)*K*T - 1``, trajectory-major: position ``b*K*T + k*T + t`` is trajectory ``k``'s turn
``t``.

The generator and the evaluator are injected (:class:`Generator`,
:class:`~cudaperf_cli.rl.evaluate.CandidateEvaluator`), so tests feed recorded replies and
fake evaluation results.
"""

from __future__ import annotations

from cudaperf_cli.statuses import VERIFIED

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.policies.base import Reply
from cudaperf_cli.reward import RewardBreakdown, group_advantages, reward, turn_returns
from cudaperf_cli.rl.config import PolicyTrainConfig
from cudaperf_cli.rl.evaluate import CandidateEvaluator
from cudaperf_cli.rl.problems import ProblemSpec

#: Name of the extra rollout field holding each completion's return (the reward TRL sees).
RETURN_FIELD = "cudaperf_return"


# ----------------------------------------------------------------------------- generation

@dataclass
class Generation:
    """One generated reply.

    ``completion_ids``: its tokens, ending with the EOS token when the model stopped by
    itself (``truncated`` False) or at ``max_new_tokens`` (``truncated`` True); never empty.
    ``text``: decoded without special tokens.  ``logprobs``: the sampler's log-probability
    of each token (same length), or None when the generator does not give them.
    """

    completion_ids: list[int]
    text: str
    logprobs: list[float] | None = None
    truncated: bool = False


class Generator(Protocol):
    """Generates one reply per prompt (token ids, already chat-templated), in order."""

    def generate(self, prompt_ids: list[list[int]], trainer: Any) -> list[Generation]: ...


class TransformersGenerator:
    """Samples with ``generate`` on the trainer's current model (unwrapped for generation as
    TRL does), with TRL's own ``generation_config`` (``max_completion_length``,
    ``temperature``, ``top_p``, EOS and pad tokens of the GRPOConfig).

    Log-probabilities: None, as in TRL's own transformers path: the sampler *is* the model
    being trained, so TRL's loss needs no importance-sampling correction (with
    ``steps_per_generation == gradient_accumulation_steps`` the old log-probabilities are
    the current ones).
    """

    def generate(self, prompt_ids: list[list[int]], trainer: Any) -> list[Generation]:
        import torch
        from trl.models import unwrap_model_for_generation

        tok = trainer.processing_class
        device = trainer.accelerator.device
        width = max(len(ids) for ids in prompt_ids)
        pad = tok.pad_token_id
        ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for i, row in enumerate(prompt_ids):  # left padding
            ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row):] = 1
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped, trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 generation_config=trainer.generation_config)
        eos = set(trainer.eos_token_ids)
        result = []
        for row in out[:, width:].tolist():
            cut = next((i for i, t in enumerate(row) if t in eos), None)
            if cut is not None:
                row = row[: cut + 1]
            elif pad is not None:
                while row and row[-1] == pad and pad not in eos:
                    row.pop()
            row = row or [tok.eos_token_id]
            result.append(Generation(row, tok.decode(row, skip_special_tokens=True),
                                     truncated=cut is None))
        return result


class VLLMGenerator:
    """Samples with TRL's vLLM engine (``trainer.vllm_generation``: colocated, or a ``trl
    vllm-serve`` server), which TRL keeps in sync with the trained weights before each
    step's rollout.  One completion per prompt (``num_generations=1``: every trajectory's
    conversation is its own prompt).  Log-probabilities: vLLM's, of the sampled token (TRL
    corrects the sampler/trainer mismatch with them)."""

    def generate(self, prompt_ids: list[list[int]], trainer: Any) -> list[Generation]:
        _, completion_ids, logprobs, _ = trainer.vllm_generation.generate(
            prompts=prompt_ids, images=None, num_generations=1)
        tok = trainer.processing_class
        eos = set(trainer.eos_token_ids)
        out = []
        for i, ids in enumerate(completion_ids):
            ids = list(ids) or [tok.eos_token_id]
            lps = None
            if logprobs is not None and logprobs[i] is not None:
                lps = [lp[0] if isinstance(lp, (list, tuple)) else lp for lp in logprobs[i]]
                lps = (lps + [0.0] * len(ids))[: len(ids)]
            out.append(Generation(ids, tok.decode(ids, skip_special_tokens=True), lps,
                                  truncated=ids[-1] not in eos))
        return out


class RecordedGenerator:
    """Replies from a list instead of a model (tests, smoke runs of the evaluation path):
    the ``i``-th call for a reply gets ``replies[i % len(replies)]``, in the rollout's order
    (turn by turn; within a turn problem by problem, trajectory by trajectory).  Tokens: the
    tokenizer's encoding of the text plus EOS.  The model is still optimised on these
    replies (off-policy), so use it to exercise the pipeline, not to train."""

    def __init__(self, replies: Sequence[str], tokenizer: Any):
        if not replies:
            raise ValueError("RecordedGenerator needs at least one reply")
        self.replies = list(replies)
        self.tokenizer = tokenizer
        self.calls = 0

    def generate(self, prompt_ids: list[list[int]], trainer: Any) -> list[Generation]:
        out = []
        for _ in prompt_ids:
            text = self.replies[self.calls % len(self.replies)]
            self.calls += 1
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            out.append(Generation(ids + [self.tokenizer.eos_token_id], text))
        return out


# ----------------------------------------------------------------------------- samples

@dataclass
class TurnSample:
    """One turn of one trajectory: one GRPO completion.

    ``reward``: the turn's own reward (None: excluded); ``ret``: its discounted return;
    ``target``: the value TRL normalises (``ret``, or ``ret`` minus the mean return of the
    problem's trajectories at this turn with ``turn_baseline``; None: excluded);
    ``advantage``: ``group_advantages`` of the problem's targets (for the logs; TRL computes
    the same).
    """

    problem: str
    trajectory: int
    turn: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None
    truncated: bool
    record: TurnRecord
    breakdown: RewardBreakdown | None = None
    reward: float | None = None
    ret: float | None = None
    target: float | None = None
    advantage: float | None = None
    ranker_score: float | None = None  #: correct candidates, with a ranker: mean win probability

    @property
    def tokens(self) -> int:
        """Tokens of the reply."""
        return len(self.completion_ids)

    def to_json(self) -> dict[str, Any]:
        """One line of ``rollouts.jsonl``."""
        r = self.record
        return {
            "problem": self.problem, "trajectory": self.trajectory, "turn": self.turn + 1,
            "status": r.status, "stage": None if self.breakdown is None else self.breakdown.stage,
            "reward": self.reward, "return": self.ret, "target": self.target,
            "advantage": self.advantage, "ranker_score": self.ranker_score,
            "reason": None if self.breakdown is None else self.breakdown.reason,
            "message": (r.message or "")[:500], "speedup_kernel": r.speedup_kernel,
            "speedup_compile": r.speedup_compile, "structure_score": r.structure_score,
            "gpu_ms": r.gpu_ms, "guard": r.guard, "prompt_tokens": len(self.prompt_ids),
            "completion_tokens": self.tokens, "truncated": self.truncated,
            "reply": (r.mapping or {}).get("reply", ""),
        }


@dataclass
class RolloutBatch:
    """What one rollout produced, in TRL's order; wall times in seconds."""

    samples: list[TurnSample]
    problems: list[str]
    turns: int
    trajectories: int
    generation_s: float = 0.0
    evaluation_s: float = 0.0
    rollout_s: float = 0.0
    errors: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- the rollout

class _OneReply:
    """A ChatModel that answers with one given reply (so ModelPolicy.propose_samples turns a
    generated text into the Proposal that `cudaperf optimize` would make of it)."""

    def __init__(self, reply: Reply):
        self.reply = reply

    def complete(self, messages: list[dict[str, str]], n: int = 1) -> list[Reply]:
        return [self.reply]


def _plain_prompt(messages: list[dict[str, str]]) -> str:
    try:
        from cudaperf_cli.policies.transformers_policy import plain_prompt
    except ImportError:  # pragma: no cover - the same format, if that module moves
        blocks = [f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages]
        return "\n\n".join([*blocks, "assistant:"])
    return plain_prompt(messages)


def encode_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a request: the tokenizer's chat template with the generation prompt, as
    ``--policy transformers`` renders it (a tokenizer without a template: the plain
    ``"<role>: <content>"`` format of that policy)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = _plain_prompt(messages)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_key(prompt: Any) -> str:
    """What identifies a problem in a dataset prompt: the content of its last user message
    (a conversational prompt), or the text itself."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise ValueError("a training prompt has no user message")
    content = users[-1]
    if isinstance(content, list):  # typed content blocks
        content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
    return content


class MultiTurnRollout:
    """TRL's ``rollout_func`` (see the module docstring).

    Args:
        problems: the training problems (their ``key`` identifies them in prompts).
        tokenizer: the trained model's tokenizer (chat template, EOS).
        generator: makes the replies (:class:`TransformersGenerator`, :class:`VLLMGenerator`,
            :class:`RecordedGenerator`).
        evaluator: fills each candidate's record.
        config: turns (T), trajectories (K), eval_workers, context_tokens, reward.
        arch: the architecture the prompts name.
        on_batch: called with every :class:`RolloutBatch` (metrics, rollouts.jsonl).
    """

    def __init__(self, problems: Sequence[ProblemSpec], tokenizer: Any, generator: Generator,
                 evaluator: CandidateEvaluator, config: PolicyTrainConfig, arch: str = "sm_90",
                 on_batch: Callable[[RolloutBatch], None] | None = None, ranker: Any = None):
        self.by_key = {p.key: p for p in problems}
        self.ranker = ranker  # a ranker.select.SampleRanker: the reward's ranker term
        self.tokenizer = tokenizer
        self.generator = generator
        self.evaluator = evaluator
        self.config = config
        self.arch = arch
        self.on_batch = on_batch
        self.last: RolloutBatch | None = None

    # -- TRL entry point
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """``rollout_func(prompts, trainer)``: the dict TRL wants (``prompt_ids``,
        ``completion_ids``, ``logprobs``) plus :data:`RETURN_FIELD` and a few fields for the
        logs (forwarded to the reward function)."""
        batch = self.run(prompts, trainer)
        samples = batch.samples
        logprobs = [s.logprobs for s in samples]
        return {
            "prompt_ids": [s.prompt_ids for s in samples],
            "completion_ids": [s.completion_ids for s in samples],
            "logprobs": logprobs if all(lp is not None for lp in logprobs) else None,
            RETURN_FIELD: [s.target for s in samples],
            "cudaperf_status": [s.record.status for s in samples],
            "cudaperf_turn": [s.turn + 1 for s in samples],
        }

    # -- the rollout proper
    def groups(self, prompts: list[Any]) -> list[ProblemSpec]:
        """The problems of a generation batch, one per group of ``K * T`` equal prompts.

        Raises:
            ValueError: the batch is not made of whole groups of one known problem each.
        """
        size = self.config.group_size
        if not prompts or len(prompts) % size:
            raise ValueError(f"the rollout got {len(prompts)} prompts, not a multiple of "
                             f"trajectories * turns = {size}")
        out = []
        for start in range(0, len(prompts), size):
            keys = {prompt_key(p) for p in prompts[start:start + size]}
            if len(keys) != 1:
                raise ValueError(f"prompts {start}..{start + size - 1} are not one problem's group")
            spec = self.by_key.get(keys.pop())
            if spec is None:
                raise ValueError("a prompt of the batch is not one of the training problems")
            out.append(spec)
        return out

    def run(self, prompts: list[Any], trainer: Any = None) -> RolloutBatch:
        """Run the trajectories of every problem of ``prompts``; rewards, returns and
        advantages filled in (see the module docstring)."""
        t_start = time.perf_counter()
        cfg = self.config
        specs = self.groups(prompts)
        K, T = cfg.trajectories, cfg.turns
        # trajectories[b*K + k]: problem b's trajectory k; histories and samples per trajectory
        owners = [(spec, k) for spec in specs for k in range(K)]
        histories: list[list[TurnRecord]] = [[] for _ in owners]
        per_traj: list[list[TurnSample]] = [[] for _ in owners]
        batch = RolloutBatch([], [s.name for s in specs], T, K)
        for t in range(T):
            messages = [self._conversation(spec, histories[j]) for j, (spec, _) in enumerate(owners)]
            prompt_ids = [encode_prompt(self.tokenizer, m) for m in messages]
            t0 = time.perf_counter()
            gens = self.generator.generate(prompt_ids, trainer)
            gen_s = time.perf_counter() - t0
            batch.generation_s += gen_s
            if len(gens) != len(prompt_ids):
                raise RuntimeError(f"the generator returned {len(gens)} replies for {len(prompt_ids)} prompts")
            records = [self._record(spec, t, histories[j], g, len(prompt_ids[j]), gen_s / len(gens), k)
                       for j, ((spec, k), g) in enumerate(zip(owners, gens))]
            t0 = time.perf_counter()
            self._evaluate_all([(spec, r) for (spec, _), r in zip(owners, records)])
            batch.evaluation_s += time.perf_counter() - t0
            for j, ((spec, k), g, record) in enumerate(zip(owners, gens, records)):
                self._feedback(record)
                histories[j].append(record)
                per_traj[j].append(TurnSample(spec.name, k, t, prompt_ids[j], g.completion_ids,
                                              g.logprobs, g.truncated, record))
        if self.ranker is not None:
            for b, spec in enumerate(specs):
                self._rank(spec, [s for j in range(b * K, (b + 1) * K) for s in per_traj[j]])
        self._score(per_traj)
        for b in range(len(specs)):  # group advantages over the problem's K*T returns
            group = [s for j in range(b * K, (b + 1) * K) for s in per_traj[j]]
            self._targets(group)
            for s, a in zip(group, group_advantages([s.target for s in group])):
                s.advantage = a
            batch.samples.extend(group)
        batch.rollout_s = time.perf_counter() - t_start
        self.last = batch
        if self.on_batch is not None:
            self.on_batch(batch)
        return batch

    # -- stages
    def _policy(self, reply: Reply | None = None) -> Any:
        from cudaperf_cli.policies.model_policy import ModelPolicy

        return ModelPolicy(_OneReply(reply) if reply else None, "train", arch=self.arch,  # type: ignore[arg-type]
                           context_tokens=self.config.context_tokens)

    def _conversation(self, spec: ProblemSpec, history: list[TurnRecord]) -> list[dict[str, str]]:
        messages, _ = self._policy().conversation(spec.problem, history)
        return messages

    def _record(self, spec: ProblemSpec, turn: int, history: list[TurnRecord], gen: Generation,
                prompt_tokens: int, latency_s: float, trajectory: int) -> TurnRecord:
        """The reply as ``cudaperf optimize`` records it (the problem kind's
        ``candidate_record``, agent/kinds/): a pending record with the candidate, or a
        ``format_error`` one."""
        reply = Reply(gen.text, prompt_tokens=prompt_tokens, completion_tokens=len(gen.completion_ids),
                      latency_s=latency_s)
        proposal = self._policy(reply).propose_samples(spec.problem, turn, history, 1)[0]
        mapping = dict(proposal.mapping)
        mapping["trajectory"] = trajectory
        from cudaperf_cli.agent.kinds import kind_named

        return kind_named(spec.kind).candidate_record(proposal, turn, mapping=mapping)

    def _evaluate_all(self, jobs: list[tuple[ProblemSpec, TurnRecord]]) -> None:
        """Evaluate the pending records, ``eval_workers`` at a time.  On Ctrl-C the queued
        ones are cancelled and the running ones finish (each within its time limits)."""
        todo = [(spec, r) for spec, r in jobs if r.status == "pending"]
        if not todo:
            return
        workers = max(1, min(self.config.eval_workers, len(todo)))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudaperf-eval")
        try:
            futures = [pool.submit(self._evaluate_one, spec, r) for spec, r in todo]
            for f in futures:
                f.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _evaluate_one(self, spec: ProblemSpec, record: TurnRecord) -> None:
        """One evaluation; an exception of the evaluation code (not a status of the
        candidate) leaves the record ``pending``: no reward, not trained on."""
        try:
            self.evaluator.evaluate(spec, record)
        except Exception as exc:  # noqa: BLE001 - our failure, not the candidate's
            import traceback

            record.status = "pending"
            record.message = f"the evaluation failed outside the candidate: {type(exc).__name__}: {exc}"
            record.evaluation = {"internal_error": traceback.format_exc()}

    @staticmethod
    def _feedback(record: TurnRecord) -> None:
        from cudaperf_cli.agent.feedback import feedback_for, follow

        if record.status == "pending":  # the evaluation itself failed (see evaluate.py)
            record.feedback = (f"Turn {record.turn + 1} ({record.description}): no result is "
                               "available for this candidate (the evaluation failed for a reason "
                               "outside it).")
        else:
            record.feedback = feedback_for(record)
        follow([record])

    def _rank(self, spec: ProblemSpec, group: list[TurnSample]) -> None:
        """The ranker's score of each correct candidate of one problem's group: its mean win
        probability against the group's other correct candidates (0.5 when it is the only
        one; ``ranker/select.py``).  The LM ranker reads the problem id as ``cudaperf data
        pairs`` names an optimize run's (``<file name>:<function>``, or the file name)."""
        correct = [s for s in group if s.record.status in VERIFIED]
        if not correct:
            return
        texts = [s.record.source or "" for s in correct]  # a PyTorch record's source is its kernel.cu
        function = getattr(spec.problem, "function", None)
        problem_id = f"{spec.path.name}:{function}" if function else spec.path.name
        for s, score in zip(correct, self.ranker.scores(texts, problem_id)):
            s.ranker_score = min(1.0, max(0.0, float(score)))

    def _score(self, per_traj: list[list[TurnSample]]) -> None:
        """Rewards of every turn (with the ranker's score where :meth:`_rank` set one), and
        each trajectory's discounted returns."""
        rc = self.config.reward
        for samples in per_traj:
            for s in samples:
                s.breakdown = reward(s.record, rc, ranker_score=s.ranker_score)
                s.reward = s.breakdown.total
            for s, g in zip(samples, turn_returns([s.reward for s in samples], rc.discount)):
                s.ret = g

    def _targets(self, group: list[TurnSample]) -> None:
        """What TRL normalises: the returns, or (``turn_baseline``) each return minus the
        mean of the group's returns at the same turn."""
        if not self.config.turn_baseline:
            for s in group:
                s.target = s.ret
            return
        for t in {s.turn for s in group}:
            at = [s for s in group if s.turn == t]
            rets = [s.ret for s in at if s.ret is not None]
            base = sum(rets) / len(rets) if rets else 0.0
            for s in at:
                s.target = None if s.ret is None else s.ret - base


def unified_return(prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
    """The reward function given to TRL: each completion's return, as the rollout computed it
    (the extra field :data:`RETURN_FIELD`); None (no reward) becomes NaN in TRL."""
    values = kwargs.get(RETURN_FIELD)
    if values is None:
        raise ValueError(f"the rollout did not provide {RETURN_FIELD}")
    return [None if v is None else float(v) for v in values]


__all__ = [
    "RETURN_FIELD", "Generation", "Generator", "MultiTurnRollout", "RecordedGenerator", "RolloutBatch",
    "TransformersGenerator", "TurnSample", "VLLMGenerator", "encode_prompt", "prompt_key",
    "unified_return",
]
