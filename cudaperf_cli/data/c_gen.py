"""A generator of C problems: affine loop nests from a grammar of statement and loop shapes.

``cudaperf data generate --kind c`` (``dataset.py``) calls :func:`generate_c` with a seeded
``random.Random`` and a family.  Each draw is one C file that ``cudaperf optimize`` loads
as a user's file (docs/c-problems.md): a ``void`` function with C99 array parameters
(size parameters first, then coefficients, then arrays), an init function
``init_<function>`` taking the function's sizes and arrays, and a ``main`` whose
``#define`` constants are the ``main`` configuration's sizes, which mallocs the arrays,
calls the init function and the function, and prints a checksum.

Families (the split key) and their grammar's choices (the ``knobs``):

======================  ===================================================================
``map1d``               1-3 inputs, 1-2 outputs, an expression tree (``+ - *``, ``fmax``,
                        ``fmin``, ``sqrt(fabs)``, ``exp(-fabs)``, ``tanh``, ``x/(1+|x|)``),
                        an optional coefficient, in-place update, mixed float/double arrays
``map2d``               a 2-D map with row/column vectors broadcast, inputs stored
                        transposed, the output written transposed, loop order ij or ji
``stencil1d/2d/3d``     radius 1-4 (1-D), cross/box/anisotropic/sparse shapes (2-D),
                        7/13/19/27-point and sparse (3-D); variable coefficients, a second
                        input, a nonlinear wrapper, loop orders that read across rows
``time_stencil``        a time loop over a 1-D or 2-D stencil: ping-pong, copy-back or
                        in place (Gauss-Seidel: a wavefront)
``matmul``              transposed operands, four accumulation styles (a scalar
                        accumulator, PolyBench's i-k-j, in place, zeroed first), alpha/beta,
                        double accumulation of float data, an epilogue (bias, ReLU)
``batched_matmul``      a batch dimension, the second operand shared or batched
``matvec``              row and column products, both at once (bicg), two matrices
                        (gesummv), A then A^T (atax); accumulators in a scalar or the array
``contraction``         tensor contractions with random index assignment and storage order,
                        rank-1..3 outer-product updates, doitgen's scratch-array product
``triangular``          triangular matrix-vector products (lower/upper, strict, transposed),
                        syrk-like triangle updates, triangle symmetrisation, forward
                        substitution
``banded``              band-storage matrix-vector products (widths 3-17), diagonals as
                        separate arrays, a diagonal stripe of a dense matrix, several
                        right-hand sides
``reduction``           row, column, 3-D middle-axis and full reductions: sum, sum of
                        squares, absolute sum, max, min, mean, dot product
``scan``                prefix sums/maxima and decaying recurrences along rows, down
                        columns, in place, exclusive, or over a whole vector
``norm_rows``           per-row (or per-column) statistics then normalisation: layer norm,
                        RMS norm, L2, softmax, min-max, log-sum-exp
======================  ===================================================================

Every array is initialised by the init function with bounded values (``[-0.5, 0.5)`` or
``[0, 1)``; diagonals of triangular solves dominant), so every expression stays finite.
Configurations (:data:`CONFIG_NAMES`): ``small_odd`` (every size odd, the largest 15-99),
``main`` (8-64 MB of arrays, at most :data:`MAIN_FLOP` FLOP) and ``large`` (256 MB-1 GB,
at most :data:`LARGE_FLOP`); step counts are 3 / 4-40 / as ``main``.  FLOP and byte counts
of the size planning are the grammar's own estimates (2 FLOP a multiply-add, one per
other operator; bytes: the arrays' footprint).

The ``structure_key`` is the family and the function's text with floating-point literals
(weights, eps) replaced by ``C``: sizes, weights and init values never make two problems
different.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Callable

from cudaperf_cli.data.spec import GeneratedProblem

FAMILIES = ("map1d", "map2d", "stencil1d", "stencil2d", "stencil3d", "time_stencil", "matmul",
            "batched_matmul", "matvec", "contraction", "triangular", "banded", "reduction", "scan",
            "norm_rows")

MB = 1 << 20
#: The ``main`` configuration: arrays of MAIN_BYTES bytes (drawn log-uniformly), at most MAIN_FLOP.
MAIN_BYTES = (8 * MB, 64 * MB)
MAIN_FLOP = 2e9
#: The ``large`` configuration: arrays of LARGE_BYTES bytes, at most LARGE_FLOP.
LARGE_BYTES = (256 * MB, 1024 * MB)
LARGE_FLOP = 2e10
#: The ``small_odd`` configuration's largest size is drawn from these (odd) bounds.
SMALL_MAX = (15, 99)

_FLOAT_LIT = re.compile(r"(?<![\w.])(\d+\.\d*|\.\d+)(e[-+]?\d+)?f?(?![\w.])")


# ---------------------------------------------------------------------------------------
# Types and expressions
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ty:
    """A floating type: ``float`` or ``double``."""

    name: str

    @property
    def size(self) -> int:
        return 4 if self.name == "float" else 8

    def lit(self, x: float) -> str:
        """A literal of this type (``0.25f`` / ``0.25``)."""
        s = f"{x:.4g}"
        if "." not in s and "e" not in s:
            s += ".0"
        return s + ("f" if self.name == "float" else "")

    def fn(self, name: str) -> str:
        """A math function of this type (``sqrtf`` / ``sqrt``)."""
        return name + ("f" if self.name == "float" else "")


FLOAT, DOUBLE = _Ty("float"), _Ty("double")


def _ty(rng: random.Random) -> _Ty:
    return FLOAT if rng.random() < 0.6 else DOUBLE


def _read(ty: _Ty, arr_ty: _Ty, ref: str) -> str:
    """``ref`` read in type ``ty`` (a cast where the array's type differs)."""
    return ref if ty == arr_ty else f"({ty.name}){ref}"


def _weight(rng: random.Random) -> float:
    return round(rng.choice([-1, 1]) * rng.uniform(0.1, 1.5), 3)


#: Unary forms: name -> C text of ``x`` (``{f}`` a math function of the type, ``{w}`` a
#: weight, ``{one}``/``{zero}`` literals). ``BOUNDED`` ones map any value into [-1, 1].
_UNARY = {
    "sqrt_abs": "{f[sqrt]}({f[fabs]}({x}))",
    "relu": "{f[fmax]}({x}, {zero})",
    "exp_neg_abs": "{f[exp]}(-{f[fabs]}({x}))",
    "tanh": "{f[tanh]}({x})",
    "softsign": "{x} / ({one} + {f[fabs]}({x}))",
    "scale": "{w} * {x}",
    "square": "{x} * {x}",
    "abs": "{f[fabs]}({x})",
}
_BOUNDED = ("tanh", "softsign", "exp_neg_abs")


class _Fns(dict):
    def __init__(self, ty: _Ty):
        super().__init__()
        self.ty = ty

    def __missing__(self, name: str) -> str:
        return self.ty.fn(name)


def _apply(rng: random.Random, ty: _Ty, name: str, x: str) -> str:
    """The unary form ``name`` of :data:`_UNARY` applied to ``x``."""
    return _UNARY[name].format(f=_Fns(ty), x=x, zero=ty.lit(0), one=ty.lit(1), w=ty.lit(_weight(rng)))


def _unary(rng: random.Random, ty: _Ty, x: str) -> str:
    return _apply(rng, ty, rng.choice(sorted(_UNARY)), x)


def _maybe(rng: random.Random, ty: _Ty, x: str, p: float, forms: tuple[str, ...] | None = None) -> tuple[str, str | None]:
    """``(x with a unary form, its name)`` with probability ``p``, else ``(x, None)``."""
    if rng.random() >= p:
        return x, None
    name = rng.choice(sorted(forms or _UNARY))
    return _apply(rng, ty, name, x), name


def _binary(rng: random.Random, ty: _Ty, a: str, b: str) -> str:
    f = ty.fn
    forms = [
        lambda: f"({a} + {b})",
        lambda: f"({a} - {b})",
        lambda: f"{a} * {b}",
        lambda: f"{f('fmax')}({a}, {b})",
        lambda: f"{f('fmin')}({a}, {b})",
        lambda: f"({ty.lit(_weight(rng))} * {a} + {ty.lit(_weight(rng))} * {b})",
    ]
    return rng.choice(forms)()


def _combine(rng: random.Random, ty: _Ty, leaves: list[str], *, p_unary: float = 0.35) -> str:
    """An expression tree that reads every leaf once: leaves maybe wrapped in a unary form,
    paired by random binary forms, the root maybe wrapped."""
    terms = [(_unary(rng, ty, t) if rng.random() < p_unary else t) for t in leaves]
    while len(terms) > 1:
        a = terms.pop(rng.randrange(len(terms)))
        b = terms.pop(rng.randrange(len(terms)))
        terms.append(_binary(rng, ty, a, b))
    out = terms[0]
    if rng.random() < p_unary:
        out = _unary(rng, ty, out)
    return out


def _ops(expr: str) -> int:
    """Operators of an expression (the FLOP estimate of one evaluation)."""
    return max(1, sum(expr.count(c) for c in "+-*/") + expr.count("("))


# ---------------------------------------------------------------------------------------
# The file builder
# ---------------------------------------------------------------------------------------


@dataclass
class _Array:
    name: str
    ty: _Ty
    dims: list[str]  # extents over size names and literals, outermost first
    const: bool
    init: str | None = None  # a C expression over the indices i0, i1...; None: the default

    def param(self) -> str:
        c = "const " if self.const else ""
        return f"{c}{self.ty.name} {self.name}" + "".join(f"[{d}]" for d in self.dims)


@dataclass
class _Sizes:
    """How the sizes of a problem scale: names in parameter order, relative extents, lower
    bounds (extents positive, the structure valid), a step count, and the cost."""

    names: list[str]
    ratio: dict[str, float]
    lo: dict[str, int]
    cost: Callable[[dict[str, int]], tuple[float, float]]  # sizes -> (bytes, FLOP)
    steps: str | None = None


@dataclass
class _File:
    fn: str
    sizes: list[str]
    coefs: list[tuple[str, _Ty, float]] = field(default_factory=list)  # name, type, value in main
    arrays: list[_Array] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    doc: str = ""

    def array(self, name: str, ty: _Ty, dims: list[str], *, const: bool, init: str | None = None) -> _Array:
        a = _Array(name, ty, dims, const, init)
        self.arrays.append(a)
        return a

    def function_text(self) -> str:
        params = ["int " + s for s in self.sizes] + [f"{t.name} {n}" for n, t, _ in self.coefs]
        params += [a.param() for a in self.arrays]
        return f"void {self.fn}({', '.join(params)})\n{{\n" + "\n".join(self.body) + "\n}\n"

    def init_text(self, rng: random.Random) -> str:
        params = ["int " + s for s in self.sizes] + [_Array(a.name, a.ty, a.dims, False).param() for a in self.arrays]
        lines = [f"void init_{self.fn}({', '.join(params)})", "{"]
        for a in self.arrays:
            idx = [f"i{d}" for d in range(len(a.dims))]
            expr = a.init
            if expr is None:
                primes = rng.sample([3, 5, 7, 11, 13, 17, 19, 23, 29, 31], len(a.dims))
                mod = rng.choice([97, 101, 103, 107, 109, 113])
                terms = " + ".join(f"{p} * {v}" for p, v in zip(primes, idx))
                shift = f" - {a.ty.lit(0.5)}" if rng.random() < 0.7 else ""
                expr = f"({a.ty.name})(({terms} + {rng.randrange(mod)}) % {mod}) / {a.ty.lit(mod)}{shift}"
            ind = "    "
            for d, (v, ext) in enumerate(zip(idx, a.dims)):
                lines.append(f"{ind}for (int {v} = 0; {v} < {ext}; {v}++)")
                ind += "    "
            lines.append(f"{ind}{a.name}{''.join(f'[{v}]' for v in idx)} = {expr};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def main_text(self, sizes: dict[str, int]) -> str:
        up = {s: s.upper() for s in self.sizes}

        def big(ext: str) -> str:
            return re.sub(r"[a-z_][a-z_0-9]*", lambda m: up.get(m.group(0), m.group(0)), ext)

        lines = [f"#define {up[s]} {sizes[s]}" for s in self.sizes]
        lines += ["", "int main(void)", "{"]
        for a in self.arrays:
            dims = [big(d) for d in a.dims]
            count = " * ".join(f"({d})" for d in dims)
            decl = f"{a.ty.name} *{a.name}" if len(dims) == 1 else \
                f"{a.ty.name} (*{a.name}){''.join(f'[{d}]' for d in dims[1:])}"
            lines.append(f"    {decl} = malloc(sizeof({a.ty.name}) * (size_t){count});")
        lines.append("    if (" + " || ".join(f"!{a.name}" for a in self.arrays) + ")")
        lines.append("        return 1;")
        lines.append(f"    init_{self.fn}({', '.join([up[s] for s in self.sizes] + [a.name for a in self.arrays])});")
        args = [up[s] for s in self.sizes] + [t.lit(v) for _, t, v in self.coefs]
        for a in self.arrays:
            if a.const and len(a.dims) > 1:
                args.append(f"(const {a.ty.name} (*){''.join(f'[{big(d)}]' for d in a.dims[1:])}){a.name}")
            else:
                args.append(a.name)
        lines.append(f"    {self.fn}({', '.join(args)});")
        lines.append("    double checksum = 0.0;")
        for a in self.arrays:
            if not a.const:
                count = " * ".join(f"({big(d)})" for d in a.dims)
                lines.append(f"    for (size_t cp_q = 0; cp_q < (size_t){count}; cp_q++)")
                lines.append(f"        checksum += ((const {a.ty.name} *){a.name})[cp_q];")
        lines.append('    printf("checksum = %.6e\\n", checksum);')
        lines += [f"    free({a.name});" for a in self.arrays]
        lines += ["    return 0;", "}"]
        return "\n".join(lines) + "\n"

    def source(self, rng: random.Random, sizes: dict[str, int]) -> str:
        head = "/* " + self.doc.strip().replace("\n", "\n * ") + "\n *\n * Generated by cudaperf data generate (the C grammar of cudaperf_cli/data/c_gen.py).\n */\n"
        return (head + "#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n\n"
                + self.function_text() + "\n" + self.init_text(rng) + "\n" + self.main_text(sizes))


def _nest(loops: list[tuple[str, str, str]], body: list[str], ind: int = 1) -> list[str]:
    """``for (int v = lo; v < hi; v++)`` per loop, ``body`` innermost (lines, braced when several)."""
    out = []
    for v, lo, hi in loops:
        out.append("    " * ind + f"for (int {v} = {lo}; {v} < {hi}; {v}++)")
        ind += 1
    if len(body) == 1:
        out.append("    " * ind + body[0])
    else:
        out.append("    " * (ind - 1) + "{")
        out += ["    " * ind + b for b in body]
        out.append("    " * (ind - 1) + "}")
    return out


def _ix(*idx: str) -> str:
    return "".join(f"[{i}]" for i in idx)


def _off(v: str, d: int) -> str:
    return v if d == 0 else (f"{v} + {d}" if d > 0 else f"{v} - {-d}")


def _ratio(rng: random.Random) -> float:
    return rng.choice([0.25, 0.5, 1.0, 1.0, 1.0, 2.0, 4.0])


# ---------------------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------------------


def _fam_map1d(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    f = _File("map1d", ["n"])
    nin, nout = rng.randint(1, 3), (2 if rng.random() < 0.3 else 1)
    inplace = rng.random() < 0.3
    mixed = rng.random() < 0.3
    ins = [f.array(f"x{k}", (_ty(rng) if mixed else ty), ["n"], const=True) for k in range(nin)]
    if rng.random() < 0.5:
        f.coefs.append(("alpha", ty, 1.5))
    outs = [f.array(f"y{k}", (_ty(rng) if mixed else ty), ["n"], const=False) for k in range(nout)]
    stmts, ops = [], 0
    for k, o in enumerate(outs):
        leaves = [_read(ty, a.ty, f"{a.name}[i]") for a in rng.sample(ins, rng.randint(1, nin))]
        if f.coefs and rng.random() < 0.6:
            leaves.append("alpha")
        if k > 0 and rng.random() < 0.5:
            leaves.append(_read(ty, outs[0].ty, "y0[i]"))
        e = _combine(rng, ty, leaves)
        ops += _ops(e)
        rhs = f"{o.name}[i] + {e}" if inplace else e
        stmts.append(f"{o.name}[i] = {rhs};")
    f.body = _nest([("i", "0", "n")], stmts)
    nb = sum(a.ty.size for a in f.arrays)
    f.doc = f"An elementwise map of {nin} input(s) into {nout} output(s){' (in place)' if inplace else ''}, {ty.name}."
    knobs = {"dtype": ty.name, "inputs": nin, "outputs": nout, "inplace": inplace, "mixed_dtypes": mixed,
             "coefficient": bool(f.coefs)}
    return f, _Sizes(["n"], {"n": 1.0}, {"n": 1}, lambda s: (nb * s["n"], ops * s["n"])), knobs


def _fam_map2d(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    f = _File("map2d", ["n", "m"])
    in_t = rng.random() < 0.35
    out_t = rng.random() < 0.3
    order = rng.choice(["ij", "ij", "ji"])
    A = f.array("A", ty, ["m", "n"] if in_t else ["n", "m"], const=True)
    leaves = ["A[j][i]" if in_t else "A[i][j]"]
    extras = []
    if rng.random() < 0.4:
        f.array("B", _ty(rng), ["n", "m"], const=True)
        leaves.append(_read(ty, f.arrays[-1].ty, "B[i][j]"))
        extras.append("B")
    if rng.random() < 0.5:
        f.array("r", ty, ["n"], const=True)
        leaves.append("r[i]")
        extras.append("row vector")
    if rng.random() < 0.5:
        f.array("c", ty, ["m"], const=True)
        leaves.append("c[j]")
        extras.append("column vector")
    if rng.random() < 0.3:
        f.coefs.append(("alpha", ty, 0.75))
        leaves.append("alpha")
    e = _combine(rng, ty, leaves)
    f.array("O", ty, ["m", "n"] if out_t else ["n", "m"], const=False)
    lhs = "O[j][i]" if out_t else "O[i][j]"
    loops = [("i", "0", "n"), ("j", "0", "m")]
    if order == "ji":
        loops.reverse()
    f.body = _nest(loops, [f"{lhs} = {e};"])
    nb = sum(a.ty.size for a in f.arrays if len(a.dims) == 2)
    ops = _ops(e)
    f.doc = (f"A 2-D map of {A.name}{' (stored transposed)' if in_t else ''} with {', '.join(extras) or 'no other input'}"
             f" into O{' (written transposed)' if out_t else ''}, loops {order}, {ty.name}.")
    knobs = {"dtype": ty.name, "input_transposed": in_t, "output_transposed": out_t, "loop_order": order,
             "extras": extras}
    r = _ratio(rng)
    return f, _Sizes(["n", "m"], {"n": 1.0, "m": r}, {"n": 1, "m": 1},
                     lambda s: (nb * s["n"] * s["m"] + 16 * (s["n"] + s["m"]), ops * s["n"] * s["m"])), knobs


def _weighted_sum(rng: random.Random, ty: _Ty, reads: list[str], normalise: bool) -> str:
    w = [rng.uniform(0.1, 1.0) for _ in reads]
    if normalise:
        total = sum(w)
        w = [x / total for x in w]
    else:
        w = [x * rng.choice([-1, 1]) for x in w]
    return " + ".join(f"{ty.lit(round(x, 4))} * {r}" for x, r in zip(w, reads))


def _stencil_body(rng: random.Random, ty: _Ty, f: _File, offsets: list[tuple[int, ...]], idx: list[str],
                  src: str, dst: str, *, extras: bool) -> tuple[str, list[str], int]:
    reads = [f"{src}{_ix(*[_off(v, d) for v, d in zip(idx, off)])}" for off in offsets]
    e = _weighted_sum(rng, ty, reads, normalise=True)
    notes = []
    if extras and rng.random() < 0.3:
        f.array("coef", ty, list(f.arrays[0].dims), const=True)
        e = f"coef{_ix(*idx)} * ({e})"
        notes.append("variable coefficient")
    if extras and rng.random() < 0.25:
        f.array("S", ty, list(f.arrays[0].dims), const=True)
        e = f"{e} + {ty.lit(_weight(rng))} * S{_ix(*idx)}"
        notes.append("source term")
    if extras and rng.random() < 0.25:
        e = _unary(rng, ty, f"({e})")
        notes.append("nonlinear")
    return f"{dst}{_ix(*idx)} = {e};", notes, 2 * len(offsets) + 2


def _stencil(rng: random.Random, dim: int, offsets: list[tuple[int, ...]], shape: str) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    names = ["n", "m", "l"][:dim]
    idx = ["i", "j", "k"][:dim]
    f = _File(f"stencil{dim}d", names)
    f.array("A", ty, list(names), const=True)
    lo = [max(0, -min(o[d] for o in offsets)) for d in range(dim)]
    hi = [max(0, max(o[d] for o in offsets)) for d in range(dim)]
    stmt, notes, ops = _stencil_body(rng, ty, f, offsets, idx, "A", "B", extras=True)
    f.arrays.append(_Array("B", ty, list(names), False))
    order = list(range(dim))
    if dim > 1 and rng.random() < 0.3:
        while order == list(range(dim)):
            rng.shuffle(order)
    loops = [(idx[d], str(lo[d]), f"{names[d]} - {hi[d]}" if hi[d] else names[d]) for d in order]
    f.body = _nest(loops, [stmt])
    narr = len(f.arrays)
    f.doc = (f"One sweep of a {len(offsets)}-point {dim}-D stencil ({shape}) from A into B"
             f"{', ' + ', '.join(notes) if notes else ''}, loops {''.join(idx[d] for d in order)}, {ty.name}.")
    knobs = {"dtype": ty.name, "shape": shape, "points": len(offsets), "loop_order": "".join(idx[d] for d in order),
             "extras": notes}
    ratio = {n: (1.0 if d == 0 else _ratio(rng) if dim == 2 else rng.choice([0.5, 1.0, 1.0, 2.0])) for d, n in enumerate(names)}
    lows = {n: lo[d] + hi[d] + 1 for d, n in enumerate(names)}
    return f, _Sizes(names, ratio, lows, lambda s: (narr * ty.size * math.prod(s.values()), ops * math.prod(s.values()))), knobs


def _fam_stencil1d(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    r = rng.randint(1, 4)
    shape = rng.choice(["symmetric", "symmetric", "forward", "backward", "sparse"])
    if shape == "symmetric":
        offs = list(range(-r, r + 1))
    elif shape == "forward":
        offs = list(range(0, r + 1))
    elif shape == "backward":
        offs = list(range(-r, 1))
    else:
        offs = sorted({0, *rng.sample([d for d in range(-r, r + 1) if d], max(1, min(2 * r, rng.randint(1, 2 * r))))})
    f, s, k = _stencil(rng, 1, [(d,) for d in offs], f"{shape}, radius {r}")
    k["radius"] = r
    return f, s, k


def _fam_stencil2d(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    shape = rng.choice(["cross", "box", "anisotropic", "sparse"])
    if shape == "cross":
        r = rng.randint(1, 3)
        offs = [(0, 0)] + [(d, 0) for d in range(-r, r + 1) if d] + [(0, d) for d in range(-r, r + 1) if d]
    elif shape == "box":
        r = rng.randint(1, 2)
        offs = [(a, b) for a in range(-r, r + 1) for b in range(-r, r + 1)]
    elif shape == "anisotropic":
        ra, rb = rng.randint(0, 2), rng.randint(1, 3)
        offs = [(a, b) for a in range(-ra, ra + 1) for b in range(-rb, rb + 1) if a == 0 or b == 0]
        r = max(ra, rb)
    else:
        r = rng.randint(1, 2)
        box = [(a, b) for a in range(-r, r + 1) for b in range(-r, r + 1) if (a, b) != (0, 0)]
        offs = [(0, 0)] + sorted(rng.sample(box, rng.randint(2, min(8, len(box)))))
    f, s, k = _stencil(rng, 2, offs, f"{shape}, radius {r}")
    k["radius"] = r
    return f, s, k


def _fam_stencil3d(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    shape = rng.choice(["7-point", "13-point", "19-point", "27-point", "sparse"])
    cube = [(a, b, c) for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)]
    if shape == "7-point":
        offs = [o for o in cube if sum(map(abs, o)) <= 1]
    elif shape == "13-point":
        offs = [(0, 0, 0)] + [tuple(d if a == ax else 0 for a in range(3)) for ax in range(3) for d in (-2, -1, 1, 2)]
    elif shape == "19-point":
        offs = [o for o in cube if sum(map(abs, o)) <= 2]
    elif shape == "27-point":
        offs = cube
    else:
        offs = [(0, 0, 0)] + sorted(rng.sample([o for o in cube if o != (0, 0, 0)], rng.randint(3, 10)))
    return _stencil(rng, 3, offs, shape)


def _fam_time_stencil(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    dim = rng.choice([1, 1, 2, 2, 3])
    scheme = rng.choice(["pingpong", "pingpong", "copyback", "inplace"])
    r = 1 if dim == 3 else rng.randint(1, 3 - dim + 1)
    names = ["n", "m", "l"][:dim]
    idx = ["i", "j", "k"][:dim]
    box = dim > 1 and rng.random() < 0.3
    cube = [()]
    for _ in range(dim):
        cube = [c + (d,) for c in cube for d in range(-r, r + 1)]
    offs = [o for o in cube if box or sum(1 for d in o if d) <= 1]
    f = _File("time_stencil", ["tsteps", *names])
    f.array("A", ty, list(names), const=False)
    if scheme != "inplace":
        f.array("B", ty, list(names), const=False)
    source = rng.random() < 0.3
    if source:
        f.array("S", ty, list(names), const=True)
    inner = [(v, str(r), f"{n} - {r}") for v, n in zip(idx, names)]
    here = _ix(*idx)
    post = rng.choice([None, None, *_BOUNDED])

    def sweep(src: str, dst: str) -> list[str]:
        e = _weighted_sum(rng, ty, [f"{src}{_ix(*[_off(v, d) for v, d in zip(idx, o)])}" for o in offs], True)
        if source:
            e = f"{ty.lit(0.9)} * ({e}) + {ty.lit(0.1)} * S{here}"
        if post:
            e = _apply(rng, ty, post, f"({e})")
        return _nest(inner, [f"{dst}{here} = {e};"], 2)

    ops = 2 * len(offs) + 3
    if scheme == "inplace":
        body = sweep("A", "A")
    else:
        body = sweep("A", "B")
        if scheme == "pingpong":
            body += sweep("B", "A")
            ops *= 2
        else:
            body += _nest(inner, [f"A{here} = B{here};"], 2)
    f.body = ["    for (int t = 0; t < tsteps; t++) {", *body, "    }"]
    narr = len(f.arrays)
    f.doc = (f"{'A Gauss-Seidel' if scheme == 'inplace' else 'A Jacobi'} time loop over a {len(offs)}-point {dim}-D "
             f"stencil ({scheme}){', a source term' if source else ''}{', ' + post if post else ''}, {ty.name}.")
    knobs = {"dtype": ty.name, "dims": dim, "scheme": scheme, "radius": r, "points": len(offs), "box": box,
             "source": source, "post": post}
    ratio = {"tsteps": 1.0, **{n: (1.0 if d == 0 else rng.choice([0.5, 1.0, 2.0]) if dim == 3 else _ratio(rng))
                               for d, n in enumerate(names)}}
    lows = {"tsteps": 1, **{n: 2 * r + 1 for n in names}}
    return f, _Sizes(["tsteps", *names], ratio, lows,
                     lambda s: (narr * ty.size * math.prod(s[n] for n in names),
                                ops * s["tsteps"] * math.prod(s[n] for n in names)), steps="tsteps"), knobs


def _epilogue(rng: random.Random, ty: _Ty, f: _File, acc: str, col: str, extent: str) -> tuple[str, list[str]]:
    """``acc`` with an optional bias (a vector over ``col``, of ``extent``) and unary form."""
    notes = []
    e = acc
    if rng.random() < 0.35:
        f.array("bias", ty, [extent], const=True)
        e = f"{e} + bias[{col}]"
        notes.append(f"bias[{col}]")
    e, post = _maybe(rng, ty, e if e == acc else f"({e})", 0.4)
    if post:
        notes.append(post)
    return e, notes


def _fam_matmul(rng: random.Random, batched: bool = False) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    ta, tb = rng.random() < 0.3, rng.random() < 0.3
    style = rng.choice(["scalar", "scalar", "ikj", "inplace", "zeroed"])
    acc_ty = DOUBLE if (ty == FLOAT and style == "scalar" and rng.random() < 0.3) else ty
    names = (["nb"] if batched else []) + ["ni", "nj", "nk"]
    f = _File("batched_matmul" if batched else "matmul", names)
    bx = ["b"] if batched else []
    bd = ["nb"] if batched else []
    shared_b = batched and rng.random() < 0.4
    if style != "scalar" or rng.random() < 0.4:
        f.coefs.append(("alpha", ty, 1.5))
    if style in ("ikj", "inplace"):
        f.coefs.append(("beta", ty, 1.2))
    f.array("A", ty, bd + (["nk", "ni"] if ta else ["ni", "nk"]), const=True)
    f.array("B", ty, ([] if shared_b else bd) + (["nj", "nk"] if tb else ["nk", "nj"]), const=True)
    a = "A" + _ix(*bx, *(["k", "i"] if ta else ["i", "k"]))
    b = "B" + _ix(*([] if shared_b else bx), *(["j", "k"] if tb else ["k", "j"]))
    c = "C" + _ix(*bx, "i", "j")
    alpha = "alpha * " if any(n == "alpha" for n, _, _ in f.coefs) else ""
    outer = [("b", "0", "nb")] if batched else []
    notes: list[str] = []
    if style == "scalar":
        acc = "acc" if acc_ty == ty else f"({ty.name})acc"
        col = rng.choice(["i", "j"])
        e, notes = _epilogue(rng, ty, f, f"{alpha}{acc}", col, "n" + col)
        if rng.random() < 0.3:
            if not any(n == "beta" for n, _, _ in f.coefs):
                f.coefs.append(("beta", ty, 1.2))
            e = f"beta * {c} + {e}"
            notes.append("beta*C")
        body = [f"{acc_ty.name} acc = {acc_ty.lit(0)};", "for (int k = 0; k < nk; k++)",
                f"    acc += {_read(acc_ty, ty, a)} * {_read(acc_ty, ty, b)};", f"{c} = {e};"]
        loops = [("i", "0", "ni"), ("j", "0", "nj")]
        if rng.random() < 0.3:
            loops.reverse()
            notes.append("loops ji")
        f.body = _nest(outer + loops, body)
    elif style == "ikj":
        f.body = _nest(outer + [("i", "0", "ni")], [
            "for (int j = 0; j < nj; j++)", f"    {c} *= beta;",
            "for (int k = 0; k < nk; k++)", "    for (int j = 0; j < nj; j++)",
            f"        {c} += alpha * {a} * {b};"])
    elif style == "inplace":
        f.body = _nest(outer + [("i", "0", "ni"), ("j", "0", "nj")], [
            f"{c} *= beta;", "for (int k = 0; k < nk; k++)", f"    {c} += alpha * {a} * {b};"])
    else:
        f.body = _nest(outer + [("i", "0", "ni"), ("j", "0", "nj")], [
            f"{c} = {ty.lit(0)};", "for (int k = 0; k < nk; k++)", f"    {c} += {alpha}{a} * {b};"])
    f.arrays.append(_Array("C", ty, bd + ["ni", "nj"], False))
    f.doc = (f"{'A batched' if batched else 'A'} matrix product C = A{'^T' if ta else ''} B{'^T' if tb else ''}"
             f"{' (B shared by the batch)' if shared_b else ''}, {style} accumulation"
             f"{' in double' if acc_ty != ty else ''}{', ' + ', '.join(notes) if notes else ''}, {ty.name}.")
    knobs = {"dtype": ty.name, "transpose_a": ta, "transpose_b": tb, "style": style, "accumulate": acc_ty.name,
             "epilogue": notes, "coefficients": [n for n, _, _ in f.coefs]}
    if batched:
        knobs["shared_b"] = shared_b
    ratio = {n: _ratio(rng) for n in names}
    if batched:
        ratio["nb"] = rng.choice([0.02, 0.05, 0.1])
    sz = ty.size

    def cost(s: dict[str, int]) -> tuple[float, float]:
        nb = s.get("nb", 1)
        return (sz * (nb * s["ni"] * s["nk"] + (1 if shared_b else nb) * s["nk"] * s["nj"] + nb * s["ni"] * s["nj"]),
                2.0 * nb * s["ni"] * s["nj"] * s["nk"])

    return f, _Sizes(names, ratio, {n: 1 for n in names}, cost), knobs


def _fam_batched_matmul(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    return _fam_matmul(rng, batched=True)


def _fam_matvec(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    pattern = rng.choice(["row", "col", "bicg", "gesummv", "atax"])
    scalar_acc = rng.random() < 0.5
    f = _File("matvec", ["n", "m"])
    f.array("A", ty, ["n", "m"], const=True)
    notes: list[str] = []

    acc_ty = DOUBLE if scalar_acc and ty == FLOAT and rng.random() < 0.3 else ty
    if acc_ty != ty:
        notes.append("accumulated in double")

    def sum_into(out: str, idx: str, inner: str, hi: str, term: str, finish: str = "{acc}") -> list[str]:
        if scalar_acc:
            acc = "acc" if acc_ty == ty else f"({ty.name})acc"
            return [f"{acc_ty.name} acc = {acc_ty.lit(0)};", f"for (int {inner} = 0; {inner} < {hi}; {inner}++)",
                    f"    acc += {term};", f"{out}[{idx}] = {finish.format(acc=acc)};"]
        lines = [f"{out}[{idx}] = {ty.lit(0)};", f"for (int {inner} = 0; {inner} < {hi}; {inner}++)",
                 f"    {out}[{idx}] += {term};"]
        if finish != "{acc}":
            lines.append(f"{out}[{idx}] = {finish.format(acc=f'{out}[{idx}]')};")
        return lines

    if pattern == "row":
        trans = rng.random() < 0.3
        if trans:
            f.arrays[0].dims = ["m", "n"]
            notes.append("A stored transposed")
        f.array("x", ty, ["m"], const=True)
        f.array("y", ty, ["n"], const=False)
        fin = "{acc}"
        if rng.random() < 0.4:
            f.coefs += [("alpha", ty, 1.5), ("beta", ty, 0.5)]
            f.arrays[-1].const = False
            fin = "alpha * {acc} + beta * y[i]"
            notes.append("alpha/beta")
            scalar_acc = True  # summed into y[i] itself, beta * y[i] would read the sum
        xj, pre = _maybe(rng, ty, "x[j]", 0.3)
        if pre:
            notes.append(f"{pre}(x)")
        f.body = _nest([("i", "0", "n")], sum_into("y", "i", "j", "m", f"{'A[j][i]' if trans else 'A[i][j]'} * {xj}", fin))
        flops = lambda s: 2.0 * s["n"] * s["m"]  # noqa: E731
    elif pattern == "col":
        f.array("x", ty, ["n"], const=True)
        f.array("y", ty, ["m"], const=False)
        xi, pre = _maybe(rng, ty, "x[i]", 0.3)
        if pre:
            notes.append(f"{pre}(x)")
        f.body = _nest([("j", "0", "m")], sum_into("y", "j", "i", "n", f"A[i][j] * {xi}"))
        flops = lambda s: 2.0 * s["n"] * s["m"]  # noqa: E731
    elif pattern == "bicg":
        f.array("p", ty, ["m"], const=True)
        f.array("r", ty, ["n"], const=True)
        f.array("q", ty, ["n"], const=False)
        f.array("s", ty, ["m"], const=False)
        f.body = (_nest([("j", "0", "m")], ["s[j] = " + ty.lit(0) + ";"])
                  + _nest([("i", "0", "n")], [f"q[i] = {ty.lit(0)};", "for (int j = 0; j < m; j++) {",
                                               "    s[j] += r[i] * A[i][j];", "    q[i] += A[i][j] * p[j];", "}"]))
        flops = lambda s: 4.0 * s["n"] * s["m"]  # noqa: E731
    elif pattern == "gesummv":
        f.coefs += [("alpha", ty, 1.5), ("beta", ty, 1.2)]
        f.array("B", ty, ["n", "m"], const=True)
        f.array("x", ty, ["m"], const=True)
        f.array("y", ty, ["n"], const=False)
        f.body = _nest([("i", "0", "n")], [f"{ty.name} s1 = {ty.lit(0)};", f"{ty.name} s2 = {ty.lit(0)};",
                                           "for (int j = 0; j < m; j++) {", "    s1 += A[i][j] * x[j];",
                                           "    s2 += B[i][j] * x[j];", "}", "y[i] = alpha * s1 + beta * s2;"])
        flops = lambda s: 4.0 * s["n"] * s["m"]  # noqa: E731
    else:
        f.array("x", ty, ["m"], const=True)
        f.array("tmp", ty, ["n"], const=False)
        f.array("y", ty, ["m"], const=False)
        f.body = (_nest([("j", "0", "m")], [f"y[j] = {ty.lit(0)};"])
                  + _nest([("i", "0", "n")], sum_into("tmp", "i", "j", "m", "A[i][j] * x[j]"))
                  + _nest([("i", "0", "n"), ("j", "0", "m")], ["y[j] += A[i][j] * tmp[i];"]))
        flops = lambda s: 4.0 * s["n"] * s["m"]  # noqa: E731
    if pattern in ("row", "col", "gesummv") and rng.random() < 0.4:
        out = f.arrays[-1].name
        v = "i" if pattern != "col" else "j"
        hi = "n" if pattern != "col" else "m"
        act, name = _maybe(rng, ty, f"{out}[{v}]", 1.0)
        f.body += _nest([(v, "0", hi)], [f"{out}[{v}] = {act};"])
        notes.append(f"{name} pass")
    nmat = sum(1 for a in f.arrays if len(a.dims) == 2)
    f.doc = (f"A matrix-vector product ({pattern}), {'a scalar accumulator' if scalar_acc else 'accumulated in the array'}"
             f"{', ' + ', '.join(notes) if notes else ''}, {ty.name}.")
    knobs = {"dtype": ty.name, "pattern": pattern, "scalar_accumulator": scalar_acc, "extras": notes}
    r = rng.choice([0.125, 0.5, 1.0, 1.0, 2.0, 8.0])
    return f, _Sizes(["n", "m"], {"n": 1.0, "m": r}, {"n": 1, "m": 1},
                     lambda s: (ty.size * (nmat * s["n"] * s["m"] + 3 * (s["n"] + s["m"])), flops(s))), knobs


def _fam_contraction(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    pattern = rng.choice(["tensor", "tensor", "tensor", "outer", "doitgen"])
    if pattern == "tensor":
        nfree = rng.choice([2, 3, 3])
        free = ["i", "j", "k"][:nfree]
        names = ["ni", "nj", "nk"][:nfree] + ["nl"]
        ext = dict(zip(free + ["l"], names))
        split = rng.randint(1, nfree - 1)
        fa, fb = free[:split], free[split:]
        if rng.random() < 0.5:
            fa, fb = fb, fa
        ia, ib = fa + ["l"], fb + ["l"]
        rng.shuffle(ia)
        rng.shuffle(ib)
        out = list(free)
        if rng.random() < 0.3:
            rng.shuffle(out)
        f = _File("contraction", names)
        f.array("A", ty, [ext[v] for v in ia], const=True)
        f.array("B", ty, [ext[v] for v in ib], const=True)
        f.array("O", ty, [ext[v] for v in out], const=False)
        loops = [(v, "0", ext[v]) for v in free]
        acc_ty = DOUBLE if ty == FLOAT and rng.random() < 0.3 else ty
        res, post = _maybe(rng, ty, "acc" if acc_ty == ty else f"({ty.name})acc", 0.35)
        f.body = _nest(loops, [f"{acc_ty.name} acc = {acc_ty.lit(0)};", "for (int l = 0; l < nl; l++)",
                               f"    acc += {_read(acc_ty, ty, 'A' + _ix(*ia))} * {_read(acc_ty, ty, 'B' + _ix(*ib))};",
                               f"O{_ix(*out)} = {res};"])
        spec = f"O[{''.join(out)}] = {post + ' of ' if post else ''}sum_l A[{''.join(ia)}] B[{''.join(ib)}]"
        knobs = {"dtype": ty.name, "pattern": pattern, "einsum": spec, "accumulate": acc_ty.name, "post": post}
        ratio = {n: rng.choice([0.5, 1.0, 1.0, 2.0]) for n in names}

        def cost(s: dict[str, int]) -> tuple[float, float]:
            e = {v: s[n] for v, n in ext.items()}
            return (ty.size * sum(math.prod(e[v] for v in x) for x in (ia, ib, out)),
                    2.0 * math.prod(e.values()))
    elif pattern == "outer":
        rank = rng.randint(1, 3)
        names = ["n", "m"]
        f = _File("contraction", names)
        if rng.random() < 0.5:
            f.coefs.append(("alpha", ty, 0.5))
        for p in range(rank):
            f.array(f"u{p}", ty, ["n"], const=True)
            f.array(f"v{p}", ty, ["m"], const=True)
        f.arrays.append(_Array("O", ty, ["n", "m"], False))
        terms = " + ".join(f"u{p}[i] * v{p}[j]" for p in range(rank))
        rhs = f"alpha * ({terms})" if f.coefs else terms
        f.body = _nest([("i", "0", "n"), ("j", "0", "m")], [f"O[i][j] = O[i][j] + {rhs};"])
        spec = f"rank-{rank} update"
        knobs = {"dtype": ty.name, "pattern": pattern, "rank": rank, "coefficient": bool(f.coefs)}
        ratio = {"n": 1.0, "m": _ratio(rng)}

        def cost(s: dict[str, int]) -> tuple[float, float]:
            return ty.size * (s["n"] * s["m"] + rank * (s["n"] + s["m"])), (2.0 * rank + 1) * s["n"] * s["m"]
    else:
        names = ["nr", "nq", "np"]
        f = _File("contraction", names)
        f.array("C4", ty, ["np", "np"], const=True)
        f.array("A", ty, ["nr", "nq", "np"], const=False)
        f.array("sum", ty, ["np"], const=False)
        f.body = _nest([("r", "0", "nr"), ("q", "0", "nq")], [
            "for (int p = 0; p < np; p++) {", f"    sum[p] = {ty.lit(0)};", "    for (int s = 0; s < np; s++)",
            "        sum[p] += A[r][q][s] * C4[s][p];", "}", "for (int p = 0; p < np; p++)", "    A[r][q][p] = sum[p];"])
        spec = "doitgen"
        knobs = {"dtype": ty.name, "pattern": pattern}
        ratio = {"nr": 1.0, "nq": rng.choice([0.5, 1.0]), "np": rng.choice([0.5, 1.0, 2.0])}

        def cost(s: dict[str, int]) -> tuple[float, float]:
            return ty.size * (s["nr"] * s["nq"] * s["np"] + s["np"] ** 2), 2.0 * s["nr"] * s["nq"] * s["np"] ** 2
    f.doc = f"A contraction: {spec}, {ty.name}."
    return f, _Sizes(names, ratio, {n: 1 for n in names}, cost), knobs


def _fam_triangular(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    pattern = rng.choice(["trmv", "trmv", "syrk", "symmetrise", "trsv"])
    lower = rng.random() < 0.6
    strict = rng.random() < 0.3
    names = ["n", "m"] if pattern == "syrk" else ["n"]
    f = _File("triangular", names)
    jlo, jhi = ("0", "i + 1") if lower else ("i", "n")
    if strict:
        jlo, jhi = ("0", "i") if lower else ("i + 1", "n")
    tri = f"{'strictly ' if strict else ''}{'lower' if lower else 'upper'}"
    if pattern == "trmv":
        trans = rng.random() < 0.3
        f.array("L", ty, ["n", "n"], const=True)
        f.array("x", ty, ["n"], const=True)
        f.array("y", ty, ["n"], const=False)
        a = "L[j][i]" if trans else "L[i][j]"
        res, post = _maybe(rng, ty, "acc", 0.4)
        f.body = _nest([("i", "0", "n")], [f"{ty.name} acc = {ty.lit(0)};", f"for (int j = {jlo}; j < {jhi}; j++)",
                                           f"    acc += {a} * x[j];", f"y[i] = {res};"])
        doc = f"A {tri} triangular matrix-vector product{' with the transposed matrix' if trans else ''}"
        knobs = {"transposed": trans, "post": post}
        cost = lambda s: (ty.size * (s["n"] ** 2 + 2 * s["n"]), 1.0 * s["n"] ** 2)  # noqa: E731
    elif pattern == "syrk":
        f.coefs += [("alpha", ty, 1.5), ("beta", ty, 1.2)]
        trans = rng.random() < 0.3
        f.array("A", ty, ["m", "n"] if trans else ["n", "m"], const=True)
        f.array("C", ty, ["n", "n"], const=False)
        ai, aj = ("A[k][i]", "A[k][j]") if trans else ("A[i][k]", "A[j][k]")
        res, post = _maybe(rng, ty, "alpha * acc", 0.3, ("relu", "tanh", "softsign", "abs"))
        res = f"beta * C[i][j] + {res}"
        f.body = _nest([("i", "0", "n"), ("j", jlo, jhi)], [
            f"{ty.name} acc = {ty.lit(0)};", "for (int k = 0; k < m; k++)", f"    acc += {ai} * {aj};",
            f"C[i][j] = {res};"])
        doc = f"A symmetric rank-k update of the {tri} triangle{' (A stored transposed)' if trans else ''}"
        knobs = {"transposed": trans, "post": post}
        cost = lambda s: (ty.size * (s["n"] * s["m"] + s["n"] ** 2), 1.0 * s["n"] ** 2 * s["m"])  # noqa: E731
    elif pattern == "symmetrise":
        f.array("A", ty, ["n", "n"], const=True)
        f.array("S", ty, ["n", "n"], const=False)
        e = _combine(rng, ty, ["A[i][j]", "A[j][i]"])
        f.body = _nest([("i", "0", "n"), ("j", jlo, jhi)], [f"S[i][j] = {e};"])
        doc = f"The {tri} triangle of a map of A and its transpose"
        knobs = {}
        ops = _ops(e)
        cost = lambda s: (ty.size * 2 * s["n"] ** 2, ops * s["n"] ** 2 / 2)  # noqa: E731
    else:
        strict, lower, tri = False, True, "lower"
        f.array("L", ty, ["n", "n"], const=True,
                init=f"(i0 == i1 ? {ty.lit(2)} : {ty.lit(0)}) + ({ty.name})((3 * i0 + 7 * i1) % 11) / ({ty.lit(11)} * n)")
        f.array("b", ty, ["n"], const=True)
        f.array("x", ty, ["n"], const=False)
        f.body = _nest([("i", "0", "n")], [f"{ty.name} acc = b[i];", "for (int j = 0; j < i; j++)",
                                           "    acc -= L[i][j] * x[j];", "x[i] = acc / L[i][i];"])
        doc = "Forward substitution with a lower triangular matrix (a diagonally dominant L)"
        knobs = {}
        cost = lambda s: (ty.size * (s["n"] ** 2 + 2 * s["n"]), 1.0 * s["n"] ** 2)  # noqa: E731
    f.doc = f"{doc}, {ty.name}."
    knobs = {"dtype": ty.name, "pattern": pattern, "lower": lower, "strict": strict, **knobs}
    ratio = {"n": 1.0, "m": _ratio(rng)} if pattern == "syrk" else {"n": 1.0}
    return f, _Sizes(names, ratio, {n: 1 for n in names}, cost), knobs


def _fam_banded(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    pattern = rng.choice(["band_storage", "band_storage", "diagonals", "stripe", "multi_rhs"])
    w = 2 * rng.randint(1, 8) + 1
    f = _File("banded", ["n"] if pattern != "multi_rhs" else ["n", "nrhs"])
    xs = f"n + {w - 1}"
    acc_ty = DOUBLE if ty == FLOAT and rng.random() < 0.25 else ty
    res, post = _maybe(rng, ty, "acc" if acc_ty == ty else f"({ty.name})acc", 0.4)
    decl = f"{acc_ty.name} acc = {acc_ty.lit(0)};"

    def term(a: str, x: str) -> str:
        return f"acc += {_read(acc_ty, ty, a)} * {_read(acc_ty, ty, x)};"

    if pattern == "band_storage":
        f.array("Ab", ty, ["n", str(w)], const=True)
        f.array("x", ty, [xs], const=True)
        f.array("y", ty, ["n"], const=False)
        f.body = _nest([("i", "0", "n")], [decl, f"for (int k = 0; k < {w}; k++)",
                                           "    " + term("Ab[i][k]", "x[i + k]"), f"y[i] = {res};"])
        cost = lambda s: (ty.size * (s["n"] * (w + 2)), 2.0 * w * s["n"])  # noqa: E731
    elif pattern == "diagonals":
        w = min(w, 7)
        xs = f"n + {w - 1}"
        for k in range(w):
            f.array(f"d{k}", ty, ["n"], const=True)
        f.array("x", ty, [xs], const=True)
        f.array("y", ty, ["n"], const=False)
        acc_ty = ty
        y = " + ".join(f"d{k}[i] * x[i + {k}]" if k else "d0[i] * x[i]" for k in range(w))
        if post:
            y = _apply(rng, ty, post, f"({y})")
        f.body = _nest([("i", "0", "n")], [f"y[i] = {y};"])
        cost = lambda s: (ty.size * (s["n"] * (w + 2)), 2.0 * w * s["n"])  # noqa: E731
    elif pattern == "stripe":
        f.array("A", ty, ["n", xs], const=True)
        f.array("x", ty, [xs], const=True)
        f.array("y", ty, ["n"], const=False)
        f.body = _nest([("i", "0", "n")], [decl, f"for (int k = 0; k < {w}; k++)",
                                           "    " + term("A[i][i + k]", "x[i + k]"), f"y[i] = {res};"])
        cost = lambda s: (ty.size * s["n"] * (s["n"] + w + 2), 2.0 * w * s["n"])  # noqa: E731
    else:
        f.array("Ab", ty, ["n", str(w)], const=True)
        f.array("X", ty, [xs, "nrhs"], const=True)
        f.array("Y", ty, ["n", "nrhs"], const=False)
        f.body = _nest([("i", "0", "n"), ("c", "0", "nrhs")], [
            decl, f"for (int k = 0; k < {w}; k++)", "    " + term("Ab[i][k]", "X[i + k][c]"), f"Y[i][c] = {res};"])
        cost = lambda s: (ty.size * s["n"] * (w + 2 * s["nrhs"]), 2.0 * w * s["n"] * s["nrhs"])  # noqa: E731
    f.doc = (f"A banded matrix-vector product ({pattern}, band width {w}){', ' + post if post else ''}"
             f"{' accumulated in double' if acc_ty != ty else ''}, {ty.name}.")
    knobs = {"dtype": ty.name, "pattern": pattern, "width": w, "post": post, "accumulate": acc_ty.name}
    ratio = {"n": 1.0, "nrhs": rng.choice([0.002, 0.01, 0.03])} if pattern == "multi_rhs" else {"n": 1.0}
    return f, _Sizes(list(f.sizes), ratio, {n: 1 for n in f.sizes}, cost), knobs


_REDUCE_OPS = ("sum", "sumsq", "abssum", "max", "min", "mean", "dot")


def _reduce(ty: _Ty, op: str, acc: str, term: str, term2: str | None) -> tuple[str, str, str]:
    """``(init, update, finish)`` of a reduction (``finish`` formats ``{count}``)."""
    f = ty.fn
    if op in ("max", "min"):
        init = ty.lit(-1e30) if op == "max" else ty.lit(1e30)
        return init, f"{acc} = {f('f' + op)}({acc}, {term});", acc
    upd = {"sum": term, "mean": term, "sumsq": f"{term} * {term}", "abssum": f"{f('fabs')}({term})",
           "dot": f"{term} * {term2}"}[op]
    fin = f"{acc} / ({ty.name}){{count}}" if op == "mean" else acc
    return ty.lit(0), f"{acc} += {upd};", fin


def _fam_reduction(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    pattern = rng.choice(["rows", "rows", "cols", "cols_rowwise", "middle", "full"])
    op = rng.choice(_REDUCE_OPS)
    if pattern == "cols_rowwise" and op in ("max", "min", "mean"):
        op = "sum"
    acc_ty = DOUBLE if ty == FLOAT and op in ("sum", "sumsq", "abssum", "dot", "mean") and rng.random() < 0.3 else ty
    if pattern == "full" and ty == FLOAT and op in ("sum", "sumsq", "abssum", "dot", "mean"):
        # a float sum of millions of terms in one float: the sequential reference's own
        # rounding error is above the verifier's tolerance, so an accurate candidate is
        # judged wrong (seen on the H200); accumulated in double as a careful author would
        acc_ty = DOUBLE
    names = {"full": ["n"], "middle": ["n", "m", "l"]}.get(pattern, ["n", "m"])
    f = _File("reduction", names)
    two = op == "dot"
    pre = None if two else rng.choice([None, None, "abs", "tanh", "softsign", "exp_neg_abs", "relu", "square"])

    def elem(ref: str) -> str:
        r = _read(acc_ty, ty, ref)
        return _apply(rng, acc_ty, pre, r) if pre else r

    if pattern == "full":
        f.array("x", ty, ["n"], const=True)
        if two:
            f.array("z", ty, ["n"], const=True)
        f.array("s", acc_ty, ["1"], const=False)
        init, upd, fin = _reduce(acc_ty, op, "s[0]", elem("x[i]"), _read(acc_ty, ty, "z[i]") if two else None)
        f.body = [f"    s[0] = {init};", *_nest([("i", "0", "n")], [upd])]
        if fin != "s[0]":
            f.body.append(f"    s[0] = {fin.format(count='n')};")
        cost = lambda s: (ty.size * s["n"] * (2 if two else 1), 2.0 * s["n"])  # noqa: E731
    else:
        dims = ["n", "m", "l"] if pattern == "middle" else ["n", "m"]
        f.array("A", ty, dims, const=True)
        if two:
            f.array("B", ty, dims, const=True)
        if pattern == "rows":
            outer, inner, ref, out, count = [("i", "0", "n")], ("j", "m"), "[i][j]", "out[i]", "m"
            f.array("out", acc_ty, ["n"], const=False)
        elif pattern == "cols":
            outer, inner, ref, out, count = [("j", "0", "m")], ("i", "n"), "[i][j]", "out[j]", "n"
            f.array("out", acc_ty, ["m"], const=False)
        elif pattern == "middle":
            outer, inner, ref, out, count = [("i", "0", "n"), ("k", "0", "l")], ("j", "m"), "[i][j][k]", "out[i][k]", "m"
            f.array("out", acc_ty, ["n", "l"], const=False)
        else:
            outer = []
            f.array("out", acc_ty, ["m"], const=False)
        ref = ref if pattern != "cols_rowwise" else "[i][j]"
        a, b = elem("A" + ref), (_read(acc_ty, ty, "B" + ref) if two else None)
        if pattern == "cols_rowwise":
            _, upd, _ = _reduce(acc_ty, op, "out[j]", a, b)
            f.body = _nest([("j", "0", "m")], [f"out[j] = {acc_ty.lit(0)};"]) + _nest([("i", "0", "n"), ("j", "0", "m")], [upd])
        elif rng.random() < 0.5:
            init, upd, fin = _reduce(acc_ty, op, "acc", a, b)
            f.body = _nest(outer, [f"{acc_ty.name} acc = {init};", f"for (int {inner[0]} = 0; {inner[0]} < {inner[1]}; {inner[0]}++)",
                                   f"    {upd}", f"{out} = {fin.format(count=count)};"])
        else:
            init, upd, fin = _reduce(acc_ty, op, out, a, b)
            lines = [f"{out} = {init};", f"for (int {inner[0]} = 0; {inner[0]} < {inner[1]}; {inner[0]}++)", f"    {upd}"]
            if fin != out:
                lines.append(f"{out} = {fin.format(count=count)};")
            f.body = _nest(outer, lines)
        nin = 2 if two else 1
        cost = lambda s: (ty.size * nin * math.prod(s.values()), 2.0 * math.prod(s.values()))  # noqa: E731
    f.doc = (f"A {op} reduction ({pattern}){' of ' + pre + '(x)' if pre else ''}"
             f"{' accumulated in double' if acc_ty != ty else ''}, {ty.name}.")
    knobs = {"dtype": ty.name, "pattern": pattern, "op": op, "accumulate": acc_ty.name, "transform": pre}
    ratio = {n: (1.0 if d == 0 else _ratio(rng)) for d, n in enumerate(names)}
    return f, _Sizes(names, ratio, {n: 1 for n in names}, cost), knobs


def _fam_scan(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    pattern = rng.choice(["rows", "rows", "cols", "inplace_rows", "inplace_cols", "exclusive_rows", "vector"])
    op = rng.choice(["sum", "sum", "max", "min", "decay", "sumsq"])
    names = ["n"] if pattern == "vector" else ["n", "m"]
    f = _File("scan", names)
    if op == "decay":
        f.coefs.append(("a", ty, 0.9))

    pre = rng.choice([None, None, None, "abs", "tanh", "softsign", "scale", "exp_neg_abs"])

    def step(prev: str, x: str) -> str:
        if pre:
            x = _apply(rng, ty, pre, x)
        return {"sum": f"{prev} + {x}", "max": f"{ty.fn('fmax')}({prev}, {x})",
                "min": f"{ty.fn('fmin')}({prev}, {x})", "decay": f"a * {prev} + {x}",
                "sumsq": f"{prev} + {x} * {x}"}[op]

    if pattern == "vector":
        f.array("x", ty, ["n"], const=True)
        f.array("y", ty, ["n"], const=False)
        f.body = ["    y[0] = x[0];", *_nest([("i", "1", "n")], [f"y[i] = {step('y[i - 1]', 'x[i]')};"])]
    elif pattern == "rows":
        f.array("X", ty, ["n", "m"], const=True)
        f.array("Y", ty, ["n", "m"], const=False)
        f.body = _nest([("i", "0", "n")], ["Y[i][0] = X[i][0];", "for (int j = 1; j < m; j++)",
                                           f"    Y[i][j] = {step('Y[i][j - 1]', 'X[i][j]')};"])
    elif pattern == "exclusive_rows":
        f.array("X", ty, ["n", "m"], const=True)
        f.array("Y", ty, ["n", "m"], const=False)
        f.body = _nest([("i", "0", "n")], [f"Y[i][0] = {ty.lit(0)};", "for (int j = 1; j < m; j++)",
                                           f"    Y[i][j] = {step('Y[i][j - 1]', 'X[i][j - 1]')};"])
    elif pattern == "inplace_rows":
        f.array("X", ty, ["n", "m"], const=False)
        f.body = _nest([("i", "0", "n"), ("j", "1", "m")], [f"X[i][j] = {step('X[i][j - 1]', 'X[i][j]')};"])
    elif pattern == "inplace_cols":
        f.array("X", ty, ["n", "m"], const=False)
        f.body = _nest([("i", "1", "n"), ("j", "0", "m")], [f"X[i][j] = {step('X[i - 1][j]', 'X[i][j]')};"])
    else:
        f.array("X", ty, ["n", "m"], const=True)
        f.array("Y", ty, ["n", "m"], const=False)
        f.body = (_nest([("j", "0", "m")], ["Y[0][j] = X[0][j];"])
                  + _nest([("i", "1", "n"), ("j", "0", "m")], [f"Y[i][j] = {step('Y[i - 1][j]', 'X[i][j]')};"]))
    narr = len(f.arrays)
    f.doc = f"A {op} scan ({pattern}){' of ' + pre + '(x)' if pre else ''}, {ty.name}."
    knobs = {"dtype": ty.name, "pattern": pattern, "op": op, "transform": pre}
    ratio = {n: (1.0 if d == 0 else _ratio(rng)) for d, n in enumerate(names)}
    return f, _Sizes(names, ratio, {n: 1 for n in names},
                     lambda s: (narr * ty.size * math.prod(s.values()), 2.0 * math.prod(s.values()))), knobs


def _fam_norm_rows(rng: random.Random) -> tuple[_File, _Sizes, dict]:
    ty = _ty(rng)
    kind = rng.choice(["layernorm", "rmsnorm", "l2", "softmax", "minmax", "logsumexp"])
    cols = rng.random() < 0.25
    affine = kind in ("layernorm", "rmsnorm", "l2") and rng.random() < 0.5
    f = _File("norm_rows", ["n", "m"])
    fn = ty.fn
    f.array("X", ty, ["n", "m"], const=True)
    if affine:
        f.array("gamma", ty, ["n" if cols else "m"], const=True)
        f.array("beta", ty, ["n" if cols else "m"], const=True)
    o, v, cnt = ("j", "i", "n") if cols else ("i", "j", "m")
    x, pre = _maybe(rng, ty, "X[i][j]", 0.35, ("abs", "tanh", "softsign", "scale", "square", "relu"))
    loop = f"for (int {v} = 0; {v} < {cnt}; {v}++)"
    eps = ty.lit(1e-5)
    if kind == "logsumexp":
        f.array("out", ty, ["m" if cols else "n"], const=False)
        body = [f"{ty.name} mx = {ty.lit(-1e30)};", loop, f"    mx = {fn('fmax')}(mx, {x});",
                f"{ty.name} s = {ty.lit(0)};", loop, f"    s += {fn('exp')}({x} - mx);", f"out[{o}] = mx + {fn('log')}(s);"]
        passes = 2
    else:
        f.array("Y", ty, ["n", "m"], const=False)
        post = rng.choice([None, None, None, "relu", "tanh", "softsign", "scale"])

        def aff(e: str) -> str:
            e = f"gamma[{v}] * {e} + beta[{v}]" if affine else e
            return _apply(rng, ty, post, f"({e})") if post else e
        if kind == "layernorm":
            body = [f"{ty.name} mean = {ty.lit(0)};", loop, f"    mean += {x};", f"mean /= ({ty.name}){cnt};",
                    f"{ty.name} var = {ty.lit(0)};", loop, f"    var += ({x} - mean) * ({x} - mean);",
                    f"var /= ({ty.name}){cnt};", f"{ty.name} inv = {ty.lit(1)} / {fn('sqrt')}(var + {eps});",
                    loop, f"    Y[i][j] = {aff(f'({x} - mean) * inv')};"]
            passes = 3
        elif kind in ("rmsnorm", "l2"):
            fin = (f"{ty.lit(1)} / {fn('sqrt')}(ss / ({ty.name}){cnt} + {eps})" if kind == "rmsnorm"
                   else f"{ty.lit(1)} / {fn('fmax')}({fn('sqrt')}(ss), {ty.lit(1e-12)})")
            body = [f"{ty.name} ss = {ty.lit(0)};", loop, f"    ss += {x} * {x};", f"{ty.name} inv = {fin};",
                    loop, f"    Y[i][j] = {aff(f'{x} * inv')};"]
            passes = 2
        elif kind == "softmax":
            exp_x = f"{fn('exp')}({x} - mx)"
            body = [f"{ty.name} mx = {ty.lit(-1e30)};", loop, f"    mx = {fn('fmax')}(mx, {x});",
                    f"{ty.name} s = {ty.lit(0)};", loop, f"    s += {fn('exp')}({x} - mx);", loop,
                    f"    Y[i][j] = {aff(exp_x + ' / s')};"]
            passes = 3
        else:
            body = [f"{ty.name} lo = {ty.lit(1e30)};", f"{ty.name} hi = {ty.lit(-1e30)};", loop + " {",
                    f"    lo = {fn('fmin')}(lo, {x});", f"    hi = {fn('fmax')}(hi, {x});", "}",
                    f"{ty.name} scale = {ty.lit(1)} / (hi - lo + {eps});", loop, f"    Y[i][j] = {aff(f'({x} - lo) * scale')};"]
            passes = 2
    f.body = _nest([(o, "0", "m" if cols else "n")], body)
    f.doc = (f"{kind} of every {'column' if cols else 'row'}{' of ' + pre + '(X)' if pre else ''}"
             f"{' with gamma and beta' if affine else ''}, "
             f"{passes} passes over the data, {ty.name}.")
    knobs = {"dtype": ty.name, "kind": kind, "columns": cols, "affine": affine, "transform": pre,
             "post": None if kind == "logsumexp" else post}
    ratio = {"n": 1.0, "m": rng.choice([0.125, 0.25, 1.0, 4.0])}
    return f, _Sizes(["n", "m"], ratio, {"n": 1, "m": 1},
                     lambda s: (2 * ty.size * s["n"] * s["m"], 5.0 * passes * s["n"] * s["m"])), knobs


_FAMILY_FN: dict[str, Callable[[random.Random], tuple[_File, _Sizes, dict]]] = {
    "map1d": _fam_map1d, "map2d": _fam_map2d, "stencil1d": _fam_stencil1d, "stencil2d": _fam_stencil2d,
    "stencil3d": _fam_stencil3d, "time_stencil": _fam_time_stencil, "matmul": _fam_matmul,
    "batched_matmul": _fam_batched_matmul, "matvec": _fam_matvec, "contraction": _fam_contraction,
    "triangular": _fam_triangular, "banded": _fam_banded, "reduction": _fam_reduction, "scan": _fam_scan,
    "norm_rows": _fam_norm_rows,
}


# ---------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------


def _scaled(s: _Sizes, scale: float, grain: int, steps: int | None) -> dict[str, int]:
    out = {}
    for n in s.names:
        if n == s.steps:
            out[n] = steps or 1
            continue
        v = s.ratio[n] * scale
        v = max(grain, int(round(v / grain)) * grain) if v >= grain else max(1, int(round(v)))
        out[n] = max(s.lo[n], v)
    return out


def _fit(s: _Sizes, target_bytes: float, max_flop: float, grain: int, steps: int | None) -> dict[str, int]:
    """The largest sizes (bisection on one scale) whose bytes <= target and FLOP <= cap."""
    lo, hi = 1.0, 1e10
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        b, fl = s.cost(_scaled(s, mid, grain, steps))
        if b <= target_bytes and fl <= max_flop:
            lo = mid
        else:
            hi = mid
    return _scaled(s, lo, grain, steps)


def _small_odd(rng: random.Random, s: _Sizes, main: dict[str, int]) -> dict[str, int]:
    biggest = rng.randrange(SMALL_MAX[0], SMALL_MAX[1] + 1, 2)
    top = max(s.ratio[n] for n in s.names if n != s.steps)
    out = {}
    for n in s.names:
        if n == s.steps:
            out[n] = min(3, main[n])
            continue
        v = max(s.lo[n], int(round(s.ratio[n] / top * biggest)))
        v = min(v if v % 2 else v + 1, max(main[n], s.lo[n]))
        if v % 2 == 0 and v - 1 >= s.lo[n]:
            v -= 1
        out[n] = v
    return out


def _configs(rng: random.Random, s: _Sizes) -> list[dict]:
    grain = rng.choice([1, 1, 8, 16, 32, 64])
    steps = rng.randint(4, 40) if s.steps else None
    target = math.exp(rng.uniform(math.log(MAIN_BYTES[0]), math.log(MAIN_BYTES[1])))
    main = _fit(s, target, MAIN_FLOP, grain, steps)
    large_target = math.exp(rng.uniform(math.log(LARGE_BYTES[0]), math.log(LARGE_BYTES[1])))
    large = _fit(s, large_target, LARGE_FLOP, grain, steps)
    large = {n: max(v, main[n]) for n, v in large.items()}
    small = _small_odd(rng, s, main)
    return [{"name": "small_odd", "sizes": small}, {"name": "main", "sizes": main}, {"name": "large", "sizes": large}]


def normalised_structure(family: str, function_text: str) -> str:
    """The structure key: family and function text, floating literals as ``C``, spaces collapsed."""
    return family + "|" + " ".join(_FLOAT_LIT.sub("C", function_text).split())


def generate_c(rng: random.Random, family: str) -> GeneratedProblem:
    """Draw one C problem of ``family`` (see the module docstring).

    Args:
        rng: the draw's generator (its state decides everything: the same state gives the
            same text).
        family: one of :data:`FAMILIES`.

    Returns:
        The :class:`GeneratedProblem` (``function`` is the family's name; ``configs`` the
        three configurations, sizes as element counts and step counts).

    Raises:
        KeyError: an unknown family.
    """
    f, sizes, knobs = _FAMILY_FN[family](rng)
    configs = _configs(rng, sizes)
    main = configs[1]["sizes"]
    source = f.source(rng, main)
    notes = []
    for c in configs:
        b, fl = sizes.cost(c["sizes"])
        c["bytes"], c["flop"] = int(b), int(fl)
    return GeneratedProblem(kind="c", family=family, knobs=knobs, source=source, configs=configs,
                            structure_key=normalised_structure(family, f.function_text()), function=f.fn,
                            notes=notes)


__all__ = ["FAMILIES", "LARGE_BYTES", "LARGE_FLOP", "MAIN_BYTES", "MAIN_FLOP", "generate_c", "normalised_structure"]
