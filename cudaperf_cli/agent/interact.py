"""Interactive runs: after each turn the user may continue, add a hint, accept or stop.

On by default when stdin and stdout are terminals (``cudaperf optimize`` without ``--yes``
or ``--json``); a pipe, a CI job or ``--yes`` never asks.  The question is one line::

    after turn 2: [Enter] next turn, h hint, a accept best (2.1, 31.4x), s stop

- ``h``: a line of text for the model, added to the next turn's feedback message (model
  policies only) and kept in ``hints.jsonl`` of the run folder; then the next turn runs.
- ``a``: finish now: the best correct candidate is written as the result.
- ``s``: end the run without writing a result (exit 130); ``--resume`` continues it.
- end of input (Ctrl-D) on the question: no more questions, the turns go on.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from cudaperf_cli.agent.loop import Decision, TurnRecord


class TerminalAsk:
    """The ``ask`` callback of :func:`~cudaperf_cli.agent.loop.run_loop` for a terminal.

    Args:
        console: the Rich console the run prints on.
        observer: the :class:`~cudaperf_cli.agent.render.RichObserver` (its live table is
            paused while the question is open), or ``None``.
        on_hint: called with ``(turn, text)`` for a hint; ``None`` when the policy takes no
            hints (the built-in policy): ``h`` is then not offered.
        read: reads one answer line given the prompt (default: ``console.input``); raises
            ``EOFError`` at the end of input.
    """

    def __init__(
        self,
        console: Any,
        observer: Any = None,
        *,
        on_hint: Callable[[int, str], None] | None = None,
        read: Callable[[str], str] | None = None,
    ):
        self.console = console
        self.observer = observer
        self.on_hint = on_hint
        self.read = read or (lambda prompt: console.input(prompt))
        self.enabled = True

    def __call__(self, turn: int, batch: list[TurnRecord], best: TurnRecord | None) -> Decision:
        if not self.enabled:
            return Decision()
        pause = getattr(self.observer, "paused", None)
        with pause() if callable(pause) else contextlib.nullcontext():
            return self._ask(turn, best)

    def _ask(self, turn: int, best: TurnRecord | None) -> Decision:
        choices = ["[Enter] next turn"]
        if self.on_hint is not None:
            choices.append("h hint")
        if best is not None:
            speed = "" if best.speedup_kernel is None else f", {best.speedup_kernel:.3g}x"
            choices.append(f"a accept best ({best.label}{speed})")
        choices.append("s stop")
        prompt = f"after turn {turn + 1}: {', '.join(choices)} > "
        while True:
            try:
                answer = self.read(prompt).strip().lower()
            except EOFError:
                self.enabled = False
                return Decision()
            if answer in ("", "c", "continue", "n", "next"):
                return Decision()
            if answer in ("s", "stop", "q", "quit"):
                return Decision("stop")
            if answer in ("a", "accept"):
                if best is None:
                    self.console.print("no correct candidate yet: nothing to accept", markup=False)
                    continue
                return Decision("accept")
            if answer in ("h", "hint") and self.on_hint is not None:
                try:
                    hint = self.read("hint for the model (one line) > ").strip()
                except EOFError:
                    self.enabled = False
                    return Decision()
                if hint:
                    self.on_hint(turn, hint)
                    return Decision("continue", hint)
                continue
            self.console.print(f"not understood: {answer!r}; choose one of: {', '.join(choices)}",
                               markup=False)


__all__ = ["TerminalAsk"]
