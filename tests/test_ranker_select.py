"""Pre-ranking a turn's samples with a ranker (``cudaperf optimize --ranker``, docs/ranker.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudaperf_cli.agent.optimize import OptimizeOptions, make_ranker, rank_proposals
from cudaperf_cli.agent.store import RunStore
from cudaperf_cli.core import CudaperfError
from cudaperf_cli.policies.base import Proposal
from cudaperf_cli.ranker import model as M
from cudaperf_cli.ranker import pairs as P
from cudaperf_cli.ranker import train as T
from cudaperf_cli.ranker.select import SampleRanker, order

from tests.test_ranker import kernel_source, row, write_jsonl

REPO = Path(__file__).resolve().parents[1]


class FixedScores:
    """A stand-in ranker whose score of a source is given by a table (by a tag in it)."""

    path = Path("/fixed")

    def __init__(self, table: dict[str, float]):
        self.table = table
        self.calls: list[tuple[list[str], str]] = []

    def scores(self, sources, problem_text=""):
        self.calls.append((list(sources), problem_text))
        return [next(v for k, v in self.table.items() if k in s) for s in sources]


def test_order_is_stable_for_ties():
    assert order([0.2, 0.9, 0.5, 0.9]) == [1, 3, 2, 0]


def test_rank_proposals_orders_cuts_and_keeps_the_rest(tmp_path: Path):
    store = RunStore(tmp_path, "run")
    props = [Proposal(f"// {tag}\n__global__ void k() {{}}", f"cand {tag}", {"m": tag}, "openai")
             for tag in ("A", "B", "C", "D")]
    props.append(Proposal("", "no code", {"format_error": "no fenced block"}, "openai"))
    ranker = FixedScores({"A": 0.1, "B": 0.8, "C": 0.8, "D": 0.4})
    problem = type("Prob", (), {"path": Path("/x/gemm.c"), "function": "f"})()
    kept = rank_proposals(ranker, props, problem, turn=2, top=2, store=store)
    assert [p.description for p in kept] == ["cand B", "cand C"]  # tie keeps the policy's order
    assert kept[0].mapping == {"m": "B", "ranker": {"score": 0.8, "rank": 1, "of": 5, "checkpoint": "/fixed"}}
    assert kept[1].mapping["ranker"]["rank"] == 2
    assert ranker.calls == [([p.source for p in props[:4]], "gemm.c:f")]  # the empty one is not scored
    out = [json.loads(line) for line in (store.path / "ranked-out.jsonl").read_text().splitlines()]
    assert [(r["description"], r["rank"], r["score"], r["turn"]) for r in out] == [
        ("cand D", 3, 0.4, 2), ("cand A", 4, 0.1, 2), ("no code", 5, 0.0, 2)]
    assert out[0]["source"] == props[3].source
    everything = rank_proposals(ranker, props, problem, turn=0, top=None, store=store)
    assert [p.description for p in everything] == ["cand B", "cand C", "cand D", "cand A", "no code"]


def test_torch_candidates_are_ranked_by_their_kernel(tmp_path: Path):
    store = RunStore(tmp_path, "run")
    props = [Proposal("import torch  # model.py", f"cand {t}", {}, "openai",
                      files={"model.py": "import torch", "kernel.cu": f"// {t}\n"}) for t in ("X", "Y")]
    ranker = FixedScores({"X": 0.3, "Y": 0.7})
    kept = rank_proposals(ranker, props, type("P", (), {"path": Path("relu.py")})(), 0, 1, store)
    assert [p.description for p in kept] == ["cand Y"] and kept[0].files["kernel.cu"] == "// Y\n"


def _features_checkpoint(tmp_path: Path) -> Path:
    """A feature ranker trained on candidates where an unrolled loop is always faster."""
    rows = []
    for p in range(6):
        for j in range(4):
            unroll = j % 2 == 0
            t = 1.0 + j * 0.01 if unroll else 3.0 + j * 0.01
            rows.append(row(f"prob{p}.c", kernel_source(f"p{p}c{j}", unroll=unroll), "correct", t, t / 1000))
    pairs, _ = P.build_pairs(P.read_candidates_file(write_jsonl(tmp_path / "c.jsonl", rows)))
    res = T.train(pairs, test_fraction=0.34, seed=0)
    data = tmp_path / "pairs.jsonl"
    P.write_pairs(pairs, data)
    return M.save(res.ranker, tmp_path / "ckpt", T.metadata(res, data, test_fraction=0.34, seed=0, pairs=len(pairs)))


def test_feature_checkpoint_scores_sources(tmp_path: Path):
    ranker = make_ranker(OptimizeOptions(file=Path("x.c"), ranker=_features_checkpoint(tmp_path)))
    assert isinstance(ranker, SampleRanker) and ranker.kind == "features"
    fast, slow = kernel_source("f", unroll=True), kernel_source("s", unroll=False)
    m = ranker.p_matrix([fast, slow])
    assert m[0][1] > 0.5 and m[0][1] + m[1][0] == pytest.approx(1.0)
    s = ranker.scores([slow, fast, slow])
    assert s[1] > s[0] and s[0] == pytest.approx(s[2])
    assert ranker.scores([fast]) == [0.5]


def test_make_ranker_errors(tmp_path: Path):
    assert make_ranker(OptimizeOptions(file=Path("x.c"))) is None
    with pytest.raises(CudaperfError, match="--ranker-top needs --ranker"):
        make_ranker(OptimizeOptions(file=Path("x.c"), ranker_top=2))
    with pytest.raises(CudaperfError, match="no such folder"):
        make_ranker(OptimizeOptions(file=Path("x.c"), ranker=tmp_path / "nope"))
    with pytest.raises(CudaperfError, match="no metadata.json"):
        make_ranker(OptimizeOptions(file=Path("x.c"), ranker=tmp_path))
    (tmp_path / "metadata.json").write_text('{"kind": "cudaperf-ranker", "schema_version": 1, "model_kind": "magic"}')
    with pytest.raises(CudaperfError, match="unknown model_kind"):
        make_ranker(OptimizeOptions(file=Path("x.c"), ranker=tmp_path))


def test_optimize_with_a_ranker_evaluates_the_top_samples(tmp_path: Path):
    """End to end on the built-in policy: 4 mappings written, 2 evaluated (without a GPU
    their status is no_device), 2 in ranked-out.jsonl."""
    ckpt = _features_checkpoint(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", "optimize", str(REPO / "examples" / "matvec_row.c"),
         "--samples", "4", "--turns", "1", "--ranker", str(ckpt), "--ranker-top", "2", "--yes",
         "--run-dir", str(tmp_path / "runs"), "-o", str(tmp_path / "out.cu"), "--json"],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ}, timeout=600,
    )
    assert proc.returncode in (0, 1, 4), proc.stderr
    run = next((tmp_path / "runs").iterdir())
    records = [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines()]
    assert len(records) == 2
    assert [r["mapping"]["ranker"]["rank"] for r in records] == [1, 2]
    assert records[0]["mapping"]["ranker"]["score"] >= records[1]["mapping"]["ranker"]["score"]
    out = [json.loads(line) for line in (run / "ranked-out.jsonl").read_text().splitlines()]
    assert sorted(r["rank"] for r in out) == [3, 4] and all(r["source"] for r in out)
    assert json.loads((run / "run.json").read_text())["options"]["ranker_top"] == 2


def test_turn_line_names_the_rank():
    from cudaperf_cli.agent.loop import TurnRecord
    from cudaperf_cli.agent.render import turn_line

    r = TurnRecord(0, "builtin", "grid1d block 256", "no_device",
                   mapping={"ranker": {"score": 0.71, "rank": 1, "of": 4}}, sample=0, samples=4)
    assert turn_line(r).startswith("turn 1.1: ") and "(ranked 1 of 4, score 0.71)" in turn_line(r)


def test_ranker_top_without_ranker_is_one_line(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", "optimize", str(REPO / "examples" / "matvec_row.c"),
         "--ranker-top", "2", "--yes", "--run-dir", str(tmp_path / "runs"), "-o", str(tmp_path / "o.cu")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 2 and "--ranker-top needs --ranker" in proc.stderr
    assert "Traceback" not in proc.stderr
