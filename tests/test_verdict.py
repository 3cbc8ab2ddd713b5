"""The recommendation of a finished run (cudaperf_cli/agent/verdict.py): the final panel's
``verdict`` line and ``summary.json``'s ``recommendation``."""

from __future__ import annotations

import pytest
from rich.console import Console

from cudaperf_cli.agent.loop import LoopResult, TurnRecord
from cudaperf_cli.agent.render import best_panel
from cudaperf_cli.agent.verdict import ACTIONS, recommendation


def _torch(eager_x: float, compile_x: float | None) -> TurnRecord:
    return TurnRecord(turn=0, policy="builtin", description="fused: [relu]", status="correct",
                      gpu_ms=1.0, eager_ms=eager_x, compile_ms=compile_x, speedup_kernel=eager_x,
                      speedup_compile=compile_x, baseline="PyTorch eager")


def _c(kernel_x: float, e2e_x: float | None) -> TurnRecord:
    return TurnRecord(turn=0, policy="builtin", description="grid1d i", status="correct", gpu_ms=1.0,
                      cpu_ms=kernel_x, speedup_kernel=kernel_x, speedup_e2e=e2e_x, baseline="gcc -O3, 1 thread")


@pytest.mark.parametrize("record, action, words", [
    (_torch(0.78, 0.5), "keep_original", "slower than PyTorch eager (0.78x): keep the original Model"),
    (_torch(1.4, 0.9), "use_torch_compile", "slower than torch.compile (0.9x)"),
    (_torch(1.4, 1.2), "use_candidate", "faster than eager (1.4x) and torch.compile (1.2x)"),
    (_torch(1.4, None), "use_candidate", "faster than eager (1.4x)"),
    (_c(0.5, 0.1), "keep_original", "slower than gcc -O3, 1 thread (0.5x kernel-only)"),
    (_c(30.0, 0.4), "use_if_data_on_gpu", "slower end to end (0.4x"),
    (_c(30.0, 2.0), "use_candidate", "faster than gcc -O3, 1 thread (30x kernel-only, 2x end to end)"),
])
def test_recommendation(record: TurnRecord, action: str, words: str) -> None:
    rec = recommendation(record)
    assert rec is not None and rec["action"] == action and rec["action"] in ACTIONS
    assert words in rec["line"], rec["line"]


def test_no_recommendation_without_a_timed_candidate() -> None:
    assert recommendation(None) is None
    untimed = TurnRecord(turn=0, policy="builtin", description="d", status="no_device")
    assert recommendation(untimed) is None


def test_the_final_panel_says_to_keep_the_original_when_the_candidate_is_slower() -> None:
    console = Console(width=200, record=True, color_system=None)
    console.print(best_panel(LoopResult(turns=[_torch(0.78, 0.5)], best_index=0, stop_reason="turns"), []))
    text = console.export_text()
    assert "verdict     slower than PyTorch eager (0.78x): keep the original Model" in text
    console = Console(width=200, record=True, color_system=None)
    console.print(best_panel(LoopResult(turns=[_c(30.0, 2.0)], best_index=0, stop_reason="turns"), []))
    assert "verdict     faster than" in console.export_text()
