"""PyTorch problems as large as KernelBench level 1's, on a machine without a GPU: the loader
finds their shapes without allocating them (fake tensors), runs its data checks at smaller
"probe" constants, and ``optimize`` loads, compiles and ends ``no CUDA device`` without the
loader being killed (issue 21).  The problem files are written here (sizes like KernelBench's;
no KernelBench code)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.conftest import cuda_device_status
from tests.test_cli import cli

torch = pytest.importorskip("torch")

from cudaperf_cli.problems.pytorch import load_torch_problem  # noqa: E402

GB = 1e9

def problem(forward: str, draw: str = "rand") -> str:
    """A KernelBench-format file at level 1's elementwise sizes (4096 x 393216 float32:
    6.44 GB an input) whose forward body is ``forward``."""
    return (
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x):\n" + textwrap.indent(textwrap.dedent(forward).strip("\n"), "        ") + "\n"
        "batch_size = 4096\ndim = 393216\n\n"
        f"def get_inputs():\n    return [torch.{draw}(batch_size, dim)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )


RELU = problem("return torch.relu(x)\n")
#: Makes a full-size tensor on an explicit device='cpu' in forward: the meta device would
#: not catch it (6.4 GB allocated in the loader), fake tensors do.
EXPLICIT_CPU = problem("""
    bias = torch.ones(x.shape, device="cpu") * 0.5
    return x * 2.0 + bias
""")
#: Data-dependent (``.item()``): runs neither on the meta device nor on fake tensors.
ITEM = problem("""
    scale = float(x.abs().max().item()) + 1.0
    return x / scale
""", draw="randn")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shapes_at_the_main_sizes_without_data_and_checks_at_probe_constants(tmp_path: Path):
    p = load_torch_problem(write(tmp_path, "relu.py", RELU), timeout_s=120)
    assert [tuple(s.shape) for s in p.inputs] == [(4096, 393216)]
    assert [tuple(s.shape) for s in p.outputs] == [(4096, 393216)]
    assert p.outputs_at_main
    assert p.footprint["inputs_bytes"] == 4096 * 393216 * 4
    assert p.footprint["total_bytes"] == 2 * 4096 * 393216 * 4
    assert p.probe_constants and p.probe_constants["batch_size"] * p.probe_constants["dim"] < 4096 * 393216


def test_explicit_cpu_tensors_in_forward_are_not_allocated(tmp_path: Path):
    p = load_torch_problem(write(tmp_path, "explicit_cpu.py", EXPLICIT_CPU), timeout_s=120)
    # Were the bias allocated, the loader (bounded to 3/4 of the machine's memory) would
    # hold 6.4 GB for it; the shapes come from fake tensors instead.
    assert [tuple(s.shape) for s in p.outputs] == [(4096, 393216)] and p.outputs_at_main
    assert p.footprint["outputs_bytes"] == 4096 * 393216 * 4


def test_a_data_dependent_model_loads_at_probe_constants_with_an_estimated_footprint(tmp_path: Path):
    p = load_torch_problem(write(tmp_path, "item.py", ITEM), timeout_s=120)
    assert p.probe_constants  # checked on data at smaller sizes
    assert not p.outputs_at_main  # output shapes are the probe run's
    assert [tuple(s.shape) for s in p.inputs] == [(4096, 393216)]  # known without data
    assert p.footprint["inputs_bytes"] == 4096 * 393216 * 4
    assert p.footprint.get("estimated") == 1
    assert p.footprint["total_bytes"] == pytest.approx(2 * 4096 * 393216 * 4, rel=0.01)
    assert any("scaled by the inputs' bytes" in w for w in p.warnings), p.warnings


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_optimize_a_level1_sized_problem_ends_no_device_without_being_killed(tmp_path: Path):
    if cuda_device_status()[0]:
        pytest.skip("a CUDA device is present: the GPU tests evaluate such problems there")
    path = write(tmp_path, "relu.py", RELU)
    proc = cli("optimize", str(path), "--turns", "1", "--json", "--yes", cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert "no CUDA device" in proc.stderr and "killed" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert [t["status"] for t in doc["turns"]] == ["no_device"]
    assert doc["output"] is None
