"""evaluate stage: verify and time a built candidate against the reference, in a child
process (``python -m cudaperf_cli.evaluate.worker``).

Public API::

    run_evaluation(job: EvalJob, *, timeout_s) -> EvalResult
    probe_device(ordinal=0) -> dict          # {"available": bool, "reason"| device fields}
    device_info(ordinal=0) -> dict           # same dict, for `cudaperf doctor`

Job/result types live in :mod:`cudaperf_cli.evaluate.job`; the comparison rules in
:mod:`cudaperf_cli.evaluate.verify`; timing statistics in :mod:`cudaperf_cli.evaluate.timing`.
See ``docs/evaluation.md``.
"""

from cudaperf_cli.evaluate.job import (
    CORRECT,
    CRASH,
    NO_DEVICE,
    READ_ONLY,
    READ_WRITE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
    RUNTIME_ERROR,
    STATUSES,
    TIMEOUT,
    WRITE_ONLY,
    WRONG,
    ArrayCheck,
    ConfigResult,
    ConfigSpec,
    ConfigTiming,
    EvalJob,
    EvalResult,
    TimingSettings,
    TimingStats,
    summarize_result,
)
from cudaperf_cli.evaluate.runner import device_info, probe_device, run_evaluation
from cudaperf_cli.evaluate.timing import flush_size, need_more_reps, summarize
from cudaperf_cli.evaluate.verify import (
    DEFAULT_TOLERANCES,
    classify_roles,
    compare_arrays,
    tolerance_for,
)

__all__ = [
    "ArrayCheck",
    "CORRECT",
    "CRASH",
    "ConfigResult",
    "ConfigSpec",
    "ConfigTiming",
    "DEFAULT_TOLERANCES",
    "EvalJob",
    "EvalResult",
    "NO_DEVICE",
    "READ_ONLY",
    "READ_WRITE",
    "REFERENCE_ERROR",
    "REFERENCE_ONLY",
    "RUNTIME_ERROR",
    "STATUSES",
    "TIMEOUT",
    "TimingSettings",
    "TimingStats",
    "WRITE_ONLY",
    "WRONG",
    "classify_roles",
    "compare_arrays",
    "device_info",
    "flush_size",
    "need_more_reps",
    "probe_device",
    "run_evaluation",
    "summarize",
    "summarize_result",
    "tolerance_for",
]
