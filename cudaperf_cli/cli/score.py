"""``cudaperf score KERNEL.cu``: structural score of the kernels of a CUDA file.

Registered by ``cudaperf_cli/cli/main.py``::

    from cudaperf_cli.cli.score import score
    app.command(name="score")(score)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer


def _error(message: str, code: int, hint: str | None = None) -> None:
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    raise typer.Exit(code)


def _sizes(items: List[str]) -> dict[str, int]:
    from cudaperf_cli.core import CudaperfError

    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CudaperfError(f"--size expects NAME=VALUE, got '{item}'")
        try:
            out[name.strip()] = int(value, 0)
        except ValueError:
            raise CudaperfError(f"--size {name}: '{value}' is not an integer") from None
    return out


def score(
    kernel: Path = typer.Argument(..., help="CUDA source file (.cu) with __global__ kernels."),
    arch: str = typer.Option(
        "sm_90", "--arch", help="Compute capability: sm_80, sm_86, sm_89, sm_90."
    ),
    launch: Optional[str] = typer.Option(
        None,
        "--launch",
        help="Launch configuration GRID,BLOCK[,SMEM] for every kernel, e.g. 1024,256 or "
        "64x64,16x16 "
        "(default: the constant <<< >>> launch in the file).",
    ),
    gpu: Optional[str] = typer.Option(
        None,
        "--gpu",
        help="GPU for roofline and waves: H200, H100, A100, L40S, RTX4090 "
        "(default: H200; A100 for --arch sm_80, L40S for sm_89).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document, nothing else."),
    no_build: bool = typer.Option(
        False, "--no-build", help="Static only: skip nvcc (register metrics become unknown)."
    ),
    size: List[str] = typer.Option(
        [],
        "--size",
        "-s",
        help="Problem size NAME=VALUE (repeatable) replacing representative values.",
    ),
    top: int = typer.Option(5, "--top", min=0, help="Improvement hints to print."),
) -> None:
    """Score the structure of the kernels of a CUDA file (static; no GPU needed).

    Metrics: coalescing, occupancy, arithmetic intensity, synchronization, divergence,
    shared memory, load balance, register pressure (see docs/structural-score.md).
    """
    from cudaperf_cli.core import CudaperfError, ToolchainError
    from cudaperf_cli.structure import LaunchConfig, analyze_file
    from cudaperf_cli.structure.gpus import default_gpu

    try:
        if gpu is None:
            gpu = default_gpu(arch)
        if not kernel.is_file():
            raise CudaperfError(f"no such file: {kernel}")
        cfg = LaunchConfig.parse(launch) if launch else None
        sizes = _sizes(size)
        try:
            report = analyze_file(
                kernel, arch=arch, launch=cfg, gpu=gpu, sizes=sizes, build=not no_build
            )
        except ToolchainError as err:
            print(f"warning: {err}; scoring without the ptxas report", file=sys.stderr)
            report = analyze_file(kernel, arch=arch, launch=cfg, gpu=gpu, sizes=sizes, build=False)
    except CudaperfError as err:
        _error(str(err), err.exit_code, getattr(err, "hint", None))
        return
    if json_out:
        doc = report.to_dict()
        doc["reasons"] = report.reasons(top)
        import json

        print(json.dumps(doc, indent=2))
        return
    _print_report(report, top)


def _print_report(report, top: int) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = Console()
    title = f"{report.source_name}: structural score ({report.arch}, {report.gpu})"
    table = Table(title=title, show_lines=False)
    for col, kw in (
        ("kernel", {"overflow": "fold"}),
        ("metric", {}),
        ("value", {"justify": "right", "no_wrap": True}),
        ("unit", {}),
        ("score", {"justify": "right", "no_wrap": True}),
        ("reason", {"overflow": "fold", "ratio": 3}),
    ):
        table.add_column(col, **kw)
    for k in report.kernels:
        first = True
        for m in k.metrics:
            v = m.value
            value = "-" if v is None else (f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3e}")
            if m.score is None:
                sc = m.status
            else:
                sc = f"{m.score:.2f}" + ("~" if m.status == "estimate" else "")
            table.add_row(Text(k.name) if first else "", m.name, value, m.unit, sc, Text(m.reason))
            first = False
        total = "-" if k.score is None else f"{k.score:.2f}"
        table.add_row(
            "",
            Text("total", style="bold"),
            "",
            "",
            Text(total, style="bold"),
            Text(
                f"weighted over {k.coverage * 100:.0f}% of the applicable weight"
                + (f"; launch {k.launch.describe()}" if k.launch else "; launch unknown")
            ),
            end_section=True,
        )
    con.print(table)
    for k in report.kernels:
        for n in k.notes:
            con.print(Text(f"{k.name}: {n}", style="dim"))
    for na in report.not_analysed:
        con.print(Text(f"not analysed: {na.name} (line {na.line}): {na.reason}", style="yellow"))
    for n in report.notes:
        con.print(Text(n, style="dim"))
    if report.score is not None:
        con.print(
            f"[bold]file score: {report.score:.2f}[/bold] "
            f"(mean over {len(report.kernels)} kernel(s))"
        )
    hints = report.reasons(top)
    if hints:
        con.print("[bold]top improvements:[/bold]")
        for h in hints:
            con.print(Text(f"  - {h}"))


__all__ = ["score"]
