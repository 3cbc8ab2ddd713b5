"""What a finished ``cudaperf optimize`` run recommends: the candidate, torch.compile, or
the original code.

A verified candidate is written whatever its speed; the recommendation says whether it is
worth using.  It is printed in the final panel (``verdict``) and stored in ``summary.json``
and the ``--json`` document (``recommendation``).
"""

from __future__ import annotations

from typing import Any

from cudaperf_cli.agent.loop import TurnRecord

#: ``action`` values: use the candidate; torch.compile(Model) is faster (PyTorch); keep the
#: original (the candidate is slower than the baseline); the candidate wins only on the GPU
#: (C: faster kernel-only, slower with the copies in and out).
ACTIONS = ("use_candidate", "use_torch_compile", "keep_original", "use_if_data_on_gpu")


def recommendation(best: TurnRecord | None) -> dict[str, Any] | None:
    """The recommendation for a run whose best verified candidate is ``best``.

    PyTorch problems compare against PyTorch eager (``speedup_kernel``) and torch.compile
    (``speedup_compile``); C problems against the CPU reference, kernel-only
    (``speedup_kernel``) and end-to-end with the copies (``speedup_e2e``).  Speedups are
    baseline median / candidate median (dimensionless).

    Returns:
        ``{"action": one of ACTIONS, "line": one line for people}``, or None when there is
        no verified candidate or it was not timed (no CUDA device).
    """
    if best is None or best.speedup_kernel is None:
        return None
    x = best.speedup_kernel
    pytorch = best.speedup_compile is not None or best.eager_ms is not None
    if pytorch:
        if x < 1.0:
            return {"action": "keep_original",
                    "line": f"slower than PyTorch eager ({x:.3g}x): keep the original Model"}
        c = best.speedup_compile
        if c is not None and c < 1.0:
            return {"action": "use_torch_compile",
                    "line": f"faster than eager ({x:.3g}x), slower than torch.compile ({c:.3g}x): "
                            "torch.compile(Model) is the better choice"}
        return {"action": "use_candidate",
                "line": f"faster than eager ({x:.3g}x)"
                        + (f" and torch.compile ({c:.3g}x)" if c is not None else "")}
    base = best.baseline or "the CPU reference"
    if x < 1.0:
        return {"action": "keep_original",
                "line": f"slower than {base} ({x:.3g}x kernel-only): keep the original function"}
    e = best.speedup_e2e
    if e is not None and e < 1.0:
        return {"action": "use_if_data_on_gpu",
                "line": f"faster on the GPU ({x:.3g}x kernel-only) but slower end to end ({e:.3g}x, "
                        "copies in and out included): worth it where the data already lives on the GPU"}
    return {"action": "use_candidate",
            "line": f"faster than {base} ({x:.3g}x kernel-only"
                    + (f", {e:.3g}x end to end" if e is not None else "") + ")"}


__all__ = ["ACTIONS", "recommendation"]
