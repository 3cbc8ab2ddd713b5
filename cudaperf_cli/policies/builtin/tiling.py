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
(the compiler keeps them in registers across the unrolled tile).  Bit-identical: the grid2d
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
    calls_in,
    has_loop,
    iter_expr,
    names_in,
    scalars_written,
)

#: (block, tile) pairs of the tiled grid2d entries (the first is the plan's preferred one).
TILES: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((16, 16), (4, 4)),
    ((32, 8), (4, 4)),
    ((16, 16), (2, 2)),
)


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


__all__ = ["TILES", "TileParts", "tile_parts"]
