"""The model-free built-in policy: dependence analysis + fixed loop-to-grid mappings.

``BuiltinPolicy().plan(problem)`` lists every applicable :class:`Mapping`, best first;
``propose(problem, turn)`` generates the CUDA source of the ``turn``-th one.  See
``docs/builtin-policy.md`` for what is accepted and refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cudaperf_cli.core import CProblem, normalize_ctype
from cudaperf_cli.policies.base import PolicyRefusal, Proposal
from cudaperf_cli.policies.builtin.analysis import FLOAT_TYPES, Analysis, Serial, analyze
from cudaperf_cli.policies.builtin.codegen import StmtWriter, generate
from cudaperf_cli.policies.builtin.ir import For, Printer
from cudaperf_cli.policies.builtin.mapping import (
    BLOCKS,
    KIND_ORDER,
    SPLIT_SUMS,
    Mapping,
    NestMapping,
)
from cudaperf_cli.policies.builtin.tiling import TILES


def _serial_text(g: Serial) -> str:
    parts = []
    w = StmtWriter(Printer())
    for s in g.stmts:
        if isinstance(s, For):
            parts.append(f"loop {s.var} (line {s.line})")
        else:
            parts.append(" ".join(" ".join(w.stmt(s, "")).split()).rstrip(";"))
    if g.uploads:
        parts.append(f"{', '.join(sorted(g.uploads))} to the device")
    text = "; ".join(parts)
    return text if len(text) <= 70 else text[:67] + "..."


def build_mappings(an: Analysis) -> list[Mapping]:
    """All function-level mappings for a scheduled function, best first.

    Entry 0 gives every site its preferred mapping; entry 1 the same without the sums split
    over a block (``block_reduce``, ``col_reduce``), when that differs.  Then, for each
    mapping kind in order of preference (a kind ranks by the best position it has in any site's list), every
    site that supports the kind uses it and the others keep their preferred one.  Block
    shape variants follow all default-shape entries: the block shapes of the kinds of the
    deepest nests change together (:func:`_varied_kinds`).
    """
    defaults, variants = _mapping_parts(an)
    return _dedupe(defaults + variants)


def _mapping_parts(an: Analysis) -> tuple[list[Mapping], list[Mapping]]:
    """(default-shape entries, block-shape variants) of :func:`build_mappings`."""
    sites = an.sites
    host = an.host_loop_names()
    serial = tuple(_serial_text(g) for g in an.serials if g.threads == 1)
    block_serial = tuple(_serial_text(g) for g in an.serials if g.threads > 1)
    distributed = tuple(f"loop {var} into {n}" for var, _, n in an.distributed)

    def make(kind: str, block: tuple[int, ...], nests: list[NestMapping]) -> Mapping:
        return Mapping(kind, block, tuple(nests), host, serial, an.source_order, distributed,
                       block_serial, an.one_block_loops)

    if not sites:  # one-block kernels only (trisolv), or their source-order fallback
        threads = max(g.threads for g in an.serials)
        return [make("one_block" if threads > 1 else "one_thread", (threads,), [])], []

    best = [s.options[0] for s in sites]
    out: list[Mapping] = [make(best[0].kind, best[0].block, best)]
    # second, every sum a group of threads adds (block_reduce, col_reduce) kept in one warp
    # or one thread instead: the preferred entry before those kinds existed
    whole = [next((o for o in s.options if o.kind not in _GROUP_SUMS), s.options[0])
             for s in sites]
    out.append(make(whole[0].kind, whole[0].block, whole))
    rank: dict[str, tuple[int, int]] = {}
    for s in sites:
        for pos, o in enumerate(s.options):
            key = (pos, KIND_ORDER.index(o.kind))
            rank[o.kind] = min(rank.get(o.kind, key), key)
    for kind in sorted(rank, key=lambda k: rank[k]):
        nests = [next((o for o in s.options if o.kind == kind), s.options[0]) for s in sites]
        out.append(make(kind, BLOCKS[kind][0], nests))
    defaults = _dedupe(out)
    variants: list[Mapping] = []
    for m in defaults:
        # the block shapes of the deepest nests' kinds change together (atax: the block per
        # row and the column tiles, not the zeroing loops before them)
        kinds = _varied_kinds(m)
        for v in range(1, max(len(BLOCKS[k]) for k in kinds)):
            nests = [n.with_block(BLOCKS[n.kind][v])
                     if n.kind in kinds and v < len(BLOCKS[n.kind]) else n for n in m.nests]
            block = next((n.block for n in nests if n.kind == m.kind), m.block)
            variants.append(make(m.kind, block, nests))
    # register-tiled products (tiling.py): the first tile shape leads the plan, the others
    # lead the variants
    base = next((m for m in defaults if any(n.kind == "grid2d" and sites[n.site].tileable
                                            for n in m.nests)), None)
    if base is not None:
        tiled = [make("grid2d", block, [replace(n, block=block, tile=tile,
                                                staged=staged and sites[n.site].stageable)
                                        if n.kind == "grid2d" and sites[n.site].tileable else n
                                        for n in base.nests])
                 for block, tile, staged in TILES]
        # a staged shape where nothing can be staged (a triangle) is not a register-only
        # entry of its own: the register-only shapes come in their own order
        tiled = _dedupe([m for m, (_, _, staged) in zip(tiled, TILES)
                         if not staged or any(n.staged for n in m.nests)])
        defaults = tiled[:1] + defaults
        variants = tiled[1:] + variants
    return defaults, variants


#: Kinds whose sum is split over a group of threads larger than a warp.
_GROUP_SUMS = ("block_reduce", "col_reduce")


def _varied_kinds(m: Mapping) -> list[str]:
    """The kinds of ``m``'s deepest nests (loops mapped plus loops sequential in a thread),
    in program order (``m`` has a nest: a function without sites has no variants)."""
    depth = max(len(n.roles) + len(n.sequential) for n in m.nests)
    out: list[str] = []
    for n in m.nests:
        if len(n.roles) + len(n.sequential) == depth and n.kind not in out:
            out.append(n.kind)
    return out


def _splits_a_float_sum(an: Analysis, m: Mapping) -> bool:
    """``m`` adds a floating-point sum in parallel (``grid_reduce``, ``warp_reduce``,
    ``block_reduce``, ``col_reduce``, a one-block kernel)."""
    if any(g.float_sum for g in an.serials):
        return True
    for n in m.nests:
        site = an.sites[n.site]
        if n.kind == "grid_reduce" and site.reduction is not None:
            if normalize_ctype(site.reduction.ctype) in FLOAT_TYPES:
                return True
        elif n.kind in SPLIT_SUMS:
            return True  # its accumulator's type is checked by the source-order analysis
    return False


def _dedupe(ms: list[Mapping]) -> list[Mapping]:
    seen: set[Any] = set()
    out = []
    for m in ms:
        if m.nests not in seen:
            seen.add(m.nests)
            out.append(m)
    return out


class BuiltinPolicy:
    """Model-free policy: ports loop nests with a conservative dependence test and a
    fixed menu of mappings (grid2d, warp_reduce, block_reduce, col_reduce, block_per_row,
    grid1d, grid_reduce)."""

    name = "builtin"

    def __init__(self) -> None:
        self._cache: dict[Any, tuple[Analysis, list[Mapping], Analysis | None,
                                     Analysis | None]] = {}

    def _key(self, problem: CProblem) -> Any:
        return (problem.function, problem.function_source, problem.params)

    def analysis(self, problem: CProblem) -> tuple[Analysis, list[Mapping]]:
        """The scheduled function and its mappings (cached per problem).

        The plan: the default-shape entries; then, when it has more one-block kernels, the
        preferred entry of the analysis that runs sequential loops around reductions and
        short 1-D loops in one block (``analyze(one_block_loops=True)``: one launch instead
        of several per iteration); then, when some entry splits a floating-point sum across
        threads (``grid_reduce``, ``warp_reduce``, a one-block kernel), the preferred entry
        of the analysis that keeps every such sum in source order (``sums in source order:
        ...``: the fallback for a problem no reordered sum verifies on); then the
        block-shape variants.

        Raises:
            PolicyRefusal: unsupported source or nothing to parallelise.
        """
        key = self._key(problem)
        if key not in self._cache:
            try:
                an = analyze(problem)
                defaults, variants = _mapping_parts(an)
                exact: Analysis | None = None
                fallback: list[Mapping] = []
                if any(_splits_a_float_sum(an, m) for m in defaults):
                    try:
                        exact = analyze(problem, source_order=True,
                                        one_thread_ok=not an.sites)
                        fallback = _mapping_parts(exact)[0][:1]
                        same = {m.describe() for m in defaults}
                        fallback = [m for m in fallback
                                    if replace(m, source_order=False).describe() not in same]
                    except PolicyRefusal:
                        exact = None  # nothing parallel once the sums stay sequential
                # sequential loops around short 1-D loops as one-block kernels (durbin)
                blocky = analyze(problem, one_block_loops=True)
                more = len([g for g in blocky.serials if g.threads > 1])
                if more > len([g for g in an.serials if g.threads > 1]):
                    fallback = _mapping_parts(blocky)[0][:1] + fallback
                else:
                    blocky = None
            except RecursionError:
                raise PolicyRefusal(
                    f"'{problem.function}' nests expressions or statements too deeply to analyse"
                ) from None
            plan = _dedupe(defaults) + fallback + [m for m in _dedupe(variants)
                                                   if m.nests not in {d.nests for d in defaults}]
            self._cache[key] = (an, plan, exact, blocky)
        an, plan, _, _ = self._cache[key]
        return an, plan

    def _analysis_of(self, problem: CProblem, mapping: Mapping) -> Analysis:
        an, _ = self.analysis(problem)
        if mapping.source_order:
            exact = self._cache[self._key(problem)][2]
            assert exact is not None, "a source-order mapping without its analysis"
            return exact
        if mapping.one_block_loops:
            blocky = self._cache[self._key(problem)][3]
            assert blocky is not None, "a one-block-loops mapping without its analysis"
            return blocky
        return an

    def plan(self, problem: CProblem) -> list[Mapping]:
        """Every applicable mapping of ``problem``, best first.

        Raises:
            PolicyRefusal: nothing can be parallelised (the message gives each loop's
                reason) or the source is outside the supported subset.
        """
        return list(self.analysis(problem)[1])

    def source(self, problem: CProblem, mapping: Mapping) -> str:
        """The ``.cu`` source of ``problem`` with ``mapping``."""
        return generate(self._analysis_of(problem, mapping), mapping)

    def propose(self, problem: CProblem, turn: int, history: Any = None) -> Proposal:
        """The candidate of the ``turn``-th mapping of :meth:`plan` (turn 0 = the best).

        ``history`` (the earlier turns' records) is accepted and ignored: the plan is fixed.

        Raises:
            PolicyRefusal: ``"no more mappings to try"`` once ``turn`` passes the plan, or
                the reasons nothing can be parallelised.
        """
        _, plan = self.analysis(problem)
        if turn < 0 or turn >= len(plan):
            raise PolicyRefusal("no more mappings to try")
        m = plan[turn]
        return Proposal(
            source=self.source(problem, m),
            description=m.describe(),
            mapping=m.to_json(),
            policy=self.name,
        )


__all__ = ["BuiltinPolicy", "build_mappings"]
