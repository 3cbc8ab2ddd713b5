"""``cudaperf optimize FILE.c``: the main job, stage by stage (``FILE.py``: agent/torch_optimize.py).

1. load the problem (preprocess, parse, parameters, extents, sizes)      problems/c.py
2. build the reference library (gcc -O3, the file untouched)            problems/c.py
3. turns: policy -> nvcc -> child-process verify & time -> feedback      agent/loop.py
4. write ``<stem>.cu`` (best verified candidate + drop-in host wrapper)  agent/results.py
5. report (Rich or ``--json``) and the exit code (docs/exit-codes.md)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.checks import check_arch, check_memory, resolve_output
from cudaperf_cli.agent.feedback import feedback_for, follow
from cudaperf_cli.agent.loop import LoopResult, TurnRecord, run_loop
from cudaperf_cli.agent.store import RunStore
from cudaperf_cli.core import CProblem, CudaperfError, ProblemError, param_to_json, to_jsonable

EXIT_OK, EXIT_NO_CORRECT, EXIT_NO_DEVICE, EXIT_INTERRUPTED = 0, 1, 4, 130

#: The evaluation's measured array roles -> the copies the drop-in wrapper makes.
ACCESS_OF_ROLE = {"read-only": "read", "write-only": "write", "read-write": "readwrite"}


@dataclass(frozen=True)
class OptimizeOptions:
    """Everything ``cudaperf optimize`` was asked (see ``cudaperf optimize --help``)."""

    file: Path
    #: C problems: more C sources linked into the reference (``utilities/polybench.c``).
    sources: tuple[Path, ...] = ()
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
    #: Comparison tolerances for every floating dtype; None: the per-dtype defaults
    #: (float32 1e-4/1e-4, KernelBench's; float64 atol 1e-9, rtol 1e-7).
    atol: float | None = None
    rtol: float | None = None
    #: A verified candidate this many times slower than the run's best correct candidate
    #: or the baseline stops timing early (status ``slow``); 0: never.
    slow_factor: float = 10.0
    json_output: bool = False
    target_speedup: float | None = None
    patience: int | None = None
    # model policies (openai, replay); the key is read from the variable, never stored
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    sampling_seed: int | None = None
    request_timeout_s: float = 600.0
    max_retries: int = 2
    replay: Path | None = None
    samples: int = 1
    context_tokens: int = 16384
    # interaction: ask after each turn (a terminal, not --yes, not --json)
    interactive: bool = False
    resume: Path | None = None
    # PyTorch problems: also time torch.compile(Model) for every candidate
    compile_baseline: bool = True
    # pre-ranking of the samples of a turn (docs/ranker.md): a checkpoint folder, and how
    # many of the best-ranked samples to evaluate (None: all of them, best-ranked first)
    ranker: Path | None = None
    ranker_top: int | None = None


POLICIES = ("builtin", "openai", "vllm", "transformers", "replay")

#: Options a resumed run (``--resume``) may change; every other one is the run's own.
RESUME_OVERRIDES = frozenset({
    "turns", "target_speedup", "patience", "output", "force", "json_output", "interactive",
    "eval_timeout_s", "compile_timeout_s", "request_timeout_s", "max_retries", "base_url",
    "compile_baseline", "ranker", "ranker_top",
})


def make_policy(name: str, opts: OptimizeOptions | None = None) -> Any:
    """The policy named ``name`` (``builtin``, ``openai``, ``vllm``, ``transformers`` or
    ``replay``), configured by ``opts``.

    Raises:
        CudaperfError: an unknown policy, or a model policy missing its ``--model`` /
            ``--replay`` (exit code 2); vllm/transformers not installed, or (transformers) a
            ``--model`` that is not a local model folder (``ModelServerError``, exit code 3).
    """
    if name == "builtin":
        from cudaperf_cli.policies.builtin.policy import BuiltinPolicy

        return BuiltinPolicy()
    if name not in POLICIES:
        raise CudaperfError(f"unknown policy '{name}': available policies: {', '.join(POLICIES)}")
    from cudaperf_cli.policies.model_policy import ModelPolicy

    opts = opts or OptimizeOptions(file=Path("."))
    chat: Any
    if name == "openai":
        if not opts.model:
            raise CudaperfError("--policy openai needs --model NAME (the served model's name)")
        if opts.base_url is not None and not opts.base_url.startswith(("http://", "https://")):
            raise CudaperfError(f"--base-url {opts.base_url!r} is not an http:// or https:// URL",
                                hint="e.g. --base-url http://127.0.0.1:8000/v1")
        from cudaperf_cli.policies.openai_policy import OpenAIChatModel

        chat = OpenAIChatModel(
            opts.model, opts.base_url, api_key_env=opts.api_key_env,
            temperature=opts.temperature, top_p=opts.top_p, max_tokens=opts.max_tokens,
            seed=opts.sampling_seed, timeout=opts.request_timeout_s, max_retries=opts.max_retries,
        )
        chat.client()  # a missing package or API key fails now, before any work
    elif name == "vllm":
        if not opts.model:
            raise CudaperfError("--policy vllm needs --model NAME_OR_PATH (Hugging Face name or local weights)")
        import importlib.util

        from cudaperf_cli.policies.vllm_policy import INSTALL_HINT, VLLMChatModel

        if importlib.util.find_spec("vllm") is None:  # before any work; the model loads later
            from cudaperf_cli.policies.openai_policy import ModelServerError

            raise ModelServerError("the vllm policy needs the vllm package, which is not installed",
                                   hint=INSTALL_HINT)

        chat = VLLMChatModel(
            opts.model, temperature=opts.temperature, top_p=opts.top_p,
            max_tokens=opts.max_tokens, seed=opts.sampling_seed,
        )
    elif name == "transformers":
        if not opts.model:
            raise CudaperfError("--policy transformers needs --model PATH (a local model folder saved "
                                "with save_pretrained)")
        from cudaperf_cli.policies.transformers_policy import (
            TransformersChatModel, check_installed, check_model_folder,
        )

        check_installed()  # before any work; the model loads on the first turn
        check_model_folder(opts.model)
        chat = TransformersChatModel(
            opts.model, temperature=opts.temperature, top_p=opts.top_p,
            max_tokens=opts.max_tokens, seed=opts.sampling_seed,
        )
    else:
        if opts.replay is None:
            raise CudaperfError("--policy replay needs --replay FILE (a JSONL file of replies)")
        from cudaperf_cli.policies.replay import ReplayChatModel

        chat = ReplayChatModel(opts.replay)
    return ModelPolicy(chat, name, context_tokens=opts.context_tokens)


def propose_or_refuse(
    policy: Any, problem: Any, turn: int, history: list[TurnRecord], opts: OptimizeOptions,
    store: RunStore, ranker: Any = None,
) -> tuple[list[Any], TurnRecord | None]:
    """Turn ``turn``'s proposals, or the ``refused`` record that ends the turn: the policy's
    refusal, an empty answer, or a policy bug (its traceback goes to
    ``policy-error-turn<N>.txt`` in the run folder; the run goes on).

    With a ``ranker`` (:class:`~cudaperf_cli.ranker.select.SampleRanker`, ``--ranker``) and
    several proposals, they come back best-ranked first (:func:`rank_proposals`).

    Raises:
        CudaperfError: a run-ending error, e.g. the model server cannot be reached.
    """
    from cudaperf_cli.policies.base import PolicyRefusal

    def refused(why: str) -> tuple[list[Any], TurnRecord]:
        record = TurnRecord(turn, opts.policy, "no candidate", "refused", message=why,
                            samples=opts.samples)
        record.feedback = feedback_for(record)
        return [], record

    try:
        proposals = propose_samples(policy, problem, turn, list(history), opts.samples)
    except PolicyRefusal as refusal:
        return refused(str(refusal))
    except CudaperfError:
        raise
    except Exception as exc:  # noqa: BLE001 - a policy bug ends its turns, not the run
        log = store.path / f"policy-error-turn{turn + 1}.txt"
        log.write_text("".join(traceback.format_exception(exc)))
        return refused(f"the {opts.policy} policy failed: {type(exc).__name__}: {exc} (see {log.name})")
    if not proposals:
        return refused("the policy returned no candidate")
    if ranker is not None and len(proposals) > 1:
        proposals = rank_proposals(ranker, proposals, problem, turn, opts.ranker_top, store)
    return proposals, None


def make_ranker(opts: OptimizeOptions) -> Any:
    """The ``--ranker`` checkpoint, loaded (None without one).

    Raises:
        CudaperfError: ``--ranker-top`` without ``--ranker``, or a checkpoint that cannot be
            loaded (exit 2, before any work).
    """
    if opts.ranker is None:
        if opts.ranker_top is not None:
            raise CudaperfError("--ranker-top needs --ranker CHECKPOINT_DIR")
        return None
    from cudaperf_cli.ranker.select import load_sample_ranker

    return load_sample_ranker(opts.ranker)


def _ranked_text(proposal: Any) -> str:
    """The CUDA a ranker reads: a PyTorch candidate's ``.cu`` file, else its source."""
    from cudaperf_cli.agent.torch_optimize import cuda_source_of

    cu = cuda_source_of(getattr(proposal, "files", {}) or {})
    return cu if cu is not None else proposal.source


def _problem_id(problem: Any) -> str:
    """The problem as the LM ranker's id line reads it (as ``cudaperf data pairs`` names
    an optimize run's problem): ``<file name>:<function>`` for C, the file name for PyTorch."""
    path = getattr(problem, "path", None)
    name = Path(path).name if path is not None else ""
    function = getattr(problem, "function", None)
    return f"{name}:{function}" if function else name


def rank_proposals(
    ranker: Any, proposals: list[Any], problem: Any, turn: int, top: int | None, store: RunStore,
) -> list[Any]:
    """``proposals`` ordered by the ranker's score (mean win probability against the
    others; docs/ranker.md), best first, cut to the ``top`` best when given.  Each kept
    proposal's ``mapping["ranker"]`` records ``score``, ``rank`` (1 = best) and ``of``;
    the ones cut are appended to ``ranked-out.jsonl`` in the run folder (turn, 0-based as
    in ``turns.jsonl``; rank, score, description, source, files), so nothing the policy
    wrote is lost.  With the built-in policy, the mappings cut are not tried in later turns.

    A proposal without code (a model's reply with no usable code) scores 0 and ranks last.
    """
    import dataclasses as dc

    from cudaperf_cli.ranker.select import order

    texts = [_ranked_text(p) for p in proposals]
    have = [i for i, t in enumerate(texts) if t.strip()]
    scored = ranker.scores([texts[i] for i in have], _problem_id(problem)) if len(have) > 1 else [0.5] * len(have)
    scores = [0.0] * len(proposals)
    for i, s in zip(have, scored):
        scores[i] = float(s)
    ranked = order(scores)
    keep = ranked if top is None else ranked[:top]
    out = []
    for rank, i in enumerate(ranked, start=1):
        info = {"score": round(scores[i], 4), "rank": rank, "of": len(proposals),
                "checkpoint": str(ranker.path)}
        p = proposals[i]
        if i in keep:
            out.append(dc.replace(p, mapping={**dict(p.mapping), "ranker": info}))
        else:
            row = {"turn": turn, **info, "description": p.description, "policy": p.policy,
                   "source": p.source, "files": dict(getattr(p, "files", {}) or {})}
            store.append_jsonl("ranked-out.jsonl", row)
    return out


def propose_samples(policy: Any, problem: CProblem, turn: int, history: list[TurnRecord], n: int) -> list[Any]:
    """Turn ``turn``'s ``n`` proposals.  A model policy answers ``n`` replies to one request;
    the built-in policy's plan is walked in order (turn ``t`` takes mappings ``t*n .. t*n+n-1``).

    Raises:
        PolicyRefusal: no candidate at all for this turn.
    """
    if hasattr(policy, "propose_samples"):
        return list(policy.propose_samples(problem, turn, history, n))
    from cudaperf_cli.policies.base import PolicyRefusal

    out = []
    for k in range(turn * n, turn * n + n):
        try:
            out.append(policy.propose(problem, k, history=history))
        except PolicyRefusal:
            if not out:
                raise
            break
    return out


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
    reports: dict[tuple[int, int], Any] = field(default_factory=dict)  #: (turn, sample) -> StructureReport

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
        self.reports[(record.turn, record.sample)] = report
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


def _file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def options_to_json(opts: OptimizeOptions) -> dict[str, Any]:
    """``opts`` as JSON for ``run.json`` (paths absolute; no API key: only its variable's name)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(opts):
        value = getattr(opts, f.name)
        if isinstance(value, Path):
            value = str(value.resolve())
        out[f.name] = to_jsonable(value)
    return out


def options_from_json(data: dict[str, Any]) -> OptimizeOptions:
    """The inverse of :func:`options_to_json` (unknown keys ignored)."""
    kinds = {f.name: f for f in dataclasses.fields(OptimizeOptions)}
    kw: dict[str, Any] = {}
    for name, value in data.items():
        if name not in kinds:
            continue
        if name in ("file", "output", "run_root", "replay", "resume", "ranker") and value is not None:
            value = Path(value)
        elif name == "cpp_args":
            value = tuple(value)
        elif name == "sources":
            value = tuple(Path(v) for v in value)
        kw[name] = value
    opts = OptimizeOptions(**kw)
    defaults = OptimizeOptions(file=Path("."))
    for f in dataclasses.fields(OptimizeOptions):  # a hand-edited run.json: types checked
        value, default = getattr(opts, f.name), getattr(defaults, f.name)
        if value is None or default is None:
            continue
        ok = (isinstance(value, type(default)) and not (isinstance(value, bool) != isinstance(default, bool))
              or (isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool)))
        if not ok:
            raise TypeError(f"option {f.name} is {value!r}, expected a {type(default).__name__}")
    return opts


@dataclass
class ResumeState:
    """What ``--resume RUN`` reads back from a run folder."""

    store: RunStore
    records: list[TurnRecord]
    hints: dict[int, str]
    baseline: Baseline | None
    output_sha256: str | None


def restore_run(resumed: "ResumeState", policy: Any, samples: int) -> tuple[RunStore, list[TurnRecord]]:
    """The run folder and records of a resumed run (``--resume``); the policy gets back the
    user's hints and, where it keeps a place (the built-in policy's plan), its place."""
    if hasattr(policy, "hints"):
        policy.hints.update(resumed.hints)
    if hasattr(policy, "resume"):
        policy.resume(resumed.records, samples)
    return resumed.store, resumed.records


#: OptimizeOptions field -> its command-line flag, where the names differ.
_FLAG_OF_FIELD = {
    "eval_timeout_s": "--timeout", "compile_timeout_s": "--compile-timeout", "json_output": "--json",
    "request_timeout_s": "--request-timeout", "interactive": "--yes", "sizes": "--size",
    "cpp_args": "-I/-D", "run_root": "--run-dir",
}


def _flag(name: str) -> str:
    return _FLAG_OF_FIELD.get(name, "--" + name.replace("_", "-"))


def load_resume(opts: OptimizeOptions, given: frozenset[str]) -> tuple[OptimizeOptions, ResumeState]:
    """Read the run folder ``opts.resume``: its options (``run.json``), turns, hints and
    baseline; options in ``given`` (named on this command line) override the run's when
    they are in :data:`RESUME_OVERRIDES`.

    Raises:
        CudaperfError: not a run folder, an option that cannot change on resume, or the C
            file changed since the run (exit code 2).
    """
    run_dir = Path(opts.resume or ".")
    meta_path = run_dir / "run.json"
    if not meta_path.is_file():
        raise CudaperfError(
            f"{run_dir} is not a resumable run folder (no run.json)",
            hint="pass a folder under cudaperf-runs/ made by cudaperf optimize",
        )
    try:
        meta = json.loads(meta_path.read_text())
        stored = options_from_json(meta["options"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CudaperfError(f"cannot read {meta_path}: {exc}") from None
    fields = {f.name for f in dataclasses.fields(OptimizeOptions)}
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, Path) and isinstance(b, Path):
            return a.resolve() == b.resolve()
        return a == b

    changed = sorted(
        name for name in (given & fields) - RESUME_OVERRIDES - {"resume"}
        if not same(getattr(opts, name), getattr(stored, name))
    )
    if changed:
        flags = ", ".join(_flag(name) for name in changed)
        raise CudaperfError(
            f"cannot change {flags} when resuming; the run keeps its own options",
            hint="start a new run for other options; on resume you may change: "
            + ", ".join(sorted(_flag(n) for n in RESUME_OVERRIDES)),
        )
    overrides = {name: getattr(opts, name) for name in given & RESUME_OVERRIDES}
    # How to present this invocation is always its own, never the stored run's.
    overrides.update(interactive=opts.interactive, json_output=opts.json_output, force=opts.force)
    merged = dataclasses.replace(stored, resume=run_dir, **overrides)
    if not merged.file.is_file():
        raise CudaperfError(f"the run's problem file {merged.file} no longer exists")
    if meta.get("file_sha256") and _file_sha256(merged.file) != meta["file_sha256"]:
        raise CudaperfError(
            f"{merged.file} changed since the run started; its turns no longer apply",
            hint="start a new run (cudaperf optimize FILE)",
        )
    store = RunStore.open(run_dir)
    records, skipped = [], 0
    turns_path = run_dir / "turns.jsonl"
    for line in (turns_path.read_text().splitlines() if turns_path.exists() else []):
        try:
            records.append(TurnRecord.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError):
            skipped += 1  # e.g. the last line cut by a crash
    if skipped:
        print(f"warning: {skipped} unreadable line(s) of {turns_path} skipped", file=sys.stderr)
    hints: dict[int, str] = {}
    hints_path = run_dir / "hints.jsonl"
    for line in (hints_path.read_text().splitlines() if hints_path.exists() else []):
        try:
            h = json.loads(line)
            hints[int(h["turn"])] = str(h["hint"])
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    baseline = None
    if (run_dir / "baseline.json").is_file():
        try:
            b = json.loads((run_dir / "baseline.json").read_text())
            baseline = Baseline(b["cpu_ms"], b["cpu_iqr_ms"], b["roles"])
        except (OSError, ValueError, KeyError, TypeError):
            baseline = None
    summary_sha = None
    try:
        summary_sha = json.loads((run_dir / "summary.json").read_text()).get("output_sha256")
    except (OSError, ValueError, AttributeError):
        pass
    return merged, ResumeState(store, records, hints, baseline, summary_sha)


def run_optimize_command(opts: OptimizeOptions, given: frozenset[str] = frozenset()) -> int:
    """Run ``cudaperf optimize``; returns the exit code (docs/exit-codes.md).

    ``given``: names of the options set on the command line (``--resume`` lets some of them
    override the run's own; see :data:`RESUME_OVERRIDES`).
    """
    from rich.markup import escape

    from cudaperf_cli.agent.render import QuietObserver, RichObserver, best_panel, stdout_console
    from cudaperf_cli.build import default_cache_root, detect_arch
    from cudaperf_cli.problems.c import build_reference, load_c_problem

    console = stdout_console()
    t_start = time.perf_counter()
    resumed: ResumeState | None = None
    if opts.resume is not None:
        opts, resumed = load_resume(opts, given)
    human = not opts.json_output

    if opts.file.is_dir():
        raise ProblemError(f"{opts.file} is a directory, not a C file")
    if not opts.file.is_file():
        raise ProblemError(f"{opts.file}: no such file")
    if opts.file.suffix == ".py":  # a PyTorch (KernelBench-format) problem
        from cudaperf_cli.agent.torch_optimize import run_torch_optimize

        c_only = [flag for flag, used in (("-I/-D", opts.cpp_args), ("--function", opts.function),
                                          ("--size", opts.sizes), ("--init", opts.init)) if used]
        if c_only:
            raise ProblemError(
                f"{', '.join(c_only)}: for C files only, not for a PyTorch problem",
                hint="a PyTorch problem's shapes are its module constants (edit the file)",
            )
        if opts.arch is not None:
            check_arch(opts.arch)
        return run_torch_optimize(opts, resumed, console, detect_arch(), t_start)
    if resumed is not None and _written_by_run(opts, resumed):
        opts = dataclasses.replace(opts, force=True)  # the result is this run's own: replace it
    out_path = resolve_output(opts)
    policy = make_policy(opts.policy, opts)
    ranker = make_ranker(opts)
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

    if resumed is None:
        store = RunStore(opts.run_root, f"{opts.file.stem}-{problem.function}")
        store.write_json("run.json", {
            "options": options_to_json(opts), "file_sha256": _file_sha256(opts.file),
            "cudaperf": _version(),
        })
        store.write_json("problem.json", {
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
        })
        history: list[TurnRecord] = []
    else:
        store, history = restore_run(resumed, policy, opts.samples)
    if human:
        sizes = ", ".join(f"{k}={v}" for k, v in problem.sizes.items())
        small = ", ".join(f"{k}={v}" for k, v in configs[0]["sizes"].items())
        init = f"init {problem.init.name}()" if problem.init else "seeded random data"
        if resumed is not None:
            done = len({r.turn for r in history})
            console.print(f"resuming {escape(str(store.path))}: {done} turn(s) done, "
                          f"{len(history)} candidate(s) kept")
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

    if resumed is not None and resumed.baseline is not None:
        evaluator.baseline = resumed.baseline  # the same denominator as the earlier turns
    elif _has_candidate(policy, problem):  # no baseline to measure for a refused function
        if resumed is not None and any(r.speedup_kernel is not None for r in history):
            print(f"warning: {store.path / 'baseline.json'} is missing or unreadable: the CPU "
                  "baseline is measured again; earlier turns' speedups used the old one",
                  file=sys.stderr)
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
        store.write_json("baseline.json", evaluator.baseline)

    observer: Any = RichObserver(console, f"{problem.function}: {opts.policy} policy") if human else QuietObserver()
    if human and history:
        observer.records.extend(history)

    def run_turn(turn: int, history: list[TurnRecord]) -> list[TurnRecord]:
        observer.stage(turn, "writing candidates" if opts.samples > 1 else "writing a candidate")
        proposals, refusal = propose_or_refuse(policy, problem, turn, history, opts, store, ranker)
        if refusal is not None:
            return [refusal]
        records = []
        for k, proposal in enumerate(proposals):
            record = TurnRecord(
                turn, proposal.policy, proposal.description, "pending",
                source=proposal.source, mapping=dict(proposal.mapping), sample=k,
                samples=opts.samples,
            )
            label = f"sample {k + 1}/{len(proposals)}: " if len(proposals) > 1 else ""
            if not proposal.source.strip():  # a model's reply without usable code
                record.status = "format_error"
                record.message = str(proposal.mapping.get("format_error") or "the reply had no usable code")
            else:
                evaluator.run(record, proposal.source, lambda name: observer.stage(turn, label + name))
            if record.baseline is None:
                record.baseline = getattr(reference, "baseline_name", None)
            record.feedback = feedback_for(record)
            records.append(record)
        follow(records)
        return records

    result, interrupted, _ = drive_loop(opts, store, policy, run_turn, history, observer, console)
    wall_s = time.perf_counter() - t_start  # the whole command: loading, baseline, turns
    return conclude(
        opts, store, result, interrupted, console,
        finish=lambda res: _finish(problem, res, evaluator, out_path, arch, opts),
        make_summary=lambda res, written, code: _summary(
            problem, res, configs, arch, store.path, written, code, wall_s, evaluator),
        reports=evaluator.reports,
        best_panel=best_panel,
    )


def drive_loop(
    opts: OptimizeOptions, store: RunStore, policy: Any, run_turn: Any, history: list[TurnRecord],
    observer: Any, console: Any,
) -> tuple[LoopResult, bool, float]:
    """Run the turns with the run's stopping rules, questions (interactive runs) and Ctrl-C
    handling; every record is appended to ``turns.jsonl`` as it finishes.

    Returns ``(result, interrupted, wall seconds)``; after a Ctrl-C the result holds the
    records written so far.
    """
    human = not opts.json_output
    ask = None
    if opts.interactive and human:
        from cudaperf_cli.agent.interact import TerminalAsk

        def save_hint(turn: int, hint: str) -> None:
            store.append_jsonl("hints.jsonl", {"turn": turn, "hint": hint})
            if hasattr(policy, "hints"):
                policy.hints[turn] = hint

        ask = TerminalAsk(console, observer, on_hint=save_hint if hasattr(policy, "hints") else None)

    started = time.perf_counter()
    interrupted = False
    try:
        with observer if human else contextlib.nullcontext(), _resumable(store):
            result = run_loop(
                run_turn,
                turns=opts.turns,
                observer=observer,
                on_record=lambda r: store.append_jsonl("turns.jsonl", r),
                target_speedup=opts.target_speedup,
                patience=opts.patience,
                ask=ask,
                history=history,
            )
    except KeyboardInterrupt:
        interrupted = True
        kept = _read_records(store.path / "turns.jsonl")
        from cudaperf_cli.agent.loop import best_index

        result = LoopResult(kept, best_index(kept), "interrupted (Ctrl-C)", True)
    return result, interrupted, time.perf_counter() - started


@contextlib.contextmanager
def _resumable(store: RunStore) -> Any:
    """A run-ending error (e.g. the model server went away) says how to resume the run."""
    try:
        yield
    except CudaperfError as err:
        if err.hint is None:
            err.hint = f"the turns done are kept; resume with: cudaperf optimize --resume {store.path}"
        raise


def conclude(
    opts: OptimizeOptions, store: RunStore, result: LoopResult, interrupted: bool, console: Any,
    *, finish: Any, make_summary: Any, reports: dict[tuple[int, int], Any], best_panel: Any,
) -> int:
    """Write the result (``finish(result) -> (code, panel lines, written path)``) unless the
    run was stopped, write ``summary.json`` (``make_summary(result, written, code)``), print
    the end of the run (Rich or ``--json``) and return the exit code."""
    human = not opts.json_output
    stopped = interrupted or (result.stopped_by_user and result.stop_reason.startswith("the user stopped"))
    if stopped:  # nothing written; the run folder can be resumed
        code, written = EXIT_INTERRUPTED, None
        lines = ["Stopped before the end: nothing written.",
                 f"resume      cudaperf optimize --resume {store.path}"]
    else:
        code, lines, written = finish(result)
    summary = make_summary(result, written, code)
    store.write_json("summary.json", summary)
    if interrupted:
        print(f"interrupted: resume with: cudaperf optimize --resume {store.path}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if stopped and not human:
        print(f"stopped by the user: resume with: cudaperf optimize --resume {store.path}", file=sys.stderr)
    if human:
        best_key = None if result.best is None else (result.best.turn, result.best.sample)
        if best_key in reports:
            from cudaperf_cli.structure.render import print_report

            print_report(reports[best_key], console, top=3)
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


def _written_by_run(opts: OptimizeOptions, resumed: ResumeState) -> bool:
    """True when the output file exists and is exactly what this run wrote before (a resumed
    run may then replace it without ``--force``)."""
    out = opts.output or Path.cwd() / f"{opts.file.stem}.cu"
    return bool(resumed.output_sha256) and out.is_file() and _file_sha256(out) == resumed.output_sha256


def _read_records(path: Path) -> list[TurnRecord]:
    out = []
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            out.append(TurnRecord.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return out


def _version() -> str:
    from cudaperf_cli import __version__

    return __version__


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
        "best_sample": None if best is None else best.sample + 1,
        "best": None if best is None else brief(best),
        "output": None if written is None else str(written),
        "output_sha256": None if written is None else _file_sha256(written),
        "samples": result.turns[0].samples if result.turns else 1,
        "turn_count": result.turn_count,
        "run_dir": str(run_dir),
        "stop_reason": result.stop_reason,
        "exit_code": code,
        "wall_s": wall_s,
    }
