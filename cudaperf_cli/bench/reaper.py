"""``python -m cudaperf_cli.bench.reaper --watch PID --root ROOT [--stop-file PATH] [--ready-fd N]``: kill
ROOT's process tree when process PID dies, or when PATH appears.

A Ray task runs a problem's ``optimize`` command (ROOT, a session of its own) and starts
this watcher for it (``bench/executor.py``).  When the task is cancelled or its Ray worker
(PID) dies, Ray kills the worker and the worker's direct children with SIGKILL, so nothing
the command started would be stopped (its compiles, its evaluation worker in a session of
its own, a ``sleep``) and a retry could run beside them.  The watcher is not the worker's
child (it detaches: double fork, ``setsid``), so it survives; every :data:`POLL_S` seconds
it records ROOT's process group and descendants (:func:`group_and_descendants`; once ROOT
is gone, the members of every group it recorded: a child ROOT started just before Ray
killed it is still in ROOT's group, though never seen as ROOT's descendant), and once
PID is gone it sends SIGTERM to every process group it recorded (optimize's own Ctrl-C path
then stops its children), waits up to :data:`GRACE_S` seconds, and sends SIGKILL.  It exits
by itself once ROOT and everything it recorded are gone.  ``--stop-file``: the bench's driver
creates that file (in the shared output folder) on Ctrl-C, so the tree stops even when Ray's
cancel reaches the worker late or not at all.  A pid is matched with its start
time, so a reused pid is never taken for the worker or for a recorded process.
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: Seconds between two looks at the worker and at ROOT's tree.
POLL_S = 0.25
#: Seconds the recorded process groups get between SIGTERM and SIGKILL.
GRACE_S = 10.0


def _start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time, clock ticks); None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":
        return None
    return int(fields[19])


def _pgrp(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def _group_members(groups: set[int]) -> set[int]:
    """The processes whose process group is in ``groups`` (one scan of ``/proc``)."""
    out: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit() and _pgrp(int(name)) in groups:
            out.add(int(name))
    return out


def watch(pid: int, root: int, stop_file: str | None = None, ready_fd: int | None = None) -> None:
    """The watcher's loop (see the module docstring); returns when it is done.  ``ready_fd``:
    written to (and closed) once ROOT and the worker are recorded, so the caller opens
    ROOT's gate only then (on a loaded machine the watcher started seconds late, after Ray
    had killed ROOT, and never knew its process group)."""
    from cudaperf_cli.evaluate.child import group_and_descendants

    worker = _start_time(pid)
    root_start = _start_time(root)
    own = os.getpgrp()
    seen: dict[int, int] = {}  # pid -> start time, of ROOT's tree
    groups: set[int] = set()
    while True:
        # ROOT's pid, once ROOT is gone, may belong to an unrelated process: match its start
        # time, and take only processes that started after ROOT (its tree is younger)
        same_root = root_start is not None and _start_time(root) == root_start
        for p in group_and_descendants(root) if same_root else set():
            st = _start_time(p)
            if st is not None and st >= root_start and p != os.getpid():
                seen[p] = st
                g = _pgrp(p)
                if g is not None and g != own:
                    groups.add(g)
        if not same_root and groups:  # a group outlives its leader: its members still count
            members = _group_members(groups)
            for p in members:
                st = _start_time(p)
                if st is not None and st >= (root_start or 0) and p != os.getpid():
                    seen[p] = st
            groups = {g for g in groups if any(_pgrp(p) == g for p in members)}
        alive = {p for p, st in seen.items() if _start_time(p) == st}
        if ready_fd is not None:
            try:
                os.write(ready_fd, b"1")
                os.close(ready_fd)
            except OSError:
                pass
            ready_fd = None
        if worker is None or _start_time(pid) != worker:
            break  # the worker died: stop the tree
        if stop_file and os.path.exists(stop_file):
            break  # the driver was stopped (Ctrl-C)
        if not alive and not same_root:
            return  # the command ended by itself
        time.sleep(POLL_S)
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 0.0)):
        for g in groups:
            try:
                os.killpg(g, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_start_time(p) == st for p, st in seen.items()):
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    """Detach (double fork, ``setsid``) and :func:`watch`; the caller's child exits at once."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        pid = int(args[args.index("--watch") + 1])
        root = int(args[args.index("--root") + 1])
        stop_file = args[args.index("--stop-file") + 1] if "--stop-file" in args else None
        ready_fd = int(args[args.index("--ready-fd") + 1]) if "--ready-fd" in args else None
    except (ValueError, IndexError):
        print("usage: python -m cudaperf_cli.bench.reaper --watch PID --root ROOT", file=sys.stderr)
        return 2
    if os.fork() > 0:
        return 0  # the caller reaps this one at once; the grandchild is nobody's child here
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        watch(pid, root, stop_file, ready_fd)
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
