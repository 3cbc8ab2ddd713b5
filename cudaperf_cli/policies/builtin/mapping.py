"""How loops map onto the GPU: :class:`NestMapping` (one kernel site) and :class:`Mapping`
(the whole function: one choice per site)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

#: Kinds of kernel mapping, with the block shapes tried for each (default first).
BLOCKS: dict[str, tuple[tuple[int, ...], ...]] = {
    "grid2d": ((32, 8), (32, 4), (16, 16), (64, 4)),
    "warp_reduce": ((128,), (256,)),
    "block_per_row": ((128,), (256,)),
    "grid1d": ((256,), (128,), (512,)),
    "grid_reduce": ((256,), (512,)),
    "block_reduce": ((256,), (128,), (512,)),
    "col_reduce": ((32, 8), (16, 16), (32, 16)),
}

#: Kinds that split one sum between the threads of a warp or a block (its floating-point
#: result is then rounded in another order than the C code's).
SPLIT_SUMS = ("warp_reduce", "block_reduce", "col_reduce")

#: Preference between kinds when several apply (best first).
KIND_ORDER = ("grid2d", "warp_reduce", "block_reduce", "col_reduce", "block_per_row", "grid1d",
              "grid_reduce")

#: A sum along rows over fewer rows than this gets a block per row first (``block_reduce``)
#: and a warp per row second: a warp per row fills the H200 (132 SMs, 64 warps each: 8448
#: warps) only from about this many rows on.
FEW_ROWS = 4096

#: block_reduce and col_reduce are offered only for sums of at least this many terms at
#: the problem's sizes (known there: a sparse row's length is not), two or more per thread
#: of a 256-thread block.
LONG_ROW = 512

#: A sum down columns over fewer columns than this gets ``col_reduce`` first (the column's
#: sum split along threadIdx.y) instead of a thread per column: the H200 runs 270,336
#: threads at once (132 SMs x 2048), and a thread per column keeps each thread's loads
#: dependent on one long loop.
FEW_COLUMNS = 65536


def block_text(block: tuple[int, ...]) -> str:
    """``32x8`` or ``256``."""
    return "x".join(str(b) for b in block)


@dataclass(frozen=True)
class NestMapping:
    """How one kernel site (a loop nest that becomes a kernel) is mapped.

    Attributes:
        site: index of the site in program order (0-based).
        kind: ``grid2d``, ``grid1d``, ``block_per_row``, ``warp_reduce``, ``block_reduce``,
            ``col_reduce`` or ``grid_reduce``.
        block: threads per block (``(32, 8)`` or ``(256,)``).
        roles: ``(loop index, role)`` pairs; roles are ``x``/``y`` (grid2d; col_reduce: the
            parallel loop along x, the summed loop split along y), ``x`` (grid1d),
            ``block``/``thread`` (block_per_row, block_reduce), ``warp``/``lane``
            (warp_reduce), ``grid`` (grid_reduce).
        sequential: loops that stay sequential inside each thread.
        host_loops: enclosing loops that stay on the host (one launch per iteration).
        interchanged: ``(outer, inner)`` when the nest was interchanged, else None.
        accumulator: the accumulator of a reduction mapping (``y[i]``, ``s``), else None;
            for several sums, their accumulators in source order (``tmp[i], y[i]``).
        sums: how many sums a ``warp_reduce``, ``block_reduce`` or ``col_reduce`` adds at
            once (one accumulator each).
        transforms: rewrites of the nest before mapping (``k, j interchanged``,
            ``2 j loops fused``: ``transform.py``).
        tile: grid2d only: outputs per thread along y and x (``(4, 4)``: a register tile,
            ``tiling.py``), or ``()`` for one output per thread.
        staged: a tiled grid2d whose operands go through shared memory (``tiling.py``).
        split: col_reduce only: the summed loop is also split over the grid's y blocks when
            the x blocks alone are too few, each block's sums added with atomicAdd
            (``codegen.SPLIT_TARGET_BLOCKS``; the order of the additions then varies from
            run to run).
    """

    site: int
    kind: str
    block: tuple[int, ...]
    roles: tuple[tuple[str, str], ...]
    sequential: tuple[str, ...] = ()
    host_loops: tuple[str, ...] = ()
    interchanged: tuple[str, str] | None = None
    accumulator: str | None = None
    transforms: tuple[str, ...] = ()
    tile: tuple[int, ...] = ()
    staged: bool = False
    sums: int = 1
    split: bool = False

    def with_block(self, block: tuple[int, ...]) -> NestMapping:
        """The same mapping with another block shape."""
        return replace(self, block=block)

    def describe(self) -> str:
        """One line, e.g. ``grid2d i->y j->x block 32x8; k sequential``."""
        roles = " ".join(f"{v}->{r}" for v, r in self.roles)
        text = f"{self.kind} {roles} block {block_text(self.block)}"
        if self.tile:
            text += f" tile {block_text(self.tile)}" + (" smem" if self.staged else "")
        if self.kind == "warp_reduce":
            text += f" (shuffle {'sums' if self.sums > 1 else 'sum'} into {self.accumulator})"
        elif self.kind in ("block_reduce", "col_reduce"):
            text += f" (tree {'sums' if self.sums > 1 else 'sum'} into {self.accumulator}"
            text += ", split over blocks: atomicAdd)" if self.split else ")"
        elif self.kind == "grid_reduce":
            text += f" (atomicAdd sum into {self.accumulator})"
        if self.interchanged:
            text += f" (loops {self.interchanged[0]}, {self.interchanged[1]} interchanged)"
        if self.transforms:
            text += f" ({', '.join(self.transforms)})"
        if self.sequential:
            text += f"; {', '.join(self.sequential)} sequential"
        return text

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "site": self.site,
            "kind": self.kind,
            "block": list(self.block),
            "roles": {v: r for v, r in self.roles},
            "sequential": list(self.sequential),
            "host_loops": list(self.host_loops),
            "interchanged": list(self.interchanged) if self.interchanged else None,
            "accumulator": self.accumulator,
            "transforms": list(self.transforms),
            "tile": list(self.tile),
            "staged": self.staged,
            "sums": self.sums,
            "split": self.split,
        }


@dataclass(frozen=True)
class Mapping:
    """A complete mapping of the function: one :class:`NestMapping` per kernel site.

    Attributes:
        kind: the kind this alternative was built around (the first site's kind when every
            site uses its preferred kind).
        block: the block shape used for the sites of that kind.
        nests: one entry per kernel site, in program order.
        host_loops: every loop kept on the host (one launch per iteration).
        serial: statements or loops that run in one-thread kernels (short descriptions).
        block_serial: the same for one-block kernels (``analysis.Serial.threads`` > 1).
        one_block_loops: built from ``analysis.analyze(one_block_loops=True)``.
        source_order: built from the analysis that keeps every floating-point sum in one
            thread, in the C code's order (``analysis.analyze(source_order=True)``).
        distributed: loops split by ``transform.distribute`` (``loop i into 3``).
    """

    kind: str
    block: tuple[int, ...]
    nests: tuple[NestMapping, ...]
    host_loops: tuple[str, ...] = ()
    serial: tuple[str, ...] = ()
    source_order: bool = False
    distributed: tuple[str, ...] = ()
    block_serial: tuple[str, ...] = ()
    one_block_loops: bool = False

    def describe(self) -> str:
        """One line, e.g. ``host loop t | grid2d i->y j->x block 32x8 | grid2d ...``; a
        ``source_order`` mapping starts with ``sums in source order:``."""
        parts: list[str] = []
        if self.host_loops:
            parts.append("host loop " + ", ".join(self.host_loops))
        parts += [n.describe() for n in self.nests]
        if self.block_serial:
            parts.append("1-block kernel: " + "; ".join(self.block_serial))
        if self.serial:
            parts.append("1-thread kernel: " + "; ".join(self.serial))
        if self.distributed:
            parts.append("distributed: " + ", ".join(self.distributed))
        return ("sums in source order: " if self.source_order else "") + " | ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (what :class:`~cudaperf_cli.policies.base.Proposal` carries)."""
        return {
            "kind": self.kind,
            "block": list(self.block),
            "nests": [n.to_json() for n in self.nests],
            "host_loops": list(self.host_loops),
            "serial": list(self.serial),
            "block_serial": list(self.block_serial),
            "one_block_loops": self.one_block_loops,
            "source_order": self.source_order,
            "distributed": list(self.distributed),
        }


__all__ = ["BLOCKS", "FEW_COLUMNS", "FEW_ROWS", "KIND_ORDER", "LONG_ROW", "Mapping", "NestMapping",
           "SPLIT_SUMS", "block_text"]
