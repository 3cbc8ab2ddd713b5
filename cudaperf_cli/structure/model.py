"""Data model of the structural report (plain dataclasses, JSON through ``to_json``).

Every metric carries a ``static`` value (from source analysis, the ptxas report and the
occupancy calculator) and a ``measured`` value (from Nsight Compute, filled in by a later
stage); :attr:`Metric.value` prefers the measured one.  Scores are in [0, 1] (1 = ideal);
``score is None`` means the metric could not be determined and is left out of the total
(its weight is reported as missing coverage), never silently dropped.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..core import CudaperfError, to_jsonable

#: Metric keys, in report order.
METRIC_KEYS = (
    "coalescing",
    "occupancy",
    "arithmetic_intensity",
    "synchronization",
    "divergence",
    "shared_memory",
    "load_balance",
    "register_pressure",
)

#: Metric key -> display name.
METRIC_NAMES = {
    "coalescing": "memory coalescing",
    "occupancy": "occupancy",
    "arithmetic_intensity": "arithmetic intensity",
    "synchronization": "synchronization",
    "divergence": "divergence",
    "shared_memory": "shared memory",
    "load_balance": "load balance",
    "register_pressure": "register pressure",
}


@dataclass(frozen=True)
class LaunchConfig:
    """A kernel launch configuration.

    Attributes:
        grid: grid dimensions in blocks ``(x, y, z)``; ``None`` when unknown.
        block: block dimensions in threads ``(x, y, z)``; ``None`` when unknown.
        dynamic_smem: dynamic shared memory per block, bytes (third ``<<< >>>`` argument);
            ``None`` when unknown.
        source: where it came from: ``"cli"``, ``"host code"``, ``"launch_bounds"``.
    """

    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    dynamic_smem: int | None = None
    source: str = "cli"

    @property
    def block_threads(self) -> int | None:
        """Threads per block (``None`` if the block is unknown)."""
        return None if self.block is None else self.block[0] * self.block[1] * self.block[2]

    @property
    def grid_blocks(self) -> int | None:
        """Blocks in the grid (``None`` if the grid is unknown)."""
        return None if self.grid is None else self.grid[0] * self.grid[1] * self.grid[2]

    @classmethod
    def parse(cls, text: str, source: str = "cli") -> "LaunchConfig":
        """Parse ``--launch`` text: ``GRID,BLOCK[,SMEM]`` where each of GRID and BLOCK is
        ``N`` or ``XxY`` or ``XxYxZ`` (e.g. ``1024,256`` or ``64x64,16x16``).

        Raises:
            CudaperfError: malformed text.
        """
        parts = [p.strip() for p in text.replace(";", ",").split(",")]
        if len(parts) not in (2, 3) or not all(parts[:2]):
            raise CudaperfError(
                f"bad --launch '{text}': expected GRID,BLOCK such as 1024,256 or 64x64,16x16"
            )

        def dims(p: str) -> tuple[int, int, int]:
            items = [s for s in re.split(r"[xX*]", p) if s.strip()]
            try:
                vals = [int(s) for s in items]
            except ValueError:
                raise CudaperfError(f"bad --launch dimension '{p}' in '{text}'") from None
            if not 1 <= len(vals) <= 3 or any(v <= 0 for v in vals):
                raise CudaperfError(f"bad --launch dimension '{p}' in '{text}'")
            vals += [1] * (3 - len(vals))
            return (vals[0], vals[1], vals[2])

        smem = None
        if len(parts) == 3:
            try:
                smem = int(parts[2])
            except ValueError:
                raise CudaperfError(f"bad --launch shared-memory bytes '{parts[2]}'") from None
            if smem < 0:
                raise CudaperfError(f"bad --launch shared-memory bytes '{parts[2]}': negative")
        grid, block = dims(parts[0]), dims(parts[1])
        # CUDA's launch limits (every architecture since sm_30; CUDA C++ Programming Guide,
        # "Technical Specifications per Compute Capability")
        if grid[0] > 2**31 - 1 or grid[1] > 65535 or grid[2] > 65535:
            raise CudaperfError(f"bad --launch grid '{parts[0]}': CUDA allows at most 2147483647 x 65535 x 65535 blocks")
        if block[0] > 1024 or block[1] > 1024 or block[2] > 64 or block[0] * block[1] * block[2] > 1024:
            raise CudaperfError(f"bad --launch block '{parts[1]}': CUDA allows at most 1024 threads "
                                "(x, y <= 1024, z <= 64)")
        return cls(grid=grid, block=block, dynamic_smem=smem, source=source)

    def describe(self) -> str:
        """``<<<grid, block[, smem]>>> (source)`` for messages."""

        def d(t: tuple[int, int, int] | None) -> str:
            if t is None:
                return "?"
            while len(t) > 1 and t[-1] == 1:
                t = t[:-1]  # type: ignore[assignment]
            return "x".join(str(v) for v in t)

        s = f"<<<{d(self.grid)}, {d(self.block)}"
        if self.dynamic_smem:
            s += f", {self.dynamic_smem}"
        return s + f">>> ({self.source})"


@dataclass
class Metric:
    """One structural metric of one kernel.

    Attributes:
        key: one of :data:`METRIC_KEYS`.
        name: display name.
        unit: unit of ``static`` / ``measured``.
        static: value from static analysis (source, ptxas, occupancy calculator).
        measured: value measured on a GPU (Nsight Compute); ``None`` until measured.
        score: in [0, 1], 1 = ideal; ``None`` = unknown (excluded from the total).
        weight: its weight in the total (from :class:`~.score.ScoreWeights`).
        status: ``"ok"``, ``"estimate"`` (scored from an upper bound / assumption),
            ``"unknown"`` (not scored; ``reason`` says why) or ``"n/a"`` (does not apply,
            e.g. shared-memory metric of a kernel without shared memory).
        reason: one line: what the value is and why.
        hint: one line: how to improve (empty when nothing to improve).
        source: what the static value comes from.
        measured_source: what the measured value comes from (e.g. an ncu metric name).
        details: structured evidence (per access, per branch...).
        measured_unit: unit of ``measured`` when it differs from ``unit`` (e.g. the
            synchronization metric counts barriers statically but measures the share of
            warp cycles stalled at barriers); empty = ``unit``.
    """

    key: str
    name: str
    unit: str
    static: float | None
    measured: float | None = None
    score: float | None = None
    weight: float = 0.0
    status: str = "ok"
    reason: str = ""
    hint: str = ""
    source: str = ""
    measured_source: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    measured_unit: str = ""

    @property
    def value(self) -> float | None:
        """The measured value when there is one, else the static one."""
        return self.measured if self.measured is not None else self.static

    @property
    def barrier_hazard(self) -> bool:
        """The synchronization metric found a barrier only some threads reach (its hazard
        factor below 1): the kernel's total is capped at this metric's score."""
        factors = (self.details or {}).get("factors") or {}
        return self.key == "synchronization" and factors.get("hazard", 1.0) < 1.0

    @property
    def value_unit(self) -> str:
        """The unit of :attr:`value` (``measured_unit`` for a measured value, if set)."""
        if self.measured is not None and self.measured_unit:
            return self.measured_unit
        return self.unit

    @property
    def loss(self) -> float:
        """``weight * (1 - score)``: how much this metric costs the total (0 if unknown)."""
        if self.score is None:
            return 0.0
        return self.weight * (1.0 - self.score)


@dataclass
class KernelReport:
    """Structural report of one ``__global__`` kernel.

    Attributes:
        name: kernel name.
        line: 1-based line of its definition.
        launch: the launch configuration used (``None``: unknown).
        metrics: the metrics, in :data:`METRIC_KEYS` order.
        score: weighted mean of the known metric scores, in [0, 1].
        coverage: fraction of the total weight whose metric was known (scored).
        notes: assumptions and caveats of the analysis.
        measured_launches: launches profiled with Nsight Compute (0: not measured).
        measured_duration_ns: mean GPU time of one profiled launch, ns
            (``gpu__time_duration.sum``; ``None``: not measured).
    """

    name: str
    line: int
    launch: LaunchConfig | None
    metrics: list[Metric]
    score: float | None
    coverage: float
    notes: list[str] = field(default_factory=list)
    measured_launches: int = 0
    measured_duration_ns: float | None = None

    def metric(self, key: str) -> Metric:
        """The metric with key ``key``."""
        for m in self.metrics:
            if m.key == key:
                return m
        raise KeyError(key)


@dataclass(frozen=True)
class NotAnalysed:
    """A kernel that could not be analysed, with the reason."""

    name: str
    line: int
    reason: str


@dataclass
class HostSync:
    """A host-side synchronisation between two kernel launches.

    Attributes:
        line: 1-based line.
        call: the call (``cudaDeviceSynchronize``...).
        after: the kernel launched before it.
        before: the kernel launched after it (in source order, or the next loop iteration).
        in_loop: it is inside a loop that also launches kernels (paid every iteration).
    """

    line: int
    call: str
    after: str
    before: str
    in_loop: bool = False


@dataclass
class StructureReport:
    """Structural analysis of one CUDA source file.

    Attributes:
        source_name: the file (or ``"<source>"``).
        arch: compute capability the analysis assumes.
        gpu: GPU product of the roofline / wave computation.
        kernels: one report per analysed kernel.
        not_analysed: kernels that could not be analysed, with reasons.
        host_syncs: host synchronisations between launches.
        notes: file-level remarks (no kernels, parse errors in host code...).
    """

    source_name: str
    arch: str
    gpu: str
    kernels: list[KernelReport] = field(default_factory=list)
    not_analysed: list[NotAnalysed] = field(default_factory=list)
    host_syncs: list[HostSync] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float | None:
        """Mean kernel score (``None`` when no kernel was scored)."""
        vals = [k.score for k in self.kernels if k.score is not None]
        return sum(vals) / len(vals) if vals else None

    def kernel(self, name: str) -> KernelReport:
        """The report of kernel ``name``."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (metric ``value`` included, non-finite -> None)."""
        d = to_jsonable(self)
        d["score"] = self.score
        for kd, k in zip(d["kernels"], self.kernels):
            for md, m in zip(kd["metrics"], k.metrics):
                md["value"] = m.value
                md["value_unit"] = m.value_unit
        return _finite(d)

    def to_json(self, indent: int | None = 2) -> str:
        """The report as one JSON document (non-finite numbers become ``null``)."""
        return json.dumps(self.to_dict(), indent=indent)

    def reasons(self, top_k: int = 5) -> list[str]:
        """The ``top_k`` most important one-line improvement hints, most costly first.

        Kernels that could not be analysed come first; then metrics ranked by
        ``weight * (1 - score)`` (what they cost the total).  Metrics without a hint are
        listed only when they score below 0.5.  Each line names the kernel,
        the metric and its score, the reason and, when there is one, the fix.
        """
        out: list[tuple[float, str]] = []
        for na in self.not_analysed:
            out.append((2.0, f"{na.name} (line {na.line}): not analysed: {na.reason}"))
        for k in self.kernels:
            for m in k.metrics:
                if m.score is None or m.score >= 0.995 or (not m.hint and m.score >= 0.5):
                    continue
                line = f"{k.name}: {m.name} {m.score:.2f}: {m.reason}"
                if m.hint:
                    line += f" -> {m.hint}"
                out.append((m.loss, line))
        out.sort(key=lambda t: -t[0])
        return [s for _, s in out[: max(top_k, 0)]]


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


__all__ = [
    "METRIC_KEYS",
    "METRIC_NAMES",
    "HostSync",
    "KernelReport",
    "LaunchConfig",
    "Metric",
    "NotAnalysed",
    "StructureReport",
]
