"""Architecture limits (for occupancy) and GPU roofline specifications.

Two tables live here:

* :data:`ARCHS` -- per compute capability, the per-SM resource limits that the
  occupancy calculation needs.  Sources: the CUDA C++ Programming Guide, table
  "Technical Specifications per Compute Capability" (section *Compute Capabilities*), and
  the allocation granularities of the CUDA Occupancy Calculator as shipped in
  ``cuda_occupancy.h`` (CUDA 13.0: ``cudaOccSMemAllocationGranularity``,
  ``cudaOccRegAllocationGranularity``, ``cudaOccRegAllocationMaxPerThread``,
  ``cudaOccSubPartitionsPerMultiprocessor``, ``cudaOccMaxBlocksPerMultiprocessor``).
  The per-SM shared-memory and per-block opt-in sizes are the values the CUDA runtime
  reports in ``cudaDeviceProp.sharedMemPerMultiprocessor`` /
  ``sharedMemPerBlockOptin`` / ``reservedSharedMemPerBlock`` on those parts.

* :data:`GPUS` -- per product, SM count, peak DRAM bandwidth and peak non-tensor FLOP/s
  per data type, for the roofline.  Each entry names its source (NVIDIA datasheets or
  architecture whitepapers).  Every value can be overridden with
  :func:`dataclasses.replace` or by passing a custom :class:`GPUSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import CudaperfError

KIB = 1024


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM resource limits of one compute capability (units in the field names).

    Attributes:
        arch: ``sm_XY``.
        max_warps_per_sm: maximum resident warps per SM.
        max_blocks_per_sm: maximum resident thread blocks per SM.
        max_threads_per_block: maximum threads per block (1024 on all listed archs).
        regs_per_sm: 32-bit registers per SM.
        regs_per_block: maximum 32-bit registers per thread block.
        max_regs_per_thread: maximum registers per thread accepted by the occupancy
            calculator (``cudaOccRegAllocationMaxPerThread``; ptxas never assigns more
            than 255).
        reg_alloc_unit: register allocation unit, registers per warp (256).
        reg_sub_partitions: SM sub-partitions (warp schedulers) registers are split over.
        smem_per_sm: shared memory per SM at the maximum carveout, bytes.
        smem_per_block_default: shared memory a block may use without opt-in, bytes.
        smem_per_block_optin: maximum shared memory per block with
            ``cudaFuncAttributeMaxDynamicSharedMemorySize`` opt-in, bytes.
        smem_reserved_per_block: shared memory the driver reserves per block, bytes.
        smem_alloc_unit: shared-memory allocation granularity, bytes.
        smem_carveouts_kib: the shared-memory carveout sizes the SM supports, KiB.
        source: where the numbers come from.
    """

    arch: str
    max_warps_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int
    regs_per_sm: int
    regs_per_block: int
    max_regs_per_thread: int
    reg_alloc_unit: int
    reg_sub_partitions: int
    smem_per_sm: int
    smem_per_block_default: int
    smem_per_block_optin: int
    smem_reserved_per_block: int
    smem_alloc_unit: int
    smem_carveouts_kib: tuple[int, ...]
    source: str = ""

    @property
    def max_threads_per_sm(self) -> int:
        """Maximum resident threads per SM."""
        return self.max_warps_per_sm * 32


_GUIDE = (
    "CUDA C++ Programming Guide, 'Technical Specifications per Compute Capability'; "
    "CUDA Occupancy Calculator (cuda_occupancy.h, CUDA 13.0)"
)

#: Compute capability -> per-SM limits.
ARCHS: dict[str, ArchLimits] = {
    "sm_75": ArchLimits(
        "sm_75",
        32,
        16,
        1024,
        65536,
        65536,
        256,
        256,
        4,
        64 * KIB,
        48 * KIB,
        64 * KIB,
        0,
        256,
        (32, 64),
        _GUIDE,
    ),
    "sm_80": ArchLimits(
        "sm_80",
        64,
        32,
        1024,
        65536,
        65536,
        256,
        256,
        4,
        164 * KIB,
        48 * KIB,
        163 * KIB,
        1 * KIB,
        128,
        (0, 8, 16, 32, 64, 100, 132, 164),
        _GUIDE,
    ),
    "sm_86": ArchLimits(
        "sm_86",
        48,
        16,
        1024,
        65536,
        65536,
        256,
        256,
        4,
        100 * KIB,
        48 * KIB,
        99 * KIB,
        1 * KIB,
        128,
        (0, 8, 16, 32, 64, 100),
        _GUIDE,
    ),
    "sm_89": ArchLimits(
        "sm_89",
        48,
        24,
        1024,
        65536,
        65536,
        256,
        256,
        4,
        100 * KIB,
        48 * KIB,
        99 * KIB,
        1 * KIB,
        128,
        (0, 8, 16, 32, 64, 100),
        _GUIDE,
    ),
    "sm_90": ArchLimits(
        "sm_90",
        64,
        32,
        1024,
        65536,
        65536,
        256,
        256,
        4,
        228 * KIB,
        48 * KIB,
        227 * KIB,
        1 * KIB,
        128,
        (0, 8, 16, 32, 64, 100, 132, 164, 196, 228),
        _GUIDE,
    ),
}


def arch_limits(arch: str) -> ArchLimits:
    """Limits for ``arch`` (``sm_90``, ``sm_90a``, ``compute_90`` and ``90`` are accepted).

    Raises:
        CudaperfError: an architecture not in :data:`ARCHS`.
    """
    key = normalize_arch(arch)
    try:
        return ARCHS[key]
    except KeyError:
        raise CudaperfError(
            f"unknown architecture '{arch}': supported are {', '.join(sorted(ARCHS))}"
        ) from None


def normalize_arch(arch: str) -> str:
    """``sm_90a`` / ``compute_90`` / ``90`` / ``9.0`` -> ``sm_90``."""
    a = arch.strip().lower()
    for prefix in ("sm_", "compute_", "sm"):
        if a.startswith(prefix):
            a = a[len(prefix) :]
            break
    a = a.replace(".", "").rstrip("af")
    return f"sm_{a}"


# ---------------------------------------------------------------------------------------
# Roofline specifications
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPUSpec:
    """Peak numbers of one GPU product for the roofline and the wave computation.

    Attributes:
        name: product name (key of :data:`GPUS`).
        arch: its compute capability (``sm_90``...).
        sm_count: streaming multiprocessors.
        dram_bandwidth: peak DRAM bandwidth, bytes/s.
        peak_flops: peak non-tensor-core FLOP/s per data type (``fp64``, ``fp32``,
            ``fp16``); an FMA counts as 2 FLOP.
        source: datasheet / whitepaper the numbers come from.
    """

    name: str
    arch: str
    sm_count: int
    dram_bandwidth: float
    peak_flops: dict[str, float] = field(default_factory=dict)
    source: str = ""

    def ridge_point(self, dtype: str) -> float:
        """FLOP/byte where the roofline turns from memory- to compute-bound."""
        return self.peak_flops_for(dtype) / self.dram_bandwidth

    def peak_flops_for(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; falls back to fp32 for an unlisted type."""
        return self.peak_flops.get(dtype) or self.peak_flops["fp32"]


T = 1e12

#: Product name -> roofline specification (non-tensor-core peaks, boost clock).
GPUS: dict[str, GPUSpec] = {
    "H200": GPUSpec(
        "H200",
        "sm_90",
        132,
        4.8e12,
        {"fp64": 34 * T, "fp32": 67 * T},
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: FP64 34 TFLOPS, FP32 67 TFLOPS, "
        "4.8 TB/s HBM3e); 132 SMs as H100 SXM5 (NVIDIA H100 Tensor Core GPU Architecture "
        "whitepaper)",
    ),
    "H100": GPUSpec(
        "H100",
        "sm_90",
        132,
        3.35e12,
        {"fp64": 34 * T, "fp32": 67 * T},
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: FP64 34 TFLOPS, FP32 67 TFLOPS, "
        "3.35 TB/s HBM3); 132 SMs (H100 architecture whitepaper)",
    ),
    "A100": GPUSpec(
        "A100",
        "sm_80",
        108,
        2.039e12,
        {"fp64": 9.7 * T, "fp32": 19.5 * T},
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: FP64 9.7 TFLOPS, FP32 "
        "19.5 TFLOPS, 2,039 GB/s HBM2e); 108 SMs (NVIDIA A100 architecture whitepaper)",
    ),
    "L40S": GPUSpec(
        "L40S",
        "sm_89",
        142,
        864e9,
        {"fp64": 91.6 * T / 64, "fp32": 91.6 * T},
        "NVIDIA L40S datasheet (FP32 91.6 TFLOPS, 864 GB/s GDDR6, 142 SMs / 568 Tensor "
        "Cores); FP64 not in the datasheet: 1/64 of FP32, the Ada FP64 rate (NVIDIA Ada "
        "Lovelace architecture whitepaper)",
    ),
    "RTX4090": GPUSpec(
        "RTX4090",
        "sm_89",
        128,
        1008e9,
        {"fp64": 1.29 * T, "fp32": 82.6 * T},
        "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix table (GeForce RTX 4090: "
        "128 SMs, FP32 82.6 TFLOPS, FP64 1.29 TFLOPS, 1008 GB/s GDDR6X)",
    ),
}

_GPU_ALIASES = {
    "h200": "H200",
    "h200sxm": "H200",
    "h100": "H100",
    "h100sxm": "H100",
    "h100sxm5": "H100",
    "a100": "A100",
    "a10080gb": "A100",
    "a100sxm": "A100",
    "a10080gbsxm": "A100",
    "l40s": "L40S",
    "rtx4090": "RTX4090",
    "4090": "RTX4090",
    "geforcertx4090": "RTX4090",
}


def gpu_spec(name: str | GPUSpec) -> GPUSpec:
    """The :class:`GPUSpec` for a product name (case/spacing-insensitive), or ``name``.

    Raises:
        CudaperfError: an unknown product.
    """
    if isinstance(name, GPUSpec):
        return name
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    canon = _GPU_ALIASES.get(key)
    if canon is None:
        raise CudaperfError(
            f"unknown GPU '{name}': supported are {', '.join(GPUS)} "
            "(or pass a GPUSpec to analyze_source)"
        )
    return GPUS[canon]


#: Product used when only an architecture is given (``cudaperf score --arch`` without --gpu).
DEFAULT_GPU_FOR_ARCH = {"sm_80": "A100", "sm_89": "L40S", "sm_90": "H200"}


def default_gpu(arch: str) -> str:
    """The default product for ``arch`` (H200 when the table has none for it)."""
    return DEFAULT_GPU_FOR_ARCH.get(normalize_arch(arch), "H200")


__all__ = [
    "ARCHS",
    "DEFAULT_GPU_FOR_ARCH",
    "GPUS",
    "ArchLimits",
    "GPUSpec",
    "arch_limits",
    "default_gpu",
    "gpu_spec",
    "normalize_arch",
]
