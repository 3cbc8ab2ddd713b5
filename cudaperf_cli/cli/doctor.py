"""``cudaperf doctor``: what the toolchain and the GPU look like from here.

Exit code 0 when nvcc, a C compiler and a CUDA device are all usable; 4 when only the
device is missing (compile-only work is possible); 3 when a compiler is missing.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from typing import Any


def _tool(cmd: str, version_args: list[str], path: str | None = None) -> dict[str, Any]:
    path = path or shutil.which(cmd)
    if path is None:
        return {"path": None, "version": None, "ok": False}
    try:
        out = subprocess.run(
            [path, *version_args], capture_output=True, text=True, timeout=20, check=False
        )
        lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"path": path, "version": f"failed: {exc}", "ok": False}
    if cmd == "nvcc":  # "Cuda compilation tools, release 13.0, V13.0.88"
        lines = [ln for ln in lines if "release" in ln] or lines
    version = lines[0] if lines else ""
    return {"path": path, "version": version.strip(), "ok": True}


def collect() -> dict[str, Any]:
    """Facts about this machine as a JSON-ready dict: ``nvcc``, ``cc``, ``gpu``, ``driver``,
    ``cuda_core``, ``confinement``, ``compute_sanitizer`` (each with a boolean ``ok``) and
    ``packages``."""
    from cudaperf_cli.build import find_nvcc
    from cudaperf_cli.core import ToolchainError
    from cudaperf_cli.evaluate import device_info

    try:  # where the build stage looks: $CUDAPERF_NVCC, PATH, $CUDA_HOME/bin, ...
        nvcc: str | None = find_nvcc()
    except ToolchainError:
        nvcc = None
    try:  # as the C stages read $CC
        cc = (shlex.split(os.environ.get("CC") or "") or ["cc"])[0]
    except ValueError:
        cc = os.environ.get("CC") or "cc"
    report: dict[str, Any] = {
        "nvcc": _tool("nvcc", ["--version"], nvcc),
        "cc": _tool(cc, ["--version"]),
    }
    gpu = dict(device_info() or {"available": False, "reason": "no CUDA device"})
    gpu["ok"] = bool(gpu.get("available"))  # the key every other check uses
    report["gpu"] = gpu
    report["driver"] = (
        {"ok": True, "version": gpu.get("driver_version"), "cuda_version": gpu.get("driver_cuda_version")}
        if gpu["ok"] else {"ok": False, "version": None, "cuda_version": None, "reason": "not loaded (see gpu)"})
    report["cuda_core"] = _cuda_core()
    report["confinement"] = _confinement()
    report["compute_sanitizer"] = _compute_sanitizer()
    report["packages"] = packages()
    return report


def _compute_sanitizer() -> dict[str, Any]:
    """Whether compute-sanitizer is installed here, for optimize's memory check of new best
    C candidates (evaluate/sanitize.py): ``{"ok", "path", "version", "detail"}``.  Missing
    is not an error (the check is skipped with a warning)."""
    from cudaperf_cli.evaluate.sanitize import SANITIZER_ENV, find_compute_sanitizer, sanitizer_version

    path = find_compute_sanitizer()
    if path is None:
        return {"ok": False, "path": None, "version": None,
                "detail": "not found (PATH, beside nvcc, $CUDA_HOME, /usr/local/cuda, "
                          f"${SANITIZER_ENV}): optimize skips its memory check of new best C "
                          "candidates, with a warning"}
    version = sanitizer_version(path)
    return {"ok": version is not None, "path": path, "version": version,
            "detail": f"{path}  {version}" if version else f"{path}: does not run (--version failed)"}


#: The optional Python packages: what needs each, and the extra that installs it (None:
#: torch, installed by itself, its CPU build on a machine without a GPU).
OPTIONAL_PACKAGES: dict[str, tuple[str, str | None]] = {
    "torch": ("PyTorch problems", None),
    "openai": ("--policy openai", "llm"),
    "jinja2": ("model policies' prompts", "llm"),
    "transformers": ("--policy transformers, train ranker --kind lm", "train"),
    "trl": ("train policy", "train"),
    "peft": ("train policy with LoRA", "train"),
    "vllm": ("--policy vllm", "vllm"),
    "GitPython": ("cudaperf port", "port"),
}


def packages() -> dict[str, dict[str, Any]]:
    """Installed versions of :data:`OPTIONAL_PACKAGES`, read from the package metadata (no
    import: torch alone takes seconds): ``{name: {"ok": installed, "version": str | None,
    "for": what needs it and the pip command}}``; torch's version carries its build
    (``2.13.0+cpu``, ``2.11.0+cu130``)."""
    from importlib import metadata

    from cudaperf_cli.core import TORCH_INSTALL_HINT, install_hint

    out: dict[str, dict[str, Any]] = {}
    for name, (why, extra) in OPTIONAL_PACKAGES.items():
        try:
            version: str | None = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = None
        how = install_hint(extra) if extra else TORCH_INSTALL_HINT
        out[name] = {"ok": version is not None, "version": version, "for": f"{why} ({how})"}
    return out


def _confinement() -> dict[str, Any]:
    """Whether the evaluation workers can confine themselves here (cudaperf_cli/confine.py):
    tried in a throwaway child, as a worker does it.  ``{"ok", "detail"}``."""
    import subprocess
    import sys

    code = "from cudaperf_cli.confine import confine_candidate as c; r = c(); print(int(r.applied), r.reason)"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        ok, _, reason = proc.stdout.strip().partition(" ")
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ok": False, "detail": f"could not be tried: {exc}"}
    if ok == "1":
        return {"ok": True, "detail": reason}
    return {"ok": False, "detail": (reason or proc.stderr.strip()[-200:] or "unknown")
            + ": candidate code could read the user's files"}


def _cuda_core() -> dict[str, Any]:
    """Whether ``cuda.core`` and ``cuda.bindings`` import here, with their versions."""
    try:
        import cuda.bindings
        import cuda.core
    except Exception as exc:  # noqa: BLE001 - any import failure is the answer
        return {"ok": False, "detail": f"import failed: {exc}"}
    return {
        "ok": True,
        "detail": f"cuda.core {cuda.core.__version__}, cuda.bindings {cuda.bindings.__version__}",
    }


def run_doctor(json_out: bool) -> int:
    """Print the doctor report (Rich table or JSON); return the exit code."""
    report = collect()
    gpu = report["gpu"]
    has_gpu = gpu["ok"]
    code = 0
    if not report["nvcc"]["ok"] or not report["cc"]["ok"]:
        code = 3
    elif not has_gpu:
        code = 4
    if json_out:
        print(json.dumps(report, indent=2, default=str))
        return code

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="cudaperf doctor", show_header=True, header_style="bold")
    table.add_column("check")
    table.add_column("status")
    table.add_column("details", overflow="fold")

    def row(name: str, ok: bool, details: str, warn: bool = False) -> None:
        status = "[green]ok[/]" if ok else ("[yellow]missing[/]" if warn else "[red]missing[/]")
        table.add_row(name, status, escape(details))  # "cudaperf[llm]" is not markup

    for key, label in (("nvcc", "nvcc"), ("cc", "C compiler")):
        t = report[key]
        row(label, t["ok"], f"{t['path'] or 'not on PATH'}  {t['version'] or ''}".strip())
    if has_gpu:
        details = (
            f"{gpu.get('name')}  {gpu.get('arch')}  {gpu.get('sm_count')} SMs  "
            f"driver {gpu.get('driver_version')}  "
            f"free {gpu.get('memory_free_bytes', 0) / 2**30:.1f} / "
            f"{gpu.get('memory_total_bytes', 0) / 2**30:.1f} GiB"
        )
        row("GPU", True, details)
        drv = report["driver"]
        row("driver", True, f"{drv['version']} (CUDA {drv['cuda_version']})")
    else:
        row("GPU", False, gpu.get("reason", "no CUDA device"), warn=True)
        row("driver", False, "not loaded (see GPU)", warn=True)
    core = report["cuda_core"]
    row("cuda.core", core["ok"], core["detail"])
    conf = report["confinement"]
    row("confinement", conf["ok"], conf["detail"], warn=True)
    san = report["compute_sanitizer"]
    row("compute-sanitizer", san["ok"], san["detail"], warn=True)
    for name, pkg in report["packages"].items():
        version = pkg["version"]
        if version is not None and name == "torch":
            build = version.partition("+")[2]
            version += ("  CPU build" if build == "cpu" else f"  CUDA build ({build})" if build.startswith("cu")
                        else "")
        row(name, version is not None, version or f"not installed: needed for {pkg['for']}", warn=True)
    Console().print(table)
    return code
