"""The C kind: ``cudaperf optimize FILE.c [MORE.c ...]``.

- load: ``problems.c.load_c_problem`` (preprocess, parse, parameters, extents, sizes; the
  extra sources linked into the reference);
- plan: the configurations (a small odd one verified twice, the main one verified once
  and timed) and ``evaluate.plan_c_memory``'s memory plan;
- open: builds the reference library (gcc -O3) into ``<run>/reference/``;
- baseline: the reference alone in the worker (no GPU): CPU median per timed
  configuration, the arrays' measured roles, and the reference's outputs of every
  configuration and trial written to ``<run>/reference/outputs`` for every candidate job
  of the run to read (the CPU reference runs once per run, not once per candidate);
- evaluate: nvcc, static structure, then the worker verifies and times;
- write: ``<stem>.cu``, the candidate plus its drop-in host wrapper (agent/results.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.kinds.base import (
    DeviceInfo, EvalSettings, Evaluation, Plan, ProblemKind, StageFn, fill_outcome,
)
from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.core import (
    CProblem, CudaperfError, ProblemError, param_to_json, to_jsonable, write_text_atomic,
)

#: Reference runs for the CPU baseline (median, at most), and their time budget in seconds.
BASELINE_REPS, BASELINE_BUDGET_S = 7, 10.0

#: The evaluation's measured array roles -> the copies the drop-in wrapper makes.
ACCESS_OF_ROLE = {"read-only": "read", "write-only": "write", "read-write": "readwrite"}


@dataclass(frozen=True)
class Baseline:
    """The C reference measured once per run (``baseline.json``).

    Attributes:
        cpu_ms: configuration name -> CPU median of the reference, ms (timed configurations).
        cpu_iqr_ms: configuration name -> its interquartile range, ms.
        roles: array name -> measured role (``read-only``/``write-only``/``read-write``).
        reference_outputs: the folder the baseline job wrote the reference's outputs to
            (None: candidate jobs run the reference themselves).
    """

    cpu_ms: dict[str, float]
    cpu_iqr_ms: dict[str, float]
    roles: dict[str, str]
    reference_outputs: str | None = None


def verification_configs(problem: CProblem) -> list[dict[str, Any]]:
    """The edge configuration (``problems.c.edge_sizes``: loops run 0, 1 or 2 iterations;
    verified once, when it differs from the others), a small odd one (two trials), and the
    main configuration (verified once, then timed)."""
    from cudaperf_cli.problems.c import edge_sizes, small_sizes

    small = small_sizes(problem)
    edge = edge_sizes(problem)
    configs = ([{"name": "edge", "sizes": edge, "trials": 1, "time": False, "classify": False}]
               if edge else [])
    configs.append({"name": "small-odd", "sizes": small, "trials": 2, "time": False})
    configs.append({"name": "main", "sizes": dict(problem.sizes), "trials": 1, "time": True})
    return configs


def plan_c(problem: CProblem, configs: list[dict[str, Any]], l2_bytes: int | None) -> Any:
    """``evaluate.plan_c_memory``'s :class:`~cudaperf_cli.evaluate.memory.MemoryPlan` of one
    evaluation, or None when that function is not available in this build."""
    try:
        from cudaperf_cli.evaluate import plan_c_memory  # type: ignore[attr-defined]
    except ImportError:
        return None
    from cudaperf_cli.evaluate import ConfigSpec

    specs = [ConfigSpec.from_json(c) for c in configs]
    return plan_c_memory(problem, specs, l2_bytes=l2_bytes)


def fill_from_evaluation(record: TurnRecord, result: Any, tolerances: dict[str, Any] | None = None) -> None:
    """Copy a C evaluation result's status, errors, timings and Outcome fields into ``record``."""
    data = to_jsonable(result)
    record.evaluation = data
    record.status = data["status"]
    record.message = data.get("message") or ""
    summary = data.get("summary") or {}
    for key in ("max_abs_err", "max_rel_err", "gpu_ms", "gpu_ms_iqr", "e2e_ms", "cpu_ms",
                "speedup_kernel", "speedup_e2e", "baseline"):
        if summary.get(key) is not None:
            setattr(record, key, summary[key])
    record.access = {name: ACCESS_OF_ROLE[role] for name, role in (data.get("array_roles") or {}).items()
                     if role in ACCESS_OF_ROLE}
    fill_outcome(record, data, tolerances)


class CEvaluation(Evaluation):
    """The evaluations of one C problem (see the module docstring)."""

    def __init__(self, problem: CProblem, plan: Plan, settings: EvalSettings, workdir: Path,
                 reference: Any):
        super().__init__(problem, plan, settings, workdir)
        self.reference = reference
        self.baseline_name = getattr(reference, "baseline_name", None) or "gcc -O3, 1 thread"
        self.outputs_dir = self.workdir / "reference" / "outputs"
        self.device_missing = settings.device_missing
        from cudaperf_cli.build import default_cache_root

        self.cache_root = settings.cache_root or default_cache_root()
        #: compute-sanitizer's path for the memory check of new best candidates (None: off,
        #: or not installed: ``sanitizer_note`` says which, once, in :attr:`warnings`).
        self.sanitizer: str | None = None
        self.sanitizer_note: str | None = None
        if settings.sanitize and not self.device_missing:
            from cudaperf_cli.evaluate.sanitize import SANITIZER_ENV, find_compute_sanitizer

            self.sanitizer = find_compute_sanitizer()
            if self.sanitizer is None:
                self.sanitizer_note = (
                    "compute-sanitizer was not found (PATH, beside nvcc, $CUDA_HOME, "
                    f"/usr/local/cuda, ${SANITIZER_ENV}): new best candidates are not checked "
                    "for memory errors (--no-sanitize turns the check off)")
                self.warnings.append(self.sanitizer_note)
        elif not settings.sanitize:
            self.sanitizer_note = "off (--no-sanitize)"

    @property
    def configs(self) -> list[dict[str, Any]]:
        return self.plan.configs

    def job(self, lib_path: Path | None) -> Any:
        """The evaluation job of one candidate (``None``: the reference alone, the baseline).

        Every job gets the run's tolerances and device.  Once the baseline is known,
        candidate jobs reuse its CPU times, array roles and reference outputs, so every
        turn's speedup has the same denominator and the reference is not run again.
        """
        from cudaperf_cli.evaluate import EvalJob

        extra: dict[str, Any] = {"tolerances": self.settings.tolerances, "device": self.settings.device}
        if lib_path is None:
            self.outputs_dir.mkdir(parents=True, exist_ok=True)
            extra.update(cpu_reps=BASELINE_REPS, cpu_budget_s=BASELINE_BUDGET_S,
                         reference_outputs=str(self.outputs_dir))
        else:
            extra["slow_ms"] = self.slow_ms()
            if self.baseline is not None:
                extra.update(cpu_baseline_ms=self.baseline.cpu_ms, array_roles=self.baseline.roles)
                # the folder of this run (a resumed run may start from another directory)
                if self.baseline.reference_outputs and self.outputs_dir.is_dir():
                    extra["reference_outputs"] = str(self.outputs_dir)
        return EvalJob.from_problem(self.problem, ref_lib=self.reference, cand_lib=lib_path,
                                    configs=self.configs, seed=self.settings.seed, **extra)

    def measure_baseline(self) -> Baseline | None:
        """Run the reference alone (child process, no GPU needed): CPU median per timed
        configuration, the arrays' measured roles, the reference's outputs on disk.
        Without a device nothing is measured (None): no candidate will be verified or timed
        against it, and it took tens of seconds (about 20 s for examples/matmul.c); a
        resumed run on a GPU machine measures it then.

        Raises:
            ProblemError: the reference crashed, hung or failed on its own data.
        """
        if self.device_missing:
            return None
        from cudaperf_cli.evaluate import run_evaluation

        result = run_evaluation(self.job(None), timeout_s=self.settings.eval_timeout_s)
        if result.status != "reference_only":
            raise ProblemError(f"the reference {self.problem.function} failed: {result.message}")
        cpu_ms: dict[str, float] = {}
        iqr_ms: dict[str, float] = {}
        for cfg in result.configs:
            if cfg.timing is not None and cfg.timing.cpu is not None:
                cpu_ms[cfg.name] = cfg.timing.cpu.median_ms
                iqr_ms[cfg.name] = cfg.timing.cpu.iqr_ms
        self.baseline = Baseline(cpu_ms, iqr_ms, dict(result.array_roles), str(self.outputs_dir))
        return self.baseline

    def baseline_ms(self) -> float | None:
        """The CPU median of the timed configuration (the first timed one), ms."""
        if self.baseline is None:
            return None
        timed = [c["name"] for c in self.configs if c.get("time")]
        for name in timed:
            if name in self.baseline.cpu_ms:
                return float(self.baseline.cpu_ms[name])
        return next((float(v) for v in self.baseline.cpu_ms.values()), None)

    def baseline_message(self) -> str | None:
        if self.device_missing:
            return None
        return f"measuring the CPU baseline ({self.baseline_name})"

    def baseline_lines(self) -> list[str]:
        if self.baseline is None:
            return []
        return [f"CPU baseline ({self.baseline_name}) at the main sizes: {ms:.4g} ms median of "
                f"{BASELINE_REPS} runs at most, IQR {iqr:.3g} ms"
                for ms, iqr in zip(self.baseline.cpu_ms.values(), self.baseline.cpu_iqr_ms.values())]

    def _evaluate(self, record: TurnRecord, stage: StageFn, folder: Path | None) -> None:
        from cudaperf_cli.build import build_candidate, for_arch

        source = record.source or ""
        stage("compiling (nvcc)")
        built = build_candidate(source, arch=self.settings.arch, cache_root=self.cache_root,
                                timeout_s=self.settings.compile_timeout_s,
                                extra_flags=self.problem.cpp_args)
        record.build = to_jsonable(built)
        record.build_dir = str(Path(built.lib_path).parent) if built.lib_path else None
        record.compile_s = 0.0 if built.cached else built.seconds
        record.compile_cached = built.cached
        mine = for_arch(built.resources, built.arch)  # -gencode twice: the arch that runs
        if mine:
            record.registers = max(k.registers for k in mine)
            record.spill_bytes = sum(k.spill_store_bytes + k.spill_load_bytes for k in mine)
        if not built.ok:
            record.status = built.status
            first = (built.errors or "").strip().splitlines()
            record.message = first[0] if first else built.status
            return
        self._score(record, source, sizes=self.problem.sizes, resources=built.resources)
        if self.device_missing:
            record.status = "no_device"
            record.message = "compiled; not run (no CUDA device)"
            return
        stage("verifying and timing (child process)")
        from cudaperf_cli.evaluate import run_evaluation

        t0 = time.perf_counter()
        result = run_evaluation(self.job(Path(built.lib_path)), timeout_s=self.settings.eval_timeout_s)
        record.eval_s = time.perf_counter() - t0
        fill_from_evaluation(record, result, self.settings.tolerances)
        if record.status == "no_device":
            self.device_missing = True
        if self.settings.sanitize and self.would_be_best(record):
            self.sanitize(record, stage, Path(built.lib_path))

    def would_be_best(self, record: TurnRecord) -> bool:
        """``record`` is verified, has a GPU time and beats the run's best so far
        (``loop.is_better``): it is about to become the result the run writes."""
        from cudaperf_cli.statuses import VERIFIED

        if record.status not in VERIFIED or record.gpu_ms is None:
            return False
        best = self.best_ms
        return best is None or record.gpu_ms < best

    def sanitize(self, record: TurnRecord, stage: StageFn, lib_path: Path) -> None:
        """The compute-sanitizer stage (evaluate/sanitize.py): memcheck then initcheck on
        the smallest verification configuration, untimed; a memory error, or a failure of
        the candidate under the tool, makes the record ``sanitizer_error`` (message: the
        first error); a tool that could not check the run leaves the candidate standing.
        Sets ``record.sanitize`` and ``record.sanitize_s``."""
        from cudaperf_cli.evaluate.sanitize import run_sanitizer, skipped
        from cudaperf_cli.statuses import SANITIZER_ERROR

        if self.sanitizer is None:
            record.sanitize = skipped(self.sanitizer_note or "compute-sanitizer is not installed here").to_json()
            return
        stage("checking memory (compute-sanitizer memcheck, initcheck)")
        outcome = run_sanitizer(self.job(lib_path), exe=self.sanitizer,
                                timeout_s=self.settings.eval_timeout_s)
        record.sanitize = outcome.to_json()
        record.sanitize_s = round(outcome.seconds, 3)
        if outcome.rejected:
            record.status = SANITIZER_ERROR
            record.message = outcome.message

    def sanitize_info(self) -> dict[str, Any]:
        """``summary.json``'s ``sanitize``: whether the stage was on, the tool's path, and
        why it did not run (``note``)."""
        return {"enabled": self.settings.sanitize, "tool": self.sanitizer, "note": self.sanitizer_note}


class CKind(ProblemKind):
    """C functions (``*.c``); see the module docstring."""

    name = "c"
    observer_kind = "c"

    def default_output(self, opts: Any) -> Path:
        return Path(opts.output) if opts.output else Path.cwd() / f"{opts.file.stem}.cu"

    def resolve_output(self, opts: Any) -> Path:
        from cudaperf_cli.agent.checks import resolve_output

        return resolve_output(opts)

    def output_digest(self, path: Path) -> str | None:
        from cudaperf_cli.agent.options import file_sha256

        return file_sha256(path) if Path(path).is_file() else None

    def builtin_policy(self) -> Any:
        from cudaperf_cli.policies.builtin.policy import BuiltinPolicy

        return BuiltinPolicy()

    def load(self, opts: Any) -> CProblem:
        """``load_c_problem`` of ``opts.file`` with ``-I/-D``, ``--function``, ``--size``,
        ``--init`` and the extra sources ``opts.sources``.

        Raises:
            ProblemError: see :func:`cudaperf_cli.problems.c.load_c_problem`; extra sources
                given to a loader that does not take them.
        """
        import inspect

        from cudaperf_cli.problems.c import load_c_problem

        kw: dict[str, Any] = dict(function=opts.function, cpp_args=opts.cpp_args, sizes=opts.sizes,
                                  init=opts.init)
        if opts.sources:
            if "sources" not in inspect.signature(load_c_problem).parameters:
                raise ProblemError("extra C sources are not supported by this build of cudaperf",
                                   hint=f"link {', '.join(str(s) for s in opts.sources)} yourself")
            kw["sources"] = tuple(Path(s) for s in opts.sources)
        return load_c_problem(opts.file, **kw)

    def plan(self, problem: CProblem, device: DeviceInfo) -> Plan:
        """The verification configurations and ``plan_c_memory``'s plan (without it, the
        older host check: three copies of every array must fit this machine's memory,
        ``agent/checks.check_memory``, a ProblemError)."""
        configs = verification_configs(problem)
        memory = plan_c(problem, configs, device.l2_bytes)
        notes: list[str] = []
        if memory is None:
            from cudaperf_cli.agent.checks import check_memory

            check_memory(problem)
            notes.append("no memory plan for C problems in this build (evaluate.plan_c_memory); "
                         "checked three host copies of the arrays instead")
        return Plan(configs=configs, memory=memory, notes=notes)

    def fit_hint(self) -> str | None:
        return "pass smaller sizes with --size NAME=VALUE"

    def run_name(self, problem: CProblem, opts: Any) -> str:
        return f"{opts.file.stem}-{problem.function}"

    def title(self, problem: CProblem) -> str:
        return problem.function

    def problem_json(self, problem: CProblem, plan: Plan, arch: str, opts: Any) -> dict[str, Any]:
        return {
            "file": str(opts.file.resolve()),
            "function": problem.function,
            "params": [param_to_json(p) for p in problem.params],
            "sizes": problem.sizes,
            "sizes_source": problem.sizes_source,
            "init": problem.init,
            "cpp_args": problem.cpp_args,
            "sources": [str(Path(s).resolve()) for s in getattr(problem, "sources", ()) or opts.sources],
            "configs": plan.configs,
            "memory": None if plan.memory is None else plan.memory.to_json(),
            "arch": arch,
            "policy": opts.policy,
        }

    def describe(self, problem: CProblem, plan: Plan, arch: str, opts: Any, detected: bool) -> list[str]:
        from rich.markup import escape

        sizes = ", ".join(f"{k}={v}" for k, v in problem.sizes.items())
        small = ", ".join(f"{k}={v}" for k, v in plan.configs[0]["sizes"].items())
        init = f"init {problem.init.name}()" if problem.init else "seeded random data"
        return [
            f"[bold]{escape(problem.function)}[/] from {escape(str(opts.file))}: sizes {sizes} "
            f"(from {problem.sizes_source}); verify also at {small}; {init}; nvcc -arch={arch}"
            + ("" if detected else " [yellow](no GPU detected)[/]")
        ]

    def open(self, problem: CProblem, plan: Plan, settings: EvalSettings, workdir: Path) -> CEvaluation:
        from cudaperf_cli.problems.c import build_reference

        folder = Path(workdir) / "reference"
        folder.mkdir(parents=True, exist_ok=True)
        reference = build_reference(problem, folder)
        return CEvaluation(problem, plan, settings, workdir, reference)

    def baseline_from_json(self, data: Any) -> Baseline | None:
        try:
            return Baseline(dict(data["cpu_ms"]), dict(data["cpu_iqr_ms"]), dict(data["roles"]),
                            data.get("reference_outputs"))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def candidate_record(self, proposal: Any, turn: int, *, sample: int = 0, samples: int = 1,
                         mapping: dict[str, Any] | None = None) -> TurnRecord:
        record = TurnRecord(turn, proposal.policy, proposal.description, "pending",
                            source=proposal.source,
                            mapping=dict(proposal.mapping) if mapping is None else mapping,
                            sample=sample, samples=samples)
        if not proposal.source.strip():  # a model's reply without usable code
            record.status = "format_error"
            record.message = str(proposal.mapping.get("format_error") or "the reply had no usable code")
        return record

    def write(self, best: TurnRecord, evaluation: Evaluation, out: Path, opts: Any) -> list[str]:
        from cudaperf_cli.agent.results import build_instructions, result_source

        problem = evaluation.problem
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(out, result_source(problem, best.source or "", best.access))
        except OSError as exc:
            raise CudaperfError(
                f"cannot write {out}: {exc.strerror or exc}",
                hint=f"turn {best.turn + 1}'s source is kept in the run folder (turns.jsonl)",
            ) from None
        how = build_instructions(problem, out, evaluation.settings.arch)
        return [f"written     {out}", f"build       {how.compile}", f"link        {how.link}",
                f"note        {how.note}"]

    def summary(self, problem: CProblem, evaluation: Evaluation | None, plan: Plan) -> dict[str, Any]:
        baseline = None if evaluation is None else evaluation.baseline
        return {
            "kind": "c",
            "function": problem.function,
            "sizes": problem.sizes,
            "configs": plan.configs,
            "baseline": getattr(evaluation, "baseline_name", None) or "gcc -O3, 1 thread",
            "cpu_baseline": None if baseline is None else to_jsonable(baseline),
        }


__all__ = ["ACCESS_OF_ROLE", "BASELINE_BUDGET_S", "BASELINE_REPS", "Baseline", "CEvaluation", "CKind",
           "fill_from_evaluation", "plan_c", "verification_configs"]
