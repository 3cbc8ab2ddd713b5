"""Checks ``cudaperf optimize`` makes before any work, so that a bad request fails in one
line and nothing the user had is touched: the output path, the sizes' memory, ``--arch``."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from cudaperf_cli.core import CProblem, CudaperfError, ProblemError

if TYPE_CHECKING:
    from cudaperf_cli.agent.options import OptimizeOptions


def resolve_output(opts: "OptimizeOptions") -> Path:
    """The result path; refuses to overwrite an existing file without ``--force``.

    Checked before any work: not the input (nor a link to it), not a directory, and its
    folder exists or can be created, and is writable.
    """
    out = opts.output or Path.cwd() / f"{opts.file.stem}.cu"
    if out.resolve() == opts.file.resolve() or (
        out.is_file() and os.path.samefile(out, opts.file)
    ):
        raise CudaperfError(f"the output {out} is the input file; choose another with -o")
    if out.is_dir():
        raise CudaperfError(f"the output {out} is a directory; pass a file name with -o")
    folder = out.resolve().parent
    while not folder.exists():  # created at the end: the nearest existing folder must allow it
        folder = folder.parent
    if not folder.is_dir():
        raise CudaperfError(f"cannot write the output {out}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CudaperfError(f"cannot write the output {out}: {folder} is not writable")
    if out.exists() and not opts.force:
        raise CudaperfError(f"{out} exists; pass --force to overwrite it, or -o to write elsewhere")
    return out


#: Host copies of the data an evaluation holds at once (inputs, candidate results, reference).
HOST_COPIES = 3


def check_memory(problem: CProblem, total_bytes: int | None = None) -> None:
    """Refuse main sizes whose data cannot fit in this machine's memory.

    Raises:
        ProblemError: ``HOST_COPIES`` copies of every array would not fit in physical memory.
    """
    import math

    import numpy as np

    if total_bytes is None:
        try:
            total_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return
    need = sum(
        math.prod(a.shape(problem.sizes)) * np.dtype(a.dtype).itemsize for a in problem.arrays
    )
    if need * HOST_COPIES > total_bytes:
        sizes = ", ".join(f"{k}={v}" for k, v in problem.sizes.items())
        raise ProblemError(
            f"the arrays of '{problem.function}' take {need / 1e9:.1f} GB at {sizes}; verifying "
            f"needs {HOST_COPIES} copies and this machine has {total_bytes / 1e9:.1f} GB of memory",
            hint="pass smaller sizes with --size NAME=VALUE",
        )


_ARCH = re.compile(r"sm_(\d+)[af]?")


def check_arch(arch: str) -> None:
    """Refuse an ``--arch`` that is not ``sm_NN`` (``sm_90a``) or that nvcc does not know.

    Raises:
        ProblemError: malformed, or not in ``nvcc --list-gpu-code``.
        ToolchainError: nvcc is not found.
    """
    from cudaperf_cli.build import find_nvcc

    m = _ARCH.fullmatch(arch)
    if m is None:
        raise ProblemError(
            f"--arch '{arch}' is not an architecture like sm_90", hint="pass e.g. --arch sm_90"
        )
    known = _nvcc_archs(find_nvcc())
    if known and f"sm_{m.group(1)}" not in known:
        raise ProblemError(
            f"--arch {arch}: this nvcc does not support it", hint="supported: " + " ".join(known)
        )


@functools.lru_cache(maxsize=4)
def _nvcc_archs(nvcc: str) -> tuple[str, ...]:
    """``nvcc --list-gpu-code`` (``sm_75 sm_80 ...``); empty when it cannot say."""
    try:
        proc = subprocess.run(
            [nvcc, "--list-gpu-code"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    if proc.returncode != 0:
        return ()
    return tuple(w for w in proc.stdout.split() if _ARCH.fullmatch(w))
