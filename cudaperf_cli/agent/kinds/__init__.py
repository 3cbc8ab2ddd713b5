"""Problem kinds of the optimize driver: C functions and PyTorch modules.

``kind_for(path)`` picks the kind of a problem file by its suffix (``.py``: PyTorch,
anything else: C); ``kind_named("c" | "torch")`` by name (``rl/`` problem specs,
``problem.json``).  The interface is :class:`~cudaperf_cli.agent.kinds.base.ProblemKind`
(docs/architecture.md, "The optimize driver").
"""

from __future__ import annotations

from pathlib import Path

from cudaperf_cli.agent.kinds.base import ProblemKind


def kind_named(name: str) -> ProblemKind:
    """The kind ``"c"`` or ``"torch"``.

    Raises:
        ValueError: another name.
    """
    if name == "c":
        from cudaperf_cli.agent.kinds.c import CKind

        return CKind()
    if name == "torch":
        from cudaperf_cli.agent.kinds.pytorch import TorchKind

        return TorchKind()
    raise ValueError(f"unknown problem kind {name!r} (c or torch)")


def kind_for(path: Path) -> ProblemKind:
    """The kind of problem file ``path``: ``.py`` is a PyTorch problem, else C."""
    return kind_named("torch" if Path(path).suffix == ".py" else "c")


__all__ = ["ProblemKind", "kind_for", "kind_named"]
