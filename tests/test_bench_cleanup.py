"""A problem stopped by bench (its time limit) leaves no process behind: optimize's children
run in sessions of their own (the PyTorch loader here), and bench gives optimize a SIGTERM
and a grace period to end them before it kills the group."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

LOOP = """
import torch
import torch.nn as nn
n = 8
class Model(nn.Module):
    def forward(self, x):
        while True:
            pass
def get_inputs():
    return [torch.randn(n)]
def get_init_inputs():
    return []
"""


def _probes(mark: str) -> set[str]:
    """``pid args`` of every PyTorch loader child running now that this test's bench started
    (its environment holds ``CUDAPERF_TEST_MARK=mark``: other tests, run beside this one
    with pytest-xdist, start loaders too).  Reads ``/proc`` itself: ``ps`` cuts its lines at
    ``$COLUMNS`` when that is set, and the module name falls past the cut behind a long
    interpreter path (CI's checkout)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if b"cudaperf_cli.problems.pytorch_probe" in args and f"CUDAPERF_TEST_MARK={mark}".encode() in env:
            found.add(f"{proc.name} {b' '.join(args).decode(errors='replace').strip()}")
    return found


def test_problem_timeout_leaves_no_loader_behind(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    mark = str(tmp_path)
    (tmp_path / "loop_fw.py").write_text(textwrap.dedent(LOOP))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cudaperf_cli", "bench", "run", str(tmp_path / "loop_fw.py"), "--turns", "1",
         "-j", "1", "--problem-timeout", "12", "-o", str(tmp_path / "out"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPERF_TEST_MARK": mark})
    seen = False  # the loader was found by its mark while it ran: the check below can fail
    while proc.poll() is None:
        seen = seen or bool(_probes(mark))
        time.sleep(0.5)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    assert '"problem_timeout"' in out
    assert seen
    time.sleep(1.0)
    left = _probes(mark)
    assert not left, left
