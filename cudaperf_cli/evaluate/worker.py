"""The C evaluation worker: ``python -m cudaperf_cli.evaluate.worker``.

It speaks the child protocol of :mod:`cudaperf_cli.evaluate.child` (``docs/evaluation.md``
§3): the :class:`~cudaperf_cli.evaluate.job.EvalJob` as one JSON line on stdin, the
:class:`~cudaperf_cli.evaluate.job.EvalResult` as one JSON line on the result channel (a
private duplicate of fd 1; fd 1 itself goes to stderr), the phase in
``$CUDAPERF_WORKER_STATE``.  ``--device-info [--device N]`` prints a device description
instead.

Order (``docs/evaluation.md`` §4): everything that is not device work happens before the
worker asks for the GPU (:func:`~cudaperf_cli.evaluate.child.wait_for_gpu`): the CUDA
context, the reference library, the array roles (at the smallest configuration), the host
data of every trial of every configuration, the reference's outputs (read from the run's
``reference_outputs`` folder, or computed here) and the CPU baseline.  After ``go``: the
candidate library is loaded (its static constructors are candidate code), every trial is
verified on the device, and the timed configurations are timed on their trial-0 data
(whose verification call is the first timed call).  With a slow limit, a verification call
that runs past the slow stop ends the worker with a ``timeout`` result (``docs/evaluation.md``
§6).

The worker is the judge (``docs/evaluation.md`` §3, "The judge and the candidate's
process"): it never loads the candidate.  The candidate's library, the CUDA context and
every device operation live in the candidate's process it starts
(:mod:`cudaperf_cli.evaluate.device_side`); inputs go there and outputs come back as raw
bytes, and the reference's outputs and the comparison stay here.

The worker catches its own errors and reports them as JSON; only a signal (segfault in
the reference), the parent's kill, or the candidate's process dying (the worker then ends
the same way) ends it without a result.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from cudaperf_cli.core import ArrayParam, ScalarKind, ScalarParam
from cudaperf_cli.evaluate.backend import (
    Allocation,
    CudaCallError,
    NoDevice,
    driver_error,
    make_backend,
    runtime_error,
)
from cudaperf_cli.evaluate.device_side import (
    PTR,
    CallRecord,
    DeviceGone,
    LoadFailure,
    LocalDevice,
    Op,
    RemoteDevice,
    ctype_for,
)
from cudaperf_cli.evaluate.child import (
    Channel,
    State,
    where,
    flush_c_stdio,
    line_buffer_c_stdout,
    read_job,
    result_channel,
    wait_for_gpu,
)
from cudaperf_cli.evaluate.job import (
    BACKEND_ENV,
    DEVICE_WRAPPER_ENV,
    CORRECT,
    CRASH,
    NO_DEVICE,
    READ_ONLY,
    READ_WRITE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
    RUNTIME_ERROR,
    SLOW,
    TIMEOUT,
    WRITE_ONLY,
    WRONG,
    ArrayCheck,
    ConfigResult,
    ConfigSpec,
    ConfigTiming,
    EvalJob,
    EvalResult,
    HOOKS_ENV,
    SLOW_STOP_TEXT,
    STATE_ENV,
    TimingStats,
    plan_c_memory,
    summarize_result,
)
from cudaperf_cli.evaluate.timing import (
    PERTURB_FRACTION,
    PERTURB_MIN,
    SUSPICIOUS_SPEEDUP,
    InputRotation,
    fit_reps,
    flush_size,
    judge_clock,
    perturb_positions,
    side_work,
    speedup,
    summarize,
    time_repetitions,
    untimed_work,
)
from cudaperf_cli.evaluate.runner import PHASE_WORDS
from cudaperf_cli.evaluate.tolerances import resolve_tolerances
from cudaperf_cli.evaluate.verify import (
    POISON_FLOAT_WORD,
    POISON_INT_BYTE,
    bitwise_equal,
    classify_roles,
    compare_arrays,
    is_floating,
    tolerances_used,
)


#: Byte written around every device array; a changed byte means an out-of-bounds write.
GUARD_BYTE = 0x5C
#: Timed repetitions enqueued between two synchronizations (kept for older imports; the
#: loop is evaluate/timing.py's ``time_repetitions``).
BATCH = 10

# Names kept for evaluate/torch_worker.py until it moves onto child.py.
_line_buffer_c_stdout = line_buffer_c_stdout
_flush_c_stdio = flush_c_stdio


#: The most of an empty request's round trip the judge's clock check subtracts, ms (the
#: H200 machine: 0.048 ms measured).
PING_CAP_MS = 0.5


def _emit(out_fd: int, obj: Any) -> None:
    """Write ``obj`` as one JSON line on ``out_fd`` (the result channel)."""
    Channel(out_fd)(obj)


def _ms_text(ms: float) -> str:
    """``"300 ms"``, ``"40.5 s"``: a duration in ms for a message."""
    return f"{ms / 1e3:.4g} s" if ms >= 1e3 else f"{ms:.4g} ms"


# ---------------------------------------------------------------------------------------
# Failures (each becomes a status)
# ---------------------------------------------------------------------------------------


class ReferenceFailure(Exception):
    """The reference or init library/symbol cannot be used."""


class CandidateFailure(Exception):
    """The candidate failed to run: error code, failed synchronize, failed load..."""

    def __init__(self, message: str, error: dict[str, Any]):
        super().__init__(message)
        self.error = error


class TimedCallWrong(Exception):
    """A verified timed repetition's output differs from the reference's on its input set;
    ``str(exc)`` says which call (``timed call 37 of 120 (input set 1): y: ...``)."""

    def __init__(self, message: str, check: ArrayCheck):
        super().__init__(message)
        self.check = check


# ---------------------------------------------------------------------------------------
# Host data
# ---------------------------------------------------------------------------------------


@dataclass
class HostData:
    """Input data of one trial: arrays (shaped) and scalar values by parameter name."""

    arrays: dict[str, np.ndarray]
    scalars: dict[str, Any]
    seed: list[int]

    def copy_arrays(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.arrays.items()}


@dataclass
class DeviceArray:
    """A device copy of one array: ``ptr`` is what the candidate gets; ``guard`` bytes of
    :data:`GUARD_BYTE` lie before and after it inside ``alloc``."""

    name: str
    nbytes: int
    alloc: Allocation
    ptr: int
    guard: int


@dataclass
class TrialPrep:
    """One trial, prepared before the device work.

    Attributes:
        host: its input data.
        ref: the reference's outputs computed here (arrays it writes, and any array it
            changed although classified read-only), or None when ``stored`` holds them.
        stored: the matching entry of the ``reference_outputs`` folder, or None.
        ref_ms: the host time of the reference run that produced the outputs, ms.
    """

    host: HostData
    ref: dict[str, np.ndarray] | None = None
    stored: dict[str, Any] | None = None
    ref_ms: float | None = None


@dataclass
class FirstCall:
    """The verification's candidate call at trial 0 of a timed configuration, measured on
    the data the timing then uses; every time in ms.

    Attributes:
        event_ms: device events around the call (as a timed repetition, without the L2
            flush before it).
        sync_ms: the call and a device synchronize, host clock (as a ``sync_call`` sample).
        e2e_ms: the copies of the read arrays in, the call and synchronize, the copies of
            the written arrays out, host clock (as an end-to-end sample).
    """

    event_ms: float
    sync_ms: float
    e2e_ms: float


@dataclass
class ConfigPrep:
    """A configuration, prepared: its trials and its CPU baseline (timed configs); after
    verification, ``first`` holds its trial-0 call's times (timed configs).

    ``alt``: a timed configuration's input set 1 (trial 0's data with a sparse random
    subset of elements changed, :meth:`Worker._input_set`) and its reference outputs, which
    the timing rotates with trial 0's; None with one input set, and then ``alt_note`` says
    why when the job asked for two."""

    trials: list[TrialPrep] = field(default_factory=list)
    cpu: TimingStats | None = None
    cpu_total_s: float | None = None
    ref_ms: float | None = None
    trials_run: int = 0
    seed: list[int] = field(default_factory=list)
    first: FirstCall | None = None
    alt: TrialPrep | None = None
    alt_note: str | None = None


# ---------------------------------------------------------------------------------------
# The run's reference outputs (a folder shared by the baseline job and the candidate jobs)
# ---------------------------------------------------------------------------------------

REF_INDEX = "index.json"
REF_FORMAT = 1


class ReferenceStore:
    """The ``reference_outputs`` folder of a run.

    Layout: one ``c<config index>-t<trial>-<array>.npy`` per stored array (the arrays the
    reference writes) and ``index.json``::

        {"format": 1, "identity": {"ref_lib": {"path", "size", "mtime_ns"}, "ref_symbol",
                                   "init_symbol", "init", "params"},
         "entries": [{"config", "config_index", "trial", "seed": [seed, config, trial],
                      "sizes", "scalars", "ref_ms",
                      "arrays": {name: {"file", "dtype", "shape"}},
                      "sets": {"1": {"spec", "ref_ms", "arrays"}}}]}    # timed configs

    ``sets`` holds the reference's outputs on a timed configuration's input set 1
    (``c<i>-t0-s1-<array>.npy``; ``spec`` is how the set was made from trial 0's data).
    The baseline job writes it (files first, each through a temporary name, then the index);
    a candidate job uses an entry only when the identity, seed, sizes, scalars, dtypes and
    shapes all match its own trial, and otherwise runs the reference itself.
    """

    def __init__(self, folder: str, job: EvalJob):
        self.folder = Path(folder)
        self.job = job
        self.entries: dict[tuple[int, int], dict[str, Any]] = {}
        self.problem: str | None = None  # why the index cannot be used (candidate side)

    def identity(self) -> dict[str, Any]:
        job = self.job
        lib = os.path.abspath(job.ref_lib)
        try:
            st = os.stat(lib)
            size, mtime = int(st.st_size), int(st.st_mtime_ns)
        except OSError:
            size, mtime = None, None
        return {"ref_lib": {"path": lib, "size": size, "mtime_ns": mtime},
                "ref_symbol": job.ref_symbol, "init_symbol": job.init_symbol,
                "init": job.init, "params": job.params}

    # -- writing (the baseline job) -----------------------------------------------------

    def _save(self, fname: str, arr: np.ndarray) -> dict[str, Any]:
        tmp = self.folder / (fname + f".tmp-{os.getpid()}")
        with open(tmp, "wb") as fh:
            np.save(fh, np.ascontiguousarray(arr), allow_pickle=False)
        os.replace(tmp, self.folder / fname)
        return {"file": fname, "dtype": arr.dtype.name, "shape": list(arr.shape)}

    def write(self, ci: int, cfg: ConfigSpec, trial: int, host: HostData,
              outputs: dict[str, np.ndarray], ref_ms: float, *, inputs: bool = False) -> None:
        """Store ``outputs`` (array name -> the reference's result) of one trial; with
        ``inputs`` also the trial's input arrays (``c<i>-t<t>-in-<array>.npy``): the data an
        init function made, which candidate jobs then load instead of running the init
        again (PolyBench's cholesky, lu and ludcmp build their matrices in O(n^3))."""
        self.folder.mkdir(parents=True, exist_ok=True)
        arrays = {name: self._save(f"c{ci}-t{trial}-{name}.npy", arr) for name, arr in outputs.items()}
        entry: dict[str, Any] = {
            "config": cfg.name, "config_index": ci, "trial": trial, "seed": list(host.seed),
            "sizes": dict(cfg.sizes), "scalars": _json_scalars(host.scalars),
            "ref_ms": ref_ms, "arrays": arrays,
        }
        if inputs:
            entry["inputs"] = {name: self._save(f"c{ci}-t{trial}-in-{name}.npy", arr)
                               for name, arr in host.arrays.items()}
        self.entries[(ci, trial)] = entry

    def write_set(self, ci: int, trial: int, index: int, spec: dict[str, Any],
                  outputs: dict[str, np.ndarray], ref_ms: float) -> None:
        """Store the reference's ``outputs`` on input set ``index`` of trial ``trial``
        (written before with :meth:`write`); ``spec`` describes how the set was made."""
        arrays = {name: self._save(f"c{ci}-t{trial}-s{index}-{name}.npy", arr)
                  for name, arr in outputs.items()}
        self.entries[(ci, trial)].setdefault("sets", {})[str(index)] = {
            "spec": spec, "ref_ms": ref_ms, "arrays": arrays}

    def finish(self) -> None:
        """Write the index (atomically) and remove array files it does not name."""
        self.folder.mkdir(parents=True, exist_ok=True)
        doc = {"format": REF_FORMAT, "identity": self.identity(),
               "entries": [self.entries[k] for k in sorted(self.entries)]}
        tmp = self.folder / (REF_INDEX + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.folder / REF_INDEX)
        keep = {a["file"] for e in self.entries.values()
                for a in [*e["arrays"].values(), *(e.get("inputs") or {}).values(),
                          *(a for st in (e.get("sets") or {}).values()
                            for a in (st.get("arrays") or {}).values())]}
        for p in self.folder.glob("c*-t*-*.npy"):
            if p.name not in keep:
                try:
                    p.unlink()
                except OSError:
                    pass

    # -- reading (candidate jobs) -------------------------------------------------------

    def open(self) -> bool:
        """Read the index; False (with ``problem`` set) when it is missing or foreign."""
        try:
            doc = json.loads((self.folder / REF_INDEX).read_text())
        except (OSError, ValueError) as exc:
            self.problem = f"no readable {REF_INDEX} ({type(exc).__name__})"
            return False
        if not isinstance(doc, dict) or doc.get("format") != REF_FORMAT:
            self.problem = f"{REF_INDEX} has an unknown format"
            return False
        ident = self.identity()
        theirs = doc.get("identity") or {}
        for key in ident:
            if json.dumps(theirs.get(key), sort_keys=True) != json.dumps(ident[key], sort_keys=True):
                self.problem = f"written for another {key.replace('_', ' ')}"
                return False
        for e in doc.get("entries") or []:
            try:
                self.entries[(int(e["config_index"]), int(e["trial"]))] = e
            except (KeyError, TypeError, ValueError):
                continue
        return True

    def match(self, ci: int, cfg: ConfigSpec, trial: int, host: HostData,
              needed: list[str]) -> tuple[dict[str, Any] | None, str | None]:
        """The entry for this trial, or (None, why not)."""
        e = self.entries.get((ci, trial))
        if e is None:
            return None, f"no entry for config '{cfg.name}' trial {trial}"
        if list(e.get("seed") or []) != list(host.seed) or e.get("sizes") != dict(cfg.sizes):
            return None, f"config '{cfg.name}' trial {trial} was stored for other sizes or seed"
        if e.get("scalars") != _json_scalars(host.scalars):
            return None, f"config '{cfg.name}' trial {trial} was stored with other scalar values"
        arrays = e.get("arrays") or {}
        for name in needed:
            a = arrays.get(name)
            ref = host.arrays[name]
            if a is None:
                return None, f"config '{cfg.name}' trial {trial} lacks array '{name}'"
            if a.get("dtype") != ref.dtype.name or list(a.get("shape") or []) != list(ref.shape):
                return None, f"array '{name}' of config '{cfg.name}' trial {trial} has another dtype or shape"
            if not (self.folder / str(a.get("file"))).is_file():
                return None, f"{a.get('file')} is missing"
        return e, None

    def match_set(self, entry: dict[str, Any], index: int, spec: dict[str, Any], host: HostData,
                  needed: list[str]) -> tuple[dict[str, Any] | None, str | None]:
        """The stored outputs of input set ``index`` in a matched trial entry (a dict with
        ``arrays``, for :meth:`load`), or (None, why not)."""
        st = (entry.get("sets") or {}).get(str(index))
        if not isinstance(st, dict):
            return None, f"no outputs stored for input set {index}"
        if json.dumps(st.get("spec"), sort_keys=True) != json.dumps(spec, sort_keys=True):
            return None, f"input set {index} was stored for another seed or rule"
        arrays = st.get("arrays") or {}
        for name in needed:
            a = arrays.get(name)
            ref = host.arrays[name]
            if a is None or a.get("dtype") != ref.dtype.name or list(a.get("shape") or []) != list(ref.shape):
                return None, f"input set {index} lacks array '{name}' or has another dtype or shape"
            if not (self.folder / str(a.get("file"))).is_file():
                return None, f"{a.get('file')} is missing"
        return st, None

    def load_inputs(self, ci: int, cfg: ConfigSpec, trial: int,
                    seed: list[int]) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
        """The stored input arrays and scalar values of a trial whose seed and sizes match,
        or None (no such entry, no inputs stored, or a file that cannot be read)."""
        e = self.entries.get((ci, trial))
        if not e or not e.get("inputs"):
            return None
        if list(e.get("seed") or []) != list(seed) or e.get("sizes") != dict(cfg.sizes):
            return None
        try:
            return self.load(e, "inputs"), dict(e.get("scalars") or {})
        except (OSError, ValueError):
            return None

    def load(self, entry: dict[str, Any], key: str = "arrays") -> dict[str, np.ndarray]:
        """The stored arrays of an entry (``key``: its outputs, or ``"inputs"``).

        Raises:
            OSError, ValueError: a file cannot be read or does not hold what the index says.
        """
        out: dict[str, np.ndarray] = {}
        for name, a in (entry.get(key) or {}).items():
            arr = np.load(self.folder / str(a["file"]), allow_pickle=False)
            if arr.dtype.name != a["dtype"] or list(arr.shape) != list(a["shape"]):
                raise ValueError(f"{a['file']} does not hold a {a['dtype']} {a['shape']} array")
            out[name] = arr
        return out


def _json_scalars(scalars: dict[str, Any]) -> dict[str, Any]:
    return {k: (int(v) if isinstance(v, (int, np.integer)) else float(v)) for k, v in scalars.items()}


# ---------------------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------------------


class Worker:
    """Runs one :class:`EvalJob`; :meth:`run` returns the :class:`EvalResult`.

    Args:
        job: the job.
        state: the phase file.
        backend_kind: ``"cuda"`` or ``"host"`` (test-only emulation).
        gate: called once everything but the device work is prepared (the protocol's
            :func:`~cudaperf_cli.evaluate.child.wait_for_gpu`); returns the seconds waited.
            Default: no gate.
        stop: hands over the ``timeout`` result of a verification call that ran past the
            slow stop (:meth:`_stop_ms`) and ends the process; it is called from a timer
            thread while the candidate's call still runs, and must not return.  None (an
            in-process worker): calls are never stopped.
        process: run the device work and the candidate in the candidate's process
            (:class:`~cudaperf_cli.evaluate.device_side.RemoteDevice`, which confines
            itself before it loads the candidate); the worker process always does.  False
            (tests of an in-process worker): here, unconfined
            (:class:`~cudaperf_cli.evaluate.device_side.LocalDevice`).
        device_wrapper: a command the candidate's process runs under (``$CUDAPERF_DEVICE_WRAPPER``:
            the compute-sanitizer stage's).
    """

    def __init__(self, job: EvalJob, state: State, backend_kind: str = "cuda",
                 gate: Callable[[], float] | None = None,
                 stop: Callable[[EvalResult], None] | None = None,
                 process: bool = False, device_wrapper: list[str] | None = None):
        self.job = job
        self.state = state
        self.backend_kind = backend_kind
        self.gate = gate or (lambda: 0.0)
        self.stop = stop
        self.process = process
        self.device_wrapper = list(device_wrapper or [])
        self.results: list[ConfigResult] = []  #: configurations verified so far
        self.cand_calls = 0  #: calls of the candidate so far
        self.params = job.parsed_params()
        self.arrays = [p for p in self.params if isinstance(p, ArrayParam)]
        self.init = job.init_spec()
        #: the device side: the candidate's process (or, in tests, this one)
        self.backend: RemoteDevice | LocalDevice | None = None
        self.cand_loaded = False
        self.roles: dict[str, str] = {}
        self.error: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self.device: dict[str, Any] | None = None
        self.t0 = time.monotonic()
        self.prepare_s: float | None = None
        self.tol_table = resolve_tolerances(overrides=job.tolerances)
        self.store: ReferenceStore | None = None
        self.store_usable = False
        self.inputs_from_store = 0  #: trials whose init-made data came from the store
        #: (config index, trial-0 host data, the reference's outputs on it, ms) of the
        #: classification run, reused as that trial's data and output.
        self.classified: tuple[int, HostData, dict[str, np.ndarray], float] | None = None
        self.preps: list[ConfigPrep] = []
        #: the candidate's process's confinement (``Confinement.to_json()``), once loaded
        self.confinement: dict[str, Any] | None = None
        #: judge-clock ms of an empty request to the candidate's process (the fastest of 5,
        #: at most PING_CAP_MS)
        self.ping_ms: float | None = None
        #: call + synchronize phases measured again after the judge's clock disagreed
        self.second_looks = 0

    # -- entry -------------------------------------------------------------------------

    def run(self) -> EvalResult:
        try:
            result = self._run()
        finally:
            if self.backend is not None:
                self.backend.close()
        procs = result.details.get("processes")
        if isinstance(self.backend, RemoteDevice) and procs:
            procs["candidate"]["exit_code"] = self.backend.proc.returncode
        return result

    def _run(self) -> EvalResult:
        job = self.job
        if job.cand_lib is not None:
            self.state.set("device")
            try:
                self.backend = (RemoteDevice(self.backend_kind, job.device,
                                             wrapper=self.device_wrapper) if self.process
                                else LocalDevice(make_backend(self.backend_kind, job.device)))
            except NoDevice as exc:
                return self._result(NO_DEVICE, f"no CUDA device: {exc}", [])
            self.device = self.backend.info()
        self.state.set("load_reference")
        try:
            self._load_reference()
        except ReferenceFailure as exc:
            return self._result(REFERENCE_ERROR, str(exc), [])

        self._prepare()
        if job.cand_lib is None:
            return self._reference_only_result()
        self.prepare_s = time.monotonic() - self.t0
        self.gate()
        # The candidate's library only now (its static constructors are candidate code), in
        # the candidate's process, which first confines itself: no file of the user's, no TCP.
        self.state.set("load_candidate")
        try:
            self._load_candidate()
        except CandidateFailure as exc:
            self.error = exc.error
            skipped = [ConfigResult(c.name, dict(c.sizes), "skipped",
                                    "not run: the candidate library did not load")
                       for c in self.job.configs]
            return self._result(RUNTIME_ERROR, str(exc), skipped)
        return self._device_work()

    def _device_work(self) -> EvalResult:
        job = self.job
        results = self.results
        status, message = CORRECT, ""
        for ci, cfg in enumerate(job.configs):
            cr = self._verify_config(ci, cfg, self.preps[ci])
            results.append(cr)
            self.state.add_config(cr)
            if cr.status == RUNTIME_ERROR:
                status, message = RUNTIME_ERROR, cr.message
                break
            if cr.status == WRONG and status == CORRECT:
                status, message = WRONG, cr.message
        for cfg in job.configs[len(results) :]:
            results.append(
                ConfigResult(cfg.name, dict(cfg.sizes), "skipped", "not run after a runtime error")
            )

        slow_note = ""
        if status == CORRECT:
            for ci, cfg in enumerate(job.configs):
                if not cfg.time:
                    continue
                cr = results[ci]
                self._time_config(ci, cfg, cr, self.preps[ci])
                if cr.status in (WRONG, RUNTIME_ERROR):
                    status, message = cr.status, cr.message
                    break
                if cr.timing is not None and cr.timing.slow:
                    status, slow_note = SLOW, cr.message

        if status in (CORRECT, SLOW):
            n = sum(c.trials_run for c in results)
            message = f"correct on {len(results)} configuration(s), {n} trial(s)"
            timed = [c for c in results if c.timing is not None and c.timing.gpu is not None]
            if status == SLOW:
                message += f"; {slow_note}"
            elif timed:
                t = timed[-1].timing
                assert t is not None and t.gpu is not None
                message += (
                    f"; '{timed[-1].name}': kernel {t.gpu.median_ms:.4g} ms"
                    + (f", {t.kernel_speedup:.3g}x vs {t.baseline}" if t.kernel_speedup else "")
                )
        return self._result(status, message, results)

    def _result(self, status: str, message: str, configs: list[ConfigResult]) -> EvalResult:
        self.state.set("done")
        for c in configs:
            if c.timing:
                self.warnings.extend(f"{c.name}: {w}" for w in c.timing.warnings)
        try:
            plan = plan_c_memory(self.job, l2_bytes=(self.device or {}).get("l2_bytes"))
            footprint: int | None = plan.footprint_bytes
        except ValueError:
            footprint = None
        return EvalResult(
            status=status,
            message=message,
            configs=configs,
            array_roles=dict(self.roles),
            device=self.device,
            error=self.error,
            phase="done",
            elapsed_s=time.monotonic() - self.t0,
            prepare_s=self.prepare_s,
            peak_gpu_bytes=self.backend.peak_bytes if self.backend is not None else None,
            footprint_bytes=footprint,
            tolerances=tolerances_used([p.dtype for p in self.arrays], self.job.tolerances),
            warnings=self.warnings,
            details={"phase_s": self.state.phase_seconds(),
                     **({"confinement": self.confinement} if self.confinement else {}),
                     **self._process_details(),
                     **({"inputs_from_store": self.inputs_from_store} if self.inputs_from_store else {})},
            summary=summarize_result(configs, self.job.baseline_label),
        )

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    # -- libraries ---------------------------------------------------------------------

    def _argtypes(self) -> list[Any]:
        """The reference's ctypes argument types: those the candidate's process gives the
        candidate (:meth:`_arg_kinds`)."""
        return [ctype_for(k) for k in self._arg_kinds()]

    def _load_reference(self) -> None:
        job = self.job
        try:
            lib = ctypes.CDLL(os.path.abspath(job.ref_lib))
        except OSError as exc:
            raise ReferenceFailure(f"cannot load the reference library {job.ref_lib}: {exc}")
        try:
            fn = getattr(lib, job.ref_symbol)
        except AttributeError:
            raise ReferenceFailure(
                f"the reference library {job.ref_lib} does not export {job.ref_symbol}"
            ) from None
        fn.restype = None
        fn.argtypes = self._argtypes()
        self.ref_fn = fn
        self.init_fn = None
        if self.init is not None:
            sym = job.init_symbol or f"cudaperf_init_{self.init.name}"
            try:
                ifn = getattr(lib, sym)
            except AttributeError:
                raise ReferenceFailure(
                    f"the reference library {job.ref_lib} does not export {sym}"
                ) from None
            ifn.restype = None
            ifn.argtypes = None  # built per call (scalar outputs go by pointer)
            self.init_fn = ifn

    def _arg_kinds(self) -> list[str]:
        """The candidate's argument kinds for the candidate's process: ``"ptr"`` or a
        dtype name."""
        return [PTR if isinstance(p, ArrayParam) else np.dtype(p.dtype).name for p in self.params]

    def _candidate_reads(self) -> list[str]:
        """What the candidate's process reads once candidate code runs: the candidate's
        folder (the judge keeps the stored reference outputs to itself)."""
        job = self.job
        assert job.cand_lib is not None
        return [str(Path(job.cand_lib).resolve().parent)]

    def _load_candidate(self) -> None:
        job = self.job
        self.state.mark_candidate()
        assert job.cand_lib is not None and self.backend is not None
        try:
            self.confinement = self.backend.load_candidate(
                job.cand_lib, job.cand_symbol, self._arg_kinds(), self._candidate_reads())
        except LoadFailure as exc:
            raise CandidateFailure(str(exc), exc.error) from None
        self.cand_loaded = True
        if isinstance(self.backend, RemoteDevice):
            self.ping_ms = self._ping_ms()

    def _ping_ms(self) -> float:
        """An empty request's round trip to the candidate's process, ms: the fastest of 5,
        and at most PING_CAP_MS (the other process answers the pings, and slow pings must
        not buy its calls room on the judge's clock)."""
        assert isinstance(self.backend, RemoteDevice)
        return min(min(self.backend.ping() for _ in range(5)), PING_CAP_MS)

    def _second_look(self, verdict: Callable[[], str | None],
                     again: Callable[[], None]) -> str | None:
        """The judge's clock's ``verdict()``, taken twice when it disagrees: a busy host can
        slow the judge's side alone (seen on a 2-core CI machine), so fresh pings (still
        capped) and ``again()`` (fresh requests, replacing the first look's figures) decide;
        figures that were forged stay far below the clock."""
        why = verdict()
        if why is None:
            return None
        self.second_looks += 1
        self.ping_ms = self._ping_ms()
        again()
        return verdict()

    def _process_details(self) -> dict[str, Any]:
        """``details.processes``: the judge's pid and the candidate's process's."""
        if not isinstance(self.backend, RemoteDevice):
            return {}
        return {"processes": {"judge": os.getpid(), "candidate": dict(self.backend.process),
                              "ping_ms": self.ping_ms, "second_looks": self.second_looks}}

    # -- data --------------------------------------------------------------------------

    def _host_data(self, ci: int, cfg: ConfigSpec, trial: int) -> HostData:
        seed = [int(self.job.seed), ci, trial]
        self.state.set("data", cfg.name, trial)
        stored = self._stored_inputs(ci, cfg, trial, seed)
        if stored is not None:
            return stored
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        arrays: dict[str, np.ndarray] = {}
        for p in self.arrays:
            shape = p.shape(cfg.sizes)
            dt = np.dtype(p.dtype)
            if self.init is not None:
                arrays[p.name] = np.zeros(shape, dtype=dt)
            elif is_floating(dt):
                if dt in (np.float32, np.float64):
                    arrays[p.name] = rng.random(shape, dtype=dt)
                else:
                    arrays[p.name] = rng.random(shape).astype(dt)
            else:
                arrays[p.name] = rng.integers(0, 100, size=shape, dtype=dt)
        scalars: dict[str, Any] = {}
        for p in self.params:
            if isinstance(p, ScalarParam):
                if p.kind is ScalarKind.SIZE:
                    scalars[p.name] = int(cfg.sizes[p.name])
                else:
                    v = float(rng.uniform(0.5, 1.5))
                    scalars[p.name] = float(np.dtype(p.dtype).type(v))
        data = HostData(arrays, scalars, seed)
        if self.init is not None:
            self._run_init(data, cfg)
        return data

    def _stored_inputs(self, ci: int, cfg: ConfigSpec, trial: int, seed: list[int]) -> HostData | None:
        """A candidate job's trial data made by the init function, read from the run's
        reference-outputs folder (the baseline job stored it) instead of running the init
        again; None when there is no usable copy (the init then runs)."""
        if (self.init is None or self.job.cand_lib is None or not self.store_usable
                or self.store is None):
            return None
        got = self.store.load_inputs(ci, cfg, trial, seed)
        if got is None:
            return None
        arrays, stored_scalars = got
        for p in self.arrays:
            a = arrays.get(p.name)
            if a is None or a.dtype != np.dtype(p.dtype) or tuple(a.shape) != tuple(p.shape(cfg.sizes)):
                return None
        scalars: dict[str, Any] = {}
        for p in self.params:
            if isinstance(p, ScalarParam):
                if p.kind is ScalarKind.SIZE:
                    scalars[p.name] = int(cfg.sizes[p.name])
                elif p.name in stored_scalars:
                    scalars[p.name] = float(np.dtype(p.dtype).type(stored_scalars[p.name]))
                else:
                    return None
        self.inputs_from_store += 1
        return HostData({p.name: arrays[p.name] for p in self.arrays}, scalars, seed)

    def _run_init(self, data: HostData, cfg: ConfigSpec) -> None:
        assert self.init is not None and self.init_fn is not None
        byname = {p.name: p for p in self.params}
        args: list[Any] = []
        holders: dict[str, Any] = {}
        for name in self.init.params:
            p = byname[name]
            if isinstance(p, ArrayParam):
                args.append(ctypes.c_void_p(data.arrays[name].ctypes.data))
            elif name in self.init.scalar_outputs:
                h = ctype_for(p.dtype)(data.scalars[name])
                holders[name] = h
                args.append(ctypes.byref(h))
            else:
                args.append(ctype_for(p.dtype)(data.scalars[name]))
        self.state.set("init", cfg.name)
        self.init_fn(*args)
        for name, h in holders.items():
            p = byname[name]
            assert isinstance(p, ScalarParam)
            if p.kind is ScalarKind.COEFFICIENT:
                data.scalars[name] = float(h.value)
            elif int(h.value) != data.scalars[name]:
                msg = (
                    f"init set size '{name}' to {int(h.value)}; config '{cfg.name}' keeps "
                    f"{data.scalars[name]}"
                )
                if msg not in self.warnings:
                    self.warnings.append(msg)

    def _call_reference(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> float:
        """Run the reference in place on ``arrays``; return its wall time in ms."""
        args = [
            arrays[p.name].ctypes.data if isinstance(p, ArrayParam) else scalars[p.name]
            for p in self.params
        ]
        t0 = time.perf_counter()
        self.ref_fn(*args)
        return (time.perf_counter() - t0) * 1e3

    # -- preparation (host only, before the GPU gate) ----------------------------------

    def _classification_config(self) -> int:
        """The configuration whose trial 0 classifies the arrays: the smallest (fewest
        bytes of arrays; the first of equals) of those that allow it
        (``ConfigSpec.classify``; all of them when none does)."""
        def nbytes(cfg: ConfigSpec) -> int:
            total = 0
            for p in self.arrays:
                n = 1
                for e in p.shape(cfg.sizes):
                    n *= int(e)
                total += n * np.dtype(p.dtype).itemsize
            return total

        allowed = [i for i, c in enumerate(self.job.configs) if c.classify] or \
            list(range(len(self.job.configs)))
        return min(allowed, key=lambda i: (nbytes(self.job.configs[i]), i))

    def _find_roles(self) -> None:
        """Array roles: the job's, ``const`` arrays read-only, the rest by output
        classification at trial 0 of the smallest configuration (the roles found there hold
        for the others: the arrays are the same parameters)."""
        known = {k: v for k, v in self.job.array_roles.items() if k in {p.name for p in self.arrays}}
        const = {p.name for p in self.arrays if p.const}
        if all(p.name in known or p.name in const for p in self.arrays):
            self.roles = {p.name: known.get(p.name, READ_ONLY) for p in self.arrays}
            return
        ci = self._classification_config()
        cfg = self.job.configs[ci]
        host = self._host_data(ci, cfg, 0)
        self.state.set("classify", cfg.name, 0)
        times: list[float] = []

        def run(arrs: dict[str, np.ndarray]) -> None:
            times.append(self._call_reference(arrs, host.scalars))

        base: dict[str, np.ndarray] = {}
        self.roles = classify_roles(run, host.arrays, const=const, known=known, base=base)
        self.classified = (ci, host, {n: base[n] for n in self._stored_names(base, host)}, times[0])

    def _stored_names(self, out: dict[str, np.ndarray], host: HostData) -> list[str]:
        """Arrays of a reference run to keep as its outputs: those not read-only, and a
        read-only one the reference changed all the same (then a warning)."""
        keep = []
        for p in self.arrays:
            n = p.name
            if self.roles.get(n) != READ_ONLY:
                keep.append(n)
            elif not bitwise_equal(out[n], host.arrays[n]):
                keep.append(n)
                self._warn(f"the reference changed '{n}', classified read-only, at sizes "
                           f"{host.scalars}: its output is compared as computed")
        return keep

    def _reference_here(self, ci: int, cfg: ConfigSpec, trial: int,
                        host: HostData) -> tuple[dict[str, np.ndarray], float]:
        """Run the reference on a copy of ``host``: (the outputs to keep, ms)."""
        if self.classified is not None and self.classified[0] == ci and trial == 0:
            _, _, out, ms = self.classified
            self.classified = None
            return out, ms
        return self._run_reference(cfg, trial, host)

    def _run_reference(self, cfg: ConfigSpec, trial: int,
                       host: HostData) -> tuple[dict[str, np.ndarray], float]:
        """One reference run on a copy of ``host`` (never the classification's outputs:
        a timing input set is not trial 0's data): (the outputs to keep, ms)."""
        self.state.set("reference", cfg.name, trial)
        out = host.copy_arrays()
        ms = self._call_reference(out, host.scalars)
        return {n: out[n] for n in self._stored_names(out, host)}, ms

    def _open_store(self) -> None:
        folder = self.job.reference_outputs
        if not folder:
            return
        self.store = ReferenceStore(folder, self.job)
        if self.job.cand_lib is None:
            self.store_usable = True  # the baseline writes it
            return
        self.state.set("reference_outputs")
        self.store_usable = self.store.open()
        if not self.store_usable:
            self._warn(f"reference outputs in {folder} not used ({self.store.problem}): the "
                       "reference ran in this evaluation")

    def _prepare(self) -> None:
        """Everything before the device work (see the module docstring)."""
        job = self.job
        self._open_store()
        self._find_roles()
        baseline = job.cand_lib is None
        for ci, cfg in enumerate(job.configs):
            cp = ConfigPrep()
            first_cpu: float | None = None
            for trial in range(cfg.trials):
                if self.classified is not None and self.classified[0] == ci and trial == 0:
                    host = self.classified[1]  # the classification's data: made once
                else:
                    host = self._host_data(ci, cfg, trial)
                cp.seed = host.seed
                tp = TrialPrep(host)
                needed = [p.name for p in self.arrays if self.roles[p.name] != READ_ONLY]
                if not baseline and self.store_usable and self.store is not None:
                    entry, why = self.store.match(ci, cfg, trial, host, needed)
                    if entry is not None:
                        tp.stored, tp.ref_ms = entry, entry.get("ref_ms")
                    else:
                        self._warn(f"reference outputs in {job.reference_outputs} not used for "
                                   f"config '{cfg.name}' trial {trial} ({why}): the reference "
                                   "ran in this evaluation")
                if tp.stored is None:
                    out, ms = self._reference_here(ci, cfg, trial, host)
                    tp.ref_ms = ms
                    if trial == 0:
                        first_cpu = ms
                    if baseline:
                        if self.store is not None:
                            self.state.set("reference_outputs", cfg.name, trial)
                            self.store.write(ci, cfg, trial, host, out, ms,
                                             inputs=self.init is not None)
                        del out
                    else:
                        tp.ref = out
                cp.ref_ms = tp.ref_ms
                cp.trials_run = trial + 1
                if baseline and not (cfg.time and trial == 0):
                    continue  # the baseline keeps only what its CPU timing needs
                cp.trials.append(tp)
            if self.classified is not None and self.classified[0] == ci:
                self.classified = None  # its output was not needed (stored outputs matched)
            set1_ms: float | None = None
            if cfg.time and cp.trials and int(job.timing.input_sets) >= 2 and (
                    not baseline or self.store is not None):
                set1_ms = self._prepare_input_set(ci, cfg, cp, baseline)
            if cfg.time and cfg.name not in job.cpu_baseline_ms and cp.trials:
                cp.cpu, cp.cpu_total_s = self._cpu_baseline(
                    cfg, cp.trials[0].host, first_cpu, more_ms=[] if set1_ms is None else [set1_ms])
            if baseline:
                cp.trials = []
                cp.alt = None
            self.preps.append(cp)
        if baseline and self.store is not None:
            self.state.set("reference_outputs")
            self.store.finish()

    def _cpu_baseline(self, cfg: ConfigSpec, host: HostData, first_ms: float | None,
                      more_ms: list[float] | None = None) -> tuple[TimingStats | None, float | None]:
        """Time the reference on copies of ``host`` (host clock around the call only).

        The first run is ``first_ms`` when the trial-0 reference output was just computed
        here on these data, else one run now; ``more_ms`` are reference runs made here on
        the same sizes already (the run on the timing's input set 1), counted as samples
        while fewer than ``cpu_reps``; then as many runs as fit ``cpu_budget_s`` in all (at
        least 1, at most ``cpu_reps``).  Returns (stats, total seconds), or (None, None)
        when ``cpu_reps`` is 0.
        """
        job = self.job
        reps = max(int(job.cpu_reps), 0)
        if reps == 0:
            return None, None
        self.state.set("timing.cpu", cfg.name, 0)
        samples: list[float] = [] if first_ms is None else [float(first_ms)]
        for ms in more_ms or []:
            if len(samples) < reps:
                samples.append(float(ms))
        work: dict[str, np.ndarray] | None = None

        def one() -> float:
            nonlocal work
            if work is None:
                work = host.copy_arrays()
            else:
                for k, v in host.arrays.items():
                    np.copyto(work[k], v)
            return self._call_reference(work, host.scalars)

        if not samples:
            samples.append(one())
        n = fit_reps(max(float(job.cpu_budget_s), 0.0) * 1e3, samples[0], reps)
        while len(samples) < n:
            samples.append(one())
        return summarize(samples), sum(samples) / 1e3

    def _input_set_spec(self, ci: int) -> dict[str, Any]:
        """How input set 1 of configuration ``ci`` is made (stored with its outputs)."""
        return {"version": 2, "seed": [int(self.job.seed), ci, 0, 1], "fraction": PERTURB_FRACTION,
                "min": PERTURB_MIN, "rule": "draw" if self.init is None else "scale"}

    def _input_set(self, ci: int, host: HostData) -> HostData | None:
        """Input set 1 of a timed configuration: ``host`` (its trial-0 data) with a sparse
        random subset of the elements of every array the candidate reads changed
        (:func:`~cudaperf_cli.evaluate.timing.perturb_positions`: 1 in 256, at least 4), so
        that a result cache keyed by addresses and a sample of values serves a stale
        output.  Random data (no init function) get values of a second draw of the same
        distribution there; data an init function made keep their structure as far as
        possible: non-zero floating elements are scaled by 1 + 2^-2, integers (sizes,
        indices) are left alone.  (1 + 2^-7 at 1 element in 256 moved a float32 sum of 8192
        terms by about 6e-5, inside float32's 1e-4 tolerance: a cache cheat passed, an
        attack pass.)  Write-only arrays are shared with ``host``.  None when no
        element changed (an init function's integer or zero data)."""
        spec = self._input_set_spec(ci)
        rng = np.random.default_rng(np.random.SeedSequence(spec["seed"]))
        arrays: dict[str, np.ndarray] = {}
        changed = False
        for p in self.arrays:
            a = host.arrays[p.name]
            if self.roles.get(p.name) == WRITE_ONLY:
                arrays[p.name] = a
                continue
            pos = perturb_positions(a.size, rng)
            b = np.array(a, copy=True, order="C")
            flat = b.reshape(-1)
            dt = a.dtype
            if self.init is None:
                if is_floating(dt):
                    flat[pos] = (rng.random(pos.size, dtype=dt) if dt in (np.float32, np.float64)
                                 else rng.random(pos.size).astype(dt))
                else:
                    flat[pos] = rng.integers(0, 100, size=pos.size, dtype=dt)
            elif is_floating(dt):
                flat[pos] = flat[pos] * dt.type(1.0 + 2.0 ** -2)
            changed = changed or not bitwise_equal(b, a)
            arrays[p.name] = b
        if not changed:
            return None
        return HostData(arrays, dict(host.scalars), list(host.seed) + [1])

    def _prepare_input_set(self, ci: int, cfg: ConfigSpec, cp: ConfigPrep, baseline: bool) -> float | None:
        """Make ``cp.alt``, input set 1 of a timed configuration, with its reference outputs:
        the stored ones when the run's folder has them, else one reference run here (the
        baseline job stores its outputs).  Returns that run's ms (a CPU-baseline sample), or
        None when the reference did not run."""
        tp0 = cp.trials[0]
        host1 = self._input_set(ci, tp0.host)
        if host1 is None:
            cp.alt_note = ("one input set in timing: the second set would equal the first (the "
                           "arrays the candidate reads hold only integers an init function made, "
                           "or zeros)")
            return None
        spec = self._input_set_spec(ci)
        alt = TrialPrep(host1)
        needed = [p.name for p in self.arrays if self.roles[p.name] != READ_ONLY]
        if not baseline and self.store_usable and self.store is not None and tp0.stored is not None:
            st, why = self.store.match_set(tp0.stored, 1, spec, host1, needed)
            if st is not None:
                alt.stored, alt.ref_ms = st, st.get("ref_ms")
                cp.alt = alt
                return None
            self._warn(f"reference outputs in {self.job.reference_outputs} not used for config "
                       f"'{cfg.name}' input set 1 ({why}): the reference ran on it in this evaluation")
        out, ms = self._run_reference(cfg, 0, host1)
        if baseline:
            if self.store is not None:
                self.state.set("reference_outputs", cfg.name, 0)
                self.store.write_set(ci, 0, 1, spec, out, ms)
        else:
            alt.ref, alt.ref_ms = out, ms
            cp.alt = alt
        return ms

    def _reference_only_result(self) -> EvalResult:
        job = self.job
        results: list[ConfigResult] = []
        for ci, cfg in enumerate(job.configs):
            cp = self.preps[ci]
            cr = ConfigResult(cfg.name, dict(cfg.sizes), REFERENCE_ONLY, trials_run=cp.trials_run,
                              seed=list(cp.seed), array_roles=dict(self.roles), ref_ms=cp.ref_ms)
            if cfg.time:
                given = job.cpu_baseline_ms.get(cfg.name)
                cpu_ms = cp.cpu.median_ms if cp.cpu is not None else (
                    float(given) if given is not None else None)
                cr.timing = ConfigTiming(gpu=None, cpu=cp.cpu, cpu_median_ms=cpu_ms,
                                         baseline=job.baseline_label, cpu_total_s=cp.cpu_total_s)
                if cp.cpu is not None:
                    cr.message = (f"config '{cfg.name}': reference median {cp.cpu.median_ms:.4g} ms "
                                  f"over {cp.cpu.n} run(s), {cp.cpu_total_s:.3g} s in all")
            results.append(cr)
            self.state.add_config(cr)
        message = f"reference ran on {len(results)} configuration(s) (no candidate)"
        if self.store is not None:
            message += f"; outputs stored in {job.reference_outputs}"
        return self._result(REFERENCE_ONLY, message, results)

    def _outputs_of(self, ci: int, cfg: ConfigSpec, trial: int, tp: TrialPrep,
                    input_set: int = 0) -> dict[str, np.ndarray]:
        """The reference's outputs of a trial, or of a timed configuration's input set
        ``input_set`` >= 1 (``tp`` = ``ConfigPrep.alt``), loaded from the folder only now,
        when comparing; a folder entry that cannot be read makes the reference run here."""
        if tp.ref is not None:
            return tp.ref
        assert tp.stored is not None and self.store is not None
        self.state.set("reference_outputs", cfg.name, trial)
        try:
            return self.store.load(tp.stored)
        except (OSError, ValueError) as exc:
            what = f"trial {trial}" if input_set == 0 else f"input set {input_set}"
            self._warn(f"reference outputs of config '{cfg.name}' {what} unreadable "
                       f"({exc}): the reference ran in this evaluation")
            out, ms = (self._reference_here(ci, cfg, trial, tp.host) if input_set == 0
                       else self._run_reference(cfg, trial, tp.host))
            tp.ref, tp.ref_ms, tp.stored = out, ms, None
            return out

    def _compare(self, host: HostData, cand: dict[str, np.ndarray],
                 ref: dict[str, np.ndarray], names: list[str] | None = None) -> list[ArrayCheck]:
        out = []
        for n in (names if names is not None else list(host.arrays)):
            expected = ref[n] if n in ref else host.arrays[n]
            out.append(compare_arrays(n, cand[n], expected, role=self.roles[n],
                                      tolerances=self.tol_table))
        return out

    # -- device arrays -----------------------------------------------------------------

    def _alloc(self, host: HostData) -> dict[str, DeviceArray]:
        b = self.backend
        assert b is not None
        guard = max(int(self.job.guard_bytes), 0)
        guard = (guard + 255) // 256 * 256
        out: dict[str, DeviceArray] = {}
        try:
            for p in self.arrays:
                nbytes = host.arrays[p.name].nbytes
                a = b.alloc(guard + nbytes + guard)
                out[p.name] = DeviceArray(p.name, nbytes, a, a.ptr + guard, guard)
        except BaseException:
            self._free(out)
            raise
        return out

    def _free(self, dev: dict[str, DeviceArray]) -> None:
        if self.backend is None:
            return
        for d in dev.values():
            self.backend.free(d.alloc)
        dev.clear()

    def _fill_guards(self, dev: dict[str, DeviceArray]) -> None:
        b = self.backend
        assert b is not None
        for d in dev.values():
            if d.guard:
                b.memset8(d.alloc.ptr, GUARD_BYTE, d.guard)
                b.memset8(d.ptr + d.nbytes, GUARD_BYTE, d.guard)

    def _check_guards(self, dev: dict[str, DeviceArray]) -> list[dict[str, Any]]:
        b = self.backend
        assert b is not None
        bad: list[dict[str, Any]] = []
        for d in dev.values():
            if not d.guard:
                continue
            before = np.empty(d.guard, dtype=np.uint8)
            after = np.empty(d.guard, dtype=np.uint8)
            b.d2h(before, d.alloc.ptr)
            b.d2h(after, d.ptr + d.nbytes)
            hit = np.flatnonzero(before != GUARD_BYTE)
            if hit.size:
                bad.append({"array": d.name, "side": "before", "offset": int(d.guard - hit[-1])})
            hit = np.flatnonzero(after != GUARD_BYTE)
            if hit.size:
                bad.append({"array": d.name, "side": "after", "offset": int(hit[0])})
        return bad

    @staticmethod
    def _poison_op(d: DeviceArray, dtype: np.dtype) -> Op:
        """The memset that poisons ``d`` (NaN words for floats, ``0xA5`` bytes else)."""
        if is_floating(dtype):
            if d.nbytes % 4 == 0:
                return ["memset32", d.ptr, POISON_FLOAT_WORD, d.nbytes // 4]
            return ["memset8", d.ptr, 0xFF, d.nbytes]
        return ["memset8", d.ptr, POISON_INT_BYTE, d.nbytes]

    def _poison_dev(self, d: DeviceArray, dtype: np.dtype) -> None:
        assert self.backend is not None
        self.backend.run_ops([self._poison_op(d, dtype)])

    def _upload(self, dev: dict[str, DeviceArray], host: HostData, roles: dict[str, str]) -> float:
        """Poison write-only arrays, copy the others in, (re)write the guards.  Returns the
        host time of the copies in, ms (an end-to-end run's first part)."""
        b = self.backend
        assert b is not None
        self._fill_guards(dev)
        copy_s = 0.0
        for name, d in dev.items():
            arr = host.arrays[name]
            if roles[name] == WRITE_ONLY:
                self._poison_dev(d, arr.dtype)
            else:
                src = np.ascontiguousarray(arr)
                t0 = time.perf_counter()
                b.h2d(d.ptr, src)
                copy_s += time.perf_counter() - t0
        return copy_s * 1e3

    def _cand_args(self, dev: dict[str, DeviceArray], scalars: dict[str, Any]) -> list[Any]:
        """The candidate's arguments as plain numbers (device addresses, scalars)."""
        return [
            dev[p.name].ptr if isinstance(p, ArrayParam)
            else (scalars[p.name].item() if hasattr(scalars[p.name], "item") else scalars[p.name])
            for p in self.params
        ]

    def _call_candidate(self, args: list[Any], where: dict[str, Any],
                        events: bool = False) -> CallRecord:
        """Call ``<fn>_cuda`` once (with ``events``: between two events, then synchronize;
        the event ms is ``ms[0]``); a non-zero return or a failed synchronize raises
        :class:`CandidateFailure`."""
        if not self.cand_loaded:
            self._load_candidate()
        assert self.backend is not None
        self.state.mark_candidate()
        self.cand_calls += 1
        rec = self.backend.call(args, events)
        self._check_record(rec, where)
        return rec

    def _check_record(self, rec: CallRecord, where: dict[str, Any]) -> None:
        """Raise :class:`CandidateFailure` for a call of ``rec`` that returned non-zero
        or whose synchronize failed."""
        rc = rec.rc
        if rc != 0:
            name, string = runtime_error(rc)
            err = {"source": "candidate_return", "code": rc, "name": name, "string": string}
            err.update(where)
            raise CandidateFailure(
                f"{self.job.cand_symbol} returned {rc} ({name}: {string})", err
            )
        if rec.sync != 0:
            self._sync_failed(rec.sync, where)

    def _sync(self, where: dict[str, Any]) -> None:
        b = self.backend
        assert b is not None
        code = b.synchronize()
        if code != 0:
            self._sync_failed(code, where)

    def _sync_failed(self, code: int, where: dict[str, Any]) -> None:
        name, string = driver_error(code)
        err = {"source": "synchronize", "code": code, "name": name, "string": string}
        err.update(where)
        phase = where.get("phase")
        what = "after the candidate call" if phase in ("candidate", "timing") else f"({phase})"
        raise CandidateFailure(f"device synchronize {what} failed: {name}: {string}", err)

    # -- verification (device, after the gate) -----------------------------------------

    def _where(self, cfg: ConfigSpec, trial: int | None, phase: str) -> dict[str, Any]:
        return {"config": cfg.name, "trial": trial, "phase": phase}

    def _stop_ms(self) -> float | None:
        """When a verification call is stopped, ms: max(``slow_ms``,
        ``timing.slow_stop_floor_ms``); None without a slow limit or a ``stop`` hook."""
        slow = self.job.slow_ms
        if slow is None or self.stop is None:
            return None
        return max(float(slow), float(self.job.timing.slow_stop_floor_ms))

    @contextmanager
    def _stop_if_slow(self, cfg: ConfigSpec, trial: int) -> Iterator[None]:
        """Run the body (a candidate call and its synchronize) under a timer: past
        :meth:`_stop_ms` the ``stop`` hook gets the ``timeout`` result and ends the process
        (the call cannot be interrupted from Python; the process's exit ends it)."""
        limit = self._stop_ms()
        if limit is None:
            yield
            return
        lock = threading.Lock()
        finished = False

        def fire() -> None:
            nonlocal finished
            with lock:  # held until the process ends: the body cannot report as well
                if finished:
                    return
                finished = True
                try:
                    result = self._stopped_result(cfg, trial, limit)
                except Exception as exc:  # noqa: BLE001 - the stop must still report
                    result = EvalResult(status=TIMEOUT, message=(
                        f"config '{cfg.name}' trial {trial}: the candidate call ran past "
                        f"{_ms_text(limit)} and {SLOW_STOP_TEXT} ({type(exc).__name__}: {exc})"))
                assert self.stop is not None
                self.stop(result)

        timer = threading.Timer(limit / 1e3, fire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            with lock:
                finished = True
            timer.cancel()

    def _stopped_result(self, cfg: ConfigSpec, trial: int, limit_ms: float) -> EvalResult:
        """The ``timeout`` result of a call stopped at ``limit_ms`` (config ``cfg``, trial
        ``trial``): the configurations verified before it, this one, the rest skipped."""
        job = self.job
        message = (f"config '{cfg.name}' trial {trial}: the candidate call ran past {_ms_text(limit_ms)} "
                   f"(the slow limit {_ms_text(job.slow_ms or 0.0)}, at least "
                   f"{_ms_text(job.timing.slow_stop_floor_ms)}; far too slow, or hung) and {SLOW_STOP_TEXT}")
        done = list(self.results)
        configs = done + [ConfigResult(cfg.name, dict(cfg.sizes), TIMEOUT, message, trials_run=trial + 1,
                                       array_roles=dict(self.roles))]
        configs += [ConfigResult(c.name, dict(c.sizes), "skipped", "not run: a call was stopped")
                    for c in job.configs[len(configs):]]
        return self._result(TIMEOUT, message, configs)

    def _verify_config(self, ci: int, cfg: ConfigSpec, cp: ConfigPrep) -> ConfigResult:
        roles = self.roles
        cr = ConfigResult(cfg.name, dict(cfg.sizes), CORRECT, array_roles=dict(roles))
        dev: dict[str, DeviceArray] = {}
        cand: dict[str, np.ndarray] = {}
        try:
            for trial, tp in enumerate(cp.trials):
                host = tp.host
                cr.seed = host.seed
                if not dev:
                    self.state.set("alloc", cfg.name, trial)
                    dev = self._alloc(host)
                    cand = {n: np.empty_like(a) for n, a in host.arrays.items()}
                where = self._where(cfg, trial, "candidate")
                self.state.set("upload", cfg.name, trial)
                up_ms = self._upload(dev, host, roles)
                self._sync(self._where(cfg, trial, "upload"))
                self.state.set("candidate", cfg.name, trial)
                # measured for the timing's reuse unless it is the process's first candidate
                # call (cudart start-up and lazy module loading would fall inside its events)
                events = bool(cfg.time and trial == 0 and self.cand_calls)
                with self._stop_if_slow(cfg, trial):
                    t0 = time.perf_counter()
                    rec = self._call_candidate(self._cand_args(dev, host.scalars), where, events)
                    self._sync(where)
                    call_ms = (time.perf_counter() - t0) * 1e3
                self.state.set("download", cfg.name, trial)
                # the written arrays first, on the host clock: with the copies in and the
                # call, an end-to-end run (the timing reuses it when it was long)
                written = [n for n in dev if roles[n] != READ_ONLY]
                t0 = time.perf_counter()
                for n in written:
                    self.backend.d2h(cand[n], dev[n].ptr)  # type: ignore[union-attr]
                down_ms = (time.perf_counter() - t0) * 1e3
                for n in dev:
                    if roles[n] == READ_ONLY:
                        self.backend.d2h(cand[n], dev[n].ptr)  # type: ignore[union-attr]
                if events and rec.ms:
                    cp.first = FirstCall(rec.ms[0], call_ms, up_ms + call_ms + down_ms)
                guards = self._check_guards(dev)
                ref = self._outputs_of(ci, cfg, trial, tp)
                if cfg.time and trial == 0:
                    tp.ref = ref  # read once: the timing's checks compare with it too
                cr.ref_ms = tp.ref_ms
                self.state.set("compare", cfg.name, trial)
                checks = self._compare(host, cand, ref)
                del ref
                cr.arrays = checks
                cr.guard_violations = guards
                cr.trials_run = trial + 1
                bad = [c for c in checks if not c.ok]
                if bad or guards:
                    cr.status = WRONG
                    cr.failed_trial = trial
                    cr.message = self._wrong_message(cfg, trial, bad, guards)
                    break
        except CandidateFailure as exc:
            self.error = exc.error
            cr.status = RUNTIME_ERROR
            cr.message = f"config '{cfg.name}': {exc}"
            cr.trials_run = (exc.error.get("trial") or 0) + 1
        except CudaCallError as exc:
            self._cuda_call_failed(cr, cfg, exc)
        finally:
            if cr.status != RUNTIME_ERROR:
                self._free(dev)
        if cr.status == CORRECT:
            cr.message = f"config '{cfg.name}': {cr.trials_run} trial(s) correct"
        return cr

    def _cuda_call_failed(self, cr: ConfigResult, cfg: ConfigSpec, exc: CudaCallError) -> None:
        phase = self.state.data.get("phase")
        trial = self.state.data.get("trial")
        self.error = {
            "source": "driver_call",
            "call": exc.call,
            "code": exc.code,
            "name": exc.name,
            "string": exc.string,
            "config": cfg.name,
            "trial": trial,
            "phase": phase,
        }
        cr.status = RUNTIME_ERROR
        after = " (after the candidate ran)" if self.state.data["candidate_started"] else ""
        cr.message = f"config '{cfg.name}': {exc.call} failed{after}: {exc.name}: {exc.string}"

    def _wrong_message(
        self, cfg: ConfigSpec, trial: int, bad: list[ArrayCheck], guards: list[dict[str, Any]]
    ) -> str:
        parts = [b.describe() for b in bad[:1]]
        if len(bad) > 1:
            parts.append("also wrong: " + ", ".join(b.name for b in bad[1:]))
        for g in guards[:2]:
            if g["side"] == "after":
                parts.append(
                    f"wrote outside '{g['array']}': {g['offset']} bytes past its end"
                )
            else:
                parts.append(
                    f"wrote outside '{g['array']}': {g['offset']} bytes before its start"
                )
        role_note = ""
        if bad and bad[0].role == READ_ONLY:
            role_note = " (an input the reference never changes was modified)"
        return f"config '{cfg.name}' trial {trial}: " + "; ".join(parts) + role_note

    # -- timing ------------------------------------------------------------------------

    def _add_input_set(self, ci: int, cfg: ConfigSpec, cp: ConfigPrep, dev: dict[str, DeviceArray],
                       copies: list[dict[str, Allocation]], refs: list[dict[str, np.ndarray]],
                       sets: list[HostData]) -> str | None:
        """Put input set 1 on the device for the timing: device copies of every array the
        candidate reads, for set 0 (the read-only ones join the read-write ones' pristine
        copies) and for set 1; appends to ``copies``, ``refs`` and ``sets``.  Returns why
        the timing keeps one set instead (it does not fit the device's free memory with as
        much again as the configuration's arrays left for the candidate's own allocations,
        an allocation failed, or the reference's outputs on set 1 hold NaN or inf where
        set 0's do not), or None."""
        b = self.backend
        assert b is not None and cp.alt is not None
        roles = self.roles
        reads = [n for n in dev if roles[n] != WRITE_ONLY]
        extra = sum(dev[n].nbytes for n in reads) + sum(dev[n].nbytes for n in reads
                                                         if roles[n] == READ_ONLY)
        free = b.mem_free()
        held = sum(d.nbytes for d in dev.values())
        if free is not None and free < extra + held:
            return (f"one input set in timing: the second needs {extra / 1e9:.3g} GB of device "
                    f"memory and {free / 1e9:.3g} GB are free (keeping {held / 1e9:.3g} GB for the "
                    "candidate's own allocations)")
        ref1 = self._outputs_of(ci, cfg, 0, cp.alt, input_set=1)
        for n, r1 in ref1.items():
            r0 = refs[0].get(n)
            if r0 is None or not is_floating(r1.dtype):
                continue
            if int(np.count_nonzero(~np.isfinite(r1))) > int(np.count_nonzero(~np.isfinite(r0))):
                return (f"one input set in timing: on the second set the reference's '{n}' has "
                        "NaN or inf values the first set's has not (the changed elements left "
                        "the reference's domain)")
        made: list[Allocation] = []
        ro0: dict[str, Allocation] = {}
        set1: dict[str, Allocation] = {}
        try:
            for n in reads:
                if roles[n] == READ_ONLY:
                    a = b.alloc(dev[n].nbytes)
                    made.append(a)
                    b.h2d(a.ptr, np.ascontiguousarray(sets[0].arrays[n]))
                    ro0[n] = a
            for n in reads:
                a = b.alloc(dev[n].nbytes)
                made.append(a)
                b.h2d(a.ptr, np.ascontiguousarray(cp.alt.host.arrays[n]))
                set1[n] = a
        except CudaCallError as exc:
            if exc.name != "CUDA_ERROR_OUT_OF_MEMORY" and exc.call != "Device.allocate":
                raise
            for a in made:
                b.free(a)
            return f"one input set in timing: allocating the second failed ({exc.name})"
        copies[0].update(ro0)
        copies.append(set1)
        refs.append(ref1)
        sets.append(cp.alt.host)
        return None

    def _time_config(self, ci: int, cfg: ConfigSpec, cr: ConfigResult, cp: ConfigPrep) -> None:
        """Time ``cfg`` on its trial-0 data (the verification's) and its input set 1, then
        check the results of the timed and the end-to-end runs against the reference's
        outputs on the set each used.

        Before every call (untimed) one input set, picked by a seeded
        :class:`~cudaperf_cli.evaluate.timing.InputRotation`, is copied into the
        candidate's arrays (the same addresses every time), write-only arrays are
        re-poisoned and the L2 flushed; ``timing.checked_reps`` timed repetitions, picked at
        random, are verified right after their call (a mismatch ends the timing: ``wrong``,
        "timed call 37 of 120 (input set 1): ...").

        A verification call (``cp.first``) that alone filled ``max_total_ms`` is the first
        timed call, the first call + synchronize and the first end-to-end sample (each
        measured on that call, when it filled the budget): a 34 s PolyBench ludcmp
        candidate is called once, not four times."""
        job = self.job
        tp = cp.trials[0]
        host = tp.host
        roles = self.roles
        b = self.backend
        assert b is not None
        dev: dict[str, DeviceArray] = {}
        #: per input set: array -> its device copy, copied into the candidate's before a call
        copies: list[dict[str, Allocation]] = [{}]
        sets: list[HostData] = [host]
        refs: list[dict[str, np.ndarray]] = []
        notes: list[str] = [cp.alt_note] if cp.alt_note else []
        flush: Allocation | None = None
        ts = job.timing
        where = self._where(cfg, 0, "timing")
        cand = {n: np.empty_like(a) for n, a in host.arrays.items()}
        writes = [n for n in host.arrays if roles[n] in (READ_WRITE, WRITE_ONLY)]
        reads = [n for n in host.arrays if roles[n] in (READ_ONLY, READ_WRITE)]
        sync_stats: TimingStats | None = None
        e2e_stats: TimingStats | None = None
        gpu_stats: TimingStats | None = None
        tails: list[float] = []  # ms the device stayed busy after each timed call's end event
        floors: list[float] = []  # the same measurement, repeated on the idle device
        judge_samples: list[float] = []  # judge-clock ms of each call + synchronize request
        judge_e2e: list[float] = []  # and of each end-to-end request but the warm-up
        sync_lie: str | None = None  # the judge's clock against call + synchronize
        e2e_lie: str | None = None  # ... and against the end-to-end runs
        rt = None
        post_bad: list[str] = []
        guards: list[dict[str, Any]] = []
        bytes_in = bytes_out = 0
        fbytes = 0
        rot = InputRotation(1, [int(job.seed), ci, 2], ts.checked_reps)
        try:
            self.state.set("timing.alloc", cfg.name, 0)
            dev = self._alloc(host)
            for name, d in dev.items():
                if roles[name] == READ_WRITE:
                    copies[0][name] = b.alloc(d.nbytes)
                    b.h2d(copies[0][name].ptr, np.ascontiguousarray(host.arrays[name]))
            fbytes = flush_size(b.l2_bytes, ts)
            if fbytes:
                flush = b.alloc(fbytes)
            refs.append(self._outputs_of(ci, cfg, 0, tp))
            if cp.alt is not None:
                why = self._add_input_set(ci, cfg, cp, dev, copies, refs, sets)
                if why:
                    notes.append(why)
            self._upload(dev, host, roles)
            self._sync(self._where(cfg, 0, "timing.upload"))
            args = self._cand_args(dev, host.scalars)
            dtypes = {n: a.dtype for n, a in host.arrays.items()}
            rot = InputRotation(len(sets), [int(job.seed), ci, 2], ts.checked_reps)

            def prepare(k: int) -> list[Op]:
                # untimed, before a call: input set k into the candidate's arrays, the
                # write-only ones re-poisoned, the L2 flushed
                ops: list[Op] = []
                src = copies[k]
                for name, d in dev.items():
                    a = src.get(name)
                    if a is not None:
                        ops.append(["d2d", d.ptr, a.ptr, d.nbytes])
                    elif roles[name] == WRITE_ONLY:
                        ops.append(self._poison_op(d, dtypes[name]))
                if flush is not None:
                    ops.append(["memset32", flush.ptr, 0, fbytes // 4])
                return ops

            def verify_call(i: int, k: int) -> None:
                # untimed: after the call and the device synchronize that follows it
                self.state.set("timing.check", cfg.name, 0)
                for n in writes:
                    b.d2h(cand[n], dev[n].ptr)
                bad = [c for c in self._compare(sets[k], cand, refs[k], writes) if not c.ok]
                if bad:
                    what = f"timed call {i + 1} of {rot.planned} (input set {k}): {bad[0].describe()}"
                    # A stale or cached output is at least as close to another set's
                    # reference as to its own; an honest output that set k's data put just
                    # past the tolerance is far closer to its own (PolyBench durbin at n =
                    # 2000 on one seed: 6 of 2000 elements at 3.6e-6, an attack pass).
                    own = sum(c.n_mismatch for c in bad)
                    others = [sum(c.n_mismatch for c in self._compare(sets[o], cand, refs[o], writes)
                                  if not c.ok) for o in range(len(sets)) if o != k]
                    if not others or min(others) <= own:
                        raise TimedCallWrong(what, bad[0])
                    notes.append(what + f"; {own} element(s) off against {min(others)} against "
                                 "the other input set's reference: taken as that set's data "
                                 "being harder, not a stale result (not rejected)")
                self.state.set("timing.gpu", cfg.name, 0)

            calls = 0
            budget = ts.max_total_ms
            # the verification's call, when it alone filled the budget: the first samples
            reuse = cp.first if cp.first is not None and budget > 0 and cp.first.event_ms >= budget else None

            def run(k: int) -> list[float]:
                # k timed calls, in the candidate's process as batches that end at each
                # verified call (one request each: the pipe's latency stays out of the
                # events); each call's tail is the device's busy time after its end event,
                # on a stream the launcher never joined (timing.side_work)
                nonlocal calls
                calls += k
                self.cand_calls += k
                ms: list[float] = []
                batch: list[int] = []
                for i in range(k):
                    s, check = rot.next()
                    batch.append(s)
                    if check is None and i < k - 1:
                        continue
                    rec = b.timed_calls([prepare(x) for x in batch], args)
                    self._check_record(rec, where)
                    ms.extend(rec.ms or [])
                    tails.extend(rec.tails or [])
                    floors.extend(rec.floors or [])
                    batch = []
                    if check is not None:
                        verify_call(check, s)
                return ms

            # kernel time (events), repetitions planned from an estimate
            self.state.set("timing.gpu", cfg.name, 0)
            rt = time_repetitions(run, ts, slow_ms=job.slow_ms, warm=True,  # verified: called before
                                  first_ms=reuse.event_ms if reuse is not None else None,
                                  on_plan=rot.plan)
            if rt.slow:
                used = rt.warmup[1:] if len(rt.warmup) > 1 else rt.warmup
                gpu_stats = summarize(used)
            else:
                gpu_stats = summarize(rt.samples)
            guards = self._check_guards(dev)
            if calls:  # (none: the verification's call was the sample, and was checked)
                for n, d in dev.items():
                    b.d2h(cand[n], d.ptr)
                self.state.set("timing.check", cfg.name, 0)
                k = rot.last
                for c in self._compare(sets[k], cand, refs[k]):
                    if not c.ok:
                        post_bad.append(f"after the timed repetitions (input set {k}), " + c.describe())
                        cr.arrays = [c]
                        break

            if not rt.slow and not post_bad:
                # call + synchronize (host clock); as many as fit max_total_ms (>= 1)
                self.state.set("timing.sync", cfg.name, 0)
                sync_samples: list[float] = []
                want = max(int(ts.sync_reps), 1)
                judge_samples.clear()
                if reuse is not None and reuse.sync_ms >= budget:
                    sync_samples.append(reuse.sync_ms)
                    want = 1
                sync_set: int | None = None

                def sync_calls(count: int) -> int:
                    """``count`` call + synchronize requests (fewer when they fill
                    max_total_ms), their figures appended; the last input set used."""
                    k = 0
                    while len(sync_samples) < count:
                        k = rot.next()[0]
                        b.run_ops(prepare(k))
                        self._sync(where)
                        rec = b.sync_call([], args)
                        if rec.judge_ms is not None:
                            judge_samples.append(rec.judge_ms)
                        self.cand_calls += 1
                        self._check_record(rec, where)
                        sync_samples.append((rec.ms or [0.0])[0])
                        count = min(count, fit_reps(ts.max_total_ms, sync_samples[0], ts.sync_reps))
                    return k

                if len(sync_samples) < want:
                    sync_set = sync_calls(want)

                def sync_verdict() -> str | None:
                    if not judge_samples or gpu_stats is None or self.ping_ms is None:
                        return None
                    return judge_clock(gpu_stats.median_ms, float(np.median(sync_samples)),
                                       float(np.median(judge_samples)), self.ping_ms)

                def sync_again() -> None:
                    nonlocal sync_set
                    sync_samples.clear()
                    judge_samples.clear()
                    sync_set = sync_calls(max(want, 3))

                sync_lie = self._second_look(sync_verdict, sync_again)
                sync_stats = summarize(sync_samples)
                if sync_set is not None:
                    # the judge times these calls on its own clock: their work is checked too
                    # (the last one's outputs), or a candidate could skip it there alone
                    self.state.set("timing.check", cfg.name, 0)
                    for n in writes:
                        b.d2h(cand[n], dev[n].ptr)
                    for c in self._compare(sets[sync_set], cand, refs[sync_set], writes):
                        if not c.ok:
                            post_bad.append(f"after the call + synchronize runs (input set {sync_set}), "
                                            + c.describe())
                            cr.arrays = [c]
                            break

                # end to end: copies in + call + sync + copies out (pageable host memory),
                # each run on one of the input sets
                self.state.set("timing.e2e", cfg.name, 0)
                inputs = [{n: np.ascontiguousarray(h.arrays[n]) for n in reads} for h in sets]
                e2e_samples: list[float] = []
                warm: float | None = None
                want = max(int(ts.e2e_reps), 1)
                if reuse is not None and reuse.e2e_ms >= budget:
                    e2e_samples.append(reuse.e2e_ms)
                    want = 1
                e2e_ran = False
                last = 0

                def e2e_runs(count: int) -> None:
                    nonlocal e2e_ran, last, warm
                    while len(e2e_samples) < count:
                        e2e_ran = True
                        last = rot.next()[0]
                        rec = b.e2e_call([self._poison_op(dev[n], dtypes[n]) for n in writes
                                          if roles[n] == WRITE_ONLY],
                                         [(dev[n].ptr, inputs[last][n]) for n in reads],
                                         [(dev[n].ptr, cand[n]) for n in writes], args)
                        if rec.judge_ms is not None and warm is not None:  # not the warm-up
                            judge_e2e.append(rec.judge_ms)
                        self.cand_calls += 1
                        self._check_record(rec, where)
                        dt = (rec.ms or [0.0])[0]
                        if warm is None:  # the first one is a warm-up, unless it fills the budget
                            warm = dt
                            count = fit_reps(ts.max_total_ms, dt, ts.e2e_reps)
                            if dt < ts.max_total_ms:
                                continue
                        e2e_samples.append(dt)

                e2e_runs(want)

                def e2e_verdict() -> str | None:
                    # the end-to-end figure against the judge's clock around its requests
                    # (the judge's staging copies are outside it)
                    if not judge_e2e or not e2e_samples or self.ping_ms is None:
                        return None
                    e2e_ms = float(np.median(e2e_samples))
                    return judge_clock(e2e_ms, e2e_ms, float(np.median(judge_e2e)),
                                       self.ping_ms, what="end-to-end run")

                def e2e_again() -> None:
                    e2e_samples.clear()
                    judge_e2e.clear()
                    e2e_runs(max(want, 3))

                e2e_lie = self._second_look(e2e_verdict, e2e_again)
                e2e_stats = summarize(e2e_samples)
                bytes_in = sum(inputs[0][n].nbytes for n in reads)
                bytes_out = sum(cand[n].nbytes for n in writes)
                if e2e_ran:
                    self.state.set("timing.check", cfg.name, 0)
                    for c in self._compare(sets[last], cand, refs[last], writes):
                        if not c.ok:
                            post_bad.append(f"after the end-to-end runs (input set {last}), " + c.describe())
                            cr.arrays = [c]
                            break
        except TimedCallWrong as exc:
            post_bad.append(str(exc))
            cr.arrays = [exc.check]
        except CandidateFailure as exc:
            self.error = exc.error
            cr.status = RUNTIME_ERROR
            cr.message = f"config '{cfg.name}' (timing): {exc}"
            return
        except CudaCallError as exc:
            self._cuda_call_failed(cr, cfg, exc)
            return
        finally:
            refs.clear()
            if tp.stored is not None:
                tp.ref = None  # stored outputs: off the heap again
            if cp.alt is not None and cp.alt.stored is not None:
                cp.alt.ref = None
            if cr.status != RUNTIME_ERROR:
                self._free(dev)
                for cs in copies:
                    for a in cs.values():
                        b.free(a)
                if flush is not None:
                    b.free(flush)

        if guards:
            cr.guard_violations = guards
            post_bad.append(
                "during timing, wrote outside "
                + ", ".join(f"'{g['array']}' ({g['side']})" for g in guards)
            )

        given = job.cpu_baseline_ms.get(cfg.name)
        cpu_ms = float(given) if given is not None else (cp.cpu.median_ms if cp.cpu else None)
        warnings: list[str] = list(notes)
        ks = speedup(cpu_ms, gpu_stats.median_ms) if gpu_stats is not None else None
        es = speedup(cpu_ms, e2e_stats.median_ms) if e2e_stats is not None else None
        if ks is not None and ks > SUSPICIOUS_SPEEDUP:
            warnings.append(
                f"kernel speedup {ks:.1f}x over {job.baseline_label} is above "
                f"{SUSPICIOUS_SPEEDUP:g}x: worth a second look"
            )
        untimed = (untimed_work(gpu_stats.median_ms, sync_stats.median_ms)
                   if sync_stats is not None and gpu_stats is not None else None)
        if untimed is not None:
            warnings.append(untimed)
        hidden = side_work(tails, gpu_stats.median_ms, floors) if gpu_stats is not None else None
        if hidden is not None:  # not a warning: the figure would be a fake speedup
            post_bad.append("timing: " + hidden)
        judge_stats = summarize(judge_samples) if judge_samples and self.ping_ms is not None else None
        post_bad += ["timing: " + lie for lie in (sync_lie, e2e_lie) if lie is not None]
        cr.timing = ConfigTiming(
            gpu=gpu_stats,
            e2e=e2e_stats,
            sync_call=sync_stats,
            cpu=cp.cpu if given is None else None,
            cpu_median_ms=cpu_ms,
            kernel_speedup=ks,
            e2e_speedup=es,
            baseline=job.baseline_label,
            flush_bytes=fbytes,
            warmup_reps=len(rt.warmup) if rt is not None else 0,
            bytes_in=bytes_in,
            bytes_out=bytes_out,
            warnings=warnings,
            slow=bool(rt is not None and rt.slow),
            estimate_ms=rt.estimate_ms if rt is not None else None,
            planned_reps=rt.planned if rt is not None else rot.planned,
            cpu_total_s=cp.cpu_total_s if given is None else None,
            input_sets=len(sets),
            input_set_calls=list(rot.calls),
            checked_reps=list(rot.verified),
            judge_sync=judge_stats,
            judge_ping_ms=self.ping_ms if judge_stats is not None else None,
        )
        if post_bad:
            cr.status = WRONG
            cr.message = f"config '{cfg.name}': " + "; ".join(post_bad)
        elif rt is not None and rt.slow:
            cr.message = (f"config '{cfg.name}': stopped timing after {len(rt.warmup)} call(s): "
                          f"~{rt.estimate_ms:.4g} ms > slow limit {job.slow_ms:.4g} ms")


# ---------------------------------------------------------------------------------------
# Device info
# ---------------------------------------------------------------------------------------


def probe(ordinal: int = 0, backend_kind: str = "cuda") -> dict[str, Any]:
    """Device description (see :func:`cudaperf_cli.evaluate.probe_device`)."""
    try:
        b = make_backend(backend_kind, ordinal)
    except NoDevice as exc:
        return {"available": False, "reason": str(exc)}
    info = b.info()
    info.setdefault("available", True)
    return info


# ---------------------------------------------------------------------------------------
# Test hooks
# ---------------------------------------------------------------------------------------


def _run_hook(hook: str, out_fd: int, state: State) -> bool:
    """Test-only behaviours.  Returns True when the hook already wrote the output.

    ``sleep:S``, ``spawn-sleep:S`` (a grandchild too), ``segv``, ``abort``, ``exit:N``,
    ``garbage`` (not JSON on the result channel), ``stderr:N`` (N characters),
    ``hog:BYTES`` (touch that much host memory, then sleep).  The C worker runs them once it
    holds the GPU; with a ``prepare-`` prefix, before it prepares anything.
    """
    kind, _, arg = hook.partition(":")
    state.set(f"hook.{kind}")
    if kind == "sleep":
        time.sleep(float(arg or 3600))
    elif kind == "spawn-sleep":
        child = subprocess.Popen(["sleep", arg or "3600"])
        print(f"cudaperf-test: spawned pid {child.pid}", file=sys.stderr, flush=True)
        time.sleep(float(arg or 3600))
    elif kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)
    elif kind == "abort":
        os.abort()
    elif kind == "exit":
        sys.stderr.write("cudaperf-test: exiting on request\n")
        sys.stderr.flush()
        os._exit(int(arg or 3))
    elif kind == "garbage":
        os.write(out_fd, b"this is not JSON\n")
        return True
    elif kind == "stderr":
        sys.stderr.write("x" * int(arg or 100000) + "\nlast line of the test hook\n")
        sys.stderr.flush()
    elif kind == "hog":
        hog = np.ones(int(arg or 1 << 30), dtype=np.uint8)  # every page written
        print(f"cudaperf-test: holding {hog.nbytes} bytes", file=sys.stderr, flush=True)
        time.sleep(3600)
    return False


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Worker entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m cudaperf_cli.evaluate.worker")
    parser.add_argument("--device-info", action="store_true")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)

    emit = result_channel()
    backend_kind = os.environ.get(BACKEND_ENV, "cuda")
    if backend_kind not in ("cuda", "host"):
        backend_kind = "cuda"
    state = State(os.environ.get(STATE_ENV))

    if args.device_info:
        emit(probe(args.device, backend_kind))
        return 0

    try:
        job = EvalJob.from_json(read_job())
    except Exception as exc:  # noqa: BLE001
        emit(EvalResult(status=CRASH, message=f"worker got an unreadable job: {exc}"))
        return 0
    hook = job.debug_hook if job.debug_hook and os.environ.get(HOOKS_ENV) == "1" else None
    early = hook is not None and (hook.startswith("prepare-") or job.cand_lib is None)
    if hook is not None and early:
        if _run_hook(hook.removeprefix("prepare-"), emit.fd, state):
            return 0

    def gate() -> float:
        waited = wait_for_gpu(emit, state)
        if hook is not None and not early and _run_hook(hook, emit.fd, state):
            flush_c_stdio()
            os._exit(0)
        return waited

    def stop(result: EvalResult) -> None:
        # From the slow stop's timer thread, while the candidate's call runs: report and
        # end the process (no C stdio flush: the candidate may hold its lock).
        try:
            emit(result)
            sys.stderr.flush()
        finally:
            os._exit(0)

    try:
        try:
            wrapper = [str(x) for x in json.loads(os.environ.get(DEVICE_WRAPPER_ENV) or "[]")]
        except ValueError:
            wrapper = []
        result = Worker(job, state, backend_kind, gate=gate, stop=stop, process=True,
                        device_wrapper=wrapper).run()
    except DeviceGone as exc:
        print(f"cudaperf worker: {exc.reason} (exit status {exc.returncode})",
              file=sys.stderr, flush=True)
        if exc.protocol:
            # The judge ended it for breaking the protocol: the judge's verdict.
            result = EvalResult(status=CRASH, message=f"{exc.reason}: the candidate's process was "
                                f"ended {where(state.data, PHASE_WORDS)}", phase=state.data.get("phase"),
                                details={"candidate_process": "broke the protocol"})
            flush_c_stdio()
            emit(result)
            return 0
        # The candidate's process died on its own (its host code crashed or exited): end the
        # same way, without a result, so that the parent reports it as it reports a dead
        # worker (crash, the signal, the phase).
        flush_c_stdio()
        rc = exc.returncode
        if rc is not None and rc < 0:
            if -rc not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(-rc, signal.SIG_DFL)
            os.kill(os.getpid(), -rc)
            time.sleep(5)
        os._exit(rc if rc is not None and rc > 0 else (0 if rc == 0 else 1))
    except Exception as exc:  # noqa: BLE001 - report, never die silently
        result = EvalResult(
            status=CRASH,
            message=f"internal error in the evaluation worker: {type(exc).__name__}: {exc}",
            phase=state.data.get("phase"),
            details={"traceback": traceback.format_exc()},
        )
    flush_c_stdio()
    emit(result)
    return 0


if __name__ == "__main__":
    code = main()
    # Skip interpreter teardown: after a sticky CUDA error (illegal address...) destructors
    # of device objects may fail or hang; the result is already written.
    try:
        flush_c_stdio()
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(code)
