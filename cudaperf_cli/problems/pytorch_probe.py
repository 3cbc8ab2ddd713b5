"""Child side of the PyTorch problem loader: ``python -m cudaperf_cli.problems.pytorch_probe``.

A problem file is user code, so it never runs in the CLI's process: the parent
(:mod:`cudaperf_cli.problems.pytorch`) starts this module in a new session, writes one JSON
job on stdin and reads JSON lines on stdout, killing the process group when a file runs
past its time limit.

Job (stdin, one JSON document)::

    {"device": "cpu" | "cuda",
     "files": [{"path": str, "constants": {name: int}, "input_constants": [name, ...],
                "alt_shapes": bool}, ...]}

Answer (stdout, one JSON object per line, flushed as it happens)::

    {"event": "ready", "torch": "2.13.0"}                 # torch imported
    {"event": "start", "index": i}                        # file i begins (its clock starts)
    {"event": "phase", "index": i, "phase": "import"}     # import|init|inputs|forward|alt
    {"event": "result", "index": i, "ok": true, "problem": {...}}
    {"event": "result", "index": i, "ok": false, "error": "one line", "hint": str | null}

File descriptor 1 is redirected to stderr at start-up (the answer goes to a duplicate of
the original stdout), so ``print`` in a problem file cannot corrupt the protocol.

Per file: import it under a private module name, check ``Model``, ``get_inputs`` and
``get_init_inputs``, apply constant overrides (module attributes), build
``Model(*get_init_inputs())`` under ``torch.manual_seed(0)``, run ``forward`` on the
inputs of seeds 1 and 2 (under ``torch.no_grad()``), and reject outputs that are not
tensors, are NaN/inf, do not depend on the inputs or differ between two runs on the same
inputs.  Then look for alternative shapes (smaller odd values of the constants that
``get_inputs`` reads) that still run.

The helpers :func:`import_problem_module`, :func:`apply_constants` and
:func:`user_location` are also meant for the evaluation worker, which must load a problem
the same way.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

#: Seed set before ``get_init_inputs()`` and ``Model(...)`` (parameters are drawn then).
INIT_SEED = 0
#: Seeds set before the two ``get_inputs()`` calls.
INPUT_SEEDS = (1, 2)

_MODULE_PREFIX = "_cudaperf_problem_"


# ---------------------------------------------------------------------------------------
# Helpers without torch (importable by the parent)
# ---------------------------------------------------------------------------------------


def odd_half(value: int) -> int:
    """A smaller odd size of about half ``value`` (min 1): 16 -> 9, 4096 -> 2049, 2 -> 1.

    Odd sizes catch kernels that assume a multiple of the block size or a vector width.
    """
    value = int(value)
    if value <= 1:
        return value
    h = max(1, value // 2)
    if h % 2 == 0:
        h += 1  # still < value for every value >= 4
    return h


def alt_candidates(values: Mapping[str, int]) -> list[dict[str, int]]:
    """Constant sets to try, in order, for the alternative shapes.

    1. every constant at :func:`odd_half`;  2. every constant halved (even sizes, for
    models that need divisibility);  3. every constant at :func:`odd_half` but one, which
    keeps its value (a channel count that must stay a multiple of the groups);  4. one
    constant at a time at :func:`odd_half`.  Sets equal to ``values`` and duplicates are
    dropped.
    """
    base = {k: int(v) for k, v in values.items()}
    odd = {k: odd_half(v) for k, v in base.items()}
    sets: list[dict[str, int]] = [odd, {k: max(1, v // 2) for k, v in base.items()}]
    if len(base) > 2:
        for k in base:
            sets.append({**odd, k: base[k]})
    for k in base:
        sets.append({**base, k: odd[k]})
    out: list[dict[str, int]] = []
    for s in sets:
        if s != base and s not in out:
            out.append(s)
    return out


def user_location(tb: Any, path: str) -> str | None:
    """``"file.py:LINE"`` of the last traceback frame in ``path`` (the user's file), else None."""
    want = os.path.realpath(path)
    loc = None
    for frame in traceback.extract_tb(tb):
        try:
            same = os.path.realpath(frame.filename) == want
        except (OSError, ValueError):
            same = False
        if same:
            loc = f"{os.path.basename(path)}:{frame.lineno}"
    return loc


def _first_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


class ProbeError(Exception):
    """A problem-file error: ``str`` is one line; ``hint`` an optional second line."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


def describe_exception(exc: BaseException, path: str, what: str) -> ProbeError:
    """One-line error for an exception raised by user code: ``<what> failed at
    file.py:LINE: Type: message`` (the last frame of the user's file)."""
    if isinstance(exc, SyntaxError) and exc.filename and os.path.realpath(
        str(exc.filename)
    ) == os.path.realpath(path):
        return ProbeError(
            f"syntax error at {os.path.basename(path)}:{exc.lineno}: {exc.msg}"
        )
    loc = user_location(exc.__traceback__, path)
    where = f" at {loc}" if loc else ""
    msg = _first_line(str(exc))
    if isinstance(exc, SystemExit):
        return ProbeError(f"{what} called sys.exit({exc.code!r}){where}")
    text = f"{what} failed{where}: {type(exc).__name__}"
    if msg:
        text += f": {msg}"
    hint = None
    if "CUDA" in msg and ("not compiled" in msg or "no NVIDIA driver" in msg or "available" in msg):
        hint = "the problem runs on the CPU here; create tensors without device='cuda' (the evaluation moves them)"
    return ProbeError(text, hint)


def import_problem_module(path: str, module_name: str) -> ModuleType:
    """Import a problem file under ``module_name`` (registered in ``sys.modules``, with the
    file's folder on ``sys.path`` while it runs, so sibling imports work).

    Raises:
        ProbeError: the file raised while importing (message names the line).
    """
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ProbeError(f"cannot import {os.path.basename(path)} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - user code: report, never die
        sys.modules.pop(module_name, None)
        raise describe_exception(exc, path, "importing the file") from None
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def apply_constants(module: ModuleType, constants: Mapping[str, int]) -> dict[str, int]:
    """Set module-level int constants (``batch_size = 16`` -> 4); returns the old values.

    ``get_inputs``/``get_init_inputs`` read module globals when called, so the new values
    take effect from their next call.

    Raises:
        ProbeError: a name is not a module-level int of the file.
    """
    old: dict[str, int] = {}
    for name, value in constants.items():
        cur = getattr(module, name, None)
        if not isinstance(cur, int) or isinstance(cur, bool):
            raise ProbeError(f"'{name}' is not a module-level int constant of the file")
        old[name] = cur
        setattr(module, name, int(value))
    return old


# ---------------------------------------------------------------------------------------
# The probe proper (torch imported in main)
# ---------------------------------------------------------------------------------------


class _Probe:
    def __init__(self, emit: Callable[[dict[str, Any]], None], device: str):
        import torch

        self.torch = torch
        self.emit = emit
        self.device = device

    # -- descriptions -----------------------------------------------------------------

    def _dtype(self, t: Any) -> str:
        return str(t.dtype).replace("torch.", "")

    def describe_value(self, v: Any, what: str) -> dict[str, Any]:
        torch = self.torch
        if isinstance(v, torch.Tensor):
            return {"kind": "tensor", "shape": list(v.shape), "dtype": self._dtype(v), "value": None}
        if isinstance(v, bool):
            return {"kind": "bool", "shape": [], "dtype": "bool", "value": v}
        if isinstance(v, int):
            return {"kind": "int", "shape": [], "dtype": "int64", "value": v}
        if isinstance(v, float):
            return {"kind": "float", "shape": [], "dtype": "float64", "value": v}
        raise ProbeError(
            f"{what} is a {type(v).__name__}: inputs must be tensors or Python numbers"
        )

    def jsonable(self, v: Any) -> Any:
        torch = self.torch
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, (list, tuple)):
            return [self.jsonable(x) for x in v]
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, torch.Tensor):
            return f"tensor(shape={list(v.shape)}, dtype={self._dtype(v)})"
        return repr(v)

    # -- one run ----------------------------------------------------------------------

    def _call(self, fn: Callable[[], Any], path: str, what: str) -> Any:
        try:
            return fn()
        except ProbeError:
            raise
        except BaseException as exc:  # noqa: BLE001 - user code
            raise describe_exception(exc, path, what) from None

    def build_model(self, module: ModuleType, path: str) -> tuple[Any, list[Any]]:
        torch = self.torch
        torch.manual_seed(INIT_SEED)
        init = self._call(lambda: module.get_init_inputs(), path, "get_init_inputs()")
        if not isinstance(init, (list, tuple)):
            raise ProbeError(
                f"get_init_inputs() returned a {type(init).__name__}, not a list",
                "return the constructor arguments of Model as a list, e.g. [] or [in_features, out_features]",
            )
        model = self._call(lambda: module.Model(*init), path, "Model(*get_init_inputs())")
        if not isinstance(model, torch.nn.Module):
            raise ProbeError(f"Model(*get_init_inputs()) is a {type(model).__name__}, not a torch.nn.Module")
        if self.device != "cpu":
            model = self._call(lambda: model.to(self.device), path, f"Model.to('{self.device}')")
        return model, list(init)

    def make_inputs(self, module: ModuleType, path: str, seed: int) -> list[Any]:
        torch = self.torch
        torch.manual_seed(seed)
        inputs = self._call(lambda: module.get_inputs(), path, "get_inputs()")
        if not isinstance(inputs, (list, tuple)):
            raise ProbeError(
                f"get_inputs() returned a {type(inputs).__name__}, not a list",
                "return the forward arguments as a list, e.g. [torch.randn(batch_size, dim)]",
            )
        out = []
        for k, v in enumerate(inputs):
            self.describe_value(v, f"get_inputs() item {k}")
            if isinstance(v, torch.Tensor) and self.device != "cpu":
                v = v.to(self.device)
            out.append(v)
        return out

    def forward(self, model: Any, inputs: Sequence[Any], path: str, seed: int) -> list[Any]:
        torch = self.torch
        args = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
        with torch.no_grad():
            out = self._call(lambda: model(*args), path, f"forward(*get_inputs()) (seed {seed})")
        if self.device == "cuda":
            torch.cuda.synchronize()
        self._last_was_tuple = not isinstance(out, torch.Tensor)
        if isinstance(out, torch.Tensor):
            outs = [out]
        elif isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
            outs = list(out)
        else:
            kind = type(out).__name__
            if isinstance(out, (tuple, list)):
                bad = [type(o).__name__ for o in out if not isinstance(o, torch.Tensor)]
                kind = f"{kind} holding {', '.join(bad) or 'nothing'}" if out else f"empty {kind}"
            raise ProbeError(
                f"forward returned a {kind}: it must return a tensor or a tuple of tensors"
            )
        for k, (a, b) in enumerate(zip(inputs, args)):
            if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                self.warnings.append(f"forward modifies its input {k} in place")
        return outs

    def check_finite(self, outs: Sequence[Any], seed: int) -> None:
        torch = self.torch
        for k, o in enumerate(outs):
            if o.is_floating_point() or o.is_complex():
                bad = int((~torch.isfinite(o)).sum())
                if bad:
                    raise ProbeError(
                        f"output {k} holds {bad} NaN/inf values of {o.numel()} for random inputs (seed {seed})",
                        "a reference must give finite results for the inputs get_inputs() draws",
                    )

    # -- one file ---------------------------------------------------------------------

    def run_file(self, index: int, spec: Mapping[str, Any]) -> dict[str, Any]:
        torch = self.torch
        path = str(spec["path"])
        self.warnings: list[str] = []
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)

        self.emit({"event": "phase", "index": index, "phase": "import"})
        module = import_problem_module(path, f"{_MODULE_PREFIX}{index}")
        try:
            return self._run_module(index, spec, module, path)
        finally:
            sys.modules.pop(module.__name__, None)

    def _run_module(self, index: int, spec: Mapping[str, Any], module: ModuleType, path: str) -> dict[str, Any]:
        torch = self.torch
        missing = []
        if not hasattr(module, "Model"):
            missing.append("class Model(nn.Module)")
        for fn in ("get_inputs", "get_init_inputs"):
            if not hasattr(module, fn):
                missing.append(f"{fn}()")
        if missing:
            raise ProbeError(
                f"the file defines no {' and no '.join(missing)}",
                "KernelBench format: class Model(nn.Module), get_inputs() -> list of forward "
                "arguments, get_init_inputs() -> list of constructor arguments",
            )
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not callable(getattr(module, name)):
                raise ProbeError(f"'{name}' is a {type(getattr(module, name)).__name__}, not callable")
        if not (isinstance(module.Model, type) and issubclass(module.Model, torch.nn.Module)):
            raise ProbeError("Model is not a subclass of torch.nn.Module")

        constants = {k: int(v) for k, v in (spec.get("constants") or {}).items()}
        apply_constants(module, constants)

        self.emit({"event": "phase", "index": index, "phase": "init"})
        model, init = self.build_model(module, path)
        params = sum(int(p.numel()) for p in model.parameters())
        buffers = sum(int(b.numel()) for b in model.buffers())

        self.emit({"event": "phase", "index": index, "phase": "inputs"})
        s1, s2 = INPUT_SEEDS
        in1 = self.make_inputs(module, path, s1)
        in2 = self.make_inputs(module, path, s2)
        if len(in1) == 0:
            raise ProbeError("get_inputs() returned an empty list: forward needs at least one input")
        same_inputs = all(
            (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b) for a, b in zip(in1, in2)
        )
        if same_inputs:
            raise ProbeError(
                f"get_inputs() returns the same inputs for seeds {s1} and {s2}",
                "draw the inputs at random (torch.randn / torch.rand) so that every trial checks new data",
            )

        self.emit({"event": "phase", "index": index, "phase": "forward"})
        out1 = self.forward(model, in1, path, s1)
        self.check_finite(out1, s1)
        out1b = self.forward(model, in1, path, s1)
        out2 = self.forward(model, in2, path, s2)
        self.check_finite(out2, s2)
        if len(out1b) != len(out1) or len(out2) != len(out1):
            raise ProbeError("forward returns a different number of outputs from call to call")
        for k, (a, b) in enumerate(zip(out1, out1b)):
            if a.shape != b.shape or not _close(torch, a, b):
                raise ProbeError(
                    f"forward is not deterministic: output {k} differs between two runs on the same inputs",
                    "a reference must give the same result for the same inputs (dropout in training mode? random ops?)",
                )
        for k, (a, b) in enumerate(zip(out1, out2)):
            if a.shape == b.shape and torch.equal(a, b):
                which = "outputs do" if len(out1) == 1 else f"output {k} does"
                raise ProbeError(
                    f"{which} not depend on the inputs: the same values for seeds {s1} and {s2}",
                    "a problem whose result is constant can be answered without computing; make forward use its inputs",
                )

        problem: dict[str, Any] = {
            "init_inputs": [self.jsonable(v) for v in init],
            "inputs": [self.describe_value(v, f"input {k}") for k, v in enumerate(in1)],
            "outputs": [self.describe_value(o, f"output {k}") for k, o in enumerate(out1)],
            "output_is_tuple": self._last_was_tuple,
            "param_count": params,
            "buffer_count": buffers,
            "constants_used": {k: int(getattr(module, k)) for k in spec.get("all_constants", []) if isinstance(getattr(module, k, None), int)},
            "alt_shapes": None,
            "alt_inputs": None,
            "alt_outputs": None,
            "alt_note": "",
            "warnings": [],
        }
        del model

        names = [n for n in spec.get("input_constants", []) if isinstance(getattr(module, n, None), int)]
        if spec.get("alt_shapes", True):
            self.emit({"event": "phase", "index": index, "phase": "alt"})
            self._find_alt(module, path, names, problem)
        problem["warnings"] = list(dict.fromkeys(self.warnings))
        return problem

    def _find_alt(self, module: ModuleType, path: str, names: Sequence[str], problem: dict[str, Any]) -> None:
        torch = self.torch
        if not names:
            problem["alt_note"] = "get_inputs() reads no module-level int constant"
            return
        base = {n: int(getattr(module, n)) for n in names}
        cands = alt_candidates(base)
        if not cands:
            problem["alt_note"] = "every shape constant is already 1"
            return
        default_shapes = [tuple(s["shape"]) for s in problem["inputs"]]
        first_error = ""
        for cand in cands:
            old = apply_constants(module, cand)
            try:
                model, _ = self.build_model(module, path)
                ins = self.make_inputs(module, path, INPUT_SEEDS[0])
                shapes = [tuple(v.shape) if isinstance(v, torch.Tensor) else () for v in ins]
                if shapes == default_shapes:
                    first_error = first_error or "changing the constants does not change the input shapes"
                    continue
                outs = self.forward(model, ins, path, INPUT_SEEDS[0])
                self.check_finite(outs, INPUT_SEEDS[0])
                if len(outs) != len(problem["outputs"]) or [self._dtype(o) for o in outs] != [
                    o["dtype"] for o in problem["outputs"]
                ]:
                    first_error = first_error or "the outputs change number or dtype"
                    continue
            except ProbeError as exc:
                first_error = first_error or f"{_fmt(cand)}: {exc}"
                continue
            finally:
                apply_constants(module, old)
            problem["alt_shapes"] = cand
            problem["alt_inputs"] = [self.describe_value(v, f"input {k}") for k, v in enumerate(ins)]
            problem["alt_outputs"] = [self.describe_value(o, f"output {k}") for k, o in enumerate(outs)]
            problem["alt_note"] = ""
            return
        problem["alt_note"] = first_error or "no smaller constants run"


def _fmt(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _close(torch: Any, a: Any, b: Any) -> bool:
    if a.is_floating_point() or a.is_complex():
        return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
    return bool(torch.equal(a, b))


def main(argv: Sequence[str] | None = None) -> int:
    # The answer goes to a duplicate of the real stdout; fd 1 now points to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(doc: dict[str, Any]) -> None:
        proto.write(json.dumps(doc) + "\n")
        proto.flush()

    job = json.loads(sys.stdin.read() or "{}")
    device = str(job.get("device", "cpu"))
    try:
        probe = _Probe(emit, device)
    except ImportError as exc:
        emit({"event": "fatal", "error": f"cannot import torch: {exc}"})
        return 3
    torch = probe.torch
    if device == "cuda" and not torch.cuda.is_available():
        emit({"event": "fatal", "error": "device='cuda' was asked but torch sees no CUDA device"})
        return 3
    emit({"event": "ready", "torch": torch.__version__})
    for index, spec in enumerate(job.get("files", [])):
        index = int(spec.get("index", index))
        emit({"event": "start", "index": index})
        try:
            problem = probe.run_file(index, spec)
        except ProbeError as exc:
            emit({"event": "result", "index": index, "ok": False, "error": str(exc), "hint": exc.hint})
            continue
        except BaseException as exc:  # noqa: BLE001 - never die on one file
            emit(
                {
                    "event": "result",
                    "index": index,
                    "ok": False,
                    "error": f"the loader failed: {type(exc).__name__}: {_first_line(str(exc))}",
                    "hint": None,
                }
            )
            continue
        emit({"event": "result", "index": index, "ok": True, "problem": problem})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
