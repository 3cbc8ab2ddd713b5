"""Plan which operations of a traced forward run in fused CUDA kernels (pure, no torch).

:func:`plan_fusion` turns a :class:`~.trace.Graph` into a :class:`FusionPlan`:

1. **Decomposition.**  Every tensor operation becomes *primitives* (:class:`Prim`):
   elementwise ops (``add``, ``gelu``...), and reductions ``red_sum``/``red_max``/
   ``red_min`` over a contiguous range of dims (``rows``), or over contiguous channel
   groups for group norm.  ``softmax``, ``log_softmax``, ``logsumexp``, ``layer_norm``,
   ``rms_norm``, ``group_norm``, ``var``/``std``, ``normalize`` and ``mean`` decompose
   into reductions with an elementwise prologue/epilogue; ``batch_norm`` with running
   statistics (inference) is elementwise with per-channel vectors.  Library operators
   (``linear``, ``matmul``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``conv*``) stay
   PyTorch calls (cuBLAS/cuDNN); the bias of ``linear``/``conv*`` is peeled into the next
   fused kernel when every user of the product is fusible.  Views and shape arithmetic
   stay Python/PyTorch (no compute).
2. **Grouping.**  Primitives are visited in order and join the group of a producer when
   the group's *domain* (the shape its kernel walks, one thread per element or one block
   per row) fits: an elementwise op joins when its shape equals the domain; a reduction
   joins when it reduces the domain with the same rows; an op on reduced values joins
   the reduced domain; a full-domain op may read reduced values broadcast back along
   their row (``x * rsqrt(mean(x*x, -1, keepdim=True) + eps)``).  A merge that would
   make a group depend on itself through an outside node is refused.
3. **Kernels.**  Each group with a value needed outside becomes a :class:`FusedKernel`:
   its leaves (tensors read, with how they broadcast), constants (kernel arguments),
   outputs and reduction *levels* (a row kernel runs one loop per level, then a final
   loop writing the full-domain outputs).

Operands broadcast in four ways, all resolved at run time by the generated ``model.py``
(never baked into the kernel): the same shape as the domain (read at ``i``), a tensor
covering a contiguous range of the domain's dims (a bias over the last dim, a
per-channel vector aligned at dim 1: read at ``(i / inner) % size``), a scalar tensor
(``size = 1``), and Python numbers (kernel arguments).

Raises :class:`~cudaperf_cli.policies.base.PolicyRefusal` naming the first operation it
cannot port (and why).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cudaperf_cli.policies.base import PolicyRefusal
from cudaperf_cli.policies.builtin_torch.trace import Graph, GraphNode

__all__ = [
    "ELEMENTWISE_OPS",
    "POSITION_OPS",
    "LIBRARY_TARGETS",
    "REDUCTION_TARGETS",
    "CRef",
    "FusedKernel",
    "FusionPlan",
    "Leaf",
    "LeftOp",
    "PRef",
    "Prim",
    "RowLen",
    "RowSpec",
    "XRef",
    "plan_fusion",
    "supported_ops",
]

# ---------------------------------------------------------------------------------------
# Operator tables
# ---------------------------------------------------------------------------------------

#: Elementwise primitives: name -> number of operands.  Their CUDA form is in codegen.
ELEMENTWISE_OPS: dict[str, int] = {
    "id": 1, "add": 2, "sub": 2, "mul": 2, "div": 2, "neg": 1, "pow": 2, "powc": 1,
    "relu": 1, "sigmoid": 1, "tanh": 1, "exp": 1, "exp2": 1, "log": 1, "log2": 1,
    "log10": 1, "log1p": 1, "expm1": 1, "sqrt": 1, "rsqrt": 1, "abs": 1, "reciprocal": 1,
    "square": 1, "sin": 1, "cos": 1, "erf": 1, "gelu": 1, "gelu_tanh": 1, "silu": 1,
    "mish": 1, "softplus": 3, "elu": 2, "selu": 1, "celu": 2, "leaky_relu": 2,
    "hardsigmoid": 1, "hardswish": 1, "softsign": 1, "logsigmoid": 1, "clamp": 3,
    "maximum": 2, "minimum": 2, "floor": 1, "ceil": 1, "round": 1, "trunc": 1, "xlogy": 2,
    "pool": 1,  # max/avg pooling: its operand is read through the windows of the element
    # logsumexp's infinite max as PyTorch masks it: inf_to_zero(m) (an infinite max shifts
    # by 0), lse_finish(s, m) = m where m is +inf, else log(s) + m (the online sum's end)
    "inf_to_zero": 1, "lse_finish": 2,
    # cross entropy: ce_pick(v, t, ignore) = v at the row position t (0 elsewhere, NaN at
    # position 0 for a t outside the row that is not ignored), ce_hit(t, ignore) = 1 there;
    # ce_loss(log s, picked, hit): the row's loss (0 ignored, NaN past 2^24 classes)
    "ce_pick": 3, "ce_hit": 2, "ce_loss": 3,
}
#: Elementwise primitives that read the element's position along its row (``cpos``).
POSITION_OPS = ("ce_pick", "ce_hit")

#: Graph targets that map one-to-one on an elementwise primitive of the same name.
_UNARY_SAME = ["relu", "sigmoid", "tanh", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "abs", "reciprocal", "square", "sin", "cos", "erf", "silu", "mish", "selu", "hardsigmoid", "hardswish", "softsign", "logsigmoid", "floor", "ceil", "round", "trunc", "neg"]

#: Reduction-like graph targets the planner decomposes.
REDUCTION_TARGETS = ["sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "softmax", "log_softmax", "logsumexp", "var", "std", "layer_norm", "group_norm", "instance_norm", "rms_norm", "normalize", "norm", "vector_norm", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "triplet_margin_loss", "cross_entropy"]

#: Pooling targets -> (``"max"`` | ``"avg"``, number of pooled trailing dims).
POOL_TARGETS: dict[str, tuple[str, int]] = {
    f"{kind}_pool{nd}d": (kind, nd) for kind in ("max", "avg") for nd in (1, 2, 3)
}
#: Adaptive pooling targets -> (``"max"`` | ``"avg"``, number of pooled trailing dims).
ADAPTIVE_POOL_TARGETS: dict[str, tuple[str, int]] = {
    f"adaptive_{kind}_pool{nd}d": (kind, nd) for kind in ("max", "avg") for nd in (1, 2, 3)
}

#: Library operators left to PyTorch -> the library doing the work.
LIBRARY_TARGETS: dict[str, str] = {
    "linear": "cuBLAS", "matmul": "cuBLAS", "mm": "cuBLAS", "bmm": "cuBLAS", "addmm": "cuBLAS",
    "baddbmm": "cuBLAS", "conv1d": "cuDNN", "conv2d": "cuDNN", "conv3d": "cuDNN",
    "conv_transpose1d": "cuDNN", "conv_transpose2d": "cuDNN", "conv_transpose3d": "cuDNN",
}

#: View / layout operators run by PyTorch (no compute; ``contiguous`` may copy).
VIEW_TARGETS = frozenset(
    ["view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "expand", "expand_as", "view_as", "reshape_as", "chunk", "split", "unbind", "narrow", "select", "movedim", "getitem"]
)

#: Operators that return their input's values unchanged (float32 in, float32 out).
_IDENTITY_TARGETS = frozenset({"identity", "detach", "contiguous", "clone", "float", "to"})

#: Python-number operators (shape arithmetic), emitted as Python.
_PY_BINOPS = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "pow": "**",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
}

#: Positional parameter names of each target, for calls the trace could not normalise.
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "add": ("input", "other", "alpha"), "sub": ("input", "other", "alpha"),
    "rsub": ("input", "other", "alpha"), "mul": ("input", "other"), "div": ("input", "other"),
    "pow": ("input", "exponent"), "maximum": ("input", "other"), "minimum": ("input", "other"),
    "clamp": ("input", "min", "max"), "clamp_min": ("input", "min"), "clamp_max": ("input", "max"),
    "sum": ("input", "dim", "keepdim", "dtype"), "mean": ("input", "dim", "keepdim", "dtype"),
    "amax": ("input", "dim", "keepdim"), "amin": ("input", "dim", "keepdim"),
    "argmax": ("input", "dim", "keepdim"), "argmin": ("input", "dim", "keepdim"),
    "cumsum": ("input", "dim", "dtype"), "cumprod": ("input", "dim", "dtype"), "flip": ("input", "dims"),
    "max": ("input", "dim", "keepdim"), "min": ("input", "dim", "keepdim"),
    "var": ("input", "dim", "unbiased", "keepdim"), "std": ("input", "dim", "unbiased", "keepdim"),
    "softmax": ("input", "dim", "dtype"), "log_softmax": ("input", "dim", "dtype"),
    "logsumexp": ("input", "dim", "keepdim"),
    "gelu": ("input", "approximate"), "leaky_relu": ("input", "negative_slope", "inplace"),
    "elu": ("input", "alpha", "inplace"), "celu": ("input", "alpha", "inplace"),
    "softplus": ("input", "beta", "threshold"),
    "hardtanh": ("input", "min_val", "max_val", "inplace"), "relu6": ("input", "inplace"),
    "layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "group_norm": ("input", "num_groups", "weight", "bias", "eps"),
    "instance_norm": ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps"),
    "batch_norm": ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
    "rms_norm": ("input", "normalized_shape", "weight", "eps"),
    "normalize": ("input", "p", "dim", "eps"),
    "norm": ("input", "p", "dim", "keepdim", "out", "dtype"),
    "vector_norm": ("input", "ord", "dim", "keepdim", "dtype"),
    "mse_loss": ("input", "target", "size_average", "reduce", "reduction", "weight"),
    "l1_loss": ("input", "target", "size_average", "reduce", "reduction"),
    "smooth_l1_loss": ("input", "target", "size_average", "reduce", "reduction", "beta"),
    "huber_loss": ("input", "target", "reduction", "delta", "weight"),
    "kl_div": ("input", "target", "size_average", "reduce", "reduction", "log_target"),
    "triplet_margin_loss": ("anchor", "positive", "negative", "margin", "p", "eps", "swap", "size_average",
                            "reduce", "reduction"),
    "cross_entropy": ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
                      "label_smoothing"),
    "dropout": ("input", "p", "training", "inplace"),
    **{f"max_pool{d}d": ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
       for d in (1, 2, 3)},
    "avg_pool1d": ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"),
    **{f"avg_pool{d}d": ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                         "divisor_override") for d in (2, 3)},
    **{f"adaptive_{k}_pool{d}d": ("input", "output_size", "return_indices") for k in ("max", "avg") for d in (1, 2, 3)},
    "linear": ("input", "weight", "bias"), "matmul": ("input", "other"), "mm": ("input", "mat2"),
    "bmm": ("input", "mat2"), "addmm": ("input", "mat1", "mat2"), "baddbmm": ("input", "batch1", "batch2"),
    "conv1d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv2d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv3d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv_transpose1d": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
    "conv_transpose2d": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
    "conv_transpose3d": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
}
for _n in _UNARY_SAME + ["relu", "identity", "detach", "contiguous", "clone", "float"]:
    _SIGNATURES.setdefault(_n, ("input",))


def supported_ops() -> dict[str, list[str]]:
    """The graph operations the planner handles, by how: ``{"elementwise": [...],
    "reductions": [...], "library": [...], "views": [...]}`` (for docs and messages)."""
    ew = sorted(
        set(_UNARY_SAME)
        | {"add", "sub", "rsub", "mul", "div", "pow", "gelu", "leaky_relu", "elu", "celu", "softplus",
           "hardtanh", "relu6", "clamp", "clamp_min", "clamp_max", "maximum", "minimum",
           "batch_norm (running statistics)", "dropout (p=0 or eval)", "identity", "clone", "float"}
    )
    return {
        "elementwise": ew,
        "reductions": list(REDUCTION_TARGETS),
        "pooling": sorted(POOL_TARGETS) + [f"{t} (output 1)" for t in sorted(ADAPTIVE_POOL_TARGETS)],
        "library": sorted(LIBRARY_TARGETS),
        "views": sorted(VIEW_TARGETS | {"contiguous", "detach", "size", "dim", "numel", "shape"}),
    }


# ---------------------------------------------------------------------------------------
# Primitive IR
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PRef:
    """A primitive's value.  ``row``: the (reduced) value is broadcast along its row."""

    id: int
    row: bool = False


@dataclass(frozen=True)
class XRef:
    """A tensor computed outside the fused kernels: ``key`` is ``("node", name)`` (a forward
    input, a library op, a view), ``("attr", "ln.weight")`` (a parameter or buffer) or
    ``("prim", "<id>")`` (another kernel's output).  ``at``: the tensor's first dim lines
    up with the domain's dim ``at`` (per-channel vectors: ``at=1``); None: right-aligned
    (PyTorch broadcasting)."""

    key: tuple[str, str]
    at: int | None = None


@dataclass(frozen=True)
class CRef:
    """A Python number: a literal ``value``, or ``var`` (a forward argument or shape
    arithmetic node holding a number at run time).  Passed as a ``float`` kernel argument."""

    value: float | None = None
    var: str | None = None

    def text(self) -> str:
        if self.var is not None:
            return self.var
        v = float(self.value)  # type: ignore[arg-type]
        return f"{v:g}"


@dataclass(frozen=True)
class RowLen:
    """The row length ``R`` (elements reduced per output) minus ``correction``, as a float."""

    correction: float = 0.0


Ref = Any  # PRef | XRef | CRef | RowLen


@dataclass(frozen=True)
class RowSpec:
    """What a reduction reduces, at run time.

    ``kind == "dims"``: the contiguous dims ``[start, stop)`` of the domain (``outer =
    prod(shape[:start])``, ``R = prod(shape[start:stop])``, ``inner = prod(shape[stop:])``;
    ``inner == 1`` is a row reduction, one block per row; otherwise a strided (column)
    reduction).  ``kind == "groups"``: group norm's ``groups`` contiguous channel groups
    per sample (``outer = shape[0] * groups``, ``R = numel / outer``, ``inner = 1``);
    ``groups`` is the traced value, ``groups_ref`` where the generated code reads it at run
    time: ``("attr", "gn.num_groups")`` (a module's attribute, set by ``__init__``),
    ``("dim", "1")`` (``x.shape[1]`` of the normalised tensor: dim 1 of the kernel's shape),
    ``("node", name)`` (another Python number computed in forward), or None (a literal in
    the source).  The trace may run at shrunken constants, so a traced value
    that came from a constant is never written into the code.  ``kind == "channels"``:
    batch norm's statistics, dim 1 of ``[N, C, *S]`` over every other dim (``outer = C``,
    ``R = N * prod(S)``, ``inner = prod(S)``: row ``c``'s element ``j`` is at
    ``((j / inner) * C + c) * inner + j % inner``; one block per channel).
    """

    kind: str
    start: int = 0
    stop: int = 0
    groups: int = 0
    groups_ref: tuple[str, str] | None = None

    def describe(self) -> str:
        if self.kind == "groups":
            return f"{self.groups} groups per sample"
        if self.kind == "channels":
            return "each channel over the batch and spatial dims"
        return f"dims [{self.start}, {self.stop})"


@dataclass
class Prim:
    """One primitive operation.

    Attributes:
        id: index in the plan's primitive list (topological order).
        op: an :data:`ELEMENTWISE_OPS` name or ``red_sum``/``red_max``/``red_min``, or
            ``red_argmax``/``red_argmin`` (int64 indices along the row; only written out),
            ``red_var`` (the variance, ``params["corr"]`` its correction) and ``red_lse``
            (``sum(exp(x - max(x)))`` over the row, -inf elements adding 0: the online
            softmax's sum) of the one-pass plans, or ``scan_sum``/``scan_prod`` (inclusive
            scans along the row).
        ins: operands (:class:`PRef`, :class:`XRef`, :class:`CRef`, :class:`RowLen`).
        shape: the traced result shape.
        origin: the graph node it comes from.
        label: what the user wrote, for the plan's description (``"add bias"``).
        params: structural parameters (``{"exponent": 2.0}`` for ``powc``).
        rows: for reductions, what is reduced; ``in_shape`` the reduced tensor's shape;
            ``keepdim`` whether the result keeps the reduced dims as 1.
    """

    id: int
    op: str
    ins: list[Ref]
    shape: tuple[int, ...]
    origin: str
    label: str
    params: dict[str, Any] = field(default_factory=dict)
    rows: RowSpec | None = None
    in_shape: tuple[int, ...] | None = None
    keepdim: bool = False

    @property
    def is_reduction(self) -> bool:
        return self.op.startswith("red_")

    @property
    def is_scan(self) -> bool:
        """A cumulative sum or product along its row (``scan_sum``/``scan_prod``;
        ``params["reverse"]``: from the row's end)."""
        return self.op.startswith("scan_")

    @property
    def is_index(self) -> bool:
        """An argmax/argmin: its value is an int64 index along the row."""
        return self.op in ("red_argmax", "red_argmin")


# ---------------------------------------------------------------------------------------
# Plan
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """A tensor a fused kernel reads.

    Attributes:
        ref: the :class:`XRef` (``key``, ``at``).
        domain: ``"full"`` (indexed by the element's linear index in the domain),
            ``"reduced"`` (by the row's index) or ``"pool"`` (read through the pooling
            windows of the domain's element, see ``pool``).
        full: at the traced shapes it has the domain's exact shape (read at ``i``; the
            generated model.py still expands it at run time when shapes differ).
        shape: its traced shape.
        pool: for ``domain == "pool"``, the id of the pooling primitive that reads the
            tensor through its windows (the element at ``i`` of the domain is the pooled
            window of output ``i``); None otherwise.
        keep: for ``domain == "reduced"``: it broadcasts against the reduced shape with the
            reduced dims kept (``x.sum(-1, keepdim=True) + b``); False: without them
            (``x.sum(-1) + b``, where ``b`` lines up with the remaining dims).
        dtype: ``"float32"``, or ``"bool"`` (a mask in arithmetic, read as 0.0/1.0).
    """

    ref: XRef
    domain: str
    full: bool
    shape: tuple[int, ...]
    pool: int | None = None
    keep: bool = True
    dtype: str = "float32"


@dataclass
class FusedKernel:
    """One generated kernel (one ``extern "C"`` launcher).

    Attributes:
        index: position in :attr:`FusionPlan.kernels`.
        name: the launcher's name (``k0_softmax``).
        kind: ``"elementwise"`` (grid-stride loop), ``"reduction"`` (rows/columns) or
            ``"scan"`` (one scan along ``rows``, with elementwise members before and after).
        prims: member primitives, topological order.
        domain: traced shape of the domain (the full-domain tensors).
        rows: what the reductions reduce (None for elementwise).
        leaves: tensors read; consts: Python numbers passed as ``float`` arguments.
        outputs: ``(prim id, "full" | "reduced")`` written by the kernel.
        levels: prim id -> reduction level (0: needs no reduction; a reduction is one more
            than its input).
        labels: the fused operations, as the user wrote them.
        after: library operations whose results the kernel reads (``["linear"]``).
        nodes: graph nodes fused (origins of the prims).
        roles: prim id -> ``"full"`` (evaluated per element) or ``"reduced"`` (per row:
            reductions and what is computed from their results).
        writes: output prim id -> the buffer it is written into in place (dotted name;
            batch norm's running statistics), instead of a new tensor.
        batch_counts: modules (dotted names) whose ``num_batches_tracked`` the forward
            counts after this kernel: ``nn.BatchNorm*`` called as a module in training
            mode, whose running mean the kernel updates (``F.batch_norm`` counts nothing).
    """

    index: int
    name: str
    kind: str
    prims: list[Prim]
    domain: tuple[int, ...]
    rows: RowSpec | None
    leaves: list[Leaf]
    consts: list[CRef]
    outputs: list[tuple[int, str]]
    levels: dict[int, int]
    labels: list[str]
    after: list[str]
    nodes: list[str]
    roles: dict[int, str] = field(default_factory=dict)
    writes: dict[int, str] = field(default_factory=dict)
    batch_counts: list[str] = field(default_factory=list)

    @property
    def depth(self) -> int:
        """Number of reduction levels (0 for elementwise)."""
        return max((self.levels[p.id] for p in self.prims if p.is_reduction), default=0)

    def describe(self) -> str:
        ops = self.labels[0] if len(self.labels) == 1 else f"[{', '.join(self.labels)}]"
        if self.after:
            ops = f"{'+'.join(self.after)}->{ops}"
        return ops

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "ops": list(self.labels),
            "after": list(self.after),
            "nodes": list(self.nodes),
            "rows": None if self.rows is None else self.rows.describe(),
            "reduction_levels": self.depth,
            "inputs": [
                {"tensor": _ref_text(l.ref), "domain": l.domain, "broadcast": not l.full and l.pool is None}
                for l in self.leaves
            ],
            "constants": [c.text() for c in self.consts],
            "outputs": len(self.outputs),
        }


@dataclass(frozen=True)
class LeftOp:
    """An operation left to PyTorch.

    Attributes:
        node: the graph node.
        op: its canonical name (``"linear"``).
        library: ``"cuBLAS"``/``"cuDNN"``.
        where: the module or call it came from (``"nn.Linear fc1"``).
        bias_fused: its bias was peeled into the next fused kernel.
    """

    node: str
    op: str
    library: str
    where: str
    bias_fused: bool = False

    def describe(self) -> str:
        extra = ", bias fused" if self.bias_fused else ""
        return f"{self.op} ({self.library}{extra})"


@dataclass
class FusionPlan:
    """What runs where.

    Attributes:
        graph: the traced graph.
        prims: every primitive.
        kernels: the fused kernels, in execution order.
        left: library operations left to PyTorch.
        views: graph nodes done by PyTorch views or Python (no compute).
        values: graph node -> its value (:class:`PRef` of a primitive or :class:`XRef`);
            nodes of shape arithmetic map to ``("py", name)``.
        peeled: library nodes computed without their bias (the bias went into a kernel).
        writes: primitive id -> the buffer (dotted name) its kernel writes it into, in
            place (batch norm's running statistics in training mode).
        schedule: execution order: ``("node", name)`` for PyTorch/Python work and
            ``("kernel", index)``.
        outputs: forward's return value as traced (``{"node": ...}`` or a list).
    """

    graph: Graph
    prims: list[Prim]
    kernels: list[FusedKernel]
    left: list[LeftOp]
    views: list[str]
    values: dict[str, Any]
    peeled: dict[str, str]
    schedule: list[tuple[str, Any]]
    outputs: Any
    writes: dict[int, str] = field(default_factory=dict)

    def fused_ops(self) -> list[str]:
        """One entry per kernel: ``"linear->[add bias, gelu]"``."""
        return [k.describe() for k in self.kernels]

    def left_ops(self) -> list[str]:
        """One entry per library op: ``"linear (cuBLAS)"``."""
        return [l.describe() for l in self.left]

    def describe(self) -> str:
        """One line: ``fused: linear->[add bias, gelu] (1 kernel); softmax (1 kernel); left
        to PyTorch: linear (cuBLAS)``."""
        parts: list[str] = []
        counts: dict[str, int] = {}
        for k in self.kernels:
            counts[k.describe()] = counts.get(k.describe(), 0) + 1
        fused = [f"{t} ({n} kernel{'s' if n > 1 else ''})" for t, n in counts.items()]
        if fused:
            parts.append("fused: " + "; ".join(fused))
        else:
            parts.append("nothing fused")
        if self.left:
            lc: dict[str, int] = {}
            for l in self.left:
                lc[l.describe()] = lc.get(l.describe(), 0) + 1
            parts.append(
                "left to PyTorch: " + ", ".join(t if n == 1 else f"{n}x {t}" for t, n in lc.items())
            )
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "description": self.describe(),
            "kernels": [k.to_json() for k in self.kernels],
            "left_to_pytorch": [
                {"node": l.node, "op": l.op, "library": l.library, "where": l.where, "bias_fused": l.bias_fused}
                for l in self.left
            ],
            "views": list(self.views),
        }


def _ref_text(r: XRef) -> str:
    kind, name = r.key
    base = {"node": name, "attr": f"self.{name}", "prim": f"t{name}"}.get(kind, name)
    return base if r.at is None else f"{base} (per dim {r.at})"


# ---------------------------------------------------------------------------------------
# Decomposition
# ---------------------------------------------------------------------------------------


def _bind(n: GraphNode) -> dict[str, Any]:
    """The node's arguments by parameter name."""
    if n.normalized:
        return dict(n.kwargs)
    names = _SIGNATURES.get(n.target, ())
    out: dict[str, Any] = {}
    for i, a in enumerate(n.args):
        if i < len(names):
            out[names[i]] = a
        else:
            out[f"arg{i}"] = a
    out.update(n.kwargs)
    return out


def _is_node(a: Any) -> bool:
    return isinstance(a, dict) and "node" in a


def _number(a: Any) -> float | None:
    """A JSON number (or ``{"float": "inf"}``) as float, else None (bools count)."""
    if isinstance(a, bool):
        return float(a)
    if isinstance(a, (int, float)):
        return float(a)
    if isinstance(a, dict) and "float" in a:
        return float(a["float"])
    return None


def _shape_numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    out: list[int] = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


class _Planner:
    def __init__(self, graph: Graph, one_pass: bool = False):
        self.g = graph
        self.one_pass = one_pass
        self.nodes = graph.by_name()
        self.prims: list[Prim] = []
        self.values: dict[str, Any] = {}
        self.units: dict[str, str] = {}  # node -> "input" | "attr" | "lib" | "view" | "py" | "alias"
        self.left: list[LeftOp] = []
        self.peeled: dict[str, str] = {}
        self.writes: dict[int, str] = {}  # prim id -> buffer it updates in place
        self.batch_counts: dict[int, str] = {}  # running mean's update prim id -> BatchNorm module
        self.exclusive_parts: dict[str, str | None] = {}  # narrow, zeros -> None; cat -> its cumsum
        self.users: dict[str, list[str]] = {n.name: [] for n in graph.nodes}
        self.output_names: set[str] = set(_refs_in(graph.outputs))
        for n in graph.nodes:
            for r in _refs_in([n.args, dict(n.kwargs)]):
                if r in self.users:
                    self.users[r].append(n.name)

    # -- helpers ----------------------------------------------------------------------

    def refuse(self, n: GraphNode, why: str) -> PolicyRefusal:
        what = n.target.split(":", 1)[1] if ":" in n.target else n.target
        where = f"{n.source}, " if n.source and n.source != what else ""
        return PolicyRefusal(
            f"cannot port {what} ({where}node '{n.name}'): {why}",
            "the built-in policy fuses elementwise ops and row reductions and leaves matmul/"
            "conv to PyTorch; see docs/builtin-torch-policy.md for the supported operations",
        )

    def add(self, op: str, ins: list[Ref], shape: Sequence[int], n: GraphNode, label: str, **kw: Any) -> PRef:
        p = Prim(len(self.prims), op, list(ins), tuple(int(d) for d in shape), n.name, label, **kw)
        self.prims.append(p)
        return PRef(p.id)

    def dtype_of(self, r: Ref) -> str:
        """The dtype name of what ``r`` reads (``"float32"``, or ``"bool"`` for a mask)."""
        if isinstance(r, XRef):
            kind, name = r.key
            if kind == "attr":
                return str((self.g.params.get(name) or {}).get("dtype") or "float32")
            if kind == "node" and name in self.nodes:
                return str(self.nodes[name].dtype or "float32")
        return "float32"

    def shape_of(self, r: Ref) -> tuple[int, ...]:
        if isinstance(r, PRef):
            return self.prims[r.id].shape
        if isinstance(r, XRef):
            kind, name = r.key
            if kind == "attr":
                if name in self.g.params:
                    return tuple(self.g.params[name]["shape"])
                for n in self.g.nodes:
                    if n.op == "attr" and n.target == name and n.shape is not None:
                        return n.shape
                return ()
            if kind == "prim":
                return self.prims[int(name)].shape
            node = self.nodes[name]
            return node.shape or ()
        return ()

    def tensor(self, a: Any, n: GraphNode, what: str = "operand", allow_bool: bool = False) -> Ref:
        """A tensor operand as a Ref (raises when it is not a float32 tensor, or a bool one
        where ``allow_bool``: an operand of arithmetic whose result is float32, PyTorch's
        promotion reading it as 0.0/1.0, as the kernel does)."""
        ok = ("float32", "bool") if allow_bool else ("float32",)
        if isinstance(a, dict) and "attr" in a:
            name = a["attr"]
            meta = self.g.params.get(name)
            if meta is not None and meta.get("dtype") not in (None, *ok):
                raise self.refuse(n, f"{what} self.{name} is {meta.get('dtype')}; only float32 is supported")
            return XRef(("attr", name))
        if _is_node(a):
            src = self.nodes[a["node"]]
            v = self.values.get(src.name)
            if isinstance(v, CRef):
                raise self.refuse(n, f"{what} '{src.name}' is a 0-d tensor made from a number; only an "
                                     "operand of elementwise arithmetic can be one")
            if src.kind != "tensor" or v is None or (isinstance(v, tuple) and v[0] == "py"):
                raise self.refuse(n, f"{what} '{src.name}' is not a tensor")
            if src.dtype not in ok:
                raise self.refuse(n, f"{what} '{src.name}' is {src.dtype}; only float32 is supported"
                                     + (" (and bool in arithmetic)" if src.dtype == "bool" else ""))
            return v
        raise self.refuse(n, f"{what} {a!r} is not a tensor")

    def operand(self, a: Any, n: GraphNode) -> Ref:
        """A tensor or a Python number."""
        num = _number(a)
        if num is not None:
            return CRef(value=num)
        if _is_node(a):
            src = self.nodes[a["node"]]
            if src.kind == "number":
                return CRef(var=src.name)
            if isinstance(self.values.get(src.name), CRef):  # a 0-d tensor of a number
                return self.values[src.name]
        return self.tensor(a, n, allow_bool=n.dtype == "float32")

    def scalar(self, a: Any, n: GraphNode, what: str) -> CRef:
        num = _number(a)
        if num is not None:
            return CRef(value=num)
        if _is_node(a) and self.nodes[a["node"]].kind == "number":
            return CRef(var=a["node"])
        raise self.refuse(n, f"{what} must be a Python number")

    def literal(self, a: Any) -> Any:
        """A structural argument's traced value (node references and module attributes,
        ``{"modattr": path, "value": v}``, are read from the trace)."""
        if isinstance(a, dict) and "modattr" in a:
            return a.get("value")
        if _is_node(a):
            src = self.nodes[a["node"]]
            return src.value
        if isinstance(a, list):
            return [self.literal(x) for x in a]
        return a

    def vector_norm(self, x: Ref, p: float, start: int, stop: int, keep: bool, n: GraphNode) -> PRef:
        """``||x||_p`` over dims ``[start, stop)``: p = 2 ``sqrt(sum(x^2))``, 1 ``sum(|x|)``,
        inf ``max(|x|)``, -inf ``min(|x|)``."""
        t, shape = n.target, self.shape_of(x)
        if p == 2.0:
            ss = self.reduce("red_sum", self.add("square", [x], shape, n, t), start, stop, keep, n, t)
            return self.add("sqrt", [ss], self.prims[ss.id].shape, n, t)
        op = {1.0: "red_sum", math.inf: "red_max"}.get(p, "red_min")
        return self.reduce(op, self.add("abs", [x], shape, n, t), start, stop, keep, n, t)

    def loss_reduction(self, n: GraphNode, a: Mapping[str, Any], more: Sequence[str] = ()) -> str:
        """A loss's ``reduction``: ``none``, ``sum``, ``mean`` or one of ``more``, after
        refusing PyTorch's legacy ``size_average``/``reduce`` and class ``weight`` where given
        (the losses' shared argument checks)."""
        for old in ("size_average", "reduce", "weight"):
            if a.get(old) is not None:
                raise self.refuse(n, f"{n.target} with {old}= is not supported")
        red = self.literal(a.get("reduction", "mean"))
        if red not in ("none", "sum", "mean", *more):
            raise self.refuse(n, f"reduction={red!r}")
        return red

    def loss(self, n: GraphNode, a: Mapping[str, Any], x: Ref) -> Ref:
        """``F.mse_loss``, ``l1_loss``, ``smooth_l1_loss``, ``huber_loss`` (and their modules):
        the pointwise loss of ``d = |input - target|`` (smooth L1 and Huber through ``m =
        min(d, beta)``: ``0.5 m^2 / beta + (d - m)`` and ``0.5 m^2 + delta (d - m)``, equal to
        PyTorch's two branches), then ``reduction`` ``none``, ``sum`` or ``mean`` over every
        element."""
        t = n.target
        red = self.loss_reduction(n, a, ("batchmean",) if t == "kl_div" else ())
        y = self.tensor(a.get("target"), n, "target")
        shape = _broadcast(self.shape_of(x), self.shape_of(y))
        if shape is None or not shape:
            raise self.refuse(n, "input and target do not broadcast to a tensor of at least one dim")
        if t == "kl_div":  # PyTorch's pointwise form: xlogy(t, t) - t * input (0 where t = 0)
            if self.literal(a.get("log_target", False)):
                et = self.add("exp", [y], self.shape_of(y), n, t)
                pw: Ref = self.add("mul", [et, self.add("sub", [y, x], shape, n, t)], shape, n, t)
            else:
                pw = self.add("sub", [self.add("xlogy", [y, y], self.shape_of(y), n, t),
                                      self.add("mul", [y, x], shape, n, t)], shape, n, t)
            if red == "batchmean":  # sum over all but dim 0, then the mean over dim 0
                rows = self.reduce("red_sum", pw, 1, len(shape), False, n, t) if len(shape) > 1 else pw
                s = self.reduce("red_sum", rows, 0, 1, False, n, t)
                return self.add("div", [s, RowLen()], self.prims[s.id].shape, n, t)
            return self._reduce_loss(pw, shape, red, n)
        d = self.add("sub", [x, y], shape, n, t)
        if t == "mse_loss":
            pw: Ref = self.add("square", [d], shape, n, t)
        else:
            pw = self.add("abs", [d], shape, n, t)
        if t in ("smooth_l1_loss", "huber_loss"):
            k = _number(self.literal(a.get("beta" if t == "smooth_l1_loss" else "delta", 1.0)))
            if k is None or k < 0 or (t == "huber_loss" and k == 0):
                raise self.refuse(n, f"{t} with {'beta' if t == 'smooth_l1_loss' else 'delta'}={k!r}")
            if k > 0:
                m = self.add("minimum", [pw, CRef(value=k)], shape, n, t)
                sq = self.add("square", [m], shape, n, t)
                half = self.add("mul", [sq, CRef(value=0.5 / k if t == "smooth_l1_loss" else 0.5)], shape, n, t)
                rest = self.add("sub", [pw, m], shape, n, t)
                if t == "huber_loss":
                    rest = self.add("mul", [rest, CRef(value=k)], shape, n, t)
                pw = self.add("add", [half, rest], shape, n, t)
        return self._reduce_loss(pw, shape, red, n)

    def _reduce_loss(self, pw: Ref, shape: Sequence[int], red: str, n: GraphNode) -> Ref:
        """A pointwise loss ``pw`` reduced as ``reduction`` says: ``none``, ``sum`` or ``mean``
        over every element."""
        if red == "none":
            return pw
        s = self.reduce("red_sum", pw, 0, len(shape), False, n, n.target)
        if red == "sum":
            return s
        return self.add("div", [s, RowLen()], self.prims[s.id].shape, n, n.target)

    def pool(self, n: GraphNode) -> Ref:
        """Max or average pooling over the last 1-3 dims (``F.max_pool2d``,
        ``nn.AvgPool3d``...): one ``pool`` primitive whose input is read through its windows
        (so written to memory first); adaptive pooling to an output of 1 is a mean or max
        reduction over those dims.  The windows' sizes are kept as the call wrote them
        (literals, or the module's attributes read at run time) for model.py."""
        t = n.target
        a = _bind(n)
        if n.kind != "tensor" or a.get("return_indices"):
            raise self.refuse(n, "the indices of max pooling are not supported (only the values)")
        x = self.tensor(a.get("input"), n)
        shape = self.shape_of(x)
        if t in ADAPTIVE_POOL_TARGETS:
            kind, nd = ADAPTIVE_POOL_TARGETS[t]
            size = self.literal(a.get("output_size"))
            sizes = size if isinstance(size, list) else [size] * nd
            if len(shape) < nd + 1 or len(sizes) != nd or any(v not in (1, None) for v in sizes):
                raise self.refuse(n, f"adaptive pooling to output_size={size!r} (only 1 is supported: a mean or max)")
            first = len(shape) - nd
            dims = [first + j for j, v in enumerate(sizes) if v == 1]  # None keeps a dim
            if not dims or dims != list(range(dims[0], dims[-1] + 1)):
                raise self.refuse(n, f"adaptive pooling to output_size={size!r} (only 1 over adjacent dims is supported)")
            start, stop = dims[0], dims[-1] + 1
            if kind == "max":
                return self.reduce("red_max", x, start, stop, True, n, t)
            r = self.reduce("red_sum", x, start, stop, True, n, t)
            return self.add("div", [r, RowLen()], self.prims[r.id].shape, n, t)
        kind, nd = POOL_TARGETS[t]
        if len(shape) not in (nd + 1, nd + 2):
            raise self.refuse(n, f"{t} of a {len(shape)}-d tensor (expected {nd + 1} or {nd + 2} dims)")
        lit = {k: self.literal(a.get(k)) for k in ("kernel_size", "stride", "padding", "dilation", "divisor_override")}
        for k, v in lit.items():
            vs = v if isinstance(v, list) else [v]
            if not all(x_ is None or (isinstance(x_, int) and not isinstance(x_, bool)) for x_ in vs):
                raise self.refuse(n, f"{k}={v!r} is not an int or a tuple of ints")
        if self.literal(a.get("divisor_override")) not in (None, 0) and kind == "max":
            raise self.refuse(n, "divisor_override of max pooling")
        args = {k: a[k] for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode",
                                  "count_include_pad", "divisor_override") if k in a}
        if "kernel_size" not in args:
            raise self.refuse(n, "no kernel_size")

        def computed(v: Any) -> bool:
            return _is_node(v) or (isinstance(v, list) and any(computed(w) for w in v))

        late = [k for k, v in args.items() if computed(v)]
        if late:  # model.py writes the window as the call did: literals and module attributes only
            raise self.refuse(n, f"a pooling {late[0]} computed in forward (only numbers and the "
                                 "module's attributes are supported)")
        traced = {k: self.literal(v) for k, v in args.items()}  # the window as traced: codegen.pool_window
        return self.add("pool", [x], n.shape or (), n, t,
                        params={"kind": kind, "nd": nd, "args": args, "traced": traced})

    def cross_entropy(self, n: GraphNode, a: Mapping[str, Any]) -> Ref:
        """``F.cross_entropy`` / ``nn.CrossEntropyLoss`` of logits ``[N, C]`` and int64 class
        indices ``[N]`` (no weight, no label smoothing; any ``ignore_index``; reduction
        ``none``, ``sum`` or ``mean``), as PyTorch's ``nll_loss(log_softmax(x, 1), t)``:
        per row the max ``m``, ``s = sum(exp(x - m))`` and the target's shifted logit
        ``x[t] - m``, picked by a sum over the row that keeps the element at position ``t``
        (``ce_pick``: exact, one term; ``ce_hit`` counts it), then ``log(s) - (x[t] - m)``
        (``ce_loss``: 0 for an ignored row, NaN for a target outside ``[0, C)``, where
        PyTorch raises).  ``mean`` divides by the rows not ignored (NaN when all are).
        ``ignore_index`` is a kernel argument (a module's attribute read at run time)."""
        t = n.target
        red = self.loss_reduction(n, a)
        if _number(self.literal(a.get("label_smoothing", 0.0))) not in (0.0, None):
            raise self.refuse(n, f"{t} with label_smoothing > 0")
        raw = a.get("ignore_index", -100)
        ign = self.literal(raw)
        if not isinstance(ign, int) or isinstance(ign, bool):
            raise self.refuse(n, f"ignore_index={ign!r} is not an int")
        # a kernel argument read at run time: a module's attribute or a number computed in
        # forward may come from a size constant, which the trace may have shrunk
        ign_ref = (CRef(var="modattr:" + raw["modattr"]) if isinstance(raw, dict) and "modattr" in raw
                   else self.scalar(raw, n, "ignore_index"))
        x = self.tensor(a.get("input"), n)
        shape = self.shape_of(x)
        tg = a.get("target")
        src = self.nodes.get(tg["node"]) if _is_node(tg) else None
        tv = self.values.get(src.name) if src is not None else None
        if len(shape) != 2 or src is None or src.dtype != "int64" or not isinstance(tv, XRef) \
                or tuple(src.shape or ()) != shape[:1]:
            raise self.refuse(n, f"{t} of logits [N, C] and int64 class indices [N] only (probabilities, "
                                 "more dims and computed targets are not supported)")
        tf = XRef(tv.key, 0)  # the row's class index, along dim 0 (read as a float: exact below 2^24)
        m = self.reduce("red_max", x, 1, 2, True, n, t)
        dx = self.add("sub", [x, PRef(m.id, row=True)], shape, n, t)
        s = self.reduce("red_sum", self.add("exp", [dx], shape, n, t), 1, 2, False, n, t)
        pk = self.reduce("red_sum", self.add("ce_pick", [dx, tf, ign_ref], shape, n, t), 1, 2, False, n, t)
        hit = self.reduce("red_sum", self.add("ce_hit", [tf, ign_ref], shape, n, t), 1, 2, False, n, t)
        rows = self.prims[s.id].shape
        ls = self.add("log", [s], rows, n, t)
        loss = self.add("ce_loss", [ls, pk, hit], rows, n, t)
        if red == "none":
            return loss
        total = self.reduce("red_sum", loss, 0, 1, False, n, t)
        if red == "sum":
            return total
        return self.add("div", [total, self.reduce("red_sum", hit, 0, 1, False, n, t)], self.prims[total.id].shape, n, t)

    def triplet_margin_loss(self, n: GraphNode, a: Mapping[str, Any]) -> Ref:
        """``F.triplet_margin_loss`` / ``nn.TripletMarginLoss`` with p = 2 and no swap:
        ``relu(d(a, p) - d(a, n) + margin)`` with ``d(u, v) = ||u - v + eps||_2`` over the last
        dim (``F.pairwise_distance``), then ``reduction`` over the batch."""
        t = n.target
        red = self.loss_reduction(n, a)
        if _number(self.literal(a.get("p", 2.0))) != 2.0 or self.literal(a.get("swap", False)):
            raise self.refuse(n, f"{t} with p != 2 or swap=True is not supported")
        anc, pos, neg = (self.tensor(a.get(k), n, k) for k in ("anchor", "positive", "negative"))
        ap = _broadcast(self.shape_of(anc), self.shape_of(pos))
        shape = _broadcast(ap, self.shape_of(neg)) if ap is not None else None
        if not shape or len(shape) < 2:
            raise self.refuse(n, f"{t} needs [..., D] inputs of the same shape")
        eps = self.scalar(a.get("eps", 1e-6), n, "eps")
        margin = self.scalar(a.get("margin", 1.0), n, "margin")
        rank = len(shape)

        def dist(u: Ref, v: Ref) -> Ref:
            d = self.add("add", [self.add("sub", [u, v], shape, n, t), eps], shape, n, t)
            ss = self.reduce("red_sum", self.add("square", [d], shape, n, t), rank - 1, rank, False, n, t)
            return self.add("sqrt", [ss], self.prims[ss.id].shape, n, t)

        dp, dn = dist(anc, pos), dist(anc, neg)
        bshape = self.prims[dp.id].shape
        gap = self.add("add", [self.add("sub", [dp, dn], bshape, n, t), margin], bshape, n, t)
        return self._reduce_loss(self.add("relu", [gap], bshape, n, t), bshape, red, n)

    def num_groups(self, raw: Any, shape: Sequence[int], n: GraphNode) -> tuple[int, tuple[str, str] | None]:
        """Group norm's ``num_groups``: its traced value and where the code reads it at run
        time (:class:`RowSpec` ``groups_ref``). Raises PolicyRefusal when it is no int."""
        G = self.literal(raw)
        if not isinstance(G, int) or isinstance(G, bool) or G < 1:
            raise self.refuse(n, f"num_groups {G!r}")
        if isinstance(raw, dict) and "modattr" in raw:
            return G, ("attr", str(raw["modattr"]))
        if not _is_node(raw):
            return G, None
        dim = self.shape_dim(raw["node"], shape)
        if dim is not None:  # x.shape[1], x.size(1): read from the kernel's shape
            return G, ("dim", str(dim))
        if self.units.get(raw["node"]) == "py":
            return G, ("node", raw["node"])
        raise self.refuse(n, f"num_groups '{raw['node']}' is not a Python number computed in forward")

    def shape_dim(self, name: str, shape: Sequence[int]) -> int | None:
        """``d`` when node ``name`` is ``T.shape[d]``, ``T.size(d)`` or ``T.size()[d]`` of a
        tensor ``T`` whose traced shape is ``shape`` (so its value is dim ``d`` of that
        shape at any size), else None."""
        node = self.nodes.get(name)
        if node is None or node.kind != "number":
            return None
        t, args = node.target, list(node.args)
        if t == "size" and len(args) == 2:
            tensor, d = args
        elif t == "getitem" and len(args) == 2 and _is_node(args[0]) and isinstance(args[1], int):
            base = self.nodes.get(args[0]["node"])
            if base is None or not (
                (base.target == "getattr" and len(base.args) == 2 and base.args[1] == "shape")
                    or (base.target == "size" and len(base.args) == 1)):
                return None
            tensor, d = base.args[0], args[1]
        else:
            return None
        if not _is_node(tensor) or not isinstance(d, int):
            return None
        src = self.nodes.get(tensor["node"])
        if src is None or src.kind != "tensor" or src.shape is None or list(src.shape) != list(shape):
            return None
        rank = len(shape)
        d = d + rank if d < 0 else d
        return d if 0 <= d < rank else None

    def dims(self, a: Any, rank: int, n: GraphNode) -> tuple[int, int]:
        """A dim argument (int, list, None = all) as a contiguous range [start, stop)."""
        v = self.literal(a)
        if v is None or v == []:
            return 0, rank
        ds = v if isinstance(v, list) else [v]
        try:
            norm = sorted({int(d) + rank if int(d) < 0 else int(d) for d in ds})
        except (TypeError, ValueError):
            raise self.refuse(n, f"dim {v!r} is not an int or a list of ints") from None
        if not norm or norm[0] < 0 or norm[-1] >= rank:
            raise self.refuse(n, f"dim {v!r} is out of range for a {rank}-d tensor")
        if norm != list(range(norm[0], norm[-1] + 1)):
            raise self.refuse(n, f"dims {v!r} are not adjacent (only a contiguous range of dims is reduced)")
        return norm[0], norm[-1] + 1

    def reduce(self, op: str, x: Ref, start: int, stop: int, keepdim: bool, n: GraphNode, label: str,
               rows: RowSpec | None = None, params: dict[str, Any] | None = None) -> PRef:
        s = self.shape_of(x)
        rows = rows or RowSpec("dims", start, stop)
        if rows.kind == "groups":
            out = (s[0], rows.groups)
        elif rows.kind == "channels":
            out = tuple(d if i == 1 else 1 for i, d in enumerate(s))
        elif keepdim:
            out = tuple(1 if start <= i < stop else d for i, d in enumerate(s))
        else:
            out = tuple(d for i, d in enumerate(s) if not start <= i < stop)
        return self.add(op, [x], out, n, label, rows=rows, in_shape=tuple(s), keepdim=keepdim,
                        params=dict(params or {}))

    def moments(self, x: Ref, start: int, stop: int, keepdim: bool, n: GraphNode, label: str,
                rows: RowSpec | None = None, corr: float = 0.0, mean: bool = True) -> tuple[PRef | None, PRef, PRef | None]:
        """(mean, variance with correction ``corr``, ``x - mean``) of ``x``'s rows, reduced
        values (keepdim) and the full-domain centred value (None without ``mean``).

        Two passes (the default): the mean, then the sum of the centred squares (a second
        reduction level: the row read twice before the output's pass).  ``one_pass``: the
        mean's sum and ``red_var`` side by side on one level (shifted sums in double, see
        ``cp_var_sums`` in codegen): the row read once before the output's pass."""
        shape = self.shape_of(x)
        s = self.reduce("red_sum", x, start, stop, True, n, label, rows=rows) if mean or not self.one_pass else None
        m = self.add("div", [s, RowLen()], self.prims[s.id].shape, n, label) if s is not None else None
        d = self.add("sub", [x, PRef(m.id, row=True)], shape, n, label) if m is not None else None
        if self.one_pass:
            v = self.reduce("red_var", x, start, stop, keepdim, n, label, rows=rows, params={"corr": float(corr)})
            return m, v, d
        assert d is not None
        ss = self.reduce("red_sum", self.add("square", [d], shape, n, label), start, stop, keepdim, n, label, rows=rows)
        return m, self.add("div", [ss, RowLen(corr)], self.prims[ss.id].shape, n, label), d

    def label_binary(self, op: str, args: Sequence[Any]) -> str:
        for a in args:
            v = self.values.get(a["node"]) if _is_node(a) else None
            if isinstance(v, CRef) and v.value is not None:  # a 0-d tensor of a number
                return f"{op} {v.value:g}"
            if isinstance(a, dict) and "attr" in a:
                return f"{op} {a['attr'].split('.')[-1]}"
            if _is_node(a) and self.nodes[a["node"]].op == "attr":
                return f"{op} {self.nodes[a['node']].target.split('.')[-1]}"
        for a in args:
            num = _number(a)
            if num is not None:
                return f"{op} {num:g}"
        return op

    # -- the walk ---------------------------------------------------------------------

    def run(self) -> None:
        for n in self.g.nodes:  # exclusive scans first: their zeros come before the narrow
            if n.target == "narrow":
                self.match_exclusive(n)
        for n in self.g.nodes:
            if n.op == "input":
                self.units[n.name] = "input"
                self.values[n.name] = XRef(("node", n.name)) if n.kind == "tensor" else ("py", n.name)
            elif n.op == "attr":
                if n.attr_kind == "tensor" and not n.shape and _number(n.value) is not None:
                    self.number_tensor(n, _number(n.value))
                    continue
                if n.attr_kind not in ("parameter", "buffer"):
                    raise self.refuse(
                        n, "a tensor attribute that is neither a parameter nor a buffer (register it "
                        "with nn.Parameter or register_buffer so that ModelNew receives it)"
                    )
                self.units[n.name] = "attr"
                self.values[n.name] = XRef(("attr", n.target))
            else:
                self.call(n)

    def number_tensor(self, n: GraphNode, value: float | None) -> None:
        """A 0-d tensor made from a Python number in forward (``torch.tensor(0.0,
        device=x.device)``, or the constant torch.fx makes of ``torch.tensor(self.c)``): the
        number itself, read at trace time like ``self.c``.  Combined with a float32 tensor
        (``torch.min(x, torch.tensor(c))``) it computes in float32 whatever its dtype, as
        PyTorch's type promotion has a dimensioned tensor win over a 0-d one."""
        if value is None or n.shape:
            raise self.refuse(n, "a tensor made in forward from something other than one Python number")
        self.units[n.name] = "const"
        self.values[n.name] = CRef(value=value)

    def call(self, n: GraphNode) -> None:
        t = n.target
        if t == "tensor":
            data = n.args[0] if n.args else dict(n.kwargs).get("t")  # torch.tensor(t, dtype, device, ...)
            return self.number_tensor(n, _number(data))
        if t in ("unknown:torch.zeros_like", "unknown:torch.cat") and n.name in self.exclusive_parts:
            return self.exclusive_part(n)
        if t in ("unknown:torch.zeros_like", "unknown:torch.cat"):
            raise self.refuse(n, "supported only as the pieces of an exclusive scan, written "
                                 "torch.cat((torch.zeros_like(<x sliced to width 1 along d: x.select(d, 0)"
                                 ".unsqueeze(d), x.narrow(d, 0, 1), x[:, :1]>), torch.cumsum(x.narrow(d, 0, "
                                 "x.size(d) - 1), d)), dim=d)")
        if t.startswith("unknown:"):
            raise self.refuse(n, "not an operation the built-in policy supports")
        if t.startswith("module:"):
            raise self.refuse(n, "a layer the built-in policy does not support")
        if n.kind != "tensor" and n.kind != "tensors":
            # Shape arithmetic, tuples of numbers: Python.
            if n.kind in ("number", "shape", "none") or t in ("getattr", "size", "dim", "numel", "getitem", "len"):
                self.units[n.name] = "py"
                self.values[n.name] = ("py", n.name)
                return
            if t in ("max", "min") and n.kind == "other":
                pass
            else:
                raise self.refuse(n, f"it returns a {n.kind} value the built-in policy cannot handle")
        if n.kind == "tensor" and n.dtype != "float32" and not self.index_result(n):
            raise self.refuse(n, f"its result is {n.dtype}; only float32 is supported")
        if t in LIBRARY_TARGETS:
            return self.library(n)
        if t in ("max", "min") and n.kind != "tensor":
            return self.max_with_indices(n)
        if t == "getitem":
            return self.getitem(n)
        if t == "getattr":
            attr = n.args[1] if len(n.args) > 1 else None
            if attr in ("values", "indices") and self.maxdim_source(n) is not None:
                return self.getitem(n, 0 if attr == "values" else 1)  # torch.max(x, dim).values
            if attr not in ("T", "mT"):
                raise self.refuse(n, f"tensor attribute {attr!r}")
            self.units[n.name] = "view"
            self.values[n.name] = XRef(("node", n.name))
            return
        if t in ("cumsum", "cumprod"):
            self.values[n.name] = self.scan(n)
            self.units[n.name] = "fused"
            return
        if t == "flip":
            return self.flip(n)
        if t == "narrow" and n.name in self.exclusive_parts:
            a = _bind(n)
            self.units[n.name] = "tuple"
            self.values[n.name] = ("exclusive", self.tensor(a.get("input"), n),
                                   self.literal(a.get("dim")) % len(n.shape or (0,)))
            return
        if t in POOL_TARGETS or t in ADAPTIVE_POOL_TARGETS:
            self.values[n.name] = self.pool(n)
            self.units[n.name] = "fused"
            return
        if t in VIEW_TARGETS or n.kind == "tensors":
            if t not in VIEW_TARGETS:
                raise self.refuse(n, "it returns several tensors")
            self.units[n.name] = "view"
            self.values[n.name] = XRef(("node", n.name))
            return
        if t in _IDENTITY_TARGETS:
            a = _bind(n)
            if t == "to":
                for v in list(a.values())[1:]:
                    if isinstance(v, dict) and "dtype" in v and v["dtype"] != "float32":
                        raise self.refuse(n, f"conversion to {v['dtype']}")
            x = self.tensor(a.get("input", n.args[0] if n.args else None), n)
            self.units[n.name] = "alias"
            self.values[n.name] = x
            return
        if t == "dropout":
            a = _bind(n)
            p = _number(self.literal(a.get("p", 0.5)))
            training = self.literal(a.get("training", True))
            if p not in (0.0, None) and training:
                raise self.refuse(n, "dropout in training mode is random (p > 0)")
            self.units[n.name] = "alias"
            self.values[n.name] = self.tensor(a.get("input"), n)
            return
        v = self.elementwise(n)
        if v is None:
            v = self.reduction(n)
        if v is None:
            raise self.refuse(n, "not a supported operation")
        self.values[n.name] = v
        self.units[n.name] = "fused"

    # -- library ops ------------------------------------------------------------------

    def library(self, n: GraphNode) -> None:
        a = _bind(n)
        lib = LIBRARY_TARGETS[n.target]
        bias = a.get("bias")
        users = self.users.get(n.name, [])
        peel = (
            n.target in ("linear",) or n.target.startswith("conv")
        ) and bias is not None and users and n.name not in self.output_names and all(
            self._fusible_user(self.nodes[u]) for u in users
        )
        for key in ("input", "weight", "other", "mat1", "mat2", "batch1", "batch2"):
            if key in a and a[key] is not None and not (isinstance(a[key], dict) and ("attr" in a[key] or "node" in a[key])):
                raise self.refuse(n, f"{key} is not a tensor")
        self.units[n.name] = "lib"
        base = XRef(("node", n.name))
        if peel:
            try:
                b = self.tensor(bias, n, "bias")
            except PolicyRefusal:
                peel = False
        if peel:
            at = None if n.target == "linear" else 1
            self.peeled[n.name] = "bias"
            bref = XRef(b.key, at) if isinstance(b, XRef) else b
            if isinstance(b, PRef):
                bref = XRef(("prim", str(b.id)), at)
            self.values[n.name] = self.add("add", [base, bref], n.shape or (), n, "add bias")
        else:
            self.values[n.name] = base
        self.left.append(LeftOp(n.name, n.target, lib, n.source, bias_fused=peel))

    def _fusible_user(self, u: GraphNode) -> bool:
        t = u.target
        if u.kind != "tensor" or u.op != "call":
            return False
        return (t in _UNARY_SAME or t in REDUCTION_TARGETS or t in (
            "add", "sub", "rsub", "mul", "div", "pow", "gelu", "leaky_relu", "elu", "celu", "softplus",
            "hardtanh", "relu6", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "batch_norm",
        ))

    # -- scans ------------------------------------------------------------------------

    def _flip_dim(self, n: GraphNode) -> int | None:
        """The one dim ``n`` (a ``flip``) reverses, normalised; None when it is several."""
        a = _bind(n)
        v = self.literal(a.get("dims"))
        ds = v if isinstance(v, list) else [v]
        src = a.get("input")
        rank = len(self.nodes[src["node"]].shape or ()) if _is_node(src) else 0
        if len(ds) != 1 or not isinstance(ds[0], int) or rank == 0:
            return None
        return ds[0] + rank if ds[0] < 0 else ds[0]

    def _only_user(self, name: str) -> GraphNode | None:
        users = self.users.get(name, [])
        if len(users) != 1 or name in self.output_names:
            return None
        return self.nodes[users[0]]

    def flip(self, n: GraphNode) -> None:
        """``flip`` only around a scan: ``x.flip(d).cumsum(d).flip(d)`` is a reverse scan
        (KernelBench's cumsum_reverse).  The inner flip stands for its input, read from the
        row's end; the outer one is the scan's result."""
        d = self._flip_dim(n)
        src = _bind(n).get("input")
        inner = self.values.get(src["node"]) if _is_node(src) else None
        if (isinstance(inner, PRef) and self.prims[inner.id].is_scan and self.prims[inner.id].params.get("reverse")
                and self.nodes[src["node"]].target in ("cumsum", "cumprod")):  # the scan node itself, not an alias of it
            if d == self.prims[inner.id].rows.start:  # type: ignore[union-attr]
                self.units[n.name] = "alias"
                self.values[n.name] = inner
                return
        scan = self._only_user(n.name)
        outer = self._only_user(scan.name) if scan is not None and scan.target in ("cumsum", "cumprod") else None
        if d is not None and scan is not None and outer is not None and outer.target == "flip" \
                and self._flip_dim(outer) == d:
            self.units[n.name] = "tuple"
            self.values[n.name] = ("flip", self.tensor(src, n), d)
            return
        raise self.refuse(n, "flip is supported only as x.flip(d).cumsum(d).flip(d) (a reverse scan), "
                             "each used once")

    def match_exclusive(self, n: GraphNode) -> None:
        """Record in ``exclusive_parts`` whether ``narrow`` node ``n`` opens an exclusive
        scan, written as KernelBench's cumsum_exclusive writes it: ``torch.cat((
        torch.zeros_like(z), torch.cumsum(x.narrow(d, 0, x.size(d) - 1), d)), d)`` (``z``
        any float32 tensor of x's shape with 1 at ``d``; each piece used once; ``cumprod``
        is not matched, its identity being 1).  If so the narrow stands for ``x`` (a
        ``tuple`` unit read by :meth:`scan`), the zeros for nothing and the cat for the
        scan (:meth:`exclusive_part`); else the narrow stays a view.  The length must be
        the ``size(d) - 1`` node itself, so that the pattern holds at every size."""
        a = _bind(n)
        src = a.get("input")
        if not _is_node(src):
            return
        shape = tuple(self.nodes[src["node"]].shape or ())
        d = a.get("dim")  # raw ints, not nodes: a computed dim or start holds its traced value only
        if not shape or not isinstance(d, int) or not -len(shape) <= d < len(shape):
            return
        d %= len(shape)
        length = a.get("length")
        ln = self.nodes.get(length["node"]) if _is_node(length) else None
        sz = self.nodes.get(ln.args[0]["node"]) if ln is not None and ln.target == "sub" and len(ln.args) == 2 \
            and ln.args[1] == 1 and _is_node(ln.args[0]) else None
        if sz is None or sz.target != "size" or len(sz.args) != 2 or sz.args[0] != src \
                or not isinstance(sz.args[1], int) or sz.args[1] % len(shape) != d or a.get("start") != 0 \
                or isinstance(a.get("start"), bool):
            return
        scan = self._only_user(n.name)
        scan_dim = _bind(scan).get("dim") if scan is not None else None
        if scan is None or scan.target != "cumsum" or not isinstance(scan_dim, int) or scan_dim % len(shape) != d:
            return
        cat = self._only_user(scan.name)
        parts = cat.args[0] if cat is not None and cat.target == "unknown:torch.cat" and cat.args else None
        # only `dim` by keyword (PyTorch also takes `axis=`; anything else: no match)
        cat_dim = dict(cat.kwargs).get("dim", cat.args[1] if len(cat.args) > 1 else 0) \
            if parts is not None and set(dict(cat.kwargs)) <= {"dim"} else None
        if not isinstance(parts, list) or len(parts) != 2 or not isinstance(cat_dim, int) \
                or cat_dim % len(shape) != d or parts[1] != {"node": scan.name} or not _is_node(parts[0]):
            return
        zeros = self.nodes[parts[0]["node"]]
        want = shape[:d] + (1,) + shape[d + 1:]
        if zeros.target != "unknown:torch.zeros_like" or dict(zeros.kwargs) or len(zeros.args) != 1 \
                or tuple(zeros.shape or ()) != want or zeros.dtype != "float32" or self._only_user(zeros.name) is not cat \
                or not self._one_slice_of(zeros.args[0], src, d, len(shape)):
            return
        self.exclusive_parts[n.name] = None
        self.exclusive_parts[zeros.name] = None
        self.exclusive_parts[cat.name] = scan.name

    def _one_slice_of(self, z: Any, x: Any, d: int, rank: int) -> bool:
        """Whether ``z`` has ``x``'s shape with 1 at dim ``d`` at *every* size, by how it
        is made from ``x`` (the traced shapes agree at one size only): ``x.select(d,
        k).unsqueeze(d)``, ``x.narrow(d, k, 1)`` (``k`` a literal int), or a ``sum``/``mean``/
        ``amax``/``amin`` of ``x`` over ``d`` alone with ``keepdim=True``."""
        if not _is_node(z):
            return False
        n = self.nodes[z["node"]]
        a = _bind(n)

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def at_d(v: Any) -> bool:
            return is_int(v) and -rank <= v < rank and v % rank == d

        if n.target == "getitem" and len(n.args) == 2 and n.args[0] == x:  # x[:, :1] (basic slices only)
            items = n.args[1] if isinstance(n.args[1], list) else [n.args[1]]
            if len(items) > rank or not all(isinstance(i, dict) and set(i) == {"slice"} for i in items):
                return False
            spans = [tuple(i["slice"]) for i in items] + [(None, None, None)] * (rank - len(items))
            return all(sp == (None, None, None) if k != d else
                       (sp[0] in (None, 0) and sp[1] == 1 and sp[2] in (None, 1)) for k, sp in enumerate(spans))
        if a.get("input") != x:
            if n.target != "unsqueeze" or not at_d(a.get("dim")) or not _is_node(a.get("input")):
                return False
            inner = self.nodes[a["input"]["node"]]
            b = _bind(inner)
            return inner.target == "select" and b.get("input") == x and at_d(b.get("dim")) and is_int(b.get("index"))
        if n.target == "narrow":
            return at_d(a.get("dim")) and is_int(a.get("start")) and a.get("length") == 1
        if n.target in ("sum", "mean", "amax", "amin"):
            dims = a.get("dim")
            dims = dims[0] if isinstance(dims, list) and len(dims) == 1 else dims
            return at_d(dims) and a.get("keepdim") is True
        return False

    def exclusive_part(self, n: GraphNode) -> None:
        """The zeros (nothing: the scan's identity) or the cat (the exclusive scan) of the
        pattern :meth:`match_exclusive` matched."""
        scan = self.exclusive_parts[n.name]
        if scan is None:
            self.units[n.name] = "tuple"
            self.values[n.name] = ("zeros of an exclusive scan", n.name)
        else:
            self.units[n.name] = "alias"
            self.values[n.name] = self.values[scan]

    def scan(self, n: GraphNode) -> PRef:
        """``cumsum``/``cumprod`` along one dim: a ``scan_sum``/``scan_prod`` primitive,
        reversed when its input is the inner flip of a reverse scan, exclusive (over the
        whole row) when it is the narrow of :meth:`match_exclusive`."""
        a = _bind(n)
        dtype = a.get("dtype")
        if isinstance(dtype, dict) and dtype.get("dtype") not in (None, "float32"):
            raise self.refuse(n, f"dtype={dtype.get('dtype')}")
        src = a.get("input")
        inner = self.values.get(src["node"]) if _is_node(src) else None
        reverse = isinstance(inner, tuple) and inner[0] == "flip"
        exclusive = isinstance(inner, tuple) and inner[0] == "exclusive"
        x = inner[1] if reverse or exclusive else self.tensor(src, n)  # type: ignore[index]
        shape = tuple(self.shape_of(x))
        if not shape:
            raise self.refuse(n, f"{n.target} of a 0-d tensor")
        d = self.literal(a.get("dim"))
        if not isinstance(d, int):
            raise self.refuse(n, f"{n.target} needs one int dim")
        start, stop = self.dims(d, len(shape), n)
        if (reverse or exclusive) and start != inner[2]:  # type: ignore[index]
            raise self.refuse(n, f"a {inner[0]} on another dim than the scan's")  # type: ignore[index]
        op = "scan_sum" if n.target == "cumsum" else "scan_prod"
        label = n.target + (" reverse" if reverse else "") + (" exclusive" if exclusive else "")
        params = {"reverse": bool(reverse), **({"exclusive": True} if exclusive else {})}
        return self.add(op, [x], shape, n, label, rows=RowSpec("dims", start, stop), in_shape=shape,
                        params=params)

    # -- getitem / max with indices ---------------------------------------------------

    def max_with_indices(self, n: GraphNode) -> None:
        # torch.max(x, dim) -> (values, indices): only values may be used (getitem 0).
        self.units[n.name] = "tuple"
        self.values[n.name] = ("maxdim", n.name)

    def index_result(self, n: GraphNode) -> bool:
        """Whether ``n`` gives int64 indices the plan computes: ``argmax``/``argmin``, or the
        indices of ``torch.max/min(x, dim)`` (``[1]``, ``.indices``).  Nothing fused may read
        them (an operand must be float32): they are written out as int64."""
        if n.dtype != "int64":
            return False
        if n.target in ("argmax", "argmin"):
            return True
        return n.target in ("getitem", "getattr") and self.maxdim_source(n) is not None

    def maxdim_source(self, n: GraphNode) -> str | None:
        """The ``torch.max/min(x, dim)`` node whose result tuple ``n`` reads, or None."""
        src_name = n.args[0]["node"] if n.args and _is_node(n.args[0]) else None
        src_val = self.values.get(src_name) if src_name else None
        return src_name if isinstance(src_val, tuple) and src_val[0] == "maxdim" else None

    def getitem(self, n: GraphNode, idx: Any = None) -> None:
        """``t[i]`` of a view, or of a max/min-with-dim tuple (``idx``: 0 for ``.values``,
        1 for ``.indices``; default ``n``'s own subscript)."""
        src_name = self.maxdim_source(n)
        if src_name is not None:
            idx = idx if idx is not None else (n.args[1] if len(n.args) > 1 else None)
            src = self.nodes[src_name]
            if idx not in (0, 1):
                raise self.refuse(n, f"element {idx!r} of {src.target}(dim)")
            a = _bind(src)
            x = self.tensor(a.get("input"), src)
            rank = len(self.shape_of(x))
            start, stop = self.dims(a.get("dim"), rank, src)
            keep = bool(self.literal(a.get("keepdim", False)))
            if idx == 1:  # the indices: argmax/argmin over the dim
                op, label = ("red_argmax", "max indices") if src.target == "max" else ("red_argmin", "min indices")
            else:
                op, label = ("red_max" if src.target == "max" else "red_min"), src.target
            self.values[n.name] = self.reduce(op, x, start, stop, keep, src, label)
            self.units[n.name] = "fused"
            return
        self.units[n.name] = "view"
        self.values[n.name] = XRef(("node", n.name))

    # -- elementwise ------------------------------------------------------------------

    def elementwise(self, n: GraphNode) -> Ref | None:
        t = n.target
        a = _bind(n)
        shape = n.shape or ()
        if t in _UNARY_SAME:
            x = self.tensor(a.get("input"), n)
            return self.add(t, [x], shape, n, t)
        if t in ("add", "sub", "rsub"):
            x = self.operand(a.get("input"), n)
            y = self.operand(a.get("other"), n)
            alpha = a.get("alpha")
            if alpha is not None and _number(alpha) != 1.0:
                y = self.add("mul", [y, self.scalar(alpha, n, "alpha")], shape, n, "alpha")
            if t == "rsub":
                x, y = y, x
            op = "sub" if t == "rsub" else t
            return self._binary(op, x, y, shape, n, self.label_binary(t, [a.get("input"), a.get("other")]))
        if t in ("mul", "div", "maximum", "minimum"):
            if t == "div" and a.get("rounding_mode") not in (None,):
                raise self.refuse(n, f"division with rounding_mode={a.get('rounding_mode')!r}")
            x = self.operand(a.get("input"), n)
            y = self.operand(a.get("other"), n)
            return self._binary(t, x, y, shape, n, self.label_binary(t, [a.get("input"), a.get("other")]))
        if t == "pow":
            x = self.operand(a.get("input"), n)
            e = a.get("exponent")
            num = _number(e)
            if isinstance(x, CRef):
                return self._binary("pow", x, self.tensor(e, n), shape, n, "pow")
            if num is not None:
                return self.add("powc", [x], shape, n, f"pow {num:g}", params={"exponent": num})
            return self._binary("pow", x, self.operand(e, n), shape, n, "pow")
        if t == "gelu":
            approx = self.literal(a.get("approximate", "none")) or "none"
            if approx not in ("none", "tanh"):
                raise self.refuse(n, f"gelu approximate={approx!r}")
            x = self.tensor(a.get("input"), n)
            return self.add("gelu" if approx == "none" else "gelu_tanh", [x], shape, n, "gelu" if approx == "none" else "gelu(tanh)")
        if t == "leaky_relu":
            x = self.tensor(a.get("input"), n)
            return self.add("leaky_relu", [x, self.scalar(a.get("negative_slope", 0.01), n, "negative_slope")], shape, n, t)
        if t in ("elu", "celu"):
            x = self.tensor(a.get("input"), n)
            return self.add(t, [x, self.scalar(a.get("alpha", 1.0), n, "alpha")], shape, n, t)
        if t == "softplus":
            x = self.tensor(a.get("input"), n)
            return self.add("softplus", [x, self.scalar(a.get("beta", 1.0), n, "beta"),
                                         self.scalar(a.get("threshold", 20.0), n, "threshold")], shape, n, t)
        if t in ("hardtanh", "relu6"):
            x = self.tensor(a.get("input"), n)
            lo = self.scalar(a.get("min_val", -1.0), n, "min_val") if t == "hardtanh" else CRef(value=0.0)
            hi = self.scalar(a.get("max_val", 1.0), n, "max_val") if t == "hardtanh" else CRef(value=6.0)
            return self.add("clamp", [x, lo, hi], shape, n, t)
        if t in ("clamp", "clamp_min", "clamp_max"):
            x = self.tensor(a.get("input"), n)
            lo_a = a.get("min") if t != "clamp_max" else None
            hi_a = a.get("max") if t != "clamp_min" else None
            r: Ref = x
            lo_t = lo_a is not None and _number(lo_a) is None and not (_is_node(lo_a) and self.nodes[lo_a["node"]].kind == "number")
            hi_t = hi_a is not None and _number(hi_a) is None and not (_is_node(hi_a) and self.nodes[hi_a["node"]].kind == "number")
            if lo_t or hi_t:
                if lo_a is not None:
                    r = self._binary("maximum", r, self.operand(lo_a, n), shape, n, t)
                if hi_a is not None:
                    r = self._binary("minimum", r, self.operand(hi_a, n), shape, n, t)
                return r
            lo = self.scalar(lo_a, n, "min") if lo_a is not None else CRef(value=-math.inf)
            hi = self.scalar(hi_a, n, "max") if hi_a is not None else CRef(value=math.inf)
            return self.add("clamp", [x, lo, hi], shape, n, t)
        if t == "batch_norm":
            return self.batch_norm(n, a)
        return None

    def _binary(self, op: str, x: Ref, y: Ref, shape: Sequence[int], n: GraphNode, label: str) -> Ref:
        if isinstance(x, CRef) and isinstance(y, CRef):
            raise self.refuse(n, "both operands are numbers")
        return self.add(op, [x, y], shape, n, label)

    def batch_norm(self, n: GraphNode, a: Mapping[str, Any]) -> Ref:
        training = self.literal(a.get("training", False))
        rm, rv = a.get("running_mean"), a.get("running_var")
        x = self.tensor(a.get("input"), n)
        shape = self.shape_of(x)
        if len(shape) < 2:
            raise self.refuse(n, "batch_norm input needs a channel dim")
        eps = self.scalar(a.get("eps", 1e-5), n, "eps")

        def chan(v: Any, what: str) -> Ref:
            r = self.tensor(v, n, what)
            if isinstance(r, XRef):
                return XRef(r.key, 1)
            return XRef(("prim", str(r.id)), 1)

        if training or rm is None or rv is None:
            return self.batch_norm_train(n, a, x, shape, eps, chan)

        mean, var = chan(rm, "running_mean"), chan(rv, "running_var")
        d = self.add("sub", [x, mean], shape, n, "batch_norm")
        ve = self.add("add", [var, eps], shape, n, "batch_norm")
        inv = self.add("rsqrt", [ve], shape, n, "batch_norm")
        y: Ref = self.add("mul", [d, inv], shape, n, "batch_norm")
        if a.get("weight") is not None:
            y = self.add("mul", [y, chan(a["weight"], "weight")], shape, n, "batch_norm")
        if a.get("bias") is not None:
            y = self.add("add", [y, chan(a["bias"], "bias")], shape, n, "batch_norm")
        return y

    def batch_norm_train(self, n: GraphNode, a: Mapping[str, Any], x: Ref, shape: tuple[int, ...],
                         eps: CRef, chan: Any) -> Ref:
        """Batch norm with the batch's statistics (training mode): per channel over the
        batch and spatial dims (a column reduction of ``[N, C]``), the biased variance (two passes) normalises; the running
        buffers, when given, are updated in place as ATen does: ``r + m * (stat - r)`` with
        the mean and the unbiased variance (``m`` the momentum; ``momentum=None``, a
        cumulative average over ``num_batches_tracked``, is refused)."""
        rm, rv = a.get("running_mean"), a.get("running_var")
        update = rm is not None and rv is not None
        mom = a.get("momentum", 0.1)
        if update and self.literal(mom) is None:
            raise self.refuse(n, "batch_norm with momentum=None (a cumulative average over num_batches_tracked) "
                                 "is not supported; a number is")
        t = "batch_norm"
        # [N, C]: a column reduction over dim 0 (coalesced: a warp reads 32 channels);
        # [N, C, *S]: one row per channel.
        rows = RowSpec("dims", 0, 1) if len(shape) == 2 else RowSpec("channels")
        mean, var, d = self.moments(x, rows.start, rows.stop, True, n, t, rows=rows)
        assert mean is not None and d is not None
        red = self.prims[var.id].shape
        ve = self.add("add", [var, eps], red, n, t)
        rstd = self.add("rsqrt", [ve], red, n, t)
        y: Ref = self.add("mul", [d, PRef(rstd.id, row=True)], shape, n, t)
        if a.get("weight") is not None:
            y = self.add("mul", [y, chan(a["weight"], "weight")], shape, n, t)
        if a.get("bias") is not None:
            y = self.add("add", [y, chan(a["bias"], "bias")], shape, n, t)
        if update:
            m = self.scalar(mom, n, "momentum")
            unbiased = self.add("div", [self.add("mul", [var, RowLen()], red, n, t), RowLen(1.0)], red, n, t)
            for buf, stat in ((rm, mean), (rv, unbiased)):
                r = self.tensor(buf, n, "running statistics")
                if not isinstance(r, XRef) or r.key[0] != "attr":
                    raise self.refuse(n, "running statistics that are not a buffer of the module")
                if r.key[1] in self.writes.values():
                    # A second update would read the buffer before the first one's write
                    # when both land in one kernel (found by an attack pass: self.bn(self.bn(x))).
                    raise self.refuse(n, f"{r.key[1]} is updated twice in one forward (the same batch norm "
                                         "used twice in training mode)")
                diff = self.add("sub", [stat, XRef(r.key, 1)], red, n, t)
                step = self.add("mul", [diff, m], red, n, t)
                new = self.add("add", [step, XRef(r.key, 1)], red, n, t)
                self.writes[new.id] = r.key[1]
                owner, _, leaf = r.key[1].rpartition(".")
                if buf is rm and leaf == "running_mean" and (n.source or "").startswith("nn."):
                    self.batch_counts[new.id] = owner  # the module's forward counts the batch
        return y

    # -- reductions -------------------------------------------------------------------

    def reduction(self, n: GraphNode) -> Ref | None:
        t = n.target
        if t not in REDUCTION_TARGETS:
            return None
        a = _bind(n)
        if t == "triplet_margin_loss":
            return self.triplet_margin_loss(n, a)
        if t == "cross_entropy":
            return self.cross_entropy(n, a)
        x = self.tensor(a.get("input"), n)
        shape = self.shape_of(x)
        rank = len(shape)
        if rank == 0:
            raise self.refuse(n, "a reduction of a 0-d tensor")
        dtype = a.get("dtype")
        if isinstance(dtype, dict) and dtype.get("dtype") not in (None, "float32"):
            raise self.refuse(n, f"dtype={dtype.get('dtype')}")
        keep = bool(self.literal(a.get("keepdim", False)))
        out_shape = n.shape or ()
        if t in ("argmax", "argmin"):
            # The index along dim of the first largest (smallest) element, NaN counting as the
            # largest (smallest), as PyTorch; dim=None: the index into the flattened tensor.
            d = self.literal(a.get("dim"))
            start, stop = self.dims(d, rank, n)
            if d is not None and stop - start != 1:
                raise self.refuse(n, f"{t} over several dims")
            return self.reduce("red_" + t, x, start, stop, keep, n, t)
        if t in ("sum", "mean", "amax", "amin", "max", "min"):
            if t in ("max", "min") and a.get("other") is not None:
                return self._binary("maximum" if t == "max" else "minimum", x, self.operand(a["other"], n), out_shape, n,
                                    self.label_binary(t, [a.get("input"), a["other"]]))
            start, stop = self.dims(a.get("dim"), rank, n)
            op = {"sum": "red_sum", "mean": "red_sum", "amax": "red_max", "max": "red_max"}.get(t, "red_min")
            r = self.reduce(op, x, start, stop, keep, n, t)
            if t == "mean":
                return self.add("div", [r, RowLen()], self.prims[r.id].shape, n, t)
            return r
        if t in ("softmax", "log_softmax", "logsumexp"):
            d = a.get("dim")
            if d is None:
                raise self.refuse(n, f"{t} without dim")
            start, stop = self.dims(d, rank, n)
            if t != "logsumexp" and stop - start != 1:
                raise self.refuse(n, f"{t} over several dims")
            m = self.reduce("red_max", x, start, stop, True, n, t)
            if t == "logsumexp":
                # PyTorch shifts by an infinite max as by 0: a row holding +inf gives inf, a
                # row of -inf gives -inf (softmax and log_softmax do not: NaN there)
                sh = self.reduce("red_lse", x, start, stop, keep, n, t) if self.one_pass else None
                if sh is not None:  # the online sum is relative to the max itself
                    return self.add("lse_finish", [sh, m], self.prims[sh.id].shape, n, t)
                m = self.add("inf_to_zero", [m], self.prims[m.id].shape, n, t)
            mr = PRef(m.id, row=True)
            dx = self.add("sub", [x, mr], shape, n, t)
            e = self.add("exp", [dx], shape, n, t)
            skeep = True if t != "logsumexp" else keep
            if self.one_pass and t != "logsumexp":  # the online softmax's (max, sum) pairs, on the max's level
                s = self.reduce("red_lse", x, start, stop, skeep, n, t)
            else:  # the max, then the sum of exp(x - max): the row read twice
                s = self.reduce("red_sum", e, start, stop, skeep, n, t)
            if t == "softmax":
                return self.add("div", [e, PRef(s.id, row=True)], shape, n, t)
            if t == "log_softmax":
                ls = self.add("log", [s], self.prims[s.id].shape, n, t)
                return self.add("sub", [dx, PRef(ls.id, row=True)], shape, n, t)
            ls = self.add("log", [s], self.prims[s.id].shape, n, t)
            return self.add("add", [ls, m], self.prims[s.id].shape, n, t)
        if t in ("var", "std"):
            start, stop = self.dims(a.get("dim"), rank, n)
            corr = a.get("correction")
            if corr is None:
                unb = self.literal(a.get("unbiased", True))
                corr_v = 1.0 if unb in (True, None) else 0.0
            else:
                corr_v = _number(self.literal(corr))
                if corr_v is None:
                    raise self.refuse(n, "correction must be a number")
            _, v, _ = self.moments(x, start, stop, keep, n, t, corr=corr_v, mean=False)
            if t == "std":
                return self.add("sqrt", [v], self.prims[v.id].shape, n, t)
            return v
        if t in ("layer_norm", "rms_norm"):
            ns = self.literal(a.get("normalized_shape"))
            k = len(ns) if isinstance(ns, list) else 1
            if k < 1 or k > rank:
                raise self.refuse(n, f"normalized_shape {ns!r} for a {rank}-d input")
            start, stop = rank - k, rank
            eps_a = a.get("eps", 1e-5 if t == "layer_norm" else None)
            eps = CRef(value=1.1920928955078125e-07) if eps_a is None else self.scalar(eps_a, n, "eps")
            if t == "layer_norm":
                _, var, d = self.moments(x, start, stop, True, n, t)
                assert d is not None
                ve = self.add("add", [var, eps], self.prims[var.id].shape, n, t)
                rstd = self.add("rsqrt", [ve], self.prims[var.id].shape, n, t)
                y: Ref = self.add("mul", [d, PRef(rstd.id, row=True)], shape, n, t)
            else:
                sq = self.add("square", [x], shape, n, t)
                ss = self.reduce("red_sum", sq, start, stop, True, n, t)
                ms = self.add("div", [ss, RowLen()], self.prims[ss.id].shape, n, t)
                ve = self.add("add", [ms, eps], self.prims[ss.id].shape, n, t)
                rstd = self.add("rsqrt", [ve], self.prims[ss.id].shape, n, t)
                y = self.add("mul", [x, PRef(rstd.id, row=True)], shape, n, t)
            w = a.get("weight")
            if w is not None:
                y = self.add("mul", [y, self._vec(w, n, None)], shape, n, t)
            b = a.get("bias") if t == "layer_norm" else None
            if b is not None:
                y = self.add("add", [y, self._vec(b, n, None)], shape, n, t)
            return y
        if t in ("group_norm", "instance_norm"):
            if t == "instance_norm":  # group norm with one group per channel
                if not self.literal(a.get("use_input_stats", True)):
                    raise self.refuse(n, "instance_norm with running statistics (eval, track_running_stats) "
                                         "is not supported; with the instance's own statistics it is")
                if rank < 3:
                    raise self.refuse(n, "instance_norm needs [N, C, ...] with spatial dims")
                G, src = int(shape[1]), ("dim", "1")  # C, read from the kernel's shape
            else:
                G, src = self.num_groups(a.get("num_groups"), shape, n)
            if rank < 2 or shape[1] % G:
                raise self.refuse(n, "group_norm needs [N, C, ...] with C a multiple of num_groups")
            eps = self.scalar(a.get("eps", 1e-5), n, "eps")
            rows = RowSpec("groups", groups=G, groups_ref=src)
            _, var, d = self.moments(x, 0, 0, True, n, t, rows=rows)
            assert d is not None
            ve = self.add("add", [var, eps], self.prims[var.id].shape, n, t)
            rstd = self.add("rsqrt", [ve], self.prims[var.id].shape, n, t)
            y = self.add("mul", [d, PRef(rstd.id, row=True)], shape, n, t)
            if a.get("weight") is not None:
                y = self.add("mul", [y, self._vec(a["weight"], n, 1)], shape, n, t)
            if a.get("bias") is not None:
                y = self.add("add", [y, self._vec(a["bias"], n, 1)], shape, n, t)
            return y
        if t in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div"):
            return self.loss(n, a, x)
        if t in ("norm", "vector_norm"):  # torch.norm, Tensor.norm, torch.linalg.vector_norm
            raw_p = self.literal(a.get("p", "fro") if t == "norm" else a.get("ord", 2))
            p = 2.0 if raw_p in ("fro", None) else _number(raw_p)
            if p not in (1.0, 2.0, math.inf, -math.inf):
                raise self.refuse(n, f"{t} with p={raw_p!r}; p = 1, 2, 'fro', inf and -inf are supported")
            start, stop = self.dims(a.get("dim"), rank, n)
            return self.vector_norm(x, p, start, stop, keep, n)
        if t == "normalize":  # x / max(||x||_p over dim, eps)
            p = _number(self.literal(a.get("p", 2.0)))
            if p not in (1.0, 2.0, math.inf):
                raise self.refuse(n, f"normalize with p={p}; p = 1, 2 and inf are supported")
            start, stop = self.dims(a.get("dim", 1), rank, n)
            eps = self.scalar(a.get("eps", 1e-12), n, "eps")
            nr = self.vector_norm(x, p, start, stop, True, n)
            cl = self.add("clamp", [nr, eps, CRef(value=math.inf)], self.prims[nr.id].shape, n, t)
            return self.add("div", [x, PRef(cl.id, row=True)], shape, n, t)
        return None

    def _vec(self, a: Any, n: GraphNode, at: int | None) -> Ref:
        r = self.tensor(a, n, "affine parameter")
        if isinstance(r, XRef):
            return XRef(r.key, at)
        if at is None:
            return r
        return XRef(("prim", str(r.id)), at)


def _refs_in(obj: Any) -> list[str]:
    out: list[str] = []
    if isinstance(obj, dict):
        if "node" in obj and isinstance(obj["node"], str) and len(obj) == 1:
            out.append(obj["node"])
        else:
            for v in obj.values():
                out += _refs_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            out += _refs_in(v)
    return out


# ---------------------------------------------------------------------------------------
# Grouping
# ---------------------------------------------------------------------------------------


@dataclass
class _Group:
    gid: int
    domain: tuple[int, ...]
    rows: RowSpec | None = None
    members: list[int] = field(default_factory=list)
    dom: dict[int, str] = field(default_factory=dict)  # prim id -> "full" | "reduced"
    scan: bool = False  # holds a scan: elementwise members only, besides it

    @property
    def whole(self) -> bool:
        """Its rows are the whole tensor (``x.sum()``, ``mse_loss``): one row, which the
        kernel spreads over many blocks; nothing per element may follow its reductions."""
        return (self.rows is not None and self.rows.kind == "dims" and self.rows.start == 0
                and self.rows.stop == len(self.domain) and not self.scan)

    def reduced_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(keepdim form, squeezed form) of the reduced domain."""
        if self.rows is None:
            return None
        if self.rows.kind == "groups":
            s = (self.domain[0], self.rows.groups)
            return s, s
        if self.rows.kind == "channels":
            return tuple(d if i == 1 else 1 for i, d in enumerate(self.domain)), (self.domain[1],)
        a, b = self.rows.start, self.rows.stop
        keep = tuple(1 if a <= i < b else d for i, d in enumerate(self.domain))
        sq = tuple(d for i, d in enumerate(self.domain) if not a <= i < b)
        return keep, sq


class _Grouper:
    def __init__(self, planner: _Planner):
        self.pl = planner
        self.prims = planner.prims
        self.groups: dict[int, _Group] = {}
        self._next_gid = 0
        self.group_of: dict[int, int] = {}
        self._node_anc: dict[str, frozenset[int]] = {}
        self.anc: dict[int, frozenset[int]] = {}
        for p in self.prims:
            s: set[int] = set()
            for r in p.ins:
                s |= self._ref_anc(r)
            self.anc[p.id] = frozenset(s)

    # -- ancestry ---------------------------------------------------------------------

    def _ref_anc(self, r: Ref) -> set[int]:
        if isinstance(r, PRef):
            return {r.id} | set(self.anc[r.id])
        if isinstance(r, XRef):
            kind, name = r.key
            if kind == "prim":
                i = int(name)
                return {i} | set(self.anc[i])
            if kind == "node":
                return set(self.node_anc(name))
        return set()

    def node_anc(self, name: str) -> frozenset[int]:
        if name in self._node_anc:
            return self._node_anc[name]
        n = self.pl.nodes[name]
        s: set[int] = set()
        for ref in _refs_in([n.args, dict(n.kwargs)]):
            if ref not in self.pl.nodes:
                continue
            v = self.pl.values.get(ref)
            if isinstance(v, PRef):
                s |= {v.id} | set(self.anc[v.id])
            elif isinstance(v, XRef) and v.key[0] == "prim":
                i = int(v.key[1])
                s |= {i} | set(self.anc[i])
            else:
                s |= set(self.node_anc(ref))
        self._node_anc[name] = frozenset(s)
        return self._node_anc[name]

    def legal(self, members: Iterable[int]) -> bool:
        """No input of the set depends on the set through something outside it."""
        u = set(members)
        for pid in u:
            pool = self.prims[pid].op == "pool"
            for r in self.prims[pid].ins:
                if isinstance(r, PRef):
                    if r.id in u:
                        if pool:  # a pooled input is read from memory
                            return False
                        continue
                    if self.anc[r.id] & u:
                        return False
                elif isinstance(r, XRef):
                    kind, name = r.key
                    if kind == "prim":
                        i = int(name)
                        if i in u or self.anc[i] & u:
                            return False
                    elif kind == "node" and self.node_anc(name) & u:
                        return False
        return True

    # -- placement --------------------------------------------------------------------

    def new_group(self, domain: Sequence[int], rows: RowSpec | None = None) -> _Group:
        g = _Group(self._next_gid, tuple(domain), rows)
        self._next_gid += 1
        self.groups[g.gid] = g
        return g

    def put(self, g: _Group, pid: int, role: str) -> None:
        g.members.append(pid)
        g.dom[pid] = role
        self.group_of[pid] = g.gid

    def merge(self, keep: _Group, other: _Group) -> None:
        for pid in other.members:
            keep.members.append(pid)
            keep.dom[pid] = other.dom[pid]
            self.group_of[pid] = keep.gid
        if keep.rows is None:
            keep.rows = other.rows
        keep.scan = keep.scan or other.scan
        keep.members.sort()
        del self.groups[other.gid]

    def run(self) -> None:
        for p in self.prims:
            if p.is_reduction:
                self.place_reduction(p)
            elif p.is_scan:
                self.place_scan(p)
            else:
                self.place_elementwise(p)

    def place_scan(self, p: Prim) -> None:
        """A scan joins its input's group when that is elementwise over the same shape (its
        prologue: ``cumsum(x * mask)``), else starts a group; one scan per group."""
        x = p.ins[0]
        if isinstance(x, PRef) and x.id in self.group_of:
            g = self.groups[self.group_of[x.id]]
            if (g.rows is None and g.domain == tuple(p.shape) and g.dom.get(x.id) == "full"
                    and not any(self.prims[m].op == "pool" for m in g.members)
                    and self.legal(g.members + [p.id])):
                g.rows, g.scan = p.rows, True
                self.put(g, p.id, "full")
                return
        g = self.new_group(p.shape, p.rows)
        g.scan = True
        self.put(g, p.id, "full")

    def place_reduction(self, p: Prim) -> None:
        x = p.ins[0]
        S = p.in_shape or ()
        if isinstance(x, PRef) and x.id in self.group_of:
            g = self.groups[self.group_of[x.id]]
            if (
                not g.scan
                and g.dom.get(x.id) == "full"
                and g.domain == S
                and (g.rows is None or g.rows == p.rows)
                and self.legal(g.members + [p.id])
            ):
                if g.rows is None:
                    g.rows = p.rows
                self.put(g, p.id, "reduced")
                return
        # A sibling: a group reducing the same tensor the same way (x.max(-1), x.sum(-1)).
        for g in list(self.groups.values()):
            if g.domain != S or g.rows != p.rows or g.scan:
                continue
            same = any(
                self.prims[m].is_reduction and self.prims[m].ins[0] == x for m in g.members
            )
            if same and self.legal(g.members + [p.id]):
                self.put(g, p.id, "reduced")
                return
        g = self.new_group(S, p.rows)
        self.put(g, p.id, "reduced")

    def _role(self, g: _Group, p: Prim) -> str | None:
        T = p.shape
        ins = [r for r in p.ins if isinstance(r, PRef) and self.group_of.get(r.id) == g.gid]
        if T == g.domain:
            ok = True
            red = g.reduced_shapes()
            for r in ins:
                if g.dom[r.id] == "full":
                    continue
                q = self.prims[r.id]
                if red is not None and (r.row or (len(q.shape) == len(T) and q.shape == red[0])) and not g.whole:
                    continue
                ok = False  # (a whole-tensor reduction's value is read by the next kernel)
            if ok:
                return "full"
        red = g.reduced_shapes()
        if red is not None and T in red and all(g.dom[r.id] == "reduced" for r in ins):
            # Group norm's statistics are internal: only its own decomposition reads them.
            if g.rows is not None and g.rows.kind == "groups" and any(self.prims[r.id].origin != p.origin for r in ins):
                return None
            return "reduced"
        return None

    def place_elementwise(self, p: Prim) -> None:
        if p.op == "pool":  # reads its input through windows: from memory, in a new kernel
            self.put(self.new_group(p.shape), p.id, "full")
            return
        cands: list[_Group] = []
        for r in p.ins:
            if isinstance(r, PRef) and r.id in self.group_of:
                g = self.groups[self.group_of[r.id]]
                if g not in cands:
                    cands.append(g)

        def reads_rows(g: _Group) -> bool:
            return any(
                isinstance(r, PRef) and self.group_of.get(r.id) == g.gid and g.dom[r.id] == "reduced"
                for r in p.ins
            )

        for role in ("full", "reduced"):
            fits = [g for g in cands if self._role(g, p) == role]
            # Groups whose per-row values p reads come first: those values exist only there.
            fits.sort(key=lambda g: (not reads_rows(g), g.gid))
            for base in fits:
                chosen = [base]
                for g in fits:
                    if g is base:
                        continue
                    if (g.scan or base.scan) and (g.scan == base.scan or (g if base.scan else base).rows is not None
                                                  or any(self.prims[m].op == "pool" for m in g.members + base.members)):
                        continue  # a scan's kernel takes elementwise members only, and one scan
                    rows = [c.rows for c in chosen if c.rows is not None]
                    if g.domain == base.domain and (g.rows is None or all(r == g.rows for r in rows)):
                        chosen.append(g)
                members = [m for g in chosen for m in g.members] + [p.id]
                if not self.legal(members):
                    chosen = [base]
                    if not self.legal(base.members + [p.id]):
                        continue
                for g in chosen[1:]:
                    self.merge(base, g)
                self.put(base, p.id, role)
                return
        g = self.new_group(p.shape)
        self.put(g, p.id, "full")


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def plan_fusion(graph: Graph, one_pass: bool = False) -> FusionPlan:
    """Plan the fused kernels of a traced forward.

    Args:
        graph: the :class:`~.trace.Graph` from :func:`~.trace.trace_problem`.
        one_pass: variances (batch, layer, group and instance norm, ``var``/``std``) as
            ``red_var``, on the level of their mean's sum (the row read once for the
            statistics), instead of a second level over the centred squares; softmax,
            log_softmax and logsumexp's sum of ``exp(x - max)`` as ``red_lse`` on the max's
            level (the online softmax: (max, sum) pairs, rescaled where the max grows)
            instead of a second level after the max.

    Returns:
        The :class:`FusionPlan` (possibly with no kernels: the caller decides whether that
        is a refusal).

    Raises:
        PolicyRefusal: an operation the planner cannot port (message names it, the node and
            why), a non-float32 tensor, a plain tensor attribute, dropout in training mode,
            batch norm with momentum=None, a reduction over non-adjacent dims.
    """
    pl = _Planner(graph, one_pass=one_pass)
    pl.run()
    for name in _refs_in(graph.outputs):
        v = pl.values.get(name)
        if not isinstance(v, (PRef, XRef)):
            raise pl.refuse(pl.nodes[name], "forward returns it, and it is not a tensor")
    # Forward outputs that are inputs or parameters unchanged get a copy kernel (returning
    # an input itself would alias it).
    out_names = _refs_in(graph.outputs)
    for name in out_names:
        v = pl.values.get(name)
        if isinstance(v, XRef) and pl.units.get(name) in ("input", "attr", "alias") and v.key[0] in ("node", "attr"):
            src = pl.nodes[name]
            if v.key[0] == "attr" or pl.units.get(v.key[1]) == "input":
                pl.values[name] = pl.add("id", [v], pl.shape_of(v), src, "copy")
    gr = _Grouper(pl)
    gr.run()

    # Which prims are needed outside their group?
    needed: dict[int, set[str]] = {}

    def need(pid: int, why: str) -> None:
        needed.setdefault(pid, set()).add(why)

    for p in pl.prims:
        for r in p.ins:
            if isinstance(r, PRef) and gr.group_of[r.id] != gr.group_of[p.id]:
                need(r.id, "kernel")
            if isinstance(r, XRef) and r.key[0] == "prim":
                need(int(r.key[1]), "kernel")
    used_nodes = _live_nodes(pl, graph)
    for name, unit in pl.units.items():
        if unit in ("lib", "view", "py") and name in used_nodes:
            n = pl.nodes[name]
            for ref in _refs_in([n.args, dict(n.kwargs)]):
                v = pl.values.get(ref)
                if isinstance(v, PRef):
                    need(v.id, "pytorch")
    for name in out_names:
        v = pl.values.get(name)
        if isinstance(v, PRef):
            need(v.id, "output")
    for pid in pl.writes:
        need(pid, "buffer")

    # Prims read from another group are leaves there (XRef("prim")).
    for p in pl.prims:
        p.ins = [
            XRef(("prim", str(r.id))) if isinstance(r, PRef) and gr.group_of[r.id] != gr.group_of[p.id] else r
            for r in p.ins
        ]

    kernels: list[FusedKernel] = []
    ordered = sorted(gr.groups.values(), key=lambda g: max(g.members))
    for g in ordered:
        outs = [pid for pid in sorted(g.members) if pid in needed]
        if not outs:
            continue
        kernels.append(_make_kernel(len(kernels), g, outs, pl))
    views = [name for name, unit in pl.units.items() if unit in ("view", "py") and name in used_nodes]
    left = [l for l in pl.left if l.node in used_nodes]
    plan = FusionPlan(
        graph=graph,
        prims=pl.prims,
        kernels=kernels,
        left=left,
        views=views,
        values=dict(pl.values),
        peeled=dict(pl.peeled),
        writes=dict(pl.writes),
        schedule=[],
        outputs=graph.outputs,
    )
    plan.schedule = _schedule(plan, pl, used_nodes)
    # Number the kernels in execution order (k0 runs first).
    order = [what for kind, what in plan.schedule if kind == "kernel"]
    renum = {old: new for new, old in enumerate(order)}
    for k in plan.kernels:
        k.name = f"k{renum[k.index]}_{k.name.split('_', 1)[1]}"
        k.index = renum[k.index]
    plan.kernels.sort(key=lambda k: k.index)
    plan.schedule = [(kind, renum[what] if kind == "kernel" else what) for kind, what in plan.schedule]
    return plan


def _live_nodes(pl: _Planner, graph: Graph) -> set[str]:
    """Graph nodes whose values the outputs need (through PyTorch work or kernels)."""
    live: set[str] = set()
    stack = list(_refs_in(graph.outputs))

    def prim_nodes(pid: int, seen: set[int]) -> list[str]:
        out: list[str] = []
        todo = [pid]
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            rows = pl.prims[i].rows
            if rows is not None and rows.groups_ref is not None and rows.groups_ref[0] == "node":
                out.append(rows.groups_ref[1])
            for r in pl.prims[i].ins:
                if isinstance(r, PRef):
                    todo.append(r.id)
                elif isinstance(r, XRef):
                    if r.key[0] == "node":
                        out.append(r.key[1])
                    elif r.key[0] == "prim":
                        todo.append(int(r.key[1]))
                elif isinstance(r, CRef) and r.var is not None:
                    out.append(r.var)
        return out

    seen_prims: set[int] = set()
    while stack:
        name = stack.pop()
        if name in live or name not in pl.nodes:
            continue
        live.add(name)
        v = pl.values.get(name)
        unit = pl.units.get(name)
        if isinstance(v, PRef):
            stack += prim_nodes(v.id, seen_prims)
            if name in pl.peeled:
                n = pl.nodes[name]
                stack += _refs_in([n.args, dict(n.kwargs)])
        elif isinstance(v, XRef) and v.key[0] == "node" and v.key[1] != name:
            stack.append(v.key[1])
        elif unit in ("lib", "view", "py", "alias", "tuple"):
            n = pl.nodes[name]
            stack += _refs_in([n.args, dict(n.kwargs)])
        elif isinstance(v, XRef) and v.key[0] == "prim":
            stack += prim_nodes(int(v.key[1]), seen_prims)
    return live


def _make_kernel(index: int, g: _Group, outs: list[int], pl: _Planner) -> FusedKernel:
    members = sorted(g.members)
    mset = set(members)
    prims = [pl.prims[i] for i in members]
    levels: dict[int, int] = {}
    for p in prims:
        lv = 0
        for r in p.ins:
            if isinstance(r, PRef) and r.id in mset:
                lv = max(lv, levels[r.id])
        levels[p.id] = lv + 1 if p.is_reduction else lv
    leaves: list[Leaf] = []
    consts: list[CRef] = []
    seen: set[tuple[Any, ...]] = set()
    red = g.reduced_shapes()
    for p in prims:
        dom = "reduced" if (g.dom[p.id] == "reduced" and not p.is_reduction) else "full"
        for r in p.ins:
            if isinstance(r, XRef):
                if p.op == "pool":
                    leaves.append(Leaf(r, "pool", False, tuple(pl.shape_of(r)), pool=p.id))
                    continue
                key = (r.key, r.at, dom)
                if key in seen:
                    continue
                seen.add(key)
                shape = pl.shape_of(r)
                target = g.domain if dom == "full" else (red[0] if red else g.domain)
                keep = dom != "reduced" or len(p.shape) == len(g.domain)
                if not keep:  # an operand of a reduced value without its reduced dims
                    target = tuple(p.shape)
                full = r.at is None and tuple(shape) == tuple(target)
                leaves.append(Leaf(r, dom, full, tuple(shape), keep=keep, dtype=pl.dtype_of(r)))
            elif isinstance(r, CRef) and r not in consts:
                consts.append(r)
    nodes: list[str] = []
    for p in prims:
        if p.origin not in nodes:
            nodes.append(p.origin)
    labels = _dedupe_labels(prims)
    after: list[str] = []
    for lf in leaves:
        kind, name = lf.ref.key
        if kind == "node" and pl.units.get(name) == "lib":
            t = pl.nodes[name].target
            if t not in after:
                after.append(t)
    kind = "scan" if g.scan else "reduction" if g.rows is not None else "elementwise"
    first = labels[-1] if labels else "fused"
    main = next((p.label for p in prims if p.is_reduction or p.is_scan), first)
    cname = "".join(ch if ch.isalnum() else "_" for ch in main.split(" ")[0].split("(")[0])
    return FusedKernel(
        index=index,
        name=f"k{index}_{cname}",
        kind=kind,
        prims=prims,
        domain=g.domain,
        rows=g.rows,
        leaves=leaves,
        consts=consts,
        outputs=[(pid, "reduced" if g.dom[pid] == "reduced" else "full") for pid in outs],
        levels=levels,
        labels=labels,
        after=after,
        nodes=nodes,
        roles={pid: g.dom[pid] for pid in members},
        writes={pid: pl.writes[pid] for pid in outs if pid in pl.writes},
        batch_counts=[pl.batch_counts[pid] for pid in outs if pid in pl.batch_counts],
    )


def _dedupe_labels(prims: list[Prim]) -> list[str]:
    """One label per fused graph node (a decomposed op counts once), in order; the peeled
    bias keeps its own label ahead of its product's consumers."""
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    for p in prims:
        if p.label == "alpha":
            continue
        key = (p.origin, p.label)
        if key in seen:
            continue
        seen.add(key)
        out.append(p.label)
    return out


def _schedule(plan: FusionPlan, pl: _Planner, live: set[str]) -> list[tuple[str, Any]]:
    """Execution order of PyTorch/Python nodes and kernels (a topological order of the
    graph with each kernel contracted, close to forward's own order)."""
    kernel_of: dict[int, int] = {}
    for k in plan.kernels:
        for p in k.prims:
            kernel_of[p.id] = k.index
    units: list[tuple[str, Any]] = []
    deps: dict[tuple[str, Any], set[tuple[str, Any]]] = {}
    node_units = [n.name for n in plan.graph.nodes if n.name in live and pl.units.get(n.name) in ("lib", "view", "py")]

    def value_unit(name: str) -> tuple[str, Any] | None:
        v = pl.values.get(name)
        if isinstance(v, PRef):
            k = kernel_of.get(v.id)
            return ("kernel", k) if k is not None else None
        if isinstance(v, XRef):
            kind, ref = v.key
            if kind == "node" and ref in pl.units and pl.units[ref] in ("lib", "view", "py"):
                return ("node", ref)
            if kind == "node" and ref != name:
                return value_unit(ref)
            if kind == "prim":
                k = kernel_of.get(int(ref))
                return ("kernel", k) if k is not None else None
        if isinstance(v, tuple) and v[0] == "py" and pl.units.get(name) == "py":
            return ("node", name)
        return None

    for name in node_units:
        u = ("node", name)
        units.append(u)
        n = pl.nodes[name]
        d: set[tuple[str, Any]] = set()
        for ref in _refs_in([n.args, dict(n.kwargs)]):
            if pl.units.get(ref) == "const":
                raise pl.refuse(n, f"it reads '{ref}', a 0-d tensor made from a number (only fused "
                                   "elementwise arithmetic can read one)")
            vu = value_unit(ref)
            if vu is not None and vu != u:
                d.add(vu)
        deps[u] = d
    for k in plan.kernels:
        u = ("kernel", k.index)
        units.append(u)
        d = set()
        for lf in k.leaves:
            kind, ref = lf.ref.key
            if kind == "node":
                vu = ("node", ref) if pl.units.get(ref) in ("lib", "view", "py") else value_unit(ref)
                if vu is not None:
                    d.add(vu)
            elif kind == "prim":
                kk = kernel_of.get(int(ref))
                if kk is not None:
                    d.add(("kernel", kk))
        for c in k.consts:
            if c.var is not None and pl.units.get(c.var) == "py":
                d.add(("node", c.var))
        ref = k.rows.groups_ref if k.rows is not None else None
        if ref is not None and ref[0] == "node" and pl.units.get(ref[1]) == "py":
            d.add(("node", ref[1]))
        d.discard(u)
        deps[u] = d
    # Order: Kahn's algorithm, preferring the unit whose first graph position is earliest.
    pos: dict[tuple[str, Any], int] = {}
    index = {n.name: i for i, n in enumerate(plan.graph.nodes)}
    for u in units:
        if u[0] == "node":
            pos[u] = index[u[1]]
        else:
            k = plan.kernels[u[1]]
            pos[u] = max(index.get(nm, 0) for nm in k.nodes)
    done: list[tuple[str, Any]] = []
    left = set(units)
    while left:
        ready = [u for u in left if deps[u] <= set(done)]
        if not ready:  # pragma: no cover - grouping keeps the contracted graph acyclic
            raise PolicyRefusal("internal error: the fused kernels depend on each other in a cycle")
        u = min(ready, key=lambda x: (pos[x], x[0] != "node"))
        done.append(u)
        left.discard(u)
    return done
