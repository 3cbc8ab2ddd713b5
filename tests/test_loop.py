"""The refine loop's stopping rules, with scripted turns (no compiler, no GPU)."""

from __future__ import annotations

from cudaperf_cli.agent.loop import TurnRecord, run_loop
from cudaperf_cli.agent.render import QuietObserver


def scripted(*outcomes):
    """run_turn that returns ``outcomes[t]``: a (status, gpu_ms, speedup) tuple."""

    def run_turn(t, history):
        status, gpu_ms, speedup = outcomes[t]
        return TurnRecord(t, "test", f"candidate {t}", status, gpu_ms=gpu_ms,
                          speedup_kernel=speedup)

    return run_turn


def test_keeps_the_fastest_correct_turn_and_runs_all_turns():
    res = run_loop(scripted(("wrong", None, None), ("correct", 2.0, 5.0), ("correct", 1.0, 10.0),
                            ("correct", 1.5, 6.7)), turns=4, observer=QuietObserver())
    assert res.best_index == 2 and len(res.turns) == 4
    assert res.stop_reason == "ran all 4 turn(s)"


def test_stops_at_the_target_speedup():
    res = run_loop(scripted(("correct", 2.0, 5.0), ("correct", 1.0, 10.0), ("correct", 0.5, 20.0)),
                   turns=3, observer=QuietObserver(), target_speedup=8)
    assert len(res.turns) == 2 and res.best_index == 1
    assert "target speedup" in res.stop_reason and "10x >= 8x" in res.stop_reason


def test_stops_after_patience_turns_without_improvement():
    res = run_loop(scripted(("correct", 1.0, 10.0), ("correct", 2.0, 5.0), ("wrong", None, None),
                            ("correct", 0.5, 20.0)), turns=4, observer=QuietObserver(), patience=2)
    assert len(res.turns) == 3 and res.best_index == 0
    assert res.stop_reason == "2 turn(s) in a row brought no faster correct candidate"


def test_a_refusal_ends_the_turns_with_its_reason():
    res = run_loop(scripted(("correct", 1.0, 10.0), ("refused", None, None), ("correct", 0.5, 20.0)),
                   turns=3, observer=QuietObserver())
    assert len(res.turns) == 2 and "no more candidates" in res.stop_reason


def test_table_gives_build_and_evaluation_seconds_apart():
    """The per-turn table's ``build s`` says ``cached`` for a build-cache hit and ``eval s``
    says ``-`` where no evaluation ran (no GPU); a PyTorch row's evaluation seconds leave out
    its build (its ``eval_s`` is the whole wall time, build overlapped included)."""
    from rich.console import Console

    from cudaperf_cli.agent.render import fmt_build_s, fmt_eval_s, turns_table

    cached = TurnRecord(turn=1, policy="p", description="d", status="correct", compile_s=0.0, compile_cached=True, eval_s=2.5)
    no_gpu = TurnRecord(turn=2, policy="p", description="d", status="no_device", compile_s=1.25, eval_s=None)
    refused = TurnRecord(turn=3, policy="p", description="d", status="refused")
    assert (fmt_build_s(cached), fmt_eval_s(cached)) == ("cached", "2.5")
    assert (fmt_build_s(no_gpu), fmt_eval_s(no_gpu)) == ("1.2", "-")
    assert (fmt_build_s(refused), fmt_eval_s(refused)) == ("-", "-")
    torch_row = TurnRecord(turn=1, policy="p", description="d", status="correct", compile_s=3.0, eval_s=7.5)
    assert fmt_eval_s(torch_row, "torch") == "4.5" and fmt_eval_s(torch_row) == "7.5"
    console = Console(width=200, record=True)
    console.print(turns_table([cached, no_gpu], width=200))
    text = console.export_text()
    assert "build s" in text and "eval s" in text and "cached" in text
