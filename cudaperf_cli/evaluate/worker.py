"""The evaluation worker: ``python -m cudaperf_cli.evaluate.worker``.

Protocol (see ``docs/evaluation.md``):

* stdin: one :class:`~cudaperf_cli.evaluate.job.EvalJob` JSON document;
* stdout: one :class:`~cudaperf_cli.evaluate.job.EvalResult` JSON document, nothing else
  (file descriptor 1 is redirected to stderr at start-up, so ``printf`` from the reference,
  the candidate's host code or its kernels cannot corrupt the result);
* stderr: anything (the parent keeps the tail);
* ``$CUDAPERF_WORKER_STATE``: a file the worker keeps overwriting with its current phase
  (and the configurations finished so far), so the parent can say where a worker that
  crashed or timed out was;
* ``--device-info [--device N]``: print a device description instead (no job on stdin).

The worker catches its own errors and reports them as JSON; only a signal (segfault in
the reference or the candidate's host code) or the parent's kill on timeout ends it
without a result.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from cudaperf_cli.core import CTYPE_OF_DTYPE, ArrayParam, ScalarKind, ScalarParam, to_jsonable
from cudaperf_cli.evaluate.backend import (
    Allocation,
    Backend,
    CudaCallError,
    NoDevice,
    driver_error,
    make_backend,
    runtime_error,
)
from cudaperf_cli.evaluate.job import (
    BACKEND_ENV,
    CORRECT,
    CRASH,
    NO_DEVICE,
    READ_ONLY,
    READ_WRITE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
    RUNTIME_ERROR,
    WRITE_ONLY,
    WRONG,
    ArrayCheck,
    ConfigResult,
    ConfigSpec,
    ConfigTiming,
    EvalJob,
    EvalResult,
    HOOKS_ENV,
    STATE_ENV,
    summarize_result,
)
from cudaperf_cli.evaluate.timing import (
    SUSPICIOUS_SPEEDUP,
    flush_size,
    need_more_reps,
    speedup,
    summarize,
)
from cudaperf_cli.evaluate.verify import (
    POISON_FLOAT_WORD,
    POISON_INT_BYTE,
    classify_roles,
    compare_arrays,
    is_floating,
)


#: Byte written around every device array; a changed byte means an out-of-bounds write.
GUARD_BYTE = 0x5C
#: Timed repetitions enqueued between two synchronizations.
BATCH = 10



def ctype_of(dtype: str) -> Any:
    """ctypes type for a numpy dtype name (by-value scalars)."""
    return CTYPE_OF_DTYPE[np.dtype(dtype).name]


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


# ---------------------------------------------------------------------------------------
# State file
# ---------------------------------------------------------------------------------------


class State:
    """The phase file read by the parent after a crash or a timeout."""

    def __init__(self, path: str | None):
        self.fd: int | None = None
        if path:
            try:
                self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:
                self.fd = None
        self.data: dict[str, Any] = {
            "phase": "start",
            "config": None,
            "trial": None,
            "candidate_started": False,
            "configs": [],
            "pid": os.getpid(),
        }

    def set(self, phase: str, config: str | None = None, trial: int | None = None) -> None:
        self.data.update(phase=phase, config=config, trial=trial)
        self._flush()

    def mark_candidate(self) -> None:
        if not self.data["candidate_started"]:
            self.data["candidate_started"] = True
            self._flush()

    def add_config(self, cr: ConfigResult) -> None:
        self.data["configs"].append(to_jsonable(cr))
        self._flush()

    def _flush(self) -> None:
        if self.fd is None:
            return
        raw = json.dumps(self.data).encode()
        try:
            os.pwrite(self.fd, raw, 0)
            os.ftruncate(self.fd, len(raw))
        except OSError:
            pass


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


class Worker:
    """Runs one :class:`EvalJob`; :meth:`run` returns the :class:`EvalResult`."""

    def __init__(self, job: EvalJob, state: State, backend_kind: str = "cuda"):
        self.job = job
        self.state = state
        self.backend_kind = backend_kind
        self.params = job.parsed_params()
        self.arrays = [p for p in self.params if isinstance(p, ArrayParam)]
        self.init = job.init_spec()
        self.backend: Backend | None = None
        self.cand_fn: Any = None
        self.roles_first: dict[str, str] = {}
        self.error: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self.device: dict[str, Any] | None = None
        self.t0 = time.monotonic()

    # -- entry -------------------------------------------------------------------------

    def run(self) -> EvalResult:
        job = self.job
        device: dict[str, Any] | None = None
        if job.cand_lib is not None:
            self.state.set("device")
            try:
                self.backend = make_backend(self.backend_kind, job.device)
            except NoDevice as exc:
                return self._result(NO_DEVICE, f"no CUDA device: {exc}", [])
            device = self.backend.info()
        self.device = device
        self.state.set("load_reference")
        try:
            self._load_reference()
        except ReferenceFailure as exc:
            return self._result(REFERENCE_ERROR, str(exc), [])

        results: list[ConfigResult] = []
        status = CORRECT if job.cand_lib is not None else REFERENCE_ONLY
        message = ""
        for ci, cfg in enumerate(job.configs):
            cr = self._verify_config(ci, cfg)
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

        if status in (CORRECT, REFERENCE_ONLY):
            for ci, cfg in enumerate(job.configs):
                if not cfg.time:
                    continue
                cr = results[ci]
                self._time_config(ci, cfg, cr)
                if cr.status in (WRONG, RUNTIME_ERROR):
                    status, message = cr.status, cr.message
                    break

        if status == CORRECT:
            n = sum(c.trials_run for c in results)
            message = f"correct on {len(results)} configuration(s), {n} trial(s)"
            timed = [c for c in results if c.timing is not None and c.timing.gpu is not None]
            if timed:
                t = timed[-1].timing
                assert t is not None and t.gpu is not None
                message += (
                    f"; '{timed[-1].name}': kernel {t.gpu.median_ms:.4g} ms"
                    + (f", {t.kernel_speedup:.3g}x vs {t.baseline}" if t.kernel_speedup else "")
                )
        elif status == REFERENCE_ONLY:
            message = f"reference ran on {len(results)} configuration(s) (no candidate)"
        return self._result(status, message, results)

    def _result(self, status: str, message: str, configs: list[ConfigResult]) -> EvalResult:
        self.state.set("done")
        for c in configs:
            if c.timing:
                self.warnings.extend(f"{c.name}: {w}" for w in c.timing.warnings)
        return EvalResult(
            status=status,
            message=message,
            configs=configs,
            array_roles=dict(self.roles_first),
            device=self.device,
            error=self.error,
            phase="done",
            elapsed_s=time.monotonic() - self.t0,
            warnings=self.warnings,
            summary=summarize_result(configs, self.job.baseline_label),
        )

    # -- libraries ---------------------------------------------------------------------

    def _argtypes(self) -> list[Any]:
        out = []
        for p in self.params:
            out.append(ctypes.c_void_p if isinstance(p, ArrayParam) else ctype_of(p.dtype))
        return out

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

    def _load_candidate(self) -> None:
        job = self.job
        self.state.mark_candidate()
        assert job.cand_lib is not None
        try:
            lib = ctypes.CDLL(os.path.abspath(job.cand_lib))
        except OSError as exc:
            raise CandidateFailure(
                f"cannot load the candidate library: {exc}",
                {"source": "load", "name": "LOAD_ERROR", "string": str(exc), "code": None},
            ) from None
        try:
            fn = getattr(lib, job.cand_symbol)
        except AttributeError:
            raise CandidateFailure(
                f"the candidate does not define extern \"C\" int {job.cand_symbol}(...)",
                {
                    "source": "load",
                    "name": "SYMBOL_NOT_FOUND",
                    "string": f"{job.cand_symbol} not exported (missing extern \"C\"?)",
                    "code": None,
                },
            ) from None
        fn.restype = ctypes.c_int
        fn.argtypes = self._argtypes()
        self.cand_lib = lib
        self.cand_fn = fn

    # -- data --------------------------------------------------------------------------

    def _host_data(self, ci: int, cfg: ConfigSpec, trial: int) -> HostData:
        seed = [int(self.job.seed), ci, trial]
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
                h = ctype_of(p.dtype)(data.scalars[name])
                holders[name] = h
                args.append(ctypes.byref(h))
            else:
                args.append(ctype_of(p.dtype)(data.scalars[name]))
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

    def _poison_dev(self, d: DeviceArray, dtype: np.dtype) -> None:
        b = self.backend
        assert b is not None
        if is_floating(dtype):
            if d.nbytes % 4 == 0:
                b.memset32(d.ptr, POISON_FLOAT_WORD, d.nbytes // 4)
            else:
                b.memset8(d.ptr, 0xFF, d.nbytes)
        else:
            b.memset8(d.ptr, POISON_INT_BYTE, d.nbytes)

    def _upload(self, dev: dict[str, DeviceArray], host: HostData, roles: dict[str, str]) -> None:
        """Poison write-only arrays, copy the others in, (re)write the guards."""
        b = self.backend
        assert b is not None
        self._fill_guards(dev)
        for name, d in dev.items():
            arr = host.arrays[name]
            if roles[name] == WRITE_ONLY:
                self._poison_dev(d, arr.dtype)
            else:
                b.h2d(d.ptr, np.ascontiguousarray(arr))

    def _cand_args(self, dev: dict[str, DeviceArray], scalars: dict[str, Any]) -> list[Any]:
        return [
            dev[p.name].ptr if isinstance(p, ArrayParam) else scalars[p.name] for p in self.params
        ]

    def _call_candidate(self, args: list[Any], where: dict[str, Any]) -> None:
        """Call ``<fn>_cuda``; a non-zero return raises :class:`CandidateFailure`."""
        if self.cand_fn is None:
            self._load_candidate()
        self.state.mark_candidate()
        rc = int(self.cand_fn(*args))
        if rc != 0:
            name, string = runtime_error(rc)
            err = {"source": "candidate_return", "code": rc, "name": name, "string": string}
            err.update(where)
            raise CandidateFailure(
                f"{self.job.cand_symbol} returned {rc} ({name}: {string})", err
            )

    def _sync(self, where: dict[str, Any]) -> None:
        b = self.backend
        assert b is not None
        code = b.synchronize()
        if code != 0:
            name, string = driver_error(code)
            err = {"source": "synchronize", "code": code, "name": name, "string": string}
            err.update(where)
            phase = where.get("phase")
            what = "after the candidate call" if phase in ("candidate", "timing") else f"({phase})"
            raise CandidateFailure(f"device synchronize {what} failed: {name}: {string}", err)

    # -- verification ------------------------------------------------------------------

    def _roles(self, host: HostData, cfg: ConfigSpec) -> dict[str, str]:
        known = {k: v for k, v in self.job.array_roles.items() if k in host.arrays}
        const = {p.name for p in self.arrays if p.const}
        self.state.set("classify", cfg.name, 0)
        return classify_roles(
            lambda arrs: self._call_reference(arrs, host.scalars),
            host.arrays,
            const=const,
            known=known,
        )

    def _where(self, cfg: ConfigSpec, trial: int | None, phase: str) -> dict[str, Any]:
        return {"config": cfg.name, "trial": trial, "phase": phase}

    def _verify_config(self, ci: int, cfg: ConfigSpec) -> ConfigResult:
        cr = ConfigResult(cfg.name, dict(cfg.sizes), CORRECT)
        dev: dict[str, DeviceArray] = {}
        roles: dict[str, str] = {}
        try:
            for trial in range(cfg.trials):
                self.state.set("data", cfg.name, trial)
                host = self._host_data(ci, cfg, trial)
                cr.seed = host.seed
                if trial == 0:
                    roles = self._roles(host, cfg)
                    cr.array_roles = roles
                    if not self.roles_first:
                        self.roles_first = dict(roles)
                if self.job.cand_lib is None:
                    self.state.set("reference", cfg.name, trial)
                    ref = host.copy_arrays()
                    cr.ref_ms = self._call_reference(ref, host.scalars)
                    cr.trials_run = trial + 1
                    continue
                if not dev:
                    self.state.set("alloc", cfg.name, trial)
                    dev = self._alloc(host)
                where = self._where(cfg, trial, "candidate")
                self.state.set("upload", cfg.name, trial)
                self._upload(dev, host, roles)
                self._sync(self._where(cfg, trial, "upload"))
                self.state.set("candidate", cfg.name, trial)
                self._call_candidate(self._cand_args(dev, host.scalars), where)
                self._sync(where)
                self.state.set("download", cfg.name, trial)
                cand = {n: np.empty_like(a) for n, a in host.arrays.items()}
                for n, d in dev.items():
                    self.backend.d2h(cand[n], d.ptr)  # type: ignore[union-attr]
                guards = self._check_guards(dev)
                self.state.set("reference", cfg.name, trial)
                ref = host.copy_arrays()
                cr.ref_ms = self._call_reference(ref, host.scalars)
                self.state.set("compare", cfg.name, trial)
                checks = [
                    compare_arrays(
                        n, cand[n], ref[n], role=roles[n], tolerances=self.job.tolerances
                    )
                    for n in host.arrays
                ]
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
        if cr.status == CORRECT and self.job.cand_lib is None:
            cr.status = REFERENCE_ONLY
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

    def _time_config(self, ci: int, cfg: ConfigSpec, cr: ConfigResult) -> None:
        job = self.job
        trial = cfg.trials  # a fresh data set, not one of the verification trials
        self.state.set("timing.data", cfg.name, trial)
        host = self._host_data(ci, cfg, trial)
        roles = cr.array_roles
        if job.cand_lib is None:
            cpu_ms, _, cpu_stats = self._cpu_baseline(cfg, host)
            cr.timing = ConfigTiming(
                gpu=None, cpu=cpu_stats, cpu_median_ms=cpu_ms, baseline=job.baseline_label
            )
            if cpu_stats is not None:
                cr.message = (
                    f"config '{cfg.name}': reference median {cpu_stats.median_ms:.4g} ms "
                    f"over {cpu_stats.n} run(s)"
                )
            return
        b = self.backend
        assert b is not None
        dev: dict[str, DeviceArray] = {}
        pristine: dict[str, Allocation] = {}
        flush: Allocation | None = None
        ts = job.timing
        where = self._where(cfg, None, "timing")
        try:
            self.state.set("timing.alloc", cfg.name)
            dev = self._alloc(host)
            for name, d in dev.items():
                if roles[name] == READ_WRITE:
                    pristine[name] = b.alloc(d.nbytes)
                    b.h2d(pristine[name].ptr, np.ascontiguousarray(host.arrays[name]))
            fbytes = flush_size(b.l2_bytes, ts)
            if fbytes:
                flush = b.alloc(fbytes)
            self._upload(dev, host, roles)
            self._sync(self._where(cfg, None, "timing.upload"))
            args = self._cand_args(dev, host.scalars)
            dtypes = {n: a.dtype for n, a in host.arrays.items()}

            def prepare() -> None:
                for name, d in dev.items():
                    if roles[name] == READ_WRITE:
                        b.d2d(d.ptr, pristine[name].ptr, d.nbytes)
                    elif roles[name] == WRITE_ONLY:
                        self._poison_dev(d, dtypes[name])
                if flush is not None:
                    b.memset32(flush.ptr, 0, fbytes // 4)

            # warm-up
            self.state.set("timing.warmup", cfg.name)
            for _ in range(max(ts.warmup_reps, 0)):
                prepare()
                self._call_candidate(args, where)
            self._sync(where)

            # kernel time (events)
            self.state.set("timing.gpu", cfg.name)
            samples: list[float] = []
            timers = [b.timer() for _ in range(BATCH)]
            total = 0.0
            while not samples or need_more_reps(len(samples), total, ts):
                k = min(BATCH, max(ts.max_reps - len(samples), 1))
                for i in range(k):
                    prepare()
                    timers[i].start()
                    self._call_candidate(args, where)
                    timers[i].stop()
                self._sync(where)
                for i in range(k):
                    ms = timers[i].ms()
                    samples.append(ms)
                    total += ms
            gpu_stats = summarize(samples)
            snap_timed = {n: np.empty_like(a) for n, a in host.arrays.items()}
            for n, d in dev.items():
                b.d2h(snap_timed[n], d.ptr)
            guards = self._check_guards(dev)

            # call + synchronize (host clock)
            self.state.set("timing.sync", cfg.name)
            sync_samples: list[float] = []
            for _ in range(max(ts.sync_reps, 1)):
                prepare()
                self._sync(where)
                t0 = time.perf_counter()
                self._call_candidate(args, where)
                self._sync(where)
                sync_samples.append((time.perf_counter() - t0) * 1e3)
            sync_stats = summarize(sync_samples)

            # end to end: copies in + call + sync + copies out (pageable host memory)
            self.state.set("timing.e2e", cfg.name)
            reads = [n for n in dev if roles[n] in (READ_ONLY, READ_WRITE)]
            writes = [n for n in dev if roles[n] in (READ_WRITE, WRITE_ONLY)]
            inputs = {n: np.ascontiguousarray(host.arrays[n]) for n in reads}
            e2e_out = {n: np.empty_like(host.arrays[n]) for n in writes}
            e2e_samples: list[float] = []
            for r in range(max(ts.e2e_reps, 1) + 1):
                for n in writes:
                    if roles[n] == WRITE_ONLY:
                        self._poison_dev(dev[n], dtypes[n])
                self._sync(where)
                t0 = time.perf_counter()
                for n in reads:
                    b.h2d(dev[n].ptr, inputs[n])
                self._call_candidate(args, where)
                self._sync(where)
                for n in writes:
                    b.d2h(e2e_out[n], dev[n].ptr)
                dt = (time.perf_counter() - t0) * 1e3
                if r > 0:  # the first one is a warm-up
                    e2e_samples.append(dt)
            e2e_stats = summarize(e2e_samples)
            bytes_in = sum(inputs[n].nbytes for n in reads)
            bytes_out = sum(e2e_out[n].nbytes for n in writes)
        except CandidateFailure as exc:
            self.error = exc.error
            cr.status = RUNTIME_ERROR
            cr.message = f"config '{cfg.name}' (timing): {exc}"
            return
        except CudaCallError as exc:
            self._cuda_call_failed(cr, cfg, exc)
            return
        finally:
            if cr.status != RUNTIME_ERROR:
                self._free(dev)
                for a in pristine.values():
                    b.free(a)
                if flush is not None:
                    b.free(flush)

        # CPU baseline (and the reference output of the timing data)
        cpu_ms, ref_out, cpu_stats = self._cpu_baseline(cfg, host)

        # post-timing check: the timed runs and the end-to-end runs still give the answer
        self.state.set("timing.check", cfg.name)
        post_bad: list[str] = []
        for n in host.arrays:
            c = compare_arrays(
                n, snap_timed[n], ref_out[n], role=roles[n], tolerances=job.tolerances
            )
            if not c.ok:
                post_bad.append("after the timed repetitions, " + c.describe())
                cr.arrays = [c]
                break
        if not post_bad:
            for n in writes:
                c = compare_arrays(
                    n, e2e_out[n], ref_out[n], role=roles[n], tolerances=job.tolerances
                )
                if not c.ok:
                    post_bad.append("after the end-to-end runs, " + c.describe())
                    cr.arrays = [c]
                    break
        if guards:
            cr.guard_violations = guards
            post_bad.append(
                "during timing, wrote outside "
                + ", ".join(f"'{g['array']}' ({g['side']})" for g in guards)
            )

        warnings: list[str] = []
        ks = speedup(cpu_ms, gpu_stats.median_ms)
        es = speedup(cpu_ms, e2e_stats.median_ms)
        if ks is not None and ks > SUSPICIOUS_SPEEDUP:
            warnings.append(
                f"kernel speedup {ks:.1f}x over {job.baseline_label} is above "
                f"{SUSPICIOUS_SPEEDUP:g}x: worth a second look"
            )
        if gpu_stats.median_ms < 0.5 * sync_stats.median_ms - 0.05:
            warnings.append(
                f"event time {gpu_stats.median_ms:.4g} ms is much shorter than call + "
                f"synchronize {sync_stats.median_ms:.4g} ms: is work running outside the "
                "legacy default stream, or on the host?"
            )
        cr.timing = ConfigTiming(
            gpu=gpu_stats,
            e2e=e2e_stats,
            sync_call=sync_stats,
            cpu=cpu_stats,
            cpu_median_ms=cpu_ms,
            kernel_speedup=ks,
            e2e_speedup=es,
            baseline=job.baseline_label,
            flush_bytes=fbytes,
            warmup_reps=max(ts.warmup_reps, 0),
            bytes_in=bytes_in,
            bytes_out=bytes_out,
            warnings=warnings,
        )
        if post_bad:
            cr.status = WRONG
            cr.message = f"config '{cfg.name}': " + "; ".join(post_bad)

    def _cpu_baseline(
        self, cfg: ConfigSpec, host: HostData
    ) -> tuple[float | None, dict[str, np.ndarray], Any]:
        """Time the reference on fresh host copies.  Returns (median ms used for speedups,
        the reference output on ``host``, TimingStats or None)."""
        job = self.job
        self.state.set("timing.cpu", cfg.name)
        given = job.cpu_baseline_ms.get(cfg.name)
        reps = 0 if given is not None else max(int(job.cpu_reps), 0)
        samples: list[float] = []
        out: dict[str, np.ndarray] = {}
        total = 0.0
        for _ in range(max(reps, 1)):
            out = host.copy_arrays()
            ms = self._call_reference(out, host.scalars)
            samples.append(ms)
            total += ms
            if total >= job.cpu_budget_s * 1e3:
                break
        if reps == 0:
            return (float(given) if given is not None else None), out, None
        stats = summarize(samples)
        return stats.median_ms, out, stats


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
    """Test-only behaviours.  Returns True when the hook already wrote the output."""
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
    return False


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def _line_buffer_c_stdout() -> None:
    """Make C ``stdout`` line-buffered, so output printed just before a crash survives."""
    try:
        libc = ctypes.CDLL(None)
        fp = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.setvbuf(fp, None, 1, 0)  # _IOLBF
    except Exception:  # noqa: BLE001
        pass


def _flush_c_stdio() -> None:
    """fflush(NULL): push out what C code (the reference, the candidate's host code, device
    printf via the driver) left in stdio buffers, before ``os._exit`` would drop it."""
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001
        pass


def _emit(out_fd: int, obj: Any) -> None:
    raw = (json.dumps(to_jsonable(obj)) + "\n").encode()
    view = memoryview(raw)
    while view:
        n = os.write(out_fd, view)
        view = view[n:]


def main(argv: list[str] | None = None) -> int:
    """Worker entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m cudaperf_cli.evaluate.worker")
    parser.add_argument("--device-info", action="store_true")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)

    # Keep the real stdout for the result; send everything else written to fd 1 to stderr.
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    _line_buffer_c_stdout()
    backend_kind = os.environ.get(BACKEND_ENV, "cuda")
    if backend_kind not in ("cuda", "host"):
        backend_kind = "cuda"
    state = State(os.environ.get(STATE_ENV))

    if args.device_info:
        _emit(out_fd, probe(args.device, backend_kind))
        return 0

    try:
        job = EvalJob.from_json(json.loads(sys.stdin.read()))
    except Exception as exc:  # noqa: BLE001
        _emit(out_fd, EvalResult(status=CRASH, message=f"worker got an unreadable job: {exc}"))
        return 0
    if job.debug_hook and os.environ.get(HOOKS_ENV) == "1":
        if _run_hook(job.debug_hook, out_fd, state):
            return 0
    try:
        result = Worker(job, state, backend_kind).run()
    except Exception as exc:  # noqa: BLE001 - report, never die silently
        result = EvalResult(
            status=CRASH,
            message=f"internal error in the evaluation worker: {type(exc).__name__}: {exc}",
            phase=state.data.get("phase"),
            details={"traceback": traceback.format_exc()},
        )
    _flush_c_stdio()
    _emit(out_fd, result)
    return 0


if __name__ == "__main__":
    code = main()
    # Skip interpreter teardown: after a sticky CUDA error (illegal address...) destructors
    # of device objects may fail or hang; the result is already written.
    try:
        _flush_c_stdio()
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(code)
