"""The evaluation step of a training turn: build, verify and time one candidate, exactly as
``cudaperf optimize`` does, on a chosen GPU.

- C problems: :class:`cudaperf_cli.agent.optimize.Evaluator` (nvcc, then the worker child
  process that verifies on every configuration and times with CUDA events), with the
  evaluation device set on every job (``EvalJob.device``).  The CPU baseline (gcc -O3, one
  thread) is measured once per problem when a GPU is present (speedups need it).
- PyTorch problems: the candidate's files are written to a folder and run through
  :func:`cudaperf_cli.evaluate.torch_job.run_torch_evaluation` (build, static and dynamic
  guards, verification, timing vs eager and torch.compile; ``TorchEvalJob.device``), then
  copied into the record as ``agent/torch_optimize.py`` does.

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


def _device_evaluator_class() -> Any:
    """``agent.optimize.Evaluator`` whose jobs run on ``device`` (imported lazily)."""
    from cudaperf_cli.agent.optimize import Evaluator

    @dataclass
    class DeviceEvaluator(Evaluator):
        device: int = 0

        def job(self, lib_path: Path | None) -> Any:
            job = super().job(lib_path)
            job.device = self.device
            return job

    return DeviceEvaluator


@dataclass
class LocalEvaluator:
    """Evaluates candidates on this machine (see the module docstring).

    Attributes:
        arch: nvcc target, e.g. ``"sm_90"``.
        device: CUDA device ordinal of the evaluations (as this process numbers devices).
        device_missing: no usable GPU: C candidates stop after the compile with status
            ``no_device`` (no reward: excluded); PyTorch candidates get ``no_device`` from
            their worker.
        workdir: reference libraries and PyTorch candidate folders go here.
        eval_timeout_s, compile_timeout_s: time limits, seconds.
        seed: seed of the input data.
    """

    arch: str
    device: int
    device_missing: bool
    workdir: Path
    eval_timeout_s: float = 120.0
    compile_timeout_s: float = 120.0
    seed: int = 0
    _c: dict[str, Any] = field(default_factory=dict)
    _counter: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def prepare(self, specs: list[ProblemSpec], say: Callable[[str], None] = lambda s: None) -> None:
        """Build each C problem's reference (gcc -O3) and, with a GPU, measure its CPU
        baseline once (the denominator of every speedup of that problem).

        Raises:
            CudaperfError: a reference that does not build or fails on its own data.
        """
        from cudaperf_cli.agent.optimize import verification_configs
        from cudaperf_cli.build import default_cache_root
        from cudaperf_cli.problems.c import build_reference

        cls = _device_evaluator_class()
        for spec in specs:
            if spec.kind != "c":
                continue
            folder = self.workdir / "reference" / spec.name.replace(":", "-").replace("#", "-")
            folder.mkdir(parents=True, exist_ok=True)
            reference = build_reference(spec.problem, folder)
            ev = cls(
                problem=spec.problem, reference=reference, configs=verification_configs(spec.problem),
                arch=self.arch, cache_root=default_cache_root(), eval_timeout_s=self.eval_timeout_s,
                compile_timeout_s=self.compile_timeout_s, seed=self.seed,
                device_missing=self.device_missing, device=self.device,
            )
            if not self.device_missing:
                say(f"{spec.name}: measuring the CPU baseline ({reference.baseline_name})")
                ev.measure_baseline()
            self._c[spec.name] = ev

    def evaluate(self, spec: ProblemSpec, record: TurnRecord) -> None:
        if spec.kind == "c":
            self._evaluate_c(spec, record)
        else:
            self._evaluate_torch(spec, record)

    def _evaluate_c(self, spec: ProblemSpec, record: TurnRecord) -> None:
        ev = self._c.get(spec.name)
        if ev is None:
            raise RuntimeError(f"problem {spec.name} was not prepared")
        ev.run(record, record.source or "", lambda _stage: None)
        if record.baseline is None:
            record.baseline = getattr(ev.reference, "baseline_name", None)
        ev.reports.clear()  # the structure reports are not kept (memory over a long run)

    def _evaluate_torch(self, spec: ProblemSpec, record: TurnRecord) -> None:
        # As cudaperf optimize evaluates it, on this evaluator's device, a folder per candidate.
        from cudaperf_cli.agent.torch_optimize import evaluate_torch_candidate

        with self._lock:
            self._counter += 1
            n = self._counter
        evaluate_torch_candidate(
            record, self.workdir / "candidates" / f"{spec.name.replace('#', '-')}-{n:06d}", spec.problem,
            seed=self.seed, arch=self.arch, allow_torch_ops=False, build_timeout_s=self.compile_timeout_s,
            eval_timeout_s=self.eval_timeout_s, device=self.device,
        )


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
