"""One ordered status table (``cudaperf_cli/statuses.py``) read by every stage: the loop,
the renderer, the feedback, the reward, bench's metrics and the ranker agree on it; the
``slow`` status (verified, timing stopped early) and ``does_not_fit`` (problem-level) behave
as docs/bench.md and docs/reward.md say; and no stage below the cli imports it.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from cudaperf_cli import statuses as S
from cudaperf_cli.agent import render
from cudaperf_cli.agent.feedback import feedback_for, follow
from cudaperf_cli.agent.loop import STATUSES, TurnRecord, best_index, run_loop
from cudaperf_cli.bench import metrics as M
from cudaperf_cli.ranker import pairs as P
from cudaperf_cli.reward import STAGE_OF_STATUS

PKG = Path(__file__).resolve().parents[1] / "cudaperf_cli"


def test_every_consumer_reads_the_one_table():
    assert STATUSES == S.NAMES == M.STATUS_ORDER
    assert set(render.STATUS_STYLE) == set(render.STATUS_LABEL) == set(S.NAMES)
    assert render.STATUS_LABEL["slow"] == "slow" and render.STATUS_LABEL["does_not_fit"] == "does not fit"
    assert set(STAGE_OF_STATUS) == set(S.NAMES)
    assert P.INCORRECT == S.INCORRECT and P.VERIFIED == S.VERIFIED == M.VERIFIED
    assert M.NOT_COMPILED == S.NOT_COMPILED
    for name in S.NAMES:  # every status has a label in the bench's verdict table
        assert M.status_label(name) and name in M.VERDICT_ORDER


def test_guard_rejected_ranks_above_a_compile_error():
    # bench's old order lacked guard_rejected: it ranked below a compile error
    records = [{"turn": 0, "status": "compile_error"}, {"turn": 1, "status": "guard_rejected"},
               {"turn": 2, "status": "refused"}]
    assert M.representative(records) == 1
    assert M.problem_summary(records)["status"] == "guard_rejected"
    assert M.status_rank("guard_rejected") > M.status_rank("compile_error") > M.status_rank("refused")
    assert M.status_rank("nonsense") == -1


def rec(turn: int, status: str, gpu_ms: float | None = None, speedup: float | None = None,
        sample: int = 0, **kw) -> TurnRecord:
    return TurnRecord(turn, "test", f"candidate {turn}.{sample}", status, gpu_ms=gpu_ms,
                      speedup_kernel=speedup, sample=sample, **kw)


def test_the_loop_best_is_the_fastest_verified_candidate():
    slow = rec(0, "slow", 40.0, 0.05)
    correct = rec(1, "correct", 2.0, 1.0)
    assert slow.verified and not slow.correct and correct.verified and correct.correct
    assert best_index([slow, correct]) == 1
    assert best_index([correct, rec(2, "slow", 30.0, 0.06)]) == 0  # a slow one never beats it
    assert best_index([slow, rec(1, "wrong")]) == 0  # only slow ones verified: the best of them
    assert best_index([rec(0, "slow", None), rec(1, "no_device")]) is None  # no time: not best

    outcomes = [("slow", 40.0, 0.05), ("correct", 2.0, 1.0), ("slow", 30.0, 0.07)]

    def run_turn(t, history):
        status, ms, x = outcomes[t]
        return rec(t, status, ms, x)

    res = run_loop(run_turn, turns=3, observer=render.QuietObserver())
    assert res.best_index == 1 and res.best is not None and res.best.status == "correct"


def test_slow_feedback_says_correct_and_how_much_slower():
    r = rec(2, "slow", 12.5, 0.4, slow_ref="best", slow_ref_ms=0.5, slow_factor=10.0,
            max_rel_err=3e-6, baseline="gcc -O3, 1 thread")
    text = feedback_for(r)
    assert text.startswith("Turn 3 (candidate 2.0) is correct (max relative error 3.0e-06), but")
    assert "Estimated time 12.5 ms against 0.5 ms for the best correct candidate so far: 25x slower" in text
    assert "(the limit is 10x)" in text
    assert "Estimated speedup 0.4x vs gcc -O3, 1 thread" in text
    vs_base = feedback_for(rec(0, "slow", 20.0, 0.05, slow_ref="baseline", slow_ref_ms=1.0,
                               baseline="PyTorch eager"))
    assert "for the baseline (PyTorch eager): 20x slower" in vs_base
    bare = feedback_for(rec(0, "slow", 20.0, message="stopped timing: 12x slower than the best"))
    assert "Estimated time 20 ms; stopped timing: 12x slower than the best." in bare
    line = render.turn_line(r)
    assert line.startswith("turn 3: slow (~25x slower than the best, timing stopped early); GPU ~12.5")


def test_every_status_has_feedback_and_a_turn_line():
    for name in S.NAMES:
        r = rec(0, name, 1.0 if name in S.VERIFIED else None, 2.0 if name in S.VERIFIED else None,
                message="why")
        text = feedback_for(r)
        assert text.startswith("Turn 1 (candidate 0.0)") and "None" not in text.split("\n")[0]
        assert render.turn_line(r).startswith("turn 1: ")
    assert "does not fit" in feedback_for(rec(0, "does_not_fit", message="needs 9 GB, 1 GB free"))
    hang = feedback_for(rec(0, "timeout", message="timed out after 300.0 s (limit 300 s) in the candidate call"))
    assert "look for a hang" in hang and "parallelism" not in hang
    from cudaperf_cli.evaluate.job import SLOW_STOP_TEXT

    stopped = feedback_for(rec(0, "timeout", message="config 'main' trial 0: the candidate call ran past "
                               "4.05e+04 ms (the slow limit 4.05e+04 ms, at least 1e+04 ms) and " + SLOW_STOP_TEXT))
    assert "was far too slow, or hung" in stopped and "parallelism" in stopped and "look for a hang" not in stopped


def test_follow_prefers_the_fastest_verified_sample():
    a = rec(0, "wrong", sample=0)
    b = rec(0, "slow", 30.0, 0.1, sample=1)
    c = rec(0, "correct", 2.0, 1.5, sample=2)
    for r in (a, b, c):
        r.samples = 3
        r.feedback = feedback_for(r)
    assert follow([a, b, c]) is c
    for r in (a, b):
        r.followed = False
    d, e = rec(1, "wrong", sample=0), rec(1, "slow", 30.0, 0.1, sample=1)
    for r in (d, e):
        r.samples = 2
        r.feedback = feedback_for(r)
    chosen = follow([d, e])
    assert chosen is e and "the fastest correct one" in e.turn_feedback


def test_ranker_pairs_take_slow_candidates_as_verified():
    def cand(tag: str, status: str, ms=None, iqr=None) -> P.Candidate:
        src = f"// {tag}\n__global__ void k() {{}}\n"
        return P.Candidate(problem="p", group="g", source=src,
                           sha256=hashlib.sha256(src.encode()).hexdigest(), status=status,
                           gpu_ms=ms, gpu_ms_iqr=iqr, registers=None, spill_bytes=None,
                           structure_score=None, origin=tag)

    cands = [cand("fast", "correct", 1.0, 0.01), cand("slow", "slow", 15.0, 0.5),
             cand("broken", "wrong"), cand("cheat", "guard_rejected"), cand("big", "does_not_fit")]
    pairs, stats = P.build_pairs(cands, with_features=False)
    kinds = sorted(p["kind"] for p in pairs)
    assert kinds == ["correctness", "correctness", "speed"]  # fast>broken, slow>broken, fast>slow
    speed = next(p for p in pairs if p["kind"] == "speed")
    better = speed["a"] if speed["label"] == 1 else speed["b"]
    assert better["status"] == "correct"
    assert stats.correct == 2


def test_candidates_files_of_schema_1_and_2_are_read(tmp_path: Path):
    import json

    src = "__global__ void k() {}\n"
    for version in (1, 2):
        path = tmp_path / f"c{version}.jsonl"
        path.write_text(json.dumps({"schema_version": version, "problem": "p", "status": "slow",
                                    "source": src, "gpu_ms": 3.0, "gpu_ms_iqr": 0.1}) + "\n")
        assert [c.status for c in P.read_candidates_file(path)] == ["slow"]
    bad = tmp_path / "c3.jsonl"
    bad.write_text(json.dumps({"schema_version": 3, "problem": "p", "source": src}) + "\n")
    from cudaperf_cli.core import CudaperfError

    with pytest.raises(CudaperfError, match="reads 1 or 2"):
        P.read_candidates_file(bad)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_no_stage_below_the_cli_imports_it():
    """Data flows one way (docs/architecture.md): the cli is the top layer; bench and rl
    get what they need from it passed in (optimize's flags) or from modules below it (the
    config loader, cudaperf_cli/config.py)."""
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "cli" or rel.name == "__main__.py":
            continue
        for mod in _imports(path):
            if mod == "cudaperf_cli.cli" or mod.startswith("cudaperf_cli.cli."):
                offenders.append(f"{rel}: {mod}")
    assert not offenders, offenders


def test_the_config_loader_lives_below_the_cli():
    from cudaperf_cli import config
    from cudaperf_cli.cli import config as cli_config

    assert cli_config.find_config is config.find_config
    assert cli_config.load_config is config.load_config
    assert _imports(PKG / "config.py") <= {"__future__", "os", "sys", "pathlib", "typing",
                                           "cudaperf_cli.core", "tomllib", "tomli"}
