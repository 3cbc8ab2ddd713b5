"""``cudaperf optimize FILE``: one driver for every problem kind, stage by stage.

1. options: ``--resume`` read back, the kind's own checks, the output path, the policy and
   its server (before any work); a policy with ``warm_up`` starts its helpers now (the
   built-in PyTorch policy's trace child imports torch while the problem loads)
                                                                  agent/resume.py, proposals.py
2. load the problem                                               kind.load (problems/)
3. plan: configurations and the memory one evaluation holds; a problem that cannot fit the
   device (or the host) ends here: one line with the bytes, exit 5  kind.plan, kinds/base.py
4. the baseline, measured once per run (``baseline.json``; read back on ``--resume``)
                                                                  Evaluation.measure_baseline
5. turns: policy -> candidate -> build, verify & time in child processes -> feedback
                                                                  agent/loop.py, Evaluation.evaluate
6. write the best verified candidate                              kind.write (agent/results.py)
7. report (Rich or ``--json``; ``summary.json``) and the exit code (docs/exit-codes.md)

The kinds (agent/kinds/c.py, agent/kinds/pytorch.py) differ in load, plan, baseline,
evaluate and write; everything else (run folder, ``turns.jsonl``, ``--resume``, Ctrl-C,
questions between turns, the summary, exit codes) is this module's, the same for both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.checks import check_arch
from cudaperf_cli.agent.feedback import feedback_for, follow
from cudaperf_cli.agent.kinds import kind_for
from cudaperf_cli.agent.kinds.base import (
    DeviceInfo, EvalSettings, Evaluation, Plan, ProblemKind, check_fit, probe_run_device, slow_limit_ms,
)
from cudaperf_cli.agent.kinds.c import (  # noqa: F401 - re-exported (bench/env.py, rl/)
    ACCESS_OF_ROLE, BASELINE_BUDGET_S, BASELINE_REPS, Baseline, fill_from_evaluation, verification_configs,
)
from cudaperf_cli.agent.loop import LoopResult, TurnRecord, run_loop
from cudaperf_cli.agent.options import (  # noqa: F401 - re-exported: the command's public names
    EXIT_DOES_NOT_FIT, EXIT_INTERRUPTED, EXIT_NO_CORRECT, EXIT_NO_DEVICE, EXIT_OK, POLICIES,
    RESUME_OVERRIDES, OptimizeOptions, file_sha256, options_from_json, options_to_json, version,
)
from cudaperf_cli.agent.proposals import (  # noqa: F401 - re-exported
    check_policy_ready, has_candidate, make_policy, make_ranker, propose_or_refuse, propose_samples,
    rank_proposals,
)
from cudaperf_cli.agent.resume import ResumeState, load_resume, read_records, restore_run  # noqa: F401
from cudaperf_cli.agent.store import RunStore
from cudaperf_cli.agent.verdict import recommendation
from cudaperf_cli.core import CudaperfError, ProblemError, to_jsonable


#: The suffixes a problem file may have: C (``.c``; a header or preprocessed file holding
#: the function) and PyTorch (``.py``, KernelBench's format).
PROBLEM_SUFFIXES = (".c", ".h", ".i", ".py")

def run_optimize_command(opts: OptimizeOptions, given: frozenset[str] = frozenset()) -> int:
    """Run ``cudaperf optimize``; returns the exit code (docs/exit-codes.md).

    ``given``: names of the options set on the command line (``--resume`` lets some of them
    override the run's own; see :data:`RESUME_OVERRIDES`).

    Raises:
        CudaperfError: bad input (exit 2), a missing tool or an unreachable model server
            (exit 3): one line for the CLI to print.
    """
    from rich.markup import escape

    import cudaperf_cli.build as build
    from cudaperf_cli.agent.render import QuietObserver, RichObserver, best_panel, stdout_console

    console = stdout_console()
    t_start = time.perf_counter()
    resumed: ResumeState | None = None
    if opts.resume is not None:
        opts, resumed = load_resume(opts, given)
    human = not opts.json_output

    # 1. options, output, policy: everything that can be refused before any work
    if opts.file.is_dir():
        raise ProblemError(f"{opts.file} is a directory, not a problem file (.c or .py)")
    if not opts.file.exists():
        raise ProblemError(f"{opts.file}: no such file")
    if not opts.file.is_file():
        raise ProblemError(f"{opts.file} is not a regular file (a device, a pipe or a socket), not a problem file")
    if opts.file.suffix not in PROBLEM_SUFFIXES:
        raise ProblemError(f"{opts.file} is not a problem file: a C function's .c (or .h, .i) or a "
                           "PyTorch module's .py")
    kind = kind_for(opts.file)
    kind.check_options(opts)
    if resumed is not None and resumed.output_sha256 and \
            kind.output_digest(kind.default_output(opts)) == resumed.output_sha256:
        opts = dataclasses.replace(opts, force=True)  # the result is this run's own: replace it
    out_path = kind.resolve_output(opts)
    policy = make_policy(opts.policy, opts)
    ranker = make_ranker(opts)
    if opts.arch is not None:
        check_arch(opts.arch)
    check_policy_ready(policy)  # an unreachable model server: before any baseline (exit 3)
    warm_up = getattr(policy, "warm_up", None)
    if callable(warm_up):  # the built-in PyTorch policy's trace child imports while we load
        warm_up()
    detected = build.detect_arch()
    device = probe_run_device(detected)
    arch = opts.arch or detected or "sm_90"
    settings = EvalSettings.from_options(opts, arch, device)

    # 2. load, 3. plan
    message = kind.load_message(opts)
    with console.status(message) if (human and message) else contextlib.nullcontext():
        problem = kind.load(opts)
    plan = kind.plan(problem, device)
    if hasattr(policy, "arch"):  # model policies name the architecture in their prompt
        policy.arch = arch

    if resumed is None:
        store = RunStore(opts.run_root, kind.run_name(problem, opts))
        store.write_json("run.json", {"options": options_to_json(opts), "file_sha256": file_sha256(opts.file),
                                      "cudaperf": version(), "kind": kind.name})
        store.write_json("problem.json", kind.problem_json(problem, plan, arch, opts))
        history: list[TurnRecord] = []
    else:
        store, history = restore_run(resumed, policy, opts.samples)
    if human:
        if resumed is not None:
            console.print(f"resuming {escape(str(store.path))}: {len({r.turn for r in history})} "
                          f"turn(s) done, {len(history)} candidate(s) kept")
        for line in kind.describe(problem, plan, arch, opts, detected is not None):
            console.print(line)
    warnings: list[str] = list(plan.notes) + [str(w) for w in getattr(problem, "warnings", ()) or ()]

    refusal = check_fit(plan, device, opts.file.name)
    if refusal is not None:
        return refuse_problem(kind, problem, plan, refusal, opts=opts, arch=arch, store=store,
                              console=console, device=device, settings=settings, warnings=warnings,
                              wall_s=time.perf_counter() - t_start)

    # 4. the baseline, once per run
    evaluation = kind.open(problem, plan, settings, store.path)
    for r in history:
        evaluation.note(r)
    stored = None if resumed is None or resumed.baseline is None else kind.baseline_from_json(resumed.baseline)
    if stored is not None:
        evaluation.baseline = stored  # the same denominator as the earlier turns
    elif has_candidate(policy, problem):  # no baseline to measure for a refused problem
        if resumed is not None and any(r.speedup_kernel is not None for r in history):
            print(f"warning: {store.path / 'baseline.json'} is missing or unreadable: the baseline "
                  "is measured again; earlier turns' speedups used the old one", file=sys.stderr)
        with console.status(evaluation.baseline_message()) if (human and evaluation.baseline_message()) \
                else contextlib.nullcontext():
            evaluation.measure_baseline()
        if human:
            for line in evaluation.baseline_lines():
                console.print(line)
        if evaluation.baseline_json() is not None:
            store.write_json("baseline.json", evaluation.baseline_json())
    if evaluation.degenerate and not getattr(problem, "degenerate", False):  # the loader says it itself
        evaluation.warnings.append(
            f"{opts.file.name}: the outputs do not depend on the inputs (a degenerate problem, "
            "evaluated as given: a candidate returning a constant passes)")
    warnings.extend(evaluation.warnings)
    for w in warnings[len(plan.notes):]:  # the loader's remarks and the baseline's
        print(f"warning: {w}", file=sys.stderr)

    # 5. the turns
    observer: Any = (RichObserver(console, f"{kind.title(problem)}: {opts.policy} policy",
                                  kind=kind.observer_kind) if human else QuietObserver())
    if human and history:
        observer.records.extend(history)

    def run_turn(turn: int, history: list[TurnRecord]) -> list[TurnRecord]:
        observer.stage(turn, "writing candidates" if opts.samples > 1 else "writing a candidate")
        proposals, refused = propose_or_refuse(policy, problem, turn, history, opts, store, ranker)
        if refused is not None:
            return [refused]
        records = []
        for k, proposal in enumerate(proposals):
            record = kind.candidate_record(proposal, turn, sample=k, samples=opts.samples)
            label = f"sample {k + 1}/{len(proposals)}: " if len(proposals) > 1 else ""
            if record.status == "pending":
                evaluation.evaluate(record, lambda name: observer.stage(turn, label + name))
            if record.baseline is None:
                record.baseline = evaluation.baseline_name
            record.feedback = feedback_for(record)
            records.append(record)
        follow(records)
        return records

    result, interrupted, _ = drive_loop(opts, store, policy, run_turn, history, observer, console)
    wall_s = time.perf_counter() - t_start  # the whole command: loading, baseline, turns

    # 6. write, 7. report
    return conclude(
        opts, store, result, interrupted, console,
        finish=lambda res: finish_result(kind, res, evaluation, out_path, opts),
        make_summary=lambda res, written, code: make_summary(
            kind, problem, plan, res, written, code, evaluation=evaluation, opts=opts, arch=arch,
            store=store, wall_s=wall_s, device=device, settings=settings, warnings=warnings),
        reports=evaluation.reports,
        best_panel=best_panel,
    )


def refuse_problem(kind: ProblemKind, problem: Any, plan: Plan, refusal: str, *, opts: OptimizeOptions,
                   arch: str, store: RunStore, console: Any, device: DeviceInfo, settings: EvalSettings,
                   warnings: list[str], wall_s: float) -> int:
    """End a run whose problem does not fit (``does_not_fit``): nothing was measured or
    written; ``refusal`` (one line with the bytes needed and available) goes to stderr
    (``error: ...``, then the kind's hint) and into ``summary.json`` (``problem_status``,
    ``message``); exit code 5."""
    result = LoopResult([], None, "the problem does not fit this machine")
    summary = make_summary(kind, problem, plan, result, None, EXIT_DOES_NOT_FIT, evaluation=None, opts=opts,
                           arch=arch, store=store, wall_s=wall_s, device=device, settings=settings,
                           warnings=warnings, problem_status="does_not_fit", message=refusal)
    store.write_json("summary.json", summary)
    if opts.json_output:
        print(json.dumps(to_jsonable(summary), indent=2, default=str))
    else:
        console.print(f"does not fit: nothing run, nothing written; run folder: {store.path}", markup=False)
    print(f"error: {refusal}", file=sys.stderr)
    hint = kind.fit_hint()
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    return EXIT_DOES_NOT_FIT


def drive_loop(
    opts: OptimizeOptions, store: RunStore, policy: Any, run_turn: Any, history: list[TurnRecord],
    observer: Any, console: Any,
) -> tuple[LoopResult, bool, float]:
    """Run the turns with the run's stopping rules, questions (interactive runs) and Ctrl-C
    handling; every record is appended to ``turns.jsonl`` as it finishes.

    Returns ``(result, interrupted, wall seconds)``; after a Ctrl-C the result holds the
    records written so far.
    """
    human = not opts.json_output
    ask = None
    if opts.interactive and human:
        from cudaperf_cli.agent.interact import TerminalAsk

        def save_hint(turn: int, hint: str) -> None:
            store.append_jsonl("hints.jsonl", {"turn": turn, "hint": hint})
            if hasattr(policy, "hints"):
                policy.hints[turn] = hint

        ask = TerminalAsk(console, observer, on_hint=save_hint if hasattr(policy, "hints") else None)

    started = time.perf_counter()
    interrupted = False
    try:
        with observer if human else contextlib.nullcontext(), _resumable(store):
            result = run_loop(
                run_turn,
                turns=opts.turns,
                observer=observer,
                on_record=lambda r: (store.append_jsonl("turns.jsonl", r), store.write_candidate(r)),
                target_speedup=opts.target_speedup,
                patience=opts.patience,
                ask=ask,
                history=history,
            )
    except KeyboardInterrupt:
        interrupted = True
        kept, _ = read_records(store.path / "turns.jsonl")
        from cudaperf_cli.agent.loop import best_index

        result = LoopResult(kept, best_index(kept), "interrupted (Ctrl-C)", True)
    return result, interrupted, time.perf_counter() - started


@contextlib.contextmanager
def _resumable(store: RunStore) -> Any:
    """A run-ending error (e.g. the model server went away) says how to resume the run,
    when a turn was recorded (a run that did nothing yet is started again, not resumed)."""
    try:
        yield
    except CudaperfError as err:
        if err.hint is None and read_records(store.path / "turns.jsonl")[0]:
            err.hint = f"the turns done are kept; resume with: cudaperf optimize --resume {store.path}"
        raise


def conclude(
    opts: OptimizeOptions, store: RunStore, result: LoopResult, interrupted: bool, console: Any,
    *, finish: Any, make_summary: Any, reports: dict[tuple[int, int], Any], best_panel: Any,
) -> int:
    """Write the result (``finish(result) -> (code, panel lines, written path)``) unless the
    run was stopped, write ``summary.json`` (``make_summary(result, written, code)``), print
    the end of the run (Rich or ``--json``) and return the exit code."""
    human = not opts.json_output
    stopped = interrupted or (result.stopped_by_user and result.stop_reason.startswith("the user stopped"))
    if stopped:  # nothing written; the run folder can be resumed
        code, written = EXIT_INTERRUPTED, None
        lines = ["Stopped before the end: nothing written.",
                 f"resume      cudaperf optimize --resume {store.path}"]
    else:
        code, lines, written = finish(result)
    summary = make_summary(result, written, code)
    store.write_json("summary.json", summary)
    if interrupted:
        print(f"interrupted: resume with: cudaperf optimize --resume {store.path}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if stopped and not human:
        print(f"stopped by the user: resume with: cudaperf optimize --resume {store.path}", file=sys.stderr)
    if human:
        best_key = None if result.best is None else (result.best.turn, result.best.sample)
        if best_key in reports:
            from cudaperf_cli.structure.render import print_report

            print_report(reports[best_key], console, top=3)
        console.print(best_panel(result, lines))
        console.print(f"stopped: {result.stop_reason}; run folder: {store.path}", markup=False)
    else:
        print(json.dumps(to_jsonable(summary), indent=2, default=str))
    if code == EXIT_NO_DEVICE:
        print("no CUDA device: candidates were compiled but not verified or timed", file=sys.stderr)
    elif code == EXIT_NO_CORRECT:
        why = ("the policy produced no candidate" if all(r.status == "refused" for r in result.turns)
               else "no correct candidate")
        print(f"{why}: see the turns above and the run folder {store.path}", file=sys.stderr)
    return code


def finish_result(kind: ProblemKind, result: LoopResult, evaluation: Any, out_path: Path,
                  opts: OptimizeOptions) -> tuple[int, list[str], Path | None]:
    """The exit code, the panel's lines and the written path of a finished run: the best
    verified candidate written by ``kind.write``; exit 4 when candidates only compiled (no
    device), 1 when none was correct (or every turn was refused).

    Raises:
        CudaperfError: the output appeared during the run (without ``--force``), or cannot
            be written.
    """
    best = result.best
    if best is None:
        if any(r.status == "no_device" for r in result.turns):
            return EXIT_NO_DEVICE, ["No CUDA device: nothing was verified, nothing written."], None
        if all(r.status == "refused" for r in result.turns):
            return EXIT_NO_CORRECT, ["The policy produced no candidate; nothing written."], None
        return EXIT_NO_CORRECT, ["No candidate passed verification; nothing written."], None
    appeared = out_path.is_file() or (out_path.is_dir() and any(out_path.iterdir()))
    if appeared and not opts.force:
        raise CudaperfError(f"{out_path} appeared during the run; pass --force to overwrite it")
    return EXIT_OK, kind.write(best, evaluation, out_path, opts), out_path


def _brief(r: TurnRecord) -> dict[str, Any]:
    d = to_jsonable(r)
    for k in ("source", "build", "evaluation"):
        d.pop(k, None)
    return d


def make_summary(
    kind: ProblemKind, problem: Any, plan: Plan, result: LoopResult, written: Path | None, code: int, *,
    evaluation: Evaluation | None, opts: OptimizeOptions, arch: str, store: RunStore, wall_s: float,
    device: DeviceInfo, settings: EvalSettings, warnings: list[str],
    problem_status: str | None = None, message: str | None = None,
) -> dict[str, Any]:
    """``summary.json`` and the ``--json`` document: the kind's fields (C: function, sizes,
    configs, CPU baseline; PyTorch: problem, constants, alt shapes, the eager/compile
    baseline), the turns (without sources and logs), the best candidate, the output, and:

    - ``problem_status``: None, or ``"does_not_fit"`` (nothing ran; ``message`` says why);
      ``message`` also says why the exit code is 4 (no CUDA device: compiled, not run);
    - ``degenerate``: the problem's outputs do not depend on its inputs;
    - ``footprint_bytes`` (bytes) and ``memory`` (the plan's ``to_json()``, or None);
    - ``reference_peak_gpu_bytes``: the most device memory the reference alone held in the
      run's baseline job (PyTorch: its inputs, forward intermediates, library workspace,
      the flush buffer; bytes), None when no baseline job used the device;
    - ``tolerances``: dtype -> ``{"atol", "rtol"}`` of every job; ``warnings``: lines;
    - ``device``: the evaluation device as probed (free and total bytes, L2 bytes);
    - ``sanitize``: C problems' compute-sanitizer stage (``{"enabled", "tool", "note"}``;
      each turn it ran on has ``sanitize`` and ``sanitize_s``), None for other kinds.
    """
    best = result.best
    if message is None and code == EXIT_NO_DEVICE:  # a script reading --json sees why
        message = "no CUDA device: the candidates were compiled, none was verified or timed"
    degenerate = (evaluation.degenerate if evaluation is not None
                  else bool(getattr(problem, "degenerate", False)))
    footprint = (evaluation.footprint_bytes if evaluation is not None
                 else None if plan.memory is None else int(plan.memory.footprint_bytes))
    return {
        "file": str(problem.path),
        **kind.summary(problem, evaluation, plan),
        "arch": arch,
        "turns": [_brief(r) for r in result.turns],
        "best_turn": None if best is None else best.turn + 1,
        "best_sample": None if best is None else best.sample + 1,
        "best": None if best is None else _brief(best),
        "recommendation": recommendation(best),
        "output": None if written is None else str(written),
        "output_sha256": None if written is None else kind.output_digest(written),
        "samples": opts.samples,
        "turn_count": result.turn_count,
        "run_dir": str(store.path),
        "stop_reason": result.stop_reason,
        "exit_code": code,
        "wall_s": wall_s,
        "problem_status": problem_status,
        "message": message,
        "degenerate": degenerate,
        "footprint_bytes": footprint,
        "memory": None if plan.memory is None else plan.memory.to_json(),
        "reference_peak_gpu_bytes": getattr(getattr(evaluation, "baseline", None), "peak_gpu_bytes", None),
        "tolerances": settings.tolerances,
        "slow_factor": settings.slow_factor,
        "sanitize": None if evaluation is None else evaluation.sanitize_info(),
        "warnings": list(warnings),
        "device": device.to_json(),
    }


__all__ = [
    "ACCESS_OF_ROLE", "BASELINE_BUDGET_S", "BASELINE_REPS", "Baseline", "EXIT_DOES_NOT_FIT",
    "EXIT_INTERRUPTED", "EXIT_NO_CORRECT", "EXIT_NO_DEVICE", "EXIT_OK", "POLICIES", "RESUME_OVERRIDES",
    "OptimizeOptions", "conclude", "drive_loop", "fill_from_evaluation", "finish_result", "make_policy",
    "make_ranker", "make_summary", "options_from_json", "options_to_json", "propose_or_refuse",
    "propose_samples", "rank_proposals", "refuse_problem", "run_optimize_command", "slow_limit_ms",
    "verification_configs",
]
