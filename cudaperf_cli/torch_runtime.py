"""Call hand-written CUDA launchers from PyTorch without building a PyTorch extension.

The *fast candidate format* (``docs/pytorch-evaluation.md``) is a ``kernel.cu`` with
``extern "C"`` launchers plus a ``model.py`` that loads it::

    // kernel.cu
    extern "C" int scaled_relu(const float *x, float *y, int64_t n, float scale,
                               cudaStream_t stream) {
        scaled_relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n, scale);
        return (int)cudaGetLastError();
    }

    # model.py
    from cudaperf_cli.torch_runtime import load_cuda
    lib = load_cuda("kernel.cu")          # relative to model.py
    ...
    lib.scaled_relu(x, y, x.numel(), 0.5)  # the current torch stream is appended

:func:`load_cuda` compiles the file with plain ``nvcc -shared`` (no PyTorch headers: a few
seconds instead of the tens of seconds of ``torch.utils.cpp_extension.load_inline``) through
:func:`cudaperf_cli.build.build_candidate`, so builds run in a child process group with a
time limit and are cached by content hash.  It reads the ``extern "C"`` signatures from the
source to set the ``ctypes`` argument types, and each call checks its tensors (CUDA device,
contiguous, dtype matching the pointer type), passes their data pointers, appends the
current torch stream and turns a non-zero return into a ``RuntimeError`` carrying
``cudaGetErrorName``/``cudaGetErrorString``.

PyTorch is imported only when a launcher is called; parsing and compiling need no torch.
"""

from __future__ import annotations

import ctypes
import numbers
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaperf_cli.build.nvcc import (
    SOURCE_NAME,
    BuildResult,
    build_candidate,
    default_cache_root,
    detect_arch,
)

#: Overrides :func:`load_cuda`'s default build root (the evaluator sets it per job).
BUILD_ROOT_ENV = "CUDAPERF_TORCH_BUILD_ROOT"
#: Overrides the detected architecture (``sm_90``...) when ``arch`` is not given.
ARCH_ENV = "CUDAPERF_TORCH_ARCH"

#: Exported by every library :func:`load_cuda` builds (appended to the source).
_ERR_STRING_SYMBOL = "cudaperf_rt_error_string"
_ERR_NAME_SYMBOL = "cudaperf_rt_error_name"
_TRAILER = f"""
/* appended by cudaperf_cli.torch_runtime: error texts of this library's CUDA runtime */
#include <cuda_runtime.h>
extern "C" const char *{_ERR_STRING_SYMBOL}(int code) {{ return cudaGetErrorString((cudaError_t)code); }}
extern "C" const char *{_ERR_NAME_SYMBOL}(int code) {{ return cudaGetErrorName((cudaError_t)code); }}
"""


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


class LauncherSignatureError(ValueError):
    """The source declares no usable ``extern "C"`` launcher, or one has a parameter type
    the runtime cannot pass (the message names the function, the parameter and the
    supported types)."""


class CudaCompileError(RuntimeError):
    """nvcc failed or timed out.

    Attributes:
        status: ``"compile_error"`` or ``"compile_timeout"``.
        errors: nvcc's error lines with their context (file name as given, e.g.
            ``kernel.cu(12): error: ...``), trimmed like :attr:`BuildResult.errors`.
        log: nvcc's full output.
        build: the :class:`~cudaperf_cli.build.BuildResult`.
    """

    def __init__(self, message: str, *, status: str, errors: str, log: str, build: BuildResult):
        super().__init__(message)
        self.status = status
        self.errors = errors
        self.log = log
        self.build = build


# ---------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------

#: C pointee type -> torch dtype name of the tensor passed for it (None: any dtype).
POINTER_TYPES: dict[str, str | None] = {
    "void": None,
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "__half": "float16",
    "__nv_bfloat16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    "bool": "bool",
    "char": "int8",
    "signed char": "int8",
    "int8_t": "int8",
    "unsigned char": "uint8",
    "uint8_t": "uint8",
    "short": "int16",
    "short int": "int16",
    "int16_t": "int16",
    "unsigned short": "uint16",
    "uint16_t": "uint16",
    "int": "int32",
    "signed": "int32",
    "signed int": "int32",
    "int32_t": "int32",
    "unsigned": "uint32",
    "unsigned int": "uint32",
    "uint32_t": "uint32",
    "long": "int64",
    "long int": "int64",
    "long long": "int64",
    "long long int": "int64",
    "int64_t": "int64",
    "unsigned long": "uint64",
    "unsigned long long": "uint64",
    "uint64_t": "uint64",
    "size_t": "uint64",
}

#: C scalar type (by value) -> (ctypes type, kind: "int" | "float" | "bool").
SCALAR_TYPES: dict[str, tuple[Any, str]] = {
    "float": (ctypes.c_float, "float"),
    "double": (ctypes.c_double, "float"),
    "bool": (ctypes.c_bool, "bool"),
    "int": (ctypes.c_int32, "int"),
    "signed": (ctypes.c_int32, "int"),
    "signed int": (ctypes.c_int32, "int"),
    "int32_t": (ctypes.c_int32, "int"),
    "unsigned": (ctypes.c_uint32, "int"),
    "unsigned int": (ctypes.c_uint32, "int"),
    "uint32_t": (ctypes.c_uint32, "int"),
    "long": (ctypes.c_int64, "int"),
    "long int": (ctypes.c_int64, "int"),
    "long long": (ctypes.c_int64, "int"),
    "long long int": (ctypes.c_int64, "int"),
    "int64_t": (ctypes.c_int64, "int"),
    "unsigned long": (ctypes.c_uint64, "int"),
    "unsigned long long": (ctypes.c_uint64, "int"),
    "uint64_t": (ctypes.c_uint64, "int"),
    "size_t": (ctypes.c_uint64, "int"),
    "short": (ctypes.c_int16, "int"),
    "int16_t": (ctypes.c_int16, "int"),
    "unsigned short": (ctypes.c_uint16, "int"),
    "uint16_t": (ctypes.c_uint16, "int"),
    "int8_t": (ctypes.c_int8, "int"),
    "uint8_t": (ctypes.c_uint8, "int"),
}

STREAM_TYPES = frozenset({"cudaStream_t", "CUstream"})
#: Return types accepted for a launcher (a cudaError_t, or it cast to int).
RETURN_TYPES = frozenset({"int", "int32_t", "cudaError_t", "cudaError"})

_TYPE_WORDS = frozenset(
    w for t in (*POINTER_TYPES, *SCALAR_TYPES, *STREAM_TYPES) for w in t.split()
)
_QUALIFIERS = frozenset({"const", "volatile", "__restrict__", "__restrict", "restrict"})
_HEAD_DROP = frozenset(
    {
        "static",
        "inline",
        "__inline__",
        "__forceinline__",
        "__noinline__",
        "__host__",
        "extern",
        "constexpr",
        "__declspec",
    }
)


def _supported_text() -> str:
    ptrs = "float*, double*, __half*, __nv_bfloat16*, int*/int32_t*, int64_t*, uint8_t*, " \
        "int8_t*, int16_t*, bool*, void* (any dtype), const or not"
    scalars = "int, int32_t, int64_t, long, unsigned, uint32_t, uint64_t, size_t, float, " \
        "double, bool"
    return f"pointers {ptrs}; scalars {scalars}; and cudaStream_t last"


@dataclass(frozen=True)
class LauncherParam:
    """One parameter of a launcher (the trailing stream excluded).

    Attributes:
        name: as written (``"arg<i>"`` when the declaration names none).
        ctype: the C type without qualifiers or ``*`` (``"float"``, ``"int64_t"``).
        pointer: a device pointer (a tensor is passed), else a scalar by value.
        const: the pointee is ``const``.
        dtype: for pointers, the torch dtype name the tensor must have (None for
            ``void*``: any dtype); None for scalars.
    """

    name: str
    ctype: str
    pointer: bool
    const: bool = False
    dtype: str | None = None

    def text(self) -> str:
        if self.pointer:
            return f"{'const ' if self.const else ''}{self.ctype} *{self.name}"
        return f"{self.ctype} {self.name}"


@dataclass(frozen=True)
class LauncherSignature:
    """An ``extern "C"`` launcher: ``int name(<params>, cudaStream_t stream)``.

    Attributes:
        name: the symbol.
        params: the parameters before the stream.
        return_type: as written (``int`` or ``cudaError_t``).
    """

    name: str
    params: tuple[LauncherParam, ...]
    return_type: str = "int"

    def describe(self) -> str:
        inner = ", ".join([*(p.text() for p in self.params), "cudaStream_t stream"])
        return f"{self.return_type} {self.name}({inner})"

    def argtypes(self) -> list[Any]:
        """ctypes argument types, the stream (``c_void_p``) included."""
        out: list[Any] = []
        for p in self.params:
            out.append(ctypes.c_void_p if p.pointer else SCALAR_TYPES[p.ctype][0])
        out.append(ctypes.c_void_p)
        return out


# ---------------------------------------------------------------------------------------
# Parsing extern "C" declarations
# ---------------------------------------------------------------------------------------

_EXTERN_C = re.compile(r'\bextern\s*"C"')
_MARK = "\x01"  # replaces extern "C" before string literals are blanked


def _blank_comments_and_literals(src: str) -> str:
    """Replace comments and the contents of string/char literals with spaces (newlines
    kept); ``extern "C"`` becomes the marker character first."""
    out: list[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        elif (m := _EXTERN_C.match(src, i)) is not None and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            out.append(_MARK + " " * (m.end() - i - 1))
            i = m.end()
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(j - i - 2, 0) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    text = "".join(out)
    # Preprocessor lines (with their continuations) carry no declarations we can read.
    lines = text.split("\n")
    cont = False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            lines[k] = " " * len(line)
        else:
            cont = False
    return "\n".join(lines)


def _match_close(text: str, i: int) -> int:
    """Index just past the bracket closing the one at ``text[i]``."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = [pairs[text[i]]]
    j = i + 1
    while j < len(text) and stack:
        c = text[j]
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
        j += 1
    return j


def _statements(text: str) -> list[str]:
    """Top-level declarations of ``text``: each ends at a ``;`` or at a ``{...}`` body
    (skipped); nested blocks are skipped whole."""
    out: list[str] = []
    start = 0
    i = 0
    while i < len(text):
        c = text[i]
        if c in "([":
            i = _match_close(text, i)
            continue
        if c == "{":
            out.append(text[start:i])
            i = _match_close(text, i)
            start = i
            continue
        if c == ";":
            out.append(text[start:i])
            start = i + 1
        i += 1
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


def _extern_c_regions(text: str) -> list[str]:
    """The text each ``extern "C"`` applies to: a ``{...}`` block's inside, or the one
    declaration (with its body) that follows."""
    regions = []
    pos = text.find(_MARK)
    while pos >= 0:
        i = pos + 1
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text) and text[i] == "{":
            end = _match_close(text, i)
            regions.append(text[i + 1 : end - 1])
        else:
            j = i
            while j < len(text) and text[j] not in ";{":
                j = _match_close(text, j) if text[j] in "([" else j + 1
            end = _match_close(text, j) if j < len(text) and text[j] == "{" else j + 1
            regions.append(text[i:end])
        pos = text.find(_MARK, max(end, pos + 1))
    return regions


_ATTRS = re.compile(
    r"(__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)|__launch_bounds__\s*\([^()]*\)"
    r"|__declspec\s*\([^()]*\))"
)
_FUNC = re.compile(r"^(?P<head>[^()]*?)\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>.*)\)\s*(?:noexcept)?\s*$", re.S)


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside ``()``, ``<>`` and ``[]``, each part stripped
    (a C parameter list, a launch configuration ``grid, block, smem, stream``)."""
    parts, depth, cur = [], 0, []
    for c in text:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _split_params(text: str) -> list[str]:
    parts = split_top_level(text)
    if parts == [""] or parts == ["void"]:
        return []
    return parts


def _parse_param(fn: str, index: int, text: str) -> LauncherParam | str:
    """A :class:`LauncherParam`, or ``"stream"`` for the stream parameter.

    Raises:
        LauncherSignatureError: an unsupported type.
    """
    flat = " ".join(text.split())

    def bad(why: str) -> LauncherSignatureError:
        return LauncherSignatureError(
            f"launcher {fn}: parameter {index + 1} '{flat}' {why}; supported: {_supported_text()}"
        )

    if any(ch in flat for ch in "&[(=<"):
        raise bad("is not supported (references, arrays, templates, function pointers "
                  "and default values cannot be passed from Python)")
    stars = flat.count("*")
    words = [w.replace("std::", "") for w in re.findall(r"[A-Za-z_][\w:]*", flat)]
    const = "const" in flat.split("*")[0].split()
    words = [w for w in words if w not in _QUALIFIERS]
    if len(words) > 1 and words[-1] not in _TYPE_WORDS:
        name, type_words = words[-1], words[:-1]
    elif len(words) >= 1 and all(w in _TYPE_WORDS for w in words):
        name, type_words = f"arg{index}", words
    else:
        raise bad("has a type the runtime does not know")
    ctype = " ".join(type_words)
    if ctype in STREAM_TYPES and stars == 0:
        return "stream"
    if stars == 1 and ctype in POINTER_TYPES:
        return LauncherParam(name, ctype, True, const, POINTER_TYPES[ctype])
    if stars == 0 and ctype in SCALAR_TYPES:
        return LauncherParam(name, ctype, False)
    if stars > 1:
        raise bad("is a pointer to a pointer")
    raise bad(f"has type '{ctype}{' *' * stars}'")


def parse_launchers(source: str, *, filename: str = "kernel.cu") -> list[LauncherSignature]:
    """The ``extern "C"`` launchers declared or defined in CUDA source ``source``.

    A launcher is a host function declared ``extern "C"`` (alone or inside an
    ``extern "C" { ... }`` block) whose last parameter is a ``cudaStream_t``; it must return
    ``int`` (or ``cudaError_t``).  ``__global__`` and ``__device__`` functions and host
    functions with other return types and no stream (helpers) are skipped.  Comments,
    string literals and preprocessor lines are ignored (macros are not expanded).

    Returns:
        The launchers in source order (a prototype and its definition count once).

    Raises:
        LauncherSignatureError: none found; a parameter type that cannot be passed (the
            message names the launcher, the parameter and the supported types); a stream
            parameter that is not last; an ``extern "C" int`` host function without the
            trailing stream; a launcher not returning ``int``.
    """
    text = _blank_comments_and_literals(source)
    found: dict[str, LauncherSignature] = {}
    for region in _extern_c_regions(text):
        for stmt in _statements(region):
            m = _FUNC.match(_ATTRS.sub(" ", stmt))
            if m is None:
                continue
            head = m.group("head").replace("*", " * ").split()
            name = m.group("name")
            if "__global__" in head or ("__device__" in head and "__host__" not in head):
                continue
            ret = " ".join(w for w in head if w not in _HEAD_DROP and w != "__device__")
            raw = _split_params(m.group("params"))
            stream_at: int | None = None
            parsed: list[LauncherParam | str] = []
            is_stream = [
                "*" not in p and any(w in STREAM_TYPES for w in re.findall(r"[A-Za-z_]\w*", p))
                for p in raw
            ]
            if not any(is_stream):
                if ret.replace(" ", "") in RETURN_TYPES:
                    raise LauncherSignatureError(
                        f'extern "C" {ret} {name}(...) in {filename} does not take a '
                        "cudaStream_t as its last parameter: every launcher ends with "
                        "`cudaStream_t stream` and launches its kernels on it"
                    )
                continue  # a helper (other return type, no stream)
            for i, p in enumerate(raw):
                r = _parse_param(name, i, p)
                parsed.append(r)
                if r == "stream":
                    stream_at = i
            if stream_at != len(raw) - 1 or sum(1 for r in parsed if r == "stream") != 1:
                raise LauncherSignatureError(
                    f"launcher {name} in {filename}: the cudaStream_t must be the last "
                    "parameter, and the only one"
                )
            params = [r for r in parsed if isinstance(r, LauncherParam)]
            if ret.replace(" ", "") not in RETURN_TYPES:
                raise LauncherSignatureError(
                    f"launcher {name} in {filename} returns '{ret or '?'}': a launcher returns "
                    "its cudaError_t as int, e.g. `return (int)cudaGetLastError();`"
                )
            sig = LauncherSignature(name, tuple(params), ret)
            prev = found.get(name)
            if prev is not None and [(p.ctype, p.pointer) for p in prev.params] != [
                (p.ctype, p.pointer) for p in sig.params
            ]:
                raise LauncherSignatureError(
                    f"launcher {name} in {filename} is declared twice with different parameters"
                )
            found.setdefault(name, sig)
    if not found:
        raise LauncherSignatureError(
            f'no extern "C" launcher found in {filename}: define one per entry point, e.g. '
            'extern "C" int relu(const float *x, float *y, int64_t n, cudaStream_t stream) '
            "{ relu_kernel<<<grid, block, 0, stream>>>(x, y, n); "
            "return (int)cudaGetLastError(); }"
        )
    return list(found.values())


# ---------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------


def default_build_root() -> Path:
    """``$CUDAPERF_TORCH_BUILD_ROOT``, else ``default_cache_root() / "torch"``."""
    env = os.environ.get(BUILD_ROOT_ENV)
    return Path(env) if env else default_cache_root() / "torch"


def resolve_arch(arch: str | None = None) -> str:
    """``arch``, else ``$CUDAPERF_TORCH_ARCH``, else the current torch CUDA device's
    ``sm_XY`` (only when torch is already imported), else :func:`detect_arch`, else
    ``"sm_90"``."""
    if arch:
        return arch
    env = os.environ.get(ARCH_ENV)
    if env:
        return env
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                major, minor = torch.cuda.get_device_capability()
                return f"sm_{major}{minor}"
        except Exception:  # noqa: BLE001 - fall through to the driver query
            pass
    return detect_arch() or "sm_90"


def compile_cuda(
    source: str,
    *,
    filename: str = "kernel.cu",
    arch: str | None = None,
    build_root: str | Path | None = None,
    timeout_s: float = 120,
) -> BuildResult:
    """Compile ``source`` (with the runtime's error-text helpers appended) into a shared
    library: ``nvcc -O3 -arch=<arch> -shared -Xcompiler -fPIC ...`` in a child process
    group killed after ``timeout_s`` seconds, cached under ``build_root/<content hash>``.

    Returns:
        The successful :class:`~cudaperf_cli.build.BuildResult` (``lib_path`` set).

    Raises:
        CudaCompileError: nvcc failed (``status="compile_error"``, nvcc's error text with
            ``candidate.cu`` renamed to ``filename``), timed out (``"compile_timeout"``), or
            the source was refused (``"guard_rejected"``: a file read by the compiler, or host
            code that calls what a launcher may not, ``build/host_code.py``).
        ToolchainError: nvcc is missing.
    """
    root = Path(build_root) if build_root is not None else default_build_root()
    res = build_candidate(
        source + _TRAILER, arch=resolve_arch(arch), cache_root=root, timeout_s=timeout_s
    )
    if res.ok:
        return res
    errors = res.errors.replace(SOURCE_NAME, filename)
    log = res.log.replace(SOURCE_NAME, filename)
    if res.status == "compile_timeout":
        msg = f"nvcc did not finish compiling {filename} within {timeout_s:g} s and was killed"
    elif res.status == "guard_rejected":
        msg = f"{filename} was refused before it was linked:\n{errors}"
    else:
        msg = f"nvcc failed to compile {filename}:\n{errors}"
    raise CudaCompileError(msg, status=res.status, errors=errors, log=log, build=res)


# ---------------------------------------------------------------------------------------
# Calling
# ---------------------------------------------------------------------------------------

_torch: Any = None


def _torch_module() -> Any:
    global _torch
    if _torch is None:
        import torch

        _torch = torch
    return _torch


_INT_RANGES = {
    ctypes.c_int8: (-(1 << 7), (1 << 7) - 1),
    ctypes.c_uint8: (0, (1 << 8) - 1),
    ctypes.c_int16: (-(1 << 15), (1 << 15) - 1),
    ctypes.c_uint16: (0, (1 << 16) - 1),
    ctypes.c_int32: (-(1 << 31), (1 << 31) - 1),
    ctypes.c_uint32: (0, (1 << 32) - 1),
    ctypes.c_int64: (-(1 << 63), (1 << 63) - 1),
    ctypes.c_uint64: (0, (1 << 64) - 1),
}


class Launcher:
    """A callable launcher of a :class:`CudaLib`: ``lib.name(*args, stream=None)``.

    Arguments follow the ``extern "C"`` signature without the stream: a ``torch.Tensor``
    (or None for a null pointer) for each pointer, a Python number for each scalar.

    Raises (on call):
        TypeError: wrong number of arguments, a non-tensor for a pointer, a tensor of the
            wrong dtype (``float*`` takes ``torch.float32``...), a non-number for a scalar.
        ValueError: a non-contiguous tensor, a tensor not on a CUDA device, tensors on
            different devices, an integer out of the parameter type's range.
        RuntimeError: the launcher returned non-zero: ``"<name> failed: <cudaGetErrorName>
            (<code>): <cudaGetErrorString>"``.
    """

    def __init__(self, lib: "CudaLib", sig: LauncherSignature, fn: Any):
        self.lib = lib
        self.signature = sig
        self._fn = fn
        self.__name__ = sig.name
        self.__doc__ = sig.describe()

    def __repr__(self) -> str:
        return f"<launcher {self.signature.describe()}>"

    def __call__(self, *args: Any, stream: Any = None) -> None:
        sig = self.signature
        if len(args) != len(sig.params):
            raise TypeError(
                f"{sig.name}() takes {len(sig.params)} argument(s) ({sig.describe()}; the "
                f"stream is appended), got {len(args)}"
            )
        torch = _torch_module()
        cargs: list[Any] = []
        device = None
        for p, a in zip(sig.params, args):
            if p.pointer:
                if a is None:
                    cargs.append(None)
                    continue
                if not isinstance(a, torch.Tensor):
                    raise TypeError(
                        f"{sig.name}: argument '{p.name}' ({p.text()}) needs a torch.Tensor, "
                        f"got {type(a).__name__}"
                    )
                if p.dtype is not None and a.dtype != getattr(torch, p.dtype):
                    raise TypeError(
                        f"{sig.name}: argument '{p.name}' is a {a.dtype} tensor but the "
                        f"parameter is {p.ctype}* (torch.{p.dtype})"
                    )
                if not a.is_contiguous():
                    raise ValueError(
                        f"{sig.name}: argument '{p.name}' is not contiguous (strides "
                        f"{tuple(a.stride())}); pass x.contiguous()"
                    )
                if a.device.type != "cuda":
                    raise ValueError(
                        f"{sig.name}: argument '{p.name}' is on {a.device}; it must be a CUDA "
                        "tensor"
                    )
                if device is None:
                    device = a.device
                elif a.device != device:
                    raise ValueError(
                        f"{sig.name}: tensors on different devices ({device} and {a.device})"
                    )
                cargs.append(a.data_ptr())
            else:
                ctype, kind = SCALAR_TYPES[p.ctype]
                if isinstance(a, torch.Tensor):
                    raise TypeError(
                        f"{sig.name}: argument '{p.name}' ({p.text()}) is a scalar; pass a "
                        "Python number (e.g. t.item()), not a tensor"
                    )
                if kind == "float":
                    if not isinstance(a, numbers.Real) or isinstance(a, bool):
                        raise TypeError(
                            f"{sig.name}: argument '{p.name}' ({p.text()}) needs a number, "
                            f"got {type(a).__name__}"
                        )
                    cargs.append(float(a))
                else:
                    if not isinstance(a, numbers.Integral):
                        raise TypeError(
                            f"{sig.name}: argument '{p.name}' ({p.text()}) needs an integer, "
                            f"got {type(a).__name__}"
                        )
                    v = int(a)
                    if kind == "int":
                        lo, hi = _INT_RANGES[ctype]
                        if not lo <= v <= hi:
                            raise ValueError(
                                f"{sig.name}: argument '{p.name}' = {v} does not fit {p.ctype}"
                            )
                    cargs.append(v)
        if stream is None:
            if device is None:
                device = torch.device("cuda", torch.cuda.current_device())
            handle = torch.cuda.current_stream(device).cuda_stream
        else:
            handle = int(getattr(stream, "cuda_stream", stream))
        if device is not None and device.index is not None and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                rc = self._fn(*cargs, handle)
        else:
            rc = self._fn(*cargs, handle)
        if rc != 0:
            raise RuntimeError(f"{sig.name} failed: {self.lib.error_text(rc)}")


class CudaLib:
    """A library built by :func:`load_cuda`; its launchers are attributes.

    Attributes:
        path: the shared library.
        source_path: the ``.cu`` file it was built from (None for source text).
        launchers: name -> :class:`LauncherSignature`.
        build: the :class:`~cudaperf_cli.build.BuildResult` (``cached``, ``seconds``,
            ``resources`` per kernel...).
    """

    def __init__(
        self,
        path: Path,
        launchers: list[LauncherSignature],
        *,
        source_path: Path | None = None,
        build: BuildResult | None = None,
    ):
        self.path = Path(path)
        self.source_path = source_path
        self.build = build
        self.launchers = {s.name: s for s in launchers}
        self._dll = ctypes.CDLL(str(self.path))
        self._fns: dict[str, Launcher] = {}
        for s in launchers:
            try:
                fn = getattr(self._dll, s.name)
            except AttributeError:
                raise LauncherSignatureError(
                    f"launcher {s.name} is declared but not defined in "
                    f"{source_path.name if source_path else 'the source'} (not exported by "
                    "the library)"
                ) from None
            fn.restype = ctypes.c_int
            fn.argtypes = s.argtypes()
            self._fns[s.name] = Launcher(self, s, fn)
        self._err_string = getattr(self._dll, _ERR_STRING_SYMBOL, None)
        self._err_name = getattr(self._dll, _ERR_NAME_SYMBOL, None)
        for f in (self._err_string, self._err_name):
            if f is not None:
                f.restype = ctypes.c_char_p
                f.argtypes = [ctypes.c_int]

    def __getattr__(self, name: str) -> Launcher:
        fns = self.__dict__.get("_fns", {})
        if name in fns:
            return fns[name]
        raise AttributeError(
            f"no launcher '{name}' in {self.path.name}; launchers: {', '.join(sorted(fns)) or 'none'}"
        )

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._fns))

    def __repr__(self) -> str:
        return f"<CudaLib {self.path} launchers={sorted(self._fns)}>"

    def error_text(self, code: int) -> str:
        """``"<cudaGetErrorName> (<code>): <cudaGetErrorString>"`` from this library's
        CUDA runtime."""
        name = self._err_name(int(code)).decode() if self._err_name else "cudaError"
        text = self._err_string(int(code)).decode() if self._err_string else "unknown error"
        return f"{name} ({int(code)}): {text}"


# ---------------------------------------------------------------------------------------
# load_cuda
# ---------------------------------------------------------------------------------------

_loaded: dict[str, CudaLib] = {}
_lock = threading.Lock()


def _caller_dir() -> Path:
    """Directory of the first caller outside this module (its ``__file__``), else cwd."""
    frame = sys._getframe(1)
    here = globals().get("__file__")
    while frame is not None:
        f = frame.f_globals.get("__file__")
        if f != here:
            return Path(f).resolve().parent if f else Path.cwd()
        frame = frame.f_back  # type: ignore[assignment]
    return Path.cwd()


def _is_source_text(s: str) -> bool:
    return "\n" in s or "{" in s


def load_cuda(
    path_or_source: str | os.PathLike[str],
    *,
    arch: str | None = None,
    build_root: str | os.PathLike[str] | None = None,
    timeout_s: float = 120,
) -> CudaLib:
    """Compile (or reuse) a CUDA file of ``extern "C"`` launchers and return its launchers.

    Args:
        path_or_source: a ``.cu`` path (relative paths are resolved against the directory
            of the calling module's ``__file__``, e.g. ``model.py``; the working directory
            when the caller has none), or the source text itself (a ``str`` containing a
            newline or ``{``).
        arch: nvcc ``-arch`` value (``"sm_90"``); default :func:`resolve_arch`.
        build_root: cache directory (one build directory per content hash); default
            ``$CUDAPERF_TORCH_BUILD_ROOT`` or ``default_cache_root() / "torch"``.
        timeout_s: nvcc's time limit, seconds.

    Returns:
        A :class:`CudaLib`: ``lib.<launcher>(*args)`` launches on the current torch stream.

    Raises:
        FileNotFoundError: the path does not exist (the message says where it looked).
        LauncherSignatureError: no ``extern "C"`` launcher, or an unsupported parameter
            type (raised before compiling).
        CudaCompileError: nvcc failed (its error text) or timed out.
        ToolchainError: nvcc is missing.
    """
    if isinstance(path_or_source, str) and _is_source_text(path_or_source):
        source, source_path, filename = path_or_source, None, "<source>.cu"
    else:
        p = Path(path_or_source)
        if not p.is_absolute():
            p = _caller_dir() / p
        if not p.is_file():
            raise FileNotFoundError(f"load_cuda: {p} not found")
        source, source_path, filename = p.read_text(), p.resolve(), p.name
    sigs = parse_launchers(source, filename=filename)
    build = compile_cuda(
        source, filename=filename, arch=arch, build_root=build_root, timeout_s=timeout_s
    )
    assert build.lib_path is not None
    key = str(build.lib_path)
    with _lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = CudaLib(build.lib_path, sigs, source_path=source_path, build=build)
            _loaded[key] = lib
    return lib


__all__ = [
    "ARCH_ENV",
    "BUILD_ROOT_ENV",
    "CudaCompileError",
    "CudaLib",
    "Launcher",
    "LauncherParam",
    "LauncherSignature",
    "LauncherSignatureError",
    "POINTER_TYPES",
    "SCALAR_TYPES",
    "compile_cuda",
    "default_build_root",
    "load_cuda",
    "parse_launchers",
    "resolve_arch",
    "split_top_level",
]
