"""Feedback for the next turn, written for the model (and shown in the run folder).

Each text says which stage failed and what exactly went wrong (the compiler's errors, the
CUDA error, the worst mismatch and its index, the time limit), or, for a correct
candidate, its speed against the named baseline and its resources.
"""

from __future__ import annotations

from cudaperf_cli.agent.loop import TurnRecord


def feedback_for(r: TurnRecord) -> str:
    """One feedback paragraph for turn ``r`` (plain text, a few lines)."""
    head = f"Turn {r.turn + 1} ({r.description})"
    if r.status == "refused":
        return f"{head}: no candidate was produced. {r.message}"
    if r.status == "format_error":
        from cudaperf_cli.policies.extract import missing_code_feedback

        fn = (r.mapping or {}).get("function") or "<function>"
        return f"{head}: {r.message or missing_code_feedback(fn)}"
    if r.status in ("compile_error", "compile_timeout"):
        errors = r.build.get("errors") or r.message
        what = "did not compile" if r.status == "compile_error" else "compile timed out"
        return f"{head} {what} with nvcc. Compiler output:\n{errors}"
    if r.status == "guard_rejected":
        return f"{head} was rejected: {r.message}"
    if r.status == "no_device":
        return f"{head} compiled; it was not run because no CUDA device is available."
    if r.status in ("runtime_error", "crash"):
        return f"{head} failed while running on the GPU: {r.message}"
    if r.status == "timeout":
        return f"{head} did not finish within the time limit ({r.message}); look for a hang."
    if r.status == "wrong":
        return f"{head} compiled and ran but gave wrong results: {r.message}"
    if r.status == "reference_error":
        return f"{head}: the reference itself failed: {r.message}"
    if r.speedup_compile is not None or r.eager_ms is not None:  # a PyTorch problem
        lines = [
            f"{head} is correct (max relative error {_e(r.max_rel_err)}).",
            f"Time {r.gpu_ms:.4g} ms (median), PyTorch eager {_ms(r.eager_ms)}, torch.compile "
            f"{_ms(r.compile_ms)}: speedup {_x(r.speedup_kernel)} vs eager and "
            f"{_x(r.speedup_compile)} vs torch.compile.",
        ]
        if r.structure_score is not None:
            lines.append(f"Structural score {r.structure_score:.2f} of 1. What to improve first:")
            lines.extend(f"- {reason}" for reason in r.structure_reasons)
        return "\n".join(lines)
    lines = [
        f"{head} is correct (max relative error {r.max_rel_err:.1e}).",
        f"GPU kernel time {r.gpu_ms:.4g} ms (median), speedup {r.speedup_kernel:.3g}x "
        f"kernel-only and {r.speedup_e2e:.3g}x end-to-end vs {r.baseline}.",
        f"Resources: {r.registers} registers per thread, {r.spill_bytes} bytes spilled.",
    ]
    if r.structure_score is not None:
        lines.append(f"Structural score {r.structure_score:.2f} of 1. What to improve first:")
        lines.extend(f"- {reason}" for reason in r.structure_reasons)
    return "\n".join(lines)


def _e(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1e}"


def _ms(v: float | None) -> str:
    return "not measured" if v is None else f"{v:.4g} ms"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}x"


def follow(records: list[TurnRecord]) -> TurnRecord | None:
    """Choose the sample of one turn that the model's conversation continues from and write
    the turn's feedback message on it (``followed = True``, ``turn_feedback``).

    The followed sample is the fastest correct one; else the one that got furthest through
    the stages (``STATUSES`` order: wrong result > timeout > crash > ... > no code); the
    first of equals.  With one sample, ``turn_feedback`` is its own feedback; with several,
    it is the followed sample's feedback plus one line per other sample.  Returns the
    followed record (``None`` for an empty turn).
    """
    from cudaperf_cli.agent.loop import STATUSES
    from cudaperf_cli.policies.model_policy import outcome_line

    if not records:
        return None

    def rank(r: TurnRecord) -> tuple[int, float]:
        stage = STATUSES.index(r.status) if r.status in STATUSES else 0
        return (stage, -(r.gpu_ms if r.correct and r.gpu_ms is not None else 0.0))

    chosen = records[0]
    for r in records[1:]:
        if rank(r) > rank(chosen):
            chosen = r
    chosen.followed = True
    if len(records) == 1:
        chosen.turn_feedback = chosen.feedback
        return chosen
    others = [f"- sample {r.sample + 1}: {outcome_line(r)}" for r in records if r is not chosen]
    why = "the fastest correct one" if chosen.correct else "the one that got furthest"
    chosen.turn_feedback = (
        f"You wrote {len(records)} candidates this turn; the reply above is sample "
        f"{chosen.sample + 1}, {why}.\n{chosen.feedback}\n"
        f"The other samples of this turn:\n" + "\n".join(others)
    )
    return chosen
