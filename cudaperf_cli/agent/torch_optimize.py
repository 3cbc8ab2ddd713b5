"""``cudaperf optimize model.py``: a PyTorch (KernelBench-format) problem, stage by stage.

1. load the problem in a child process (Model, get_inputs, get_init_inputs; alt shapes)
                                                                       problems/pytorch.py
2. turns: policy -> candidate files (model.py [+ kernel.cu]) -> child-process build, guards,
   verification on the default and alt shapes, timing vs PyTorch eager and torch.compile
                                                   agent/loop.py, evaluate/torch_job.py
3. write the best verified candidate's files into ``<stem>_cuda/``     (``-o DIR``)
4. report (Rich or ``--json``) and the exit code (docs/exit-codes.md)

The loop, run folder, questions, ``--resume`` and Ctrl-C handling are the C path's
(:func:`~cudaperf_cli.agent.optimize.drive_loop`, :func:`~cudaperf_cli.agent.optimize.conclude`).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.feedback import feedback_for, follow
from cudaperf_cli.agent.loop import LoopResult, TurnRecord
from cudaperf_cli.agent.store import RunStore
from cudaperf_cli.core import CudaperfError, to_jsonable

#: Name of the baseline of ``TurnRecord.speedup_kernel`` for PyTorch problems.
BASELINE_EAGER_NAME = "PyTorch eager"


def resolve_torch_output(opts: Any, written_before: bool = False) -> Path:
    """The result folder (default ``./<stem>_cuda/``); refuses an existing non-empty folder
    without ``--force`` (unless this run wrote it), a file, or the problem's own folder.

    Raises:
        CudaperfError: exit code 2.
    """
    out = Path(opts.output) if opts.output else Path.cwd() / f"{opts.file.stem}_cuda"
    if out.exists() and not out.is_dir():
        raise CudaperfError(f"the output {out} is a file; a PyTorch result is a folder (-o DIR)")
    if out.resolve() == opts.file.resolve().parent:
        raise CudaperfError(f"the output {out} is the problem's own folder; choose another with -o")
    if out.is_dir() and any(out.iterdir()) and not (opts.force or written_before):
        raise CudaperfError(f"{out} exists and is not empty; pass --force to overwrite it, or -o DIR")
    return out


def candidate_format(files: dict[str, str]) -> str:
    """``"fast"`` when the candidate has a ``.cu`` file, else ``"load_inline"``."""
    return "fast" if any(name.endswith(".cu") for name in files) else "load_inline"


def cuda_source_of(files: dict[str, str]) -> str | None:
    """The text of a candidate's ``.cu`` file (the fast format's kernel), or None."""
    return next((text for name, text in files.items() if name.endswith(".cu")), None)


def torch_candidate_record(proposal: Any, turn: int, mapping: dict[str, Any] | None = None,
                           sample: int = 0, samples: int = 1) -> TurnRecord:
    """The ``pending`` record of a PyTorch proposal: its files in ``mapping["files"]``
    (a reply with ``model.py`` only is the load_inline format), ``source`` the CUDA
    (``kernel.cu``) when there is one, else ``model.py`` (the run folder and
    ``candidates.jsonl`` keep the kernel itself); ``format_error`` when it has no file."""
    files = dict(proposal.files) or ({"model.py": proposal.source} if proposal.source.strip() else {})
    record = TurnRecord(turn, proposal.policy, proposal.description, "pending",
                        source=cuda_source_of(files) or proposal.source,
                        mapping=dict(proposal.mapping) if mapping is None else mapping,
                        sample=sample, samples=samples)
    record.mapping["files"] = files
    if not files:
        record.status = "format_error"
        record.message = str(proposal.mapping.get("format_error") or "the reply had no usable code")
        record.baseline = BASELINE_EAGER_NAME
    return record


def evaluate_torch_candidate(
    record: TurnRecord, folder: Path, problem: Any, *, seed: int, arch: str, allow_torch_ops: bool,
    build_timeout_s: float, eval_timeout_s: float, compile_baseline: bool = True, device: int = 0,
    reports: dict[tuple[int, int], Any] | None = None,
) -> None:
    """Build, guard, verify and time the candidate of ``record`` (its ``mapping["files"]``,
    written into ``folder``) in child processes, fill ``record`` from the result and score
    the structure of its ``.cu`` (cached in ``reports``).  Time limits in seconds;
    ``device``: the CUDA ordinal of the evaluation."""
    from cudaperf_cli.evaluate.torch_job import TorchEvalJob, run_torch_evaluation

    files: dict[str, str] = dict(record.mapping.get("files") or {})
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        (folder / name).write_text(text)
        paths.append(str(folder / name))
    record.build_dir = str(folder)
    job = TorchEvalJob(
        problem=str(problem.path), candidate=paths, format=candidate_format(files),
        seed=seed, shapes=[dict(problem.alt_shapes)] if problem.alt_shapes else [],
        allow_torch_ops=allow_torch_ops, arch=arch, build_timeout_s=build_timeout_s,
        compile_baseline=compile_baseline, device=device,
    )
    result = run_torch_evaluation(job, timeout_s=eval_timeout_s)
    fill_from_torch_result(record, result)
    cu = cuda_source_of(files)
    if cu is not None and record.status not in ("compile_error", "compile_timeout"):
        _score(record, cu, arch, problem, {} if reports is None else reports)


def fill_from_torch_result(record: TurnRecord, result: Any) -> None:
    """Copy a :class:`~cudaperf_cli.evaluate.torch_job.TorchEvalResult` into ``record``."""
    data = to_jsonable(result)
    record.evaluation = data
    record.build = dict(data.get("build") or {})
    record.status = data["status"]
    record.message = data.get("message") or ""
    summary = data.get("summary") or {}
    record.max_abs_err = summary.get("max_abs_err")
    record.max_rel_err = summary.get("max_rel_err")
    record.gpu_ms = summary.get("candidate_ms")
    record.gpu_ms_iqr = summary.get("candidate_ms_iqr")
    record.eager_ms = summary.get("eager_ms")
    record.compile_ms = summary.get("compile_ms")
    record.speedup_kernel = summary.get("speedup_eager")
    record.speedup_compile = summary.get("speedup_compile")
    record.baseline = summary.get("baseline_eager") or BASELINE_EAGER_NAME
    record.guard = (data.get("guard") or {}).get("id")
    resources = [k for lib in record.build.get("libs") or [] for k in (lib.get("resources") or [])]
    if resources:  # ptxas -v of the fast format's kernels
        record.registers = max(int(k.get("registers") or 0) for k in resources)
        record.spill_bytes = sum(int(k.get("spill_store_bytes") or 0) + int(k.get("spill_load_bytes") or 0)
                                 for k in resources)
    seconds = record.build.get("seconds")
    record.compile_s = None if seconds is None else (0.0 if record.build.get("cached") else float(seconds))
    record.compile_cached = bool(record.build.get("cached"))
    record.eval_s = data.get("elapsed_s")


def run_torch_optimize(opts: Any, resumed: Any, console: Any, detected_arch: str | None,
                       t_start: float | None = None) -> int:
    """``cudaperf optimize FILE.py`` (after the C path's option checks and ``--resume``
    loading); returns the exit code."""
    from rich.markup import escape

    from cudaperf_cli.agent.optimize import (
        EXIT_NO_CORRECT, EXIT_NO_DEVICE, EXIT_OK, conclude, drive_loop, make_ranker, options_to_json,
        propose_or_refuse, restore_run, _file_sha256, _version,
    )
    from cudaperf_cli.agent.render import QuietObserver, RichObserver, best_panel
    from cudaperf_cli.problems.pytorch import load_torch_problem

    human = not opts.json_output
    written_before = bool(resumed and resumed.output_sha256 and _output_digest(
        Path(opts.output) if opts.output else Path.cwd() / f"{opts.file.stem}_cuda") == resumed.output_sha256)
    out_dir = resolve_torch_output(opts, written_before)
    arch = opts.arch or detected_arch or "sm_90"
    if opts.policy != "builtin":  # a model policy's missing options fail before any work
        make_torch_policy(opts)
    ranker = make_ranker(opts)  # a bad --ranker fails before any work too

    if human:
        with console.status(f"loading {opts.file.name} (child process: Model, get_inputs, alt shapes)"):
            problem = load_torch_problem(opts.file, timeout_s=max(60.0, opts.eval_timeout_s))
    else:
        problem = load_torch_problem(opts.file, timeout_s=max(60.0, opts.eval_timeout_s))
    policy = make_torch_policy(opts)
    if hasattr(policy, "arch"):
        policy.arch = arch

    if resumed is None:
        store = RunStore(opts.run_root, f"{opts.file.stem}-torch")
        store.write_json("run.json", {
            "options": options_to_json(opts), "file_sha256": _file_sha256(opts.file),
            "cudaperf": _version(), "kind": "torch",
        })
        store.write_json("problem.json", {"kind": "torch", "arch": arch, "policy": opts.policy,
                                          **problem.to_json()})
        history: list[TurnRecord] = []
    else:
        store, history = restore_run(resumed, policy, opts.samples)

    if human:
        if resumed is not None:
            console.print(f"resuming {escape(str(store.path))}: {len({r.turn for r in history})} "
                          f"turn(s) done, {len(history)} candidate(s) kept")
        console.print(f"[bold]{escape(problem.name)}[/] ({escape(str(opts.file))}): {escape(problem.describe())}"
                      + ("" if detected_arch else " [yellow](no GPU detected)[/]"))
        shapes = ("alt shapes " + ", ".join(f"{k}={v}" for k, v in problem.alt_shapes.items())
                  if problem.alt_shapes else f"no alt shapes ({problem.alt_note})")
        console.print(f"verify: 3 trials at the default shapes; {escape(shapes)}; "
                      f"time vs PyTorch eager and torch.compile; nvcc -arch={arch}")

    allow_library = opts.policy == "builtin"  # the built-in policy leaves matmul/conv to cuBLAS/cuDNN
    reports: dict[tuple[int, int], Any] = {}

    def run_turn(turn: int, history: list[TurnRecord]) -> list[TurnRecord]:
        observer.stage(turn, "writing candidates" if opts.samples > 1 else "writing a candidate")
        proposals, refusal = propose_or_refuse(policy, problem, turn, history, opts, store, ranker)
        if refusal is not None:
            return [refusal]
        records = []
        for k, proposal in enumerate(proposals):
            record = torch_candidate_record(proposal, turn, sample=k, samples=opts.samples)
            label = f"sample {k + 1}/{len(proposals)}: " if len(proposals) > 1 else ""
            if record.status == "pending":
                observer.stage(turn, label + "building, verifying and timing (child processes)")
                evaluate_torch_candidate(
                    record, store.subdir("candidates") / f"turn{turn + 1}-sample{k + 1}", problem,
                    seed=opts.seed, arch=arch, allow_torch_ops=allow_library,
                    build_timeout_s=opts.compile_timeout_s, eval_timeout_s=opts.eval_timeout_s,
                    compile_baseline=opts.compile_baseline, reports=reports,
                )
            record.feedback = feedback_for(record)
            records.append(record)
        follow(records)
        return records

    title = f"{problem.name}: {opts.policy} policy"
    observer: Any = RichObserver(console, title, kind="torch") if human else QuietObserver()
    if human and history:
        observer.records.extend(history)
    result, interrupted, loop_s = drive_loop(opts, store, policy, run_turn, history, observer, console)
    wall_s = loop_s if t_start is None else time.perf_counter() - t_start

    def finish(res: LoopResult) -> tuple[int, list[str], Path | None]:
        best = res.best
        if best is None:
            if any(r.status == "no_device" for r in res.turns):
                return EXIT_NO_DEVICE, ["No CUDA device: nothing was verified, nothing written."], None
            if all(r.status == "refused" for r in res.turns):
                return EXIT_NO_CORRECT, ["The policy produced no candidate; nothing written."], None
            return EXIT_NO_CORRECT, ["No candidate passed verification; nothing written."], None
        src = Path(best.build_dir or "")
        try:
            if out_dir.exists():
                shutil.rmtree(out_dir)
            shutil.copytree(src, out_dir, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        except OSError as exc:
            raise CudaperfError(f"cannot write {out_dir}: {exc.strerror or exc}",
                                hint=f"the candidate stays in {src}") from None
        fmt = "fast (model.py + kernel.cu)" if (out_dir / "kernel.cu").exists() else "load_inline (model.py)"
        return EXIT_OK, [
            f"written     {out_dir}/ ({fmt})",
            f"use         import {out_dir}/model.py; ModelNew(*get_init_inputs()) with Model's "
            "state_dict, on CUDA tensors",
        ], out_dir

    def make_summary(res: LoopResult, written: Path | None, code: int) -> dict[str, Any]:
        def brief(r: TurnRecord) -> dict[str, Any]:
            d = to_jsonable(r)
            for k in ("source", "build", "evaluation"):
                d.pop(k, None)
            return d

        best = res.best
        return {
            "kind": "torch",
            "file": str(problem.path),
            "problem": problem.name,
            "constants": problem.constants,
            "alt_shapes": problem.alt_shapes,
            "arch": arch,
            "baseline": BASELINE_EAGER_NAME,
            "baselines": {"eager": BASELINE_EAGER_NAME, "compile": "torch.compile (default mode)"},
            "turns": [brief(r) for r in res.turns],
            "best_turn": None if best is None else best.turn + 1,
            "best_sample": None if best is None else best.sample + 1,
            "best": None if best is None else brief(best),
            "output": None if written is None else str(written),
            "output_sha256": None if written is None else _output_digest(written),
            "samples": opts.samples,
            "turn_count": res.turn_count,
            "run_dir": str(store.path),
            "stop_reason": res.stop_reason,
            "exit_code": code,
            "wall_s": wall_s,
        }

    return conclude(opts, store, result, interrupted, console, finish=finish,
                    make_summary=make_summary, reports=reports, best_panel=best_panel)


def make_torch_policy(opts: Any) -> Any:
    """The policy for a PyTorch problem: the built-in fusion policy, or a model policy.

    Raises:
        CudaperfError: unknown policy or missing options (exit code 2).
    """
    if opts.policy == "builtin":
        try:
            from cudaperf_cli.policies.builtin_torch.policy import BuiltinTorchPolicy
        except ImportError as exc:  # pragma: no cover - a broken install
            raise CudaperfError(f"the built-in PyTorch policy cannot be loaded: {exc}") from None
        return BuiltinTorchPolicy()
    from cudaperf_cli.agent.optimize import make_policy

    return make_policy(opts.policy, opts)


def _score(record: TurnRecord, cuda_source: str, arch: str, problem: Any,
           reports: dict[tuple[int, int], Any]) -> None:
    """Static structural score of the candidate's ``kernel.cu`` (advisory, never fails)."""
    from cudaperf_cli.structure import analyze_source
    from cudaperf_cli.structure.gpus import default_gpu

    try:
        report = analyze_source(cuda_source, arch=arch, gpu=default_gpu(arch), sizes=problem.constants,
                                source_name=f"turn {record.label}: kernel.cu")
    except Exception as exc:  # noqa: BLE001
        record.structure_reasons = [f"structural analysis failed: {exc}"]
        return
    reports[(record.turn, record.sample)] = report
    record.structure_score = report.score
    record.structure_reasons = report.reasons(3)


def _output_digest(folder: Path) -> str | None:
    """SHA-256 over a result folder's files (names and bytes), or None if absent."""
    import hashlib

    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


__all__ = ["fill_from_torch_result", "make_torch_policy", "resolve_torch_output", "run_torch_optimize"]
