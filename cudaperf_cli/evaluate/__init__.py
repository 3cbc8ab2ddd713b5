"""evaluate stage: verify and time a built candidate against the reference, in a child
process (``python -m cudaperf_cli.evaluate.worker``).

Public API::

    run_evaluation(job: EvalJob, *, timeout_s, prepare_timeout_s=300,
                   host_memory_limit_bytes="auto") -> EvalResult
    plan_c_memory(job | problem, configs=None, *, l2_bytes) -> MemoryPlan   # bytes
    run_child(module, args, job_doc, *, timeout_s, gpu, ...) -> ChildRun     # the protocol
    probe_device(ordinal=0) -> dict          # {"available": bool, "reason"| device fields}
    device_info(ordinal=0) -> dict           # same dict, for `cudaperf doctor`

Job/result types live in :mod:`cudaperf_cli.evaluate.job`; the child protocol (both
workers) in :mod:`cudaperf_cli.evaluate.child`; the comparison rules in
:mod:`cudaperf_cli.evaluate.verify`; timing in :mod:`cudaperf_cli.evaluate.timing`.
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
    SLOW,
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
    plan_c_memory,
    summarize_result,
)
from cudaperf_cli.evaluate.child import ChildRun, run_child
from cudaperf_cli.evaluate.memory import MemoryPlan, does_not_fit
from cudaperf_cli.evaluate.runner import device_info, host_memory_limit, probe_device, run_evaluation
from cudaperf_cli.evaluate.timing import flush_size, need_more_reps, plan_reps, summarize, time_repetitions
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
    "ChildRun",
    "ConfigResult",
    "ConfigSpec",
    "ConfigTiming",
    "DEFAULT_TOLERANCES",
    "EvalJob",
    "EvalResult",
    "MemoryPlan",
    "NO_DEVICE",
    "READ_ONLY",
    "READ_WRITE",
    "REFERENCE_ERROR",
    "REFERENCE_ONLY",
    "RUNTIME_ERROR",
    "SLOW",
    "STATUSES",
    "TIMEOUT",
    "TimingSettings",
    "TimingStats",
    "WRITE_ONLY",
    "WRONG",
    "classify_roles",
    "compare_arrays",
    "device_info",
    "does_not_fit",
    "flush_size",
    "host_memory_limit",
    "need_more_reps",
    "plan_c_memory",
    "plan_reps",
    "probe_device",
    "run_child",
    "run_evaluation",
    "summarize",
    "summarize_result",
    "time_repetitions",
    "tolerance_for",
]
