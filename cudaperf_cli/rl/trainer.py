"""``cudaperf train policy``, stage by stage (docs/rl.md):

1. checks that need no heavy import: the model folder, the problems, the packages, the
   output folder                                                   :func:`preflight`
2. devices: training on ``cuda:0`` (CPU without a GPU); evaluation on GPU 1 when two or more
   are visible, else GPU 0; the architecture of the evaluation GPU
3. problems (C and PyTorch) with their first prompt; references and CPU baselines
                                                   rl/problems.py, rl/evaluate.py
4. the model and tokenizer (a local folder, or ``tiny``), LoRA through peft as an option
5. TRL's GRPOTrainer with the multi-turn ``rollout_func`` and the metrics callback
                                                   rl/rollout.py, rl/metrics.py
6. the checkpoint: weights (merged when LoRA; the adapter in ``adapter/``), tokenizer with
   its chat template, and ``metadata.json`` written last: a folder without it is not a
   finished checkpoint (Ctrl-C writes no weights and no metadata; metrics.jsonl keeps the
   steps done)
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from cudaperf_cli.core import CudaperfError, MissingPackageError, check_checkpoint_folder, install_hint
from cudaperf_cli.rl.config import PolicyTrainConfig

INSTALL_HINT = install_hint("train")
#: Packages training needs (import name -> what to say).
REQUIRED = ("trl", "transformers", "torch", "datasets", "accelerate")
#: Files and folders of a checkpoint that ``--force`` removes before training (nothing else
#: in the folder is touched).
CHECKPOINT_NAMES = (
    "metadata.json", "metrics.jsonl", "rollouts.jsonl", "runs", "adapter", "config.json",
    "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "pytorch_model.bin", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "chat_template.jinja", "vocab.json", "merges.txt", "added_tokens.json", "tokenizer.model",
    "adapter_config.json", "adapter_model.safetensors",
)
TINY = "tiny"


@dataclass
class TrainResult:
    """What a finished run wrote: the checkpoint folder, the steps run, every metrics line,
    the mean wall seconds per step (generation, evaluation, optimisation, step) and the
    metadata written."""

    out: Path
    steps: int
    lines: list[dict[str, Any]]
    time_s: dict[str, float | None]
    metadata: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- 1. checks

def preflight(model: str, problems: Sequence[Path], out: Path, *, force: bool, use_vllm: bool,
              lora: bool) -> None:
    """The checks that need no heavy import (one-line errors, exit code 2; 3 for a missing
    package).

    Raises:
        CudaperfError: no such model folder (or not a model), no problem files, or an
            output folder that is not empty (without ``force``).
        MissingPackageError: trl, transformers, datasets, peft (with ``lora``) or vllm
            (with ``use_vllm``) is not installed.
    """
    from cudaperf_cli.rl.problems import candidate_files

    if model != TINY:
        path = Path(model).expanduser()
        if not path.exists():
            raise CudaperfError(f"--model {model}: no such folder",
                                hint="a local folder saved with save_pretrained, or --model tiny "
                                "(nothing is downloaded)")
        if not path.is_dir() or not (path / "config.json").is_file():
            raise CudaperfError(f"--model {model}: not a model folder (no config.json)",
                                hint="a local folder saved with save_pretrained (a merged model, "
                                "not a LoRA adapter alone)")
        from cudaperf_cli.policies.transformers_policy import non_causal_architecture

        other = non_causal_architecture(path)
        if other is not None:
            raise CudaperfError(f"--model {model}: holds a {other}, not a causal language model",
                                hint="the policy must generate text: a *ForCausalLM checkpoint")
        if out.resolve() == path.resolve() or path.resolve() in out.resolve().parents \
                or out.resolve() in path.resolve().parents:
            raise CudaperfError(f"-o {out} and --model {model} overlap: the checkpoint would replace "
                                "or sit inside the model being trained", hint="write to another folder")
    if not problems:
        raise CudaperfError("missing --problems DIR", hint="a folder of *.c and *.py problems, e.g. examples/")
    if not candidate_files(problems):
        where = ", ".join(str(p) for p in problems)
        raise CudaperfError(f"no problems in {where}: no *.c or *.py file",
                            hint="e.g. --problems examples/ or --problems examples/torch/")
    for name in REQUIRED + (("peft",) if lora else ()):
        if importlib.util.find_spec(name) is None:
            raise MissingPackageError(f"cudaperf train policy needs the {name} package, which is not installed",
                                      hint=INSTALL_HINT)
    if use_vllm and model == TINY:
        raise CudaperfError("--use-vllm needs a model folder (vLLM loads the weights from disk), not --model tiny",
                            hint="leave out --use-vllm for the tiny model")
    if use_vllm and importlib.util.find_spec("vllm") is None:
        raise MissingPackageError("--use-vllm needs the vllm package, which is not installed",
                                  hint="pip install vllm (a version TRL supports), or leave out --use-vllm")
    check_checkpoint_folder(out, force)


#: What a new run (``--force``) removes at its start: the previous run's metadata (so the
#: folder is no finished checkpoint while training) and logs; its weights stay until the new
#: ones are saved (an interrupted run leaves them).
RUN_LOG_NAMES = ("metadata.json", "metrics.jsonl", "rollouts.jsonl", "runs")


def clear_checkpoint(out: Path, names: Sequence[str] = CHECKPOINT_NAMES) -> None:
    """Remove a previous checkpoint's files (``names``, default :data:`CHECKPOINT_NAMES`,
    which then also removes ``model-*.safetensors`` shards) from ``out``; nothing else."""
    for name in names:
        p = out / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    if "model.safetensors" in names:  # the shards of a large model too
        for p in out.glob("model-*.safetensors"):
            p.unlink()


# ----------------------------------------------------------------------------- helpers

def versions() -> dict[str, str | None]:
    """Versions of the libraries a checkpoint depends on."""
    from importlib import metadata

    from cudaperf_cli import __version__

    out: dict[str, str | None] = {"cudaperf": __version__, "python": platform.python_version()}
    for name in ("trl", "transformers", "torch", "peft", "accelerate", "datasets", "vllm", "tokenizers"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _load_model(model: str, cfg: PolicyTrainConfig, texts: Sequence[str], on_gpu: bool) -> tuple[Any, Any, str]:
    """``(tokenizer, model, description)`` of ``model`` (a local folder, or ``tiny``)."""
    if model == TINY:
        from cudaperf_cli.rl.tiny import build_tiny, describe

        tokenizer, net = build_tiny(texts, seed=cfg.seed)
        return tokenizer, net, describe()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = {"auto": torch.bfloat16 if on_gpu else torch.float32, "bfloat16": torch.bfloat16,
             "float16": torch.float16, "float32": torch.float32}[cfg.dtype]
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
        net = AutoModelForCausalLM.from_pretrained(model, dtype=dtype, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged folder: safetensors, config validation...
        first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise CudaperfError(f"cannot load --model {model}: {type(exc).__name__}: {first[:300]}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, net, f"{Path(model).resolve()} ({type(net).__name__}, {dtype})"


def _grpo_config(cfg: PolicyTrainConfig, workdir: Path, on_gpu: bool) -> Any:
    from trl import GRPOConfig

    micro = cfg.batch_size // cfg.grad_accum
    args = GRPOConfig(
        output_dir=str(workdir / "trainer"), report_to="none", save_strategy="no", logging_steps=1,
        disable_tqdm=True, max_steps=cfg.steps, learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant", warmup_steps=0, seed=cfg.seed,
        per_device_train_batch_size=micro, gradient_accumulation_steps=cfg.grad_accum,
        steps_per_generation=cfg.grad_accum, num_generations=cfg.group_size,
        max_completion_length=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
        beta=cfg.beta, loss_type=cfg.loss_type, scale_rewards="group",
        bf16=on_gpu and cfg.dtype in ("auto", "bfloat16"), use_cpu=not on_gpu,
        gradient_checkpointing=cfg.gradient_checkpointing,
        use_vllm=cfg.use_vllm, vllm_mode=cfg.vllm_mode, vllm_server_base_url=cfg.vllm_server_base_url,
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        dataloader_num_workers=0,
    )
    # One process trains on cuda:0.  With several GPUs visible, transformers' Trainer would
    # wrap the model in nn.DataParallel; the other GPUs are for the evaluations instead.
    if args.n_gpu > 1:
        args._n_gpu = 1
    return args


def _peft_config(cfg: PolicyTrainConfig) -> Any:
    if not cfg.lora:
        return None
    from peft import LoraConfig

    targets: Any = cfg.lora_target_modules.strip()
    if targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    return LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM")


def _quiet_libraries() -> None:
    """Less noise from the libraries: no progress bars, warnings only for errors."""
    import logging
    import warnings

    # TRL warns with the whole prompt for every completion without a reward (no_device on a
    # machine without a GPU); the metrics line counts them as excluded instead.
    logging.getLogger("trl.trainer.grpo_trainer").setLevel(logging.ERROR)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    warnings.filterwarnings("ignore", message=r".*deprecated and will be removed in v6",
                            category=FutureWarning)
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:  # noqa: BLE001 - cosmetic
        pass


# ----------------------------------------------------------------------------- the run

def train_policy(
    cfg: PolicyTrainConfig,
    *,
    model: str,
    problems: Sequence[Path],
    out: Path,
    force: bool = False,
    console: Any = None,
    say: Callable[[str], None] = lambda s: None,
    replies: Sequence[str] | None = None,
    replies_source: str | None = None,
) -> TrainResult:
    """Train the policy (see the module docstring); returns what was written.

    Args:
        cfg: the settings.
        model: a local model folder, or ``"tiny"`` (:mod:`cudaperf_cli.rl.tiny`).
        problems: folders and files of problems.
        out: the checkpoint folder.
        force: replace a checkpoint already in ``out``.
        console: Rich console for the per-step lines (None: no per-step lines).
        say: one-line progress and notes (loading, devices, no GPU).
        replies: recorded replies instead of sampling (smoke runs of the evaluation path;
            :class:`~cudaperf_cli.rl.rollout.RecordedGenerator`).
        replies_source: where ``replies`` came from (metadata).

    Raises:
        CudaperfError: a known problem (exit code 2).
        KeyboardInterrupt: Ctrl-C; no weights and no metadata were written.
    """
    t_start = time.perf_counter()
    preflight(model, problems, out, force=force, use_vllm=cfg.use_vllm, lora=cfg.lora)
    ranker = None
    if cfg.ranker is not None:  # a checkpoint that does not load fails before any work
        from cudaperf_cli.ranker.select import load_sample_ranker

        ranker = load_sample_ranker(Path(cfg.ranker))
    _quiet_libraries()
    import torch

    from cudaperf_cli.build import detect_arch
    from cudaperf_cli.rl.evaluate import LocalEvaluator, RayEvaluator, pick_devices
    from cudaperf_cli.rl.problems import load_problems

    # 2. devices
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    on_ray = cfg.executor == "ray"
    try:
        train_device, eval_device = pick_devices(gpus, cfg.eval_device)
    except ValueError as exc:
        raise CudaperfError(str(exc)) from None
    detected = detect_arch(eval_device)
    arch = cfg.arch or detected or "sm_90"
    if on_ray:  # the actors' GPUs evaluate; the trainer's are for training only
        say(f"training on {train_device}" + (f" ({torch.cuda.get_device_name(0)})" if gpus else "")
            + f"; evaluating candidates on a Ray cluster, nvcc -arch={arch}")
    elif gpus:
        name = torch.cuda.get_device_name(0)
        where = "the same GPU" if eval_device == 0 else f"GPU {eval_device} ({torch.cuda.get_device_name(eval_device)})"
        say(f"training on {train_device} ({name}); evaluating candidates on {where}, nvcc -arch={arch}")
    else:
        say("training on the CPU")
    if detected is None and not on_ray:
        say("no GPU found: candidates are compiled but not run, so correctness and speed are not "
            "measured (status no_device: no reward); the format and compile stages still are")

    # 3. problems, references, baselines
    loaded = load_problems(problems, arch, context_tokens=cfg.context_tokens)
    for file, why in loaded.skipped:
        say(f"skipped {file}: {why}")
    specs = loaded.problems
    if not specs:
        raise CudaperfError("no problem could be loaded from " + ", ".join(str(p) for p in problems),
                            hint="see the skipped files above")
    if cfg.problems_per_step > len(specs):
        raise CudaperfError(f"problems_per_step is {cfg.problems_per_step} but only {len(specs)} "
                            "problem(s) were loaded", hint="lower --problems-per-step or add problems")
    say(f"{len(specs)} problem(s): " + ", ".join(s.name for s in specs))
    if out.is_dir() and force:
        clear_checkpoint(out, RUN_LOG_NAMES)  # the old weights go only when the new ones are saved
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="cudaperf-train-"))
    logger = None
    evaluator: Any = None
    try:
        if on_ray:
            evaluator = RayEvaluator(cfg.ray_address, list(problems), arch, actors=cfg.eval_workers,
                                     context_tokens=cfg.context_tokens,
                                     eval_timeout_s=cfg.eval_timeout_s,
                                     compile_timeout_s=cfg.compile_timeout_s, seed=cfg.seed)
        else:
            evaluator = LocalEvaluator(arch=arch, device=eval_device, device_missing=detected is None,
                                       workdir=workdir, eval_timeout_s=cfg.eval_timeout_s,
                                       compile_timeout_s=cfg.compile_timeout_s, seed=cfg.seed)
        evaluator.prepare(specs, say)
        if on_ray:
            for i, where in enumerate(evaluator.placement):
                if where["arch"] is None:
                    say(f"evaluation actor {i} has no GPU: its candidates are compiled but not run "
                        "(status no_device: no reward)")
                elif where["arch"] != arch:
                    say(f"warning: evaluation actor {i}'s GPU is {where['arch']}, the candidates "
                        f"are built for {arch} (set arch in the config)")

        # 4. model and tokenizer
        texts = [m["content"] for s in specs for m in s.messages]
        tokenizer, net, described = _load_model(model, cfg, texts, on_gpu=gpus > 0)
        say(f"model: {described}" + (f"; LoRA r={cfg.lora_rank} alpha={cfg.lora_alpha}" if cfg.lora else ""))

        # 5. the trainer
        from datasets import Dataset
        from transformers.trainer_callback import PrinterCallback, ProgressCallback
        from trl import GRPOTrainer

        from cudaperf_cli.rl.metrics import MetricsLogger, make_callback
        from cudaperf_cli.rl.rollout import (
            MultiTurnRollout, RecordedGenerator, TransformersGenerator, VLLMGenerator, unified_return,
        )

        generator: Any
        if replies:
            generator, how = RecordedGenerator(replies, tokenizer), f"recorded replies ({replies_source})"
        elif cfg.use_vllm:
            generator, how = VLLMGenerator(), f"vLLM ({cfg.vllm_mode})"
        else:
            generator, how = TransformersGenerator(), "transformers generate"
        logger = MetricsLogger(out, cfg.steps, console, log_rollouts=cfg.log_rollouts)
        if ranker is not None:
            say(f"ranker: {cfg.ranker} ({ranker.kind}); reward term w_ranker = {cfg.reward.w_ranker:g}")
        rollout = MultiTurnRollout(specs, tokenizer, generator, evaluator, cfg, arch, on_batch=logger.on_batch,
                                   ranker=ranker)
        dataset = Dataset.from_list([{"prompt": s.messages, "problem": s.name} for s in specs])
        args = _grpo_config(cfg, workdir, on_gpu=gpus > 0)
        trainer = GRPOTrainer(
            model=net, reward_funcs=[unified_return], args=args, train_dataset=dataset,
            processing_class=tokenizer, peft_config=_peft_config(cfg), rollout_func=rollout,
            callbacks=[make_callback(rollout, logger, cfg.steps)],
        )
        for cb in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(cb)
        say(f"{cfg.steps} step(s) of {cfg.problems_per_step} problem(s) x {cfg.trajectories} "
            f"trajectories x {cfg.turns} turns = {cfg.batch_size} completions; generation: {how}"
            + ("; TensorBoard: " + str(out / "runs") if logger.tensorboard else ""))
        trainer.train()
        logger.close()

        # 6. the checkpoint (metadata.json last)
        steps_done = int(trainer.state.global_step)
        clear_checkpoint(out, [n for n in CHECKPOINT_NAMES if n not in RUN_LOG_NAMES])  # old weights
        lora_info = _save_weights(trainer, tokenizer, out, cfg)
        time_s = logger.time_summary()
        meta = {
            "format": "cudaperf-policy-checkpoint/1",
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "base_model": TINY if model == TINY else str(Path(model).resolve()),
            "base_model_description": described,
            "lora": lora_info,
            "problems": [s.to_json() for s in specs],
            "reward": cfg.reward.to_dict(),
            "train": cfg.to_dict(),
            "steps": steps_done,
            "completions_per_step": cfg.batch_size,
            "generation": how,
            "devices": {"train": train_device, "eval_device": None if on_ray else eval_device,
                        "gpus": gpus, "gpu_found": detected is not None, "arch": arch,
                        "executor": cfg.executor,
                        "eval_actors": evaluator.placement if on_ray else None},
            "versions": versions(),
            "metrics": {"file": "metrics.jsonl", "rollouts": "rollouts.jsonl" if cfg.log_rollouts else None,
                        "mean_time_s": time_s, "last": logger.lines[-1] if logger.lines else None},
            "wall_s": time.perf_counter() - t_start,
        }
        tmp = out / "metadata.json.tmp"
        tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
        tmp.replace(out / "metadata.json")
        return TrainResult(out, steps_done, list(logger.lines), time_s, meta)
    except (CudaperfError, KeyboardInterrupt):
        if made and out.is_dir() and not any(out.iterdir()):  # nothing written: no empty folder
            out.rmdir()
        raise
    finally:
        if logger is not None:
            logger.close()
        if isinstance(evaluator, RayEvaluator):
            evaluator.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _save_weights(trainer: Any, tokenizer: Any, out: Path, cfg: PolicyTrainConfig) -> dict[str, Any] | None:
    """Save the trained weights and the tokenizer into ``out``.  With LoRA: the adapter in
    ``out/adapter/`` and the merged model at the top (so the folder loads with
    ``AutoModelForCausalLM`` like any model).  Returns the LoRA settings (None without)."""
    net = trainer.accelerator.unwrap_model(trainer.model)
    info = None
    if cfg.lora:
        net.save_pretrained(str(out / "adapter"))
        info = {"rank": cfg.lora_rank, "alpha": cfg.lora_alpha, "dropout": cfg.lora_dropout,
                "target_modules": cfg.lora_target_modules, "adapter": "adapter/", "merged": True}
        net = net.merge_and_unload()
    if getattr(net.config, "use_cache", None) is False:
        net.config.use_cache = True  # gradient checkpointing turned it off for training
    gen = net.generation_config  # the training's sampling: --policy transformers uses it by default
    gen.do_sample, gen.temperature, gen.top_p = True, cfg.temperature, cfg.top_p
    gen.max_new_tokens = cfg.max_new_tokens
    net.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return info


def read_replies(path: Path) -> list[str]:
    """The reply texts of a JSONL file (``{"text": ...}`` a line, or a run's turns.jsonl),
    as ``--policy replay`` reads them.

    Raises:
        CudaperfError: unreadable file, bad line, or no replies.
    """
    from cudaperf_cli.policies.replay import ReplayChatModel

    return [r.text for r in ReplayChatModel(path).replies]


__all__ = ["CHECKPOINT_NAMES", "INSTALL_HINT", "TINY", "TrainResult", "clear_checkpoint", "preflight",
           "read_replies", "train_policy", "versions"]
