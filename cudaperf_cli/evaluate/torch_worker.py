"""The PyTorch evaluation worker: ``python -m cudaperf_cli.evaluate.torch_worker [--build]``.

Same protocol as the C path's worker (``docs/evaluation.md`` section 3): the
:class:`~cudaperf_cli.evaluate.torch_job.TorchEvalJob` as JSON on stdin, one
:class:`~cudaperf_cli.evaluate.torch_job.TorchEvalResult` JSON document on stdout (fd 1 is
pointed at stderr at start-up, so prints from the problem, the candidate, ninja or device
``printf`` cannot corrupt it), the phase in ``$CUDAPERF_WORKER_STATE``.

``--build`` only imports the candidate module (a load_inline candidate compiles its
extension then, into ``$TORCH_EXTENSIONS_DIR``) and answers ``{"status": "ok" |
"compile_error" | "runtime_error", "message", "errors", "seconds", "cached"}``.

Without it the worker verifies the candidate against the problem's ``Model`` on every
shape configuration, runs the dynamic guards and times it against PyTorch eager and
``torch.compile`` (``docs/pytorch-evaluation.md``).  torch is imported lazily, so the pure
helpers here (:func:`analyze_profile`, :func:`profile_verdict`,
:func:`apply_constant_overrides`, ...) can be tested without it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import inspect
import json
import math
import os
import re
import sys
import time
import traceback
import types
import warnings as _warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cudaperf_cli.evaluate.job import (
    BACKEND_ENV,
    CORRECT,
    CRASH,
    HOOKS_ENV,
    NO_DEVICE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
    RUNTIME_ERROR,
    SLOW,
    STATE_ENV,
    WRONG,
    TimingStats,
    json_float,
)
from cudaperf_cli.evaluate.timing import (
    SUSPICIOUS_SPEEDUP,
    InputRotation,
    RepTiming,
    flush_size,
    perturb_positions,
    speedup,
    summarize,
    time_repetitions,
    untimed_work,
)
from cudaperf_cli.evaluate import torch_output_checks as _outchk
from cudaperf_cli.evaluate.torch_job import (
    ALIASING,
    BACKGROUND_THREAD,
    COMPILE_ERROR,
    EXT_DIR_ENV,
    GUARD_REJECTED,
    INHERITS_MODEL,
    LOWER_PRECISION,
    NO_CUSTOM_KERNEL,
    OUTPUT_TYPE,
    PATCHING,
    RESULT_CACHE,
    SHAPE_SPECIALISED,
    SIDE_STREAM,
    TIMED_RESULT,
    TORCH_FALLBACK,
    OutputCheck,
    TorchConfigResult,
    TorchEvalJob,
    TorchEvalResult,
    TorchTiming,
    summarize_torch_result,
    torch_tolerance,
    trial_seed,
)
from cudaperf_cli.confine import Confinement, confine_candidate
from cudaperf_cli.evaluate.child import State, flush_c_stdio, inductor_cache_dir, read_job, result_channel
from cudaperf_cli.evaluate.torch_output_checks import (
    NO_REFERENCE,
    ThreadWatch,
    global_state,
    global_state_changes,
    output_type_problem,
    saved_ops,
    static_lookup,
    tensor_class_targets,
)
from cudaperf_cli.evaluate.worker import _run_hook

#: record_function names around the profiled forward and the current-stream markers.
FORWARD_ANNOTATION = "cudaperf::candidate_forward"
MARKER_ANNOTATION = "cudaperf::stream_marker"
#: Timed repetitions enqueued between two synchronizations.
BATCH = 10

#: ``aten`` ops ``ModelNew.forward`` may run without ``torch_fallback``: allocation,
#: views/metadata, copies and reading a scalar.  Everything else that computes is refused.
ALLOWED_ATEN_OPS = frozenset(
    {
        # allocation and initialisation
        "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
        "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones",
        "full", "full_like", "new_full", "fill_", "zero_", "resize_", "resize_as_",
        "scalar_tensor", "lift_fresh", "lift_fresh_copy",
        # views and metadata
        "view", "view_as", "reshape", "_reshape_alias", "_unsafe_view", "as_strided",
        "as_strided_", "expand", "expand_as", "squeeze", "squeeze_", "unsqueeze",
        "unsqueeze_", "flatten", "unflatten", "permute", "transpose", "transpose_", "t",
        "select", "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind",
        "alias", "detach", "detach_", "movedim", "swapaxes", "numpy_T", "unfold",
        "resolve_conj", "resolve_neg", "set_", "is_same_size", "result_type",
        "_has_compatible_shallow_copy_type", "record_stream",
        # copies
        "copy_", "clone", "contiguous", "to", "_to_copy", "_copy_from",
        "_copy_from_and_resize", "type_as",
        # scalars
        "item", "_local_scalar_dense", "is_nonzero",
    }
)
#: Added to :data:`ALLOWED_ATEN_OPS` by ``allow_torch_ops`` (cuBLAS / cuDNN work).
MATMUL_CONV_OPS = frozenset(
    {
        "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "addmv", "mv",
        "dot", "vdot", "einsum", "_addmm_activation", "tensordot",
        "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
        "conv_transpose2d", "conv_transpose3d", "cudnn_convolution",
        "cudnn_convolution_transpose", "_conv_depthwise2d", "conv_depthwise3d",
        "slow_conv2d_forward", "cudnn_convolution_relu", "cudnn_convolution_add_relu",
    }
)
#: ``aten`` ops PyTorch's convolutions run inside themselves (cuDNN's transposed convolution
#: adds its bias with ``aten::add_``): allowed nested in a convolution op of
#: :data:`MATMUL_CONV_OPS` with ``allow_torch_ops``, and only there (a tensor subclass's
#: ``__torch_dispatch__`` can run any op "inside" a convolution).
NESTED_LIBRARY_OPS = frozenset({"add", "add_"})
#: CPU ops whose kernels count as PyTorch's own (the op that launched a kernel).
TORCH_OP_PREFIXES = ("aten::", "prim::", "quantized::", "torchvision::", "inductor::")
#: Kernel names of PyTorch, cuBLAS(Lt), cuDNN, CUTLASS inside those, and Inductor's Triton
#: kernels.  A kernel whose launch was not inside a PyTorch op still counts as a library
#: kernel when its name matches.
LIBRARY_KERNEL_RE = re.compile(
    r"(\bat::|\bat_cuda_detail::|\bc10::|cublas|cudnn|cutlass|nvjet|xmma|\bcask_|"
    r"^triton_(poi|red|per|tem|for)_|\bgemv2[NT]_kernel|\bgemmSN_|\bgemmk1_kernel|"
    r"\bsplitKreduce_kernel|\bimplicit_convolve_sgemm|\bwinograd|\bfft2d_|\bfft_)",
    re.IGNORECASE,
)
_RUNTIME_NAME = re.compile(r"^(cuda|cu)[A-Z]\w*$")


# ---------------------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------------------


class Stop(Exception):
    """Ends the evaluation with ``status`` (and, for ``guard_rejected``, the guard)."""

    def __init__(
        self,
        status: str,
        message: str,
        *,
        error: dict[str, Any] | None = None,
        guard: dict[str, Any] | None = None,
        config: str | None = None,
        trial: int | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error = error
        self.guard = guard
        self.config = config
        self.trial = trial


def guard_stop(gid: str, reason: str, config: str | None = None, trial: int | None = None) -> Stop:
    where = ""
    if config is not None:
        where = f" (config '{config}'" + (f", trial {trial}" if trial is not None else "") + ")"
    return Stop(
        GUARD_REJECTED,
        f"rejected by guard '{gid}'{where}: {reason}",
        guard={"id": gid, "reason": reason, "config": config, "trial": trial},
        config=config,
        trial=trial,
    )


def _exc_error(exc: BaseException, source: str, config: str | None = None,
               trial: int | None = None) -> dict[str, Any]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "source": source,
        "type": type(exc).__name__,
        "message": str(exc)[:4000],
        "config": config,
        "trial": trial,
        "traceback": tb[-4000:],
    }


def _one_line(exc: BaseException, limit: int = 600) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}"


# ---------------------------------------------------------------------------------------
# Problem and candidate modules
# ---------------------------------------------------------------------------------------


def apply_constant_overrides(source: str, overrides: Mapping[str, int], filename: str) -> Any:
    """Compile a problem's source with module-level constants given new values where they
    are bound (``batch_size = 16`` is followed by ``batch_size = 7``; ``h, w = 32, 32`` by
    ``h = 7``), so constants derived from them follow
    (:func:`cudaperf_cli.problems.pytorch.override_constants`).

    Raises:
        ValueError: an override names no module-level assignment.
        SyntaxError: the source does not parse.
    """
    from cudaperf_cli.problems.pytorch import override_constants

    return compile(override_constants(source, overrides, filename), filename, "exec")


def load_problem_module(path: str, overrides: Mapping[str, int], tag: str) -> types.ModuleType:
    """Execute a problem file (constants overridden) as module ``cudaperf_problem_<tag>``.

    Raises:
        ValueError: it lacks ``Model``, ``get_inputs`` or ``get_init_inputs``.
        Exception: whatever its code raises.
    """
    code = apply_constant_overrides(Path(path).read_text(), overrides, path)
    name = f"cudaperf_problem_{tag}"
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    exec(code, mod.__dict__)  # noqa: S102 - the problem file is the user's own input
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise ValueError(f"the problem file defines no {', '.join(missing)}")
    lost = [f"{k}={getattr(mod, k, None)!r} (not {v})" for k, v in overrides.items() if getattr(mod, k, None) != v]
    if lost:  # something after the assignment rebound it: the shapes would not be the planned ones
        raise ValueError(f"the file rebinds {', '.join(lost)} after its assignment")
    return mod


def import_candidate(path: str) -> types.ModuleType:
    """Import the candidate's ``.py`` as module ``cudaperf_candidate`` (its directory first
    on ``sys.path``)."""
    p = Path(path).resolve()
    if str(p.parent) not in sys.path:
        sys.path.insert(0, str(p.parent))
    spec = importlib.util.spec_from_file_location("cudaperf_candidate", p)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cudaperf_candidate"] = mod
    spec.loader.exec_module(mod)
    return mod


def classify_import_error(exc: BaseException, filename: str) -> tuple[str, str, str]:
    """(status, one-line message, compiler errors) for an exception raised while importing
    the candidate: compile failures (nvcc through load_cuda or load_inline, a syntax error,
    a missing launcher or module) are ``compile_error``/``compile_timeout``; anything else
    is a ``runtime_error`` at import."""
    from cudaperf_cli.build.nvcc import extract_errors
    from cudaperf_cli.core import ToolchainError

    try:
        from cudaperf_cli.torch_runtime import CudaCompileError, LauncherSignatureError
    except Exception:  # noqa: BLE001
        CudaCompileError = LauncherSignatureError = ()  # type: ignore[assignment,misc]
    if isinstance(exc, SyntaxError):
        return COMPILE_ERROR, f"SyntaxError in {exc.filename or filename}, line {exc.lineno}: {exc.msg}", ""
    if CudaCompileError and isinstance(exc, CudaCompileError):  # type: ignore[arg-type]
        return exc.status, str(exc).splitlines()[0].rstrip(":"), exc.errors  # type: ignore[attr-defined]
    if LauncherSignatureError and isinstance(exc, LauncherSignatureError):  # type: ignore[arg-type]
        return COMPILE_ERROR, str(exc), ""
    if isinstance(exc, ToolchainError):
        return COMPILE_ERROR, str(exc), ""
    text = str(exc)
    if "Error building extension" in text or type(exc).__name__ == "CalledProcessError":
        first = text.splitlines()[0] if text else type(exc).__name__
        # torch's extension build writes main.cpp and cuda.cu in its own folder
        return (COMPILE_ERROR, f"load_inline failed while importing {filename}: {first[:300]}",
                extract_errors(text, own=("main.cpp", "cuda.cu"), any_dir=True))
    if isinstance(exc, ImportError):
        return COMPILE_ERROR, f"importing {filename} failed: {_one_line(exc)}", ""
    return RUNTIME_ERROR, f"importing {filename} raised {_one_line(exc)}", ""


# ---------------------------------------------------------------------------------------
# Tensors: flattening, comparison, aliasing (torch imported by the caller)
# ---------------------------------------------------------------------------------------


def _torch() -> Any:
    import torch

    return torch


def flatten_outputs(obj: Any, path: str = "out") -> list[tuple[str, Any]]:
    """``[(path, leaf)]`` of a forward's return value: tensors, tuples/lists, dicts (keys
    sorted), other values as leaves."""
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return [(path, obj)]
    if isinstance(obj, (tuple, list)):
        out: list[tuple[str, Any]] = []
        for i, v in enumerate(obj):
            out.extend(flatten_outputs(v, f"{path}[{i}]"))
        return out
    if isinstance(obj, dict):
        out = []
        for k in sorted(obj, key=str):
            out.extend(flatten_outputs(obj[k], f"{path}[{k!r}]"))
        return out
    return [(path, obj)]


def _describe(obj: Any) -> str:
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return f"a tensor {list(obj.shape)} {str(obj.dtype).replace('torch.', '')}"
    if isinstance(obj, (tuple, list)):
        return f"a {type(obj).__name__} of {len(obj)}"
    return f"a {type(obj).__name__}"


def _unravel(flat: int, shape: Sequence[int]) -> list[int]:
    idx = []
    for extent in reversed(list(shape)):
        idx.append(flat % extent if extent else 0)
        flat = flat // extent if extent else 0
    return list(reversed(idx))


def _scalar(v: Any) -> Any:
    if isinstance(v, complex):
        return str(v)
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    return json_float(float(v))


#: Elements per chunk of a comparison or fingerprint: at most 2**24 (16 Mi), at least 2**16,
#: else 1/16 of the tensor, so the float64 temporaries of a comparison (about 6 x 8 bytes an
#: element) stay under the tensor's own size for float32 and under 256 MB overall.
CHUNK_MAX, CHUNK_MIN, CHUNK_DIV = 1 << 24, 1 << 16, 16


def chunk_elems(n: int) -> int:
    """Elements per chunk for a tensor of ``n`` elements (see :data:`CHUNK_MAX`)."""
    return int(min(CHUNK_MAX, max(CHUNK_MIN, n // CHUNK_DIV)))


def _ops() -> tuple[Any, Any]:
    """(``torch._C._VariableFunctions``, ``torch._C.TensorBase``) as captured before the
    candidate was imported (:func:`~cudaperf_cli.evaluate.torch_output_checks.arm`): the
    comparison and the fingerprints call these immutable C types, never ``torch.Tensor``'s
    dunders or methods, which a candidate can replace in Python even just for the moment
    of a comparison."""
    s = saved_ops()
    return s.VF, s.TB


def flat_chunks(*tensors: Any, chunk: int | None = None) -> Any:
    """Yield ``(start, [chunk of each tensor])``: 1-D pieces covering the tensors' elements in
    C order, at the same boundaries for every tensor (all of one shape).  Contiguous tensors
    give views; others are cut along their first dimension and each piece copied, so no
    full-size copy is ever made."""
    _, TB = _ops()
    t0 = tensors[0]
    n = int(TB.numel(t0))
    step = chunk or chunk_elems(n)
    if n == 0:
        return
    if TB.dim(t0) == 0:
        yield 0, [TB.reshape(t, (1,)) for t in tensors]
        return
    if all(TB.is_contiguous(t) for t in tensors):
        flats = [TB.view(t, (-1,)) for t in tensors]
        for i in range(0, n, step):
            yield i, [TB.__getitem__(f, slice(i, i + step)) for f in flats]
        return
    first = int(TB.shape.__get__(t0)[0])
    row = max(n // first, 1)
    rows = max(step // row, 1)
    for r in range(0, first, rows):
        yield r * row, [TB.reshape(TB.__getitem__(t, slice(r, r + rows)), (-1,)) for t in tensors]


def fingerprint(t: Any) -> Any:
    """A device tensor ``int64[2]`` summarising ``t``'s bytes: the sum of its 32-bit words
    (bytes when its size is not a multiple of 4) and the sum of their squares, both modulo
    2**64; computed in chunks on the current stream (no host synchronisation).  Equal bytes
    give equal fingerprints; a write that changes any element changes them but for a
    coincidence of about 2**-64.  Used instead of copies to see whether a tensor changed
    (an input written by the candidate, an output still being written on another stream)."""
    torch = _torch()
    VF, TB = _ops()
    acc = VF.zeros(2, dtype=torch.int64, device=TB.device.__get__(t))
    n = TB.numel(t)
    if n == 0:
        return acc
    x = TB.detach(t)
    size = TB.element_size(x)
    word = torch.int32 if (n * size) % 4 == 0 and size in (4, 8) else torch.uint8
    for _, (c,) in flat_chunks(x):
        w = TB.to(TB.view(TB.contiguous(c), word), torch.int64)
        acc = VF.add(acc, VF.stack([VF.sum(w), VF.sum(VF.mul(w, w))]))
    return acc


def fingerprints(values: Sequence[Any]) -> list[Any]:
    """:func:`fingerprint` of every tensor of ``values`` (None for other values)."""
    torch = _torch()
    return [fingerprint(v) if isinstance(v, torch.Tensor) else None for v in values]


def same_fingerprints(a: Sequence[Any], b: Sequence[Any]) -> list[int]:
    """Indices where two :func:`fingerprints` lists differ (synchronises once)."""
    VF, _ = _ops()
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x is not None and y is not None and VF.equal(x, y) is not True:
            out.append(i)
    return out


def compare_tensor(path: str, got: Any, expected: Any, atol: float, rtol: float) -> OutputCheck:
    """Element-wise check ``|got - expected| <= atol + rtol * |expected|`` (exact when
    ``atol == rtol == 0``), shape and dtype first.  A NaN in ``got`` never passes (nor does
    a NaN expected); equal infinities pass.  Computed in float64 (complex128) on the
    tensors' device, in chunks (:func:`flat_chunks`): temporary memory stays below the
    tensor's size for float32 outputs."""
    torch = _torch()
    VF, TB = _ops()
    gshape, eshape = list(TB.shape.__get__(got)), list(TB.shape.__get__(expected))
    gdtype, edtype = TB.dtype.__get__(got), TB.dtype.__get__(expected)
    chk = OutputCheck(
        path=path,
        ok=False,
        shape=gshape,
        dtype=str(gdtype).replace("torch.", ""),
        expected_shape=eshape,
        expected_dtype=str(edtype).replace("torch.", ""),
        atol=atol,
        rtol=rtol,
    )
    if gshape != eshape:
        chk.message = f"{path}: shape {chk.shape} differs from the expected {chk.expected_shape}"
        return chk
    if gdtype != edtype:
        chk.message = f"{path}: dtype {chk.dtype} differs from the expected {chk.expected_dtype}"
        return chk
    n = int(TB.numel(expected))
    chk.n_elements = n
    if n == 0:
        chk.ok = True
        return chk
    edev = TB.device.__get__(expected)
    if TB.device.__get__(got) != edev:
        got = TB.to(got, edev)
    inexact = TB.is_floating_point(expected) or TB.is_complex(expected)
    wide = torch.complex128 if TB.is_complex(expected) else torch.float64
    n_bad = n_nan = 0
    max_abs = max_rel = 0.0
    worst_score, worst_flat = -float("inf"), -1
    # Every value is read through the saved C functions (_ops), the verdict's numbers with
    # TensorBase.item: no torch.Tensor dunder (__int__, __le__, sum...) is called.
    for start, (gc, ec) in flat_chunks(TB.detach(got), TB.detach(expected)):
        if not inexact:  # integers and bool: exact, compared in their own type
            bad = VF.ne(gc, ec)
            n_bad += int(TB.item(VF.sum(bad)))
            if n_bad and worst_flat < 0:
                worst_flat, worst_score = start + int(TB.item(VF.argmax(TB.to(bad, torch.uint8)))), float("inf")
            continue
        c, r = TB.to(gc, wide), TB.to(ec, wide)
        diff = VF.abs(VF.sub(c, r))
        rabs = VF.abs(r)
        tol = VF.add(VF.mul(rabs, rtol), atol)
        nan_c = VF.isnan(c)
        fin = VF.logical_and(VF.isfinite(c), VF.isfinite(r))
        ok_el = VF.logical_and(fin, VF.le(diff, tol))
        same_inf = VF.logical_and(  # the same infinity
            VF.logical_and(VF.logical_not(fin), VF.logical_not(nan_c)),
            VF.logical_and(VF.logical_not(VF.isnan(r)), VF.eq(c, r)))
        bad = VF.logical_not(VF.logical_or(ok_el, same_inf))
        n_bad += int(TB.item(VF.sum(bad)))
        n_nan += int(TB.item(VF.sum(nan_c)))
        ddev = TB.device.__get__(diff)
        zero = VF.zeros((), dtype=torch.float64, device=ddev)
        max_abs = max(max_abs, float(TB.item(VF.max(VF.where(fin, diff, zero)))))
        nz = VF.ne(rabs, 0)
        rel = VF.where(VF.logical_and(fin, nz), VF.div(diff, VF.where(nz, rabs, VF.add(zero, 1))), zero)
        max_rel = max(max_rel, float(TB.item(VF.max(rel))))
        if TB.item(VF.any(bad)) is True:
            inf = VF.full((), float("inf"), dtype=torch.float64, device=ddev)
            score = VF.where(bad, VF.where(fin, VF.sub(diff, tol), inf), VF.neg(inf))
            k = int(TB.item(VF.argmax(score)))
            sc = float(TB.item(TB.__getitem__(score, k)))
            if sc > worst_score:
                worst_score, worst_flat = sc, start + k
        del c, r, diff, rabs, tol, nan_c, fin, ok_el, same_inf, bad, rel
    chk.n_mismatch = n_bad
    chk.n_nan = n_nan
    chk.max_abs_err = max_abs
    chk.max_rel_err = max_rel
    if n_bad == 0:
        chk.ok = True
        return chk
    flat = worst_flat
    idx = _unravel(flat, eshape)
    g = TB.item(TB.__getitem__(TB.detach(got), tuple(idx))) if TB.dim(got) else TB.item(got)
    e = TB.item(TB.__getitem__(TB.detach(expected), tuple(idx))) if TB.dim(expected) else TB.item(expected)
    finite = inexact and math.isfinite(abs(g)) and math.isfinite(abs(e))
    a = abs(g - e) if finite else float("nan")
    rl = a / abs(e) if finite and e != 0 else None
    chk.worst_mismatch = {
        "index": idx,
        "got": _scalar(g),
        "expected": _scalar(e),
        "abs_err": json_float(a) if inexact else None,
        "rel_err": json_float(rl) if inexact else None,
    }
    rule = "exact" if atol == 0 and rtol == 0 else f"atol {atol:g}, rtol {rtol:g}"
    nan_note = f", {chk.n_nan} NaN" if chk.n_nan else ""
    chk.message = (
        f"{path}: {chk.n_mismatch} of {n} elements differ ({rule}{nan_note}); worst at "
        f"[{', '.join(map(str, idx))}]: got {_scalar(g)}, expected {_scalar(e)}"
        + (f" (abs err {a:.3g}" + (f", rel err {rl:.3g})" if rl is not None else ")") if finite else "")
    )
    return chk


def compare_outputs(
    got: Any, expected: Any, tolerances: Mapping[str, Mapping[str, float]] | None = None
) -> list[OutputCheck]:
    """One :class:`OutputCheck` per leaf of the reference's output (a single failing
    check when the structures differ)."""
    torch = _torch()
    fg, fe = flatten_outputs(got), flatten_outputs(expected)
    if [p for p, _ in fg] != [p for p, _ in fe] or any(
        isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor) for (_, a), (_, b) in zip(fg, fe)
    ):
        return [OutputCheck(
            path="out",
            ok=False,
            message=f"the candidate returns {_describe(got)}, the reference {_describe(expected)}",
        )]
    out = []
    for (p, g), (_, e) in zip(fg, fe):
        if isinstance(e, torch.Tensor):
            atol, rtol = torch_tolerance(str(e.dtype), tolerances)
            out.append(compare_tensor(p, g, e, atol, rtol))
        elif isinstance(e, (int, float)) and isinstance(g, (int, float)):
            atol, rtol = torch_tolerance("float64", tolerances)
            ok = abs(float(g) - float(e)) <= atol + rtol * abs(float(e))
            out.append(OutputCheck(p, ok, message="" if ok else f"{p}: got {g!r}, expected {e!r}"))
        else:
            ok = g == e
            out.append(OutputCheck(p, bool(ok), message="" if ok else f"{p}: got {g!r}, expected {e!r}"))
    return out


def outputs_match(got: Any, expected: Any, tolerances: Mapping[str, Mapping[str, float]] | None) -> bool:
    return all(c.ok for c in compare_outputs(got, expected, tolerances))


def bits_equal(a: Any, b: Any) -> bool:
    """Same shape, dtype and bytes (NaN payloads included); read through the saved C
    functions (:func:`_ops`)."""
    torch = _torch()
    VF, TB = _ops()
    if (list(TB.shape.__get__(a)) != list(TB.shape.__get__(b))
            or TB.dtype.__get__(a) != TB.dtype.__get__(b)):
        return False
    if TB.numel(a) == 0:
        return True
    x = TB.reshape(TB.contiguous(TB.detach(a)), (-1,))
    y = TB.reshape(TB.contiguous(TB.detach(b)), (-1,))
    xdev = TB.device.__get__(x)
    if TB.device.__get__(y) != xdev:
        y = TB.to(y, xdev)
    try:
        return VF.equal(TB.view(x, torch.uint8), TB.view(y, torch.uint8)) is True
    except RuntimeError:  # dtypes that cannot be viewed as bytes
        return VF.equal(x, y) is True


def snapshot_outputs(obj: Any) -> Any:
    """A copy of the output structure, tensors cloned (on the current stream)."""
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(snapshot_outputs(v) for v in obj) if isinstance(obj, list) else tuple(
            snapshot_outputs(v) for v in obj
        )
    if isinstance(obj, dict):
        return {k: snapshot_outputs(v) for k, v in obj.items()}
    return obj


def outputs_fingerprints(obj: Any) -> list[Any]:
    """:func:`fingerprint` of every tensor leaf of a forward's return value, in
    :func:`flatten_outputs` order (computed on the current stream, not synchronised)."""
    torch = _torch()
    return [fingerprint(t) for _, t in flatten_outputs(obj) if isinstance(t, torch.Tensor)]


def outputs_fingerprints_same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Two :func:`outputs_fingerprints` lists are equal (same count, every fingerprint)."""
    return len(a) == len(b) and not same_fingerprints(a, b)


def outputs_fingerprints_equal(fps: Sequence[Any], obj: Any) -> bool:
    """``obj``'s tensors still have the bytes ``fps`` (:func:`outputs_fingerprints`) saw."""
    return outputs_fingerprints_same(fps, outputs_fingerprints(obj))


def _buffer_snapshot(model: Any) -> dict[str, Any]:
    """Copies of a module's buffers (running statistics ...), name -> tensor."""
    return {k: b.detach().clone() for k, b in model.named_buffers()}


def compare_inplace_inputs(cand_inputs: Sequence[Any], ref_inputs: Sequence[Any],
                           tolerances: Mapping[str, Mapping[str, float]] | None) -> str | None:
    """For a problem whose forward writes its inputs: every tensor input of the candidate,
    after its forward, must match the reference's after its own (within tolerance; inputs
    neither writes are then equal).  Why not, or None."""
    torch = _torch()
    for i, (c, r) in enumerate(zip(cand_inputs, ref_inputs)):
        if not isinstance(r, torch.Tensor) or not isinstance(c, torch.Tensor):
            continue
        atol, rtol = torch_tolerance(str(r.dtype), tolerances)
        chk = compare_tensor(f"input {i}", c, r, atol, rtol)
        if not chk.ok:
            return f"after forward, input {i} differs from the reference's: {chk.message}"
    return None


def outputs_bits_equal(a: Any, b: Any) -> bool:
    torch = _torch()
    fa, fb = flatten_outputs(a), flatten_outputs(b)
    if len(fa) != len(fb):
        return False
    for (_, x), (_, y) in zip(fa, fb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and not bits_equal(x, y):
            return False
    return True


def _span(t: Any) -> tuple[int, int] | None:
    saved = saved_ops()  # StorageBase: an immutable C type (torch.UntypedStorage is Python's)
    SB, s = saved.SB, saved.TB.untyped_storage(t)
    n = SB.nbytes(s)
    return (SB.data_ptr(s), SB.data_ptr(s) + n) if n else None


def _overlap(a: Any, b: Any) -> bool:
    sa, sb = _span(a), _span(b)
    return bool(sa and sb and sa[0] < sb[1] and sb[0] < sa[1])


def find_aliasing(out: Any, cand_inputs: Sequence[Any], ref_out: Any, ref_inputs: Sequence[Any]) -> str | None:
    """Why a candidate output shares memory (storage overlap) with one of its inputs (unless
    the reference's output does too, e.g. a view problem) or with the reference's output;
    None when it does not."""
    torch = _torch()
    outs = [(p, t) for p, t in flatten_outputs(out) if isinstance(t, torch.Tensor)]
    routs = [(p, t) for p, t in flatten_outputs(ref_out) if isinstance(t, torch.Tensor)]
    rins = [t for t in ref_inputs if isinstance(t, torch.Tensor)]
    ref_aliases_input = any(_overlap(r, x) for _, r in routs for x in rins)
    for p, o in outs:
        if ref_aliases_input:
            # A view problem: the reference returns its input's memory, and so may the
            # candidate; when both read the same input tensors their outputs overlap too.
            continue
        for j, x in enumerate(cand_inputs):
            if isinstance(x, torch.Tensor) and _overlap(o, x):
                return (
                    f"{p} shares memory with input {j}: return a new tensor (the reference "
                    "does not return its input's memory)"
                )
        for rp, r in routs:
            if _overlap(o, r):
                return f"{p} shares memory with the reference's output {rp}"
    return None


def check_inputs(
    cand_inputs: Sequence[Any],
    ref_inputs: Sequence[Any],
    pristine: Sequence[Any],
    tolerances: Mapping[str, Mapping[str, float]] | None,
) -> tuple[str | None, bool]:
    """(why the candidate's inputs are wrong after forward or None, whether the reference
    modifies its inputs).  Inputs the reference leaves unchanged must come back bit for
    bit; inputs it changes in place must match its result within tolerance."""
    torch = _torch()
    ref_modifies = False
    problem = None
    for i, (c, r, p) in enumerate(zip(cand_inputs, ref_inputs, pristine)):
        if not isinstance(p, torch.Tensor):
            continue
        if not bits_equal(r, p):
            ref_modifies = True
            atol, rtol = torch_tolerance(str(r.dtype), tolerances)
            chk = compare_tensor(f"input {i}", c, r, atol, rtol)
            if not chk.ok and problem is None:
                problem = f"after forward, input {i} differs from the reference's in-place result: {chk.message}"
        elif not bits_equal(c, p) and problem is None:
            problem = (
                f"the candidate modified input {i} ({list(p.shape)} "
                f"{str(p.dtype).replace('torch.', '')}), which the reference leaves unchanged"
            )
    return problem, ref_modifies


def describe_inputs(args: Sequence[Any]) -> list[dict[str, Any]]:
    torch = _torch()
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append({"shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")})
        else:
            out.append({"value": repr(a)[:80]})
    return out


# ---------------------------------------------------------------------------------------
# Guards: pure decisions (tested without a GPU)
# ---------------------------------------------------------------------------------------


def inherits_model(model_new: Any, model: Any) -> str | None:
    """Why ``ModelNew`` reuses the reference (a subclass of ``Model``, a base class named
    ``Model``, or ``forward`` being ``Model.forward`` itself), else None.  Equal code is not
    compared: ``return self.conv(x)`` is the same bytecode in both when ModelNew keeps
    Model's attribute names for a custom module."""
    if not isinstance(model_new, type):
        return None
    if issubclass(model_new, model):
        return "ModelNew is a subclass of the problem's Model"
    for base in model_new.__mro__[1:]:
        if base.__name__ == "Model":
            return f"ModelNew inherits from a class named Model ({base.__module__})"
    f_new = getattr(model_new, "forward", None)
    f_ref = getattr(model, "forward", None)
    if f_new is not None and f_new is f_ref:
        return "ModelNew.forward is Model.forward"
    return None


def lower_precision_verdict(
    cand_err: float, ref_err: float, factor: float, floor: float
) -> tuple[bool, float]:
    """(too imprecise, threshold): the candidate's normwise relative error against the
    float64 reference may be at most ``max(factor * ref_err, floor)``, ``ref_err`` being the
    float32 reference's own error."""
    threshold = max(factor * ref_err, floor)
    return cand_err > threshold, threshold


def patch_targets(torch: Any) -> list[tuple[str, Any, str]]:
    """``(label, owner, attribute)`` of everything the evaluation relies on that a candidate
    could replace: timers, events, synchronize, comparison and seeding functions, tensor
    methods used in checks, nn.Module's call path, the profiler."""
    import builtins
    import time as time_mod

    T = torch.Tensor
    targets: list[tuple[str, Any, str]] = [
        ("torch.cuda.Event", torch.cuda, "Event"),
        ("torch.cuda.Event.record", torch.cuda.Event, "record"),
        ("torch.cuda.Event.elapsed_time", torch.cuda.Event, "elapsed_time"),
        ("torch.cuda.Event.synchronize", torch.cuda.Event, "synchronize"),
        ("torch.cuda.Event.query", torch.cuda.Event, "query"),
        ("torch.cuda.synchronize", torch.cuda, "synchronize"),
        ("torch.cuda.current_stream", torch.cuda, "current_stream"),
        ("torch.cuda.default_stream", torch.cuda, "default_stream"),
        ("time.perf_counter", time_mod, "perf_counter"),
        ("time.perf_counter_ns", time_mod, "perf_counter_ns"),
        ("time.monotonic", time_mod, "monotonic"),
        ("time.time", time_mod, "time"),
        ("torch.manual_seed", torch, "manual_seed"),
        ("torch.randn", torch, "randn"),
        ("torch.rand", torch, "rand"),
        ("torch.randint", torch, "randint"),
        ("torch.allclose", torch, "allclose"),
        ("torch.isclose", torch, "isclose"),
        ("torch.equal", torch, "equal"),
        ("torch.isfinite", torch, "isfinite"),
        ("torch.isnan", torch, "isnan"),
        ("torch.where", torch, "where"),
        ("torch.zeros", torch, "zeros"),
        ("torch.full", torch, "full"),
        ("torch.nn.Module.__call__", torch.nn.Module, "__call__"),
        ("torch.nn.Module._call_impl", torch.nn.Module, "_call_impl"),
        ("torch.nn.Module.load_state_dict", torch.nn.Module, "load_state_dict"),
        ("torch.nn.Module.state_dict", torch.nn.Module, "state_dict"),
        ("torch.nn.Module.to", torch.nn.Module, "to"),
        ("torch.profiler.profile", torch.profiler, "profile"),
        ("torch.autograd.profiler.profile", torch.autograd.profiler, "profile"),
        ("torch.autograd.profiler.record_function", torch.autograd.profiler, "record_function"),
        ("torch.compile", torch, "compile"),
        ("json.dumps", json, "dumps"),
        ("os.write", os, "write"),
        ("builtins.isinstance", builtins, "isinstance"),
        ("builtins.issubclass", builtins, "issubclass"),
    ]
    for m in ("clone", "copy_", "to", "double", "abs", "max", "sum", "item", "reshape", "view",
              "contiguous", "detach", "zero_", "data_ptr", "untyped_storage", "numel",
              "__sub__", "__eq__", "__ne__", "__le__", "__and__", "__or__", "__invert__"):
        targets.append((f"torch.Tensor.{m}", T, m))
    # Every other attribute torch.Tensor resolves (a name set in its dict shadows the C
    # method: __int__, __float__, __bool__, __index__, tolist, __lt__, numel...), the
    # builtins and torch attributes the checks call, math.isfinite, and the holder of the
    # C functions the comparison reads values through.
    seen = {label for label, _, _ in targets}
    targets += [t for t in tensor_class_targets(torch) if t[0] not in seen]
    targets.append(("math.isfinite", math, "isfinite"))
    saved = saved_ops()
    for name in ("VF", "TB", "SB", "Tensor", "Parameter", "strided", "overlap"):
        targets.append((f"{_outchk.__name__}._SAVED.{name}", saved, name))
    return targets


def snapshot_patchables(torch: Any, module: types.ModuleType | None = None, *,
                        import_dynamo: bool = False) -> dict[str, tuple[Any, str, Any]]:
    """``{label: (owner, attribute, original object)}`` for :func:`patch_targets` and the
    functions and classes bound in ``module``'s globals (the worker itself).

    ``import_dynamo``: import TorchDynamo first (a worker that runs ``torch.compile``).  It
    takes about 5 s on the H200 machine (``docs/evaluation.md`` §3), so only such a worker
    pays for it; a wrapper TorchDynamo puts around a torch function later is no patch
    (:func:`find_patches`)."""
    if import_dynamo:
        try:
            import torch._dynamo  # noqa: F401
        except Exception:  # noqa: BLE001 - an install without dynamo has nothing to rebind
            pass
    snap: dict[str, tuple[Any, str, Any]] = {}
    for label, owner, attr in patch_targets(torch):
        obj = static_lookup(owner, attr)
        if obj is not _outchk._MISSING:
            snap[label] = (owner, attr, obj)
    for mod in (module, _outchk if module is not None else None):
        if mod is None:
            continue
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj) or name == "_SAVED":
                snap[f"{mod.__name__}.{name}"] = (mod, name, obj)
    return snap


def find_patches(snapshot: Mapping[str, tuple[Any, str, Any]]) -> list[str]:
    """Labels whose object was replaced since :func:`snapshot_patchables` (looked up as
    stored, :func:`~cudaperf_cli.evaluate.torch_output_checks.static_lookup`: a classmethod
    is the same object at every look-up).

    A replacement made by PyTorch itself is not a patch: a wrapper defined in a ``torch``
    module whose ``__wrapped__`` chain leads to the original (TorchDynamo wraps
    ``torch.manual_seed`` in ``torch._disable_dynamo`` on first use).
    """
    return [label for label, (owner, attr, orig) in snapshot.items()
            if not _same_or_torch_wrapper(static_lookup(owner, attr), orig)]


def _same_or_torch_wrapper(obj: Any, orig: Any) -> bool:
    for _ in range(4):
        if obj is orig:
            return True
        if not str(getattr(obj, "__module__", "") or "").startswith("torch"):
            return False
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            return False
    return False


def precision_flags(torch: Any) -> dict[str, Any]:
    """The PyTorch settings that allow reduced precision (TF32, reduced-precision
    reductions, the default dtype)."""
    flags: dict[str, Any] = {}
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        m = torch.backends.cuda.matmul
        for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction",
                     "allow_bf16_reduced_precision_reduction", "fp32_precision"):
            if hasattr(m, name):
                try:
                    flags[f"torch.backends.cuda.matmul.{name}"] = getattr(m, name)
                except Exception:  # noqa: BLE001
                    pass
        for name in ("allow_tf32", "fp32_precision"):
            if hasattr(torch.backends.cudnn, name):
                try:
                    flags[f"torch.backends.cudnn.{name}"] = getattr(torch.backends.cudnn, name)
                except Exception:  # noqa: BLE001
                    pass
        flags["torch.get_float32_matmul_precision()"] = torch.get_float32_matmul_precision()
        flags["torch.get_default_dtype()"] = str(torch.get_default_dtype())
    return flags


def profile_records(events: Any, cuda_device_type: Any) -> list[dict[str, Any]]:
    """Plain records of ``torch.profiler`` FunctionEvents: ``{"kind": "kernel" | "memcpy"
    | "memset" | "runtime" | "annotation" | "cpu_op", "name", "id", "linked_id",
    "start_us", "end_us", "thread", "stream"}``.  GPU-side copies of user annotations are
    dropped."""
    events = list(events)
    user_names = {FORWARD_ANNOTATION, MARKER_ANNOTATION}
    for e in events:
        if getattr(e, "is_user_annotation", False) and getattr(e, "device_type", None) != cuda_device_type:
            user_names.add(e.name)
    out = []
    for e in events:
        name = e.name
        on_gpu = getattr(e, "device_type", None) == cuda_device_type
        if on_gpu:
            if name in user_names or getattr(e, "is_user_annotation", False):
                continue
            kind = "memcpy" if name.startswith("Memcpy") else "memset" if name.startswith("Memset") else "kernel"
        elif name in (FORWARD_ANNOTATION, MARKER_ANNOTATION):
            kind = "annotation"
        elif _RUNTIME_NAME.match(name):
            kind = "runtime"
        else:
            kind = "cpu_op"
        out.append({
            "kind": kind,
            "name": name,
            "id": int(getattr(e, "id", 0) or 0),
            "linked_id": int(getattr(e, "linked_correlation_id", 0) or 0),
            "start_us": float(e.time_range.start),
            "end_us": float(e.time_range.end),
            "thread": getattr(e, "thread", None),
            "stream": getattr(e, "device_resource_id", None) if on_gpu else None,
        })
    return out


def _base_op(name: str) -> str:
    return name.split("::", 1)[1].split(".", 1)[0] if "::" in name else name


def analyze_profile(
    records: Sequence[Mapping[str, Any]],
    *,
    allow_torch_ops: bool = False,
    allowed_ops: Sequence[str] = (),
) -> dict[str, Any]:
    """What ran during the profiled forward.

    A GPU activity belongs to the forward when the CPU op it is linked to (the profiler's
    correlation: the innermost op active at its launch) is the :data:`FORWARD_ANNOTATION`
    window or starts inside it; without a link, when its launch (the runtime call with the
    same correlation id) started inside the window; without either, when it started on the
    GPU after the window opened.  A kernel's *owner* is that linked op (else the innermost
    CPU op around its launch); the kernel is PyTorch's (not custom) when the owner is a
    PyTorch op (:data:`TORCH_OP_PREFIXES`) or its name matches :data:`LIBRARY_KERNEL_RE`.
    Records of all threads are used as one timeline (the worker calls forward from one
    thread).  The current stream is the stream of the marker kernels
    launched in :data:`MARKER_ANNOTATION` windows just before and after the forward.

    With ``allow_torch_ops`` (matmul and convolution left to cuBLAS/cuDNN), what a
    convolution op does inside is cuDNN's, not the candidate's: a bias addition
    (:data:`NESTED_LIBRARY_OPS`) nested in one (on the same thread) is not a disallowed op,
    and a library kernel (:data:`LIBRARY_KERNEL_RE`) launched inside one may run on another
    stream when the current stream waited for it (it ended before the first current-stream
    activity launched after that op: cuDNN's FFT convolutions use streams of their own and
    join them to the caller's); both are listed in ``notes``, the kernels also in
    ``library_stream_launches``, and the worker then times the candidate with a device
    synchronize before each repetition, so that work on another stream cannot overlap the
    flush or the previous repetition outside the events.  The op names come from the
    profiler; the static guards refuse candidates that write profiler events themselves.

    Returns:
        ``{"gpu_activities": n, "kernels": [{"name", "stream", "owner", "custom"}],
        "custom_kernels": [names],
        "torch_ops": {aten op: count}, "disallowed_ops": [names], "dtoh_copies": n,
        "side_stream_launches": [{"name", "stream"}], "library_stream_launches": [{"name",
        "stream"}], "current_streams": [ids], "notes"}``.

    Raises:
        ValueError: the records hold no forward window.
    """
    notes: list[str] = []
    wins = [r for r in records if r["kind"] == "annotation" and r["name"] == FORWARD_ANNOTATION]
    if not wins:
        raise ValueError("the profile holds no forward window")
    win = wins[0]
    markers = [r for r in records if r["kind"] == "annotation" and r["name"] == MARKER_ANNOTATION]
    cpu = [r for r in records if r["kind"] in ("cpu_op", "annotation")]
    by_id = {r["id"]: r for r in cpu if r.get("id")}
    runtime = {r["id"]: r for r in records if r["kind"] == "runtime" and r.get("id")}
    gpu = [r for r in records if r["kind"] in ("kernel", "memcpy", "memset")]

    def contains(w: Mapping[str, Any], t: float) -> bool:
        return w["start_us"] <= t <= w["end_us"]

    def linked_op(g: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return by_id.get(g.get("linked_id")) if g.get("linked_id") else None

    def in_window(g: Mapping[str, Any], w: Mapping[str, Any]) -> bool | None:
        """Whether ``g`` was launched inside window ``w``; None when nothing places it."""
        op = linked_op(g)
        if op is not None:
            return op is w or contains(w, op["start_us"])
        r = runtime.get(g.get("id"))
        if r is not None:
            return contains(w, r["start_us"])
        return None

    def in_forward(g: Mapping[str, Any]) -> bool:
        placed = in_window(g, win)
        if placed is not None:
            return placed
        return g["start_us"] >= win["start_us"]  # nothing to place it: ran after forward began

    def same_thread(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        return a.get("thread") is None or b.get("thread") is None or a["thread"] == b["thread"]

    def owner_op(g: Mapping[str, Any], pool: Sequence[Mapping[str, Any]] = cpu,
                 thread: bool = False) -> Mapping[str, Any] | None:
        """The op that launched ``g``: its linked op, else the innermost of ``pool`` around
        its launch record (on the launching thread with ``thread``)."""
        op = linked_op(g)
        if op is not None:
            return op
        r = runtime.get(g.get("id"))
        if r is None:
            return None
        around = [o for o in pool if contains(o, r["start_us"]) and (not thread or same_thread(o, r))]
        return min(around, key=lambda o: o["end_us"] - o["start_us"]) if around else None

    def owner(g: Mapping[str, Any]) -> str | None:
        op = owner_op(g)
        return None if op is None else op["name"]

    if gpu and not any(runtime.get(g.get("id")) or linked_op(g) for g in gpu):
        notes.append("no launch records or correlation links: GPU work placed by its start time")
    fwd = [g for g in gpu if in_forward(g)]
    current = sorted({
        g["stream"] for g in gpu if g.get("stream") is not None and any(in_window(g, m) for m in markers)
    })
    if not current:
        notes.append("the current stream could not be identified (no marker kernel seen)")
    kernels = []
    for g in fwd:
        if g["kind"] != "kernel":
            continue
        own = owner(g)
        library = (own is not None and own.startswith(TORCH_OP_PREFIXES)) or bool(
            LIBRARY_KERNEL_RE.search(g["name"])
        )
        kernels.append({"name": g["name"], "stream": g.get("stream"), "owner": own, "custom": not library})
    ops = [
        o for o in cpu
        if o is not win and o["kind"] == "cpu_op"
        and win["start_us"] <= o["start_us"] and o["end_us"] <= win["end_us"]
    ]
    torch_ops = Counter(_base_op(o["name"]) for o in ops if o["name"].startswith("aten::"))
    allowed = set(ALLOWED_ATEN_OPS) | set(allowed_ops)
    library_ops: list[Mapping[str, Any]] = []
    if allow_torch_ops:
        allowed |= MATMUL_CONV_OPS
        library_ops = [o for o in ops if o["name"].startswith("aten::")
                       and _base_op(o["name"]) in MATMUL_CONV_OPS and "conv" in _base_op(o["name"])]

    def in_library_op(o: Mapping[str, Any]) -> bool:
        """``o`` is an allowed convolution op or runs inside one on the same thread (cuDNN's
        transposed convolution adds its bias with ``aten::add_``): the library's own work."""
        return any(c is o or (c["start_us"] <= o["start_us"] and o["end_us"] <= c["end_us"] and same_thread(c, o))
                   for c in library_ops)

    def library_internal(o: Mapping[str, Any]) -> bool:
        return _base_op(o["name"]) in NESTED_LIBRARY_OPS and in_library_op(o)

    internal = sorted({_base_op(o["name"]) for o in ops if o["name"].startswith("aten::")
                       and _base_op(o["name"]) not in allowed and library_internal(o)})
    if internal:
        notes.append("inside allowed convolution ops (their own work, not the candidate's): "
                     + ", ".join("aten::" + n for n in internal))
    disallowed = sorted({_base_op(o["name"]) for o in ops if o["name"].startswith("aten::")
                         and _base_op(o["name"]) not in allowed and not library_internal(o)})
    dtoh = [
        g for g in fwd
        if g["kind"] == "memcpy" and "DtoH" in g["name"] and owner(g) != "aten::_local_scalar_dense"
    ]

    def launched_at(g: Mapping[str, Any]) -> float:
        r = runtime.get(g.get("id"))
        if r is not None:
            return float(r["start_us"])
        op = linked_op(g)
        return float(op["start_us"]) if op is not None else float(g["start_us"])

    def library_internal_stream(g: Mapping[str, Any]) -> bool:
        """A library kernel launched inside an allowed convolution op (cuDNN's FFT
        algorithms run on streams of their own) that the caller's stream waited for: it
        ended before the first current-stream activity launched after that op ended."""
        op = owner_op(g, ops, thread=True)
        if op is None or not library_ops or not in_library_op(op) or not LIBRARY_KERNEL_RE.search(g["name"]):
            return False
        later = [k for k in gpu if k.get("stream") in current and launched_at(k) >= op["end_us"]]
        return bool(later) and g["end_us"] <= min(k["start_us"] for k in later)

    off_stream = [g for g in fwd if current and g.get("stream") is not None and g["stream"] not in current]
    exempt = [g for g in off_stream if library_internal_stream(g)]
    if exempt:
        notes.append(f"{len(exempt)} library kernel(s) of allowed convolution ops ran on the "
                     f"library's own stream(s) {sorted({g['stream'] for g in exempt})}: timed with "
                     "a synchronize before each repetition")
    side = [{"name": g["name"], "stream": g.get("stream")} for g in off_stream if g not in exempt]
    return {
        "gpu_activities": len(gpu),
        "kernels": kernels,
        "custom_kernels": [k["name"] for k in kernels if k["custom"]],
        "torch_ops": dict(torch_ops),
        "disallowed_ops": disallowed,
        "dtoh_copies": len(dtoh),
        "side_stream_launches": side,
        "library_stream_launches": [{"name": g["name"], "stream": g.get("stream")} for g in exempt],
        "current_streams": current,
        "notes": notes,
    }


def _short(name: str, limit: int = 90) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def profile_verdict(
    report: Mapping[str, Any], disabled: Sequence[str] = (), allow_torch_ops: bool = False
) -> tuple[str, str] | None:
    """``(guard id, reason)`` from an :func:`analyze_profile` report, checked in the order
    ``no_custom_kernel``, ``torch_fallback``, ``side_stream``; None when all pass."""
    if NO_CUSTOM_KERNEL not in disabled and not report["custom_kernels"]:
        seen = ", ".join(_short(k["name"]) for k in report["kernels"][:4]) or "none"
        return NO_CUSTOM_KERNEL, (
            "no kernel of the candidate's own ran during forward (kernels launched: "
            f"{seen}); the work must be done by the candidate's CUDA kernels"
        )
    if TORCH_FALLBACK not in disabled:
        if report["disallowed_ops"]:
            ops = ", ".join("aten::" + n for n in report["disallowed_ops"][:6])
            allowed = "allocation, views and copies" + (", matmul and convolution" if allow_torch_ops else "")
            return TORCH_FALLBACK, (
                f"forward ran PyTorch compute ops: {ops} (allowed in forward: {allowed})"
            )
        if report["dtoh_copies"]:
            return TORCH_FALLBACK, (
                f"forward copied device memory to the host ({report['dtoh_copies']} "
                "device-to-host copies): the work must stay on the GPU"
            )
    if SIDE_STREAM not in disabled and report["side_stream_launches"]:
        side = report["side_stream_launches"]
        streams = sorted({s["stream"] for s in side})
        return SIDE_STREAM, (
            f"{len(side)} launch(es) (e.g. {_short(side[0]['name'])}) ran on stream(s) "
            f"{streams}, not on the current stream {report['current_streams']}: launch on "
            "the stream the runtime passes (torch.cuda.current_stream())"
        )
    return None


# ---------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------


class _HostEvent:
    """Host-clock stand-in for ``torch.cuda.Event`` in the host test backend."""

    def __init__(self, enable_timing: bool = True):
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: "_HostEvent") -> float:
        return (end.t - self.t) * 1e3


@dataclass
class _Context:
    """What the guards and the timing of the default configuration reuse.

    ``initial_buffers``: the reference's buffers before any forward (restored into both
    models before each trial); ``inplace``: the candidate gets copies of the inputs (the
    forward writes an input); ``buffers_warned``: a buffer mismatch was reported."""

    mod: types.ModuleType
    ref: Any
    cand: Any
    initial_buffers: dict[str, Any] = field(default_factory=dict)
    inplace: bool = False
    buffers_warned: bool = False


@dataclass
class _Trial:
    ok: bool
    message: str
    checks: list[OutputCheck]
    lower_precision: dict[str, Any] | None = None
    out_fingerprint: Any = None


class TorchWorker:
    """Runs one :class:`TorchEvalJob`; :meth:`run` returns the :class:`TorchEvalResult`."""

    def __init__(self, job: TorchEvalJob, state: State, emit: Callable[[Any], None] | None = None,
                 after_gate: Callable[[], None] | None = None,
                 confine: Callable[[list[str], list[str]], Confinement] | None = None):
        """``confine``: called with (paths to read, paths to write) just before the
        candidate is imported (the worker process passes
        :func:`~cudaperf_cli.confine.confine_candidate`); None: not confined."""
        self.job = job
        self.state = state
        self.after_gate = after_gate or (lambda: None)
        self.confine = confine
        self.confinement: Confinement | None = None
        #: writes a line on the result channel (the GPU gate's ``ready``)
        self.emit = emit or (lambda doc: None)
        self.prepare_s: float | None = None
        self.lock_wait_s = 0.0
        #: Peak device memory before torch.compile was timed, and torch.compile's own
        #: (bytes; None when it did not run): the evaluation's peak excludes the latter.
        self.peak_before_compile: int | None = None
        self.compile_peak: int | None = None
        self.footprint_bytes: int | None = None
        self._footprint_pending = False
        self.degenerate: bool | None = None
        self.precision_config = 0
        self.precision_note = ""
        from cudaperf_cli.evaluate.tolerances import resolve_tolerances

        self.tolerances = resolve_tolerances(overrides=job.tolerances)
        self.configs: list[TorchConfigResult] = []
        self.warnings: list[str] = []
        self.profile: dict[str, Any] | None = None
        self.timing: TorchTiming | None = None
        self.device_info: dict[str, Any] | None = None
        self.t0 = time.monotonic()
        self.disabled = set(job.disabled_guards)
        self.torch: Any = None
        self.dev: Any = None
        self.snapshot: dict[str, tuple[Any, str, Any]] = {}
        self.flags: dict[str, Any] = {}
        #: global_state() before the candidate was imported (patching)
        self.global_state: dict[str, Any] = {}
        #: the threads alive before the candidate was imported (background_thread)
        self.threads: ThreadWatch | None = None
        #: ``CUDAPERF_WORKER_BACKEND=host``: tests only.  Models run on the CPU, the host
        #: clock replaces CUDA events, the profiler guards are skipped.
        self.host = os.environ.get(BACKEND_ENV) == "host"

    # -- entry -------------------------------------------------------------------------

    def run(self) -> TorchEvalResult:
        try:
            return self._run()
        except Stop as s:
            return self._result(s.status, s.message, error=s.error, guard=s.guard)

    def _result(
        self,
        status: str,
        message: str,
        *,
        error: dict[str, Any] | None = None,
        guard: dict[str, Any] | None = None,
        worst: dict[str, Any] | None = None,
    ) -> TorchEvalResult:
        self.state.set("done")
        if self.timing is not None:
            self.warnings.extend(self.timing.warnings)
        peak = None
        details: dict[str, Any] = {"phase_s": self.state.phase_seconds()}
        if self.torch is not None and self.dev is not None and not self.host:
            try:
                peak = max(int(self.torch.cuda.max_memory_allocated(self.dev)),
                           self.peak_before_compile or 0)
            except Exception:  # noqa: BLE001 - after a sticky CUDA error
                peak = None
        if self.compile_peak is not None:
            details["compile_peak_gpu_bytes"] = self.compile_peak
        if self.confinement is not None:
            details["confinement"] = self.confinement.to_json()
        if self.threads is not None and self.threads.first_call_new:
            # OS threads that appeared during the candidate's first call (not judged:
            # library threads start then; docs/pytorch-evaluation.md §4, background_thread)
            details["threads_first_call"] = self.threads.first_call_new
        return TorchEvalResult(
            status=status,
            message=message,
            configs=self.configs,
            guard=guard,
            worst_mismatch=worst,
            timing=self.timing,
            profile=self.profile,
            device=self.device_info,
            error=error,
            phase="done",
            elapsed_s=time.monotonic() - self.t0,
            prepare_s=self.prepare_s,
            lock_wait_s=self.lock_wait_s,
            peak_gpu_bytes=peak,
            footprint_bytes=self.footprint_bytes,
            tolerances=self.tolerances,
            degenerate=self.degenerate,
            warnings=list(dict.fromkeys(self.warnings)),
            summary=summarize_torch_result(self.configs, self.timing),
            details=details,
        )

    def _guard_on(self, gid: str) -> bool:
        return gid not in self.disabled

    def _run(self) -> TorchEvalResult:
        job = self.job
        torch = self._open_device()
        self.state.set("load_problem")
        try:
            default_mod = load_problem_module(job.problem, {}, "default")
        except Exception as exc:  # noqa: BLE001
            raise Stop(REFERENCE_ERROR, f"cannot load the problem: {_one_line(exc)}",
                       error=_exc_error(exc, "problem")) from None

        compiles = job.compile_baseline and (job.mode == "baseline" or not job.baseline_ms)
        _outchk.arm(torch)
        self.snapshot = snapshot_patchables(torch, sys.modules[__name__], import_dynamo=compiles)
        self.flags = precision_flags(torch)
        self.global_state = global_state(torch)
        # PyTorch's CPU thread pool starts on the first parallel CPU op: start it now, so
        # that its threads are no candidate's (background_thread).
        torch.ones(1 << 20).sum()
        self.threads = ThreadWatch()
        if self.host:
            self._orig_event: Any = _HostEvent
            self._orig_record: Any = _HostEvent.record
            self._orig_elapsed: Any = _HostEvent.elapsed_time
        else:
            self._orig_event = torch.cuda.Event
            self._orig_record = torch.cuda.Event.record
            self._orig_elapsed = torch.cuda.Event.elapsed_time
        self._orig_sync = torch.cuda.synchronize
        self._orig_perf = time.perf_counter

        # Everything above is preparation (imports, the CUDA context, the problem's module);
        # the GPU lock is taken now, before any device memory or kernel of the evaluation.
        self.prepare_s = time.monotonic() - self.t0
        self.lock_wait_s = self.wait_for_gpu()
        self.after_gate()
        if not self.host:
            torch.cuda.reset_peak_memory_stats(self.dev)
        if job.mode == "baseline":
            return self._baseline(default_mod)

        if self.confine is not None:  # from here on this process runs candidate code
            self.confinement = self.confine(*candidate_paths(job, compiles=compiles))
        self.state.set("import_candidate")
        self.state.mark_candidate()
        name = Path(job.module_path).name
        try:
            mod = import_candidate(job.module_path)
        except BaseException as exc:  # noqa: BLE001 - SystemExit from candidate code too
            status, message, errors = classify_import_error(exc, name)
            err = _exc_error(exc, "import")
            if errors:
                err["errors"] = errors
                message = f"{message}:\n{errors}"
            raise Stop(status, message, error=err) from None
        model_new = getattr(mod, "ModelNew", None)
        if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
            raise Stop(COMPILE_ERROR, f"{name} defines no class ModelNew(torch.nn.Module)")
        self._check_patching("while the candidate was imported")
        if self._guard_on(INHERITS_MODEL):
            why = inherits_model(model_new, default_mod.Model)
            if why:
                raise guard_stop(INHERITS_MODEL, why)

        configs: list[tuple[str, dict[str, int]]] = [("default", {})]
        configs += [(f"alt{i + 1}", dict(s)) for i, s in enumerate(job.shapes)]
        # The float64 comparison (lower_precision) runs on the smallest configuration: the
        # last alternative one (about half the sizes) when there is one.
        self.precision_config = len(configs) - 1
        ctx: _Context | None = None
        for ci, (cname, consts) in enumerate(configs):
            if ci > 0 and self.configs[0].status != CORRECT:
                cr = TorchConfigResult(cname, consts, "skipped", "not run: the default configuration failed")
                self.configs.append(cr)
                continue
            try:
                if ci == 0:
                    pmod = default_mod
                else:
                    self.state.set("load_problem", cname)
                    try:
                        pmod = load_problem_module(job.problem, consts, cname)
                    except Exception as exc:  # noqa: BLE001
                        raise Stop(REFERENCE_ERROR,
                                   f"cannot load the problem with {consts}: {_one_line(exc)}",
                                   error=_exc_error(exc, "problem", cname), config=cname) from None
                cr, c = self._verify_config(ci, cname, consts, pmod, model_new)
            except Stop as s:
                if ci > 0 and s.status == REFERENCE_ERROR:
                    # The reference itself fails at the alternative shapes (found on the meta
                    # device by the loader): not the candidate's fault; that check is lost.
                    self.warnings.append(
                        f"config '{cname}' ({_consts(consts)}) not verified: the reference failed "
                        f"there ({s.message})")
                    if self.configs and self.configs[-1].name == cname:
                        self.configs[-1].status = "skipped"
                    continue
                if ci > 0 and s.status == RUNTIME_ERROR and self._guard_on(SHAPE_SPECIALISED):
                    raise guard_stop(
                        SHAPE_SPECIALISED,
                        f"correct on the default shapes but fails on config '{cname}' "
                        f"({_consts(consts)}): {s.message}",
                        cname,
                        s.trial,
                    ) from None
                raise
            if ci == 0:
                ctx = c
            else:
                del c
        default = self.configs[0]
        if default.status != CORRECT:
            worst = None
            for o in default.outputs:
                if not o.ok and o.worst_mismatch:
                    worst = {"path": o.path, **o.worst_mismatch}
                    break
            return self._result(WRONG, default.message, worst=worst)
        bad_alt = [c for c in self.configs[1:] if c.status not in (CORRECT, "skipped")]
        if bad_alt:
            c = bad_alt[0]
            if self._guard_on(SHAPE_SPECIALISED):
                raise guard_stop(
                    SHAPE_SPECIALISED,
                    f"correct on the default shapes but wrong on config '{c.name}' "
                    f"({_consts(c.constants)}): {c.message}",
                    c.name,
                    c.failed_trial,
                )
            worst = next(({"path": o.path, **o.worst_mismatch} for o in c.outputs
                          if not o.ok and o.worst_mismatch), None)
            return self._result(WRONG, c.message, worst=worst)
        if (self._guard_on(LOWER_PRECISION) and not job.allow_lower_precision
                and not any(c.lower_precision for c in self.configs) and not self.precision_note):
            self.warnings.append("lower_precision (float64 comparison) not checked: no configuration ran it")
        assert ctx is not None

        self._profile_guards(ctx)
        if self._guard_on(RESULT_CACHE):
            self._result_cache_check(ctx)
        status = CORRECT
        if job.time:
            status = self._time(ctx)
        n = sum(c.trials_run for c in self.configs)
        message = f"correct on {len(self.configs)} shape configuration(s), {n} trial(s)"
        t = self.timing
        if t is not None and status == SLOW:
            message += (f"; timing stopped early: ModelNew ~{t.candidate_estimate_ms:.4g} ms a call "
                        f"(estimate from {t.warmup_reps} call(s)) > slow limit {t.slow_ms:.4g} ms")
        elif t is not None and t.candidate is not None:
            message += f"; ModelNew {t.candidate.median_ms:.4g} ms"
        if t is not None:
            if t.speedup_eager is not None:
                message += f", {t.speedup_eager:.3g}x vs {t.baselines['eager']}"
            if t.speedup_compile is not None:
                message += f", {t.speedup_compile:.3g}x vs {t.baselines['compile']}"
            elif t.compile_error:
                message += "; torch.compile baseline failed"
        return self._result(status, message)

    def wait_for_gpu(self) -> float:
        """Ask the parent for the GPU (the per-GPU lock) and wait for it; seconds waited."""
        from cudaperf_cli.evaluate.child import wait_for_gpu

        return float(wait_for_gpu(self.emit, self.state))

    # -- device ------------------------------------------------------------------------

    def _open_device(self) -> Any:
        self.state.set("import_torch")
        try:
            import torch
        except Exception as exc:  # noqa: BLE001
            raise Stop(NO_DEVICE, f"no CUDA device: PyTorch cannot be imported ({_one_line(exc)})") from None
        self.state.set("device")
        from cudaperf_cli.torch_cpu_math import warm_up_cpu_math

        warm_up_cpu_math(torch)  # CPU math (the host backend, CPU-side references): pytorch#188792
        if self.host:
            self.torch, self.dev = torch, torch.device("cpu")
            self._no_tf32(torch)
            self.device_info = {"name": "host (CUDAPERF_WORKER_BACKEND=host, tests only)",
                                "l2_bytes": None, "torch_version": torch.__version__}
            return torch
        if not torch.cuda.is_available():
            raise Stop(
                NO_DEVICE,
                f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
                f"built for CUDA {torch.version.cuda})",
            )
        count = torch.cuda.device_count()
        if self.job.device >= count:
            raise Stop(NO_DEVICE, f"no CUDA device: device {self.job.device} requested, {count} visible")
        self.torch = torch
        self.dev = torch.device("cuda", self.job.device)
        torch.cuda.set_device(self.dev)
        self._no_tf32(torch)
        props = torch.cuda.get_device_properties(self.dev)
        self.device_info = {
            "name": props.name,
            "compute_capability": f"{props.major}.{props.minor}",
            "arch": f"sm_{props.major}{props.minor}",
            "sm_count": props.multi_processor_count,
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "memory_total_bytes": props.total_memory,
            "torch_version": torch.__version__,
            "torch_cuda_version": torch.version.cuda,
        }
        return torch

    @staticmethod
    def _no_tf32(torch: Any) -> None:
        """fp32 stays fp32 for the reference and the baselines."""
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.set_float32_matmul_precision("highest")

    def _sync(self) -> None:
        if not self.host:
            self._orig_sync(self.dev)

    # -- guards used everywhere ------------------------------------------------------------

    def _check_patching(self, when: str, config: str | None = None, trial: int | None = None) -> None:
        """The ``patching`` guard (named targets, torch.Tensor's attributes, global state),
        ``background_thread`` (Python threads the candidate left running) and the
        precision flags (``lower_precision``), after anything that ran candidate code."""
        if self._guard_on(PATCHING):
            patched = find_patches(self.snapshot)
            patched += global_state_changes(self.global_state, global_state(self.torch))
            if patched:
                raise guard_stop(
                    PATCHING,
                    f"{', '.join(patched[:5])} replaced or changed {when}: the evaluator's timers, "
                    "synchronization and checks must stay PyTorch's own",
                    config,
                    trial,
                )
        if self._guard_on(BACKGROUND_THREAD) and self.threads is not None:
            why = self.threads.timed_leftover or self.threads.python_leftovers()
            if why:
                raise guard_stop(
                    BACKGROUND_THREAD,
                    f"{why} {when}: forward must finish its work before it returns (work left to "
                    "a thread is not timed and may land after the output was checked)",
                    config,
                    trial,
                )
        if self._guard_on(LOWER_PRECISION) and not self.job.allow_lower_precision:
            now = precision_flags(self.torch)
            changed = [f"{k}: {self.flags[k]!r} -> {v!r}" for k, v in now.items() if self.flags.get(k) != v]
            if changed:
                raise guard_stop(
                    LOWER_PRECISION,
                    f"the candidate changed precision settings {when} ({'; '.join(changed)}): "
                    "the problem is float32 without TF32",
                    config,
                    trial,
                )

    # -- models and inputs -----------------------------------------------------------------

    def _to_dev(self, x: Any) -> Any:
        return x.to(self.dev) if isinstance(x, self.torch.Tensor) else x

    def _clone(self, args: Sequence[Any]) -> list[Any]:
        T = self.torch.Tensor
        return [a.clone() if isinstance(a, T) else copy.deepcopy(a) for a in args]

    def _on_device(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` with the evaluation's device as torch's default device, so tensors that
        ``get_inputs()`` / ``Model(...)`` create are made there directly: no host copy of a
        17 GB input, no minutes of CPU random numbers.  When ``fn`` fails that way (code that
        needs CPU tensors, e.g. ``.numpy()``), it runs again on the CPU (the caller moves the
        results).  Values are drawn by the device's generator after ``torch.manual_seed``
        (the same on every GPU of one kind; the loader's CPU draws differ)."""
        torch = self.torch
        try:
            with torch.device(self.dev):
                return fn()
        except Exception:  # noqa: BLE001 - retried on the CPU; a real error raises again
            return fn()

    def _inputs(self, mod: types.ModuleType, seed: int, config: str, trial: int | None) -> list[Any]:
        torch = self.torch
        self.state.set("inputs", config, trial)
        try:
            def draw() -> list[Any]:
                torch.manual_seed(seed)
                return list(mod.get_inputs())

            args = self._on_device(draw)
        except Exception as exc:  # noqa: BLE001
            raise Stop(REFERENCE_ERROR, f"get_inputs() failed: {_one_line(exc)}",
                       error=_exc_error(exc, "get_inputs", config, trial), config=config) from None
        return [self._to_dev(a) for a in args]

    def _build_models(self, mod: types.ModuleType, model_new: Any, config: str) -> tuple[Any, Any]:
        torch, seed = self.torch, self.job.seed
        self.state.set("construct", config)
        try:
            torch.manual_seed(seed)
            init = [self._to_dev(a) for a in mod.get_init_inputs()]

            def build_ref() -> Any:
                torch.manual_seed(seed)
                return mod.Model(*copy.deepcopy(init))

            ref = self._on_device(build_ref).to(self.dev)
        except Exception as exc:  # noqa: BLE001
            raise Stop(REFERENCE_ERROR, f"cannot construct Model: {_one_line(exc)}",
                       error=_exc_error(exc, "reference_init", config), config=config) from None
        self.state.mark_candidate()
        try:
            def build_cand() -> Any:
                torch.manual_seed(seed)
                return model_new(*copy.deepcopy(init))

            cand = self._on_device(build_cand)
            cand = cand.to(self.dev)
        except Exception as exc:  # noqa: BLE001
            raise Stop(RUNTIME_ERROR, f"ModelNew(*get_init_inputs()) raised {_one_line(exc)}",
                       error=_exc_error(exc, "init", config), config=config) from None
        sd = ref.state_dict()
        if sd:
            try:
                cand.load_state_dict(sd, strict=True)
            except Exception as exc:  # noqa: BLE001
                lines = " ".join(str(exc).split())[:700]
                raise Stop(
                    RUNTIME_ERROR,
                    "ModelNew's parameters and buffers do not match Model's, so the reference "
                    f"weights cannot be copied into it ({lines}); register the same names and "
                    "shapes as Model",
                    error=_exc_error(exc, "state_dict", config),
                    config=config,
                ) from None
        self._check_patching("while ModelNew was constructed", config)
        return ref, cand

    def _call_candidate(self, cand: Any, args: Sequence[Any], config: str, trial: int | None,
                        phase: str = "candidate") -> tuple[Any, Any]:
        """Run ``cand(*args)``; returns (output, :func:`outputs_fingerprints` of it taken on the
        current stream before any device-wide synchronize).  Exceptions and asynchronous CUDA
        errors become ``runtime_error``.  Right after forward returns, before anything reads
        the output: no thread it started may still run (``background_thread``) and the output
        must be plain dense tensors (``output_type``, :meth:`_check_output_type`)."""
        torch = self.torch
        self.state.set(phase, config, trial)
        watch = self.threads if self._guard_on(BACKGROUND_THREAD) else None
        if watch is not None:
            watch.before_call()
        try:
            with torch.no_grad():
                out = cand(*args)
        except Exception as exc:  # noqa: BLE001
            raise Stop(RUNTIME_ERROR, f"ModelNew.forward raised {_one_line(exc)}" + _at(config, trial),
                       error=_exc_error(exc, "forward", config, trial), config=config, trial=trial) from None
        if watch is not None:
            why = watch.after_call()
            if why:
                raise guard_stop(
                    BACKGROUND_THREAD,
                    f"{why} when forward returned: forward must finish its work before it returns "
                    "(work left to a thread is not timed and may land after the output was checked)",
                    config,
                    trial,
                )
        self._check_output_type(out, NO_REFERENCE, config, trial)
        try:
            with torch.no_grad():
                snap = outputs_fingerprints(out)
        except Exception as exc:  # noqa: BLE001
            raise Stop(RUNTIME_ERROR, f"ModelNew.forward raised {_one_line(exc)}" + _at(config, trial),
                       error=_exc_error(exc, "forward", config, trial), config=config, trial=trial) from None
        self.state.set("candidate.sync", config, trial)
        try:
            self._sync()
        except Exception as exc:  # noqa: BLE001
            raise Stop(RUNTIME_ERROR, f"a CUDA error surfaced after ModelNew.forward: {_one_line(exc)}"
                       + _at(config, trial),
                       error=_exc_error(exc, "synchronize", config, trial), config=config, trial=trial) from None
        return out, snap

    def _check_output_type(self, out: Any, ref_out: Any, config: str | None, trial: int | None) -> None:
        """The ``output_type`` guard (:func:`~cudaperf_cli.evaluate.torch_output_checks.
        output_type_problem`): ``ref_out`` the reference's output, or ``NO_REFERENCE`` right
        after forward."""
        if not self._guard_on(OUTPUT_TYPE):
            return
        try:
            why = output_type_problem(out, ref_out)
        except Exception as exc:  # noqa: BLE001 - an output the check cannot even read
            why = f"the output cannot be inspected ({_one_line(exc, 200)})"
        if why:
            raise guard_stop(OUTPUT_TYPE, why, config, trial)

    def _match(self, got: Any, expected: Any, config: str | None = None) -> bool:
        """:func:`outputs_match` after the ``output_type`` check of ``got`` against the
        reference's ``expected`` (the repeated and timed calls' outputs)."""
        self._check_output_type(got, expected, config, None)
        return outputs_match(got, expected, self.job.tolerances)

    def _call_reference(self, ref: Any, args: Sequence[Any], config: str, trial: int | None) -> Any:
        torch = self.torch
        self.state.set("reference", config, trial)
        try:
            with torch.no_grad():
                out = ref(*args)
            self._sync()
        except Exception as exc:  # noqa: BLE001
            raise Stop(REFERENCE_ERROR, f"Model.forward raised {_one_line(exc)}" + _at(config, trial),
                       error=_exc_error(exc, "reference", config, trial), config=config, trial=trial) from None
        return out

    # -- verification ------------------------------------------------------------------

    def _verify_config(
        self, ci: int, name: str, consts: dict[str, int], mod: types.ModuleType, model_new: Any
    ) -> tuple[TorchConfigResult, _Context]:
        """Trials of one shape configuration.  Both models are built once; before every trial
        both get the reference's initial buffers back (BatchNorm in training mode updates its
        running statistics on every forward), so each trial starts from the same state."""
        job = self.job
        cr = TorchConfigResult(name, dict(consts), CORRECT)
        try:
            ref, cand = self._build_models(mod, model_new, name)
            ctx = _Context(mod, ref, cand, initial_buffers=_buffer_snapshot(ref))
            prev_outs: list[Any] = []  # fingerprints of the candidate's earlier outputs
            for t in range(job.trials):
                seed = trial_seed(job.seed, ci, t)
                cr.seeds.append(seed)
                self._restore_buffers(ctx)
                inputs = self._inputs(mod, seed, name, t)
                if t == 0:
                    cr.inputs = describe_inputs(inputs)
                    if ci == 0:
                        self._measure_footprint(ref, inputs)
                tr = self._trial(ctx, inputs, name, t, prev_outs,
                                 check_precision=(t == 0 and ci == self.precision_config))
                del inputs
                cr.trials_run = t + 1
                cr.outputs = tr.checks
                if tr.lower_precision is not None:
                    cr.lower_precision = tr.lower_precision
                if not tr.ok:
                    cr.status = WRONG
                    cr.failed_trial = t
                    cr.message = f"config '{name}' trial {t}: {tr.message}"
                    break
                prev_outs.append(tr.out_fingerprint)
            else:
                cr.message = f"config '{name}': correct on {job.trials} trials"
        except Stop as s:
            cr.status = s.status
            cr.message = s.message
            cr.failed_trial = s.trial
            if s.trial is not None:
                cr.trials_run = max(cr.trials_run, s.trial + 1)
            self.configs.append(cr)
            self.state.add_config(cr)
            raise
        self.configs.append(cr)
        self.state.add_config(cr)
        return cr, ctx

    def _restore_buffers(self, ctx: "_Context") -> None:
        """Both models' buffers back to the reference's initial ones (no-op without buffers)."""
        if not ctx.initial_buffers:
            return
        with self.torch.no_grad():
            for model in (ctx.ref, ctx.cand):
                named = dict(model.named_buffers())
                for k, v in ctx.initial_buffers.items():
                    b = named.get(k)
                    if b is not None and b.shape == v.shape:
                        b.copy_(v)

    def _measure_footprint(self, ref: Any, inputs: Sequence[Any]) -> None:
        """Bytes of the default configuration's inputs, parameters and buffers (the outputs
        are added after the first forward)."""
        torch = self.torch
        n = sum(a.numel() * a.element_size() for a in inputs if isinstance(a, torch.Tensor))
        n += sum(p.numel() * p.element_size() for p in ref.parameters())
        n += sum(b.numel() * b.element_size() for b in ref.buffers())
        self.footprint_bytes = int(n)
        self._footprint_pending = True

    def _trial(self, ctx: "_Context", inputs: list[Any], name: str, t: int,
               prev_outs: Sequence[Any], check_precision: bool) -> _Trial:
        """One trial: the candidate first, then the reference, then the checks.

        Memory: without in-place problems the candidate and the reference read the same
        input tensors (no copies; a write by the candidate is caught by a fingerprint of
        each input, and the reference then runs only for the aliasing check); outputs are compared in
        chunks; the side-stream check compares fingerprints, not copies.  In-place problems
        (``job.modifies_inputs``) give the candidate a copy of the inputs.
        """
        job, torch = self.job, self.torch
        ref, cand = ctx.ref, ctx.cand
        inplace = job.modifies_inputs or ctx.inplace
        if inplace:
            cin = self._clone(inputs)
            before = None
        else:
            cin = inputs
            before = fingerprints(inputs)
        out, snap = self._call_candidate(cand, cin, name, t)
        self._check_patching("during ModelNew.forward", name, t)
        if self._guard_on(SIDE_STREAM) and not outputs_fingerprints_equal(snap, out):
            raise guard_stop(
                SIDE_STREAM,
                "the output changed after forward returned: its fingerprint taken on the current "
                "stream right after forward differs from the one after a device-wide synchronize, "
                "so work was left running on another stream",
                name,
                t,
            )
        del snap
        changed = same_fingerprints(before, fingerprints(inputs)) if before is not None else []
        rin = inputs
        rout = self._call_reference(ref, rin, name, t)
        if self._footprint_pending and self.footprint_bytes is not None:
            self.footprint_bytes += sum(o.numel() * o.element_size()
                                        for _, o in flatten_outputs(rout) if isinstance(o, torch.Tensor))
            self._footprint_pending = False
        self.state.set("compare", name, t)
        self._check_output_type(out, rout, name, t)
        if self._guard_on(ALIASING):
            why = find_aliasing(out, cin, rout, rin)
            if why:
                raise guard_stop(ALIASING, why, name, t)
        seed = trial_seed(job.seed, self.configs_index(name), t)
        ref_writes = False
        if changed:  # the reference ran on the written inputs only for the aliasing check
            del out, rout, inputs, cin
            fresh = self._inputs(ctx.mod, seed, name, t)  # does the reference write them too?
            fp0 = fingerprints(fresh)
            self._call_reference(ref, fresh, name, t)
            ref_writes = bool(same_fingerprints(fp0, fingerprints(fresh)))
            if not ref_writes:
                i = changed[0]
                p = fresh[i]
                msg = (f"the candidate modified input {i} ({list(p.shape)} "
                       f"{str(p.dtype).replace('torch.', '')}), which the reference leaves unchanged")
                return _Trial(False, msg, [OutputCheck(f"input {i}", False, message=msg)])
        if ref_writes or (before is not None and same_fingerprints(before, fingerprints(inputs))):
            # The reference writes its input at these shapes although the loader saw no
            # in-place write: redo this trial with a copy for the candidate.
            ctx.inplace = True
            self.warnings.append(f"forward modifies an input in place at config '{name}': "
                                 "the candidate gets copies of the inputs from now on")
            out = rout = None
            fresh = self._inputs(ctx.mod, seed, name, t)
            self._restore_buffers(ctx)
            return self._trial(ctx, fresh, name, t, prev_outs, check_precision)
        checks = compare_outputs(out, rout, job.tolerances)
        bad = [c for c in checks if not c.ok]
        in_problem = None
        if inplace:
            in_problem = compare_inplace_inputs(cin, rin, job.tolerances)
        # the verdict stands only if nothing was replaced while it was reached
        self._check_patching("while the output was compared", name, t)
        out_fp = [fingerprint(o) for _, o in flatten_outputs(out) if isinstance(o, torch.Tensor)]
        if bad or in_problem:
            stale = next(
                (i for i, p in enumerate(prev_outs) if p is not None and len(p) == len(out_fp)
                 and not same_fingerprints(p, out_fp)),
                None,
            ) if bad and self._guard_on(RESULT_CACHE) else None
            if stale is not None:
                raise guard_stop(
                    RESULT_CACHE,
                    f"for new inputs forward returned exactly the output of trial {stale} (cached by "
                    "input address or call count?)",
                    name,
                    t,
                )
            return _Trial(False, bad[0].message if bad else str(in_problem), checks)
        self._check_buffers(ctx, name)
        lp = None
        if check_precision and self._guard_on(LOWER_PRECISION) and not job.allow_lower_precision:
            if inplace:  # the reference wrote its inputs: the float64 run gets them afresh
                del cin
                inputs = self._inputs(ctx.mod, trial_seed(job.seed, self.configs_index(name), t), name, t)
            if self._fp64_fits(ref, inputs, rout, name):
                lp = self._lower_precision(ref, inputs, out, rout, name, t)
        return _Trial(True, "", checks, lower_precision=lp, out_fingerprint=out_fp)

    def _fp64_fits(self, ref: Any, inputs: Sequence[Any], rout: Any, name: str) -> bool:
        """Whether the float64 run stays within the memory plan; else a warning says the
        check was not run.

        The run needs a float64 copy of the model, its inputs and its outputs (twice the
        bytes of each) and, at the default configuration when the baseline job measured
        the reference alone (``job.reference_peak_bytes``: inputs, intermediates, workspace),
        twice that peak: the reference's float64 intermediates (100_HingeLoss of KernelBench
        level 1: 4.3 GB of inputs, 13.2 GB for the reference alone, 30.1 GB with its float64
        run).  The plan: 3 x footprint + the flush buffer, or the reference alone + 2 x
        footprint when that is larger (the bench report's bound)."""
        torch = self.torch
        if self.host or self.footprint_bytes is None:
            return True
        def nb(ts: Any) -> int:
            return sum(int(x.numel()) * x.element_size() for x in ts if isinstance(x, torch.Tensor))
        extra = 2 * (nb(inputs) + nb([o for _, o in flatten_outputs(rout)]) + nb(ref.parameters())
                     + nb(ref.buffers()))
        flush = flush_size((self.device_info or {}).get("l2_bytes"), self.job.timing)
        ref_peak = self.job.reference_peak_bytes if name == "default" else None
        if ref_peak:  # its peak held the flush buffer of its timing too
            extra = max(extra, 2 * max(int(ref_peak) - flush, 0))
        bound = max(3 * self.footprint_bytes + flush, int(ref_peak or 0) + 2 * self.footprint_bytes)
        held = int(torch.cuda.memory_allocated(self.dev))
        if held + extra <= bound:
            return True
        self.precision_note = (
            f"lower_precision (float64 comparison) not run at config '{name}': the float64 run "
            f"({extra / 1e9:.1f} GB) would pass the memory plan ({bound / 1e9:.1f} GB)")
        self.warnings.append(self.precision_note)
        return False

    def configs_index(self, name: str) -> int:
        """The index of configuration ``name`` (``default`` 0, ``altK`` K)."""
        return 0 if name == "default" else int(name[3:])

    def _check_buffers(self, ctx: "_Context", name: str) -> None:
        """Buffers the reference's forward updated (BatchNorm's running statistics in training
        mode) should be updated the same way by ModelNew: a difference is a warning (the
        outputs, which KernelBench compares, matched)."""
        if not ctx.initial_buffers or ctx.buffers_warned:
            return
        ref_b = dict(ctx.ref.named_buffers())
        cand_b = dict(ctx.cand.named_buffers())
        for k, v0 in ctx.initial_buffers.items():
            r = ref_b.get(k)
            # floating buffers only: BatchNorm's integer num_batches_tracked is bookkeeping
            # (read only with momentum=None), not a result
            if r is None or not r.is_floating_point() or bits_equal(r, v0):
                continue
            c = cand_b.get(k)
            if c is None:
                continue
            atol, rtol = torch_tolerance(str(r.dtype), self.job.tolerances)
            chk = compare_tensor(f"buffer {k}", c, r, atol, rtol)
            if not chk.ok:
                ctx.buffers_warned = True
                self.warnings.append(
                    f"config '{name}': Model's forward updates its buffer '{k}' (running statistics "
                    f"in training mode) and ModelNew's does not match: {chk.message}")
                return

    def _lower_precision(self, ref: Any, inputs: list[Any], out: Any, rout: Any,
                         name: str, t: int) -> dict[str, Any] | None:
        """Compare against a float64 run of the reference (float32 outputs only)."""
        torch, job = self.torch, self.job
        pairs = [
            (p, c, r)
            for (p, c), (_, r) in zip(flatten_outputs(out), flatten_outputs(rout))
            if isinstance(r, torch.Tensor) and r.dtype == torch.float32 and r.numel() > 0
        ]
        if not pairs:
            return None
        self.state.set("reference.fp64", name, t)
        try:
            ref64 = copy.deepcopy(ref).double()
            in64 = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                    for a in self._clone(inputs)]
            with torch.no_grad():
                out64 = ref64(*in64)
            self._sync()
        except Exception as exc:  # noqa: BLE001
            self.warnings.append(f"lower_precision not checked: the float64 reference failed ({_one_line(exc, 200)})")
            return None
        by_path = dict(flatten_outputs(out64))
        worst: dict[str, Any] | None = None
        for p, c, r in pairs:
            r64 = by_path.get(p)
            if not isinstance(r64, torch.Tensor) or r64.dtype != torch.float64 or r64.shape != r.shape:
                self.warnings.append(f"lower_precision not checked for {p}: the float64 run gave no float64 tensor")
                continue
            scale = float(r64.abs().max()) or 1.0
            ec = float((c.double() - r64).abs().max()) / scale
            er = float((r.double() - r64).abs().max()) / scale
            too_far, thr = lower_precision_verdict(ec, er, job.lower_precision_factor, job.lower_precision_floor)
            rec = {"output": p, "candidate_rel_err": ec, "fp32_reference_rel_err": er, "threshold": thr}
            if worst is None or (ec / thr if thr > 0 else float("inf")) > (
                worst["candidate_rel_err"] / worst["threshold"] if worst["threshold"] > 0 else float("inf")
            ):
                worst = rec
            if too_far:
                ratio = f"{ec / er:.3g}x" if er > 0 else "far above"
                raise guard_stop(
                    LOWER_PRECISION,
                    f"{p}: normwise relative error against a float64 reference is {ec:.3g}, "
                    f"{ratio} the float32 reference's {er:.3g} (limit: max({job.lower_precision_factor:g}x, "
                    f"{job.lower_precision_floor:.3g})): computed in lower precision than float32 "
                    "(TF32, fp16, bf16)?",
                    name,
                    t,
                )
        return worst

    # -- profiler guards -----------------------------------------------------------------

    def _profile_guards(self, ctx: _Context) -> None:
        wanted = {NO_CUSTOM_KERNEL, TORCH_FALLBACK, SIDE_STREAM} - self.disabled
        if not wanted:
            return
        if self.host:
            self.warnings.append("profiler guards not run: host test backend (no CUDA)")
            return
        torch, job = self.torch, self.job
        self._restore_buffers(ctx)
        inputs = self._inputs(ctx.mod, trial_seed(job.seed, 0, job.trials), "default", None)
        self._call_candidate(ctx.cand, self._args_for_candidate(ctx, inputs), "default", None, "guards.profile")
        args = self._args_for_candidate(ctx, inputs)
        marker = torch.zeros(1, device=self.dev)
        self._sync()
        self.state.set("guards.profile", "default")
        forward_exc: BaseException | None = None
        try:
            from torch.autograd import DeviceType
            from torch.autograd.profiler import profile, record_function

            # The autograd profiler (what torch.profiler.profile drives, CPU and CUDA
            # activities through Kineto): torch.profiler.profile's start asks
            # hasattr(torch, "_inductor"), which imports TorchDynamo (about 5 s).
            with profile(use_cpu=True, use_device="cuda", use_kineto=True) as prof:
                with record_function(MARKER_ANNOTATION):
                    marker.add_(1)
                with record_function(FORWARD_ANNOTATION):
                    try:
                        with torch.no_grad():
                            ctx.cand(*args)
                    except Exception as exc:  # noqa: BLE001 - the candidate's failure
                        forward_exc = exc
                with record_function(MARKER_ANNOTATION):
                    marker.add_(1)
                self._sync()
            records = profile_records(prof.function_events, DeviceType.CUDA)
            report = analyze_profile(records, allow_torch_ops=job.allow_torch_ops,
                                     allowed_ops=job.allowed_ops)
        except Exception as exc:  # noqa: BLE001 - the profiler's failure, or a CUDA error
            if forward_exc is None:
                try:
                    self._sync()
                except Exception as exc2:  # noqa: BLE001
                    raise Stop(RUNTIME_ERROR,
                               f"a CUDA error surfaced after the profiled forward: {_one_line(exc2)}",
                               error=_exc_error(exc2, "synchronize", "default"), config="default") from None
                self.warnings.append(
                    f"no_custom_kernel/torch_fallback/side_stream (profiler) not checked: {_one_line(exc, 300)}"
                )
                return
        if forward_exc is not None:
            raise Stop(RUNTIME_ERROR, f"ModelNew.forward raised {_one_line(forward_exc)} (profiled call)",
                       error=_exc_error(forward_exc, "forward", "default"), config="default")
        if report["gpu_activities"] == 0:
            self.warnings.append(
                "no_custom_kernel/torch_fallback/side_stream (profiler) not checked: the profiler "
                "recorded no GPU activity (CUPTI unavailable?)"
            )
            return
        self.profile = report
        self._check_patching("during the profiled forward", "default")
        verdict = profile_verdict(report, sorted(self.disabled), job.allow_torch_ops)
        if verdict is not None:
            raise guard_stop(verdict[0], verdict[1], "default")
        for note in report["notes"]:
            self.warnings.append(f"profiler: {note}")

    # -- repeated calls ----------------------------------------------------------------

    def _args_for_candidate(self, ctx: "_Context", inputs: list[Any]) -> list[Any]:
        """The candidate's arguments: the inputs themselves, or copies for in-place problems."""
        return self._clone(inputs) if (self.job.modifies_inputs or ctx.inplace) else inputs

    def _result_cache_check(self, ctx: _Context) -> None:
        """Same input tensors with new values written in place, then new tensors.  One set
        of inputs is alive at a time (plus the new values while they are written in)."""
        torch, job = self.torch, self.job
        base = job.trials + 1
        self._restore_buffers(ctx)
        a = self._inputs(ctx.mod, trial_seed(job.seed, 0, base), "default", None)
        x = self._args_for_candidate(ctx, a)
        o1, _ = self._call_candidate(ctx.cand, x, "default", None, "guards.result_cache")
        if x is not a:
            a = self._inputs(ctx.mod, trial_seed(job.seed, 0, base), "default", None)
        r1 = self._call_reference(ctx.ref, a, "default", None)
        if not self._match(o1, r1, "default"):
            raise guard_stop(RESULT_CACHE, "wrong on new inputs after earlier calls", "default")
        o1_fp = outputs_fingerprints(o1)
        del o1, r1, a
        b = self._inputs(ctx.mod, trial_seed(job.seed, 0, base + 1), "default", None)
        same_shapes = all(
            not isinstance(xi, torch.Tensor) or (isinstance(bi, torch.Tensor) and xi.shape == bi.shape
                                                 and xi.dtype == bi.dtype)
            for xi, bi in zip(x, b)
        )
        if same_shapes:
            with torch.no_grad():
                for xi, bi in zip(x, b):
                    if isinstance(xi, torch.Tensor):
                        xi.copy_(bi)  # new values, same tensors (same addresses)
            args = [bi if not isinstance(xi, torch.Tensor) else xi for xi, bi in zip(x, b)]
            del x
            self._restore_buffers(ctx)
            o2, _ = self._call_candidate(ctx.cand, args, "default", None, "guards.result_cache")
            if args is not b and (job.modifies_inputs or ctx.inplace):
                b = self._inputs(ctx.mod, trial_seed(job.seed, 0, base + 1), "default", None)
            r2 = self._call_reference(ctx.ref, b, "default", None)
            if not self._match(o2, r2, "default"):
                again = outputs_fingerprints_equal(o1_fp, o2)
                raise guard_stop(
                    RESULT_CACHE,
                    "after new values were written into the same input tensors (same addresses), "
                    "the next call returned "
                    + ("the previous call's result" if again else "a wrong result")
                    + ": results must not be cached by input address or object",
                    "default",
                )
            del o2, r2, args
        else:
            del x
            self.warnings.append("result_cache: in-place rewrite skipped (get_inputs() shapes vary)")
        del b
        self._restore_buffers(ctx)
        c = self._inputs(ctx.mod, trial_seed(job.seed, 0, base + 2), "default", None)
        y = self._args_for_candidate(ctx, c)
        o3, _ = self._call_candidate(ctx.cand, y, "default", None, "guards.result_cache")
        del y
        r3 = self._call_reference(ctx.ref, c, "default", None)
        if not self._match(o3, r3, "default"):
            raise guard_stop(RESULT_CACHE, "wrong for newly allocated inputs after earlier calls", "default")
        del o3, r3, c
        self._check_patching("during repeated calls", "default")

    # -- timing ------------------------------------------------------------------------

    def _time_fn(self, fn: Callable[..., Any], args: Sequence[Any], flush: Any, phase: str,
                 slow_ms: float | None = None, warm: bool = False,
                 sync_each: bool = False, before: Callable[[], None] | None = None,
                 after: Callable[[Any], None] | None = None,
                 on_plan: Callable[[int], None] | None = None) -> tuple[RepTiming, Any]:
        """CUDA events on the current stream around each call, the flush buffer written
        before each, repetitions planned by :func:`~cudaperf_cli.evaluate.timing.
        time_repetitions` (the C worker's loop; ``warm``: ``fn`` ran before, in
        verification; ``sync_each``: a device synchronize between the flush and each start
        event, when the profile let library kernels run on other streams).  ``before()``
        runs before each call's flush (the input rotation), ``after(output)`` after its end
        event (the check of a verified call), ``on_plan`` as in ``time_repetitions``; all
        untimed.  Returns (the repetitions, the last output)."""
        torch = self.torch
        self.state.set(phase, "default")
        Event, record, elapsed = self._orig_event, self._orig_record, self._orig_elapsed
        last: list[Any] = [None]
        starts = [Event(enable_timing=True) for _ in range(100)]
        ends = [Event(enable_timing=True) for _ in range(100)]

        def run(k: int) -> list[float]:
            out_ms: list[float] = []
            with torch.no_grad():
                while k > 0:
                    m = min(k, len(starts))
                    for i in range(m):
                        if before is not None:
                            before()
                        if flush is not None:
                            flush.zero_()
                        if sync_each:
                            self._sync()
                        record(starts[i])
                        last[0] = fn(*args)
                        record(ends[i])
                        if after is not None:
                            after(last[0])
                    self._sync()
                    out_ms += [float(elapsed(starts[i], ends[i])) for i in range(m)]
                    k -= m
            return out_ms

        reps = time_repetitions(run, self.job.timing, slow_ms=slow_ms, warm=warm, on_plan=on_plan)
        return reps, last[0]

    def _timing_sets(self, ctx: _Context, inputs: list[Any]) -> tuple[list[list[Any]], list[Any], str | None]:
        """The input sets the candidate's timed calls rotate through, the argument list the
        candidate gets (the same tensors every call: the chosen set is copied into them
        before it), and why there is one set only (None with two).

        Set 1 is ``inputs`` with a sparse random subset of every input tensor's elements
        (:func:`~cudaperf_cli.evaluate.timing.perturb_positions`: 1 in 256, at least 4,
        positions from a seeded numpy generator) replaced by those of another
        ``get_inputs()`` draw (seed ``trial_seed(seed, 0, trials + 5)``): the same
        distribution, so index and mask tensors stay valid, and a result cache keyed by the
        input addresses and a sample of their values cannot tell the sets apart.  One set
        (and the arguments of before) with ``timed_result`` disabled or
        ``timing.input_sets`` < 2, and, with a reason, when no input tensor has elements,
        the second draw has other shapes or dtypes, nothing changed, or the device's free
        memory lacks the second set and the working copy plus the footprint again.
        """
        torch, job = self.torch, self.job
        plain = self._args_for_candidate(ctx, inputs)
        if not self._guard_on(TIMED_RESULT) or int(job.timing.input_sets) < 2:
            return [inputs], plain, None
        tens = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and a.numel() > 0]
        if not tens:
            return [inputs], plain, "timed_result: one input set in timing: no input tensor to vary"
        nbytes = sum(int(inputs[i].numel()) * inputs[i].element_size() for i in tens)
        inplace = job.modifies_inputs or ctx.inplace
        extra = nbytes if inplace else 2 * nbytes  # set 1 (+ the working copy, made here)
        if not self.host:
            free, _total = torch.cuda.mem_get_info(self.dev)
            held = int(self.footprint_bytes or 0)
            if free < extra + held:
                return [inputs], plain, (
                    f"timed_result: one input set in timing: the second needs {extra / 1e9:.3g} GB "
                    f"and {free / 1e9:.3g} GB are free (keeping {held / 1e9:.3g} GB for the candidate)")
        import numpy as np

        other = self._inputs(ctx.mod, trial_seed(job.seed, 0, job.trials + 5), "default", None)
        rng = np.random.default_rng(np.random.SeedSequence([int(job.seed), 0, job.trials + 5, 1]))
        set1 = list(inputs)
        changed = False
        with torch.no_grad():
            for i in tens:
                a = inputs[i]
                b = other[i] if i < len(other) else None
                if not isinstance(b, torch.Tensor) or b.shape != a.shape or b.dtype != a.dtype:
                    return [inputs], plain, ("timed_result: one input set in timing: get_inputs() "
                                             "draws differ in shape or dtype")
                idx = torch.from_numpy(perturb_positions(int(a.numel()), rng)).to(a.device)
                t = a.detach().clone(memory_format=torch.contiguous_format)
                t.view(-1)[idx] = b.detach().reshape(-1).to(a.device)[idx]
                changed = changed or not bits_equal(t, a)
                set1[i] = t
        del other
        if not changed:
            return [inputs], plain, ("timed_result: one input set in timing: a second draw of "
                                     "get_inputs() changed no element")
        return [inputs, set1], plain if inplace else self._clone(inputs), None

    def _load_set(self, src: Sequence[Any], args: Sequence[Any]) -> None:
        """Copy input set ``src`` into the candidate's argument tensors (same addresses)."""
        T = self.torch.Tensor
        with self.torch.no_grad():
            for a, s in zip(args, src):
                if isinstance(a, T) and a is not s:
                    a.copy_(s)

    def _check_timed_call(self, ctx: _Context, out: Any, inputs: Sequence[Any], k: int, i: int,
                          planned: int) -> None:
        """Guard ``timed_result``: the output of timed repetition ``i`` (0-based, of
        ``planned``), made on input set ``k`` (``inputs``), must match the reference's on that
        set (run now, on copies for problems that write their inputs); untimed."""
        job = self.job
        self._sync()
        self.state.set("timing.check", "default")
        rin = self._clone(inputs) if (job.modifies_inputs or ctx.inplace) else inputs
        rout = self._call_reference(ctx.ref, rin, "default", None)
        self._check_output_type(out, rout, "default", None)
        bad = [c for c in compare_outputs(out, rout, job.tolerances) if not c.ok]
        del rout, rin
        if bad:
            raise guard_stop(
                TIMED_RESULT,
                f"timed call {i + 1} of {planned} (input set {k}): {bad[0].message} (the inputs "
                "changed in place between the timed calls; a result cached by input address or "
                "a sample of the values?)",
                "default",
            )
        self.state.set("timing.candidate", "default")

    def _time(self, ctx: _Context) -> str:
        """Time the candidate (and, without ``job.baseline_ms``, eager and torch.compile) at
        the default configuration; returns the status, ``correct`` or ``slow``."""
        torch, job = self.torch, self.job
        ts = job.timing
        self._restore_buffers(ctx)
        inputs = self._inputs(ctx.mod, trial_seed(job.seed, 0, job.trials + 4), "default", None)
        fbytes = flush_size((self.device_info or {}).get("l2_bytes"), ts)
        flush = torch.empty(fbytes // 4, dtype=torch.int32, device=self.dev) if fbytes else None
        warnings: list[str] = []
        baseline = dict(job.baseline_ms or {})

        sets, cargs, one_set = self._timing_sets(ctx, inputs)
        if one_set:
            warnings.append(one_set)
        rot = InputRotation(len(sets), [int(job.seed), 0, job.trials + 5, 2],
                            ts.checked_reps if self._guard_on(TIMED_RESULT) else 0)
        pending: list[tuple[int, int | None]] = [(0, None)]

        def before() -> None:  # the input rotation, untimed
            k, check = rot.next()
            if len(sets) > 1:
                self._load_set(sets[k], cargs)
            pending[0] = (k, check)

        def after(out: Any) -> None:  # a verified timed call, untimed
            k, check = pending[0]
            if check is not None:
                self._check_timed_call(ctx, out, sets[k], k, check, rot.planned)

        try:
            timed = self.threads.wrap(ctx.cand) if self.threads is not None else ctx.cand
            reps, cand_out = self._time_fn(
                timed, cargs, flush, "timing.candidate", slow_ms=job.slow_ms, warm=True,
                sync_each=bool((self.profile or {}).get("library_stream_launches")),
                before=before, after=after, on_plan=rot.plan)
            sync_stats = None
            if not reps.slow:
                self.state.set("timing.candidate", "default")
                n_sync = max(1, min(ts.sync_reps, int(ts.max_total_ms // max(reps.estimate_ms, 1e-3))))
                sync_samples = []
                with torch.no_grad():
                    for _ in range(n_sync):
                        before()
                        self._sync()
                        t0 = self._orig_perf()
                        cand_out = ctx.cand(*cargs)
                        self._sync()
                        sync_samples.append((self._orig_perf() - t0) * 1e3)
                sync_stats = summarize(sync_samples)
        except Stop:
            raise
        except Exception as exc:  # noqa: BLE001
            raise Stop(RUNTIME_ERROR, f"ModelNew.forward failed while timing: {_one_line(exc)}",
                       error=_exc_error(exc, "timing", "default"), config="default") from None
        self._check_patching("during the timed calls", "default")
        if cargs is not inputs:
            del cargs
        # A slow candidate's statistics are those of the warm-up calls that gave the estimate.
        cand_stats = summarize(reps.samples) if reps.samples else summarize(reps.warmup)

        eager_stats = compile_stats = None
        compile_error = None
        eager_out = None
        if not baseline:
            eargs = self._clone(inputs) if (job.modifies_inputs or ctx.inplace) else inputs
            try:
                er, eager_out = self._time_fn(ctx.ref, eargs, flush, "timing.eager")
                eager_stats = summarize(er.samples)
            except Exception as exc:  # noqa: BLE001
                raise Stop(REFERENCE_ERROR, f"Model.forward failed while timing: {_one_line(exc)}",
                           error=_exc_error(exc, "reference_timing", "default"), config="default") from None
            del eargs
            if job.compile_baseline:
                compile_stats, compile_error = self._time_compiled(ctx.ref, inputs, flush, warnings)

        self.state.set("timing.check", "default")
        if self._guard_on(RESULT_CACHE) and not (job.modifies_inputs or ctx.inplace):
            if eager_out is None or rot.last != 0:  # the reference on the last call's inputs
                eager_out = self._call_reference(ctx.ref, sets[rot.last], "default", None)
            if not self._match(cand_out, eager_out, "default"):
                raise guard_stop(
                    RESULT_CACHE,
                    "after the timed calls the output no longer matches the reference on the "
                    "same inputs (work skipped on repeated calls?)",
                    "default",
                )
        del cand_out, eager_out, flush, sets

        cand_ms = cand_stats.median_ms if cand_stats is not None else reps.estimate_ms
        eager_ms = eager_stats.median_ms if eager_stats is not None else baseline.get("eager")
        compile_ms = compile_stats.median_ms if compile_stats is not None else baseline.get("compile")
        se = speedup(eager_ms, cand_ms)
        sc = speedup(compile_ms, cand_ms)
        suspicious = any(s is not None and s > SUSPICIOUS_SPEEDUP for s in (se, sc))
        if suspicious:
            warnings.append(
                f"speedup above {SUSPICIOUS_SPEEDUP:g}x (eager {se and round(se, 2)}x, "
                f"compile {sc and round(sc, 2)}x): worth a second look"
            )
        untimed = (untimed_work(cand_stats.median_ms, sync_stats.median_ms, "forward")
                   if cand_stats is not None and sync_stats is not None else None)
        if untimed is not None:
            warnings.append(untimed)
        if baseline:
            warnings_note = "eager and torch.compile times from the run's baseline measurement"
            if warnings_note not in self.warnings:
                self.warnings.append(warnings_note)
        self.timing = TorchTiming(
            config="default",
            candidate=cand_stats,
            eager=eager_stats,
            compile=compile_stats,
            compile_error=compile_error if not baseline else baseline.get("compile_error"),
            sync_call=sync_stats,
            speedup_eager=se,
            speedup_compile=sc,
            suspicious=suspicious,
            flush_bytes=fbytes,
            warmup_reps=len(reps.warmup),
            candidate_estimate_ms=reps.estimate_ms,
            slow_ms=job.slow_ms,
            warnings=warnings,
            input_sets=rot.n_sets,
            input_set_calls=list(rot.calls),
            checked_reps=list(rot.verified),
        )
        return SLOW if reps.slow else CORRECT

    def _time_compiled(self, ref: Any, inputs: Sequence[Any], flush: Any,
                       warnings: list[str]) -> tuple[TimingStats | None, str | None]:
        """``torch.compile(Model)`` (mode default) timed like eager; (stats, error).

        Its device memory is its own (Inductor's autotuning allocates an L2-clearing buffer
        on a cold cache): kept apart in ``compile_peak_gpu_bytes``, and the evaluation's
        peak (:meth:`_result`) is that of everything else."""
        torch = self.torch
        if not self.host:
            self.peak_before_compile = int(torch.cuda.max_memory_allocated(self.dev))
            torch.cuda.reset_peak_memory_stats(self.dev)
        try:
            compiled = torch.compile(ref)
            args = self._clone(inputs) if self.job.modifies_inputs else inputs
            r, _ = self._time_fn(compiled, args, flush, "timing.compile")
            return summarize(r.samples), None
        except Exception as exc:  # noqa: BLE001
            err = _one_line(exc, 400)
            warnings.append(f"torch.compile baseline failed, eager kept: {err}")
            try:
                self._sync()
            except Exception:  # noqa: BLE001
                pass
            return None, err
        finally:
            if not self.host:
                try:
                    self.compile_peak = int(torch.cuda.max_memory_allocated(self.dev))
                    torch.cuda.reset_peak_memory_stats(self.dev)
                except Exception:  # noqa: BLE001 - after a sticky CUDA error
                    pass

    # -- the baseline job (no candidate) ------------------------------------------------------

    def _baseline(self, mod: types.ModuleType) -> TorchEvalResult:
        """``mode="baseline"``: the reference alone at the default configuration.

        Runs forward on two input draws (outputs bitwise equal: ``degenerate``), measures
        the footprint (inputs, outputs, parameters, buffers; bytes), then times PyTorch eager
        and ``torch.compile`` on the timing inputs every candidate of the run is timed on
        (the seed of :meth:`_time`).  Status ``reference_only``.
        """
        torch, job = self.torch, self.job
        self.state.set("construct", "default")
        try:
            torch.manual_seed(job.seed)
            init = [self._to_dev(a) for a in mod.get_init_inputs()]

            def build_ref() -> Any:
                torch.manual_seed(job.seed)
                return mod.Model(*copy.deepcopy(init))

            ref = self._on_device(build_ref).to(self.dev)
        except Exception as exc:  # noqa: BLE001
            raise Stop(REFERENCE_ERROR, f"cannot construct Model: {_one_line(exc)}",
                       error=_exc_error(exc, "reference_init", "default"), config="default") from None
        initial = _buffer_snapshot(ref)
        outs_fp = []
        for t in (0, 1):
            if initial:
                with torch.no_grad():
                    for k, b in ref.named_buffers():
                        if k in initial:
                            b.copy_(initial[k])
            x = self._inputs(mod, trial_seed(job.seed, 0, t), "default", t)
            if t == 0:
                self._measure_footprint(ref, x)
            out = self._call_reference(ref, x, "default", t)
            if t == 0 and self.footprint_bytes is not None:
                self.footprint_bytes += sum(o.numel() * o.element_size()
                                            for _, o in flatten_outputs(out) if isinstance(o, torch.Tensor))
            outs_fp.append(outputs_fingerprints(out))
            del x, out
        self.degenerate = outputs_fingerprints_same(outs_fp[0], outs_fp[1])
        if self.degenerate:
            self.warnings.append(
                "degenerate: Model's outputs are the same for two input draws at the default "
                "configuration (they do not depend on the inputs): evaluated as given, but a "
                "constant answer would pass")
        ts = job.timing
        inputs = self._inputs(mod, trial_seed(job.seed, 0, job.trials + 4), "default", None)
        fbytes = flush_size((self.device_info or {}).get("l2_bytes"), ts)
        flush = torch.empty(fbytes // 4, dtype=torch.int32, device=self.dev) if fbytes else None
        warnings: list[str] = []
        args = self._clone(inputs) if job.modifies_inputs else inputs
        try:
            er, _ = self._time_fn(ref, args, flush, "timing.eager")
        except Exception as exc:  # noqa: BLE001
            raise Stop(REFERENCE_ERROR, f"Model.forward failed while timing: {_one_line(exc)}",
                       error=_exc_error(exc, "reference_timing", "default"), config="default") from None
        eager_stats = summarize(er.samples)
        compile_stats, compile_error = (None, None)
        if job.compile_baseline:
            compile_stats, compile_error = self._time_compiled(ref, inputs, flush, warnings)
        del flush, inputs, args
        self.timing = TorchTiming(config="default", eager=eager_stats, compile=compile_stats,
                                  compile_error=compile_error, flush_bytes=fbytes,
                                  warmup_reps=len(er.warmup), warnings=warnings)
        msg = f"baseline: PyTorch eager {eager_stats.median_ms:.4g} ms"
        if compile_stats is not None:
            msg += f", torch.compile {compile_stats.median_ms:.4g} ms"
        elif compile_error:
            msg += "; torch.compile failed"
        return self._result(REFERENCE_ONLY, msg)


def _consts(consts: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in consts.items()) or "default constants"


def _at(config: str | None, trial: int | None) -> str:
    if config is None:
        return ""
    return f" (config '{config}'" + (f", trial {trial}" if trial is not None else "") + ")"


# ---------------------------------------------------------------------------------------
# Build mode
# ---------------------------------------------------------------------------------------


def candidate_paths(job: TorchEvalJob, *, compiles: bool = False) -> tuple[list[str], list[str]]:
    """What a confined worker reads and writes once the candidate's code runs (the
    system, Python and toolkit folders come from :func:`~cudaperf_cli.confine.confine_candidate`):
    (read: the candidate's files and folder, the problem's file, the build cache of the
    fast format, which the parent builds; write: the candidate's own extension folder, where
    a load_inline build (``--build``) writes, and with ``compiles`` the torch.compile caches).
    Never the shared build cache: a candidate could tamper with other candidates' builds.
    The folders to write are made here (a rule needs an existing path)."""
    read = [*job.candidate, str(Path(job.module_path).resolve().parent), job.problem,
            str(job.build_root_path())]
    write = [str(job.extensions_dir())]
    if compiles:
        write.append(inductor_cache_dir())
        write.append(os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton"))
    for w in write:
        with contextlib.suppress(OSError):
            os.makedirs(w, exist_ok=True)
    return read, write


def build_candidate_module(job: TorchEvalJob, state: State,
                           confine: Callable[[list[str], list[str]], Confinement] | None = None
                           ) -> dict[str, Any]:
    """``--build``: import the candidate (a load_inline build runs now) and report;
    ``confine`` as :class:`TorchWorker`'s, before the import."""
    confinement = confine(*candidate_paths(job)) if confine is not None else None
    state.set("build")
    state.mark_candidate()
    t0 = time.monotonic()
    ext = os.environ.get(EXT_DIR_ENV)
    cached = bool(ext) and any(Path(ext).rglob("*.so"))
    name = Path(job.module_path).name
    try:
        import_candidate(job.module_path)
    except BaseException as exc:  # noqa: BLE001
        status, message, errors = classify_import_error(exc, name)
        return {"status": status, "message": message, "errors": errors,
                "seconds": time.monotonic() - t0, "cached": False,
                "error": _exc_error(exc, "import"),
                "confinement": confinement.to_json() if confinement else None}
    return {"status": "ok", "message": "", "errors": "", "seconds": time.monotonic() - t0,
            "cached": cached, "confinement": confinement.to_json() if confinement else None}


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def _confine(read: list[str], write: list[str]) -> Confinement:
    return confine_candidate(read=read, write=write)


def main(argv: list[str] | None = None) -> int:
    """Worker entry point (see the module docstring; the protocol is evaluate/child.py's)."""
    parser = argparse.ArgumentParser(prog="python -m cudaperf_cli.evaluate.torch_worker")
    parser.add_argument("--build", action="store_true")
    args = parser.parse_args(argv)

    channel = result_channel()
    state = State(os.environ.get(STATE_ENV))
    try:
        job = TorchEvalJob.from_json(read_job())
    except Exception as exc:  # noqa: BLE001
        channel(TorchEvalResult(status=CRASH, message=f"worker got an unreadable job: {exc}"))
        return 0
    hook = job.debug_hook if os.environ.get(HOOKS_ENV) == "1" else None
    if hook and (args.build or hook.startswith("prepare-")):
        if _run_hook(hook.removeprefix("prepare-"), channel.fd, state):
            return 0
        hook = None
    result: Any
    try:
        if args.build:
            result = build_candidate_module(job, state, confine=_confine)
        else:
            def run_hook() -> None:  # test hooks run once the worker holds the GPU
                if hook and _run_hook(hook, channel.fd, state):
                    flush_c_stdio()
                    os._exit(0)

            result = TorchWorker(job, state, emit=channel, after_gate=run_hook, confine=_confine).run()
    except BaseException as exc:  # noqa: BLE001 - report, never die silently
        result = TorchEvalResult(
            status=CRASH,
            message=f"internal error in the torch evaluation worker: {_one_line(exc)}",
            phase=state.data.get("phase"),
            details={"traceback": traceback.format_exc()},
        )
        if args.build:
            result = {"status": CRASH, "message": result.message, "errors": result.details["traceback"]}
    flush_c_stdio()
    channel(result)
    return 0


if __name__ == "__main__":
    code = main()
    try:
        flush_c_stdio()
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(code)
