"""Parent side: run the evaluation worker in a child process with a time limit.

The candidate never runs in the CLI's process.  The worker is started as
``<this python> -m cudaperf_cli.evaluate.worker`` in a new session (its own process group),
gets the job as JSON on stdin and answers with one JSON document on stdout.  On timeout the
whole process group is killed (SIGKILL); a worker that dies or prints garbage becomes a
``crash`` result carrying the signal name and the tail of its stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping

from cudaperf_cli.core import kill_process_group
from cudaperf_cli.evaluate.gpu_lock import gpu_lock
from cudaperf_cli.evaluate.job import (
    CRASH,
    REFERENCE_ERROR,
    TIMEOUT,
    BACKEND_ENV,
    STATE_ENV,
    ConfigResult,
    EvalJob,
    EvalResult,
    summarize_result,
)

WORKER_MODULE = "cudaperf_cli.evaluate.worker"
#: Characters of the worker's stderr kept in results.
STDERR_TAIL_CHARS = 4000
#: Phases in which only the reference (or init) code runs.
_REFERENCE_PHASES = {"load_reference", "init", "classify", "reference", "timing.cpu"}

_PHASE_WORDS = {
    "start": "while starting",
    "device": "while opening the CUDA device",
    "load_reference": "while loading the reference library",
    "data": "while preparing input data",
    "init": "in the init function",
    "classify": "while running the reference to classify outputs",
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


def _tail(path: str, limit: int = STDERR_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - limit * 4, 0))
            data = fh.read().decode(errors="replace")
    except OSError:
        return ""
    if len(data) > limit:
        data = data[-limit:]
        nl = data.find("\n")
        if 0 <= nl < 200:
            data = data[nl + 1 :]
    return data


def _read_state(path: str) -> dict[str, Any]:
    try:
        with open(path) as fh:
            raw = fh.read()
        return json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        return {}


def _where(state: Mapping[str, Any], words: Mapping[str, str] = _PHASE_WORDS) -> str:
    """Where a worker was, from its state file: the phase in words (``words``: the worker's
    phase table) and the configuration and trial."""
    phase = state.get("phase") or "start"
    text = words.get(phase, f"in phase '{phase}'")
    if state.get("config") is not None:
        text += f" (config '{state['config']}'"
        if state.get("trial") is not None:
            text += f", trial {state['trial']}"
        text += ")"
    return text


def _signal_name(rc: int) -> str | None:
    if rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


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
    """Run ``python -m <module>`` (the C worker by default; the PyTorch worker uses it too)
    in its own session with ``stdin_data`` on stdin; kill its process group at ``timeout_s``.
    Returns (exit status or None, stdout, seconds, timed_out)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    full_env[STATE_ENV] = state_path
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    with open(err_path, "wb") as err_fh:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err_fh,
            start_new_session=True,
            env=full_env,
        )
        timed_out = False
        try:
            out, _ = proc.communicate(stdin_data, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_process_group(proc)
            try:
                out, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                out = b""
        except BaseException:
            kill_process_group(proc)
            proc.wait()
            raise
        finally:
            elapsed = time.monotonic() - t0
        # Leftover children of a worker that exited: same group, kill them too.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return proc.returncode, out, elapsed, timed_out


def run_evaluation(
    job: EvalJob,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> EvalResult:
    """Verify and time a candidate in a child process.

    Args:
        job: the :class:`EvalJob` (validated here: ``ValueError`` for a malformed job).
        timeout_s: wall-clock limit of the whole worker run (all configs, timing included),
            seconds; past it the worker's process group is killed and the status is
            ``timeout``.
        env: extra environment variables for the worker (e.g. ``CUDA_VISIBLE_DEVICES``).

    Returns:
        An :class:`EvalResult`; every outcome of the candidate is a status, never an
        exception (``correct``, ``wrong``, ``runtime_error``, ``timeout``, ``crash``,
        ``no_device``, ``reference_error``, ``reference_only``).
    """
    job.validate()
    payload = json.dumps(job.to_json()).encode()
    fd_state, state_path = tempfile.mkstemp(prefix="cudaperf-state-", suffix=".json")
    fd_err, err_path = tempfile.mkstemp(prefix="cudaperf-stderr-", suffix=".log")
    os.close(fd_state)
    os.close(fd_err)
    try:
        # One evaluation at a time per GPU across processes (cudaperf bench -j N); the time
        # limit starts once the lock is held.  See evaluate/gpu_lock.py.
        with gpu_lock(job.device, needed=job.cand_lib is not None):
            rc, out, elapsed, timed_out = _spawn_worker(
                [], payload, timeout_s=timeout_s, env=env, state_path=state_path, err_path=err_path
            )
        state = _read_state(state_path)
        tail = _tail(err_path)
    finally:
        for p in (state_path, err_path):
            try:
                os.unlink(p)
            except OSError:
                pass

    partial = [ConfigResult.from_json(c) for c in state.get("configs", [])]
    phase = state.get("phase")
    if timed_out:
        return EvalResult(
            status=TIMEOUT,
            message=f"timed out after {elapsed:.1f} s (limit {timeout_s:g} s) {_where(state)}",
            configs=partial,
            phase=phase,
            elapsed_s=elapsed,
            exit_code=rc,
            signal="SIGKILL",
            stderr_tail=tail,
            details={"state": state},
            summary=summarize_result(partial, job.baseline_label),
        )

    text = out.decode(errors="replace").strip()
    result: EvalResult | None = None
    if text:  # a result written before a crash at exit still counts
        try:
            doc = json.loads(text.splitlines()[-1])
            if isinstance(doc, dict) and "status" in doc:
                result = EvalResult.from_json(doc)
        except (ValueError, TypeError, KeyError):
            result = None
    if result is not None:
        result.elapsed_s = elapsed
        result.exit_code = rc
        result.stderr_tail = tail
        if rc:
            result.warnings.append(
                f"the worker wrote its result, then exited with status {rc}"
                + (f" ({_signal_name(rc)})" if rc < 0 else "")
            )
        return result

    sig = _signal_name(rc if rc is not None else 0)
    if rc is not None and rc != 0:
        how = f"killed by {sig}" if sig else f"exited with status {rc}"
        status = CRASH
        if phase in _REFERENCE_PHASES and not state.get("candidate_started"):
            status = REFERENCE_ERROR
            message = f"the worker was {how} {_where(state)}, before the candidate ran"
        else:
            message = f"the worker was {how} {_where(state)}"
    else:
        status = CRASH
        snippet = text[:200].replace("\n", " ")
        message = (
            f"the worker exited without a valid result {_where(state)}"
            + (f"; it printed: {snippet!r}" if snippet else "")
        )
    return EvalResult(
        status=status,
        message=message,
        configs=partial,
        phase=phase,
        elapsed_s=elapsed,
        exit_code=rc,
        signal=sig,
        stderr_tail=tail,
        details={"state": state},
        summary=summarize_result(partial, job.baseline_label),
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
    fd_state, state_path = tempfile.mkstemp(prefix="cudaperf-state-", suffix=".json")
    fd_err, err_path = tempfile.mkstemp(prefix="cudaperf-stderr-", suffix=".log")
    os.close(fd_state)
    os.close(fd_err)
    try:
        env = {}
        if os.environ.get(BACKEND_ENV):
            env[BACKEND_ENV] = os.environ[BACKEND_ENV]
        rc, out, elapsed, timed_out = _spawn_worker(
            ["--device-info", "--device", str(int(ordinal))],
            b"",
            timeout_s=timeout_s,
            env=env,
            state_path=state_path,
            err_path=err_path,
        )
        tail = _tail(err_path, 600)
    except Exception as exc:  # noqa: BLE001 - documented as never raising
        return {"available": False, "reason": f"cannot start the device probe: {exc}"}
    finally:
        for p in (state_path, err_path):
            try:
                os.unlink(p)
            except OSError:
                pass
    if timed_out:
        return {"available": False, "reason": f"the device probe hung for {elapsed:.0f} s"}
    try:
        doc = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
        if isinstance(doc, dict):
            return doc
    except (ValueError, IndexError):
        pass
    sig = _signal_name(rc or 0)
    how = f"was killed by {sig}" if sig else f"exited with status {rc}"
    last = tail.strip().splitlines()[-1] if tail.strip() else ""
    return {"available": False, "reason": f"the device probe {how}" + (f": {last}" if last else "")}


def device_info(ordinal: int = 0, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """The device description for ``cudaperf doctor``: :func:`probe_device`'s dict, whose
    ``available`` is False (with a ``reason``) when no device is usable."""
    return probe_device(ordinal, timeout_s=timeout_s)


__all__ = ["device_info", "probe_device", "run_evaluation"]
