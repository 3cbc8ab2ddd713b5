"""The config file: where it is found and its TOML document (no command-line parsing).

One TOML file holds defaults for several commands, one table each: ``[optimize]`` (read
by ``cudaperf optimize`` through :func:`cudaperf_cli.cli.config.apply_config`, and
recorded by ``cudaperf bench``), ``[train.policy]`` and ``[reward]`` (read by ``cudaperf
train policy --config``, cudaperf_cli/rl/config.py).

Where it is looked for, first found wins (:func:`find_config`): ``--config FILE``; the
file named by ``$CUDAPERF_CONFIG``; ``./cudaperf.toml``;
``$XDG_CONFIG_HOME/cudaperf/config.toml`` (default ``~/.config/cudaperf/config.toml``).

This module sits below every stage that reads the file (bench, rl) and the cli layer
(which adds the Typer-specific parts: matching keys to a command's options); it imports
only ``core``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from cudaperf_cli.core import CudaperfError

#: The variable naming a config file (after ``--config``, before ``./cudaperf.toml``).
CONFIG_ENV = "CUDAPERF_CONFIG"
#: The tables a config file may hold (one per command that reads it): ``optimize``;
#: ``train`` (``[train.policy]``) and ``reward`` are read by ``cudaperf train policy
#: --config`` (cudaperf_cli/rl/config.py, docs/rl.md) and left alone by ``optimize``; ``port``
#: (per-file flags of ``cudaperf port``, read from the repository's committed
#: ``cudaperf.toml`` by cudaperf_cli/port.py) is left alone by both.
SECTIONS = ("optimize", "train", "reward", "port")


def find_config(explicit: Path | None) -> Path | None:
    """The config file to read (see the module docstring), or ``None``.

    Raises:
        CudaperfError: ``--config`` or ``$CUDAPERF_CONFIG`` names a file that does not exist.
    """
    if explicit is not None:
        if explicit.is_dir():
            raise CudaperfError(f"--config {explicit} is a directory, not a TOML file")
        if not explicit.is_file():
            raise CudaperfError(f"--config {explicit}: no such file")
        return explicit
    env = os.environ.get(CONFIG_ENV)
    if env:
        if not Path(env).is_file():
            raise CudaperfError(f"${CONFIG_ENV}={env}: no such file")
        return Path(env)
    here = Path("cudaperf.toml")
    if here.is_file():
        return here
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "cudaperf" / "config.toml"
    return home if home.is_file() else None


def load_config(path: Path) -> dict[str, Any]:
    """The parsed TOML document of ``path``.

    Raises:
        CudaperfError: unreadable file or invalid TOML (one line with the position).
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise CudaperfError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CudaperfError(f"{path}: not valid TOML: {exc}") from None
    except (UnicodeDecodeError, ValueError):
        raise CudaperfError(f"{path}: not a TOML text file") from None


__all__ = ["CONFIG_ENV", "SECTIONS", "find_config", "load_config"]
