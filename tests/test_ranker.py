"""Ranker (issue 7): pairs, features, pairwise model, checkpoints and the three commands.

All data here is synthetic (written by the tests); no H200 measurement is involved.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.ranker import features as F
from cudaperf_cli.ranker import model as M
from cudaperf_cli.ranker import pairs as P
from cudaperf_cli.ranker import train as T
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]


def kernel_source(tag: str, block: int = 256, unroll: bool = False, shared: bool = False) -> str:
    """A small, valid CUDA file; ``tag`` makes sources distinct."""
    body = "b[i] = a[i] * 2.0f;"
    if shared:
        body = "__shared__ float t[256]; t[threadIdx.x] = a[i]; __syncthreads(); b[i] = t[threadIdx.x];"
    pragma = "#pragma unroll\n" if unroll else ""
    return (
        f"// {tag}\n"
        "__global__ void k(const float* __restrict__ a, float* b, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"  {pragma}for (int r = 0; r < 1; ++r) {{ if (i < n) {{ {body} }} }}\n"
        "}\n"
        f'extern "C" void run(const float* a, float* b, int n) {{ k<<<(n + {block - 1}) / {block}, {block}>>>(a, b, n); }}\n'
    )


def row(problem: str, source: str, status: str, gpu_ms=None, iqr=None, registers=None) -> dict:
    return {
        "schema_version": 1, "suite": "s", "problem": problem, "file": problem, "kind": "c",
        "function": "f", "status": status, "correct": status == "correct", "source": source,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(), "gpu_ms": gpu_ms,
        "gpu_ms_iqr": iqr, "registers": registers, "spill_bytes": 0 if registers else None,
        "structure_score": None,
    }


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def candidates(tmp_path: Path) -> Path:
    """Two problems.  p1: correct at 1.0 (iqr .02), 1.03 (iqr .02: within noise of 1.0),
    2.0 (iqr .1), a duplicate of the first, one wrong, one compile error, one no_device.
    p2: correct at 1.0 (iqr .01) and 1.04 (iqr .005: outside the IQRs, inside the 5% margin),
    3.0 (no iqr), one wrong."""
    s = [kernel_source(f"s{i}") for i in range(10)]
    rows = [
        row("p1.c", s[0], "correct", 1.0, 0.02, 32),
        row("p1.c", s[1], "correct", 1.03, 0.02, 40),
        row("p1.c", s[2], "correct", 2.0, 0.1, 64),
        row("p1.c", s[0], "correct", 5.0, 0.02, 32),  # same source again: kept once (the first)
        row("p1.c", s[3], "wrong"),
        row("p1.c", s[4], "compile_error"),
        row("p1.c", s[5], "no_device"),
        row("p2.c", s[6], "correct", 1.0, 0.01, 20),
        row("p2.c", s[7], "correct", 1.04, 0.005, 30),
        row("p2.c", s[8], "correct", 3.0, None, 30),
        row("p2.c", s[9], "wrong"),
    ]
    return write_jsonl(tmp_path / "candidates.jsonl", rows)


# ----------------------------------------------------------------------------- pairs


def test_noise_rule_and_margin():
    def cand(t, iqr):
        return P.Candidate("p", "g", "x", "h", "correct", t, iqr, None, None, None, "o")

    assert P.speed_gap(cand(1.0, 0.1), cand(1.15, 0.1), 0.05) is None  # 0.15 <= 0.2: noise
    assert P.speed_gap(cand(1.0, 0.01), cand(1.04, 0.01), 0.05) is None  # outside IQRs, under 5%
    assert P.speed_gap(cand(1.0, 0.01), cand(1.04, 0.01), 0.0) == pytest.approx(math.log(1.04))
    assert P.speed_gap(cand(2.0, 0.1), cand(1.0, 0.1), 0.05) == pytest.approx(math.log(2.0))
    assert P.speed_gap(cand(1.0, None), cand(2.0, 0.1), 0.05) is None  # no IQR: no speed pair


def test_pairs_from_candidates(candidates: Path):
    cands = P.read_candidates_file(candidates)
    pairs, stats = P.build_pairs(cands, min_margin=0.05, with_features=False)
    assert stats.duplicates == 1
    speed = [p for p in pairs if p["kind"] == "speed"]
    corr = [p for p in pairs if p["kind"] == "correctness"]
    # p1: (1.0, 2.0) and (1.03, 2.0); (1.0, 1.03) is within noise.  p2: none.
    assert len(speed) == 2 and all(p["problem"] == "p1.c" for p in speed)
    for p in speed:
        ta, tb = p["a"]["gpu_ms"], p["b"]["gpu_ms"]
        assert p["margin"] == pytest.approx(math.log(max(ta, tb) / min(ta, tb)))
        assert p["label"] == (1 if ta < tb else 0)
        assert p["a"]["source_sha256"] < p["b"]["source_sha256"]
    assert sorted(round(p["margin"], 6) for p in speed) == sorted(
        [round(math.log(2.0), 6), round(math.log(2.0 / 1.03), 6)])
    assert stats.within_noise == 1 + 1  # p1's (1.0, 1.03) and p2's (1.0, 1.04)
    assert stats.untimed == 1  # p2's 3.0 without an IQR
    # correctness: p1 3 correct x (wrong, compile_error) = 6; p2 3 correct x 1 wrong = 3
    assert len(corr) == 9
    for p in corr:
        good = p["a"] if p["label"] == 1 else p["b"]
        bad = p["b"] if p["label"] == 1 else p["a"]
        assert good["status"] == "correct" and bad["status"] in P.INCORRECT
        assert p["margin"] is None
    assert not any("no_device" in (p["a"]["status"], p["b"]["status"]) for p in pairs)


def test_pairs_only_within_one_input(tmp_path: Path):
    a, b = kernel_source("a"), kernel_source("b")
    f1 = write_jsonl(tmp_path / "one.jsonl", [row("p.c", a, "correct", 1.0, 0.01)])
    f2 = write_jsonl(tmp_path / "two.jsonl", [row("p.c", b, "correct", 9.0, 0.01)])
    cands, n = P.read_inputs([f1, f2])
    pairs, _ = P.build_pairs(cands, with_features=False)
    assert n == 2 and pairs == []  # measured in different inputs: not comparable


def test_run_folder_input(tmp_path: Path):
    run = tmp_path / "runs" / "matmul-kernel_matmul-20250101-000000"
    run.mkdir(parents=True)
    (run / "problem.json").write_text(json.dumps({"file": "/x/matmul.c", "function": "kernel_matmul"}))
    recs = [
        {"turn": 0, "status": "correct", "source": kernel_source("r0"), "gpu_ms": 1.0, "gpu_ms_iqr": 0.01,
         "build": {"resources": [{"registers": 30, "spill_store_bytes": 4, "spill_load_bytes": 4}]}},
        {"turn": 1, "status": "correct", "source": kernel_source("r1"), "gpu_ms": 2.0, "gpu_ms_iqr": 0.01},
    ]
    write_jsonl(run / "turns.jsonl", recs)
    cands, n = P.read_inputs([tmp_path])
    assert n == 1 and {c.problem for c in cands} == {"matmul.c:kernel_matmul"}
    assert cands[0].registers == 30 and cands[0].spill_bytes == 8
    pairs, _ = P.build_pairs(cands)
    assert len(pairs) == 1 and pairs[0]["margin"] == pytest.approx(math.log(2.0))
    fast = pairs[0]["a"] if pairs[0]["label"] == 1 else pairs[0]["b"]
    assert fast["features"]["registers"] == 30


def test_split_by_problem_never_by_pair():
    pairs = [{"problem": f"p{i % 7}"} for i in range(70)]
    tr, te, trp, tep = P.split_by_problem(pairs, test_fraction=0.3, seed=3)
    assert set(trp).isdisjoint(tep) and len(tep) == 2 and len(trp) == 5
    assert {pairs[i]["problem"] for i in te} == set(tep)
    assert {pairs[i]["problem"] for i in tr} == set(trp)
    assert sorted(tr + te) == list(range(70))
    assert P.split_by_problem(pairs, test_fraction=0.3, seed=3) == (tr, te, trp, tep)
    with pytest.raises(CudaperfError):
        P.split_by_problem([{"problem": "only"}] * 20)


# ----------------------------------------------------------------------------- features


def test_features_of_two_sources():
    plain = F.source_features(kernel_source("x", block=128), registers=24, spill_bytes=0)
    tiled = F.source_features(kernel_source("y", block=256, unroll=True, shared=True))
    assert list(plain) == list(F.FEATURE_NAMES) and len(set(F.FEATURE_NAMES)) == len(F.FEATURE_NAMES)
    assert plain["block_threads"] == 128 and tiled["block_threads"] == 256
    assert plain["registers"] == 24 and math.isnan(tiled["registers"])
    assert plain["n_kernels"] == 1 and plain["n_loops"] == 1 and plain["n_restrict"] == 1
    assert plain["n_syncthreads"] == 0 and tiled["n_syncthreads"] == 1
    assert plain["n_shared_decls"] == 0 and tiled["n_shared_decls"] == 1
    assert tiled["n_unroll_pragmas"] == 1
    assert 0.0 <= plain["structure_score"] <= 1.0
    assert plain["score_coalescing"] == 1.0  # a[i], b[i] with i = blockIdx.x*blockDim.x+threadIdx.x
    assert plain["value_synchronization"] == 0 and tiled["value_synchronization"] >= 1
    assert plain["source_bytes"] == len(kernel_source("x", block=128).encode())
    assert len(F.vector(plain)) == len(F.FEATURE_NAMES)


def test_counts_ignore_comments_and_strings():
    src = ('// __syncthreads(); atomicAdd(x, 1); float4\n/* for (;;) */\nconst char* s = "__shared__";\n'
           "__global__ void k(float4* p, int* c) { atomicAdd(c, 1); __syncthreads(); }\n")
    f = F.source_features(src)
    assert f["n_atomics"] == 1 and f["n_syncthreads"] == 1 and f["n_vector_types"] == 1
    assert f["n_loops"] == 0 and f["n_shared_decls"] == 0


# ----------------------------------------------------------------------------- model


def synthetic_candidates(tmp_path: Path, problems: int = 8, per_problem: int = 6, seed: int = 1) -> Path:
    """Candidates whose time is a known function of a feature: fewer registers is faster
    (time = registers / 10 ms, IQR 1%); block size and unrolling vary independently."""
    rng = random.Random(seed)
    rows = []
    for p in range(problems):
        regs = rng.sample([int(16 * 1.1 ** k) for k in range(25)], per_problem)  # >= 6% apart
        for j, r in enumerate(regs):
            src = kernel_source(f"p{p}c{j}", block=rng.choice([64, 128, 256, 512]), unroll=rng.random() < 0.5)
            rows.append(row(f"prob{p}.c", src, "correct", r / 10.0, r / 1000.0, r))
    return write_jsonl(tmp_path / "candidates.jsonl", rows)


def test_training_learns_a_known_rule(tmp_path: Path):
    cands = P.read_candidates_file(synthetic_candidates(tmp_path))
    pairs, stats = P.build_pairs(cands)
    assert stats.speed_pairs == 8 * 15  # every pair of 6 differs by > IQRs and > 5%
    labels = [p["label"] for p in pairs]
    assert 0 < sum(labels) < len(labels)  # both orientations present
    res = T.train(pairs, test_fraction=0.25, seed=0)
    m = res.metrics
    assert m["problems"] == 2 and m["pairs"] == 30 and m["train_problems"] == 6
    assert m["accuracy"] >= 0.9 > 0.5  # measured here: 0.93 (seed 0)
    for k, p in enumerate(pairs):  # two families of 4 problems: the counts stay problems
        p.update(family=f"fam{int(p['problem'][4:].split('.')[0]) % 2}", problem_kind="c")
    by_family = T.train(pairs, test_fraction=0.5, seed=0, split_by="family").metrics
    assert by_family["train_problems"] == 4 and by_family["problems"] == 4
    assert m["baselines"]["fewer_registers"]["accuracy"] == 1.0  # the rule itself
    assert 0.0 <= m["calibration"]["brier"] < 0.25
    assert sum(b["n"] for b in m["calibration"]["bins"]) == 30
    assert res.ranker.weights()["registers"] < 0  # more registers in a: a less likely better


def test_training_on_shuffled_labels_is_not_better_than_chance(tmp_path: Path):
    cands = P.read_candidates_file(synthetic_candidates(tmp_path, problems=12, seed=5))
    pairs, _ = P.build_pairs(cands)
    rng = random.Random(0)
    for p in pairs:
        p["label"] = rng.randint(0, 1)
    m = T.train(pairs, test_fraction=0.5, seed=0).metrics
    assert m["accuracy"] < 0.75  # nothing to learn: the known-rule accuracy is not an artefact


def test_symmetry_and_checkpoint_round_trip(tmp_path: Path):
    cands = P.read_candidates_file(synthetic_candidates(tmp_path))
    pairs, _ = P.build_pairs(cands)
    res = T.train(pairs, seed=0)
    fa, fb, _ = T.pair_matrices(pairs)
    fa[0, F.FEATURE_NAMES.index("registers")] = np.nan  # a missing value on one side
    p_ab = res.ranker.predict_proba(fa, fb)
    p_ba = res.ranker.predict_proba(fb, fa)
    np.testing.assert_allclose(p_ab, 1.0 - p_ba, atol=1e-12)
    np.testing.assert_allclose(res.ranker.predict_proba(fa[1], fa[1]), [0.5])
    data = tmp_path / "pairs.jsonl"
    P.write_pairs(pairs, data)
    ckpt = M.save(res.ranker, tmp_path / "ckpt", T.metadata(res, data, test_fraction=0.25, seed=0, pairs=len(pairs)))
    loaded, meta = M.load(ckpt)
    np.testing.assert_allclose(loaded.predict_proba(fa, fb), p_ab)
    assert meta["feature_names"] == list(F.FEATURE_NAMES)
    assert meta["data"]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert meta["metrics"]["accuracy"] == res.metrics["accuracy"]
    assert {"scikit-learn", "numpy", "cudaperf"} <= set(meta["versions"]) and meta["created"]
    meta["features_version"] = -1
    (ckpt / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(CudaperfError, match="features version"):
        M.load(ckpt)


def test_baselines_and_accuracy_credit():
    pair = {"a": {"structure_score": 0.9, "registers": 40}, "b": {"structure_score": 0.5, "registers": 32}, "label": 1}
    assert M.baseline_structure(pair) == 1 and M.baseline_registers(pair) == 0
    tie = {"a": {"registers": 32}, "b": {"registers": 32}}
    assert M.baseline_registers(tie) is None and M.baseline_structure(tie) is None
    assert M.accuracy([1, 0, None], [1, 1, 0]) == pytest.approx(0.5)


def test_too_little_data():
    few = [{"problem": f"p{i % 2}", "label": 1, "kind": "speed", "a": {}, "b": {}} for i in range(9)]
    with pytest.raises(CudaperfError, match="too little data"):
        T.train(few)
    one = [{"problem": "p", "label": 1, "kind": "speed", "a": {}, "b": {}}] * 50
    with pytest.raises(CudaperfError, match="1 problem"):
        T.check_enough(one)


# ----------------------------------------------------------------------------- commands


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=REPO, env=env)


def one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert len(lines) <= 2 and all(not ln.startswith("Traceback") for ln in lines)


def test_cli_pairs_train_rank(tmp_path: Path):
    synthetic_candidates(tmp_path)
    out = tmp_path / "pairs.jsonl"
    proc = cli("data", "pairs", str(tmp_path), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["speed_pairs"] == 120 and doc["problems"] == 8 and len(out.read_text().splitlines()) == 120
    ckpt = tmp_path / "ck"
    proc = cli("train", "ranker", "--data", str(out), "-o", str(ckpt))
    assert proc.returncode == 0, proc.stderr
    assert "pairwise accuracy: ranker" in proc.stdout and "fewer registers" in proc.stdout
    assert "calibration: Brier" in proc.stdout
    assert (ckpt / "model.joblib").is_file() and (ckpt / "metadata.json").is_file()
    a, b = tmp_path / "a.cu", tmp_path / "b.cu"
    a.write_text(kernel_source("a", block=64))
    b.write_text(kernel_source("b", block=512, unroll=True))
    proc = cli("rank", str(a), str(b), "--checkpoint", str(ckpt), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert 0.0 <= r["p_a_better"] <= 1.0 and r["better"] in (str(a), str(b))
    back = json.loads(cli("rank", str(b), str(a), "--checkpoint", str(ckpt), "--json").stdout)
    assert back["p_a_better"] == pytest.approx(1.0 - r["p_a_better"])
    proc = cli("rank", str(a), str(b), "--checkpoint", str(ckpt))
    assert proc.returncode == 0 and " is better than " in proc.stdout and len(proc.stdout.splitlines()) == 1


def test_cli_errors(tmp_path: Path, candidates: Path):
    one_line_error(cli("data", "pairs", str(tmp_path / "missing"), "-o", str(tmp_path / "x.jsonl")), "no such file")
    one_line_error(cli("train", "ranker", "--data", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "c")),
                   "no such pairs file")
    small = tmp_path / "small.jsonl"
    assert cli("data", "pairs", str(candidates), "-o", str(small)).returncode == 0  # 11 pairs, 2 problems
    few = tmp_path / "few.jsonl"
    few.write_text("".join(small.read_text().splitlines(keepends=True)[:5]))
    one_line_error(cli("train", "ranker", "--data", str(few), "-o", str(tmp_path / "c")), "too little data")
    one_line_error(cli("train", "ranker", "--data", str(small), "--kind", "nope", "-o", str(tmp_path / "c")),
                   "unknown --kind")  # --kind lm: tests/test_ranker_lm.py
    a = tmp_path / "a.cu"
    a.write_text(kernel_source("a"))
    one_line_error(cli("rank", str(a), str(a), "--checkpoint", str(tmp_path / "nockpt")), "no ranker checkpoint")
    one_line_error(cli("rank", str(a), str(tmp_path / "nope.cu"), "--checkpoint", str(tmp_path)), "no such file")


def test_cross_validation_by_problem_predicts_every_pair_once(tmp_path: Path):
    cands = P.read_candidates_file(synthetic_candidates(tmp_path, problems=6))
    pairs, _ = P.build_pairs(cands)
    folds = P.problem_folds(pairs, 3, seed=0)
    assert sorted(p for f in folds for p in f) == sorted({p["problem"] for p in pairs})  # disjoint, complete
    seen: list[list[str]] = []

    def fit(fold):
        seen.append(fold)
        res = T.train(pairs, seed=0, test_problems=fold)
        assert set(res.test_problems) == set(fold) and not set(res.train_problems) & set(fold)
        return res

    cv = T.cross_validate(pairs, 3, 0, fit)
    assert seen == folds and cv["pairs"] == len(pairs) == 6 * 15 and cv["problems"] == 6
    assert cv["folds"] == 3 and len(cv["fold_accuracy"]) == 3
    assert cv["accuracy"] >= 0.9  # the known rule (fewer registers) is learnt on every fold
    assert cv["baselines"]["fewer_registers"]["accuracy"] == 1.0
    with pytest.raises(CudaperfError, match="--cv 7: needs 2 to 6 folds"):
        P.problem_folds(pairs, 7)


def test_cli_cv_line(tmp_path: Path):
    synthetic_candidates(tmp_path)
    out = tmp_path / "pairs.jsonl"
    assert cli("data", "pairs", str(tmp_path), "-o", str(out)).returncode == 0
    proc = cli("train", "ranker", "--data", str(out), "-o", str(tmp_path / "ck"), "--cv", "4")
    assert proc.returncode == 0, proc.stderr
    assert "cross-validated by problem (4 folds" in proc.stdout and "120 pairs of 8 problem(s)" in proc.stdout
    meta = json.loads((tmp_path / "ck" / "metadata.json").read_text())
    assert meta["metrics"]["cv"]["folds"] == 4 and meta["metrics"]["cv"]["pairs"] == 120
    one_line_error(cli("train", "ranker", "--data", str(out), "-o", str(tmp_path / "ck2"), "--cv", "9"),
                   "--cv 9: needs 2 to 8 folds")


def test_damaged_inputs_are_one_line(tmp_path: Path):
    """Robustness: a damaged checkpoint, non-CUDA files to rank, a corrupt candidates line,
    -o naming an input, -o a file: one line, exit 2, nothing overwritten."""
    synthetic_candidates(tmp_path)
    cands = tmp_path / "candidates.jsonl"
    pairs = tmp_path / "pairs.jsonl"
    assert cli("data", "pairs", str(cands), "-o", str(pairs)).returncode == 0
    ckpt = tmp_path / "ck"
    assert cli("train", "ranker", "--data", str(pairs), "-o", str(ckpt)).returncode == 0
    a, b = tmp_path / "a.cu", tmp_path / "b.cu"
    a.write_text(kernel_source("a"))
    b.write_text(kernel_source("b", unroll=True))
    for name, content in (("empty.cu", b""), ("bin.cu", b"\x7fELF\x00\x01\x02"), ("bad.cu", b"\xff\xfe kernel"),
                          ("host.cu", b"int main() { return 0; }\n")):
        (tmp_path / name).write_bytes(content)
        want = {"empty.cu": "empty file", "host.cu": "no __global__"}.get(name, "not a text file")
        one_line_error(cli("rank", str(tmp_path / name), str(b), "--checkpoint", str(ckpt)), want)
    model = ckpt / "model.joblib"
    model.write_bytes(model.read_bytes()[:200])
    one_line_error(cli("rank", str(a), str(b), "--checkpoint", str(ckpt)), "not a readable ranker model")
    before = cands.read_bytes()
    one_line_error(cli("data", "pairs", str(cands), "-o", str(cands), "--force"), "is also an input")
    assert cands.read_bytes() == before
    lines = before.decode().splitlines()
    bad = tmp_path / "bad" / "candidates.jsonl"
    bad.parent.mkdir()
    bad.write_text("\n".join(lines[:5] + ["{not json"] + lines[5:]) + "\n")
    one_line_error(cli("data", "pairs", str(bad), "-o", str(tmp_path / "p2.jsonl")), "candidates.jsonl:6: not a JSON line")
    bad.write_text("\n".join(lines) + '\n{"schema_version": 1, "prob')  # a killed writer's last line: skipped
    assert cli("data", "pairs", str(bad), "-o", str(tmp_path / "p3.jsonl")).returncode == 0
    (tmp_path / "afile").write_text("x")
    one_line_error(cli("train", "ranker", "--data", str(pairs), "-o", str(tmp_path / "afile"), "--force"), "is a file")
    one_line_error(cli("train", "ranker", "--data", str(pairs), "-o", str(tmp_path / "afile" / "sub")), "is a file")


def test_huge_feature_values_do_not_overflow():
    fa = np.full((4, len(F.FEATURE_NAMES)), 1e308)
    fb = -fa
    r = M.PairwiseRanker().fit(np.vstack([fa, fb]), np.vstack([fb, fa]), np.array([1, 1, 1, 1, 0, 0, 0, 0]))
    np.testing.assert_allclose(r.predict_proba(fa[:1], fb[:1]), [0.5])  # an infinite difference is no evidence


def test_split_by_family_keeps_each_family_on_one_side():
    """Pairs of cudaperf data measure carry family and problem_kind: --split-by family never
    puts a family (of one kind) on both sides, in the split and in cross-validation folds."""
    pairs = [{"problem": f"c/f{i % 5}_{i % 11:05d}.c", "family": f"f{i % 5}", "problem_kind": "c"}
             for i in range(110)]
    pairs += [{"problem": f"torch/f0_{i:05d}.py", "family": "f0", "problem_kind": "torch"} for i in range(10)]
    assert P.group_of(pairs[0], "family") == "c/f0" and P.group_of(pairs[-1], "family") == "torch/f0"
    tr, te, trg, teg = P.split_by_problem(pairs, test_fraction=0.3, seed=1, by="family")
    assert set(trg).isdisjoint(teg) and teg
    assert {P.group_of(pairs[i], "family") for i in te} == set(teg)
    assert {P.group_of(pairs[i], "family") for i in tr} == set(trg)
    folds = P.problem_folds(pairs, 3, seed=0, by="family")
    assert sorted(g for f in folds for g in f) == sorted({P.group_of(p, "family") for p in pairs})
    with pytest.raises(CudaperfError, match="family"):
        P.group_of({"problem": "x"}, "family")
    with pytest.raises(CudaperfError, match="--split-by"):
        P.group_of(pairs[0], "size")


def test_pairs_read_gzipped(tmp_path):
    import gzip

    pair = {"schema_version": P.SCHEMA_VERSION, "problem": "p", "label": 1, "kind": "speed", "a": {}, "b": {}}
    plain = tmp_path / "pairs.jsonl"
    P.write_pairs([pair], plain)
    packed = tmp_path / "pairs.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert P.read_pairs(packed) == P.read_pairs(plain)
    (tmp_path / "bad.jsonl.gz").write_text("not gzip")
    with pytest.raises(CudaperfError, match="cannot read"):
        P.read_pairs(tmp_path / "bad.jsonl.gz")
    plain.unlink()
    with pytest.raises(CudaperfError) as exc:  # the .gz beside a missing plain file is named
        P.read_pairs(plain)
    assert exc.value.hint == f"did you mean {packed}? (gzipped pairs are read as they are)"
