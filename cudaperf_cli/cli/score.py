"""``cudaperf score KERNEL.cu``: structural score of the kernels of a CUDA file.

Registered by ``cudaperf_cli/cli/main.py`` as ``cudaperf score``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from cudaperf_cli.cli.common import fail, parse_sizes


#: Suffixes of files that may hold CUDA kernels (CUDA and C++ sources and headers).
CUDA_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp", ".hh", ".inl")


def score(
    kernel: Path = typer.Argument(..., metavar="KERNEL.cu", help="CUDA source file (.cu) with __global__ kernels."),
    arch: str = typer.Option(
        "sm_90", "--arch", help="Compute capability: sm_80, sm_86, sm_89, sm_90."
    ),
    launch: Optional[str] = typer.Option(
        None,
        "--launch",
        help="Launch configuration GRID,BLOCK[,SMEM] for every kernel, e.g. 1024,256 or "
        "64x64,16x16 "
        "(default: the constant <<< >>> launch in the file).",
    ),
    gpu: Optional[str] = typer.Option(
        None,
        "--gpu",
        help="GPU for roofline and waves: H200, H100, A100, L40S, RTX4090 "
        "(default: H200; A100 for --arch sm_80, L40S for sm_89).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document, nothing else."),
    no_build: bool = typer.Option(
        False, "--no-build", help="Static only: skip nvcc (register metrics become unknown)."
    ),
    size: List[str] = typer.Option(
        [],
        "--size",
        "-s",
        help="Problem size NAME=VALUE (repeatable) replacing representative values.",
    ),
    top: int = typer.Option(5, "--top", min=0, help="Improvement hints to print."),
    ncu: bool = typer.Option(
        False,
        "--ncu",
        help="Also measure with Nsight Compute (needs a GPU and ncu): the file's own main() "
        "is built and profiled, or the --run command; measured values replace the static "
        "ones in the score.",
    ),
    run: Optional[str] = typer.Option(
        None,
        "--run",
        help="Command that launches the file's kernels, profiled under ncu (implies --ncu), "
        "e.g. --run './app 4096'.",
    ),
    ncu_timeout: float = typer.Option(
        600.0, "--ncu-timeout", min=1.0, help="Time limit of the ncu run, seconds."
    ),
    ncu_launches: Optional[int] = typer.Option(
        None,
        "--ncu-launches",
        min=1,
        help="Profile at most this many kernel launches (default 3 per kernel of the file).",
    ),
) -> None:
    """Score the structure of the kernels of a CUDA file (static; no GPU needed).

    Metrics: coalescing, occupancy, arithmetic intensity, synchronization, divergence,
    shared memory, load balance, register pressure (see docs/structural-score.md).
    With --ncu (or --run) the kernels are also profiled with Nsight Compute; where the
    profiler cannot run (no ncu, no access to the performance counters) the static score
    is printed, with a warning line and, in --json, "ncu": {"status": "profiler_unavailable"}.
    """
    from cudaperf_cli.core import CudaperfError, ToolchainError
    from cudaperf_cli.structure import LaunchConfig, analyze_file
    from cudaperf_cli.structure.gpus import default_gpu

    try:
        if gpu is None:
            gpu = default_gpu(arch)
        if kernel.is_dir():
            raise CudaperfError(f"{kernel} is a directory, not a CUDA source file")
        if not kernel.is_file():
            raise CudaperfError(f"no such file: {kernel}")
        if kernel.suffix in (".c", ".py"):  # a problem, not kernels: what optimize takes
            raise CudaperfError(f"{kernel} is not a CUDA source file (.cu): score reads __global__ "
                                f"kernels; to port this file to CUDA: cudaperf optimize {kernel}")
        if kernel.suffix.lower() not in CUDA_SUFFIXES:
            raise CudaperfError(f"{kernel} is not a CUDA source file (.cu, .cuh, or a C++ source or "
                                "header holding __global__ kernels)")
        cfg = LaunchConfig.parse(launch) if launch else None
        sizes = parse_sizes(size)
        try:
            report = analyze_file(
                kernel, arch=arch, launch=cfg, gpu=gpu, sizes=sizes, build=not no_build
            )
        except ToolchainError as err:
            print(f"warning: {err}; scoring without the ptxas report", file=sys.stderr)
            report = analyze_file(kernel, arch=arch, launch=cfg, gpu=gpu, sizes=sizes, build=False)
        if not report.kernels and not report.not_analysed:
            raise CudaperfError(f"{kernel} defines no __global__ kernel: nothing to score")
        profiles = None
        profiler: dict[str, str] | None = None
        if ncu or run:
            from cudaperf_cli.structure.ncu import NcuError, find_ncu, measure_report

            # When the profiler itself cannot run (no ncu, no access to the counters, its
            # library not loaded), the static score stands, with one warning line.
            why: CudaperfError | None = None
            try:
                report, profiles = measure_report(
                    report,
                    kernel,
                    run=run,
                    arch=arch,
                    timeout_s=ncu_timeout,
                    launch_count=ncu_launches,
                )
                profiler = {"status": "measured"}
            except NcuError as err:
                if err.kind not in ("permission", "unavailable"):
                    raise  # the program's fault (no kernel launched, a crash): an error
                why = err
            except ToolchainError as err:
                try:
                    find_ncu()
                except ToolchainError:
                    why = err  # no ncu
                else:
                    raise  # nvcc, building the program
            if why is not None:
                profiler = {"status": "profiler_unavailable", "reason": str(why)}
                print(f"warning: profiler unavailable: {why}; the static score follows",
                      file=sys.stderr)
    except CudaperfError as err:
        fail(err)
    if json_out:
        doc = report.to_dict()
        doc["reasons"] = report.reasons(top)
        if profiler is not None:
            doc["ncu"] = profiler
        if profiles is not None:
            from cudaperf_cli.core import to_jsonable

            doc["ncu_profiles"] = to_jsonable(profiles)
        import json

        print(json.dumps(doc, indent=2))
        return
    from cudaperf_cli.agent.render import stdout_console
    from cudaperf_cli.structure.render import print_report

    print_report(report, stdout_console(), top)


__all__ = ["score"]
