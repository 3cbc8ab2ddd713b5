"""benchmarks/kernelbench_policy.py on problems of our own (the real suite: set
CUDAPERF_KERNELBENCH and run the script; it is a benchmark, not a test)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

pytest.importorskip("torch")

GOOD = """
    import torch
    import torch.nn as nn
    batch_size = 64
    channels = 32
    length = 512
    class Model(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.gn = nn.GroupNorm(channels // 4, channels)
        def forward(self, x):
            return torch.sigmoid(self.gn(x)) * 2.0
    def get_inputs():
        return [torch.randn(batch_size, channels, length)]
    def get_init_inputs():
        return [channels]
"""


def _suite(tmp_path: Path) -> Path:
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "1_Ours_GroupNorm_Sigmoid.py").write_text(textwrap.dedent(GOOD))
    (level / "2_Ours_Matmul.py").write_text(textwrap.dedent(GOOD).replace(
        "torch.sigmoid(self.gn(x)) * 2.0", "torch.matmul(x, x.transpose(1, 2))"))
    (level / "3_Ours_Broken.py").write_text("raise ValueError('boom')\n")
    return tmp_path


def test_rows_for_an_accepted_a_refused_and_a_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = load_benchmark("kernelbench_policy")
    out = tmp_path / "rows.jsonl"
    assert bench.main(["--kernelbench", str(_suite(tmp_path)), "--levels", "level1", "--json", str(out)]) == 0
    rows = {r["file"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["1_Ours_GroupNorm_Sigmoid.py"]["status"] == "ok", rows
    assert len(rows["1_Ours_GroupNorm_Sigmoid.py"]["configs"]) == 2  # the probe and an alternative
    assert rows["2_Ours_Matmul.py"]["status"] == "refused"
    assert rows["3_Ours_Broken.py"]["status"] == "load_error" and "boom" in rows["3_Ours_Broken.py"]["message"]
    assert "accepted 1 (33%)" in capsys.readouterr().out


def test_without_a_checkout_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_benchmark("kernelbench_policy")
    monkeypatch.delenv(bench.ENV, raising=False)
    assert bench.main([]) == 2
    assert bench.main(["--kernelbench", str(tmp_path)]) == 2


def test_host_cuda_runs_the_cuda_text(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--host-cuda``: the candidate's kernel.cu itself, compiled for the CPU, gives the row."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("no g++ for the host CUDA build")
    bench = load_benchmark("kernelbench_policy")
    out = tmp_path / "rows.jsonl"
    assert bench.main(["--kernelbench", str(_suite(tmp_path)), "--levels", "level1", "--only", "1_Ours_GroupNorm_Sigmoid",
                       "--host-cuda", "--json", str(out)]) == 0
    (row,) = map(json.loads, out.read_text().splitlines())
    assert row["status"] == "ok", row
    assert "the CUDA text run on the CPU: correct at both small configurations 1 of 1" in capsys.readouterr().out
