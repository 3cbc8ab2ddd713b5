"""structure stage: static structural analysis and score of CUDA kernels.

Public API::

    analyze_source(source, *, arch="sm_90", launch=None, resources=None, gpu="H200",
                   sizes=None, weights=None, params=None) -> StructureReport
    analyze_file(path, *, arch=..., launch=..., gpu=..., sizes=..., build=True) -> StructureReport
    occupancy(arch, block_threads, registers, smem_static=0, smem_dynamic=0) -> OccupancyResult
    LaunchConfig.parse("64x64,16x16")
    ScoreWeights / ScoreParams (defaults documented in docs/structural-score.md)
    ARCHS / GPUS / arch_limits / gpu_spec

Measured side (Nsight Compute, :mod:`.ncu`)::

    profile_executable(cmd, kernel_regex=None, metrics=DEFAULT_METRICS, timeout_s=600,
                       launch_count=None) -> list[KernelProfile]
    apply_measurements(report, profiles) -> StructureReport
    measure_report(report, path, run=None, ...) -> (StructureReport, profiles)

Each metric of a :class:`KernelReport` has a ``static`` value and a ``measured`` value
(``None`` until :func:`apply_measurements` fills it in); ``Metric.value`` prefers it.
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
from .ncu import (
    DEFAULT_METRICS,
    NCU_METRICS,
    KernelProfile,
    NcuError,
    apply_measurements,
    measure_report,
    profile_executable,
)
from .occupancy import OccupancyResult, occupancy
from .resources import CompileError, analyze_file, kernel_resources
from .score import ScoreParams, ScoreWeights, analyze_source

__all__ = [
    "ARCHS",
    "DEFAULT_METRICS",
    "NCU_METRICS",
    "KernelProfile",
    "NcuError",
    "apply_measurements",
    "measure_report",
    "profile_executable",
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
