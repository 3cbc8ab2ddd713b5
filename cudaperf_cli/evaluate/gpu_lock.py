"""One GPU evaluation at a time per GPU, across processes: an ``fcntl.flock`` on a lock file.

``cudaperf bench -j N`` runs several ``optimize`` processes at once so that their compiles
overlap; their *evaluations* (verify + time on the device) must not overlap on one GPU, or
each kernel's CUDA-event times would include the others' work.  The child protocol
(:func:`cudaperf_cli.evaluate.child.run_child`, with ``gpu`` given) therefore takes
:func:`gpu_lock` once the worker child has prepared everything that is not device work (its
``ready`` line) and holds it until the child has exited; the wait is measured
(``lock_wait_s``) and counts in no time limit.  A reference-only job never touches the
device and takes no lock; nvcc compiles take none either.

- Lock file: ``$CUDAPERF_GPU_LOCK_DIR/gpu-<id>.lock``; the directory defaults to
  ``<tmp>/cudaperf-gpu-locks-<uid>`` (``<tmp>`` is :func:`tempfile.gettempdir`, usually
  ``/tmp``): shared by all processes of one user.  Point several users at one directory
  (mode 1777 or a shared group) to serialise them too.
- ``<id>`` is the device's entry in ``$CUDA_VISIBLE_DEVICES`` (an index or a ``GPU-<uuid>``)
  when that variable is set, else the ordinal; two processes naming one GPU differently
  (``0`` vs its UUID) do not see each other's lock.
- ``CUDAPERF_GPU_LOCK=0`` turns the lock off (a no-op).
- The lock is released when the ``with`` block ends or the holding process dies (the kernel
  drops a ``flock`` with its last file descriptor), so a killed ``optimize`` never leaves a
  stale lock behind.  Waiting is unbounded; Ctrl-C interrupts it (a wait in a thread, which
  no signal reaches, polls its ``give_up`` instead).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

#: Directory of the lock files (default: ``<tmp>/cudaperf-gpu-locks-<uid>``).
LOCK_DIR_ENV = "CUDAPERF_GPU_LOCK_DIR"
#: ``0`` (or ``false``/``no``/``off``): take no lock.
LOCK_ENV = "CUDAPERF_GPU_LOCK"


def lock_enabled() -> bool:
    """Whether evaluations serialise on the GPU lock (``$CUDAPERF_GPU_LOCK`` is not ``0``)."""
    return os.environ.get(LOCK_ENV, "1").strip().lower() not in {"0", "false", "no", "off"}


def lock_dir() -> Path:
    """The directory of the lock files: ``$CUDAPERF_GPU_LOCK_DIR`` or the per-user default."""
    configured = os.environ.get(LOCK_DIR_ENV, "").strip()
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"cudaperf-gpu-locks-{os.getuid()}"


def device_id(ordinal: int = 0) -> str:
    """A name for CUDA device ``ordinal`` of this process that other processes share.

    The ``ordinal``-th entry of ``$CUDA_VISIBLE_DEVICES`` when it has one (so ordinal 0 of a
    process that sees only GPU 3 is ``3``), else the ordinal itself; characters other than
    letters, digits, ``-`` and ``_`` become ``_`` (a file name).
    """
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    ident = visible[ordinal] if 0 <= ordinal < len(visible) else str(ordinal)
    return re.sub(r"[^A-Za-z0-9_-]", "_", ident)


def lock_path(ordinal: int = 0) -> Path:
    """The lock file of CUDA device ``ordinal`` (see :func:`device_id`)."""
    return lock_dir() / f"gpu-{device_id(ordinal)}.lock"


#: Seconds between two tries of a :func:`gpu_lock` wait that can give up.
POLL_S = 0.05


class LockAbandoned(Exception):
    """A :func:`gpu_lock` wait ended by its ``give_up`` before the lock was free."""


@contextlib.contextmanager
def gpu_lock(ordinal: int = 0, *, needed: bool = True,
             give_up: Callable[[], bool] | None = None) -> Iterator[float]:
    """Hold the exclusive lock of CUDA device ``ordinal`` for the ``with`` block.

    Args:
        ordinal: the device ordinal as this process numbers it (``EvalJob.device``).
        needed: False makes this a no-op (the job does not use the device).
        give_up: polled every :data:`POLL_S` seconds while waiting (a non-blocking
            ``flock`` retried): True raises :class:`LockAbandoned` without the lock.  For a
            wait in a thread, which no Ctrl-C reaches.  None: a blocking ``flock``.

    Yields:
        The seconds spent waiting for the lock (0.0 when no lock was taken).

    Raises:
        LockAbandoned: ``give_up()`` said so before the lock was free.

    A lock directory that cannot be created or a file that cannot be opened (read-only
    file system, foreign permissions) is not an error: the block runs unlocked, since an
    evaluation without the lock is still correct, only possibly disturbed.
    """
    if not needed or not lock_enabled():
        yield 0.0
        return
    path = lock_path(ordinal)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield 0.0
        return
    try:
        t0 = time.monotonic()
        if give_up is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if give_up():
                        raise LockAbandoned(f"gave up waiting for {path}") from None
                    time.sleep(POLL_S)
        waited = time.monotonic() - t0
        try:
            yield waited
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


__all__ = ["LOCK_DIR_ENV", "LOCK_ENV", "LockAbandoned", "POLL_S", "device_id", "gpu_lock", "lock_dir",
           "lock_enabled", "lock_path"]
