"""The evaluation job (parent -> worker) and its result (worker -> parent), as JSON.

Everything here is plain data: the parent serialises an :class:`EvalJob` with
:meth:`EvalJob.to_json`, the worker answers with one :class:`EvalResult` document.  See
``docs/evaluation.md`` for the protocol and the meaning of every field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from cudaperf_cli.evaluate.child import STATE_ENV
from cudaperf_cli.evaluate.memory import MemoryPlan
from cudaperf_cli.evaluate.outcome import Outcome
from cudaperf_cli.core import (
    ArrayParam,
    CProblem,
    InitSpec,
    ScalarKind,
    ScalarParam,
    param_from_json,
    param_to_json,
    to_jsonable,
)

# ---------------------------------------------------------------------------------------
# Statuses
# ---------------------------------------------------------------------------------------

# The names come from the one status table (cudaperf_cli/statuses.py).
from cudaperf_cli.statuses import (  # noqa: E402
    CORRECT,
    CRASH,
    NO_DEVICE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
    RUNTIME_ERROR,
    SLOW,
    TIMEOUT,
    WRONG,
)

#: The statuses a C evaluation can end in (a subset of ``statuses.ORDER`` plus
#: ``reference_only``, the baseline job's).
STATUSES = (
    CORRECT,
    SLOW,
    WRONG,
    RUNTIME_ERROR,
    TIMEOUT,
    CRASH,
    NO_DEVICE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
)

#: Array roles found by output classification (see docs/evaluation.md).
READ_ONLY = "read-only"
WRITE_ONLY = "write-only"
READ_WRITE = "read-write"
ROLES = (READ_ONLY, WRITE_ONLY, READ_WRITE)

DEFAULT_BASELINE = "gcc -O3, 1 thread"
#: Ends the message of a ``timeout`` whose verification call ran past the slow stop
#: (``TimingSettings.slow_stop_floor_ms``): the feedback tells it from a hang by it.
SLOW_STOP_TEXT = "was stopped: not verified at this size"

#: Environment of the worker protocol (see docs/evaluation.md).
#: ``STATE_ENV`` (from evaluate/child.py): path of the phase file the worker keeps overwriting
BACKEND_ENV = "CUDAPERF_WORKER_BACKEND"  #: "host": test-only device emulation
#: The command the C worker runs its candidate's process under (a JSON list ending with
#: ``--``; the compute-sanitizer stage's): set by :func:`~cudaperf_cli.evaluate.runner.run_evaluation`.
DEVICE_WRAPPER_ENV = "CUDAPERF_DEVICE_WRAPPER"
HOOKS_ENV = "CUDAPERF_TEST_HOOKS"  #: "1": honour EvalJob.debug_hook (tests only)


def _pick(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def json_float(x: float | None) -> float | str | None:
    """A float for JSON: finite values unchanged, NaN/inf as ``"nan"``/``"inf"``/``"-inf"``."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


# ---------------------------------------------------------------------------------------
# Job
# ---------------------------------------------------------------------------------------


#: Canary bytes before and after every device array: 64 KiB, so that a write well past an
#: array's end lands in them (an attack wrote 4400 bytes past an output, beyond the 4 KiB
#: guard of the time, and was reported correct).  The plan counts them.
GUARD_BYTES = 65536


@dataclass
class ConfigSpec:
    """One input configuration.

    Attributes:
        name: a label (``"small"``, ``"main"``...), unique within the job.
        sizes: size parameter -> value; must cover every size parameter.
        trials: verification trials, each on fresh data (or init data).
        time: time this configuration (after every configuration verified).
        classify: the arrays' roles may be found on this configuration (the smallest such
            one is used).  False for the edge configuration: at sizes of 1 an output can
            equal its input by chance (bicg's ``q`` with ``p[0] == 0``) and pass for
            read-only.
    """

    name: str
    sizes: dict[str, int]
    trials: int = 2
    time: bool = False
    classify: bool = True

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ConfigSpec":
        kw = _pick(cls, d)
        kw["sizes"] = {str(k): int(v) for k, v in dict(d["sizes"]).items()}
        return cls(**kw)


#: Timed samples below which a result's IQR (``gpu_ms_iqr``, ``candidate_ms_iqr``) is
#: reported as None: the quartiles of one or two samples are not a spread.
MIN_IQR_SAMPLES = 3


@dataclass
class TimingSettings:
    """How to time (see docs/evaluation.md, "Timing"); every time in ms.

    Repetitions are planned from a first estimate, as triton's ``do_bench`` does
    (``triton/testing.py``: ``warmup=25`` ms, ``rep=100`` ms; the number of calls is that
    time over the estimated time of one call):

    Attributes:
        warmup_reps: at least this many warm-up calls (timed for the estimate, not reported).
        warmup_ms: warm-up calls continue until their times sum to this (do_bench: 25 ms).
        min_reps: at least this many timed repetitions ...
        max_reps: ... at most this many (warm-up calls are capped by it too) ...
        min_total_ms: ... planned so that they sum to about this (do_bench's ``rep``: 100 ms).
        max_total_ms: the timed repetitions never plan past this sum; at least 1 runs: a
            765 ms kernel is timed twice, not ``min_reps`` times, a 15 s one once.
        flush_l2: write a flush buffer before every repetition.
        flush_bytes: flush buffer size, bytes; None: max(2 x L2 size, 256 MiB).
        e2e_reps: repetitions of the end-to-end measurement (one more is run as warm-up).
        sync_reps: repetitions of the "call + device synchronize" host-clock measurement.
        slow_stop_floor_ms: with a slow limit (the job's ``slow_ms``), a verification call
            (candidate call + synchronize, host clock) still running after
            max(``slow_ms``, this) is stopped there: the worker reports ``timeout`` and
            exits, so that a candidate that would be ``slow`` holds the GPU for at most
            that long (PolyBench lu's one-thread candidate ran 132 s a call against a 4 s
            baseline).  The floor keeps short slow calls verified (status ``slow``).
        input_sets: input sets the timed calls rotate through (``docs/evaluation.md`` §6):
            2 (the default) keeps a second set on the device, equal to the first but in a
            sparse random subset of elements, and gives each call one of them (copied
            into the same addresses before it, untimed); 1: every call gets the same
            inputs (the second set is also dropped when it does not fit the device).
        checked_reps: timed repetitions, chosen at random, whose outputs are copied back
            and compared with the reference's on the input set they used (0: none; the
            check after the last timed call runs regardless).
    """

    warmup_reps: int = 1
    warmup_ms: float = 25.0
    min_reps: int = 10
    max_reps: int = 1000
    min_total_ms: float = 100.0
    max_total_ms: float = 2_000.0
    flush_l2: bool = True
    flush_bytes: int | None = None
    e2e_reps: int = 10
    sync_reps: int = 10
    slow_stop_floor_ms: float = 10_000.0
    input_sets: int = 2
    checked_reps: int = 2

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> "TimingSettings":
        return cls(**_pick(cls, d or {}))


@dataclass
class EvalJob:
    """Everything the worker needs to verify and time one candidate.

    Attributes:
        ref_lib: shared library exporting the reference (host pointers).
        ref_symbol: ``cudaperf_ref_<fn>``.
        cand_lib: the candidate ``.so``; None runs the reference only (status
            ``reference_only``; CPU baseline and array roles are still reported).
        cand_symbol: ``<fn>_cuda``.
        params: the function's parameters, :func:`cudaperf_cli.core.param_to_json` dicts.
        configs: the input configurations, in order.
        init_symbol: ``cudaperf_init_<fn>`` or None for seeded random data.
        init: the :class:`~cudaperf_cli.core.InitSpec` as a dict (``name``, ``params``,
            ``scalar_outputs``) or None.
        seed: base seed; trial ``t`` of config ``c`` uses ``SeedSequence([seed, c, t])``.
        tolerances: per-dtype overrides of :data:`cudaperf_cli.evaluate.tolerances.DEFAULT_TOLERANCES`,
            e.g. ``{"float32": {"rtol": 1e-3, "atol": 1e-4}}`` (C names ``float``/``double``
            accepted); the optimize driver passes ``resolve_tolerances(atol, rtol)``.
        timing: :class:`TimingSettings`.
        cpu_reps: at most this many reference runs for the CPU baseline (0: no CPU timing).
        cpu_budget_s: the CPU baseline's bounded total, seconds: after the first run, as
            many runs as fit this total (at least 1, at most ``cpu_reps``).
        cpu_baseline_ms: config name -> CPU median already measured, ms (skips CPU timing
            of that config; still used for speedups).
        array_roles: array name -> role, skipping output classification for those arrays.
        device: CUDA device ordinal.
        baseline_label: names the CPU baseline in reports.
        guard_bytes: canary bytes before and after every device array (0 disables;
            default :data:`GUARD_BYTES`).
        reference_outputs: a folder of the reference's outputs, written by the reference-only
            (baseline) job of the run and read by every candidate job of it, so that the
            reference runs once per trial of a run, not once per candidate; None: the worker
            runs the reference itself.  An entry that does not match the job (seed, sizes,
            library, dtypes) is ignored with a warning and the reference runs here.
        slow_ms: a verified candidate whose estimated kernel time passes this (ms) stops
            timing early with status ``slow`` (the optimize loop passes ``--slow-factor`` x
            the lower of the run's best correct time and the CPU baseline); None: never.
        debug_hook: test-only behaviour, honoured only with ``CUDAPERF_TEST_HOOKS=1``.
    """

    ref_lib: str
    ref_symbol: str
    cand_lib: str | None
    cand_symbol: str
    params: list[dict[str, Any]]
    configs: list[ConfigSpec]
    init_symbol: str | None = None
    init: dict[str, Any] | None = None
    seed: int = 0
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    timing: TimingSettings = field(default_factory=TimingSettings)
    cpu_reps: int = 5
    cpu_budget_s: float = 5.0
    cpu_baseline_ms: dict[str, float] = field(default_factory=dict)
    array_roles: dict[str, str] = field(default_factory=dict)
    device: int = 0
    baseline_label: str = DEFAULT_BASELINE
    guard_bytes: int = GUARD_BYTES
    reference_outputs: str | None = None
    slow_ms: float | None = None
    debug_hook: str | None = None

    def __post_init__(self) -> None:
        # Accept plain dicts (as read from JSON or written by hand) for the nested parts.
        self.configs = [
            c if isinstance(c, ConfigSpec) else ConfigSpec.from_json(c) for c in self.configs
        ]
        if not isinstance(self.timing, TimingSettings):
            self.timing = TimingSettings.from_json(self.timing)
        self.params = [dict(p) for p in self.params]
        if self.init is not None and not isinstance(self.init, dict):
            self.init = to_jsonable(self.init)  # an InitSpec
        for k in ("ref_lib", "cand_lib"):
            v = getattr(self, k)
            if isinstance(v, Path):
                setattr(self, k, str(v))

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_problem(
        cls,
        problem: CProblem,
        *,
        ref_lib: Any,
        cand_lib: str | Path | None,
        configs: Sequence[ConfigSpec] | None = None,
        **kw: Any,
    ) -> "EvalJob":
        """A job for ``problem``: symbols from the function name, params, init spec.

        ``ref_lib`` is a path, or the problems stage's ``ReferenceLib`` (anything with
        ``lib_path``; its ``ref_symbol``, ``init_symbol`` and ``baseline_name`` are used).
        ``configs`` defaults to one timed config ``"main"`` with ``problem.sizes``.
        Extra keyword arguments set the other fields.
        """
        init = problem.init
        ref_symbol = f"cudaperf_ref_{problem.function}"
        init_symbol = f"cudaperf_init_{problem.function}" if init else None
        if hasattr(ref_lib, "lib_path"):
            ref = ref_lib
            ref_lib = ref.lib_path
            ref_symbol = getattr(ref, "ref_symbol", None) or ref_symbol
            init_symbol = getattr(ref, "init_symbol", None) or init_symbol
            if getattr(ref, "baseline_name", None):
                kw.setdefault("baseline_label", ref.baseline_name)
        return cls(
            ref_lib=str(ref_lib),
            ref_symbol=ref_symbol,
            cand_lib=str(cand_lib) if cand_lib is not None else None,
            cand_symbol=problem.cuda_symbol,
            params=[param_to_json(p) for p in problem.params],
            configs=list(configs)
            if configs is not None
            else [ConfigSpec("main", dict(problem.sizes), trials=2, time=True)],
            init_symbol=init_symbol,
            init=to_jsonable(init) if init else None,
            **kw,
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return to_jsonable(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "EvalJob":
        kw = _pick(cls, d)
        kw["configs"] = [ConfigSpec.from_json(c) for c in d.get("configs", [])]
        kw["timing"] = TimingSettings.from_json(d.get("timing"))
        kw["params"] = [dict(p) for p in d.get("params", [])]
        return cls(**kw)

    # -- helpers -----------------------------------------------------------------------

    def parsed_params(self) -> list[ScalarParam | ArrayParam]:
        return [param_from_json(p) for p in self.params]

    def init_spec(self) -> InitSpec | None:
        if not self.init:
            return None
        return InitSpec(
            name=self.init["name"],
            params=tuple(self.init.get("params", ())),
            scalar_outputs=tuple(self.init.get("scalar_outputs", ())),
        )

    def validate(self) -> None:
        """Check the job's structure (not the files).

        Raises:
            ValueError: with a message naming the problem (a programming error upstream).
        """
        params = self.parsed_params()
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parameter names in {names}")
        if not self.configs:
            raise ValueError("the job has no configurations")
        cfg_names = [c.name for c in self.configs]
        if len(set(cfg_names)) != len(cfg_names):
            raise ValueError(f"duplicate configuration names in {cfg_names}")
        sizes_needed = [
            p.name for p in params if isinstance(p, ScalarParam) and p.kind is ScalarKind.SIZE
        ]
        for c in self.configs:
            missing = [s for s in sizes_needed if s not in c.sizes]
            if missing:
                raise ValueError(f"config '{c.name}' lacks sizes for {', '.join(missing)}")
            if c.trials < 1:
                raise ValueError(f"config '{c.name}' needs at least one trial")
            for p in params:
                if isinstance(p, ArrayParam):
                    try:
                        shape = p.shape(c.sizes)
                    except ValueError as exc:
                        raise ValueError(f"array '{p.name}' in config '{c.name}': {exc}") from None
                    if any(e < 0 for e in shape):
                        raise ValueError(
                            f"array '{p.name}' has a negative extent {shape} in config '{c.name}'"
                        )
        spec = self.init_spec()
        if spec is not None:
            if not self.init_symbol:
                raise ValueError("init given without init_symbol")
            unknown = [n for n in spec.params if n not in names]
            if unknown:
                raise ValueError(f"init parameters not in the function: {', '.join(unknown)}")
        for name, role in self.array_roles.items():
            if role not in ROLES:
                raise ValueError(f"array_roles['{name}'] = '{role}' is not one of {ROLES}")
        from cudaperf_cli.evaluate.tolerances import resolve_tolerances

        resolve_tolerances(overrides=self.tolerances)  # ValueError for a bad table
        if self.slow_ms is not None and not float(self.slow_ms) > 0:
            raise ValueError(f"slow_ms must be > 0 or None, got {self.slow_ms!r}")


# ---------------------------------------------------------------------------------------
# Result
# ---------------------------------------------------------------------------------------


@dataclass
class ArrayCheck:
    """Comparison of one array, candidate vs reference, in one trial.

    Attributes:
        name, dtype, shape, role: the array.
        ok: every element within tolerance (exact for integers and read-only arrays).
        n_elements: element count.
        n_mismatch: elements out of tolerance.
        n_nonfinite_mismatch: of those, elements where one side is NaN/inf and the other
            is not the same non-finite value.
        max_abs_err: largest ``|cand - ref|`` over elements where both are finite.
        max_rel_err: largest ``|cand - ref| / |ref|`` over finite elements with ref != 0.
        rtol, atol: the tolerance applied (0, 0 when exact).
        exact: compared bit for bit.
        first_mismatch: ``{"index": [i, j, ...], "candidate": v, "reference": v}`` at the
            first mismatching element in C order, else None.
        worst_mismatch: same, at the largest absolute error (finite), else None.
    """

    name: str
    dtype: str
    shape: list[int]
    role: str
    ok: bool
    n_elements: int
    n_mismatch: int = 0
    n_nonfinite_mismatch: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rtol: float = 0.0
    atol: float = 0.0
    exact: bool = False
    first_mismatch: dict[str, Any] | None = None
    worst_mismatch: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ArrayCheck":
        return cls(**_pick(cls, d))

    def describe(self) -> str:
        """One line for humans and models."""
        if self.ok:
            return f"{self.name}: ok (max abs err {self.max_abs_err:.3g})"
        fm = self.first_mismatch or {}
        idx = ",".join(str(i) for i in fm.get("index", []))
        nonfinite = ""
        if self.n_nonfinite_mismatch:
            # the errors below are over finite pairs only: say how many are not
            nonfinite = (f"{self.n_nonfinite_mismatch} of them NaN/inf on one side only; "
                         "over the finite ones: ")
        return (
            f"{self.name}: {self.n_mismatch} of {self.n_elements} elements differ; first at "
            f"[{idx}]: candidate {fm.get('candidate')} vs reference {fm.get('reference')}"
            f" ({nonfinite}max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g})"
        )


@dataclass
class TimingStats:
    """Summary of repeated measurements, all in milliseconds.

    ``p25_ms``/``p75_ms`` are the quartiles (linear interpolation); IQR = p75 - p25.
    """

    n: int
    median_ms: float
    min_ms: float
    max_ms: float
    p25_ms: float
    p75_ms: float
    mean_ms: float

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    @property
    def reported_iqr_ms(self) -> float | None:
        """The IQR a result reports (``gpu_ms_iqr``, ``candidate_ms_iqr``): None below
        :data:`MIN_IQR_SAMPLES` samples, whose quartiles are not a spread (the ranker reads
        the IQR as the noise of a time)."""
        return self.iqr_ms if self.n >= MIN_IQR_SAMPLES else None

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> "TimingStats | None":
        return cls(**_pick(cls, d)) if d else None


@dataclass
class ConfigTiming:
    """Timing of one configuration.

    Attributes:
        gpu: (None for a reference-only job) kernel time from CUDA events around the ``<fn>_cuda`` call on the legacy
            default stream, L2 flushed and writable arrays restored before each rep, ms.
        e2e: host wall time of copies in + call + device sync + copies out, ms.
        sync_call: host wall time of the call + device synchronize (no copies), ms.
        cpu: reference runs on the host (None when not measured here), ms.
        cpu_median_ms: CPU median used for speedups (measured, or given in the job), ms.
        kernel_speedup: ``cpu_median_ms / gpu.median_ms``.
        e2e_speedup: ``cpu_median_ms / e2e.median_ms``.
        baseline: what the CPU baseline is (``"gcc -O3, 1 thread"``).
        flush_bytes: size of the L2 flush buffer, bytes (0 when not flushing).
        warmup_reps: untimed warm-up calls.
        bytes_in: bytes copied host->device in the end-to-end measurement.
        bytes_out: bytes copied device->host in the end-to-end measurement.
        warnings: things worth a second look (speedup above 10x, events much shorter
            than the synchronized call...).
        slow: timing stopped after the warm-up because the estimate passed the job's
            ``slow_ms``; ``gpu`` then holds the warm-up calls (its median is the estimate)
            and ``e2e``/``sync_call`` are None.
        estimate_ms: the estimate of one call the repetitions were planned from, ms.
        planned_reps: the timed repetitions planned from it (0 when ``slow``).
        cpu_total_s: the summed duration of the CPU baseline runs (``cpu.n`` of them),
            seconds; None when not measured here.
        input_sets: the input sets the timed calls rotated through (2: the trial-0 data
            and a copy that differs in a sparse random subset of elements; 1: the trial-0
            data alone, as before, or when the second set did not fit, which ``warnings``
            then says); 0 in a reference-only job.
        input_set_calls: the candidate's calls in timing per input set (warm-up, timed,
            call + synchronize and end-to-end calls).
        checked_reps: the 1-based numbers of the timed repetitions whose outputs were
            compared with the reference's on their input set (besides the last timed call
            and the last end-to-end run, which are always compared).
        judge_sync: the judge's own clock around each call + synchronize request to the
            candidate's process (the request's round trip included), ms; None in an
            in-process worker (tests) or when not measured (``docs/evaluation.md`` §6).
        judge_ping_ms: the judge-clock ms of an empty request (median of 5), subtracted
            from ``judge_sync`` when the two clocks are compared.
    """

    gpu: TimingStats | None = None
    e2e: TimingStats | None = None
    sync_call: TimingStats | None = None
    cpu: TimingStats | None = None
    cpu_median_ms: float | None = None
    kernel_speedup: float | None = None
    e2e_speedup: float | None = None
    baseline: str = DEFAULT_BASELINE
    flush_bytes: int = 0
    warmup_reps: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    warnings: list[str] = field(default_factory=list)
    slow: bool = False
    estimate_ms: float | None = None
    planned_reps: int = 0
    cpu_total_s: float | None = None
    input_sets: int = 0
    input_set_calls: list[int] = field(default_factory=list)
    checked_reps: list[int] = field(default_factory=list)
    judge_sync: TimingStats | None = None
    judge_ping_ms: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> "ConfigTiming | None":
        if not d:
            return None
        kw = _pick(cls, d)
        for k in ("gpu", "e2e", "sync_call", "cpu", "judge_sync"):
            kw[k] = TimingStats.from_json(d.get(k))
        kw["warnings"] = list(d.get("warnings", []))
        kw["input_set_calls"] = [int(x) for x in d.get("input_set_calls") or []]
        kw["checked_reps"] = [int(x) for x in d.get("checked_reps") or []]
        return cls(**kw)


@dataclass
class ConfigResult:
    """Outcome of one configuration.

    Attributes:
        name, sizes: the configuration.
        status: ``correct``, ``wrong``, ``runtime_error``, ``reference_error``, ``skipped``
            (not reached) or ``reference_only``.
        message: one line saying what happened.
        trials_run: trials completed (the failing one included).
        failed_trial: index of the failing trial, else None.
        seed: the seed triple of the last trial run (``[seed, config_index, trial]``).
        array_roles: array -> role used for this configuration.
        arrays: per-array checks of the last trial run (the failing trial when wrong).
        guard_violations: arrays whose guard bytes (just outside the array) were written:
            ``{"array", "side": "before"|"after", "offset": bytes from the array edge}``.
        timing: :class:`ConfigTiming` when timed.
        ref_ms: host wall time of one reference run during verification, ms.
    """

    name: str
    sizes: dict[str, int]
    status: str
    message: str = ""
    trials_run: int = 0
    failed_trial: int | None = None
    seed: list[int] = field(default_factory=list)
    array_roles: dict[str, str] = field(default_factory=dict)
    arrays: list[ArrayCheck] = field(default_factory=list)
    guard_violations: list[dict[str, Any]] = field(default_factory=list)
    timing: ConfigTiming | None = None
    ref_ms: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ConfigResult":
        kw = _pick(cls, d)
        kw["arrays"] = [ArrayCheck.from_json(a) for a in d.get("arrays", [])]
        kw["timing"] = ConfigTiming.from_json(d.get("timing"))
        return cls(**kw)


@dataclass(kw_only=True)
class EvalResult(Outcome):
    """Outcome of :func:`cudaperf_cli.evaluate.run_evaluation`.

    Attributes:
        status: one of :data:`STATUSES`.
        message: one line: what happened, where (config, trial, phase).
        configs: per-configuration results (those reached).
        array_roles: array -> role (from the first configuration).
        device: device description (name, compute capability, driver, L2 bytes, clocks).
        error: for ``runtime_error``/``reference_error``: ``{"source", "code", "name",
            "string", "call", "config", "trial"}`` (fields that apply).
        phase: the worker's last phase (``candidate``, ``reference``, ``timing.gpu``...).
        elapsed_s: wall time of the whole evaluation, seconds.
        exit_code: the worker's exit status (negative: killed by that signal number).
        signal: the signal name that killed the worker (``SIGSEGV``...), else None.
        stderr_tail: the last lines the worker (and the code it ran) wrote to stderr/stdout.
        warnings: notable things (speedup above 10x, ...), also per config in timings.
        details: free-form extra data (traceback of an internal error, ...).
        summary: headline numbers, see :func:`summarize_result`.
    """

    configs: list[ConfigResult] = field(default_factory=list)
    array_roles: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the candidate is correct on every configuration (and fully timed)."""
        return self.status == CORRECT

    @property
    def verified(self) -> bool:
        """True when the outputs matched on every configuration: ``correct`` or ``slow``."""
        return self.status in (CORRECT, SLOW)

    def config(self, name: str) -> ConfigResult:
        for c in self.configs:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "EvalResult":
        kw = _pick(cls, d)
        kw["configs"] = [ConfigResult.from_json(c) for c in d.get("configs", [])]
        kw["warnings"] = list(d.get("warnings", []))
        kw["details"] = dict(d.get("details") or {})
        kw["summary"] = dict(d.get("summary") or {})
        return cls(**kw)


def summarize_result(configs: Sequence[ConfigResult], baseline: str = DEFAULT_BASELINE) -> dict[str, Any]:
    """Headline numbers of a result (None where not measured).

    ``max_abs_err``/``max_rel_err``: largest over every array check reported;
    ``gpu_ms`` (median kernel time), ``gpu_ms_iqr``, ``e2e_ms``, ``cpu_ms``,
    ``speedup_kernel``, ``speedup_e2e``: from the last timed configuration (ms);
    ``timed_config``: its name; ``baseline``: the CPU baseline's name.
    """
    checks = [a for c in configs for a in c.arrays]
    out: dict[str, Any] = {
        "max_abs_err": max((a.max_abs_err for a in checks), default=None),
        "max_rel_err": max((a.max_rel_err for a in checks), default=None),
        "gpu_ms": None,
        "gpu_ms_iqr": None,
        "e2e_ms": None,
        "cpu_ms": None,
        "speedup_kernel": None,
        "speedup_e2e": None,
        "timed_config": None,
        "baseline": baseline,
    }
    timed = [c for c in configs if c.timing is not None]
    if timed:
        c = timed[-1]
        t = c.timing
        assert t is not None
        out["timed_config"] = c.name
        out["baseline"] = t.baseline
        if t.gpu is not None:
            out["gpu_ms"] = t.gpu.median_ms
            out["gpu_ms_iqr"] = t.gpu.reported_iqr_ms
        if t.e2e is not None:
            out["e2e_ms"] = t.e2e.median_ms
        out["cpu_ms"] = t.cpu_median_ms
        out["speedup_kernel"] = t.kernel_speedup
        out["speedup_e2e"] = t.e2e_speedup
    return out


# ---------------------------------------------------------------------------------------
# Memory plan of a C evaluation
# ---------------------------------------------------------------------------------------

#: Host bytes per compared element of the chunked comparison's temporaries
#: (evaluate/verify.py ``compare_arrays``: float64 copies of both sides, the difference and
#: a few boolean masks per chunk of ``verify.CHUNK`` elements).
COMPARE_BYTES_PER_ELEMENT = 48


def _guard_size(guard_bytes: int) -> int:
    """Guard bytes on each side of a device array: ``guard_bytes`` rounded up to 256."""
    g = max(int(guard_bytes), 0)
    return (g + 255) // 256 * 256


def plan_c_memory(
    job_or_problem: "EvalJob | CProblem",
    configs: Sequence[ConfigSpec | Mapping[str, Any]] | None = None,
    *,
    l2_bytes: int | None,
    timing: TimingSettings | None = None,
    guard_bytes: int | None = None,
    array_roles: Mapping[str, str] | None = None,
) -> MemoryPlan:
    """The memory one C evaluation holds at once, from the arrays' shapes and dtypes.

    Args:
        job_or_problem: an :class:`EvalJob` (its params, configs, timing, guard bytes,
            roles; ``cand_lib`` None plans the reference-only job: no device memory), or a
            :class:`~cudaperf_cli.core.CProblem` (a candidate evaluation; ``configs``
            default to one timed ``main`` configuration at ``problem.sizes``).
        configs: the configurations (:class:`ConfigSpec` or their dicts), for a problem.
        l2_bytes: the device's L2 size, bytes (sizes the flush buffer; None or 0: the
            minimum, 256 MiB, see ``timing.flush_size``).
        timing, guard_bytes, array_roles: for a problem (a job carries its own); unknown
            roles count as read-write unless the array is ``const``.

    Returns:
        A :class:`~cudaperf_cli.evaluate.memory.MemoryPlan` (bytes).  With ``bytes(c)`` the
        arrays of configuration ``c`` once, ``dev(c)`` the same plus ``2 x guard`` per array
        (guards rounded up to 256 bytes), ``rw(c)`` its read-write arrays and ``out(c)``
        every array that is not read-only:

        * ``footprint_bytes`` = ``bytes(main)``, main being the last timed configuration
          (else the largest);
        * ``gpu_bytes`` = max(max over configs of ``dev(c)``, max over timed configs of
          ``dev(c) + 2 x reads(c)`` + the flush buffer), ``reads(c)`` being the arrays
          that are not write-only: the device copies of the timing's two input sets
          (``timing.input_sets``, the set copied into the candidate's arrays before every
          timed call); with one input set ``dev(c) + rw(c)`` (the pristine copies
          restored before every timed call).  The worker verifies one configuration at a
          time and frees its arrays before timing.  0 for a reference-only job.
          ``optional_bytes``: what the second set adds (the worker drops it when the
          device is short);
        * ``host_bytes`` = the inputs of every trial of every configuration (made before
          the device work) + the reference outputs of every trial (``out(c)``, held when
          the worker runs the reference itself) + one working copy (a reference run, the
          CPU baseline) + the candidate's results read back (one configuration) + the
          chunked comparison's temporaries + with two input sets, for each timed
          configuration, the second set's arrays and its reference outputs
          (``reads(c) + out(c)``) + twice the staging buffer shared with the candidate's
          process (the largest array, or a timed configuration's ``reads(c) + out(c)``;
          resident in both processes).  A reference-only job holds one trial at a time:
          3 x max ``bytes(c)``.

    Raises:
        ValueError: a configuration lacks a size or gives a negative extent.
    """
    import numpy as np

    from cudaperf_cli.evaluate.timing import flush_size
    from cudaperf_cli.evaluate.verify import CHUNK

    if isinstance(job_or_problem, EvalJob):
        job = job_or_problem
        params = job.parsed_params()
        cfgs = list(job.configs)
        ts = job.timing
        guard = job.guard_bytes
        roles = dict(job.array_roles)
        candidate = job.cand_lib is not None
    else:
        problem = job_or_problem
        params = list(problem.params)
        cfgs = [c if isinstance(c, ConfigSpec) else ConfigSpec.from_json(c) for c in configs] \
            if configs is not None else [ConfigSpec("main", dict(problem.sizes), trials=1, time=True)]
        ts = timing or TimingSettings()
        guard = GUARD_BYTES if guard_bytes is None else guard_bytes
        roles = dict(array_roles or {})
        candidate = True
    if not cfgs:
        raise ValueError("no configurations to plan")
    arrays = [p for p in params if isinstance(p, ArrayParam)]
    g = _guard_size(guard)

    def role(p: ArrayParam) -> str:
        return roles.get(p.name) or (READ_ONLY if p.const else READ_WRITE)

    def sizes_of(c: ConfigSpec) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in arrays:
            shape = p.shape(c.sizes)
            if any(e < 0 for e in shape):
                raise ValueError(f"array '{p.name}' has a negative extent {shape} in config '{c.name}'")
            n = 1
            for e in shape:
                n *= int(e)
            out[p.name] = n
        return out

    counts = {c.name: sizes_of(c) for c in cfgs}
    item = {p.name: int(np.dtype(p.dtype).itemsize) for p in arrays}

    def total(c: ConfigSpec) -> int:
        return sum(counts[c.name][p.name] * item[p.name] for p in arrays)

    def dev(c: ConfigSpec) -> int:
        return total(c) + 2 * g * len(arrays)

    def rw(c: ConfigSpec) -> int:
        return sum(counts[c.name][p.name] * item[p.name] for p in arrays if role(p) == READ_WRITE)

    def out_bytes(c: ConfigSpec) -> int:
        return sum(counts[c.name][p.name] * item[p.name] for p in arrays if role(p) != READ_ONLY)

    def reads(c: ConfigSpec) -> int:
        return sum(counts[c.name][p.name] * item[p.name] for p in arrays if role(p) != WRITE_ONLY)

    timed = [c for c in cfgs if c.time]
    main = timed[-1] if timed else max(cfgs, key=total)
    footprint = total(main)
    biggest = max(total(c) for c in cfgs)
    flush = flush_size(l2_bytes, ts) if (timed and candidate) else 0
    two = candidate and int(ts.input_sets) >= 2
    optional = 0
    if candidate:
        verify_peak = max(dev(c) for c in cfgs)
        one_set = max((dev(c) + rw(c) for c in timed), default=0) + flush
        two_sets = max((dev(c) + 2 * reads(c) for c in timed), default=0) + flush
        gpu = max(verify_peak, two_sets if two else one_set)
        optional = gpu - max(verify_peak, one_set) if two else 0
        most = max((counts[c.name][p.name] for c in cfgs for p in arrays), default=0)
        scratch = min(CHUNK, most) * COMPARE_BYTES_PER_ELEMENT
        host = (sum(c.trials * total(c) for c in cfgs) + sum(c.trials * out_bytes(c) for c in cfgs)
                + 2 * biggest + scratch)
        if two:  # the second input set of each timed configuration and its reference outputs
            host += sum(reads(c) + out_bytes(c) for c in timed)
        # the staging buffer shared with the candidate's process (its largest use: one
        # array, or an end-to-end run's inputs and outputs), counted in both processes'
        # resident memory
        most_bytes = max((counts[c.name][p.name] * item[p.name] for c in cfgs for p in arrays),
                         default=0)
        staging = max([most_bytes, *(reads(c) + out_bytes(c) for c in timed)])
        host += 2 * staging
    else:
        gpu = 0
        host = 3 * biggest
    timing_main = candidate and main.time
    parts = {"arrays": footprint, "guards": 2 * g * len(arrays) if candidate else 0,
             "pristine": (reads(main) if two else rw(main)) if timing_main else 0,
             "input_set_1": reads(main) if (two and timing_main) else 0, "flush": flush}
    return MemoryPlan(footprint_bytes=footprint, gpu_bytes=gpu, host_bytes=host,
                      flush_bytes=flush, parts=parts, optional_bytes=optional)


__all__ = [
    "GUARD_BYTES",
    "MIN_IQR_SAMPLES",
    "ArrayCheck",
    "CORRECT",
    "CRASH",
    "ConfigResult",
    "ConfigSpec",
    "ConfigTiming",
    "EvalJob",
    "EvalResult",
    "NO_DEVICE",
    "READ_ONLY",
    "READ_WRITE",
    "REFERENCE_ERROR",
    "REFERENCE_ONLY",
    "ROLES",
    "RUNTIME_ERROR",
    "STATUSES",
    "TIMEOUT",
    "TimingSettings",
    "TimingStats",
    "WRITE_ONLY",
    "WRONG",
    "json_float",
    "plan_c_memory",
    "summarize_result",
]
