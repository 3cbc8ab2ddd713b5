"""What every training step logs: ``<out>/metrics.jsonl`` (one JSON object per step), one
Rich line on the console, and TensorBoard scalars under ``<out>/runs/`` when the
``tensorboard`` package is installed.  ``<out>/rollouts.jsonl`` holds every turn of every
trajectory (reply, status, reward, return, advantage) when ``log_rollouts`` is on.

A ``metrics.jsonl`` line (docs/rl.md has the full schema)::

    {"step": 3, "steps": 10, "problems": ["matmul:kernel_gemm"], "samples": 8,
     "reward": {"mean": -0.41, "std": 0.52, "rewarded": 8, "excluded": 0},
     "per_turn": [{"turn": 1, "n": 4, "rewarded": 4, "reward_mean": -0.6, "reward_std": 0.35,
                   "return_mean": -0.5, "correct_share": 0.0}, ...],
     "stage_share": {"guard": 0.0, "format": 0.25, "compile": 0.5, ..., "excluded": 0.0},
     "guard_share": 0.0, "correct": 1, "speedup_mean": 1.8, "speedup_geomean": 1.8,
     "speedup_n": 1, "speedup_key": "kernel",
     "tokens_per_reply": {"mean": 412.5, "max": 1024, "truncated_share": 0.125},
     "time_s": {"generation": 12.1, "evaluation": 30.2, "rollout": 42.5,
                "optimisation": 4.3, "step": 46.8},
     "trl": {"loss": 0.012, "grad_norm": 0.8, "learning_rate": 1e-06, ...}}

Units: rewards and returns are dimensionless (docs/reward.md); shares are fractions of the
step's samples; speedups are ratios (baseline time / candidate time) against
``speedup_key``'s baseline, over the correct candidates with a measured speedup; times are
wall seconds.  ``rollout`` = generation + evaluation + building the prompts, records and
rewards; ``optimisation`` = step wall time - rollout (TRL's scoring passes, the forward and
backward passes and the optimizer step).  Standard deviations are
population ones (``statistics.pstdev``).
"""

from __future__ import annotations

from cudaperf_cli.statuses import VERIFIED

import datetime as _dt
import importlib.util
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from cudaperf_cli.reward import STAGES, batch_summary
from cudaperf_cli.rl.rollout import RolloutBatch

#: TRL log keys copied into the ``trl`` object of a metrics line (when present).
TRL_KEYS = ("loss", "grad_norm", "learning_rate", "reward", "reward_std", "frac_reward_zero_std",
            "entropy", "kl", "clip_ratio/region_mean", "num_tokens")
#: Short names of the stages on the console line.
_SHORT = {"guard": "guard", "format": "fmt", "compile": "cmp", "runtime": "run", "wrong": "wrong",
          "correct": "ok", "excluded": "excl"}


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _pstd(xs: list[float]) -> float | None:
    return statistics.pstdev(xs) if xs else None


def step_metrics(batch: RolloutBatch) -> dict[str, Any]:
    """The metrics of one rollout (no step number, times or TRL fields yet)."""
    samples = batch.samples
    breakdowns = [s.breakdown for s in samples if s.breakdown is not None]
    summary = batch_summary(breakdowns)
    per_turn = []
    for t in range(batch.turns):
        at = [s for s in samples if s.turn == t]
        rewards = [s.reward for s in at if s.reward is not None]
        returns = [s.ret for s in at if s.ret is not None]
        per_turn.append({
            "turn": t + 1, "n": len(at), "rewarded": len(rewards),
            "reward_mean": _mean(rewards), "reward_std": _pstd(rewards),
            "return_mean": _mean(returns),
            "correct_share": (sum(1 for s in at if s.record.status in VERIFIED) / len(at)) if at else None,
        })
    tokens = [s.tokens for s in samples]
    keys = summary["speedup_keys"]
    return {
        "problems": batch.problems,
        "samples": len(samples),
        "trajectories": batch.trajectories,
        "turns": batch.turns,
        "reward": {"mean": summary["reward_mean"], "std": summary["reward_std"],
                   "rewarded": summary["rewarded"], "excluded": summary["excluded"]},
        "per_turn": per_turn,
        "stage_share": summary["stage_share"],
        "guard_share": summary["guard_share"],
        "correct": summary["correct"],
        "speedup_mean": summary["speedup_mean"],
        "speedup_geomean": summary["speedup_geomean"],
        "speedup_n": summary["speedup_n"],
        "speedup_key": keys[0] if len(keys) == 1 else (keys or None),
        "tokens_per_reply": {
            "mean": _mean([float(t) for t in tokens]), "max": max(tokens) if tokens else None,
            "truncated_share": (sum(1 for s in samples if s.truncated) / len(samples)) if samples else None,
        },
        "time_s": {"generation": batch.generation_s, "evaluation": batch.evaluation_s,
                   "rollout": batch.rollout_s},
        "statuses": {st: sum(1 for s in samples if s.record.status == st)
                     for st in sorted({s.record.status for s in samples})},
    }


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def console_line(m: dict[str, Any]) -> str:
    """One line for the console (plain text; the logger prints it with Rich markup off)."""
    turns = " ".join(f"t{p['turn']} {_fmt(p['reward_mean'], '+.2f')}±{_fmt(p['reward_std'])}"
                     for p in m["per_turn"])
    shares = " ".join(f"{_SHORT[s]} {_fmt(100 * v if v is not None else None, '.0f')}%"
                      for s, v in m["stage_share"].items() if v and s != "guard")
    speed = "" if m.get("speedup_mean") is None else f" | speedup {m['speedup_mean']:.2f}x"
    ts = m.get("time_s", {})
    loss = (m.get("trl") or {}).get("loss")
    return (f"step {m['step']}/{m['steps']} | reward {turns} | {shares or 'no samples'} | guard "
            f"{_fmt(100 * (m['guard_share'] or 0), '.0f')}%{speed} | "
            f"{_fmt(m['tokens_per_reply']['mean'], '.0f')} tok/reply | gen {_fmt(ts.get('generation'), '.1f')}s "
            f"eval {_fmt(ts.get('evaluation'), '.1f')}s opt {_fmt(ts.get('optimisation'), '.1f')}s"
            + ("" if loss is None else f" | loss {loss:.4g}"))


def _scalars(m: dict[str, Any]) -> dict[str, float]:
    """Flat ``name -> value`` of a metrics line for TensorBoard (None values left out)."""
    out: dict[str, Any] = {
        "reward/mean": m["reward"]["mean"], "reward/std": m["reward"]["std"],
        "guard_share": m["guard_share"], "speedup/mean": m["speedup_mean"],
        "tokens_per_reply/mean": m["tokens_per_reply"]["mean"],
        "tokens_per_reply/truncated_share": m["tokens_per_reply"]["truncated_share"],
    }
    for p in m["per_turn"]:
        out[f"reward/turn{p['turn']}_mean"] = p["reward_mean"]
        out[f"reward/turn{p['turn']}_std"] = p["reward_std"]
    for s in STAGES:
        out[f"stage/{s}"] = m["stage_share"].get(s)
    for k, v in (m.get("time_s") or {}).items():
        out[f"time/{k}"] = v
    for k, v in (m.get("trl") or {}).items():
        out[f"trl/{k}"] = v
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class MetricsLogger:
    """Writes the per-step metrics (file, console, TensorBoard) and the rollouts.

    Args:
        out_dir: the checkpoint folder (``metrics.jsonl``, ``rollouts.jsonl``, ``runs/``).
        steps: the run's total steps (for the console line).
        console: a Rich console, or None (``--json``: nothing printed per step).
        log_rollouts: write ``rollouts.jsonl``.
        tensorboard: write TensorBoard scalars when the package is installed.
    """

    def __init__(self, out_dir: Path, steps: int, console: Any = None, *, log_rollouts: bool = True,
                 tensorboard: bool = True):
        self.out_dir = out_dir
        self.steps = steps
        self.console = console
        self.log_rollouts = log_rollouts
        self.lines: list[dict[str, Any]] = []
        self.batches = 0
        self._writer: Any = None
        out_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = out_dir / "metrics.jsonl"
        self.metrics_path.write_text("")
        self.rollouts_path = out_dir / "rollouts.jsonl"
        if log_rollouts:
            self.rollouts_path.write_text("")
        if tensorboard and importlib.util.find_spec("tensorboard") is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(log_dir=str(out_dir / "runs"))
            except Exception:  # noqa: BLE001 - TensorBoard is optional
                self._writer = None

    @property
    def tensorboard(self) -> bool:
        return self._writer is not None

    def on_batch(self, batch: RolloutBatch) -> None:
        """A rollout finished: append its turns to ``rollouts.jsonl``."""
        self.batches += 1
        if not self.log_rollouts:
            return
        with self.rollouts_path.open("a") as fh:
            for s in batch.samples:
                fh.write(json.dumps({"step": self.batches, **s.to_json()}, default=str) + "\n")

    def write(self, line: dict[str, Any]) -> None:
        """Append one step's metrics to the file, print its line, add TensorBoard scalars."""
        line = {"time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **line}
        self.lines.append(line)
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps(line, default=str) + "\n")
        if self.console is not None:
            self.console.print(console_line(line), markup=False, highlight=False, soft_wrap=True)
        if self._writer is not None:
            for k, v in _scalars(line).items():
                self._writer.add_scalar(k, v, line["step"])
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def time_summary(self) -> dict[str, float | None]:
        """Mean wall seconds per step: generation, evaluation, optimisation, step."""
        out: dict[str, float | None] = {}
        for key in ("generation", "evaluation", "optimisation", "step"):
            vals = [ln["time_s"][key] for ln in self.lines if ln.get("time_s", {}).get(key) is not None]
            out[key] = _mean(vals)
        return out


def make_callback(rollout: Any, logger: MetricsLogger, steps: int) -> Any:
    """A ``transformers.TrainerCallback`` that times each optimizer step and writes its
    metrics line once TRL has logged the step's loss (``logging_steps=1``)."""
    from transformers import TrainerCallback

    class StepMetrics(TrainerCallback):
        def __init__(self) -> None:
            self.t0: float | None = None
            self.pending: dict[str, Any] | None = None

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step_s = None if self.t0 is None else time.perf_counter() - self.t0
            batch = rollout.last
            if batch is None:
                return
            m = step_metrics(batch)
            ts = m["time_s"]
            ts["step"] = step_s
            ts["optimisation"] = None if step_s is None else max(0.0, step_s - batch.rollout_s)
            self.flush()
            self.pending = {"step": state.global_step, "steps": steps, **m}

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if self.pending is None or not logs or "loss" not in logs:
                return
            self.pending["trl"] = {k: logs[k] for k in TRL_KEYS if k in logs}
            self.flush()

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.flush()

        def flush(self) -> None:
            if self.pending is not None:
                logger.write(self.pending)
                self.pending = None

    return StepMetrics()


__all__ = ["MetricsLogger", "TRL_KEYS", "console_line", "make_callback", "step_metrics"]
