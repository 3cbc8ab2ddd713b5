"""Parent side of the C evaluation: run the worker under the child protocol.

The candidate never runs in the CLI's process.  :func:`run_evaluation` starts
``<this python> -m cudaperf_cli.evaluate.worker`` through
:func:`cudaperf_cli.evaluate.child.run_child` (its own process group, the job as one JSON
line on stdin, a state file, the GPU gate: the per-GPU lock is taken only once the worker
has prepared everything that is not device work), and turns what it saw into an
:class:`~cudaperf_cli.evaluate.job.EvalResult`: a worker past a deadline is killed and
becomes ``timeout`` (or ``reference_error`` when only the reference had run), one that dies
or prints garbage a ``crash`` with the signal name and the tail of its stderr, one past its
host-memory bound a ``crash`` saying so.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from cudaperf_cli.evaluate.child import (
    DEFAULT_PREPARE_TIMEOUT_S,
    STDERR_TAIL_CHARS,
    ChildRun,
    _run_process,
    read_state,
    run_child,
    signal_name,
    tail_of,
    where,
)
from cudaperf_cli.evaluate.job import (
    CRASH,
    REFERENCE_ERROR,
    TIMEOUT,
    BACKEND_ENV,
    DEVICE_WRAPPER_ENV,
    ConfigResult,
    EvalJob,
    EvalResult,
    plan_c_memory,
    summarize_result,
)

WORKER_MODULE = "cudaperf_cli.evaluate.worker"
#: Phases in which only the reference (or init) code runs.
_REFERENCE_PHASES = {"load_reference", "init", "classify", "reference", "reference_outputs",
                     "timing.cpu"}
#: ``host_memory_limit_bytes="auto"``: the plan's host bytes x this, plus
#: :data:`HOST_OVERHEAD_BYTES` (the interpreter, numpy, the CUDA context and runtime).
HOST_LIMIT_FACTOR = 1.5
HOST_OVERHEAD_BYTES = 4 << 30

#: The C worker's phases in words, for messages that say where it was (``child.where``).
PHASE_WORDS = {
    "start": "while starting",
    "device": "while opening the CUDA device",
    "load_reference": "while loading the reference library",
    "data": "while preparing input data",
    "init": "in the init function",
    "classify": "while running the reference to classify outputs",
    "reference_outputs": "while reading or writing the stored reference outputs",
    "gpu_wait": "while waiting for the GPU",
    "load_candidate": "while loading the candidate library",
    "alloc": "while allocating device memory",
    "upload": "while copying inputs to the device",
    "candidate": "in the candidate call",
    "download": "while copying results back",
    "reference": "in the reference function",
    "compare": "while comparing results",
    "timing.data": "while preparing timing data",
    "timing.alloc": "while allocating timing buffers",
    "timing.warmup": "in the warm-up calls",
    "timing.gpu": "in the timed candidate calls",
    "timing.sync": "in the synchronized candidate calls",
    "timing.e2e": "in the end-to-end runs",
    "timing.cpu": "in the reference (CPU baseline)",
    "timing.check": "while checking results after timing",
    "done": "after finishing",
}


# Names kept for evaluate/torch_job.py until the PyTorch worker moves onto child.py.
_tail = tail_of
_read_state = read_state
_signal_name = signal_name


def _where(state: Mapping[str, Any], words: Mapping[str, str] = PHASE_WORDS) -> str:
    """Where a worker was, from its state file (``words``: the worker's phase table)."""
    return where(state, words)


def _spawn_worker(
    args: list[str],
    stdin_data: bytes,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None,
    state_path: str,
    err_path: str,
    module: str = WORKER_MODULE,
) -> tuple[int | None, bytes, float, bool]:
    """The earlier protocol, for the PyTorch worker until it adopts the gate: ``python -m
    <module>`` with ``stdin_data`` on stdin, then EOF; no gate, one deadline
    ``timeout_s``; the process group is killed at it and always at the end.

    Returns:
        (exit status or None, stdout bytes, seconds, timed_out).
    """
    import sys

    run = _run_process(
        [sys.executable, "-m", module, *args], stdin_data, keep_stdin_open=False, gpu=None,
        timeout_s=timeout_s, prepare_timeout_s=timeout_s, env=env, state_path=state_path,
        err_path=err_path, host_memory_limit_bytes=None,
    )
    return run.returncode, run.stdout_text.encode(), run.elapsed_s, run.timed_out


def host_memory_limit(job: EvalJob) -> int:
    """The default host-memory bound of a C evaluation, bytes: :data:`HOST_LIMIT_FACTOR` x
    the plan's ``host_bytes`` (:func:`~cudaperf_cli.evaluate.job.plan_c_memory`) +
    :data:`HOST_OVERHEAD_BYTES`."""
    plan = plan_c_memory(job, l2_bytes=0)
    return int(HOST_LIMIT_FACTOR * plan.host_bytes) + HOST_OVERHEAD_BYTES


def run_evaluation(
    job: EvalJob,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    prepare_timeout_s: float = DEFAULT_PREPARE_TIMEOUT_S,
    host_memory_limit_bytes: int | str | None = "auto",
    wrapper: Sequence[str] = (),
) -> EvalResult:
    """Verify and time a candidate (or run the reference alone) in a child process.

    Args:
        job: the :class:`EvalJob` (validated here: ``ValueError`` for a malformed job).
        timeout_s: wall-clock limit of the worker's device work, seconds: from the moment
            it holds the GPU (all configurations, timing included) for a candidate; the
            whole run for a reference-only job (which takes no GPU lock).  Past it the
            worker's process group is killed and the status is ``timeout``.
        env: extra environment variables for the worker (e.g. ``CUDA_VISIBLE_DEVICES``).
        prepare_timeout_s: limit of a candidate worker's preparation (start-up, the device
            context, the reference, host data, CPU reference runs), seconds, before it asks
            for the GPU; the wait for the GPU lock counts in neither limit.
        host_memory_limit_bytes: bound of the worker's resident host memory (its process
            group), bytes; ``"auto"``: :func:`host_memory_limit`; None: unbounded.
        wrapper: a command the candidate's process runs under (its arguments end with
            ``--``): the compute-sanitizer stage's (evaluate/sanitize.py); the worker (the
            judge) starts that process, so the tool sees the candidate's device work and
            nothing of the judge's.  (): the candidate's process runs as itself.

    Returns:
        An :class:`EvalResult`; every outcome of the candidate is a status, never an
        exception (``correct``, ``slow``, ``wrong``, ``runtime_error``, ``timeout``,
        ``crash``, ``no_device``, ``reference_error``, ``reference_only``).  Its
        ``prepare_s``, ``lock_wait_s``, ``elapsed_s``, ``peak_gpu_bytes``,
        ``footprint_bytes`` and ``tolerances`` are filled.
    """
    job.validate()
    plan = plan_c_memory(job, l2_bytes=0)
    if host_memory_limit_bytes == "auto":
        limit: int | None = int(HOST_LIMIT_FACTOR * plan.host_bytes) + HOST_OVERHEAD_BYTES
    elif host_memory_limit_bytes is None:
        limit = None
    else:
        limit = int(host_memory_limit_bytes)
    gpu = job.device if job.cand_lib is not None else None
    if wrapper:
        env = {**(env or {}), DEVICE_WRAPPER_ENV: json.dumps(list(wrapper))}
    run = run_child(
        WORKER_MODULE, [], job.to_json(), timeout_s=timeout_s,
        prepare_timeout_s=prepare_timeout_s, gpu=gpu, env=env, host_memory_limit_bytes=limit,
    )
    result = _result_of(job, run, timeout_s=timeout_s)
    result.elapsed_s = run.elapsed_s
    result.prepare_s = run.prepare_s
    result.lock_wait_s = run.lock_wait_s
    result.exit_code = run.returncode
    result.stderr_tail = run.stderr_tail
    if result.footprint_bytes is None:
        result.footprint_bytes = plan.footprint_bytes
    if run.memory_peak_bytes is not None:
        result.details.setdefault("host_memory_peak_bytes", run.memory_peak_bytes)
        result.details.setdefault("host_memory_limit_bytes", run.memory_limit_bytes)
    return result


def _result_of(job: EvalJob, run: ChildRun, *, timeout_s: float) -> EvalResult:
    state = run.state
    partial = [ConfigResult.from_json(c) for c in state.get("configs", [])]
    phase = state.get("phase")
    before_candidate = not state.get("candidate_started")
    reference_phase = phase in _REFERENCE_PHASES and before_candidate

    def failed(status: str, message: str, sig: str | None) -> EvalResult:
        return EvalResult(
            status=status, message=message, configs=partial, phase=phase, signal=sig,
            details={"state": state}, summary=summarize_result(partial, job.baseline_label),
        )

    if run.memory_exceeded:
        seen = (run.memory_peak_bytes or 0) / 1e9
        lim = (run.memory_limit_bytes or 0) / 1e9
        text = (f"killed: the worker's host memory reached {seen:.2f} GB, above its limit of "
                f"{lim:.2f} GB, {_where(state)}")
        r = failed(REFERENCE_ERROR if reference_phase else CRASH,
                   text + (", before the candidate ran" if before_candidate else ""), "SIGKILL")
        r.details["host_memory_exceeded"] = True
        return r
    if run.timed_out:
        if run.timeout_phase == "prepare":
            took = run.elapsed_s
            what = f"the worker's preparation timed out after {took:.1f} s (limit {run.timeout_limit_s:g} s)"
        else:
            took = run.run_s if run.run_s is not None else run.elapsed_s
            what = f"timed out after {took:.1f} s (limit {timeout_s:g} s)"
        if reference_phase:
            return failed(REFERENCE_ERROR, f"{what} {_where(state)}, before the candidate ran",
                          "SIGKILL")
        r = failed(TIMEOUT, f"{what} {_where(state)}", "SIGKILL")
        r.details["timeout_phase"] = run.timeout_phase
        return r

    if run.result is not None:  # a result written before a crash at exit still counts
        try:
            result = EvalResult.from_json(run.result)
        except (ValueError, TypeError, KeyError):
            result = None
        if result is not None:
            rc = run.returncode
            if rc:
                result.warnings.append(
                    f"the worker wrote its result, then exited with status {rc}"
                    + (f" ({run.signal})" if run.signal else "")
                )
            return result

    rc = run.returncode
    sig = run.signal
    if rc is not None and rc != 0:
        how = f"killed by {sig}" if sig else f"exited with status {rc}"
        if reference_phase:
            return failed(REFERENCE_ERROR,
                          f"the worker was {how} {_where(state)}, before the candidate ran", sig)
        return failed(CRASH, f"the worker was {how} {_where(state)}", sig)
    snippet = run.stdout_text.strip()[:200].replace("\n", " ")
    return failed(
        CRASH,
        f"the worker exited without a valid result {_where(state)}"
        + (f"; it printed: {snippet!r}" if snippet else ""),
        sig,
    )


def probe_device(ordinal: int = 0, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """Describe CUDA device ``ordinal`` from a child process.

    Returns:
        ``{"available": True, "name", "compute_capability" ("9.0"), "arch" ("sm_90"),
        "sm_count", "l2_bytes", "memory_total_bytes", "memory_free_bytes",
        "driver_version", "driver_cuda_version", "clock_khz", "memory_clock_khz",
        "cuda_core_version", "cuda_bindings_version", ...}`` or
        ``{"available": False, "reason": "..."}``.  Never raises.
    """
    import os

    env = {}
    if os.environ.get(BACKEND_ENV):
        env[BACKEND_ENV] = os.environ[BACKEND_ENV]
    try:
        run = run_child(WORKER_MODULE, ["--device-info", "--device", str(int(ordinal))], None,
                        timeout_s=timeout_s, gpu=None, env=env, tail_chars=600)
    except Exception as exc:  # noqa: BLE001 - documented as never raising
        return {"available": False, "reason": f"cannot start the device probe: {exc}"}
    if run.timed_out:
        return {"available": False, "reason": f"the device probe hung for {run.elapsed_s:.0f} s"}
    lines = run.stdout_text.strip().splitlines()
    try:
        doc = json.loads(lines[-1])
        if isinstance(doc, dict):
            return doc
    except (ValueError, IndexError):
        pass
    sig = run.signal
    how = f"was killed by {sig}" if sig else f"exited with status {run.returncode}"
    tail = run.stderr_tail.strip()
    last = tail.splitlines()[-1] if tail else ""
    return {"available": False, "reason": f"the device probe {how}" + (f": {last}" if last else "")}


def device_info(ordinal: int = 0, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """The device description for ``cudaperf doctor``: :func:`probe_device`'s dict, whose
    ``available`` is False (with a ``reason``) when no device is usable."""
    return probe_device(ordinal, timeout_s=timeout_s)


__all__ = ["HOST_LIMIT_FACTOR", "HOST_OVERHEAD_BYTES", "WORKER_MODULE", "device_info",
           "host_memory_limit", "probe_device", "run_evaluation"]
