"""The ``cudaperf`` command line (Typer).  One module per command group; heavy imports lazy.

Errors: a known error (:class:`cudaperf_cli.core.CudaperfError`) prints one line on stderr
(plus an optional hint line) and exits with its code; see docs/exit-codes.md.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional

#: Rich help panels narrower than this cut option names (``--request-timeo…`` at 80
#: columns); below it, and when the help is piped, click's plain help is used (typer reads
#: ``TYPER_USE_RICH`` when it is imported, so this comes first).  Set TYPER_USE_RICH to choose.
RICH_HELP_MIN_COLUMNS = 150
if "TYPER_USE_RICH" not in os.environ and (
        not sys.stdout.isatty() or shutil.get_terminal_size((80, 24)).columns < RICH_HELP_MIN_COLUMNS):
    os.environ["TYPER_USE_RICH"] = "0"

import typer  # noqa: E402
from cudaperf_cli.cli import help_format  # noqa: E402

help_format.install()

from cudaperf_cli import __version__
from cudaperf_cli.cli.common import fail, parse_sizes
from cudaperf_cli.cli.bench import bench_app
from cudaperf_cli.cli.port import port
from cudaperf_cli.cli.ranker import data_app, rank, train_app
from cudaperf_cli.cli import dataset as _dataset  # noqa: F401,E402 - registers data generate/check/measure
from cudaperf_cli.cli.score import score
from cudaperf_cli.cli.train_policy import train_policy
from cudaperf_cli.core import CudaperfError, ProblemError

app = typer.Typer(
    name="cudaperf",
    help="Port hot C functions and PyTorch modules to verified, timed CUDA kernels and keep improving them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cudaperf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Port hot C functions and PyTorch modules to verified, timed CUDA kernels and keep improving them."""


@app.command()
def optimize(
    ctx: typer.Context,
    files: Optional[List[Path]] = typer.Argument(
        None, metavar="FILE", help="C file holding the function to port, or a KernelBench-format PyTorch .py "
        "(omit with --resume); for C, more .c files after it are linked into the reference, "
        "as cc takes them (e.g. utilities/polybench.c).", show_default=False,
    ),
    include: List[str] = typer.Option([], "-I", metavar="DIR", help="Include directory (repeatable), as for cc."),
    define: List[str] = typer.Option([], "-D", metavar="NAME[=VALUE]", help="Macro NAME[=VALUE] (repeatable), as for cc."),
    function: Optional[str] = typer.Option(
        None, "--function", "-f", help="Function to port (default: the #pragma scop one, "
        "else the only non-main function with a loop nest)."
    ),
    size: List[str] = typer.Option(
        [], "--size", "-s", metavar="NAME=VALUE", help="Size parameter NAME=VALUE (repeatable); default: main()'s."
    ),
    init: Optional[str] = typer.Option(
        None, "--init", help="Init function filling the data (default: detected by name)."
    ),
    turns: int = typer.Option(3, "--turns", "-n", min=1, max=1000, help="Turns to run (total, "
                              "also with --resume)."),
    samples: int = typer.Option(
        1, "--samples", "-k", min=1, max=64,
        help="Candidates per turn: a model policy samples k replies to one request; the "
        "built-in policy tries its next k mappings. Every one is evaluated.",
    ),
    target_speedup: Optional[float] = typer.Option(
        None, "--target-speedup", min=0.0, max=1e9,
        help="Stop once the best kernel-only speedup reaches this (x, vs the CPU baseline).",
    ),
    patience: Optional[int] = typer.Option(
        None, "--patience", min=1, help="Stop after this many turns in a row without a faster "
        "correct candidate.",
    ),
    policy: str = typer.Option(
        "builtin", "--policy",
        help="Policy writing candidates: builtin (no model), openai (any OpenAI-compatible "
        "server), vllm (in-process vLLM), transformers (a local checkpoint folder, in-process "
        "transformers), replay (replies recorded in a JSONL file).",
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="Model for --policy openai (as the server knows it), vllm "
        "(Hugging Face name or local path) or transformers (local folder only)."
    ),
    base_url: Optional[str] = typer.Option(
        None, "--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 "
        "(default: api.openai.com)."
    ),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env",
        help="Environment variable holding the API key (never logged; unset with --base-url: 'EMPTY').",
    ),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", min=0.0, max=2.0, help="Sampling temperature (model policies)."
    ),
    top_p: Optional[float] = typer.Option(
        None, "--top-p", min=0.0, max=1.0, help="Nucleus sampling top_p (model policies)."
    ),
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", min=1, help="Most tokens in one reply (model policies)."
    ),
    sampling_seed: Optional[int] = typer.Option(
        None, "--sampling-seed", min=0, help="Seed for the model's sampling, where the server "
        "supports it (the data seed is --seed)."
    ),
    request_timeout: float = typer.Option(
        600.0, "--request-timeout", min=1.0, max=86400.0,
        help="Time limit of one model request, seconds (--policy openai).",
    ),
    max_retries: int = typer.Option(
        2, "--max-retries", min=0, max=20,
        help="Retries of a failed model request (connection errors, 408/409/429/5xx; the "
        "openai client's own back-off).",
    ),
    context_tokens: int = typer.Option(
        16384, "--context-tokens", min=1000,
        help="Prompt budget in tokens (estimated); older turns are summarised beyond it.",
    ),
    replay: Optional[Path] = typer.Option(
        None, "--replay", help='JSONL file of replies for --policy replay: {"text": "..."} a '
        "line, or a run folder's turns.jsonl."
    ),
    ranker: Optional[Path] = typer.Option(
        None, "--ranker", help="Ranker checkpoint folder (cudaperf train ranker): orders each "
        "turn's samples before they are evaluated, best-ranked first (docs/ranker.md).",
    ),
    ranker_top: Optional[int] = typer.Option(
        None, "--ranker-top", min=1, max=64,
        help="With --ranker: evaluate only this many best-ranked samples of each turn (the "
        "others are written to ranked-out.jsonl in the run folder).",
    ),
    compile_baseline: bool = typer.Option(
        True, "--compile-baseline/--no-compile-baseline",
        help="PyTorch problems: also time torch.compile(Model), once per run with the eager "
        "baseline (off: eager only, a faster start).",
    ),
    sanitize: bool = typer.Option(
        True, "--sanitize/--no-sanitize",
        help="C problems: run a verified candidate that would become the best once more under "
        "compute-sanitizer memcheck and initcheck (its smallest configuration, untimed); a "
        "memory error rejects it (status sanitizer_error). Skipped with a warning where "
        "compute-sanitizer is not installed.",
    ),
    arch: Optional[str] = typer.Option(
        None, "--arch", help="nvcc architecture, e.g. sm_90 (default: the detected GPU's, else sm_90)."
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Result file (default: ./<stem>.cu); for a PyTorch "
        "problem a folder (default: ./<stem>_cuda/)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing result file."),
    run_root: Path = typer.Option(
        Path("cudaperf-runs"), "--run-dir", help="Folder for run folders (sources, logs, JSONL)."
    ),
    timeout: float = typer.Option(
        300.0, "--timeout", min=1.0, max=86400.0,
        help="Time limit of one candidate's evaluation, seconds.",
    ),
    compile_timeout: float = typer.Option(
        120.0, "--compile-timeout", min=1.0, max=86400.0,
        help="Time limit of one nvcc compile, seconds.",
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random input data."),
    atol: Optional[float] = typer.Option(
        None, "--atol", min=0.0, help="Absolute tolerance of the output comparison, every "
        "floating dtype (default per dtype: float32 1e-4, KernelBench's; float16/bfloat16 "
        "1e-2; float64 1e-9).",
    ),
    rtol: Optional[float] = typer.Option(
        None, "--rtol", min=0.0, help="Relative tolerance of the output comparison, every "
        "floating dtype (default per dtype: float32 1e-4, KernelBench's; float16/bfloat16 "
        "1e-2; float64 1e-7).",
    ),
    slow_factor: float = typer.Option(
        10.0, "--slow-factor", min=0.0, help="A verified candidate whose first timed calls "
        "are this many times slower than the best correct candidate of the run, or than the "
        "baseline, stops timing early with status 'slow' (0: never).",
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Never ask between turns (the default off a terminal)."
    ),
    resume: Optional[Path] = typer.Option(
        None, "--resume", help="Continue the run in this run folder (after a crash, Ctrl-C or "
        "'s'): its turns are kept, --turns is the new total."
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", help="TOML file of defaults (its 'optimize' table; default: "
        "$CUDAPERF_CONFIG, ./cudaperf.toml, ~/.config/cudaperf/config.toml)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document, nothing else."),
) -> None:
    """Port a C function or a PyTorch module to CUDA: build, verify and time candidates over
    several turns."""
    # The values as Typer converted them (ctx.params may hold click's raw strings for paths).
    args = {name: value for name, value in locals().items() if name != "ctx"}
    from cudaperf_cli.agent.optimize import OptimizeOptions, run_optimize_command
    from cudaperf_cli.cli.config import apply_config

    try:
        if resume is None:
            import typing

            p, cfg = apply_config(ctx, "optimize", config, args, typing.get_type_hints(optimize))
            if cfg is not None and p.get("_config_applied") and not p["json_out"]:
                typer.echo(f"defaults from {cfg}: {', '.join(p['_config_applied'])}")
        else:  # a resumed run keeps its own options; the command line may change a few
            p = args
        if resume is not None and config is not None:
            raise ProblemError("--config does not apply with --resume: the run keeps its own options")
        given_files = list(p["files"] or [])
        if not given_files and resume is None:
            raise ProblemError("missing the problem file (a C function's .c, or a PyTorch module's .py)",
                               hint="cudaperf optimize FILE.c (or model.py), or --resume RUN_DIR")
        if given_files and resume is not None:
            raise ProblemError("give either a C file or --resume RUN_DIR, not both")
        for flag, values in (("-I", p["include"]), ("-D", p["define"])):
            if any(not v.strip() for v in values):  # '-I ""' would swallow the next flag
                raise ProblemError(f"'{flag}' needs a value")
        cpp_args = [f"-I{d}" for d in p["include"]] + [f"-D{d}" for d in p["define"]]
        interactive = not (p["yes"] or p["json_out"]) and sys.stdin.isatty() and sys.stdout.isatty()
        opts = OptimizeOptions(
            file=given_files[0] if given_files else Path("."),
            sources=tuple(given_files[1:]),
            cpp_args=tuple(cpp_args),
            function=p["function"],
            sizes=parse_sizes(p["size"]),
            init=p["init"],
            turns=p["turns"],
            policy=p["policy"],
            arch=p["arch"],
            output=p["output"],
            force=p["force"],
            run_root=p["run_root"],
            eval_timeout_s=p["timeout"],
            compile_timeout_s=p["compile_timeout"],
            seed=p["seed"],
            atol=p["atol"],
            rtol=p["rtol"],
            slow_factor=p["slow_factor"],
            json_output=p["json_out"],
            target_speedup=p["target_speedup"],
            patience=p["patience"],
            model=p["model"],
            base_url=p["base_url"],
            api_key_env=p["api_key_env"],
            temperature=p["temperature"],
            top_p=p["top_p"],
            max_tokens=p["max_tokens"],
            sampling_seed=p["sampling_seed"],
            request_timeout_s=p["request_timeout"],
            max_retries=p["max_retries"],
            replay=p["replay"],
            samples=p["samples"],
            context_tokens=p["context_tokens"],
            interactive=interactive,
            resume=resume,
            compile_baseline=p["compile_baseline"],
            ranker=p["ranker"],
            ranker_top=p["ranker_top"],
            sanitize=p["sanitize"],
        )
        code = run_optimize_command(opts, given=_given_options(ctx))
    except CudaperfError as err:
        fail(err)
    except OSError as exc:  # a file or folder the checks above could not foresee
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    except KeyboardInterrupt:
        from cudaperf_cli.agent.store import RunStore

        if RunStore.active is not None and (RunStore.active / "run.json").is_file():
            print(f"interrupted: resume with: cudaperf optimize --resume {RunStore.active}", file=sys.stderr)
        else:
            print("interrupted: the run folder keeps what was done", file=sys.stderr)
        raise typer.Exit(130)
    raise typer.Exit(code)


#: Command-line parameter name -> OptimizeOptions field, where they differ.
_OPTION_FIELD = {
    "timeout": "eval_timeout_s", "compile_timeout": "compile_timeout_s", "json_out": "json_output",
    "request_timeout": "request_timeout_s", "size": "sizes", "yes": "interactive",
    "include": "cpp_args", "define": "cpp_args", "files": "file",
}


def _given_options(ctx: typer.Context) -> frozenset[str]:
    """OptimizeOptions fields set on the command line (``--resume`` may override some)."""
    from cudaperf_cli.cli.config import source_name

    given = set()
    for name in ctx.params:
        if source_name(ctx, name) == "COMMANDLINE":
            given.add(_OPTION_FIELD.get(name, name))
    return frozenset(given)


@app.command()
def doctor(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Check the toolchain and the GPU: nvcc, the C compiler, device, driver, cuda.core,
    confinement, compute-sanitizer, optional packages.

    Exit code 0 when everything is usable, 4 when only a CUDA device is missing (compiling
    works), 3 when nvcc or the C compiler is missing.
    """
    from cudaperf_cli.cli.doctor import run_doctor

    raise typer.Exit(run_doctor(json_out))


@app.command()
def show(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run folder of cudaperf optimize "
                                   "(cudaperf-runs/<name>-<time>)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Show a run folder again: its turns, the best candidate and its file, the result."""
    from cudaperf_cli.agent.show import show_run

    try:
        code = show_run(run_dir, json_out)
    except CudaperfError as err:
        fail(err)
    raise typer.Exit(code)


app.command(name="score")(score)
app.command(name="port")(port)
app.add_typer(bench_app, name="bench")
app.add_typer(data_app, name="data")
train_app.command("policy")(train_policy)
app.add_typer(train_app, name="train")
app.command(name="rank")(rank)


def main() -> None:
    """Entry point of the ``cudaperf`` script and ``python -m cudaperf_cli``.

    A usage error (unknown option, bad option value, missing argument) is one ``error:``
    line and a ``hint:`` line naming ``--help``, exit code 2, like every other bad input.
    """
    import signal

    def _terminate(signum: int, frame: object) -> None:  # kill, CI cancel, closed terminal:
        raise KeyboardInterrupt  # the Ctrl-C path (children killed, run folder kept, exit 130)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, _terminate)
        except (ValueError, OSError):  # not the main thread, or a platform without it
            pass
    try:
        code = app(standalone_mode=False)
    except Exception as exc:  # Typer's (click's) usage errors, recognised by their shape
        message = getattr(exc, "format_message", None)
        exit_code = getattr(exc, "exit_code", None)
        if not callable(message) or not isinstance(exit_code, int):
            raise
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help
            print(f"error: {message()}", file=sys.stderr)
            ctx = getattr(exc, "ctx", None)
            if ctx is not None:
                print(f"hint: see '{ctx.command_path} --help'", file=sys.stderr)
        sys.exit(exit_code)
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
