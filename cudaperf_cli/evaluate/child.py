"""The one child-process protocol of the evaluation workers (C and PyTorch), both sides.

A worker runs as ``<this python> -m <module> [args]`` in a new session (its own process
group).  The protocol (``docs/evaluation.md`` §3):

* **stdin**: the job as ONE JSON line; stdin then stays open.  With a GPU gate the parent
  later writes ``go`` on it (see below); a closed stdin tells the child its parent is gone.
* **stdout** (the *result channel*): JSON lines.  ``{"event": "ready"}`` asks for the GPU;
  the last JSON object with a ``"status"`` key is the result.  The child keeps a private
  duplicate of fd 1 for it and points fd 1 at stderr (:func:`result_channel`), so output
  of the code it runs cannot corrupt the protocol.
* **stderr**: anything; the parent keeps the tail (:data:`STDERR_TAIL_CHARS`).
* ``$CUDAPERF_WORKER_STATE``: a file the child rewrites at every phase change
  (:class:`State`); the parent reads it to say where a killed child was.
* **GPU gate** (``$CUDAPERF_GPU_GATE=1``, set by the parent when ``gpu`` is given): the
  child prepares everything that is not device work, writes the ``ready`` line and blocks
  reading stdin (:func:`wait_for_gpu`).  The parent then takes the per-GPU lock
  (:func:`cudaperf_cli.evaluate.gpu_lock.gpu_lock`; the wait is measured and counted in
  no limit), writes ``go``, and only then starts the run deadline.  The lock is held
  until the child has exited.  A child that exits before ``ready`` never takes the lock.
* **Hold** (parent side only): a gated child can be started before the caller's other work
  for it is done (the candidate's build): its preparation then overlaps that work.  At
  ``ready`` the parent waits for the caller (:class:`Hold`) before it takes the lock; a
  caller that cancels gets the child's process group killed (:func:`start_child`).
* **Deadlines**: before ``ready``, ``prepare_timeout_s`` from the start; after ``go``,
  ``timeout_s``.  Without a gate one deadline, ``timeout_s`` from the start.  Past a
  deadline the process group gets SIGKILL.
* **Host memory**: with ``host_memory_limit_bytes`` the parent sums the resident memory of
  the child's process group and of the child's descendants (a process that left the group
  with ``setsid()``, such as a candidate's process, stays the child's descendant) about
  every :data:`MEMORY_POLL_S` seconds and kills the group above the limit (``RLIMIT_AS`` cannot bound a CUDA process: the driver reserves
  terabytes of virtual address space).

The child-side helpers import nothing heavy (no numpy, torch or cuda).
"""

from __future__ import annotations

import contextlib
import ctypes
import getpass
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from cudaperf_cli.evaluate.gpu_lock import LockAbandoned, gpu_lock

#: Path of the phase file the child keeps overwriting.
STATE_ENV = "CUDAPERF_WORKER_STATE"
#: ``1``: the child asks for the GPU (``ready``) and waits for ``go`` before device work.
GATE_ENV = "CUDAPERF_GPU_GATE"
#: The parent's ``time.time()`` just before it spawned the child (``State``'s ``startup``).
SPAWN_TIME_ENV = "CUDAPERF_SPAWN_TIME"
#: Characters of the child's stderr kept in results.
STDERR_TAIL_CHARS = 4000
#: The line a gated child writes on its result channel once it is prepared.
READY_EVENT: dict[str, str] = {"event": "ready"}
#: What the parent writes on the child's stdin once it holds the GPU lock.
GO_LINE = b"go\n"
#: Default preparation deadline (seconds from the start until ``ready``).
DEFAULT_PREPARE_TIMEOUT_S = 300.0
#: Seconds between two host-memory polls of the child's process group.
MEMORY_POLL_S = 0.25
#: Polls between two full scans of ``/proc`` for new members of the group (the known
#: members are read at every poll).
MEMORY_RESCAN_POLLS = 4
#: Exit status of a gated child whose parent went away before ``go``.
EXIT_PARENT_GONE = 75


# ---------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------


@dataclass
class ChildRun:
    """What :func:`run_child` saw.

    Attributes:
        returncode: the child's exit status (negative: killed by that signal), None if it
            could not be collected.
        result: the last JSON object with a ``"status"`` key on the result channel, else
            None.
        stdout_text: everything on the result channel except the protocol's events.
        elapsed_s: seconds from the spawn to the end (lock wait included).
        prepare_s: seconds from the spawn to the ``ready`` line; with a gate and no
            ``ready`` (exited or killed first), all of ``elapsed_s``; None without a gate.
        lock_wait_s: seconds spent waiting for the GPU lock (0.0 when none was taken).
        run_s: seconds from ``go`` to the end (gated), or the whole run without a gate;
            None when ``go`` was never sent.
        timed_out: the child was killed at a deadline.
        timeout_phase: ``"prepare"`` (before ``ready``) or ``"run"``, when ``timed_out``.
        state: the last state file the child wrote (``{}`` when none).
        stderr_tail: the last :data:`STDERR_TAIL_CHARS` characters of stderr.
        signal: name of the signal that ended the child (``SIGSEGV``...), else None.
        memory_exceeded: killed because the group's resident memory passed the limit.
        memory_peak_bytes: the largest resident memory of the group seen, bytes (None when
            not polled).
        memory_limit_bytes: the limit in force, bytes (None: not bounded).
        gated: the GPU gate was on.
        ready: the child wrote ``ready``.
        timeout_limit_s: the limit of the deadline that was passed, seconds (None if none).
        held_s: seconds from ``ready`` until the :class:`Hold` released the child (0.0
            without a hold); not part of ``lock_wait_s`` nor of any deadline.
        cancelled: the caller cancelled the run (:meth:`Hold.release` with ``go=False``, or
            :meth:`PendingChild.cancel`) and the child's process group was killed.
    """

    returncode: int | None
    result: dict[str, Any] | None
    stdout_text: str
    elapsed_s: float
    prepare_s: float | None
    lock_wait_s: float
    run_s: float | None
    timed_out: bool = False
    timeout_phase: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    stderr_tail: str = ""
    signal: str | None = None
    memory_exceeded: bool = False
    memory_peak_bytes: int | None = None
    memory_limit_bytes: int | None = None
    gated: bool = False
    ready: bool = False
    timeout_limit_s: float | None = None
    held_s: float = 0.0
    cancelled: bool = False


class Hold:
    """Holds a gated child at ``ready`` until the caller releases it (thread-safe).

    The child prepares (imports, CUDA context, the problem) while the caller finishes what
    the child's GPU work needs (the candidate's build); then :meth:`release` lets it take
    the GPU lock (``go=True``) or ends it (``go=False``: its process group is killed, the
    run is ``cancelled``)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._go = False
        self._aborted = False

    def release(self, go: bool = True) -> None:
        """Let the child go on (``go``) or cancel it; only the first call counts."""
        if not self._event.is_set():
            self._go = go
            self._event.set()

    def abort(self) -> None:
        """Cancel the run at any point, after a ``go`` too (the caller's Ctrl-C): the child
        is killed, a wait for the GPU lock gives up."""
        self._aborted = True
        self.release(False)

    @property
    def cancelled(self) -> bool:
        """Whether the caller has cancelled (or aborted) the run."""
        return self._aborted or (self._event.is_set() and not self._go)

    def wait(self, timeout_s: float) -> bool | None:
        """Wait up to ``timeout_s`` for :meth:`release`: True (go), False (cancelled), or
        None (not released yet)."""
        if not self._event.wait(timeout_s):
            return None
        return self._go


def tail_of(path: str, limit: int = STDERR_TAIL_CHARS) -> str:
    """The last ``limit`` characters of a file (from a line start when one is near), or
    "" when it cannot be read."""
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


def read_state(path: str) -> dict[str, Any]:
    """The JSON state file a child wrote, or ``{}``."""
    try:
        with open(path) as fh:
            raw = fh.read()
        doc = json.loads(raw) if raw.strip() else {}
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def where(state: Mapping[str, Any], words: Mapping[str, str]) -> str:
    """Where a child was, from its state file: the phase in words (``words``: the worker's
    phase table) and the configuration and trial."""
    phase = state.get("phase") or "start"
    text = words.get(phase, f"in phase '{phase}'")
    if state.get("config") is not None:
        text += f" (config '{state['config']}'"
        if state.get("trial") is not None:
            text += f", trial {state['trial']}"
        text += ")"
    return text


def signal_name(rc: int | None) -> str | None:
    """``SIGSEGV`` for a return code of -11; None for a normal exit."""
    if rc is None or rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _ppid_pgrp(pid: int) -> tuple[int, int] | None:
    """``(parent pid, process group)`` of ``pid`` from ``/proc/<pid>/stat``; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        # fields after "(comm)": state ppid pgrp ...
        fields = raw[raw.rindex(b")") + 2 :].split()
        return int(fields[1]), int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


def group_and_descendants(leader: int) -> set[int]:
    """The members of process group ``leader`` and every descendant of process ``leader``
    (by parent pids; one scan of ``/proc``), ``leader`` included."""
    parent: dict[int, int] = {}
    out = {leader}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        ids = _ppid_pgrp(int(name))
        if ids is None:
            continue
        parent[int(name)] = ids[0]
        if ids[1] == leader:
            out.add(int(name))
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(out)
    while todo:
        for kid in children.get(todo.pop(), ()):
            if kid not in out:
                out.add(kid)
                todo.append(kid)
    return out


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
    _PAGE = 4096


class _GroupMemory:
    """Resident memory (``/proc/<pid>/statm`` resident pages x page size, summed) of a
    process group and of its leader's descendants (:func:`group_and_descendants`); the
    member list is refreshed every :data:`MEMORY_RESCAN_POLLS` polls (the leader is read at
    every poll).  Between scans a member whose group is no longer the leader's and whose
    parent is no longer a member is dropped (a reused pid)."""

    def __init__(self, pgid: int):
        self.pgid = pgid
        self.members: set[int] = {pgid}
        self.polls = 0

    def bytes(self) -> int:
        if self.polls % MEMORY_RESCAN_POLLS == 0:
            self.members = group_and_descendants(self.pgid)
        self.polls += 1
        total = 0
        for pid in list(self.members):
            if pid != self.pgid:
                ids = _ppid_pgrp(pid)
                if ids is None or (ids[1] != self.pgid and ids[0] not in self.members):
                    self.members.discard(pid)
                    continue
            total += _rss_bytes(pid)
        return total


def _exited(pid: int) -> bool:
    """Whether ``pid`` (our child) has exited, without reaping it (so its pid, which is
    also the process group id, cannot be reused before the group is killed)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == pid


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _run_process(
    cmd: Sequence[str],
    stdin_data: bytes,
    *,
    keep_stdin_open: bool,
    gpu: int | None,
    timeout_s: float,
    prepare_timeout_s: float,
    env: Mapping[str, str] | None,
    state_path: str,
    err_path: str,
    host_memory_limit_bytes: int | None,
    hold: Hold | None = None,
    started: Callable[[int], None] | None = None,
) -> ChildRun:
    """The protocol's parent loop (see the module docstring); the state and stderr files
    are the caller's (read and removed there).  ``hold``: wait for it at ``ready`` (a
    cancel at any time kills the child); ``started``: called with the child's pid (its
    process group) once it runs."""
    from cudaperf_cli.sandbox import CUDA_CHILD_LIMITS, python_child_env, scrubbed_env

    full_env = python_child_env(scrubbed_env(env))  # loads model-written code: no API keys
    full_env[STATE_ENV] = state_path
    full_env[SPAWN_TIME_ENV] = repr(time.time())
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    gated = gpu is not None
    if gated:
        full_env[GATE_ENV] = "1"
    else:
        full_env.pop(GATE_ENV, None)

    out = ChildRun(returncode=None, result=None, stdout_text="", elapsed_s=0.0, prepare_s=None,
                   lock_wait_s=0.0, run_s=None, gated=gated,
                   memory_limit_bytes=host_memory_limit_bytes)
    with open(err_path, "wb") as err_fh, contextlib.ExitStack() as held:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_fh,
            start_new_session=True, env=full_env, preexec_fn=CUDA_CHILD_LIMITS.preexec(),
        )
        assert proc.stdin is not None and proc.stdout is not None
        in_fd, out_fd = proc.stdin.fileno(), proc.stdout.fileno()
        if started is not None:
            started(proc.pid)
        if hold is not None and hold.cancelled:  # cancelled while it was being spawned
            _killpg(proc.pid)
        try:
            os.set_blocking(in_fd, False)
            os.set_blocking(out_fd, False)
            sel = selectors.DefaultSelector()
            sel.register(out_fd, selectors.EVENT_READ)
            pending = bytearray(stdin_data)
            stdin_open = True
            if pending:
                sel.register(in_fd, selectors.EVENT_WRITE)
            elif not keep_stdin_open:
                proc.stdin.close()
                stdin_open = False
            buf = bytearray()
            lines: list[bytes] = []
            eof = False
            phase = "prepare" if gated else "run"
            limit = prepare_timeout_s if gated else timeout_s
            deadline = t0 + limit
            go_at: float | None = t0 if not gated else None
            memory = _GroupMemory(proc.pid) if host_memory_limit_bytes is not None else None
            next_poll = t0

            def close_stdin() -> None:
                nonlocal stdin_open
                if stdin_open:
                    with contextlib.suppress(KeyError, ValueError, OSError):
                        sel.unregister(in_fd)
                    with contextlib.suppress(OSError):
                        proc.stdin.close()  # type: ignore[union-attr]
                    stdin_open = False

            def write_stdin(data: bytes) -> None:
                """Queue ``data`` for the child's stdin."""
                nonlocal pending
                if not stdin_open:
                    return
                was_empty = not pending
                pending += data
                if was_empty:
                    with contextlib.suppress(KeyError, ValueError, OSError):
                        sel.register(in_fd, selectors.EVENT_WRITE)

            def read_some() -> None:
                nonlocal eof
                while True:
                    try:
                        chunk = os.read(out_fd, 1 << 16)
                    except BlockingIOError:
                        return
                    except OSError:
                        chunk = b""
                    if not chunk:
                        eof = True
                        with contextlib.suppress(KeyError, ValueError, OSError):
                            sel.unregister(out_fd)
                        return
                    buf.extend(chunk)
                    while True:
                        nl = buf.find(b"\n")
                        if nl < 0:
                            break
                        lines.append(bytes(buf[: nl + 1]))
                        del buf[: nl + 1]

            text_parts: list[str] = []

            def wait_for_hold() -> bool:
                """At ``ready``: wait for the caller's release, watching the child (a child
                that dies meanwhile ends the wait); False when cancelled or dead."""
                t_hold = time.monotonic()
                try:
                    while True:
                        go = hold.wait(0.1)  # type: ignore[union-attr]
                        if go is not None:
                            return go
                        if _exited(proc.pid):
                            return False
                finally:
                    out.held_s = time.monotonic() - t_hold

            def handle_lines() -> None:
                nonlocal phase, deadline, limit, go_at
                while lines:
                    raw = lines.pop(0)
                    doc = _json_line(raw)
                    if isinstance(doc, dict) and doc.get("event") == "ready" and "status" not in doc:
                        if gated and not out.ready:
                            out.ready = True
                            out.prepare_s = time.monotonic() - t0
                            if hold is not None and not wait_for_hold():
                                continue  # cancelled (the loop kills the group) or dead
                            give_up = None
                            if hold is not None:  # a thread's wait: no Ctrl-C reaches it
                                def give_up() -> bool:
                                    return hold.cancelled or _exited(proc.pid)  # type: ignore[union-attr]
                            try:
                                waited = held.enter_context(gpu_lock(gpu, give_up=give_up))  # type: ignore[arg-type]
                            except LockAbandoned:
                                continue  # the loop sees the cancel or the exit
                            out.lock_wait_s = float(waited)
                            write_stdin(GO_LINE)
                            go_at = time.monotonic()
                            phase, limit = "run", timeout_s
                            deadline = go_at + timeout_s
                        continue
                    text_parts.append(raw.decode(errors="replace"))
                    if isinstance(doc, dict) and "status" in doc:
                        out.result = doc

            while True:
                if pending and stdin_open:
                    try:
                        n = os.write(in_fd, pending)
                        del pending[:n]
                    except BlockingIOError:
                        pass
                    except OSError:  # the child closed its stdin or died
                        pending.clear()
                        close_stdin()
                    if not pending and stdin_open:
                        with contextlib.suppress(KeyError, ValueError, OSError):
                            sel.unregister(in_fd)
                        if not keep_stdin_open:
                            close_stdin()
                if not eof:
                    read_some()
                handle_lines()
                if hold is not None and hold.cancelled:
                    out.cancelled = True
                    break
                if _exited(proc.pid):
                    break
                now = time.monotonic()
                if now >= deadline:
                    out.timed_out, out.timeout_phase, out.timeout_limit_s = True, phase, limit
                    break
                if memory is not None and now >= next_poll:
                    used = memory.bytes()
                    out.memory_peak_bytes = max(out.memory_peak_bytes or 0, used)
                    next_poll = now + MEMORY_POLL_S
                    if used > host_memory_limit_bytes:  # type: ignore[operator]
                        out.memory_exceeded = True
                        break
                wait = max(min(deadline - now, MEMORY_POLL_S if memory is not None else 0.5), 0.0)
                if eof and not pending:
                    time.sleep(min(wait, 0.05))
                else:
                    sel.select(min(wait, 0.05) if eof else wait)
            # The leader is not reaped yet, so its pid (the group id) cannot be reused:
            # kill whatever is left of the group (grandchildren, or all of it on a kill).
            _killpg(proc.pid)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
                pass
            if not eof:
                read_some()
            if buf:
                lines.append(bytes(buf))
                buf.clear()
            handle_lines()
        except BaseException:
            _killpg(proc.pid)
            with contextlib.suppress(Exception):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=30)
            raise
        finally:
            for fh in (proc.stdin, proc.stdout):
                with contextlib.suppress(Exception):
                    fh.close()
            end = time.monotonic()
            out.elapsed_s = end - t0
            if go_at is not None:
                out.run_s = end - go_at
            if gated and out.prepare_s is None:
                out.prepare_s = out.elapsed_s
    out.returncode = proc.returncode
    out.signal = signal_name(proc.returncode)
    out.stdout_text = "".join(text_parts)
    return out


def _json_line(raw: bytes) -> Any:
    text = raw.decode(errors="replace").strip()
    if not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def run_child(
    module: str,
    args: Sequence[str],
    job_doc: Any,
    *,
    timeout_s: float,
    prepare_timeout_s: float = DEFAULT_PREPARE_TIMEOUT_S,
    gpu: int | None,
    env: Mapping[str, str] | None = None,
    host_memory_limit_bytes: int | None = None,
    tail_chars: int = STDERR_TAIL_CHARS,
    hold: Hold | None = None,
    started: Callable[[int], None] | None = None,
    wrapper: Sequence[str] = (),
) -> ChildRun:
    """Run ``<this python> -m module *args`` under the protocol (module docstring).

    Args:
        module: the worker module (``cudaperf_cli.evaluate.worker``...).
        args: its command-line arguments.
        job_doc: the job, written as one JSON line on stdin (stdin then stays open); None
            writes nothing and closes stdin (a child that reads no job, e.g. a device probe).
        timeout_s: the run deadline, seconds: from ``go`` with a gate, from the start
            without one.
        prepare_timeout_s: seconds from the start until ``ready`` (gated only).
        gpu: the device ordinal whose lock the child's device work needs (the GPU gate);
            None: no gate, no lock.
        env: extra environment variables for the child.
        host_memory_limit_bytes: kill the child's process group when its summed resident
            memory passes this, bytes; None: not bounded.
        tail_chars: characters of stderr kept.
        hold: (gated only) at ``ready``, wait for this :class:`Hold` before taking the
            lock; its cancel kills the child at any time (:func:`start_child`).
        started: called with the child's pid (also its process group id) once it runs.
        wrapper: a command the interpreter runs under (``compute-sanitizer --tool memcheck
            ... --``, evaluate/sanitize.py): it is the process group's leader, gets the
            same environment, limits and stdin, and the python child inherits them.

    Returns:
        A :class:`ChildRun`.  Every outcome of the child is a field, never an exception.

    Raises:
        OSError: the interpreter cannot be started.
        KeyboardInterrupt and other exceptions in the parent: re-raised after the child's
        process group was killed.
    """
    fd_state, state_path = tempfile.mkstemp(prefix="cudaperf-state-", suffix=".json")
    fd_err, err_path = tempfile.mkstemp(prefix="cudaperf-stderr-", suffix=".log")
    os.close(fd_state)
    os.close(fd_err)
    scratch = tempfile.mkdtemp(prefix="cudaperf-child-")
    try:
        data = b"" if job_doc is None else (json.dumps(job_doc) + "\n").encode()
        run = _run_process(
            [*wrapper, sys.executable, "-m", module, *args], data, keep_stdin_open=job_doc is not None,
            gpu=gpu, timeout_s=timeout_s, prepare_timeout_s=prepare_timeout_s,
            env={**scratch_env(scratch), **(env or {})},
            state_path=state_path, err_path=err_path,
            host_memory_limit_bytes=host_memory_limit_bytes, hold=hold, started=started,
        )
        run.state = read_state(state_path)
        run.stderr_tail = tail_of(err_path, tail_chars)
        return run
    finally:
        for p in (state_path, err_path):
            with contextlib.suppress(OSError):
                os.unlink(p)
        shutil.rmtree(scratch, ignore_errors=True)


def scratch_env(scratch: str) -> dict[str, str]:
    """The environment that gives a child its private scratch folder: ``TMPDIR`` (Python's
    tempfile, nvcc's intermediate files: removed with the folder when the child ends, even
    when it was killed mid-compile), with the caches that default to the temporary folder
    kept where they were (``TORCHINDUCTOR_CACHE_DIR``: ``<tmp>/torchinductor_<user>``,
    PyTorch's default); and one BLAS thread (``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``:
    no pool that exists before the worker is confined, ``cudaperf_cli/confine.py``)."""
    # One BLAS thread: threads started before the worker confines itself stay unconfined,
    # and numpy's OpenBLAS pool was made to run a candidate's function (confine.py).
    return {"TMPDIR": scratch, "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "TORCHINDUCTOR_CACHE_DIR": inductor_cache_dir()}


def inductor_cache_dir() -> str:
    """torch.compile's cache folder: ``$TORCHINDUCTOR_CACHE_DIR``, else PyTorch's default
    ``<tmp>/torchinductor_<user>``.  A worker child has the variable set (by
    :func:`scratch_env`, from the parent's temporary folder, not its own scratch one)."""
    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if given:
        return given
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")


class PendingChild:
    """A gated child started ahead of time (:func:`start_child`): it prepares while the
    caller works; :meth:`go` lets it run and returns its :class:`ChildRun`, :meth:`cancel`
    ends it."""

    def __init__(self, hold: Hold):
        self.hold = hold
        self.pid: int | None = None
        self._run: ChildRun | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        # Set by the thread when run_child has returned or raised.  _finish waits on this,
        # not on Thread.join: on Python 3.11 a Ctrl-C that interrupts join() can mark a
        # running thread as stopped (the bpo-45274 handling releases its state lock), after
        # which join() returns at once, before the child was reaped.
        self._done = threading.Event()

    def _started(self, pid: int) -> None:
        self.pid = pid

    def _finish(self) -> ChildRun:
        assert self._thread is not None
        try:
            while not self._done.wait(0.2):
                pass
        except BaseException:  # Ctrl-C while the child runs: end it, then re-raise
            self.hold.abort()  # a child not spawned yet is killed as it starts
            if self.pid is not None:
                _killpg(self.pid)
            self._done.wait(5.0)  # the thread reaps it and removes its files
            raise
        if self._error is not None:
            raise self._error
        assert self._run is not None
        return self._run

    def go(self) -> ChildRun:
        """Release the child (it takes the GPU lock at ``ready``) and wait for its end."""
        self.hold.release(True)
        return self._finish()

    def cancel(self) -> ChildRun:
        """End the child (its process group is killed, ``cancelled`` is set) and wait."""
        self.hold.release(False)
        return self._finish()


def start_child(module: str, args: Sequence[str], job_doc: Any, **kw: Any) -> PendingChild:
    """Start ``run_child(module, args, job_doc, **kw)`` (which must be gated: ``gpu`` set)
    in a thread with a :class:`Hold`: the child prepares now, and waits at ``ready`` until
    the caller calls :meth:`PendingChild.go` or :meth:`PendingChild.cancel`.

    Raises:
        ValueError: ``gpu`` is None (an ungated child has no ``ready`` to wait at).
    """
    if kw.get("gpu") is None:
        raise ValueError("start_child needs a gated child (gpu=<ordinal>)")
    pending = PendingChild(Hold())

    def target() -> None:
        try:
            pending._run = run_child(module, args, job_doc, hold=pending.hold,
                                     started=pending._started, **kw)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            pending._error = exc
        finally:
            pending._done.set()

    pending._thread = threading.Thread(target=target, name=f"cudaperf-child-{module}", daemon=True)
    pending._thread.start()
    return pending


# ---------------------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------------------


class State:
    """The phase file (``$CUDAPERF_WORKER_STATE``) the parent reads after a crash or a kill:
    ``{"phase", "config", "trial", "candidate_started", "configs": [finished configs],
    "pid"}``, rewritten in place at every change.  It also adds up the seconds spent in
    each phase (:meth:`phase_seconds`), with ``startup`` (from the parent's spawn,
    :data:`SPAWN_TIME_ENV`, to this object: the interpreter and the worker's imports)."""

    def __init__(self, path: str | None):
        self.fd: int | None = None
        if path:
            try:
                self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:
                self.fd = None
        self.data: dict[str, Any] = {
            "phase": "start",
            "config": None,
            "trial": None,
            "candidate_started": False,
            "configs": [],
            "pid": os.getpid(),
        }
        self.seconds: dict[str, float] = {}
        try:
            self.seconds["startup"] = max(time.time() - float(os.environ[SPAWN_TIME_ENV]), 0.0)
        except (KeyError, ValueError):
            pass
        self._since = time.monotonic()

    def set(self, phase: str, config: str | None = None, trial: int | None = None) -> None:
        """Enter ``phase`` (at ``config``/``trial`` when given)."""
        self._tick()
        self.data.update(phase=phase, config=config, trial=trial)
        self._flush()

    def _tick(self) -> None:
        now = time.monotonic()
        name = str(self.data["phase"]).split(".", 1)[0]  # "timing.gpu" counts as "timing"
        self.seconds[name] = self.seconds.get(name, 0.0) + (now - self._since)
        self._since = now

    def phase_seconds(self) -> dict[str, float]:
        """Seconds spent in each phase so far (sub-phases ``a.b`` summed under ``a``),
        rounded to ms: where an evaluation's time went (``start`` is the worker's own
        set-up before its first phase)."""
        self._tick()
        return {k: round(v, 3) for k, v in self.seconds.items()}

    def mark_candidate(self) -> None:
        """Record that candidate code is about to run (failures from now on are its)."""
        if not self.data["candidate_started"]:
            self.data["candidate_started"] = True
            self._flush()

    def add_config(self, cr: Any) -> None:
        """Append a finished configuration's result (a dataclass or a dict)."""
        from cudaperf_cli.core import to_jsonable

        self.data["configs"].append(to_jsonable(cr))
        self._flush()

    def _flush(self) -> None:
        if self.fd is None:
            return
        raw = json.dumps(self.data).encode()
        try:
            os.pwrite(self.fd, raw, 0)
            os.ftruncate(self.fd, len(raw))
        except OSError:
            pass


class Channel:
    """The result channel: a private duplicate of the original fd 1.  ``channel(doc)``
    writes ``doc`` as one JSON line; ``fd`` is the descriptor."""

    def __init__(self, fd: int):
        self.fd = fd

    def __call__(self, doc: Any) -> None:
        from cudaperf_cli.core import to_jsonable

        self.raw((json.dumps(to_jsonable(doc)) + "\n").encode())

    def raw(self, data: bytes) -> None:
        """Write bytes as they are (tests only)."""
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]


def line_buffer_c_stdout() -> None:
    """Make C ``stdout`` line-buffered, so output printed just before a crash survives."""
    try:
        libc = ctypes.CDLL(None)
        fp = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.setvbuf(fp, None, 1, 0)  # _IOLBF
    except Exception:  # noqa: BLE001
        pass


def flush_c_stdio() -> None:
    """``fflush(NULL)``: push out what C code left in stdio buffers, before ``os._exit``
    would drop it."""
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001
        pass


def result_channel() -> Channel:
    """Keep the real stdout for the protocol and send everything else written to fd 1
    (``printf`` from the reference, the candidate's host code, device ``printf``) to
    stderr; C stdout becomes line-buffered.  Call once, first thing."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    line_buffer_c_stdout()
    return Channel(fd)


def read_job() -> Any:
    """The job: the first line of stdin, parsed as JSON.

    Raises:
        ValueError: stdin was closed before a line came, or the line is not JSON.
    """
    line = sys.stdin.buffer.readline()
    if not line.strip():
        raise ValueError("no job on stdin")
    return json.loads(line)


def gate_enabled() -> bool:
    """Whether the parent runs the GPU gate (``$CUDAPERF_GPU_GATE=1``)."""
    return os.environ.get(GATE_ENV) == "1"


def wait_for_gpu(emit: Callable[[Any], None], state: State | None = None) -> float:
    """Ask the parent for the GPU and block until it holds the lock.

    A no-op (0.0) unless ``$CUDAPERF_GPU_GATE=1``.  Writes ``{"event": "ready"}`` with
    ``emit``, sets the state's phase to ``gpu_wait`` and reads stdin until ``go``.  A closed
    stdin (or anything else) means the parent is gone: the process exits with
    :data:`EXIT_PARENT_GONE`.

    Returns:
        The seconds waited.
    """
    if not gate_enabled():
        return 0.0
    t0 = time.monotonic()
    if state is not None:
        state.set("gpu_wait")
    emit(READY_EVENT)
    line = sys.stdin.buffer.readline()
    if line.strip() != GO_LINE.strip():
        flush_c_stdio()
        os._exit(EXIT_PARENT_GONE)
    return time.monotonic() - t0


__all__ = [
    "Channel",
    "ChildRun",
    "DEFAULT_PREPARE_TIMEOUT_S",
    "EXIT_PARENT_GONE",
    "GATE_ENV",
    "GO_LINE",
    "Hold",
    "MEMORY_POLL_S",
    "PendingChild",
    "READY_EVENT",
    "SPAWN_TIME_ENV",
    "STATE_ENV",
    "STDERR_TAIL_CHARS",
    "State",
    "flush_c_stdio",
    "gate_enabled",
    "line_buffer_c_stdout",
    "read_job",
    "read_state",
    "result_channel",
    "run_child",
    "signal_name",
    "start_child",
    "tail_of",
    "wait_for_gpu",
    "where",
]
