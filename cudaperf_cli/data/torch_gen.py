"""Generated PyTorch problems (KernelBench format) for ``cudaperf data generate --kind torch``.

:func:`generate_torch` draws one problem of a family from that family's grammar with a
``random.Random`` and returns a :class:`~cudaperf_cli.data.spec.GeneratedProblem`: the
file's text (a module docstring, ``import torch``, ``import torch.nn as nn``, maybe
``import torch.nn.functional as F``, module-level int constants for the shapes,
``class Model(nn.Module)``, ``get_inputs()``, ``get_init_inputs()``), its knobs, three
input configurations (``small_odd``, ``main`` = the file's constants, ``large``) and a
structure key.  It writes and runs nothing; :func:`is_degenerate` runs a draw (in the
dataset builder's bounded worker) to reject problems whose output does not depend on the
input.  Everything is float32.

Shared pieces of the grammar:

* **Elementwise ops** (``_UNARY``, ``_PARAM``, ``_OPERANDS``): relu, gelu (exact, tanh),
  silu, tanh, sigmoid, softplus, mish, hardswish, hardsigmoid, selu, softsign,
  logsigmoid, erf, relu6, sin, neg, abs, square, exp(-|x|), log1p(|x|); with a number:
  ``* c``, ``+ c``, ``/ c``, ``c - x``, clamp, clamp(min), hardtanh, leaky_relu, elu,
  softplus(beta); with an operand: ``+ y`` / ``* y`` (a second input of the same shape),
  ``+ self.bias`` / ``* self.scale`` (a parameter per last dim or per channel).  A chain
  is drawn op by op; a rough interval of the values (randn inputs: [-3, 3]) is carried
  along so that clamp/hardtanh bounds fall inside it and no op collapses the values to a
  constant or sends them past 1e3 (an op that would is not drawn).  Values whose spread
  changes with the sizes (after a softmax, a reduction, a running or global extreme) get
  no saturating op after them (``EW_NONSAT``; after sums and norms no op that flattens
  for large inputs either, ``EW_GROWTH``), and extremes over many values only monotone ops
  before them (``EW_MONOTONE``): a clamp drawn for the small sizes would otherwise make
  every output equal at the main ones.
* **Sizes**: every dimension is a module-level constant (``batch_size``, ``dim``,
  ``seq_len``, ``channels``, ``height``, ``width``, ``in_features``...); kernel sizes,
  strides, groups and numbers are literals.  ``main`` has an input+output(+parameter)
  footprint of 8-64 MiB and at most 2 GFLOP, ``large`` 256 MiB-1 GiB and at most 2e10 FLOP
  (``batch_size`` is solved for a footprint drawn log-uniformly in the range, the other
  dims drawn from per-family lists), ``small_odd`` has every size odd and at most ~1e5
  elements in all.  Channel counts are multiples of the (odd) group count and window
  lengths multiples of the (odd) window in every configuration.

The families (each is the split key):

* ``elementwise_chain``: a 2-, 3- or 4-D input, 2-6 elementwise ops (operands included).
* ``gemm_tail``: a head -- ``nn.Linear`` (2-D or 3-D input, with or without bias),
  ``F.linear`` with parameters, ``x @ weight``, ``torch.matmul`` / ``torch.bmm`` of two
  inputs -- then 1-4 elementwise ops (bias, scale, residual, activations) and maybe a
  last-dim softmax / log_softmax / layer_norm / RMS norm / sum / mean / amax / logsumexp.
* ``conv_tail``: ``nn.Conv1d`` / ``nn.Conv2d`` (kernel 1-7, stride 1 or 2, valid or same
  padding, bias or not, dense or depthwise), then 1-4 elementwise ops (per-channel bias /
  scale included) and maybe a channel softmax / logsumexp / amax or a spatial mean / sum.
* ``softmax_family``: softmax, log_softmax or logsumexp over a dim (last, middle, first,
  or a range for logsumexp) of a 2/3/4-D input; a temperature (``* c`` or ``/ c``) or none,
  0-2 elementwise ops before and after; softmax may be followed by the expectation
  ``(p * z).sum(dim)`` or the top probability ``amax(dim)``.
* ``norm``: nn.LayerNorm, F.layer_norm without affine, layer norm over the last two dims,
  RMS norm written out (weight or not), F.rms_norm, F.normalize (p = 2 over the last or
  the channel dim; p = 1), nn.GroupNorm / F.group_norm, nn.InstanceNorm1d/2d, instance
  norm as ``F.group_norm(x, channels)``, F.batch_norm with running statistics
  (``training=False``), standardisation ``(x - mean) / (std + eps)``; 0-2 elementwise ops
  before (residual add included) and after.
* ``reduction``: sum, mean, amax, amin, var, std (biased or not), vector 2-norm
  (``torch.linalg.vector_norm`` or written out), ``max``/``min`` values, argmax / argmin,
  over one dim, a contiguous range of dims or everything, keepdim or not; 0-3 elementwise
  ops before and 0-2 after; sometimes two reductions combined (``r1 - r2``, ``+``, ``*``).
* ``scan``: cumsum, cumprod of ``1 + 0.01 * tanh(x)`` (finite at every size: the scanned
  length is at most 1024), cummax / cummin values, reverse cumsum (flip), logcumsumexp,
  exclusive cumsum (``cumsum - x``), cumsum as a matmul with an upper-triangular buffer;
  over the last or the middle dim of a 2/3-D input; 0-2 elementwise ops before and after.
* ``loss``: MSE, L1, smooth L1, Huber, BCE with logits, log-cosh, hinge, cross entropy
  (``torch.randint`` targets), soft-target cross entropy, KL divergence (log_softmax
  inputs), cosine distance, cosine embedding, triplet margin, margin ranking; the
  ``F.*_loss`` call or the formula written out (``form``), reduced to a mean, a sum or
  per row; 0-2 elementwise ops on the prediction first.
* ``pool``: max / avg pool 1d / 2d (kernel 2-5, stride = kernel, 1 or 2, padding 0 or
  kernel // 2), LP pool 2d, adaptive avg 1d / 2d and adaptive max 2d (output 1, 2, 4 or 7),
  non-overlapping windows written as ``unflatten`` + ``amax``/``mean``, global spatial
  mean / amax (keepdim or not); 0-2 elementwise ops before, 0-3 after (per-channel bias
  and scale included).

The structure key is the family and the structural knobs (op names, ranks, dims,
keepdim, kernel sizes, forms), never sizes nor numbers (scales, clamp bounds, eps,
margins): two draws with one key are duplicates.

The built-in PyTorch policy (docs/builtin-torch-policy.md) plans the elementwise, GEMM,
conv, softmax, most norm and reduction draws; it refuses, by design, the scans other than
the matmul form, the ``F.*_loss`` / ``F.cross_entropy`` / ``F.cosine_similarity`` forms,
the ``F.*pool*`` calls, argmax/argmin, ``torch.linalg.vector_norm``, nn.InstanceNorm and
p = 1 normalisation: problems left to models.
"""

from __future__ import annotations

import json
import math
import random
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from cudaperf_cli.data.spec import CONFIG_NAMES, GeneratedProblem

__all__ = ["FAMILIES", "generate_torch", "is_degenerate"]

#: The PyTorch families (the split key), visited round-robin by the dataset builder.
FAMILIES = ("elementwise_chain", "gemm_tail", "conv_tail", "softmax_family", "norm", "reduction",
            "scan", "loss", "pool")

MIB = 1 << 20
#: Footprint bounds (bytes of inputs, outputs, parameters, buffers) and FLOP limits.
MAIN_BYTES = (8 * MIB, 64 * MIB)
MAIN_FLOP = 2e9
LARGE_BYTES = (256 * MIB, 1024 * MIB)
LARGE_FLOP = 2e10
#: Most elements (inputs + outputs + parameters) of the ``small_odd`` configuration.
SMALL_ELEMENTS = 100_000

# ---------------------------------------------------------------------------------------
# Elementwise ops and value intervals
# ---------------------------------------------------------------------------------------

Interval = tuple[float, float]
#: Values of a randn input (almost all of them).
RANDN: Interval = (-3.0, 3.0)
#: Largest magnitude a chain may reach; narrowest interval it may shrink to.
_MAX_ABS = 1e3
_MIN_WIDTH = 0.02


def _sig(t: float) -> float:
    return 1.0 / (1.0 + math.exp(-t)) if t >= 0 else math.exp(t) / (1.0 + math.exp(t))


def _softplus(t: float, beta: float = 1.0) -> float:
    return (max(beta * t, 0.0) + math.log1p(math.exp(-abs(beta * t)))) / beta


def _gelu(t: float) -> float:
    return 0.5 * t * (1.0 + math.erf(t / math.sqrt(2.0)))


def _elu(t: float, alpha: float = 1.0) -> float:
    return t if t > 0 else alpha * (math.exp(t) - 1.0)


def _num(x: float) -> str:
    """A number as a Python float literal, 3 significant digits."""
    return repr(float(f"{x:.3g}"))


def _nz(x: float, low: float = 0.05) -> float:
    return x if abs(x) >= low else math.copysign(low, x if x else 1.0)


#: name -> (code with {v}, the map on numbers).
_UNARY: dict[str, tuple[str, Callable[[float], float]]] = {
    "relu": ("torch.relu({v})", lambda t: max(t, 0.0)),
    "gelu": ("F.gelu({v})", _gelu),
    "gelu_tanh": ('F.gelu({v}, approximate="tanh")', _gelu),
    "silu": ("F.silu({v})", lambda t: t * _sig(t)),
    "tanh": ("torch.tanh({v})", math.tanh),
    "sigmoid": ("torch.sigmoid({v})", _sig),
    "softplus": ("F.softplus({v})", _softplus),
    "mish": ("F.mish({v})", lambda t: t * math.tanh(_softplus(t))),
    "hardswish": ("F.hardswish({v})", lambda t: t * min(max(t + 3.0, 0.0), 6.0) / 6.0),
    "hardsigmoid": ("F.hardsigmoid({v})", lambda t: min(max(t / 6.0 + 0.5, 0.0), 1.0)),
    "selu": ("F.selu({v})", lambda t: 1.0507 * _elu(t, 1.67326)),
    "softsign": ("F.softsign({v})", lambda t: t / (1.0 + abs(t))),
    "logsigmoid": ("F.logsigmoid({v})", lambda t: -_softplus(-t)),
    "erf": ("torch.erf({v})", math.erf),
    "relu6": ("F.relu6({v})", lambda t: min(max(t, 0.0), 6.0)),
    "sin": ("torch.sin({v})", math.sin),
    "neg": ("-{v}", lambda t: -t),
    "abs": ("torch.abs({v})", abs),
    "square": ("{v} * {v}", lambda t: t * t),
    "exp_neg_abs": ("torch.exp(-torch.abs({v}))", lambda t: math.exp(-abs(t))),
    "log1p_abs": ("torch.log1p(torch.abs({v}))", lambda t: math.log1p(abs(t))),
}


def _bounds(rng: random.Random, iv: Interval) -> dict[str, float]:
    lo, hi = iv
    w = hi - lo
    return {"a": lo + rng.uniform(0.05, 0.35) * w, "b": hi - rng.uniform(0.05, 0.35) * w}


#: name -> (code with {v} and the parameters, the map, parameter draw from the interval).
_PARAM: dict[str, tuple[str, Callable[..., float], Callable[[random.Random, Interval], dict[str, float]]]] = {
    "mul_scalar": ("{v} * {c}", lambda t, c: t * c,
                   lambda r, iv: {"c": r.choice((-1, 1)) * math.exp(r.uniform(math.log(0.25), math.log(4.0)))}),
    "add_scalar": ("{v} + {c}", lambda t, c: t + c, lambda r, iv: {"c": _nz(r.uniform(-1.0, 1.0))}),
    "div_scalar": ("{v} / {c}", lambda t, c: t / c,
                   lambda r, iv: {"c": math.exp(r.uniform(math.log(0.5), math.log(4.0)))}),
    "rsub_scalar": ("{c} - {v}", lambda t, c: c - t, lambda r, iv: {"c": _nz(r.uniform(-1.0, 1.0))}),
    "clamp": ("torch.clamp({v}, min={a}, max={b})", lambda t, a, b: min(max(t, a), b), _bounds),
    "clamp_min": ("torch.clamp({v}, min={a})", lambda t, a: max(t, a),
                  lambda r, iv: {"a": iv[0] + r.uniform(0.1, 0.5) * (iv[1] - iv[0])}),
    "hardtanh": ("F.hardtanh({v}, min_val={a}, max_val={b})", lambda t, a, b: min(max(t, a), b), _bounds),
    "leaky_relu": ("F.leaky_relu({v}, negative_slope={s})", lambda t, s: t if t > 0 else s * t,
                   lambda r, iv: {"s": r.uniform(0.01, 0.3)}),
    "elu": ("F.elu({v}, alpha={s})", lambda t, s: _elu(t, s), lambda r, iv: {"s": r.uniform(0.5, 2.0)}),
    "softplus_beta": ("F.softplus({v}, beta={s})", lambda t, s: _softplus(t, s),
                      lambda r, iv: {"s": r.uniform(0.5, 4.0)}),
}

#: Ops reading a second tensor: name -> code with {v} (and {y}: the second input).
_OPERANDS: dict[str, str] = {
    "residual_add": "{v} + {y}",
    "residual_mul": "{v} * {y}",
    "bias": "{v} + self.bias",
    "scale": "{v} * self.scale",
}

#: Pools of op names drawn from.
EW_OPS = tuple(_UNARY) + tuple(_PARAM)
#: Ops that never map a range of values onto one value (no clamp, no relu...): the ones
#: drawn after a reduction, a softmax or a normalisation, whose values shift with the
#: sizes (the max of 4096 randn values is about 3.5, of 5 about 1.2: a clamp chosen at one
#: size could make every output equal at another).
EW_NONSAT = tuple(o for o in EW_OPS if o not in ("relu", "relu6", "clamp", "clamp_min", "hardtanh", "hardsigmoid",
                                                  "hardswish"))
#: Ops safe after values that grow with the sizes (a sum, a norm, a logsumexp: 50 at the
#: main sizes where they are 3 at small_odd): none goes flat for large inputs of either sign
#: (sigmoid, tanh and erf are 1.0 in float32 past 9-17, logsigmoid, softplus, elu, selu,
#: silu, gelu flatten on one side).
#: Monotone ops that neither saturate nor flatten: the ones drawn before an extreme (amax,
#: cummax, a global max pool...) over windows that grow with the sizes.  The max of
#: |x|, x * x, exp(-|x|) or erf(x) over 4096 values is 0, 1 or 1.0 for every row.
EW_MONOTONE = ("mul_scalar", "add_scalar", "div_scalar", "rsub_scalar", "neg", "softplus", "softplus_beta", "selu",
               "elu", "leaky_relu", "softsign", "logsigmoid")
EW_GROWTH = ("mul_scalar", "add_scalar", "div_scalar", "rsub_scalar", "abs", "neg", "square", "log1p_abs",
             "leaky_relu", "sin")


def _image(fn: Callable[..., float], iv: Interval, params: dict[str, float]) -> Interval:
    lo, hi = iv
    pts = [lo + (hi - lo) * i / 128.0 for i in range(129)]
    if lo < 0.0 < hi:
        pts.append(0.0)
    vals = []
    for t in pts:
        try:
            vals.append(fn(t, **params))
        except (OverflowError, ValueError, ZeroDivisionError):
            vals.append(math.inf)
    return min(vals), max(vals)


def _corners(a: Interval, b: Interval) -> Interval:
    prods = [x * y for x in a for y in b]
    return min(prods), max(prods)


def _try_op(rng: random.Random, name: str, iv: Interval) -> tuple[dict[str, float], Interval] | None:
    """Parameters and the output interval of ``name`` on ``iv``, or None when the op would
    overflow or collapse the values there."""
    params: dict[str, float] = {}
    if name in _UNARY:
        out = _image(_UNARY[name][1], iv, {})
    elif name in _PARAM:
        _, fn, gen = _PARAM[name]
        params = {k: float(_num(v)) for k, v in gen(rng, iv).items()}
        out = _image(fn, iv, params)
    elif name == "residual_add":
        out = (iv[0] - 3.0, iv[1] + 3.0)
    elif name == "residual_mul":
        out = _corners(iv, RANDN)
    elif name == "bias":
        out = (iv[0] - 0.3, iv[1] + 0.3)
    elif name == "scale":
        out = _corners(iv, (0.7, 1.3))
    else:  # pragma: no cover - a grammar bug
        raise KeyError(name)
    if not all(math.isfinite(v) for v in out) or max(abs(out[0]), abs(out[1])) > _MAX_ABS:
        return None
    if out[1] - out[0] < _MIN_WIDTH * max(1.0, abs(out[0] + out[1]) / 2):
        return None
    return params, out


def _draw_ops(rng: random.Random, n: int, iv: Interval, pool: Sequence[str]) -> tuple[list[tuple[str, dict[str, float]]], Interval]:
    """``n`` ops drawn from ``pool`` (no op twice in a row, each operand op once at most)."""
    ops: list[tuple[str, dict[str, float]]] = []
    used: set[str] = set()
    for _ in range(n):
        names = [o for o in pool if not (ops and o == ops[-1][0]) and not (o in _OPERANDS and o in used)]
        rng.shuffle(names)
        for name in names:
            got = _try_op(rng, name, iv)
            if got is not None:
                ops.append((name, got[0]))
                iv = got[1]
                used.add(name)
                break
    return ops, iv


def _expr(name: str, params: dict[str, float], v: str = "x", y: str = "y") -> str:
    if name in _UNARY:
        return _UNARY[name][0].format(v=v)
    if name in _PARAM:
        return _PARAM[name][0].format(v=v, **{k: _num(p) for k, p in params.items()})
    return _OPERANDS[name].format(v=v, y=y)


def _op_text(name: str, params: dict[str, float]) -> str:
    """Short description of one op for docstrings."""
    p = {k: _num(v) for k, v in params.items()}
    return {
        "mul_scalar": f"* {p.get('c')}", "add_scalar": f"+ {p.get('c')}", "div_scalar": f"/ {p.get('c')}",
        "rsub_scalar": f"{p.get('c')} - x", "clamp": f"clamp[{p.get('a')}, {p.get('b')}]",
        "clamp_min": f"clamp(min={p.get('a')})", "hardtanh": f"hardtanh[{p.get('a')}, {p.get('b')}]",
        "leaky_relu": f"leaky_relu({p.get('s')})", "elu": f"elu({p.get('s')})",
        "softplus_beta": f"softplus(beta={p.get('s')})", "residual_add": "+ y", "residual_mul": "* y",
        "bias": "+ bias", "scale": "* scale", "exp_neg_abs": "exp(-|x|)", "log1p_abs": "log1p(|x|)",
        "square": "square",
    }.get(name, name)


def _chain_text(ops: Sequence[tuple[str, dict[str, float]]]) -> str:
    return " -> ".join(_op_text(n, p) for n, p in ops) if ops else "identity"


def _lines(ops: Sequence[tuple[str, dict[str, float]]], v: str = "x", y: str = "y") -> list[str]:
    return [f"{v} = {_expr(n, p, v, y)}" for n, p in ops]


def _names(ops: Sequence[tuple[str, dict[str, float]]]) -> list[str]:
    return [n for n, _ in ops]


def _numbers(ops: Sequence[tuple[str, dict[str, float]]]) -> list[dict[str, float]]:
    return [dict(p) for _, p in ops]


# ---------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dim:
    """One size constant.

    Attributes:
        name: the constant; small: the range its odd ``small_odd`` value is drawn from;
        choices: values for ``main`` (and ``large`` unless ``large`` is given), ignored for
        the free dim; mult: every value is a multiple of it (odd); free: the dim solved
        for the footprint (one per problem: ``batch_size``).
    """

    name: str
    small: tuple[int, int]
    choices: tuple[int, ...] = ()
    large: tuple[int, ...] | None = None
    mult: int = 1
    free: bool = False


Sizes = dict[str, int]
Shape = Sequence[Any]  # names, ints or callables(sizes) -> int


def _numel(shape: Shape, s: Sizes) -> int:
    n = 1
    for d in shape:
        n *= d(s) if callable(d) else (s[d] if isinstance(d, str) else int(d))
    return n


def _solve(rng: random.Random, dims: Sequence[_Dim], cost: Callable[[Sizes], tuple[float, float]],
           valid: Callable[[Sizes], bool], bounds: tuple[float, float], max_flop: float, large: bool) -> Sizes:
    """Sizes with a footprint within ``bounds`` and at most ``max_flop``: the fixed dims
    drawn from their lists, the free dim solved (cost is affine in it).

    Raises:
        RuntimeError: no draw fits (a grammar bug).
    """
    free = next(d for d in dims if d.free)
    lo, hi = bounds[0] * 1.2, bounds[1] * 0.85
    for _ in range(400):
        s = {d.name: rng.choice(d.large if large and d.large else d.choices) for d in dims if not d.free}
        m = free.mult
        b1, f1 = cost({**s, free.name: m})
        b2, f2 = cost({**s, free.name: 2 * m})
        bs, fs = (b2 - b1) / m, (f2 - f1) / m
        b0, f0 = b1 - bs * m, f1 - fs * m
        if bs <= 0:
            continue
        n_lo = max(m, math.ceil((lo - b0) / bs))
        n_hi = math.floor((hi - b0) / bs)
        if fs > 0:
            n_hi = min(n_hi, math.floor((max_flop * 0.95 - f0) / fs))
        if n_hi < n_lo:
            continue
        n = int(math.exp(rng.uniform(math.log(n_lo), math.log(n_hi))))
        step = m * 16 if n >= 256 * m else m
        n = max(n_lo, n // step * step)
        if n % m:
            n += m - n % m
        s[free.name] = n
        b, f = cost(s)
        if bounds[0] <= b <= bounds[1] and f <= max_flop and valid(s):
            return {d.name: s[d.name] for d in dims}
    raise RuntimeError("no sizes fit the footprint and FLOP bounds")


def _odd_values(d: _Dim) -> list[int]:
    return [v for v in range(max(3, d.small[0]), d.small[1] + 1) if v % 2 == 1 and v % d.mult == 0] or [max(3, d.mult)]


def _solve_small(rng: random.Random, dims: Sequence[_Dim], cost: Callable[[Sizes], tuple[float, float]],
                 valid: Callable[[Sizes], bool]) -> Sizes:
    """Odd sizes, each from its small range, at most :data:`SMALL_ELEMENTS` elements."""
    for attempt in range(300):
        s = {}
        for d in dims:
            vals = _odd_values(d)
            if attempt >= 150:  # keep to the lower half
                vals = vals[: max(1, (len(vals) + 1) // 2)]
            s[d.name] = rng.choice(vals)
        if cost(s)[0] / 4 <= SMALL_ELEMENTS and valid(s):
            return s
    s = {d.name: _odd_values(d)[0] for d in dims}
    if not valid(s):  # pragma: no cover - a grammar bug
        raise RuntimeError("no small odd sizes fit")
    return s


# ---------------------------------------------------------------------------------------
# A drawn problem before rendering
# ---------------------------------------------------------------------------------------


@dataclass
class _Prob:
    title: str
    knobs: dict[str, Any]
    dims: list[_Dim]
    inputs: list[tuple[str, str, Shape]]  # (forward arg, get_inputs expression, shape)
    output: str  # doc of the output shape
    out_shape: Shape  # for the footprint ([] = a scalar)
    forward: list[str]  # body lines, ending with a return
    init_args: list[str] = field(default_factory=list)
    init: list[str] = field(default_factory=list)
    numbers: Any = None  # numeric knobs, kept out of the structure key
    params: Callable[[Sizes], int] = lambda s: 0  # elements of parameters and buffers
    flop: Callable[[Sizes], float] | None = None
    valid: Callable[[Sizes], bool] = lambda s: True
    notes: list[str] = field(default_factory=list)

    def cost(self, s: Sizes) -> tuple[float, float]:
        elems = sum(_numel(sh, s) for _, _, sh in self.inputs) + _numel(self.out_shape, s) + self.params(s)
        flop = self.flop(s) if self.flop is not None else 8.0 * elems
        return 4.0 * elems, flop


def _shape_code(shape: Shape) -> str:
    return ", ".join(str(d) for d in shape)


def _tensor_doc(shape: Shape) -> str:
    return f"float32[{_shape_code(shape)}]"


def _fmt_bytes(b: float) -> str:
    return f"{b / MIB:.1f} MiB" if b < 1024 * MIB else f"{b / (1024 * MIB):.2f} GiB"


def _is_int(expr: str) -> bool:
    return expr.startswith("torch.randint") and ".float()" not in expr


def _render(family: str, p: _Prob, configs: list[dict[str, Any]]) -> str:
    sizes = {c["name"]: c["sizes"] for c in configs}
    main = sizes["main"]
    names = [d.name for d in p.dims]
    b_main, f_main = p.cost(main)
    b_large, f_large = p.cost(sizes["large"])

    def xs(s: Sizes) -> str:
        return " x ".join(str(s[n]) for n in names)

    ins = ", ".join(f"{a} {'int64[' + _shape_code(sh) + ']' if _is_int(expr) else _tensor_doc(sh)}"
                    for a, expr, sh in p.inputs)
    flop_note = ""
    if p.flop is not None:
        flop_note = f", {f_main / 1e9:.2f} GFLOP"
    title = p.title
    first = title.split(" ", 1)[0]
    if first.isalpha() and first.islower():
        title = title[0].upper() + title[1:]
    doc = [
        textwrap.fill(title, 90),
        "",
        textwrap.fill(f"Shapes: {ins} -> {p.output}.", 90),
        textwrap.fill(f"Constants: {', '.join(names)} (main {xs(main)}: {_fmt_bytes(b_main)} footprint{flop_note}; "
                      f"small_odd {xs(sizes['small_odd'])}; large {xs(sizes['large'])}: {_fmt_bytes(b_large)}"
                      + (f", {f_large / 1e9:.1f} GFLOP" if p.flop is not None else "") + ").", 90),
    ]
    for note in p.notes:
        doc.append(textwrap.fill(note, 90))
    body_text = "\n".join(p.init + p.forward)
    out = ['"""' + "\n".join(doc), '"""', "", "import torch", "import torch.nn as nn"]
    if "F." in body_text:
        out.append("import torch.nn.functional as F")
    out += [""] + [f"{n} = {main[n]}" for n in names] + ["", ""]
    out.append("class Model(nn.Module):")
    out.append(f"    def __init__(self{''.join(f', {a}: int' for a in p.init_args)}):")
    out.append("        super().__init__()")
    out += [f"        {ln}" for ln in p.init]
    out.append("")
    args = ", ".join(f"{a}: torch.Tensor" for a, _, _ in p.inputs)
    out.append(f"    def forward(self, {args}) -> torch.Tensor:")
    out += [f"        {ln}" for ln in p.forward]
    out += ["", "", "def get_inputs():", f"    return [{', '.join(e for _, e, _ in p.inputs)}]", "", "",
            "def get_init_inputs():", f"    return [{', '.join(p.init_args)}]", ""]
    return "\n".join(out)


def _finish(rng: random.Random, family: str, p: _Prob) -> GeneratedProblem:
    small = _solve_small(rng, p.dims, p.cost, p.valid)
    main = _solve(rng, p.dims, p.cost, p.valid, MAIN_BYTES, MAIN_FLOP, large=False)
    large = _solve(rng, p.dims, p.cost, p.valid, LARGE_BYTES, LARGE_FLOP, large=True)
    configs = []
    for n, sz in zip(CONFIG_NAMES, (small, main, large)):
        b, f = p.cost(sz)  # bytes: float32 inputs, output, parameters; FLOP: the family's formula
        configs.append({"name": n, "sizes": sz, "bytes": int(b), **({"flop": int(f)} if p.flop is not None else {})})
    knobs = dict(p.knobs)
    key = family + ":" + json.dumps(knobs, sort_keys=True, separators=(",", ":"))
    if p.numbers is not None:
        knobs["numbers"] = p.numbers
    return GeneratedProblem(kind="torch", family=family, knobs=knobs, source=_render(family, p, configs),
                            configs=configs, structure_key=key, function=None)


# ---------------------------------------------------------------------------------------
# Shapes shared by families
# ---------------------------------------------------------------------------------------


def _batch(small: tuple[int, int] = (3, 9)) -> _Dim:
    return _Dim("batch_size", small, free=True)


#: Row-major shapes by rank: the dims after batch_size.
def _rank_dims(rank: int) -> list[_Dim]:
    if rank == 2:
        return [_batch((3, 15)), _Dim("dim", (5, 99), (256, 512, 1024, 2048, 4096))]
    if rank == 3:
        return [_batch((3, 7)), _Dim("seq_len", (3, 33), (64, 128, 256, 512)),
                _Dim("dim", (5, 65), (64, 128, 256, 512, 1024))]
    return [_batch((3, 5)), _Dim("channels", (3, 11), (8, 16, 32, 64)),
            _Dim("height", (5, 19), (16, 32, 64, 128)), _Dim("width", (5, 19), (16, 32, 64, 128))]


def _channel_dims(cdim: int, mult: int = 1) -> list[_Dim]:
    """[batch_size, channels, length] or [batch_size, channels, height, width]."""
    ch = _Dim("channels", (mult, mult * 5) if mult > 1 else (3, 11), tuple(mult * m for m in (4, 8, 16)) if mult > 1
              else (8, 16, 32, 64), mult=mult)
    if cdim == 1:
        return [_batch((3, 7)), ch, _Dim("length", (9, 65), (256, 512, 1024, 2048))]
    return [_batch((3, 5)), ch, _Dim("height", (5, 19), (16, 32, 64, 128)), _Dim("width", (5, 19), (16, 32, 64, 128))]


def _names_of(dims: Sequence[_Dim]) -> list[str]:
    return [d.name for d in dims]


def _randn(shape: Shape) -> str:
    return f"torch.randn({_shape_code(shape)})"


def _reduced(shape: Shape, dims: Sequence[int], keepdim: bool) -> list[Any]:
    r = len(shape)
    norm = {d % r for d in dims}
    return [(1 if keepdim else None) if i in norm else d for i, d in enumerate(shape) if keepdim or i not in norm]


def _dim_code(dims: Sequence[int]) -> str:
    return str(dims[0]) if len(dims) == 1 else "(" + ", ".join(str(d) for d in dims) + ")"


def _param_lines(ops: Sequence[tuple[str, dict[str, float]]], shape_code: str) -> list[str]:
    lines = []
    names = _names(ops)
    if "bias" in names:
        lines.append(f"self.bias = nn.Parameter(0.1 * torch.randn({shape_code}))")
    if "scale" in names:
        lines.append(f"self.scale = nn.Parameter(1.0 + 0.1 * torch.randn({shape_code}))")
    return lines


def _param_count(ops: Sequence[tuple[str, dict[str, float]]], shape: Shape) -> Callable[[Sizes], int]:
    k = sum(1 for n in _names(ops) if n in ("bias", "scale"))
    return lambda s: k * _numel(shape, s)


# ---------------------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------------------


def _gen_elementwise(rng: random.Random) -> _Prob:
    rank = rng.choice((2, 3, 4))
    dims = _rank_dims(rank)
    shape = _names_of(dims)
    ops, _ = _draw_ops(rng, rng.randint(2, 6), RANDN, EW_OPS + tuple(_OPERANDS))
    names = _names(ops)
    knobs: dict[str, Any] = {"rank": rank, "ops": names}
    uses_param = "bias" in names or "scale" in names
    init_args: list[str] = []
    pshape: list[Any] = []
    if uses_param:
        axis = rng.choice(("last", "channel")) if rank == 4 else "last"
        knobs["param_axis"] = axis
        if axis == "last":
            init_args, pshape = [shape[-1]], [shape[-1]]
            code = shape[-1]
        else:
            init_args, pshape = ["channels"], ["channels", 1, 1]
            code = "channels, 1, 1"
        init = _param_lines(ops, code)
    else:
        init = []
    inputs = [("x", _randn(shape), shape)]
    if "residual_add" in names or "residual_mul" in names:
        inputs.append(("y", _randn(shape), shape))
    return _Prob(
        title=f"Elementwise chain on a {rank}-D tensor: {_chain_text(ops)}.",
        knobs=knobs, dims=dims, inputs=inputs, output=_tensor_doc(shape), out_shape=shape,
        forward=_lines(ops) + ["return x"], init_args=init_args, init=init, numbers=_numbers(ops),
        params=_param_count(ops, pshape),
    )


#: Last-dim tails after a GEMM/conv: name -> (code, output: same | keep | drop).
_ROW_TAILS: dict[str, tuple[str, str]] = {
    "softmax": ("torch.softmax(x, dim=-1)", "same"),
    "log_softmax": ("F.log_softmax(x, dim=-1)", "same"),
    "layer_norm": ("F.layer_norm(x, (x.shape[-1],))", "same"),
    "rms_norm": ("x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)", "same"),
    "sum_keepdim": ("x.sum(dim=-1, keepdim=True)", "keep"),
    "mean": ("x.mean(dim=-1)", "drop"),
    "amax_keepdim": ("torch.amax(x, dim=-1, keepdim=True)", "keep"),
    "logsumexp": ("torch.logsumexp(x, dim=-1)", "drop"),
}


def _gen_gemm(rng: random.Random) -> _Prob:
    head = rng.choice(("linear", "linear_nobias", "linear_3d", "linear_fn", "matmul_weight",
                       "matmul_inputs", "bmm"))
    feat = (128, 256, 512, 1024)
    lfeat = (64, 128, 256)
    K = _Dim("in_features", (5, 65), feat, lfeat)
    N = _Dim("out_features", (5, 65), feat, lfeat)
    inputs: list[tuple[str, str, Shape]]
    init_args = ["in_features", "out_features"]
    init: list[str] = []
    params: Callable[[Sizes], int]
    if head == "bmm":
        R = _Dim("rows", (3, 17), (32, 64, 128, 256), (32, 64, 128))
        dims = [_batch((3, 7)), R, K, N]
        a_shape = ["batch_size", "rows", "in_features"]
        b_shape = ["batch_size", "in_features", "out_features"]
        out_shape: list[Any] = ["batch_size", "rows", "out_features"]
        inputs = [("a", _randn(a_shape), a_shape), ("b", _randn(b_shape) + " / in_features ** 0.5", b_shape)]
        fwd = ["x = torch.bmm(a, b)"]
        init_args = []
        params = lambda s: 0  # noqa: E731
        rows: Callable[[Sizes], int] = lambda s: s["batch_size"] * s["rows"]  # noqa: E731
        head_text = "torch.bmm(a, b)"
    else:
        if head == "linear_3d":
            dims = [_batch((3, 7)), _Dim("seq_len", (3, 9), (16, 32, 64, 128), (16, 32, 64)), K, N]
            x_shape: list[Any] = ["batch_size", "seq_len", "in_features"]
            out_shape = ["batch_size", "seq_len", "out_features"]
            rows = lambda s: s["batch_size"] * s["seq_len"]  # noqa: E731
        else:
            dims = [_batch((3, 15)), K, N]
            x_shape = ["batch_size", "in_features"]
            out_shape = ["batch_size", "out_features"]
            rows = lambda s: s["batch_size"]  # noqa: E731
        has_bias = head in ("linear", "linear_3d", "linear_fn")
        params = lambda s: s["in_features"] * s["out_features"] + (s["out_features"] if has_bias else 0)  # noqa: E731
        if head in ("linear", "linear_3d", "linear_nobias"):
            init = [f"self.fc = nn.Linear(in_features, out_features{'' if has_bias else ', bias=False'})"]
            fwd = ["x = self.fc(x)"]
            head_text = f"nn.Linear ({'with' if has_bias else 'no'} bias)"
        elif head == "linear_fn":
            init = ["self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features ** 0.5)",
                    "self.bias = nn.Parameter(0.1 * torch.randn(out_features))"]
            fwd = ["x = F.linear(x, self.weight, self.bias)"]
            head_text = "F.linear(x, weight, bias)"
        elif head == "matmul_weight":
            init = ["self.weight = nn.Parameter(torch.randn(in_features, out_features) / in_features ** 0.5)"]
            fwd = ["x = torch.matmul(x, self.weight)"]
            head_text = "x @ weight"
        else:  # matmul_inputs
            init_args = []
            w_shape = ["in_features", "out_features"]
            params = lambda s: 0  # noqa: E731
            fwd = ["x = torch.matmul(x, w)"]
            head_text = "torch.matmul(x, w)"
        inputs = [("x", _randn(x_shape), x_shape)]
        if head == "matmul_inputs":
            inputs.append(("w", _randn(w_shape) + " / in_features ** 0.5", w_shape))
    pool = EW_OPS + ("residual_add", "scale") + (() if head == "linear_fn" else ("bias",))
    # nn.Linear's default init gives outputs of std ~0.58; the scaled weights ~1
    head_iv = (-1.5, 1.5) if head in ("linear", "linear_nobias", "linear_3d") else RANDN
    ops, _ = _draw_ops(rng, rng.randint(1, 4), head_iv, pool)
    names = _names(ops)
    tail = rng.choice(tuple(_ROW_TAILS)) if rng.random() < 0.35 else None
    if "bias" in names or "scale" in names:
        init_args = init_args if "out_features" in init_args else init_args + ["out_features"]
        init = init + _param_lines(ops, "out_features")
    pcount = _param_count(ops, ["out_features"])
    if "residual_add" in names:
        inputs.append(("y", _randn(out_shape), out_shape))
    fwd += _lines(ops)
    final: list[Any] = list(out_shape)
    if tail is not None:
        code, kind = _ROW_TAILS[tail]
        fwd.append(f"x = {code}")
        final = final[:-1] + [1] if kind == "keep" else (final[:-1] if kind == "drop" else final)
    fwd.append("return x")
    return _Prob(
        title=f"GEMM with an elementwise tail: {head_text} -> {_chain_text(ops)}"
              + (f" -> {tail} over the last dim" if tail else "") + ".",
        knobs={"head": head, "ops": names, "tail": tail}, dims=dims, inputs=inputs,
        output=_tensor_doc(final), out_shape=final, forward=fwd, init_args=init_args, init=init,
        numbers=_numbers(ops), params=lambda s: params(s) + pcount(s),
        flop=lambda s: 2.0 * rows(s) * s["in_features"] * s["out_features"],
    )


def _conv_out(size: Any, k: int, stride: int, pad: int) -> Callable[[Sizes], int]:
    return lambda s: (s[size] + 2 * pad - k) // stride + 1


def _gen_conv(rng: random.Random) -> _Prob:
    cdim = rng.choice((1, 2))
    k = rng.choice((1, 3, 5, 7) if cdim == 1 else (1, 3, 5))
    stride = rng.choice((1, 2))
    pad = rng.choice((0, k // 2)) if k > 1 else 0
    bias = rng.random() < 0.6
    depthwise = rng.random() < 0.25
    conv = "nn.Conv1d" if cdim == 1 else "nn.Conv2d"
    B = _batch((3, 7) if cdim == 1 else (3, 5))
    spatial_small = (max(5, k + 2), 41 if cdim == 1 else 17)
    if cdim == 1:
        sp = [_Dim("length", spatial_small, (128, 256, 512, 1024, 2048))]
    else:
        sp = [_Dim("height", spatial_small, (16, 32, 64, 128)), _Dim("width", spatial_small, (16, 32, 64, 128))]
    if depthwise:
        dims = [B, _Dim("channels", (3, 15), (16, 32, 64, 128))] + sp
        cin = cout = "channels"
        init_args = ["channels"]
        init = [f"self.conv = {conv}(channels, channels, {k}, stride={stride}, padding={pad}, groups=channels"
                f"{'' if bias else ', bias=False'})"]
    else:
        dims = [B, _Dim("in_channels", (3, 9), (3, 8, 16, 32, 64)), _Dim("out_channels", (3, 9), (8, 16, 32, 64))] + sp
        cin, cout = "in_channels", "out_channels"
        init_args = ["in_channels", "out_channels"]
        init = [f"self.conv = {conv}(in_channels, out_channels, {k}, stride={stride}, padding={pad}"
                f"{'' if bias else ', bias=False'})"]
    sp_names = [d.name for d in sp]
    outs = [_conv_out(n, k, stride, pad) for n in sp_names]
    x_shape = ["batch_size", cin] + sp_names
    out_shape: list[Any] = ["batch_size", cout] + outs
    out_doc = ["batch_size", cout] + [f"{n}'" for n in sp_names]
    ops, _ = _draw_ops(rng, rng.randint(1, 4), (-1.5, 1.5), EW_OPS + ("bias", "scale"))
    names = _names(ops)
    pshape = f"{cout}, 1" + (", 1" if cdim == 2 else "")
    if "bias" in names or "scale" in names:
        if cout not in init_args:
            init_args.append(cout)
        init += _param_lines(ops, pshape)
    tails = ("softmax_channels", "logsumexp_channels", "amax_channels", "mean_spatial", "sum_spatial")
    if cdim == 2 and k == 5 and stride == 1:  # too many FLOP per byte for a reducing tail at large sizes
        tails = ("softmax_channels",)
    tail = rng.choice(tails) if rng.random() < 0.3 else None
    fwd = ["x = self.conv(x)"] + _lines(ops)
    sp_dims = "(2, 3)" if cdim == 2 else "-1"
    final, fdoc = list(out_shape), list(out_doc)
    if tail == "softmax_channels":
        fwd.append("x = torch.softmax(x, dim=1)")
    elif tail == "logsumexp_channels":
        fwd.append("x = torch.logsumexp(x, dim=1, keepdim=True)")
        final[1] = fdoc[1] = 1
    elif tail == "amax_channels":
        fwd.append("x = torch.amax(x, dim=1, keepdim=True)")
        final[1] = fdoc[1] = 1
    elif tail == "mean_spatial":
        fwd.append(f"x = x.mean(dim={sp_dims}, keepdim=True)")
        final = final[:2] + [1] * cdim
        fdoc = fdoc[:2] + [1] * cdim
    elif tail == "sum_spatial":
        fwd.append(f"x = x.sum(dim={sp_dims})")
        final, fdoc = final[:2], fdoc[:2]
    fwd.append("return x")

    def flop(s: Sizes) -> float:
        per_out = (1 if depthwise else s[cin]) * k ** cdim
        return 2.0 * _numel(out_shape, s) * per_out

    def nparams(s: Sizes) -> int:
        w = s[cout] * (1 if depthwise else s[cin]) * k ** cdim + (s[cout] if bias else 0)
        return w + sum(1 for n in names if n in ("bias", "scale")) * s[cout]

    def valid(s: Sizes) -> bool:
        return all(f(s) >= 1 for f in outs)

    notes = [f"{n}' = ({n} + {2 * pad} - {k}) // {stride} + 1." for n in sp_names] if (k > 1 or stride > 1) else []
    if notes:
        notes = [" ".join(notes)]
    else:
        fdoc = list(fdoc[:2]) + [str(x).rstrip("'") for x in fdoc[2:]]
    return _Prob(
        title=f"{'Depthwise ' if depthwise else ''}{conv}(kernel {k}, stride {stride}, padding {pad}, "
              f"{'bias' if bias else 'no bias'}) -> {_chain_text(ops)}" + (f" -> {tail}" if tail else "") + ".",
        knobs={"conv": f"conv{cdim}d", "kernel": k, "stride": stride, "padding": pad, "bias": bias,
               "depthwise": depthwise, "ops": names, "tail": tail},
        dims=dims, inputs=[("x", _randn(x_shape), x_shape)], output=_tensor_doc(fdoc), out_shape=final,
        forward=fwd, init_args=init_args, init=init, numbers=_numbers(ops), params=nparams, flop=flop,
        valid=valid, notes=notes,
    )


def _gen_softmax(rng: random.Random) -> _Prob:
    rank = rng.choice((2, 3, 4))
    dims = _rank_dims(rank)
    shape = _names_of(dims)
    op = rng.choice(("softmax", "log_softmax", "logsumexp"))
    single = {2: [-1, 0], 3: [-1, 1, 0], 4: [-1, 1, 2]}[rank]
    multi = {2: [], 3: [[1, 2]], 4: [[2, 3], [1, 2, 3]]}[rank]
    choices = [[d] for d in single] + (multi if op == "logsumexp" else [])
    rdims = rng.choice(choices)
    temp = rng.choice(("none", "mul", "div"))
    numbers: dict[str, Any] = {}
    pre, iv = _draw_ops(rng, rng.choice((0, 0, 1, 2)), RANDN, EW_OPS + ("residual_add",))
    fwd = _lines(pre)
    if temp == "mul":
        numbers["temperature"] = c = float(_num(math.exp(rng.uniform(math.log(0.25), math.log(4.0)))))
        fwd.append(f"x = x * {_num(c)}")
    elif temp == "div":
        numbers["temperature"] = c = float(_num(math.exp(rng.uniform(math.log(0.25), math.log(4.0)))))
        fwd.append(f"x = x / {_num(c)}")
    d = _dim_code(rdims)
    extra = None
    keepdim = False
    out_shape: list[Any] = list(shape)
    if op == "softmax":
        extra = rng.choice((None, None, "expectation", "max_prob"))
        if extra is None:
            fwd.append(f"x = torch.softmax(x, dim={d})")
            iv = (0.0, 1.0)
        else:
            keepdim = rng.random() < 0.5
            fwd.append(f"p = torch.softmax(x, dim={d})")
            if extra == "expectation":
                fwd.append(f"x = (p * x).sum(dim={d}, keepdim={keepdim})")
                iv = (-3.0, 3.0)
            else:
                fwd.append(f"x = torch.amax(p, dim={d}, keepdim={keepdim})")
                iv = (0.05, 1.0)
            out_shape = _reduced(shape, rdims, keepdim)
    elif op == "log_softmax":
        fwd.append(f"x = F.log_softmax(x, dim={d})")
        iv = (-12.0, 0.0)
    else:
        keepdim = rng.random() < 0.5
        fwd.append(f"x = torch.logsumexp(x, dim={d}, keepdim={keepdim})")
        out_shape = _reduced(shape, rdims, keepdim)
        iv = (0.0, 12.0)
    post, _ = _draw_ops(rng, rng.choice((0, 0, 1, 2)), iv, EW_GROWTH if op == "logsumexp" else EW_NONSAT)
    fwd += _lines(post) + ["return x"]
    inputs = [("x", _randn(shape), shape)]
    if "residual_add" in _names(pre):
        inputs.append(("y", _randn(shape), shape))
    what = op if extra is None else {"expectation": "softmax expectation (p * z).sum", "max_prob": "top softmax probability"}[extra]
    return _Prob(
        title=f"{what} over dim {d} of a {rank}-D tensor"
              + (f" (temperature: x {'*' if temp == 'mul' else '/'} c)" if temp != "none" else "")
              + (f"; before: {_chain_text(pre)}" if pre else "") + (f"; after: {_chain_text(post)}" if post else "") + ".",
        knobs={"rank": rank, "op": op, "dim": rdims, "keepdim": keepdim, "extra": extra, "temperature": temp,
               "pre": _names(pre), "post": _names(post)},
        dims=dims, inputs=inputs, output=_tensor_doc(out_shape), out_shape=out_shape, forward=fwd,
        numbers={**numbers, "pre": _numbers(pre), "post": _numbers(post)},
    )


_NORM_KINDS = ("layer_norm", "layer_norm_noaffine", "layer_norm_2d", "rms_manual", "rms_fn", "normalize",
               "l1_normalize", "group_norm", "group_norm_fn", "instance_norm", "instance_as_group",
               "batch_norm_eval", "standardize")


def _gen_norm(rng: random.Random) -> _Prob:
    kind = rng.choice(_NORM_KINDS)
    numbers: dict[str, Any] = {"eps": rng.choice((1e-5, 1e-6, 1e-8)) if kind not in ("normalize", "l1_normalize") else 1e-12}
    eps = _num(numbers["eps"])
    knobs: dict[str, Any] = {"kind": kind}
    init: list[str] = []
    init_args: list[str] = []
    nparams: Callable[[Sizes], int] = lambda s: 0  # noqa: E731
    channel_kind = kind in ("group_norm", "group_norm_fn", "instance_norm", "instance_as_group", "batch_norm_eval")
    if channel_kind:
        cdim = rng.choice((1, 2))
        groups = rng.choice((3, 5, 7)) if kind in ("group_norm", "group_norm_fn") else 1
        dims = _channel_dims(cdim, groups)
        knobs["rank"] = cdim + 2
        if groups > 1:
            knobs["groups"] = groups
    else:
        rank = rng.choice((3, 4)) if kind == "layer_norm_2d" else rng.choice((2, 3, 4))
        dims = _rank_dims(rank)
        knobs["rank"] = rank
    shape = _names_of(dims)
    last = shape[-1]
    pre, iv = _draw_ops(rng, rng.choice((0, 0, 1, 2)), RANDN, EW_OPS + ("residual_add",))
    fwd = _lines(pre)
    if kind == "layer_norm":
        init_args = [last]
        init = [f"self.norm = nn.LayerNorm({last}, eps={eps})"]
        fwd.append("x = self.norm(x)")
        nparams = lambda s: 2 * s[last]  # noqa: E731
        what = "nn.LayerNorm over the last dim"
    elif kind == "layer_norm_noaffine":
        fwd.append(f"x = F.layer_norm(x, (x.shape[-1],), eps={eps})")
        what = "layer norm over the last dim (no affine)"
    elif kind == "layer_norm_2d":
        affine = rng.random() < 0.5
        knobs["affine"] = affine
        a, b = shape[-2], shape[-1]
        init_args = [a, b]
        init = [f"self.norm = nn.LayerNorm(({a}, {b}), eps={eps}{'' if affine else ', elementwise_affine=False'})"]
        fwd.append("x = self.norm(x)")
        nparams = (lambda s: 2 * s[a] * s[b]) if affine else (lambda s: 0)
        what = f"nn.LayerNorm over the last two dims ({'affine' if affine else 'no affine'})"
    elif kind == "rms_manual":
        weight = rng.random() < 0.6
        knobs["weight"] = weight
        fwd.append(f"x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + {eps})")
        if weight:
            init_args = [last]
            init = [f"self.weight = nn.Parameter(1.0 + 0.1 * torch.randn({last}))"]
            fwd.append("x = x * self.weight")
            nparams = lambda s: s[last]  # noqa: E731
        what = f"RMS norm written out over the last dim ({'weight' if weight else 'no weight'})"
    elif kind == "rms_fn":
        fwd.append(f"x = F.rms_norm(x, (x.shape[-1],), eps={eps})")
        what = "F.rms_norm over the last dim"
    elif kind in ("normalize", "l1_normalize"):
        d = rng.choice((-1, 1))
        knobs["dim"] = d
        fwd.append(f"x = F.normalize(x, p={2 if kind == 'normalize' else 1}, dim={d})")
        what = f"F.normalize (p={2 if kind == 'normalize' else 1}) over dim {d}"
    elif kind == "group_norm":
        g = knobs["groups"]
        init_args = ["channels"]
        init = [f"self.norm = nn.GroupNorm({g}, channels, eps={eps})"]
        fwd.append("x = self.norm(x)")
        nparams = lambda s: 2 * s["channels"]  # noqa: E731
        what = f"nn.GroupNorm ({g} groups)"
    elif kind == "group_norm_fn":
        g = knobs["groups"]
        fwd.append(f"x = F.group_norm(x, {g}, eps={eps})")
        what = f"F.group_norm ({g} groups, no affine)"
    elif kind == "instance_norm":
        affine = rng.random() < 0.5
        knobs["affine"] = affine
        init_args = ["channels"]
        mod = "nn.InstanceNorm1d" if knobs["rank"] == 3 else "nn.InstanceNorm2d"
        init = [f"self.norm = {mod}(channels, eps={eps}{', affine=True' if affine else ''})"]
        fwd.append("x = self.norm(x)")
        nparams = (lambda s: 2 * s["channels"]) if affine else (lambda s: 0)
        what = f"{mod} ({'affine' if affine else 'no affine'})"
    elif kind == "instance_as_group":
        fwd.append(f"x = F.group_norm(x, x.shape[1], eps={eps})")
        what = "instance norm as F.group_norm(x, channels)"
    elif kind == "batch_norm_eval":
        init_args = ["channels"]
        init = ["self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))",
                "self.bias = nn.Parameter(0.1 * torch.randn(channels))",
                'self.register_buffer("running_mean", 0.1 * torch.randn(channels))',
                'self.register_buffer("running_var", 1.0 + 0.1 * torch.rand(channels))']
        fwd.append(f"x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, "
                   f"training=False, eps={eps})")
        nparams = lambda s: 4 * s["channels"]  # noqa: E731
        what = "batch norm with running statistics (inference)"
    else:  # standardize
        d = rng.choice((-1, 1))
        knobs["dim"] = d
        fwd.append(f"x = (x - x.mean(dim={d}, keepdim=True)) / (x.std(dim={d}, keepdim=True) + {eps})")
        what = f"standardisation (x - mean) / (std + eps) over dim {d}"
    # centred norms give values around 0 whatever came in; the others keep the sign of the
    # input (an all-negative input stays negative)
    lo, hi = (-3.0 if iv[0] < 0 else 0.0), (3.0 if iv[1] > 0 else 0.0)
    if kind in ("normalize", "l1_normalize"):  # values shrink with the normalised length
        f = 0.5 if kind == "normalize" else 0.1
        post, _ = _draw_ops(rng, rng.choice((0, 0, 1, 2)), (f * lo / 3, f * hi / 3), EW_NONSAT)
    elif kind in ("rms_manual", "rms_fn"):
        post, _ = _draw_ops(rng, rng.choice((0, 0, 1, 2)), (lo, hi), EW_OPS)
    elif kind == "batch_norm_eval":
        post, _ = _draw_ops(rng, rng.choice((0, 0, 1, 2)), (iv[0] - 0.5, iv[1] + 0.5), EW_OPS)
    else:
        post, _ = _draw_ops(rng, rng.choice((0, 0, 1, 2)), (-3.0, 3.0), EW_OPS)
    fwd += _lines(post) + ["return x"]
    knobs["pre"], knobs["post"] = _names(pre), _names(post)
    inputs = [("x", _randn(shape), shape)]
    if "residual_add" in knobs["pre"]:
        inputs.append(("y", _randn(shape), shape))
    notes = [f"channels is a multiple of {knobs['groups']} (the groups) in every configuration."] if "groups" in knobs else []
    return _Prob(
        title=f"{what} of a {knobs['rank']}-D tensor"
              + (f"; before: {_chain_text(pre)}" if pre else "") + (f"; after: {_chain_text(post)}" if post else "") + ".",
        knobs=knobs, dims=dims, inputs=inputs, output=_tensor_doc(shape), out_shape=shape, forward=fwd,
        init_args=init_args, init=init, numbers={**numbers, "pre": _numbers(pre), "post": _numbers(post)},
        params=nparams, notes=notes,
    )


_RED_OPS = ("sum", "mean", "amax", "amin", "var", "std", "vector_norm", "norm_manual", "max_values",
            "min_values", "argmax", "argmin")
_SINGLE_ONLY = ("max_values", "min_values", "argmax", "argmin")


def _red_code(op: str, d: str | None, keepdim: bool, unbiased: bool, v: str = "x") -> str:
    kd = f", keepdim={keepdim}"
    if d is None:  # everything
        return {"sum": f"{v}.sum()", "mean": f"{v}.mean()", "amax": f"torch.amax({v})", "amin": f"torch.amin({v})",
                "var": f"torch.var({v}, unbiased={unbiased})", "std": f"torch.std({v}, unbiased={unbiased})",
                "vector_norm": f"torch.linalg.vector_norm({v})",
                "norm_manual": f"torch.sqrt(({v} * {v}).sum())"}[op]
    return {"sum": f"{v}.sum(dim={d}{kd})", "mean": f"{v}.mean(dim={d}{kd})",
            "amax": f"torch.amax({v}, dim={d}{kd})", "amin": f"torch.amin({v}, dim={d}{kd})",
            "var": f"torch.var({v}, dim={d}, unbiased={unbiased}{kd})",
            "std": f"torch.std({v}, dim={d}, unbiased={unbiased}{kd})",
            "vector_norm": f"torch.linalg.vector_norm({v}, ord=2, dim={d}{kd})",
            "norm_manual": f"torch.sqrt(({v} * {v}).sum(dim={d}{kd}))",
            "max_values": f"torch.max({v}, dim={d}{kd})[0]", "min_values": f"torch.min({v}, dim={d}{kd})[0]",
            "argmax": f"torch.argmax({v}, dim={d}{kd})", "argmin": f"torch.argmin({v}, dim={d}{kd})"}[op]


def _gen_reduction(rng: random.Random) -> _Prob:
    rank = rng.choice((2, 3, 4))
    dims = _rank_dims(rank)
    shape = _names_of(dims)
    op = rng.choice(_RED_OPS)
    single = {2: [[-1], [0]], 3: [[-1], [1], [0]], 4: [[-1], [1], [2]]}[rank]
    multi = {2: [], 3: [[1, 2]], 4: [[2, 3], [1, 2, 3]]}[rank]
    options: list[Any] = single if op in _SINGLE_ONLY else single + multi + ["all"]
    rdims = rng.choice(options)
    keepdim = rdims != "all" and rng.random() < 0.5
    unbiased = rng.random() < 0.5 if op in ("var", "std") else None
    arg = op in ("argmax", "argmin")
    # a max/min over many values of a clamped chain is the clamp bound everywhere: only
    # monotone ops before an extreme
    extreme = op in ("amax", "amin", "max_values", "min_values", "argmax", "argmin")
    pre, iv = _draw_ops(rng, rng.choice((0, 1, 1, 2, 3)), RANDN,
                        (EW_MONOTONE if extreme else EW_OPS) + ("residual_add",))
    d = None if rdims == "all" else _dim_code(rdims)
    fwd = _lines(pre)
    combine = second = None
    if not arg and rng.random() < 0.25:
        same = {"max_values": "amax", "min_values": "amin"}.get(op, op)  # r - r would be 0
        second = rng.choice([o for o in ("sum", "mean", "amax", "amin", "std") if o != same])
        combine = rng.choice(("sub", "add", "mul"))
        sym = {"sub": "-", "add": "+", "mul": "*"}[combine]
        fwd.append(f"x = {_red_code(op, d, keepdim, bool(unbiased))} {sym} "
                   f"{_red_code(second, d, keepdim, second == 'std' and bool(unbiased))}")
    else:
        fwd.append(f"x = {_red_code(op, d, keepdim, bool(unbiased))}")
    # rough interval of the reduced values (sums grow with the rows) for the post ops
    lo, hi = iv
    w, top = hi - lo, max(abs(lo), abs(hi))
    riv = {"sum": (max(-300.0, 30 * min(lo, 0.0)), min(300.0, 30 * max(hi, 0.0))), "mean": (lo, hi),
           "amax": (lo + 0.5 * w, hi), "max_values": (lo + 0.5 * w, hi), "amin": (lo, hi - 0.5 * w),
           "min_values": (lo, hi - 0.5 * w), "var": (0.0, w * w / 4), "std": (0.0, w / 2),
           "vector_norm": (0.0, 30 * top), "norm_manual": (0.0, 30 * top)}.get(op, RANDN)
    if combine is not None:
        riv = (-2 * max(abs(riv[0]), abs(riv[1]), 1.0), 2 * max(abs(riv[0]), abs(riv[1]), 1.0))
    post: list[tuple[str, dict[str, float]]] = []
    if not arg:
        grows = op in ("sum", "vector_norm", "norm_manual") or second == "sum"
        post, _ = _draw_ops(rng, rng.choice((0, 0, 1, 2)), riv, EW_GROWTH if grows else EW_NONSAT)
    fwd += _lines(post) + ["return x"]
    out_shape: list[Any] = [] if rdims == "all" else _reduced(shape, rdims, keepdim)
    inputs = [("x", _randn(shape), shape)]
    if "residual_add" in _names(pre):
        inputs.append(("y", _randn(shape), shape))
    what = op + (f" {'-+*'[('sub', 'add', 'mul').index(combine)]} {second}" if combine else "")
    knobs = {"rank": rank, "op": op, "dim": rdims, "keepdim": keepdim, "unbiased": unbiased, "second": second,
             "combine": combine, "pre": _names(pre), "post": _names(post)}
    return _Prob(
        title=f"{what} over {'all elements' if d is None else 'dim ' + d}{' (keepdim)' if keepdim else ''} of a "
              f"{rank}-D tensor" + (f"; before: {_chain_text(pre)}" if pre else "")
              + (f"; after: {_chain_text(post)}" if post else "") + ".",
        knobs=knobs, dims=dims, inputs=inputs,
        output=("int64" if arg else "float32") + f"[{_shape_code(out_shape)}]" + (" (a scalar)" if not out_shape else ""),
        out_shape=out_shape, forward=fwd, numbers={"pre": _numbers(pre), "post": _numbers(post)},
    )


_SCANS = ("cumsum", "cumprod", "cummax", "cummin", "reverse_cumsum", "logcumsumexp", "exclusive_cumsum",
          "cumsum_matmul")


def _gen_scan(rng: random.Random) -> _Prob:
    op = rng.choice(_SCANS)
    rank = 2 if op == "cumsum_matmul" else rng.choice((2, 3))
    cap = {"cumsum_matmul": (128, 256, 512), "cumprod": (128, 256, 512, 1024)}.get(op, (256, 512, 1024, 2048, 4096))
    lcap = {"cumsum_matmul": (128, 256, 512)}.get(op, cap)
    if rank == 2:
        dims = [_batch((3, 15)), _Dim("seq_len", (5, 99), cap, lcap)]
        d = -1
    else:
        dims = [_batch((3, 7)), _Dim("seq_len", (3, 33), tuple(c // 4 for c in cap) if op != "cumprod" else cap[:3]),
                _Dim("dim", (5, 65), (64, 128, 256, 512))]
        d = rng.choice((1, -1))
        if d == -1:  # the scanned length is dim: keep it short enough for cumprod
            dims[2] = _Dim("dim", (5, 65), cap[:4] if op != "cumprod" else (64, 128, 256))
            dims[1] = _Dim("seq_len", (3, 33), (16, 32, 64, 128))
    shape = _names_of(dims)
    pre, piv = _draw_ops(rng, rng.choice((0, 1, 1, 2)), RANDN, EW_MONOTONE if op in ("cummax", "cummin") else EW_OPS)
    fwd = _lines(pre)
    init_args: list[str] = []
    init: list[str] = []
    nparams: Callable[[Sizes], int] = lambda s: 0  # noqa: E731
    flop: Callable[[Sizes], float] | None = None
    if op == "cumsum":
        fwd.append(f"x = torch.cumsum(x, dim={d})")
        iv: Interval = (-50.0, 50.0)
    elif op == "cumprod":
        fwd.append(f"x = torch.cumprod(1.0 + 0.01 * torch.tanh(x), dim={d})")
        iv = (0.5, 2.0)
    elif op in ("cummax", "cummin"):
        fwd.append(f"x = torch.{op}(x, dim={d}).values")
        iv = piv
    elif op == "reverse_cumsum":
        fwd.append(f"x = torch.flip(torch.cumsum(torch.flip(x, dims=[{d}]), dim={d}), dims=[{d}])")
        iv = (-50.0, 50.0)
    elif op == "logcumsumexp":
        fwd.append(f"x = torch.logcumsumexp(x, dim={d})")
        iv = (-3.0, 10.0)
    elif op == "exclusive_cumsum":
        fwd.append(f"x = torch.cumsum(x, dim={d}) - x")
        iv = (-50.0, 50.0)
    else:  # cumsum_matmul
        init_args = ["seq_len"]
        init = ['self.register_buffer("tri", torch.triu(torch.ones(seq_len, seq_len)))']
        fwd.append("x = torch.matmul(x, self.tri)")
        nparams = lambda s: s["seq_len"] ** 2  # noqa: E731
        flop = lambda s: 2.0 * s["batch_size"] * s["seq_len"] ** 2  # noqa: E731
        iv = (-50.0, 50.0)
    # running extremes settle on the row's extreme: no saturating op after them
    after = EW_NONSAT if op in ("cummax", "cummin", "logcumsumexp") else EW_OPS
    post, _ = _draw_ops(rng, rng.choice((0, 1, 1, 2)), iv, after)
    fwd += _lines(post) + ["return x"]
    return _Prob(
        title=f"{op} over dim {d} of a {rank}-D tensor" + (f"; before: {_chain_text(pre)}" if pre else "")
              + (f"; after: {_chain_text(post)}" if post else "") + ".",
        knobs={"op": op, "rank": rank, "dim": d, "pre": _names(pre), "post": _names(post)},
        dims=dims, inputs=[("x", _randn(shape), shape)], output=_tensor_doc(shape), out_shape=shape, forward=fwd,
        init_args=init_args, init=init, numbers={"pre": _numbers(pre), "post": _numbers(post)}, params=nparams,
        flop=flop,
        notes=["The upper-triangular buffer tri[seq_len, seq_len] makes x @ tri the inclusive cumsum."]
        if op == "cumsum_matmul" else [],
    )


#: loss kind -> (forms available, shape kind: "elementwise" (2/3-D pred/target) or "rows" (2-D)).
_LOSSES: dict[str, tuple[tuple[str, ...], str]] = {
    "mse": (("functional", "manual"), "elementwise"),
    "l1": (("functional", "manual"), "elementwise"),
    "smooth_l1": (("functional", "manual"), "elementwise"),
    "huber": (("functional", "manual"), "elementwise"),
    "bce_logits": (("functional", "manual"), "elementwise"),
    "log_cosh": (("manual",), "elementwise"),
    "hinge": (("manual",), "elementwise"),
    "margin_ranking": (("functional", "manual"), "elementwise"),
    "cross_entropy": (("functional",), "rows"),
    "soft_cross_entropy": (("manual",), "rows"),
    "kl_div": (("functional", "manual"), "rows"),
    "cosine": (("functional", "manual"), "rows"),
    "cosine_embedding": (("functional",), "rows"),
    "triplet": (("functional", "manual"), "rows"),
}


def _gen_loss(rng: random.Random) -> _Prob:
    kind = rng.choice(tuple(_LOSSES))
    forms, shape_kind = _LOSSES[kind]
    form = rng.choice(forms)
    reduction = "mean" if kind == "triplet" and form == "functional" else rng.choice(("mean", "sum", "row"))
    if kind == "triplet" and reduction == "row":
        reduction = "mean"
    rank = rng.choice((2, 3)) if shape_kind == "elementwise" else 2
    if rank == 3:
        dims = _rank_dims(3)
    elif kind in ("cross_entropy", "soft_cross_entropy", "kl_div"):
        dims = [_batch((3, 31)), _Dim("num_classes", (5, 99), (128, 256, 512, 1024, 4096))]
    else:
        dims = _rank_dims(2)
    shape = _names_of(dims)
    numbers: dict[str, Any] = {}
    pre, _ = _draw_ops(rng, rng.choice((0, 0, 1, 2)), RANDN, EW_OPS)
    red_arg = {"mean": "mean", "sum": "sum", "row": "none"}[reduction]

    def finish(e: str, per_row: bool = False) -> str:
        """Reduce an elementwise (or, per_row, a per-row) loss expression."""
        if reduction == "mean":
            return f"({e}).mean()"
        if reduction == "sum":
            return f"({e}).sum()"
        return e if per_row else f"({e}).mean(dim=-1)"

    fwd: list[str]
    row_out = shape[:-1]
    out: list[Any] = [] if reduction != "row" else row_out
    if kind in ("mse", "l1", "smooth_l1", "huber", "bce_logits", "log_cosh", "hinge", "margin_ranking"):
        tgt = {"bce_logits": _randn(shape).replace("randn", "rand"),
               "hinge": f"torch.randint(0, 2, ({_shape_code(shape)})).float() * 2.0 - 1.0"}.get(kind, _randn(shape))
        args = [("pred", _randn(shape), shape), ("target", tgt, shape)]
        fwd = _lines(pre, "pred")
        if kind == "mse":
            e = "F.mse_loss(pred, target, reduction={r})" if form == "functional" else "(pred - target) ** 2"
        elif kind == "l1":
            e = "F.l1_loss(pred, target, reduction={r})" if form == "functional" else "torch.abs(pred - target)"
        elif kind == "smooth_l1":
            numbers["beta"] = beta = float(_num(rng.uniform(0.25, 2.0)))
            if form == "functional":
                e = f"F.smooth_l1_loss(pred, target, reduction={{r}}, beta={_num(beta)})"
            else:
                fwd += ["d = torch.abs(pred - target)", f"q = torch.clamp(d, max={_num(beta)})"]
                e = f"0.5 * q * q / {_num(beta)} + (d - q)"
        elif kind == "huber":
            numbers["delta"] = delta = float(_num(rng.uniform(0.25, 2.0)))
            if form == "functional":
                e = f"F.huber_loss(pred, target, reduction={{r}}, delta={_num(delta)})"
            else:
                fwd += ["d = torch.abs(pred - target)", f"q = torch.clamp(d, max={_num(delta)})"]
                e = f"0.5 * q * q + {_num(delta)} * (d - q)"
        elif kind == "bce_logits":
            e = ("F.binary_cross_entropy_with_logits(pred, target, reduction={r})" if form == "functional"
                 else "F.softplus(pred) - pred * target")
        elif kind == "log_cosh":
            fwd.append("d = pred - target")
            e = "d + F.softplus(-2.0 * d) - 0.6931471805599453"
        elif kind == "hinge":
            e = "torch.clamp(1.0 - pred * target, min=0.0)"
        else:  # margin_ranking: target are the second scores, sign a +-1 input
            numbers["margin"] = m = float(_num(rng.uniform(0.0, 1.0)))
            args.append(("sign", f"torch.randint(0, 2, ({_shape_code(shape)})).float() * 2.0 - 1.0", shape))
            e = (f"F.margin_ranking_loss(pred, target, sign, margin={_num(m)}, reduction={{r}})" if form == "functional"
                 else f"torch.relu(-sign * (pred - target) + {_num(m)})")
        if form == "functional" and "{r}" in e:
            call = e.format(r=f'"{red_arg}"')
            fwd.append(f"x = {call}" if reduction != "row" else f"x = {call}.mean(dim=-1)")
        else:
            fwd.append(f"x = {finish(e)}")
    elif kind in ("cross_entropy", "soft_cross_entropy", "kl_div"):
        fwd = _lines(pre, "logits")
        if kind == "cross_entropy":
            args = [("logits", _randn(shape), shape), ("target", "torch.randint(0, num_classes, (batch_size,))", ["batch_size"])]
            fwd.append(f'x = F.cross_entropy(logits, target, reduction="{red_arg}")')
        else:
            args = [("logits", _randn(shape), shape), ("target", f"torch.softmax({_randn(shape)}, dim=-1)", shape)]
            if kind == "soft_cross_entropy":
                fwd.append(f"x = {finish('-(target * F.log_softmax(logits, dim=-1)).sum(dim=-1)', per_row=True)}")
            elif form == "functional":
                r = {"mean": "batchmean", "sum": "sum", "row": "none"}[reduction]
                call = f'F.kl_div(F.log_softmax(logits, dim=-1), target, reduction="{r}")'
                fwd.append(f"x = {call}" if reduction != "row" else f"x = {call}.sum(dim=-1)")
            else:
                e = "(target * (torch.log(target) - F.log_softmax(logits, dim=-1))).sum(dim=-1)"
                fwd.append(f"x = {finish(e, per_row=True)}")
    else:  # cosine, cosine_embedding, triplet
        if kind == "triplet":
            args = [(n, _randn(shape), shape) for n in ("anchor", "positive", "negative")]
            fwd = _lines(pre, "anchor")
            numbers["margin"] = m = float(_num(rng.uniform(0.5, 2.0)))
            if form == "functional":
                fwd.append(f'x = F.triplet_margin_loss(anchor, positive, negative, margin={_num(m)}, reduction="{red_arg}")')
            else:
                fwd += ["d_pos = ((anchor - positive) ** 2).sum(dim=-1).sqrt()",
                        "d_neg = ((anchor - negative) ** 2).sum(dim=-1).sqrt()"]
                fwd.append(f"x = {finish(f'torch.relu(d_pos - d_neg + {_num(m)})', per_row=True)}")
        else:
            args = [("a", _randn(shape), shape), ("b", _randn(shape), shape)]
            fwd = _lines(pre, "a")
            if kind == "cosine_embedding":
                numbers["margin"] = m = float(_num(rng.uniform(0.0, 0.5)))
                args.append(("sign", "torch.randint(0, 2, (batch_size,)).float() * 2.0 - 1.0", ["batch_size"]))
                fwd.append(f'x = F.cosine_embedding_loss(a, b, sign, margin={_num(m)}, reduction="{red_arg}")')
            elif form == "functional":
                fwd.append(f"x = {finish('1.0 - F.cosine_similarity(a, b, dim=-1)', per_row=True)}")
            else:
                e = "1.0 - (F.normalize(a, dim=-1) * F.normalize(b, dim=-1)).sum(dim=-1)"
                fwd.append(f"x = {finish(e, per_row=True)}")
    fwd.append("return x")
    red_text = {"mean": "mean-reduced (a scalar)", "sum": "sum-reduced (a scalar)", "row": "per row"}[reduction]
    return _Prob(
        title=f"Loss: {kind} ({form} form), {red_text}" + (f"; prediction first goes through {_chain_text(pre)}" if pre else "") + ".",
        knobs={"kind": kind, "form": form, "reduction": reduction, "rank": rank, "pre": _names(pre)},
        dims=dims, inputs=args, output=_tensor_doc(out) + (" (a scalar)" if not out else ""), out_shape=out,
        forward=fwd, numbers={**numbers, "pre": _numbers(pre)},
    )


_POOLS = ("max_pool1d", "avg_pool1d", "max_pool2d", "avg_pool2d", "lp_pool2d", "adaptive_avg_pool1d",
          "adaptive_avg_pool2d", "adaptive_max_pool2d", "window_max1d", "window_avg1d", "global_avg",
          "global_max")


def _gen_pool(rng: random.Random) -> _Prob:
    kind = rng.choice(_POOLS)
    cdim = 1 if kind.endswith("1d") else 2 if kind.endswith("2d") else rng.choice((1, 2))
    knobs: dict[str, Any] = {"kind": kind, "rank": cdim + 2}
    dims = _channel_dims(cdim)
    sp = [d.name for d in dims[2:]]
    x_shape = _names_of(dims)
    valid: Callable[[Sizes], bool] = lambda s: True  # noqa: E731
    notes: list[str] = []
    pre, iv = _draw_ops(rng, rng.choice((0, 0, 1, 2)), RANDN,
                        EW_MONOTONE if kind in ("adaptive_max_pool2d", "global_max") else EW_OPS)
    if kind in ("max_pool1d", "avg_pool1d", "max_pool2d", "avg_pool2d", "lp_pool2d"):
        k = rng.choice((2, 3, 4, 5))
        stride = rng.choice((k, 1, 2))
        pad = rng.choice((0, k // 2)) if kind != "lp_pool2d" else 0
        knobs.update(kernel=k, stride=stride, padding=pad)
        if kind == "lp_pool2d":
            call = f"F.lp_pool2d(x, 2.0, {k}, stride={stride})"
            iv = (0.0, k * max(abs(iv[0]), abs(iv[1])))
        else:
            call = f"F.{kind}(x, {k}, stride={stride}, padding={pad})"
        outs = [_conv_out(n, k, stride, pad) for n in sp]
        out_shape: list[Any] = ["batch_size", "channels"] + outs
        out_doc: list[Any] = ["batch_size", "channels"] + [f"{n}'" for n in sp]
        notes = [" ".join(f"{n}' = ({n} + {2 * pad} - {k}) // {stride} + 1." for n in sp)]
        valid = lambda s: all(f(s) >= 1 for f in outs)  # noqa: E731
        dims = [d if d.name not in sp else _Dim(d.name, (max(d.small[0], k + 2), d.small[1]), d.choices) for d in dims]
        what = f"F.{kind} (kernel {k}, stride {stride}, padding {pad})"
        pshape = "channels, 1" + (", 1" if cdim == 2 else "")
    elif kind.startswith("adaptive"):
        o = rng.choice((1, 2, 4, 7))
        knobs["output_size"] = o
        call = f"F.{kind}(x, {o})"
        out_shape = out_doc = ["batch_size", "channels"] + [o] * cdim
        dims = [d if d.name not in sp else _Dim(d.name, (max(d.small[0], 9), d.small[1] + 4), d.choices) for d in dims]
        what = f"F.{kind} to {o}"
        pshape = "channels, 1" + (", 1" if cdim == 2 else "")
    elif kind.startswith("window"):
        k = rng.choice((3, 5, 7))
        knobs["window"] = k
        red = "amax" if kind == "window_max1d" else "mean"
        call = f"x.unflatten(-1, (-1, {k})).{red}(dim=-1)"
        dims = dims[:2] + [_Dim("length", (3 * k, 9 * k), tuple(k * c for c in (64, 128, 256, 512)), mult=k)]
        out_doc = ["batch_size", "channels", f"length / {k}"]
        out_shape = ["batch_size", "channels", lambda s: s["length"] // k]
        notes = [f"length is a multiple of {k} (the window) in every configuration."]
        what = f"non-overlapping windows of {k} ({red}) along the last dim"
        pshape = "channels, 1"
    else:  # global
        keepdim = rng.random() < 0.5
        knobs["keepdim"] = keepdim
        red = "mean" if kind == "global_avg" else "amax"
        d = "(2, 3)" if cdim == 2 else "-1"
        call = f"x.{red}(dim={d}, keepdim={keepdim})"
        out_shape = out_doc = ["batch_size", "channels"] + ([1] * cdim if keepdim else [])
        what = f"global {red} over the spatial dims{' (keepdim)' if keepdim else ''}"
        pshape = ("channels, 1" + (", 1" if cdim == 2 else "")) if keepdim else "channels"
    # adaptive and global pools take windows that grow with the sizes: no saturating op after them
    after = EW_NONSAT if kind.startswith(("adaptive", "global")) else EW_OPS
    post, _ = _draw_ops(rng, rng.choice((0, 1, 1, 2, 3)), iv, after + ("bias", "scale"))
    names = _names(post)
    init_args: list[str] = []
    init: list[str] = []
    if "bias" in names or "scale" in names:
        init_args = ["channels"]
        init = _param_lines(post, pshape)
    fwd = _lines(pre) + [f"x = {call}"] + _lines(post) + ["return x"]
    knobs["pre"], knobs["post"] = _names(pre), names
    return _Prob(
        title=f"{what} of a {cdim + 2}-D tensor"
              + (f"; before: {_chain_text(pre)}" if pre else "") + (f"; after: {_chain_text(post)}" if post else "") + ".",
        knobs=knobs, dims=dims, inputs=[("x", _randn(x_shape), x_shape)], output=_tensor_doc(out_doc),
        out_shape=out_shape, forward=fwd, init_args=init_args, init=init,
        numbers={"pre": _numbers(pre), "post": _numbers(post)},
        params=_param_count(post, ["channels"]), valid=valid, notes=notes,
    )


_GENERATORS: dict[str, Callable[[random.Random], _Prob]] = {
    "elementwise_chain": _gen_elementwise,
    "gemm_tail": _gen_gemm,
    "conv_tail": _gen_conv,
    "softmax_family": _gen_softmax,
    "norm": _gen_norm,
    "reduction": _gen_reduction,
    "scan": _gen_scan,
    "loss": _gen_loss,
    "pool": _gen_pool,
}
assert tuple(_GENERATORS) == FAMILIES


def generate_torch(rng: random.Random, family: str) -> GeneratedProblem:
    """Draw one PyTorch problem of ``family`` (KernelBench format, float32).

    Args:
        rng: the draw's random generator; the same state gives the same problem.
        family: one of :data:`FAMILIES`.

    Returns:
        A :class:`GeneratedProblem` with ``kind="torch"``, ``function=None``, the file's
        text, knobs (the grammar's choices; numbers under ``knobs["numbers"]``), the
        configurations ``small_odd`` / ``main`` / ``large`` (``{"name", "sizes"}``, the
        same constant names; ``main`` equals the file's constants) and the structure key.

    Raises:
        KeyError: an unknown family.
    """
    if family not in _GENERATORS:
        raise KeyError(f"unknown torch family '{family}' (families: {', '.join(FAMILIES)})")
    for _ in range(20):
        prob = _GENERATORS[family](rng)
        try:
            return _finish(rng, family, prob)
        except RuntimeError:  # no sizes fit this structure's bounds: draw again (same rng)
            continue
    raise RuntimeError(f"{family}: no draw fits the size bounds")  # pragma: no cover - a grammar bug


# ---------------------------------------------------------------------------------------
# Degenerate draws
# ---------------------------------------------------------------------------------------


def _tensors(out: Any) -> list[Any]:
    import torch

    items = list(out) if isinstance(out, (tuple, list)) else [out]
    for t in items:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"forward returned a {type(t).__name__}, not a tensor")
    return items


def is_degenerate(source: str, sizes: dict[str, int], seed: int = 0) -> str | None:
    """Why a problem's output is degenerate at ``sizes``, or None when it is not.

    Runs the file's text in this process on the CPU (the caller bounds the process):
    the constants overridden with ``sizes`` (``problems.pytorch.override_constants``),
    ``Model(*get_init_inputs())`` under ``torch.manual_seed(seed)``, ``forward`` on the
    inputs of ``get_inputs()`` drawn under seeds ``seed + 1`` and ``seed + 2``, without
    gradients.

    Args:
        source: a KernelBench-format file's text.
        sizes: module-level int constants to set (a ``small_odd`` configuration).
        seed: the model's seed; the inputs use the next two.

    Returns:
        A one-line reason (its head before ``:`` names the kind): ``"not finite: ..."``
        (NaN/inf), ``"all zeros: ..."``, ``"constant output: ..."`` (every element equal
        within 1e-6 relative, outputs of more than one element), ``"does not depend on its
        input: ..."`` (both draws give identical outputs); None otherwise.

    Raises:
        SyntaxError, ValueError: the source does not parse, or ``sizes`` names a constant
            the file does not bind; any exception the file raises when it runs.
        TypeError: forward returns something other than tensors.
    """
    import torch

    from cudaperf_cli.problems.pytorch import override_constants

    tree = override_constants(source, sizes, "<generated>")
    ns: dict[str, Any] = {"__name__": "cudaperf_generated_problem"}
    exec(compile(tree, "<generated>", "exec"), ns)  # noqa: S102 - generated problem, bounded worker
    torch.manual_seed(seed)
    model = ns["Model"](*ns["get_init_inputs"]())
    runs = []
    with torch.no_grad():
        for k in (1, 2):
            torch.manual_seed(seed + k)
            inputs = ns["get_inputs"]()
            runs.append(_tensors(model(*inputs)))
    first, second = runs
    for i, t in enumerate(first):
        v = t.detach().double()
        if not bool(torch.isfinite(v).all()):
            return f"not finite: output {i} has NaN or inf"
        if v.numel() > 0 and bool((v == 0).all()):
            return f"all zeros: output {i} ({tuple(t.shape)})"
        if v.numel() > 1:
            hi, lo = float(v.max()), float(v.min())
            if hi - lo <= 1e-6 * max(abs(hi), abs(lo)):
                return f"constant output: output {i} ({tuple(t.shape)}) is {hi:.6g} everywhere"
    if len(first) == len(second) and all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(first, second)):
        return "does not depend on its input: two input draws give identical outputs"
    for i, t in enumerate(second):
        if not bool(torch.isfinite(t.detach().double()).all()):
            return f"not finite: output {i} has NaN or inf (second input draw)"
    return None
