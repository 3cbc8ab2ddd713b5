"""Extract the candidate ``.cu`` source from a model's reply.

The reply must hold a fenced code block (```` ```cuda ````, ```` ```cu ````, ```` ```c++ ````,
```` ```cpp ```` or unlabeled) that defines ``extern "C" int <fn>_cuda(``.  When several
blocks do, the last one wins (models tend to revise as they go).  No such block: ``None``,
and :func:`missing_code_feedback` says, for the model, exactly what was missing.
"""

from __future__ import annotations

import re

#: Fence labels accepted for the candidate (lower case; "" = unlabeled).
LANGUAGES = ("cuda", "cu", "c++", "cpp", "")

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of ``text`` as ``(label, body)``, label lower-cased."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text or "")]


def entry_pattern(fn: str) -> re.Pattern[str]:
    """Matches the required entry point ``extern "C" int <fn>_cuda(``."""
    return re.compile(r'extern\s+"C"\s+(?:__host__\s+)?int\s+' + re.escape(f"{fn}_cuda") + r"\s*\(")


def extract_code(text: str, fn: str) -> str | None:
    """The source of the last accepted fenced block defining ``extern "C" int <fn>_cuda(``.

    ``fn`` is the C function's name (the entry point is ``<fn>_cuda``).
    """
    pat = entry_pattern(fn)
    found = [body for label, body in code_blocks(text) if label in LANGUAGES and pat.search(body)]
    if not found:
        return None
    code = found[-1]
    return code if code.endswith("\n") else code + "\n"


def missing_code_feedback(fn: str, text: str | None = None) -> str:
    """What was missing from a reply without usable code, written for the model.

    With the reply ``text`` it also says whether there was no fenced block at all, blocks
    in another language, or blocks without the entry point.
    """
    need = (
        f'one fenced code block (```cuda ... ```) holding a complete .cu file that defines '
        f'`extern "C" int {fn}_cuda(...)`'
    )
    if text is None:
        return f"Your reply had no usable code: it needs {need}."
    blocks = code_blocks(text)
    if not blocks:
        why = "it contains no fenced code block"
    elif not any(label in LANGUAGES for label, _ in blocks):
        labels = ", ".join(sorted({label for label, _ in blocks}))
        why = f"its code blocks are labelled {labels}, not cuda"
    else:
        why = f'none of its code blocks defines `extern "C" int {fn}_cuda(`'
    return (
        f"Your reply had no usable code: {why}. Reply with {need}, with the same parameters "
        f"as the C function (arrays as device pointers, scalars by value), launching on the "
        f"default stream and returning the CUDA error code."
    )


__all__ = ["LANGUAGES", "code_blocks", "entry_pattern", "extract_code", "missing_code_feedback"]
