"""PolyBench/C 4.2.1 as cudaperf runs it: a bench manifest for its 30 kernels, and a check
that each one loads, builds its CPU reference and runs it.

    python benchmarks/polybench.py manifest [--polybench DIR] -o OUT/bench.toml [--dataset LARGE]
                                            [--only NAME ...]
    cudaperf bench OUT/bench.toml --turns 3 -j 8

    python benchmarks/polybench.py check [--polybench DIR] [--dataset LARGE] [--json FILE]
                                         [--no-policy] [--optimize] [--only NAME ...]

    python benchmarks/polybench.py emulate [--polybench DIR] [--dataset MINI] [--turns 3]
                                           [--json FILE] [--only NAME ...]

``DIR`` is a checkout of PolyBench/C 4.2.1 (github.com/MatthiasJReisinger/PolyBenchC-4.2.1;
default ``$CUDAPERF_POLYBENCH``).  No PolyBench code is in this file: the kernels are found
in ``DIR`` (``DIR/**/<name>/<name>.c`` beside its ``<name>.h``, ``utilities/`` left out), and
each is loaded as a user runs it: ``-I DIR/utilities -I <its folder>``, its dataset macro
(``-DLARGE_DATASET``: the suite's default), ``utilities/polybench.c`` linked into the
reference (its init functions allocate through ``polybench_alloc_data``).

``manifest`` writes the ``cudaperf bench`` manifest (``[suite] root`` is the checkout,
absolute, so the manifest may live anywhere).  ``check`` is a benchmark that prints figures, not a test: for every kernel the
load, the reference build, the seconds of one reference run at the dataset (gcc -O3, one
thread, through the reference-only evaluation job) and the built-in policy's verdict (its
first candidate compiled with nvcc, or refused with its reason); with ``--optimize`` also
what ``cudaperf optimize FILE utilities/polybench.c -I ... --turns 1 --json`` ends in (exit 4,
``no_device``, on a machine without a GPU).  It asserts nothing; exit 0
once the table is printed, 2 on bad input (not a PolyBench/C 4.2.1 folder).

``emulate`` runs the built-in policy's first ``--turns`` candidates of every kernel on the
CPU emulation of the CUDA they use (``cudaperf_cli/policies/builtin/emulate.py``) through
the real verifier (the evaluation worker with its host backend, the configurations
``cudaperf optimize`` checks): a wrong mapping shows as ``wrong`` without a GPU.  MINI by
default (one OS thread per CUDA thread).  It prints a table and the counts; exit 0.

Importable: :func:`polybench_root`, :func:`find_kernels`, :func:`kernel_settings`,
:func:`manifest_text`, :func:`select_kernels`, :func:`write_manifest`, :func:`load_kernel`, :func:`check_kernel`,
:func:`optimize_command`, :func:`run_optimize`, :func:`emulate_kernel`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from cudaperf_cli.core import CProblem, CudaperfError, ProblemError

ENV = "CUDAPERF_POLYBENCH"

#: The 30 kernels of PolyBench/C 4.2.1, as its README lists them (names of their folders).
KERNELS = (
    "2mm", "3mm", "adi", "atax", "bicg", "cholesky", "correlation", "covariance", "deriche",
    "doitgen", "durbin", "fdtd-2d", "floyd-warshall", "gemm", "gemver", "gesummv",
    "gramschmidt", "heat-3d", "jacobi-1d", "jacobi-2d", "lu", "ludcmp", "mvt", "nussinov",
    "seidel-2d", "symm", "syr2k", "syrk", "trisolv", "trmm",
)  # fmt: skip

#: PolyBench's dataset macros (``-D<NAME>_DATASET``); LARGE is its default.
DATASETS = ("MINI", "SMALL", "MEDIUM", "LARGE", "EXTRALARGE")
DEFAULT_DATASET = "LARGE"


# ---------------------------------------------------------------------------------------
# The checkout
# ---------------------------------------------------------------------------------------


def polybench_root(path: str | Path | None = None) -> Path:
    """The PolyBench/C 4.2.1 checkout: ``path``, else ``$CUDAPERF_POLYBENCH``.

    Raises:
        ProblemError: neither is given, or the folder is not PolyBench/C 4.2.1 (no
            ``utilities/polybench.c`` / ``polybench.h``, a README that does not name 4.2.1).
    """
    given = path if path is not None else os.environ.get(ENV)
    if not given:
        raise ProblemError(f"no PolyBench folder: pass --polybench DIR or set ${ENV}")
    root = Path(given).expanduser()
    if not root.is_dir():
        raise ProblemError(f"{root}: no such folder (expected a PolyBench/C 4.2.1 checkout)")
    root = root.resolve()
    missing = [rel for rel in ("utilities/polybench.c", "utilities/polybench.h")
               if not (root / rel).is_file()]
    if missing:
        raise ProblemError(f"{root} is not a PolyBench/C checkout: no {', '.join(missing)}")
    try:
        readme = (root / "README").read_text(errors="replace")[:4000]
    except OSError:
        readme = ""
    if "PolyBench/C 4.2.1" not in readme:
        raise ProblemError(f"{root} is not PolyBench/C 4.2.1: its README does not name that "
                           "version", hint="use github.com/MatthiasJReisinger/PolyBenchC-4.2.1")
    return root


def find_kernels(root: Path) -> tuple[list[Path], list[Path]]:
    """The kernel files of a PolyBench checkout, and the other ``.c`` files left out.

    A kernel is ``<name>/<name>.c`` with ``<name>.h`` beside it, outside ``utilities/``
    (which leaves out ``medley/nussinov/Nussinov.orig.c``, the algorithm's original program).

    Returns:
        ``(kernels, left_out)``, each sorted by path relative to ``root``.

    Raises:
        ProblemError: the 30 kernels of 4.2.1 are not all there (the message names those
            missing), or a name is found twice.
    """
    kernels: list[Path] = []
    left_out: list[Path] = []
    for f in sorted(root.glob("**/*.c"), key=lambda p: p.relative_to(root).as_posix()):
        rel = f.relative_to(root)
        if rel.parts[0] == "utilities":
            continue
        if f.stem == f.parent.name and f.with_suffix(".h").is_file():
            kernels.append(f)
        else:
            left_out.append(f)
    names = [k.stem for k in kernels]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ProblemError(f"{root}: kernel(s) found twice: {', '.join(twice)}")
    absent = [k for k in KERNELS if k not in names]
    if absent:
        raise ProblemError(f"{root}: not the 30 kernels of PolyBench/C 4.2.1: missing "
                           + ", ".join(absent))
    return kernels, left_out


def kernel_settings(root: Path, kernel: Path, dataset: str = DEFAULT_DATASET) -> dict[str, Any]:
    """One kernel's loader settings (absolute paths): ``defines`` (the dataset macro),
    ``includes`` (``utilities`` and its folder), ``sources`` (``utilities/polybench.c``).

    Raises:
        ProblemError: an unknown dataset name.
    """
    if dataset not in DATASETS:
        raise ProblemError(f"unknown dataset '{dataset}': one of {', '.join(DATASETS)}")
    return {
        "defines": [f"{dataset}_DATASET"],
        "includes": [str(root / "utilities"), str(kernel.parent)],
        "sources": [str(root / "utilities" / "polybench.c")],
    }


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string (\" \\ \uXXXX escapes)


def manifest_text(root: Path, dataset: str = DEFAULT_DATASET, only: Sequence[str] = ()) -> str:
    """The ``cudaperf bench`` manifest of the 30 kernels (``only``: of those named; see
    docs/bench.md): ``[suite]
    root`` the checkout (absolute, so the manifest may live anywhere), ``files`` and one
    ``[problems."<id>"]`` table per kernel, relative to it (the id is the file's path in the
    checkout: ``linear-algebra/blas/gemm/gemm.c``), each with ``defines`` (the dataset
    macro), ``includes = ["utilities", <its folder>]`` and
    ``sources = ["utilities/polybench.c"]``.

    Raises:
        ProblemError: as :func:`find_kernels` and :func:`kernel_settings`; a name in
            ``only`` that is not a kernel.
    """
    kernels = select_kernels(find_kernels(root)[0], only)

    def rel(path: str | Path) -> str:
        return _toml_string(Path(path).relative_to(root).as_posix())

    lines = [
        f"# cudaperf bench manifest: the {len(kernels)} kernels of PolyBench/C 4.2.1,",
        f"# {dataset} dataset, written by benchmarks/polybench.py manifest.  Paths are",
        "# relative to [suite] root; each kernel is loaded with -D<DATASET>_DATASET",
        "# -I utilities -I <its folder>, and utilities/polybench.c linked into its reference.",
        "",
        "[suite]",
        f"name = {_toml_string(f'polybench-4.2.1-{dataset.lower()}')}",
        f"root = {_toml_string(str(root))}",
        "files = [",
        *[f"  {rel(k)}," for k in kernels],
        "]",
    ]
    for k in kernels:
        s = kernel_settings(root, k, dataset)
        lines += [
            "",
            f"[problems.{rel(k)}]",
            "defines = [" + ", ".join(_toml_string(d) for d in s["defines"]) + "]",
            "includes = [" + ", ".join(rel(i) for i in s["includes"]) + "]",
            "sources = [" + ", ".join(rel(x) for x in s["sources"]) + "]",
        ]
    return "\n".join(lines) + "\n"


def select_kernels(kernels: Sequence[Path], only: Sequence[str] | None) -> list[Path]:
    """The kernels named in ``only`` (all when empty), in suite order.

    Raises:
        ProblemError: a name that is not one of ``kernels``.
    """
    if not only:
        return list(kernels)
    unknown = [n for n in only if n not in {k.stem for k in kernels}]
    if unknown:
        raise ProblemError(f"unknown kernel(s) {', '.join(unknown)}; kernels: "
                           + ", ".join(sorted(k.stem for k in kernels)))
    return [k for k in kernels if k.stem in only]


def write_manifest(root: Path, out: Path, dataset: str = DEFAULT_DATASET,
                   only: Sequence[str] = ()) -> Path:
    """Write :func:`manifest_text` to ``out`` (folders created; an existing file replaced).

    Raises:
        ProblemError: as :func:`manifest_text`; ``out`` is a folder or cannot be written.
    """
    text = manifest_text(root, dataset, only)
    out = Path(out).expanduser()
    if out.is_dir():
        raise ProblemError(f"-o {out} is a folder; give the manifest's file name (bench.toml)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as exc:
        raise ProblemError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


# ---------------------------------------------------------------------------------------
# Loading and checking one kernel
# ---------------------------------------------------------------------------------------


def load_kernel(root: Path, kernel: Path, dataset: str = DEFAULT_DATASET) -> CProblem:
    """``load_c_problem`` of one kernel as a user runs it (``cudaperf optimize FILE
    utilities/polybench.c -I utilities -I <folder> -D<DATASET>_DATASET``).

    Raises:
        ProblemError, ToolchainError: as :func:`cudaperf_cli.problems.c.load_c_problem`.
    """
    from cudaperf_cli.problems.c import load_c_problem

    s = kernel_settings(root, kernel, dataset)
    cpp = [f"-D{d}" for d in s["defines"]] + [f"-I{i}" for i in s["includes"]]
    return load_c_problem(kernel, cpp_args=cpp, sources=[Path(x) for x in s["sources"]])


@dataclass
class KernelCheck:
    """What :func:`check_kernel` found for one kernel (every time in seconds).

    Attributes:
        name, file: the kernel's name and file.
        load: ``"ok"`` or the loader's one-line error.
        function, sizes, init: the loaded problem (function ported, sizes from main,
            init function or None).
        reference: ``"ok"``, the reference build's error, or ``"not built"``.
        status: the reference-only job's status (``reference_only`` when it ran).
        reference_s: one timed run of the reference at the dataset's sizes (the job's CPU
            timing, one repetition), or None.
        job_wall_s: wall time of the whole reference-only job (child start, data, the
            small configuration's runs that find the arrays' roles, the main trial run,
            the timed run).
        load_s, build_s: loading, and building the reference.
        verdict: the built-in policy's first proposal: ``"compiled: <description>"``,
            ``"compile error: <line>"``, ``"refused: <reason>"``, or ``"not asked"``.
        optimize: with ``--optimize``, what ``cudaperf optimize FILE utilities/polybench.c
            ... --turns 1 --json`` ended in: ``"exit 4: no_device (...)"`` and so on; None
            when not run.
        optimize_s: that command's wall time.
    """

    name: str
    file: str
    load: str = "not loaded"
    function: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    init: str | None = None
    reference: str = "not built"
    status: str | None = None
    reference_s: float | None = None
    job_wall_s: float | None = None
    load_s: float | None = None
    build_s: float | None = None
    verdict: str = "not asked"
    optimize: str | None = None
    optimize_s: float | None = None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def check_kernel(
    root: Path,
    kernel: Path,
    work: Path,
    *,
    dataset: str = DEFAULT_DATASET,
    run: bool = True,
    policy: bool = True,
    timeout_s: float = 1800.0,
    arch: str = "sm_90",
) -> KernelCheck:
    """Load one kernel, build its reference, run it once, ask the built-in policy.

    Args:
        root: the PolyBench checkout; kernel: its file; work: a folder for the reference
            library and nvcc's build cache (created).
        dataset: PolyBench's dataset (``LARGE`` by default).
        run: run the reference-only evaluation job (the small configuration, then one
            trial and one timed repetition at the dataset's sizes).
        policy: ask the built-in policy for its first candidate and compile it with nvcc.
        timeout_s: limit of the reference-only job, seconds.
        arch: nvcc's target for the policy's candidate.

    Returns:
        A :class:`KernelCheck`; failures are recorded in it, never raised.
    """
    from cudaperf_cli.problems.c import build_reference, small_sizes

    out = KernelCheck(kernel.stem, str(kernel))
    t0 = time.perf_counter()
    try:
        problem = load_kernel(root, kernel, dataset)
    except CudaperfError as exc:
        out.load, out.load_s = _one_line(exc), time.perf_counter() - t0
        return out
    out.load_s = time.perf_counter() - t0
    out.load, out.function, out.sizes = "ok", problem.function, dict(problem.sizes)
    out.init = problem.init.name if problem.init else None
    t0 = time.perf_counter()
    try:
        ref = build_reference(problem, work / kernel.stem / "reference")
        out.reference = "ok"
    except CudaperfError as exc:
        ref, out.reference = None, _one_line(exc)
    out.build_s = time.perf_counter() - t0
    if ref is not None and run:
        from cudaperf_cli.evaluate.job import ConfigSpec, EvalJob
        from cudaperf_cli.evaluate.runner import run_evaluation

        # As optimize does: the arrays' roles are found on the small configuration, then
        # one trial and one timed run at the dataset's sizes.
        job = EvalJob.from_problem(
            problem, ref_lib=ref, cand_lib=None, cpu_reps=1, cpu_budget_s=0.0,
            configs=[ConfigSpec("small", small_sizes(problem), trials=1),
                     ConfigSpec("main", dict(problem.sizes), trials=1, time=True)],
        )
        t0 = time.perf_counter()
        try:
            res = run_evaluation(job, timeout_s=timeout_s)
            out.status = res.status
            timing = res.configs[-1].timing if res.configs else None
            if timing is not None and timing.cpu is not None:
                out.reference_s = timing.cpu.median_ms / 1000.0
            if res.status != "reference_only":
                out.reference = f"{res.status}: {res.message}"
        except (CudaperfError, ValueError, OSError) as exc:
            out.status = f"error: {_one_line(exc)}"
        out.job_wall_s = time.perf_counter() - t0
    if policy:
        out.verdict = _policy_verdict(problem, work / "nvcc-cache", arch)
    return out


def _policy_verdict(problem: CProblem, cache: Path, arch: str) -> str:
    """The built-in policy's first candidate, compiled (its verdict in one line)."""
    from cudaperf_cli.build import build_candidate
    from cudaperf_cli.policies.base import PolicyRefusal
    from cudaperf_cli.policies.builtin.policy import BuiltinPolicy

    try:
        proposal = BuiltinPolicy().propose(problem, 0)
    except PolicyRefusal as exc:
        return f"refused: {_one_line(exc)}"
    except CudaperfError as exc:
        return f"policy error: {_one_line(exc)}"
    try:
        built = build_candidate(proposal.source, arch=arch, cache_root=cache,
                                extra_flags=problem.cpp_args)
    except CudaperfError as exc:  # no nvcc
        return f"not compiled ({_one_line(exc)}): {proposal.description}"
    if built.ok:
        return f"compiled: {proposal.description}"
    first = (built.errors or built.status).strip().splitlines()
    return f"{built.status}: {first[0] if first else ''}"


@dataclass
class EmulationRow:
    """One candidate of the built-in policy run on the CPU emulation (:func:`emulate_kernel`).

    Attributes:
        name: the kernel; turn: the plan entry (``-1`` when the policy refused the kernel or
            it did not load).
        mapping: the candidate's one-line description, or the refusal / load error.
        status: the verifier's status (``correct``, ``wrong``, ``runtime_error``, ``timeout``
            ...), ``refused``, ``load_error``, ``reference_error`` or ``emulation_build_error``.
        message: the verifier's message (first 300 characters), or the error.
        seconds: wall time of the emulated build and evaluation.
    """

    name: str
    turn: int
    mapping: str
    status: str
    message: str = ""
    seconds: float | None = None


def emulate_kernel(root: Path, kernel: Path, work: Path, *, dataset: str = "MINI",
                   turns: int = 3, timeout_s: float = 600.0) -> list[EmulationRow]:
    """Run the first ``turns`` entries of the built-in policy's plan for one kernel on the CPU
    emulation (:mod:`cudaperf_cli.policies.builtin.emulate`) through the real verifier (the
    evaluation worker with its host backend): the configurations ``cudaperf optimize`` checks
    (the small odd one, twice, and the dataset's sizes), none timed.

    Args:
        root, kernel: the checkout and the kernel's file; work: a folder for the builds.
        dataset: PolyBench's dataset (MINI by default: the emulation runs one OS thread
            per CUDA thread, and the blocks of a grid one after another).
        turns: plan entries to run (at most).
        timeout_s: limit of one evaluation, seconds.

    Returns:
        One row per candidate (or one row saying why there is none); never raises for a
        kernel's failure.
    """
    from cudaperf_cli.agent.kinds.c import verification_configs
    from cudaperf_cli.evaluate.job import ConfigSpec, EvalJob
    from cudaperf_cli.evaluate.runner import run_evaluation
    from cudaperf_cli.policies.base import PolicyRefusal
    from cudaperf_cli.policies.builtin.emulate import build_emulated
    from cudaperf_cli.policies.builtin.policy import BuiltinPolicy
    from cudaperf_cli.problems.c import build_reference

    name = kernel.stem
    try:
        problem = load_kernel(root, kernel, dataset)
    except CudaperfError as exc:
        return [EmulationRow(name, -1, _one_line(exc), "load_error")]
    policy = BuiltinPolicy()
    try:
        plan = policy.plan(problem)
    except PolicyRefusal as exc:  # one reason per loop, one line: "...; loop j: ..."
        reasons = "; ".join(" ".join(ln.split()) for ln in str(exc).splitlines() if ln.strip())
        return [EmulationRow(name, -1, reasons, "refused")]
    try:
        ref = build_reference(problem, work / name / "reference")
    except CudaperfError as exc:
        return [EmulationRow(name, -1, _one_line(exc), "reference_error")]
    configs = [ConfigSpec.from_json({**c, "time": False}) for c in verification_configs(problem)]
    rows = []
    for turn, mapping in enumerate(plan[:turns]):
        t0 = time.perf_counter()
        row = EmulationRow(name, turn, mapping.describe(), "")
        try:
            lib = build_emulated(policy.source(problem, mapping), work / name, f"turn-{turn}",
                                 extra_flags=problem.cpp_args)
            job = EvalJob.from_problem(problem, ref_lib=ref, cand_lib=lib, configs=configs)
            res = run_evaluation(job, timeout_s=timeout_s,
                                 env={"CUDAPERF_WORKER_BACKEND": "host"})
            row.status, row.message = res.status, " ".join((res.message or "").split())[:300]
        except CudaperfError as exc:
            row.status, row.message = "emulation_build_error", _one_line(exc)[:300]
        row.seconds = time.perf_counter() - t0
        rows.append(row)
    return rows


def emulation_table(rows: Sequence[EmulationRow], dataset: str) -> str:
    """A Markdown table of emulated candidates (turns counted from 1, as ``cudaperf
    optimize`` prints them; the JSON rows keep the plan's 0-based index), the counts below."""
    lines = [f"| kernel | turn | mapping (kernels in launch order, split by \\|) "
             f"| status ({dataset}, CPU emulation) | message | s |",
             "|---|---:|---|---|---|---:|"]
    for r in rows:
        if r.turn < 0:  # the kernel has no candidate: say why in the message column
            lines.append(f"| {r.name} | - | - | {r.status} | {r.mapping.replace('|', chr(92) + '|')} | - |")
            continue
        lines.append(f"| {r.name} | {r.turn + 1} | {r.mapping.replace('|', chr(92) + '|')} "
                     f"| {r.status} | {r.message.replace('|', chr(92) + '|')} | {_fmt_s(r.seconds)} |")
    cands = [r for r in rows if r.turn >= 0]
    counts: dict[str, int] = {}
    for r in cands:
        counts[r.status] = counts.get(r.status, 0) + 1
    kernels = list(dict.fromkeys(r.name for r in rows))
    none = sorted({r.name for r in rows if r.turn < 0})
    correct_k = {r.name for r in cands if r.status == "correct"}
    never = sorted({r.name for r in cands} - correct_k)
    some_wrong = sorted({r.name for r in cands if r.status == "wrong"})
    lines.append("")
    lines.append(f"kernels: {len(kernels)}; with candidates: {len(kernels) - len(none)}; "
                 f"without (refused or not loaded): {len(none)}")
    lines.append(f"candidates: {len(cands)}; " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    lines.append(f"kernels with a correct candidate: {len(correct_k)}; with none correct: "
                 f"{len(never)}" + (f" ({', '.join(never)})" if never else "")
                 + f"; with a wrong one: {len(some_wrong)}"
                 + (f" ({', '.join(some_wrong)})" if some_wrong else ""))
    return "\n".join(lines)


def _check_writable(path: Path) -> None:
    """Refuse an output file path before any work: its folder must exist, it must not be
    a folder itself.

    Raises:
        ProblemError: one line saying which.
    """
    if path.is_dir():
        raise ProblemError(f"--json {path} is a folder; give a file path")
    if not path.parent.is_dir():
        raise ProblemError(f"--json {path}: no such folder {path.parent}")


def optimize_command(root: Path, kernel: Path, work: Path,
                     dataset: str = DEFAULT_DATASET) -> list[str]:
    """``python -m cudaperf_cli optimize`` of one kernel as a user types it, one turn of the
    built-in policy, JSON out, results under ``work``."""
    s = kernel_settings(root, kernel, dataset)
    cmd = [sys.executable, "-m", "cudaperf_cli", "optimize", str(kernel), *s["sources"]]
    for d in s["defines"]:
        cmd += ["-D", d]
    for i in s["includes"]:
        cmd += ["-I", i]
    return cmd + ["--turns", "1", "--policy", "builtin", "--json", "--yes", "--force",
                  "--run-dir", str(work / "runs"), "-o", str(work / "kernels" / f"{kernel.stem}.cu")]


def run_optimize(root: Path, kernel: Path, work: Path, *, dataset: str = DEFAULT_DATASET,
                 timeout_s: float = 3600.0) -> tuple[str, float]:
    """Run :func:`optimize_command` (a child process, killed at ``timeout_s``).

    Returns:
        ``(outcome, wall seconds)``; the outcome is ``"exit N: <status of turn 0> (<its
        message or description>)"``, or ``"exit N: <last stderr line>"`` without JSON.
    """
    import subprocess

    cmd = optimize_command(root, kernel, work, dataset)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_s:g} s", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"exit {proc.returncode}: {last}", wall
    turns = doc.get("turns") or []
    if not turns:
        return f"exit {proc.returncode}: no turn", wall
    t = turns[0]
    detail = t.get("message") if t.get("status") == "refused" else t.get("description")
    return f"exit {proc.returncode}: {t.get('status')} ({_one_line(Exception(detail or ''))})", wall


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3g}" if x < 100 else f"{x:.0f}")


def table(rows: Sequence[KernelCheck], dataset: str) -> str:
    """A Markdown table of checks."""
    with_cli = any(r.optimize is not None for r in rows)
    head = (f"| kernel | load | reference build | reference s ({dataset}, 1 run) | job wall s "
            "| built-in policy |" + (" cudaperf optimize --turns 1 | its wall s |" if with_cli else ""))
    lines = [head, "|---|---|---|---:|---:|---|" + ("---|---:|" if with_cli else "")]
    for r in rows:
        line = (f"| {r.name} | {r.load} | {r.reference} | {_fmt_s(r.reference_s)} | "
                f"{_fmt_s(r.job_wall_s)} | {r.verdict.replace('|', '/')} |")
        if with_cli:
            line += f" {(r.optimize or '-').replace('|', '/')} | {_fmt_s(r.optimize_s)} |"
        lines.append(line)
    return "\n".join(lines)


def _report(text: str, rows: Sequence[Any], json_path: Path | None, cores: int | None,
            load: float, suffix: str = "") -> None:
    """Print a command's table and the machine's load at its start and end; write the rows
    (dataclasses) as JSON to ``json_path`` when given."""
    print(text)
    print(f"\n{cores} cores; load average {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end{suffix}")
    if json_path is not None:
        json_path.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="benchmarks/polybench.py",
        description="PolyBench/C 4.2.1 as cudaperf runs it: a bench manifest, a check of every "
                    "kernel's load and reference, the built-in policy on the CPU emulation.")
    sub = ap.add_subparsers(dest="command", required=True)
    helps = {"manifest": "write the cudaperf bench manifest of the 30 kernels",
             "check": "load, build and run every kernel's reference; the built-in policy's verdict",
             "emulate": "the built-in policy's candidates through the verifier on the CPU emulation"}
    for name, dataset in (("manifest", DEFAULT_DATASET), ("check", DEFAULT_DATASET),
                          ("emulate", "MINI")):
        p = sub.add_parser(name, help=helps[name], description=helps[name])
        p.add_argument("--polybench", type=Path, default=None,
                       help=f"PolyBench/C 4.2.1 checkout (default ${ENV})")
        p.add_argument("--dataset", default=dataset, choices=DATASETS,
                       help=f"PolyBench dataset (default {dataset}"
                            + (", the suite's default)" if dataset == DEFAULT_DATASET
                               else ": one OS thread per CUDA thread)"))
    sub.choices["manifest"].add_argument("-o", "--output", type=Path, required=True,
                                         help="the manifest to write (OUT/bench.toml)")
    sub.choices["manifest"].add_argument("--only", nargs="+", default=None,
                                         help="kernel names to include (default all 30)")
    chk = sub.choices["check"]
    chk.add_argument("--work", type=Path, default=Path("polybench-check"),
                     help="folder for references and nvcc builds (default ./polybench-check)")
    chk.add_argument("--only", nargs="+", default=None, help="kernel names to check")
    chk.add_argument("--no-run", action="store_true", help="do not run the references")
    chk.add_argument("--no-policy", action="store_true", help="do not ask the built-in policy")
    chk.add_argument("--timeout", type=float, default=1800.0,
                     help="limit of one reference-only job, seconds (default 1800)")
    chk.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    chk.add_argument("--optimize", action="store_true",
                     help="also run cudaperf optimize FILE utilities/polybench.c ... --turns 1")
    emu = sub.choices["emulate"]
    emu.add_argument("--work", type=Path, default=Path("polybench-emulate"),
                     help="folder for references and emulated builds (default ./polybench-emulate)")
    emu.add_argument("--only", nargs="+", default=None, help="kernel names to run")
    emu.add_argument("--turns", type=int, default=3, help="plan entries per kernel (default 3)")
    emu.add_argument("--timeout", type=float, default=600.0,
                     help="limit of one evaluation, seconds (default 600)")
    emu.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    try:
        if args.command == "emulate" and args.turns < 1:
            raise ProblemError("--turns must be at least 1")
        if getattr(args, "timeout", 1.0) <= 0:
            raise ProblemError("--timeout must be more than 0 seconds")
        if getattr(args, "work", None) is not None and args.work.exists() and not args.work.is_dir():
            raise ProblemError(f"--work {args.work} is a file, not a folder")
        if getattr(args, "json", None) is not None:
            _check_writable(args.json)
        root = polybench_root(args.polybench)
        if args.command == "manifest":
            out = write_manifest(root, args.output, args.dataset, args.only or ())
            n = len(select_kernels(find_kernels(root)[0], args.only))
            print(f"wrote {out}: {n} kernels ({args.dataset}); run "
                  f"cudaperf bench {out} --turns 3 -j 8")
            return 0
        kernels = select_kernels(find_kernels(root)[0], args.only)
        cores, load = os.cpu_count(), os.getloadavg()[0]
        print(f"machine: {cores} cores, load average {load:.1f} at the start", file=sys.stderr)
        if args.command == "emulate":
            emu_rows: list[EmulationRow] = []
            for k in kernels:
                got = emulate_kernel(root, k, args.work.resolve(), dataset=args.dataset,
                                     turns=args.turns, timeout_s=args.timeout)
                for r in got:
                    turn = f"turn {r.turn + 1}" if r.turn >= 0 else "-"
                    print(f"{r.name} {turn}: {r.status} · {r.mapping} · {r.message}",
                          file=sys.stderr, flush=True)
                emu_rows.extend(got)
            _report(emulation_table(emu_rows, args.dataset), emu_rows, args.json, cores, load,
                    " (the seconds are wall time)")
            return 0
        rows = []
        for k in kernels:
            row = check_kernel(root, k, args.work.resolve(), dataset=args.dataset,
                               run=not args.no_run, policy=not args.no_policy,
                               timeout_s=args.timeout)
            if args.optimize:
                row.optimize, row.optimize_s = run_optimize(
                    root, k, args.work.resolve(), dataset=args.dataset, timeout_s=2 * args.timeout)
            print(f"{row.name}: load {row.load}; reference {row.reference}; "
                  f"{_fmt_s(row.reference_s)} s; {row.verdict}"
                  + (f"; optimize {row.optimize}" if row.optimize else ""),
                  file=sys.stderr, flush=True)
            rows.append(row)
        _report(table(rows, args.dataset), rows, args.json, cores, load)
        return 0
    except CudaperfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.hint:
            print(exc.hint, file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
