"""build stage: compile a candidate with nvcc (content-hash cache) and parse ``ptxas -v``.

Public API::

    detect_arch() -> "sm_90" | None
    build_candidate(source, arch=..., cache_root=..., timeout_s=..., extra_flags=...) -> BuildResult
    parse_ptxas_report(text) -> list[KernelResources]
"""

from cudaperf_cli.build.nvcc import (
    BuildResult,
    build_candidate,
    cache_key,
    default_cache_root,
    detect_arch,
    extract_errors,
    extract_warnings,
    find_nvcc,
    nvcc_command,
    nvcc_version,
)
from cudaperf_cli.build.ptxas import KernelResources, demangle, for_arch, parse_ptxas_report

__all__ = [
    "BuildResult",
    "KernelResources",
    "build_candidate",
    "cache_key",
    "default_cache_root",
    "demangle",
    "for_arch",
    "detect_arch",
    "extract_errors",
    "extract_warnings",
    "find_nvcc",
    "nvcc_command",
    "nvcc_version",
    "parse_ptxas_report",
]
