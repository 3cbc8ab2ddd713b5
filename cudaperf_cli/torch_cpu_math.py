"""Make PyTorch's CPU math functions give their documented accuracy from the first call.

PyTorch's x86 CPU builds compute float unary functions (``exp``, ``tanh``, ``sin``,
``erf``, ...) of contiguous tensors with oneMKL's VML.  oneMKL picks each function's kernel
lazily on its first call; when the intra-op threads make that first call concurrently, one
thread's chunk can run the low-accuracy kernel although high accuracy was asked
(pytorch/pytorch#188792, fix proposed in #188791; oneMKL 2024.2.x, which the torch 2.13.0
CPU wheel links).  Measured here (torch 2.13.0+cpu, 2 threads): the first ``torch.tanh`` of
a fresh process was wrong by up to 9e-5 (relative) on about 1 run in 8, every later call
exact; ``exp``, ``sin`` and ``erf`` the same.  A reference computed in a fresh child process
(the loader's determinism check, the CPU emulation of a candidate, a host-backend worker)
then disagrees with itself or with a correct candidate at KernelBench's 1e-4 tolerance.

:func:`warm_up_cpu_math` makes the first call of each such function on one element, before
any tensor large enough to be split across threads, so that the kernel is chosen by one
thread.  It is what the upstream fix does inside ATen.
"""

from __future__ import annotations

from typing import Any

#: Unary functions of ``torch`` that may be computed by a oneMKL VML kernel on the CPU
#: (ATen's ``aten/src/ATen/cpu/vml.h`` and ``UnaryOpsKernel.cpp``), plus a few close
#: relatives; warming one that does not use VML costs a microsecond and is harmless.
VML_UNARY_FUNCTIONS: tuple[str, ...] = (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "digamma",
    "erf", "erfc", "erfinv", "exp", "exp2", "expm1", "floor", "i0", "lgamma", "log", "log10",
    "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sin", "sinh", "sqrt",
    "tan", "tanh", "trunc",
)

_warmed: set[int] = set()


def warm_up_cpu_math(torch: Any) -> None:
    """Call every function of :data:`VML_UNARY_FUNCTIONS` once on a one-element float32
    and float64 CPU tensor (0.5: inside every function's domain), so that oneMKL chooses
    each kernel before any multi-threaded call (pytorch/pytorch#188792).

    Args:
        torch: the imported ``torch`` module.

    Idempotent per process; about 1 ms.  Never raises: a function missing from this torch
    build is skipped.
    """
    if id(torch) in _warmed:
        return
    _warmed.add(id(torch))
    for dtype in (torch.float32, torch.float64):
        x = torch.full((1,), 0.5, dtype=dtype)
        for name in VML_UNARY_FUNCTIONS:
            fn = getattr(torch, name, None)
            if fn is None:
                continue
            try:
                fn(x)
            except Exception:  # noqa: BLE001 - a function this build lacks for a dtype
                pass
