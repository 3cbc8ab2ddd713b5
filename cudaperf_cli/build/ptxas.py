"""Parse the per-kernel resource report that ``ptxas -v`` prints (``nvcc -Xptxas -v``).

nvcc 12/13 print, per compiled entry function (kernel)::

    ptxas info    : Compiling entry function '_Z11smem_kernelPKdPdi' for 'sm_90'
    ptxas info    : Function properties for _Z11smem_kernelPKdPdi
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 12 registers, used 1 barriers, 2048 bytes smem
    ptxas info    : Compile time = 3.200 ms

Older toolkits and older architectures add ``360 bytes cmem[0]`` to the ``Used`` line and
omit the barrier count; nvcc 13 for sm_90 and newer no longer reports ``cmem[0]``.
Non-entry (``__device__ __noinline__``) functions get a ``Function properties`` block but no
``Compiling entry function`` line and no ``Used`` line; they are not kernels and are skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class KernelResources:
    """Resources of one compiled kernel (one entry function for one architecture).

    Attributes:
        name: mangled name as ptxas prints it (``_Z11smem_kernelPKdPdi``; ``plain`` for an
            ``extern "C"`` kernel).
        demangled: the demangled C++ signature (via ``cu++filt``/``c++filt``), else ``name``.
        arch: the SASS target, e.g. ``"sm_90"``.
        registers: registers per thread.
        shared_bytes: static shared memory per block, bytes: ``N bytes smem``, or for
            ``N+R bytes smem`` the sum (the kernel's own N plus R bytes ptxas reserves for the
            system, e.g. on sm_90; both count against the SM's shared memory).
        stack_frame_bytes: per-thread stack frame, bytes (local memory for arrays/spills).
        spill_store_bytes: bytes of register spill stores (per thread).
        spill_load_bytes: bytes of register spill loads (per thread).
        constant_bytes: ``cmem[0]`` (kernel parameters and constants) in bytes; None when
            ptxas does not report it (nvcc 13 for sm_90+ does not).
        barriers: named barriers used (``used 1 barriers``), ``None`` when not reported.
        cumulative_stack_bytes: ``N bytes cumulative stack size`` (stack including callees),
            None when not reported.
    """

    name: str
    demangled: str
    arch: str
    registers: int = 0
    shared_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    constant_bytes: int | None = None
    barriers: int | None = None
    cumulative_stack_bytes: int | None = None

    @property
    def spills(self) -> bool:
        """True when the kernel spills registers to local memory."""
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KernelResources":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"ptxas\s+info\s*:\s*Used (\d+) registers(.*)$")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+)(?:\+(\d+))? bytes smem")
_CMEM0 = re.compile(r"(\d+) bytes cmem\[0\]")
_CUMSTACK = re.compile(r"(\d+) bytes cumulative stack size")


def parse_ptxas_report(text: str, *, demangle_names: bool = True) -> list[KernelResources]:
    """Parse ``-Xptxas -v`` output into one :class:`KernelResources` per kernel and arch.

    Args:
        text: the compiler output (stdout and stderr together; other lines are ignored).
        demangle_names: demangle with ``cu++filt``/``c++filt`` when available.

    Returns:
        Kernels in the order ptxas compiled them.  A kernel compiled for two architectures
        (``-gencode`` twice) appears twice, once per ``arch``.
    """
    records: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    props_for: str | None = None  # name of the last "Function properties for" block

    for raw in text.splitlines():
        line = raw.rstrip()
        m = _ENTRY.search(line)
        if m:
            current = {"name": m.group(1), "arch": m.group(2)}
            records.append(current)
            props_for = None
            continue
        m = _PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and props_for is not None:
            if current is not None and current["name"] == props_for:
                current["stack_frame_bytes"] = int(m.group(1))
                current["spill_store_bytes"] = int(m.group(2))
                current["spill_load_bytes"] = int(m.group(3))
            continue
        m = _USED.search(line)
        if m and current is not None and "registers" not in current:
            current["registers"] = int(m.group(1))
            rest = m.group(2)
            if b := _BARRIERS.search(rest):
                current["barriers"] = int(b.group(1))
            if s := _SMEM.search(rest):
                current["shared_bytes"] = int(s.group(1)) + int(s.group(2) or 0)
            if c := _CMEM0.search(rest):
                current["constant_bytes"] = int(c.group(1))
            if k := _CUMSTACK.search(rest):
                current["cumulative_stack_bytes"] = int(k.group(1))
            continue

    names = [r["name"] for r in records]
    pretty = demangle(names) if demangle_names else {}
    return [KernelResources(demangled=pretty.get(r["name"], r["name"]), **r) for r in records]


def for_arch(resources: Iterable[Any], arch: str | None) -> list[Any]:
    """The entries compiled for ``arch`` (``"sm_90"``; an entry that names no arch counts
    as one), or all of them when none is (or ``arch`` is None): with ``-gencode`` for two
    architectures, figures of the one that runs."""
    entries = list(resources)
    if arch:
        mine = [r for r in entries if getattr(r, "arch", None) in (arch, None)]
        if mine:
            return mine
    return entries


def _demangler() -> str | None:
    """``cu++filt`` (PATH, then the toolkit's bin), else GNU ``c++filt``, else None."""
    found = shutil.which("cu++filt")
    if found:
        return found
    dirs = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for d in dirs:
        if d and (Path(d) / "bin" / "cu++filt").is_file():
            return str(Path(d) / "bin" / "cu++filt")
    return shutil.which("c++filt")


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Demangle C++ names in one ``cu++filt`` (else ``c++filt``) call.

    Returns a mapping name -> demangled name; names it cannot demangle map to themselves.
    Never raises (no demangler, or one that fails, gives the identity mapping).
    """
    uniq = list(dict.fromkeys(n for n in names if n))
    identity = {n: n for n in uniq}
    mangled = [n for n in uniq if n.startswith("_Z")]
    if not mangled:
        return identity
    tool = _demangler()
    if tool is None:
        return identity
    try:
        proc = subprocess.run(
            [tool],
            input="\n".join(mangled) + "\n",
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return identity
    out = proc.stdout.splitlines()
    if proc.returncode != 0 or len(out) != len(mangled):
        return identity
    identity.update({m: d.strip() or m for m, d in zip(mangled, out)})
    return identity


__all__ = ["KernelResources", "demangle", "for_arch", "parse_ptxas_report"]
