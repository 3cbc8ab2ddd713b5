"""The ``cudaperf`` command line (Typer).  One module per command group; heavy imports lazy.

Errors: a known error (:class:`cudaperf_cli.core.CudaperfError`) prints one line on stderr
(plus an optional hint line) and exits with its code; see docs/exit-codes.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from cudaperf_cli import __version__
from cudaperf_cli.cli.common import fail, parse_sizes
from cudaperf_cli.cli.score import score
from cudaperf_cli.core import CudaperfError, ProblemError

app = typer.Typer(
    name="cudaperf",
    help="Port hot C functions to verified, timed CUDA kernels and keep improving them.",
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
    """Port hot C functions to verified, timed CUDA kernels and keep improving them."""


@app.command()
def optimize(
    file: Path = typer.Argument(..., help="C file holding the function to port."),
    include: List[str] = typer.Option([], "-I", help="Include directory (repeatable), as for cc."),
    define: List[str] = typer.Option([], "-D", help="Macro NAME[=VALUE] (repeatable), as for cc."),
    function: Optional[str] = typer.Option(
        None, "--function", "-f", help="Function to port (default: the #pragma scop one, "
        "else the only non-main function with a loop nest)."
    ),
    size: List[str] = typer.Option(
        [], "--size", "-s", help="Size parameter NAME=VALUE (repeatable); default: main()'s."
    ),
    init: Optional[str] = typer.Option(
        None, "--init", help="Init function filling the data (default: detected by name)."
    ),
    turns: int = typer.Option(3, "--turns", "-n", min=1, help="Candidates to try (one a turn)."),
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
        "server), replay (replies recorded in a JSONL file).",
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="Model name for --policy openai (as the server knows it)."
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
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", min=1, help="Most tokens in one reply (model policies)."
    ),
    replay: Optional[Path] = typer.Option(
        None, "--replay", help='JSONL file of replies for --policy replay: {"text": "..."} a line.'
    ),
    arch: Optional[str] = typer.Option(
        None, "--arch", help="nvcc architecture, e.g. sm_90 (default: the detected GPU's, else sm_90)."
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Result file (default: ./<stem>.cu)."
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
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document, nothing else."),
) -> None:
    """Port a C function to CUDA: build, verify and time candidates over several turns."""
    from cudaperf_cli.agent.optimize import OptimizeOptions, run_optimize_command

    try:
        for flag, values in (("-I", include), ("-D", define)):
            if any(not v.strip() for v in values):  # '-I ""' would swallow the next flag
                raise ProblemError(f"'{flag}' needs a value")
        cpp_args = [f"-I{d}" for d in include] + [f"-D{d}" for d in define]
        opts = OptimizeOptions(
            file=file,
            cpp_args=tuple(cpp_args),
            function=function,
            sizes=parse_sizes(size),
            init=init,
            turns=turns,
            policy=policy,
            arch=arch,
            output=output,
            force=force,
            run_root=run_root,
            eval_timeout_s=timeout,
            compile_timeout_s=compile_timeout,
            seed=seed,
            json_output=json_out,
            target_speedup=target_speedup,
            patience=patience,
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            temperature=temperature,
            max_tokens=max_tokens,
            replay=replay,
        )
        code = run_optimize_command(opts)
    except CudaperfError as err:
        fail(err)
    except OSError as exc:  # a file or folder the checks above could not foresee
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    except KeyboardInterrupt:
        print("interrupted: the run folder keeps what was done", file=sys.stderr)
        raise typer.Exit(130)
    raise typer.Exit(code)


@app.command()
def doctor(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Check the toolchain and the GPU: nvcc, the C compiler, device, driver, cuda.core."""
    from cudaperf_cli.cli.doctor import run_doctor

    raise typer.Exit(run_doctor(json_out))


app.command(name="score")(score)


def main() -> None:
    """Entry point of the ``cudaperf`` script and ``python -m cudaperf_cli``.

    A usage error (unknown option, bad option value, missing argument) is one ``error:``
    line and a ``hint:`` line naming ``--help``, exit code 2, like every other bad input.
    """
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
