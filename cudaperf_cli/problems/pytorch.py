"""Loading PyTorch problems in the KernelBench convention.

A problem is a ``.py`` file that defines ``class Model(nn.Module)``, ``get_inputs()``
(the forward arguments, drawn at random) and ``get_init_inputs()`` (the constructor
arguments); module-level int constants such as ``batch_size = 16`` usually set the shapes.
See ``docs/pytorch-problems.md``.

The file is user code, so it runs only in a child process
(``python -m cudaperf_cli.problems.pytorch_probe``, its own session, killed with its
process group at the time limit).  This module never imports torch: it reads the file's
constants with :mod:`ast` and asks the child for everything else.

Public API::

    load_torch_problem(path, *, timeout_s=120, device="cpu", constants=None,
                       alt_shapes=True) -> TorchProblem            # raises ProblemError
    load_torch_problems(path_or_dir, *, timeout_s=120, device="cpu", alt_shapes=True,
                        constants=None) -> tuple[list[TorchProblem], list[TorchLoadError]]
    read_constants(source) -> dict[str, int]                       # no execution
    override_constants(source, overrides) -> ast.Module            # the file, constants replaced
"""

from __future__ import annotations

import ast
import json
import os
import re
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core import (TORCH_INSTALL_HINT, ProblemError, ToolchainError, file_tail, isolated_child, kill_process_group,
                   last_line)

__all__ = [
    "PROBE_MODULE",
    "TensorSpec",
    "TorchLoadError",
    "TorchProblem",
    "defines_model",
    "input_constant_names",
    "load_torch_problem",
    "load_torch_problems",
    "assignment_bindings",
    "override_constants",
    "read_constants",
]

PROBE_MODULE = "cudaperf_cli.problems.pytorch_probe"
#: Seconds allowed for the child to start and import torch (not counted in ``timeout_s``).
STARTUP_TIMEOUT_S = 180.0
#: Characters of the child's stderr kept for crash messages.
_STDERR_TAIL = 2000
#: The loader child is killed, with a message, above this share of the machine's memory.
LOADER_MEMORY_SHARE = 0.75
#: Seconds between two reads of the loader child's resident memory.
MEMORY_POLL_S = 0.5


def _rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid``, bytes (0 when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    """One forward input or output as the probe saw it.

    Attributes:
        kind: ``"tensor"``, or ``"int"``/``"float"``/``"bool"`` for a Python number input.
        shape: tensor shape (``()`` for numbers and 0-d tensors), element counts.
        dtype: torch dtype name without ``torch.`` (``"float32"``); ``"int64"``,
            ``"float64"`` or ``"bool"`` for Python numbers.
        value: the number itself for a Python number input, else ``None``.
    """

    kind: str
    shape: tuple[int, ...]
    dtype: str
    value: Any = None

    @property
    def numel(self) -> int:
        """Element count (1 for a number or a 0-d tensor)."""
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    def to_json(self) -> dict[str, Any]:
        """``{"kind", "shape": [int, ...], "dtype", "value"}``; inverse of :meth:`from_json`."""
        return {"kind": self.kind, "shape": list(self.shape), "dtype": self.dtype, "value": self.value}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TensorSpec":
        """Build from :meth:`to_json`'s dict (``KeyError`` when a field is missing)."""
        return cls(str(d["kind"]), tuple(int(x) for x in d["shape"]), str(d["dtype"]), d.get("value"))

    def __str__(self) -> str:
        if self.kind != "tensor":
            return f"{self.kind}={self.value!r}"
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class TorchProblem:
    """A PyTorch problem loaded by :func:`load_torch_problem` (the file is never modified).

    Attributes:
        path: the ``.py`` file (absolute).
        name: the file stem (``"softmax"``).
        source: the file's text.
        constants: module-level int constants that ``get_inputs`` or ``get_init_inputs``
            read (directly or through module-level helpers), name -> value as used for
            this load (after ``constants=`` overrides).
        input_constants: those of ``constants`` that ``get_inputs`` reads: the ones that
            set the input shapes and that :attr:`alt_shapes` changes.
        inputs: the forward arguments of the main configuration (seed 1), in order.
        init_inputs: ``get_init_inputs()`` as JSON values (numbers, strings, lists; other
            objects as their ``repr``).
        outputs: the forward outputs, in order (one for a single tensor).
        output_is_tuple: forward returns a tuple/list of tensors rather than one tensor.
        param_count: elements of all ``Model`` parameters.
        buffer_count: elements of all ``Model`` buffers (running statistics, ...).
        alt_shapes: a second set of values for ``input_constants`` that still runs and
            changes the input shapes (smaller, odd where possible), or ``None`` when
            there is none (no such constant, or every smaller set breaks the model).
        alt_inputs: the inputs under ``alt_shapes`` (``None`` with it).
        alt_outputs: the outputs under ``alt_shapes`` (``None`` with it).
        alt_note: why ``alt_shapes`` is ``None`` (empty otherwise).
        footprint: bytes at the main configuration, from fake tensors (no data):
            ``{"inputs_bytes", "outputs_bytes", "params_bytes", "buffers_bytes",
            "total_bytes"}``; the evaluation's memory plan is made from it.  A model that
            runs only on data (``.item()``, an operator without a fake-tensor kernel) and is
            too large for a data run here gets the probe run's footprint scaled by the ratio
            of the inputs' bytes (main / probe, the main inputs drawn as fake tensors), with
            ``"estimated": 1`` and a warning.
        outputs_at_main: ``outputs`` and ``footprint`` are the main configuration's (False
            when the model does not run without data and the main configuration was too
            large for a data run: they are then the probe constants').
        probe_constants: the constants at which the data checks ran (seeds differ, forward
            deterministic, finite, depends on the inputs), when the main configuration was too
            large for them (more than 32 MB or 2 GFLOP per forward); None: the main ones.
        degenerate: the outputs were the same for two input seeds (at the probe constants
            when those are set): the problem is evaluated as given, with a warning.
        modifies_inputs: forward modifies one of its inputs in place.
        alt_footprint: ``footprint`` at ``alt_shapes`` (None when unknown).
        device: where the probe ran the model (``"cpu"`` or ``"cuda"``).
        warnings: remarks that do not stop loading (``forward modifies its input 0 in
            place``).
        load_seconds: wall time of this file in the probe, seconds.
    """

    path: Path
    name: str
    source: str
    constants: dict[str, int]
    input_constants: tuple[str, ...]
    inputs: tuple[TensorSpec, ...]
    init_inputs: tuple[Any, ...]
    outputs: tuple[TensorSpec, ...]
    output_is_tuple: bool = False
    param_count: int = 0
    buffer_count: int = 0
    alt_shapes: dict[str, int] | None = None
    alt_inputs: tuple[TensorSpec, ...] | None = None
    alt_outputs: tuple[TensorSpec, ...] | None = None
    alt_note: str = ""
    footprint: dict[str, int] | None = None
    outputs_at_main: bool = True
    probe_constants: dict[str, int] | None = None
    degenerate: bool = False
    modifies_inputs: bool = False
    alt_footprint: dict[str, int] | None = None
    device: str = "cpu"
    warnings: tuple[str, ...] = ()
    load_seconds: float = 0.0

    @property
    def footprint_bytes(self) -> int | None:
        """Total bytes of :attr:`footprint` (None when unknown)."""
        return None if not self.footprint else int(self.footprint.get("total_bytes", 0))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (for the evaluation worker's job); inverse of :meth:`from_json`."""
        return {
            "path": str(self.path),
            "name": self.name,
            "source": self.source,
            "constants": dict(self.constants),
            "input_constants": list(self.input_constants),
            "inputs": [s.to_json() for s in self.inputs],
            "init_inputs": list(self.init_inputs),
            "outputs": [s.to_json() for s in self.outputs],
            "output_is_tuple": self.output_is_tuple,
            "param_count": self.param_count,
            "buffer_count": self.buffer_count,
            "alt_shapes": None if self.alt_shapes is None else dict(self.alt_shapes),
            "alt_inputs": None if self.alt_inputs is None else [s.to_json() for s in self.alt_inputs],
            "alt_outputs": None if self.alt_outputs is None else [s.to_json() for s in self.alt_outputs],
            "alt_note": self.alt_note,
            "footprint": None if self.footprint is None else dict(self.footprint),
            "outputs_at_main": self.outputs_at_main,
            "probe_constants": None if self.probe_constants is None else dict(self.probe_constants),
            "degenerate": self.degenerate,
            "modifies_inputs": self.modifies_inputs,
            "alt_footprint": None if self.alt_footprint is None else dict(self.alt_footprint),
            "device": self.device,
            "warnings": list(self.warnings),
            "load_seconds": self.load_seconds,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TorchProblem":
        """Build from :meth:`to_json`'s dict (``KeyError`` when a required field is missing)."""

        def specs(v: Any) -> tuple[TensorSpec, ...] | None:
            return None if v is None else tuple(TensorSpec.from_json(x) for x in v)

        return cls(
            path=Path(d["path"]),
            name=str(d["name"]),
            source=str(d.get("source", "")),
            constants={str(k): int(v) for k, v in d.get("constants", {}).items()},
            input_constants=tuple(d.get("input_constants", ())),
            inputs=specs(d["inputs"]) or (),
            init_inputs=tuple(d.get("init_inputs", ())),
            outputs=specs(d["outputs"]) or (),
            output_is_tuple=bool(d.get("output_is_tuple", False)),
            param_count=int(d.get("param_count", 0)),
            buffer_count=int(d.get("buffer_count", 0)),
            alt_shapes=None if d.get("alt_shapes") is None else {str(k): int(v) for k, v in d["alt_shapes"].items()},
            alt_inputs=specs(d.get("alt_inputs")),
            alt_outputs=specs(d.get("alt_outputs")),
            alt_note=str(d.get("alt_note", "")),
            footprint=_int_dict(d.get("footprint")),
            outputs_at_main=bool(d.get("outputs_at_main", True)),
            probe_constants=_int_dict(d.get("probe_constants")),
            degenerate=bool(d.get("degenerate", False)),
            modifies_inputs=bool(d.get("modifies_inputs", False)),
            alt_footprint=_int_dict(d.get("alt_footprint")),
            device=str(d.get("device", "cpu")),
            warnings=tuple(d.get("warnings", ())),
            load_seconds=float(d.get("load_seconds", 0.0)),
        )

    def describe(self) -> str:
        """One line: ``softmax: float32[4096, 4096] -> float32[4096, 4096] (0 parameters)``."""
        ins = ", ".join(str(s) for s in self.inputs)
        outs = ", ".join(str(s) for s in self.outputs)
        return f"{self.name}: {ins} -> {outs} ({self.param_count} parameters)"


@dataclass(frozen=True)
class TorchLoadError:
    """A file of a folder that could not be loaded (see :func:`load_torch_problems`).

    Attributes:
        path: the file.
        message: one line, starting with the file name.
        hint: an optional second line.
    """

    path: Path
    message: str
    hint: str | None = None

    def to_exception(self) -> ProblemError:
        """The same error as :func:`load_torch_problem` raises for this file."""
        return ProblemError(self.message, self.hint)


# ---------------------------------------------------------------------------------------
# Static reading (no execution)
# ---------------------------------------------------------------------------------------


def _const_int(node: ast.AST) -> int | None:
    """Value of an int literal or an arithmetic expression of int literals, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _const_int(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp):
        a, b = _const_int(node.left), _const_int(node.right)
        if a is None or b is None:
            return None
        op = node.op
        try:
            if isinstance(op, ast.Add):
                return a + b
            if isinstance(op, ast.Sub):
                return a - b
            if isinstance(op, ast.Mult):
                return a * b
            if isinstance(op, ast.FloorDiv):
                return a // b
            if isinstance(op, ast.Mod):
                return a % b
            if isinstance(op, ast.Pow) and 0 <= b <= 64:
                return a**b
            if isinstance(op, ast.LShift) and 0 <= b <= 64:
                return a << b
            if isinstance(op, ast.RShift) and b >= 0:
                return a >> b
        except (ZeroDivisionError, OverflowError, ValueError):
            return None
    return None


def _parse(source: str, filename: str) -> ast.Module:
    try:
        return ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise ProblemError(f"{filename}: syntax error at line {exc.lineno}: {exc.msg}") from None


def assignment_bindings(node: ast.stmt) -> list[tuple[str, ast.expr | None]]:
    """The names a module-level statement binds and the expression each gets: ``a = b = v``
    -> ``[(a, v), (b, v)]``; ``a, b = 1, 2`` (a tuple or list of names and one of values of
    the same length) -> ``[(a, 1), (b, 2)]``; ``NAME: T = v`` -> ``[(NAME, v)]``; a binding
    whose value cannot be told apart (``a, b = f()``, ``a += 1``, ``*a, b = ...``) has
    None.  Statements that bind no module-level name this way give ``[]``."""
    out: list[tuple[str, ast.expr | None]] = []

    def bind(target: ast.expr, value: ast.expr | None) -> None:
        if isinstance(target, ast.Name):
            out.append((target.id, value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            if (isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts)
                    and not any(isinstance(e, ast.Starred) for e in (*elts, *value.elts))):
                for t, v in zip(elts, value.elts):
                    bind(t, v)
            else:
                for t in elts:
                    bind(t.value if isinstance(t, ast.Starred) else t, None)

    if isinstance(node, ast.Assign):
        for t in node.targets:
            bind(t, node.value)
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        bind(node.target, node.value)
    elif isinstance(node, ast.AugAssign):
        bind(node.target, None)
    return out


def _bound_elsewhere(tree: ast.Module) -> set[str]:
    """Module-level names bound by anything but a plain top-level assignment: inside
    ``if``/``for``/``while``/``with``/``try``/``match`` blocks, by ``import``, ``def``,
    ``class``, ``del``, a walrus anywhere at module level (comprehensions included), a
    ``for`` or ``with ... as`` target, or a function's ``global`` declaration.  Their value
    depends on what runs, so none of them is a constant."""
    out: set[str] = set()

    def targets(node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                out.add(n.id)

    def scan(stmts: list[ast.stmt], top: bool) -> None:
        for node in stmts:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
                for n in ast.walk(node):
                    if isinstance(n, (ast.Global, ast.Nonlocal)):
                        out.update(n.names)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in node.names)
                continue
            if isinstance(node, ast.Delete) or (not top and isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))):
                targets(node)
                continue
            if isinstance(node, (ast.For, ast.AsyncFor)):
                targets(node.target)
            if isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
            if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                for h in node.handlers:  # type: ignore[attr-defined]
                    if h.name:
                        out.add(h.name)
            for n in ast.walk(node):  # walrus at module level, in any expression
                if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
                    out.add(n.target.id)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    scan(inner, False)
            for h in getattr(node, "handlers", []) or []:
                scan(h.body, False)
            for case in getattr(node, "cases", []) or []:
                targets(case.pattern)
                scan(case.body, False)

    scan(tree.body, True)
    return out


def read_constants(source: str, filename: str = "<problem>") -> dict[str, int]:
    """Module-level int constants of a problem file, read with :mod:`ast` (never run).

    A constant is a top-level ``NAME = <int>`` (or an expression of int literals such as
    ``16 * 1024``, ``NAME: int = ...``, ``a = b = 16``, or an element of ``h, w = 32, 32``);
    the last binding wins, as when the file runs (KernelBench's level-2 files set
    ``height = width = 2048`` and then ``height, width = 32, 32``).  Not constants: bools,
    values computed from other names, and names also bound any other way at module level
    (``n += 1``, inside an ``if`` or ``for``, by an import, a walrus, a ``global``
    declaration: :func:`_bound_elsewhere`), whose value depends on what runs.

    Raises:
        ProblemError: the source has a syntax error (message names the line).
    """
    tree = _parse(source, filename)
    out: dict[str, int] = {}
    for node in tree.body:
        for name, value in assignment_bindings(node):
            v = None if value is None else _const_int(value)
            if v is None:
                out.pop(name, None)
            else:
                out[name] = v
    for name in _bound_elsewhere(tree):
        out.pop(name, None)
    return out


def override_constants(source: str, overrides: Mapping[str, int], filename: str = "<problem>") -> ast.Module:
    """The problem's module with the overridden constants given their new values where they
    are bound: after every top-level statement that binds one (``batch_size = 16``,
    ``a = b = 16``, ``h, w = 32, 32``), an assignment ``name = <new value>`` follows, so the
    statement itself still runs as written (its other targets, its calls) and constants
    derived later follow the new value.

    Raises:
        SyntaxError: the source does not parse.
        ValueError: an override names no top-level binding of the file.
    """
    tree = ast.parse(source, filename)
    seen: set[str] = set()
    body: list[ast.stmt] = []
    for node in tree.body:
        body.append(node)
        if isinstance(node, ast.AugAssign):
            continue
        names = [n for n, _ in assignment_bindings(node) if n in overrides]
        for name in dict.fromkeys(names):
            seen.add(name)
            body.append(ast.copy_location(ast.Assign(
                targets=[ast.Name(id=name, ctx=ast.Store())],
                value=ast.Constant(int(overrides[name]))), node))
    missing = sorted(set(overrides) - seen)
    if missing:
        raise ValueError(f"no module-level assignment of {', '.join(missing)} in {filename}")
    tree.body = body
    return ast.fix_missing_locations(tree)


def _top_functions(tree: ast.Module) -> dict[str, ast.AST]:
    return {
        n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _names_read(func: ast.AST, funcs: Mapping[str, ast.AST], seen: set[str]) -> set[str]:
    """Names loaded in ``func``, following calls of other module-level functions."""
    names: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
            if node.id in funcs and node.id not in seen:
                seen.add(node.id)
                names |= _names_read(funcs[node.id], funcs, seen)
    return names


def input_constant_names(source: str, filename: str = "<problem>") -> tuple[list[str], list[str]]:
    """``(read by get_inputs, read by get_inputs or get_init_inputs)``: the module-level int
    constants (:func:`read_constants`) each reads, in file order.

    Raises:
        ProblemError: syntax error.
    """
    tree = _parse(source, filename)
    consts = read_constants(source, filename)
    funcs = _top_functions(tree)
    by_inputs: set[str] = set()
    by_init: set[str] = set()
    if "get_inputs" in funcs:
        by_inputs = _names_read(funcs["get_inputs"], funcs, {"get_inputs"})
    if "get_init_inputs" in funcs:
        by_init = _names_read(funcs["get_init_inputs"], funcs, {"get_init_inputs"})
    order = list(consts)
    return [n for n in order if n in by_inputs], [n for n in order if n in by_inputs | by_init]


def defines_model(source: str) -> bool:
    """True when the source binds ``Model`` at module level (class, assignment or import);
    a source that does not parse counts as True (so its error gets reported)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "Model" for t in node.targets
        ):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name.split(".")[0]) == "Model" for a in node.names
        ):
            return True
    return False


# ---------------------------------------------------------------------------------------
# The child process
# ---------------------------------------------------------------------------------------

_PHASE_WORDS = {
    None: "while starting",
    "import": "while importing the file",
    "meta.init": "in get_init_inputs() / Model(...) on the meta device (shapes without data)",
    "meta.inputs": "in get_inputs() on the meta device (shapes without data)",
    "meta.forward": "in forward on the meta device (shapes without data)",
    "init": "in get_init_inputs() / Model(...)",
    "inputs": "in get_inputs()",
    "forward": "in forward",
    "alt": "while trying smaller shapes",
}


@dataclass
class _FileJob:
    index: int
    path: Path
    source: str
    constants: dict[str, int]
    input_constants: list[str]
    all_constants: list[str]
    result: dict[str, Any] | None = None
    error: tuple[str, str | None] | None = None
    seconds: float = 0.0


def _run_probe_once(
    jobs: Sequence[_FileJob], *, device: str, timeout_s: float, alt_shapes: bool
) -> None:
    """Run one child over ``jobs`` (in order), filling ``result``/``error`` of each file it
    reaches.  A file past ``timeout_s`` or one that kills the child gets an error; the
    caller restarts a child for the files left."""
    payload = {
        "device": device,
        "files": [
            {
                "index": j.index,
                "path": str(j.path),
                "constants": j.constants,
                "input_constants": j.input_constants,
                "all_constants": j.all_constants,
                "alt_shapes": alt_shapes,
            }
            for j in jobs
        ],
    }
    by_index = {j.index: j for j in jobs}
    with isolated_child(PROBE_MODULE, prefix="cudaperf-probe-", cpu_only=device == "cpu") as (proc, err_path):
        _talk(proc, payload, by_index, timeout_s=timeout_s, err_path=err_path)


def _talk(
    proc: "subprocess.Popen[bytes]",
    payload: Mapping[str, Any],
    by_index: Mapping[int, _FileJob],
    *,
    timeout_s: float,
    err_path: str,
) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(payload).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    fd = proc.stdout.fileno()
    buf = b""
    try:
        total: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = None
    limit = None if total is None else int(LOADER_MEMORY_SHARE * total)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    ready = False
    current: _FileJob | None = None
    started = 0.0
    phase: str | None = None
    eof = False
    while not eof:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            kill_process_group(proc)
            if current is None:
                why = last_line(file_tail(err_path, _STDERR_TAIL))
                raise ToolchainError(
                    f"the PyTorch problem probe did not start within {STARTUP_TIMEOUT_S:.0f} s"
                    + (f": {why}" if why else "")
                )
            current.seconds = time.monotonic() - started
            current.error = (
                f"timed out after {current.seconds:.1f} s (limit {timeout_s:g} s) "
                f"{_PHASE_WORDS.get(phase, 'in ' + str(phase))}",
                "a problem must load in seconds: shrink its module-level constants or raise the time limit",
            )
            return
        events = sel.select(min(remaining, MEMORY_POLL_S))
        rss = _rss_bytes(proc.pid)
        if limit is not None and rss > limit:
            kill_process_group(proc)
            where = _PHASE_WORDS.get(phase, "in " + str(phase))
            msg = (f"the loader passed {rss / 1e9:.1f} GB of host memory (limit {limit / 1e9:.1f} GB, "
                   f"3/4 of this machine) {where}")
            if current is None:
                raise ToolchainError(msg)
            current.seconds = time.monotonic() - started
            current.error = (msg, "the problem is too large to run on this machine's CPU; shrink its constants")
            return
        if not events:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            eof = True
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            ev = doc.get("event")
            if ev == "fatal":
                kill_process_group(proc)
                raise ToolchainError(
                    f"cannot load PyTorch problems: {doc.get('error')}",
                    f"install PyTorch in this Python environment: {TORCH_INSTALL_HINT}",
                )
            if ev == "ready":
                ready = True
                deadline = time.monotonic() + STARTUP_TIMEOUT_S
            elif ev == "start":
                current = by_index.get(int(doc["index"]))
                phase = None
                started = time.monotonic()
                deadline = started + timeout_s
            elif ev == "phase":
                phase = doc.get("phase")
            elif ev == "result":
                job = by_index.get(int(doc["index"]))
                if job is None:
                    continue
                job.seconds = time.monotonic() - started
                if doc.get("ok"):
                    job.result = doc.get("problem") or {}
                else:
                    job.error = (str(doc.get("error")), doc.get("hint"))
                current = None
                deadline = time.monotonic() + STARTUP_TIMEOUT_S
                if all(j.result is not None or j.error is not None for j in by_index.values()):
                    # Every file answered: do not wait for the end of the pipe, which a
                    # process the problem forked may hold open (its group is killed).
                    eof = True
                    break
    # End of output: the child exited (normally after the last file, or it died).
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        kill_process_group(proc)
        rc = proc.wait()
    tail = file_tail(err_path, _STDERR_TAIL)
    if not ready:
        last = last_line(tail)
        raise ToolchainError(
            f"the PyTorch problem probe exited with status {rc} before importing torch"
            + (f": {last}" if last else ""),
            "check that PyTorch imports in this Python: python -c 'import torch'",
        )
    if current is not None and current.result is None and current.error is None:
        how = f"exited with status {rc}"
        if rc is not None and rc < 0:
            try:
                how = f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"was killed by signal {-rc}"
        last = last_line(tail)
        current.seconds = time.monotonic() - started
        current.error = (
            f"the loader process {how} {_PHASE_WORDS.get(phase, 'in ' + str(phase))}"
            + (f": {last}" if last else ""),
            None,
        )


def _run_probe(jobs: Sequence[_FileJob], *, device: str, timeout_s: float, alt_shapes: bool) -> None:
    """Run children until every job has a result or an error (one child per batch; a file
    that hangs or crashes costs a restart for the files after it)."""
    todo = [j for j in jobs if j.result is None and j.error is None]
    while todo:
        _run_probe_once(todo, device=device, timeout_s=timeout_s, alt_shapes=alt_shapes)
        left = [j for j in todo if j.result is None and j.error is None]
        if len(left) == len(todo):  # no progress: the child died between files
            for j in left:
                j.error = ("the loader process stopped before reaching this file", None)
            return
        todo = left


def _problem_from(job: _FileJob, device: str) -> TorchProblem:
    r = job.result or {}

    def specs(v: Any) -> tuple[TensorSpec, ...] | None:
        return None if v is None else tuple(TensorSpec.from_json(x) for x in v)

    used = {k: int(v) for k, v in r.get("constants_used", {}).items()}
    constants = {n: used.get(n, job.constants[n]) for n in job.all_constants}
    return TorchProblem(
        path=job.path,
        name=job.path.stem,
        source=job.source,
        constants=constants,
        input_constants=tuple(job.input_constants),
        inputs=specs(r.get("inputs")) or (),
        init_inputs=tuple(r.get("init_inputs", ())),
        outputs=specs(r.get("outputs")) or (),
        output_is_tuple=bool(r.get("output_is_tuple", False)),
        param_count=int(r.get("param_count", 0)),
        buffer_count=int(r.get("buffer_count", 0)),
        alt_shapes=None if r.get("alt_shapes") is None else {str(k): int(v) for k, v in r["alt_shapes"].items()},
        alt_inputs=specs(r.get("alt_inputs")),
        alt_outputs=specs(r.get("alt_outputs")),
        alt_note=str(r.get("alt_note", "")),
        footprint=_int_dict(r.get("footprint")),
        outputs_at_main=bool(r.get("outputs_at_main", True)),
        probe_constants=_int_dict(r.get("probe_constants")),
        degenerate=bool(r.get("degenerate", False)),
        modifies_inputs=bool(r.get("modifies_inputs", False)),
        alt_footprint=_int_dict(r.get("alt_footprint")),
        device=device,
        warnings=tuple(r.get("warnings", ())),
        load_seconds=round(job.seconds, 3),
    )


def _int_dict(v: Any) -> dict[str, int] | None:
    return None if v is None else {str(k): int(x) for k, x in dict(v).items()}


def _prepare(path: Path, index: int, constants: Mapping[str, int] | None) -> _FileJob:
    """Read and statically check one file (raises ProblemError)."""
    name = path.name
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ProblemError(f"{path}: is a directory (use load_torch_problems)") from None
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError(f"{name}: not UTF-8 text") from None
    consts = read_constants(source, name)
    by_inputs, used = input_constant_names(source, name)
    overrides = dict(constants or {})
    for k, v in overrides.items():
        if k not in consts:
            known = ", ".join(consts) or "none"
            raise ProblemError(
                f"{name}: unknown constant '{k}' (module-level int constants: {known})"
            )
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ProblemError(f"{name}: constant {k}={v!r} must be an int >= 1")
    values = {**consts, **overrides}
    # Constants overridden but not read by the input functions are still applied.
    all_constants = list(dict.fromkeys([*used, *overrides]))
    return _FileJob(
        index=index,
        path=path.resolve(),
        source=source,
        constants={k: values[k] for k in all_constants},
        input_constants=by_inputs,
        all_constants=all_constants,
    )


def _check_device(device: str) -> str:
    if device not in ("cpu", "cuda"):
        raise ProblemError(f"unknown device '{device}': use 'cpu' or 'cuda'")
    return device


def load_torch_problem(
    path: str | os.PathLike[str],
    *,
    timeout_s: float = 120.0,
    device: str = "cpu",
    constants: Mapping[str, int] | None = None,
    alt_shapes: bool = True,
) -> TorchProblem:
    """Load one KernelBench-format problem file, running it in a child process.

    Args:
        path: the ``.py`` file.
        timeout_s: wall-clock limit for this file in the child (import, model, three
            forward runs, the alternative-shape runs), seconds; the child's start-up
            (importing torch) is not counted.
        device: ``"cpu"`` (default; the child sees no GPU) or ``"cuda"``.
        constants: overrides of module-level int constants (``{"batch_size": 4}``),
            applied before ``get_init_inputs()``/``get_inputs()`` run; each must be a
            module-level int constant of the file and >= 1.
        alt_shapes: look for :attr:`TorchProblem.alt_shapes` (a few more runs).

    Returns:
        The :class:`TorchProblem`.

    Raises:
        ProblemError: the file is missing or unreadable, has a syntax error, lacks
            ``Model``/``get_inputs``/``get_init_inputs``, raises (the message names the
            line of the file), returns non-tensor outputs, NaN/inf, outputs that do not
            depend on the inputs, is not deterministic, or runs past ``timeout_s``.
        ToolchainError: PyTorch cannot be imported by the child, or ``device="cuda"``
            without a CUDA device.
    """
    _check_device(device)
    p = Path(path)
    job = _prepare(p, 0, constants)
    _run_probe([job], device=device, timeout_s=timeout_s, alt_shapes=alt_shapes)
    if job.error is not None:
        msg, hint = job.error
        raise ProblemError(f"{p.name}: {msg}", hint)
    return _problem_from(job, device)


def _natural_key(p: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", p.name)]


def load_torch_problems(
    path_or_dir: str | os.PathLike[str],
    *,
    timeout_s: float = 120.0,
    device: str = "cpu",
    alt_shapes: bool = True,
    constants: Mapping[str, Mapping[str, int]] | None = None,
) -> tuple[list[TorchProblem], list[TorchLoadError]]:
    """Load a problem file, or every ``*.py`` of a folder that defines ``Model``.

    Files of the folder (not its subfolders) are taken in natural order (``2_x.py`` before
    ``10_x.py``); files that do not bind ``Model`` at module level (helpers, candidates
    with only ``ModelNew``) are skipped; a file that does not parse is reported.  One
    child process serves the whole folder; a file that hangs or crashes it gets an error
    and a new child goes on with the next file.

    Args:
        path_or_dir: a ``.py`` file or a folder.
        timeout_s, device, alt_shapes: as in :func:`load_torch_problem` (per file).
        constants: per-file constant overrides, keyed by file stem
            (``{"softmax": {"batch_size": 8, "dim": 64}}``); an unknown constant is that
            file's error.

    Returns:
        ``(problems, errors)``: the problems that loaded, in order, and one
        :class:`TorchLoadError` per file that did not (its message is one line).

    Raises:
        ProblemError: the path does not exist, or the folder holds no ``*.py`` file
            defining ``Model``.
        ToolchainError: PyTorch cannot be imported by the child.
    """
    _check_device(device)
    root = Path(path_or_dir)
    if not root.exists():
        raise ProblemError(f"{root}: no such file or folder")
    if root.is_file():
        files = [root]
    else:
        files = []
        for f in sorted(root.glob("*.py"), key=_natural_key):
            try:
                text = f.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            if defines_model(text):
                files.append(f)
        if not files:
            raise ProblemError(
                f"{root}: no *.py file defining class Model",
                "a problem file defines class Model(nn.Module), get_inputs() and get_init_inputs()",
            )
    errors: list[TorchLoadError] = []
    jobs: list[_FileJob] = []
    for i, f in enumerate(files):
        try:
            jobs.append(_prepare(f, i, (constants or {}).get(f.stem)))
        except ProblemError as exc:
            errors.append(TorchLoadError(f, str(exc), exc.hint))
    _run_probe(jobs, device=device, timeout_s=timeout_s, alt_shapes=alt_shapes)
    problems: list[TorchProblem] = []
    for job in jobs:
        if job.error is not None:
            msg, hint = job.error
            errors.append(TorchLoadError(job.path, f"{job.path.name}: {msg}", hint))
        else:
            problems.append(_problem_from(job, device))
    order = {f.resolve(): i for i, f in enumerate(files)}
    errors.sort(key=lambda e: order.get(e.path.resolve(), 0))
    return problems, errors
