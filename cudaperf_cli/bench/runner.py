"""Run a suite: one ``cudaperf optimize --json`` command per problem, several at once.

Each problem runs as::

    <python> -m cudaperf_cli optimize FILE [SOURCES...] <its manifest flags> <the policy flags>
        --json --run-dir OUT/runs/<name> --output OUT/kernels/<stem>.cu --force

in its own session (process group), with its own time limit: past it the whole group is
killed (SIGKILL) and the problem's status is ``problem_timeout``; a child that exits 2
without a result (bad input: the loader refused the file) is ``refused_at_load`` with its
one-line reason; one whose result says ``problem_status: "does_not_fit"`` (or that exits 5
without a result) is ``does_not_fit``; any other child that dies or prints no JSON is
``error``; the suite goes on either way.  ``-j N`` commands run at once
so that compiles overlap; their GPU evaluations queue on the per-GPU lock
(``evaluate/gpu_lock.py``), one at a time per GPU.  Where a command runs is the executor's
business (``bench/executor.py``: child processes of this machine, or Ray tasks on a
cluster's nodes); everything here reads the files it wrote into ``OUT``.  Every finished
problem is written at once to ``OUT/problems/<name>.json``, so ``--resume`` skips it;
Ctrl-C stops the executor (running commands killed), writes the report of what finished
and returns 130.

Layout of ``OUT`` (docs/bench.md)::

    bench.json              suite, settings and machine at the start (checked by --resume)
    problems/<name>.json    one result per finished problem (candidates with sources)
    runs/<name>/            that problem's optimize run folder(s)
    kernels/<stem>.cu       verified kernels (optimize writes one only when verified);
                            kernels/<stem>_cuda/ for a PyTorch problem (model.py + kernel.cu)
    logs/<name>.stdout|.stderr
    report.json  report.md  report.png  candidates.jsonl
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import AbstractSet, Any, Callable

from cudaperf_cli import statuses as S
from cudaperf_cli.bench import metrics as M
from cudaperf_cli.bench.suite import BenchProblem, Suite
from cudaperf_cli.bench.executor import OPTIMIZE_CMD_ENV, Executor, Launch, LocalExecutor, base_command
from cudaperf_cli.core import CudaperfError, write_text_atomic

#: Version of the problem-result, candidates.jsonl and report.json formats (docs/bench.md).
#: 2: ``correct`` means verified (``correct`` or ``slow``); problem statuses
#: ``refused_at_load`` (was ``error``) and ``does_not_fit``; the verdict, memory and
#: evaluation-seconds metrics.
SCHEMA_VERSION = 2
#: Report versions ``bench compare`` reads (the fields it compares did not change).
READABLE_SCHEMAS = (1, 2)
#: optimize's exit codes the runner reads (docs/exit-codes.md): 2 bad input (the problem is
#: refused at load), 5 the problem does not fit the device's memory.
EXIT_BAD_INPUT, EXIT_MISSING_TOOL, EXIT_DOES_NOT_FIT = 2, 3, 5
EXIT_OK, EXIT_INTERRUPTED = 0, 130

#: Policy settings passed through to optimize: field -> flag (None values are not passed).
PASS_THROUGH: dict[str, str] = {
    "policy": "--policy",
    "turns": "--turns",
    "samples": "--samples",
    "model": "--model",
    "base_url": "--base-url",
    "api_key_env": "--api-key-env",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "max_tokens": "--max-tokens",
    "sampling_seed": "--sampling-seed",
    "request_timeout": "--request-timeout",
    "max_retries": "--max-retries",
    "replay": "--replay",
    "target_speedup": "--target-speedup",
    "patience": "--patience",
    "timeout": "--timeout",
    "compile_timeout": "--compile-timeout",
    "arch": "--arch",
    "seed": "--seed",
    "config": "--config",
    "ranker": "--ranker",
    "ranker_top": "--ranker-top",
    "compile_baseline": "--compile-baseline",
    "atol": "--atol",
    "rtol": "--rtol",
    "slow_factor": "--slow-factor",
    "sanitize": "--sanitize",
}


@dataclass(frozen=True)
class PolicySettings:
    """The optimize flags every problem of a suite gets (None: optimize's default).

    ``timeout`` is one candidate evaluation's limit and ``compile_timeout`` one nvcc
    run's, both seconds; ``request_timeout`` one model request's, seconds.  ``atol`` and
    ``rtol`` override the tolerance table for every dtype; ``slow_factor`` is K of the
    ``slow`` status (a verified candidate K x slower than the best or the baseline stops
    timing early); ``sanitize`` False passes ``--no-sanitize`` (no compute-sanitizer stage).
    """

    policy: str = "builtin"
    turns: int = 3
    samples: int | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    sampling_seed: int | None = None
    request_timeout: float | None = None
    max_retries: int | None = None
    replay: str | None = None
    target_speedup: float | None = None
    patience: int | None = None
    timeout: float | None = None
    compile_timeout: float | None = None
    arch: str | None = None
    seed: int | None = None
    config: str | None = None
    ranker: str | None = None
    ranker_top: int | None = None
    compile_baseline: bool | None = None  #: False: optimize --no-compile-baseline
    atol: float | None = None
    rtol: float | None = None
    slow_factor: float | None = None
    sanitize: bool | None = None  #: False: optimize --no-sanitize

    def optimize_args(self, known: AbstractSet[str] | None) -> list[str]:
        """The flags for optimize.

        Args:
            known: the flags this cudaperf's ``optimize`` accepts (None: do not check).

        Raises:
            CudaperfError: a setting was given whose flag optimize does not accept (exit 2).
        """
        args: list[str] = []
        for name, flag in PASS_THROUGH.items():
            value = getattr(self, name)
            if value is None:
                continue
            if known is not None and flag not in known:
                raise CudaperfError(
                    f"{flag} is not an option of this cudaperf's optimize",
                    hint="drop it, or update cudaperf",
                )
            if isinstance(value, bool):  # a --flag/--no-flag switch
                args.append(flag if value else "--no-" + flag[2:])
            else:
                args += [flag, str(value)]
        return args


@dataclass(frozen=True)
class BenchOptions:
    """What ``cudaperf bench SUITE`` was asked.

    Attributes:
        out_dir: the output folder (None: ``bench-results/<suite>-<time>``).
        jobs: problems run at once (None: the executor's default: the CPU cores here, or
            the cluster's GPUs x ``per_gpu`` under Ray).
        problem_timeout_s: one problem's whole optimize run, seconds (a manifest's
            ``timeout`` overrides it per problem).
        primary: the speedup key the headline metrics use (``kernel`` or ``e2e``).
        known_flags: every option string this cudaperf's ``optimize`` accepts (the cli
            layer reads them from the command: ``cudaperf_cli.cli.bench.optimize_flags``);
            a setting whose flag is not among them is refused before anything runs.  None:
            not checked.
    """

    settings: PolicySettings = field(default_factory=PolicySettings)
    out_dir: Path | None = None
    jobs: int | None = None
    problem_timeout_s: float = 3600.0
    resume: bool = False
    json_output: bool = False
    primary: str = "kernel"
    known_flags: frozenset[str] | None = None
    executor: str = "local"
    ray_address: str | None = None
    per_gpu: int = 2
    retries: int = 2


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def default_out_dir(suite: Suite, root: Path = Path("bench-results")) -> Path:
    """``bench-results/<suite>-<YYYYmmdd-HHMMSS>`` (a numeric suffix on a clash)."""
    base = root / f"{suite.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename
    (:func:`~cudaperf_cli.core.write_text_atomic`, no fsync)."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n", fsync=False)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; a malformed line (a half-written last line of a
    killed run) is skipped.  A missing file is an empty list."""
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def kernel_names(problems: list[BenchProblem]) -> dict[str, str]:
    """Problem id -> result name under ``kernels/``: ``<stem>.cu`` for a C problem, the folder
    ``<stem>_cuda`` (model.py + kernel.cu) for a PyTorch one; ``<name>...`` for stems shared by
    two problems."""
    stems: dict[str, int] = {}
    for p in problems:
        stems[p.path.stem] = stems.get(p.path.stem, 0) + 1
    out = {}
    for p in problems:
        base = p.path.stem if stems[p.path.stem] == 1 else p.safe_name
        out[p.id] = f"{base}_cuda" if p.path.suffix == ".py" else f"{base}.cu"
    return out


def candidate_row(
    rec: dict[str, Any], problem: dict[str, Any], *, suite: str, settings: PolicySettings,
    gpu: str | None, is_best: bool,
) -> dict[str, Any]:
    """One ``candidates.jsonl`` line (schema in docs/bench.md) from a ``turns.jsonl`` record."""
    source = rec.get("source")
    status = rec.get("status")
    return {
        "schema_version": SCHEMA_VERSION,
        "suite": suite,
        "problem": problem["id"],
        "file": problem["file"],
        "kind": problem["kind"],
        "function": problem.get("function"),
        "sizes": problem.get("sizes"),
        "turn": int(rec.get("turn") or 0),
        "sample": int(rec.get("sample") or 0),
        "policy": rec.get("policy"),
        "model": settings.model,
        "temperature": settings.temperature,
        "description": rec.get("description"),
        "status": status,
        "correct": status in S.VERIFIED,
        "is_best": is_best,
        "message": rec.get("message", ""),
        "source": source,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest() if source else None,
        "gpu_ms": rec.get("gpu_ms"),
        "gpu_ms_iqr": rec.get("gpu_ms_iqr"),
        "e2e_ms": rec.get("e2e_ms"),
        "cpu_ms": rec.get("cpu_ms") if rec.get("cpu_ms") is not None else problem.get("cpu_baseline_ms"),
        "cpu_iqr_ms": problem.get("cpu_baseline_iqr_ms"),
        "speedups": M.speedups_of(rec),
        "baseline": rec.get("baseline") or problem.get("baseline"),
        "max_abs_err": rec.get("max_abs_err"),
        "max_rel_err": rec.get("max_rel_err"),
        "structure_score": rec.get("structure_score"),
        "structure_reasons": rec.get("structure_reasons") or [],
        "registers": rec.get("registers"),
        "spill_bytes": rec.get("spill_bytes"),
        "compile_s": rec.get("compile_s"),
        "compile_cached": bool(rec.get("compile_cached")),
        "eval_s": rec.get("eval_s"),
        "lock_wait_s": rec.get("lock_wait_s"),
        "prepare_s": rec.get("prepare_s"),
        "phase_s": rec.get("phase_s") or {},
        "sanitize_s": rec.get("sanitize_s"),
        "peak_gpu_bytes": rec.get("peak_gpu_bytes"),
        "footprint_bytes": (rec.get("footprint_bytes") if rec.get("footprint_bytes") is not None
                            else problem.get("footprint_bytes")),
        "tolerances": rec.get("tolerances") or problem.get("tolerances") or {},
        "slow_ref": rec.get("slow_ref"),
        "slow_ref_ms": rec.get("slow_ref_ms"),
        "slow_factor": rec.get("slow_factor"),
        "degenerate": bool(problem.get("degenerate")),
        "arch": problem.get("arch"),
        "gpu": gpu,
        "run_dir": problem.get("run_dir"),
    }


def _error_line(stderr_text: str) -> str | None:
    """optimize's one-line error (``error: ...``, with its ``hint:``), if it printed one."""
    lines = [ln.strip() for ln in stderr_text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.startswith("error:"):
            msg = ln[len("error:"):].strip()
            if i + 1 < len(lines) and lines[i + 1].startswith("hint:"):
                msg += f" ({lines[i + 1]})"
            return msg
    return None


def problem_verdict(doc: dict[str, Any] | None, rc: int | None, timed_out: bool,
                    stderr_text: str, limit_s: float) -> tuple[str | None, str]:
    """A problem-level status and its one-line message from how optimize ended, or
    ``(None, "")`` when the candidates' statuses decide (docs/bench.md):

    - killed at its time limit: ``problem_timeout``;
    - a result whose ``problem_status`` is a status name (``does_not_fit``: the problem's
      planned memory exceeds the device's), or exit code 5 without one: that status, with
      the result's ``message`` or optimize's error line (the bytes needed and free);
    - exit code 2 without a result (bad input: the loader refused the file):
      ``refused_at_load`` with optimize's error line;
    - exit code 3 without a result (a package or tool missing here, torch say):
      ``missing_tool`` with optimize's error line;
    - no result otherwise (a crash, a missing tool): ``error``.

    ``rc``: optimize's exit status (negative: killed by that signal; None: unknown).
    """
    if timed_out:
        return M.PROBLEM_TIMEOUT, f"killed after {limit_s:g} s (this problem's time limit)"
    line = _error_line(stderr_text)
    declared = doc.get("problem_status") if doc else None
    if isinstance(declared, str) and declared in S.BY_NAME:
        return declared, str((doc or {}).get("message") or line or S.BY_NAME[declared].label)
    if rc == EXIT_DOES_NOT_FIT:
        return M.DOES_NOT_FIT, line or "optimize: the problem does not fit the device (exit 5)"
    if doc is None and rc == EXIT_BAD_INPUT:
        return M.REFUSED_AT_LOAD, line or "optimize refused the problem (exit 2, no error line)"
    if doc is None and rc == EXIT_MISSING_TOOL:
        return M.MISSING_TOOL, line or "optimize: a required package or tool is missing (exit 3)"
    if doc is None:
        return M.PROBLEM_ERROR, line or f"optimize {_signal_text(rc)} without a result"
    return None, ""


def _tail_lines(text: str, n: int = 20) -> str:
    return "\n".join(text.splitlines()[-n:])


def _signal_text(rc: int | None) -> str:
    if rc is None:
        return "did not finish"
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with status {rc}"


class SuiteRun:
    """Runs the problems of a suite into one output folder (see the module docstring).

    Args:
        suite: the suite.
        opts: the options.
        out_dir: the output folder (created).
        env: the machine (:func:`cudaperf_cli.bench.env.collect_env`), for the candidates.
        on_done: called in the main thread with each finished problem result.
        executor: where the commands run (default: :class:`~cudaperf_cli.bench.executor.LocalExecutor`).
    """

    def __init__(
        self, suite: Suite, opts: BenchOptions, out_dir: Path, env: dict[str, Any],
        on_done: Callable[[dict[str, Any]], None] | None = None,
        executor: Executor | None = None,
    ) -> None:
        self.suite, self.opts, self.out = suite, opts, out_dir
        self.env = env
        self.on_done = on_done
        self.executor: Executor = executor if executor is not None else LocalExecutor()
        self.kernels = kernel_names(suite.problems)
        self.optimize_args = opts.settings.optimize_args(None)
        self.base_cmd = base_command()
        for sub in ("problems", "runs", "kernels", "logs"):
            (out_dir / sub).mkdir(parents=True, exist_ok=True)

    # -- one problem (worker thread) -------------------------------------------------------

    def command(self, problem: BenchProblem, known: AbstractSet[str] | None) -> list[str]:
        """optimize's arguments for ``problem`` (the command before them is the executor's):
        the file, its extra C sources (a manifest's ``sources``, linked into the reference)
        right after it, the manifest's flags, the policy flags, then the bench's own
        (``--json --run-dir --output --force``, and ``--yes`` when ``known`` has it or is
        None)."""
        sources = [str(x) for x in (getattr(problem, "sources", None) or ())]
        own = problem.optimize_args()
        if own[:len(sources)] == sources:  # BenchProblem.optimize_args already leads with them
            sources = []
        cmd = [str(problem.path), *sources, *own, *self.optimize_args,
               "--json", "--run-dir", str((self.out / "runs" / problem.safe_name).resolve()),
               "--output", str((self.out / "kernels" / self.kernels[problem.id]).resolve()),
               "--force"]
        if known is None or "--yes" in known:  # never ask between turns
            cmd.append("--yes")
        return cmd

    def run_problem(self, problem: BenchProblem, known: AbstractSet[str] | None) -> dict[str, Any]:
        """Run one problem; never raises (a failure of the runner itself is an ``error``)."""
        try:
            return self._run_problem(problem, known)
        except Exception as exc:  # noqa: BLE001 - one problem never stops the suite
            return self._result(problem, [], None, None, status=M.PROBLEM_ERROR,
                                message=f"the bench runner failed: {type(exc).__name__}: {exc}",
                                rc=None, wall_s=0.0, limit_s=0.0, cmd=[], stderr_text="")

    def _run_problem(self, problem: BenchProblem, known: AbstractSet[str] | None) -> dict[str, Any]:
        run_root = self.out / "runs" / problem.safe_name
        run_root.mkdir(parents=True, exist_ok=True)
        out_path = self.out / "logs" / f"{problem.safe_name}.stdout"
        err_path = self.out / "logs" / f"{problem.safe_name}.stderr"
        limit = problem.timeout_s or self.opts.problem_timeout_s
        launch = Launch(problem_id=problem.id, args=self.command(problem, known),
                        stdout_path=str(out_path.resolve()), stderr_path=str(err_path.resolve()),
                        limit_s=limit,
                        base_cmd=self.base_cmd, cwd=os.getcwd())
        started_wall = time.time()
        fin = self.executor.execute(launch)
        if fin.interrupted:
            return self._interrupted(problem)
        cmd, rc, timed_out, wall = fin.cmd or launch.command(), fin.rc, fin.timed_out, fin.wall_s
        if fin.error:  # the executor could not run it: not a result (--resume runs it again)
            res = self._result(problem, [], None, None, status=M.PROBLEM_ERROR, message=fin.error,
                               rc=None, wall_s=wall, limit_s=limit, cmd=cmd, stderr_text="",
                               started=started_wall, placement=fin.placement)
            res["executor_error"] = True
            return res
        stdout_text = out_path.read_text(errors="replace")
        stderr_text = err_path.read_text(errors="replace")
        doc: dict[str, Any] | None = None
        try:
            parsed = json.loads(stdout_text)
            if isinstance(parsed, dict) and ("turns" in parsed or parsed.get("problem_status")):
                doc = parsed
        except ValueError:
            doc = None
        run_dir = self._run_dir(doc, run_root, started_wall)
        records = read_jsonl(run_dir / "turns.jsonl") if run_dir else []
        status, message = problem_verdict(doc, rc, timed_out, stderr_text, limit)
        return self._result(problem, records, doc, run_dir, status=status, message=message, rc=rc,
                            wall_s=wall, limit_s=limit, cmd=cmd, stderr_text=stderr_text,
                            started=started_wall, placement=fin.placement)

    @staticmethod
    def _run_dir(doc: dict[str, Any] | None, run_root: Path, started: float) -> Path | None:
        """The optimize run folder: the one its JSON names, else the newest one under
        ``run_root`` made since the problem started (a killed run)."""
        if doc and doc.get("run_dir") and Path(doc["run_dir"]).is_dir():
            return Path(doc["run_dir"])
        try:
            dirs = [d for d in run_root.iterdir() if d.is_dir() and d.stat().st_mtime >= started - 2]
        except OSError:
            return None
        return max(dirs, key=lambda d: d.stat().st_mtime) if dirs else None

    def _interrupted(self, problem: BenchProblem) -> dict[str, Any]:
        return self._result(problem, [], None, None, status=M.INTERRUPTED,
                            message="stopped by Ctrl-C", rc=None, wall_s=0.0, limit_s=0.0,
                            cmd=[], stderr_text="")

    def _result(
        self, problem: BenchProblem, records: list[dict[str, Any]], doc: dict[str, Any] | None,
        run_dir: Path | None, *, status: str | None, message: str, rc: int | None, wall_s: float,
        limit_s: float, cmd: list[str], stderr_text: str, started: float | None = None,
        placement: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        doc = doc or {}
        cpu = doc.get("cpu_baseline") or {}
        cpu_ms = list((cpu.get("cpu_ms") or {}).values())
        cpu_iqr = list((cpu.get("cpu_iqr_ms") or {}).values())
        result: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "id": problem.id,
            "file": str(problem.path),
            "kind": problem.kind,
            "function": doc.get("function") or problem.function,
            "sizes": doc.get("sizes") or problem.sizes or None,
            "settings_from": problem.settings_from,
            "sources": [str(x) for x in (getattr(problem, "sources", None) or ())],
            **M.problem_summary(records, status=status, message=message),
            "degenerate": bool(doc.get("degenerate")),
            "footprint_bytes": doc.get("footprint_bytes"),
            "memory": doc.get("memory") if isinstance(doc.get("memory"), dict) else None,
            "reference_peak_gpu_bytes": doc.get("reference_peak_gpu_bytes"),
            "tolerances": doc.get("tolerances") if isinstance(doc.get("tolerances"), dict) else {},
            "warnings": [str(w) for w in doc.get("warnings") or []] if isinstance(doc.get("warnings"), list) else [],
            "cpu_baseline_ms": cpu_ms[0] if cpu_ms else None,
            "cpu_baseline_iqr_ms": cpu_iqr[0] if cpu_iqr else None,
            "arch": doc.get("arch"),
            "stop_reason": doc.get("stop_reason"),
            "exit_code": rc,
            "wall_s": wall_s,
            "time_limit_s": limit_s,
            "started": None if started is None else time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "run_dir": None if run_dir is None else str(run_dir),
            "kernel": doc.get("output"),
            "command": cmd,
            "placement": placement,
            "stderr_tail": _tail_lines(stderr_text) if status in M.WITH_REASON else "",
        }
        if result["baseline"] is None and doc.get("baseline"):
            result["baseline"] = doc["baseline"]
        if result["footprint_bytes"] is None:  # from the candidates, when optimize did not say
            feet = [r.get("footprint_bytes") for r in records
                    if isinstance(r.get("footprint_bytes"), int) and not isinstance(r.get("footprint_bytes"), bool)]
            result["footprint_bytes"] = feet[0] if feet else None
        best_i = M.best_correct(records)
        # the GPU the problem ran on: its Ray node's (placement), else this machine's
        gpu = (placement or {}).get("gpu_name") or (self.env.get("gpu") or {}).get("name")
        result["candidates"] = [
            candidate_row(rec, result, suite=self.suite.name, settings=self.opts.settings,
                          gpu=gpu, is_best=(i == best_i and result["correct"]))
            for i, rec in enumerate(records)
        ]
        return result

    # -- the suite (main thread) -------------------------------------------------------------

    def stop(self) -> None:
        """Stop: no new problem starts; running commands are killed (the executor's stop)."""
        self.executor.stop()

    def problem_file(self, problem: BenchProblem) -> Path:
        return self.out / "problems" / f"{problem.safe_name}.json"

    def load_done(self) -> dict[str, dict[str, Any]]:
        """Results already in ``problems/`` (for ``--resume``): id -> result; interrupted
        or unreadable ones, and those the executor could not run (``executor_error``: a
        node without the output folder, a problem lost more than ``--retries`` times), are
        not done."""
        done: dict[str, dict[str, Any]] = {}
        for p in self.suite.problems:
            path = self.problem_file(p)
            try:
                res = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if (isinstance(res, dict) and res.get("id") == p.id and res.get("status") != M.INTERRUPTED
                    and not res.get("executor_error")):
                done[p.id] = res
        return done

    def run(self, problems: list[BenchProblem], jobs: int) -> tuple[list[dict[str, Any]], bool]:
        """Run ``problems`` ``jobs`` at a time; returns (their results, interrupted).

        Each result is written to ``problems/<name>.json`` as it finishes (not an
        interrupted one) and passed to ``on_done``.  Ctrl-C: children killed, the results
        so far returned with ``interrupted`` True.
        """
        known = self.opts.known_flags
        self.opts.settings.optimize_args(known)  # refuse unknown flags before starting
        results: list[dict[str, Any]] = []
        interrupted = False
        pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="bench")
        futures: dict[Future, BenchProblem] = {}
        try:
            for p in problems:
                futures[pool.submit(self.run_problem, p, known)] = p
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in finished:
                    self._collect(fut.result(), results)
        except KeyboardInterrupt:
            interrupted = True
            self.stop()
            for fut in futures:
                fut.cancel()
            pool.shutdown(wait=True)
            for fut, p in futures.items():
                if fut.done() and not fut.cancelled():
                    res = fut.result()
                    if res["id"] not in {r["id"] for r in results} and res["status"] != M.INTERRUPTED:
                        self._collect(res, results)
        finally:
            pool.shutdown(wait=not interrupted)
        return results, interrupted

    def _collect(self, res: dict[str, Any], results: list[dict[str, Any]]) -> None:
        if res["status"] == M.INTERRUPTED:
            return
        problem = next(p for p in self.suite.problems if p.id == res["id"])
        write_json_atomic(self.problem_file(problem), res)
        results.append(res)
        if self.on_done is not None:
            self.on_done(res)


def settings_doc(suite: Suite, opts: BenchOptions, jobs: int) -> dict[str, Any]:
    """The settings a report records (and ``--resume`` checks, but for ``jobs``,
    ``problem_timeout_s`` and the executor's: a run may continue on another cluster).

    ``optimize_defaults`` is the config file every optimize child reads (``--config``,
    ``$CUDAPERF_CONFIG``, ``./cudaperf.toml``, ...: the children run in this directory with
    this environment) and its ``[optimize]`` table: a setting left null here takes its value
    from there, else from optimize's built-in default.

    Raises:
        CudaperfError: the config file named by ``--config`` or ``$CUDAPERF_CONFIG`` is
            missing or not valid TOML (exit 2), as optimize would report it.
    """
    from cudaperf_cli.config import find_config, load_config

    explicit = None if opts.settings.config is None else Path(opts.settings.config)
    found = find_config(explicit)
    table = load_config(found).get("optimize", {}) if found is not None else {}
    return {
        **asdict(opts.settings),
        "optimize_defaults": {"file": None if found is None else str(found.resolve()),
                              "optimize": table if isinstance(table, dict) else {}},
        "primary_speedup": opts.primary,
        "problem_timeout_s": opts.problem_timeout_s,
        "jobs": jobs,
        "executor": opts.executor,
        "ray_address": opts.ray_address,
        "per_gpu": opts.per_gpu if opts.executor == "ray" else None,
        "retries": opts.retries if opts.executor == "ray" else None,
        "suite_source": str(suite.source.resolve()),
    }


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DOES_NOT_FIT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "OPTIMIZE_CMD_ENV",
    "PASS_THROUGH",
    "READABLE_SCHEMAS",
    "SCHEMA_VERSION",
    "BenchOptions",
    "PolicySettings",
    "SuiteRun",
    "candidate_row",
    "default_out_dir",
    "kernel_names",
    "problem_verdict",
    "read_jsonl",
    "settings_doc",
    "write_json_atomic",
]
