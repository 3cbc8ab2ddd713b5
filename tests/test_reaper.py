"""The watcher of a Ray task's command tree (cudaperf_cli/bench/reaper.py), without Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.test_bench import alive

ROOT = Path(__file__).resolve().parents[1]

# ROOT of the watched tree: waits for GO, starts a child in its own group, writes its pid
ROOT_SCRIPT = """
import os, subprocess, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
child = subprocess.Popen(["sleep", "600"])
open(sys.argv[2] + ".tmp", "w").write(str(child.pid))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
time.sleep(600)
"""


def _wait_for(path: Path, seconds: float = 30.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert time.monotonic() - t0 < seconds, f"{path} never appeared"
        time.sleep(0.01)


def _gone(pid: int, seconds: float) -> bool:
    t0 = time.monotonic()
    while alive(pid) and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
    return not alive(pid)


def _watchers_of(root: int) -> set[int]:
    """Pids of the watchers started with ``--root root``."""
    out = set()
    for p in os.listdir("/proc"):
        try:
            args = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"cudaperf_cli.bench.reaper" in args and str(root).encode() in args:
            out.add(int(p))
    return out


def test_a_child_started_just_before_its_root_died_is_killed_with_the_worker(tmp_path: Path) -> None:
    """Ray SIGKILLs a worker's direct children (ROOT) on cancel, possibly before the watcher
    polled ROOT's newest child: the child stays in ROOT's group and must still be stopped
    when the worker goes (it outlived a SIGTERM'd bench in CI)."""
    go, pid_file = tmp_path / "go", tmp_path / "child.pid"
    worker = subprocess.Popen(["sleep", "600"])
    root = subprocess.Popen([sys.executable, "-c", ROOT_SCRIPT, str(go), str(pid_file)],
                            start_new_session=True)
    child = None
    try:
        subprocess.run([sys.executable, "-m", "cudaperf_cli.bench.reaper", "--watch", str(worker.pid),
                        "--root", str(root.pid)], cwd=ROOT, check=True, timeout=60)
        time.sleep(0.6)  # the watcher has recorded ROOT alone
        go.write_text("go\n")
        _wait_for(pid_file)
        os.kill(root.pid, signal.SIGKILL)  # within a poll of the child's start
        root.wait()
        child = int(pid_file.read_text())
        time.sleep(1.0)  # several polls with ROOT gone and its child alive
        assert alive(child), "the child died with its root: nothing tested"
        worker.kill()
        worker.wait()
        assert _gone(child, 15.0), "the child outlived the worker"
    finally:
        for p in (worker, root):
            if p.poll() is None:
                p.kill()
                p.wait()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_watcher_leaves_a_finished_tree_alone_and_exits(tmp_path: Path) -> None:
    """A command that ends by itself: the watcher exits, and the worker's death later kills
    nothing (no process of the tree is left to kill, and no unrelated one is taken)."""
    worker = subprocess.Popen(["sleep", "600"])
    root = subprocess.Popen(["sleep", "2"], start_new_session=True)
    try:
        subprocess.run([sys.executable, "-m", "cudaperf_cli.bench.reaper", "--watch", str(worker.pid),
                        "--root", str(root.pid)], cwd=ROOT, check=True, timeout=60)
        watchers = _watchers_of(root.pid)
        assert watchers, "no watcher found"
        root.wait()
        t0 = time.monotonic()
        while any(alive(p) for p in watchers) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert not any(alive(p) for p in watchers), "the watcher did not exit"
        assert worker.poll() is None
    finally:
        worker.kill()
        worker.wait()


def test_the_watcher_says_when_it_has_recorded_the_tree(tmp_path: Path) -> None:
    """--ready-fd: one byte once ROOT and the worker are recorded (the executor opens ROOT's
    gate only then), and the watcher still stops the tree when the worker dies."""
    import select

    worker = subprocess.Popen(["sleep", "600"])
    root = subprocess.Popen(["sleep", "600"], start_new_session=True)
    r, w = os.pipe()
    try:
        subprocess.run([sys.executable, "-m", "cudaperf_cli.bench.reaper", "--watch", str(worker.pid),
                        "--root", str(root.pid), "--ready-fd", str(w)], cwd=ROOT, check=True, timeout=60,
                       pass_fds=(w,))
        os.close(w)
        w = -1
        assert select.select([r], [], [], 30)[0], "the watcher never said it was ready"
        assert os.read(r, 1) == b"1"
        worker.kill()
        worker.wait()
        root.wait(timeout=20)  # killed by the watcher (its group)
    finally:
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)
        for p in (worker, root):
            if p.poll() is None:
                p.kill()
                p.wait()
