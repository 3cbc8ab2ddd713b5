"""Language-model ranker (``cudaperf train ranker --kind lm``), CPU smoke tests.

The base model is the tiny randomly initialised one built from a config, with a tokenizer
trained on the pairs: nothing is downloaded.  All data is synthetic: in each problem the
fast kernels stage through ``__shared__`` float4 tiles and the slow ones do not, so the
better side is visible in the text.  The commands run in this process (typer's CliRunner)
so that torch, transformers and trl are imported once; the missing-library case runs in a
subprocess.  Skipped when torch, transformers, tokenizers, trl,
datasets or accelerate cannot be imported (``pip install 'cudaperf[train]'``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from cudaperf_cli.core import install_hint

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.ranker import pairs as P
from tests.conftest import run_cli

MISSING = [m for m in ("torch", "transformers", "tokenizers", "trl", "datasets", "accelerate")
           if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"LM ranker libraries not installed: {', '.join(MISSING)}")

REPO = Path(__file__).resolve().parents[1]
PROBLEMS = 8
# Few steps: 90 training pairs, batch 16, 2 epochs = 12 steps; 128 tokens a text.
TRAIN_FLAGS = ("--kind", "lm", "--epochs", "2", "--batch-size", "16", "--max-length", "128", "--seed", "0")


def kernel(tag: str, fast: bool, wrong: bool = False) -> str:
    if wrong:
        body = "b[i + 1] = a[i];"
    elif fast:
        body = ("__shared__ float4 tile[64];\n    tile[threadIdx.x] = reinterpret_cast<const float4*>(a)[i];\n"
                "    __syncthreads();\n    reinterpret_cast<float4*>(b)[i] = tile[threadIdx.x];")
    else:
        body = "b[i] = a[i] * 2.0f;"
    return (f"// {tag}\n__global__ void k(const float* a, float* b, int n) {{\n"
            f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {{\n    {body}\n  }}\n}}\n")


def synthetic_pairs(path: Path, problems: int = PROBLEMS) -> Path:
    """Per problem: 3 fast correct kernels (1.00-1.04 ms, within each other's noise), 3 slow
    ones (3.0-3.1 ms) and one wrong one: 9 speed + 6 correctness pairs."""
    cands = []
    for p in range(problems):
        prob = f"prob{p}.c"
        rows = [(kernel(f"p{p} fast {j}", True), "correct", 1.0 + 0.02 * j, 0.05, 40) for j in range(3)]
        rows += [(kernel(f"p{p} slow {j}", False), "correct", 3.0 + 0.05 * j, 0.1, 24) for j in range(3)]
        rows += [(kernel(f"p{p} wrong", False, wrong=True), "wrong", None, None, None)]
        for src, status, ms, iqr, regs in rows:
            cands.append(P.Candidate(prob, f"in::{prob}", src, hashlib.sha256(src.encode()).hexdigest(), status,
                                     ms, iqr, regs, 0 if regs else None, None, f"in:{len(cands) + 1}"))
    pairs, stats = P.build_pairs(cands, with_features=False)
    assert (stats.speed_pairs, stats.correctness_pairs) == (9 * problems, 6 * problems)
    P.write_pairs(pairs, path)
    return path


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str) -> Result:
    """``cudaperf ARGS...`` in this process."""
    from typer.testing import CliRunner

    from cudaperf_cli.cli.main import app

    r = CliRunner().invoke(app, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return Result(r.exit_code, r.stdout, r.stderr)


def cli_subprocess(*args: str, env: dict | None = None) -> Result:
    proc = run_cli(*args, cwd=REPO, env=env)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def one_line_error(proc: Result, needle: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert len(lines) <= 2 and all(not ln.startswith("Traceback") for ln in lines), proc.stderr


@pytest.fixture(scope="module", autouse=True)
def _restore_environment():
    """The LM ranker sets HF_HUB_OFFLINE & co. (setdefault) in this process: undo it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """One training run through the CLI (``--json``), shared by the tests below."""
    tmp = tmp_path_factory.mktemp("lm")
    data = synthetic_pairs(tmp / "pairs.jsonl")
    ckpt = tmp / "ck"
    proc = cli("train", "ranker", "--data", str(data), *TRAIN_FLAGS, "-o", str(ckpt), "--json")
    assert proc.returncode == 0, proc.stderr
    return {"tmp": tmp, "data": data, "ckpt": ckpt, "proc": proc}


def test_train_lm_checkpoint_and_metrics(trained):
    proc, ckpt, data = trained["proc"], trained["ckpt"], trained["data"]
    doc = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert doc["checkpoint"] == str(ckpt) and doc["model_kind"] == "lm"
    assert doc["pairs"] == 30 and doc["problems"] == 2 and doc["train_pairs"] == 90 and doc["train_problems"] == 6
    for x in (doc["accuracy"], *(b["accuracy"] for b in doc["baselines"].values()),
              *(row["accuracy"] for row in doc["by_kind"].values())):
        assert 0.0 <= x <= 1.0
    assert set(doc["by_kind"]) == {"speed", "correctness"}
    assert set(doc["baselines"]) == {"higher_structure_score", "fewer_registers"}
    cal = doc["calibration"]
    assert 0.0 <= cal["brier"] <= 1.0 and sum(b["n"] for b in cal["bins"]) == 30
    assert "training (lm)" not in proc.stderr  # no bar in --json mode

    assert (ckpt / "metadata.json").is_file() and (ckpt / "config.json").is_file()
    assert (ckpt / "model.safetensors").is_file() and (ckpt / "tokenizer.json").is_file()
    meta = json.loads((ckpt / "metadata.json").read_text())
    assert meta["kind"] == "cudaperf-ranker" and meta["schema_version"] == 1 and meta["model_kind"] == "lm"
    assert meta["base_model"]["name"] == "tiny"
    assert meta["base_model"]["config"]["num_hidden_layers"] == 2
    assert meta["base_model"]["config"]["max_position_embeddings"] == 128
    assert meta["data"] == {"path": str(data), "sha256": hashlib.sha256(data.read_bytes()).hexdigest(), "pairs": 120}
    assert meta["split"]["by"] == "problem" and len(meta["split"]["test_problems"]) == 2
    assert set(meta["split"]["train_problems"]).isdisjoint(meta["split"]["test_problems"])
    assert meta["metrics"]["accuracy"] == doc["accuracy"]
    t = meta["training"]
    assert (t["epochs"], t["batch_size"], t["max_length"], t["margin"], t["learning_rate"]) == (2, 16, 128, "speedup", 1e-3)
    assert t["correctness_margin"] == 1.0 and t["steps"] == 12 and t["device"] == "cpu" and t["bf16"] is False
    assert {"cudaperf", "trl", "transformers", "torch"} <= set(meta["versions"])


def test_rank_with_lm_checkpoint(trained):
    tmp, ckpt = trained["tmp"], trained["ckpt"]
    a, b = tmp / "a.cu", tmp / "b.cu"
    a.write_text(kernel("new fast", True))
    b.write_text(kernel("new slow", False))
    proc = cli("rank", str(a), str(b), "--checkpoint", str(ckpt), "--problem", "prob9.c", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert 0.0 <= r["p_a_better"] <= 1.0 and r["better"] in (str(a), str(b)) and r["model_kind"] == "lm"
    back = json.loads(cli("rank", str(b), str(a), "--checkpoint", str(ckpt), "--problem", "prob9.c",
                          "--json").stdout)
    assert abs(r["p_a_better"] + back["p_a_better"] - 1.0) <= 1e-6
    proc = cli("rank", str(a), str(b), "--checkpoint", str(ckpt))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 and " is better than " in proc.stdout and ": p = " in proc.stdout


def test_lm_ranker_in_process(trained):
    """Antisymmetry by construction, a coin flip on identical texts, and the load dispatch."""
    from cudaperf_cli.ranker import lm
    from cudaperf_cli.ranker import model as M

    ranker, meta = M.load(trained["ckpt"])
    assert isinstance(ranker, lm.LMRanker) and meta["model_kind"] == "lm"
    fast, slow = kernel("x fast", True), kernel("x slow", False)
    p = ranker.compare_sources(fast, slow, problem="prob1.c")
    assert abs(p + ranker.compare_sources(slow, fast, problem="prob1.c") - 1.0) <= 1e-12
    assert ranker.compare_sources(fast, fast) == 0.5
    texts_a = [lm.side_text("p", kernel(f"a{i}", i % 2 == 0)) for i in range(5)]
    texts_b = [lm.side_text("p", kernel(f"b{i}", i % 3 == 0)) for i in range(5)]
    pab, pba = ranker.predict_proba(texts_a, texts_b), ranker.predict_proba(texts_b, texts_a)
    assert max(abs(x + y - 1.0) for x, y in zip(pab, pba)) <= 1e-12
    long = lm.side_text("p", kernel("long", True) * 50)
    ids, cut = lm.encode(ranker.tokenizer, long, ranker.max_length)
    assert cut and len(ids) == ranker.max_length and ids[-1] == ranker.tokenizer.eos_token_id


def test_train_lm_human_output(tmp_path: Path):
    data = synthetic_pairs(tmp_path / "pairs.jsonl", problems=4)  # 60 pairs: 1 problem held out
    ckpt = tmp_path / "ck"
    proc = cli("train", "ranker", "--data", str(data), "--kind", "lm", "--epochs", "1", "--max-length", "64",
               "--margin", "none", "-o", str(ckpt))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith("lm ranker: tiny (random init, 2 layers")
    assert any(ln.startswith("pairwise accuracy: ranker ") for ln in out)
    assert any(ln.startswith("calibration: Brier ") for ln in out) and out[-1] == f"checkpoint: {ckpt}"
    assert not any(ln.lstrip().startswith("{") for ln in out)  # no trainer log dicts on stdout
    meta = json.loads((ckpt / "metadata.json").read_text())
    assert meta["training"]["margin"] == "none" and meta["training"]["correctness_margin"] is None


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft not installed")
def test_model_folder_base_with_lora(trained, tmp_path: Path):
    """``--model PATH`` (here the tiny checkpoint trained above, a local save_pretrained
    folder) with ``--lora``: the adapter is merged into the saved model."""
    data = synthetic_pairs(tmp_path / "pairs.jsonl", problems=4)
    base = str(trained["ckpt"])
    one_line_error(cli("train", "ranker", "--data", str(data), "--kind", "lm", "--model", base, "--max-length", "256",
                       "-o", str(tmp_path / "too-long")), "exceeds the 128 positions")
    ckpt = tmp_path / "ck"
    proc = cli("train", "ranker", "--data", str(data), "--kind", "lm", "--model", base, "--lora", "--epochs", "1",
               "--max-length", "128", "-o", str(ckpt), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert 0.0 <= doc["accuracy"] <= 1.0
    meta = json.loads((ckpt / "metadata.json").read_text())
    assert meta["base_model"]["name"] == base and meta["base_model"]["model_type"] == "llama"
    assert meta["training"]["lora"]["merged"] is True and meta["training"]["learning_rate"] == 1e-5
    assert "peft" in meta["versions"]
    assert not (ckpt / "adapter_config.json").exists()  # merged: a plain model folder
    from cudaperf_cli.ranker import model as M

    ranker, _ = M.load(ckpt)
    p = ranker.compare_sources(kernel("q", True), kernel("r", False))
    assert 0.0 < p < 1.0


def test_lm_errors(tmp_path: Path):
    data = synthetic_pairs(tmp_path / "pairs.jsonl", problems=4)
    one_line_error(cli("train", "ranker", "--data", str(data), "--kind", "lm", "--model", str(tmp_path / "nomodel"),
                       "-o", str(tmp_path / "c1")), "no such model folder")
    notmodel = tmp_path / "notmodel"
    notmodel.mkdir()
    (notmodel / "README").write_text("not a model\n")
    one_line_error(cli("train", "ranker", "--data", str(data), "--kind", "lm", "--model", str(notmodel),
                       "-o", str(tmp_path / "c2")), "not a model AutoModelForSequenceClassification can load")
    few = tmp_path / "few.jsonl"
    few.write_text("".join(data.read_text().splitlines(keepends=True)[:5]))
    one_line_error(cli("train", "ranker", "--data", str(few), "--kind", "lm", "-o", str(tmp_path / "c3")),
                   "too little data")
    one_line_error(cli("train", "ranker", "--data", str(data), "--model", "tiny", "-o", str(tmp_path / "c4")),
                   "only for --kind lm")
    one_line_error(cli("train", "ranker", "--data", str(data), "--kind", "lm", "--margin", "big",
                       "-o", str(tmp_path / "c5")), "unknown --margin")
    # trl "not installed": a package of that name that fails to import shadows the real one
    fake = tmp_path / "fake"
    (fake / "trl").mkdir(parents=True)
    (fake / "trl" / "__init__.py").write_text("raise ImportError('No module named trl (simulated)')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = cli_subprocess("train", "ranker", "--data", str(data), "--kind", "lm", "-o", str(tmp_path / "c6"), env=env)
    one_line_error(proc, "needs trl")
    assert install_hint("train") in proc.stderr.splitlines()[0]
    assert not (tmp_path / "c6").exists()


def test_pair_margin_and_options():
    from cudaperf_cli.ranker import lm

    opts = lm.LMOptions()
    assert lm.pair_margin({"kind": "speed", "margin": math.log(3.0)}, opts) == pytest.approx(math.log(3.0))
    assert lm.pair_margin({"kind": "correctness", "margin": None}, opts) == lm.CORRECTNESS_MARGIN
    assert lm.pair_margin({"kind": "speed", "margin": None}, opts) == 0.0
    assert lm.LMOptions().lr() == lm.DEFAULT_LR_TINY and lm.LMOptions(model=".").lr() == lm.DEFAULT_LR_PRETRAINED
    for bad in (lm.LMOptions(epochs=0), lm.LMOptions(max_length=4), lm.LMOptions(margin="x"),
                lm.LMOptions(learning_rate=-1.0), lm.LMOptions(model="/no/such/folder")):
        with pytest.raises(CudaperfError):
            bad.check()
    assert lm.side_text("gemm.c", "int x;\n") == "// problem: gemm.c\nint x;\n"
