"""PyTorch problems: the evaluation job, its result, and the parent that runs the worker.

A *problem* is a KernelBench-format ``.py`` file (``class Model(nn.Module)``,
``get_inputs()``, ``get_init_inputs()``, module-level int constants setting the shapes).  A
*candidate* defines ``class ModelNew(nn.Module)`` in one of two formats (see
``docs/pytorch-evaluation.md``):

* ``"fast"``: ``kernel.cu`` with ``extern "C"`` launchers + ``model.py`` loading it through
  :func:`cudaperf_cli.torch_runtime.load_cuda`;
* ``"load_inline"``: one ``.py`` building its CUDA with
  ``torch.utils.cpp_extension.load_inline``.

:func:`run_torch_evaluation` checks the candidate's Python syntax, builds it with its own time
limit (``fast``: nvcc in this process's children; ``load_inline``: a build child importing
the module with ``TORCH_EXTENSIONS_DIR`` set to a directory keyed by the candidate's content
hash), then runs ``python -m cudaperf_cli.evaluate.torch_worker`` with the job as JSON on
stdin, under the same protocol as the C path's worker (``docs/evaluation.md`` section 3):
JSON result on stdout, the phase in ``$CUDAPERF_WORKER_STATE``, the process group killed at
the time limit.  Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from cudaperf_cli.evaluate.outcome import Outcome
from cudaperf_cli.core import to_jsonable
from cudaperf_cli.evaluate.job import (
    CORRECT,
    CRASH,
    NO_DEVICE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
    RUNTIME_ERROR,
    TIMEOUT,
    WRONG,
    TimingSettings,
    TimingStats,
    _pick,
)
from cudaperf_cli.evaluate.child import ChildRun, PendingChild, run_child, start_child, where as _where
from cudaperf_cli.evaluate.memory import MemoryPlan
from cudaperf_cli.evaluate.timing import flush_size

# ---------------------------------------------------------------------------------------
# Statuses, formats, guards
# ---------------------------------------------------------------------------------------

from cudaperf_cli.statuses import COMPILE_ERROR, COMPILE_TIMEOUT, GUARD_REJECTED, SLOW  # noqa: E402

#: Every status of a :class:`TorchEvalResult` (names from ``cudaperf_cli/statuses.py``):
#: the C path's (``docs/evaluation.md`` §7), the build stage's two, and ``guard_rejected``.
TORCH_STATUSES = (
    CORRECT,
    SLOW,
    WRONG,
    RUNTIME_ERROR,
    TIMEOUT,
    CRASH,
    NO_DEVICE,
    REFERENCE_ERROR,
    REFERENCE_ONLY,
    COMPILE_ERROR,
    COMPILE_TIMEOUT,
    GUARD_REJECTED,
)

FAST = "fast"
LOAD_INLINE = "load_inline"
FORMATS = (FAST, LOAD_INLINE)
#: ``TorchEvalJob.mode``: evaluate a candidate, or measure the run's baseline (no candidate).
MODES = ("candidate", "baseline")

# Dynamic guard ids (docs/pytorch-evaluation.md, "Guards").
NO_CUSTOM_KERNEL = "no_custom_kernel"
TORCH_FALLBACK = "torch_fallback"
SIDE_STREAM = "side_stream"
RESULT_CACHE = "result_cache"
SHAPE_SPECIALISED = "shape_specialised"
LOWER_PRECISION = "lower_precision"
PATCHING = "patching"
INHERITS_MODEL = "inherits_model"
ALIASING = "aliasing"
TIMED_RESULT = "timed_result"
OUTPUT_TYPE = "output_type"
BACKGROUND_THREAD = "background_thread"
DYNAMIC_GUARDS = (
    NO_CUSTOM_KERNEL,
    TORCH_FALLBACK,
    SIDE_STREAM,
    RESULT_CACHE,
    SHAPE_SPECIALISED,
    LOWER_PRECISION,
    PATCHING,
    INHERITS_MODEL,
    ALIASING,
    TIMED_RESULT,
    OUTPUT_TYPE,
    BACKGROUND_THREAD,
)

#: Per output dtype ``{"atol", "rtol"}``; ``|cand - ref| <= atol + rtol * |ref|``.
#: float32/float16/bfloat16: KernelBench ``src/kernelbench/eval.py``
#: ``get_tolerance_for_precision`` (fp32 1e-4, fp16/bf16 1e-2, after torchbench's
#: ``env_check.py``), used there as ``atol = rtol``.  float64: the C path's rule
#: (``docs/evaluation.md`` §5).  Integer and bool outputs are compared exactly.
DEFAULT_TORCH_TOLERANCES: dict[str, dict[str, float]] = {
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 1e-2, "rtol": 1e-2},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
    "float64": {"atol": 1e-9, "rtol": 1e-7},
}

#: Names of the baselines every speedup is stated against.
BASELINE_EAGER = "PyTorch eager (fp32, TF32 off)"
BASELINE_COMPILE = "torch.compile (mode=default, fp32, TF32 off)"

#: Environment of the children (on top of the C path's STATE_ENV / HOOKS_ENV).
EXT_DIR_ENV = "TORCH_EXTENSIONS_DIR"
TORCH_WORKER_MODULE = "cudaperf_cli.evaluate.torch_worker"


def torch_tolerance(
    dtype: str, overrides: Mapping[str, Mapping[str, float]] | None = None
) -> tuple[float, float]:
    """``(atol, rtol)`` for an output dtype name (``"float32"``, ``"torch.float32"``);
    ``(0, 0)`` (exact) for integer and bool dtypes; ``overrides`` replaces keys per dtype."""
    name = dtype.replace("torch.", "")
    base = DEFAULT_TORCH_TOLERANCES.get(name)
    if base is None:
        if name.startswith(("int", "uint", "bool")):
            return 0.0, 0.0
        base = DEFAULT_TORCH_TOLERANCES["float32"]
    tol = dict(base)
    tol.update((overrides or {}).get(name, {}))
    return float(tol["atol"]), float(tol["rtol"])


# ---------------------------------------------------------------------------------------
# Job
# ---------------------------------------------------------------------------------------


@dataclass
class TorchEvalJob:
    """Everything the worker needs to verify and time one PyTorch candidate.

    Attributes:
        problem: path of the KernelBench-format problem ``.py``.
        candidate: the candidate's files: exactly one ``.py`` (defines ``ModelNew``) plus,
            for the fast format, the ``.cu`` file(s) it loads.
        format: ``"fast"`` or ``"load_inline"``.
        device: CUDA device ordinal.
        seed: base seed.  Models are built after ``torch.manual_seed(seed)``; trial ``t`` of
            configuration ``c`` draws its inputs after ``torch.manual_seed`` of a seed
            derived from ``(seed, c, t)`` (:func:`trial_seed`).
        trials: verification trials per shape configuration (>= 3), each on fresh inputs.
        shapes: alternative shape configurations, each a dict of module constant overrides
            (``{"batch_size": 7}``); the default configuration (no overrides) always runs
            first.  A candidate correct on the default but not on these is rejected with
            ``shape_specialised``.
        tolerances: per-dtype overrides of :data:`DEFAULT_TORCH_TOLERANCES`, e.g.
            ``{"float32": {"atol": 1e-3, "rtol": 1e-3}}``.
        timing: :class:`~cudaperf_cli.evaluate.job.TimingSettings` (``warmup_reps``,
            ``min_reps``, ``max_reps``, ``min_total_ms``, ``max_total_ms``, ``flush_l2``,
            ``flush_bytes``, ``sync_reps`` apply; ``e2e_reps`` does not).
        time: time the candidate and the baselines after verification.
        compile_baseline: also time ``torch.compile(Model)``.
        allow_torch_ops: PyTorch matmul and convolution ops (cuBLAS/cuDNN) may do work in
            ``ModelNew.forward`` (:data:`MATMUL_CONV_OPS` in the worker); other compute
            ops stay refused by ``torch_fallback``.
        allowed_ops: more ``aten`` op names (``"softmax"``) allowed in ``forward``.
        allow_lower_precision: skip the ``lower_precision`` guard (TF32/fp16/bf16 allowed).
        lower_precision_factor: ``k`` of the ``lower_precision`` guard: the candidate's
            normwise relative error against a float64 reference must stay within ``k`` x
            the float32 reference's own error ...
        lower_precision_floor: ... or below this relative error (2**-16).
        disabled_guards: dynamic guard ids not to run (tests, diagnosis).
        build_timeout_s: time limit of the build phase (nvcc, or the load_inline import),
            seconds; separate from the evaluation's ``timeout_s``.
        arch: nvcc target (``"sm_90"``); None: detected (``resolve_arch``).
        build_root: cache of builds; None: ``$CUDAPERF_TORCH_BUILD_ROOT`` or
            ``default_cache_root() / "torch"``.  load_inline builds go to
            ``<build_root>/ext/<content hash>``.
        static_guards: run ``cudaperf_cli.evaluate.static_guards.check_candidate_source``
            on the candidate's sources first (when that module exists); a violation is
            ``guard_rejected`` with the static guard's id before anything runs.
        mode: ``"candidate"`` (build, guard, verify and time ``candidate``) or
            ``"baseline"`` (no candidate: the reference alone at the default configuration:
            its footprint and peak memory, whether its outputs depend on the inputs, and the
            eager and torch.compile times that every candidate of the run is compared with).
        baseline_ms: ``{"eager": ms, "compile": ms or None}`` measured by the run's baseline
            job; a candidate job then times the candidate alone and states its speedups
            against these.  None: the candidate job times eager (and compile) itself.
        reference_peak_bytes: the device memory the reference alone held at the default
            configuration (the baseline job's ``peak_gpu_bytes``; its intermediates and
            library workspace included), bytes; None: unknown.  The float64 comparison at
            the default configuration is planned with it (about twice that in float64).
        slow_ms: a verified candidate whose estimated time passes this (ms) stops timing early
            with status ``slow``; None: never.
        modifies_inputs: the problem's forward modifies an input in place (the loader's
            ``TorchProblem.modifies_inputs``): the candidate then gets copies of the inputs
            and its in-place results are compared with the reference's.  Otherwise the
            candidate and the reference share one set of input tensors (no copies: an input
            of KernelBench level 1 reaches 17 GB), and an input the candidate writes is
            caught by a fingerprint of its bytes.
        debug_hook: test-only behaviour (the C worker's hooks: ``sleep:S``, ``segv``...),
            honoured only with ``CUDAPERF_TEST_HOOKS=1``.
        build_only: no usable device here (the run's probe said so): the candidate is
            checked and built, no evaluation worker is started (it imported torch, about
            5 s, only to find no device), and a successful build ends ``no_device``.
    """

    problem: str
    candidate: list[str]
    format: str = FAST
    device: int = 0
    seed: int = 42
    trials: int = 3
    shapes: list[dict[str, int]] = field(default_factory=list)
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    timing: TimingSettings = field(default_factory=TimingSettings)
    time: bool = True
    compile_baseline: bool = True
    allow_torch_ops: bool = False
    allowed_ops: list[str] = field(default_factory=list)
    allow_lower_precision: bool = False
    lower_precision_factor: float = 64.0
    lower_precision_floor: float = 2.0**-16
    disabled_guards: list[str] = field(default_factory=list)
    build_timeout_s: float = 300.0
    arch: str | None = None
    build_root: str | None = None
    static_guards: bool = True
    mode: str = "candidate"
    baseline_ms: dict[str, float | None] | None = None
    reference_peak_bytes: int | None = None
    slow_ms: float | None = None
    modifies_inputs: bool = False
    debug_hook: str | None = None
    build_only: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.candidate, (str, Path)):
            self.candidate = [self.candidate]  # type: ignore[list-item]
        self.candidate = [str(p) for p in self.candidate]
        self.problem = str(self.problem)
        if self.build_root is not None:
            self.build_root = str(self.build_root)
        if not isinstance(self.timing, TimingSettings):
            self.timing = TimingSettings.from_json(self.timing)  # type: ignore[arg-type]
        self.shapes = [dict(s) for s in self.shapes]

    # -- files -------------------------------------------------------------------------

    @property
    def module_path(self) -> str:
        """The candidate's ``.py`` file."""
        py = [p for p in self.candidate if p.endswith(".py")]
        if len(py) != 1:
            raise ValueError(f"the candidate needs exactly one .py file, got {py or 'none'}")
        return py[0]

    @property
    def cuda_files(self) -> list[str]:
        return [p for p in self.candidate if p.endswith((".cu", ".cuh"))]

    def content_key(self) -> str:
        """SHA-256 (hex, 24 chars) of the format and every candidate file (name and bytes)."""
        h = hashlib.sha256(self.format.encode())
        for p in sorted(self.candidate, key=lambda q: Path(q).name):
            h.update(b"\0" + Path(p).name.encode() + b"\0")
            h.update(Path(p).read_bytes())
        return h.hexdigest()[:24]

    def build_root_path(self) -> Path:
        if self.build_root:
            return Path(self.build_root)
        from cudaperf_cli.torch_runtime import default_build_root

        return default_build_root()

    def extensions_dir(self) -> Path:
        """``TORCH_EXTENSIONS_DIR`` of this candidate: ``<build_root>/ext/<content key>``."""
        return self.build_root_path() / "ext" / self.content_key()

    # -- JSON ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TorchEvalJob":
        kw = _pick(cls, d)
        kw["timing"] = TimingSettings.from_json(d.get("timing"))
        return cls(**kw)

    def validate(self) -> None:
        """Check the job's structure and that its files exist.

        Raises:
            ValueError: with a message naming the problem (a bug upstream).
        """
        if self.mode not in MODES:
            raise ValueError(f"mode '{self.mode}' is not one of {MODES}")
        if self.format not in FORMATS:
            raise ValueError(f"format '{self.format}' is not one of {FORMATS}")
        if self.trials < 3:
            raise ValueError(f"trials must be at least 3, got {self.trials}")
        if self.device < 0:
            raise ValueError(f"device must be >= 0, got {self.device}")
        for p in [self.problem, *self.candidate]:
            if not Path(p).is_file():
                raise ValueError(f"file not found: {p}")
        if not self.problem.endswith(".py"):
            raise ValueError(f"the problem must be a .py file, got {self.problem}")
        if self.mode == "baseline":
            if self.candidate:
                raise ValueError("a baseline job has no candidate files")
        else:
            self.module_path  # noqa: B018 - raises ValueError
            if self.format == FAST and not self.cuda_files:
                raise ValueError("the fast format needs a .cu file besides the .py")
        unknown = [g for g in self.disabled_guards if g not in DYNAMIC_GUARDS]
        if unknown:
            raise ValueError(f"unknown guard ids {unknown}; known: {', '.join(DYNAMIC_GUARDS)}")
        for dt, tol in self.tolerances.items():
            bad = [k for k in tol if k not in ("atol", "rtol")]
            if bad or any(not (float(v) >= 0) for v in tol.values()):
                raise ValueError(f"tolerances['{dt}'] must be {{'atol': >=0, 'rtol': >=0}}, got {tol}")
        if self.shapes:
            from cudaperf_cli.core import ProblemError
            from cudaperf_cli.problems.pytorch import read_constants

            try:
                consts = read_constants(Path(self.problem).read_text(), Path(self.problem).name)
            except ProblemError as exc:
                raise ValueError(str(exc)) from None
            for i, s in enumerate(self.shapes):
                if not s:
                    raise ValueError(f"shapes[{i}] is empty")
                for k, v in s.items():
                    if k not in consts:
                        raise ValueError(
                            f"shapes[{i}]: '{k}' is not a module-level int constant of the "
                            f"problem (those are: {', '.join(consts) or 'none'})"
                        )
                    if not isinstance(v, int) or isinstance(v, bool):
                        raise ValueError(f"shapes[{i}]['{k}'] must be an int, got {v!r}")
        if self.lower_precision_factor < 1 or self.lower_precision_floor < 0:
            raise ValueError("lower_precision_factor must be >= 1 and the floor >= 0")


def trial_seed(seed: int, config_index: int, trial: int) -> int:
    """The ``torch.manual_seed`` value of trial ``trial`` of configuration ``config_index``
    (a 63-bit hash of the triple, stable across machines)."""
    h = hashlib.sha256(f"{int(seed)}:{int(config_index)}:{int(trial)}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


# ---------------------------------------------------------------------------------------
# Result
# ---------------------------------------------------------------------------------------


@dataclass
class OutputCheck:
    """Comparison of one output (tensor or value) of one trial, candidate vs reference.

    Attributes:
        path: where in the returned structure (``"out"``, ``"out[1]"``, ``"out['y']"``).
        ok: shape, dtype and every element within tolerance.
        shape, dtype: the candidate's (None when not a tensor).
        expected_shape, expected_dtype: the reference's.
        n_elements: elements compared.
        n_mismatch: elements out of tolerance (NaN anywhere in the candidate counts).
        n_nan: NaNs in the candidate's output.
        max_abs_err: largest ``|cand - ref|`` where both are finite.
        max_rel_err: largest ``|cand - ref| / |ref|`` where both are finite and ref != 0.
        atol, rtol: the tolerance applied (0, 0: exact).
        message: one line (the first problem found).
        worst_mismatch: ``{"index": [i, j, ...], "got", "expected", "abs_err", "rel_err"}``
            at the element exceeding its tolerance the most (a NaN or mismatched infinity
            first), or None.
    """

    path: str
    ok: bool
    shape: list[int] | None = None
    dtype: str | None = None
    expected_shape: list[int] | None = None
    expected_dtype: str | None = None
    n_elements: int = 0
    n_mismatch: int = 0
    n_nan: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0
    message: str = ""
    worst_mismatch: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "OutputCheck":
        return cls(**_pick(cls, d))


@dataclass
class TorchConfigResult:
    """Outcome of one shape configuration.

    Attributes:
        name: ``"default"``, ``"alt1"``, ``"alt2"``...
        constants: the module constant overrides (empty for the default).
        status: ``correct``, ``wrong``, ``runtime_error``, ``guard_rejected`` or ``skipped``.
        message: one line.
        trials_run: trials completed (the failing one included).
        failed_trial: index of the failing trial, else None.
        seeds: the ``torch.manual_seed`` value of each trial run.
        inputs: ``[{"shape": [...], "dtype": "float32"} | {"value": repr}]`` of
            ``get_inputs()`` in this configuration.
        outputs: checks of the last trial run (the failing one when wrong).
        lower_precision: ``{"candidate_rel_err", "fp32_reference_rel_err", "threshold"}``
            measured against the float64 reference, or None when not measured.
    """

    name: str
    constants: dict[str, int]
    status: str
    message: str = ""
    trials_run: int = 0
    failed_trial: int | None = None
    seeds: list[int] = field(default_factory=list)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[OutputCheck] = field(default_factory=list)
    lower_precision: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TorchConfigResult":
        kw = _pick(cls, d)
        kw["outputs"] = [OutputCheck.from_json(o) for o in d.get("outputs", [])]
        return cls(**kw)


@dataclass
class TorchTiming:
    """Timing of the default configuration (all times in ms).

    Attributes:
        config: the configuration timed (``"default"``).
        candidate: ``ModelNew.forward``: CUDA events on the current stream, L2 flushed
            before each repetition (None in a baseline job; for a ``slow`` candidate the
            warm-up calls that gave the estimate).
        candidate_estimate_ms: the estimate of one candidate call from the warm-up (ms).
        slow_ms: the slow limit the estimate was held against (ms), or None.
        eager: ``Model.forward`` (PyTorch eager), same method and inputs.
        compile: ``torch.compile(Model)`` (mode default), same; None if not measured.
        compile_error: why ``torch.compile`` could not be timed (eager is kept), or None.
        sync_call: host wall time of candidate forward + ``torch.cuda.synchronize()``.
        speedup_eager: ``eager.median_ms / candidate.median_ms``.
        speedup_compile: ``compile.median_ms / candidate.median_ms`` (None without it).
        baselines: ``{"eager": BASELINE_EAGER, "compile": BASELINE_COMPILE}``.
        suspicious: a speedup above 10x (worth a second look).
        flush_bytes: L2 flush buffer, bytes (0: no flush).
        warmup_reps: untimed calls before each measurement.
        warnings: things worth a second look.
        input_sets: the input sets the candidate's timed calls rotated through (2: the
            timing inputs and a copy that differs in a sparse random subset of elements,
            copied into the candidate's argument tensors before each call; 1: the timing
            inputs alone, as before, when the second set could not be made or did not fit,
            which ``warnings`` then says, or with ``timed_result`` disabled); 0 in a
            baseline job.
        input_set_calls: the candidate's calls in timing per input set.
        checked_reps: the 1-based numbers of the timed repetitions whose outputs were
            compared with the reference's on their input set (guard ``timed_result``).
    """

    config: str
    candidate: TimingStats | None = None
    eager: TimingStats | None = None
    compile: TimingStats | None = None
    compile_error: str | None = None
    sync_call: TimingStats | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    baselines: dict[str, str] = field(
        default_factory=lambda: {"eager": BASELINE_EAGER, "compile": BASELINE_COMPILE}
    )
    suspicious: bool = False
    flush_bytes: int = 0
    warmup_reps: int = 0
    candidate_estimate_ms: float | None = None
    slow_ms: float | None = None
    warnings: list[str] = field(default_factory=list)
    input_sets: int = 0
    input_set_calls: list[int] = field(default_factory=list)
    checked_reps: list[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> "TorchTiming | None":
        if not d:
            return None
        kw = _pick(cls, d)
        for k in ("candidate", "eager", "compile", "sync_call"):
            kw[k] = TimingStats.from_json(d.get(k))
        return cls(**kw)


@dataclass(kw_only=True)
class TorchEvalResult(Outcome):
    """Outcome of :func:`run_torch_evaluation`.

    Attributes:
        status: one of :data:`TORCH_STATUSES`.
        message: one line: what happened, where.
        configs: per shape configuration results (those reached).
        guard: for ``guard_rejected``: ``{"id": one of DYNAMIC_GUARDS (or a static guard's
            id), "reason", "config", "trial"}``.
        worst_mismatch: for ``wrong``: the failing output's worst element
            (``{"path", "index", "got", "expected", "abs_err", "rel_err"}``), or None.
        timing: :class:`TorchTiming`, when timed.
        build: ``{"format", "seconds", "cached", "errors", "arch", "extensions_dir",
            "libs"}`` of the build phase.
        profile: what the profiled forward launched: ``{"gpu_activities", "kernels":
            [{"name", "stream", "owner", "custom"}], "custom_kernels", "torch_ops", "disallowed_ops",
            "dtoh_copies", "side_stream_launches", "current_streams", "notes"}``.
        device: the device (name, arch, SMs, L2 bytes, torch and CUDA versions).
        error: for ``runtime_error``/``compile_error``/``reference_error``: ``{"source":
            "import"|"init"|"state_dict"|"forward"|"synchronize"|"reference"|..., "type",
            "message", "config", "trial", "traceback"}`` (fields that apply).
        phase: the worker's last phase.
        elapsed_s: wall time of the whole evaluation (build included), seconds.
        exit_code, signal, stderr_tail: of the evaluation worker.
        warnings: notable things (speedup above 10x, a guard that could not run...).
        details: free-form extra data.
        summary: headline numbers, see :func:`summarize_torch_result`.
        degenerate: (baseline jobs) the reference's outputs were the same for two input
            draws at the default configuration: they do not depend on the inputs.
    """

    configs: list[TorchConfigResult] = field(default_factory=list)
    guard: dict[str, Any] | None = None
    worst_mismatch: dict[str, Any] | None = None
    timing: TorchTiming | None = None
    build: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    degenerate: bool | None = None

    @property
    def ok(self) -> bool:
        return self.status == CORRECT

    def config(self, name: str) -> TorchConfigResult:
        for c in self.configs:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TorchEvalResult":
        kw = _pick(cls, d)
        kw["configs"] = [TorchConfigResult.from_json(c) for c in d.get("configs", [])]
        kw["timing"] = TorchTiming.from_json(d.get("timing"))
        kw["warnings"] = list(d.get("warnings", []))
        kw["details"] = dict(d.get("details") or {})
        kw["summary"] = dict(d.get("summary") or {})
        kw["build"] = dict(d.get("build") or {})
        return cls(**kw)


def summarize_torch_result(
    configs: Sequence[TorchConfigResult], timing: TorchTiming | None
) -> dict[str, Any]:
    """Headline numbers (None where not measured): ``max_abs_err``/``max_rel_err`` over
    every output check reported; ``candidate_ms``, ``candidate_ms_iqr``, ``eager_ms``,
    ``compile_ms`` (medians, ms); ``speedup_eager``, ``speedup_compile``; ``baseline_eager``,
    ``baseline_compile`` (the names); ``suspicious``; ``gpu_ms`` (= ``candidate_ms``, the key
    the C summary uses too).  A ``slow`` candidate's ``candidate_ms`` is its estimate."""
    checks = [o for c in configs for o in c.outputs]
    out: dict[str, Any] = {
        "max_abs_err": max((o.max_abs_err for o in checks), default=None),
        "max_rel_err": max((o.max_rel_err for o in checks), default=None),
        "candidate_ms": None,
        "candidate_ms_iqr": None,
        "eager_ms": None,
        "compile_ms": None,
        "speedup_eager": None,
        "speedup_compile": None,
        "baseline_eager": BASELINE_EAGER,
        "baseline_compile": BASELINE_COMPILE,
        "suspicious": False,
    }
    if timing is not None:
        if timing.candidate is not None:
            out["candidate_ms"] = timing.candidate.median_ms
            out["candidate_ms_iqr"] = timing.candidate.reported_iqr_ms
        if timing.candidate_estimate_ms is not None and timing.slow_ms is not None and (
                timing.candidate_estimate_ms > timing.slow_ms):
            out["candidate_ms"] = timing.candidate_estimate_ms
        out["eager_ms"] = timing.eager.median_ms if timing.eager else None
        out["compile_ms"] = timing.compile.median_ms if timing.compile else None
        out["speedup_eager"] = timing.speedup_eager
        out["speedup_compile"] = timing.speedup_compile
        out["suspicious"] = timing.suspicious
    out["gpu_ms"] = out["candidate_ms"]  # the name both kinds' summaries share
    return out


# ---------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------

#: Phases in which only the problem's code (Model, get_inputs) runs.
_REFERENCE_PHASES = {"load_problem", "reference", "inputs", "reference.fp64"}

_PHASE_WORDS = {
    "start": "while starting",
    "gpu_wait": "while waiting for the GPU",
    "import_torch": "while importing PyTorch",
    "device": "while opening the CUDA device",
    "load_problem": "while loading the problem",
    "import_candidate": "while importing the candidate",
    "build": "while building the candidate",
    "construct": "while constructing Model and ModelNew",
    "inputs": "while generating inputs",
    "candidate": "in ModelNew.forward",
    "candidate.sync": "in the synchronize after ModelNew.forward",
    "reference": "in Model.forward",
    "reference.fp64": "in the float64 reference run",
    "compare": "while comparing outputs",
    "guards.profile": "in the profiled forward",
    "guards.result_cache": "in the repeated-call check",
    "timing.candidate": "while timing ModelNew",
    "timing.eager": "while timing PyTorch eager",
    "timing.compile": "while compiling/timing torch.compile(Model)",
    "timing.check": "while checking the output after timing",
    "done": "after finishing",
}


def _run_child(
    args: list[str], job: TorchEvalJob, timeout_s: float, env: Mapping[str, str], *,
    gpu: int | None = None, host_memory_limit_bytes: int | None = None,
) -> ChildRun:
    """One worker child under the evaluation protocol (:func:`cudaperf_cli.evaluate.child.
    run_child`): the GPU gate and lock when ``gpu`` is given, the host-memory bound."""
    return run_child(TORCH_WORKER_MODULE, args, job.to_json(), timeout_s=timeout_s, gpu=gpu,
                     env=env, host_memory_limit_bytes=host_memory_limit_bytes,
                     prepare_timeout_s=PREPARE_TIMEOUT_S)


def _start_worker(job: TorchEvalJob, timeout_s: float, env: Mapping[str, str],
                  footprint_bytes: int | None) -> PendingChild:
    """The evaluation worker, started now under the GPU gate (:func:`start_child`): it
    prepares (imports torch, opens the device, loads the problem) without the per-GPU lock
    and waits at ``ready`` for ``go()``; the time limit starts once it holds the lock."""
    return start_child(TORCH_WORKER_MODULE, [], job.to_json(), timeout_s=timeout_s, gpu=job.device,
                       env=env, host_memory_limit_bytes=host_memory_limit(footprint_bytes),
                       prepare_timeout_s=PREPARE_TIMEOUT_S)


def host_memory_limit(job_footprint: int | None, host_total: int | None = None) -> int | None:
    """The host-memory bound of a PyTorch evaluation child, bytes: the worker itself
    (Python, torch, the CUDA context: about 3 GB) plus the footprint once more (inputs drawn
    on the host by a ``get_inputs`` that names ``device='cpu'``), at least
    :data:`HOST_BASE_BYTES`, at most 3/4 of the machine.  None when the machine's memory is
    unknown."""
    from cudaperf_cli.evaluate.memory import host_memory_bytes

    total = host_total if host_total is not None else host_memory_bytes()
    if total is None:
        return None
    want = HOST_BASE_BYTES + int(job_footprint or 0)
    return int(min(max(want, HOST_BASE_BYTES), 0.75 * total))


#: Host bytes a PyTorch worker may always use (Python, torch, CUDA context, compile caches).
HOST_BASE_BYTES = 8 << 30
#: Seconds a worker may take to start, import torch, open the device and load the problem.
PREPARE_TIMEOUT_S = 300.0


def plan_torch_memory(problem: Any, *, l2_bytes: int | None = None,
                      timing: TimingSettings | None = None) -> MemoryPlan:
    """The memory plan of one PyTorch evaluation, from the loader's footprint (meta device).

    With I, O, P the main configuration's input, output and parameter + buffer bytes
    (``TorchProblem.footprint``), one evaluation holds at once at most, on the device:
    the inputs (I, shared by the candidate and the reference; a second copy for problems
    whose forward writes its inputs; three copies while the candidate is timed with two
    input sets: the timing inputs, the second set and the candidate's working copy), the
    candidate's and the reference's outputs (2 O),
    both models' parameters and buffers (2 P), comparison temporaries (at most about O, in
    chunks), and the L2-flush buffer: ``gpu_bytes = 3 x footprint + flush`` is the bound
    planned (the models' own intermediate tensors come on top of I + 2 O + 2 P and fit in
    the rest of it in every KernelBench level-1/2 file measured).  The host holds the worker
    (:data:`HOST_BASE_BYTES`) and no data.

    Args:
        problem: a :class:`~cudaperf_cli.problems.pytorch.TorchProblem` (or anything with a
            ``footprint`` dict and ``modifies_inputs``).
        l2_bytes: the device's L2 size, bytes (the flush buffer is max(2 x L2, 256 MiB)).
        timing: the timing settings (``flush_l2``, ``flush_bytes``).
    """
    fp = dict(getattr(problem, "footprint", None) or {})
    i = int(fp.get("inputs_bytes", 0))
    o = int(fp.get("outputs_bytes", 0))
    pb = int(fp.get("params_bytes", 0)) + int(fp.get("buffers_bytes", 0))
    total = int(fp.get("total_bytes", i + o + pb))
    flush = flush_size(l2_bytes, timing or TimingSettings())
    copies = 2 if getattr(problem, "modifies_inputs", False) else 1
    if int((timing or TimingSettings()).input_sets) >= 2:
        copies = 3  # timing: set 0, set 1 and the candidate's working copy
    parts = {"inputs": copies * i, "outputs (candidate, reference)": 2 * o,
             "parameters and buffers (both models)": 2 * pb, "flush buffer": flush}
    planned = sum(parts.values())
    gpu = max(planned, 3 * total + flush)
    return MemoryPlan(footprint_bytes=total, gpu_bytes=gpu, host_bytes=HOST_BASE_BYTES,
                      flush_bytes=flush, parts=parts)


def syntax_error(path: str | Path) -> dict[str, Any] | None:
    """``{"type": "SyntaxError", "message", "file", "line", "offset", "text"}`` when the
    Python file does not compile, else None."""
    p = Path(path)
    try:
        compile(p.read_text(), p.name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return {
            "type": type(exc).__name__,
            "message": exc.msg,
            "file": p.name,
            "line": exc.lineno,
            "offset": exc.offset,
            "text": (exc.text or "").rstrip("\n"),
        }
    return None


def _static_check(job: TorchEvalJob) -> dict[str, Any] | None:
    """Run :func:`cudaperf_cli.evaluate.static_guards.check_candidate_source` (imported
    lazily; skipped when the module is absent) on the candidate's ``.py`` with its ``.cu``
    files.  Returns ``{"id", "reason", "static": True, "violations": [...]}`` for the first
    violation, else None."""
    import importlib.util

    if importlib.util.find_spec("cudaperf_cli.evaluate.static_guards") is None:
        return None
    from cudaperf_cli.evaluate import static_guards

    ops = set(job.allowed_ops)
    if job.allow_torch_ops:
        ops |= set(getattr(static_guards, "LIBRARY_OPS", ()))
    found = static_guards.check_candidate_source(
        Path(job.module_path).read_text(),
        allow_torch_ops=frozenset(ops),
        allow_lower_precision=job.allow_lower_precision,
        cuda_sources={Path(p).name: Path(p).read_text() for p in job.cuda_files},
    )
    if not found:
        return None
    first = found[0]
    where = f"{first.file}:{first.line}" if first.file else f"{Path(job.module_path).name}:{first.line}"
    return {
        "id": first.guard,
        "reason": f"{where}: {first.message}",
        "static": True,
        "violations": [str(v) for v in found[:10]],
    }


def _torch_arch_list(arch: str) -> str | None:
    """``"9.0"`` for ``sm_90`` (``"9.0a"`` for ``sm_90a``): load_inline's target list."""
    if not arch.startswith(("sm_", "compute_")):
        return None
    digits = arch.split("_", 1)[1]
    suffix = "a" if digits.endswith("a") else ""
    digits = digits.rstrip("a")
    if len(digits) < 2 or not digits.isdigit():
        return None
    return f"{digits[:-1]}.{digits[-1]}{suffix}"


def _child_env(job: TorchEvalJob, arch: str) -> dict[str, str]:
    from cudaperf_cli.torch_runtime import ARCH_ENV, BUILD_ROOT_ENV

    env = {
        ARCH_ENV: arch,
        BUILD_ROOT_ENV: str(job.build_root_path()),
        EXT_DIR_ENV: str(job.extensions_dir()),
    }
    tal = _torch_arch_list(arch)
    if tal:
        env["TORCH_CUDA_ARCH_LIST"] = tal
    return env


def _build_fast(job: TorchEvalJob, arch: str) -> tuple[str, str, dict[str, Any]]:
    """Compile every .cu of a fast-format candidate here (nvcc in a child process group).
    Returns (status, message, build info); status ``ok``, ``compile_error`` or
    ``compile_timeout``."""
    from cudaperf_cli.torch_runtime import (
        CudaCompileError,
        LauncherSignatureError,
        compile_cuda,
        parse_launchers,
    )

    info: dict[str, Any] = {"format": job.format, "arch": arch, "libs": [], "seconds": 0.0,
                            "cached": True, "errors": ""}
    deadline = time.monotonic() + job.build_timeout_s
    for path in job.cuda_files:
        name = Path(path).name
        source = Path(path).read_text()
        try:
            sigs = parse_launchers(source, filename=name)
            res = compile_cuda(
                source,
                filename=name,
                arch=arch,
                build_root=job.build_root_path(),
                timeout_s=max(deadline - time.monotonic(), 1.0),
            )
        except LauncherSignatureError as exc:
            info["errors"] = str(exc)
            return COMPILE_ERROR, str(exc), info
        except CudaCompileError as exc:
            info["errors"] = exc.errors
            info["seconds"] += exc.build.seconds
            return exc.status, str(exc).splitlines()[0].rstrip(":"), info
        info["seconds"] += 0.0 if res.cached else res.seconds
        info["cached"] = info["cached"] and res.cached
        info["libs"].append(
            {"file": name, "lib": str(res.lib_path), "launchers": [s.describe() for s in sigs],
             "resources": [to_jsonable(r) for r in res.resources]}
        )
    return "ok", "", info


def _build_inline(job: TorchEvalJob, arch: str, env: Mapping[str, str]) -> tuple[str, str, dict[str, Any]]:
    """Import a load_inline candidate in a build child (``--build``) under
    ``build_timeout_s``; the extension lands in ``TORCH_EXTENSIONS_DIR`` (removed again when
    the build times out)."""
    ext = job.extensions_dir()
    ext.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"format": job.format, "arch": arch, "extensions_dir": str(ext),
                            "seconds": 0.0, "cached": False, "errors": ""}
    run = _run_child(["--build"], job, job.build_timeout_s, env)
    rc, elapsed, timed_out, tail = run.returncode, run.elapsed_s, run.timed_out, run.stderr_tail
    info["seconds"] = elapsed
    if timed_out:
        # Not cached (as the C path): a killed build can leave torch's lock file behind,
        # which would make the next build of this candidate wait on it.
        shutil.rmtree(ext, ignore_errors=True)
        msg = f"the load_inline build did not finish within {job.build_timeout_s:g} s and was killed"
        info["errors"] = tail[-1500:]
        return COMPILE_TIMEOUT, msg, info
    doc = run.result
    if doc is None:
        sig = run.signal
        how = f"was killed by {sig}" if sig else f"exited with status {rc}"
        info["errors"] = tail[-2000:]
        return CRASH, f"the build child {how} without a result", info
    info["cached"] = bool(doc.get("cached"))
    info["errors"] = doc.get("errors", "")
    if doc.get("error"):
        info["error"] = doc["error"]
    status, message = doc["status"], doc.get("message", "")
    if status == RUNTIME_ERROR:  # anything failing in the build child is a build failure ...
        status = COMPILE_ERROR
        if any(k in message for k in ("CUDA_HOME", "not compiled with CUDA", "no CUDA")):
            status = NO_DEVICE  # ... except a torch without CUDA here: not the candidate's fault
    return status, message, info


def run_torch_evaluation(
    job: TorchEvalJob,
    timeout_s: float,
    *,
    env: Mapping[str, str] | None = None,
    footprint: int | None = None,
) -> TorchEvalResult:
    """Build, verify and time a PyTorch candidate; the candidate runs only in children.

    Order: Python syntax of the candidate's ``.py`` (``compile_error`` with file, line and
    text); the static guards when present (``guard_rejected``); the build phase under
    ``job.build_timeout_s`` (``compile_error``/``compile_timeout``); then the evaluation
    worker under ``timeout_s``.

    Args:
        job: the :class:`TorchEvalJob` (validated here: ``ValueError`` when malformed or a
            file is missing).
        timeout_s: wall-clock limit of the evaluation worker (verification, guards, timing,
            torch.compile included), seconds; past it its process group is killed and the
            status is ``timeout``.
        env: extra environment variables for the children (``CUDA_VISIBLE_DEVICES``...).
        footprint: the problem's footprint, bytes (``TorchProblem.footprint_bytes``): sets
            the worker's host-memory bound (:func:`host_memory_limit`).

    A ``mode="baseline"`` job has no candidate: no syntax check, guards or build; the worker
    measures the reference alone (status ``reference_only``).  Only the worker's device
    work holds the per-GPU lock (the GPU gate of ``evaluate/child.py``): its preparation
    and the candidate's build do not, and ``timeout_s`` starts once the lock is held.

    Returns:
        A :class:`TorchEvalResult`; every outcome of the candidate is a status.

    Raises:
        ValueError: a malformed job.
        ToolchainError: nvcc is missing (fast format).
    """
    job.validate()
    t0 = time.monotonic()

    def done(r: TorchEvalResult) -> TorchEvalResult:
        r.elapsed_s = time.monotonic() - t0
        if not r.summary:
            r.summary = summarize_torch_result(r.configs, r.timing)
        return r

    footprint_bytes = footprint
    if job.mode == "baseline":
        from cudaperf_cli.torch_runtime import resolve_arch

        arch = resolve_arch(job.arch)
        child_env = _child_env(job, arch)
        if env:
            child_env.update(env)
        build: dict[str, Any] = {}
        warnings: list[str] = []
        run = _start_worker(job, timeout_s, child_env, footprint_bytes).go()
        return _evaluate_in_child(run, timeout_s, build, warnings, done)

    err = syntax_error(job.module_path)
    if err is not None:
        where = f"{err['file']}, line {err['line']}"
        text = f"\n    {err['text']}" if err.get("text") else ""
        return done(TorchEvalResult(
            status=COMPILE_ERROR,
            message=f"SyntaxError in {where}: {err['message']}{text}",
            error={"source": "syntax", **err},
            phase="syntax",
        ))

    warnings: list[str] = []
    if job.static_guards:
        try:
            found = _static_check(job)
        except Exception as exc:  # noqa: BLE001 - the guard module is not ours to trust
            found = None
            warnings.append(f"static guards could not run: {type(exc).__name__}: {exc}")
        if found is not None:
            return done(TorchEvalResult(
                status=GUARD_REJECTED,
                message=f"rejected by static guard '{found['id']}': {found['reason']}",
                guard=found,
                phase="static_guards",
                warnings=warnings,
            ))

    from cudaperf_cli.torch_runtime import resolve_arch

    arch = resolve_arch(job.arch)
    child_env = _child_env(job, arch)
    if env:
        child_env.update(env)
    # The evaluation worker starts now: its preparation (importing torch, the CUDA context,
    # the problem's module: seconds) overlaps the build; it waits at `ready` for the build.
    # Without a device (build_only) there is nothing for it to do.
    worker = None if job.build_only else _start_worker(job, timeout_s, child_env, footprint_bytes)
    try:
        if job.format == FAST:
            bstatus, bmsg, build = _build_fast(job, arch)
        else:
            bstatus, bmsg, build = _build_inline(job, arch, child_env)
    except BaseException:
        with contextlib.suppress(Exception):
            if worker is not None:
                worker.cancel()
        raise
    if bstatus != "ok":
        with contextlib.suppress(Exception):  # the build's verdict is the result
            if worker is not None:
                worker.cancel()
        errors = build.get("errors") or ""
        message = bmsg if not errors or errors in bmsg else f"{bmsg}:\n{errors}"
        return done(TorchEvalResult(
            status=bstatus if bstatus in TORCH_STATUSES else CRASH,
            message=message,
            build=build,
            error=build.pop("error", None),
            phase="build",
            warnings=warnings,
        ))

    if worker is None:
        return done(TorchEvalResult(status=NO_DEVICE, message="compiled; not run (no CUDA device)",
                                    build=build, phase="build", warnings=warnings))
    return _evaluate_in_child(worker.go(), timeout_s, build, warnings, done)


def _evaluate_in_child(run: ChildRun, timeout_s: float, build: dict[str, Any], warnings: list[str],
                       done: Any) -> TorchEvalResult:
    """The evaluation worker's ``run`` (limit ``timeout_s``) as a :class:`TorchEvalResult`
    (``done`` stamps the elapsed time and the summary)."""
    rc, state, tail = run.returncode, run.state, run.stderr_tail
    partial = [TorchConfigResult.from_json(c) for c in state.get("configs", [])]
    phase = state.get("phase")
    common = dict(build=build, phase=phase, exit_code=rc, stderr_tail=tail, warnings=warnings,
                  prepare_s=run.prepare_s, lock_wait_s=run.lock_wait_s)
    if run.memory_exceeded:
        return done(TorchEvalResult(
            status=CRASH,
            message=(f"killed: the worker's host memory passed {run.memory_limit_bytes / 1e9:.1f} GB "
                     f"({(run.memory_peak_bytes or 0) / 1e9:.1f} GB seen) {_where(state, _PHASE_WORDS)}"),
            configs=partial, signal="SIGKILL",
            details={"state": state, "eval_s": run.elapsed_s, "build_wait_s": round(run.held_s, 3), "host_memory_limit_bytes": run.memory_limit_bytes},
            **common,
        ))
    if run.timed_out:
        limit = run.timeout_limit_s if run.timeout_limit_s is not None else timeout_s
        what = "while preparing (before the GPU)" if run.timeout_phase == "prepare" else _where(state, _PHASE_WORDS)
        ran = run.run_s if run.timeout_phase == "run" and run.run_s is not None else run.elapsed_s
        return done(TorchEvalResult(
            status=TIMEOUT,
            message=f"timed out after {ran:.1f} s (limit {limit:g} s) {what}",
            configs=partial, signal="SIGKILL",
            details={"state": state, "eval_s": run.elapsed_s, "build_wait_s": round(run.held_s, 3), "timeout_phase": run.timeout_phase},
            **common,
        ))
    doc = run.result
    if doc is not None:
        try:
            result = TorchEvalResult.from_json(doc)
        except (TypeError, KeyError, ValueError):
            result = None
        if result is not None:
            result.build = build
            result.exit_code = rc
            result.stderr_tail = tail
            result.warnings = warnings + result.warnings
            result.prepare_s = run.prepare_s
            result.lock_wait_s = run.lock_wait_s
            result.details.setdefault("eval_s", run.elapsed_s)
            if run.held_s:  # prepared before the build ended, then waited for it
                result.details["build_wait_s"] = round(run.held_s, 3)
                phases = result.details.get("phase_s")
                if isinstance(phases, dict) and isinstance(phases.get("gpu_wait"), (int, float)):
                    # the worker's gpu_wait counted the wait for the build too: book it apart
                    phases["gpu_wait"] = max(float(phases["gpu_wait"]) - run.held_s, 0.0)
                    phases["build_wait"] = round(run.held_s, 3)
            if rc:
                result.warnings.append(
                    f"the worker wrote its result, then exited with status {rc}"
                    + (f" ({run.signal})" if run.signal else "")
                )
            return done(result)
    sig = run.signal
    if rc:
        how = f"killed by {sig}" if sig else f"exited with status {rc}"
        status = CRASH
        message = f"the worker was {how} {_where(state, _PHASE_WORDS)}"
        if phase in _REFERENCE_PHASES and not state.get("candidate_started"):
            status = REFERENCE_ERROR
            message += ", before the candidate ran"
    else:
        status = CRASH
        snippet = run.stdout_text[:200].replace("\n", " ")
        message = f"the worker exited without a valid result {_where(state, _PHASE_WORDS)}" + (
            f"; it printed: {snippet!r}" if snippet else ""
        )
    common["signal"] = sig
    return done(TorchEvalResult(
        status=status,
        message=message,
        configs=partial,
        details={"state": state, "eval_s": run.elapsed_s, "build_wait_s": round(run.held_s, 3)},
        **common,
    ))


__all__ = [
    "ALIASING",
    "BACKGROUND_THREAD",
    "BASELINE_COMPILE",
    "BASELINE_EAGER",
    "COMPILE_ERROR",
    "COMPILE_TIMEOUT",
    "DEFAULT_TORCH_TOLERANCES",
    "DYNAMIC_GUARDS",
    "FAST",
    "FORMATS",
    "GUARD_REJECTED",
    "INHERITS_MODEL",
    "LOAD_INLINE",
    "LOWER_PRECISION",
    "NO_CUSTOM_KERNEL",
    "OUTPUT_TYPE",
    "OutputCheck",
    "PATCHING",
    "RESULT_CACHE",
    "SHAPE_SPECIALISED",
    "SIDE_STREAM",
    "TIMED_RESULT",
    "TORCH_FALLBACK",
    "TORCH_STATUSES",
    "TorchConfigResult",
    "TorchEvalJob",
    "TorchEvalResult",
    "TorchTiming",
    "run_torch_evaluation",
    "summarize_torch_result",
    "syntax_error",
    "torch_tolerance",
    "trial_seed",
]
