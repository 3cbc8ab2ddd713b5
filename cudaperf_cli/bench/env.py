"""The machine a benchmark ran on, as read at its start (recorded in every report).

GPU facts come from the evaluate stage's device probe (a child process: name, driver, the
driver's CUDA version, SM count, clocks in kHz) and from ``nvidia-smi --query-gpu`` where it
exists (current, maximum and application clocks in MHz, performance state, persistence
mode, power limit in W, temperature in °C); a value that cannot be read is None, never a
guess.  ``nvcc --version``, the C compiler's first ``--version`` line and the host CPU's
model are recorded too: the CPU runs the speedups' baseline.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from typing import Any

#: ``nvidia-smi --query-gpu`` field -> report key (clocks in MHz, power in W, temp in °C).
SMI_FIELDS = {
    "name": "name",
    "uuid": "uuid",
    "driver_version": "driver_version",
    "clocks.sm": "sm_mhz",
    "clocks.mem": "mem_mhz",
    "clocks.max.sm": "max_sm_mhz",
    "clocks.max.mem": "max_mem_mhz",
    "clocks.applications.graphics": "app_sm_mhz",
    "clocks.applications.memory": "app_mem_mhz",
    "pstate": "pstate",
    "persistence_mode": "persistence_mode",
    "power.limit": "power_limit_w",
    "temperature.gpu": "temperature_c",
}
#: Clock keys compared by ``bench compare`` (current clocks vary with load: recorded only).
COMPARED_CLOCKS = ("max_sm_mhz", "max_mem_mhz", "app_sm_mhz", "app_mem_mhz")


def _run(cmd: list[str], timeout_s: float = 20.0) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _smi_value(text: str) -> Any:
    text = text.strip()
    if not text or text.startswith("[") or text in {"N/A", "Not Supported"}:
        return None  # "[N/A]", "[Not Supported]", "[Unknown Error]"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def smi_device_id() -> str:
    """The ``nvidia-smi -i`` id of this process's CUDA device 0 (the first entry of
    ``$CUDA_VISIBLE_DEVICES``, else ``0``)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[0] if visible else "0"


def nvidia_smi(device: str | None = None) -> dict[str, Any] | None:
    """``nvidia-smi --query-gpu`` fields of one GPU (keys of :data:`SMI_FIELDS`' values), or
    None without ``nvidia-smi``.  Fields this driver does not know are queried one by one
    and left None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    dev = device or smi_device_id()
    base = [smi, "-i", dev, "--format=csv,noheader,nounits"]
    proc = _run([*base, "--query-gpu=" + ",".join(SMI_FIELDS)])
    if proc is not None and proc.returncode == 0 and proc.stdout.strip():
        values = proc.stdout.strip().splitlines()[0].split(",")
        if len(values) == len(SMI_FIELDS):
            return {key: _smi_value(v) for key, v in zip(SMI_FIELDS.values(), values)}
    out: dict[str, Any] = {}
    for field, key in SMI_FIELDS.items():  # an older driver: unknown fields fail the query
        one = _run([*base, f"--query-gpu={field}"])
        ok = one is not None and one.returncode == 0 and one.stdout.strip()
        out[key] = _smi_value(one.stdout.strip().splitlines()[0]) if ok else None
    return out if any(v is not None for v in out.values()) else None


def _first_line(cmd: list[str], must_contain: str = "") -> str | None:
    proc = _run(cmd)
    if proc is None or proc.returncode != 0:
        return None
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    if must_contain:
        lines = [ln for ln in lines if must_contain in ln] or lines
    return lines[0] if lines else None


def cpu_model() -> str | None:
    """The host CPU's model name (``/proc/cpuinfo``; else :func:`platform.processor`)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def timing_method() -> dict[str, Any]:
    """How candidates are timed (the evaluate stage's defaults; docs/evaluation.md)."""
    from dataclasses import asdict

    from cudaperf_cli.evaluate.job import DEFAULT_BASELINE, TimingSettings

    try:
        from cudaperf_cli.agent.optimize import BASELINE_REPS
    except ImportError:  # pragma: no cover - the constant moved
        BASELINE_REPS = None
    return {
        "gpu": "CUDA events around each call on the legacy default stream; median and IQR",
        "settings": asdict(TimingSettings()),
        "cpu_baseline": DEFAULT_BASELINE,
        "cpu_baseline_reps": BASELINE_REPS,
    }


def collect_env(*, probe: bool = True) -> dict[str, Any]:
    """Facts about this machine for a report (JSON-ready).

    Args:
        probe: run the device probe (a child process, up to 60 s); False records the GPU
            as not probed.

    Returns:
        ``{"gpu": {"available", "name", "driver_version", "cuda_version" (the driver's),
        "arch", "sm_count", "memory_total_bytes", "clock_khz", "memory_clock_khz",
        "reason"}, "clocks": nvidia_smi() or None, "nvcc", "cc", "cpu", "cpu_count",
        "python", "platform", "cudaperf_version", "timing_method", "cuda_visible_devices",
        "gpu_lock"}``.
    """
    from cudaperf_cli import __version__
    from cudaperf_cli.evaluate.gpu_lock import lock_enabled, lock_path

    info: dict[str, Any] = {"available": False, "reason": "not probed"}
    if probe:
        from cudaperf_cli.evaluate import probe_device

        info = probe_device()
    gpu = {
        "available": bool(info.get("available")),
        "name": info.get("name"),
        "driver_version": info.get("driver_version"),
        "cuda_version": info.get("driver_cuda_version"),
        "arch": info.get("arch"),
        "sm_count": info.get("sm_count"),
        "memory_total_bytes": info.get("memory_total_bytes"),
        "clock_khz": info.get("clock_khz"),
        "memory_clock_khz": info.get("memory_clock_khz"),
        "reason": None if info.get("available") else info.get("reason"),
    }
    smi = nvidia_smi() if probe else None
    if smi is not None:  # the probe has no name without cuda.core; nvidia-smi may
        gpu["name"] = gpu["name"] or smi.get("name")
        gpu["driver_version"] = gpu["driver_version"] or smi.get("driver_version")
    try:
        from cudaperf_cli.build import find_nvcc

        nvcc_path: str | None = find_nvcc()
    except Exception:  # noqa: BLE001 - a missing nvcc is a recorded fact here
        nvcc_path = None
    cc = (os.environ.get("CC") or "cc").split()[0]
    return {
        "gpu": gpu,
        "clocks": smi,
        "nvcc": _first_line([nvcc_path, "--version"], "release") if nvcc_path else None,
        "cc": _first_line([cc, "--version"]),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cudaperf_version": __version__,
        "timing_method": timing_method(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpu_lock": str(lock_path()) if lock_enabled() else None,
    }


def env_differences(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[str], bool]:
    """What differs between two reports' environments.

    Returns:
        (one warning line per difference: GPU, driver, CUDA, nvcc, compared clocks, timing
        method, CPU, cudaperf version; whether the GPU *name* differs, which makes the
        speedups incomparable).
    """
    ga, gb = a.get("gpu") or {}, b.get("gpu") or {}
    lines: list[str] = []
    gpu_differs = ga.get("name") != gb.get("name")

    def diff(label: str, x: Any, y: Any) -> None:
        if x == y:
            return
        if isinstance(x, dict) and isinstance(y, dict):  # name the keys, not two long dicts
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            x = {k: x.get(k) for k in keys}
            y = {k: y.get(k) for k in keys}
        lines.append(f"{label} differs: {x!r} vs {y!r}")

    diff("GPU", ga.get("name"), gb.get("name"))
    diff("driver", ga.get("driver_version"), gb.get("driver_version"))
    diff("CUDA (driver)", ga.get("cuda_version"), gb.get("cuda_version"))
    diff("nvcc", a.get("nvcc"), b.get("nvcc"))
    ca, cb = a.get("clocks") or {}, b.get("clocks") or {}
    for key in COMPARED_CLOCKS:
        diff(f"clock {key}", ca.get(key), cb.get(key))
    diff("timing method", a.get("timing_method"), b.get("timing_method"))
    diff("CPU (runs the baseline)", a.get("cpu"), b.get("cpu"))
    diff("cudaperf version", a.get("cudaperf_version"), b.get("cudaperf_version"))
    return lines, gpu_differs


__all__ = ["COMPARED_CLOCKS", "collect_env", "cpu_model", "env_differences", "nvidia_smi", "timing_method"]
