"""The problem-kind interface of the optimize driver, and what every kind shares.

The driver (agent/optimize.py) runs one sequence for every problem::

    load -> plan -> (does it fit?) -> baseline -> turns (evaluate each candidate) -> write -> report

A :class:`ProblemKind` says how each step is done for its files (C functions:
agent/kinds/c.py; KernelBench-format PyTorch modules: agent/kinds/pytorch.py).  Its
:meth:`ProblemKind.open` returns an :class:`Evaluation`: the per-problem state a run (or
an RL training run) evaluates candidates with: the plan, the settings every job gets, the
baseline measured once, the best correct time so far (for ``slow_ms``).

Data flows one way: the driver and ``rl/`` import the kinds; a kind imports this module,
agent/options.py, agent/loop.py (the record) and the stages to its left, never the driver.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.statuses import DOES_NOT_FIT, SLOW, VERIFIED

#: ``stage(name)``: the evaluation says which stage it is in (the live table's spinner).
StageFn = Callable[[str], None]


def _no_stage(_name: str) -> None:
    return None


@dataclass(frozen=True)
class DeviceInfo:
    """The evaluation device, as the driver found it once per run.

    Attributes:
        ordinal: CUDA device ordinal of the evaluations.
        arch: ``"sm_90"`` of the detected GPU, or None (no usable GPU).
        free_bytes: free device memory when probed, bytes (None: unknown / no device).
        total_bytes: total device memory, bytes (None: unknown).
        l2_bytes: L2 cache size, bytes (the flush buffer is planned from it).
        name: the device's name.
        host_backend: ``CUDAPERF_WORKER_BACKEND=host`` (tests only): the workers emulate a
            device on the host, so candidates are evaluated though no GPU is present.
        lock_wait_s: seconds waited for the GPU lock around the probe.
    """

    ordinal: int = 0
    arch: str | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    l2_bytes: int | None = None
    name: str | None = None
    host_backend: bool = False
    lock_wait_s: float = 0.0

    @property
    def usable(self) -> bool:
        """Candidates can be run (a GPU, or the host test backend)."""
        return self.arch is not None or self.host_backend

    def to_json(self) -> dict[str, Any]:
        return {"ordinal": self.ordinal, "arch": self.arch, "name": self.name,
                "free_bytes": self.free_bytes, "total_bytes": self.total_bytes,
                "l2_bytes": self.l2_bytes, "host_backend": self.host_backend,
                "lock_wait_s": self.lock_wait_s}


def probe_run_device(detected_arch: str | None, ordinal: int = 0) -> DeviceInfo:
    """The :class:`DeviceInfo` of a run.

    ``detected_arch``: ``build.detect_arch(ordinal)`` (None: no GPU).  With a GPU, the
    device's free memory comes from :func:`cudaperf_cli.evaluate.probe_device` (a child
    process), taken while holding the GPU lock of ``ordinal`` (``evaluate/gpu_lock.py``),
    so that another cudaperf evaluation's memory on that GPU (``bench -j N``) is not
    counted as taken; without a GPU nothing is probed.  Never raises.
    """
    import os

    from cudaperf_cli.evaluate.job import BACKEND_ENV

    host = os.environ.get(BACKEND_ENV) == "host"
    if detected_arch is None:
        return DeviceInfo(ordinal=ordinal, host_backend=host)
    from cudaperf_cli.evaluate import probe_device
    from cudaperf_cli.evaluate.gpu_lock import gpu_lock

    try:
        with gpu_lock(ordinal) as waited:
            info = probe_device(ordinal)
    except OSError:
        info, waited = {}, 0.0

    def num(key: str) -> int | None:
        v = info.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return DeviceInfo(ordinal=ordinal, arch=detected_arch, free_bytes=num("memory_free_bytes"),
                      total_bytes=num("memory_total_bytes"), l2_bytes=num("l2_bytes"),
                      name=info.get("name"), host_backend=host, lock_wait_s=float(waited))


@dataclass
class Plan:
    """What a problem's evaluations verify and time, and the memory one of them holds.

    Attributes:
        configs: the configurations, as the kind's jobs take them (C: ``[{"name",
            "sizes", "trials", "time"}]``; PyTorch: the alternative shapes, dicts of module
            constants; the default configuration always runs first).
        memory: the :class:`~cudaperf_cli.evaluate.memory.MemoryPlan` (None: the kind's
            plan function is not available, nothing is checked).
        notes: what could not be planned, said once in the run's warnings.
    """

    configs: list[Any] = field(default_factory=list)
    memory: Any = None
    notes: list[str] = field(default_factory=list)


def check_fit(plan: Plan, device: DeviceInfo, what: str) -> str | None:
    """One line saying why ``plan`` cannot run on ``device`` and this host, or None.

    Without a plan (``plan.memory`` None) nothing is checked.  Without a GPU only the
    host's physical memory is checked (``evaluate.memory.does_not_fit``).
    """
    if plan.memory is None:
        return None
    from cudaperf_cli.evaluate.memory import does_not_fit, host_memory_bytes

    gpu_free = device.free_bytes if device.arch is not None else None
    return does_not_fit(plan.memory, gpu_free=gpu_free, host_total=host_memory_bytes(), what=what)


@dataclass(frozen=True)
class EvalSettings:
    """What every evaluation job of a run gets.

    Attributes:
        arch: nvcc target (``"sm_90"``).
        seed: base seed of the input data.
        eval_timeout_s: time limit of one evaluation (the worker child), seconds.
        compile_timeout_s: time limit of one build (nvcc / load_inline), seconds.
        device: CUDA device ordinal of the evaluations.
        device_missing: no usable device: C candidates stop after the compile with status
            ``no_device``; the PyTorch baseline is not measured.
        tolerances: dtype -> ``{"atol", "rtol"}``
            (:func:`cudaperf_cli.evaluate.tolerances.resolve_tolerances` of ``--atol``/``--rtol``).
        slow_factor: ``--slow-factor`` (0: never ``slow``); see :func:`slow_limit_ms`.
        compile_baseline: PyTorch: also time ``torch.compile(Model)`` in the baseline.
        allow_torch_ops: PyTorch: matmul/conv ops (cuBLAS/cuDNN) may do work in
            ``ModelNew.forward`` (the built-in policy leaves them to the libraries).
        cache_root: build cache (None: ``build.default_cache_root()``).
        sanitize: C: a verified candidate about to become the best is run once more under
            compute-sanitizer memcheck and initcheck (evaluate/sanitize.py); optimize's
            ``--sanitize/--no-sanitize`` (on by default there, off here for other callers).
    """

    arch: str
    seed: int = 0
    eval_timeout_s: float = 300.0
    compile_timeout_s: float = 120.0
    device: int = 0
    device_missing: bool = False
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    slow_factor: float = 10.0
    compile_baseline: bool = True
    allow_torch_ops: bool = False
    cache_root: Path | None = None
    sanitize: bool = False

    @classmethod
    def from_options(cls, opts: Any, arch: str, device: DeviceInfo) -> "EvalSettings":
        """The settings of an optimize run (``opts``: :class:`~cudaperf_cli.agent.options.OptimizeOptions`).

        Raises:
            CudaperfError: a negative or non-finite ``--atol``/``--rtol`` or ``--slow-factor``.
        """
        import math

        from cudaperf_cli.core import CudaperfError
        from cudaperf_cli.evaluate.tolerances import resolve_tolerances

        try:
            tolerances = resolve_tolerances(opts.atol, opts.rtol)
        except ValueError as exc:
            raise CudaperfError(f"--atol/--rtol: {exc}") from None
        if not (math.isfinite(opts.slow_factor) and opts.slow_factor >= 0):
            raise CudaperfError(f"--slow-factor must be a finite number >= 0, got {opts.slow_factor!r}")
        return cls(
            arch=arch, seed=opts.seed, eval_timeout_s=opts.eval_timeout_s,
            compile_timeout_s=opts.compile_timeout_s, device=device.ordinal,
            device_missing=not device.usable, tolerances=tolerances,
            slow_factor=float(opts.slow_factor), compile_baseline=opts.compile_baseline,
            allow_torch_ops=opts.policy == "builtin",
            sanitize=bool(getattr(opts, "sanitize", True)),
        )


def slow_limit_ms(slow_factor: float, best_ms: float | None, baseline_ms: float | None) -> float | None:
    """The ``slow_ms`` of a candidate job: ``slow_factor`` x the lower of the run's best
    correct GPU time so far and the baseline's time (ms; C: the CPU reference's median at
    the timed configuration, PyTorch: eager's median).  None (never ``slow``) when
    ``slow_factor`` is 0 or neither time is known; a time that is not a positive number
    is ignored.

    >>> slow_limit_ms(10, 2.0, 50.0)
    20.0
    """
    if not slow_factor or slow_factor <= 0:
        return None
    known = [float(t) for t in (best_ms, baseline_ms)
             if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0 and t == t]
    if not known:
        return None
    return float(slow_factor) * min(known)


def fill_outcome(record: TurnRecord, data: dict[str, Any], tolerances: dict[str, Any] | None = None) -> None:
    """Copy the fields every evaluation result shares (:class:`~cudaperf_cli.evaluate.outcome.Outcome`,
    as JSON in ``data``) into ``record``: ``lock_wait_s``, ``prepare_s`` (seconds),
    ``peak_gpu_bytes``, ``footprint_bytes`` (bytes), ``phase_s`` (the worker's seconds per
    phase, from ``details``) and ``tolerances`` (the values the worker used; ``tolerances``,
    the job's table, when it reported none)."""
    for key in ("lock_wait_s", "prepare_s"):
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(record, key, float(value))
    for key in ("peak_gpu_bytes", "footprint_bytes"):
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(record, key, int(value))
    phases = (data.get("details") or {}).get("phase_s")
    if isinstance(phases, dict):
        record.phase_s = {str(k): float(v) for k, v in phases.items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)}
    used = data.get("tolerances")
    record.tolerances = dict(used) if isinstance(used, dict) and used else dict(tolerances or {})


class Evaluation(ABC):
    """One problem's evaluations: what :meth:`ProblemKind.open` returns.

    Attributes:
        problem: the loaded problem.
        plan: its :class:`Plan`.
        settings: the :class:`EvalSettings` of every job.
        workdir: a folder of this problem's files (the run folder for ``optimize``).
        baseline: the kind's baseline (measured once, or read back from ``baseline.json``);
            None until then.
        reports: ``(turn, sample)`` -> the structural report of a candidate.
        refusal: one line: the problem does not fit (``does_not_fit``); every evaluation is
            then that status, nothing runs.
        warnings: lines worth the user's attention (degenerate problem, a baseline that
            could not be measured), also in the run's summary.
    """

    #: The name of the baseline of ``TurnRecord.speedup_kernel``.
    baseline_name: str = ""

    def __init__(self, problem: Any, plan: Plan, settings: EvalSettings, workdir: Path):
        self.problem = problem
        self.plan = plan
        self.settings = settings
        self.workdir = Path(workdir)
        self.baseline: Any = None
        self.reports: dict[tuple[int, int], Any] = {}
        self.refusal: str | None = None
        self.warnings: list[str] = []
        self._best_ms: float | None = None
        self._lock = threading.Lock()

    # -- the baseline ------------------------------------------------------------------

    @abstractmethod
    def measure_baseline(self) -> Any:
        """Measure the baseline once (child processes); sets and returns :attr:`baseline`.

        Raises:
            ProblemError: the reference itself fails.
        """

    @abstractmethod
    def baseline_ms(self) -> float | None:
        """The baseline's time that ``slow_ms`` is relative to (ms), or None."""

    def baseline_lines(self) -> list[str]:
        """Human lines describing the measured baseline (Rich markup escaped)."""
        return []

    def baseline_message(self) -> str | None:
        """What the spinner says while :meth:`measure_baseline` runs (None: no spinner)."""
        return None

    def baseline_json(self) -> Any:
        """What ``baseline.json`` holds (None: nothing to write)."""
        return self.baseline

    def sanitize_info(self) -> dict[str, Any] | None:
        """``summary.json``'s ``sanitize`` (the compute-sanitizer stage of C problems:
        ``{"enabled", "tool", "note"}``); None where the kind has no such stage."""
        return None

    @property
    def degenerate(self) -> bool:
        """The problem's outputs do not depend on its inputs (PyTorch)."""
        return False

    @property
    def footprint_bytes(self) -> int | None:
        """The problem's footprint at its main configuration, bytes (None: not known)."""
        memory = self.plan.memory
        return None if memory is None else int(memory.footprint_bytes)

    # -- the turns ---------------------------------------------------------------------

    @property
    def best_ms(self) -> float | None:
        """The fastest verified candidate's GPU time so far, ms."""
        return self._best_ms

    def note(self, record: TurnRecord) -> None:
        """Count ``record`` for :attr:`best_ms` (history of a resumed run, finished turns)."""
        if record.status in VERIFIED and isinstance(record.gpu_ms, (int, float)) and record.gpu_ms > 0:
            with self._lock:
                if self._best_ms is None or record.gpu_ms < self._best_ms:
                    self._best_ms = float(record.gpu_ms)

    def slow_ms(self) -> float | None:
        """The ``slow_ms`` of the next candidate job (:func:`slow_limit_ms`)."""
        return slow_limit_ms(self.settings.slow_factor, self.best_ms, self.baseline_ms())

    def evaluate(self, record: TurnRecord, stage: StageFn = _no_stage, *,
                 folder: Path | None = None) -> TurnRecord:
        """Build, verify and time the candidate of the ``pending`` ``record`` and fill it
        (status, timings, speedups, structure, the Outcome fields); ``folder``: where a
        candidate's files go (PyTorch; default ``<workdir>/candidates/turnT-sampleK``).
        Every outcome of the candidate is a status; nothing raises for a bad candidate.

        Raises:
            ToolchainError: nvcc is missing (exit code 3).
        """
        if self.refusal is not None:
            record.status, record.message = DOES_NOT_FIT, self.refusal
        else:
            best, base = self.best_ms, self.baseline_ms()
            self._evaluate(record, stage, folder)
            if record.status == SLOW:  # what the slow limit was relative to (feedback, bench)
                refs = [(v, name) for v, name in ((best, "best"), (base, "baseline"))
                        if isinstance(v, (int, float)) and v > 0]
                if refs:
                    record.slow_ref_ms, record.slow_ref = min(refs)
                record.slow_factor = self.settings.slow_factor
            self.note(record)
        if record.baseline is None:
            record.baseline = self.baseline_name
        return record

    @abstractmethod
    def _evaluate(self, record: TurnRecord, stage: StageFn, folder: Path | None) -> None: ...

    def refuse(self, message: str) -> None:
        """Mark the problem ``does_not_fit`` (see :attr:`refusal`)."""
        self.refusal = message

    def _score(self, record: TurnRecord, source: str, *, sizes: dict[str, int], resources: Any = None,
               name: str | None = None) -> None:
        """Static structural analysis of a compiled candidate (advisory, never fails the turn)."""
        from cudaperf_cli.structure import analyze_source
        from cudaperf_cli.structure.gpus import default_gpu

        arch = self.settings.arch
        try:
            report = analyze_source(source, arch=arch, resources=resources, gpu=default_gpu(arch),
                                    sizes=sizes, source_name=name or f"turn {record.turn + 1}")
        except Exception as exc:  # noqa: BLE001 - analysis is advisory; the turn goes on
            record.structure_reasons = [f"structural analysis failed: {exc}"]
            return
        with self._lock:
            self.reports[(record.turn, record.sample)] = report
        record.structure_score = report.score
        record.structure_reasons = report.reasons(3)


class ProblemKind(ABC):
    """How one kind of problem file is loaded, planned, evaluated and written.

    Every method is called by the driver in the order of the module docstring; the
    kinds hold no per-run state (that is the :class:`Evaluation`).
    """

    #: ``"c"`` or ``"torch"`` (``problem.json``'s and ``summary.json``'s ``kind``).
    name: ClassVar[str]
    #: The Rich table's layout (agent/render.py ``RichObserver(kind=...)``).
    observer_kind: ClassVar[str] = "c"

    # -- before any work ---------------------------------------------------------------

    def check_options(self, opts: Any) -> None:
        """Refuse options that do not apply to this kind (exit code 2).

        Raises:
            ProblemError: one line naming the flags.
        """

    @abstractmethod
    def default_output(self, opts: Any) -> Path:
        """The result's path when ``-o`` is not given."""

    @abstractmethod
    def resolve_output(self, opts: Any) -> Path:
        """The result's path, checked before any work (``opts.force`` allows replacing).

        Raises:
            CudaperfError: the output cannot or may not be written (exit code 2).
        """

    @abstractmethod
    def output_digest(self, path: Path) -> str | None:
        """SHA-256 of a written result (``summary.json``'s ``output_sha256``), None if absent."""

    @abstractmethod
    def builtin_policy(self) -> Any:
        """The model-free policy for this kind (``--policy builtin``)."""

    # -- load and plan -----------------------------------------------------------------

    def load_message(self, opts: Any) -> str | None:
        """What the spinner says while :meth:`load` runs (None: no spinner)."""
        return None

    @abstractmethod
    def load(self, opts: Any) -> Any:
        """Load the problem of ``opts.file``.

        Raises:
            ProblemError: the file cannot be a problem of this kind (exit code 2).
        """

    @abstractmethod
    def plan(self, problem: Any, device: DeviceInfo) -> Plan:
        """The configurations to verify and time, and the memory plan."""

    def fit_hint(self) -> str | None:
        """The hint printed under a ``does_not_fit`` refusal."""
        return None

    @abstractmethod
    def run_name(self, problem: Any, opts: Any) -> str:
        """The run folder's name before its time stamp (``matmul-kernel_gemm``)."""

    @abstractmethod
    def title(self, problem: Any) -> str:
        """The problem's name in messages and the table title."""

    @abstractmethod
    def problem_json(self, problem: Any, plan: Plan, arch: str, opts: Any) -> dict[str, Any]:
        """``problem.json`` of the run folder."""

    @abstractmethod
    def describe(self, problem: Any, plan: Plan, arch: str, opts: Any, detected: bool) -> list[str]:
        """The human lines (Rich markup) that introduce the run."""

    # -- evaluate ----------------------------------------------------------------------

    @abstractmethod
    def open(self, problem: Any, plan: Plan, settings: EvalSettings, workdir: Path) -> Evaluation:
        """The :class:`Evaluation` of ``problem`` (C: builds the reference library).

        Raises:
            ProblemError: the reference does not build (exit code 2).
        """

    @abstractmethod
    def baseline_from_json(self, data: Any) -> Any:
        """A baseline read back from ``baseline.json`` (``--resume``), or None if unreadable."""

    @abstractmethod
    def candidate_record(self, proposal: Any, turn: int, *, sample: int = 0, samples: int = 1,
                         mapping: dict[str, Any] | None = None) -> TurnRecord:
        """The ``pending`` record of a policy's proposal (``format_error`` when it holds no code)."""

    # -- write and report --------------------------------------------------------------

    @abstractmethod
    def write(self, best: TurnRecord, evaluation: Evaluation, out: Path, opts: Any) -> list[str]:
        """Write the best verified candidate to ``out``; the panel's lines.

        Raises:
            CudaperfError: ``out`` cannot be written (the candidate stays in the run folder).
        """

    @abstractmethod
    def summary(self, problem: Any, evaluation: Evaluation | None, plan: Plan) -> dict[str, Any]:
        """The kind's fields of ``summary.json`` (and ``--json``)."""


__all__ = [
    "DeviceInfo", "EvalSettings", "Evaluation", "Plan", "ProblemKind", "StageFn", "check_fit",
    "fill_outcome", "probe_run_device", "slow_limit_ms",
]
