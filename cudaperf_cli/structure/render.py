"""Rich rendering of a :class:`~cudaperf_cli.structure.model.StructureReport` (used by
``cudaperf score`` and by ``cudaperf optimize`` for the best candidate)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaperf_cli.structure.model import StructureReport


def print_report(report: StructureReport, con: Console, top: int = 5) -> None:
    """Print the breakdown of ``report``: one row per metric (value, unit, score, reason;
    a measured value is marked ``(m)``),
    each kernel's total, notes, kernels not analysed, and the ``top`` improvement hints."""
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
    estimated = False
    for k in report.kernels:
        first = True
        for m in k.metrics:
            v = m.value
            value = "-" if v is None else (f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3e}")
            if m.score is None:
                sc = m.status
            else:
                sc = f"{m.score:.2f}" + ("~" if m.status == "estimate" else "")
                estimated = estimated or m.status == "estimate"
            if m.measured is not None:
                value += " (m)"
            table.add_row(
                Text(k.name) if first else "", m.name, value, m.value_unit, sc, Text(m.reason)
            )
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
                + ("; capped at the synchronization score (a barrier hazard)"
                   if any(m.barrier_hazard for m in k.metrics) else "")
                + (f"; launch {k.launch.describe()}" if k.launch else "; launch unknown")
                + (
                    f"; measured {k.measured_duration_ns / 1e3:.1f} us/launch"
                    if k.measured_duration_ns is not None
                    else ""
                )
            ),
            end_section=True,
        )
    con.print(table)
    if estimated:
        con.print(Text("~ after a score: an estimate, scored from an upper bound or an assumption "
                       "(the launch or a size was not known; docs/structural-score.md)", style="dim"))
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
