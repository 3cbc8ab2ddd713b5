"""``cudaperf optimize FILE.c``: the main job, stage by stage.

1. load the problem (preprocess, parse, parameters, extents, sizes)      problems/c.py
2. build the reference library (gcc -O3, the file untouched)            problems/c.py
3. turns: policy -> nvcc -> child-process verify & time -> feedback      agent/loop.py
4. write ``<stem>.cu`` (best verified candidate + drop-in host wrapper)  agent/results.py
5. report (Rich or ``--json``) and the exit code (docs/exit-codes.md)
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.checks import check_arch, check_memory, resolve_output
from cudaperf_cli.agent.feedback import feedback_for
from cudaperf_cli.agent.loop import LoopResult, TurnRecord, run_loop
from cudaperf_cli.agent.store import RunStore
from cudaperf_cli.core import CProblem, CudaperfError, ProblemError, param_to_json, to_jsonable

EXIT_OK, EXIT_NO_CORRECT, EXIT_NO_DEVICE = 0, 1, 4

#: The evaluation's measured array roles -> the copies the drop-in wrapper makes.
ACCESS_OF_ROLE = {"read-only": "read", "write-only": "write", "read-write": "readwrite"}


@dataclass(frozen=True)
class OptimizeOptions:
    """Everything ``cudaperf optimize`` was asked (see ``cudaperf optimize --help``)."""

    file: Path
    cpp_args: tuple[str, ...] = ()
    function: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    init: str | None = None
    turns: int = 3
    policy: str = "builtin"
    arch: str | None = None
    output: Path | None = None
    force: bool = False
    run_root: Path = Path("cudaperf-runs")
    eval_timeout_s: float = 300.0
    compile_timeout_s: float = 120.0
    seed: int = 0
    json_output: bool = False
    target_speedup: float | None = None
    patience: int | None = None
    # model policies (openai, replay); the key is read from the variable, never stored
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None
    max_tokens: int | None = None
    replay: Path | None = None


POLICIES = ("builtin", "openai", "replay")


def make_policy(name: str, opts: OptimizeOptions | None = None) -> Any:
    """The policy named ``name`` (``builtin``, ``openai`` or ``replay``), configured by ``opts``.

    Raises:
        CudaperfError: an unknown policy, or a model policy missing its ``--model`` /
            ``--replay`` (exit code 2).
    """
    if name == "builtin":
        from cudaperf_cli.policies.builtin.policy import BuiltinPolicy

        return BuiltinPolicy()
    if name == "openai":
        if opts is None or not opts.model:
            raise CudaperfError("--policy openai needs --model NAME (the served model's name)")
        from cudaperf_cli.policies.model_policy import ModelPolicy
        from cudaperf_cli.policies.openai_policy import OpenAIChatModel

        chat = OpenAIChatModel(
            opts.model, opts.base_url, api_key_env=opts.api_key_env,
            temperature=opts.temperature, max_tokens=opts.max_tokens,
        )
        return ModelPolicy(chat, "openai")
    if name == "replay":
        if opts is None or opts.replay is None:
            raise CudaperfError("--policy replay needs --replay FILE (a JSONL file of replies)")
        from cudaperf_cli.policies.model_policy import ModelPolicy
        from cudaperf_cli.policies.replay import ReplayChatModel

        return ModelPolicy(ReplayChatModel(opts.replay), "replay")
    raise CudaperfError(f"unknown policy '{name}': available policies: {', '.join(POLICIES)}")


#: Reference runs for the CPU baseline (median), and their time budget in seconds.
BASELINE_REPS, BASELINE_BUDGET_S = 7, 20.0


@dataclass(frozen=True)
class Baseline:
    """The reference measured once per run: CPU median and IQR (ms) per timed configuration
    name, and array name -> measured role (``read-only``/``write-only``/``read-write``)."""

    cpu_ms: dict[str, float]
    cpu_iqr_ms: dict[str, float]
    roles: dict[str, str]


@dataclass
class Evaluator:
    """Runs one candidate through build and evaluation; fills a :class:`TurnRecord`."""

    problem: CProblem
    reference: Any  # problems.c.ReferenceLib
    configs: list[dict[str, Any]]
    arch: str
    cache_root: Path
    eval_timeout_s: float
    compile_timeout_s: float
    seed: int
    device_missing: bool = False
    baseline: Baseline | None = None  #: set by measure_baseline()
    reports: dict[int, Any] = field(default_factory=dict)  #: turn -> StructureReport

    def job(self, lib_path: Path | None) -> Any:
        """The evaluation job of one candidate (``None``: the reference alone).

        Once :meth:`measure_baseline` ran, candidate jobs reuse its CPU times and array
        roles, so every turn's speedup has the same denominator.
        """
        from cudaperf_cli.evaluate import EvalJob

        extra: dict[str, Any] = {}
        if lib_path is None:
            extra = {"cpu_reps": BASELINE_REPS, "cpu_budget_s": BASELINE_BUDGET_S}
        elif self.baseline is not None:
            extra = {"cpu_baseline_ms": self.baseline.cpu_ms, "array_roles": self.baseline.roles}
        return EvalJob.from_problem(
            self.problem, ref_lib=self.reference, cand_lib=lib_path, configs=self.configs,
            seed=self.seed, **extra,
        )

    def measure_baseline(self) -> Baseline:
        """Run the reference alone (child process, no GPU needed): CPU median per timed
        configuration and the arrays' measured roles.

        Raises:
            ProblemError: the reference crashed, hung or failed on its own data.
        """
        from cudaperf_cli.evaluate import run_evaluation

        result = run_evaluation(self.job(None), timeout_s=self.eval_timeout_s)
        if result.status != "reference_only":
            raise ProblemError(f"the reference {self.problem.function} failed: {result.message}")
        cpu_ms: dict[str, float] = {}
        iqr_ms: dict[str, float] = {}
        for cfg in result.configs:
            if cfg.timing is not None and cfg.timing.cpu is not None:
                cpu_ms[cfg.name] = cfg.timing.cpu.median_ms
                iqr_ms[cfg.name] = cfg.timing.cpu.iqr_ms
        self.baseline = Baseline(cpu_ms, iqr_ms, dict(result.array_roles))
        return self.baseline

    def run(self, record: TurnRecord, source: str, stage: Any) -> TurnRecord:
        from cudaperf_cli.build import build_candidate

        stage("compiling (nvcc)")
        built = build_candidate(
            source,
            arch=self.arch,
            cache_root=self.cache_root,
            timeout_s=self.compile_timeout_s,
            extra_flags=self.problem.cpp_args,
        )
        record.build = to_jsonable(built)
        record.build_dir = str(Path(built.lib_path).parent) if built.lib_path else None
        record.compile_s = 0.0 if built.cached else built.seconds
        record.compile_cached = built.cached
        if built.resources:
            record.registers = max(k.registers for k in built.resources)
            record.spill_bytes = sum(k.spill_store_bytes + k.spill_load_bytes for k in built.resources)
        if not built.ok:
            record.status = built.status
            first = (built.errors or "").strip().splitlines()
            record.message = first[0] if first else built.status
            return record
        self.score_structure(record, source, built.resources)
        if self.device_missing:
            record.status = "no_device"
            record.message = "compiled; not run (no CUDA device)"
            return record
        stage("verifying and timing (child process)")
        from cudaperf_cli.evaluate import run_evaluation

        t0 = time.perf_counter()
        result = run_evaluation(self.job(Path(built.lib_path)), timeout_s=self.eval_timeout_s)
        record.eval_s = time.perf_counter() - t0
        fill_from_evaluation(record, result)
        if record.status == "no_device":
            self.device_missing = True
        return record

    def score_structure(self, record: TurnRecord, source: str, resources: Any) -> None:
        """Static structural analysis of a compiled candidate (never fails the turn)."""
        from cudaperf_cli.structure import analyze_source
        from cudaperf_cli.structure.gpus import default_gpu

        try:
            report = analyze_source(
                source, arch=self.arch, resources=resources, gpu=default_gpu(self.arch),
                sizes=self.problem.sizes, source_name=f"turn {record.turn + 1}",
            )
        except Exception as exc:  # noqa: BLE001 - analysis is advisory; the turn goes on
            record.structure_reasons = [f"structural analysis failed: {exc}"]
            return
        self.reports[record.turn] = report
        record.structure_score = report.score
        record.structure_reasons = report.reasons(3)


def fill_from_evaluation(record: TurnRecord, result: Any) -> None:
    """Copy an evaluation result's status, errors and timings into ``record``."""
    data = to_jsonable(result)
    record.evaluation = data
    record.status = data["status"]
    record.message = data.get("message") or ""
    summary = data.get("summary") or {}
    for key in (
        "max_abs_err",
        "max_rel_err",
        "gpu_ms",
        "gpu_ms_iqr",
        "e2e_ms",
        "cpu_ms",
        "speedup_kernel",
        "speedup_e2e",
        "baseline",
    ):
        if summary.get(key) is not None:
            setattr(record, key, summary[key])
    record.access = {name: ACCESS_OF_ROLE[role] for name, role in (data.get("array_roles") or {}).items()}


def _has_candidate(policy: Any, problem: CProblem) -> bool:
    """Whether the policy has a first candidate (the loop's turn 0 then records a refusal).

    A model policy is not probed (that would spend a request): it is assumed to have one.
    """
    if getattr(policy, "asks_a_model", False):
        return True
    try:
        policy.propose(problem, 0)
    except Exception:  # noqa: BLE001 - a refusal, or a policy bug: turn 0 records either
        return False
    return True


def verification_configs(problem: CProblem) -> list[dict[str, Any]]:
    """Main configuration (verified once, then timed) + a small odd one (two trials)."""
    from cudaperf_cli.problems.c import small_sizes

    small = small_sizes(problem)
    configs = [{"name": "small-odd", "sizes": small, "trials": 2, "time": False}]
    configs.append({"name": "main", "sizes": dict(problem.sizes), "trials": 1, "time": True})
    return configs


def run_optimize_command(opts: OptimizeOptions) -> int:
    """Run ``cudaperf optimize``; returns the exit code (docs/exit-codes.md)."""
    from rich.markup import escape

    from cudaperf_cli.agent.render import QuietObserver, RichObserver, best_panel, stdout_console
    from cudaperf_cli.build import default_cache_root, detect_arch
    from cudaperf_cli.problems.c import build_reference, load_c_problem

    console = stdout_console()
    human = not opts.json_output

    if opts.file.is_dir():
        raise ProblemError(f"{opts.file} is a directory, not a C file")
    if not opts.file.is_file():
        raise ProblemError(f"{opts.file}: no such file")
    out_path = resolve_output(opts)
    policy = make_policy(opts.policy, opts)
    if opts.arch is not None:
        check_arch(opts.arch)

    problem = load_c_problem(
        opts.file, function=opts.function, cpp_args=opts.cpp_args, sizes=opts.sizes, init=opts.init
    )
    check_memory(problem)
    configs = verification_configs(problem)
    detected = detect_arch()
    arch = opts.arch or detected or "sm_90"
    if hasattr(policy, "arch"):  # model policies name the architecture in their prompt
        policy.arch = arch

    store = RunStore(opts.run_root, f"{opts.file.stem}-{problem.function}")
    store.write_json(
        "problem.json",
        {
            "file": str(opts.file.resolve()),
            "function": problem.function,
            "params": [param_to_json(p) for p in problem.params],
            "sizes": problem.sizes,
            "sizes_source": problem.sizes_source,
            "init": problem.init,
            "cpp_args": problem.cpp_args,
            "configs": configs,
            "arch": arch,
            "policy": opts.policy,
        },
    )
    if human:
        sizes = ", ".join(f"{k}={v}" for k, v in problem.sizes.items())
        small = ", ".join(f"{k}={v}" for k, v in configs[0]["sizes"].items())
        init = f"init {problem.init.name}()" if problem.init else "seeded random data"
        console.print(
            f"[bold]{escape(problem.function)}[/] from {escape(str(opts.file))}: sizes {sizes} "
            f"(from {problem.sizes_source}); verify also at {small}; {init}; nvcc -arch={arch}"
            + ("" if detected else " [yellow](no GPU detected)[/]")
        )
    reference = build_reference(problem, store.subdir("reference"))

    evaluator = Evaluator(
        problem=problem,
        reference=reference,
        configs=configs,
        arch=arch,
        cache_root=default_cache_root(),
        eval_timeout_s=opts.eval_timeout_s,
        compile_timeout_s=opts.compile_timeout_s,
        seed=opts.seed,
        device_missing=detected is None,
    )

    if _has_candidate(policy, problem):  # no baseline to measure for a refused function
        if human:
            with console.status(f"measuring the CPU baseline ({reference.baseline_name})"):
                baseline = evaluator.measure_baseline()
            for ms, iqr in zip(baseline.cpu_ms.values(), baseline.cpu_iqr_ms.values()):
                console.print(
                    f"CPU baseline ({reference.baseline_name}) at the main sizes: {ms:.4g} ms "
                    f"median of {BASELINE_REPS} runs at most, IQR {iqr:.3g} ms"
                )
        else:
            evaluator.measure_baseline()

    observer: Any = RichObserver(console, f"{problem.function}: {opts.policy} policy") if human else QuietObserver()

    def run_turn(turn: int, history: list[TurnRecord]) -> TurnRecord:
        from cudaperf_cli.policies.base import PolicyRefusal

        observer.stage(turn, "writing a candidate")
        try:
            proposal = policy.propose(problem, turn, history=list(history))
        except PolicyRefusal as refusal:
            record = TurnRecord(turn, opts.policy, "no candidate", "refused", message=str(refusal))
            record.feedback = feedback_for(record)
            return record
        except CudaperfError:  # e.g. the model server is unreachable: ends the run, one line
            raise
        except Exception as exc:  # noqa: BLE001 - a policy bug ends its turns, not the run
            log = store.path / f"policy-error-turn{turn + 1}.txt"
            log.write_text("".join(traceback.format_exception(exc)))
            why = f"the {opts.policy} policy failed: {type(exc).__name__}: {exc} (see {log.name})"
            record = TurnRecord(turn, opts.policy, "no candidate", "refused", message=why)
            record.feedback = feedback_for(record)
            return record
        record = TurnRecord(
            turn, proposal.policy, proposal.description, "pending",
            source=proposal.source, mapping=dict(proposal.mapping),
        )
        if not proposal.source.strip():  # a model's reply without usable code: a failed candidate
            record.status = "format_error"
            record.message = str(proposal.mapping.get("format_error") or "the reply had no usable code")
            record.baseline = getattr(reference, "baseline_name", None)
            record.feedback = feedback_for(record)
            return record
        evaluator.run(record, proposal.source, lambda name: observer.stage(turn, name))
        if record.baseline is None:
            record.baseline = getattr(reference, "baseline_name", None)
        record.feedback = feedback_for(record)
        return record

    started = time.perf_counter()
    with observer if human else contextlib.nullcontext():
        result = run_loop(
            run_turn,
            turns=opts.turns,
            observer=observer,
            on_record=lambda r: store.append_jsonl("turns.jsonl", r),
            target_speedup=opts.target_speedup,
            patience=opts.patience,
        )
    wall_s = time.perf_counter() - started

    code, lines, written = _finish(problem, result, evaluator, out_path, arch, opts)
    summary = _summary(problem, result, configs, arch, store.path, written, code, wall_s, evaluator)
    store.write_json("summary.json", summary)
    if human:
        if result.best is not None and result.best.turn in evaluator.reports:
            from cudaperf_cli.structure.render import print_report

            print_report(evaluator.reports[result.best.turn], console, top=3)
        console.print(best_panel(result, lines))
        console.print(f"stopped: {result.stop_reason}; run folder: {store.path}", markup=False)
    else:
        print(json.dumps(to_jsonable(summary), indent=2, default=str))
    if code == EXIT_NO_DEVICE:
        print("no CUDA device: candidates were compiled but not verified or timed", file=sys.stderr)
    elif code == EXIT_NO_CORRECT:
        why = ("the policy produced no candidate" if all(r.status == "refused" for r in result.turns)
               else "no correct candidate")
        print(f"{why}: see the turns above and the run folder {store.path}", file=sys.stderr)
    return code


def _finish(
    problem: CProblem, result: LoopResult, evaluator: Evaluator, out_path: Path, arch: str,
    opts: OptimizeOptions,
) -> tuple[int, list[str], Path | None]:
    from cudaperf_cli.agent.results import build_instructions, result_source

    best = result.best
    if best is None:
        if evaluator.device_missing and any(r.status == "no_device" for r in result.turns):
            return EXIT_NO_DEVICE, ["No CUDA device: nothing was verified, nothing written."], None
        if all(r.status == "refused" for r in result.turns):
            return EXIT_NO_CORRECT, ["The policy produced no candidate; nothing written."], None
        return EXIT_NO_CORRECT, ["No candidate passed verification; nothing written."], None
    if out_path.exists() and not opts.force:  # appeared while we worked
        raise CudaperfError(f"{out_path} appeared during the run; pass --force to overwrite it")
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(result_source(problem, best.source or "", best.access))
    except OSError as exc:
        raise CudaperfError(
            f"cannot write {out_path}: {exc.strerror or exc}",
            hint=f"turn {best.turn + 1}'s source is kept in the run folder (turns.jsonl)",
        ) from None
    how = build_instructions(problem, out_path, arch)
    lines = [
        f"written     {out_path}",
        f"build       {how.compile}",
        f"link        {how.link}",
        f"note        {how.note}",
    ]
    return EXIT_OK, lines, out_path


def _summary(
    problem: CProblem, result: LoopResult, configs: list[dict[str, Any]], arch: str,
    run_dir: Path, written: Path | None, code: int, wall_s: float, evaluator: Evaluator,
) -> dict[str, Any]:
    def brief(r: TurnRecord) -> dict[str, Any]:
        d = to_jsonable(r)
        for k in ("source", "build", "evaluation"):
            d.pop(k, None)
        return d

    best = result.best
    return {
        "file": str(problem.path),
        "function": problem.function,
        "sizes": problem.sizes,
        "configs": configs,
        "arch": arch,
        "baseline": evaluator.reference.baseline_name,
        "cpu_baseline": None if evaluator.baseline is None else to_jsonable(evaluator.baseline),
        "turns": [brief(r) for r in result.turns],
        "best_turn": None if best is None else best.turn + 1,
        "best": None if best is None else brief(best),
        "output": None if written is None else str(written),
        "run_dir": str(run_dir),
        "stop_reason": result.stop_reason,
        "exit_code": code,
        "wall_s": wall_s,
    }
