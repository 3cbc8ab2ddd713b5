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

import contextlib
import importlib.util
import json
import os
import sys
import traceback
from types import ModuleType
from typing import Any, Callable, Iterator, Mapping, Sequence

#: Seed set before ``get_init_inputs()`` and ``Model(...)`` (parameters are drawn then).
INIT_SEED = 0
#: Seeds set before the two ``get_inputs()`` calls.
INPUT_SEEDS = (1, 2)

_MODULE_PREFIX = "_cudaperf_problem_"
#: The real-data checks of a file (inputs differ between seeds, forward deterministic,
#: finite, outputs depend on the inputs) run at sizes whose footprint (inputs, outputs,
#: parameters, buffers) is at most this many bytes and whose forward is at most
#: :data:`PROBE_FLOP`: larger main configurations are checked at smaller constants
#: (:meth:`_Probe.probe_constants`), their shapes taken from the meta device.
PROBE_BYTES = 32 << 20
#: FLOP of one forward (``torch.utils.flop_counter``) above which the data checks shrink.
PROBE_FLOP = 2_000_000_000
#: When the constants cannot shrink a problem below this (bytes), the data checks are not
#: run by the loader (a warning says so); the GPU evaluation's baseline job runs the model
#: on data.  (KernelBench level 1's 100_HingeLoss broadcasts a (32768,) target over a
#: (32768, 32768) input: halving batch_size breaks it, and 4.3 GB on the CPU took 216 s.)
DATA_LIMIT_BYTES = 256 << 20


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
    try:
        with _folder_on_path(path):
            spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - user code: report, never die
        sys.modules.pop(module_name, None)
        raise describe_exception(exc, path, "importing the file") from None
    return module


def fake_tensors() -> Any:
    """A context in which tensors have shapes, dtypes and devices but no storage
    (``FakeTensorMode``; tensors made outside it are accepted as inputs).  Unlike
    ``torch.device("meta")`` it also covers tensors a problem makes with an explicit
    ``device="cpu"``, which would otherwise be allocated (6.4 GB at KernelBench's sizes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


@contextlib.contextmanager
def _folder_on_path(path: str) -> Iterator[None]:
    """The problem file's folder first on ``sys.path`` while it runs (sibling imports)."""
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass


#: Module attribute holding the constants a problem module was last run with.
OVERRIDES_ATTR = "__cudaperf_overrides__"


def apply_constants(module: ModuleType, constants: Mapping[str, int]) -> dict[str, int]:
    """Give module-level int constants new values (``batch_size = 16`` -> 4); returns the
    old values (``apply_constants(module, old)`` restores them).

    The file runs again, in the module's own namespace, with the new values written where
    the constants are bound (:func:`cudaperf_cli.problems.pytorch.override_constants`, as the
    evaluation worker does), so values derived from them follow (KernelBench's
    ``groups = in_channels``, ``bias_shape = (out_channels, 1, 1)``); ``Model``,
    ``get_inputs`` and ``get_init_inputs`` are the new run's.

    Raises:
        ProbeError: a name is not a module-level int constant of the file, or the file
            raises when run with the new values.
    """
    from cudaperf_cli.problems.pytorch import override_constants

    old: dict[str, int] = {}
    for name in constants:
        cur = getattr(module, name, None)
        if not isinstance(cur, int) or isinstance(cur, bool):
            raise ProbeError(f"'{name}' is not a module-level int constant of the file")
        old[name] = cur
    if not constants or all(int(v) == old[k] for k, v in constants.items()):
        return old
    path = str(getattr(module, "__file__", "") or "")
    before = dict(getattr(module, OVERRIDES_ATTR, {}))
    overrides = {**before, **{k: int(v) for k, v in constants.items()}}
    try:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        code = compile(override_constants(source, overrides, os.path.basename(path)), path, "exec")
    except (OSError, SyntaxError, ValueError) as exc:
        raise ProbeError(f"cannot set {_fmt(dict(constants))} in {os.path.basename(path)}: {exc}") from None
    try:
        _rerun(module, code, path, overrides)
    except BaseException as exc:  # noqa: BLE001 - user code: report, never die
        err = describe_exception(exc, path, f"running the file with {_fmt(dict(constants))}")
        try:  # the module as it was, so that callers can go on (and restore)
            _rerun(module, compile(override_constants(source, before, os.path.basename(path)), path, "exec"),
                   path, before)
        except BaseException:  # noqa: BLE001
            pass
        raise err from None
    return old


def _rerun(module: ModuleType, code: Any, path: str, overrides: Mapping[str, int]) -> None:
    """Run ``code`` (the problem file, constants overridden) again in ``module``'s namespace."""
    ns = module.__dict__
    keep = {k: ns[k] for k in ("__name__", "__file__", "__loader__", "__spec__", "__package__",
                               "__builtins__", "__cached__") if k in ns}
    ns.clear()
    ns.update(keep)
    ns[OVERRIDES_ATTR] = dict(overrides)
    with _folder_on_path(path):
        exec(code, ns)  # noqa: S102 - the user's own problem file, as at import


# ---------------------------------------------------------------------------------------
# The probe proper (torch imported in main)
# ---------------------------------------------------------------------------------------


class _Probe:
    def __init__(self, emit: Callable[[dict[str, Any]], None], device: str):
        import torch

        from cudaperf_cli.torch_cpu_math import warm_up_cpu_math

        warm_up_cpu_math(torch)  # before the first multi-threaded exp/tanh (pytorch#188792)
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
        # per file: the inputs at the main sizes (fake tensors) when the model needs data,
        # and the larger probe constants tried on the way down
        self.main_input_specs: list[dict[str, Any]] | None = None
        self.main_input_bytes: int | None = None
        self.probe_path: list[dict[str, int]] = []
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
        names = [n for n in spec.get("input_constants", []) if isinstance(getattr(module, n, None), int)]
        main = {n: int(getattr(module, n)) for n in names}

        # 1. The shapes at the main configuration, without data (the meta device): inputs
        #    of KernelBench level 1 reach 6-17 GB, which must never be allocated here.
        self.index = index
        meta: dict[str, Any] | None
        try:
            meta = self.shapes_at(module, path, {})
            meta_note = ""
        except ProbeError as exc:
            meta, meta_note = None, str(exc)

        # 2. The real-data checks, at the main shapes when they are small, else at smaller
        #    "probe" constants found on the meta device.
        probe = self.probe_constants(module, path, names, meta)
        checked: dict[str, Any] | None = None
        self.where = f" at {_fmt(probe)}" if probe else ""
        size = self.probe_size
        if meta is not None and size is not None and size > DATA_LIMIT_BYTES:
            self.warnings.append(
                f"not checked on data here: even at the smallest constants found the problem takes "
                f"{size / 1e6:.0f} MB (limit {DATA_LIMIT_BYTES / 1e6:.0f} MB); the GPU evaluation "
                "checks it"
            )
        else:
            self.emit({"event": "phase", "index": index, "phase": "init"})
            tries = [probe] + list(reversed(self.probe_path)) if probe else [probe]
            first: ProbeError | None = None
            for consts in tries:
                old = apply_constants(module, consts or {})
                self.where = f" at {_fmt(consts)}" if consts else ""
                try:
                    checked = self.check_on_data(index, module, path)
                    probe = consts
                    break
                except ProbeError as exc:
                    # Constants that run without data can still break on data (an index
                    # buffer sized for the main constants): try the larger ones tried before.
                    if first is None:
                        first = exc
                finally:
                    apply_constants(module, old)
            if checked is None:
                assert first is not None
                if probe:
                    raise ProbeError(f"{first} (checked at the probe constants {_fmt(probe)}: the "
                                     "file's own sizes are too large to run on data here)", first.hint)
                raise first
            self.where = f" at {_fmt(probe)}" if probe else ""
        shapes_from_probe = False
        if meta is None:  # shapes only from the data run (at the probe constants when shrunk)
            assert checked is not None
            meta = checked["shapes"]
            shapes_from_probe = bool(probe)
            if probe:
                main_in = self.main_input_bytes
                probe_in = meta["footprint"]["inputs_bytes"]
                ratio = (main_in / probe_in) if main_in and probe_in else None
                if ratio:
                    fp = {k: int(v * ratio) for k, v in meta["footprint"].items()}
                    fp["inputs_bytes"] = int(main_in)
                    fp["total_bytes"] = sum(v for k, v in fp.items() if k != "total_bytes")
                    fp["estimated"] = 1
                    meta = {**meta, "footprint": fp}
                if self.main_input_specs:
                    meta = {**meta, "inputs": self.main_input_specs}  # known without data
                self.warnings.append(
                    f"output shapes at the main sizes are unknown ({meta_note}); the data checks ran "
                    f"at {_fmt(probe)}"
                    + (f", and the footprint at the main sizes ({fp['total_bytes'] / 1e9:.3g} GB) is "
                       "that run's scaled by the inputs' bytes" if ratio else "")
                )
        if checked is None:
            checked = {"init_inputs": meta["init_inputs"], "shapes": None, "degenerate": False,
                       "modifies_inputs": False}

        problem: dict[str, Any] = {
            "init_inputs": checked["init_inputs"],
            "inputs": meta["inputs"],
            "outputs": meta["outputs"],
            "output_is_tuple": meta["output_is_tuple"],
            "param_count": meta["param_count"],
            "buffer_count": meta["buffer_count"],
            "footprint": meta["footprint"],
            "outputs_at_main": not shapes_from_probe,
            "probe_constants": probe,
            "degenerate": checked["degenerate"],
            "modifies_inputs": checked["modifies_inputs"],
            "constants_used": {k: int(getattr(module, k)) for k in spec.get("all_constants", []) if isinstance(getattr(module, k, None), int)},
            "alt_shapes": None,
            "alt_inputs": None,
            "alt_outputs": None,
            "alt_footprint": None,
            "alt_note": "",
            "warnings": [],
        }
        if spec.get("alt_shapes", True):
            self.emit({"event": "phase", "index": index, "phase": "alt"})
            self._find_alt(module, path, names, problem, main)
        problem["warnings"] = list(dict.fromkeys(self.warnings))
        return problem

    # -- shapes without data -----------------------------------------------------------------

    def shapes_at(self, module: ModuleType, path: str, constants: Mapping[str, int]) -> dict[str, Any]:
        """Inputs, outputs, parameters and buffers at ``constants`` (module constant
        overrides), computed on the meta device: shapes and dtypes, no data, no memory.

        Returns ``{"inputs", "outputs" (TensorSpec dicts), "output_is_tuple", "param_count",
        "buffer_count", "footprint": {"inputs_bytes", "outputs_bytes", "params_bytes",
        "buffers_bytes", "total_bytes"}, "flop": FLOP of one forward or None}``.

        Raises:
            ProbeError: the model cannot run on the meta device at these constants (an op
                without a meta kernel, ``.item()``, a shape error).
        """
        torch = self.torch
        old = apply_constants(module, constants)

        def phase(name: str) -> None:
            self.emit({"event": "phase", "index": self.index, "phase": name})

        from torch._subclasses.fake_tensor import FakeTensor

        try:
            with fake_tensors():
                phase("meta.init")
                torch.manual_seed(INIT_SEED)
                init = self._call(lambda: module.get_init_inputs(), path, "get_init_inputs() (meta device)")
                if not isinstance(init, (list, tuple)):
                    raise ProbeError(f"get_init_inputs() returned a {type(init).__name__}, not a list")
                model = self._call(lambda: module.Model(*init), path, "Model(*get_init_inputs()) (meta device)")
                if not isinstance(model, torch.nn.Module):
                    raise ProbeError(f"Model(*get_init_inputs()) is a {type(model).__name__}, not a torch.nn.Module")
                phase("meta.inputs")
                torch.manual_seed(INPUT_SEEDS[0])
                inputs = self._call(lambda: module.get_inputs(), path, "get_inputs() (meta device)")
                if not isinstance(inputs, (list, tuple)):
                    raise ProbeError(
                        f"get_inputs() returned a {type(inputs).__name__}, not a list",
                        "return the forward arguments as a list, e.g. [torch.randn(batch_size, dim)]",
                    )
                real = [k for k, v in enumerate(inputs) if isinstance(v, torch.Tensor) and not isinstance(v, FakeTensor)]
                if real:
                    raise ProbeError(f"get_inputs() item {real[0]} is a tensor made before get_inputs() ran")
                flop = None
                phase("meta.forward")
                with torch.no_grad():
                    try:
                        from torch.utils.flop_counter import FlopCounterMode

                        counter = FlopCounterMode(display=False)
                        with counter:
                            out = self._call(lambda: model(*inputs), path, "forward (meta device)")
                        flop = int(counter.get_total_flops())
                    except ImportError:  # pragma: no cover - old torch
                        out = self._call(lambda: model(*inputs), path, "forward (meta device)")
        finally:
            apply_constants(module, old)
        outs = self._output_list(out)
        params = list(model.parameters())
        buffers = list(model.buffers())
        fp = {
            "inputs_bytes": sum(_nbytes(v) for v in inputs if isinstance(v, torch.Tensor)),
            "outputs_bytes": sum(_nbytes(o) for o in outs),
            "params_bytes": sum(_nbytes(p) for p in params),
            "buffers_bytes": sum(_nbytes(b) for b in buffers),
        }
        fp["total_bytes"] = sum(fp.values())
        return {
            "init_inputs": [self.jsonable(v) for v in init],
            "inputs": [self.describe_value(v, f"get_inputs() item {k}") for k, v in enumerate(inputs)],
            "outputs": [self.describe_value(o, f"output {k}") for k, o in enumerate(outs)],
            "output_is_tuple": not isinstance(out, torch.Tensor),
            "param_count": sum(int(p.numel()) for p in params),
            "buffer_count": sum(int(b.numel()) for b in buffers),
            "footprint": fp,
            "flop": flop,
        }

    def probe_constants(self, module: ModuleType, path: str, names: Sequence[str],
                        meta: Mapping[str, Any] | None) -> dict[str, int] | None:
        """Constants at which the real-data checks run: None (the main ones) when the main
        configuration is small (footprint <= :data:`PROBE_BYTES` and one forward <=
        :data:`PROBE_FLOP`), else the input constants halved one at a time (the largest
        first, keeping only steps that still run on the meta device) until it is small.

        The main configuration's footprint decides without a meta run's numbers when the
        meta run failed: then the data run happens at the main sizes only when the inputs
        alone are small, else at the smallest constants tried.
        """
        def small(m: Mapping[str, Any]) -> bool:
            flop = m.get("flop")
            return m["footprint"]["total_bytes"] <= PROBE_BYTES and (flop is None or flop <= PROBE_FLOP)

        self.probe_size = None if meta is None else meta["footprint"]["total_bytes"]
        if meta is None:
            return self._probe_by_inputs(module, path, names)
        if small(meta):
            return None
        if not names:
            return None
        cur = {n: int(getattr(module, n)) for n in names}
        cur_m = meta
        for _ in range(200):
            if small(cur_m):
                break
            stepped = False
            for n in sorted(cur, key=lambda k: -cur[k]):
                if cur[n] <= 1:
                    continue
                cand = {**cur, n: max(1, cur[n] // 2)}
                try:
                    m = self.shapes_at(module, path, cand)
                except ProbeError:
                    continue
                if m["footprint"]["total_bytes"] < cur_m["footprint"]["total_bytes"] or (
                        (m.get("flop") or 0) < (cur_m.get("flop") or 0)):
                    if m["footprint"]["total_bytes"] <= DATA_LIMIT_BYTES:
                        self.probe_path.append(cur)
                    cur, cur_m, stepped = cand, m, True
                    break
            if not stepped:
                break
        self.probe_size = cur_m["footprint"]["total_bytes"]
        if cur == {n: int(getattr(module, n)) for n in names}:
            return None
        return cur

    def input_bytes_at(self, module: ModuleType, path: str, constants: Mapping[str, int]) -> int | None:
        """Bytes of ``get_inputs()``'s tensors at ``constants``, drawn as fake tensors (no
        storage); None when ``get_inputs()`` cannot run that way."""
        torch = self.torch
        old = apply_constants(module, constants)
        try:
            with fake_tensors():
                torch.manual_seed(INPUT_SEEDS[0])
                inputs = module.get_inputs()
                if not constants:
                    self.main_input_specs = [self.describe_value(v, f"get_inputs() item {k}")
                                             for k, v in enumerate(inputs)]
            return sum(_nbytes(v) for v in inputs if isinstance(v, torch.Tensor))
        except Exception:  # noqa: BLE001 - user code; the data run reports it
            return None
        finally:
            apply_constants(module, old)

    def _probe_by_inputs(self, module: ModuleType, path: str, names: Sequence[str]) -> dict[str, int] | None:
        """Probe constants of a model that does not run without data (``.item()``, an op
        without a fake kernel): the main sizes when their inputs are small (<= 1/4 of
        :data:`PROBE_BYTES`), else the input constants halved (the largest first) until the
        inputs are; ``probe_size`` is then unknown."""
        self.main_input_bytes = self.input_bytes_at(module, path, {})
        limit = PROBE_BYTES // 4
        if self.main_input_bytes is None or self.main_input_bytes <= limit or not names:
            return None
        cur = {n: int(getattr(module, n)) for n in names}
        size = self.main_input_bytes
        for _ in range(200):
            if size <= limit:
                break
            for n in sorted(cur, key=lambda k: -cur[k]):
                if cur[n] <= 1:
                    continue
                cand = {**cur, n: max(1, cur[n] // 2)}
                b = self.input_bytes_at(module, path, cand)
                if b is not None and b < size:
                    if b <= DATA_LIMIT_BYTES:
                        self.probe_path.append(cur)
                    cur, size = cand, b
                    break
            else:
                break
        return None if cur == {n: int(getattr(module, n)) for n in names} else cur

    # -- checks on real data (CPU unless device='cuda') -----------------------------------

    def check_on_data(self, index: int, module: ModuleType, path: str) -> dict[str, Any]:
        """Build the model, draw inputs for seeds 1 and 2, run forward three times: the
        inputs must differ between seeds, outputs be tensors, finite and deterministic.
        Outputs equal for both seeds mark the problem ``degenerate`` (a warning: KernelBench
        ships such files and they are evaluated as given).  Returns ``{"init_inputs",
        "shapes" (as :meth:`shapes_at`, from this run), "degenerate", "modifies_inputs"}``."""
        torch = self.torch
        model, init = self.build_model(module, path)
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
        n_warn = len(self.warnings)
        out1 = self.forward(model, in1, path, s1)
        self.check_finite(out1, s1)
        out1b = self.forward(model, in1, path, s1)
        out2 = self.forward(model, in2, path, s2)
        self.check_finite(out2, s2)
        modifies = any("modifies its input" in w for w in self.warnings[n_warn:])
        if len(out1b) != len(out1) or len(out2) != len(out1):
            raise ProbeError("forward returns a different number of outputs from call to call")
        for k, (a, b) in enumerate(zip(out1, out1b)):
            if a.shape != b.shape or not _close(torch, a, b):
                raise ProbeError(
                    f"forward is not deterministic: output {k} differs between two runs on the same inputs",
                    "a reference must give the same result for the same inputs (dropout in training mode? random ops?)",
                )
        degenerate = all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(out1, out2))
        if degenerate:
            self.warnings.append(
                f"degenerate: the outputs do not depend on the inputs (the same values for seeds {s1} "
                f"and {s2}{self.where}); the problem is evaluated as given, but a constant answer "
                "would pass"
            )
        params = list(model.parameters())
        buffers = list(model.buffers())
        fp = {
            "inputs_bytes": sum(_nbytes(v) for v in in1 if isinstance(v, torch.Tensor)),
            "outputs_bytes": sum(_nbytes(o) for o in out1),
            "params_bytes": sum(_nbytes(p) for p in params),
            "buffers_bytes": sum(_nbytes(b) for b in buffers),
        }
        fp["total_bytes"] = sum(fp.values())
        shapes = {
            "inputs": [self.describe_value(v, f"input {k}") for k, v in enumerate(in1)],
            "outputs": [self.describe_value(o, f"output {k}") for k, o in enumerate(out1)],
            "output_is_tuple": self._last_was_tuple,
            "param_count": sum(int(p.numel()) for p in params),
            "buffer_count": sum(int(b.numel()) for b in buffers),
            "footprint": fp,
            "flop": None,
        }
        return {"init_inputs": [self.jsonable(v) for v in init], "shapes": shapes,
                "degenerate": degenerate, "modifies_inputs": modifies}

    def _output_list(self, out: Any) -> list[Any]:
        torch = self.torch
        if isinstance(out, torch.Tensor):
            return [out]
        if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
            return list(out)
        kind = type(out).__name__
        if isinstance(out, (tuple, list)):
            bad = [type(o).__name__ for o in out if not isinstance(o, torch.Tensor)]
            kind = f"{kind} holding {', '.join(bad) or 'nothing'}" if out else f"empty {kind}"
        raise ProbeError(f"forward returned a {kind}: it must return a tensor or a tuple of tensors")

    def _find_alt(self, module: ModuleType, path: str, names: Sequence[str], problem: dict[str, Any],
                  main: Mapping[str, int]) -> None:
        """The alternative shapes: the first of :func:`alt_candidates` that runs, changes the
        input shapes and keeps the outputs' number and dtypes.  Checked on the meta device;
        also on data when that configuration is small (:data:`PROBE_BYTES`)."""
        if not names:
            problem["alt_note"] = "get_inputs() reads no module-level int constant"
            return
        cands = alt_candidates(main)
        if not cands:
            problem["alt_note"] = "every shape constant is already 1"
            return
        default_shapes = [tuple(s["shape"]) for s in problem["inputs"]]
        out_dtypes = [o["dtype"] for o in problem["outputs"]]
        first_error = ""
        for cand in cands:
            try:
                try:
                    m = self.shapes_at(module, path, cand)
                except ProbeError:
                    m = None  # no meta kernel for some op: try it on data below
                if m is not None and [tuple(s["shape"]) for s in m["inputs"]] == default_shapes:
                    first_error = first_error or "changing the constants does not change the input shapes"
                    continue
                if m is not None and (len(m["outputs"]) != len(out_dtypes)
                                      or [o["dtype"] for o in m["outputs"]] != out_dtypes):
                    first_error = first_error or "the outputs change number or dtype"
                    continue
                small = m is not None and m["footprint"]["total_bytes"] <= PROBE_BYTES and (
                    m.get("flop") is None or m["flop"] <= PROBE_FLOP)
                if m is None and problem["probe_constants"] is not None:
                    first_error = first_error or f"{_fmt(cand)}: does not run on the meta device"
                    continue  # its size is unknown and the main one was too large for data
                if m is None or small:  # run it on data too
                    torch = self.torch
                    old = apply_constants(module, cand)
                    try:
                        model, _ = self.build_model(module, path)
                        ins = self.make_inputs(module, path, INPUT_SEEDS[0])
                        shapes = [tuple(v.shape) if isinstance(v, torch.Tensor) else () for v in ins]
                        if shapes == default_shapes and m is None:
                            first_error = first_error or "changing the constants does not change the input shapes"
                            continue
                        outs = self.forward(model, ins, path, INPUT_SEEDS[0])
                        self.check_finite(outs, INPUT_SEEDS[0])
                    finally:
                        apply_constants(module, old)
                    if len(outs) != len(out_dtypes) or [self._dtype(o) for o in outs] != out_dtypes:
                        first_error = first_error or "the outputs change number or dtype"
                        continue
                    if m is None:
                        m = {"inputs": [self.describe_value(v, f"input {k}") for k, v in enumerate(ins)],
                             "outputs": [self.describe_value(o, f"output {k}") for k, o in enumerate(outs)],
                             "footprint": None}
            except ProbeError as exc:
                first_error = first_error or f"{_fmt(cand)}: {exc}"
                continue
            problem["alt_shapes"] = cand
            problem["alt_inputs"] = m["inputs"]
            problem["alt_outputs"] = m["outputs"]
            problem["alt_footprint"] = m.get("footprint")
            problem["alt_note"] = ""
            return
        problem["alt_note"] = first_error or "no smaller constants run"


def _fmt(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _nbytes(t: Any) -> int:
    """Bytes of a tensor's elements (``numel x element size``; meta tensors too)."""
    return int(t.numel()) * int(t.element_size())


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
