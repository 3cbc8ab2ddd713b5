"""How help names types and arguments: as a command line does (``-I DIR``, ``TEXT``,
``INTEGER``, ``SUITE``, ``[FILE]...``).

Typer 0.29 prints Python annotations (``<list[str]>``, ``<int range>``) and a required
argument in braces (``{SUITE}``); :func:`install` replaces the three methods of Typer's
parameter classes that write them.  Typer versions without those methods are left alone.
"""

from __future__ import annotations

import typer.core


def _help_type(self: typer.core.TyperArgument | typer.core.TyperOption, ctx: object) -> str:
    """What help prints after an option or argument name: its ``metavar`` where one is
    given (``-I DIR``), else the type as click names it (``TEXT``, ``INTEGER``, ``FLOAT``,
    ``PATH``, ``[a|b]``).  Typer 0.29 prints Python annotations instead (``<list[str]>``,
    ``<int range>``), which read as code, not as a command line."""
    if self.metavar:  # an argument's metavar is its name already
        return "" if isinstance(self, typer.core.TyperArgument) else self.metavar
    label = _typer_help_type(self, ctx).strip("<>")  # type: ignore[arg-type]
    while label.startswith("list[") and label.endswith("]"):  # repeatable: the help says so
        label = label[5:-1]
    label = label.removesuffix(" range")
    names = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "Path": "PATH", "path": "PATH",
             "file": "FILE", "directory": "DIR", "bool": "BOOLEAN"}
    return names.get(label, f"[{label}]" if "|" in label else label.upper())


def _argument_name(self: typer.core.TyperArgument) -> str:
    """An argument in help and usage as click writes it: ``SUITE``, ``[FILE]...``
    (Typer 0.29 writes a required one in braces, ``{SUITE}``, which reads as a set)."""
    name = self.display_name_raw
    name = name if self.required else f"[{name}]"
    return name + ("..." if self.nargs != 1 else "")


def _argument_help_name(self: typer.core.TyperArgument) -> str:
    """An argument in the help's list: ``SUITE``, ``FILE...``."""
    return self.display_name_raw + ("..." if self.nargs != 1 else "")


_typer_help_type = getattr(typer.core.TyperOption, "display_type_rich", None)


def install() -> None:
    """Replace Typer's help writers (idempotent; nothing on a Typer without them)."""
    if _typer_help_type is None or not hasattr(typer.core.TyperArgument, "_usage_display_name"):
        return
    typer.core.TyperOption.display_type_rich = _help_type  # type: ignore[method-assign]
    typer.core.TyperArgument.display_type_rich = _help_type  # type: ignore[method-assign]
    typer.core.TyperArgument._usage_display_name = _argument_name  # type: ignore[method-assign]
    typer.core.TyperArgument._rich_display_name = _argument_help_name  # type: ignore[method-assign]
