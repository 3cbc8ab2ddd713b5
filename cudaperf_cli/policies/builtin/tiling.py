"""Register tiling of a grid2d product nest: each thread computes a TY x TX tile of outputs.

The shape (gemm, 2mm, 3mm after ``transform.perfect_nest``)::

    for (i ...)                       // -> y, parallel
      for (j ...) {                   // -> x, parallel
        PRE                           // statements without loops (C[i][j] *= beta)
        for (k ...)                   // sequential; bounds invariant in i and j
          T[...] += EXPR;             // or -=: T's element fixed in k; EXPR never reads T
        POST                          // statements without loops
      }

becomes, in each thread, for the outputs ``(i_r, j_c)`` at rows ``threadIdx.y + r *
blockDim.y`` and columns ``threadIdx.x + c * blockDim.x`` of the block's tile::

    for each (r, c): PRE(i_r, j_c); acc[r][c] = T(i_r, j_c)
    for (k ...) for each (r, c): acc[r][c] += EXPR(i_r, j_c, k)
    for each (r, c): T(i_r, j_c) = acc[r][c]; POST(i_r, j_c)

so one load of ``A[i_r][k]`` serves TX products and one of ``B[k][j_c]`` serves TY
(the compiler keeps them in registers across the unrolled tile).  In a rectangular nest
the operands that depend on ``k`` and one output index only (``A[i][k]``, ``B[k][j]``) can
also be staged in shared memory, STAGE_K values of ``k`` at a time, loaded by the whole
block with consecutive threads on consecutive addresses (:func:`staged_operands`): the
same values, so the same results.  Bit-identical: the grid2d
mapping is legal, so different ``(i, j)`` iterations may interleave; within one, PRE, the
updates in the order of ``k`` (the same expression, the same accumulation ``acc = acc +
EXPR`` that ``T[...] += EXPR`` performs) and POST keep their order, and ``T``'s element is
touched by nothing else in the ``k`` loop.

:func:`tile_parts` recognises the shape; the code is written by ``codegen``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudaperf_cli.policies.builtin.ir import (
    Assign,
    Call,
    Decl,
    ExprStmt,
    For,
    If,
    Index,
    Jump,
    MATH_FUNCS,
    Stmt,
    arrays_written,
    c_text,
    calls_in,
    has_loop,
    iter_expr,
    names_in,
    scalars_written,
)

#: (block, tile, staged) of the tiled grid2d entries, the first the plan's preferred one
#: (``staged``: operands through shared memory where :func:`staged_operands` finds them; a
#: staged shape where nothing is staged is left out).  On the H200 (PolyBench LARGE through
#: ``cudaperf bench``, 2026-12-03, with a scalar factor staged with its operand and edge
#: tiles unguarded) the 16x16 block of 4x4 tiles through shared memory was the fastest:
#: gemm 0.355 ms against 0.472 for 2x2 (2mm 0.367 / 0.594, 3mm 0.666 / 0.924;
#: docs/builtin-policy.md); without shared memory 2x2 beat 4x4.
TILES: tuple[tuple[tuple[int, int], tuple[int, int], bool], ...] = (
    ((16, 16), (4, 4), True),
    ((16, 16), (2, 2), True),
    ((16, 16), (2, 2), False),
    ((16, 16), (4, 4), False),
    ((32, 8), (4, 4), False),
)

#: k values staged per shared-memory step.
STAGE_K = 16

#: Most distinct operands staged in one nest.
MAX_STAGED = 4


@dataclass(frozen=True)
class TileParts:
    """The parts of a tileable thread body: ``pre`` statements, the sequential ``loop``
    (index ``loop.var``), its single update ``update`` (``T[...] += EXPR``), ``post``."""

    pre: tuple[Stmt, ...]
    loop: For
    update: Assign
    post: tuple[Stmt, ...]


def tile_parts(outer: For, inner: For) -> TileParts | None:
    """The parts of ``inner``'s body when the grid2d nest ``outer``/``inner`` (already proven
    parallel) has the product shape of the module docstring, else None."""
    body = inner.body
    loops = [s for s in body if isinstance(s, For)]
    if len(loops) != 1:
        return None
    K = loops[0]
    at = body.index(K)
    pre, post = tuple(body[:at]), tuple(body[at + 1:])
    for s in (*pre, *post):
        if has_loop([s]) or isinstance(s, (Jump, Decl)) or (isinstance(s, If) and has_loop([s])):
            return None
    if not K.canonical or not K.var or len(K.body) != 1 or not isinstance(K.body[0], Assign):
        return None
    upd = K.body[0]
    if upd.op not in ("+=", "-=") or not isinstance(upd.target, Index) or upd.value is None:
        return None
    ij = {outer.var, inner.var}
    # the k loop's bounds do not depend on the output (every thread runs the same k's)
    if K.header_names() & (ij | scalars_written(body)):
        return None
    # only the k index is a scalar written in the thread body
    if scalars_written(body) - {K.var}:
        return None
    target = upd.target
    if any(K.var in names_in(s) for s in target.subs):
        return None
    if any(isinstance(x, Index) for s in target.subs for x in iter_expr(s)):
        return None
    # EXPR reads no array written in the body (T included), calls only math functions
    written = arrays_written(body)
    for x in iter_expr(upd.value):
        if isinstance(x, Index) and x.array in written:
            return None
        if isinstance(x, Call) and x.func not in MATH_FUNCS:
            return None
    if any(c.func not in MATH_FUNCS for c in calls_in(list(body))):
        return None
    if any(isinstance(s, ExprStmt) for s in (*pre, *post)):
        return None
    return TileParts(pre, K, upd, post)


def staged_operands(parts: TileParts, y_var: str, x_var: str) -> list[tuple[Index, str]]:
    """The reads of the update's EXPR that can be staged in shared memory: ``(access,
    "y")`` for those whose subscripts use ``k`` and the y index but not the x index,
    ``(access, "x")`` for the converse; the other reads stay loads from global memory.
    Empty when ``k`` does not count up by one (the staging steps ``k`` by STAGE_K), or when
    more than MAX_STAGED distinct accesses would be staged (their buffers, up to 64 x 17
    doubles each at the largest tile, must stay under the 48 KiB of static shared memory)."""
    k = parts.loop.var
    if parts.loop.step != 1 or parts.update.value is None:
        return []
    out = []
    for x in iter_expr(parts.update.value):
        if not isinstance(x, Index):
            continue
        used = set().union(*(names_in(s) for s in x.subs))
        if k in used and y_var in used and x_var not in used:
            out.append((x, "y"))
        elif k in used and x_var in used and y_var not in used:
            out.append((x, "x"))
    if len({c_text(x) for x, _ in out}) > MAX_STAGED:
        return []
    return out


__all__ = ["STAGE_K", "TILES", "TileParts", "staged_operands", "tile_parts"]
