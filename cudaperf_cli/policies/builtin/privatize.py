"""Scratch copies that remove dependences: privatisation by expansion, and snapshots.

PolyBench's doitgen::

    for (r = 0; r < nr; r++)
      for (q = 0; q < nq; q++) {
        for (p = 0; p < np; p++) {
          sum[p] = 0.0;
          for (s = 0; s < np; s++) sum[p] += A[r][q][s] * C4[s][p];
        }
        for (p = 0; p < np; p++) A[r][q][p] = sum[p];
      }

Every iteration of ``(r, q)`` writes all of ``sum[0..np)`` before it reads any of it, so the
only dependences ``sum`` carries between iterations are anti and output dependences: with a
copy of ``sum`` per iteration (device memory the launcher allocates for the call) the nest is
parallel.  Without it the nest stayed on the host, two launches per ``(r, q)``: 42,000
launches, 137 ms on the H200; now 0.344 ms, against 7.56 ms for PolyBench-ACC's CUDA.

:func:`expand` proves it, syntactically and conservatively (one-dimensional arrays that are
parameters of the function only):

1. the nest is a perfect chain of canonical loops counting up by one (``r``, then ``q``)
   with signed-integer headers (:func:`integer_header`), whose bounds use neither the
   chain's indices nor anything the body writes (a rectangle the host can size);
2. the array ``t`` is never subscripted with a chain index, nor read by a loop header;
3. the first statement of the chain's body that mentions ``t`` is a loop ``P`` (counting up
   by one with a signed-integer header, bounds invariant in the body, no
   ``break``/``continue``/``return`` inside, its index not assigned in its body) whose body
   starts with ``t[p] = e`` (``e`` not reading ``t``): every iteration of the chain writes
   ``t[first(P) .. last(P)]`` before anything else touches it, and ``P`` only touches
   ``t[p]``; and the chain's body has no ``break``/``continue`` of its own that could skip
   ``P``;
4. every later access to ``t`` in the body is a read ``t[x]`` where ``x`` is the index of an
   enclosing loop with ``P``'s exact header (so ``x`` is in the range ``P`` wrote).

The elements of ``t`` hold, after the nest, what the last iteration wrote (the same range
every time): the launcher copies that slice of the last copy back into ``t``, so the caller
sees what the C function leaves.  The chain's parallelism is then asked of the dependence
test as usual (:meth:`Dependence.parallel` on the rewritten nest); the analysis keeps the
rewrite only when it proves the outer loop parallel, when the copies fit in the bytes of
the function's own arrays (:func:`scratch_fits`), and when the headers the launcher reads
can be evaluated on the host.  :func:`split_chain` then splits the chain into one collapsed
loop per group of statements (doitgen: a block per ``(r, q)``, threads over ``p``).

:func:`snapshot` removes anti dependences instead: reads that isl proves see only what an
array held before a loop (trmm's ``B[k][j]``, ``k > i``, rows later iterations update) read
a copy the launcher takes before the launch.

The launch code is ``codegen._Gen.scratch_lines``; the docs: docs/builtin-policy.md §2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from cudaperf_cli.core import ArrayParam, ProblemError, eval_int_expr, normalize_ctype
from cudaperf_cli.policies.builtin import polyhedral
from cudaperf_cli.policies.builtin.dependence import SIGNED_INTS, Dependence, header_arrays
from cudaperf_cli.policies.builtin.ir import (
    Assign,
    Binary,
    Call,
    Cast,
    Const,
    Decl,
    Expr,
    ExprStmt,
    For,
    Function,
    If,
    Index,
    Jump,
    Name,
    Paren,
    Stmt,
    Ternary,
    Unary,
    accesses,
    c_text,
    int_literal,
    iter_expr,
    own_jumps,
    scalars_written,
    strip_parens,
    walk,
)


@dataclass(frozen=True)
class Expansion:
    """One privatised array.

    Attributes:
        array: the C array (``sum``), one-dimensional.
        name: the device scratch holding its copies (``cp_pv0_sum``), row-major with
            :attr:`extents`: ``cp_pv0_sum[p][r][q]``, the chain's indices last, so that the
            threads of a warp, which differ in the innermost mapped index, touch
            neighbouring elements (or ``[r][q][p]``: :attr:`chain_first`).
        ctype: the element type.
        loops: the chain's loops as written, outermost first (their trip counts size the
            scratch and locate the last copy).
        extents: C expressions: the array's extent, then each chain loop's trip count (the
            other way round with :attr:`chain_first`).
        first: the first element every iteration writes (``P``'s first index).
        count: C text (``long long``) of how many elements it writes from there.
        chain_first: the layout ``t[r][q][p]`` instead of ``t[p][r][q]``.
        writer: the loop ``P`` that writes ``t`` first in every iteration (its header is
            evaluated again on the host for the write-back).
    """

    array: str
    name: str
    ctype: str
    loops: tuple[For, ...]
    extents: tuple[str, ...]
    first: Expr
    count: str
    chain_first: bool = False
    writer: For | None = None

    @property
    def own_extent(self) -> str:
        """The array's own extent (C text)."""
        return self.extents[-1] if self.chain_first else self.extents[0]

    def describe(self) -> str:
        """``sum privatised per (r, q) iteration``."""
        idx = ", ".join(L.var or "?" for L in self.loops)
        return f"{self.array} privatised per ({idx}) iteration"


def map_expr(e: Expr, f: Callable[[Expr], Expr | None]) -> Expr:
    """``e`` rebuilt; ``f`` is asked first about each node as written (pre-order, so it
    may match nodes by identity) and may return its replacement (None: rebuild the node
    from its mapped children)."""
    new = f(e)
    if new is not None:
        return new
    if isinstance(e, Index):
        out: Expr = replace(e, subs=tuple(map_expr(s, f) for s in e.subs))
    elif isinstance(e, Unary):
        out = replace(e, operand=map_expr(e.operand, f))
    elif isinstance(e, Binary):
        out = replace(e, left=map_expr(e.left, f), right=map_expr(e.right, f))
    elif isinstance(e, Ternary):
        out = replace(e, cond=map_expr(e.cond, f), then=map_expr(e.then, f),
                      other=map_expr(e.other, f))
    elif isinstance(e, Call):
        out = replace(e, args=tuple(map_expr(a, f) for a in e.args))
    elif isinstance(e, Cast):
        out = replace(e, operand=map_expr(e.operand, f))
    elif isinstance(e, Paren):
        out = replace(e, inner=map_expr(e.inner, f))
    else:
        out = e
    return out


def map_stmts(stmts: Sequence[Stmt], f: Callable[[Expr], Expr | None]) -> list[Stmt]:
    """Copies of ``stmts`` (new objects, recursively) with every expression mapped by ``f``."""
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Assign):
            target = map_expr(s.target, f)
            assert isinstance(target, (Name, Index))
            out.append(replace(s, target=target,
                               value=None if s.value is None else map_expr(s.value, f)))
        elif isinstance(s, Decl):
            out.append(replace(s, init=None if s.init is None else map_expr(s.init, f)))
        elif isinstance(s, If):
            out.append(replace(s, cond=map_expr(s.cond, f), then=map_stmts(s.then, f),
                               orelse=map_stmts(s.orelse, f)))
        elif isinstance(s, ExprStmt):
            out.append(replace(s, expr=map_expr(s.expr, f)))
        elif isinstance(s, For):
            out.append(replace(s, body=map_stmts(s.body, f)))  # headers never touch ``t``
        else:
            out.append(replace(s))
    return out


def _header(L: For) -> tuple[str, str, str, int]:
    return (c_text(L.first), L.cmp, c_text(L.bound), L.step)


def _counts_up(L: For) -> bool:
    return bool(L.canonical and L.var and L.step == 1 and L.cmp in ("<", "<=")
                and L.first is not None and L.bound is not None)


def integer_header(L: For, fn: Function) -> bool:
    """``L``'s index and every name its bounds read are signed integers, and the bounds are
    made of them, integer literals without an unsigned suffix and ``+ - * / %``: the host's
    ``(long long)(bound) - (long long)(first)`` (the copies' sizes, the write-back, a
    collapsed loop's bound) is then the count C runs.  A floating bound (``c < alpha * n``)
    or an unsigned one (C compares ``-1 < n`` as unsigned and runs nothing) is not."""
    if normalize_ctype(L.ctype or fn.ctype_of(L.var or "") or "") not in SIGNED_INTS:
        return False
    for e in (L.first, L.bound):
        for x in iter_expr(e):  # type: ignore[arg-type]
            if isinstance(x, Name):
                if normalize_ctype(fn.ctype_of(x.name) or "") not in SIGNED_INTS:
                    return False
            elif isinstance(x, Const):
                if int_literal(x.text) is None or any(c in x.text for c in "uU"):
                    return False
            elif isinstance(x, Binary):
                if x.op not in ("+", "-", "*", "/", "%"):
                    return False
            elif not isinstance(x, (Paren, Unary)):
                return False
    return True


def _mentions(stmts: Sequence[Stmt], array: str) -> bool:
    return any(a.array == array for a in accesses(stmts))


def _subscript_is(x: Index, var: str) -> bool:
    return len(x.subs) == 1 and strip_parens(x.subs[0]) == Name(var)


def _kill_loop(P: Stmt, t: str, invariant_bad: set[str], fn: Function) -> bool:
    """``P`` writes ``t[p]`` first in every iteration and touches nothing else of ``t``."""
    if not isinstance(P, For) or not _counts_up(P) or P.header_names() & invariant_bad:
        return False
    if not integer_header(P, fn):  # the host counts what it wrote for the write-back
        return False
    if (P.var or "") in scalars_written(P.body):  # every element of its range, in turn
        return False
    if t in header_arrays(P) or not P.body or any(isinstance(s, Jump) for s in walk(P.body)):
        return False
    first = P.body[0]
    if not (isinstance(first, Assign) and first.op == "=" and isinstance(first.target, Index)
            and first.target.array == t and _subscript_is(first.target, P.var or "")
            and first.value is not None
            and not any(isinstance(x, Index) and x.array == t for x in iter_expr(first.value))):
        return False
    return all(_subscript_is(a.index, P.var or "") for a in accesses(P.body) if a.array == t)


def _covered_reads(stmts: Sequence[Stmt], t: str, P: For, loops: dict[str, For]) -> bool:
    """Every access to ``t`` in ``stmts`` is a read ``t[x]`` with ``x`` the index of an
    enclosing loop (``loops``, innermost wins) that has ``P``'s header."""
    for s in stmts:
        if isinstance(s, For):
            if t in header_arrays(s):
                return False
            inner = dict(loops)
            if s.var:
                inner[s.var] = s
            if not _covered_reads(s.body, t, P, inner):
                return False
            continue
        if isinstance(s, If):
            own = [a for a in accesses([replace(s, then=[], orelse=[])]) if a.array == t]
            if not all(_read_in_range(a.index, a.write, P, loops) for a in own):
                return False
            if not (_covered_reads(s.then, t, P, loops) and _covered_reads(s.orelse, t, P, loops)):
                return False
            continue
        for a in accesses([s]):
            if a.array == t and not _read_in_range(a.index, a.write, P, loops):
                return False
    return True


def _read_in_range(x: Index, write: bool, P: For, loops: dict[str, For]) -> bool:
    if write or len(x.subs) != 1:
        return False
    sub = strip_parens(x.subs[0])
    if not isinstance(sub, Name) or sub.name not in loops:
        return False
    X = loops[sub.name]
    return _counts_up(X) and _header(X) == _header(P) and sub.name not in scalars_written(X.body)


def privatisable(body: Sequence[Stmt], t: str, chain_vars: set[str], fn: Function) -> For | None:
    """The loop ``P`` that writes ``t`` first in every iteration of a chain whose body is
    ``body``, when ``t`` may get a copy per iteration (rules 2-4 of the module's docstring);
    else None."""
    accs = [a for a in accesses(body) if a.array == t]
    if not accs or any(len(a.index.subs) != 1 for a in accs):
        return None
    for a in accs:
        if any(isinstance(x, Name) and x.name in chain_vars for x in iter_expr(a.index.subs[0])):
            return None
    invariant_bad = chain_vars | scalars_written(body)
    at = next(i for i, s in enumerate(body) if _mentions([s], t))
    P = body[at]
    if not _kill_loop(P, t, invariant_bad, fn):
        return None
    assert isinstance(P, For)
    if not _covered_reads(body[at + 1:], t, P, {}):
        return None
    return P


def expand(dep: Dependence, L: For, prefix: str, start: int, chain_first: bool = False
           ) -> tuple[For, list[Expansion]] | None:
    """``L``'s perfect chain rewritten with its privatisable arrays expanded, and the
    expansions; None when there is none or the rewritten ``L`` is still not parallel.

    The scratch arrays are named ``<prefix>pv<n>_<array>`` from ``n = start`` and added to
    ``dep.fn.arrays`` (as arrays the function does not take: the launcher allocates them).
    Their layout puts the chain's indices last (``t[p][r][q]``: for a mapping whose threads
    differ in ``q``), or first with ``chain_first`` (``t[r][q][p]``: for the threads of a
    block that differ in ``p``, after :func:`split_chain`).
    """
    fn = dep.fn
    chain = [L]
    while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], For):
        chain.append(chain[-1].body[0])
    chain_vars = {C.var or "" for C in chain}
    body = chain[-1].body
    if len(chain) > 1 and len(body) == 1:
        chain.pop()  # the innermost loop is the body's only statement: keep it in the body
        chain_vars = {C.var or "" for C in chain}
        body = chain[-1].body
    written = scalars_written(body)
    for C in chain:
        if (not _counts_up(C) or C.header_names() & (chain_vars | written)
                or not integer_header(C, fn)):
            return None
    if own_jumps(body):  # an iteration that skips the writing loop: the last copy is not the last write
        return None
    found: list[tuple[str, For]] = []
    for t in sorted({a.array for a in accesses(body) if a.write}):
        # a local array is a static __device__ array: the launcher has no pointer to it
        if t not in fn.arrays or t in fn.local_arrays or any(t in header_arrays(C) for C in chain):
            continue
        P = privatisable(body, t, chain_vars, fn)
        if P is not None:
            found.append((t, P))
    if not found:
        return None
    expansions: list[Expansion] = []
    for n, (t, P) in enumerate(found, start):
        arr = fn.arrays[t]
        name = f"{prefix}pv{n}_{t}"
        trips = tuple(f"({C.trip_text()})" for C in chain)
        extents = (*trips, arr.extents[0]) if chain_first else (arr.extents[0], *trips)
        expansions.append(Expansion(t, name, arr.ctype, tuple(chain), extents, P.first,  # type: ignore[arg-type]
                                    P.trip_text(), chain_first, P))
    subst = {e.array: e for e in expansions}

    def offset(C: For) -> Expr:
        first = strip_parens(C.first)  # type: ignore[arg-type]
        if isinstance(first, Const) and first.text == "0":
            return Name(C.var or "")
        return Paren(Binary("-", Name(C.var or ""), Paren(C.first)))  # type: ignore[arg-type]

    def rewrite(e: Expr) -> Expr | None:
        if isinstance(e, Index) and e.array in subst:
            x = subst[e.array]
            at = tuple(offset(C) for C in chain)
            return Index(x.name, at + e.subs if chain_first else e.subs + at, e.text)
        return None

    new_body = map_stmts(body, rewrite)
    inner: Stmt | list[Stmt] = new_body
    made: list[For] = []
    for C in reversed(chain):
        C2 = replace(C, body=inner if isinstance(inner, list) else [inner])
        made.append(C2)
        inner = C2
    new_L = made[-1]
    for old, new in zip(reversed(chain), made):
        dep.live.alias(new, old)
    for old_s, new_s in zip(walk(body), walk(new_body)):
        dep.live.alias(new_s, old_s)
    dep.keep(*made, *walk(new_body))
    for x in expansions:
        fn.arrays[x.name] = ArrayParam(x.name, x.ctype, x.extents)
    if not dep.parallel(new_L).parallel:
        for x in expansions:
            del fn.arrays[x.name]
        return None
    return new_L, expansions


def _trip_expr(C: For) -> Expr:
    """``C``'s iteration count as an expression (``long long``; ``C`` counts up by one)."""
    span: Expr = Binary("-", Paren(C.bound), Paren(C.first))  # type: ignore[arg-type]
    if C.cmp == "<=":
        span = Binary("+", span, Const("1"))
    return Cast("long long", Paren(span))


def split_chain(dep: Dependence, L: For, depth: int, var: str) -> list[For] | None:
    """The parallel chain of ``depth`` loops at ``L`` (every one of them parallel, as a
    privatised chain is) split into one chain per group of its body's statements, each
    chain collapsed into one loop ``var`` over the product of the trip counts whose body
    first sets the chain's indices from it (``r = var / nq; q = var % nq``).  doitgen's
    ``(r, q)`` chain becomes two loops: ``p`` then maps onto the threads of a block per
    ``(r, q)`` (``block_per_row``) instead of running in each thread.

    Legal because no dependence crosses the chain's iterations: running every iteration's
    first group, then every iteration's second, keeps each dependence's direction (the
    groups of :func:`transform._groups` keep the statements that share a private scalar
    together, in program order).  None when the body is one group, or when an inner index
    or a chain index is used outside its loops or after ``L``.  ``var`` is added to the
    function's locals (``long long``).
    """
    from cudaperf_cli.policies.builtin.transform import _groups, _index_stays_in_its_loops

    chain = [L]
    while len(chain) < depth and len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], For):
        chain.append(chain[-1].body[0])
    if len(chain) != depth or not all(dep.parallel(C).parallel for C in chain):
        return None
    body = list(chain[-1].body)
    if any(isinstance(x, Jump) for x in walk(body)):
        return None
    chain_vars = {C.var or "" for C in chain}
    inner = {x.var for x in walk(body) if isinstance(x, For) and x.var}
    if not all(_index_stays_in_its_loops(body, x) for x in inner):
        return None
    if (inner | chain_vars) & dep.live.after(L):
        return None
    groups = _groups(dep, chain[-1], body, inner | chain_vars)
    if len(groups) < 2:
        return None
    trips = [_trip_expr(C) for C in chain]
    parts: list[For] = []
    for g in groups:
        if depth == 1:
            part = replace(L, body=g)
            dep.live.alias(part, L)
            dep.keep(part)
            parts.append(part)
            continue
        sets: list[Stmt] = []
        for i, C in enumerate(chain):
            v: Expr = Name(var)
            later = trips[i + 1:]
            if later:
                div: Expr = later[0]
                for t in later[1:]:
                    div = Binary("*", div, t)
                v = Binary("/", v, Paren(div))
            if i > 0:
                v = Binary("%", Paren(v) if later else v, trips[i])
            T = C.ctype or dep.fn.ctype_of(C.var or "") or "int"
            value = Cast(T, Paren(Binary("+", Paren(C.first), Paren(v))))  # type: ignore[arg-type]
            sets.append(Decl(C.line, T, C.var or "", value) if C.ctype
                        else Assign(C.line, Name(C.var or ""), "=", value))
        bound: Expr = trips[0]
        for t in trips[1:]:
            bound = Binary("*", bound, t)
        zero = Const("0")
        loop = For(L.line, var, "long long", Decl(L.line, "long long", var, zero),
                   Binary("<", Name(var), bound), Assign(L.line, Name(var), "++", None),
                   sets + g, True, "", zero, "<", bound, 1)
        dep.live.alias(loop, L)
        for x in sets:
            dep.live.alias(x, L)
        dep.prove_parallel(loop, f"loops {', '.join(C.var or '?' for C in chain)} collapsed")
        parts.append(loop)
    if depth > 1:
        dep.fn.locals[var] = "long long"
    return parts


def _bytes_of(ctype: str, count: int) -> int:
    import numpy as np

    from cudaperf_cli.core import dtype_of

    return count * np.dtype(dtype_of(ctype)).itemsize


def scratch_fits(fn: Function, exps: Sequence[Expansion], sizes: Mapping[str, int]) -> bool:
    """The expansions' copies, at the problem's sizes, take at most as many bytes as the
    function's own arrays (its footprint): the evaluation plans device memory from the
    problem's arrays, and a copy per iteration of a deep chain can be far larger (a scratch
    row of ``n`` per iteration of an ``n x n x n`` chain).  False when a trip count or an
    extent cannot be evaluated from ``sizes``.
    """
    try:
        foot = 0
        for a in fn.arrays.values():
            if a.name in fn.local_arrays or any(a.name == x.name for x in exps):
                continue
            count = 1
            for e in a.extents:
                count *= max(eval_int_expr(e, sizes), 0)
            foot += _bytes_of(a.ctype, count)
        need = 0
        for x in exps:
            count = max(eval_int_expr(x.own_extent, sizes), 0)
            for C in x.loops:
                trip = eval_int_expr(c_text(C.bound), sizes) - eval_int_expr(c_text(C.first), sizes)
                count *= max(trip + (1 if C.cmp == "<=" else 0), 0)
            need += _bytes_of(x.ctype, count)
    except (ValueError, ProblemError):
        return False
    return need <= foot


@dataclass(frozen=True)
class Snapshot:
    """A copy of an array taken before a loop, for the reads that only see its earlier values.

    Attributes:
        array: the C array (trmm's ``B``).
        name: the device copy (``cp_ss0_B``), with the array's extents.
        ctype: the element type.
        loop: the loop (as written) before which the copy is taken.
        reads: how many reads of the body now read the copy.
    """

    array: str
    name: str
    ctype: str
    loop: For
    reads: int

    def describe(self) -> str:
        """``B's earlier values read from a copy``."""
        return f"{self.array}'s earlier values read from a copy"


def snapshot(dep: Dependence, L: For, prefix: str, start: int) -> tuple[For, list[Snapshot]] | None:
    """``L`` rewritten so that the reads that see only what an array held before ``L``
    (:func:`polyhedral.reads_only_earlier_values`) read a copy taken before it, and the
    copies; None when that leaves ``L`` not parallel (or nothing is read so).

    trmm's ``for (i ...) for (j ...) { for (k = i + 1 ...) B[i][j] += A[k][i] * B[k][j]; ...}``
    reads rows of ``B`` that later iterations of ``i`` write: an anti dependence only.  With
    ``B[k][j]`` read from the copy, every iteration of ``i`` touches row ``i`` of ``B`` alone.
    The copies are ``<prefix>ss<n>_<array>`` from ``n = start``, added to ``dep.fn.arrays``.
    """
    fn = dep.fn
    if not L.canonical or not L.var or L.step != 1:
        return None
    found: list[tuple[str, list[Index]]] = []
    for t in sorted({a.array for a in accesses(L.body) if a.write}):
        if t not in fn.arrays or t in header_arrays(L) or t in fn.local_arrays:
            continue
        reads = polyhedral.reads_only_earlier_values(L, t)
        if reads:
            found.append((t, reads))
    if not found:
        return None
    snaps = [Snapshot(t, f"{prefix}ss{n}_{t}", fn.arrays[t].ctype, L, len(reads))
             for n, (t, reads) in enumerate(found, start)]
    ids = {id(r): sn.name for sn, (_, reads) in zip(snaps, found) for r in reads}

    def rewrite(e: Expr) -> Expr | None:
        if isinstance(e, Index) and id(e) in ids:
            return Index(ids[id(e)], e.subs, e.text)
        return None

    new_body = map_stmts(L.body, rewrite)
    new_L = replace(L, body=new_body)
    dep.live.alias(new_L, L)
    for old_s, new_s in zip(walk(L.body), walk(new_body)):
        dep.live.alias(new_s, old_s)
    dep.keep(new_L, *walk(new_body))
    for sn in snaps:
        a = fn.arrays[sn.array]
        fn.arrays[sn.name] = ArrayParam(sn.name, a.ctype, a.extents, const=True)
    if not dep.parallel(new_L).parallel:
        for sn in snaps:
            del fn.arrays[sn.name]
        return None
    return new_L, snaps


__all__ = ["Expansion", "Snapshot", "expand", "map_expr", "map_stmts", "privatisable",
           "scratch_fits", "snapshot", "split_chain"]
