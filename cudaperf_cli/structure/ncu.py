"""Measured side of the structural score: Nsight Compute (``ncu``) metrics.

:func:`profile_executable` runs a program under ``ncu`` and returns one
:class:`KernelProfile` per kernel (launches aggregated); :func:`apply_measurements` writes
the measured values into a static :class:`~.model.StructureReport` and re-scores each
metric with the **same** smooth score functions as the static side
(:mod:`.score`), so a static and a measured score mean the same thing.
:func:`measure_report` is what ``cudaperf score KERNEL.cu --ncu [--run CMD]`` does.

The metric set (:data:`NCU_METRICS`), one table: the name, its unit, what it means and
which structural metric it feeds.  Names are the sm_70+ (Volta..Hopper) names of the
Nsight Compute *Kernel Profiling Guide* ("Metrics Reference", "Metrics Decoder",
"Memory Tables"); the formulas that turn them into structural values are in
``docs/structural-score.md`` (section *Measured side*).

Only ``--clock-control none`` is ever passed among the clock options: ncu then leaves the
GPU clocks as they are (its default would lock them to base clocks).
"""

from __future__ import annotations

import copy
import csv
import math
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..core import CudaperfError, ToolchainError, kill_process_group
from ..sandbox import CUDA_CHILD_LIMITS, NVCC_LIMITS, scrubbed_env
from .gpus import GPUSpec, gpu_spec
from .model import KernelReport, Metric, StructureReport
from .score import (
    DEFAULT_PARAMS,
    ScoreParams,
    bank_conflict_score,
    coalescing_score,
    intensity_score,
    kernel_total,
    occupancy_score,
)

# ---------------------------------------------------------------------------------------
# The metric table
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcuMetric:
    """One Nsight Compute metric of the measured structural score.

    Attributes:
        name: the ncu metric name (``--metrics``).
        unit: its unit as ncu reports it with ``--print-units base``.
        feeds: the structural metric key it feeds (``"duration"`` for the kernel time).
        meaning: what it counts (Kernel Profiling Guide wording, shortened).
    """

    name: str
    unit: str
    feeds: str
    meaning: str


# Names used below (one place to fix a name if a chip spells it differently).
G_LD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
G_LD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
G_ST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
G_ST_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
G_LD_EFF = "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"
G_ST_EFF = "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
FLOP_OPS = {  # op -> (data type, FLOPs per thread instruction)
    "dadd": ("fp64", 1),
    "dmul": ("fp64", 1),
    "dfma": ("fp64", 2),
    "fadd": ("fp32", 1),
    "fmul": ("fp32", 1),
    "ffma": ("fp32", 2),
}
FLOP_METRICS = {op: f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in FLOP_OPS}
BARRIER_STALL = "smsp__warp_issue_stalled_barrier_per_warp_active.pct"
THREADS_ACTIVE = "smsp__thread_inst_executed_per_inst_executed.ratio"
THREADS_PRED_ON = "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio"
SH_LD_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
SH_ST_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
SH_LD_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
SH_ST_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
SH_LD_INST = "smsp__sass_inst_executed_op_shared_ld.sum"
SH_ST_INST = "smsp__sass_inst_executed_op_shared_st.sum"
WAVES = "launch__waves_per_multiprocessor"
REGISTERS = "launch__registers_per_thread"
LOCAL_LD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"
LOCAL_ST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"
DURATION = "gpu__time_duration.sum"

#: The metrics collected by default, with what each feeds (see the module docstring).
NCU_METRICS: tuple[NcuMetric, ...] = (
    NcuMetric(G_LD_SECTORS, "sector", "coalescing",
              "32-byte sectors accessed by global loads (L1TEX t-stage)"),
    NcuMetric(G_LD_REQUESTS, "request", "coalescing",
              "global load requests (one per warp-level instruction)"),
    NcuMetric(G_ST_SECTORS, "sector", "coalescing",
              "32-byte sectors accessed by global stores"),
    NcuMetric(G_ST_REQUESTS, "request", "coalescing", "global store requests"),
    NcuMetric(G_LD_EFF, "%", "coalescing",
              "requested bytes / (sectors x 32) of global loads (nvprof gld_efficiency)"),
    NcuMetric(G_ST_EFF, "%", "coalescing",
              "requested bytes / (sectors x 32) of global stores (nvprof gst_efficiency)"),
    NcuMetric(OCCUPANCY, "%", "occupancy",
              "achieved occupancy: mean active warps / max warps per SM, over active cycles"),
    NcuMetric(DRAM_READ, "byte", "arithmetic_intensity", "bytes read from DRAM"),
    NcuMetric(DRAM_WRITE, "byte", "arithmetic_intensity", "bytes written to DRAM"),
    *(
        NcuMetric(FLOP_METRICS[op], "inst", "arithmetic_intensity",
                  f"thread-level {op.upper()} instructions executed, predicate on "
                  f"({dt}, {n} FLOP each)")
        for op, (dt, n) in FLOP_OPS.items()
    ),
    NcuMetric(BARRIER_STALL, "%", "synchronization",
              "share of active warp cycles stalled waiting at a CTA barrier"),
    NcuMetric(THREADS_ACTIVE, "thread", "divergence",
              "active threads per executed warp instruction (32 = no divergence)"),
    NcuMetric(THREADS_PRED_ON, "thread", "divergence",
              "active, predicated-on threads per executed warp instruction"),
    NcuMetric(SH_LD_CONFLICTS, "", "shared_memory",
              "shared-load bank conflicts: wavefronts above the ideal"),
    NcuMetric(SH_ST_CONFLICTS, "", "shared_memory",
              "shared-store bank conflicts: wavefronts above the ideal"),
    NcuMetric(SH_LD_WAVEFRONTS, "", "shared_memory",
              "shared-load wavefronts (data-stage passes)"),
    NcuMetric(SH_ST_WAVEFRONTS, "", "shared_memory", "shared-store wavefronts"),
    NcuMetric(SH_LD_INST, "inst", "shared_memory",
              "warp-level shared load instructions executed"),
    NcuMetric(SH_ST_INST, "inst", "shared_memory",
              "warp-level shared store instructions executed"),
    NcuMetric(WAVES, "", "load_balance", "grid blocks / (SMs x resident blocks per SM)"),
    NcuMetric(REGISTERS, "register/thread", "register_pressure",
              "registers per thread of the launch"),
    NcuMetric(LOCAL_LD_SECTORS, "sector", "register_pressure",
              "local-memory load sectors (spills, dynamically indexed arrays)"),
    NcuMetric(LOCAL_ST_SECTORS, "sector", "register_pressure", "local-memory store sectors"),
    NcuMetric(DURATION, "nsecond", "duration", "GPU time of the launch"),
)

#: Metric names collected by default (``--metrics``).
DEFAULT_METRICS: tuple[str, ...] = tuple(m.name for m in NCU_METRICS)

#: Profiled launches per kernel of the file when the caller gives no ``launch_count``.
DEFAULT_LAUNCHES_PER_KERNEL = 3

# ---------------------------------------------------------------------------------------
# Errors and results
# ---------------------------------------------------------------------------------------


class NcuError(CudaperfError):
    """ncu ran but gave no usable profile.

    ``kind``: ``"permission"`` (``ERR_NVGPUCTRPERM``: no access to the GPU performance
    counters), ``"unavailable"`` (ncu's injection library did not load in the program,
    ``LibraryNotLoaded``: the profiler, not the program, failed), ``"timeout"``, ``"no_kernels"`` (nothing profiled: the program launched no
    matching kernel) or ``"failed"``.  Exit code 3 (environment), 2 for ``no_kernels``
    (the program or ``--run`` command does not launch the file's kernels).
    """

    exit_code = 3

    def __init__(self, message: str, kind: str = "failed", hint: str | None = None):
        super().__init__(message, hint)
        self.kind = kind
        if kind == "no_kernels":
            self.exit_code = 2


@dataclass
class KernelProfile:
    """Nsight Compute measurements of one kernel, all its profiled launches together.

    Attributes:
        name: kernel base name (no return type, parameters, template arguments or
            namespaces): ``copy_strided``.
        launches: profiled launches aggregated here.
        metrics: metric name -> value in ncu base units; counters (``*.sum``) are summed
            over the launches, ratios/percentages/launch attributes averaged.  A metric
            ncu reported as ``n/a`` (or not at all) is absent.
        duration_ns: GPU time of all profiled launches together, ns
            (``gpu__time_duration.sum``); ``None`` if not collected.
        full_name: the name as ncu printed it (first launch).
        grid: grid size of the first launch ``(x, y, z)``, if printed.
        block: block size of the first launch ``(x, y, z)``, if printed.
        missing: requested metrics without a value (n/a or unknown to this ncu/GPU).
    """

    name: str
    launches: int
    metrics: dict[str, float]
    duration_ns: float | None = None
    full_name: str = ""
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    missing: tuple[str, ...] = ()

    def get(self, metric: str) -> float | None:
        """The value of ``metric`` (``None`` when absent)."""
        return self.metrics.get(metric)

    @property
    def mean_duration_ns(self) -> float | None:
        """GPU time of one launch, ns (mean over the profiled launches)."""
        if self.duration_ns is None or not self.launches:
            return None
        return self.duration_ns / self.launches


@dataclass
class LaunchRecord:
    """One row of ``ncu --csv --page raw``: one profiled kernel launch."""

    id: str
    kernel: str
    name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    values: dict[str, float | None] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# CSV parsing
# ---------------------------------------------------------------------------------------

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][+-]?\d+)?$")
_NA = {"", "n/a", "na", "-", "nan", "(n/a)"}

# Unit -> factor to the base unit this module uses (ns for times, bytes, plain counts).
_TIME_UNITS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6,
               "ms": 1e6, "second": 1e9, "s": 1e9}
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 1024.0, "Mi": 1024.0**2,
           "Gi": 1024.0**3, "Ti": 1024.0**4}
_COUNT_UNITS = ("byte", "sector", "request", "inst", "wavefront", "warp", "thread", "cycle")
_PREFIXED = re.compile(r"^(Ki|Mi|Gi|Ti|K|M|G|T)(" + "|".join(_COUNT_UNITS) + r")s?$")


def parse_number(text: str | None) -> float | None:
    """A metric value as ncu prints it: ``"1,234,567"`` (thousands separators) or
    ``"1234567"`` or ``"98.5"`` or ``"4.0e-05"``; ``None`` for ``n/a``/empty/unparsable."""
    if text is None:
        return None
    s = text.strip().strip('"').strip()
    if s.lower() in _NA:
        return None
    if "," in s:
        if not _THOUSANDS.match(s):
            return None
        s = s.replace(",", "")
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def unit_scale(unit: str) -> float:
    """Factor from ``unit`` to this module's base unit: times to ns, ``Kbyte``/``Mbyte``
    (SI) and ``KiByte``-style (binary) prefixes to plain counts; 1 otherwise."""
    u = unit.strip()
    if u in _TIME_UNITS:
        return _TIME_UNITS[u]
    m = _PREFIXED.match(u)
    if m:
        return _PREFIX[m.group(1)]
    return 1.0


def _dims(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    nums = [int(x) for x in re.findall(r"\d+", text)]
    if not nums or len(nums) > 3:
        return None
    nums += [1] * (3 - len(nums))
    return (nums[0], nums[1], nums[2])


def kernel_base_name(text: str) -> str:
    """The bare function name of a kernel name as ncu prints it:
    ``"void ns::copy<float, 4>(float *, int)"`` -> ``"copy"``; ``"copy_strided"`` unchanged."""
    s = text.strip().replace("(anonymous namespace)::", "")
    # cut the parameter list: the first '(' outside template brackets
    depth = 0
    out = []
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            break
        if depth == 0 and ch not in "<>":
            out.append(ch)
    base = "".join(out).strip()
    if " " in base:  # return type ("void ...")
        base = base.split()[-1]
    base = base.split("::")[-1]
    return base or s


def parse_ncu_csv(text: str) -> list[LaunchRecord]:
    """Parse ``ncu --csv --page raw`` output: one :class:`LaunchRecord` per profiled launch.

    Lines before the header (``==PROF==`` lines, program output) and lines starting with
    ``==`` are ignored.  The header starts with ``"ID"``; metric columns are those whose
    name contains ``__`` (``gpu__time_duration.sum``).  The row after the header whose
    ``ID`` is empty is the units row (``--page raw`` prints one): values are converted to
    base units with it (times to ns, prefixed byte/sector counts to plain counts).
    ``n/a`` values are ``None``.
    """
    lines = [ln.rstrip("\r") for ln in text.splitlines()]
    start = next(
        (i for i, ln in enumerate(lines) if ln.lstrip().startswith(('"ID"', "ID,"))), None
    )
    if start is None:
        return []
    body = [ln for ln in lines[start:] if ln.strip() and not ln.lstrip().startswith("==")]
    rows = list(csv.reader(body))
    header = [h.strip() for h in rows[0]]
    col = {h: i for i, h in enumerate(header)}
    i_id, i_name = col.get("ID"), col.get("Kernel Name")
    if i_name is None:
        return []
    i_grid, i_block = col.get("Grid Size"), col.get("Block Size")
    metric_cols = [(i, h) for i, h in enumerate(header) if "__" in h]
    scales = {h: 1.0 for _, h in metric_cols}
    out: list[LaunchRecord] = []
    for row in rows[1:]:
        if len(row) < len(header):
            row = row + [""] * (len(header) - len(row))
        rid = row[i_id].strip() if i_id is not None else str(len(out))
        kname = row[i_name].strip()
        if not rid and not kname:  # the units row
            for i, h in metric_cols:
                scales[h] = unit_scale(row[i])
            continue
        if not kname:
            continue
        vals: dict[str, float | None] = {}
        for i, h in metric_cols:
            v = parse_number(row[i])
            vals[h] = None if v is None else v * scales[h]
        out.append(
            LaunchRecord(
                id=rid,
                kernel=kname,
                name=kernel_base_name(kname),
                grid=_dims(row[i_grid]) if i_grid is not None else None,
                block=_dims(row[i_block]) if i_block is not None else None,
                values=vals,
            )
        )
    return out


def _aggregate(metric: str, values: list[float]) -> float:
    if metric.endswith(".sum"):
        return float(sum(values))
    if metric.endswith(".max"):
        return float(max(values))
    if metric.endswith(".min"):
        return float(min(values))
    return float(sum(values) / len(values))


def aggregate_launches(
    records: Iterable[LaunchRecord], metrics: Sequence[str] | None = None
) -> list[KernelProfile]:
    """One :class:`KernelProfile` per kernel base name, in order of first launch.

    Counters (names ending ``.sum``) are summed over the launches; other metrics
    (``.pct``, ``.ratio``, ``.avg...``, ``launch__*``) are averaged over the launches that
    have a value.  ``metrics``: the requested names, to list those without any value in
    ``missing``.
    """
    groups: dict[str, list[LaunchRecord]] = {}
    for r in records:
        groups.setdefault(r.name, []).append(r)
    out: list[KernelProfile] = []
    for name, recs in groups.items():
        names: list[str] = list(metrics) if metrics else []
        for r in recs:
            names.extend(k for k in r.values if k not in names)
        vals: dict[str, float] = {}
        missing = []
        for mname in names:
            got = [r.values[mname] for r in recs if r.values.get(mname) is not None]
            if got:
                vals[mname] = _aggregate(mname, got)  # type: ignore[arg-type]
            elif metrics is None or mname in metrics:
                missing.append(mname)
        out.append(
            KernelProfile(
                name=name,
                launches=len(recs),
                metrics=vals,
                duration_ns=vals.get(DURATION),
                full_name=recs[0].kernel,
                grid=recs[0].grid,
                block=recs[0].block,
                missing=tuple(missing),
            )
        )
    return out


# ---------------------------------------------------------------------------------------
# Running ncu
# ---------------------------------------------------------------------------------------


def find_ncu(ncu: str | None = None) -> str:
    """Path of ncu: the ``ncu`` argument, ``$CUDAPERF_NCU``, PATH, ``$CUDA_HOME/bin``,
    ``/usr/local/cuda/bin``.

    Raises:
        ToolchainError: ncu is not found.
    """
    for c in (ncu, os.environ.get("CUDAPERF_NCU")):
        if c:
            found = shutil.which(c)
            if found:
                return found
            raise ToolchainError(f"ncu not found at '{c}'")
    found = shutil.which("ncu")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "ncu").is_file():
            return str(Path(home) / "bin" / "ncu")
    raise ToolchainError(
        "ncu (Nsight Compute) not found: install it with the CUDA toolkit and put it on "
        "PATH (or set CUDAPERF_NCU)"
    )


def kernel_name_regex(names: Iterable[str]) -> str:
    """An ncu ``--kernel-name regex:`` expression matching any of ``names`` as a whole
    identifier, whether ncu matches it against the bare function name or the demangled
    signature, and whether it searches or matches fully."""
    alts = "|".join(re.escape(n) for n in sorted(set(names)))
    return rf"^(.*[^A-Za-z0-9_])?({alts})([^A-Za-z0-9_].*)?$"


def ncu_command(
    ncu: str,
    cmd: Sequence[str],
    metrics: Sequence[str],
    *,
    kernel_regex: str | None = None,
    launch_count: int | None = None,
    log_file: Path | None = None,
) -> list[str]:
    """The ncu command line: ``ncu --clock-control none --csv --page raw --print-units base
    --print-kernel-base function --metrics M1,M2 [--kernel-name regex:RE]
    [--launch-count N] [--log-file F] CMD...``."""
    out = [
        ncu,
        "--clock-control",
        "none",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--print-kernel-base",
        "function",
        "--metrics",
        ",".join(metrics),
    ]
    if kernel_regex:
        out += ["--kernel-name", kernel_regex if kernel_regex.startswith("regex:")
                else "regex:" + kernel_regex]
    if launch_count:
        out += ["--launch-count", str(int(launch_count))]
    if log_file is not None:
        out += ["--log-file", str(log_file)]
    return out + list(cmd)


def _tool_lines(text: str, tag: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith(tag)]


def _unknown_metrics(text: str, metrics: Sequence[str]) -> list[str]:
    """Requested metrics that an ``==ERROR==``/``==WARNING==`` line names (ncu does not
    know them on this GPU / version)."""
    lines = _tool_lines(text, "==ERROR==") + _tool_lines(text, "==WARNING==")
    bad = []
    for m in metrics:
        base = m.split(".")[0]
        if any(m in ln or re.search(rf"\b{re.escape(base)}\b", ln) for ln in lines):
            bad.append(m)
    return bad


def profile_executable(
    cmd: Sequence[str],
    *,
    kernel_regex: str | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    timeout_s: float = 600.0,
    launch_count: int | None = None,
    cwd: str | Path | None = None,
    ncu: str | None = None,
) -> list[KernelProfile]:
    """Run ``cmd`` under Nsight Compute and return one :class:`KernelProfile` per kernel.

    Runs ``ncu --clock-control none --csv --page raw --print-units base --metrics ...
    [--kernel-name regex:RE] [--launch-count N] --log-file F CMD`` in a child process (own
    process group, killed after ``timeout_s`` seconds), parses the CSV that ncu writes to
    ``F`` (:func:`parse_ncu_csv`: one row per launch; the units row and thousands
    separators are handled) and aggregates the launches per kernel
    (:func:`aggregate_launches`: counters summed, ratios averaged).  ``--log-file`` keeps
    the program's own output out of the CSV.

    A requested metric that ncu reports as ``n/a`` is absent from
    :attr:`KernelProfile.metrics` (listed in ``missing``).  If ncu refuses metric names it
    does not know (an ``==ERROR==`` line naming them) and profiles nothing, the run is
    repeated once without them.

    Args:
        cmd: the program and its arguments.
        kernel_regex: only kernels whose name matches (``--kernel-name regex:...``; the
            ``regex:`` prefix is added when missing); ``None``: every kernel.
        metrics: ncu metric names (default :data:`DEFAULT_METRICS`).
        timeout_s: wall-clock limit of the whole ncu run, seconds.
        launch_count: at most this many launches are profiled (``--launch-count``).
        cwd: working directory of the program.
        ncu: ncu to use (default :func:`find_ncu`).

    Returns:
        The kernels profiled, in order of first launch (at least one).

    Raises:
        ToolchainError: ncu is missing or cannot be started.
        NcuError: no access to the performance counters (``ERR_NVGPUCTRPERM``), a
            timeout, no kernel profiled, or ncu failed; the message says why.

    Source: Nsight Compute CLI documentation (``--csv``, ``--page raw``,
    ``--print-units``, ``--clock-control``, ``--kernel-name``, ``--launch-count``,
    ``--log-file``).
    """
    ncu_path = find_ncu(ncu)
    if not cmd:
        raise CudaperfError("nothing to profile: empty command")
    wanted = list(dict.fromkeys(metrics))
    dropped: list[str] = []
    for attempt in range(2):
        text, out, rc = _run_ncu(ncu_path, cmd, wanted, kernel_regex, launch_count, timeout_s, cwd)
        both = text + "\n" + out
        if "ERR_NVGPUCTRPERM" in both:
            raise NcuError(
                "ncu cannot read the GPU performance counters (ERR_NVGPUCTRPERM): profiling "
                "needs root or the driver option NVreg_RestrictProfilingToAdminUsers=0",
                "permission",
            )
        if "LibraryNotLoaded" in both or "Failed to load the injection library" in both:
            raise NcuError(
                "ncu could not load its profiling library into the program (LibraryNotLoaded): "
                "the profiler is unavailable here, the program was not at fault",
                "unavailable",
            )
        records = parse_ncu_csv(text) or parse_ncu_csv(out)
        if records:
            profiles = aggregate_launches(records, wanted + dropped)
            return profiles
        bad = [m for m in _unknown_metrics(both, wanted) if m not in dropped]
        if attempt == 0 and bad and len(bad) < len(wanted):
            dropped += bad
            wanted = [m for m in wanted if m not in bad]
            continue
        break
    errors = _tool_lines(both, "==ERROR==")
    if "No kernels were profiled" in both or (rc == 0 and not errors):
        why = "no kernel launch matched" if kernel_regex else "the program launched no kernel"
        raise NcuError(
            f"ncu profiled no kernel: {why} (command: {shlex.join(cmd)})"
            + (f"; {errors[-1]}" if errors else ""),
            "no_kernels",
        )
    tail = errors[-1] if errors else (both.strip().splitlines() or [""])[-1]
    raise NcuError(f"ncu failed (exit status {rc}): {tail}", "failed")


def _run_ncu(
    ncu_path: str,
    cmd: Sequence[str],
    metrics: Sequence[str],
    kernel_regex: str | None,
    launch_count: int | None,
    timeout_s: float,
    cwd: str | Path | None,
) -> tuple[str, str, int]:
    """One ncu run: ``(log-file text, stdout+stderr, exit status)``."""
    with tempfile.TemporaryDirectory(prefix="cudaperf-ncu-") as tmp:
        log = Path(tmp) / "ncu.csv"
        argv = ncu_command(
            ncu_path, cmd, metrics, kernel_regex=kernel_regex, launch_count=launch_count,
            log_file=log,
        )
        try:
            proc = subprocess.Popen(
                argv,
                cwd=str(cwd) if cwd is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=scrubbed_env(),  # it runs the candidate: no secrets
                preexec_fn=CUDA_CHILD_LIMITS.preexec(),
            )
        except OSError as exc:
            raise ToolchainError(f"cannot run ncu ({ncu_path}): {exc}") from None
        try:
            out_b, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_process_group(proc)
            proc.communicate()
            raise NcuError(
                f"ncu did not finish within {timeout_s:g} s and was killed "
                f"(command: {shlex.join(cmd)})",
                "timeout",
            ) from None
        except BaseException:
            kill_process_group(proc)
            proc.wait()
            raise
        text = log.read_text(errors="replace") if log.is_file() else ""
        return text, out_b.decode(errors="replace"), proc.returncode


# ---------------------------------------------------------------------------------------
# Building a program with its own main()
# ---------------------------------------------------------------------------------------

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_MAIN = re.compile(r"(^|[\s;}])(?:int|auto)\s+main\s*\(", re.M)


def has_main(source: str) -> bool:
    """Whether a CUDA source defines ``int main(...)`` (comments ignored)."""
    return _MAIN.search(_COMMENTS.sub(" ", source)) is not None


def build_executable(
    source: str,
    *,
    arch: str = "sm_90",
    include_dir: Path | None = None,
    cache_root: Path | None = None,
    timeout_s: float = 180.0,
    name: str = "<source>",
    nvcc: str | None = None,
) -> Path:
    """Compile a CUDA source that has its own ``main`` into an executable and return it.

    ``nvcc -O3 -arch=<arch> -lineinfo [-I include_dir] -o program program.cu``, cached by
    content hash (source, arch, flags, nvcc version) under ``cache_root`` (default: the
    ``exe`` folder next to the build cache, ``~/.cache/cudaperf/exe``).

    Raises:
        CompileError: the source does not compile, or nvcc timed out (one line).
        ToolchainError: nvcc is missing.
    """
    from ..build import cache_key, default_cache_root, find_nvcc, nvcc_version
    from ..build.nvcc import extract_errors
    from .resources import CompileError

    nvcc_path = find_nvcc(nvcc)
    flags = ["-O3", f"-arch={arch}", "-lineinfo"]
    if include_dir is not None:
        flags += ["-I", str(include_dir)]
    key = cache_key(source, arch, ["executable", *flags], nvcc_version(nvcc_path))
    root = Path(cache_root) if cache_root is not None else default_cache_root().parent / "exe"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    exe = final / "program"
    if exe.is_file():
        return exe
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    try:
        (tmp / "program.cu").write_text(source)
        argv = [nvcc_path, *flags, "-o", "program", "program.cu"]
        try:
            proc = subprocess.Popen(
                argv, cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, env=scrubbed_env(),
                preexec_fn=NVCC_LIMITS.preexec(),
            )
        except OSError as exc:
            raise ToolchainError(f"cannot run nvcc ({nvcc_path}): {exc}") from None
        try:
            out_b, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_process_group(proc)
            proc.communicate()
            raise CompileError(f"{name}: nvcc timed out after {timeout_s:g} s") from None
        log = out_b.decode(errors="replace")
        if proc.returncode != 0 or not (tmp / "program").is_file():
            first = next(
                (ln.strip() for ln in extract_errors(log, own=("program.cu",)).splitlines() if ln.strip()), ""
            )
            first = first.replace("program.cu", Path(name).name)
            raise CompileError(
                f"{name} does not compile as a program: {first}" if first
                else f"{name} does not compile as a program"
            )
        try:
            os.rename(tmp, final)
        except OSError:  # built concurrently: use the other one
            if exe.is_file():
                return exe
            return tmp / "program"
        return exe
    finally:
        if tmp.exists() and tmp != final:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Measured values -> structural metrics
# ---------------------------------------------------------------------------------------


def _get_all(prof: KernelProfile, names: Sequence[str]) -> list[float] | None:
    vals = [prof.get(n) for n in names]
    if any(v is None for v in vals):
        return None
    return vals  # type: ignore[return-value]


def _keep_static(m: Metric, prof: KernelProfile, names: Sequence[str], why: str = "") -> None:
    """The measured value is not available: keep the static value and score, with a note."""
    absent = [n for n in names if prof.get(n) is None]
    m.details["measured_missing"] = absent
    note = why or (
        "ncu reported no value for " + ", ".join(absent) if absent else "not measurable"
    )
    m.reason = f"{m.reason} (not measured: {note}; static value kept)"


def _set_measured(
    m: Metric,
    value: float | None,
    score: float | None,
    reason: str,
    source: str,
    *,
    unit: str = "",
    details: Mapping | None = None,
    status: str = "ok",
) -> None:
    m.details["static"] = {
        "value": m.static,
        "score": m.score,
        "status": m.status,
        "reason": m.reason,
    }
    if details:
        m.details["measured"] = dict(details)
    m.measured = value
    m.measured_unit = unit
    m.measured_source = source
    m.score = None if score is None else min(1.0, max(0.0, float(score)))
    m.status = status
    m.reason = "measured: " + reason
    if m.score is not None and m.score >= 0.995:
        m.hint = ""


def _measure_coalescing(m: Metric, prof: KernelProfile) -> None:
    names = (G_LD_SECTORS, G_LD_REQUESTS, G_ST_SECTORS, G_ST_REQUESTS)
    vals = _get_all(prof, names)
    if vals is None:
        return _keep_static(m, prof, names)
    s_ld, r_ld, s_st, r_st = vals
    req = r_ld + r_st
    if req <= 0:
        return _keep_static(m, prof, names, "no global load/store requests executed")
    sectors = s_ld + s_st
    spr = sectors / req
    e_ld, e_st = prof.get(G_LD_EFF), prof.get(G_ST_EFF)
    det = {
        "sectors_per_request_ld": s_ld / r_ld if r_ld else None,
        "sectors_per_request_st": s_st / r_st if r_st else None,
        "sectors": sectors,
        "requests": req,
        "load_bytes_used_pct": e_ld,
        "store_bytes_used_pct": e_st,
    }
    src = f"ncu {G_LD_SECTORS} + _op_st / {G_LD_REQUESTS} + _op_st"
    if (s_ld == 0 or e_ld is not None) and (s_st == 0 or e_st is not None):
        ideal = (s_ld * (e_ld or 0.0) + s_st * (e_st or 0.0)) / 100.0
        ratio = sectors / ideal if ideal > 0 else 1.0
        used = 100.0 * ideal / sectors if sectors else 100.0
        how = f"{used:.0f}% of the fetched sector bytes are used ({ratio:.2f}x the needed sectors)"
        src += f"; needed sectors from {G_LD_EFF} / _op_st"
    else:
        ideal_spr = float(m.details.get("ideal_sectors_per_request") or 4.0)
        ratio = spr / ideal_spr
        how = f"{ratio:.2f}x the {ideal_spr:.1f} ideal sectors/request of the static element sizes"
        src += "; ideal sectors/request from the static analysis"
    det["sector_ratio"] = ratio
    parts = []
    if r_ld:
        parts.append(f"loads {s_ld / r_ld:.1f}")
    if r_st:
        parts.append(f"stores {s_st / r_st:.1f}")
    reason = f"{spr:.1f} sectors/request ({', '.join(parts)}); {how}"
    _set_measured(m, spr, coalescing_score(ratio), reason, src, details=det)


def _measure_occupancy(m: Metric, prof: KernelProfile, p: ScoreParams) -> None:
    occ = prof.get(OCCUPANCY)
    if occ is None:
        return _keep_static(m, prof, (OCCUPANCY,))
    reason = f"{occ:.0f}% achieved occupancy (mean active warps per SM over active cycles)"
    if m.static is not None:
        reason += f"; {m.static:.0f}% theoretical"
        if occ < 0.8 * m.static:
            reason += " (short or few blocks, a partial last wave, or imbalance)"
    _set_measured(
        m, occ, occupancy_score(occ / 100.0, p.occupancy_tau), reason, f"ncu {OCCUPANCY}"
    )


def _measure_intensity(m: Metric, prof: KernelProfile, spec: GPUSpec) -> None:
    rd, wr = prof.get(DRAM_READ), prof.get(DRAM_WRITE)
    got = {op: prof.get(name) for op, name in FLOP_METRICS.items()}
    if rd is None or wr is None or all(v is None for v in got.values()):
        return _keep_static(m, prof, (DRAM_READ, DRAM_WRITE, *FLOP_METRICS.values()))
    flops = {"fp64": 0.0, "fp32": 0.0}
    for op, v in got.items():
        dt, n = FLOP_OPS[op]
        flops[dt] += n * (v or 0.0)
    total = flops["fp64"] + flops["fp32"]
    nbytes = rd + wr
    det = {
        "flops": flops,
        "dram_bytes_read": rd,
        "dram_bytes_write": wr,
        "flop_metrics_missing": [FLOP_METRICS[op] for op, v in got.items() if v is None],
    }
    src = (
        "ncu smsp__sass_thread_inst_executed_op_{d,f}{add,mul,fma}_pred_on.sum "
        f"/ ({DRAM_READ} + {DRAM_WRITE})"
    )
    if total == 0:
        if m.details.get("dtype") == "fp16":
            return _keep_static(m, prof, (), "half-precision FLOPs are not in the measured set")
        reason = (
            f"no fp32/fp64 FLOPs executed, {nbytes / 1e6:.1f} MB DRAM traffic: "
            "data movement only"
        )
        return _set_measured(m, 0.0, None, reason, src, details=det, status="n/a")
    dtype = "fp64" if flops["fp64"] >= flops["fp32"] else "fp32"
    peak = spec.peak_flops_for(dtype)
    ridge = peak / spec.dram_bandwidth
    ai = total / nbytes if nbytes > 0 else math.inf
    det.update({"dtype": dtype, "ridge_flop_per_byte": ridge})
    if math.isinf(ai):
        reason = f"{total:.3g} FLOPs ({dtype}) and no DRAM traffic: compute-bound"
    elif ai >= ridge:
        reason = (
            f"{ai:.2f} FLOP per DRAM byte ({dtype}) >= ridge {ridge:.1f} on {spec.name}: "
            "compute-bound"
        )
    else:
        reason = (
            f"{ai:.2f} FLOP per DRAM byte ({dtype}) < ridge {ridge:.1f} on {spec.name}: "
            f"memory-bound ({total:.3g} FLOP over {nbytes / 1e6:.1f} MB)"
        )
    _set_measured(m, ai, intensity_score(ai, ridge), reason, src, details=det)


def barrier_stall_factor(stall_fraction: float, k: float = DEFAULT_PARAMS.barrier_k) -> float:
    """Measured barrier factor ``1 / (1 + k * s / (1 - s))`` for a barrier-stall share
    ``s`` of the active warp cycles: the static density factor's form
    ``1 / (1 + k * d)`` with ``d`` = stalled / not-stalled cycles; ``1 - s`` for ``k = 1``."""
    s = min(max(stall_fraction, 0.0), 1.0)
    if s >= 1.0:
        return 0.0
    return 1.0 / (1.0 + k * s / (1.0 - s))


def _measure_sync(m: Metric, prof: KernelProfile, p: ScoreParams) -> None:
    stall = prof.get(BARRIER_STALL)
    if stall is None:
        return _keep_static(m, prof, (BARRIER_STALL,))
    f_bar = barrier_stall_factor(stall / 100.0, p.barrier_k)
    fac = dict(m.details.get("factors") or {})
    others = fac.get("hazard", 1.0) * fac.get("atomics", 1.0) * fac.get("host_syncs", 1.0)
    reason = f"{stall:.1f}% of active warp cycles stalled at block barriers (factor {f_bar:.2f})"
    kept = [k for k in ("hazard", "atomics", "host_syncs") if fac.get(k, 1.0) < 0.999]
    if kept:
        why = [s for s in m.reason.split("; ") if s.startswith(("hazard", "global ", "host "))]
        reason += f"; static {', '.join(kept)} factor(s) kept: " + "; ".join(why or [m.reason])
    _set_measured(
        m,
        stall,
        others * f_bar,
        reason,
        f"ncu {BARRIER_STALL} (hazard, atomic and host-sync factors from the static analysis)",
        unit="% barrier stall",
        details={
            "barrier_factor": f_bar,
            "static_factors_kept": {
                k: fac.get(k, 1.0) for k in ("hazard", "atomics", "host_syncs")
            },
        },
    )


def _measure_divergence(m: Metric, prof: KernelProfile) -> None:
    on, act = prof.get(THREADS_PRED_ON), prof.get(THREADS_ACTIVE)
    r = on if on is not None else act
    if r is None:
        return _keep_static(m, prof, (THREADS_PRED_ON, THREADS_ACTIVE))
    eff = min(max(r / 32.0, 0.0), 1.0)
    which = "active and predicated-on" if on is not None else "active"
    reason = f"{r:.1f} of 32 lanes ({which}) per executed warp instruction"
    if on is not None and act is not None:
        reason += f"; {act:.1f} active"
    src = f"ncu {THREADS_PRED_ON if on is not None else THREADS_ACTIVE} / 32"
    _set_measured(m, eff * 100.0, eff, reason, src,
                  details={"threads_pred_on": on, "threads_active": act})


def _measure_shared(m: Metric, prof: KernelProfile) -> None:
    names = (SH_LD_WAVEFRONTS, SH_ST_WAVEFRONTS, SH_LD_CONFLICTS, SH_ST_CONFLICTS)
    vals = _get_all(prof, names)
    if vals is None:
        if m.status == "n/a":
            return None
        return _keep_static(m, prof, names)
    wf_ld, wf_st, bc_ld, bc_st = vals
    wf = wf_ld + wf_st
    if wf <= 0:
        if m.status == "n/a":
            return None
        return _keep_static(m, prof, (), "no shared-memory wavefronts executed")
    i_ld, i_st = prof.get(SH_LD_INST), prof.get(SH_ST_INST)
    inst = (i_ld or 0.0) + (i_st or 0.0)
    ideal = max(wf - (bc_ld + bc_st), inst, 1.0)
    ways = wf / ideal
    if i_ld is not None and i_st is not None:
        reuse = i_ld / i_st if i_st else math.inf
        f_reuse = min(1.0, 0.5 + reuse) if i_st else 1.0
        reuse_src = "measured shared load/store instructions"
    else:
        reuse = m.details.get("reads_per_write")
        f_reuse = min(1.0, 0.5 + reuse) if reuse is not None else 1.0
        reuse_src = "static reads per write"
    reason = (
        f"{ways:.2f}x the ideal shared-memory wavefronts "
        f"({bc_ld + bc_st:.3g} bank-conflict wavefronts of {wf:.3g})"
    )
    if f_reuse < 1.0:
        reason += f"; shared data read {reuse:.2f}x per write (little use)"
    _set_measured(
        m,
        ways,
        bank_conflict_score(ways) * f_reuse,
        reason,
        f"ncu {SH_LD_WAVEFRONTS} + _op_st over (wavefronts - "
        f"{SH_LD_CONFLICTS} - _op_st); reuse from {reuse_src}",
        details={
            "wavefronts": wf,
            "bank_conflicts": bc_ld + bc_st,
            "ideal_wavefronts": ideal,
            "shared_ld_inst": i_ld,
            "shared_st_inst": i_st,
            "reuse_factor": f_reuse,
        },
    )


def _measure_load_balance(m: Metric, prof: KernelProfile) -> None:
    w = prof.get(WAVES)
    if w is None:
        return _keep_static(m, prof, (WAVES,))
    eff = w / math.ceil(w) if w >= 1 else max(w, 0.0)
    idle = float(m.details.get("idle_thread_fraction") or 0.0)
    reason = f"{w:.2f} waves (ncu): {eff * 100:.0f}% wave efficiency"
    if idle:
        reason += f"; {idle * 100:.1f}% of launched threads idle (static)"
    _set_measured(m, w, eff * (1.0 - idle), reason, f"ncu {WAVES} (idle threads: static)",
                  details={"wave_efficiency": eff})


def _measure_registers(m: Metric, prof: KernelProfile) -> None:
    regs = prof.get(REGISTERS)
    if regs is None:
        return _keep_static(m, prof, (REGISTERS,))
    ld, st = prof.get(LOCAL_LD_SECTORS), prof.get(LOCAL_ST_SECTORS)
    local = None if ld is None or st is None else (ld + st) * 32.0
    score = m.score
    reason = f"{regs:.0f} registers/thread"
    if local is not None:
        reason += f", {local / 1e6:.3g} MB local-memory traffic (spills/local arrays)"
        if score is None and local == 0:
            score = 1.0
    reason += "; score from the ptxas spill report" if m.score is not None else ""
    _set_measured(
        m, regs, score, reason,
        f"ncu {REGISTERS}; local traffic {LOCAL_LD_SECTORS} + _op_st",
        details={"local_bytes": local},
        status="ok" if score is not None else m.status,
    )


def _apply_kernel(k: KernelReport, prof: KernelProfile, p: ScoreParams, spec: GPUSpec) -> None:
    k.measured_launches = prof.launches
    k.measured_duration_ns = prof.mean_duration_ns
    for m in k.metrics:
        if m.key == "coalescing":
            _measure_coalescing(m, prof)
        elif m.key == "occupancy":
            _measure_occupancy(m, prof, p)
        elif m.key == "arithmetic_intensity":
            _measure_intensity(m, prof, spec)
        elif m.key == "synchronization":
            _measure_sync(m, prof, p)
        elif m.key == "divergence":
            _measure_divergence(m, prof)
        elif m.key == "shared_memory":
            _measure_shared(m, prof)
        elif m.key == "load_balance":
            _measure_load_balance(m, prof)
        elif m.key == "register_pressure":
            _measure_registers(m, prof)
    k.score, k.coverage = kernel_total(k.metrics)
    t = prof.mean_duration_ns
    k.notes.append(
        f"measured with Nsight Compute: {prof.launches} launch(es)"
        + (f", {t / 1e3:.1f} us per launch (gpu__time_duration)" if t is not None else "")
    )


def apply_measurements(
    report: StructureReport,
    profiles: Sequence[KernelProfile],
    *,
    params: ScoreParams | None = None,
    gpu: str | GPUSpec | None = None,
) -> StructureReport:
    """A copy of ``report`` with the Nsight Compute measurements of ``profiles``.

    For each kernel of the report with a profile of the same name, every metric gets
    ``measured``, ``measured_source`` (the ncu metrics) and a score computed from the
    measured value with the same score function as the static side; the reason starts
    with ``"measured: "`` and the static value, score and reason stay in
    ``details["static"]``.  A metric whose ncu values are missing (``n/a``) keeps its
    static value and score, with a note in its reason.  Totals and coverage are
    recomputed; ``measured_launches`` / ``measured_duration_ns`` are set.

    Args:
        report: a static report (:func:`~.score.analyze_source`).
        profiles: from :func:`profile_executable`.
        params: penalty-curve parameters (default :class:`~.score.ScoreParams`).
        gpu: GPU of the roofline ridge (default: the report's GPU).
    """
    p = params or DEFAULT_PARAMS
    spec = gpu_spec(gpu or report.gpu)
    out = copy.deepcopy(report)
    by_name: dict[str, KernelProfile] = {}
    for prof in profiles:
        by_name.setdefault(prof.name, prof)
    for k in out.kernels:
        prof = by_name.get(k.name)
        if prof is None:
            k.notes.append("not measured: no profiled launch of this kernel (static values only)")
            continue
        _apply_kernel(k, prof, p, spec)
    names = {k.name for k in out.kernels}
    extra = [prof.name for prof in profiles if prof.name not in names]
    if extra:
        out.notes.append("profiled kernels not defined in this file: " + ", ".join(extra))
    if any(k.measured_launches for k in out.kernels):
        out.notes.append(
            "measured metrics: Nsight Compute (ncu --clock-control none); scores use the "
            "static score functions on the measured values"
        )
    return out


def measure_report(
    report: StructureReport,
    path: str | Path,
    *,
    run: str | Sequence[str] | None = None,
    arch: str = "sm_90",
    timeout_s: float = 600.0,
    launch_count: int | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    params: ScoreParams | None = None,
) -> tuple[StructureReport, list[KernelProfile]]:
    """Profile the kernels of the CUDA file ``path`` and apply the measurements.

    The kernels must run: ``run`` (a command line, split like a shell does, or an argv
    list) is profiled as given; without it the file must define ``main()``: it is built
    with :func:`build_executable` and run in the file's folder.  Only the file's kernels
    are profiled (``--kernel-name``), at most ``launch_count`` launches (default
    :data:`DEFAULT_LAUNCHES_PER_KERNEL` per kernel of the file).

    Raises:
        CudaperfError: no ``run`` and no ``main()`` (exit code 2).
        CompileError, ToolchainError, NcuError: see :func:`build_executable` and
            :func:`profile_executable`.
    """
    path = Path(path)
    cwd: Path | None = None
    if run:
        cmd = shlex.split(run) if isinstance(run, str) else list(run)
        if not cmd:
            raise CudaperfError("--run: empty command")
    else:
        source = path.read_text(encoding="utf-8", errors="replace")
        if not has_main(source):
            raise CudaperfError(
                f"{path} has no main(), so its kernels cannot be run: pass --run 'CMD' "
                "with a program that launches them"
            )
        exe = build_executable(
            source, arch=arch, include_dir=path.resolve().parent, name=str(path)
        )
        cmd, cwd = [str(exe)], path.resolve().parent
    names = [k.name for k in report.kernels]
    if launch_count is None:
        launch_count = DEFAULT_LAUNCHES_PER_KERNEL * max(1, len(names))
    t0 = time.monotonic()
    profiles = profile_executable(
        cmd,
        kernel_regex=kernel_name_regex(names) if names else None,
        metrics=metrics,
        timeout_s=timeout_s,
        launch_count=launch_count,
        cwd=cwd,
    )
    measured = apply_measurements(report, profiles, params=params)
    measured.notes.append(
        f"profiled: {shlex.join(cmd)} ({time.monotonic() - t0:.1f} s under ncu)"
    )
    return measured, profiles


__all__ = [
    "DEFAULT_LAUNCHES_PER_KERNEL",
    "DEFAULT_METRICS",
    "NCU_METRICS",
    "KernelProfile",
    "LaunchRecord",
    "NcuError",
    "NcuMetric",
    "aggregate_launches",
    "apply_measurements",
    "barrier_stall_factor",
    "build_executable",
    "find_ncu",
    "has_main",
    "kernel_base_name",
    "kernel_name_regex",
    "measure_report",
    "ncu_command",
    "parse_ncu_csv",
    "parse_number",
    "profile_executable",
    "unit_scale",
]
