"""Landlock confinement of the processes that run model-written code (cudaperf_cli/confine.py):
what a confined process can still do (import, read the system and Python folders, write its
scratch folder and /dev) and what it cannot (read or write the user's files, read its
parent's environment, open a TCP connection).  The workers' use of it: test_evaluate.py (C)
and test_torch_eval.py (PyTorch)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cudaperf_cli.confine import landlock_abi, proc_entries

needs_landlock = pytest.mark.skipif(landlock_abi() == 0, reason="this kernel has no Landlock")

PROBE = r"""
import json, os, socket, sys
from cudaperf_cli.confine import confine_candidate
secret, scratch, ppid = sys.argv[1], os.environ["TMPDIR"], os.getppid()
c = confine_candidate(read=[sys.argv[2]])
out = {"applied": c.applied, "reason": c.reason}
def can(f):
    try:
        f(); return True
    except OSError:
        return False
out["read_secret"] = can(lambda: open(secret).read())
out["read_granted"] = can(lambda: open(sys.argv[2]).read())
out["write_beside_secret"] = can(lambda: open(secret + ".new", "w").write("x"))
out["write_scratch"] = can(lambda: open(os.path.join(scratch, "f"), "w").write("x"))
out["parent_environ"] = can(lambda: open(f"/proc/{ppid}/environ", "rb").read())
out["own_status"] = can(lambda: open("/proc/self/status").read())
out["cpuinfo"] = can(lambda: open("/proc/cpuinfo").read())
out["tcp"] = can(lambda: socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=5))
import decimal, numpy  # imports still work
print(json.dumps(out))
"""


def _probe(tmp_path: Path, **env: str) -> dict[str, object]:
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    granted = tmp_path / "granted.txt"
    granted.write_text("ok")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    root = str(Path(__file__).resolve().parents[1])
    with socket.create_server(("127.0.0.1", 0)) as server:  # a port the probe could reach
        port = server.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, str(secret), str(granted), str(port)], capture_output=True,
            text=True, env={**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": root, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_landlock
def test_a_confined_process_reads_and_writes_only_what_it_was_granted(tmp_path: Path) -> None:
    out = _probe(tmp_path)
    if not out["applied"]:  # Landlock offered but refused here (a container's seccomp profile)
        pytest.skip(str(out["reason"]))
    assert out["read_granted"] and out["write_scratch"] and out["own_status"] and out["cpuinfo"]
    assert not out["read_secret"] and not out["write_beside_secret"]
    assert not out["parent_environ"]  # the CLI's environment holds the model server's key
    if landlock_abi() >= 4:
        assert not out["tcp"]


def test_confinement_can_be_turned_off(tmp_path: Path) -> None:
    out = _probe(tmp_path, CUDAPERF_NO_CONFINE="1")
    assert out["applied"] is False and "CUDAPERF_NO_CONFINE=1" in str(out["reason"])
    assert out["read_secret"] is True and out["tcp"] is True  # what confinement takes away


def test_proc_entries_leave_out_other_processes() -> None:
    entries = proc_entries()
    assert f"/proc/{os.getpid()}" in entries
    assert f"/proc/{os.getppid()}" not in entries
    assert "/proc/cpuinfo" in entries and "/proc/self" not in entries
