"""The compute-sanitizer stage: a C candidate about to become the run's best is run once more
under ``compute-sanitizer --tool memcheck`` and ``--tool initcheck``.

The worker's guard zones (64 KiB each side of every array, ``job.GUARD_BYTES``) catch writes
just past an array; a write further out lands in memory nobody checks (another allocation,
the pool's free space), and a read of device memory the candidate allocated and never wrote
returns whatever was there (on the H200 both were reported correct, issue 14).
compute-sanitizer sees both: memcheck every access outside the allocations the program made,
initcheck every read of global memory nothing wrote.  It slows kernels down 10-100x, so it
runs once per new best candidate, on one small configuration, without timing
(:func:`sanitize_job`), not on every candidate.

How (``docs/evaluation.md``, "compute-sanitizer stage")::

    compute-sanitizer --tool memcheck --error-exitcode 86 --print-limit 20
        --target-processes application-only --launch-timeout 60 --require-cuda-init yes
        --check-exit-code no --show-backtrace device --log-file <tmp>/memcheck.log
        --report-api-errors no --leak-check no --
        <python> -m cudaperf_cli.evaluate.device_side ...

through :func:`cudaperf_cli.evaluate.runner.run_evaluation` (``wrapper=``): the worker (the
judge) starts its candidate's process under the tool, so the tool sees the candidate's device
work only; the same child protocol as every evaluation (the GPU gate and lock, the scrubbed
environment, the open-files limit, the candidate's process's Landlock confinement, the
host-memory watchdog over the process group, now the judge, the sanitizer and the candidate's
process, with :data:`SANITIZER_HOST_BYTES` more), one time limit per tool.  The worker still stops at host-side errors and reports its own verdict.

Verdict (:func:`run_sanitizer`): errors in the log (``ERROR SUMMARY: N errors`` with N > 0,
or an error headline) reject the candidate (status ``sanitizer_error``, the first error as
one line: ``memcheck: Invalid __global__ write of size 4 bytes at far_write(float *)+0x1b0 in
candidate.cu:12 by thread (0,0,0) in block (0,0,0); Address 0x7f... is out of bounds and is
1,048,576 bytes after the nearest allocation at 0x7f... of size 4,004 bytes``); so does a
candidate that ran under the tool and did not end ``correct`` there (wrong, a runtime error,
a crash, a time-out); a clean run needs both the worker's ``correct`` and ``ERROR SUMMARY: 0
errors``.  When the tool itself could not check the run (it is missing, it could not attach,
the worker never reached the candidate), the stage is *skipped*: the candidate is kept, with
the reason in its record, and optimize says it once.

Limits: the tool checks the smallest verification configuration only; a candidate can tell it
runs under the tool (its environment, its speed) and behave there; memcheck cannot see a
write that lands inside another live allocation of the same process (the worker's other
arrays are then compared, the output and inputs are, the stored reference outputs live on
the host).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from cudaperf_cli.evaluate.job import (
    CORRECT,
    NO_DEVICE,
    REFERENCE_ERROR,
    RUNTIME_ERROR,
    SLOW,
    TIMEOUT,
    WRONG,
    ConfigSpec,
    EvalJob,
    EvalResult,
)

#: Names compute-sanitizer's path (an executable); set to a path that does not exist, the
#: tool counts as missing.  Otherwise: ``PATH``, beside nvcc, ``$CUDA_HOME``, ``$CUDA_PATH``,
#: ``/usr/local/cuda``.
SANITIZER_ENV = "CUDAPERF_COMPUTE_SANITIZER"
#: Set for the sanitized worker: compute-sanitizer's folder (its injection libraries), which
#: the worker's confinement keeps readable (cudaperf_cli/confine.py).
SANITIZER_DIR_ENV = "CUDAPERF_SANITIZER_DIR"
#: The tools run, in order (racecheck is left out: it checks shared-memory races only, and is
#: the slowest of the tools; synccheck, barrier misuse, likewise).
TOOLS: tuple[str, ...] = ("memcheck", "initcheck")
#: compute-sanitizer's exit status when the worker succeeded but the tool found errors.
ERROR_EXITCODE = 86
#: Errors printed at most (the first is what the feedback quotes).
PRINT_LIMIT = 20
#: Seconds compute-sanitizer waits for the worker to connect (at its ``cuInit``, after the
#: interpreter's imports; the default 10 s is short on a loaded ``bench -j N`` machine).
LAUNCH_TIMEOUT_S = 60
#: Host memory the tool adds to the worker's bound (the sanitizer's own process, its
#: injection libraries and shadow state), bytes.
SANITIZER_HOST_BYTES = 4 << 30
#: The longest line of a verdict.
MESSAGE_CHARS = 400
#: Per-tool options (memcheck's own must not be given to initcheck).
TOOL_FLAGS: dict[str, tuple[str, ...]] = {
    # API errors: cuda.bindings probes driver entry points that may not exist (reported as
    # errors by default); a candidate's own failed call is the worker's runtime_error.
    "memcheck": ("--report-api-errors", "no", "--leak-check", "no"),
    "initcheck": (),
}

_PREFIX = "========="
_HEADLINE = re.compile(r"^=+ (?! )(\S.*?)\s*$")
_DETAIL = re.compile(r"^=+ {2,}(\S.*?)\s*$")
_SUMMARY = re.compile(r"\b(?:ERROR|RACECHECK) SUMMARY:\s*([\d,]+)\s+(?:errors?|hazards?)", re.I)
#: Headlines that are not errors of the program checked.
_NOT_ERRORS = re.compile(
    r"^(COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|Warning\b|WARNING\b|"
    r"Note\b|Target application returned|Process didn't terminate|Program finished)", re.I)
#: Headlines that are errors of the program even without detail lines under them.
_ERROR_HEAD = re.compile(
    r"^(Invalid |Uninitiali[sz]ed |Program hit |Host API |Malloc/Free |Leaked |(Error: )?Race reported|"
    r"Barrier error|Out-of-range|Misaligned|Hardware exception|Warp |Lane |Illegal |Unused memory|"
    r"Stream-ordered|Device-side|Potential )", re.I)
#: Headlines of the tool's own failures (it could not check the program).
_TOOL_FAILURE = re.compile(
    r"^(Error: (?!Race reported)|Internal Sanitizer Error|Could not|Failed to|Unable to|"
    r"The application .* is not supported|Device not supported)", re.I)


# ---------------------------------------------------------------------------------------
# Finding the tool
# ---------------------------------------------------------------------------------------


def _executable(path: str | os.PathLike[str] | None) -> bool:
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)  # type: ignore[arg-type]


def find_compute_sanitizer() -> str | None:
    """compute-sanitizer's path, or None when it is not installed here.

    Looked up as ``$CUDAPERF_COMPUTE_SANITIZER`` (only there when set), ``PATH``, beside
    nvcc (``<toolkit>/bin``, ``<toolkit>/compute-sanitizer``), ``$CUDA_HOME``,
    ``$CUDA_PATH``, ``/usr/local/cuda``.
    """
    given = os.environ.get(SANITIZER_ENV)
    if given:
        return given if _executable(given) else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    roots: list[Path] = []
    try:
        from cudaperf_cli.build import find_nvcc

        roots.append(Path(find_nvcc()).resolve().parent.parent)
    except Exception:  # noqa: BLE001 - no nvcc: the other places
        pass
    roots += [Path(os.environ[k]) for k in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(k)]
    roots.append(Path("/usr/local/cuda"))
    for root in roots:
        for p in (root / "bin" / "compute-sanitizer", root / "compute-sanitizer" / "compute-sanitizer"):
            if _executable(p):
                return str(p)
    return None


def sanitizer_version(exe: str, timeout_s: float = 30.0) -> str | None:
    """The ``Version ...`` line of ``compute-sanitizer --version``, or None when it does not
    run."""
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    for ln in lines:
        if ln.lower().startswith("version"):
            return ln
    return lines[-1] if lines and proc.returncode == 0 else None


# ---------------------------------------------------------------------------------------
# The command and the job
# ---------------------------------------------------------------------------------------


def sanitizer_command(exe: str, tool: str, log_file: str | os.PathLike[str]) -> list[str]:
    """The wrapper of one sanitized worker run: ``compute-sanitizer --tool TOOL ... --``
    (the module docstring); the report goes to ``log_file``, not to the worker's stdout
    (the protocol's result channel).

    Raises:
        ValueError: ``tool`` is not one of :data:`TOOL_FLAGS`.
    """
    if tool not in TOOL_FLAGS:
        raise ValueError(f"unknown compute-sanitizer tool {tool!r}; known: {', '.join(TOOL_FLAGS)}")
    return [
        exe, "--tool", tool,
        "--error-exitcode", str(ERROR_EXITCODE),
        "--print-limit", str(PRINT_LIMIT),
        # the candidate's process starts none; tracking children would follow ldconfig & co.
        "--target-processes", "application-only",
        "--launch-timeout", str(LAUNCH_TIMEOUT_S),
        "--require-cuda-init", "yes",
        # the worker's own verdict says how it ended; its exit status is not an error here
        "--check-exit-code", "no",
        "--show-backtrace", "device",
        "--log-file", str(log_file),
        *TOOL_FLAGS[tool],
        "--",
    ]


def _config_bytes(job: EvalJob, cfg: ConfigSpec) -> int:
    import numpy as np

    from cudaperf_cli.core import ArrayParam

    total = 0
    for p in job.parsed_params():
        if isinstance(p, ArrayParam):
            n = 1
            for e in p.shape(cfg.sizes):
                n *= int(e)
            total += n * np.dtype(p.dtype).itemsize
    return total


def sanitize_config(job: EvalJob) -> ConfigSpec:
    """The configuration the tools run on: the smallest (fewest array bytes) of the job's
    configurations other than the edge one (``classify=False``: sizes of 1 to 3, where a
    kernel may not even run its loops), the first of equals; any configuration when there
    is no other."""
    pool = [c for c in job.configs if c.classify] or list(job.configs)
    return min(pool, key=lambda c: (_config_bytes(job, c), job.configs.index(c)))


def sanitize_job(job: EvalJob) -> EvalJob:
    """The candidate job run under the tools: one configuration (:func:`sanitize_config`),
    one trial, no timing, no slow limit (the tool slows every kernel down; the time limit
    covers a hang), no CPU baseline; the reference runs in the worker (the stored reference
    outputs are indexed by the original configurations).  The array roles, tolerances, seed
    and device stay the job's."""
    cfg = sanitize_config(job)
    one = ConfigSpec(cfg.name, dict(cfg.sizes), trials=1, time=False, classify=True)
    return dataclasses.replace(job, configs=[one], slow_ms=None, reference_outputs=None,
                               cpu_reps=0, cpu_baseline_ms={}, debug_hook=None)


# ---------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------


@dataclass
class SanitizerReport:
    """What one compute-sanitizer log says.

    Attributes:
        tool: ``memcheck``, ``initcheck`` ...
        errors: the count of its ``ERROR SUMMARY`` (``RACECHECK SUMMARY``) line; None when
            the log has none (the tool did not finish, or did not run).
        first: the first error reported, one line (:data:`MESSAGE_CHARS` at most), or None.
        headlines: every error headline, in order (at most :data:`PRINT_LIMIT`).
        tool_error: the first line where the tool says it failed itself (``Error: No
            attachable process found...``), or None.
    """

    tool: str
    errors: int | None = None
    first: str | None = None
    headlines: list[str] = field(default_factory=list)
    tool_error: str | None = None

    @property
    def summary_found(self) -> bool:
        """The log has its ``ERROR SUMMARY`` line (the tool checked the run to its end)."""
        return self.errors is not None

    @property
    def has_errors(self) -> bool:
        """The tool reported at least one error of the program: its summary's count when
        the log has one, else an error headline."""
        if self.errors is not None:
            return self.errors > 0
        return self.first is not None


def _short_path(text: str) -> str:
    """``/tmp/x/y/candidate.cu:12`` -> ``candidate.cu:12`` (the feedback names no folder)."""
    return re.sub(r"(?<![\w.])/(?:[^\s/:]+/)+([^\s/:]+)", r"\1", text)


def parse_report(text: str, tool: str) -> SanitizerReport:
    """Parse compute-sanitizer's text output (its ``--log-file``).

    Lines start with the prefix ``=========``; an error is a headline (one space after the
    prefix: ``Invalid __global__ write of size 4 bytes``, ``Uninitialized __global__
    memory read of size 4 bytes``, ``Program hit ...``, ``Host API uninitialized memory
    access ...``, ``Error: Race reported ...``) followed by indented details (``at
    kernel+0x90 in file.cu:11``, ``by thread (0,0,0) in block (0,0,0)``, ``Address 0x... is
    out of bounds``, ``and is N bytes after the nearest allocation ...``); the run ends with
    ``ERROR SUMMARY: N errors``.  The first error becomes one line with its location and
    address (host and device backtrace frames left out, folders stripped).
    """
    rep = SanitizerReport(tool)
    current: list[str] | None = None
    blocks: list[list[str]] = []
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        m = _SUMMARY.search(line)
        if m:
            rep.errors = int(m.group(1).replace(",", ""))
            current = None
            continue
        if not line.startswith("="):
            continue
        head = _HEADLINE.match(line)
        if head:
            h = head.group(1)
            if _TOOL_FAILURE.match(h):
                rep.tool_error = rep.tool_error or h
                current = None
            elif _NOT_ERRORS.match(h):
                current = None
            else:
                current = [h]
                blocks.append(current)
            continue
        detail = _DETAIL.match(line)
        if detail and current is not None:
            current.append(detail.group(1))
        elif line.strip("= ") == "":
            current = None
    # an error has details under it or a known headline ("Default timeout can be adjusted
    # ..." under a tool failure is neither)
    blocks = [b for b in blocks if len(b) > 1 or _ERROR_HEAD.match(b[0])]
    rep.headlines = [b[0] for b in blocks][:PRINT_LIMIT]
    if blocks:
        rep.first = describe_error(blocks[0], tool)
    return rep


def describe_error(block: Sequence[str], tool: str) -> str:
    """One line of an error block (headline, then its details): ``TOOL: headline at
    where by thread ... ; Address ...``."""
    head = block[0]
    where = [d for d in block[1:] if d.startswith(("at ", "by thread"))][:2]
    address = [d for d in block[1:] if d.startswith(("Address", "and is", "is "))][:2]
    text = f"{tool}: {head}"
    if where:
        text += " " + " ".join(where)
    if address:
        text += "; " + " ".join(address)
    text = _short_path(re.sub(r"\s+", " ", text))
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


# ---------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------


@dataclass
class ToolRun:
    """One tool's sanitized worker run.

    Attributes:
        tool: ``memcheck`` or ``initcheck``.
        seconds: wall time of the run (the GPU-lock wait included), seconds.
        verdict: ``clean`` (the worker's ``correct`` and ``ERROR SUMMARY: 0 errors``),
            ``errors`` (the tool reported errors), ``failed`` (the candidate did not end
            correct under the tool) or ``tool_failure`` (the tool could not check the run).
        message: the verdict in one line (the first error for ``errors``).
        errors: the ``ERROR SUMMARY`` count (None: no such line).
        worker_status: the worker's status under the tool.
        exit_code: compute-sanitizer's exit status (it wraps the candidate's process, which
            the worker starts: ``details.processes.candidate.exit_code``; the worker's own
            when that is missing).
    """

    tool: str
    seconds: float
    verdict: str
    message: str
    errors: int | None = None
    worker_status: str | None = None
    exit_code: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class SanitizeOutcome:
    """The stage's verdict on one candidate.

    Attributes:
        result: ``clean`` (every tool), ``rejected`` (a tool found an error, or the
            candidate failed under it: status ``sanitizer_error``) or ``skipped`` (the tool
            is missing or could not check the run: the candidate stands).
        message: one line (the first error when rejected; why when skipped).
        seconds: the stage's wall time, seconds.
        config: the configuration checked (its name and sizes).
        tools: each tool run, in order (the stage stops at the first that is not clean).
    """

    result: str
    message: str
    seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    tools: list[ToolRun] = field(default_factory=list)

    @property
    def rejected(self) -> bool:
        """A tool found a memory error, or the candidate failed under it."""
        return self.result == "rejected"

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result, "message": self.message, "seconds": round(self.seconds, 3),
                "config": self.config, "tools": [t.to_json() for t in self.tools]}


def skipped(reason: str) -> SanitizeOutcome:
    """The outcome of a stage that did not run (``reason``: one line)."""
    return SanitizeOutcome("skipped", reason)


def _candidate_ran(r: EvalResult) -> bool:
    """Whether the candidate's code ran in the sanitized worker (then a failure there is
    the candidate's), as far as its result or state file says."""
    state = (r.details or {}).get("state")
    if isinstance(state, dict) and "candidate_started" in state:
        return bool(state["candidate_started"])
    return r.status in (CORRECT, SLOW, WRONG, RUNTIME_ERROR, TIMEOUT)


def judge(tool: str, result: EvalResult, report: SanitizerReport) -> tuple[str, str]:
    """``(verdict, message)`` of one tool run from the worker's result and the tool's log:
    ``errors``, ``clean``, ``failed`` or ``tool_failure`` (see :class:`ToolRun`)."""
    if report.has_errors:
        first = report.first or f"{tool}: {report.errors} error(s) reported"
        return "errors", first
    if result.status in (CORRECT, SLOW) and report.summary_found:
        return "clean", f"{tool}: no errors"
    if result.status in (CORRECT, SLOW):
        why = report.tool_error or "its log has no ERROR SUMMARY line"
        return "tool_failure", f"compute-sanitizer {tool} did not check the run: {why}"
    if result.status in (NO_DEVICE, REFERENCE_ERROR) or not _candidate_ran(result):
        why = report.tool_error or result.message or result.status
        return "tool_failure", f"compute-sanitizer {tool} could not run the candidate: {why}"
    if result.status == TIMEOUT:
        # The candidate was verified in time without the tool; the tool slows kernels many
        # times over, and it can hang on its own (before the worker starts, or after it
        # finished with 0 errors: an attack pass).  Not checked, not the candidate's fault.
        return "tool_failure", (f"compute-sanitizer {tool} ran past its time limit without "
                                "reporting an error: not checked")
    msg = f"{tool}: under compute-sanitizer the candidate ended '{result.status}': {result.message}"
    msg = re.sub(r"\s+", " ", msg)
    return "failed", msg if len(msg) <= MESSAGE_CHARS else msg[: MESSAGE_CHARS - 3] + "..."


#: ``run(job, *, timeout_s, wrapper, host_memory_limit_bytes, env) -> EvalResult``: how a
#: sanitized worker is run (:func:`cudaperf_cli.evaluate.runner.run_evaluation`).
RunFn = Callable[..., EvalResult]


def run_sanitizer(job: EvalJob, *, exe: str | None, timeout_s: float,
                  tools: Sequence[str] = TOOLS, run: RunFn | None = None,
                  env: dict[str, str] | None = None) -> SanitizeOutcome:
    """Run the candidate of ``job`` under each tool in turn (:func:`sanitize_job`'s job)
    and judge it (module docstring).

    Args:
        job: the candidate's evaluation job (as optimize runs it).
        exe: compute-sanitizer's path (:func:`find_compute_sanitizer`); None: skipped.
        timeout_s: the time limit of each tool's run, seconds (from the moment the worker
            holds the GPU, as an evaluation's).
        tools: the tools, in order; the stage stops at the first that is not clean.
        run: runs one sanitized worker (default
            :func:`cudaperf_cli.evaluate.runner.run_evaluation`).
        env: more environment variables for the worker.

    Returns:
        A :class:`SanitizeOutcome`; never raises for the candidate's doing.
    """
    if exe is None:
        return skipped("compute-sanitizer is not installed here")
    if job.cand_lib is None:
        raise ValueError("run_sanitizer needs a candidate job")
    if run is None:
        from cudaperf_cli.evaluate.runner import run_evaluation as run
    from cudaperf_cli.evaluate.runner import host_memory_limit

    sjob = sanitize_job(job)
    cfg = sjob.configs[0]
    out = SanitizeOutcome("clean", "", config={"name": cfg.name, "sizes": dict(cfg.sizes)})
    full_env = {**(env or {}), SANITIZER_DIR_ENV: str(Path(exe).resolve().parent)}
    limit = host_memory_limit(sjob) + SANITIZER_HOST_BYTES
    t_stage = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cudaperf-sanitize-") as tmp:
        for tool in tools:
            log = Path(tmp) / f"{tool}.log"
            t0 = time.perf_counter()
            result = run(sjob, timeout_s=timeout_s, wrapper=sanitizer_command(exe, tool, log),
                         host_memory_limit_bytes=limit, env=full_env)
            seconds = time.perf_counter() - t0
            try:
                with open(log, errors="replace") as fh:
                    text = fh.read(1 << 20)
            except OSError:
                text = ""
            report = parse_report(text, tool)
            verdict, message = judge(tool, result, report)
            cand = (result.details.get("processes") or {}).get("candidate") or {}
            tool_rc = cand.get("exit_code") if isinstance(cand, dict) else None
            out.tools.append(ToolRun(tool, round(seconds, 3), verdict, message, report.errors,
                                     result.status,
                                     tool_rc if isinstance(tool_rc, int) else result.exit_code))
            if verdict == "clean":
                continue
            out.result = "skipped" if verdict == "tool_failure" else "rejected"
            out.message = message
            break
    out.seconds = time.perf_counter() - t_stage
    if out.result == "clean":
        out.message = f"{' + '.join(tools)}: no errors on config '{cfg.name}'"
    return out


__all__ = [
    "ERROR_EXITCODE", "LAUNCH_TIMEOUT_S", "PRINT_LIMIT", "SANITIZER_DIR_ENV", "SANITIZER_ENV",
    "SANITIZER_HOST_BYTES", "SanitizeOutcome", "SanitizerReport", "TOOLS", "ToolRun",
    "describe_error", "find_compute_sanitizer", "judge", "parse_report", "run_sanitizer",
    "sanitize_config", "sanitize_job", "sanitizer_command", "sanitizer_version", "skipped",
]
