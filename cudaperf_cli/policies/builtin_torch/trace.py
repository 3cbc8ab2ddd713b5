"""Trace a PyTorch problem's ``Model`` into a JSON graph, in a child process.

The problem file is user code, so it never runs in the caller's process: the parent
(:func:`trace_problem`) starts ``python -m cudaperf_cli.policies.builtin_torch.trace`` in its
own session, writes one JSON job on stdin and reads JSON lines on stdout; past the time
limit the child's process group is killed.  The parent never imports torch.

Job (stdin, one JSON document)::

    {"path": "/abs/problem.py",
     "constant_sets": [{"batch_size": 8, "dim": 64}, ...],   # tried in order, first that runs
     "timeout_s": 120}

Answer (stdout, one JSON object per line)::

    {"event": "ready", "torch": "2.13.0"}
    {"event": "result", "ok": true, "graph": {...}}           # Graph.to_json()
    {"event": "result", "ok": false, "error": "one line", "hint": str | null,
     "reason": "untraceable" | "problem"}

In the child: import the file (``pytorch_probe.import_problem_module``), set the module-level
constants (``apply_constants``), build ``Model(*get_init_inputs())`` under
``torch.manual_seed(0)``, ``torch.fx.symbolic_trace`` it, and run the traced module on the
CPU on ``get_inputs()`` (seed 1) with :class:`torch.fx.passes.shape_prop.ShapeProp`,
recording every node's result (tensor shape/dtype, or the Python value of shape
arithmetic).  Leaf ``nn`` modules (``nn.Linear``, ``nn.LayerNorm``, ...) are expanded into
their functional form with their parameters named (``{"attr": "fc1.weight"}``).

Graph node JSON::

    {"name": "add", "op": "call", "target": "add", "source": "operator.add",
     "args": [{"node": "mul"}, {"node": "bias"}], "kwargs": {}, "normalized": false,
     "kind": "tensor", "shape": [8, 64], "dtype": "float32", "contiguous": true}

``op`` is ``"input"`` (a forward argument; ``index`` says which), ``"attr"`` (a parameter or
buffer; ``target`` is its dotted name, ``attr_kind`` ``parameter``/``buffer``/``tensor``) or
``"call"`` (``target`` a canonical name: ``relu``, ``add``, ``linear``, ``softmax``,
``layer_norm``, ``getattr``, ``getitem``...; unknown callables are ``unknown:<name>`` and
unknown leaf modules ``module:<ClassName>``).  ``args``/``kwargs`` hold JSON values, node
references ``{"node": name}``, parameter references ``{"attr": "ln.weight"}``, and
``{"dtype": "float32"}``, ``{"slice": [a, b, c]}``, ``{"ellipsis": true}``,
``{"float": "inf"}``, ``{"repr": "..."}`` for other objects, and ``{"modattr": "conv.groups",
"value": 4}`` for a leaf module's structural int, tuple or bool (``groups``, ``num_groups``,
a pooling layer's ``kernel_size``, ``stride``, ``padding``...): ``__init__``
may set it from a size constant, which the trace may have shrunk, so the generated code
reads the module's attribute instead of the traced value.  When ``normalized`` is true the
arguments were bound to the operator's parameter names (all in ``kwargs``).  ``kind`` is the
result's kind: ``tensor`` (with ``shape``, ``dtype``, ``contiguous``), ``number`` (``value``),
``shape`` (a ``torch.Size``/tuple of ints in ``value``), ``tensors`` (a tuple of tensors:
``shapes``, ``dtypes``), ``none`` or ``other`` (``value`` is its repr).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudaperf_cli.core import (TORCH_INSTALL_HINT, ToolchainError, file_tail, isolated_child, kill_process_group,
                               last_line)
from cudaperf_cli.policies.base import PolicyRefusal

if TYPE_CHECKING:  # pragma: no cover
    from cudaperf_cli.problems.pytorch import TorchProblem

__all__ = [
    "TRACE_MODULE",
    "Graph",
    "GraphNode",
    "TraceChild",
    "trace_constant_sets",
    "trace_problem",
]

TRACE_MODULE = "cudaperf_cli.policies.builtin_torch.trace"
#: ``1``: the child was started ahead (:class:`TraceChild`): it imports torch and TorchDynamo
#: (which FakeTensorMode needs for large problems) before it reads its job.
WARM_ENV = "CUDAPERF_TRACE_WARM"
#: Seconds allowed for the child to start and import torch (not counted in ``timeout_s``).
STARTUP_TIMEOUT_S = 180.0
#: Input elements above which tracing first tries shrunken constants.
SHRINK_ABOVE = 1 << 16
_STDERR_TAIL = 2000


# ---------------------------------------------------------------------------------------
# The graph (no torch)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphNode:
    """One node of a traced forward (see the module docstring for the JSON form).

    Attributes:
        name: unique name (torch.fx's node name, a Python identifier).
        op: ``"input"``, ``"attr"`` or ``"call"``.
        target: canonical operator name for ``call`` (``"relu"``, ``"linear"``...), the
            argument name for ``input``, the dotted attribute name for ``attr``.
        args, kwargs: encoded arguments (``{"node": name}``, ``{"attr": "fc1.weight"}``,
            JSON numbers, lists...).
        normalized: ``kwargs`` holds every argument by parameter name (``args`` empty).
        source: where the call came from (``"torch.relu"``, ``"Tensor.pow"``,
            ``"nn.LayerNorm norm"``...), for messages.
        kind: the result's kind: ``tensor``, ``number``, ``shape``, ``tensors``, ``none``,
            ``other``.
        shape: tensor shape at the traced sizes (``None`` unless ``kind == "tensor"``).
        dtype: tensor dtype name (``"float32"``).
        contiguous: the traced tensor was contiguous.
        value: the Python value for ``number``/``shape`` (a list for shapes), or a repr.
        index: position among forward's arguments (``input`` nodes).
        attr_kind: ``parameter``, ``buffer``, ``tensor`` (a plain tensor attribute) or
            ``other`` (``attr`` nodes).
        shapes, dtypes: per element for ``kind == "tensors"``.
    """

    name: str
    op: str
    target: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    normalized: bool = False
    source: str = ""
    kind: str = "tensor"
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    contiguous: bool = True
    value: Any = None
    index: int | None = None
    attr_kind: str | None = None
    shapes: tuple[tuple[int, ...], ...] | None = None
    dtypes: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "op": self.op,
            "target": self.target,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "normalized": self.normalized,
            "source": self.source,
            "kind": self.kind,
        }
        if self.shape is not None:
            d["shape"] = list(self.shape)
            d["dtype"] = self.dtype
            d["contiguous"] = self.contiguous
        if self.value is not None:
            d["value"] = self.value
        if self.index is not None:
            d["index"] = self.index
        if self.attr_kind is not None:
            d["attr_kind"] = self.attr_kind
        if self.shapes is not None:
            d["shapes"] = [list(s) for s in self.shapes]
            d["dtypes"] = list(self.dtypes or ())
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GraphNode:
        """Inverse of :meth:`to_json` (``KeyError`` when ``name``/``op``/``target`` is missing)."""
        shape = d.get("shape")
        shapes = d.get("shapes")
        return cls(
            name=str(d["name"]),
            op=str(d["op"]),
            target=str(d["target"]),
            args=tuple(d.get("args", ())),
            kwargs=dict(d.get("kwargs", {})),
            normalized=bool(d.get("normalized", False)),
            source=str(d.get("source", "")),
            kind=str(d.get("kind", "tensor")),
            shape=None if shape is None else tuple(int(x) for x in shape),
            dtype=d.get("dtype"),
            contiguous=bool(d.get("contiguous", True)),
            value=d.get("value"),
            index=d.get("index"),
            attr_kind=d.get("attr_kind"),
            shapes=None if shapes is None else tuple(tuple(int(x) for x in s) for s in shapes),
            dtypes=None if d.get("dtypes") is None else tuple(d["dtypes"]),
        )


@dataclass(frozen=True)
class Graph:
    """A traced forward: nodes in execution order, outputs, parameters.

    Attributes:
        nodes: every node, inputs first, in the order forward runs them.
        outputs: forward's return value encoded (``{"node": name}`` or a list of them).
        params: dotted name -> ``{"shape": [...], "dtype": "float32", "kind":
            "parameter" | "buffer"}`` for every parameter and buffer of ``Model``.
        forward_args: forward's argument names, in order.
        constants: the module-level constants the trace ran with (may be smaller than
            the problem's: shapes here are for structure only, never for code).
        model_class: ``Model``'s class name (always ``"Model"``).
        torch_version: of the child that traced it.
    """

    nodes: tuple[GraphNode, ...]
    outputs: Any
    params: Mapping[str, Mapping[str, Any]]
    forward_args: tuple[str, ...]
    constants: Mapping[str, int] = field(default_factory=dict)
    model_class: str = "Model"
    torch_version: str = ""

    def node(self, name: str) -> GraphNode:
        """The node called ``name`` (``KeyError`` when there is none)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def by_name(self) -> dict[str, GraphNode]:
        return {n.name: n for n in self.nodes}

    def calls(self) -> list[GraphNode]:
        """The ``call`` nodes, in order."""
        return [n for n in self.nodes if n.op == "call"]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": [n.to_json() for n in self.nodes],
            "outputs": self.outputs,
            "params": {k: dict(v) for k, v in self.params.items()},
            "forward_args": list(self.forward_args),
            "constants": dict(self.constants),
            "model_class": self.model_class,
            "torch_version": self.torch_version,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Graph:
        """Inverse of :meth:`to_json` (``KeyError`` when ``nodes`` or ``outputs`` is missing)."""
        return cls(
            nodes=tuple(GraphNode.from_json(n) for n in d["nodes"]),
            outputs=d["outputs"],
            params={str(k): dict(v) for k, v in d.get("params", {}).items()},
            forward_args=tuple(d.get("forward_args", ())),
            constants={str(k): int(v) for k, v in d.get("constants", {}).items()},
            model_class=str(d.get("model_class", "Model")),
            torch_version=str(d.get("torch_version", "")),
        )


# ---------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------


def trace_constant_sets(problem: TorchProblem) -> list[dict[str, int]]:
    """Constant sets to trace with, in order (the child takes the first that runs).

    Shapes only matter for structure (ranks, which dims broadcast), so large problems are
    traced at shrunken sizes: when the inputs hold more than :data:`SHRINK_ABOVE` elements,
    every input constant ``v`` becomes ``max(min(v, 4), v >> k)`` for ``k`` = 6, 4, 2 (then
    the same with one constant kept, for sizes that must stay multiples of another), and
    finally the problem's own constants.
    """
    base = {k: int(v) for k, v in problem.constants.items()}
    total = sum(s.numel for s in problem.inputs if s.kind == "tensor")
    names = [n for n in problem.input_constants if n in base]
    sets: list[dict[str, int]] = []
    probe = getattr(problem, "probe_constants", None)
    if probe:  # the loader ran the model on data at these: they run
        sets.append({**base, **{k: int(v) for k, v in probe.items()}})
    if total > SHRINK_ABOVE and names:
        for k in (6, 4, 2):
            shrunk = {n: max(min(base[n], 4), base[n] >> k) for n in names}
            sets.append({**base, **shrunk})
        for k in (4, 2):
            for keep in names:
                shrunk = {n: max(min(base[n], 4), base[n] >> k) for n in names if n != keep}
                sets.append({**base, **shrunk})
    sets.append(dict(base))
    out: list[dict[str, int]] = []
    for s in sets:
        if s not in out:
            out.append(s)
    return out


class TraceChild:
    """A trace child started ahead of its job (``BuiltinTorchPolicy.warm_up``): it imports
    torch and TorchDynamo (about 4-6 s and 5 s on the H200 machine) while the problem
    loads, then waits for the job on stdin.  Hand it to :func:`trace_problem` (which closes
    it) or :meth:`close` it; a parent that exits closes its stdin and the child exits too."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.proc, self.err_path = self._stack.enter_context(
            isolated_child(TRACE_MODULE, prefix="cudaperf-trace-", cpu_only=True, env={WARM_ENV: "1"}))

    def close(self) -> None:
        """Kill the child's process group (idempotent)."""
        self._stack.close()


def trace_problem(
    problem: TorchProblem,
    timeout_s: float = 120.0,
    *,
    constants: Mapping[str, int] | None = None,
    child: TraceChild | None = None,
) -> Graph:
    """Trace ``problem``'s ``Model`` with torch.fx in a child process and return its graph.

    Args:
        problem: a loaded :class:`~cudaperf_cli.problems.pytorch.TorchProblem`.
        timeout_s: wall-clock limit for the child's work (import, model, trace, one CPU
            forward per constant set tried), seconds; starting the child and importing
            torch are not counted.
        constants: module-level constants to trace with (overrides the problem's);
            default: :func:`trace_constant_sets`.
        child: a :class:`TraceChild` started ahead to use (closed here); None: a new one.

    Returns:
        The :class:`Graph` (shapes at the constants it ran with, ``Graph.constants``).

    Raises:
        PolicyRefusal: the module cannot be traced (data-dependent control flow, ...),
            the file fails to import/build/run, or the child ran past ``timeout_s``, was
            killed or crashed (one line each).
        ToolchainError: the child cannot import torch.
    """
    try:
        if constants is not None:
            sets = [{**{k: int(v) for k, v in problem.constants.items()},
                     **{k: int(v) for k, v in constants.items()}}]
        else:
            sets = trace_constant_sets(problem)
        total = sum(s.numel for s in problem.inputs if s.kind == "tensor")
        # The problem's own (last) sizes run on the meta device when they are large: shapes
        # without data (KernelBench level 1 has 6-17 GB inputs, too much for a CPU run here).
        job = {"path": str(problem.path), "constant_sets": sets,
               "meta_last": constants is None and total > SHRINK_ABOVE}
        name = problem.path.name
        if child is not None:
            doc = _talk(child.proc, job, timeout_s=timeout_s, err_path=child.err_path, name=name)
        else:
            with isolated_child(TRACE_MODULE, prefix="cudaperf-trace-", cpu_only=True) as (proc, err_path):
                doc = _talk(proc, job, timeout_s=timeout_s, err_path=err_path, name=name)
    finally:
        if child is not None:  # a child started ahead is this call's, used or not
            child.close()
    if not doc.get("ok"):
        raise PolicyRefusal(f"{name}: {doc.get('error')}", doc.get("hint"))
    return Graph.from_json(doc["graph"])


def _talk(
    proc: subprocess.Popen[bytes], job: Mapping[str, Any], *, timeout_s: float, err_path: str, name: str
) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    fd = proc.stdout.fileno()
    buf = b""
    ready = False
    started = time.monotonic()
    deadline = started + STARTUP_TIMEOUT_S
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            kill_process_group(proc)
            if not ready:
                raise ToolchainError(
                    f"the trace child did not start within {STARTUP_TIMEOUT_S:.0f} s"
                )
            took = time.monotonic() - started
            raise PolicyRefusal(
                f"{name}: tracing timed out after {took:.1f} s (limit {timeout_s:g} s)",
                "the built-in policy runs the model once on the CPU to trace it; shrink the "
                "problem's constants or raise the time limit",
            )
        if not sel.select(remaining):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            ev = doc.get("event")
            if ev == "fatal":
                raise ToolchainError(
                    f"cannot trace PyTorch problems: {doc.get('error')}",
                    f"install PyTorch in this Python environment: {TORCH_INSTALL_HINT}",
                )
            if ev == "ready":
                ready = True
                started = time.monotonic()
                deadline = started + timeout_s
            elif ev == "result":
                return doc
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        kill_process_group(proc)
        rc = proc.wait()
    last = last_line(file_tail(err_path, _STDERR_TAIL))
    if not ready:
        raise ToolchainError(
            f"the trace child exited with status {rc} before importing torch" + (f": {last}" if last else ""),
            "check that PyTorch imports in this Python: python -c 'import torch'",
        )
    how = f"exited with status {rc}"
    if rc is not None and rc < 0:
        try:
            how = f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            how = f"was killed by signal {-rc}"
    raise PolicyRefusal(f"{name}: the trace process {how}" + (f": {last}" if last else ""))


# ---------------------------------------------------------------------------------------
# Child side (torch imported here only)
# ---------------------------------------------------------------------------------------

#: Canonical names of call_function / call_method targets.  Each name is looked up in
#: torch, torch.nn.functional, torch.Tensor, torch.special and operator.
_CANONICAL_NAMES = ["add", "sub", "mul", "div", "neg", "pow", "relu", "relu6", "sigmoid", "tanh", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "abs", "reciprocal", "square", "sin", "cos", "erf", "gelu", "silu", "mish", "softplus", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish", "softsign", "logsigmoid", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "floor", "ceil", "round", "trunc", "rsub", "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "cumsum", "cumprod", "flip", "softmax", "log_softmax", "logsumexp", "var", "std", "layer_norm", "group_norm", "instance_norm", "batch_norm", "rms_norm", "normalize", "norm", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "triplet_margin_loss", "cross_entropy", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "dropout", "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "contiguous", "expand", "expand_as", "view_as", "reshape_as", "chunk", "split", "unbind", "narrow", "select", "movedim", "detach", "clone", "float", "to", "size", "dim", "numel", "getitem", "tensor"]

_ALIASES = {
    "truediv": "div",
    "true_divide": "div",
    "divide": "div",
    "multiply": "mul",
    "subtract": "sub",
    "negative": "neg",
    "iadd": "add",
    "isub": "sub",
    "imul": "mul",
    "itruediv": "div",
    "clip": "clamp",
    "expit": "sigmoid",
    "absolute": "abs",
    "swapaxes": "transpose",
    "swapdims": "transpose",
    "moveaxis": "movedim",
    "arccos": "acos",
}

#: Python-level operators on numbers (shape arithmetic) kept under their own names.
_PY_OPERATORS = ("floordiv", "mod", "getitem", "eq", "ne", "lt", "le", "gt", "ge", "truth")


def _build_function_table(torch: Any) -> dict[int, tuple[str, str]]:
    import builtins
    import operator

    import torch.nn.functional as F

    spaces = [("torch", torch), ("F", F), ("Tensor", torch.Tensor), ("torch.special", torch.special), ("operator", operator)]
    table: dict[int, tuple[str, str]] = {}
    names = list(_CANONICAL_NAMES) + list(_ALIASES) + [n + "_" for n in _CANONICAL_NAMES] + list(_PY_OPERATORS)
    for label, ns in spaces:
        for n in names:
            obj = getattr(ns, n, None)
            if obj is None or id(obj) in table:
                continue
            base = n[:-1] if n.endswith("_") and n[:-1] in _CANONICAL_NAMES else n
            canon = _ALIASES.get(base, base)
            table[id(obj)] = (canon, f"{label}.{n}")
    vector_norm = getattr(getattr(torch, "linalg", None), "vector_norm", None)
    if vector_norm is not None:
        table[id(vector_norm)] = ("vector_norm", "torch.linalg.vector_norm")
    table[id(operator.matmul)] = ("matmul", "operator.matmul")
    table[id(builtins.getattr)] = ("getattr", "getattr")
    table[id(builtins.len)] = ("len", "len")
    table[id(operator.getitem)] = ("getitem", "operator.getitem")
    table[id(operator.floordiv)] = ("floordiv", "operator.floordiv")
    return table


def _callable_name(torch: Any, fn: Any) -> str:
    """``torch.cumsum`` / ``F.unfold`` / ``module.func`` for messages."""
    import torch.nn.functional as F

    name = getattr(fn, "__name__", None)
    if name:
        for label, ns in (("torch", torch), ("F", F), ("torch.Tensor", torch.Tensor)):
            if getattr(ns, name, None) is fn:
                return f"{label}.{name}"
    qual = getattr(fn, "__qualname__", name or repr(fn))
    modname = getattr(fn, "__module__", "") or ""
    return f"{modname}.{qual}" if modname else str(qual)


def _canon_method(name: str) -> str:
    base = name[:-1] if name.endswith("_") and name[:-1] in _CANONICAL_NAMES else name
    base = _ALIASES.get(base, base)
    if base in _CANONICAL_NAMES or base in ("getattr",):
        return base
    return f"unknown:Tensor.{name}"


def _positional(mod: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``mod(*args, **kwargs)``'s arguments bound to ``mod.forward``'s parameters: those a
    parameter can take by position become positional (``input=x, target=t`` of a loss);
    the call as given where it does not bind or a parameter is keyword-only."""
    import inspect

    try:
        bound = inspect.signature(mod.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return tuple(args), dict(kwargs)
    return tuple(bound.args), dict(bound.kwargs)


class _Tracer:
    def __init__(self, torch: Any):
        self.torch = torch
        self.functions = _build_function_table(torch)

    # -- encoding ---------------------------------------------------------------------

    def enc(self, a: Any) -> Any:
        torch = self.torch
        from torch import fx

        if isinstance(a, fx.Node):
            return {"node": a.name}
        if a is None or isinstance(a, (bool, int, str)):
            return a
        if isinstance(a, float):
            if math.isnan(a):
                return {"float": "nan"}
            if math.isinf(a):
                return {"float": "inf" if a > 0 else "-inf"}
            return a
        if isinstance(a, (list, tuple)):
            return [self.enc(x) for x in a]
        if isinstance(a, slice):
            return {"slice": [self.enc(a.start), self.enc(a.stop), self.enc(a.step)]}
        if a is Ellipsis:
            return {"ellipsis": True}
        if isinstance(a, torch.dtype):
            return {"dtype": str(a).replace("torch.", "")}
        if isinstance(a, torch.device):
            return {"device": str(a)}
        if isinstance(a, torch.memory_format):
            return {"memory_format": str(a).replace("torch.", "")}
        if isinstance(a, torch.Tensor):
            return {"repr": f"tensor(shape={list(a.shape)})"}
        return {"repr": repr(a)[:120]}

    def describe(self, v: Any) -> dict[str, Any]:
        torch = self.torch
        if isinstance(v, torch.Tensor):
            return {
                "kind": "tensor",
                "shape": [int(d) for d in v.shape],
                "dtype": str(v.dtype).replace("torch.", ""),
                "contiguous": bool(v.is_contiguous()),
            }
        if isinstance(v, (bool, int, float)):
            if isinstance(v, float) and not math.isfinite(v):
                return {"kind": "number", "value": self.enc(v)}
            return {"kind": "number", "value": v}
        if isinstance(v, torch.Size) or (
            isinstance(v, (tuple, list)) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        ):
            return {"kind": "shape", "value": [int(x) for x in v]}
        if isinstance(v, (tuple, list)) and v and all(isinstance(x, torch.Tensor) for x in v):
            return {
                "kind": "tensors",
                "shapes": [[int(d) for d in x.shape] for x in v],
                "dtypes": [str(x.dtype).replace("torch.", "") for x in v],
            }
        if v is None:
            return {"kind": "none"}
        if isinstance(v, torch.dtype):
            return {"kind": "other", "value": {"dtype": str(v).replace("torch.", "")}}
        return {"kind": "other", "value": repr(v)[:120]}

    # -- normalisation ----------------------------------------------------------------

    def normalize(self, target: Any, args: Sequence[Any], kwargs: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any] | None:
        """Bind a call's arguments to parameter names, using the traced values' types to
        pick a schema; None when that is not possible."""
        from torch import fx
        from torch.fx.operator_schemas import normalize_function

        def typ(a: Any) -> Any:
            if isinstance(a, fx.Node):
                v = values.get(a.name)
                return type(v) if not isinstance(v, self.torch.Tensor) else self.torch.Tensor
            if isinstance(a, (list, tuple)):
                return type(a)
            return type(a)

        try:
            pair = normalize_function(
                target,
                tuple(args),
                dict(kwargs),
                arg_types=tuple(typ(a) for a in args),
                kwarg_types={k: typ(v) for k, v in kwargs.items()},
                normalize_to_only_use_kwargs=True,
            )
        except Exception:  # noqa: BLE001 - ambiguous or unknown schema: keep positional
            return None
        if pair is None:
            return None
        return dict(pair.kwargs)

    # -- leaf modules -----------------------------------------------------------------

    def expand_module(self, node: Any, mod: Any) -> tuple[str, list[Any], dict[str, Any], bool]:
        """(target, args, kwargs, normalized) of a leaf module call in functional form;
        arguments passed by keyword (``self.loss(input=x, target=t)``) are bound to the
        module's ``forward`` first, so they read as positional ones."""
        nn = self.torch.nn
        t = node.target
        args, kwargs = _positional(mod, node.args, node.kwargs)
        x = args[0] if args else None
        losses = {nn.MSELoss: "mse_loss", nn.L1Loss: "l1_loss", nn.SmoothL1Loss: "smooth_l1_loss",
                  nn.HuberLoss: "huber_loss"}
        if type(mod) in losses and len(args) == 2 and not kwargs:
            kw = {"input": self.enc(args[0]), "target": self.enc(args[1]), "reduction": mod.reduction}
            if type(mod) is nn.SmoothL1Loss:
                kw["beta"] = float(mod.beta)
            if type(mod) is nn.HuberLoss:
                kw["delta"] = float(mod.delta)
            return losses[type(mod)], [], kw, True
        if type(mod) is nn.TripletMarginLoss and len(args) == 3 and not kwargs:
            return "triplet_margin_loss", [], {
                "anchor": self.enc(args[0]), "positive": self.enc(args[1]),
                "negative": self.enc(args[2]), "margin": float(mod.margin), "p": float(mod.p),
                "eps": float(mod.eps), "swap": bool(mod.swap), "reduction": mod.reduction,
            }, True
        if type(mod) is nn.CrossEntropyLoss and len(args) == 2 and not kwargs:
            return "cross_entropy", [], {
                "input": self.enc(args[0]), "target": self.enc(args[1]),
                "weight": None if mod.weight is None else {"attr": f"{t}.weight"},
                "ignore_index": {"modattr": f"{t}.ignore_index", "value": int(mod.ignore_index)},  # maybe a size
                "reduction": mod.reduction,
                "label_smoothing": float(mod.label_smoothing),
            }, True
        if type(mod) is nn.KLDivLoss and len(args) == 2 and not kwargs:
            return "kl_div", [], {"input": self.enc(args[0]), "target": self.enc(args[1]),
                                  "reduction": mod.reduction, "log_target": bool(mod.log_target)}, True
        if len(args) != 1 or kwargs:
            return f"module:{type(mod).__name__}", [self.enc(a) for a in args], {k: self.enc(v) for k, v in kwargs.items()}, False
        X = self.enc(x)

        def attr(name: str) -> Any:
            return None if getattr(mod, name, None) is None else {"attr": f"{t}.{name}"}

        def modattr(name: str) -> dict[str, Any]:  # an int set by __init__, maybe from a
            return {"modattr": f"{t}.{name}", "value": int(getattr(mod, name))}  # size constant

        def modval(name: str) -> dict[str, Any]:  # a structural int, tuple or bool set by
            v = getattr(mod, name)  # __init__ (pooling windows): read at run time too
            v = list(v) if isinstance(v, (tuple, list)) else v
            return {"modattr": f"{t}.{name}", "value": v}

        pools = {nn.MaxPool1d: "max_pool1d", nn.MaxPool2d: "max_pool2d", nn.MaxPool3d: "max_pool3d",
                 nn.AvgPool1d: "avg_pool1d", nn.AvgPool2d: "avg_pool2d", nn.AvgPool3d: "avg_pool3d"}
        if type(mod) in pools:
            kw = {"input": X, "kernel_size": modval("kernel_size"), "stride": modval("stride"),
                  "padding": modval("padding"), "ceil_mode": modval("ceil_mode")}
            if type(mod) in (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d):
                kw.update(dilation=modval("dilation"), return_indices=bool(mod.return_indices))
            else:
                kw["count_include_pad"] = modval("count_include_pad")
                if type(mod) is not nn.AvgPool1d:
                    kw["divisor_override"] = modval("divisor_override")
            return pools[type(mod)], [], kw, True
        adaptive = {nn.AdaptiveAvgPool1d: "adaptive_avg_pool1d", nn.AdaptiveAvgPool2d: "adaptive_avg_pool2d",
                    nn.AdaptiveAvgPool3d: "adaptive_avg_pool3d", nn.AdaptiveMaxPool1d: "adaptive_max_pool1d",
                    nn.AdaptiveMaxPool2d: "adaptive_max_pool2d", nn.AdaptiveMaxPool3d: "adaptive_max_pool3d"}
        if type(mod) in adaptive:
            kw = {"input": X, "output_size": modval("output_size")}
            if getattr(mod, "return_indices", False):
                kw["return_indices"] = True
            return adaptive[type(mod)], [], kw, True
        if isinstance(mod, nn.Linear):
            return "linear", [], {"input": X, "weight": attr("weight"), "bias": attr("bias")}, True
        conv = {nn.Conv1d: "conv1d", nn.Conv2d: "conv2d", nn.Conv3d: "conv3d"}
        for cls, name in conv.items():
            if type(mod) is cls:
                if mod.padding_mode != "zeros":
                    return f"module:{type(mod).__name__}(padding_mode={mod.padding_mode})", [X], {}, False
                return name, [], {
                    "input": X, "weight": attr("weight"), "bias": attr("bias"),
                    "stride": list(mod.stride), "padding": self.enc(mod.padding),
                    "dilation": list(mod.dilation), "groups": modattr("groups"),
                }, True
        convt = {nn.ConvTranspose1d: "conv_transpose1d", nn.ConvTranspose2d: "conv_transpose2d", nn.ConvTranspose3d: "conv_transpose3d"}
        for cls, name in convt.items():
            if type(mod) is cls:
                return name, [], {
                    "input": X, "weight": attr("weight"), "bias": attr("bias"),
                    "stride": list(mod.stride), "padding": list(mod.padding),
                    "output_padding": list(mod.output_padding), "groups": modattr("groups"),
                    "dilation": list(mod.dilation),
                }, True
        simple = {
            nn.ReLU: ("relu", {}), nn.Sigmoid: ("sigmoid", {}), nn.Tanh: ("tanh", {}),
            nn.SiLU: ("silu", {}), nn.Mish: ("mish", {}), nn.Hardsigmoid: ("hardsigmoid", {}),
            nn.Hardswish: ("hardswish", {}), nn.Softsign: ("softsign", {}), nn.SELU: ("selu", {}),
            nn.LogSigmoid: ("logsigmoid", {}), nn.Identity: ("identity", {}),
        }
        for cls, (name, kw) in simple.items():
            if type(mod) is cls:
                return name, [], {"input": X, **kw}, True
        if type(mod) is nn.GELU:
            return "gelu", [], {"input": X, "approximate": mod.approximate}, True
        if type(mod) is nn.ReLU6:
            return "hardtanh", [], {"input": X, "min_val": 0.0, "max_val": 6.0}, True
        if type(mod) is nn.Hardtanh:
            return "hardtanh", [], {"input": X, "min_val": float(mod.min_val), "max_val": float(mod.max_val)}, True
        if type(mod) is nn.LeakyReLU:
            return "leaky_relu", [], {"input": X, "negative_slope": float(mod.negative_slope)}, True
        if type(mod) is nn.ELU:
            return "elu", [], {"input": X, "alpha": float(mod.alpha)}, True
        if type(mod) is nn.CELU:
            return "celu", [], {"input": X, "alpha": float(mod.alpha)}, True
        if type(mod) is nn.Softplus:
            return "softplus", [], {"input": X, "beta": float(mod.beta), "threshold": float(mod.threshold)}, True
        if type(mod) in (nn.Softmax, nn.LogSoftmax):
            name = "softmax" if type(mod) is nn.Softmax else "log_softmax"
            return name, [], {"input": X, "dim": mod.dim}, True
        if type(mod) is nn.Dropout or type(mod) is nn.Dropout1d or type(mod) is nn.Dropout2d:
            return "dropout", [], {"input": X, "p": float(mod.p), "training": bool(mod.training)}, True
        if type(mod) is nn.Flatten:
            return "flatten", [], {"input": X, "start_dim": mod.start_dim, "end_dim": mod.end_dim}, True
        if type(mod) is nn.LayerNorm:
            return "layer_norm", [], {
                "input": X, "normalized_shape": list(mod.normalized_shape), "weight": attr("weight"),
                "bias": attr("bias"), "eps": float(mod.eps),
            }, True
        if type(mod) is getattr(nn, "RMSNorm", None):
            return "rms_norm", [], {
                "input": X, "normalized_shape": list(mod.normalized_shape), "weight": attr("weight"),
                "eps": None if mod.eps is None else float(mod.eps),
            }, True
        if type(mod) is nn.GroupNorm:
            return "group_norm", [], {
                "input": X, "num_groups": modattr("num_groups"), "weight": attr("weight"),
                "bias": attr("bias"), "eps": float(mod.eps),
            }, True
        if type(mod) in (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d):
            # the instance's own statistics unless running ones are tracked and used (eval)
            stats = bool(mod.training) or not mod.track_running_stats
            return "instance_norm", [], {
                "input": X, "running_mean": attr("running_mean"), "running_var": attr("running_var"),
                "weight": attr("weight"), "bias": attr("bias"), "use_input_stats": stats,
                "momentum": mod.momentum, "eps": float(mod.eps),
            }, True
        if type(mod) in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
            training = bool(mod.training) or mod.running_mean is None
            return "batch_norm", [], {
                "input": X, "running_mean": attr("running_mean"), "running_var": attr("running_var"),
                "weight": attr("weight"), "bias": attr("bias"), "training": training,
                "momentum": mod.momentum, "eps": float(mod.eps),
            }, True
        return f"module:{type(mod).__name__}", [X], {}, False

    # -- the trace --------------------------------------------------------------------

    def trace(self, model: Any, inputs: Sequence[Any]) -> dict[str, Any]:
        torch = self.torch
        from torch import fx
        from torch.fx.passes.shape_prop import ShapeProp

        try:
            gm = fx.symbolic_trace(model)
        except Exception as exc:  # noqa: BLE001 - report why
            msg = " ".join(str(exc).split())
            if len(msg) > 200:
                msg = msg[:197] + "..."
            raise _Refusal(
                f"torch.fx cannot trace Model.forward ({type(exc).__name__}: {msg})",
                "the built-in policy needs a forward without data-dependent control flow "
                "(no `if` on tensor values, no loops over tensor contents)",
            ) from None

        values: dict[str, Any] = {}

        class _Recorder(ShapeProp):
            def run_node(self, n: Any) -> Any:
                r = super().run_node(n)
                values[n.name] = r
                return r

        with torch.no_grad():
            try:
                _Recorder(gm).propagate(*inputs)
            except Exception as exc:  # noqa: BLE001 - the traced graph differs from forward
                msg = " ".join(str(exc).split())[:200]
                raise _Refusal(
                    f"the traced graph of Model.forward does not run ({type(exc).__name__}: {msg})"
                ) from None

        params = {}
        for name, p in model.named_parameters():
            params[name] = {"shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", ""), "kind": "parameter"}
        for name, b in model.named_buffers():
            params[name] = {"shape": list(b.shape), "dtype": str(b.dtype).replace("torch.", ""), "kind": "buffer"}

        nodes: list[dict[str, Any]] = []
        outputs: Any = None
        forward_args: list[str] = []
        for n in gm.graph.nodes:
            if n.op == "output":
                outputs = self.enc(n.args[0])
                continue
            d: dict[str, Any] = {"name": n.name}
            if n.op == "placeholder":
                d.update(op="input", target=str(n.target), index=len(forward_args), source="forward argument")
                forward_args.append(str(n.target))
            elif n.op == "get_attr":
                target = str(n.target)
                kind = params.get(target, {}).get("kind")
                if kind is None:
                    kind = "tensor" if isinstance(values.get(n.name), torch.Tensor) else "other"
                d.update(op="attr", target=target, attr_kind=kind, source=f"self.{target}")
            elif n.op == "call_module":
                mod = gm.get_submodule(n.target)
                target, args, kwargs, normalized = self.expand_module(n, mod)
                d.update(op="call", target=target, args=args, kwargs=kwargs, normalized=normalized,
                         source=f"nn.{type(mod).__name__} {n.target}")
            elif n.op == "call_function":
                canon, source = self.functions.get(id(n.target), (None, None))
                if canon is None:
                    source = _callable_name(torch, n.target)
                    canon = f"unknown:{source}"
                kw = self.normalize(n.target, n.args, n.kwargs, values) if not canon.startswith("unknown:") and canon not in _PY_OPERATORS and canon not in ("getattr", "len") else None
                if kw is not None:
                    d.update(op="call", target=canon, args=[], kwargs={k: self.enc(v) for k, v in kw.items()}, normalized=True, source=source)
                else:
                    d.update(op="call", target=canon, args=[self.enc(a) for a in n.args],
                             kwargs={k: self.enc(v) for k, v in n.kwargs.items()}, normalized=False, source=source)
            elif n.op == "call_method":
                canon = _canon_method(str(n.target))
                kw = None
                fn = getattr(torch, str(n.target).rstrip("_"), None) if not canon.startswith("unknown:") else None
                if fn is not None and canon not in ("size", "dim", "numel", "view", "reshape", "expand", "permute", "to", "float", "contiguous", "getattr"):
                    kw = self.normalize(fn, n.args, n.kwargs, values)
                if kw is not None:
                    d.update(op="call", target=canon, args=[], kwargs={k: self.enc(v) for k, v in kw.items()}, normalized=True, source=f"Tensor.{n.target}")
                else:
                    d.update(op="call", target=canon, args=[self.enc(a) for a in n.args],
                             kwargs={k: self.enc(v) for k, v in n.kwargs.items()}, normalized=False, source=f"Tensor.{n.target}")
            else:  # pragma: no cover - torch.fx has no other ops
                d.update(op="call", target=f"unknown:{n.op}", source=n.op)
            d.update(self.describe(values.get(n.name)))
            v = values.get(n.name)
            if n.op == "get_attr" and isinstance(v, torch.Tensor) and v.dim() == 0 and d.get("attr_kind") == "tensor":
                # a 0-d tensor constant (torch.fx makes torch.tensor(self.c) in forward one)
                d["value"] = self.enc(v.item())
            nodes.append(d)
        return {
            "nodes": nodes,
            "outputs": outputs,
            "params": params,
            "forward_args": forward_args,
            "model_class": "Model",
            "torch_version": torch.__version__,
        }


class _Refusal(Exception):
    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


def _run_job(job: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    from cudaperf_cli.problems.pytorch_probe import (
        INIT_SEED,
        INPUT_SEEDS,
        ProbeError,
        apply_constants,
        describe_exception,
        fake_tensors,
        import_problem_module,
    )

    path = str(job["path"])
    torch.set_default_dtype(torch.float32)
    try:
        module = import_problem_module(path, "_cudaperf_trace_problem")
    except ProbeError as exc:
        return {"ok": False, "error": str(exc), "hint": exc.hint, "reason": "problem"}
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name, None)):
            return {"ok": False, "error": f"the file defines no callable {name}", "hint": None, "reason": "problem"}
    tracer = _Tracer(torch)
    sets = list(job.get("constant_sets") or [{}])
    first_error: dict[str, Any] | None = None
    for k_set, consts in enumerate(sets):
        meta = bool(job.get("meta_last")) and k_set == len(sets) - 1
        ctx = fake_tensors() if meta else contextlib.nullcontext()  # shapes without storage
        try:
            apply_constants(module, {k: int(v) for k, v in consts.items()})
        except ProbeError as exc:
            first_error = first_error or {"ok": False, "error": str(exc), "hint": None, "reason": "problem"}
            continue
        try:
            with ctx:
                torch.manual_seed(INIT_SEED)
                init = module.get_init_inputs()
                model = module.Model(*init)
                torch.manual_seed(INPUT_SEEDS[0])
                inputs = list(module.get_inputs())
        except BaseException as exc:  # noqa: BLE001 - user code
            err = describe_exception(exc, path, "building Model / get_inputs()")
            first_error = first_error or {"ok": False, "error": str(err), "hint": err.hint, "reason": "problem"}
            continue
        try:
            with ctx:
                graph = tracer.trace(model, inputs)
        except _Refusal as exc:
            if "cannot trace" in str(exc):
                return {"ok": False, "error": str(exc), "hint": exc.hint, "reason": "untraceable"}
            first_error = first_error or {"ok": False, "error": str(exc), "hint": exc.hint, "reason": "problem"}
            continue
        graph["constants"] = {k: int(v) for k, v in consts.items()}
        return {"ok": True, "graph": graph}
    assert first_error is not None
    return first_error


def main(argv: Sequence[str] | None = None) -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(doc: dict[str, Any]) -> None:
        proto.write(json.dumps(doc) + "\n")
        proto.flush()

    warm = os.environ.get(WARM_ENV) == "1"
    job = {} if warm else json.loads(sys.stdin.read() or "{}")
    try:
        import torch
    except ImportError as exc:
        emit({"event": "fatal", "error": f"cannot import torch: {exc}"})
        return 3
    from cudaperf_cli.torch_cpu_math import warm_up_cpu_math

    warm_up_cpu_math(torch)  # forward runs on the CPU here (pytorch#188792)
    if warm:  # started ahead: the imports of the large problems' shape runs, then the job
        try:
            from cudaperf_cli.problems.pytorch_probe import fake_tensors

            fake_tensors()
        except Exception:  # noqa: BLE001 - the job reports it when it needs them
            pass
        job = json.loads(sys.stdin.read() or "{}")
        if not job:  # closed without a job (the parent is done with it)
            return 0
    emit({"event": "ready", "torch": torch.__version__})
    try:
        result = _run_job(job, torch)
    except BaseException as exc:  # noqa: BLE001 - answer in one line, never a traceback
        msg = " ".join(str(exc).split())[:200]
        result = {"ok": False, "error": f"tracing failed: {type(exc).__name__}: {msg}", "hint": None, "reason": "problem"}
    emit({"event": "result", **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
