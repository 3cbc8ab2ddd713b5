"""Human output of ``cudaperf optimize`` (Rich): one row per turn, then the best candidate.

On a terminal the table grows live while a spinner names the stage in progress; elsewhere
(pipes, CI logs) each finished turn is printed as one plain line and the table at the end.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from cudaperf_cli import statuses
from cudaperf_cli.agent.loop import LoopResult, TurnRecord
from cudaperf_cli.agent.verdict import recommendation

#: Rich style and short label of every status, read from the one table
#: (``cudaperf_cli.statuses.ORDER``); a name not in it is shown as is, unstyled.
STATUS_STYLE: dict[str, str] = {st.name: st.style for st in statuses.ORDER}
STATUS_LABEL: dict[str, str] = {st.name: st.label for st in statuses.ORDER}


def status_text(status: str | None) -> Text:
    """The status column's cell: its label in its style (``statuses.ORDER``)."""
    name = status or "?"
    return Text(STATUS_LABEL.get(name, name), style=STATUS_STYLE.get(name, ""))


def stdout_console() -> Console:
    """The Console for human output: the terminal's width, ``$COLUMNS`` when set, else 160
    columns in logs and pipes (Rich's default of 80 folds the tables into one word per
    line; narrower than 120, the tables keep their essential columns)."""
    import os

    console = Console(highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        console = Console(highlight=False, width=160)
    return console


def fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.4f}"


def fmt_x(v: float | None) -> str:
    """A speedup (x): ``0.52x``, ``3.10x``, ``12.3x (!)``, ``1450x (!)`` (never an exponent
    above 1); ``(!)`` above 10x, worth a second look (README); ``-`` for None."""
    if v is None:
        return "-"
    flag = " (!)" if v > 10 else ""
    if v >= 100:
        return f"{v:.0f}x{flag}"
    return f"{v:.1f}x{flag}" if v >= 10 else f"{v:.2f}x{flag}"


def fmt_err(v: float | None) -> str:
    return "-" if v is None else f"{v:.1e}"


#: Columns of the per-turn table: (header, justify, cell); the narrow terminal layout
#: (< 120 columns) keeps only those marked essential.
def _columns(kind: str = "c") -> list[tuple[str, str, bool, Any]]:
    if kind == "torch":  # speedups against PyTorch eager and torch.compile
        speed = [
            ("GPU ms", "right", True, lambda r: fmt_ms(r.gpu_ms)),
            ("vs eager", "right", True, lambda r: fmt_x(r.speedup_kernel)),
            ("vs compile", "right", True, lambda r: fmt_x(r.speedup_compile)),
        ]
    else:
        speed = [
            ("GPU ms", "right", True, lambda r: fmt_ms(r.gpu_ms)),
            ("speedup", "right", True, lambda r: fmt_x(r.speedup_kernel)),  # kernel-only
            ("speedup e2e", "right", False, lambda r: fmt_x(r.speedup_e2e)),
        ]
    return [
        ("turn", "right", True, lambda r: r.label),
        ("candidate", "left", True, lambda r: Text(r.description)),
        ("status", "left", True, lambda r: status_text(r.status)),
        ("max rel err", "right", False, lambda r: fmt_err(r.max_rel_err)),
        *speed,
        ("struct", "right", True,
         lambda r: "-" if r.structure_score is None else f"{r.structure_score:.2f}"),
        ("regs", "right", False, lambda r: "-" if r.registers is None else str(r.registers)),
        ("spill B", "right", False, lambda r: "-" if r.spill_bytes is None else str(r.spill_bytes)),
        ("build s", "right", False, fmt_build_s),
        ("eval s", "right", False, lambda r: fmt_eval_s(r, kind)),
    ]


def fmt_eval_s(r: TurnRecord, kind: str = "c") -> str:
    """Seconds of the candidate's evaluation past its build (verification and timing, with
    any GPU-lock wait), ``-`` where none ran (no GPU, or stopped before).  A PyTorch
    candidate's ``eval_s`` is the wall time of the whole evaluation, its build overlapped
    included: the build's seconds are taken off so the two columns add up to the wall time."""
    if r.eval_s is None or r.status == statuses.NO_DEVICE:
        return "-"
    spent = r.eval_s - (r.compile_s or 0.0) if kind == "torch" else r.eval_s
    return f"{max(spent, 0.0):.1f}"


def fmt_build_s(r: TurnRecord) -> str:
    """The candidate's compile seconds, ``cached`` when the build cache had it, ``-`` when
    nothing was compiled (a refused turn)."""
    if r.compile_cached:
        return "cached"
    return "-" if r.compile_s is None else f"{r.compile_s:.1f}"


def turns_table(records: list[TurnRecord], title: str | None = None, width: int = 160,
                kind: str = "c") -> Table:
    """The per-turn table: status, max error, GPU ms, speedups, structure, registers,
    spills, build seconds (``cached``) and evaluation seconds (``-`` where no evaluation ran:
    no GPU, or refused before it); in a terminal narrower than 120 columns, the essential columns only.
    ``kind="torch"``: the speedups are against PyTorch eager and torch.compile."""
    cols = [c for c in _columns(kind) if c[2] or width >= 120]
    table = Table(title=title, header_style="bold", expand=False)
    for header, justify, _, _ in cols:
        if header == "candidate":
            table.add_column(header, overflow="fold", min_width=18, max_width=48)
        elif header == "status":
            table.add_column(header, no_wrap=True)
        else:
            table.add_column(header, justify=justify, no_wrap=True)
    for r in records:
        table.add_row(*(cell(r) for _, _, _, cell in cols))
    return table


def turn_line(r: TurnRecord) -> str:
    """One plain line for a finished turn (non-terminal output)."""
    head = f"turn {r.label}: {STATUS_LABEL.get(r.status, r.status)}"
    ranked = (r.mapping or {}).get("ranker")
    if isinstance(ranked, dict) and r.status != statuses.REFUSED:
        head += f" (ranked {ranked.get('rank')} of {ranked.get('of')}, score {ranked.get('score')})"
    # a slow candidate's time is the estimate from its warm-up (timing stopped early)
    gpu = "GPU ~" if r.status == statuses.SLOW else "GPU "
    why = ""
    if r.status == statuses.SLOW:
        why = f" ({slow_reason(r)})"
    if r.verified and (r.speedup_compile is not None or r.eager_ms is not None):
        return (
            f"{head}{why}; {gpu}{fmt_ms(r.gpu_ms)} ms, {fmt_x(r.speedup_kernel)} vs PyTorch eager "
            f"({fmt_ms(r.eager_ms)} ms), {fmt_x(r.speedup_compile)} vs torch.compile "
            f"({fmt_ms(r.compile_ms)} ms); {r.description}"
        )
    if r.verified:
        return (
            f"{head}{why}; {gpu}{fmt_ms(r.gpu_ms)} ms, speedup {fmt_x(r.speedup_kernel)} kernel / "
            f"{fmt_x(r.speedup_e2e)} end-to-end vs {r.baseline}; {r.description}"
        )
    if r.status == statuses.NO_DEVICE or not r.message:
        return f"{head}; {r.description}"
    if r.status == statuses.FORMAT_ERROR:  # the full text is the model's feedback
        return f"{head}; {r.message.split('. Reply with', 1)[0]}"
    return f"{head}; {r.message}"


def slow_reason(r: TurnRecord) -> str:
    """Why a ``slow`` record's timing stopped, short: ``"~12x slower than the best"`` (from
    ``gpu_ms / slow_ref_ms`` when known), else its message, else ``"timing stopped early"``."""
    if r.gpu_ms is not None and r.slow_ref_ms:
        ref = "the baseline" if r.slow_ref == "baseline" else "the best"
        return f"~{r.gpu_ms / r.slow_ref_ms:.3g}x slower than {ref}, timing stopped early"
    return r.message or "timing stopped early"


class RichObserver:
    """Shows the loop's progress with Rich (live table on a terminal, lines otherwise)."""

    def __init__(self, console: Console, title: str, kind: str = "c"):
        self.console = console
        self.title = title
        self.kind = kind
        self.records: list[TurnRecord] = []
        self._stage = ""
        self._live: Live | None = None

    def __enter__(self) -> "RichObserver":
        if self.console.is_terminal:
            # transient: the live table is redrawn after a question and printed once at the end
            self._live = Live(self._render(), console=self.console, refresh_per_second=8,
                              transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._stage = ""
            self._live.__exit__(*exc)
            self._live = None
        self.console.print(turns_table(self.records, self.title, self.console.width, self.kind))

    def _render(self) -> Group:
        parts: list[Any] = [turns_table(self.records, self.title, self.console.width, self.kind)]
        if self._stage:
            parts.append(Spinner("dots", text=Text(self._stage, style="dim")))
        return Group(*parts)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the live table while the user answers a question (interactive runs)."""
        live = self._live
        if live is None:
            yield
            return
        self._stage = ""
        live.stop()
        try:
            yield
        finally:
            live.start()

    def stage(self, turn: int, name: str) -> None:
        self._stage = f"turn {turn + 1}: {name}"
        if self._live is not None:
            self._live.update(self._render())

    def turn_done(self, record: TurnRecord) -> None:
        self.records.append(record)
        self._stage = ""
        # One line per turn with its reason (printed above the live table on a terminal).
        self.console.print(turn_line(record), highlight=False, markup=False)
        if self._live is not None:
            self._live.update(self._render())


class QuietObserver:
    """For ``--json``: shows nothing."""

    def stage(self, turn: int, name: str) -> None:
        pass

    def turn_done(self, record: TurnRecord) -> None:
        pass


def sanitize_line(r: TurnRecord) -> str:
    """The compute-sanitizer stage of a record in a few words: ``"compute-sanitizer
    memcheck + initcheck: no errors (4.2 s)"``, or why it did not check it."""
    san = r.sanitize or {}
    tools = " + ".join(t.get("tool", "?") for t in san.get("tools") or []) or "memcheck + initcheck"
    secs = f" ({r.sanitize_s:.1f} s)" if r.sanitize_s is not None else ""
    if san.get("result") == "clean":
        return f"compute-sanitizer {tools}: no errors{secs}"
    if san.get("result") == "rejected":
        return f"compute-sanitizer: {san.get('message')}{secs}"
    return f"not checked by compute-sanitizer: {san.get('message') or 'skipped'}{secs}"


def best_panel(result: LoopResult, lines: list[str]) -> Panel:
    """The final panel: the best candidate and what was written, or why there is none."""
    best = result.best
    lines = [escape(ln) for ln in lines]
    if best is None:
        return Panel("\n".join(lines), title="no verified kernel", border_style="red", expand=False)
    if best.status == statuses.SLOW:  # only slow candidates were verified
        lines.insert(0, "slow        its time is the estimate of its warm-up: "
                     + escape(slow_reason(best)))
    rec = recommendation(best)
    verdict = [] if rec is None else [f"verdict     {escape(rec['line'])}"]
    border = "green" if rec is None or rec["action"] == "use_candidate" else "yellow"
    if best.speedup_compile is not None or best.eager_ms is not None:  # a PyTorch problem
        body = [
            f"[bold]{escape(best.description)}[/]",
            f"candidate   {fmt_ms(best.gpu_ms)} ms (median; IQR {fmt_ms(best.gpu_ms_iqr)} ms)",
            f"eager       {fmt_ms(best.eager_ms)} ms (PyTorch eager, fp32, TF32 off)",
            f"compile     {fmt_ms(best.compile_ms)} ms (torch.compile, default mode)",
            f"speedup     {fmt_x(best.speedup_kernel)} vs PyTorch eager, "
            f"{fmt_x(best.speedup_compile)} vs torch.compile",
            f"max error   {fmt_err(best.max_abs_err)} abs, {fmt_err(best.max_rel_err)} rel",
            *verdict,
            *lines,
        ]
        if any(v is not None and v > 10 for v in (best.speedup_kernel, best.speedup_compile)):
            body.append("(!)         above 10x: worth a second look")
        return Panel("\n".join(body), title=f"best: turn {best.label}", border_style=border,
                     expand=False)
    body = [
        f"[bold]{escape(best.description)}[/]",
        f"GPU kernel  {fmt_ms(best.gpu_ms)} ms (median; IQR {fmt_ms(best.gpu_ms_iqr)} ms)",
        f"end-to-end  {fmt_ms(best.e2e_ms)} ms (copies in and out included)",
        f"CPU         {fmt_ms(best.cpu_ms)} ms ({best.baseline}; measured once per run)",
        f"speedup     {fmt_x(best.speedup_kernel)} kernel-only, "
        f"{fmt_x(best.speedup_e2e)} end-to-end, vs {best.baseline}",
        f"resources   {best.registers} registers/thread, {best.spill_bytes} spill bytes",
        f"max error   {fmt_err(best.max_abs_err)} abs, {fmt_err(best.max_rel_err)} rel",
        *([f"memory      {escape(sanitize_line(best))}"] if best.sanitize else []),
        *verdict,
        *lines,
    ]
    if any(v is not None and v > 10 for v in (best.speedup_kernel, best.speedup_e2e)):
        body.append(
            "(!)         above 10x: worth a second look (sizes, baseline); the baseline is one "
            "CPU thread"
        )
    return Panel("\n".join(body), title=f"best: turn {best.label}", border_style=border, expand=False)
