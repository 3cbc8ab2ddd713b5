"""Core types shared by every pipeline stage.

Data flows one way (see ``docs/architecture.md``)::

    problem -> policy -> build -> verify/time (child process) -> report

A stage imports only stages to its left and this module.  Everything here is plain data
(dataclasses, JSON-serialisable through :func:`to_jsonable`) so that a job can cross into
the evaluation child process as JSON.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import dataclasses
import enum
import functools
import operator
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Union


class CudaperfError(Exception):
    """A known, user-facing error: the CLI prints ``str(err)`` as one line on stderr.

    ``exit_code`` is the process exit status the CLI uses (see ``docs/exit-codes.md``).
    ``hint`` is an optional second line (e.g. the annotation to add).
    """

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class ProblemError(CudaperfError):
    """The input problem (C file or model file) cannot be loaded or is not supported."""


class ToolchainError(CudaperfError):
    """A required tool (nvcc, the C compiler) is missing or failed outside a candidate."""

    exit_code = 3


class MissingPackageError(ToolchainError):
    """A Python package the chosen feature needs is not installed (jinja2 for the model
    policies, openai, transformers, trl, peft, vllm, torch): exit 3, like a missing tool,
    with the pip command as the hint."""


# ---------------------------------------------------------------------------------------
# C element types
# ---------------------------------------------------------------------------------------

#: C scalar type (as written after preprocessing, whitespace-normalised) -> numpy dtype name.
#: ``long`` is LP64 (64-bit), the Linux x86-64 and CUDA convention.
C_TYPE_TO_DTYPE: dict[str, str] = {
    "double": "float64",
    "float": "float32",
    "int": "int32",
    "signed int": "int32",
    "unsigned": "uint32",
    "unsigned int": "uint32",
    "long": "int64",
    "long int": "int64",
    "long long": "int64",
    "long long int": "int64",
    "unsigned long": "uint64",
    "unsigned long long": "uint64",
    "size_t": "uint64",
    "int32_t": "int32",
    "int64_t": "int64",
    "uint32_t": "uint32",
    "uint64_t": "uint64",
    "short": "int16",
    "unsigned short": "uint16",
    "char": "int8",
    "signed char": "int8",
    "unsigned char": "uint8",
    "int8_t": "int8",
    "uint8_t": "uint8",
    "int16_t": "int16",
    "uint16_t": "uint16",
}

FLOAT_CTYPES = frozenset({"double", "float"})

#: numpy dtype name -> ctypes type, for scalars passed by value through ctypes.
CTYPE_OF_DTYPE: dict[str, Any] = {
    "float64": ctypes.c_double,
    "float32": ctypes.c_float,
    "int8": ctypes.c_int8,
    "uint8": ctypes.c_uint8,
    "int16": ctypes.c_int16,
    "uint16": ctypes.c_uint16,
    "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32,
    "int64": ctypes.c_int64,
    "uint64": ctypes.c_uint64,
}


_CTYPE_DROP = frozenset({
    "const", "volatile", "restrict", "__restrict", "__restrict__", "static", "register",
    "__const", "__volatile__", "__extension__",
})
_INT_WORDS = frozenset({"signed", "unsigned", "char", "short", "int", "long", "__signed",
                        "__signed__"})


def _canonical_integer(words: list[str]) -> str | None:
    """The one spelling of a C integer type given by its specifier words, in any order
    (C11 6.7.2p2 lists the equivalent multisets): ``long unsigned int`` -> ``unsigned
    long``, ``short int`` -> ``short``, ``signed`` -> ``int``; ``None`` when the words are
    not an integer type (``long double``) or not a valid combination."""
    if not words or any(w not in _INT_WORDS for w in words):
        return None
    signed = sum(words.count(w) for w in ("signed", "__signed", "__signed__"))
    unsigned = words.count("unsigned")
    chars, shorts, ints, longs = (words.count(w) for w in ("char", "short", "int", "long"))
    if signed + unsigned > 1 or ints > 1 or chars > 1 or shorts > 1 or longs > 2:
        return None
    if chars:
        if shorts or ints or longs:
            return None
        return "unsigned char" if unsigned else ("signed char" if signed else "char")
    if shorts and longs:
        return None
    base = "short" if shorts else ("long long" if longs == 2 else ("long" if longs else "int"))
    return f"unsigned {base}" if unsigned else base


def normalize_ctype(text: str) -> str:
    """Normalise a C type spelling: drop qualifiers/storage words, collapse whitespace, and
    give integer types one spelling whatever the order and optional words of their
    specifiers (``unsigned long int``, ``long unsigned`` -> ``unsigned long``; ``signed
    int`` -> ``int``; ``signed char`` stays distinct from ``char``).  Other types (``double``,
    typedef names, ``struct s``) keep their words."""
    words = [w for w in text.replace("*", " ").split() if w not in _CTYPE_DROP]
    canonical = _canonical_integer(words)
    return canonical if canonical is not None else " ".join(words)


def dtype_of(ctype: str) -> str:
    """numpy dtype name for a C element type.

    Raises:
        ProblemError: the type is not one cudaperf supports (structs, complex, ...).
    """
    norm = normalize_ctype(ctype)
    try:
        return C_TYPE_TO_DTYPE[norm]
    except KeyError:
        raise ProblemError(
            f"unsupported element type '{ctype}': supported are "
            + ", ".join(sorted(set(C_TYPE_TO_DTYPE)))
        ) from None


# ---------------------------------------------------------------------------------------
# Parameters of the function to port
# ---------------------------------------------------------------------------------------


class ScalarKind(str, enum.Enum):
    SIZE = "size"  #: integer scalar: a problem size (loop bound, extent)
    COEFFICIENT = "coefficient"  #: floating scalar: a coefficient such as alpha


@dataclass(frozen=True)
class ScalarParam:
    """A by-value scalar parameter.

    Attributes:
        name: parameter name in the C source.
        ctype: element type as written (``int``, ``double``...).
        kind: :class:`ScalarKind` (integer -> size, floating -> coefficient).
    """

    name: str
    ctype: str
    kind: ScalarKind

    @property
    def dtype(self) -> str:
        return dtype_of(self.ctype)


@dataclass(frozen=True)
class ArrayParam:
    """A pointer or array parameter.

    Attributes:
        name: parameter name.
        ctype: element type (``double`` for ``double A[n][m]`` or ``double *A``).
        extents: one C expression per dimension, in terms of size parameters, outermost
            first; ``("n", "m")`` for ``double A[n][m]``; ``("n*m",)`` for a flat pointer
            annotated ``A[n*m]``.  The element count is the product.
        const: declared ``const`` (the candidate must not write it; checked anyway).
        extent_source: where the extents came from: ``"c99"`` (array declarator) or
            ``"annotation"`` (a ``// cudaperf:`` comment, see docs/c-problems.md).
    """

    name: str
    ctype: str
    extents: tuple[str, ...]
    const: bool = False
    extent_source: str = "c99"

    @property
    def dtype(self) -> str:
        return dtype_of(self.ctype)

    def shape(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """Concrete shape for the given sizes (each extent evaluated with C integer rules)."""
        return tuple(eval_int_expr(e, sizes) for e in self.extents)


Param = Union[ScalarParam, ArrayParam]


@dataclass(frozen=True)
class InitSpec:
    """An initialisation function of the problem file that fills arrays and scalars.

    Attributes:
        name: its C name.
        params: its parameter names, in order; each is a parameter of the ported function.
        scalar_outputs: the names among ``params`` that are scalars returned through a
            pointer (``double *alpha``); the ported function takes them by value.
    """

    name: str
    params: tuple[str, ...]
    scalar_outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CProblem:
    """A C function to port, as loaded by :func:`cudaperf_cli.problems.c.load_c_problem`.

    Attributes:
        path: the C file (never modified).
        function: name of the function to port.
        params: its parameters, in order.
        sizes: the main configuration, size parameter -> value (from ``--size`` or ``main``).
        sizes_source: ``"cli"``, ``"main"`` or ``"cli+main"``: where ``sizes`` came from.
        init: the init function used to fill data, or ``None`` for seeded random data.
        cpp_args: ``-I``/``-D`` flags given by the user, passed to every C compile.
        function_source: the function definition after preprocessing (text).
        is_static: declared ``static`` (the reference wrapper still reaches it).
        sources: more C files compiled and linked into the CPU reference library with the
            same ``cpp_args`` (``utilities/polybench.c``: PolyBench's init functions
            allocate through it), absolute paths; their ``main``, if any, is renamed out of
            the way like the problem file's.  They are not part of the CUDA candidates.
    """

    path: Path
    function: str
    params: tuple[Param, ...]
    sizes: dict[str, int]
    sizes_source: str = "main"
    init: InitSpec | None = None
    cpp_args: tuple[str, ...] = ()
    function_source: str = ""
    is_static: bool = False
    sources: tuple[Path, ...] = ()

    @property
    def arrays(self) -> tuple[ArrayParam, ...]:
        return tuple(p for p in self.params if isinstance(p, ArrayParam))

    @property
    def size_params(self) -> tuple[ScalarParam, ...]:
        return tuple(
            p for p in self.params if isinstance(p, ScalarParam) and p.kind is ScalarKind.SIZE
        )

    @property
    def cuda_symbol(self) -> str:
        """The entry point every candidate must define: ``extern "C" int <fn>_cuda(...)``."""
        return f"{self.function}_cuda"

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


# ---------------------------------------------------------------------------------------
# Integer expressions (extents, sizes)
# ---------------------------------------------------------------------------------------

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Mod: lambda a, b: int(_c_rem(a, b)),
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}


def _c_div(a: int, b: int) -> int:
    """C integer division: truncates toward zero."""
    if b == 0:
        raise ZeroDivisionError("division by zero in integer expression")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_rem(a: int, b: int) -> int:
    return a - _c_div(a, b) * b


def eval_int_expr(expr: str, env: Mapping[str, int]) -> int:
    """Evaluate a C integer expression such as ``n*m + 1`` or ``(N/2)``.

    Supports integer literals (with ``u``/``l`` suffixes), names looked up in ``env``,
    ``+ - * / % << >>``, unary minus and parentheses; ``/`` truncates toward zero as in C.

    Raises:
        ValueError: unknown name, unsupported syntax, or division by zero.
    """
    text = expr.strip()
    # Strip C integer suffixes from literals (100UL -> 100).
    import re

    text = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", text)
    text = text.replace("/", "//")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot evaluate '{expr}' as an integer expression") from None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ValueError(f"unknown name '{node.id}' in '{expr}'")
            return int(env[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.FloorDiv):
                try:
                    return _c_div(a, b)
                except ZeroDivisionError:
                    raise ValueError(f"division by zero in '{expr}'") from None
            fn = _BINOPS.get(type(node.op))
            if fn is None:
                raise ValueError(f"unsupported operator in '{expr}'")
            return int(fn(a, b))
        raise ValueError(f"cannot evaluate '{expr}' as an integer expression")

    return ev(tree)


# ---------------------------------------------------------------------------------------
# Child processes
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def source_checkout() -> str | None:
    """The cudaperf checkout this code comes from: the source tree itself (an editable
    install, or run from the tree: ``pyproject.toml`` beside the package), else the folder a
    ``pip install .`` was made from (pip's ``direct_url.json``), else None (an index)."""
    import json as _json
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    tree = Path(__file__).resolve().parents[1]
    if (tree / "pyproject.toml").is_file() and (tree / "cudaperf_cli").is_dir():
        return str(tree)
    try:
        text = metadata.distribution("cudaperf").read_text("direct_url.json")
        url = _json.loads(text or "{}").get("url", "")
    except (metadata.PackageNotFoundError, ValueError, OSError):
        return None
    if not url.startswith("file://"):
        return None
    return unquote(urlparse(url).path) or None


def install_hint(extra: str) -> str:
    """The pip command that installs cudaperf's optional ``extra`` (``llm``, ``train``,
    ``vllm``, ``port``) here: ``pip install -e '/path/to/checkout[train]'`` for an install
    from a checkout (cudaperf is not on PyPI: ``'cudaperf[train]'`` names nothing an index
    has), else ``pip install 'cudaperf[train]'``."""
    src = source_checkout()
    return f"pip install -e '{src}[{extra}]'" if src else f"pip install 'cudaperf[{extra}]'"


#: How to get torch: PyPI's default for Linux x86-64 is the CUDA build (several GB); on a
#: machine without a GPU PyTorch's CPU build is what the PyTorch path needs.
TORCH_INSTALL_HINT = ("pip install torch (without a GPU, the CPU build: pip install torch "
                      "--index-url https://download.pytorch.org/whl/cpu)")


def kill_process_group(proc: "subprocess.Popen[Any]") -> None:
    """SIGKILL the process group a child was started in (``start_new_session=True``), so
    that its own children (nvcc's cicc/ptxas, a hung kernel's process) die with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def terminate_process_groups(procs: "list[subprocess.Popen[Any]]", grace_s: float = 10.0) -> None:
    """Stop children that run cudaperf commands: SIGTERM to each one's process group, up to
    ``grace_s`` seconds for them to exit, then SIGKILL.  The grace lets a command kill its own
    children, which run in sessions of their own (the PyTorch loader, the evaluation
    worker, nvcc) and would outlive a SIGKILL of its group alone."""
    import time

    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: killed below
            pass
    for proc in procs:
        kill_process_group(proc)


# ---------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, enums, paths, tuples (recursively) into JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def param_to_json(p: Param) -> dict[str, Any]:
    """Serialise a parameter with a ``"role"`` tag (``size``/``coefficient``/``array``)."""
    if isinstance(p, ArrayParam):
        return {
            "role": "array",
            "name": p.name,
            "ctype": p.ctype,
            "dtype": p.dtype,
            "extents": list(p.extents),
            "const": p.const,
        }
    return {"role": p.kind.value, "name": p.name, "ctype": p.ctype, "dtype": p.dtype}


def param_from_json(d: Mapping[str, Any]) -> Param:
    """Inverse of :func:`param_to_json`."""
    if d["role"] == "array":
        return ArrayParam(d["name"], d["ctype"], tuple(d["extents"]), bool(d.get("const")))
    return ScalarParam(d["name"], d["ctype"], ScalarKind(d["role"]))


__all__ = [
    "file_tail", "last_line",
    "ArrayParam",
    "CProblem",
    "CTYPE_OF_DTYPE",
    "CudaperfError",
    "InitSpec",
    "Param",
    "ProblemError",
    "ScalarKind",
    "ScalarParam",
    "ToolchainError",
    "dtype_of",
    "eval_int_expr",
    "kill_process_group",
    "terminate_process_groups",
    "normalize_ctype",
    "param_from_json",
    "param_to_json",
    "to_jsonable",
    "write_text_atomic",
]


def check_checkpoint_folder(out: Path, force: bool) -> None:
    """Refuse, before any training, an output checkpoint folder ``out`` that is a file, that
    cannot be created (a parent is a file), or that is not empty without ``force``.

    Raises:
        CudaperfError: one of those (exit code 2).
    """
    if out.exists() and not out.is_dir():
        raise CudaperfError(f"the output {out} is a file; a checkpoint is a folder (-o DIR)")
    blocked = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise CudaperfError(f"cannot create -o {out}: {blocked} is a file")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise CudaperfError(f"{out} exists and is not empty",
                            hint="choose another -o, or --force to replace the checkpoint in it")


def write_text_atomic(path: Path, text: str, *, fsync: bool = True) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder (named by
    process and thread: several may write at once) and a rename: a reader, or the user's
    earlier file that ``--force`` replaces, never sees half of it; on failure the temporary
    file is removed and ``path`` is as it was.  ``fsync``: the data reaches the disk before
    the rename (a result file; not needed for a report rewritten as a run goes).

    Raises:
        OSError: the folder cannot be written (disk full, permissions).
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def file_tail(path: str | Path, limit: int = 4000) -> str:
    """The last ``limit`` characters of a (child process's stderr) file, decoded leniently;
    ``""`` when it cannot be read."""
    import os

    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - limit * 4, 0))
            data = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return data[-limit:] if len(data) > limit else data


def last_line(text: str, limit: int = 300) -> str:
    """The last non-blank line of ``text`` (stripped, at most ``limit`` characters)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""


@contextlib.contextmanager
def isolated_child(module: str, *, prefix: str, cpu_only: bool = False,
                   env: Mapping[str, str] | None = None) -> Iterator[tuple["subprocess.Popen[bytes]", str]]:
    """``python -m <module>`` in its own session (pipes on stdin/stdout, stderr to a temp
    file): yields ``(process, stderr path)``; on exit its process group is killed and the
    file removed.  ``cpu_only`` hides the GPUs (``CUDA_VISIBLE_DEVICES=""``); ``env``: more
    environment variables.  For children that run the user's code (the PyTorch problem
    probe, the fx trace)."""
    import sys
    import tempfile

    fd_err, err_path = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(fd_err)
    from cudaperf_cli.sandbox import CUDA_CHILD_LIMITS, python_child_env, scrubbed_env

    extra = dict(env or {})
    env = scrubbed_env()  # the user's module runs there, and generated code: no secrets
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra)
    python_child_env(env)
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        with open(err_path, "wb") as err_fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=err_fh, start_new_session=True, env=env,
                preexec_fn=CUDA_CHILD_LIMITS.preexec(),
            )
        try:
            yield proc, err_path
        finally:
            kill_process_group(proc)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    finally:
        try:
            os.unlink(err_path)
        except OSError:
            pass
