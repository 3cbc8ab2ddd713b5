"""Checks on what a PyTorch candidate's ``forward`` hands back and leaves behind
(``docs/pytorch-evaluation.md`` §4: the ``output_type``, ``background_thread`` and
``patching`` guards), and the tensor operations the comparison reads values through.

* :func:`output_type_problem`: a forward's output must be plain dense tensors
  (``type(t) is torch.Tensor``, strided, not nested, on the reference's device, contiguous
  where the reference's is, no internal overlap where the reference has none, no lazy
  negation/conjugation bit) in plain containers.  A tensor subclass can fill its data only
  when it is read (``__torch_dispatch__``), so timed calls that return one do no work.
* :class:`ThreadWatch`: no thread the candidate started may still be alive when its
  ``forward`` returns (work deferred to a thread is not inside the timed region and may
  land after the output was checked).
* :func:`saved_ops` (``VF``: ``torch._C._VariableFunctions``, ``TB``:
  ``torch._C.TensorBase``): both are immutable C types, captured before the candidate is
  imported; the comparison calls them instead of ``torch.Tensor``'s dunders and methods
  (``__int__``, ``__le__``, ``sum``...), which a candidate can replace in Python, even
  only for the moment of the comparison (a ``weakref.finalize`` on its output runs when
  the judge drops it).
* :func:`tensor_class_targets` and :func:`global_state`: what the ``patching`` guard records
  beyond its named targets: every attribute ``torch.Tensor`` resolves (its own and
  ``TensorBase``'s: shadowing ``__int__`` in ``torch.Tensor``'s dict is a patch), the
  builtins the checks call, and global state that reroutes every tensor operation (an
  active ``TorchFunctionMode``/``TorchDispatchMode``, global module hooks, a trace or
  profile function, ``gc.callbacks``).

torch is imported lazily (by the caller); nothing here runs candidate code.
"""

from __future__ import annotations

import _thread
import builtins
import gc
import os
import sys
import threading
from typing import Any, Callable, Mapping

#: The builtins the worker's checks call: replaced in ``builtins``, a check would lie.
CHECKED_BUILTINS = (
    "type", "isinstance", "issubclass", "len", "abs", "int", "float", "bool", "complex",
    "max", "min", "sum", "any", "all", "sorted", "zip", "enumerate", "range", "tuple", "list",
    "dict", "set", "frozenset", "str", "repr", "round", "getattr", "hasattr", "id", "iter",
    "next", "map", "filter", "divmod", "pow", "hash", "vars", "dir", "object",
)
#: ``torch`` attributes the checks and the comparison use (functions, classes, dtypes).
CHECKED_TORCH_ATTRS = (
    "Tensor", "Size", "device", "dtype", "strided", "no_grad", "empty", "zeros", "ones", "full",
    "zeros_like", "empty_like", "equal", "isnan", "isfinite", "where", "abs", "sum",
    "float64", "float32", "float16", "bfloat16", "complex128", "complex64", "int64", "int32",
    "int16", "int8", "uint8", "bool", "_debug_has_internal_overlap",
)


class _Saved:
    """``torch._C._VariableFunctions``, ``torch._C.TensorBase`` and ``StorageBase`` (immutable
    C types) and the classes the type checks compare with, captured once."""

    VF: Any = None
    TB: Any = None
    SB: Any = None
    Tensor: Any = None
    Parameter: Any = None
    strided: Any = None
    overlap: Any = None


_SAVED = _Saved()


def arm(torch: Any) -> _Saved:
    """Capture the operations and classes the checks use (idempotent; the worker calls it
    before importing the candidate).  Returns the holder (:func:`saved_ops`)."""
    if _SAVED.VF is None:
        _SAVED.VF = torch._C._VariableFunctions
        _SAVED.TB = torch._C.TensorBase
        _SAVED.SB = torch._C.StorageBase
        _SAVED.Tensor = torch.Tensor
        _SAVED.Parameter = torch.nn.Parameter
        _SAVED.strided = torch.strided
        _SAVED.overlap = getattr(torch, "_debug_has_internal_overlap", None)
    return _SAVED


def saved_ops() -> _Saved:
    """The holder of :func:`arm` (armed on first use by a process that never called it:
    the CPU tests of the pure helpers)."""
    if _SAVED.VF is None:
        import torch

        arm(torch)
    return _SAVED


# ---------------------------------------------------------------------------------------
# output_type
# ---------------------------------------------------------------------------------------

_SCALARS = (int, float, bool)


def _items(obj: Any) -> list[tuple[str, Any]] | None:
    """The entries of a tuple/list/dict (subclasses too) read through the base type's own
    methods, so no candidate code runs; None for anything else."""
    t = type(obj)
    if issubclass(t, tuple):
        return [(f"[{i}]", tuple.__getitem__(obj, i)) for i in range(tuple.__len__(obj))]
    if issubclass(t, list):
        return [(f"[{i}]", list.__getitem__(obj, i)) for i in range(list.__len__(obj))]
    if issubclass(t, dict):
        return [(f"[{k!r}]", dict.__getitem__(obj, k)) for k in sorted(dict.keys(obj), key=str)]
    return None


def _type_name(obj: Any) -> str:
    t = type(obj)
    mod = type.__getattribute__(t, "__module__") or ""
    name = type.__getattribute__(t, "__qualname__")
    return f"{mod}.{name}" if mod not in ("builtins", "") else str(name)


def _container_ok(got: Any, expected: Any) -> bool:
    """``got``'s container type: exactly tuple/list/dict, or exactly the reference's
    (a ``torch.return_types`` or named tuple the problem returns)."""
    tg, te = type(got), type(expected)
    if tg is te:
        return True
    if tg in (tuple, list):
        return issubclass(te, (tuple, list))
    if tg is dict:
        return issubclass(te, dict)
    return False


def _is_tensor(obj: Any) -> bool:
    return issubclass(type(obj), saved_ops().Tensor)


def _tensor_problem(path: str, t: Any, ref: Any) -> str | None:
    s = saved_ops()
    TB = s.TB
    tt = type(t)
    if tt is not s.Tensor:
        param_ok = tt is s.Parameter and (ref is NO_REFERENCE or type(ref) is s.Parameter)
        if not param_ok:
            return (f"{path} is a {_type_name(t)}, not a torch.Tensor: forward must return plain "
                    "tensors (a tensor subclass can compute its values only when they are read)")
    layout = TB.layout.__get__(t)
    if layout is not s.strided:
        return f"{path} has layout {layout}: forward must return dense strided tensors"
    if TB.is_nested.__get__(t):
        return f"{path} is a nested tensor: forward must return dense strided tensors"
    dev = TB.device.__get__(t)
    if dev.type == "meta":
        return f"{path} is on the meta device (no data)"
    if ref is NO_REFERENCE:
        return None
    rdev = TB.device.__get__(ref)
    if dev != rdev:
        return f"{path} is on {dev}, the reference's output on {rdev}"
    if TB.is_contiguous(ref) and not TB.is_contiguous(t):
        return (f"{path} is not contiguous (strides {list(TB.stride(t))}) while the reference's "
                "output is: return a contiguous tensor")
    if s.overlap is not None and int(s.overlap(ref)) == 0 and int(s.overlap(t)) != 0:
        return (f"{path} has overlapping elements (strides {list(TB.stride(t))}, e.g. an expanded "
                "tensor) while the reference's output has none")
    if TB.is_neg(t) and not TB.is_neg(ref):
        return f"{path} carries a lazy negation bit (its values are negated only when read)"
    if TB.is_conj(t) and not TB.is_conj(ref):
        return f"{path} carries a lazy conjugation bit (its values are conjugated only when read)"
    return None


class _NoReference:
    def __repr__(self) -> str:
        return "NO_REFERENCE"


#: :func:`output_type_problem` without the reference's output (right after forward).
NO_REFERENCE: Any = _NoReference()


def output_type_problem(got: Any, expected: Any = NO_REFERENCE, path: str = "out") -> str | None:
    """Why a candidate's forward output is not made of plain dense tensors, or None.

    Without ``expected`` (right after forward, before anything reads the output): every
    tensor is exactly a ``torch.Tensor`` (an ``nn.Parameter`` is decided with the
    reference), strided, not nested, not on the meta device; containers are read through
    ``tuple``/``list``/``dict``'s own methods, so no candidate code runs.  With the
    reference's output ``expected``: also the same device, contiguous where the reference's
    is, no internal overlap (an expanded tensor) where the reference has none, no lazy
    negation or conjugation bit the reference lacks, container types exactly
    tuple/list/dict or the reference's own, and scalars of exactly the reference's type
    (int/float/bool may mix).  A structure that differs otherwise is left to the
    comparison (``wrong``)."""
    has_ref = expected is not NO_REFERENCE
    if _is_tensor(got):
        if has_ref and not _is_tensor(expected):
            return None  # a tensor where the reference returns something else: the comparison says so
        return _tensor_problem(path, got, expected)
    items = _items(got)
    if items is not None:
        if has_ref:
            ref_items = _items(expected)
            if ref_items is None:
                return None
            if not _container_ok(got, expected):
                return (f"{path} is a {_type_name(got)}, the reference returns a "
                        f"{_type_name(expected)}: return plain tuples, lists and dicts")
            if [k for k, _ in items] != [k for k, _ in ref_items]:
                return None
            for (k, g), (_, e) in zip(items, ref_items):
                why = output_type_problem(g, e, path + k)
                if why:
                    return why
            return None
        if type(got) not in (tuple, list, dict) and not _type_name(got).startswith("torch."):
            return None  # a container class of the candidate's: decided against the reference's
        for k, g in items:
            why = output_type_problem(g, NO_REFERENCE, path + k)
            if why:
                return why
        return None
    if not has_ref or _is_tensor(expected):
        return None  # not a tensor where the reference has one: the comparison says so
    te = type(expected)
    if type(got) is te or (te in _SCALARS and type(got) in _SCALARS):
        return None
    return (f"{path} is a {_type_name(got)}, the reference returns a {_type_name(expected)}: "
            "return the same plain type")


# ---------------------------------------------------------------------------------------
# background_thread
# ---------------------------------------------------------------------------------------

_TASKS = "/proc/self/task"


def python_threads() -> dict[int, str]:
    """``{ident: name}`` of the Python threads alive now (``threading.enumerate()``)."""
    return {t.ident: t.name for t in threading.enumerate() if t.ident is not None}


def native_threads() -> dict[int, str] | None:
    """``{tid: name}`` of this process's OS threads (``/proc/self/task/<tid>/comm``), or
    None where ``/proc`` cannot be read."""
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return None
    out: dict[int, str] = {}
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/comm", encoding="utf-8", errors="replace") as f:
                out[int(tid)] = f.read().strip()
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
    return out


class _StartCounter:
    """Counts the threads started through ``_thread.start_new_thread`` (and ``threading``'s
    own reference to it, ``start_joinable_thread`` on Python 3.13+) whose function has not
    returned yet.  The count rises in the call that starts the thread, before the new
    thread runs: ``_thread._count()`` and ``sys._current_frames()`` see a thread only once
    it has started running, which on a loaded machine can be after forward returned."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0

    def _wrap(self, start: Callable[..., Any]) -> Callable[..., Any]:
        counter = self

        def counted_start(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            def run(*a: Any, **kw: Any) -> Any:
                try:
                    return function(*a, **kw)
                finally:
                    with counter._lock:
                        counter.running -= 1

            with counter._lock:
                counter.running += 1
            try:
                return start(run, *args, **kwargs)
            except BaseException:
                with counter._lock:
                    counter.running -= 1
                raise

        counted_start.__wrapped__ = start  # type: ignore[attr-defined]
        return counted_start

    def install(self) -> None:
        """Wrap the start functions of ``_thread`` and ``threading`` (once per process)."""
        for owner, attr in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                            (threading, "_start_new_thread"),
                            (threading, "_start_joinable_thread")):
            fn = getattr(owner, attr, None)
            if fn is not None and not hasattr(fn, "__wrapped__"):
                setattr(owner, attr, self._wrap(fn))


#: The process's counter of running threads (installed by the first :class:`ThreadWatch`).
THREAD_STARTS = _StartCounter()


class ThreadWatch:
    """Threads the candidate leaves running (guard ``background_thread``).

    Created before the candidate is imported: the Python threads alive then (the worker's
    own) are the baseline, and so is ``_thread._count()`` (threads started through
    ``_thread`` or ``threading``, also those ``threading.enumerate()`` does not list).

    * Python threads are exact: any thread alive at a check that was not alive at the
      baseline was started by the candidate (PyTorch's eager and CUDA paths start none),
      :meth:`python_leftovers`.
    * OS threads (``/proc/self/task``) include those the CUDA driver, CUPTI and PyTorch's
      CPU thread pool start lazily on first use, so only threads that appeared during a
      candidate call and are still alive when it returns count (:meth:`before_call`,
      :meth:`native_after_call`), and not on the candidate's first call (when library
      threads start).
    """

    def __init__(self) -> None:
        THREAD_STARTS.install()
        #: threads started (through the wrapped start functions) and not finished
        self.running0 = THREAD_STARTS.running
        self.baseline = python_threads()
        self.count0 = _thread._count()
        #: identities of every Python thread at the baseline (``_thread`` ones included)
        self.idents0 = set(sys._current_frames())
        self.calls = 0
        self._before: dict[int, str] | None = None
        self._count_before = 0
        self._running_before = 0
        #: identities of the Python threads (``_thread`` ones included) before a call: a
        #: count alone misses a new thread when another one ends during the call
        self._idents_before: set[int] = set()
        #: OS threads that appeared in the first call (library threads, not judged)
        self.first_call_new: list[str] = []
        #: a thread seen alive after a timed call (:meth:`wrap`), reported at the next check
        self.timed_leftover: str | None = None

    def python_leftovers(self) -> str | None:
        """Why a Python thread that was not alive at the baseline is alive now, or None."""
        now = python_threads()
        new = [f"'{name}'" for ident, name in now.items() if ident not in self.baseline]
        if new:
            return f"Python thread(s) {', '.join(sorted(new))} still running"
        # by identity, then by count: a count alone misses a new thread when a thread of
        # the baseline ended meanwhile; an identity alone misses one that reused an ended
        # thread's identity
        started = len(set(sys._current_frames()) - self.idents0)
        extra = max(started, _thread._count() - self.count0,
                    THREAD_STARTS.running - self.running0)
        if extra > 0:
            return f"{extra} thread(s) started through _thread still running"
        return None

    def before_call(self) -> None:
        """Record the OS threads and the Python thread count just before a candidate call."""
        self._before = native_threads()
        self._count_before = _thread._count()
        self._running_before = THREAD_STARTS.running
        self._idents_before = set(sys._current_frames())

    def after_call(self) -> str | None:
        """Just after a candidate call returned: why a thread it started is still alive
        (Python threads always; OS threads except on the first call), or None."""
        before, self._before = self._before, None
        first = self.calls == 0
        self.calls += 1
        py = self.python_leftovers()
        started = set(sys._current_frames()) - self._idents_before
        if (py or started or _thread._count() > self._count_before
                or THREAD_STARTS.running > self._running_before):
            return py or "a thread started through _thread still running"
        if before is None:
            return None
        now = native_threads()
        if now is None:
            return None
        new = sorted(f"'{name}' (tid {tid})" for tid, name in now.items() if tid not in before)
        if not new:
            return None
        if first:
            self.first_call_new.extend(new)
            return None
        return f"OS thread(s) {', '.join(new)} started during forward and still running"

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with a Python-thread count around each call (timed calls: a C function
        call, no ``/proc`` read); the first thread left running is kept in
        :attr:`timed_leftover` for the next check."""
        count = _thread._count

        def watched(*args: Any, **kwargs: Any) -> Any:
            n0, r0 = count(), THREAD_STARTS.running
            out = fn(*args, **kwargs)
            if (count() > n0 or THREAD_STARTS.running > r0) and self.timed_leftover is None:
                self.timed_leftover = self.python_leftovers() or "a thread started through _thread still running"
            return out

        return watched


# ---------------------------------------------------------------------------------------
# patching: what the guard records beyond its named targets
# ---------------------------------------------------------------------------------------


def static_lookup(owner: Any, attr: str) -> Any:
    """``owner.attr`` as stored (the class dicts along a class's MRO, a module's dict),
    without running descriptors: a classmethod stays the same object between lookups.
    A missing attribute is a unique sentinel."""
    if isinstance(owner, type):
        for klass in type.__getattribute__(owner, "__mro__"):
            d = type.__getattribute__(klass, "__dict__")
            if attr in d:
                return d[attr]
        return _MISSING
    d = getattr(owner, "__dict__", None)
    if isinstance(d, dict) or type(d).__name__ == "mappingproxy":
        return d[attr] if attr in d else _MISSING
    return getattr(owner, attr, _MISSING)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def tensor_class_targets(torch: Any) -> list[tuple[str, Any, str]]:
    """``(label, owner, attribute)`` for every attribute ``torch.Tensor`` resolves (its
    own dict and ``TensorBase``'s and ``object``'s: a name set in ``torch.Tensor`` shadows
    the C method), the builtins in :data:`CHECKED_BUILTINS` and the ``torch`` attributes in
    :data:`CHECKED_TORCH_ATTRS`."""
    T = torch.Tensor
    out = [(f"torch.Tensor.{name}", T, name) for name in sorted(dir(T))]
    out += [(f"builtins.{name}", builtins, name) for name in CHECKED_BUILTINS]
    out += [(f"torch.{name}", torch, name) for name in CHECKED_TORCH_ATTRS if hasattr(torch, name)]
    out.append(("torch.nn.Parameter", torch.nn, "Parameter"))
    return out


def global_state(torch: Any) -> dict[str, Any]:
    """Global state that reroutes tensor operations or runs code inside the judge's own:
    active torch function/dispatch modes, global ``nn.Module`` hooks (a forward hook on the
    reference could rewrite its output), a trace or profile function, ``gc.callbacks``.
    Compared with :func:`global_state_changes`."""
    state: dict[str, Any] = {}
    try:
        from torch.overrides import _get_current_function_mode_stack

        state["torch function modes"] = len(_get_current_function_mode_stack())
    except Exception:  # noqa: BLE001 - an older torch: the check is lost
        pass
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        state["torch dispatch modes"] = len(_get_current_dispatch_mode_stack())
    except Exception:  # noqa: BLE001
        pass
    try:
        from torch.nn.modules import module as nn_module

        for name, value in sorted(vars(nn_module).items()):
            if name.startswith("_global_") and name.endswith("hooks") and isinstance(value, dict):
                state[f"torch.nn.modules.module.{name}"] = tuple(id(v) for v in value.values())
    except Exception:  # noqa: BLE001
        pass
    state["sys.gettrace()"] = id(sys.gettrace()) if sys.gettrace() is not None else None
    state["sys.getprofile()"] = id(sys.getprofile()) if sys.getprofile() is not None else None
    state["threading trace/profile hooks"] = (id(getattr(threading, "_trace_hook", None)),
                                              id(getattr(threading, "_profile_hook", None)))
    state["gc.callbacks"] = tuple(id(c) for c in gc.callbacks)
    return state


def global_state_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Labels of :func:`global_state` entries that differ."""
    return [k for k in before if now.get(k) != before[k]]
