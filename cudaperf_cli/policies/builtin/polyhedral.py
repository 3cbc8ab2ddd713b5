"""Exact independence of a loop's iterations on one array, by isl (islpy).

The hand-written tests of :mod:`dependence` accept a loop when every access to a written
array has the loop index alone in one dimension (``A[i][*]``).  Loops whose iterations touch
disjoint elements in other ways are refused by them: correlation's
``for (i ...) for (j = i + 1 ...) { corr[i][j] = ...; corr[j][i] = corr[i][j]; }`` writes
row ``i`` and column ``i``, and no other iteration of ``i`` touches either part of the
triangle.  :func:`independent` asks isl (the integer set library; Verdoolaege, "isl: An
Integer Set Library for the Polyhedral Model", ICMS 2010) whether two different iterations
``v != v'`` of the loop can reach the same element of the array with at least one of the two
accesses a write: the set of such pairs is built from the loop bounds and the subscripts and
tested for emptiness.

Every approximation widens the set, so an empty set is a proof:

* conditions (``if``) are ignored: every access is assumed to run;
* a loop bound that is not affine, or that reads a scalar the loop body writes, is left out
  (the index is then unbounded on that side); steps are ignored;
* symbols that the loop does not change (sizes, enclosing indices) are parameters, free;
  a product of such symbols (``n*m``) is a parameter of its own.

A subscript that is not affine in the enclosing indices (``A[i*m + j]`` with ``i`` one of
them, ``A[idx[i]]``, a scalar written inside the loop) cannot be encoded: the answer is then
None (unknown), and the caller keeps its own verdict.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from cudaperf_cli.policies.builtin.ir import (
    Affine,
    Assign,
    For,
    If,
    Index,
    Stmt,
    affine,
    iter_expr,
    own_exprs,
    scalars_written,
)


def available() -> bool:
    """Whether islpy can be imported."""
    try:
        import islpy  # noqa: F401
    except ImportError:
        return False
    return True


def accesses_with_loops(stmts: Sequence[Stmt], chain: tuple[For, ...] = ()
                        ) -> Iterator[tuple[Index, bool, tuple[For, ...]]]:
    """(access, is_write, the loops of ``stmts`` around it, outermost first) for every
    array access in ``stmts``."""
    for s in stmts:
        target = s.target if isinstance(s, Assign) else None
        for e in own_exprs(s):
            for x in iter_expr(e):
                if isinstance(x, Index):
                    yield x, x is target and not isinstance(s, For), chain
        if isinstance(s, If):
            yield from accesses_with_loops(s.then, chain)
            yield from accesses_with_loops(s.orelse, chain)
        elif isinstance(s, For):
            yield from accesses_with_loops(s.body, chain + (s,))


class Unencodable(Exception):
    """A symbol isl cannot be given (it changes inside the loops, or is a product with an
    index)."""


class Side:
    """One iteration point of a chain of loops: isl names ``<prefix><k>`` for the loops of
    ``chain`` (outermost first); ``variant`` scalars change inside them (not encodable),
    ``params`` collects the free symbols (shared between the sides of one question)."""

    def __init__(self, prefix: str, chain: tuple[For, ...], variant: set[str], params: dict[str, str]):
        self.chain, self.variant, self.params = chain, variant, params
        self.names = [f"{prefix}{k}" for k in range(len(chain))]

    def term(self, sym: str, upto: int) -> str:
        """isl text of a symbol seen from inside the first ``upto`` loops of the chain."""
        factors = sym.split("*")
        for k in range(upto - 1, -1, -1):
            if self.chain[k].var == sym:
                return self.names[k]
        if any(f == L.var for f in factors for L in self.chain[:upto]) or set(factors) & self.variant:
            raise Unencodable(sym)
        return self.params.setdefault(sym, "p_" + sym.replace("*", "_"))

    def affine_text(self, f: Affine, upto: int) -> str:
        parts = [str(f.const)]
        for sym, c in f.coeffs:
            parts.append(f"{c} * {self.term(sym, upto)}")
        return " + ".join(parts)

    def domain(self) -> list[str]:
        """Constraints of the chain's loop ranges (bounds that cannot be encoded left out)."""
        out = []
        for k, L in enumerate(self.chain):
            r = L.range_affine() if L.canonical and L.var not in scalars_written(L.body) else None
            if r is None:
                continue
            try:
                lo, hi = (self.affine_text(x, k) for x in r)
            except Unencodable:
                continue
            out.append(f"{lo} <= {self.names[k]} <= {hi}")
        return out


def independent(loop: For, array: str) -> bool | None:
    """Whether isl proves that no two different iterations of ``loop`` touch one element of
    ``array`` with one of them writing it (True), finds that they may (False), or the
    accesses cannot be encoded or islpy is missing (None).

    ``loop`` must be canonical with an index; its body is read, not changed.
    """
    if not loop.canonical or not loop.var:
        return None
    try:
        import islpy as isl
    except ImportError:
        return None
    # scalars the body writes (inner loop indices included): an access that reads one outside
    # the loop that assigns it as its index cannot be encoded
    variant = scalars_written(loop.body)
    accs = [(x, w, (loop,) + ch) for x, w, ch in accesses_with_loops(loop.body, ())
            if x.array == array]
    writes = [a for a in accs if a[1]]
    if not writes:
        return True
    for wx, _, wch in writes:
        for ax, _, ach in accs:
            meet = _may_meet(isl, wx, wch, ax, ach, variant, "({x} < {y} or {x} > {y})")
            if meet is None:
                return None
            if meet:
                return False
    return True


def _may_meet(isl, a: Index, ach: tuple[For, ...], b: Index, bch: tuple[For, ...],
              variant: set[str], order: str) -> bool | None:
    """Whether isl finds iterations of ``a``'s and ``b``'s loop chains (``ach``, ``bch``,
    outermost first; their first loops the same) that reach one element and whose outermost
    indices satisfy ``order`` (isl text with ``{x}`` for ``a``'s, ``{y}`` for ``b``'s),
    or None when an access cannot be encoded or isl refuses the set."""
    if len(a.subs) != len(b.subs):
        return None
    params: dict[str, str] = {}
    try:
        s1 = Side("x", ach, variant, params)
        s2 = Side("y", bch, variant, params)
        eqs = []
        for d in range(len(a.subs)):
            f1, f2 = affine(a.subs[d]), affine(b.subs[d])
            if f1 is None or f2 is None:
                return None
            eqs.append(f"{s1.affine_text(f1, len(ach))} = {s2.affine_text(f2, len(bch))}")
        cons = [order.format(x=s1.names[0], y=s2.names[0]), *s1.domain(), *s2.domain(), *eqs]
    except Unencodable:
        return None
    text = (f"[{', '.join(sorted(params.values()))}] -> {{ [{', '.join(s1.names)}] -> "
            f"[{', '.join(s2.names)}] : {' and '.join(cons)} }}")
    try:
        return not isl.Map(text).is_empty()
    except isl.Error:
        return None


def never_touches(acc: Index, read: Index, context: tuple[For, ...],
                  chain: tuple[For, ...]) -> bool | None:
    """Whether isl proves that ``read`` never reaches the element ``acc`` (True), finds
    that it may (False), or cannot encode them or islpy is missing (None).

    ``acc``'s subscripts are read inside the loops ``context`` (outermost first) and do not
    change in ``chain``; ``read`` sits inside ``context + chain`` (``chain[0]`` is the loop
    whose body holds it, then the loops around it in that body).  One point of the whole
    nest is asked for: both accesses see the same values of the context's indices.
    Scalars written anywhere in the outermost loop are not encoded (None), and bounds that
    read them are left out, which only widens the set.
    """
    if not chain or len(acc.subs) != len(read.subs):
        return None
    try:
        import islpy as isl
    except ImportError:
        return None
    outer = (context or chain)[0]
    variant = scalars_written(outer.body) - {L.var for L in context + chain if L.var}
    params: dict[str, str] = {}
    side = Side("c", context + chain, variant, params)
    try:
        eqs = []
        for fa, fr in zip(acc.subs, read.subs):
            a, r = affine(fa), affine(fr)
            if a is None or r is None:
                return None
            eqs.append(f"{side.affine_text(a, len(context))} = "
                       f"{side.affine_text(r, len(context) + len(chain))}")
        cons = [*side.domain(), *eqs]
    except Unencodable:
        return None
    text = (f"[{', '.join(sorted(params.values()))}] -> {{ [{', '.join(side.names)}] : "
            f"{' and '.join(cons)} }}")
    try:
        return bool(isl.Set(text).is_empty())
    except isl.Error:
        return None


def reads_only_earlier_values(loop: For, array: str) -> list[Index] | None:
    """The reads of ``array`` in ``loop``'s body that isl proves see only what ``array``
    held before the loop started: no write of ``array`` in the body, in an iteration of
    ``loop`` before the read's or in the same one, touches the element read (every write
    to it comes in a later iteration).  Such a read may be served from a copy of the array
    taken before the loop (an anti dependence removed; trmm's ``B[k][j]``, ``k > i``).
    Conditions are ignored (every write assumed to run) and the same iteration counts as
    earlier, which only widens the set.  None when islpy is missing or an access cannot be
    encoded.

    ``loop`` must count up by one (canonical, step +1).
    """
    if not loop.canonical or not loop.var or loop.step != 1:
        return None
    try:
        import islpy as isl
    except ImportError:
        return None
    variant = scalars_written(loop.body)
    accs = [(x, w, (loop,) + ch) for x, w, ch in accesses_with_loops(loop.body, ())
            if x.array == array]
    writes = [(x, ch) for x, w, ch in accs if w]
    out: list[Index] = []
    for rx, w, rch in accs:
        if w or any(rx is o for o in out):
            continue
        earlier = False
        for wx, wch in writes:
            meet = _may_meet(isl, wx, wch, rx, rch, variant, "{x} <= {y}")
            if meet is None:
                return None
            if meet:
                earlier = True
                break
        if not earlier:
            out.append(rx)
    return out


__all__ = ["Side", "Unencodable", "accesses_with_loops", "available", "independent",
           "never_touches", "reads_only_earlier_values"]
