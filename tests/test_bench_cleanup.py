"""A problem stopped by bench (its time limit) leaves no process behind: optimize's children
run in sessions of their own (the PyTorch loader here), and bench gives optimize a SIGTERM
and a grace period to end them before it kills the group."""

from __future__ import annotations

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


def _probes() -> set[str]:
    """``pid args`` of every PyTorch loader child running now."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return {line.strip() for line in out.splitlines() if "cudaperf_cli.problems.pytorch_probe" in line}


def test_problem_timeout_leaves_no_loader_behind(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    before = _probes()
    (tmp_path / "loop_fw.py").write_text(textwrap.dedent(LOOP))
    proc = subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", "bench", "run", str(tmp_path / "loop_fw.py"), "--turns", "1",
         "-j", "1", "--problem-timeout", "12", "-o", str(tmp_path / "out"), "--json"],
        capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"problem_timeout"' in proc.stdout
    time.sleep(1.0)
    left = _probes() - before
    assert not left, left
