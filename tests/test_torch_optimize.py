"""``cudaperf optimize model.py`` on the CPU: loading, model replies in both formats, the
static guards in the loop, C-only flags refused, the result folder protected.  Without a GPU
the fast format builds (nvcc) and ends ``no_device``; ``tests/test_gpu_torch_optimize.py``
verifies and times on a GPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cudaperf_cli.policies.extract import extract_torch_files, missing_torch_code_feedback
from tests.conftest import cuda_device_status
from tests.test_cli import cli, error_lines

torch = pytest.importorskip("torch")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

PROBLEM = '''import torch
import torch.nn as nn

batch_size = 64
dim = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

KERNEL = '''#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu2_kernel(const float *x, float *y, int64_t n)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = fmaxf(x[i], 0.0f) * 2.0f;
}

extern "C" int relu2(const float *x, float *y, int64_t n, cudaStream_t stream)
{
    if (n > 0)
        relu2_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
    return (int)cudaGetLastError();
}
'''

MODEL = '''import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu2(x, y, x.numel())
        return y
'''

CHEAT = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0
'''


def fast_reply(prose: str = "One thread per element.") -> str:
    return f"{prose}\n\n```cuda\n{KERNEL}```\n\n```python\n{MODEL}```\n"


def test_extracts_both_formats_and_says_what_is_missing():
    files = extract_torch_files(fast_reply())
    assert files == {"model.py": MODEL, "kernel.cu": KERNEL}
    inline = "```python\nfrom torch.utils.cpp_extension import load_inline\n" + CHEAT + "```\n"
    assert set(extract_torch_files(inline)) == {"model.py"}
    assert extract_torch_files("```cuda\n" + KERNEL + "```\n") is None
    assert "no fenced code block" in missing_torch_code_feedback("just prose")
    assert "defines `class ModelNew`" in missing_torch_code_feedback("```python\nx = 1\n```\n")


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "relu.py").write_text(PROBLEM)
    return tmp_path


def replay(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


@needs_nvcc
def test_model_replies_through_the_loop_with_guards(workdir):
    r = replay(workdir / "r.jsonl", ["no code here", f"```python\n{CHEAT}```\n", fast_reply()])
    proc = cli("optimize", "relu.py", "--policy", "replay", "--replay", str(r), "--turns", "3",
               "--json", cwd=workdir)
    gpu = cuda_device_status()[0]
    assert proc.returncode == (0 if gpu else 4), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "torch" and doc["alt_shapes"]
    statuses = [t["status"] for t in doc["turns"]]
    assert statuses == ["format_error", "guard_rejected", "correct" if gpu else "no_device"]
    assert doc["turns"][1]["guard"] == "torch_fallback"
    assert "torch.relu" in doc["turns"][1]["message"]
    run = Path(doc["run_dir"])
    run = run if run.is_absolute() else workdir / run
    lines = [json.loads(x) for x in (run / "turns.jsonl").read_text().splitlines()]
    assert lines[2]["mapping"]["files"] == {"kernel.cu": KERNEL, "model.py": MODEL}
    assert lines[2]["source"] == KERNEL  # the kernel itself, for the ranker and RL data
    assert (run / "candidates" / "turn3-sample1" / "kernel.cu").read_text() == KERNEL
    # the model saw the guard's reason in its next request (replay keeps no requests, so
    # rebuild the conversation from the records as the policy does)
    assert "was rejected" in lines[1]["feedback"]
    if gpu:
        out = workdir / "relu_cuda"
        assert (out / "model.py").is_file() and (out / "kernel.cu").is_file()
        assert doc["best"]["speedup_kernel"] is not None and doc["best"]["eager_ms"] is not None


def test_c_only_flags_and_an_existing_output_are_refused(workdir):
    proc = cli("optimize", "relu.py", "--size", "n=3", cwd=workdir)
    assert proc.returncode == 2 and "--size: for C files only" in error_lines(proc)[0]
    (workdir / "relu_cuda").mkdir()
    (workdir / "relu_cuda" / "mine.txt").write_text("keep me")
    proc = cli("optimize", "relu.py", cwd=workdir)
    assert proc.returncode == 2 and "exists and is not empty" in error_lines(proc)[0]
    assert (workdir / "relu_cuda" / "mine.txt").read_text() == "keep me"


def test_a_problem_without_get_inputs_is_one_line(workdir):
    (workdir / "bad.py").write_text(PROBLEM.replace("def get_inputs", "def get_inputz"))
    proc = cli("optimize", "bad.py", cwd=workdir)
    lines = error_lines(proc)
    assert proc.returncode == 2 and "get_inputs" in lines[0] and "Traceback" not in proc.stderr


def test_baseline_names_are_the_workers() -> None:
    from cudaperf_cli.agent.kinds.pytorch import BASELINE_COMPILE_NAME, BASELINE_EAGER_NAME
    from cudaperf_cli.evaluate.torch_job import BASELINE_COMPILE, BASELINE_EAGER

    assert (BASELINE_EAGER_NAME, BASELINE_COMPILE_NAME) == (BASELINE_EAGER, BASELINE_COMPILE)
