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
