"""The evaluation step of a training turn: build, verify and time one candidate, exactly as
``cudaperf optimize`` does, on a chosen GPU.

Both kinds go through the optimize driver's problem-kind interface (agent/kinds/): for each
problem, ``kind.plan`` (configurations, memory plan), ``kind.open`` (C: the reference
library) and, with a GPU, the baseline measured once (C: the CPU reference's median, the
arrays' roles and the reference outputs every candidate job reads; PyTorch: eager and
torch.compile medians, so every candidate is timed alone); then
:meth:`~cudaperf_cli.agent.kinds.base.Evaluation.evaluate` per candidate, with the
evaluation device set on every job.  A problem whose plan does not fit the device is
``does_not_fit`` (no reward: excluded) for every candidate, with the bytes in the message.

Every outcome of a candidate is a status of its :class:`~cudaperf_cli.agent.loop.TurnRecord`
(``compile_error``, ``timeout``, ``crash``, ...): the evaluation runs in child processes with
time limits, so a hung or crashing candidate costs its own reward only.  Concurrency: the
rollout calls :meth:`LocalEvaluator.evaluate` from several threads; compiles run side by
side, GPU runs take the per-GPU lock (``evaluate/gpu_lock.py``).  An exception raised by the
evaluation code itself (not a status of the candidate) is caught by the rollout: the record
becomes ``pending``, no reward (excluded), and its message says why.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.rl.problems import ProblemSpec


class CandidateEvaluator(Protocol):
    """What the rollout needs: fill ``record`` (status, timings, speedups, structure score)
    for the candidate in ``record.source`` (C) or ``record.mapping["files"]`` (PyTorch)."""

    def evaluate(self, spec: ProblemSpec, record: TurnRecord) -> None: ...


def _folder_name(name: str) -> str:
    return name.replace(":", "-").replace("#", "-").replace("/", "-")


@dataclass
class LocalEvaluator:
    """Evaluates candidates on this machine (see the module docstring).

    Attributes:
        arch: nvcc target, e.g. ``"sm_90"``.
        device: CUDA device ordinal of the evaluations (as this process numbers devices).
        device_missing: no usable GPU: C candidates stop after the compile with status
            ``no_device`` (no reward: excluded); PyTorch candidates get ``no_device`` from
            their worker; no baseline is measured.
        workdir: reference libraries and PyTorch candidate folders go here.
        eval_timeout_s, compile_timeout_s: time limits, seconds.
        seed: seed of the input data.
        slow_factor: ``slow_ms`` of a job = this x the lower of the problem's best correct
            time so far and its baseline (``optimize --slow-factor``; 0: never ``slow``).
    """

    arch: str
    device: int
    device_missing: bool
    workdir: Path
    eval_timeout_s: float = 120.0
    compile_timeout_s: float = 120.0
    seed: int = 0
    slow_factor: float = 10.0
    _evals: dict[str, Any] = field(default_factory=dict)
    _counter: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def settings(self) -> Any:
        """The :class:`~cudaperf_cli.agent.kinds.base.EvalSettings` of every job."""
        from cudaperf_cli.agent.kinds.base import EvalSettings
        from cudaperf_cli.evaluate.tolerances import resolve_tolerances

        return EvalSettings(arch=self.arch, seed=self.seed, eval_timeout_s=self.eval_timeout_s,
                            compile_timeout_s=self.compile_timeout_s, device=self.device,
                            device_missing=self.device_missing, tolerances=resolve_tolerances(),
                            slow_factor=self.slow_factor, allow_torch_ops=False)

    def prepare(self, specs: list[ProblemSpec], say: Callable[[str], None] = lambda s: None) -> None:
        """Plan each problem, build each C problem's reference (gcc -O3) and, with a GPU,
        measure each problem's baseline once (the denominator of every speedup of that
        problem).  A problem that does not fit the device is said once (``say``).

        Raises:
            CudaperfError: a reference that does not build or fails on its own data.
        """
        from cudaperf_cli.agent.kinds import kind_named
        from cudaperf_cli.agent.kinds.base import check_fit, probe_run_device

        device = probe_run_device(None if self.device_missing else self.arch, self.device)
        settings = self.settings()
        for spec in specs:
            kind = kind_named(spec.kind)
            plan = kind.plan(spec.problem, device)
            ev = kind.open(spec.problem, plan, settings, self.workdir / _folder_name(spec.name))
            refusal = check_fit(plan, device, spec.name)
            if refusal is not None:
                ev.refuse(refusal)
                say(f"{spec.name}: {refusal}: its candidates are does_not_fit (no reward)")
            elif not self.device_missing:
                say(f"{spec.name}: measuring the baseline ({ev.baseline_name})")
                ev.measure_baseline()
                for w in ev.warnings:
                    say(f"{spec.name}: warning: {w}")
            self._evals[spec.name] = ev

    def evaluate(self, spec: ProblemSpec, record: TurnRecord) -> None:
        ev = self._evals.get(spec.name)
        if ev is None:
            raise RuntimeError(f"problem {spec.name} was not prepared")
        folder = None
        if spec.kind == "torch":  # a folder per candidate: the same turn recurs every step
            with self._lock:
                self._counter += 1
                n = self._counter
            folder = self.workdir / "candidates" / f"{_folder_name(spec.name)}-{n:06d}"
        ev.evaluate(record, folder=folder)
        ev.reports.clear()  # the structure reports are not kept (memory over a long run)


def pick_devices(gpu_count: int, eval_device: int | None) -> tuple[str, int]:
    """``(training device, evaluation ordinal)``: training on ``cuda:0`` (``cpu`` without a
    GPU); evaluation on ``eval_device`` when given, else GPU 1 when two or more GPUs are
    visible, else GPU 0 (shared with training).

    Raises:
        ValueError: ``eval_device`` is not a visible GPU.
    """
    if gpu_count <= 0:
        return "cpu", 0 if eval_device is None else eval_device
    if eval_device is not None and eval_device >= gpu_count:
        raise ValueError(f"eval_device {eval_device} is not visible: {gpu_count} GPU(s) "
                         "(check CUDA_VISIBLE_DEVICES)")
    if eval_device is None:
        eval_device = 1 if gpu_count >= 2 else 0
    return "cuda:0", eval_device


__all__ = ["CandidateEvaluator", "LocalEvaluator", "pick_devices"]
