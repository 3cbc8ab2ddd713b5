"""The child-process protocol (evaluate/child.py) with a stand-in worker (tests/child_fake.py):
the GPU gate (the lock is taken only once the child is prepared, the preparation and the
lock wait count in no limit), the two deadlines, the host-memory watchdog, process-group
teardown."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from cudaperf_cli.evaluate import child
from cudaperf_cli.evaluate.child import (
    EXIT_PARENT_GONE,
    GATE_ENV,
    ChildRun,
    group_and_descendants,
    run_child,
    start_child,
)
from cudaperf_cli.evaluate.gpu_lock import gpu_lock

ROOT = Path(__file__).resolve().parents[1]
FAKE = "tests.child_fake"
ENV = {"PYTHONPATH": str(ROOT)}


@pytest.fixture(autouse=True)
def _locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAPERF_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDAPERF_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _events(log: Path) -> list[tuple[str, int, float]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        ev, pid, t = line.split()
        out.append((ev, int(pid), float(t)))
    return out


def _run(job: dict[str, Any], **kw: Any) -> ChildRun:
    kw.setdefault("timeout_s", 30)
    kw.setdefault("gpu", 0)
    return run_child(FAKE, [], job, env=ENV, **kw)


@contextlib.contextmanager
def _held(seconds: float) -> Iterator[dict[str, float]]:
    """Hold GPU 0's lock in a thread for ``seconds``, or until the ``with`` block ends if that
    comes first; yields {"released": monotonic time}."""
    info: dict[str, float] = {}
    got, done = threading.Event(), threading.Event()

    def hold() -> None:
        with gpu_lock(0):
            got.set()
            done.wait(seconds)
            info["released"] = time.monotonic()

    t = threading.Thread(target=hold)
    t.start()
    assert got.wait(10)
    try:
        yield info
    finally:
        done.set()
        t.join()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_ready_then_go_result_and_events(tmp_path: Path) -> None:
    log = tmp_path / "log"
    run = _run({"log": str(log), "prepare_s": 0.2, "run_s": 0.1})
    assert run.result == {"status": "ok", "waited": run.result["waited"], "held": 0}, run
    assert run.ready and run.gated and not run.timed_out and run.returncode == 0
    assert '"event"' not in run.stdout_text  # the protocol's own lines are not output
    assert "printed on fd 1 goes to stderr" in run.stderr_tail
    assert run.state["phase"] == "run"
    assert 0.2 <= run.prepare_s < run.elapsed_s and run.run_s is not None
    assert run.prepare_s + run.run_s == pytest.approx(run.elapsed_s, abs=0.05)
    assert [e for e, _, _ in _events(log)] == ["start", "go", "end"]


def test_lock_is_taken_only_after_ready_and_neither_wait_is_counted(tmp_path: Path) -> None:
    log = tmp_path / "log"
    t0 = time.monotonic()
    with _held(6.0) as lock:
        # prepares 1.2 s and waits ~4 s for the lock (less when a loaded machine starts
        # the child slowly): both longer than timeout_s=1
        run = _run({"log": str(log), "prepare_s": 1.2, "run_s": 0.2}, timeout_s=1.0)
    assert not run.timed_out and run.result is not None and run.result["status"] == "ok", run
    ev = {e: t for e, _, t in _events(log)}
    assert ev["go"] >= lock["released"]  # go only once the lock was free
    assert run.prepare_s >= 1.2 and run.lock_wait_s >= 1.0
    assert run.lock_wait_s == pytest.approx(lock["released"] - (t0 + run.prepare_s), abs=0.5)
    assert run.run_s < 1.0
    assert run.result["waited"] >= 1.0  # the child saw itself blocked as long


def test_hang_before_ready_is_killed_at_the_prepare_deadline(tmp_path: Path) -> None:
    log = tmp_path / "log"
    # The prepare deadline leaves the child time to start and enter "prepare" on a loaded
    # machine (CI at -n auto: 1 s was too short for its imports, and the state file was empty).
    with _held(60):
        t0 = time.monotonic()
        run = _run({"log": str(log), "prepare_s": 60}, prepare_timeout_s=5.0, timeout_s=60)
        took = time.monotonic() - t0
    assert took < 30  # returned while the lock was still held: it never asked for it
    assert run.timed_out and run.timeout_phase == "prepare" and run.timeout_limit_s == 5.0
    assert not run.ready and run.lock_wait_s == 0.0 and run.run_s is None
    assert run.signal == "SIGKILL" and run.state["phase"] == "prepare"
    assert run.prepare_s == pytest.approx(run.elapsed_s)
    (_, pid, _), = _events(log)
    assert _gone(pid)


def test_started_ahead_the_child_prepares_then_waits_for_go(tmp_path: Path) -> None:
    """start_child: the child prepares while the caller works (the build), waits at ready
    without the lock or any deadline running, and takes the lock only after go()."""
    log = tmp_path / "log"
    pending = start_child(FAKE, [], {"log": str(log), "prepare_s": 0.2, "run_s": 0.1},
                          env=ENV, timeout_s=0.5, gpu=0)
    end = time.monotonic() + 60
    while not _events(log) and time.monotonic() < end:  # started (slow on a loaded machine)
        time.sleep(0.05)
    time.sleep(1.5)  # the caller's work: longer than the run deadline
    assert [e for e, _, _ in _events(log)] == ["start"]  # prepared, held: no go yet
    t_go = time.monotonic()
    run = pending.go()
    assert run.result is not None and run.result["status"] == "ok" and not run.timed_out, run
    assert not run.cancelled and run.ready
    assert run.held_s > 0 and run.lock_wait_s < 1.0
    ev = {e: t for e, _, t in _events(log)}
    assert ev["go"] >= t_go


@pytest.mark.parametrize("when", ["preparing", "ready"])
def test_started_ahead_a_cancelled_child_is_killed_without_the_lock(tmp_path: Path, when: str) -> None:
    log = tmp_path / "log"
    prepare = 30 if when == "preparing" else 0.1
    with _held(8):
        pending = start_child(FAKE, [], {"log": str(log), "prepare_s": prepare}, env=ENV,
                              timeout_s=30, gpu=0)
        end = time.monotonic() + 60
        while not _events(log) and time.monotonic() < end:  # started (slow on a loaded machine)
            time.sleep(0.05)
        time.sleep(1.0)
        t0 = time.monotonic()
        run = pending.cancel()
        assert time.monotonic() - t0 < 5  # the lock is still held by the thread above
    assert run.cancelled and run.result is None and run.lock_wait_s == 0.0
    assert run.ready == (when == "ready")
    (_, pid, _), = _events(log)
    assert _gone(pid)


def test_ctrl_c_in_go_ends_a_child_waiting_for_the_lock(tmp_path: Path) -> None:
    """A Ctrl-C while go() waits (the lock wait runs in a thread no signal reaches): the
    wait gives up, the child is killed and its thread ends, long before the lock is free."""
    import _thread

    log = tmp_path / "log"
    with _held(8):
        pending = start_child(FAKE, [], {"log": str(log), "prepare_s": 0.1, "run_s": 30}, env=ENV,
                              timeout_s=60, gpu=0)
        end = time.monotonic() + 60
        while not _events(log) and time.monotonic() < end:
            time.sleep(0.05)
        timer = threading.Timer(1.0, _thread.interrupt_main)
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            pending.go()
        assert time.monotonic() - t0 < 7  # not held until the lock came free
        assert pending._done.is_set()  # the thread has reaped the child
    (_, pid, _), = _events(log)
    assert _gone(pid)


def test_gpu_lock_wait_can_give_up(tmp_path: Path) -> None:
    from cudaperf_cli.evaluate.gpu_lock import LockAbandoned

    with _held(5):
        t0 = time.monotonic()
        with pytest.raises(LockAbandoned):
            with gpu_lock(0, give_up=lambda: time.monotonic() - t0 > 0.3):
                pass
        assert time.monotonic() - t0 < 2


def test_start_child_needs_a_gate() -> None:
    with pytest.raises(ValueError, match="gated"):
        start_child(FAKE, [], {}, env=ENV, timeout_s=1, gpu=None)


def test_exit_before_ready_never_takes_the_lock(tmp_path: Path) -> None:
    with _held(8):
        t0 = time.monotonic()
        run = _run({"exit_before_ready": True})
        took = time.monotonic() - t0
    assert took < 6 and run.result == {"status": "early"}
    assert not run.ready and run.lock_wait_s == 0.0 and run.returncode == 0


def test_run_deadline_starts_at_go(tmp_path: Path) -> None:
    run = _run({"prepare_s": 1.5, "run_s": 60}, timeout_s=1.0)
    assert run.timed_out and run.timeout_phase == "run" and run.timeout_limit_s == 1.0
    assert run.prepare_s >= 1.5 and 1.0 <= run.run_s < 5 and run.result is None


def test_without_a_gate_one_deadline_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "log"
    run = _run({"log": str(log), "prepare_s": 0.1, "run_s": 0.1}, gpu=None)
    assert run.result is not None and run.result["waited"] == 0.0  # wait_for_gpu: a no-op
    assert not run.gated and not run.ready and run.prepare_s is None
    run = _run({"prepare_s": 60}, gpu=None, timeout_s=1.0, prepare_timeout_s=100)
    assert run.timed_out and run.timeout_phase == "run" and run.elapsed_s < 5


def test_two_evaluations_on_one_lock_overlap_their_preparation(tmp_path: Path) -> None:
    log = tmp_path / "log"
    runs: list[ChildRun] = []
    job = {"log": str(log), "prepare_s": 1.5, "run_s": 1.0}
    t0 = time.monotonic()
    threads = [threading.Thread(target=lambda: runs.append(_run(job))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    assert [r.result["status"] for r in runs] == ["ok", "ok"]  # type: ignore[index]
    ev = _events(log)
    starts = [t for e, _, t in ev if e == "start"]
    gos = sorted(t for e, _, t in ev if e == "go")
    ends = sorted(t for e, _, t in ev if e == "end")
    assert max(starts) < min(gos)  # both prepared before either ran
    assert gos[1] >= ends[0]  # the runs did not overlap: one GPU, one at a time
    assert wall < 1.5 + 2 * 1.0 + 1.5  # serial preparation would need 5 s and more
    # the later one waited for the lock (about the first's 1 s run, less when a loaded
    # machine made it prepare later: its go after the first's end is the check above)
    assert sorted(r.lock_wait_s for r in runs)[1] > 0


def test_memory_watchdog_kills_the_group(tmp_path: Path) -> None:
    limit = 150 << 20
    t0 = time.monotonic()
    run = _run({"hog_bytes": 400 << 20, "run_s": 60}, host_memory_limit_bytes=limit)
    assert time.monotonic() - t0 < 20
    assert run.memory_exceeded and not run.timed_out and run.result is None
    assert run.memory_peak_bytes is not None and run.memory_peak_bytes > limit
    assert run.memory_limit_bytes == limit and run.signal == "SIGKILL"
    small = _run({"hog_bytes": 1 << 20, "run_s": 0.6}, host_memory_limit_bytes=limit)
    assert not small.memory_exceeded and small.result["held"] == 1 << 20  # type: ignore[index]
    assert 0 < small.memory_peak_bytes < limit  # type: ignore[operator]


def test_grandchildren_are_killed_when_the_child_exits(tmp_path: Path) -> None:
    run = _run({"spawn": 120, "run_s": 0.2})
    assert run.result is not None and run.result["status"] == "ok"
    import re

    m = re.search(r"spawned pid (\d+)", run.stderr_tail)
    assert m, run.stderr_tail
    pid = int(m.group(1))
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)


def test_parent_exception_kills_the_child_and_reraises(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "log"

    @contextlib.contextmanager
    def interrupted(ordinal: int = 0, *, needed: bool = True, give_up: Any = None) -> Iterator[float]:
        raise KeyboardInterrupt
        yield 0.0  # pragma: no cover

    monkeypatch.setattr(child, "gpu_lock", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run({"log": str(log), "prepare_s": 0.1, "run_s": 60})
    (_, pid, _), = _events(log)
    assert _gone(pid)


def test_closed_stdin_before_go_ends_the_child(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", FAKE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env={**os.environ, **ENV, GATE_ENV: "1"},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"run_s": 0}\n')
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == b'{"event": "ready"}'
    proc.stdin.close()
    assert proc.wait(timeout=30) == EXIT_PARENT_GONE


def test_group_and_descendants_finds_a_child_that_left_the_group(tmp_path: Path) -> None:
    """The host-memory watchdog's list: the leader's group, and a grandchild that started
    a session of its own (setsid), found through its parent."""
    proc = subprocess.Popen(["sh", "-c", "setsid sleep 30 & echo $!; wait"],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        escaped = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and escaped not in group_and_descendants(proc.pid):
            time.sleep(0.05)
        found = group_and_descendants(proc.pid)
        assert proc.pid in found and escaped in found, (proc.pid, escaped, found)
        assert os.getpid() not in found
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            os.kill(escaped, signal.SIGKILL)
        except (OSError, UnboundLocalError):
            pass
        proc.wait()


def test_state_adds_up_seconds_per_phase(tmp_path, monkeypatch) -> None:
    import time as _time

    from cudaperf_cli.evaluate.child import SPAWN_TIME_ENV, State

    monkeypatch.setenv(SPAWN_TIME_ENV, repr(_time.time() - 0.5))
    st = State(str(tmp_path / "state.json"))
    st.set("device")
    _time.sleep(0.05)
    st.set("timing.gpu", "main", 0)
    _time.sleep(0.05)
    st.set("timing.e2e", "main", 0)
    st.set("device")  # a phase entered twice adds up
    s = st.phase_seconds()
    assert s["startup"] >= 0.5 and s["device"] >= 0.05 and s["timing"] >= 0.05
    assert set(s) == {"startup", "start", "device", "timing"}
