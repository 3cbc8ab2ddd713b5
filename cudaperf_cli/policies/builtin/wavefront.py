"""Wavefronts: a perfect nest with no parallel loop run as parallel hyperplanes (skewing).

A nest ``for v0 { for v1 { [for v2 {] BODY }}}`` whose every loop carries a dependence can
still hold independent iterations: those on one hyperplane ``h(v) = w`` of a well-chosen
``h = c0*v0 + c1*v1 (+ c2*v2)``.  PolyBench's ``nussinov`` fills a table by diagonals
(``h = j - i``: cell ``(i, j)`` reads cells of shorter spans only); ``seidel-2d``'s in-place
9-point sweep over ``t, i, j`` is parallel on ``h = 4t + 2i + j`` (Lamport's hyperplane
method, "The parallel execution of DO loops", CACM 1974).

:func:`wavefront` looks for such an ``h`` (small coefficients, the last one +-1 so that the
last index follows from the others) and asks isl whether it is legal: no two different
iteration points that touch one element, one of them writing it, may have the later one
(in the C code's order) on an earlier or the same hyperplane.  Conditions are ignored
(every access is assumed to run) and bounds isl cannot encode are left out: both only
widen the set of pairs, so an empty set is a proof.  Then the nest is rewritten::

    for (long long W = wlo; W <= whi; W++)          // on the host: one launch per W
        for (v0 = lo0; v0 <= hi0; v0++)             // parallel (proved), box of v0
            [for (v1 = lo1; v1 <= hi1; v1++)]       // parallel (proved), box of v1
                { long long L = c * (W - c0*v0 [- c1*v1]);
                  if (v1, L inside their bounds) { T vlast = L; BODY } }

``W`` runs over the range of ``h`` on the bounding box of the nest (the empty hyperplanes
at its ends cost a launch each, nothing else).  Each iteration point runs once, in one
thread, with the body as written: the results are those of the C code.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from cudaperf_cli.policies.builtin import polyhedral
from cudaperf_cli.core import normalize_ctype
from cudaperf_cli.policies.builtin.dependence import (
    SIGNED_INTS,
    Dependence,
    _extreme,
    _loop_ranges,
    exposed_reads,
)
from cudaperf_cli.policies.builtin.ir import (
    Affine,
    Assign,
    Binary,
    Cast,
    Const,
    Decl,
    Expr,
    For,
    If,
    Name,
    Paren,
    Stmt,
    declared_in,
    own_jumps,
    affine,
    scalars_written,
)

#: Largest |coefficient| tried for the leading indices of ``h``.
MAX_COEFF = 4


def perfect_nest_of(L: For) -> list[For]:
    """The perfect nest under ``L``, outermost first, up to three loops deep."""
    nest = [L]
    while len(nest) < 3 and len(nest[-1].body) == 1 and isinstance(nest[-1].body[0], For):
        nest.append(nest[-1].body[0])
    return nest


def _candidates(m: int) -> list[tuple[int, ...]]:
    """Hyperplanes ``(c0, ..., c_{m-1})`` with ``c_{m-1} = +-1`` and no zero leading
    coefficient, smallest first."""
    rng = [c for c in range(-MAX_COEFF, MAX_COEFF + 1) if c != 0]
    out = [(*lead, last) for lead in itertools.product(rng, repeat=m - 1) for last in (1, -1)]
    out.sort(key=lambda h: (sum(abs(c) for c in h), [-c for c in h]))
    return out


def _legal(nest: Sequence[For], h: Sequence[int]) -> bool:
    """isl finds no dependence that ``h`` would run backwards or on one hyperplane."""
    try:
        import islpy as isl
    except ImportError:
        return False
    m = len(nest)
    body = nest[-1].body
    variant = scalars_written(body) - {L.var for L in nest if L.var}
    accs = [(x, w, tuple(nest) + ch) for x, w, ch in polyhedral.accesses_with_loops(body)]
    for (x1, w1, c1), (x2, w2, c2) in itertools.product(accs, accs):
        if x1.array != x2.array or not (w1 or w2) or len(x1.subs) != len(x2.subs):
            continue
        params: dict[str, str] = {}
        try:
            s1 = polyhedral.Side("p", c1, variant, params)
            s2 = polyhedral.Side("q", c2, variant, params)
            eqs = []
            for a, b in zip(x1.subs, x2.subs):
                fa, fb = affine(a), affine(b)
                if fa is None or fb is None:
                    return False
                eqs.append(f"{s1.affine_text(fa, len(c1))} = {s2.affine_text(fb, len(c2))}")
        except polyhedral.Unencodable:
            return False
        p, q = s1.names[:m], s2.names[:m]
        # p before q in the C code's order (each loop in its own direction)
        before = []
        for d in range(m):
            same = [f"{p[e]} = {q[e]}" for e in range(d)]
            step = nest[d].step
            less = f"{p[d]} < {q[d]}" if step > 0 else f"{p[d]} > {q[d]}"
            before.append("(" + " and ".join(same + [less]) + ")")
        hp = " + ".join(f"{c} * {v}" for c, v in zip(h, p))
        hq = " + ".join(f"{c} * {v}" for c, v in zip(h, q))
        cons = [*s1.domain(), *s2.domain(), *eqs, "(" + " or ".join(before) + ")",
                f"{hq} <= {hp}"]
        text = (f"[{', '.join(sorted(params.values()))}] -> {{ [{', '.join(s1.names)}] -> "
                f"[{', '.join(s2.names)}] : {' and '.join(cons)} }}")
        try:
            if not isl.Map(text).is_empty():
                return False
        except isl.Error:
            return False
    return True


def _wave_range(h: Sequence[int], idx: Sequence[str],
                ranges: dict[str, tuple[Affine, Affine]]) -> tuple[Affine, Affine]:
    """(least, greatest) value of ``h`` over the nest: each index, innermost first, replaced
    by the bound that makes ``h`` least (greatest); its bounds use outer indices only, so
    the result is exact for one affine bound a side (``j`` from ``i + 1``: ``j - i >= 1``)
    and a bound of the true range otherwise."""
    out = []
    for want_max in (False, True):
        f = Affine.make(dict(zip(idx, h)), 0)
        for v in reversed(idx):
            c = f.coeff(v)
            if c == 0:
                continue
            lo, hi = ranges[v]
            pick = hi if (c > 0) == want_max else lo
            f = f - Affine.make({v: c}, 0) + pick.scale(c)
        out.append(f)
    return out[0], out[1]


def _expr(f: Affine) -> Expr:
    """``f`` as a ``long long`` C expression."""
    terms: list[Expr] = []
    for sym, c in f.coeffs:
        factors: list[Expr] = [Cast("long long", Name(s)) for s in sym.split("*")]
        t: Expr = factors[0]
        for g in factors[1:]:
            t = Binary("*", t, g)
        terms.append(t if c == 1 else Binary("*", Const(f"{c}LL"), t))
    out: Expr = terms[0] if terms else Const(f"{f.const}LL")
    for t in terms[1:]:
        out = Binary("+", out, t)
    if terms and f.const:
        out = Binary("+", out, Const(f"{f.const}LL"))
    return Paren(out)


def _and(conds: list[Expr]) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Binary("&&", out, c)
    return out


def wavefront(dep: Dependence, L: For, wave: str, scalars: dict[str, str]
              ) -> tuple[For, tuple[int, ...]] | None:
    """The nest under ``L`` rewritten as a host loop over hyperplanes (index ``wave``,
    ``long long``) around loops :meth:`Dependence.prove_parallel` marks parallel, and the
    hyperplane's coefficients; None when no candidate is legal or the nest does not fit.

    ``scalars`` (the function's local scalars, name -> C type) gains ``wave`` and the
    temporary of the last index.  The nest must be 2 or 3 canonical loops deep with bounds
    affine in sizes and outer indices, no ``break``, and only private scalars in its body
    (assigned before read, not used after the nest).
    """
    nest = perfect_nest_of(L)
    if len(nest) < 2:
        return None
    body = nest[-1].body
    if any(j.kind != "continue" for j in own_jumps(body)):
        return None
    idx = [N.var for N in nest]
    if any(not N.canonical or v is None for N, v in zip(nest, idx)):
        return None
    # bounds and subscripts are read as integers (isl, the guards): plain signed ones only
    if any(normalize_ctype(N.ctype or dep.fn.ctype_of(v) or "") not in SIGNED_INTS  # type: ignore[arg-type]
           for N, v in zip(nest, idx)):
        return None
    if not dep.signed_ints([e for N in nest for e in (N.first, N.bound)]):
        return None
    if not all(dep.signed_ints(list(x.subs)) for x, _, _ in polyhedral.accesses_with_loops(nest[-1].body)):
        return None
    written = scalars_written(body)
    if set(idx) & written:
        return None
    for N in nest:
        if N.header_names() & written or N.range_affine() is None:
            return None
    exposed, _ = exposed_reads(body)
    after = dep.live.after(L)
    for s in written - declared_in(body):
        if s in exposed or s in after:
            return None
    if set(idx) & after:
        return None
    ranges = _loop_ranges(nest)
    if set(ranges) != set(idx):
        return None
    box = []
    for N in nest:
        lo, hi = ranges[N.var]
        blo, bhi = _extreme(lo, ranges, False), _extreme(hi, ranges, True)
        if blo is None or bhi is None or (blo.variables | bhi.variables) & set(idx):
            return None
        box.append((blo, bhi))
    m = len(nest)
    h = next((c for c in _candidates(m) if _legal(nest, c)), None)
    if h is None:
        return None
    wlo, whi = _wave_range(h, idx, ranges)
    last = nest[-1]
    lname = f"{wave}_{last.var}"
    scalars[wave] = "long long"
    scalars[lname] = "long long"
    # the last index: c_last * (W - sum c_d v_d), c_last = +-1
    rest: Expr = Name(wave)
    for c, v in zip(h[:-1], idx[:-1]):
        rest = Binary("-", rest, Binary("*", Const(f"{c}LL"), Cast("long long", Name(v))))
    value = Paren(rest) if h[-1] == 1 else Binary("*", Const("-1LL"), Paren(rest))
    conds: list[Expr] = []
    for d in range(1, m):
        lo, hi = ranges[idx[d]]
        var: Expr = Name(lname) if d == m - 1 else Cast("long long", Name(idx[d]))  # type: ignore[arg-type]
        conds.append(Binary(">=", var, _expr(lo)))
        conds.append(Binary("<=", var, _expr(hi)))
    T = last.ctype or dep.fn.ctype_of(idx[-1]) or "int"  # type: ignore[arg-type]
    set_last: Stmt = (Decl(last.line, T, idx[-1], Cast(T, Name(lname))) if last.ctype
                      else Assign(last.line, Name(idx[-1]), "=", Cast(T, Name(lname))))  # type: ignore[arg-type]
    inner: list[Stmt] = [Decl(last.line, "long long", lname, value),
                         If(last.line, _and(conds), [set_last, *body], [])]
    # the box loops, innermost first, with the original index names and types
    for d in range(m - 2, -1, -1):
        N = nest[d]
        v = idx[d]
        blo, bhi = box[d]
        Tv = N.ctype or dep.fn.ctype_of(v) or "int"  # type: ignore[arg-type]
        first = Cast(Tv, _expr(blo))
        bound = Cast(Tv, _expr(bhi))
        init: Stmt = (Decl(N.line, Tv, v, first) if N.ctype  # type: ignore[arg-type]
                      else Assign(N.line, Name(v), "=", first))  # type: ignore[arg-type]
        loop = For(N.line, v, N.ctype, init, Binary("<=", Name(v), bound),  # type: ignore[arg-type]
                   Assign(N.line, Name(v), "++", None), inner,  # type: ignore[arg-type]
                   True, "", first, "<=", bound, 1)
        dep.prove_parallel(loop, describe(h, idx))
        inner = [loop]
    wdecl = Decl(L.line, "long long", wave, _expr(wlo))
    wbound = _expr(whi)
    outer = For(L.line, wave, "long long", wdecl, Binary("<=", Name(wave), wbound),
                Assign(L.line, Name(wave), "++", None), inner, True, "", _expr(wlo), "<=",
                wbound, 1)
    dep.keep(outer)
    return outer, tuple(h)


def describe(h: Sequence[int], idx: Sequence[str]) -> str:
    """``wavefront 4t+2i+j`` for the hyperplane ``h`` over the indices ``idx``."""
    parts = []
    for c, v in zip(h, idx):
        sign = "-" if c < 0 else "+"
        mag = "" if abs(c) == 1 else str(abs(c))
        parts.append(f"{sign}{mag}{v}")
    text = "".join(parts)
    return "wavefront " + (text[1:] if text.startswith("+") else text)


__all__ = ["MAX_COEFF", "describe", "perfect_nest_of", "wavefront"]
