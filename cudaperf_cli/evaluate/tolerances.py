"""The comparison tolerances of both evaluation paths (C and PyTorch), one table.

An element passes when ``|candidate - reference| <= atol + rtol * |reference|`` (both
finite; NaN never passes); integer and bool outputs are compared exactly.

Defaults, per floating dtype:

| dtype | atol | rtol | source |
|---|---:|---:|---|
| float32 | 1e-4 | 1e-4 | KernelBench ``src/kernelbench/eval.py`` ``get_tolerance_for_precision`` (fp32 1e-4, after torchbench's ``env_check.py``), used there as ``atol = rtol`` |
| float16, bfloat16 | 1e-2 | 1e-2 | the same function |
| float64 | 1e-9 | 1e-7 | ours: a reorder of a sum of ~1e4 terms in double stays far below |

``cudaperf optimize --atol X --rtol Y`` replaces both numbers for every floating dtype; the
values used are written into every record (``TurnRecord.tolerances``).
"""

from __future__ import annotations

from typing import Mapping

#: dtype name -> {"atol", "rtol"} (see the module docstring for the sources).
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 1e-2, "rtol": 1e-2},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
    "float64": {"atol": 1e-9, "rtol": 1e-7},
}

#: C type names and torch spellings -> the dtype names of :data:`DEFAULT_TOLERANCES`.
ALIASES = {"double": "float64", "float": "float32", "half": "float16", "torch.float32": "float32",
           "torch.float64": "float64", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


def resolve_tolerances(atol: float | None = None, rtol: float | None = None,
                       overrides: Mapping[str, Mapping[str, float]] | None = None,
                       ) -> dict[str, dict[str, float]]:
    """The table in force: the defaults, with ``atol``/``rtol`` (when given) for every
    floating dtype, then per-dtype ``overrides`` (``{"float32": {"rtol": 1e-3}}``).

    Raises:
        ValueError: a negative or non-finite tolerance.
    """
    out = {k: dict(v) for k, v in DEFAULT_TOLERANCES.items()}
    for name, value in (("atol", atol), ("rtol", rtol)):
        if value is None:
            continue
        if not (float(value) >= 0.0) or float(value) == float("inf"):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for tol in out.values():
            tol[name] = float(value)
    for dt, tol in (overrides or {}).items():
        key = ALIASES.get(dt, dt)
        out.setdefault(key, dict(DEFAULT_TOLERANCES["float32"]))
        for name, value in tol.items():
            if name not in ("atol", "rtol") or not (float(value) >= 0.0):
                raise ValueError(f"tolerances[{dt!r}] must be {{'atol': >=0, 'rtol': >=0}}, got {dict(tol)}")
            out[key][name] = float(value)
    return out


def tolerance(dtype: str, table: Mapping[str, Mapping[str, float]] | None = None) -> tuple[float, float]:
    """``(atol, rtol)`` for an element dtype name (``float32``, ``double``,
    ``torch.float16``); ``(0, 0)`` (exact) for integers and bool; an unknown floating dtype
    takes float32's.  ``table``: :func:`resolve_tolerances`'s result (default: the defaults)."""
    name = ALIASES.get(dtype, dtype).replace("torch.", "")
    if name.startswith(("int", "uint", "bool")):
        return 0.0, 0.0
    tab = table if table is not None else DEFAULT_TOLERANCES
    tol = tab.get(name) or tab.get("float32") or DEFAULT_TOLERANCES["float32"]
    return float(tol["atol"]), float(tol["rtol"])


__all__ = ["ALIASES", "DEFAULT_TOLERANCES", "resolve_tolerances", "tolerance"]
