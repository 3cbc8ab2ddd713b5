"""Loop transformations of the built-in policy, each bit-identical to the C code:

* :func:`perfect_nest` (below): the body of a parallel loop made one loop, so that two
  loops map onto the grid instead of one;
* :func:`distribute` (at the end): a loop that is not parallel split into loops that each
  may be (Kennedy and Allen's distribution over a conservative dependence graph).

The shape this exists for is PolyBench's and BLAS's reference GEMM family::

    for (i ...) {                          for (i ...)                 // i -> y
        for (j ...) C[i][j] *= beta;   =>      for (j ...) {           // j -> x
        for (k ...)                                C[i][j] *= beta;
            for (j ...) C[i][j] += ...;            for (k ...) C[i][j] += ...;
    }                                          }

Two steps (after sinking loop-invariant declarations into the inner loop,
:func:`sink_declarations`), each applied only when the dependence test proves it legal:

1. **Interchange** of an inner perfect 2-deep nest ``for k { for j { S } }`` whose outer
   loop ``k`` carries a dependence and whose inner loop ``j`` is parallel over the whole
   nest (:meth:`Dependence.interchange`): each element then receives its updates in the
   original order of ``k``, so results are bit-identical.
2. **Fusion** of the sibling loops of the body, when they have the same header (index,
   first value, comparison, bound, step) and the fused loop passes the parallel test: no
   iteration then touches an element another iteration writes, so every dependence
   between the two loops' statements joins the same iteration and keeps its order (the
   first loop's statement runs before the second's).  Scalars are not shared: no scalar
   written in one loop's body (other than one declared there) is read or written in the
   other's, and neither body has a ``break``/``continue`` of its own.

The rewrite is kept only when it leaves the body as one loop (a perfect nest); otherwise
the loop is scheduled as written.  ``grid2d``/``block_per_row`` then see the new nest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cudaperf_cli.policies.builtin.dependence import Dependence
from cudaperf_cli.policies.builtin.ir import (
    Decl,
    For,
    If,
    Stmt,
    accesses,
    arrays_read,
    arrays_written,
    c_text,
    declared_in,
    names_in,
    own_jumps,
    scalars_read,
    scalars_written,
    stmt_reads,
    stmt_writes,
    walk,
)


def _header(L: For) -> tuple[object, ...] | None:
    """The canonical header as comparable text, or None for a non-canonical loop."""
    if not L.canonical or L.var is None:
        return None
    return (L.var, c_text(L.first), L.cmp, c_text(L.bound), L.step)


def _shared_scalars(a: For, b: For) -> set[str]:
    """Scalars written in one body (not declared there) and used in the other."""
    def written(L: For) -> set[str]:
        return scalars_written(L.body) - declared_in(L.body) - {L.var or ""}

    def used(L: For) -> set[str]:
        return (scalars_read(L.body) | scalars_written(L.body)) - declared_in(L.body)

    return (written(a) & used(b)) | (written(b) & used(a))


def sink_declarations(dep: Dependence, L: For) -> For:
    """``for k { T a = e; for j { S } }`` as ``for k { for j { T a = e; S } }`` (``L``
    unchanged when the shape differs or sinking is not legal).  Legal when ``e`` reads no
    array written in ``L`` and no scalar written in ``L`` other than ``k`` and the earlier
    sunk declarations, and ``a`` is not written in the inner loop: every ``j`` iteration
    then computes the value the one declaration computed, so results are identical."""
    if len(L.body) < 2 or not isinstance(L.body[-1], For):
        return L
    decls, inner = L.body[:-1], L.body[-1]
    if not all(isinstance(d, Decl) and d.init is not None for d in decls):
        return L
    arrays = arrays_written(L.body)
    scalars = scalars_written(L.body) - {L.var or ""}
    names = {d.name for d in decls}  # type: ignore[union-attr]
    for d in decls:
        assert isinstance(d, Decl)
        reads = names_in(d.init)
        if reads & arrays or (reads & scalars) - names:
            return L
        if any(a.array in arrays for a in accesses([d])):
            return L
    if (names & scalars_written(inner.body) or inner.var in names or names & inner.header_names()
            or names & declared_in(inner.body)):
        return L
    new_inner = replace(inner, body=[*decls, *inner.body])
    new_l = replace(L, body=[new_inner])
    dep.live.alias(new_inner, inner)
    dep.live.alias(new_l, L)
    dep.keep(new_inner, new_l)
    return new_l


def _scopes_clash(a: For, b: For) -> bool:
    """A name declared in one body is declared or used in the other: one scope after
    fusion would redeclare it, or make the other body read the inner variable where it
    read an outer one of the same name."""
    def used(L: For) -> set[str]:
        return scalars_read(L.body) | scalars_written(L.body) | declared_in(L.body)

    return bool(declared_in(a.body) & used(b)) or bool(declared_in(b.body) & used(a))


def interchange(dep: Dependence, L: For) -> For | None:
    """``for inner { for L.var { body } }`` for the perfect nest ``L { inner }`` (after
    :func:`sink_declarations`) when :meth:`Dependence.interchange` allows it and ``L``
    itself is not parallel; else None."""
    L = sink_declarations(dep, L)
    if len(L.body) != 1 or not isinstance(L.body[0], For) or dep.parallel(L).parallel:
        return None
    ok, _ = dep.interchange(L)
    if not ok:
        return None
    inner = L.body[0]
    new_inner = replace(L, body=inner.body)
    new_outer = replace(inner, body=[new_inner])
    dep.live.alias(new_outer, L)
    dep.live.alias(new_inner, L, inner)
    dep.keep(new_outer, new_inner)
    return new_outer


def perfect_nest(dep: Dependence, P: For) -> tuple[For, tuple[str, ...]]:
    """``P`` with its body made one loop by interchange and fusion (module docstring), and
    the transformations applied in words (``("k, j interchanged", "2 j loops fused")``);
    ``(P, ())`` when the body cannot be made one loop legally or already is one."""
    body = P.body
    if len(body) < 2 or not all(isinstance(s, For) for s in body):
        return P, ()
    for target in dict.fromkeys(_header(S) for S in body):  # type: ignore[union-attr]
        if target is None:
            continue
        notes: list[str] = []
        loops: list[For] = []
        for S in body:
            assert isinstance(S, For)
            if _header(S) != target:
                T = interchange(dep, S)
                if T is None or _header(T) != target:
                    break
                notes.append(f"{S.var}, {T.var} interchanged")
                S = T
            loops.append(S)
        else:
            return _fuse(dep, P, loops, notes)
    return P, ()


def _fuse(dep: Dependence, P: For, loops: list[For], notes: list[str]) -> tuple[For, tuple[str, ...]]:
    """``P`` with its body, the loops ``loops`` (one header), fused into one loop, when legal."""
    if any(own_jumps(S.body) for S in loops):
        return P, ()
    for a_i, a in enumerate(loops):
        for b in loops[a_i + 1:]:
            if _shared_scalars(a, b) or _scopes_clash(a, b):
                return P, ()
    var = loops[0].var
    if any(var in dep.live.after(S) for S in loops):
        return P, ()  # the index's final value is used after a loop
    fused = replace(loops[0], body=[s for S in loops for s in S.body])
    dep.live.alias(fused, *loops)
    dep.keep(fused)
    if not dep.parallel(fused).parallel:
        return P, ()
    notes = [*notes, f"{len(loops)} {var} loops fused"]
    new_p = replace(P, body=[fused])
    dep.live.alias(new_p, P)
    dep.keep(new_p)
    return new_p, tuple(notes)


# ---------------------------------------------------------------------------------------
# Distribution
# ---------------------------------------------------------------------------------------


def _inner_indices(stmts: list[Stmt]) -> set[str]:
    return {x.var for x in walk(stmts) if isinstance(x, For) and x.var}


def _index_stays_in_its_loops(stmts: Sequence[Stmt], idx: str, inside: bool = False) -> bool:
    """``idx`` is only used by canonical loops whose header sets it (``for (j = a; ...)``)
    and inside their bodies, which do not assign it: each such loop resets it, so no value
    of it flows between statements and it is private to every part of a distribution."""
    for s in stmts:
        if isinstance(s, For):
            defines = s.var == idx and s.canonical and s.init is not None
            if defines and idx in scalars_written(s.body):
                return False
            if not defines and not inside and idx in (names_in(s.first) | names_in(s.bound)
                                                      | stmt_writes(s) | names_in(s.cond)):
                return False
            if not _index_stays_in_its_loops(s.body, idx, inside or defines):
                return False
        elif isinstance(s, If):
            if not inside and idx in names_in(s.cond):
                return False
            if not (_index_stays_in_its_loops(s.then, idx, inside)
                    and _index_stays_in_its_loops(s.orelse, idx, inside)):
                return False
        elif not inside and idx in (stmt_reads(s) | stmt_writes(s)):
            return False
    return True


def _footprint(stmts: list[Stmt], private: set[str]) -> tuple[set[str], set[str]]:
    """(names written, names read or written) by ``stmts``: arrays and scalars, the
    ``private`` names (loop indices reset by their own headers) left out."""
    writes = (arrays_written(stmts) | scalars_written(stmts)) - private
    used = writes | ((arrays_read(stmts) | scalars_read(stmts)) - private)
    return writes, used


def _groups(dep: Dependence, L: For, body: list[Stmt], private: set[str]) -> list[list[Stmt]]:
    """The statements of ``body`` (the body of ``L``) in groups that can run as separate
    loops, in an order that keeps every dependence (Kennedy and Allen's loop distribution:
    the strongly connected components of the statement dependence graph, in topological
    order; here with a conservative graph).

    Two statements that share a name one of them writes depend on each other: in both
    directions (one group) for a scalar and for an array that some iteration reads or
    writes outside its own elements; from the earlier to the later statement only for an
    array whose every access in ``L`` stays within its iteration
    (:meth:`Dependence.own_elements`: ``tmp[i]`` in loop ``i``), since that dependence never
    crosses iterations.  ``private`` names (loop indices) are not shared data.
    """
    n = len(body)
    prints = [_footprint([s], private) for s in body]
    arrays = arrays_written(body) | arrays_read(body)
    edges: list[set[int]] = [set() for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            (wa, ua), (wb, ub) = prints[a], prints[b]
            shared = (wa & ub) | (wb & ua)
            if not shared:
                continue
            edges[a].add(b)
            if any(x not in arrays or not dep.own_elements(L, x) for x in shared):
                edges[b].add(a)
    # strongly connected components (Tarjan), then their topological order by first statement
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    comps: list[list[int]] = []

    def visit(v: int) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    for v in range(n):
        if v not in index:
            visit(v)
    comp_of = {v: c for c, comp in enumerate(comps) for v in comp}
    preds: dict[int, set[int]] = {c: set() for c in range(len(comps))}
    for a in range(n):
        for b in edges[a]:
            if comp_of[a] != comp_of[b]:
                preds[comp_of[b]].add(comp_of[a])
    ordered: list[int] = []
    done: set[int] = set()
    while len(ordered) < len(comps):
        ready = [c for c in range(len(comps)) if c not in done and preds[c] <= done]
        c = min(ready, key=lambda c: comps[c][0])
        ordered.append(c)
        done.add(c)
    return [[body[v] for v in comps[c]] for c in ordered]


def distribute(dep: Dependence, L: For) -> list[For] | None:
    """``L`` split into several loops with ``L``'s header, one per group of its body's
    statements (:func:`_groups`); None when the body is one group.

    Inner loops are split first (so ``for j { s[j] += ..; q[i] += ..; }`` becomes two ``j``
    loops).  The indices of inner loops are reset by their headers;
    the split is refused when one of them is used outside the loops that set it
    (:func:`_index_stays_in_its_loops`) or, like ``L``'s own index, after ``L``; when the
    body writes ``L``'s index or a scalar of its bounds;
    and when the body has a ``break``/``continue``/``return`` of its own or declares a
    scalar (a declaration's scope would have to span groups)."""
    if not L.canonical or L.var is None or own_jumps(L.body):
        return None
    if any(isinstance(x, Decl) for x in walk(L.body)):
        return None
    written = scalars_written(L.body)
    if L.var in written or L.header_names() & written:
        return None  # the header would differ between the parts
    inner_idx = _inner_indices(L.body)
    if not all(_index_stays_in_its_loops(L.body, x) for x in inner_idx):
        return None
    live = dep.live.after(L)
    if (inner_idx | {L.var}) & live:
        return None
    body: list[Stmt] = []
    for s in L.body:
        parts = distribute(dep, s) if isinstance(s, For) else None
        body.extend(parts if parts else [s])
    groups = _groups(dep, L, body, inner_idx | {L.var})
    if len(groups) < 2:
        return None
    out = []
    for g in groups:
        part = replace(L, body=g)
        dep.live.alias(part, L)
        dep.keep(part)
        out.append(part)
    return out


__all__ = ["distribute", "interchange", "perfect_nest", "sink_declarations"]
