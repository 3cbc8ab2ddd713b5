"""The candidate's process: the C worker's device work, away from the judge.

The C evaluation worker (:mod:`cudaperf_cli.evaluate.worker`) is the **judge**: it makes
the inputs, runs the reference, holds the reference's outputs, compares, plans the timing
and writes the verdict.  It never loads model-written code.  Everything that touches the
device or the candidate runs in a second process, the **candidate's process**
(``python -m cudaperf_cli.evaluate.device_side``), which the judge starts and talks to
(``docs/evaluation.md`` §3, "The judge and the candidate's process"):

* **Requests** (judge → candidate's process): one JSON object per line on a pipe, e.g.
  ``{"op": "h2d", "dst": 140..., "off": 0, "n": 8000000}``.  **Replies**: one JSON object
  per line on a second pipe, ``{"ok": true, ...}`` or ``{"ok": false, "error": {...}}``.
  The judge parses replies as JSON only (never pickle: the process replying has run
  candidate code) and checks every field it uses.
* The candidate's process opens the pipes and the staging file through the judge's
  ``/proc/<pid>/fd/<n>`` (so they survive a wrapper such as compute-sanitizer, which need not
  pass descriptors on); once it has answered, the judge closes its own copies of the ends it
  does not use, and the process's end shows as end of file.
* **Array bytes** go through a shared-memory file (``memfd_create``) both processes map:
  the judge writes an input's bytes there and asks for ``h2d``; it asks for ``d2h`` and
  reads the output's bytes there.  The candidate's process holds no reference output and
  never sees the comparison; it gets inputs as raw bytes and hands outputs back as raw
  bytes.
* Every request carries a random ``id`` its reply must echo: a reply that code in the
  candidate's process forged on the reply pipe (it can find the pipe's descriptor) answers no
  request, and the judge treats it as the process breaking the protocol.
* The candidate's process confines itself (:func:`~cudaperf_cli.confine.confine_candidate`:
  the candidate's folder only, no TCP) before it loads the candidate's library; the judge
  stays unconfined (it reads the run's stored reference outputs).
* **Compound requests** keep a candidate call's timing free of the pipe's latency: one
  request runs a whole timed call (restore the input set, re-poison, flush the L2, start
  event, call, end event, wait for the end event, synchronize) or a batch of them
  (:meth:`DeviceOps.timed_calls`), a call + synchronize on the host clock
  (:meth:`DeviceOps.sync_call`) and an end-to-end run (:meth:`DeviceOps.e2e_call`).

:class:`DeviceOps` does the work (in the candidate's process, or in-process for tests:
:class:`LocalDevice`); :class:`RemoteDevice` is the judge's side of the pipes.  Both present
the :class:`~cudaperf_cli.evaluate.backend.Backend` interface plus the compound calls, so the
worker's code is the same either way.

When the candidate's process dies (a segfault in the candidate's host code, ``exit`` from
its launcher, a kill), the judge's next request raises :class:`DeviceGone`; the worker then
ends the same way (the same signal or exit status, no result), so the parent classifies it
as it always has (``crash``, with the signal and the phase).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import math
import mmap
import os
import secrets
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cudaperf_cli.core import CTYPE_OF_DTYPE
from cudaperf_cli.evaluate.child import flush_c_stdio, line_buffer_c_stdout
from cudaperf_cli.evaluate.backend import (
    Allocation,
    Backend,
    CudaCallError,
    NoDevice,
    make_backend,
)

#: The module the judge starts as the candidate's process.
MODULE = "cudaperf_cli.evaluate.device_side"
#: Longest reply line the judge reads, bytes (a reply holds at most a few thousand numbers).
MAX_REPLY_BYTES = 4 << 20
#: Seconds the judge waits for the candidate's process to start and create its context.
START_TIMEOUT_S = 120.0

#: An argument's kind in a load request: ``"ptr"`` (a device address) or a numpy dtype name.
PTR = "ptr"

#: One untimed preparation step: ``["d2d", dst, src, nbytes]``, ``["memset32", ptr, value,
#: count]`` or ``["memset8", ptr, value, count]``.
Op = Sequence[Any]


class DeviceGone(BaseException):
    """The candidate's process ended (or broke the protocol) while the judge waited for it.

    A ``BaseException``: no ``except Exception`` of the worker may take it for a verdict.

    Attributes:
        returncode: its exit status (negative: the signal that ended it), None if unknown.
        reason: one line.
        protocol: the judge ended it for breaking the protocol.
    """

    def __init__(self, returncode: int | None, reason: str, protocol: bool = False):
        super().__init__(reason)
        self.returncode = returncode
        self.reason = reason
        #: the judge ended it for breaking the protocol (a forged, malformed, oversized or
        #: late reply), as opposed to the process ending on its own
        self.protocol = protocol


class LoadFailure(Exception):
    """The candidate's library did not load, or lacks its symbol.

    Attributes:
        error: ``{"source": "load", "name": "LOAD_ERROR" | "SYMBOL_NOT_FOUND", "string",
            "code": None}``.
    """

    def __init__(self, message: str, error: dict[str, Any]):
        super().__init__(message)
        self.error = error


@dataclass
class CallRecord:
    """What a compound call request did.

    Attributes:
        rc: the candidate's return value of the last call made (0: success; a non-zero
            value stops the request there).
        sync: the CUresult of the last synchronize (0: success; non-zero stops the request).
        ms: one figure per call completed: event ms (:meth:`DeviceOps.timed_calls`,
            :meth:`DeviceOps.call` with events), or host-clock ms in the candidate's
            process (:meth:`DeviceOps.sync_call`, :meth:`DeviceOps.e2e_call`).
        tails: per timed call, ms the device stayed busy after the call's end event.
        floors: per timed call, ms of a second synchronize right after the first, the
            device idle: the same host-clock measurement with nothing to wait for, so the
            scheduler's noise (a preempted process) shows in it as much as in ``tails``.
        judge_ms: the judge's clock around the request alone (its round trip; the judge's
            staging copies outside), ms; None in-process.
    """

    rc: int = 0
    sync: int = 0
    ms: list[float] | None = None
    tails: list[float] | None = None
    floors: list[float] | None = None
    judge_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.sync == 0


def ctype_for(kind: str) -> Any:
    """The ctypes type of an argument kind: ``"ptr"`` (a device address) -> ``c_void_p``,
    a numpy dtype name -> its by-value scalar type (``"float64"`` -> ``c_double``).

    Raises:
        TypeError / KeyError: not a dtype name ctypes has a scalar for."""
    return ctypes.c_void_p if kind == PTR else CTYPE_OF_DTYPE[np.dtype(kind).name]


# ---------------------------------------------------------------------------------------
# The work (the candidate's process; in-process in tests)
# ---------------------------------------------------------------------------------------


class DeviceOps:
    """The device work on one :class:`~cudaperf_cli.evaluate.backend.Backend`: the
    backend's operations, the candidate's library and the compound calls."""

    def __init__(self, backend: Backend):
        self.b = backend
        self.fn: Any = None
        self.lib: Any = None
        self.allocs: dict[int, Allocation] = {}

    # -- plain operations ----------------------------------------------------------------

    def alloc(self, nbytes: int) -> Allocation:
        a = self.b.alloc(int(nbytes))
        self.allocs[a.ptr] = a
        return a

    def free(self, ptr: int) -> None:
        a = self.allocs.pop(int(ptr), None)
        if a is not None:
            self.b.free(a)

    def run_ops(self, ops: Sequence[Op]) -> None:
        """Enqueue untimed preparation steps (``Op``) in order."""
        b = self.b
        for op in ops:
            kind = op[0]
            if kind == "d2d":
                b.d2d(int(op[1]), int(op[2]), int(op[3]))
            elif kind == "memset32":
                b.memset32(int(op[1]), int(op[2]), int(op[3]))
            elif kind == "memset8":
                b.memset8(int(op[1]), int(op[2]), int(op[3]))
            else:
                raise ValueError(f"unknown preparation step {kind!r}")

    # -- the candidate ---------------------------------------------------------------------

    def load(self, lib_path: str, symbol: str, argtypes: Sequence[str]) -> None:
        """Load the candidate's library (its static constructors run now) and bind
        ``int symbol(argtypes...)``.

        Raises:
            LoadFailure: the library does not load or lacks the symbol.
        """
        try:
            lib = ctypes.CDLL(os.path.abspath(lib_path))
        except OSError as exc:
            raise LoadFailure(f"cannot load the candidate library: {exc}",
                              {"source": "load", "name": "LOAD_ERROR", "string": str(exc),
                               "code": None}) from None
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            raise LoadFailure(
                f"the candidate does not define extern \"C\" int {symbol}(...)",
                {"source": "load", "name": "SYMBOL_NOT_FOUND",
                 "string": f"{symbol} not exported (missing extern \"C\"?)", "code": None},
            ) from None
        fn.restype = ctypes.c_int
        fn.argtypes = [ctype_for(k) for k in argtypes]
        self.lib, self.fn = lib, fn

    def _call(self, args: Sequence[Any]) -> int:
        return int(self.fn(*args))

    def call(self, args: Sequence[Any], events: bool) -> CallRecord:
        """One candidate call, no synchronize; with ``events``, between a start and an end
        event, then a synchronize, and the events' ms is ``ms[0]``."""
        if not events:
            return CallRecord(rc=self._call(args), ms=[])
        t = self.b.timer()
        t.start()
        rc = self._call(args)
        t.stop()
        if rc != 0:
            return CallRecord(rc=rc, ms=[])
        code = self.b.synchronize()
        if code != 0:
            return CallRecord(sync=code, ms=[])
        return CallRecord(rc=0, ms=[t.ms()])

    def timed_calls(self, preps: Sequence[Sequence[Op]], args: Sequence[Any]) -> CallRecord:
        """One timed call per entry of ``preps``: its preparation (untimed: the input set
        copied in, write-only arrays re-poisoned, the L2 flushed), the start event, the
        call, the end event; then wait for the end event and synchronize (the ms the device
        stayed busy after the end event is the call's tail), and synchronize again (the
        floor: the same measurement on an idle device).  Event ms are read after the last
        call's synchronize.  Stops at the first non-zero return or failed synchronize."""
        b = self.b
        timers = [b.timer() for _ in preps]
        rec = CallRecord(ms=[], tails=[], floors=[])
        tails: list[float] = []
        floors: list[float] = []
        for i, ops in enumerate(preps):
            self.run_ops(ops)
            timers[i].start()
            rc = self._call(args)
            timers[i].stop()
            if rc != 0:
                rec.rc = rc
                break
            timers[i].wait_stop()
            for into in (tails, floors):  # the tail, then the same wait on the idle device
                t0 = time.perf_counter()
                code = b.synchronize()
                into.append((time.perf_counter() - t0) * 1e3)
                if code != 0:
                    break
            if code != 0:
                rec.sync = code
                break
        if rec.ok:
            rec.ms = [t.ms() for t in timers]
            rec.tails = tails
            rec.floors = floors
        return rec

    def sync_call(self, prep: Sequence[Op], args: Sequence[Any]) -> CallRecord:
        """Preparation, synchronize, then call + synchronize on the host clock (``ms[0]``)."""
        b = self.b
        self.run_ops(prep)
        code = b.synchronize()
        if code != 0:
            return CallRecord(sync=code, ms=[])
        t0 = time.perf_counter()
        rc = self._call(args)
        if rc != 0:
            return CallRecord(rc=rc, ms=[])
        code = b.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        return CallRecord(sync=code, ms=[ms] if code == 0 else [])

    def e2e_call(self, poison: Sequence[Op], reads: Sequence[tuple[int, np.ndarray]],
                 writes: Sequence[tuple[int, np.ndarray]], args: Sequence[Any]) -> CallRecord:
        """An end-to-end run on the host clock (``ms[0]``): the untimed ``poison`` steps and
        a synchronize, then copies in (``reads``: device address, host bytes), the call, a
        synchronize and copies out (``writes``: device address, host buffer filled)."""
        b = self.b
        self.run_ops(poison)
        code = b.synchronize()
        if code != 0:
            return CallRecord(sync=code, ms=[])
        t0 = time.perf_counter()
        for ptr, src in reads:
            b.h2d(ptr, src)
        rc = self._call(args)
        if rc != 0:
            return CallRecord(rc=rc, ms=[])
        code = b.synchronize()
        if code != 0:
            return CallRecord(sync=code, ms=[])
        for ptr, dst in writes:
            b.d2h(dst, ptr)
        return CallRecord(ms=[(time.perf_counter() - t0) * 1e3])


# ---------------------------------------------------------------------------------------
# The judge's view: one interface, in-process or across the pipes
# ---------------------------------------------------------------------------------------


class LocalDevice(Backend):
    """The device work in the judge's own process (tests that run a
    :class:`~cudaperf_cli.evaluate.worker.Worker` in-process; never the worker process)."""

    kind = "local"

    def __init__(self, backend: Backend):
        self.ops = DeviceOps(backend)
        self.kind = backend.kind
        self.process: dict[str, Any] | None = None

    def info(self) -> dict[str, Any]:
        return self.ops.b.info()

    def alloc(self, nbytes: int) -> Allocation:
        a = self.ops.alloc(nbytes)
        return self._counted(Allocation(ptr=a.ptr, nbytes=a.nbytes))

    def free(self, a: Allocation) -> None:
        if self._uncounted(a):
            self.ops.free(a.ptr)

    def h2d(self, dst: int, src: np.ndarray) -> None:
        self.ops.b.h2d(dst, src)

    def d2h(self, dst: np.ndarray, src: int) -> None:
        self.ops.b.d2h(dst, src)

    def d2d(self, dst: int, src: int, nbytes: int) -> None:
        self.ops.b.d2d(dst, src, nbytes)

    def memset32(self, ptr: int, value: int, count: int) -> None:
        self.ops.b.memset32(ptr, value, count)

    def memset8(self, ptr: int, value: int, count: int) -> None:
        self.ops.b.memset8(ptr, value, count)

    def run_ops(self, ops: Sequence[Op]) -> None:
        self.ops.run_ops(ops)

    def synchronize(self) -> int:
        return self.ops.b.synchronize()

    def mem_free(self) -> int | None:
        return self.ops.b.mem_free()

    def load_candidate(self, lib_path: str, symbol: str, argtypes: Sequence[str],
                       read: Sequence[str]) -> dict[str, Any] | None:
        """Load the candidate here (no confinement: a test).  Returns None.

        Raises:
            LoadFailure: as :meth:`DeviceOps.load`.
        """
        self.ops.load(lib_path, symbol, argtypes)
        return None

    def call(self, args: Sequence[Any], events: bool = False) -> CallRecord:
        return self.ops.call(args, events)

    def timed_calls(self, preps: Sequence[Sequence[Op]], args: Sequence[Any]) -> CallRecord:
        return self.ops.timed_calls(preps, args)

    def sync_call(self, prep: Sequence[Op], args: Sequence[Any]) -> CallRecord:
        return self.ops.sync_call(prep, args)

    def e2e_call(self, poison: Sequence[Op], reads: Sequence[tuple[int, np.ndarray]],
                 writes: Sequence[tuple[int, np.ndarray]], args: Sequence[Any]) -> CallRecord:
        return self.ops.e2e_call(poison, reads, writes, args)

    def ping(self) -> float:
        return 0.0


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{what}: not a finite non-negative number: {v!r}")
    return float(v)


def _integer(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what}: not an integer: {v!r}")
    return v


class RemoteDevice(Backend):
    """The judge's side of the candidate's process (module docstring).

    Args:
        backend_kind: ``"cuda"`` or ``"host"`` (the test emulation), for the other process.
        ordinal: the CUDA device.
        env: the other process's environment (default: this one's, already scrubbed by the
            parent).
        wrapper: a command the process runs under (arguments ending with ``--``: the
            compute-sanitizer stage's); () runs it as itself.

    Raises:
        NoDevice: the candidate's process found no usable device.
        DeviceGone: it ended or broke the protocol while starting.
    """

    kind = "remote"

    def __init__(self, backend_kind: str = "cuda", ordinal: int = 0,
                 env: dict[str, str] | None = None, wrapper: Sequence[str] = ()):
        self.backend_kind = backend_kind
        self.dead: DeviceGone | None = None
        # sealed against shrinking once sized (_staging): the other process maps it too, and
        # a file cut under the judge's mapping would end the judge with SIGBUS
        self._shm_fd = os.memfd_create("cudaperf-staging", os.MFD_ALLOW_SEALING)
        self._sealed = False
        self._shm_size = 0
        self._shm: mmap.mmap | None = None
        req_r, self._req = os.pipe()
        self._rep, rep_w = os.pipe()
        self._buf = bytearray()
        # The other process opens the pipes and the staging file through this process's
        # /proc/<pid>/fd: nothing depends on descriptors surviving a wrapper's exec.
        me = os.getpid()
        cmd = [*wrapper, sys.executable, "-m", MODULE, "--judge", str(me),
               "--requests", str(req_r), "--replies", str(rep_w), "--staging", str(self._shm_fd),
               "--backend", backend_kind, "--device", str(int(ordinal))]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env)
        try:
            try:
                t0 = time.perf_counter()
                hello = self._reply(START_TIMEOUT_S, starting=True)
                self.start_s = time.perf_counter() - t0
            finally:
                os.close(req_r)
                os.close(rep_w)
            if not hello.get("ok"):
                err = hello.get("error") or {}
                if err.get("kind") == "no_device":
                    raise NoDevice(str(err.get("message", "no device")))
                self._raise(err)
        except BaseException:
            self.close()
            raise
        self._info = hello.get("info") if isinstance(hello.get("info"), dict) else {}
        self.process = {"pid": self.proc.pid, "start_s": round(self.start_s, 3)}

    # -- the pipes -----------------------------------------------------------------------

    def _gone(self, reason: str, protocol: bool = False) -> DeviceGone:
        """The :class:`DeviceGone` of the process's end (``protocol``: it broke the
        protocol and is killed now); the first one is kept, and every later request raises
        it again (the worker's clean-up must not hide the reason)."""
        if self.dead is not None:
            return self.dead
        if protocol:
            self.proc.kill()
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            reason += " (it did not end; killed)"
        self.dead = DeviceGone(rc, reason, protocol)
        return self.dead

    def _reply(self, timeout_s: float | None = None, starting: bool = False) -> dict[str, Any]:
        """The next reply line.  ``starting``: this process still holds the pipe's write
        end (the other one has not opened its own yet), so an end shows as the process's
        exit, polled, not as end of file."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            # Wait for data, and notice the process's end even when something else still
            # holds the pipe's write end (a grandchild; this process itself while starting).
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise self._gone(f"the candidate's process did not answer in {timeout_s:g} s",
                                     protocol=True)
                if select.select([self._rep], [], [], 0.25 if left is None else min(left, 0.25))[0]:
                    break
                if self.proc.poll() is not None and not select.select([self._rep], [], [], 0)[0]:
                    raise self._gone("the candidate's process ended while starting" if starting
                                     else "the candidate's process ended")
            chunk = os.read(self._rep, 1 << 16)
            if not chunk:
                raise self._gone("the candidate's process ended")
            self._buf += chunk
            if len(self._buf) > MAX_REPLY_BYTES:
                raise self._gone("the candidate's process sent a reply over "
                                 f"{MAX_REPLY_BYTES} bytes", protocol=True)
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        try:
            doc = json.loads(line)
        except ValueError:
            raise self._gone("the candidate's process sent a reply that is not JSON", protocol=True) from None
        if not isinstance(doc, dict):
            raise self._gone("the candidate's process sent a reply that is not an object", protocol=True)
        return doc

    def _raise(self, err: Any) -> None:
        if not isinstance(err, dict):
            err = {}
        kind = err.get("kind")
        if kind == "cuda":
            raise CudaCallError(str(err.get("call")), int(err.get("code") or 0),
                                str(err.get("name")), str(err.get("string")))
        if kind == "load":
            raise LoadFailure(str(err.get("message")), dict(err.get("error") or {}))
        # its own failure (or a reply forged in it): the process is not trusted further
        raise self._gone(f"the candidate's process failed: {str(err.get('message', err))[:300]}",
                         protocol=True)

    def _rpc(self, op: str, **kw: Any) -> dict[str, Any]:
        if self.dead is not None:
            raise self.dead
        rid = secrets.randbits(63)
        data = (json.dumps({"op": op, "id": rid, **kw}) + "\n").encode()
        try:
            self._write_all(data)
        except (BrokenPipeError, OSError):
            raise self._gone("the candidate's process ended") from None
        doc = self._reply()
        if doc.get("id") != rid:
            # code in that process wrote on the reply pipe itself (a forged reply)
            raise self._gone("the candidate's process sent a reply to no request of the judge's", protocol=True)
        if not doc.get("ok"):
            self._raise(doc.get("error"))
        return doc

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._req, view)
            view = view[n:]

    def _record(self, doc: dict[str, Any], what: str) -> CallRecord:
        try:
            ms = [_number(x, what) for x in doc.get("ms") or []]
            tails = [_number(x, what) for x in doc.get("tails") or []]
            floors = [_number(x, what) for x in doc.get("floors") or []]
            return CallRecord(rc=_integer(doc.get("rc", 0), what),
                              sync=_integer(doc.get("sync", 0), what), ms=ms, tails=tails,
                              floors=floors)
        except ValueError as exc:
            raise self._gone(f"the candidate's process sent a malformed reply ({exc})", protocol=True) from None

    # -- staging ---------------------------------------------------------------------------

    def _staging(self, nbytes: int) -> mmap.mmap:
        """The shared buffer, at least ``nbytes`` long (grown in both processes)."""
        if nbytes > self._shm_size or self._shm is None:
            size = max(int(nbytes), 1 << 20, self._shm_size)
            size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
            if self._shm is not None:
                self._shm.close()
            os.ftruncate(self._shm_fd, size)
            if not self._sealed:
                try:
                    fcntl.fcntl(self._shm_fd, fcntl.F_ADD_SEALS,
                                fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
                except OSError:  # a kernel without seals: a cut file then ends the judge
                    pass
                self._sealed = True
            self._shm = mmap.mmap(self._shm_fd, size)
            self._shm_size = size
            self._rpc("staging", size=size)
        assert self._shm is not None
        return self._shm

    def _put(self, off: int, src: np.ndarray) -> None:
        shm = self._staging(off + src.nbytes)
        np.frombuffer(shm, dtype=np.uint8, count=src.nbytes, offset=off)[:] = (
            np.ascontiguousarray(src).reshape(-1).view(np.uint8))

    def _get(self, dst: np.ndarray, off: int) -> None:
        assert self._shm is not None
        view = np.frombuffer(self._shm, dtype=np.uint8, count=dst.nbytes, offset=off)
        dst.reshape(-1).view(np.uint8)[:] = view

    # -- Backend ---------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def alloc(self, nbytes: int) -> Allocation:
        doc = self._rpc("alloc", n=int(nbytes))
        try:
            ptr = _integer(doc.get("ptr"), "alloc")
            n = _integer(doc.get("nbytes"), "alloc")
        except ValueError as exc:
            raise self._gone(f"the candidate's process sent a malformed reply ({exc})", protocol=True) from None
        return self._counted(Allocation(ptr=ptr, nbytes=n))

    def free(self, a: Allocation) -> None:
        if self._uncounted(a):
            self._rpc("free", ptr=a.ptr)

    def h2d(self, dst: int, src: np.ndarray) -> None:
        self._put(0, src)
        self._rpc("h2d", dst=int(dst), off=0, n=int(src.nbytes))

    def d2h(self, dst: np.ndarray, src: int) -> None:
        self._staging(dst.nbytes)
        self._rpc("d2h", src=int(src), off=0, n=int(dst.nbytes))
        self._get(dst, 0)

    def d2d(self, dst: int, src: int, nbytes: int) -> None:
        self._rpc("ops", ops=[["d2d", int(dst), int(src), int(nbytes)]])

    def memset32(self, ptr: int, value: int, count: int) -> None:
        self._rpc("ops", ops=[["memset32", int(ptr), int(value), int(count)]])

    def memset8(self, ptr: int, value: int, count: int) -> None:
        self._rpc("ops", ops=[["memset8", int(ptr), int(value), int(count)]])

    def run_ops(self, ops: Sequence[Op]) -> None:
        """Enqueue untimed preparation steps in the candidate's process."""
        if ops:
            self._rpc("ops", ops=[[o[0], *map(int, o[1:])] for o in ops])

    def synchronize(self) -> int:
        doc = self._rpc("sync")
        return int(doc.get("code", 0)) if isinstance(doc.get("code", 0), int) else 1

    def mem_free(self) -> int | None:
        v = self._rpc("mem_free").get("bytes")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    os.write(self._req, b'{"op": "exit"}\n')
                except OSError:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self._req, self._rep, self._shm_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass

    # -- the candidate -----------------------------------------------------------------------

    def ping(self) -> float:
        """One empty request's round trip, ms (the judge's clock)."""
        t0 = time.perf_counter()
        self._rpc("ping")
        return (time.perf_counter() - t0) * 1e3

    def load_candidate(self, lib_path: str, symbol: str, argtypes: Sequence[str],
                       read: Sequence[str]) -> dict[str, Any] | None:
        """The candidate's process confines itself (``read``: what it may still read) and
        loads the candidate.  Returns its confinement (``Confinement.to_json()``).

        Raises:
            LoadFailure: as :meth:`DeviceOps.load`.
        """
        doc = self._rpc("load", lib=str(lib_path), symbol=symbol, argtypes=list(argtypes),
                        read=[str(p) for p in read])
        c = doc.get("confinement")
        return c if isinstance(c, dict) else None

    def call(self, args: Sequence[Any], events: bool = False) -> CallRecord:
        rec = self._record(self._rpc("call", args=list(args), events=bool(events)), "call")
        return self._one_figure(rec, "call") if events else rec

    def timed_calls(self, preps: Sequence[Sequence[Op]], args: Sequence[Any]) -> CallRecord:
        rec = self._record(self._rpc("timed", preps=[list(map(list, p)) for p in preps],
                                     args=list(args)), "timed")
        if rec.ok and any(len(x or []) != len(preps) for x in (rec.ms, rec.tails, rec.floors)):
            raise self._gone("the candidate's process sent a malformed reply (timed: "
                             f"{len(rec.ms or [])} figures for {len(preps)} calls)", protocol=True)
        return rec

    def _one_figure(self, rec: CallRecord, what: str) -> CallRecord:
        """``rec`` of one call: exactly one figure when it succeeded."""
        if rec.ok and len(rec.ms or []) != 1:
            raise self._gone(f"the candidate's process sent a malformed reply ({what}: "
                             f"{len(rec.ms or [])} figures for 1 call)", protocol=True)
        return rec

    def _timed_rpc(self, op: str, **kw: Any) -> tuple[dict[str, Any], float]:
        """A request and the judge-clock ms of its round trip."""
        t0 = time.perf_counter()
        doc = self._rpc(op, **kw)
        return doc, (time.perf_counter() - t0) * 1e3

    def sync_call(self, prep: Sequence[Op], args: Sequence[Any]) -> CallRecord:
        doc, ms = self._timed_rpc("sync_call", prep=[list(o) for o in prep], args=list(args))
        rec = self._one_figure(self._record(doc, "sync_call"), "sync_call")
        rec.judge_ms = ms
        return rec

    def e2e_call(self, poison: Sequence[Op], reads: Sequence[tuple[int, np.ndarray]],
                 writes: Sequence[tuple[int, np.ndarray]], args: Sequence[Any]) -> CallRecord:
        off = 0
        r_spec, w_spec = [], []
        total = sum(a.nbytes for _, a in reads) + sum(a.nbytes for _, a in writes)
        self._staging(total)
        for ptr, src in reads:
            self._put(off, src)
            r_spec.append([int(ptr), off, int(src.nbytes)])
            off += src.nbytes
        w_off = off
        for ptr, dst in writes:
            w_spec.append([int(ptr), off, int(dst.nbytes)])
            off += dst.nbytes
        doc, ms = self._timed_rpc("e2e", poison=[list(o) for o in poison], reads=r_spec,
                                  writes=w_spec, args=list(args))
        rec = self._one_figure(self._record(doc, "e2e"), "e2e")
        rec.judge_ms = ms
        if rec.ok:
            off = w_off
            for _, dst in writes:
                self._get(dst, off)
                off += dst.nbytes
        return rec


# ---------------------------------------------------------------------------------------
# The candidate's process
# ---------------------------------------------------------------------------------------


def _serve(ops: DeviceOps, req_fd: int, rep_fd: int, shm_fd: int) -> int:
    shm: mmap.mmap | None = None

    def view(off: int, n: int) -> np.ndarray:
        if shm is None or off < 0 or n < 0 or off + n > len(shm):
            raise ValueError("staging range out of bounds")
        return np.frombuffer(shm, dtype=np.uint8, count=n, offset=off)

    rid: Any = None

    def reply(doc: dict[str, Any]) -> None:
        data = memoryview((json.dumps({**doc, "id": rid}) + "\n").encode())
        while data:
            data = data[os.write(rep_fd, data):]

    def record(rec: CallRecord) -> dict[str, Any]:
        return {"ok": True, "rc": rec.rc, "sync": rec.sync, "ms": rec.ms or [],
                "tails": rec.tails or [], "floors": rec.floors or []}

    reader = os.fdopen(req_fd, "rb", buffering=1 << 16)
    for raw in reader:
        req = json.loads(raw)
        op, rid = req.get("op"), req.get("id")
        try:
            if op == "exit":
                return 0
            if op == "ping":
                reply({"ok": True})
            elif op == "staging":
                if shm is not None:
                    shm.close()
                shm = mmap.mmap(shm_fd, int(req["size"]))
                reply({"ok": True})
            elif op == "alloc":
                a = ops.alloc(req["n"])
                reply({"ok": True, "ptr": a.ptr, "nbytes": a.nbytes})
            elif op == "free":
                ops.free(req["ptr"])
                reply({"ok": True})
            elif op == "h2d":
                ops.b.h2d(int(req["dst"]), view(req["off"], req["n"]))
                reply({"ok": True})
            elif op == "d2h":
                ops.b.d2h(view(req["off"], req["n"]), int(req["src"]))
                reply({"ok": True})
            elif op == "ops":
                ops.run_ops(req["ops"])
                reply({"ok": True})
            elif op == "sync":
                reply({"ok": True, "code": ops.b.synchronize()})
            elif op == "mem_free":
                reply({"ok": True, "bytes": ops.b.mem_free()})
            elif op == "load":
                confinement = None
                if req.get("read") is not None:
                    from cudaperf_cli.confine import confine_candidate

                    confinement = confine_candidate(read=req["read"]).to_json()
                ops.load(req["lib"], req["symbol"], req["argtypes"])
                reply({"ok": True, "confinement": confinement})
            elif op == "call":
                reply(record(ops.call(req["args"], bool(req.get("events")))))
            elif op == "timed":
                reply(record(ops.timed_calls(req["preps"], req["args"])))
            elif op == "sync_call":
                reply(record(ops.sync_call(req["prep"], req["args"])))
            elif op == "e2e":
                reads = [(int(p), view(o, n)) for p, o, n in req["reads"]]
                writes = [(int(p), view(o, n)) for p, o, n in req["writes"]]
                reply(record(ops.e2e_call(req["poison"], reads, writes, req["args"])))
            else:
                reply({"ok": False, "error": {"kind": "protocol", "message": f"unknown op {op!r}"}})
        except CudaCallError as exc:
            reply({"ok": False, "error": {"kind": "cuda", "call": exc.call, "code": exc.code,
                                          "name": exc.name, "string": exc.string}})
        except LoadFailure as exc:
            reply({"ok": False, "error": {"kind": "load", "message": str(exc), "error": exc.error}})
        except Exception as exc:  # noqa: BLE001 - the judge reports it
            reply({"ok": False, "error": {"kind": "internal",
                                          "message": f"{type(exc).__name__}: {exc}"}})
    return 0


def main(argv: list[str] | None = None) -> int:
    """The candidate's process (module docstring)."""
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    p.add_argument("--judge", type=int, required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--replies", type=int, required=True)
    p.add_argument("--staging", type=int, required=True)
    p.add_argument("--backend", default="cuda", choices=("cuda", "host"))
    p.add_argument("--device", type=int, default=0)
    a = p.parse_args(argv)
    # Killed with the judge, even outside its process group.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    # The judge's pipe ends and staging file, opened through its /proc/<pid>/fd.
    fd_path = f"/proc/{a.judge}/fd/{{}}".format
    req_fd = os.open(fd_path(a.requests), os.O_RDONLY)
    rep_fd = os.open(fd_path(a.replies), os.O_WRONLY)
    shm_fd = os.open(fd_path(a.staging), os.O_RDWR)
    # What the candidate prints goes to stderr (line by line), never into the replies.
    os.dup2(2, 1)
    line_buffer_c_stdout()

    def reply(doc: dict[str, Any]) -> None:
        os.write(rep_fd, (json.dumps(doc) + "\n").encode())

    try:
        backend = make_backend(a.backend, a.device)
        info = backend.info()
    except NoDevice as exc:
        reply({"ok": False, "error": {"kind": "no_device", "message": str(exc)}})
        return 0
    except CudaCallError as exc:
        reply({"ok": False, "error": {"kind": "cuda", "call": exc.call, "code": exc.code,
                                      "name": exc.name, "string": exc.string}})
        return 0
    reply({"ok": True, "info": info})
    return _serve(DeviceOps(backend), req_fd, rep_fd, shm_fd)


if __name__ == "__main__":
    code = main()
    try:
        flush_c_stdio()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)  # no teardown: device objects after a sticky CUDA error can hang


__all__ = ["CallRecord", "DeviceGone", "DeviceOps", "LoadFailure", "LocalDevice", "MODULE",
           "RemoteDevice", "ctype_for"]
