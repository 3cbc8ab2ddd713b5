"""Helpers shared by the command modules: the one-line error exit and ``--size`` parsing."""

from __future__ import annotations

import sys
from typing import Iterable, NoReturn

import typer

from cudaperf_cli.core import CudaperfError, ProblemError


def fail(err: CudaperfError) -> NoReturn:
    """Print a known error as one line on stderr (and its hint) and exit with its code.

    Line breaks in the message (from a file name or an option value) are shown as ``\\n``.
    """
    message = str(err).replace("\r", "\\r").replace("\n", "\\n")
    print(f"error: {message}", file=sys.stderr)
    if getattr(err, "hint", None):
        print(f"hint: {err.hint}", file=sys.stderr)
    raise typer.Exit(err.exit_code)


def parse_sizes(items: Iterable[str]) -> dict[str, int]:
    """``["n=100", "m=0x40"]`` -> ``{"n": 100, "m": 64}``.

    Raises:
        ProblemError: an item is not ``NAME=INTEGER``.
    """
    sizes: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ProblemError(f"--size expects NAME=VALUE, got '{item}'")
        try:
            sizes[name.strip()] = int(value, 0)
        except ValueError:
            try:  # "010": Python's base 0 refuses leading zeros; the user means ten
                sizes[name.strip()] = int(value, 10)
            except ValueError:
                raise ProblemError(f"--size {name}: '{value}' is not an integer") from None
    return sizes
