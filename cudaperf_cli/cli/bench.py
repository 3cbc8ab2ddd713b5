"""``cudaperf bench``: run a suite of problems through optimize, and compare two runs.

    cudaperf bench SUITE [options]          (same as: cudaperf bench run SUITE)
    cudaperf bench compare A.json B.json

Registered by ``cudaperf_cli/cli/main.py`` as a Typer sub-app.  The group's first argument
is taken as a suite unless it names a sub-command, so ``bench SUITE`` runs it; a suite
folder literally named ``compare`` or ``run`` is reached as ``bench run compare``.
See docs/bench.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from cudaperf_cli.cli.common import fail
from cudaperf_cli.core import CudaperfError


def optimize_flags() -> frozenset[str]:
    """Every option string ``cudaperf optimize`` accepts, read from the command itself (the
    bench passes only those; a setting whose flag is missing is refused, exit 2).  Here in
    the cli layer, the top of the pipeline: the bench stage below it gets the set through
    ``BenchOptions.known_flags`` and never imports the cli."""
    import typer.main

    from cudaperf_cli.cli.main import app

    group = typer.main.get_command(app)
    command = group.commands["optimize"]  # type: ignore[attr-defined]
    flags: set[str] = set()
    for param in command.params:
        flags.update(getattr(param, "opts", []))
        flags.update(getattr(param, "secondary_opts", []))
    return frozenset(flags)


class _RunByDefault(TyperGroup):
    """A group whose first argument, when not a sub-command (nor ``--help``), is a suite:
    ``bench SUITE ...`` is ``bench run SUITE ...``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """The usage line names the suite: ``bench SUITE [OPTIONS] | compare A.json B.json``
        (click's default, ``[OPTIONS] COMMAND [ARGS]...``, hid that a suite is the first
        argument)."""
        return ["SUITE [OPTIONS] | run SUITE [OPTIONS] | compare A.json B.json"]


bench_app = typer.Typer(
    cls=_RunByDefault,
    name="bench",
    help="Run a suite of problems through optimize (cudaperf bench SUITE), or compare two "
    "runs (cudaperf bench compare A.json B.json).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@bench_app.command("run")
def run(
    suite: Path = typer.Argument(
        ..., metavar="SUITE", help="Folder of *.c and KernelBench-format *.py problems, a .toml manifest, or one "
        "file (docs/bench.md)."
    ),
    out_dir: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Output folder (default: bench-results/<suite>-<time>)."
    ),
    jobs: Optional[int] = typer.Option(
        None, "--jobs", "-j", min=1, max=1024,
        help="Problems run at once (default: the CPU cores; --executor ray: the cluster's GPUs x "
        "--per-gpu, or its CPUs without GPUs); GPU evaluations still run one at a time per GPU.",
    ),
    problem_timeout: float = typer.Option(
        3600.0, "--problem-timeout", min=1.0, max=7 * 86400.0,
        help="Time limit of one problem's whole optimize run, seconds (a manifest's 'timeout' "
        "overrides it).",
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in -o DIR: problems already done are skipped."
    ),
    primary: str = typer.Option(
        "kernel", "--speedup", help="Headline speedup: kernel (kernel only) or e2e (copies "
        "included); both are reported."
    ),
    policy: str = typer.Option("builtin", "--policy", help="optimize --policy (builtin, openai, "
                               "vllm, transformers, replay)."),
    turns: int = typer.Option(3, "--turns", "-n", min=1, max=1000, help="optimize --turns."),
    samples: Optional[int] = typer.Option(None, "--samples", "-k", min=1, max=64,
                                          help="optimize --samples (candidates per turn)."),
    model: Optional[str] = typer.Option(None, "--model", help="optimize --model."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="optimize --base-url."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="optimize --api-key-env."),
    temperature: Optional[float] = typer.Option(None, "--temperature", min=0.0, max=2.0,
                                                help="optimize --temperature."),
    top_p: Optional[float] = typer.Option(None, "--top-p", min=0.0, max=1.0, help="optimize --top-p."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="optimize --max-tokens."),
    sampling_seed: Optional[int] = typer.Option(None, "--sampling-seed", min=0,
                                                help="optimize --sampling-seed."),
    request_timeout: Optional[float] = typer.Option(None, "--request-timeout", min=1.0,
                                                    help="optimize --request-timeout, seconds."),
    max_retries: Optional[int] = typer.Option(None, "--max-retries", min=0, max=20,
                                              help="optimize --max-retries."),
    replay: Optional[Path] = typer.Option(None, "--replay", help="optimize --replay."),
    target_speedup: Optional[float] = typer.Option(None, "--target-speedup", min=0.0,
                                                   help="optimize --target-speedup."),
    patience: Optional[int] = typer.Option(None, "--patience", min=1, help="optimize --patience."),
    timeout: Optional[float] = typer.Option(
        None, "--timeout", min=1.0, max=86400.0,
        help="optimize --timeout: one candidate evaluation's limit, seconds."),
    compile_timeout: Optional[float] = typer.Option(None, "--compile-timeout", min=1.0,
                                                    help="optimize --compile-timeout, seconds."),
    arch: Optional[str] = typer.Option(None, "--arch", help="optimize --arch."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="optimize --seed."),
    config: Optional[Path] = typer.Option(None, "--config", help="optimize --config."),
    ranker: Optional[Path] = typer.Option(None, "--ranker", help="optimize --ranker (checkpoint folder)."),
    ranker_top: Optional[int] = typer.Option(None, "--ranker-top", min=1, max=64,
                                             help="optimize --ranker-top."),
    compile_baseline: Optional[bool] = typer.Option(
        None, "--compile-baseline/--no-compile-baseline",
        help="optimize --compile-baseline / --no-compile-baseline (PyTorch problems)."),
    atol: Optional[float] = typer.Option(
        None, "--atol", min=0.0, help="optimize --atol (every dtype; default: the tolerance table)."),
    rtol: Optional[float] = typer.Option(
        None, "--rtol", min=0.0, help="optimize --rtol (every dtype; default: the tolerance table)."),
    slow_factor: Optional[float] = typer.Option(
        None, "--slow-factor", min=0.0,
        help="optimize --slow-factor: a verified candidate this many times slower than the best "
        "or the baseline stops timing early (status slow)."),
    sanitize: Optional[bool] = typer.Option(
        None, "--sanitize/--no-sanitize",
        help="optimize --sanitize / --no-sanitize: the compute-sanitizer stage of C problems."),
    executor: str = typer.Option(
        "local", "--executor", help="Where problems run: local (child processes of this machine) "
        "or ray (tasks on a Ray cluster's nodes; needs a filesystem the nodes share; docs/executor.md)."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="--executor ray: the cluster (host:port, ray://host:port, or auto: "
        "a Ray already running on this machine); default $RAY_ADDRESS, else a Ray started by the "
        "bench on this machine."),
    per_gpu: Optional[int] = typer.Option(
        None, "--per-gpu", min=1, max=64, help="--executor ray: problems placed on one GPU at once "
        "(their compiles overlap; evaluations take turns on the GPU); default 2."),
    retries: Optional[int] = typer.Option(
        None, "--retries", min=0, max=20, help="--executor ray: new attempts of a problem whose worker "
        "or node was lost; default 2."),
    json_out: bool = typer.Option(False, "--json", help="Print report.json only."),
) -> None:
    """Run every problem of SUITE through optimize and write a report.

    Exit code 0 when the suite ran (whatever its problems' statuses), 2 on bad input, 130
    when interrupted (the report covers the finished problems; --resume continues).
    """
    from cudaperf_cli.bench.command import run_bench_command
    from cudaperf_cli.bench.runner import BenchOptions, PolicySettings

    try:
        if primary not in ("kernel", "e2e"):
            raise CudaperfError(f"--speedup must be kernel or e2e, not '{primary}'")
        if executor not in ("local", "ray"):
            raise CudaperfError(f"--executor must be local or ray, not '{executor}'")
        for flag, given in (("--ray-address", ray_address), ("--per-gpu", per_gpu), ("--retries", retries)):
            if executor == "local" and given is not None:
                raise CudaperfError(f"{flag} needs --executor ray")
        settings = PolicySettings(
            policy=policy, turns=turns, samples=samples, model=model, base_url=base_url,
            api_key_env=api_key_env, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, sampling_seed=sampling_seed, request_timeout=request_timeout,
            max_retries=max_retries, replay=None if replay is None else str(replay.resolve()),
            target_speedup=target_speedup, patience=patience, timeout=timeout,
            compile_timeout=compile_timeout, arch=arch, seed=seed,
            config=None if config is None else str(config.resolve()),
            ranker=None if ranker is None else str(Path(ranker).resolve()),
            ranker_top=ranker_top, compile_baseline=compile_baseline,
            atol=atol, rtol=rtol, slow_factor=slow_factor, sanitize=sanitize,
        )
        opts = BenchOptions(settings=settings, out_dir=out_dir, jobs=jobs,
                            problem_timeout_s=problem_timeout, resume=resume,
                            json_output=json_out, primary=primary,
                            known_flags=optimize_flags(), executor=executor,
                            ray_address=ray_address, per_gpu=2 if per_gpu is None else per_gpu,
                            retries=2 if retries is None else retries)
        code = run_bench_command(suite, opts)
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130)
    raise typer.Exit(code)


@bench_app.command("compare")
def compare(
    a: Path = typer.Argument(..., metavar="A", help="report.json (or output folder) of run A."),
    b: Path = typer.Argument(..., metavar="B", help="report.json (or output folder) of run B."),
    force: bool = typer.Option(False, "--force", help="Compare even when the GPUs differ."),
    speedup: Optional[str] = typer.Option(
        None, "--speedup", help="Speedup to compare (default: A's headline, e.g. kernel)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> None:
    """Compare two bench reports: speedups per problem (ratio B/A) and suite metrics.

    Warns on stderr when GPU, driver, CUDA, nvcc, clocks or timing method differ; refuses
    reports from different GPUs (exit 2) unless --force.
    """
    from cudaperf_cli.bench.command import compare_command

    try:
        code = compare_command(a, b, force=force, json_output=json_out, key=speedup)
    except CudaperfError as err:
        fail(err)
    raise typer.Exit(code)


__all__ = ["bench_app", "optimize_flags"]
