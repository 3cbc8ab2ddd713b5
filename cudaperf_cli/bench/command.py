"""``cudaperf bench SUITE`` and ``cudaperf bench compare A B``: the commands, end to end.

run: load the suite -> check the flags against optimize -> the output folder (new, or the
one ``--resume`` continues) -> the executor (``local``, or ``ray``: connect to the cluster)
-> read the machine -> run the problems (progress on stderr)
-> report.json, report.md, report.png, candidates.jsonl -> summary (Rich, or ``--json``).
Exit codes: 0 the suite ran (whatever its problems' statuses), 2 bad input, 130 Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from cudaperf_cli.bench import metrics as M
from cudaperf_cli.bench.executor import Executor, make_executor
from cudaperf_cli.bench.runner import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    BenchOptions,
    SuiteRun,
    default_out_dir,
    settings_doc,
    write_json_atomic,
)
from cudaperf_cli.bench.suite import Suite, load_suite
from cudaperf_cli.core import CudaperfError

#: Settings a resumed run may change (they do not change what a problem's result means).
RESUMABLE = frozenset({"jobs", "problem_timeout_s", "executor", "ray_address", "per_gpu", "retries"})


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)


def prepare_out_dir(suite: Suite, opts: BenchOptions, settings: dict[str, Any]) -> tuple[Path, dict[str, Any] | None]:
    """The output folder, and its ``bench.json`` when resuming.

    Raises:
        CudaperfError: ``--resume`` without ``-o`` or without a bench run there, settings
            that differ from the run being resumed, or a new run into a non-empty folder
            (exit 2).
    """
    if opts.resume:
        if opts.out_dir is None:
            raise CudaperfError("--resume needs -o DIR: the output folder of the run to continue")
        meta_path = opts.out_dir / "bench.json"
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            raise CudaperfError(f"{opts.out_dir} holds no bench run to resume (no readable bench.json)",
                                hint="run without --resume to start one there") from None
        old = meta.get("settings") or {}
        changed = sorted(k for k in set(old) | set(settings)
                         if k not in RESUMABLE and old.get(k) != settings.get(k))
        if changed:
            what = ", ".join(f"{k} {old.get(k)!r} -> {settings.get(k)!r}" for k in changed)
            raise CudaperfError(f"the run in {opts.out_dir} used other settings: {what}",
                                hint="resume with the same flags, or start a new run with another -o")
        return opts.out_dir, meta
    out = opts.out_dir or default_out_dir(suite)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        hint = ("pass --resume to continue it" if (out / "bench.json").exists()
                else "choose another -o (or an empty folder)")
        raise CudaperfError(f"{out} already exists and is not empty", hint=hint)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CudaperfError(f"cannot create {out}: {exc.strerror or exc}") from None
    return out, None


def _previous_wall(out: Path) -> float:
    """Wall seconds of the earlier sessions of a resumed run (its last report.json)."""
    try:
        return float(json.loads((out / "report.json").read_text()).get("wall_s") or 0.0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0


def run_bench_command(suite_path: Path, opts: BenchOptions) -> int:
    """``cudaperf bench SUITE``; returns the exit code (0, or 130 after Ctrl-C).

    Raises:
        CudaperfError: bad input (the suite, the output folder, flags, an unknown executor,
            Ray missing or its cluster unreachable): exit 2.
    """
    suite = load_suite(suite_path)
    opts.settings.optimize_args(opts.known_flags)  # unknown flags: exit 2 before any work
    jobs = opts.jobs or 1  # the executor's default below, before anything is written
    out, meta = prepare_out_dir(suite, opts, settings_doc(suite, opts, jobs))
    try:
        executor = make_executor(opts.executor, out_dir=out, address=opts.ray_address,
                                 per_gpu=opts.per_gpu, retries=opts.retries,
                                 api_key_env=opts.settings.api_key_env)
    except (CudaperfError, KeyboardInterrupt):  # Ray unreachable, or Ctrl-C while connecting
        if meta is None and not any(out.iterdir()):  # the empty folder this run made
            out.rmdir()
        raise
    try:
        return _run_with(executor, suite_path, suite, opts, out, meta)
    finally:
        executor.close()


def _run_with(executor: Executor, suite_path: Path, suite: Suite, opts: BenchOptions, out: Path,
              meta: dict[str, Any] | None) -> int:
    """The run itself, on ``executor`` (see :func:`run_bench_command`)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from cudaperf_cli.agent.render import stdout_console
    from cudaperf_cli.bench.env import collect_env, env_differences
    from cudaperf_cli.bench.report import (
        build_report,
        executor_line,
        fmt_x,
        metrics_lines,
        summary_table,
        write_report,
    )

    jobs = opts.jobs or executor.default_jobs()
    if opts.settings.policy in ("vllm", "transformers") and jobs > 1 and executor.name == "local":
        _warn(f"--policy {opts.settings.policy} loads the model in every optimize process: running one "
              "problem at a time (-j 1)")
        jobs = 1
    settings = settings_doc(suite, opts, jobs)
    placement = executor.describe()
    err = Console(stderr=True, highlight=False)
    human = not opts.json_output

    if err.is_terminal:
        with err.status("reading the machine (GPU, driver, nvcc, clocks)"):
            env = collect_env()
    else:
        env = collect_env()
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if meta is not None:
        lines, gpu_differs = env_differences(meta.get("env") or {}, env)
        for line in lines:
            _warn(f"since the run started: {line}")
        if gpu_differs:
            raise CudaperfError(f"the run in {out} was measured on another GPU",
                                hint="start a new run with another -o")
        created = meta.get("created") or created
    else:
        write_json_atomic(out / "bench.json", {
            "schema_version": 1, "suite": {"name": suite.name, "source": str(suite.source)},
            "created": created, "settings": settings, "env": env,
        })

    # correct: verified (correct or slow); no GPU and does-not-fit are not failures
    tally = {"done": 0, "correct": 0, "failed": 0, "no_device": 0, "does_not_fit": 0, "missing_tool": 0}
    said: set[str] = set()  # messages printed once (14 PyTorch files without torch: one line)
    speeds: list[float] = []

    def count(res: dict[str, Any]) -> None:
        tally["done"] += 1
        tally[M.outcome_class(res.get("status"))] += 1
        if res.get("correct"):
            s = (res.get("speedups") or {}).get(opts.primary)
            if s is not None:
                speeds.append(s)

    def describe() -> str:
        g = M.geomean(speeds)
        extra = "".join(f" · {label} {tally[k]}" for k, label in
                        (("no_device", "not verified (no GPU)"), ("does_not_fit", "does not fit"),
                         ("missing_tool", "not run (missing tool)"))
                        if tally[k])
        return (f"done {tally['done']} · correct {tally['correct']} · failed {tally['failed']}"
                f"{extra} · geomean {fmt_x(g) if g else '-'}")

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=False)
    task = progress.add_task(describe(), total=len(suite.problems))

    def on_done(res: dict[str, Any]) -> None:
        count(res)
        progress.update(task, advance=1, description=describe())
        if human:
            s = (res.get("speedups") or {}).get(opts.primary)
            extra = f" {fmt_x(s)}" if s is not None else (f": {res['message']}" if res.get("message") else "")
            if res.get("status") == M.MISSING_TOOL and res.get("message") in said:
                extra = " (as above)"
            said.add(str(res.get("message")))
            flag = " (degenerate)" if res.get("degenerate") else ""
            progress.console.print(f"{escape(res['id'])}: {res['status']}{escape(extra)}{flag} "
                                   f"({res.get('wall_s') or 0:.0f} s)")

    runner = SuiteRun(suite, opts, out, env, on_done=on_done, executor=executor)
    done = runner.load_done() if opts.resume else {}
    for res in done.values():
        count(res)
    progress.update(task, completed=len(done), description=describe())
    todo = [p for p in suite.problems if p.id not in done]
    if done and human:
        err.print(f"resuming {out}: {len(done)} problem(s) done, {len(todo)} to run")
    if human and executor.name != "local":
        err.print(f"executor: {executor_line(placement)}; {jobs} problem(s) in flight",
                  highlight=False, soft_wrap=True)
    t0 = time.monotonic()
    # stdout is the report's (--json): Ray's driver prints its cluster's error messages ("A
    # worker died ...") to sys.stdout, so while problems run that is stderr; the executor is
    # closed (Ray shut down) before the report is printed
    with progress, contextlib.redirect_stdout(sys.stderr):
        try:
            new, interrupted = runner.run(todo, jobs)
        finally:
            executor.close()
    wall = time.monotonic() - t0 + (_previous_wall(out) if meta is not None else 0.0)
    results = [*done.values(), *new]
    report = build_report(suite=suite, settings=settings, env=env, results=results,
                          interrupted=interrupted, created=created, wall_s=wall, primary=opts.primary,
                          executor=placement)
    write_report(out, report, results)
    if opts.json_output:
        print(json.dumps(report, indent=2, default=str))
    else:
        console = stdout_console()
        console.print(summary_table(report))
        for line in metrics_lines(report):
            console.print(line, markup=False, highlight=False)
        console.print(f"report: {out / 'report.md'} (and report.json, report.png, "
                      f"candidates.jsonl)", markup=False)
    if interrupted:
        print(f"interrupted: {len(results)} of {len(suite.problems)} problem(s) finished; "
              f"continue with: cudaperf bench {suite_path} -o {out} --resume (same flags)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def compare_command(a_path: Path, b_path: Path, *, force: bool, json_output: bool,
                    key: str | None) -> int:
    """``cudaperf bench compare A.json B.json``; returns 0 (2 through CudaperfError)."""
    from cudaperf_cli.agent.render import stdout_console
    from cudaperf_cli.bench.report import compare_reports, compare_tables, load_report

    a, b = load_report(a_path), load_report(b_path)
    if key is not None and key not in a["metrics"]["speedup"] and key not in b["metrics"]["speedup"]:
        known = sorted(set(a["metrics"]["speedup"]) | set(b["metrics"]["speedup"]))
        raise CudaperfError(f"no speedup '{key}' in either report (they have: {', '.join(known)})")
    cmp = compare_reports(a, b, key)
    for line in cmp["env_warnings"]:
        _warn(line)
    if cmp["gpu_differs"] and not force:
        ga = (a["env"].get("gpu") or {}).get("name")
        gb = (b["env"].get("gpu") or {}).get("name")
        raise CudaperfError(f"the reports were measured on different GPUs ({ga} vs {gb}): their "
                            "speedups are not comparable", hint="pass --force to compare anyway")
    if json_output:
        print(json.dumps(cmp, indent=2, default=str))
        return 0
    console = stdout_console()
    for table in compare_tables(cmp, a_path.parent.name or str(a_path), b_path.parent.name or str(b_path)):
        console.print(table)
    return 0


__all__ = ["compare_command", "prepare_out_dir", "run_bench_command"]
