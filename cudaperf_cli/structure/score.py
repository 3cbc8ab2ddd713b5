"""Structural metrics and score of CUDA kernels (static side).

:func:`analyze_source` parses a CUDA file once, walks every ``__global__`` kernel
(:mod:`.static`), combines what it finds with the ptxas resource report and the
occupancy calculator (:mod:`.occupancy`) and the GPU's roofline (:mod:`.gpus`), and
returns a :class:`~.model.StructureReport`: per kernel eight metrics, each with a value
and unit, a score in [0, 1], a one-line reason, a hint and its source, and a weighted
total.  Formulas and defaults are documented in ``docs/structural-score.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping, Sequence

from ..core import CudaperfError
from .gpus import GPUSpec, arch_limits, gpu_spec, normalize_arch
from .model import (
    METRIC_KEYS,
    METRIC_NAMES,
    HostSync,
    KernelReport,
    LaunchConfig,
    Metric,
    NotAnalysed,
    StructureReport,
)
from .occupancy import OccupancyResult, occupancy
from .static import (
    DEFAULT_TRIP,
    Access,
    KernelFacts,
    Launch,
    SourceFile,
    analyze_host,
    analyze_kernel,
    idle_fraction,
)


@dataclass(frozen=True)
class ScoreWeights:
    """Weight of each metric in a kernel's total (renormalised over the known metrics).

    Defaults and why (see ``docs/structural-score.md``):

    * ``coalescing`` 0.25 -- ported C loops are mostly memory-bound; wasted DRAM sectors
      are the most common and most costly structural defect.
    * ``divergence`` 0.15 -- lanes idled by thread-dependent branches waste issue slots
      directly (up to 32x).
    * ``occupancy`` 0.12 -- latency hiding; matters less once ~50% is reached (the score
      saturates), so a moderate weight.
    * ``synchronization`` 0.10 -- barrier hazards are correctness bugs; barriers and
      atomics in loops and host syncs between launches serialise work.
    * ``shared_memory`` 0.10 -- bank conflicts multiply shared-memory time.
    * ``load_balance`` 0.10 -- tail waves and idle threads; needs the launch.
    * ``register_pressure`` 0.10 -- spills go to local memory (DRAM-backed).
    * ``arithmetic_intensity`` 0.08 -- partly a property of the algorithm, and a coarse
      static estimate: low weight; it still rewards reuse (tiling).
    """

    coalescing: float = 0.25
    occupancy: float = 0.12
    arithmetic_intensity: float = 0.08
    synchronization: float = 0.10
    divergence: float = 0.15
    shared_memory: float = 0.10
    load_balance: float = 0.10
    register_pressure: float = 0.10

    def get(self, key: str) -> float:
        """Weight of metric ``key``."""
        return float(getattr(self, key))

    @classmethod
    def from_mapping(cls, m: Mapping[str, float]) -> "ScoreWeights":
        """Weights from a ``{metric: weight}`` mapping (unlisted metrics keep defaults)."""
        names = {f.name for f in fields(cls)}
        bad = set(m) - names
        if bad:
            raise CudaperfError(f"unknown metric weight(s): {', '.join(sorted(bad))}")
        return cls(**{k: float(v) for k, v in m.items()})


@dataclass(frozen=True)
class ScoreParams:
    """Shapes of the per-metric penalty curves (all smooth; see the docs).

    Attributes:
        occupancy_tau: saturation constant of the occupancy score
            ``(1 - exp(-occ/tau)) / (1 - exp(-1/tau))``.
        barrier_k: barrier-density penalty ``1 / (1 + k * barriers_per_statement)``.
        hazard_k: barrier-hazard penalty ``1 / (1 + k * hazards)``.
        atomic_k: loop-atomic penalty ``1 / (1 + k * log2(1 + weighted atomics))``.
        host_sync_k: host-sync penalty ``1 / (1 + k * syncs)`` (in-loop syncs count 2).
        spill_bytes_scale: spill penalty ``1 / (1 + spill_bytes / scale)``.
        stack_bytes_scale: local-memory (non-spill stack) penalty, same form.
    """

    occupancy_tau: float = 0.3
    barrier_k: float = 1.0
    hazard_k: float = 3.0
    atomic_k: float = 0.25
    host_sync_k: float = 0.5
    spill_bytes_scale: float = 256.0
    stack_bytes_scale: float = 1024.0


DEFAULT_WEIGHTS = ScoreWeights()
DEFAULT_PARAMS = ScoreParams()


# ---------------------------------------------------------------------------------------
# Smooth penalty curves
# ---------------------------------------------------------------------------------------


def coalescing_score(sector_ratio: float) -> float:
    """``1 / (1 + log2(sectors / ideal))``: 1 at the ideal, 0.5 at 2x, 0.25 at 8x."""
    return 1.0 / (1.0 + math.log2(max(sector_ratio, 1.0)))


def bank_conflict_score(ways: float) -> float:
    """``1 / (1 + log2(wavefronts / ideal))``: 1 conflict-free, 1/6 for 32-way."""
    return 1.0 / (1.0 + math.log2(max(ways, 1.0)))


def occupancy_score(occ: float, tau: float = DEFAULT_PARAMS.occupancy_tau) -> float:
    """Saturating: 0 -> 0, 0.25 -> 0.59, 0.5 -> 0.84, 1 -> 1 (tau = 0.3)."""
    occ = min(max(occ, 0.0), 1.0)
    return (1.0 - math.exp(-occ / tau)) / (1.0 - math.exp(-1.0 / tau))


def intensity_score(ai: float, ridge: float) -> float:
    """``log2(1 + AI) / log2(1 + ridge)``, capped at 1 (compute-bound)."""
    if ai >= ridge:
        return 1.0
    return math.log2(1.0 + max(ai, 0.0)) / math.log2(1.0 + ridge)


# ---------------------------------------------------------------------------------------
# Resources (ptxas report) matching
# ---------------------------------------------------------------------------------------


def _demangled_base(res: Any) -> str:
    name = getattr(res, "demangled", None) or getattr(res, "name", "") or ""
    if name.startswith("_Z"):  # no demangler was available
        name = _demangle_simple(name)
    base = name.split("(")[0]
    # strip template arguments and namespaces
    depth = 0
    out = []
    for ch in base:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip()
    if " " in base:
        base = base.split()[-1]
    return base.split("::")[-1]


def _demangle_simple(mangled: str) -> str:
    """Name of an Itanium-mangled function (``_Z4copyPfi`` -> ``copy``); else unchanged."""
    if not mangled.startswith("_Z"):
        return mangled
    s = mangled[2:]
    if s.startswith("N"):  # nested name: take the last component
        s = s[1:]
        parts = []
        while s and s[0].isdigit():
            i = 0
            while s[i].isdigit():
                i += 1
            n = int(s[:i])
            parts.append(s[i : i + n])
            s = s[i + n :]
            if s.startswith("I"):
                break
        return parts[-1] if parts else mangled
    i = 0
    while i < len(s) and s[i].isdigit():
        i += 1
    if i == 0:
        return mangled
    n = int(s[:i])
    return s[i : i + n]


def match_resources(resources: Sequence[Any] | None, kernel: str,
                    arch: str | None = None) -> tuple[Any | None, str]:
    """The ptxas entry of ``kernel`` for ``arch`` (entries of other architectures only when
    none is for ``arch``; several template instantiations: the one with the most
    registers) and a note."""
    if not resources:
        return None, ""
    from ..build.ptxas import for_arch  # not at import: the build package pulls in nvcc's

    hits = for_arch([r for r in resources if _demangled_base(r) == kernel], arch)
    if not hits:
        return None, f"no ptxas entry for kernel '{kernel}'"
    if len(hits) > 1:
        best = max(hits, key=lambda r: getattr(r, "registers", 0) or 0)
        return (
            best,
            f"{len(hits)} instantiations in the ptxas report: the one with most registers used",
        )
    return hits[0], ""


# ---------------------------------------------------------------------------------------
# Metric builders
# ---------------------------------------------------------------------------------------


def _m(
    key: str,
    unit: str,
    static: float | None,
    score: float | None,
    w: ScoreWeights,
    *,
    status: str = "ok",
    reason: str = "",
    hint: str = "",
    source: str = "",
    details: dict | None = None,
) -> Metric:
    if score is not None:
        score = min(1.0, max(0.0, float(score)))
    return Metric(
        key=key,
        name=METRIC_NAMES[key],
        unit=unit,
        static=static,
        score=score,
        weight=w.get(key),
        status=status,
        reason=reason,
        hint=hint,
        source=source,
        details=details or {},
    )


def _fmt(x: float, nd: int = 2) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == int(x) and abs(x) < 1e9:
        return str(int(x))
    return f"{x:.{nd}f}"


def _site(a: Access) -> str:
    """An access as a reason names it: ``load A[i*n+j]``, ``atomicAdd(&bins[k], 1)`` (an
    atomic's text names its call already)."""
    return a.text if a.kind == "atomic" else f"{a.kind} {a.text}"


def metric_coalescing(f: KernelFacts, w: ScoreWeights) -> Metric:
    """Metric 1: mean 32-byte sectors per global request (loads, stores and atomics) vs the
    ideal; score 1/(1+log2 ratio)."""
    glob = [a for a in f.accesses if a.space == "global" and a.kind in ("load", "store", "atomic")]
    src = "static: tree-sitter index analysis over one representative block (32-byte sectors)"
    if not glob:
        why = "no global loads/stores found in the kernel body"
        if any("device function" in n for n in f.notes):
            why += " (accesses inside called device functions are not attributed)"
        return _m(
            "coalescing", "sectors/request", None, None, w, status="n/a", reason=why, source=src
        )
    W = sum(a.weight for a in glob)
    S = sum(a.weight * a.sectors for a in glob)
    ideal = sum(a.weight * a.ideal_sectors for a in glob)
    ratio = S / ideal if ideal else 1.0
    score = coalescing_score(ratio)
    per = [
        {
            "line": a.line,
            "access": a.text,
            "kind": a.kind,
            "array": a.array,
            "elem_bytes": a.elem_bytes,
            "stride": a.stride,
            "pattern": a.pattern,
            "sectors_per_request": round(a.sectors, 3),
            "ideal_sectors": round(a.ideal_sectors, 3),
            "loop_depth": a.depth,
            "weight": a.weight,
            "executed_in_sample": a.executed,
        }
        for a in glob
    ]
    vec = sorted({a.elem_bytes for a in glob if a.elem_bytes >= 8})
    details = {
        "ideal_sectors_per_request": ideal / W,
        "sector_ratio": ratio,
        "accesses": per,
        "vector_widths_bytes": vec,
    }
    worst = max(glob, key=lambda a: a.weight * (a.sectors - a.ideal_sectors))
    if ratio <= 1.0005:
        n = len(glob)
        reason = (
            f"all {n} global access{'es' if n > 1 else ''} coalesced: "
            f"{S / W:.1f} sectors/request = ideal"
        )
        hint = ""
    else:
        where = f"{_site(worst)} (line {worst.line})"
        if worst.pattern == "data-dependent":
            reason = (
                f"{where}: data-dependent index (gather/scatter), assumed "
                f"{worst.sectors:.0f} sectors/request vs {worst.ideal_sectors:.0f} ideal"
            )
            hint = (
                "group/sort the indices so neighbouring threads touch neighbouring "
                "elements, or stage the data through shared memory"
            )
        elif worst.pattern == "misaligned":
            reason = (
                f"{where}: unit stride but misaligned, {worst.sectors:.1f} "
                f"sectors/request vs {worst.ideal_sectors:.0f} ideal"
            )
            hint = "align each warp's first element to a 32-byte boundary"
        else:
            reason = (
                f"{where}: stride {worst.stride} elements along threadIdx.x -> "
                f"{worst.sectors:.1f} sectors/request vs {worst.ideal_sectors:.0f} ideal"
            )
            hint = (
                f"make threadIdx.x index the contiguous (last) dimension of "
                f"'{worst.array}', or stage the tile through shared memory"
            )
        reason += f"; overall {ratio:.2f}x the ideal sectors"
    return _m(
        "coalescing",
        "sectors/request",
        S / W,
        score,
        w,
        reason=reason,
        hint=hint,
        source=src,
        details=details,
    )


def metric_occupancy(
    f: KernelFacts,
    launch: LaunchConfig | None,
    res: Any,
    arch: str,
    w: ScoreWeights,
    p: ScoreParams,
) -> tuple[Metric, OccupancyResult | None]:
    """Metric 2: theoretical occupancy (occupancy calculator); returns the metric and the result."""
    src = "CUDA Occupancy Calculator (cuda_occupancy.h) with ptxas registers/shared memory"
    bt = launch.block_threads if launch is not None and launch.block is not None else None
    bsrc = launch.source if bt else ""
    if bt is None and f.launch_bounds and f.launch_bounds[0]:
        bt, bsrc = f.launch_bounds[0], "__launch_bounds__"
    if bt is None:
        return _m(
            "occupancy",
            "%",
            None,
            None,
            w,
            status="unknown",
            reason="block size unknown: no constant <<<grid, block>>> launch in the file, "
            "no --launch and no __launch_bounds__",
            hint="pass --launch GRID,BLOCK or add __launch_bounds__(BLOCK)",
            source=src,
        ), None
    regs = getattr(res, "registers", None) if res is not None else None
    smem_static = getattr(res, "shared_bytes", None) if res is not None else None
    smem_src = "ptxas"
    if smem_static is None:
        smem_static, smem_src = f.shared_static_bytes, "source declarations"
    dyn = launch.dynamic_smem if launch is not None and launch.dynamic_smem is not None else 0
    notes = []
    if f.uses_dynamic_shared and not (launch is not None and launch.dynamic_smem):
        notes.append("dynamic shared memory size unknown: counted as 0")
    occ = occupancy(arch, bt, regs, smem_static or 0, dyn)
    lim = arch_limits(arch)
    details = {
        "block_threads": bt,
        "block_source": bsrc,
        "registers": regs,
        "smem_static_bytes": smem_static,
        "smem_static_source": smem_src,
        "smem_dynamic_bytes": dyn,
        "blocks_per_sm": occ.blocks_per_sm,
        "active_warps": occ.active_warps,
        "max_warps": occ.max_warps,
        "limits": occ.limits,
        "limiting": list(occ.limiting),
        "notes": list(occ.notes) + notes,
    }
    if occ.blocks_per_sm == 0:
        return _m(
            "occupancy",
            "%",
            0.0,
            0.0,
            w,
            reason="cannot launch: " + "; ".join(occ.notes),
            hint="reduce registers or shared memory per block, or the block size",
            source=src,
            details=details,
        ), occ
    score = occupancy_score(occ.occupancy, p.occupancy_tau)
    lims = ", ".join(occ.limiting)
    reason = (
        f"{occ.occupancy * 100:.0f}% theoretical ({occ.active_warps}/{occ.max_warps} "
        f"warps/SM: {occ.blocks_per_sm} blocks of {bt} threads), limited by {lims}"
    )
    status = "ok"
    if regs is None:
        reason += "; registers unknown (no ptxas report): upper bound"
        status = "estimate"
    hint = ""
    if occ.occupancy < 0.999:
        if "registers" in occ.limiting:
            hint = (
                f"reduce registers per thread ({regs} now; "
                f"__launch_bounds__({bt}, {occ.blocks_per_sm + 1}) caps them)"
            )
        elif "shared" in occ.limiting:
            hint = f"reduce shared memory per block ({occ.smem_bytes} B) or use smaller tiles"
        elif "blocks" in occ.limiting:
            need = lim.max_warps_per_sm * 32 // lim.max_blocks_per_sm
            hint = (
                f"blocks of {bt} threads hit the {lim.max_blocks_per_sm}-blocks/SM limit: "
                f"use >= {need} threads per block"
            )
        elif "warps" in occ.limiting:
            hint = (
                f"a block of {bt} threads does not divide the {lim.max_warps_per_sm * 32} "
                "threads/SM: choose a block size that does (e.g. 256)"
            )
    return _m(
        "occupancy",
        "%",
        occ.occupancy * 100.0,
        score,
        w,
        status=status,
        reason=reason,
        hint=hint,
        source=src,
        details=details,
    ), occ


def metric_intensity(f: KernelFacts, gpu: GPUSpec, w: ScoreWeights) -> Metric:
    """Metric 3: static FLOP per global byte placed under the GPU roofline."""
    src = (
        f"static estimate: FLOPs and requested global bytes per thread, loops weighted by "
        f"trip counts (unknown: {DEFAULT_TRIP}); roofline of {gpu.name} ({gpu.source})"
    )
    flops = sum(f.flops.values())
    nbytes = f.global_bytes
    if flops == 0:
        why = (
            "no floating-point operations: data movement only, bounded by DRAM bandwidth"
            if nbytes
            else "no floating-point work and no global traffic found"
        )
        return _m(
            "arithmetic_intensity",
            "FLOP/B",
            0.0 if nbytes else None,
            None,
            w,
            status="n/a",
            reason=why,
            source=src,
            details={"global_bytes_per_thread": nbytes},
        )
    if not nbytes:  # FLOPs but no global access recognised (e.g. through vector types)
        return _m(
            "arithmetic_intensity",
            "FLOP/B",
            None,
            None,
            w,
            status="n/a",
            reason="floating-point work but no global access recognised statically (loads "
            "through vector types or casts are not counted): intensity unknown",
            source=src,
            details={"flops_per_thread": dict(f.flops), "global_bytes_per_thread": 0},
        )
    dtype = max(f.flops.items(), key=lambda kv: kv[1])[0] if f.flops else "fp32"
    peak = gpu.peak_flops_for(dtype)
    bw = gpu.dram_bandwidth
    ridge = peak / bw
    ai = flops / nbytes
    attainable = min(peak, ai * bw)
    score = intensity_score(ai, ridge)
    details = {
        "flops_per_thread": dict(f.flops),
        "global_bytes_per_thread": nbytes,
        "sector_bytes_per_thread": f.global_sector_bytes,
        "ai_dram_sectors": flops / f.global_sector_bytes if f.global_sector_bytes else None,
        "dtype": dtype,
        "ridge_flop_per_byte": ridge,
        "peak_flops": peak,
        "dram_bandwidth": bw,
        "attainable_flops": attainable,
        "fp64_promotion_lines": list(f.fp64_promotions),
    }
    if ai >= ridge:
        reason = (
            f"{_fmt(ai)} FLOP/B ({dtype}) >= ridge {ridge:.1f} FLOP/B on {gpu.name}: "
            f"compute-bound (peak {peak / 1e12:.1f} TFLOP/s)"
        )
        hint = ""
    else:
        reason = (
            f"{ai:.2f} FLOP/B ({dtype}) < ridge {ridge:.1f} FLOP/B on {gpu.name}: "
            f"memory-bound, at most {attainable / 1e12:.2f} of {peak / 1e12:.1f} TFLOP/s"
        )
        reused = [
            a for a in f.accesses if a.space == "global" and a.kind == "load" and a.depth >= 1
        ]
        if reused and f.shared_arrays:
            hint = (
                "raise reuse per loaded byte: larger shared-memory tiles and register "
                "blocking (several outputs per thread)"
            )
        elif reused:
            hint = (
                "global loads inside loops re-read data: stage tiles in shared memory or "
                "registers so each byte feeds more FLOPs"
            )
        else:
            hint = (
                "streaming kernel (each element used once): fuse it with neighbouring "
                "operations or use narrower types to raise FLOP per byte"
            )
    if f.fp64_promotions and dtype == "fp64":
        lines = ", ".join(map(str, f.fp64_promotions[:5]))
        hint = f"double literals promote float math to fp64 (line {lines}): write them as 2.0f" + (
            "; " + hint if hint else ""
        )
    return _m(
        "arithmetic_intensity",
        "FLOP/B",
        ai if math.isfinite(ai) else None,
        score,
        w,
        status="estimate",
        reason=reason,
        hint=hint,
        source=src,
        details=details,
    )


def metric_sync(
    f: KernelFacts, host_syncs: list[HostSync], w: ScoreWeights, p: ScoreParams
) -> Metric:
    """Metric 4: barrier hazards and density, global atomics in loops, host syncs."""
    src = "static: barrier placement (thread-dependent guards), atomics, host code"
    bars = [b for b in f.barriers if b.scope in ("block", "grid")]
    warp_syncs = [b for b in f.barriers if b.scope == "warp"]
    hazards = [b for b in bars if b.hazard]
    hz = sum(b.severity for b in hazards)
    f_hazard = 1.0 / (1.0 + p.hazard_k * hz)
    bw = sum(b.weight for b in bars)
    density = bw / f.simt_weight if f.simt_weight else 0.0
    f_density = 1.0 / (1.0 + p.barrier_k * density)
    loop_atomics = [a for a in f.atomics if a.space == "global" and a.depth >= 1]
    aw = sum(a.weight for a in loop_atomics)
    f_atomic = 1.0 / (1.0 + p.atomic_k * math.log2(1.0 + aw))
    mine = [s for s in host_syncs if s.after == f.name]
    n_sync = sum(2 if s.in_loop else 1 for s in mine)
    f_host = 1.0 / (1.0 + p.host_sync_k * n_sync)
    score = f_hazard * f_density * f_atomic * f_host
    in_loop = [b for b in bars if b.depth >= 1]
    details = {
        "barriers": [
            {
                "line": b.line,
                "call": b.call,
                "scope": b.scope,
                "loop_depth": b.depth,
                "hazard": b.hazard,
            }
            for b in f.barriers
        ],
        "barriers_in_loops": len(in_loop),
        "barrier_density": density,
        "atomics": [
            {
                "line": a.line,
                "call": a.call,
                "space": a.space,
                "loop_depth": a.depth,
                "distinct_addresses_per_warp": a.distinct_addresses,
            }
            for a in f.atomics
        ],
        "host_syncs": [
            {"line": s.line, "call": s.call, "before": s.before, "in_loop": s.in_loop} for s in mine
        ],
        "factors": {
            "hazard": f_hazard,
            "barrier_density": f_density,
            "atomics": f_atomic,
            "host_syncs": f_host,
        },
    }
    parts = []
    hint = ""
    if hazards:
        h = max(hazards, key=lambda b: b.severity)
        parts.append(f"hazard: {h.hazard} (line {h.line})")
        hint = (
            "move the barrier out of the thread-dependent branch so every thread of the "
            "block reaches it (guard only the work, not the barrier)"
        )
    if loop_atomics:
        a = max(loop_atomics, key=lambda a: a.weight)
        parts.append(f"global {a.call} inside a loop (line {a.line})")
        hint = hint or (
            "accumulate in registers/shared memory and issue one atomic per "
            "block (or warp) after the loop"
        )
    if mine:
        s = mine[0]
        parts.append(
            f"host {s.call} between launches of {s.after} and {s.before} (line {s.line})"
            + (" in a loop" if s.in_loop else "")
        )
        hint = (
            hint
            or "drop host synchronisations between dependent launches: kernels on one "
            "stream already run in order"
        )
    if density > 0.05:
        parts.append(
            f"{len(bars)} barrier(s), {len(in_loop)} in loops "
            f"({density:.2f} per weighted statement)"
        )
        hint = (
            hint
            or "fewer barriers per iteration: larger tiles per barrier, warp shuffles for "
            "the last steps of reductions"
        )
    if not parts:
        n = len(bars)
        reason = (
            (f"{n} block barrier(s), none hazardous" if n else "no block barriers")
            + (f", {len(warp_syncs)} warp sync(s)" if warp_syncs else "")
            + (", no atomics in loops, no host syncs between launches")
        )
    else:
        reason = "; ".join(parts)
    return _m(
        "synchronization",
        "barriers",
        float(len(bars)),
        score,
        w,
        reason=reason,
        hint=hint,
        source=src,
        details=details,
    )


def metric_divergence(f: KernelFacts, w: ScoreWeights) -> Metric:
    """Metric 5: estimated SIMT efficiency (active lanes / valid lanes)."""
    src = (
        "static: branch conditions evaluated per lane over one representative block "
        "(warps of 32); data-dependent conditions assumed partly divergent"
    )
    if not f.simt_weight:
        return _m(
            "divergence",
            "% active lanes",
            None,
            None,
            w,
            status="n/a",
            reason="no statements found",
            source=src,
        )
    eff = f.simt_efficiency
    branches = [
        {
            "line": b.line,
            "stmt": b.stmt,
            "cond": b.cond,
            "kind": b.kind,
            "split_fraction": b.split_fraction,
            "loop_depth": b.depth,
            "loss": b.loss,
        }
        for b in f.branches
    ]
    bad = [b for b in f.branches if b.kind in ("divergent", "data-dependent")]
    tails = [b for b in f.branches if b.kind == "tail-only"]
    hint = ""
    if eff >= 0.995 or not bad:
        reason = f"{eff * 100:.0f}% active lanes: no divergent branches"
        if tails:
            reason += f" ({len(tails)} bounds check(s) only split the last block: tail-only)"
        wu = [b for b in f.branches if b.kind == "warp-uniform"]
        if wu:
            reason += f"; {len(wu)} thread-dependent branch(es) are warp-uniform"
    else:
        b = max(bad, key=lambda b: (b.loss, b.split_fraction))
        if b.kind == "data-dependent":
            reason = (
                f"{b.stmt} ({b.cond}) (line {b.line}) depends on loaded data: assumed "
                f"divergent; ~{(1 - eff) * 100:.0f}% of lane-time idle"
            )
            hint = "sort or bin the work so that the threads of a warp take the same path"
        else:
            reason = (
                f"{b.stmt} ({b.cond}) (line {b.line}) splits {b.split_fraction * 100:.0f}% "
                f"of warps: ~{(1 - eff) * 100:.0f}% of lane-time idle"
            )
            hint = (
                "make the condition uniform per warp (branch on the warp index, "
                "threadIdx.x / 32) or replace the branch by arithmetic/select"
            )
    return _m(
        "divergence",
        "% active lanes",
        eff * 100.0,
        eff,
        w,
        status="estimate",
        reason=reason,
        hint=hint,
        source=src,
        details={"branches": branches},
    )


def metric_shared(f: KernelFacts, w: ScoreWeights) -> Metric:
    """Metric 6: shared-memory bank conflicts (wavefronts vs ideal) and use."""
    src = "static: shared-memory word addresses per warp over 32 banks of 4 bytes"
    sh = [a for a in f.accesses if a.space == "shared"]
    if not sh:
        if f.shared_arrays:
            return _m(
                "shared_memory",
                "way",
                None,
                None,
                w,
                status="n/a",
                reason="shared memory declared but no access to it found",
                source=src,
            )
        return _m(
            "shared_memory",
            "way",
            None,
            None,
            w,
            status="n/a",
            reason="no shared memory used",
            source=src,
        )
    W = sum(a.weight * a.ideal_wavefronts for a in sh)
    V = sum(a.weight * a.wavefronts for a in sh)
    ways = V / W if W else 1.0
    f_conf = bank_conflict_score(ways)
    reads = sum(a.weight for a in sh if a.kind in ("load", "atomic"))  # an atomic reads and writes
    writes = sum(a.weight for a in sh if a.kind in ("store", "atomic"))
    reuse = reads / writes if writes else math.inf
    # data written to shared memory and never (or rarely) read is wasted; reductions read
    # about once per write, which is fine: full credit from 0.5 reads per write
    f_reuse = min(1.0, 0.5 + reuse) if writes else 1.0
    score = f_conf * f_reuse
    per = [
        {
            "line": a.line,
            "access": a.text,
            "kind": a.kind,
            "array": a.array,
            "elem_bytes": a.elem_bytes,
            "stride": a.stride,
            "wavefronts": round(a.wavefronts, 3),
            "ideal_wavefronts": round(a.ideal_wavefronts, 3),
            "conflict_ways": round(a.conflict_ways, 3),
            "loop_depth": a.depth,
        }
        for a in sh
    ]
    details = {
        "accesses": per,
        "reads_per_write": reuse if math.isfinite(reuse) else None,
        "arrays": [
            {"name": s.name, "ctype": s.ctype, "dims": list(s.dims), "extern": s.extern}
            for s in f.shared_arrays
        ],
    }
    worst = max(sh, key=lambda a: a.weight * (a.wavefronts - a.ideal_wavefronts))
    hint = ""
    status = "ok"
    if ways > 1.0005 and worst.pattern == "data-dependent":
        # the banks depend on the data (a histogram's bins): the worst case is assumed
        status = "estimate"
        reason = (
            f"{_site(worst)} (line {worst.line}): data-dependent index, up to "
            f"{worst.conflict_ways:.0f}-way bank conflict assumed (the data decides); "
            f"overall {ways:.2f}x"
        )
        hint = ("spread the threads over copies of the array (one per warp) so the data "
                "cannot pile them on one bank" if worst.kind == "atomic" else
                "stage the data so neighbouring threads read neighbouring elements")
    elif ways > 1.0005:
        reason = (
            f"{_site(worst)} (line {worst.line}): "
            f"{worst.conflict_ways:.0f}-way bank conflict ({worst.wavefronts:.0f} "
            f"wavefronts vs {worst.ideal_wavefronts:.0f}); overall {ways:.2f}x"
        )
        hint = (
            f"pad the inner dimension of '{worst.array}' by one element (e.g. [32][33]) "
            "or swizzle the index"
        )
    else:
        reason = "bank-conflict free"
        if math.isfinite(reuse):
            reason += f"; each element read {reuse:.1f}x per write"
    if f_reuse < 1.0:
        reason += f"; shared data read only {reuse:.2f}x per write (little use)"
        hint = hint or "stage through shared memory only data that several threads reuse"
    return _m(
        "shared_memory",
        "way",
        ways,
        score,
        w,
        status=status,
        reason=reason,
        hint=hint,
        source=src,
        details=details,
    )


def metric_load_balance(
    f: KernelFacts,
    launch: LaunchConfig | None,
    occ: OccupancyResult | None,
    gpu: GPUSpec,
    idle: tuple[float | None, str] | None,
    regs_known: bool,
    w: ScoreWeights,
) -> Metric:
    """Metric 7: waves, tail-wave efficiency and bounds-check idle threads."""
    src = f"launch configuration x occupancy x {gpu.sm_count} SMs of {gpu.name}"
    if launch is None or launch.grid is None or launch.block is None:
        what = (
            "grid size"
            if launch is not None and launch.block is not None
            else "launch configuration"
        )
        return _m(
            "load_balance",
            "waves",
            None,
            None,
            w,
            status="unknown",
            reason=f"{what} unknown: no constant <<<grid, block>>> in the file",
            hint="pass --launch GRID,BLOCK",
            source=src,
        )
    if occ is None or occ.blocks_per_sm == 0:
        return _m(
            "load_balance",
            "waves",
            None,
            None,
            w,
            status="unknown",
            reason="blocks per SM unknown (the block cannot launch)",
            source=src,
        )
    blocks = launch.grid_blocks or 0
    slots = gpu.sm_count * occ.blocks_per_sm
    waves = blocks / slots
    full = math.ceil(waves) if waves > 0 else 1
    eff = waves / full
    idle_frac, idle_note = idle if idle is not None else (None, "")
    score = eff * (1.0 - (idle_frac or 0.0))
    details = {
        "grid_blocks": blocks,
        "blocks_per_sm": occ.blocks_per_sm,
        "sms": gpu.sm_count,
        "slots_per_wave": slots,
        "waves": waves,
        "wave_efficiency": eff,
        "idle_thread_fraction": idle_frac,
        "idle_note": idle_note,
    }
    if waves < 1:
        reason = (
            f"{blocks} blocks fill {waves * 100:.0f}% of one wave "
            f"({gpu.sm_count} SMs x {occ.blocks_per_sm} blocks/SM = {slots})"
        )
        hint = f"launch at least {slots} blocks (smaller blocks or more work items per grid)"
    elif eff < 0.9995:
        last = waves - math.floor(waves)
        reason = (
            f"{blocks} blocks = {waves:.2f} waves of {slots} "
            f"({gpu.sm_count} SMs x {occ.blocks_per_sm} blocks/SM): last wave "
            f"{last * 100:.0f}% full, {eff * 100:.0f}% wave efficiency"
        )
        hint = (
            f"size the grid to a multiple of {slots} blocks "
            f"(or a grid-stride loop over {slots} blocks)"
        )
    else:
        reason = f"{blocks} blocks = {waves:.0f} full wave(s) of {slots}"
        hint = ""
    if idle_frac:
        reason += f"; {idle_frac * 100:.1f}% of launched threads idle (bounds check)"
    elif idle_frac is None and idle_note:
        reason += "; idle threads unknown (" + idle_note + ")"
    status = "ok" if regs_known else "estimate"
    if not regs_known:
        reason += "; blocks/SM from an occupancy upper bound (registers unknown)"
    return _m(
        "load_balance",
        "waves",
        waves,
        score,
        w,
        status=status,
        reason=reason,
        hint=hint,
        source=src,
        details=details,
    )


def metric_registers(res: Any, note: str, w: ScoreWeights, p: ScoreParams) -> Metric:
    """Metric 8: registers, spills and local memory from the ptxas report."""
    src = "ptxas resource report (-Xptxas -v)"
    if res is None:
        why = note or "no ptxas report (static only: --no-build, or nvcc unavailable)"
        return _m(
            "register_pressure",
            "registers/thread",
            None,
            None,
            w,
            status="unknown",
            reason=why,
            hint="build with nvcc to get the ptxas report",
            source=src,
        )
    regs = int(getattr(res, "registers", 0) or 0)
    st = int(getattr(res, "spill_store_bytes", 0) or 0)
    ld = int(getattr(res, "spill_load_bytes", 0) or 0)
    stack = int(getattr(res, "stack_frame_bytes", 0) or 0)
    spill = st + ld
    local = max(0, stack - st)
    f_spill = 1.0 / (1.0 + spill / p.spill_bytes_scale)
    f_stack = 1.0 / (1.0 + local / p.stack_bytes_scale)
    score = f_spill * f_stack
    reason = (
        f"{regs} registers/thread, {st} B spill stores, {ld} B spill loads, {stack} B stack frame"
    )
    hint = ""
    if spill:
        hint = (
            "reduce live values (smaller per-thread tiles, fewer unrolled accumulators) or "
            "relax __launch_bounds__ so ptxas need not spill"
        )
    elif local:
        hint = (
            "a per-thread array lives in local memory (dynamic indexing): index it with "
            "compile-time constants (full unroll) or use shared memory"
        )
    details = {
        "registers": regs,
        "spill_store_bytes": st,
        "spill_load_bytes": ld,
        "stack_frame_bytes": stack,
        "arch": getattr(res, "arch", None),
        "ptxas_name": getattr(res, "name", None),
    }
    if note:
        details["note"] = note
    return _m(
        "register_pressure",
        "registers/thread",
        float(regs),
        score,
        w,
        reason=reason,
        hint=hint,
        source=src,
        details=details,
    )


def kernel_total(metrics: Sequence[Metric]) -> tuple[float | None, float]:
    """``(score, coverage)`` of a kernel: the weighted mean of the scored metrics
    (``None`` when none is scored) and the scored weight / the applicable (not ``n/a``)
    weight.  Used for the static total and again after measurements replace scores.

    A barrier hazard (``__syncthreads`` where only some threads of the block arrive:
    undefined behaviour, a deadlock on pre-Volta GPUs) caps the total at the
    synchronization score: a kernel that may hang or compute garbage must not rank near its
    fixed twin because its other seven metrics are fine (the weighted mean alone gave 0.82
    against 0.89, tests/data/kernels/barrier_in_branch.cu).  A block that cannot launch
    (occupancy: too many registers or too much shared memory per block) totals 0."""
    scored = [m for m in metrics if m.score is not None]
    applicable = [m for m in metrics if m.status != "n/a"]
    wsum = sum(m.weight for m in scored)
    total = sum(m.weight * m.score for m in scored) / wsum if wsum else None  # type: ignore[operator]
    for m in scored:
        if total is not None and m.barrier_hazard:
            total = min(total, m.score)  # type: ignore[type-var]
        if total is not None and m.key == "occupancy" and m.reason.startswith("cannot launch"):
            total = 0.0  # a block that cannot launch computes nothing
    wall = sum(m.weight for m in applicable)
    return total, (wsum / wall if wall else 0.0)


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def _host_launch(host_launches: Iterable[Launch], name: str) -> Launch | None:
    for launch in host_launches:
        if launch.kernel == name:
            return launch
    return None


def analyze_source(
    source: str,
    *,
    arch: str = "sm_90",
    launch: LaunchConfig | None = None,
    resources: list | None = None,
    gpu: str | GPUSpec = "H200",
    sizes: Mapping[str, int] | None = None,
    weights: ScoreWeights | None = None,
    params: ScoreParams | None = None,
    source_name: str = "<source>",
) -> StructureReport:
    """Structural analysis of a CUDA source file (static: no GPU needed).

    Args:
        source: the CUDA source text.
        arch: compute capability for occupancy (``sm_80``, ``sm_86``, ``sm_89``, ``sm_90``).
        launch: launch configuration for every kernel (``--launch``); default: the
            constant ``<<< >>>`` launch found in the host code, else unknown.
        resources: ptxas entries (``cudaperf_cli.build`` ``KernelResources``: ``name``,
            ``demangled``, ``registers``, ``shared_bytes``, ``spill_*_bytes``,
            ``stack_frame_bytes``); ``None`` = registers unknown.
        gpu: GPU product for the roofline and waves (``H200``, ``H100``, ``A100``,
            ``L40S``, ``RTX4090``) or a :class:`~.gpus.GPUSpec`.
        sizes: problem sizes (``{"n": 1024}``) replacing representative values.
        weights: metric weights (default :class:`ScoreWeights`).
        params: penalty-curve parameters (default :class:`ScoreParams`).
        source_name: file name for the report.

    Returns:
        a :class:`~.model.StructureReport`.
    """
    w = weights or DEFAULT_WEIGHTS
    p = params or DEFAULT_PARAMS
    arch_n = normalize_arch(arch)
    arch_limits(arch_n)  # validates
    spec = gpu_spec(gpu)
    report = StructureReport(source_name=source_name, arch=arch_n, gpu=spec.name)
    if spec.arch != arch_n:
        report.notes.append(
            f"--arch {arch_n} differs from the {spec.name}'s {spec.arch}: "
            f"occupancy uses {arch_n}, waves use {spec.name}'s SM count"
        )
    sf = SourceFile(source, sizes)
    if sf.errors:
        report.notes.append(
            "syntax not understood by the parser outside kernels at line(s) "
            + ", ".join(map(str, sorted(set(sf.errors))[:10]))
        )
    try:
        host = analyze_host(sf)
    except Exception as e:  # pragma: no cover - defensive
        host = None
        report.notes.append(f"host code not analysed: {type(e).__name__}: {e}")
    if host is not None:
        for line, call, after, before, in_loop in host.syncs:
            report.host_syncs.append(HostSync(line, call, after, before, in_loop))
    kernels = sf.kernels
    for name, line, why in sf.unparsed_kernels:
        report.not_analysed.append(NotAnalysed(name, line, why))
    if not kernels and not sf.unparsed_kernels:
        report.notes.append("no __global__ kernel definition found")
    defined = {k.name for k in kernels}
    if host is not None:
        for hl in host.launches:
            if hl.kernel not in defined:
                report.notes.append(
                    f"line {hl.line}: launch of '{hl.kernel}', not defined in this file"
                )
    seen: set[str] = set()
    for fn in kernels:
        if fn.name in seen:
            report.notes.append(
                f"kernel '{fn.name}' defined more than once (line {fn.line}): "
                "first definition analysed"
            )
            report.not_analysed.append(
                NotAnalysed(fn.name, fn.line, "duplicate definition (overload/specialisation)")
            )
            continue
        seen.add(fn.name)
        try:
            report.kernels.append(
                _analyze_one(sf, fn, host, launch, resources, arch_n, spec, w, p, report.host_syncs)
            )
        except CudaperfError:
            raise
        except Exception as e:
            report.not_analysed.append(
                NotAnalysed(fn.name, fn.line, f"internal analysis error: {type(e).__name__}: {e}")
            )
    return report


def _analyze_one(
    sf: SourceFile,
    fn,
    host,
    launch: LaunchConfig | None,
    resources,
    arch: str,
    gpu: GPUSpec,
    w: ScoreWeights,
    p: ScoreParams,
    host_syncs: list[HostSync],
) -> KernelReport:
    hl = _host_launch(host.launches, fn.name) if host is not None else None
    notes: list[str] = []
    targs: tuple = hl.template_args if hl is not None else ()
    if not targs and fn.template_params:
        targs = sf.instantiation_args(fn.name)
        if targs:
            notes.append(
                "template arguments from the explicit instantiation: "
                + ", ".join(f"{n}={v}" for n, v in zip(fn.template_params, targs))
            )
    if launch is None and hl is not None and (hl.grid is not None or hl.block is not None):
        launch_k: LaunchConfig | None = LaunchConfig(hl.grid, hl.block, hl.smem, "host code")
        if hl.grid is None:
            notes.append(f"grid '{hl.grid_text}' (line {hl.line}) is not a compile-time constant")
        if hl.block is None:
            notes.append(f"block '{hl.block_text}' (line {hl.line}) is not a compile-time constant")
    elif launch is None and hl is not None:
        launch_k = None
        notes.append(
            f"launch at line {hl.line} (<<<{hl.grid_text}, {hl.block_text}>>>) "
            "is not a compile-time constant"
        )
    else:
        launch_k = launch
    if launch_k is not None and launch_k.block is not None:
        lim = arch_limits(arch)
        if launch_k.block_threads > lim.max_threads_per_block:  # type: ignore[operator]
            notes.append(
                f"block of {launch_k.block_threads} threads exceeds "
                f"{lim.max_threads_per_block}: the launch fails"
            )
    block = launch_k.block if launch_k is not None else None
    grid = launch_k.grid if launch_k is not None else None
    if block is not None and block[0] * block[1] * block[2] > 1024:
        block_eval = None
    else:
        block_eval = block
    pvals: dict[str, int | float] = {}
    if hl is not None and hl.args:
        for prm, v in zip(fn.params, hl.args):
            if v is not None and not prm.pointer and prm.name not in sf.sizes:
                pvals[prm.name] = v
        if pvals:
            notes.append(
                f"arguments of the launch at line {hl.line}: "
                + ", ".join(f"{k}={v}" for k, v in pvals.items())
            )
    facts = analyze_kernel(
        sf, fn, block=block_eval, grid=grid, template_args=targs, param_values=pvals
    )
    notes.extend(facts.notes)
    if facts.error_lines:
        notes.append(
            "parser could not read line(s) "
            + ", ".join(map(str, facts.error_lines[:8]))
            + ": metrics may miss code there"
        )
    res, rnote = match_resources(resources, fn.name, arch)
    if rnote and resources:
        notes.append(rnote)
    metrics: list[Metric] = []
    metrics.append(metric_coalescing(facts, w))
    m_occ, occ = metric_occupancy(facts, launch_k, res, arch, w, p)
    metrics.append(m_occ)
    metrics.append(metric_intensity(facts, gpu, w))
    metrics.append(metric_sync(facts, host_syncs, w, p))
    metrics.append(metric_divergence(facts, w))
    metrics.append(metric_shared(facts, w))
    idle = None
    if launch_k is not None and launch_k.grid is not None and block_eval is not None:
        try:
            idle = idle_fraction(sf, fn, block_eval, launch_k.grid, targs, pvals)
        except Exception as e:  # pragma: no cover - defensive
            idle = (None, f"not computed: {type(e).__name__}")
    metrics.append(metric_load_balance(facts, launch_k, occ, gpu, idle, res is not None, w))
    metrics.append(metric_registers(res, rnote if resources else "", w, p))
    order = {k: i for i, k in enumerate(METRIC_KEYS)}
    metrics.sort(key=lambda m: order[m.key])
    total, coverage = kernel_total(metrics)
    return KernelReport(
        name=fn.name,
        line=fn.line,
        launch=launch_k,
        metrics=metrics,
        score=total,
        coverage=coverage,
        notes=notes,
    )


__all__ = [
    "DEFAULT_PARAMS",
    "DEFAULT_WEIGHTS",
    "ScoreParams",
    "ScoreWeights",
    "analyze_source",
    "bank_conflict_score",
    "coalescing_score",
    "intensity_score",
    "kernel_total",
    "match_resources",
    "occupancy_score",
]
