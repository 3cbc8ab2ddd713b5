"""Running the system C preprocessor on a problem file.

Internal helper of :mod:`cudaperf_cli.problems.c`.  The preprocessed text keeps comments
(``-C``, so ``// cudaperf:`` annotations survive) and ``# <line> "<file>"`` line markers,
which tell which lines come from the user's file and which from headers.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..core import ProblemError, ToolchainError
from ..sandbox import C_TOOL_LIMITS, limit_hit, scrubbed_env

#: ``# 12 "file.c" 2`` (the one bit of C text read with a regex: a line marker).
_LINE_MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"')

_CPP_TIMEOUT_S = 60.0


def compiler_command(cc: str | None) -> list[str]:
    """The C compiler as an argv prefix: ``cc`` if given, else ``$CC``, else ``cc``.

    Raises:
        ToolchainError: the compiler is not found on ``PATH``.
    """
    text = cc or os.environ.get("CC") or "cc"
    try:
        argv = shlex.split(text)
    except ValueError as exc:  # CC='"gcc' (no closing quotation)
        raise ToolchainError(f"cannot read the C compiler command '{text}': {exc}") from None
    if not argv:
        raise ToolchainError("empty C compiler command (check $CC)")
    if shutil.which(argv[0]) is None:
        raise ToolchainError(
            f"C compiler '{argv[0]}' not found",
            hint="install gcc or point $CC at a C compiler",
        )
    return argv


def normalize_cpp_args(cpp_args: Sequence[str]) -> tuple[str, ...]:
    """Join ``-I DIR``/``-D NAME[=VAL]``/``-U NAME`` pairs into single words.

    Relative ``-I`` directories are made absolute (relative to the current directory), so
    later compiles that run elsewhere still find them.

    Raises:
        ProblemError: an argument that is not ``-I``, ``-D``, ``-U`` (or is missing its value).
    """
    out: list[str] = []
    args = list(cpp_args)
    i = 0
    while i < len(args):
        arg = args[i]
        flag = arg[:2]
        if flag not in ("-I", "-D", "-U"):
            raise ProblemError(
                f"unsupported preprocessor argument '{arg}'",
                hint="only -I DIR, -D NAME[=VALUE] and -U NAME are accepted",
            )
        value = arg[2:]
        if not value:
            if i + 1 >= len(args):
                raise ProblemError(f"'{arg}' needs a value")
            i += 1
            value = args[i]
        if flag == "-I":
            value = str(Path(value).expanduser().absolute())
        out.append(flag + value)
        i += 1
    return tuple(out)


def first_error_line(stderr: str) -> str:
    """The compiler's first error line (or its first non-empty line)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:  # the linker's summary line says less than the line before it
        low = ln.lower()
        if ("error" in low or "undefined reference" in low) and "ld returned" not in low:
            return ln
    return lines[0] if lines else "(no message)"


def trim_compiler_output(stderr: str, max_lines: int = 12, max_chars: int = 2000) -> str:
    """Error lines first, then context, cut to a readable size."""
    lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    errors = [
        i for i, ln in enumerate(lines) if "error" in ln.lower() or "undefined reference" in ln
    ]
    start = max(0, errors[0] - 1) if errors else 0
    text = "\n".join(lines[start : start + max_lines])
    return text[:max_chars] if text else "(no message)"


@dataclass(frozen=True)
class Preprocessed:
    """A preprocessed file.

    Attributes:
        text: the preprocessed text without the lines that do not come from the user's
            file (headers, built-ins) and without line markers.  Header lines sit between
            top-level declarations (``#include``), so what is left still parses.
        origin_lines: for each row of ``text``, the line in the user's file it came from
            (1-based).
        command: the preprocessor command that ran.
        all_text: the whole preprocessed translation unit, headers included, line markers
            blanked (read for the typedefs that headers declare); ``""`` when not kept.
    """

    text: str
    origin_lines: tuple[int, ...]
    command: tuple[str, ...]
    all_text: str = ""

    def origin_line(self, row: int) -> int:
        """Line of the user's file for a 0-based row of ``text`` (0 if unknown)."""
        if not self.origin_lines:
            return 0
        return self.origin_lines[max(0, min(row, len(self.origin_lines) - 1))]


def preprocess(path: Path, cpp_args: Sequence[str], cc: str | None) -> Preprocessed:
    """Run ``cc -E -C`` on ``path`` with ``-I<dir of path>`` and the user's flags.

    Raises:
        ToolchainError: no compiler, or the preprocessor timed out.
        ProblemError: the preprocessor failed (message: its first error line).
    """
    path = path.resolve()
    cmd = [
        *compiler_command(cc),
        "-E",
        "-C",
        *cpp_args,
        f"-I{path.parent}",
        "-x",  # C whatever the file is named (gcc skips a file without a .c suffix)
        "c",
        str(path),
    ]
    try:
        # No stdin (#include "/dev/stdin" must not wait); a byte that is not UTF-8 (a Latin-1
        # comment) must not abort decoding.
        proc = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
            timeout=_CPP_TIMEOUT_S, check=False, env=scrubbed_env(),
            preexec_fn=C_TOOL_LIMITS.preexec(),  # '#include "/dev/zero"' ends at 4 GiB
        )
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"the C preprocessor timed out after {_CPP_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise ToolchainError(f"cannot run the C preprocessor: {exc}") from None
    if proc.returncode != 0:
        hit = limit_hit(proc.returncode, proc.stderr, C_TOOL_LIMITS)
        if hit:
            raise ProblemError(
                f"preprocessing {path.name} ran into {hit}: {first_error_line(proc.stderr)}",
                hint="does it #include a device (/dev/zero) or a huge file?",
            )
        raise ProblemError(
            f"preprocessing {path.name} failed: {first_error_line(proc.stderr)}",
            hint="pass include directories and macros with -I DIR / -D NAME=VALUE",
        )
    return _keep_user_lines(proc.stdout, path, tuple(cmd))


def _keep_user_lines(out: str, path: Path, cmd: tuple[str, ...]) -> Preprocessed:
    same_file: dict[str, bool] = {}

    def is_user_file(name: str) -> bool:
        if name not in same_file:
            if name.startswith("<"):
                same_file[name] = False
            else:
                try:
                    same_file[name] = Path(name).resolve() == path
                except OSError:
                    same_file[name] = False
        return same_file[name]

    kept: list[str] = []
    origin: list[int] = []
    every: list[str] = []
    in_user = False
    line_no = 0
    for line in out.split("\n"):
        m = _LINE_MARKER.match(line) if line.startswith("#") else None
        if m:
            name = re.sub(r"\\(.)", r"\1", m.group(2))
            in_user = is_user_file(name)
            line_no = int(m.group(1))
            every.append("")
            continue
        every.append(line)
        if in_user:
            kept.append(line)
            origin.append(line_no)
        line_no += 1
    return Preprocessed("\n".join(kept), tuple(origin), cmd, "\n".join(every))
