"""``cudaperf train policy``: multi-turn GRPO of the policy on the unified reward (issue 8;
docs/rl.md).

    cudaperf train policy --model PATH|tiny --problems DIR -o checkpoints/NAME
        [--config FILE] [--steps N] [--turns T] [--trajectories K] [--lora] [--use-vllm]
        [--json] [--force]

Registered on the ``train`` group by ``cudaperf_cli/cli/main.py``
(``train_app.command("policy")(train_policy)``).  torch, transformers and trl are imported
only after the cheap checks (model folder, problems, packages, output folder), so a bad
command line fails in a second.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from cudaperf_cli.cli.common import fail
from cudaperf_cli.core import CudaperfError

EXIT_INTERRUPTED = 130


def train_policy(
    model: str = typer.Option(
        ..., "--model", help="Local model folder (save_pretrained: config.json, weights, tokenizer with a "
        "chat template), or 'tiny' (a tiny random model built here, for tests and smoke runs). Nothing "
        "is downloaded."),
    problems: List[Path] = typer.Option(
        [], "--problems", help="Folder of problems (its *.c C functions and *.py PyTorch modules, not "
        "subfolders) or one problem file; repeatable."),
    output: Path = typer.Option(..., "--output", "-o", help="Checkpoint folder to write (weights, tokenizer, "
                                "metadata.json, metrics.jsonl, rollouts.jsonl)."),
    config: Optional[Path] = typer.Option(
        None, "--config", help="TOML file: its 'train.policy' table (any setting of docs/rl.md) and its "
        "'reward' table (docs/reward.md). Flags beat the file."),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, help="Optimizer steps (default 10)."),
    turns: Optional[int] = typer.Option(None, "--turns", min=1, help="Turns per trajectory, T (default 2)."),
    trajectories: Optional[int] = typer.Option(
        None, "--trajectories", min=1, help="Trajectories per problem and step, K (default 4); the GRPO "
        "group of a problem holds K*T completions."),
    problems_per_step: Optional[int] = typer.Option(
        None, "--problems-per-step", min=1, help="Problems per step (default 1)."),
    max_new_tokens: Optional[int] = typer.Option(
        None, "--max-new-tokens", min=1, help="Most tokens of one reply (default 1024)."),
    learning_rate: Optional[float] = typer.Option(
        None, "--learning-rate", min=0.0, help="Learning rate (default 1e-6)."),
    lora: Optional[bool] = typer.Option(
        None, "--lora/--no-lora", help="Train a LoRA adapter (peft) instead of all weights."),
    use_vllm: Optional[bool] = typer.Option(
        None, "--use-vllm/--no-vllm", help="Generate with vLLM through TRL (colocated by default; "
        "vllm_mode = \"server\" in the config for a `trl vllm-serve` server)."),
    eval_workers: Optional[int] = typer.Option(
        None, "--eval-workers", min=1, help="Candidates evaluated at once (default 4)."),
    executor: Optional[str] = typer.Option(
        None, "--executor", help="Where candidates are evaluated: local (default; this machine, "
        "eval_device) or ray (one evaluation actor per GPU of a Ray cluster; docs/executor.md)."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="--executor ray: the cluster (host:port); default $RAY_ADDRESS, "
        "else a Ray started here."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Seed (default 0)."),
    ranker: Optional[Path] = typer.Option(
        None, "--ranker", help="Ranker checkpoint folder (cudaperf train ranker): adds the reward's ranker "
        "term to correct candidates (docs/reward.md)."),
    replies: Optional[Path] = typer.Option(
        None, "--replies", help="Smoke runs: take the replies from this JSONL file ({\"text\": ...} a "
        "line, as --policy replay reads) instead of sampling the model. Exercises evaluation and "
        "training end to end; off-policy, not for real training."),
    force: bool = typer.Option(False, "--force", help="Replace a checkpoint already in the output folder."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document at the end, nothing per step."),
) -> None:
    """Train the policy with TRL's GRPO on the unified reward: several turns per episode,
    the feedback of each turn in the next prompt, one completion per turn (docs/rl.md)."""
    from cudaperf_cli.rl.config import load_train_config
    from cudaperf_cli.rl.trainer import preflight, read_replies

    overrides = {
        "steps": steps, "turns": turns, "trajectories": trajectories,
        "problems_per_step": problems_per_step, "max_new_tokens": max_new_tokens,
        "learning_rate": learning_rate, "lora": lora, "use_vllm": use_vllm,
        "eval_workers": eval_workers, "seed": seed, "executor": executor,
        "ray_address": ray_address,
        "ranker": None if ranker is None else str(ranker.resolve()),
    }
    try:
        if ray_address is not None and executor != "ray":
            raise CudaperfError("--ray-address needs --executor ray")
        cfg = load_train_config(config, overrides)
        preflight(model, problems, output, force=force, use_vllm=cfg.use_vllm, lora=cfg.lora)
        texts = read_replies(replies) if replies is not None else None
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))

    from rich.console import Console

    console = None if json_out else Console(highlight=False)

    def say(line: str) -> None:
        if console is not None:
            console.print(line, markup=False, soft_wrap=True)
        else:
            print(line, file=sys.stderr)

    from cudaperf_cli.rl.trainer import train_policy as run

    try:
        result = run(cfg, model=model, problems=problems, out=output, force=force, console=console,
                     say=say, replies=texts, replies_source=None if replies is None else str(replies))
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    except KeyboardInterrupt:
        print(f"interrupted: no checkpoint written (no weights, no metadata.json); the steps done "
              f"are in {output / 'metrics.jsonl'}", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)

    t = result.time_s
    if json_out:
        print(json.dumps({
            "checkpoint": str(result.out), "steps": result.steps,
            "metrics": str(result.out / "metrics.jsonl"), "mean_time_s": t,
            "last": result.lines[-1] if result.lines else None,
            "gpu_found": result.metadata.get("devices", {}).get("gpu_found"),
        }, default=str))
        return

    def s(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1f} s"

    say(f"checkpoint: {result.out} ({result.steps} step(s); metadata.json, metrics.jsonl)")
    say(f"mean wall time per step: {s(t.get('step'))} = generation {s(t.get('generation'))} + evaluation "
        f"{s(t.get('evaluation'))} + optimisation {s(t.get('optimisation'))} (+ prompts and rewards)")
    say(f"use it: cudaperf optimize FILE --policy transformers --model {result.out}")


__all__ = ["train_policy"]
