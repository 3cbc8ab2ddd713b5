"""ptxas resources for the structural analysis, through the build stage, and
:func:`analyze_file` (read + build + analyse one file).

The compile and the ptxas parser are :func:`cudaperf_cli.build.build_candidate` and
:func:`cudaperf_cli.build.parse_ptxas_report`; nothing here parses compiler output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..core import CudaperfError
from .gpus import GPUSpec, normalize_arch
from .model import LaunchConfig, StructureReport


class CompileError(CudaperfError):
    """The file does not compile (exit code 2: bad input)."""

    exit_code = 2


def kernel_resources(
    source: str,
    *,
    arch: str = "sm_90",
    include_dir: Path | None = None,
    cache_root: Path | None = None,
    timeout_s: float = 120.0,
    name: str = "<source>",
) -> list:
    """Compile ``source`` with nvcc (``cudaperf_cli.build``) and return its ptxas report
    (one ``KernelResources`` per kernel).

    Raises:
        CompileError: the source does not compile (or the compile timed out); the message
            is one line naming the first compiler error.
        ToolchainError: nvcc is missing or cannot run.
    """
    from ..build import build_candidate, default_cache_root

    flags: tuple[str, ...] = ()
    if include_dir is not None:
        flags = (f"-I{include_dir}",)
    res = build_candidate(
        source,
        arch=normalize_arch(arch),
        cache_root=cache_root or default_cache_root(),
        timeout_s=timeout_s,
        extra_flags=flags,
    )
    if not res.ok:
        if res.status == "compile_timeout":
            raise CompileError(f"{name}: nvcc timed out after {timeout_s:.0f} s")
        first = next(
            (ln.strip() for ln in (res.errors or res.log).splitlines() if "error" in ln.lower()), ""
        )
        if not first:
            first = next(
                (ln.strip() for ln in (res.errors or res.log).splitlines() if ln.strip()), ""
            )
        first = first.replace("candidate.cu", Path(name).name)
        raise CompileError(
            f"{name} does not compile: {first}" if first else f"{name} does not compile"
        )
    return list(res.resources)


def analyze_file(
    path: str | Path,
    *,
    arch: str = "sm_90",
    launch: LaunchConfig | None = None,
    gpu: str | GPUSpec = "H200",
    sizes: Mapping[str, int] | None = None,
    build: bool = True,
    cache_root: Path | None = None,
    timeout_s: float = 120.0,
    **kwargs,
) -> StructureReport:
    """Read ``path``, build it for its ptxas report (unless ``build=False``) and analyse it.

    Raises:
        CudaperfError: the file does not exist or cannot be read (exit code 2).
        CompileError: it does not compile.
        ToolchainError: ``build=True`` and nvcc is missing.
    """
    from .score import analyze_source

    p = Path(path)
    if not p.is_file():
        raise CudaperfError(f"no such file: {p}")
    try:
        source = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise CudaperfError(f"cannot read {p}: {e.strerror or e}") from None
    resources = None
    if build:
        resources = kernel_resources(
            source,
            arch=arch,
            include_dir=p.resolve().parent,
            cache_root=cache_root,
            timeout_s=timeout_s,
            name=str(p),
        )
    return analyze_source(
        source,
        arch=arch,
        launch=launch,
        resources=resources,
        gpu=gpu,
        sizes=sizes,
        source_name=str(p),
        **kwargs,
    )


__all__ = ["CompileError", "analyze_file", "kernel_resources"]
