"""Memory plans: what one evaluation of a problem may hold at once, from its shapes.

Both paths plan before anything runs (the optimize driver refuses a problem that cannot fit
with one line naming the bytes, status ``does_not_fit``) and the workers keep to the plan
(buffers reused across trials, comparisons in chunks).  The kinds compute their own
numbers (``evaluate/worker.py`` for C arrays, ``evaluate/torch_worker.py`` for PyTorch
modules); this module holds the shared record and the check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GB = 1e9


@dataclass(frozen=True)
class MemoryPlan:
    """The planned memory of one evaluation, bytes.

    Attributes:
        footprint_bytes: the problem at its main configuration: inputs, outputs, parameters
            and buffers (C: every array once).
        gpu_bytes: the most device memory the evaluation plans to hold at once (the flush
            buffer included).  The bound every evaluation keeps: at most 3 x the footprint
            plus the L2-flush buffer.
        host_bytes: the most host memory it plans to hold at once.
        flush_bytes: the L2-flush buffer within ``gpu_bytes``.
        parts: name -> bytes, what ``gpu_bytes`` is made of (for the message and the record).
        optional_bytes: the part of ``gpu_bytes`` the evaluation does without when the
            device is short of it (the timing's second input set, ``docs/evaluation.md``
            §6: one set is used then, and a warning says so); :func:`does_not_fit` refuses
            only what cannot fit without it.
    """

    footprint_bytes: int
    gpu_bytes: int
    host_bytes: int
    flush_bytes: int = 0
    parts: dict[str, int] = field(default_factory=dict)
    optional_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"footprint_bytes": self.footprint_bytes, "gpu_bytes": self.gpu_bytes,
                "host_bytes": self.host_bytes, "flush_bytes": self.flush_bytes,
                "optional_bytes": self.optional_bytes, "parts": dict(self.parts)}


def does_not_fit(plan: MemoryPlan, *, gpu_free: int | None, host_total: int | None,
                 what: str) -> str | None:
    """One line saying why ``plan`` cannot run here, or None when it fits.

    Args:
        plan: the evaluation's :class:`MemoryPlan` (its ``gpu_bytes`` less its
            ``optional_bytes`` must fit the device).
        gpu_free: free device memory, bytes (None: unknown, no device check).
        host_total: physical host memory, bytes (None: unknown, no host check).
        what: the problem's name for the message.
    """
    need = plan.gpu_bytes - plan.optional_bytes
    if gpu_free is not None and need > gpu_free:
        return (f"{what} does not fit: one evaluation needs {need / GB:.1f} GB of GPU "
                f"memory (footprint {plan.footprint_bytes / GB:.1f} GB) and the GPU has "
                f"{gpu_free / GB:.1f} GB free")
    if host_total is not None and plan.host_bytes > host_total:
        return (f"{what} does not fit: one evaluation needs {plan.host_bytes / GB:.1f} GB of host "
                f"memory (footprint {plan.footprint_bytes / GB:.1f} GB) and this machine has "
                f"{host_total / GB:.1f} GB")
    return None


def host_memory_bytes() -> int | None:
    """Physical memory of this machine, bytes (None when it cannot be read)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


__all__ = ["GB", "MemoryPlan", "does_not_fit", "host_memory_bytes"]
