"""Correctness checks, pure numpy: tolerances, comparison, poisoning, output classification.

Comparison rule for floating arrays (``docs/evaluation.md``)::

    ok  <=>  |cand - ref| <= atol + rtol * |ref|     where both are finite
    ok  <=>  both NaN, or both the same infinity      where either is not finite

so a NaN (or inf) in the candidate where the reference is finite always fails, and a poisoned
(NaN) element the candidate never wrote fails.  Integer arrays, and arrays the reference
never changes (read-only inputs), are compared exactly (bit for bit).

The tolerances are the shared table of :mod:`cudaperf_cli.evaluate.tolerances` (float32
atol 1e-4 / rtol 1e-4 as KernelBench, float64 1e-9 / 1e-7, float16 1e-2).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from cudaperf_cli.evaluate.job import (
    READ_ONLY,
    READ_WRITE,
    WRITE_ONLY,
    ArrayCheck,
    json_float,
)
from cudaperf_cli.evaluate.tolerances import DEFAULT_TOLERANCES, resolve_tolerances, tolerance

#: Poison written into write-only arrays before each candidate run.
POISON_FLOAT_WORD = 0xFFFFFFFF  #: every 32-bit word all ones: a NaN in float32 and float64
POISON_INT_BYTE = 0xA5  #: every byte of an integer array

#: Elements compared per chunk (bounds temporary memory on large arrays).
CHUNK = 1 << 22


def is_floating(dtype: Any) -> bool:
    return np.dtype(dtype).kind == "f"


def tolerance_for(
    dtype: Any, overrides: Mapping[str, Mapping[str, float]] | None = None
) -> tuple[float, float]:
    """(rtol, atol) for an element dtype; (0, 0) for integers.

    ``overrides`` maps a dtype name (``float32``, or the C name ``float``) to
    ``{"rtol": .., "atol": ..}`` over :data:`DEFAULT_TOLERANCES` (the shared table of
    ``evaluate/tolerances.py``); a missing key keeps the default.

    Raises:
        ValueError: a negative tolerance in ``overrides``.
    """
    dt = np.dtype(dtype)
    if dt.kind != "f":
        return 0.0, 0.0
    atol, rtol = tolerance(dt.name, resolve_tolerances(overrides=overrides))
    return rtol, atol


def tolerances_used(
    dtypes: Any, overrides: Mapping[str, Mapping[str, float]] | None = None
) -> dict[str, dict[str, float]]:
    """``{dtype name: {"atol", "rtol"}}`` for the floating dtypes among ``dtypes`` (what a
    result's ``tolerances`` field records); integers are exact and not listed."""
    out: dict[str, dict[str, float]] = {}
    for d in dtypes:
        dt = np.dtype(d)
        if dt.kind == "f" and dt.name not in out:
            rtol, atol = tolerance_for(dt, overrides)
            out[dt.name] = {"atol": atol, "rtol": rtol}
    return out


def poison(arr: np.ndarray) -> None:
    """Fill ``arr`` in place with the poison pattern (NaN for floats, 0xA5 bytes for ints)."""
    raw = arr.reshape(-1).view(np.uint8)
    raw[:] = 0xFF if is_floating(arr.dtype) else POISON_INT_BYTE


def bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape and dtype and the same bytes (NaN payloads included), compared in chunks
    of :data:`CHUNK` bytes so that no temporary of the arrays' size is made."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ra = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    rb = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
    for start in range(0, ra.size, CHUNK):
        if not np.array_equal(ra[start : start + CHUNK], rb[start : start + CHUNK]):
            return False
    return True


def _value(x: Any) -> Any:
    if isinstance(x, (np.floating, float)):
        return json_float(float(x))
    return int(x)


def _uint_view(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


#: The fast check clears a chunk only when every element is within this fraction of its
#: bound, so that its arithmetic in the array's own precision cannot change a verdict.
FAST_MARGIN = 0.999


def _within(c: np.ndarray, r: np.ndarray, atol: float, rtol: float,
            scratch: dict[str, np.ndarray]) -> tuple[float, float] | None:
    """(max abs err, max rel err) of a floating chunk whose every element is finite and
    within ``FAST_MARGIN`` x (atol + rtol |r|), computed in the arrays' precision (float16
    in float32) in ``scratch`` buffers reused across chunks; None when some element is not
    (the exact rule then decides)."""
    wdt = np.dtype(np.float32) if c.dtype.itemsize < 4 else c.dtype
    k = c.size
    if "d" not in scratch or scratch["d"].dtype != wdt or scratch["d"].size < k:
        scratch.update(d=np.empty(k, wdt), ar=np.empty(k, wdt), b=np.empty(k, wdt),
                       m=np.empty(k, np.bool_))
    d, ar, b, m = (scratch[x][:k] for x in ("d", "ar", "b", "m"))
    cc = c.astype(wdt, copy=False)
    rr = r.astype(wdt, copy=False)
    with np.errstate(all="ignore"):
        np.subtract(cc, rr, out=d)
        np.abs(d, out=d)
        np.abs(rr, out=ar)
        np.multiply(ar, rtol * FAST_MARGIN, out=b)
        b += atol * FAST_MARGIN
        np.less_equal(d, b, out=m)
        if not bool(m.all()):
            return None
        most = float(d.max()) if k else 0.0
        if not np.isfinite(most):
            return None
        np.greater(ar, 0, out=m)
        b.fill(0)
        np.divide(d, ar, out=b, where=m)
        return most, (float(b.max()) if k else 0.0)


def compare_arrays(
    name: str,
    cand: np.ndarray,
    ref: np.ndarray,
    *,
    role: str = READ_WRITE,
    rtol: float | None = None,
    atol: float | None = None,
    exact: bool | None = None,
    tolerances: Mapping[str, Mapping[str, float]] | None = None,
) -> ArrayCheck:
    """Compare a candidate array with the reference (same shape and dtype).

    Args:
        name: array name (for the report).
        cand: what the candidate left in the array.
        ref: what the reference left in it.
        role: ``read-only``/``write-only``/``read-write``; read-only arrays are exact.
        rtol, atol: tolerance; default from :func:`tolerance_for` (``tolerances`` overrides).
        exact: force bit-exact comparison (default: integers and read-only arrays).

    Returns:
        An :class:`ArrayCheck` with counts, max errors and the first mismatching index
        (multi-dimensional, C order).
    """
    if cand.shape != ref.shape:
        raise ValueError(f"{name}: shape {cand.shape} != {ref.shape}")
    dt = ref.dtype
    floating = is_floating(dt)
    if exact is None:
        exact = (not floating) or role == READ_ONLY
    if rtol is None or atol is None:
        d_rtol, d_atol = tolerance_for(dt, tolerances)
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
    if exact:
        rtol, atol = 0.0, 0.0
    c_all = np.ascontiguousarray(cand).reshape(-1)
    r_all = np.ascontiguousarray(ref).reshape(-1)
    n = int(r_all.size)

    n_mismatch = 0
    n_nonfinite = 0
    max_abs = 0.0
    max_rel = 0.0
    first: int | None = None
    worst: int | None = None
    worst_err = -1.0
    scratch: dict[str, np.ndarray] = {}

    for start in range(0, n, CHUNK):
        c = c_all[start : start + CHUNK]
        r = r_all[start : start + CHUNK]
        # Fast paths for a chunk that passes (the common case); the exact rule below
        # decides every chunk they do not clear.
        if exact or not floating:
            if np.array_equal(_uint_view(c), _uint_view(r)):
                continue
        else:
            fast = _within(c, r, atol, rtol, scratch)
            if fast is not None:
                max_abs, max_rel = max(max_abs, fast[0]), max(max_rel, fast[1])
                continue
        if floating:
            c64 = c.astype(np.float64)
            r64 = r.astype(np.float64)
            fin = np.isfinite(c64) & np.isfinite(r64)
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.where(fin, np.abs(c64 - r64), 0.0)
            if exact:
                mism = _uint_view(c) != _uint_view(r)
            else:
                with np.errstate(invalid="ignore"):
                    ok_fin = diff <= atol + rtol * np.abs(np.where(fin, r64, 0.0))
                    same_nonfin = (np.isnan(c64) & np.isnan(r64)) | (c64 == r64)
                mism = ~np.where(fin, ok_fin, same_nonfin)
            n_nonfinite += int(np.count_nonzero(mism & ~fin))
            if diff.size:
                max_abs = max(max_abs, float(diff.max()))
                nz = fin & (r64 != 0)
                if nz.any():
                    max_rel = max(max_rel, float((diff[nz] / np.abs(r64[nz])).max()))
            finite_mism = mism & fin
            if finite_mism.any():
                i = int(np.argmax(np.where(finite_mism, diff, -1.0)))
                if diff[i] > worst_err:
                    worst_err, worst = float(diff[i]), start + i
        else:
            mism = c != r
            if mism.any():
                with np.errstate(over="ignore"):
                    diff = np.abs(c.astype(np.float64) - r.astype(np.float64))
                max_abs = max(max_abs, float(diff.max()))
                nz = r != 0
                if nz.any():
                    max_rel = max(
                        max_rel, float((diff[nz] / np.abs(r[nz].astype(np.float64))).max())
                    )
                i = int(np.argmax(diff))
                if diff[i] > worst_err:
                    worst_err, worst = float(diff[i]), start + i
        cnt = int(np.count_nonzero(mism))
        if cnt and first is None:
            first = start + int(np.flatnonzero(mism)[0])
        n_mismatch += cnt

    def at(i: int | None) -> dict[str, Any] | None:
        if i is None:
            return None
        idx = [int(k) for k in np.unravel_index(i, ref.shape)] if ref.ndim else []
        return {"index": idx, "candidate": _value(c_all[i]), "reference": _value(r_all[i])}

    return ArrayCheck(
        name=name,
        dtype=dt.name,
        shape=[int(s) for s in ref.shape],
        role=role,
        ok=n_mismatch == 0,
        n_elements=n,
        n_mismatch=n_mismatch,
        n_nonfinite_mismatch=n_nonfinite,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        rtol=float(rtol),
        atol=float(atol),
        exact=bool(exact),
        first_mismatch=at(first),
        worst_mismatch=at(worst),
    )


def classify_roles(
    run_reference: Callable[[dict[str, np.ndarray]], None],
    inputs: Mapping[str, np.ndarray],
    *,
    const: frozenset[str] | set[str] = frozenset(),
    known: Mapping[str, str] | None = None,
    base: dict[str, np.ndarray] | None = None,
) -> dict[str, str]:
    """Find each array's role by running the reference on copies of ``inputs``.

    * read-only: ``const``, or the reference leaves it bit-for-bit unchanged;
    * write-only: running the reference with the array poisoned (NaN / 0xA5 bytes) instead
      of its data gives the same bytes in every array;
    * read-write: the rest.

    Args:
        run_reference: calls the reference on the arrays of the dict it is given (in place).
        inputs: array name -> data (not modified).
        const: arrays declared ``const`` (read-only without a test).
        known: roles already known (kept, not tested).
        base: a dict that receives the arrays after the first (unpoisoned) reference run:
            the reference's output on ``inputs``.

    Returns:
        array name -> role, for every array in ``inputs``.

    The reference runs ``1 + (arrays neither known, const nor left unchanged)`` times.
    """
    known = dict(known or {})
    roles: dict[str, str] = {}
    first = {k: v.copy() for k, v in inputs.items()}
    run_reference(first)
    if base is not None:
        base.clear()
        base.update(first)
    for name, data in inputs.items():
        if name in known:
            roles[name] = known[name]
        elif name in const or bitwise_equal(first[name], data):
            roles[name] = READ_ONLY
    for name in inputs:
        if name in roles:
            continue
        trial = {k: v.copy() for k, v in inputs.items()}
        poison(trial[name])
        run_reference(trial)
        same = all(bitwise_equal(trial[k], first[k]) for k in inputs)
        roles[name] = WRITE_ONLY if same else READ_WRITE
    return {name: roles[name] for name in inputs}


__all__ = [
    "CHUNK",
    "DEFAULT_TOLERANCES",
    "POISON_FLOAT_WORD",
    "POISON_INT_BYTE",
    "bitwise_equal",
    "classify_roles",
    "compare_arrays",
    "is_floating",
    "poison",
    "tolerance_for",
    "tolerances_used",
]
