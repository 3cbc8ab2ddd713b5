"""``cudaperf data generate``, ``cudaperf data check``, ``cudaperf data measure`` (docs/dataset.md).

    cudaperf data generate --kind c|torch --count N --seed S -o DIR [--no-check] [-j N]
    cudaperf data check DIR [--compile distinct|first|all|none] [-j N] [--limit N]
    cudaperf data measure DIR [--configs main,large] [--executor local|ray] [--turns 12] [--samples K]

Registered on ``data_app`` (``cli/ranker.py``) by ``cli/main.py`` importing this module.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from cudaperf_cli.cli.common import fail
from cudaperf_cli.cli.ranker import data_app
from cudaperf_cli.core import CudaperfError


def _jobs(jobs: Optional[int]) -> int:
    return jobs or max(1, os.cpu_count() or 1)


def _check_arch(arch: str) -> None:
    """Refuse an ``--arch`` nvcc would not take (``sm_90``, ``sm_90a``, ``compute_90``)
    before anything runs. Raises CudaperfError."""
    import re

    if not re.fullmatch(r"(sm|compute)_\d{2,3}[af]?", arch):
        raise CudaperfError(f"--arch must be an nvcc architecture such as sm_90, not '{arch}'")


def _run_check(root: Path, *, kinds: list[str], compile_mode: str, arch: str, jobs: int, limit: Optional[int],
               recheck: bool, json_out: bool) -> dict:
    """The check with a progress bar (stderr); returns its summary."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from cudaperf_cli.data.check import check_dataset, read_check_log, to_check
    from cudaperf_cli.data.dataset import read_manifest

    doc = read_manifest(root)
    total = len(to_check(root, doc, read_check_log(root), kinds=kinds, recheck=recheck, limit=limit)[0])
    tallies = {"ok": 0, "refused": 0, "failed": 0}
    with Progress(TextColumn("checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True), disable=json_out) as bar:
        task = bar.add_task("", total=total)

        def advance(row: dict) -> None:
            key = "failed" if not row["ok"] else "refused" if row["refusal"] else "ok"
            tallies[key] += 1
            bar.update(task, advance=1, description=f"ok {tallies['ok']}, refused by the built-in policy "
                       f"{tallies['refused']}, failed {tallies['failed']}")
            if not row["ok"]:  # the message quotes code (A[i][j]): escaped, not read as markup
                bar.console.print(f"[red]failed[/red] {escape(row['id'])}: {escape(str(row['error'] or row['compile_error']))}",
                                  highlight=False, markup=True)

        return check_dataset(root, kinds=kinds, compile_mode=compile_mode, arch=arch, jobs=jobs, limit=limit,
                             recheck=recheck, progress=advance)


def _print_check(summary: dict) -> None:
    from cudaperf_cli.data.check import summary_lines

    print(f"checked {summary['checked_now']} problem(s) in {summary['wall_s']} s with {summary['jobs']} worker(s)")
    for line in summary_lines(summary):
        print(line)


@data_app.command("generate")
def generate_cmd(
    kind: str = typer.Option(..., "--kind", help="c (affine loop nests with main and an init function) or torch "
                             "(KernelBench-format modules)."),
    count: int = typer.Option(..., "--count", "-n", min=1, max=1_000_000, help="Problems to generate (distinct "
                              "structures)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the draws (the same seed gives the same set)."),
    output: Path = typer.Option(..., "--output", "-o", help="Dataset folder (problems under <kind>/, manifest.json)."),
    check: bool = typer.Option(True, "--check/--no-check", help="Check every problem by running it (load, "
                               "reference, plan, nvcc) after writing; --no-check: later, with cudaperf data check."),
    compile_mode: str = typer.Option("distinct", "--compile", help="Candidates compiled by the check: distinct "
                                     "(one per combination of kernel kinds), first, all or none."),
    arch: str = typer.Option("sm_90", "--arch", help="nvcc -arch of the compile check."),
    test_fraction: float = typer.Option(0.2, "--test-fraction", min=0.01, max=0.99,
                                        help="Fraction of the families held out as the test split."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, max=256, help="Worker processes (default: "
                                       "the CPU cores)."),
    force: bool = typer.Option(False, "--force", help="Replace this kind's problems in an existing dataset."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as one JSON document."),
) -> None:
    """Generate a dataset of problems from cudaperf's own grammars, deduplicated by structure,
    with three input configurations each, split by family; then check them by running them."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from cudaperf_cli.data.dataset import check_output, dataset_lock, generate

    phase = "checking the options"
    try:
        check_output(output, kind, force=force)
        from cudaperf_cli.data.check import COMPILE_MODES

        if check and compile_mode not in COMPILE_MODES:  # before anything is drawn or written
            raise CudaperfError(f"--compile must be one of {', '.join(COMPILE_MODES)}, not '{compile_mode}'")
        if check:
            _check_arch(arch)
        new_folder = not output.exists()
        with dataset_lock(output, create=True):
            phase = "drawing"
            try:
                with Progress(TextColumn(f"generating {kind}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), console=Console(stderr=True), disable=json_out) as bar:
                    task = bar.add_task("", total=count)

                    def writing() -> None:
                        nonlocal phase
                        phase = "writing"

                    gen = generate(output, kind, count, seed, force=force, jobs=_jobs(jobs),
                                   test_fraction=test_fraction, progress=lambda n: bar.advance(task, n),
                                   on_write=writing)
            except (KeyboardInterrupt, CudaperfError):
                if new_folder and phase == "drawing":  # nothing was written: no empty folder left
                    import shutil

                    shutil.rmtree(output, ignore_errors=True)
                raise
            summary = None
            if check:
                phase = "checking"
                summary = _run_check(output, kinds=[kind], compile_mode=compile_mode, arch=arch, jobs=_jobs(jobs),
                                     limit=None, recheck=False, json_out=json_out)
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    except KeyboardInterrupt:
        print({"checking the options": "interrupted: nothing was written",
               "drawing": f"interrupted while drawing: nothing in {output} was changed",
               "writing": f"interrupted while writing: run the same command with --force to generate {kind} again",
               "checking": f"interrupted: the problems are written; cudaperf data check {output} resumes the check",
               }[phase], file=sys.stderr)
        raise typer.Exit(130)
    if json_out:
        print(json.dumps({"output": str(output), "kind": kind, "generation": gen, "check": summary}))
        raise typer.Exit(_check_exit(summary))
    print(f"{output}: {gen['count']} {kind} problem(s) of {len(gen['per_family'])} families from {gen['draws']} draws "
          f"in {gen['seconds']:.1f} s ({gen['duplicates']} duplicate structures, {gen['degenerate']} degenerate"
          + (f"; exhausted: {', '.join(gen['exhausted_families'])}" if gen["exhausted_families"] else "") + ")")
    if gen["count"] < count:
        print(f"warning: {count} asked, {gen['count']} distinct structures exist in the grammar", file=sys.stderr)
    if summary is not None:
        _print_check(summary)
    raise typer.Exit(_check_exit(summary))


def _check_exit(summary: Optional[dict]) -> int:
    """1 when a checked problem failed its check (load, reference or compile), else 0."""
    if summary is None:
        return 0
    return 1 if any(k.get("checked", 0) > k.get("ok", 0) for k in summary["kinds"].values()) else 0


@data_app.command("check")
def check_cmd(
    root: Path = typer.Argument(..., metavar="DIR", help="Dataset folder (cudaperf data generate)."),
    kind: Optional[str] = typer.Option(None, "--kind", help="c or torch (default: both)."),
    compile_mode: str = typer.Option("distinct", "--compile", help="distinct, first, all or none."),
    arch: str = typer.Option("sm_90", "--arch", help="nvcc -arch of the compile check."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, max=256, help="Worker processes."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Check at most this many problems now."),
    recheck: bool = typer.Option(False, "--recheck", help="Check again the problems already checked."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as one JSON document."),
) -> None:
    """Check a dataset's problems by running them (resumes: problems in check.jsonl are skipped).
    Exit 1 when a checked problem failed (load, reference or compile), else 0."""
    try:
        kinds = [kind] if kind else ["c", "torch"]
        if kind not in (None, "c", "torch"):
            raise CudaperfError(f"--kind must be c or torch, not '{kind}'")
        from cudaperf_cli.data.check import COMPILE_MODES
        from cudaperf_cli.data.dataset import dataset_lock, read_manifest

        if compile_mode not in COMPILE_MODES:
            raise CudaperfError(f"--compile must be one of {', '.join(COMPILE_MODES)}, not '{compile_mode}'")
        _check_arch(arch)
        read_manifest(root)  # not a dataset: said before a lock file is made there
        with dataset_lock(root):
            summary = _run_check(root, kinds=kinds, compile_mode=compile_mode, arch=arch, jobs=_jobs(jobs),
                                 limit=limit, recheck=recheck, json_out=json_out)
    except CudaperfError as err:
        fail(err)
    except OSError as exc:  # the dataset cannot be written (read-only, a folder for a file)
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    except KeyboardInterrupt:
        print(f"interrupted: finished checks are in {root}/check.jsonl; run again to resume", file=sys.stderr)
        raise typer.Exit(130)
    if json_out:
        print(json.dumps(summary))
    else:
        _print_check(summary)
    raise typer.Exit(_check_exit(summary))


@data_app.command("measure")
def measure_cmd(
    root: Path = typer.Argument(..., metavar="DIR", help="Dataset folder (cudaperf data generate)."),
    configs: str = typer.Option("main", "--configs", help="Input configurations to measure, comma-separated "
                                "(small_odd, main, large): one bench each."),
    kind: Optional[str] = typer.Option(None, "--kind", help="c or torch (default: both)."),
    split: Optional[str] = typer.Option(None, "--split", help="train or test (default: both)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="At most this many problems of each kind, "
                                        "taken round-robin over the families."),
    offset: int = typer.Option(0, "--offset", min=0, help="Skip the first N problems of each kind's order "
                               "(measured elsewhere: another machine, an earlier session's --limit N)."),
    all_problems: bool = typer.Option(False, "--all", help="Also problems whose check failed or that the "
                                      "built-in policy refused (for a model policy)."),
    policy: str = typer.Option("builtin", "--policy", help="optimize --policy."),
    turns: int = typer.Option(12, "--turns", "-n", min=1, max=1000, help="optimize --turns (12: every built-in "
                              "candidate of a plan)."),
    samples: Optional[int] = typer.Option(None, "--samples", "-k", min=1, max=64, help="optimize --samples."),
    patience: Optional[int] = typer.Option(12, "--patience", min=1, help="optimize --patience."),
    model: Optional[str] = typer.Option(None, "--model", help="optimize --model."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="optimize --base-url."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1.0, help="optimize --timeout, seconds."),
    problem_timeout: float = typer.Option(1800.0, "--problem-timeout", min=1.0, help="One problem's limit, seconds."),
    executor: str = typer.Option("local", "--executor", help="local or ray (docs/executor.md)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="--executor ray: the cluster."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, max=1024, help="Problems at once."),
    compile_baseline: Optional[bool] = typer.Option(
        None, "--compile-baseline/--no-compile-baseline",
        help="optimize --compile-baseline / --no-compile-baseline (PyTorch problems: torch.compile timed too)."),
    min_margin: float = typer.Option(0.05, "--min-margin", min=0.0, help="Least relative gap of a speed pair."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as one JSON document."),
) -> None:
    """Measure a dataset: one cudaperf bench per configuration (resumed when its folder exists),
    then DIR/candidates.jsonl and the ranker's DIR/pairs.jsonl (with family and split)."""
    from cudaperf_cli.bench.runner import BenchOptions, PolicySettings
    from cudaperf_cli.cli.bench import optimize_flags
    from cudaperf_cli.data.measure import measure

    try:
        names = list(dict.fromkeys(c.strip() for c in configs.split(",") if c.strip()))  # main,main: once
        bad = [c for c in names if c not in ("small_odd", "main", "large")]
        if not names or bad:
            raise CudaperfError(f"--configs: unknown configuration {', '.join(bad) or '(none)'}",
                                hint="choose among small_odd, main, large")
        if kind not in (None, "c", "torch"):
            raise CudaperfError(f"--kind must be c or torch, not '{kind}'")
        if split not in (None, "train", "test"):
            raise CudaperfError(f"--split must be train or test, not '{split}'")
        if executor not in ("local", "ray"):
            raise CudaperfError(f"--executor must be local or ray, not '{executor}'")
        import contextlib

        from cudaperf_cli.bench.executor import OPTIMIZE_CMD_ENV
        from cudaperf_cli.data.dataset import dataset_lock, read_manifest
        from cudaperf_cli.data.measure import select

        kinds = [kind] if kind else ["c", "torch"]
        doc = read_manifest(root)  # not a dataset: said before a lock file is made there
        entries = select(doc, kinds=kinds, split=split, limit=limit, only_checked=not all_problems, offset=offset)
        if not entries:
            raise CudaperfError(f"nothing to measure in {root} (kinds {', '.join(kinds)}"
                                + (f", split {split}" if split else "") + (f", offset {offset}" if offset else "") + ")")
        from cudaperf_cli.data.check import changed_since_generated

        changed = [e["id"] for e in entries if changed_since_generated(root, e) is not None]
        if changed:
            print(f"warning: {len(changed)} problem(s) changed since data generate wrote them are left out "
                  f"({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''}; data check reports them)",
                  file=sys.stderr)
        unchecked = sum(1 for e in entries if not e.get("check"))
        if unchecked:
            print(f"warning: {unchecked} of the {len(entries)} problems to measure were never checked "
                  f"(cudaperf data check {root} first leaves out those that fail)", file=sys.stderr)
        # nothing is timed without a GPU: say so before compiling anything (unless the
        # optimize command was replaced, $CUDAPERF_BENCH_OPTIMIZE: its needs are its own)
        if executor == "local" and not os.environ.get(OPTIMIZE_CMD_ENV):
            from cudaperf_cli.evaluate import probe_device

            dev = probe_device()
            if not dev.get("available"):
                err = CudaperfError("data measure verifies and times candidates on a GPU, and there is no CUDA "
                                    f"device here: {dev.get('reason', 'unknown reason')}",
                                    hint="run it on a GPU machine, or with --executor ray on a cluster with GPU nodes")
                err.exit_code = 4  # docs/exit-codes.md: incomplete (no CUDA device)
                raise err
        settings = PolicySettings(policy=policy, turns=turns, samples=samples, patience=patience, model=model,
                                  base_url=base_url, timeout=timeout, compile_baseline=compile_baseline)
        opts = BenchOptions(settings=settings, jobs=jobs, problem_timeout_s=problem_timeout, json_output=json_out,
                            known_flags=optimize_flags(), executor=executor, ray_address=ray_address)
        # --json: stdout holds the summary alone; the benches' own output goes to stderr
        with dataset_lock(root), contextlib.redirect_stdout(sys.stderr) if json_out else contextlib.nullcontext():
            summary, codes = measure(root, configs=names, kinds=kinds, split=split,
                                     limit=limit, only_checked=not all_problems, bench_options=opts,
                                     min_margin=min_margin, offset=offset)
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    except KeyboardInterrupt:
        print(f"interrupted: run the same command again to resume ({root}/measure/<config>/bench)", file=sys.stderr)
        raise typer.Exit(130)
    doc = summary.to_json()
    timed = doc["correct"] > 0
    if json_out:
        print(json.dumps(doc))
    else:
        print(f"{root}, all measured so far: {doc['candidates']} candidates ({doc['correct']} verified) of {doc['problems']} problems; "
              f"{doc['speed_pairs']} speed + {doc['correctness_pairs']} correctness pairs of "
              f"{doc['problems_with_pairs']} problems in {doc['families_with_pairs']} families; "
              f"{doc['bench_wall_s']} s")
        if timed and 130 not in codes:
            print(f"next: cudaperf train ranker --data {root / 'pairs.jsonl'} --split-by family --cv 5 -o checkpoints/NAME")
    if 130 in codes:
        print(f"interrupted: run the same command again to resume ({root}/measure/<config>/bench)", file=sys.stderr)
        raise typer.Exit(130)
    if not timed:  # nothing verified and timed: no pairs, nothing to train on
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(doc["statuses"].items(), key=lambda kv: -kv[1]))
        err = CudaperfError(f"no candidate was verified and timed ({verdicts or 'no candidate at all'}): "
                            "no pairs were made",
                            hint="measure on a machine with a GPU" if "no_device" in doc["statuses"] else
                            f"see {root}/measure/<config>/bench/report.md")
        err.exit_code = 4 if "no_device" in doc["statuses"] else 1  # docs/exit-codes.md: incomplete / none correct
        fail(err)
    raise typer.Exit(0)

__all__ = ["check_cmd", "generate_cmd", "measure_cmd"]
