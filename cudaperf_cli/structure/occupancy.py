"""Theoretical occupancy, as computed by the CUDA Occupancy Calculator.

This is a transcription of ``cudaOccMaxActiveBlocksPerMultiprocessor`` from
``cuda_occupancy.h`` (CUDA 13.0) for compute capabilities 7.5-9.0 with the default
shared-memory carveout preference and partitioned global caching off:

* warps limit: ``floor(max_warps_per_sm / ceil(block / 32))``;
* blocks limit: ``max_blocks_per_sm``;
* registers limit: registers are allocated per warp in units of 256
  (``ceil(regs * 32, 256)``) from each of the 4 SM sub-partitions:
  ``floor(floor(regs_per_sm / 4 / regs_per_warp) * 4 / warps_per_block)``, zero when the
  block exceeds ``regs_per_block`` (the hardware check rounds warps up to a multiple of 4)
  or ``regs > 256``;
* shared-memory limit: ``(static + dynamic + reserved_per_block)`` rounded up to the
  allocation unit (128 B on 8.x/9.x), divided into the SM's shared memory (the full
  carveout by default, else the requested carveout rounded up to a supported size);
  zero when above the per-block limit.

Occupancy = active warps per SM / max warps per SM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .gpus import ArchLimits, arch_limits

INT_MAX = 2**31 - 1


def _ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def _round_up(x: int, y: int) -> int:
    return _ceil_div(x, y) * y


@dataclass(frozen=True)
class OccupancyResult:
    """Result of :func:`occupancy`.

    Attributes:
        arch: compute capability used.
        block_threads: threads per block.
        registers: registers per thread used (``None``: unknown, limit not applied).
        smem_bytes: static + dynamic shared memory per block requested, bytes.
        blocks_per_sm: active blocks per SM.
        active_warps: active warps per SM.
        max_warps: maximum warps per SM.
        occupancy: ``active_warps / max_warps`` in [0, 1].
        limits: blocks-per-SM limit of each resource (``warps``, ``blocks``,
            ``registers``, ``shared``); ``None`` where the input was unknown.
        limiting: the resources whose limit equals ``blocks_per_sm``.
        smem_allocated_per_block: shared memory allocated per block (with reservation and
            granularity), bytes.
        regs_allocated_per_block: registers allocated per block.
        notes: remarks (opt-in needed, launch impossible...).
    """

    arch: str
    block_threads: int
    registers: int | None
    smem_bytes: int
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    occupancy: float
    limits: dict[str, int | None] = field(default_factory=dict)
    limiting: tuple[str, ...] = ()
    smem_allocated_per_block: int = 0
    regs_allocated_per_block: int | None = None
    notes: tuple[str, ...] = ()


def _carveout_bytes(lim: ArchLimits, needed: int, carveout_percent: int | None) -> int:
    """Shared memory per SM under the carveout preference (cudaOccSMemPreferenceVoltaPlus)."""
    if carveout_percent is None:
        pref = lim.smem_per_sm
    else:
        pref = carveout_percent * lim.smem_per_sm // 100
    sizes = [k * 1024 for k in lim.smem_carveouts_kib]

    def align_up(size: int) -> int:
        for s in sizes:
            if size <= s:
                return s
        return sizes[-1]

    pref = align_up(pref)
    if pref >= needed:
        return pref
    return align_up(needed)


def occupancy(
    arch: str | ArchLimits,
    block_threads: int,
    registers: int | None,
    smem_static: int = 0,
    smem_dynamic: int = 0,
    *,
    carveout_percent: int | None = None,
) -> OccupancyResult:
    """Theoretical occupancy of a kernel (CUDA Occupancy Calculator semantics).

    Args:
        arch: ``sm_80``/``sm_86``/``sm_89``/``sm_90`` (or an :class:`ArchLimits`).
        block_threads: threads per block (product of the block dimensions).
        registers: registers per thread from the ptxas report; ``None`` when unknown (the
            register limit is then not applied and the result is an upper bound).
        smem_static: static shared memory per block, bytes (ptxas ``smem``).
        smem_dynamic: dynamic shared memory per block (third launch parameter), bytes.
        carveout_percent: ``cudaFuncAttributePreferredSharedMemoryCarveout``; ``None`` is
            the default preference (the calculator then assumes the largest carveout).

    Returns:
        an :class:`OccupancyResult`; ``blocks_per_sm == 0`` when the block cannot launch.
    """
    lim = arch if isinstance(arch, ArchLimits) else arch_limits(arch)
    notes: list[str] = []
    warps_per_block = _ceil_div(max(block_threads, 1), 32)

    # Warps.
    if block_threads > lim.max_threads_per_block or block_threads <= 0:
        warp_limit = 0
        notes.append(
            f"block of {block_threads} threads exceeds the {lim.max_threads_per_block}-thread limit"
        )
    else:
        warp_limit = lim.max_warps_per_sm // warps_per_block

    # Blocks.
    block_limit = lim.max_blocks_per_sm

    # Registers.
    reg_limit: int | None
    regs_per_block_alloc: int | None = None
    if registers is None:
        reg_limit = None
    else:
        regs_per_warp = _round_up(max(registers, 0) * 32, lim.reg_alloc_unit)
        regs_per_block_alloc = regs_per_warp * warps_per_block
        regs_assumed = regs_per_warp * _round_up(warps_per_block, lim.reg_sub_partitions)
        if (
            lim.regs_per_block < regs_assumed
            or lim.regs_per_block < regs_per_block_alloc
            or registers > lim.max_regs_per_thread
        ):
            reg_limit = 0
            notes.append(
                f"{registers} registers x {block_threads} threads exceed the "
                f"{lim.regs_per_block}-register per-block limit: the launch fails"
            )
        elif regs_per_warp > 0:
            warps_per_sub = (lim.regs_per_sm // lim.reg_sub_partitions) // regs_per_warp
            reg_limit = warps_per_sub * lim.reg_sub_partitions // warps_per_block
        else:
            reg_limit = INT_MAX

    # Shared memory.
    smem_total = smem_static + smem_dynamic
    smem_alloc = _round_up(smem_total + lim.smem_reserved_per_block, lim.smem_alloc_unit)
    if smem_total > lim.smem_per_block_default:
        notes.append(
            f"{smem_total} B of shared memory per block is above the "
            f"{lim.smem_per_block_default} B default: needs the "
            "cudaFuncAttributeMaxDynamicSharedMemorySize opt-in"
        )
    if smem_alloc > lim.smem_per_block_optin + lim.smem_reserved_per_block:
        smem_limit = 0
        notes.append(
            f"{smem_total} B of shared memory per block exceeds the "
            f"{lim.smem_per_block_optin} B maximum: the launch fails"
        )
    elif smem_total + lim.smem_reserved_per_block <= 0:
        smem_limit = INT_MAX
    else:
        per_sm = _carveout_bytes(lim, smem_alloc, carveout_percent)
        smem_limit = per_sm // smem_alloc

    limits: dict[str, int | None] = {
        "warps": warp_limit,
        "blocks": block_limit,
        "registers": reg_limit,
        "shared": smem_limit,
    }
    known = [v for v in limits.values() if v is not None]
    blocks = min(known)
    limiting = tuple(k for k, v in limits.items() if v is not None and v == blocks)
    active_warps = blocks * warps_per_block
    occ = active_warps / lim.max_warps_per_sm
    return OccupancyResult(
        arch=lim.arch,
        block_threads=block_threads,
        registers=registers,
        smem_bytes=smem_total,
        blocks_per_sm=blocks,
        active_warps=active_warps,
        max_warps=lim.max_warps_per_sm,
        occupancy=occ,
        limits=limits,
        limiting=limiting,
        smem_allocated_per_block=smem_alloc,
        regs_allocated_per_block=regs_per_block_alloc,
        notes=tuple(notes),
    )


__all__ = ["OccupancyResult", "occupancy"]
