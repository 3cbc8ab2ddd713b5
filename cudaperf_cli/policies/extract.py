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


#: Fence labels accepted for a PyTorch candidate's Python file.
PY_LANGUAGES = ("python", "py", "")
_MODELNEW = re.compile(r"^class\s+ModelNew\b", re.M)
_CUDA_LAUNCHER = re.compile(r'extern\s+"C"')


def extract_torch_files(text: str) -> dict[str, str] | None:
    """A PyTorch candidate's files from a reply, or ``None``.

    Format A (fast): the last ```` ```python ```` block defining ``class ModelNew`` becomes
    ``model.py`` and the last ```` ```cuda ```` (``cu``, ``c++``, ``cpp``) block holding an
    ``extern "C"`` launcher becomes ``kernel.cu``.  Format B (``load_inline``): the Python
    block alone (it builds its CUDA itself).
    """
    blocks = code_blocks(text)
    py = [body for label, body in blocks if label in PY_LANGUAGES and _MODELNEW.search(body)]
    if not py:
        return None
    files = {"model.py": py[-1] if py[-1].endswith("\n") else py[-1] + "\n"}
    cu = [body for label, body in blocks
          if label in LANGUAGES and label != "" and _CUDA_LAUNCHER.search(body)]
    if cu and "load_inline" not in files["model.py"]:
        files["kernel.cu"] = cu[-1] if cu[-1].endswith("\n") else cu[-1] + "\n"
    return files


def missing_torch_code_feedback(text: str | None = None) -> str:
    """What was missing from a reply to a PyTorch problem, written for the model."""
    need = ("a ```cuda block (kernel.cu with extern \"C\" launchers) and a ```python block "
            "(model.py defining class ModelNew), or one ```python block defining ModelNew "
            "with load_inline")
    blocks = code_blocks(text or "")
    if not blocks:
        why = "it contains no fenced code block"
    elif not any(label in PY_LANGUAGES and _MODELNEW.search(body) for label, body in blocks):
        why = "none of its python blocks defines `class ModelNew`"
    else:
        why = "it is incomplete"
    return f"Your reply had no usable code: {why}. Reply with {need}."


def truncated_reply_feedback(tokens: int = 0, max_tokens: int | None = None) -> str:
    """What to tell the model when its reply was cut at the token limit (the server's
    ``finish_reason`` was ``"length"``) before the code was complete."""
    where = f"after {tokens} tokens" if tokens else "at the token limit"
    limit = f" (max_tokens={max_tokens})" if max_tokens else ""
    return (f"Your reply was cut off {where}{limit} before its code was complete, so nothing "
            "could be compiled. Reply again with the complete code first, in one fenced code "
            "block, and keep the explanation to a few lines after it.")


__all__ = [
    "LANGUAGES", "PY_LANGUAGES", "code_blocks", "entry_pattern", "extract_code",
    "extract_torch_files", "missing_code_feedback", "missing_torch_code_feedback",
    "truncated_reply_feedback",
]
