"""``cudaperf train policy`` end to end (cudaperf_cli/rl/, docs/rl.md).

CPU (CI): the tiny randomly initialised model runs two GRPO steps on two bundled C
examples through the command line; the checkpoint, its metadata and the metrics file are
checked, and the checkpoint loads with ``AutoModelForCausalLM``.  Error cases of the command.
GPU (``-m gpu``, an H200): the same tiny model with recorded replies
(``examples/replies/matmul.jsonl``), so that real candidates are compiled, verified and
timed on the GPU; the checkpoint then loads in ``cudaperf optimize --policy transformers``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cudaperf_cli.core import install_hint

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd, env={"HF_HUB_OFFLINE": "1"}, timeout=timeout)


def one_error(proc: subprocess.CompletedProcess, needle: str, code: int = 2) -> None:
    assert proc.returncode == code, proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two steps of the tiny model on matmul.c and elementwise.c (CPU), with a config file."""
    base = tmp_path_factory.mktemp("train")
    problems = base / "problems"
    problems.mkdir()
    for name in ("matmul.c", "elementwise.c"):
        shutil.copy(EXAMPLES / name, problems / name)
    (problems / "notes.txt").write_text("not a problem")
    config = base / "train.toml"
    config.write_text("[train.policy]\neval_workers = 2\nmax_new_tokens = 16\n\n[reward]\ndiscount = 0.5\n")
    out = base / "ckpt"
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(problems), "-o", str(out),
               "--config", str(config), "--steps", "2", "--turns", "2", "--trajectories", "2",
               "--problems-per-step", "2")
    return proc, out, problems


def test_two_steps_on_the_cpu(trained):
    proc, out, problems = trained
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    text = proc.stdout
    assert "no GPU found" in text or "evaluating candidates on" in text
    assert "step 1/2" in text and "step 2/2" in text
    assert "mean wall time per step" in text and "generation" in text and "optimisation" in text
    for name in ("config.json", "model.safetensors", "tokenizer.json", "metadata.json", "metrics.jsonl",
                 "rollouts.jsonl"):
        assert (out / name).is_file(), name


def test_metrics_file(trained):
    _, out, _ = trained
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [ln["step"] for ln in lines] == [1, 2]
    for ln in lines:
        assert ln["samples"] == 8 and sorted(ln["problems"]) == ["elementwise:magnitude", "matmul:kernel_gemm"]
        assert [p["turn"] for p in ln["per_turn"]] == [1, 2]
        assert sum(v for v in ln["stage_share"].values()) == pytest.approx(1.0)
        assert set(ln["time_s"]) >= {"generation", "evaluation", "optimisation", "step"}
        assert ln["tokens_per_reply"]["max"] <= 16
        assert "loss" in ln["trl"]
        # TRL saw the returns the rollout computed: its mean reward is the mean of the targets
        rows = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
        targets = [r["target"] for r in rows if r["step"] == ln["step"] and r["target"] is not None]
        if targets:
            assert ln["trl"]["reward"] == pytest.approx(sum(targets) / len(targets), abs=1e-5)


def test_metadata(trained):
    _, out, problems = trained
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["base_model"] == "tiny" and meta["steps"] == 2
    assert meta["reward"]["discount"] == 0.5  # from the [reward] table
    assert meta["train"]["eval_workers"] == 2 and meta["train"]["turns"] == 2
    shas = {Path(p["path"]).name: p["sha256"] for p in meta["problems"]}
    for name in ("matmul.c", "elementwise.c"):
        assert shas[name] == hashlib.sha256((problems / name).read_bytes()).hexdigest()
    for lib in ("cudaperf", "trl", "transformers", "torch", "peft"):
        assert meta["versions"][lib]
    assert meta["completions_per_step"] == 8


def test_checkpoint_loads(trained):
    _, out, _ = trained
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert tok.chat_template and tok.eos_token == "<|end|>"
    # the training's sampling travels with the checkpoint (--policy transformers uses it)
    assert model.generation_config.max_new_tokens == 16 and model.generation_config.do_sample
    ids = tok.apply_chat_template([{"role": "user", "content": "Port this C function"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    gen = model.generate(**ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    assert gen.shape[1] >= ids["input_ids"].shape[1]


# ----------------------------------------------------------------------------- errors

def test_missing_model_folder(tmp_path):
    one_error(cli("train", "policy", "--model", str(tmp_path / "nope"), "--problems", str(EXAMPLES),
                  "-o", str(tmp_path / "o")), "no such folder")


def test_not_a_model_folder(tmp_path):
    one_error(cli("train", "policy", "--model", str(tmp_path), "--problems", str(EXAMPLES),
                  "-o", str(tmp_path / "o")), "not a model folder")


def test_empty_problems_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    one_error(cli("train", "policy", "--model", "tiny", "--problems", str(tmp_path / "empty"),
                  "-o", str(tmp_path / "o")), "no problems in")


def test_output_not_empty(tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("keep")
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(EXAMPLES / "matmul.c"),
               "-o", str(tmp_path / "o"))
    one_error(proc, "exists and is not empty")
    assert "--force" in proc.stderr


def test_bad_config(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[train.policy]\ntrajectoriez = 2\n")
    one_error(cli("train", "policy", "--model", "tiny", "--problems", str(EXAMPLES / "matmul.c"),
                  "-o", str(tmp_path / "o"), "--config", str(f)), "unknown key(s) trajectoriez")


def test_vllm_not_installed(tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    one_error(cli("train", "policy", "--model", str(tmp_path / "m"), "--problems", str(EXAMPLES / "matmul.c"),
                  "-o", str(tmp_path / "o"), "--use-vllm"), "--use-vllm needs the vllm package", code=3)


def test_vllm_needs_a_model_folder(tmp_path):
    one_error(cli("train", "policy", "--model", "tiny", "--problems", str(EXAMPLES / "matmul.c"),
                  "-o", str(tmp_path / "o"), "--use-vllm"), "--use-vllm needs a model folder")


def test_trl_not_installed(monkeypatch, tmp_path):
    import importlib.util

    from cudaperf_cli.core import CudaperfError
    from cudaperf_cli.rl import trainer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    with pytest.raises(CudaperfError, match="needs the trl package") as info:
        trainer.preflight("tiny", [EXAMPLES / "matmul.c"], tmp_path / "o", force=False, use_vllm=False,
                          lora=False)
    assert info.value.hint == install_hint("train")


def test_model_folders_that_must_not_be_trained_or_overwritten(tmp_path):
    """-o naming the --model folder (or a folder inside it, or holding it) would let --force
    delete the model being trained; a sequence classifier (a ranker) has no text head."""
    from cudaperf_cli.core import CudaperfError
    from cudaperf_cli.rl import trainer

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    for out in (model, model / "sub", tmp_path):
        with pytest.raises(CudaperfError, match="overlap"):
            trainer.preflight(str(model), [EXAMPLES / "matmul.c"], out, force=True, use_vllm=False, lora=False)
    assert (model / "config.json").is_file()
    (model / "config.json").write_text('{"architectures": ["LlamaForSequenceClassification"]}')
    with pytest.raises(CudaperfError, match="LlamaForSequenceClassification, not a causal language model"):
        trainer.preflight(str(model), [EXAMPLES / "matmul.c"], tmp_path / "o", force=False, use_vllm=False,
                          lora=False)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CudaperfError, match="afile is a file"):
        trainer.preflight("tiny", [EXAMPLES / "matmul.c"], tmp_path / "afile" / "o", force=False,
                          use_vllm=False, lora=False)


def test_force_clears_only_checkpoint_files(tmp_path):
    from cudaperf_cli.rl.trainer import clear_checkpoint

    for name in ("metadata.json", "model.safetensors", "model-00001-of-00002.safetensors", "config.json",
                 "notes.md"):
        (tmp_path / name).write_text("x")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    from cudaperf_cli.rl.trainer import RUN_LOG_NAMES

    (tmp_path / "metrics.jsonl").write_text("{}")
    clear_checkpoint(tmp_path, RUN_LOG_NAMES)  # a --force run's start: the old weights stay
    assert not (tmp_path / "metadata.json").exists() and not (tmp_path / "metrics.jsonl").exists()
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "model-00001-of-00002.safetensors").is_file()
    clear_checkpoint(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md"]


def test_recorded_replies_through_the_real_evaluator(tmp_path):
    """CPU: recorded matmul replies are really compiled with nvcc; without a GPU the compiled
    ones are no_device (no reward, excluded) and the typo is a compile error."""
    from tests.conftest import cuda_device_status

    if cuda_device_status()[0]:
        pytest.skip("a GPU is present: test_gpu_training_with_real_candidates covers this")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(EXAMPLES / "matmul.c", problems / "matmul.c")
    out = tmp_path / "ckpt"
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(problems), "-o", str(out),
               "--steps", "1", "--turns", "2", "--trajectories", "3", "--max-new-tokens", "8",
               "--replies", str(EXAMPLES / "replies" / "matmul.jsonl"))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "All reward functions returned None" not in proc.stderr  # TRL's warning is silenced
    rows = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    # call order: turn 1 of trajectories 0, 1, 2 = replies 1, 2, 3; turn 2 = replies 4, 5, 1
    assert [(r["trajectory"], r["turn"], r["status"]) for r in rows] == [
        (0, 1, "format_error"), (0, 2, "no_device"), (1, 1, "compile_error"), (1, 2, "no_device"),
        (2, 1, "no_device"), (2, 2, "format_error")]
    assert 'identifier "alpah" is undefined' in rows[2]["message"]
    # rewards: -1, None | -0.6, None | None, -1 ; returns: G1 = -1 + 0.4*0 = -1 (the excluded
    # turn counts 0), -0.6, None, -1.  Group [-1, -0.6, -1]: mean -0.866667, sample std
    # sqrt((0.017778 + 0.071111 + 0.017778)/2) = 0.230940; A = -0.577100, 1.154200, -0.577100
    assert [r["return"] for r in rows] == [-1.0, None, -0.6, None, None, -1.0]
    assert [None if r["advantage"] is None else round(r["advantage"], 4) for r in rows] == [
        -0.5771, None, 1.1542, None, None, -0.5771]
    line = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert line["stage_share"]["excluded"] == pytest.approx(0.5)
    assert line["stage_share"]["compile"] == pytest.approx(1 / 6)


TORCH_KERNEL = r"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void k(const float *__restrict__ x, float *__restrict__ y, float s, int64_t n)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f) * s;
}
extern "C" int relu_scale(const float *x, float *y, double s, int64_t n, cudaStream_t stream)
{
    if (n > 0) k<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, (float)s, n);
    return (int)cudaGetLastError();
}
"""
TORCH_MODEL = """import torch
import torch.nn as nn
from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu_scale(x, y, float(self.scale), x.numel())
        return y
"""
TORCH_CHEAT = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale
"""


def test_pytorch_problem_with_a_cheating_reply(tmp_path):
    """A PyTorch problem: an honest Format A reply, a reply where PyTorch does the work
    (rejected by the torch_fallback guard: the lowest reward) and a reply without code."""
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(EXAMPLES / "torch" / "relu_scale.py", problems / "relu_scale.py")
    replies = tmp_path / "replies.jsonl"
    replies.write_text("\n".join(json.dumps({"text": t}) for t in (
        f"Format A.\n\n```cuda\n{TORCH_KERNEL}```\n```python\n{TORCH_MODEL}```\n",
        f"```python\n{TORCH_CHEAT}```\n",
        "I would fuse the ReLU and the scale.")) + "\n")
    out = tmp_path / "ckpt"
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(problems), "-o", str(out),
               "--steps", "1", "--turns", "1", "--trajectories", "3", "--replies", str(replies))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rows = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert rows[0]["status"] in ("no_device", "correct"), rows[0]["message"]
    assert rows[1]["status"] == "guard_rejected" and rows[1]["guard"] == "torch_fallback"
    assert rows[1]["reward"] == -1.5  # guard_penalty: below the format reward
    assert rows[2]["status"] == "format_error" and rows[2]["reward"] == -1.0
    line = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert line["guard_share"] == pytest.approx(1 / 3)


# ----------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_gpu_training_with_real_candidates(tmp_path):
    """Recorded matmul replies (no code, a compile error, correct kernels, a wrong one) are
    compiled, verified and timed on the GPU during two GRPO steps of the tiny model."""
    pytest.importorskip("trl", reason="the train extra (trl, datasets, pyarrow) is not installed here")
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(EXAMPLES / "matmul.c", problems / "matmul.c")
    out = tmp_path / "ckpt"
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(problems), "-o", str(out),
               "--steps", "2", "--turns", "2", "--trajectories", "3", "--max-new-tokens", "64",
               "--replies", str(EXAMPLES / "replies" / "matmul.jsonl"))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rows = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    statuses = {r["status"] for r in rows}
    assert {"format_error", "compile_error", "correct"} <= statuses, statuses
    assert any(r["speedup_kernel"] for r in rows if r["status"] == "correct")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(ln["stage_share"]["correct"] > 0 for ln in lines)
    # the checkpoint is a policy for cudaperf optimize
    run = cli("optimize", str(EXAMPLES / "elementwise.c"), "--policy", "transformers", "--model", str(out),
              "--turns", "1", "--max-tokens", "16", "--yes", "--json", "-o", str(tmp_path / "e.cu"),
              "--run-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert run.returncode in (0, 1), run.stderr[-2000:]  # 1: the tiny model wrote no correct kernel
    summary = json.loads(run.stdout)
    assert summary["turns"] and summary["turns"][0]["status"] != "refused"
