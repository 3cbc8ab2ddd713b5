"""Settings of ``cudaperf train policy`` (TRL config style: every field has ``help``
metadata and is checked in ``__post_init__``).

A TOML file (``--config FILE``) may hold two tables::

    [train.policy]            # PolicyTrainConfig fields (snake_case or kebab-case keys)
    turns = 3
    trajectories = 4
    max_new_tokens = 2048
    learning_rate = 1e-6
    lora = true

    [reward]                  # RewardConfig fields (docs/reward.md)
    discount = 0.4
    speedup_key = "kernel"

Other tables are refused (one line naming the file and the table), as are unknown keys
(the message lists the known ones) and bad values (the message names the field).  Command
line flags beat the file; the file beats the defaults below.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.reward import RewardConfig

#: vLLM generation modes (TRL's ``vllm_mode``).
VLLM_MODES = ("colocate", "server")
#: Weight dtypes of a loaded model (``auto``: bfloat16 on a GPU, float32 on the CPU).
DTYPES = ("auto", "bfloat16", "float16", "float32")
#: TRL loss types accepted (``GRPOConfig.loss_type``).
#: Where candidates are evaluated (``executor``).
EXECUTORS = ("local", "ray")
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "luspo")


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class PolicyTrainConfig:
    """Settings of one GRPO training run of the policy (docs/rl.md).

    Shapes: each optimizer step takes ``problems_per_step`` problems; each problem gets
    ``trajectories`` (K) independent conversations of ``turns`` (T) turns, so one GRPO group
    (one problem) holds ``K * T`` completions and a step ``problems_per_step * K * T``.
    Times in seconds, lengths in tokens.
    """

    turns: int = field(default=2, metadata=_help(
        "Turns per trajectory (T): the feedback of turn t is in the prompt of turn t+1. Every "
        "trajectory runs all T turns, also after a correct candidate (the next turns try to "
        "make it faster). >= 1."))
    trajectories: int = field(default=4, metadata=_help(
        "Independent trajectories per problem and step (K). The GRPO group of a problem holds "
        "all K*T turns; K*T must be >= 2."))
    problems_per_step: int = field(default=1, metadata=_help(
        "Problems per optimizer step (distinct prompts of one generation batch); at most the "
        "number of problems loaded. >= 1."))
    steps: int = field(default=10, metadata=_help("Optimizer steps to run. >= 1."))
    max_new_tokens: int = field(default=1024, metadata=_help(
        "Most tokens of one reply (TRL's max_completion_length). >= 1."))
    temperature: float = field(default=1.0, metadata=_help(
        "Sampling temperature of the replies; > 0 (GRPO needs diverse samples)."))
    top_p: float = field(default=1.0, metadata=_help("Nucleus sampling top_p in (0, 1]."))
    context_tokens: int = field(default=16384, metadata=_help(
        "Prompt budget (estimated tokens, characters / 4): older turns are summarised beyond "
        "it, as `cudaperf optimize --context-tokens` does. >= 1000."))
    turn_baseline: bool = field(default=False, metadata=_help(
        "Subtract from each turn's return the mean return of the problem's trajectories at the "
        "same turn before TRL normalises over the group (removes the offset discounting gives "
        "one turn position over another; docs/rl.md). Needs trajectories >= 2."))
    learning_rate: float = field(default=1e-6, metadata=_help(
        "AdamW learning rate, constant over the run. > 0."))
    beta: float = field(default=0.0, metadata=_help(
        "KL coefficient against the initial model (TRL's beta; 0: no reference model is "
        "kept). >= 0."))
    loss_type: str = field(default="dapo", metadata=_help(
        "TRL GRPO loss aggregation: grpo, bnpo, dr_grpo, dapo (TRL's default), cispo, luspo."))
    grad_accum: int = field(default=1, metadata=_help(
        "Micro-batches per optimizer step: the step's problems_per_step*K*T completions are "
        "split into this many forward/backward passes (less memory, same update). Must "
        "divide problems_per_step*K*T."))
    gradient_checkpointing: bool = field(default=True, metadata=_help(
        "Recompute activations in the backward pass (less memory, ~30% slower)."))
    dtype: str = field(default="auto", metadata=_help(
        "Weights of a loaded model: auto (bfloat16 on a GPU, float32 on the CPU), bfloat16, "
        "float16, float32."))
    lora: bool = field(default=False, metadata=_help(
        "Train a LoRA adapter (peft) instead of all weights; the checkpoint holds the merged "
        "model and the adapter in adapter/."))
    lora_rank: int = field(default=16, metadata=_help("LoRA rank r. >= 1."))
    lora_alpha: int = field(default=32, metadata=_help("LoRA alpha (scale alpha/r). >= 1."))
    lora_dropout: float = field(default=0.0, metadata=_help("LoRA dropout in [0, 1)."))
    lora_target_modules: str = field(default="all-linear", metadata=_help(
        "Modules LoRA adapts: 'all-linear' or a comma-separated list (q_proj,v_proj)."))
    eval_workers: int = field(default=4, metadata=_help(
        "Candidates evaluated at once (threads; each compiles in its own nvcc process and "
        "runs on the GPU in a child process, one GPU run at a time per GPU). >= 1."))
    eval_timeout_s: float = field(default=120.0, metadata=_help(
        "Time limit of one candidate's verification and timing (child process), seconds; a "
        "hung candidate gets status timeout (the runtime reward). > 0."))
    compile_timeout_s: float = field(default=120.0, metadata=_help(
        "Time limit of one candidate's nvcc build, seconds. > 0."))
    executor: str = field(default="local", metadata=_help(
        "Where candidates are evaluated: local (child processes of this machine, on "
        "eval_device) or ray (one evaluation actor per GPU of a Ray cluster; docs/executor.md)."))
    ray_address: str | None = field(default=None, metadata=_help(
        "executor ray: the cluster (host:port); unset: $RAY_ADDRESS, else a Ray started by the "
        "trainer on this machine."))
    eval_device: int | None = field(default=None, metadata=_help(
        "CUDA device ordinal of the evaluations; unset: 1 when two or more GPUs are visible "
        "(training keeps GPU 0), else 0."))
    arch: str | None = field(default=None, metadata=_help(
        "nvcc architecture of the candidates, e.g. sm_90; unset: the evaluation GPU's, else "
        "sm_90."))
    seed: int = field(default=0, metadata=_help(
        "Seed of the trainer (data order, sampling) and of the candidates' input data. >= 0."))
    use_vllm: bool = field(default=False, metadata=_help(
        "Generate with vLLM through TRL (needs the vllm package); otherwise transformers "
        "generate on the training model."))
    vllm_mode: str = field(default="colocate", metadata=_help(
        "colocate (vLLM in this process, sharing the training GPU) or server (a `trl "
        "vllm-serve` process; see vllm_server_base_url)."))
    vllm_server_base_url: str | None = field(default=None, metadata=_help(
        "vllm_mode server: the server's URL, e.g. http://127.0.0.1:8000."))
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata=_help(
        "vllm_mode colocate: share of the GPU memory vLLM may take, in (0, 1]."))
    ranker: str | None = field(default=None, metadata=_help(
        "Ranker checkpoint folder (cudaperf train ranker): adds the reward's ranker term "
        "(w_ranker * (score - 0.5)) to correct candidates, score = mean win probability "
        "against the other correct candidates of the problem's group; unset: no ranker term."))
    log_rollouts: bool = field(default=True, metadata=_help(
        "Write every turn (reply, status, reward, return) to rollouts.jsonl in the output "
        "folder."))
    reward: RewardConfig = field(default_factory=RewardConfig, metadata=_help(
        "The unified reward's constants (the [reward] table; docs/reward.md)."))

    def __post_init__(self) -> None:
        if isinstance(self.reward, Mapping):
            self.reward = RewardConfig.from_dict(self.reward)
        if not isinstance(self.reward, RewardConfig):
            raise ValueError(f"PolicyTrainConfig.reward must be a RewardConfig, not {self.reward!r}")
        hints = typing.get_type_hints(PolicyTrainConfig)
        for f in dataclasses.fields(self):
            if f.name == "reward":
                continue
            value = getattr(self, f.name)
            kind = hints[f.name]
            optional = type(None) in typing.get_args(kind)
            base = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
            if value is None:
                if not optional:
                    raise ValueError(f"PolicyTrainConfig.{f.name} must be set")
                continue
            if base is bool:
                if not isinstance(value, bool):
                    raise ValueError(f"PolicyTrainConfig.{f.name} must be true or false, not {value!r}")
            elif base is int:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"PolicyTrainConfig.{f.name} must be an integer, not {value!r}")
            elif base is float:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"PolicyTrainConfig.{f.name} must be a finite number, not {value!r}")
                setattr(self, f.name, float(value))
            elif base is str and not isinstance(value, str):
                raise ValueError(f"PolicyTrainConfig.{f.name} must be a string, not {value!r}")

        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"PolicyTrainConfig.{name} must be {rule}, not {getattr(self, name)!r}")

        for name in ("turns", "trajectories", "problems_per_step", "steps", "max_new_tokens",
                     "grad_accum", "lora_rank", "lora_alpha", "eval_workers"):
            need(getattr(self, name) >= 1, name, ">= 1")
        need(self.seed >= 0, "seed", ">= 0")
        need(self.context_tokens >= 1000, "context_tokens", ">= 1000")
        need(self.temperature > 0, "temperature", "> 0")
        need(0 < self.top_p <= 1, "top_p", "in (0, 1]")
        need(self.learning_rate > 0, "learning_rate", "> 0")
        need(self.beta >= 0, "beta", ">= 0")
        need(0 <= self.lora_dropout < 1, "lora_dropout", "in [0, 1)")
        need(self.eval_timeout_s > 0, "eval_timeout_s", "> 0")
        need(self.compile_timeout_s > 0, "compile_timeout_s", "> 0")
        need(0 < self.vllm_gpu_memory_utilization <= 1, "vllm_gpu_memory_utilization", "in (0, 1]")
        need(self.eval_device is None or self.eval_device >= 0, "eval_device", ">= 0")
        need(self.executor in EXECUTORS, "executor", "one of " + ", ".join(EXECUTORS))
        need(self.executor == "ray" or self.ray_address is None, "ray_address",
             "unset unless executor is ray")
        need(self.executor == "local" or self.eval_device is None, "eval_device",
             "unset with executor ray (Ray gives each evaluation actor its GPU)")
        need(self.loss_type in LOSS_TYPES, "loss_type", "one of " + ", ".join(LOSS_TYPES))
        need(self.dtype in DTYPES, "dtype", "one of " + ", ".join(DTYPES))
        need(self.vllm_mode in VLLM_MODES, "vllm_mode", "one of " + ", ".join(VLLM_MODES))
        need(bool(self.lora_target_modules.strip()), "lora_target_modules", "a module list")
        if self.turns * self.trajectories < 2:
            raise ValueError(
                "PolicyTrainConfig: turns * trajectories must be >= 2 (a GRPO group needs two "
                f"completions to compare), not {self.turns} * {self.trajectories}")
        if self.turn_baseline and self.trajectories < 2:
            raise ValueError("PolicyTrainConfig.turn_baseline needs trajectories >= 2 (a turn's "
                             "baseline is the mean over the trajectories)")
        if self.batch_size % self.grad_accum:
            raise ValueError(
                f"PolicyTrainConfig.grad_accum ({self.grad_accum}) must divide the completions "
                f"of a step, problems_per_step * trajectories * turns = {self.batch_size}")
        if self.vllm_mode == "server" and self.use_vllm and not self.vllm_server_base_url:
            raise ValueError("PolicyTrainConfig.vllm_server_base_url must be set with vllm_mode server")

    @property
    def group_size(self) -> int:
        """Completions per problem and step (TRL's ``num_generations``): K * T."""
        return self.trajectories * self.turns

    @property
    def batch_size(self) -> int:
        """Completions per optimizer step (TRL's ``generation_batch_size``)."""
        return self.problems_per_step * self.group_size

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (``reward`` as its own dict), for metadata and logs."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "reward"}
        out["reward"] = self.reward.to_dict()
        return out

    @classmethod
    def field_names(cls) -> list[str]:
        """Names of the settable fields (``reward`` is its own table)."""
        return [f.name for f in dataclasses.fields(cls) if f.name != "reward"]


def _normalise(table: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).replace("-", "_"): v for k, v in table.items()}


def load_train_config(path: Path | None, overrides: Mapping[str, Any] | None = None) -> PolicyTrainConfig:
    """The configuration: defaults, then ``path``'s ``[train.policy]`` and ``[reward]``
    tables, then ``overrides`` (command-line values; ``None`` values are skipped).

    Raises:
        CudaperfError: no such file, invalid TOML, an unknown table or key, or a bad value
            (one line naming the file and the field; exit code 2).
    """
    policy: dict[str, Any] = {}
    reward: dict[str, Any] = {}
    where = "the command line"
    if path is not None:
        from cudaperf_cli.config import load_config

        if path.is_dir():
            raise CudaperfError(f"--config {path} is a directory, not a TOML file")
        if not path.is_file():
            raise CudaperfError(f"--config {path}: no such file")
        where = str(path)
        document = load_config(path)
        for key, value in document.items():
            if key == "train" and isinstance(value, dict):
                for sub, table in value.items():
                    if sub != "policy" or not isinstance(table, dict):
                        raise CudaperfError(f"{path}: unknown table [train.{sub}]",
                                            hint="tables read by train policy: [train.policy], [reward]")
                    policy = _normalise(table)
            elif key == "reward" and isinstance(value, dict):
                reward = dict(value)
            elif key in ("optimize", "port") and isinstance(value, dict):
                continue  # cudaperf optimize's defaults and port's flags may share the file
            else:
                raise CudaperfError(f"{path}: unknown table or key '{key}'",
                                    hint="tables read by train policy: [train.policy], [reward]")
        known = PolicyTrainConfig.field_names()
        unknown = sorted(set(policy) - set(known))
        if "reward" in policy:
            raise CudaperfError(f"{path}: [train.policy] reward: put the reward settings in a [reward] table")
        if unknown:
            raise CudaperfError(f"{path}: [train.policy] unknown key(s) {', '.join(unknown)}",
                                hint=f"known keys: {', '.join(known)}")
    for key, value in (overrides or {}).items():
        if value is not None:
            policy[key] = value
    try:
        reward_cfg = RewardConfig.from_dict(reward)
    except (ValueError, TypeError) as exc:
        raise CudaperfError(f"{where}: [reward] {exc}") from None
    try:
        return PolicyTrainConfig(**policy, reward=reward_cfg)
    except (ValueError, TypeError) as exc:
        raise CudaperfError(f"{where}: {exc}") from None


def describe_fields() -> list[tuple[str, str, str]]:
    """``(name, default, help)`` of every field (for docs and ``--help`` texts)."""
    out = []
    for f in dataclasses.fields(PolicyTrainConfig):
        if f.name == "reward":
            continue
        out.append((f.name, repr(f.default), f.metadata.get("help", "")))
    return out


__all__ = ["DTYPES", "LOSS_TYPES", "VLLM_MODES", "PolicyTrainConfig", "describe_fields", "load_train_config"]
