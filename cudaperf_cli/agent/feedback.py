"""Feedback for the next turn, written for the model (and shown in the run folder).

Each text says which stage failed and what exactly went wrong (the compiler's errors, the
CUDA error, the worst mismatch and its index, the time limit), or, for a correct
candidate, its speed against the named baseline and its resources; for a ``slow`` one
(verified, timing stopped early), that it was correct but K x slower than the run's best
candidate (or the baseline), with its estimated time.  Statuses are those of
``cudaperf_cli.statuses``; a status this module does not know gets its label and message.
"""

from __future__ import annotations

from cudaperf_cli import statuses as S
from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.evaluate.job import SLOW_STOP_TEXT


def feedback_for(r: TurnRecord) -> str:
    """One feedback paragraph for turn ``r`` (plain text, a few lines)."""
    head = f"Turn {r.turn + 1} ({r.description})"
    if r.status == S.REFUSED:
        return f"{head}: no candidate was produced. {r.message}"
    if r.status == S.FORMAT_ERROR:
        from cudaperf_cli.policies.extract import missing_code_feedback

        fn = (r.mapping or {}).get("function") or "<function>"
        return f"{head}: {r.message or missing_code_feedback(fn)}"
    if r.status in (S.COMPILE_ERROR, S.COMPILE_TIMEOUT):
        errors = r.build.get("errors") or r.message
        what = "did not compile" if r.status == S.COMPILE_ERROR else "compile timed out"
        return f"{head} {what} with nvcc. Compiler output:\n{errors}"
    if r.status == S.GUARD_REJECTED:
        return f"{head} was rejected: {r.message}"
    if r.status == S.NO_DEVICE:
        return f"{head} compiled; it was not run because no CUDA device is available."
    if r.status in (S.RUNTIME_ERROR, S.CRASH):
        return f"{head} failed while running on the GPU: {r.message}"
    if r.status == S.TIMEOUT and SLOW_STOP_TEXT in (r.message or ""):
        return (f"{head} was far too slow, or hung: {r.message}. If it is not a hang, it needs "
                "much more parallelism (one thread or a few blocks doing the work sequentially "
                "is the usual cause).")
    if r.status == S.TIMEOUT:
        return f"{head} did not finish within the time limit ({r.message}); look for a hang."
    if r.status == S.WRONG:
        return f"{head} compiled and ran but gave wrong results: {r.message}"
    if r.status == S.SANITIZER_ERROR:
        return (f"{head} matched the reference, but compute-sanitizer found a memory error when "
                f"it was run again on a small configuration: {r.message}. Every access must stay "
                "inside the arrays it is given or memory it allocated, and every read must be of "
                "memory written before.")
    if r.status == S.REFERENCE_ERROR:
        return f"{head}: the reference itself failed: {r.message}"
    if r.status == S.DOES_NOT_FIT:
        return (f"{head} was not run: the problem's data does not fit the GPU's memory "
                f"({r.message or 'no detail'}).")
    if r.status == S.SLOW:
        return slow_feedback(head, r)
    if r.status != S.CORRECT:  # a status without its own wording (e.g. pending)
        info = S.info(r.status)
        label = info.label if info is not None else r.status
        return f"{head}: {label}" + (f": {r.message}" if r.message else ".")
    if r.speedup_compile is not None or r.eager_ms is not None:  # a PyTorch problem
        lines = [
            f"{head} is correct (max relative error {_e(r.max_rel_err)}).",
            f"Time {_ms(r.gpu_ms)} (median), PyTorch eager {_ms(r.eager_ms)}, torch.compile "
            f"{_ms(r.compile_ms)}: speedup {_x(r.speedup_kernel)} vs eager and "
            f"{_x(r.speedup_compile)} vs torch.compile.",
        ]
        if r.structure_score is not None:
            lines.append(f"Structural score {r.structure_score:.2f} of 1. What to improve first:")
            lines.extend(f"- {reason}" for reason in r.structure_reasons)
        return "\n".join(lines)
    lines = [
        f"{head} is correct (max relative error {_e(r.max_rel_err)}).",
        f"GPU kernel time {_ms(r.gpu_ms)} (median), speedup {_x(r.speedup_kernel)} "
        f"kernel-only and {_x(r.speedup_e2e)} end-to-end vs {r.baseline}.",
        f"Resources: {r.registers} registers per thread, {r.spill_bytes} bytes spilled.",
    ]
    if r.structure_score is not None:
        lines.append(f"Structural score {r.structure_score:.2f} of 1. What to improve first:")
        lines.extend(f"- {reason}" for reason in r.structure_reasons)
    return "\n".join(lines)


def slow_feedback(head: str, r: TurnRecord) -> str:
    """The feedback of a ``slow`` record: verified correct, timing stopped after the
    warm-up because its estimated time (``gpu_ms``, ms) was already ``slow_factor`` (K)
    times that of ``slow_ref`` (the run's best verified candidate, or the baseline, whose
    time is ``slow_ref_ms``).  The ratio printed is ``gpu_ms / slow_ref_ms`` when both are
    known; else the record's message and its speedup against the baseline."""
    what = {"best": "the best correct candidate so far", "baseline": "the baseline"}.get(
        r.slow_ref or "", "the best correct candidate so far or the baseline")
    if r.slow_ref == "baseline" and r.baseline:
        what = f"the baseline ({r.baseline})"
    lines = [f"{head} is correct (max relative error {_e(r.max_rel_err)}), but it is far slower "
             "than needed, so its timing was stopped after the warm-up."]
    if r.gpu_ms is not None and r.slow_ref_ms:
        k = f" (the limit is {r.slow_factor:g}x)" if r.slow_factor else ""
        lines.append(
            f"Estimated time {r.gpu_ms:.4g} ms against {r.slow_ref_ms:.4g} ms for {what}: "
            f"{r.gpu_ms / r.slow_ref_ms:.3g}x slower{k}.")
    else:
        estimate = "not measured" if r.gpu_ms is None else f"{r.gpu_ms:.4g} ms"
        lines.append(f"Estimated time {estimate}; {r.message or 'slower than ' + what}.")
    if r.speedup_kernel is not None:
        vs = r.baseline or "the baseline"
        lines.append(f"Estimated speedup {_x(r.speedup_kernel)} vs {vs}.")
    lines.append("Keep it correct and restructure the work: parallelise the outer loops, "
                 "coalesce memory accesses, avoid serial loops in one thread.")
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

    The followed sample is the fastest verified one (``correct`` or ``slow``, by
    ``gpu_ms``); else the one that got furthest through the stages (``statuses.ORDER``:
    wrong result > timeout > crash > ... > no code); the first of equals.  With one sample, ``turn_feedback`` is its own feedback; with several,
    it is the followed sample's feedback plus one line per other sample.  Returns the
    followed record (``None`` for an empty turn).
    """
    from cudaperf_cli.policies.model_policy import outcome_line

    if not records:
        return None

    def rank(r: TurnRecord) -> tuple[int, int, float]:
        # verified ones first (a slow one is ranked after correct in ORDER, but a faster
        # time wins among the verified), then by stage
        if r.verified:
            return (1, 0, -(r.gpu_ms if r.gpu_ms is not None else float("inf")))
        return (0, max(S.rank(r.status), 0), 0.0)

    chosen = records[0]
    for r in records[1:]:
        if rank(r) > rank(chosen):
            chosen = r
    chosen.followed = True
    if len(records) == 1:
        chosen.turn_feedback = chosen.feedback
        return chosen
    others = [f"- sample {r.sample + 1}: {outcome_line(r)}" for r in records if r is not chosen]
    why = "the fastest correct one" if chosen.verified else "the one that got furthest"
    chosen.turn_feedback = (
        f"You wrote {len(records)} candidates this turn; the reply above is sample "
        f"{chosen.sample + 1}, {why}.\n{chosen.feedback}\n"
        f"The other samples of this turn:\n" + "\n".join(others)
    )
    return chosen
