"""The PyTorch kind: ``cudaperf optimize model.py`` (a KernelBench-format problem).

- load: ``problems.pytorch.load_torch_problem`` in a child process (Model, get_inputs,
  get_init_inputs; the alternative shapes; the footprint from the meta device);
- plan: the alternative shape configurations and
  ``evaluate.torch_job.plan_torch_memory``'s memory plan;
- baseline: one ``TorchEvalJob(mode="baseline")`` through ``run_torch_evaluation``: the
  reference alone at the default configuration, PyTorch eager and torch.compile medians,
  the footprint, peak memory and whether the outputs depend on the inputs; every
  candidate job then gets ``baseline_ms`` and times the candidate alone;
- evaluate: the candidate's files (``model.py`` [+ ``kernel.cu``]) written to a folder,
  then build, static and dynamic guards, verification on the default and alternative
  shapes, timing, in child processes;
- write: the best verified candidate's files into ``<stem>_cuda/`` (``-o DIR``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.kinds.base import (
    DeviceInfo, EvalSettings, Evaluation, Plan, ProblemKind, StageFn, fill_outcome,
)
from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.agent.store import candidate_stem
from cudaperf_cli.core import CudaperfError, ProblemError, to_jsonable

#: Name of the baseline of ``TurnRecord.speedup_kernel`` for PyTorch problems: the worker's
#: (``evaluate.torch_job.BASELINE_EAGER``, not imported here to keep the CLI's start fast),
#: so a suite's report names one baseline, not "PyTorch eager, PyTorch eager (fp32, TF32 off)".
BASELINE_EAGER_NAME = "PyTorch eager (fp32, TF32 off)"
#: The same for ``speedup_compile`` (``evaluate.torch_job.BASELINE_COMPILE``).
BASELINE_COMPILE_NAME = "torch.compile (mode=default, fp32, TF32 off)"


@dataclass(frozen=True)
class TorchBaseline:
    """The PyTorch reference measured once per run (``baseline.json``); times in ms.

    Attributes:
        eager_ms: median of ``Model.forward`` (PyTorch eager) at the default configuration.
        eager_iqr_ms: its interquartile range.
        compile_ms: median of ``torch.compile(Model)``; None when not timed
            (``--no-compile-baseline``) or when it failed (``compile_error``).
        compile_error: why torch.compile could not be timed, or None.
        footprint_bytes: inputs, outputs, parameters and buffers, bytes (None: not reported).
        peak_gpu_bytes: the most device memory the baseline job held, bytes.
        degenerate: the outputs do not depend on the inputs.
        names: ``{"eager": ..., "compile": ...}``, the baselines' full names.
    """

    eager_ms: float | None
    compile_ms: float | None = None
    eager_iqr_ms: float | None = None
    compile_error: str | None = None
    footprint_bytes: int | None = None
    peak_gpu_bytes: int | None = None
    degenerate: bool = False
    names: dict[str, str] = field(default_factory=dict)

    @property
    def baseline_ms(self) -> dict[str, float | None]:
        """``TorchEvalJob.baseline_ms`` of every candidate job."""
        return {"eager": self.eager_ms, "compile": self.compile_ms}


def candidate_format(files: dict[str, str]) -> str:
    """``"fast"`` when the candidate has a ``.cu`` file, else ``"load_inline"``."""
    return "fast" if any(name.endswith(".cu") for name in files) else "load_inline"


def cuda_source_of(files: dict[str, str]) -> str | None:
    """The text of a candidate's ``.cu`` file (the fast format's kernel), or None."""
    return next((text for name, text in files.items() if name.endswith(".cu")), None)


#: What a PyTorch result folder holds (a candidate's files); ``--force`` replaces a folder
#: only when it holds nothing else.
RESULT_SUFFIXES = (".py", ".cu", ".cuh")


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def resolve_torch_output(opts: Any) -> Path:
    """The result folder (default ``./<stem>_cuda/``), checked before any work.

    Refused (exit 2): a file; a folder holding the problem file or the run folder, or the
    current directory, the home directory or ``/`` (a result replaces its whole folder);
    an existing non-empty folder without ``--force``; with ``--force``, a folder holding
    anything but a candidate's files (``*.py``, ``*.cu``, ``*.cuh``, no subfolders): only an
    earlier result is replaced.

    Raises:
        CudaperfError: exit code 2.
    """
    out = Path(opts.output) if opts.output else Path.cwd() / f"{opts.file.stem}_cuda"
    if out.exists() and not out.is_dir():
        raise CudaperfError(f"the output {out} is a file; a PyTorch result is a folder (-o DIR)")
    run_root = Path(getattr(opts, "run_root", "cudaperf-runs"))
    if (_inside(opts.file, out) or _inside(run_root, out)
            or any(out.resolve() == p.resolve() for p in (Path.cwd(), Path.home(), Path("/")))):
        raise CudaperfError(
            f"the output {out} holds the problem file, the run folder or your working folders; "
            "a PyTorch result replaces its whole folder: choose a new one with -o DIR")
    if out.is_dir() and any(out.iterdir()):
        if not opts.force:
            raise CudaperfError(f"{out} exists and is not empty; pass --force to overwrite it, or -o DIR")
        other = [p.name for p in out.iterdir() if not (p.is_file() and p.suffix in RESULT_SUFFIXES)]
        if other:
            raise CudaperfError(
                f"{out} holds more than an earlier result ({', '.join(sorted(other)[:3])}); --force "
                "replaces only a folder of a candidate's files: choose another with -o DIR")
    return out


def output_digest(folder: Path) -> str | None:
    """SHA-256 over a result folder's files (names and bytes), or None if absent."""
    import hashlib

    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def fill_from_torch_result(record: TurnRecord, result: Any, tolerances: dict[str, Any] | None = None,
                           baseline: TorchBaseline | None = None) -> None:
    """Copy a :class:`~cudaperf_cli.evaluate.torch_job.TorchEvalResult` into ``record``.

    With the run's ``baseline``, eager/compile times the worker did not report are the
    baseline's, and the speedups are computed from them (eager or compile median /
    candidate median).
    """
    data = to_jsonable(result)
    record.evaluation = data
    record.build = dict(data.get("build") or {})
    record.status = data["status"]
    record.message = data.get("message") or ""
    summary = data.get("summary") or {}
    record.max_abs_err = summary.get("max_abs_err")
    record.max_rel_err = summary.get("max_rel_err")
    record.gpu_ms = summary.get("candidate_ms")
    record.gpu_ms_iqr = summary.get("candidate_ms_iqr")
    record.eager_ms = summary.get("eager_ms")
    record.compile_ms = summary.get("compile_ms")
    record.speedup_kernel = summary.get("speedup_eager")
    record.speedup_compile = summary.get("speedup_compile")
    if baseline is not None and isinstance(record.gpu_ms, (int, float)) and record.gpu_ms > 0:
        if record.eager_ms is None:
            record.eager_ms = baseline.eager_ms
        if record.compile_ms is None:
            record.compile_ms = baseline.compile_ms
        if record.speedup_kernel is None and record.eager_ms:
            record.speedup_kernel = record.eager_ms / record.gpu_ms
        if record.speedup_compile is None and record.compile_ms:
            record.speedup_compile = record.compile_ms / record.gpu_ms
    record.baseline = summary.get("baseline_eager") or BASELINE_EAGER_NAME
    record.guard = (data.get("guard") or {}).get("id")
    resources = [k for lib in record.build.get("libs") or [] for k in (lib.get("resources") or [])]
    if resources:  # ptxas -v of the fast format's kernels
        record.registers = max(int(k.get("registers") or 0) for k in resources)
        record.spill_bytes = sum(int(k.get("spill_store_bytes") or 0) + int(k.get("spill_load_bytes") or 0)
                                 for k in resources)
    seconds = record.build.get("seconds")
    record.compile_s = None if seconds is None else (0.0 if record.build.get("cached") else float(seconds))
    record.compile_cached = bool(record.build.get("cached"))
    record.eval_s = data.get("elapsed_s")
    fill_outcome(record, data, tolerances)


def _median(stats: Any) -> float | None:
    value = None if stats is None else getattr(stats, "median_ms", None)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def baseline_from_result(result: Any) -> TorchBaseline | None:
    """The :class:`TorchBaseline` of a baseline job's result, or None without an eager time."""
    timing = getattr(result, "timing", None)
    summary = getattr(result, "summary", None) or {}
    eager = _median(getattr(timing, "eager", None)) or summary.get("eager_ms")
    if not eager:
        return None
    compile_ms = _median(getattr(timing, "compile", None)) or summary.get("compile_ms")
    iqr = getattr(getattr(timing, "eager", None), "iqr_ms", None)
    details = getattr(result, "details", None) or {}
    degenerate = bool(getattr(result, "degenerate", False) or details.get("degenerate"))
    from cudaperf_cli.evaluate.torch_job import BASELINE_COMPILE, BASELINE_EAGER

    names = dict(getattr(timing, "baselines", None) or {"eager": BASELINE_EAGER, "compile": BASELINE_COMPILE})
    return TorchBaseline(
        eager_ms=float(eager), compile_ms=None if compile_ms is None else float(compile_ms),
        eager_iqr_ms=None if iqr is None else float(iqr),
        compile_error=getattr(timing, "compile_error", None),
        footprint_bytes=getattr(result, "footprint_bytes", None),
        peak_gpu_bytes=getattr(result, "peak_gpu_bytes", None),
        degenerate=degenerate, names=names,
    )


class TorchEvaluation(Evaluation):
    """The evaluations of one PyTorch problem (see the module docstring)."""

    baseline_name = BASELINE_EAGER_NAME

    @property
    def shapes(self) -> list[dict[str, int]]:
        return [dict(s) for s in self.plan.configs]

    @property
    def degenerate(self) -> bool:
        return bool(getattr(self.problem, "degenerate", False)
                    or (self.baseline is not None and self.baseline.degenerate))

    @property
    def footprint_bytes(self) -> int | None:
        planned = super().footprint_bytes
        if planned is not None:
            return planned
        if self.baseline is not None and self.baseline.footprint_bytes is not None:
            return int(self.baseline.footprint_bytes)
        total = (getattr(self.problem, "footprint", None) or {}).get("total_bytes")
        return None if total is None else int(total)

    def measure_baseline(self) -> TorchBaseline | None:
        """The reference alone, once (``TorchEvalJob(mode="baseline")``): eager and
        torch.compile medians, footprint, peak memory, degenerate or not.  Without a device
        nothing is measured (None).  A baseline the worker cannot give (a worker without
        the baseline mode, a crash, a time-out) is a warning: every candidate then times
        eager (and torch.compile) itself, as before.

        Raises:
            ProblemError: the reference (``Model``) itself failed.
        """
        if self.settings.device_missing:
            return None
        from cudaperf_cli.evaluate.torch_job import TorchEvalJob, run_torch_evaluation

        job = TorchEvalJob(
            problem=str(self.problem.path), candidate=[], mode="baseline", seed=self.settings.seed,
            tolerances=self.settings.tolerances, compile_baseline=self.settings.compile_baseline,
            arch=self.settings.arch, device=self.settings.device, static_guards=False,
            modifies_inputs=bool(getattr(self.problem, "modifies_inputs", False)),
        )
        try:
            result = run_torch_evaluation(job, timeout_s=self.settings.eval_timeout_s,
                                          footprint=getattr(self.problem, "footprint_bytes", None))
        except ValueError as exc:  # a worker without the baseline mode refuses the job
            self.warnings.append(f"the PyTorch baseline could not be measured once ({exc}); "
                                 "every candidate times eager itself")
            return None
        if result.status == "reference_error":
            raise ProblemError(f"the reference Model of {self.problem.name} failed: {result.message}")
        if result.status == "no_device":
            return None
        baseline = baseline_from_result(result)
        if baseline is None:
            self.warnings.append(f"the PyTorch baseline could not be measured once ({result.status}: "
                                 f"{result.message}); every candidate times eager itself")
            return None
        if baseline.compile_error:
            self.warnings.append(f"torch.compile could not be timed: {baseline.compile_error}")
        self.baseline = baseline
        return baseline

    def baseline_ms(self) -> float | None:
        return None if self.baseline is None else self.baseline.eager_ms

    def baseline_json(self) -> Any:
        return None if self.baseline is None else {"kind": "torch", **to_jsonable(self.baseline)}

    def baseline_message(self) -> str | None:
        if self.settings.device_missing:
            return None
        timed = "eager and torch.compile" if self.settings.compile_baseline else "eager"
        return f"measuring the PyTorch baseline ({timed}, child process)"

    def baseline_lines(self) -> list[str]:
        from rich.markup import escape

        b = self.baseline
        if b is None:
            return []
        eager = f"{b.eager_ms:.4g} ms" + ("" if b.eager_iqr_ms is None else f" (IQR {b.eager_iqr_ms:.3g} ms)")
        comp = ("not timed" if b.compile_ms is None and not b.compile_error
                else f"{b.compile_ms:.4g} ms" if b.compile_ms is not None else "failed")
        return [escape(f"PyTorch baseline at the default shapes: eager {eager}, torch.compile {comp} "
                       "(measured once; every candidate is timed alone)")]

    def _evaluate(self, record: TurnRecord, stage: StageFn, folder: Path | None) -> None:
        from cudaperf_cli.evaluate.torch_job import TorchEvalJob, run_torch_evaluation

        files: dict[str, str] = dict(record.mapping.get("files") or {})
        if folder is None:
            folder = self.workdir / "candidates" / candidate_stem(record)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in files.items():
            (folder / name).write_text(text)
            paths.append(str(folder / name))
        record.build_dir = str(folder)
        stage("building, verifying and timing (child processes)")
        s = self.settings
        job = TorchEvalJob(
            problem=str(self.problem.path), candidate=paths, format=candidate_format(files),
            seed=s.seed, shapes=self.shapes, allow_torch_ops=s.allow_torch_ops, arch=s.arch,
            build_timeout_s=s.compile_timeout_s, compile_baseline=s.compile_baseline, device=s.device,
            tolerances=s.tolerances, slow_ms=self.slow_ms(),
            baseline_ms=None if self.baseline is None else self.baseline.baseline_ms,
            reference_peak_bytes=None if self.baseline is None else self.baseline.peak_gpu_bytes,
            modifies_inputs=bool(getattr(self.problem, "modifies_inputs", False)),
            build_only=s.device_missing,
        )
        result = run_torch_evaluation(job, timeout_s=s.eval_timeout_s,
                                      footprint=getattr(self.problem, "footprint_bytes", None))
        fill_from_torch_result(record, result, s.tolerances, self.baseline)
        cu = cuda_source_of(files)
        if cu is not None and record.status not in ("compile_error", "compile_timeout"):
            self._score(record, cu, sizes=self.problem.constants,
                        name=f"turn {record.label}: kernel.cu")


class TorchKind(ProblemKind):
    """KernelBench-format PyTorch problems (``*.py``); see the module docstring."""

    name = "torch"
    observer_kind = "torch"

    def check_options(self, opts: Any) -> None:
        c_only = [flag for flag, used in (("-I/-D", opts.cpp_args), ("--function", opts.function),
                                          ("--size", opts.sizes), ("--init", opts.init),
                                          ("extra source files", opts.sources)) if used]
        if c_only:
            raise ProblemError(
                f"{', '.join(c_only)}: for C files only, not for a PyTorch problem",
                hint="a PyTorch problem's shapes are its module constants (edit the file)",
            )

    def default_output(self, opts: Any) -> Path:
        return Path(opts.output) if opts.output else Path.cwd() / f"{opts.file.stem}_cuda"

    def resolve_output(self, opts: Any) -> Path:
        return resolve_torch_output(opts)

    def output_digest(self, path: Path) -> str | None:
        return output_digest(Path(path))

    def builtin_policy(self) -> Any:
        try:
            from cudaperf_cli.policies.builtin_torch.policy import BuiltinTorchPolicy
        except ImportError as exc:  # pragma: no cover - a broken install
            raise CudaperfError(f"the built-in PyTorch policy cannot be loaded: {exc}") from None
        return BuiltinTorchPolicy()

    def load_message(self, opts: Any) -> str | None:
        return f"loading {opts.file.name} (child process: Model, get_inputs, alt shapes)"

    def load(self, opts: Any) -> Any:
        from cudaperf_cli.problems.pytorch import load_torch_problem

        return load_torch_problem(opts.file, timeout_s=max(60.0, opts.eval_timeout_s))

    def plan(self, problem: Any, device: DeviceInfo) -> Plan:
        """The alternative shapes and ``plan_torch_memory``'s plan (None when that function
        is not available in this build)."""
        shapes = [dict(problem.alt_shapes)] if problem.alt_shapes else []
        memory, notes = None, []
        try:
            from cudaperf_cli.evaluate.torch_job import plan_torch_memory  # type: ignore[attr-defined]
        except ImportError:
            notes.append("no memory plan for PyTorch problems in this build "
                         "(evaluate.torch_job.plan_torch_memory)")
        else:
            memory = plan_torch_memory(problem, l2_bytes=device.l2_bytes)
        return Plan(configs=shapes, memory=memory, notes=notes)

    def fit_hint(self) -> str | None:
        return "a PyTorch problem's shapes are its module constants (edit a copy of the file)"

    def run_name(self, problem: Any, opts: Any) -> str:
        return f"{opts.file.stem}-torch"

    def title(self, problem: Any) -> str:
        return problem.name

    def problem_json(self, problem: Any, plan: Plan, arch: str, opts: Any) -> dict[str, Any]:
        return {"kind": "torch", "arch": arch, "policy": opts.policy, **problem.to_json(),
                "memory": None if plan.memory is None else plan.memory.to_json()}

    def describe(self, problem: Any, plan: Plan, arch: str, opts: Any, detected: bool) -> list[str]:
        from rich.markup import escape

        shapes = ("alt shapes " + ", ".join(f"{k}={v}" for k, v in problem.alt_shapes.items())
                  if problem.alt_shapes else f"no alt shapes ({problem.alt_note})")
        timed = "eager and torch.compile" if opts.compile_baseline else "eager"
        return [
            f"[bold]{escape(problem.name)}[/] ({escape(str(opts.file))}): {escape(problem.describe())}"
            + ("" if detected else " [yellow](no GPU detected)[/]"),
            f"verify: 3 trials at the default shapes; {escape(shapes)}; "
            f"time vs PyTorch {timed}; nvcc -arch={arch}",
        ]

    def open(self, problem: Any, plan: Plan, settings: EvalSettings, workdir: Path) -> TorchEvaluation:
        return TorchEvaluation(problem, plan, settings, workdir)

    def baseline_from_json(self, data: Any) -> TorchBaseline | None:
        try:
            if data.get("kind", "torch") != "torch" or not data.get("eager_ms"):
                return None
            return TorchBaseline(
                eager_ms=float(data["eager_ms"]),
                compile_ms=None if data.get("compile_ms") is None else float(data["compile_ms"]),
                eager_iqr_ms=None if data.get("eager_iqr_ms") is None else float(data["eager_iqr_ms"]),
                compile_error=data.get("compile_error"),
                footprint_bytes=data.get("footprint_bytes"), peak_gpu_bytes=data.get("peak_gpu_bytes"),
                degenerate=bool(data.get("degenerate")), names=dict(data.get("names") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def candidate_record(self, proposal: Any, turn: int, *, sample: int = 0, samples: int = 1,
                         mapping: dict[str, Any] | None = None) -> TurnRecord:
        """The ``pending`` record of a PyTorch proposal: its files in ``mapping["files"]``
        (a reply with ``model.py`` only is the load_inline format), ``source`` the CUDA
        (``kernel.cu``) when there is one, else ``model.py`` (the run folder and
        ``candidates.jsonl`` keep the kernel itself); ``format_error`` when it has no file."""
        files = dict(proposal.files) or ({"model.py": proposal.source} if proposal.source.strip() else {})
        record = TurnRecord(turn, proposal.policy, proposal.description, "pending",
                            source=cuda_source_of(files) or proposal.source,
                            mapping=dict(proposal.mapping) if mapping is None else mapping,
                            sample=sample, samples=samples)
        record.mapping["files"] = files
        if not files:
            record.status = "format_error"
            record.message = str(proposal.mapping.get("format_error") or "the reply had no usable code")
            record.baseline = BASELINE_EAGER_NAME
        return record

    def write(self, best: TurnRecord, evaluation: Evaluation, out: Path, opts: Any) -> list[str]:
        src = Path(best.build_dir or "")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        try:
            # The new folder is complete before the old one (an earlier result, checked by
            # resolve_torch_output) goes away.
            shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            if out.exists():
                os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CudaperfError(f"cannot write {out}: {exc.strerror or exc}",
                                hint=f"the candidate stays in {src}") from None
        fmt = "fast (model.py + kernel.cu)" if (out / "kernel.cu").exists() else "load_inline (model.py)"
        return [
            f"written     {out}/ ({fmt})",
            f"use         import {out}/model.py; ModelNew(*get_init_inputs()) with Model's "
            "state_dict, on CUDA tensors",
        ]

    def summary(self, problem: Any, evaluation: Evaluation | None, plan: Plan) -> dict[str, Any]:
        baseline = None if evaluation is None else evaluation.baseline
        return {
            "kind": "torch",
            "problem": problem.name,
            "constants": problem.constants,
            "alt_shapes": problem.alt_shapes,
            "baseline": BASELINE_EAGER_NAME,
            "baselines": {"eager": BASELINE_EAGER_NAME, "compile": BASELINE_COMPILE_NAME},
            "torch_baseline": None if baseline is None else to_jsonable(baseline),
        }


__all__ = ["BASELINE_COMPILE_NAME", "BASELINE_EAGER_NAME", "TorchBaseline", "TorchEvaluation", "TorchKind", "baseline_from_result",
           "candidate_format", "cuda_source_of", "fill_from_torch_result", "output_digest",
           "resolve_torch_output"]
