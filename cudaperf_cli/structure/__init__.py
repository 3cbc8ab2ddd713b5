"""structure stage: static structural analysis and score of CUDA kernels.

Public API::

    analyze_source(source, *, arch="sm_90", launch=None, resources=None, gpu="H200",
                   sizes=None, weights=None, params=None) -> StructureReport
    analyze_file(path, *, arch=..., launch=..., gpu=..., sizes=..., build=True) -> StructureReport
    occupancy(arch, block_threads, registers, smem_static=0, smem_dynamic=0) -> OccupancyResult
    LaunchConfig.parse("64x64,16x16")
    ScoreWeights / ScoreParams (defaults documented in docs/structural-score.md)
    ARCHS / GPUS / arch_limits / gpu_spec

Each metric of a :class:`KernelReport` has a ``static`` value (this stage) and a
``measured`` slot for Nsight Compute values filled in later.
"""

from .gpus import ARCHS, GPUS, ArchLimits, GPUSpec, arch_limits, gpu_spec
from .model import (
    METRIC_KEYS,
    HostSync,
    KernelReport,
    LaunchConfig,
    Metric,
    NotAnalysed,
    StructureReport,
)
from .occupancy import OccupancyResult, occupancy
from .resources import CompileError, analyze_file, kernel_resources
from .score import ScoreParams, ScoreWeights, analyze_source

__all__ = [
    "ARCHS",
    "GPUS",
    "METRIC_KEYS",
    "ArchLimits",
    "CompileError",
    "GPUSpec",
    "HostSync",
    "KernelReport",
    "LaunchConfig",
    "Metric",
    "NotAnalysed",
    "OccupancyResult",
    "ScoreParams",
    "ScoreWeights",
    "StructureReport",
    "analyze_file",
    "analyze_source",
    "arch_limits",
    "gpu_spec",
    "kernel_resources",
    "occupancy",
]
