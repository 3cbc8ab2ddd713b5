"""``cudaperf port [PATH ...]``: the command; the work is :func:`cudaperf_cli.port.run_port`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from cudaperf_cli.cli.common import fail
from cudaperf_cli.core import CudaperfError


def port(
    paths: Optional[List[Path]] = typer.Argument(
        None, metavar="[PATH]...", help="Files or folders whose committed .c files are scanned for "
        "'// cudaperf: port' (default: the whole git repository of the current directory).",
        show_default=False,
    ),
    branch: Optional[str] = typer.Option(
        None, "--branch", help="Branch to commit on (default: cudaperf/port-YYYY-MM-DD); re-runs "
        "append to it.", show_default=False,
    ),
    allow_unverified: bool = typer.Option(
        False, "--allow-unverified", help="Without a CUDA device, commit compiled, unverified "
        "candidates marked UNVERIFIED (default: exit 4, nothing written).",
    ),
    force: bool = typer.Option(
        False, "--force", help="Port functions again though unchanged, and reset a branch that "
        "does not contain HEAD onto HEAD.",
    ),
    turns: int = typer.Option(3, "--turns", "-n", min=1, max=1000, help="Turns per function."),
    samples: int = typer.Option(1, "--samples", "-k", min=1, max=64, help="Candidates per turn."),
    policy: str = typer.Option(
        "builtin", "--policy", help="Policy writing candidates: builtin, openai, vllm, "
        "transformers, replay (as for optimize).",
    ),
    model: Optional[str] = typer.Option(None, "--model", help="Model of a model policy."),
    base_url: Optional[str] = typer.Option(
        None, "--base-url", help="OpenAI-compatible server (--policy openai)."
    ),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env", help="Variable holding the API key (never logged)."
    ),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", min=0.0, max=2.0, help="Sampling temperature (model policies)."
    ),
    replay: Optional[Path] = typer.Option(
        None, "--replay", help="JSONL file of replies for --policy replay."
    ),
    target_speedup: Optional[float] = typer.Option(
        None, "--target-speedup", min=0.0, max=1e9, help="Stop a function's turns at this "
        "kernel-only speedup.",
    ),
    patience: Optional[int] = typer.Option(
        None, "--patience", min=1, help="Stop a function's turns after this many without a "
        "faster correct candidate.",
    ),
    arch: Optional[str] = typer.Option(
        None, "--arch", help="nvcc architecture, e.g. sm_90 (default: the GPU's, else sm_90)."
    ),
    timeout: float = typer.Option(
        300.0, "--timeout", min=1.0, max=86400.0, help="Time limit of one evaluation, seconds."
    ),
    compile_timeout: float = typer.Option(
        120.0, "--compile-timeout", min=1.0, max=86400.0, help="Time limit of one nvcc "
        "compile, seconds.",
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random input data."),
    atol: Optional[float] = typer.Option(
        None, "--atol", min=0.0, help="Absolute tolerance (default per dtype, as optimize)."
    ),
    rtol: Optional[float] = typer.Option(
        None, "--rtol", min=0.0, help="Relative tolerance (default per dtype, as optimize)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document, nothing else."),
) -> None:
    """Port every C function marked '// cudaperf: port' with the optimize loop and commit
    the verified .cu and .h files on a branch (HEAD, index and work tree untouched)."""
    from cudaperf_cli.port import PortOptions, report_lines, run_port

    optimize = dict(turns=turns, samples=samples, policy=policy, model=model, base_url=base_url,
                    api_key_env=api_key_env, temperature=temperature, replay=replay,
                    target_speedup=target_speedup, patience=patience, arch=arch,
                    eval_timeout_s=timeout, compile_timeout_s=compile_timeout, seed=seed, atol=atol,
                    rtol=rtol)
    opts = PortOptions(paths=tuple(paths or ()), branch=branch, allow_unverified=allow_unverified,
                       force=force, json_output=json_out, optimize=optimize)
    try:
        code, report = run_port(opts)
    except CudaperfError as err:
        fail(err)
    except KeyboardInterrupt:
        print("interrupted: nothing committed (run folders are kept under .git/cudaperf/runs)",
              file=sys.stderr)
        raise typer.Exit(130)
    if json_out:
        print(json.dumps(report, indent=2, default=str))
    else:
        for line in report_lines(report):
            if line == report["message"] and (code == 4 or not report["functions"]):
                continue  # that one goes to stderr, below
            print(line)
    if code == 4:
        print(f"error: {report['message']}", file=sys.stderr)
    elif code == 1:
        failed = [f for f in report["functions"] if f["status"] == "failed"]
        print(f"{len(failed)} marked function(s) not ported: "
              + ", ".join(f"{f['function']} ({f['file']})" for f in failed), file=sys.stderr)
    elif not report["functions"]:
        print(report["message"], file=sys.stderr)
    raise typer.Exit(code)
