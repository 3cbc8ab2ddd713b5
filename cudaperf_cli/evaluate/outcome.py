"""The fields every evaluation result shares, C and PyTorch alike.

:class:`Outcome` is the base of :class:`~cudaperf_cli.evaluate.job.EvalResult` (a C
candidate) and :class:`~cudaperf_cli.evaluate.torch_job.TorchEvalResult` (a PyTorch
candidate).  Whatever reads a result without caring about its kind (the optimize driver,
bench, the reward, RL) reads these fields; the kinds add their own (per-array checks and
CPU timings for C; guards, profile and eager/compile timings for PyTorch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """One evaluation's outcome.

    Attributes:
        status: a name of :data:`cudaperf_cli.statuses.ORDER` (or ``reference_only`` for a
            job without a candidate).
        message: one line: what happened and where (configuration, trial, phase).
        phase: the worker's last phase.
        elapsed_s: wall time of the whole evaluation, seconds (``lock_wait_s`` included).
        prepare_s: of it, seconds the worker spent before it asked for the GPU (starting
            Python, imports, the CUDA context, loading the problem, host-side data and the
            CPU reference where the kind allows), seconds; None when not reported.
        lock_wait_s: of it, seconds waiting for the GPU lock (another evaluation on this
            GPU), seconds; 0.0 when none was waited for.
        exit_code: the worker's exit status (negative: killed by that signal number).
        signal: the name of the signal that killed the worker (``SIGSEGV``...), else None.
        stderr_tail: the last characters the worker (and the code it ran) wrote to stderr.
        device: the device the evaluation ran on (name, architecture, memory, ...).
        error: for ``runtime_error``/``reference_error``/``compile_error``: where and what.
        peak_gpu_bytes: the most device memory the evaluation held at once, bytes (the
            worker's own accounting); None when not measured.
        footprint_bytes: the problem's footprint at its main configuration (inputs,
            outputs, parameters and buffers), bytes; None when not known.
        tolerances: the comparison tolerances used, dtype -> ``{"atol", "rtol"}``.
        warnings: notable things (a speedup above 10x, a check that could not run, ...).
        details: free-form extra data (the state file of a killed worker, ...).
        summary: headline numbers (the kinds' ``summarize`` functions).
    """

    status: str
    message: str = ""
    phase: str | None = None
    elapsed_s: float = 0.0
    prepare_s: float | None = None
    lock_wait_s: float = 0.0
    exit_code: int | None = None
    signal: str | None = None
    stderr_tail: str = ""
    device: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    peak_gpu_bytes: int | None = None
    footprint_bytes: int | None = None
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


__all__ = ["Outcome"]
