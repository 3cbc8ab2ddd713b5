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

:class:`RayEvaluator` (``train policy --executor ray``) does the same on the GPUs of a Ray
cluster: one :class:`EvalActor` per GPU (``num_gpus=1``: Ray sets its
``CUDA_VISIBLE_DEVICES``, so it evaluates on its device 0), each with its own
:class:`LocalEvaluator` (its references and baselines measured on its GPU), at most one
candidate at a time per actor.  The actors load the problems from the same paths (a
filesystem the nodes share).  On a cluster without GPUs the actors take one CPU each and the
candidates are compiled only (``no_device``).  An actor that dies is restarted once by Ray
(it prepares again before its next candidate); the candidate it was evaluating is
``pending`` (no reward).
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


class EvalActor:
    """The body of one Ray evaluation actor (see the module docstring); runs on its node.

    Args:
        paths: the problem files and folders (``train policy --problems``), as the driver
            named them (absolute).
        arch: nvcc target of the candidates.
        context_tokens, eval_timeout_s, compile_timeout_s, seed, slow_factor: as
            :class:`LocalEvaluator` and :func:`cudaperf_cli.rl.problems.load_problems`.
    """

    def __init__(self, paths: list[str], arch: str, *, context_tokens: int, eval_timeout_s: float,
                 compile_timeout_s: float, seed: int, slow_factor: float = 10.0) -> None:
        import tempfile

        from cudaperf_cli.build import detect_arch
        from cudaperf_cli.rl.problems import load_problems

        loaded = load_problems([Path(p) for p in paths], arch, context_tokens=context_tokens)
        self.specs = {s.name: s for s in loaded.problems}
        self.detected = detect_arch(0)
        self.evaluator = LocalEvaluator(
            arch=arch, device=0, device_missing=self.detected is None,
            workdir=Path(tempfile.mkdtemp(prefix="cudaperf-eval-")), eval_timeout_s=eval_timeout_s,
            compile_timeout_s=compile_timeout_s, seed=seed, slow_factor=slow_factor)
        self.prepared = False
        self.said: list[str] = []

    def where(self) -> dict[str, Any]:
        """The node, the GPU ids Ray gave this actor, and the GPU's nvcc arch (None: none)."""
        import os
        import socket

        import ray

        return {"node": socket.gethostname(), "node_ip": ray.util.get_node_ip_address(),
                "gpus": [str(g) for g in ray.get_gpu_ids()], "arch": self.detected,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "problems": sorted(self.specs)}

    def prepare(self) -> list[str]:
        """:meth:`LocalEvaluator.prepare` over every problem; returns what it said."""
        if not self.prepared:
            self.evaluator.prepare(list(self.specs.values()), self.said.append)
            self.prepared = True
        return list(self.said)

    def evaluate(self, name: str, record: TurnRecord) -> TurnRecord:
        """Evaluate ``record`` (a candidate of problem ``name``) and return it filled."""
        self.prepare()
        self.evaluator.evaluate(self.specs[name], record)
        return record


class RayEvaluator:
    """Evaluates candidates on the GPUs of a Ray cluster (see the module docstring).

    Args:
        address: the cluster; None: ``$RAY_ADDRESS``, else a Ray started here.
        paths: the problem files and folders the trainer loaded (the actors load the same).
        arch: nvcc target of the candidates.
        actors: the most evaluation actors (``eval_workers``); fewer when the cluster has
            fewer GPUs (or CPUs, without GPUs).
        context_tokens, eval_timeout_s, compile_timeout_s, seed: as :class:`EvalActor`.

    Raises:
        CudaperfError: Ray missing, the cluster unreachable (exit 2).
    """

    def __init__(self, address: str | None, paths: list[Path], arch: str, *, actors: int,
                 context_tokens: int, eval_timeout_s: float, compile_timeout_s: float,
                 seed: int) -> None:
        import queue

        from cudaperf_cli.ray_cluster import connect

        self._ray = ray = connect(address)
        self.address = address
        res = ray.cluster_resources()
        self.gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
        n = max(1, min(actors, self.gpus if self.gpus else cpus))
        actor = ray.remote(EvalActor).options(num_cpus=1, num_gpus=1 if self.gpus else 0,
                                              max_restarts=1, max_task_retries=0)
        self.actors = [actor.remote([str(Path(p).resolve()) for p in paths], arch,
                                    context_tokens=context_tokens, eval_timeout_s=eval_timeout_s,
                                    compile_timeout_s=compile_timeout_s, seed=seed)
                       for _ in range(n)]
        self._idle: queue.Queue = queue.Queue()
        for a in self.actors:
            self._idle.put(a)
        self.placement: list[dict[str, Any]] = []

    def prepare(self, specs: list[ProblemSpec], say: Callable[[str], None] = lambda s: None) -> None:
        """Every actor loads the problems and measures its baselines (in parallel); what the
        first one said is said, and where each actor runs.

        Raises:
            CudaperfError: an actor could not load or prepare the problems (its first line).
        """
        from cudaperf_cli.core import CudaperfError
        from cudaperf_cli.ray_cluster import first_line

        try:
            self.placement = self._ray.get([a.where.remote() for a in self.actors])
            said = self._ray.get([a.prepare.remote() for a in self.actors])
        except Exception as exc:  # noqa: BLE001 - RayTaskError wraps the actor's error
            cause = getattr(exc, "cause", None)
            raise CudaperfError(f"a Ray evaluation actor failed to prepare: "
                                f"{first_line(cause if isinstance(cause, BaseException) else exc)}") from None
        want = sorted(s.name for s in specs)
        for where in self.placement:
            if where["problems"] != want:
                raise CudaperfError(f"the evaluation actor on {where['node']} loaded other problems "
                                    f"({', '.join(where['problems']) or 'none'})",
                                    hint="--executor ray needs the problems on a filesystem every "
                                    "node shares")
        for line in said[0] if said else []:
            say(line)
        for i, where in enumerate(self.placement):
            gpu = f"GPU {','.join(where['gpus'])} ({where['arch']})" if where["gpus"] else "no GPU"
            say(f"evaluation actor {i}: {where['node']} ({where['node_ip']}), {gpu}")

    def evaluate(self, spec: ProblemSpec, record: TurnRecord) -> None:
        """Evaluate on the next idle actor (blocks until one is); ``record`` is filled in place.

        Raises:
            ray.exceptions.RayError: the actor died mid-evaluation (the rollout marks the
                record ``pending``: no reward).
        """
        import dataclasses

        actor = self._idle.get()
        try:
            done = self._ray.get(actor.evaluate.remote(spec.name, record))
        finally:
            self._idle.put(actor)
        for f in dataclasses.fields(record):
            setattr(record, f.name, getattr(done, f.name))

    def close(self) -> None:
        """Disconnect from the cluster (a Ray started here stops)."""
        try:
            self._ray.shutdown()
        except Exception:  # noqa: BLE001
            pass


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


__all__ = ["CandidateEvaluator", "EvalActor", "LocalEvaluator", "RayEvaluator", "pick_devices"]
