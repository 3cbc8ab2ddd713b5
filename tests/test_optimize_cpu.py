"""``cudaperf optimize`` end to end on a machine without a GPU: load, translate, compile,
static structure; then the clear "no CUDA device" line, exit code 4 and nothing written."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import cuda_device_status
from tests.test_cli import EXAMPLES, cli

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH"),
]


@pytest.fixture(scope="module")
def no_gpu():
    if cuda_device_status()[0]:
        pytest.skip("a CUDA device is present: the GPU tests cover optimize there")


@pytest.mark.parametrize("example", ["matmul.c", "jacobi2d.c", "reduction.c"])
def test_optimize_without_gpu_compiles_and_says_so(no_gpu, tmp_path, example):
    proc = cli("optimize", str(EXAMPLES / example), "--turns", "2", "--json", cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert "no CUDA device" in proc.stderr
    doc = json.loads(proc.stdout)
    assert [t["status"] for t in doc["turns"]] == ["no_device", "no_device"]
    assert all(t["registers"] for t in doc["turns"])  # ptxas report parsed
    assert all(t["structure_score"] is not None for t in doc["turns"])
    assert doc["output"] is None and not (tmp_path / example.replace(".c", ".cu")).exists()
    assert doc["exit_code"] == 4 and doc["message"].startswith("no CUDA device")  # why, in the JSON
    run = tmp_path / doc["run_dir"]
    lines = (run / "turns.jsonl").read_text().splitlines()
    assert len(lines) == 2 and "__global__" in json.loads(lines[0])["source"]
    assert (run / "problem.json").exists() and (run / "summary.json").exists()
