"""Checking a generated dataset by running it (``cudaperf data generate``, ``cudaperf data check``).

Every problem is checked as a user's file would be, in a pool of worker processes (never
in the CLI's own process; each worker under an address-space limit and without secrets in
its environment):

* **C**: it loads (``load_c_problem``: the function, the sizes ``main`` passes, which must
  be the manifest's ``main`` configuration, and the init function), every configuration's
  sizes are accepted by the loader, the CPU reference (``gcc -O3``) is built and **runs**
  at the ``small_odd`` configuration through the evaluation worker (a reference-only job),
  the built-in policy plans it (mappings, or its refusal), and its candidates compile with
  ``nvcc -arch=<arch> -cubin`` (the whole front end and the device compiler; not the host
  compiler).
* **PyTorch**: it loads at the ``small_odd`` constants (``load_torch_problems``: the model
  runs in a child process, outputs and footprint known; :data:`TORCH_BATCH` problems share
  one child, so PyTorch is imported once for them), the built-in PyTorch policy plans it
  (fused kernels, or its refusal), and its variants' ``kernel.cu`` compile the same way.

``compile`` chooses which candidates compile: ``distinct`` (default: for C the first
mapping of each combination of kernel kinds, block-shape variants left out; for PyTorch the
first and last variants), ``first`` (the policy's first candidate only), ``all``, or
``none``.  Results go to ``DIR/check.jsonl`` as they finish (a later ``data check``
resumes), and each problem's manifest entry gets its ``check``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.data.dataset import read_manifest, stop_pool, write_manifest

COMPILE_MODES = ("distinct", "first", "all", "none")
CHECK_LOG = "check.jsonl"
#: One nvcc run's limit, seconds.
NVCC_TIMEOUT_S = 300.0


@dataclass
class CheckResult:
    """One problem's check.

    Attributes:
        id: the problem id (``c/stencil2d_00012.c``); kind: ``c`` or ``torch``.
        loads: the loader accepted it (C: every configuration; PyTorch: at ``small_odd``).
        reference: ``"ok"``, or why the reference did not run (C: the reference-only
            evaluation's status and message; PyTorch: the load runs the model, so ``ok``
            whenever it loads).
        candidates: the built-in policy's candidates (C: plan entries; PyTorch: variants);
            0 when refused. refusal: the policy's reason, one line.
        compiled, compile_failed: candidates compiled / failed under ``compile``;
            compile_error: the first failure's first error line.
        compile_s: nvcc wall time, seconds, summed. seconds: the whole check.
        error: the first failure before the policy ran (load or reference), one line.
    """

    id: str
    kind: str
    loads: bool = False
    reference: str = "not run"
    candidates: int = 0
    refusal: str | None = None
    compiled: int = 0
    compile_failed: int = 0
    compile_error: str | None = None
    compile_s: float = 0.0
    seconds: float = 0.0
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Loads, its reference runs and no candidate failed to compile."""
        return self.loads and self.reference == "ok" and self.compile_failed == 0


def _one_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return " ".join((text.splitlines() or [type(exc).__name__])[0].split())[:300]


def nvcc_cubin(source: str, work: Path, name: str, arch: str) -> tuple[bool, str, float]:
    """Compile ``source`` with ``nvcc -arch=<arch> -cubin`` in ``work`` (limits of
    ``sandbox.NVCC_LIMITS``, a scrubbed environment, :data:`NVCC_TIMEOUT_S`).

    Returns:
        ``(ok, first error line or "", seconds)``.
    """
    from cudaperf_cli.sandbox import NVCC_LIMITS, scrubbed_env

    cu = work / f"{name}.cu"
    cu.write_text(source)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([shutil.which("nvcc") or "nvcc", f"-arch={arch}", "-cubin", "-o",
                               str(cu.with_suffix(".cubin")), str(cu)],
                              capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False,
                              env=scrubbed_env(), preexec_fn=NVCC_LIMITS.preexec(), cwd=work)
    except subprocess.TimeoutExpired:
        return False, f"nvcc timed out after {NVCC_TIMEOUT_S:g} s", time.perf_counter() - t0
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.splitlines() or ["?"]
        return False, " ".join(lines[0].split())[:300], dt
    return True, "", dt


def _compile(res: CheckResult, sources: Sequence[str], work: Path, arch: str) -> None:
    for t, src in enumerate(sources):
        ok, err, dt = nvcc_cubin(src, work, f"cand{t}", arch)
        res.compile_s += dt
        if ok:
            res.compiled += 1
        else:
            res.compile_failed += 1
            res.compile_error = res.compile_error or err


def check_c(path: Path, entry: dict[str, Any], work: Path, *, compile_mode: str, arch: str) -> CheckResult:
    """Check one generated C problem (see the module docstring). Never raises for the
    problem's own failures: they are the result's fields."""
    from cudaperf_cli.evaluate.job import ConfigSpec, EvalJob
    from cudaperf_cli.evaluate.runner import run_evaluation
    from cudaperf_cli.policies.base import PolicyRefusal
    from cudaperf_cli.policies.builtin import BuiltinPolicy
    from cudaperf_cli.problems.c import build_reference, load_c_problem

    res = CheckResult(entry["id"], "c")
    configs = {c["name"]: c["sizes"] for c in entry["configs"]}
    try:
        problem = load_c_problem(path, function=entry.get("function"))
        if dict(problem.sizes) != configs.get("main"):
            raise CudaperfError(f"main() passes {dict(problem.sizes)}, the manifest says {configs.get('main')}")
        if problem.sizes_source != "main":
            raise CudaperfError(f"sizes come from {problem.sizes_source}, not main()")
        for name, sizes in configs.items():
            if name != "main":
                load_c_problem(path, function=entry.get("function"), sizes=sizes)
        res.loads = True
        ref = build_reference(problem, work / "reference")
        small = configs.get("small_odd") or configs["main"]
        job = EvalJob.from_problem(problem, ref_lib=ref, cand_lib=None, configs=[
            ConfigSpec.from_json({"name": "small_odd", "sizes": small, "trials": 1, "time": False})])
        ev = run_evaluation(job, timeout_s=120.0, host_memory_limit_bytes=8 << 30)
        res.reference = "ok" if ev.status == "reference_only" else f"{ev.status}: {_one_line(ev.message or '')}"
    except CudaperfError as exc:
        res.error = _one_line(exc)
        return res
    if res.reference != "ok":
        res.error = res.reference
        return res
    policy = BuiltinPolicy()
    try:
        plan = policy.plan(problem)
    except PolicyRefusal as exc:
        res.refusal = " ".join(_one_line(ln) for ln in str(exc).splitlines() if ln.strip())[:300]
        return res
    res.candidates = len(plan)
    if compile_mode == "none" or not plan:
        return res
    picked, seen = [], set()
    for m in plan:
        kinds = tuple(n.kind for n in m.nests)
        if compile_mode == "all" or (compile_mode == "distinct" and kinds not in seen) or (compile_mode == "first" and not picked):
            picked.append(m)
        seen.add(kinds)
    try:
        sources = [policy.source(problem, m) for m in picked]
    except CudaperfError as exc:
        res.compile_failed, res.compile_error = len(picked), f"code generation: {_one_line(exc)}"
        return res
    _compile(res, sources, work, arch)
    return res


def _small(entry: dict[str, Any]) -> dict[str, int] | None:
    return next((c["sizes"] for c in entry["configs"] if c["name"] == "small_odd"), None)


def check_torch(path: Path, entry: dict[str, Any], work: Path, *, compile_mode: str, arch: str) -> CheckResult:
    """Check one generated PyTorch problem (see the module docstring)."""
    from cudaperf_cli.problems.pytorch import load_torch_problem

    res = CheckResult(entry["id"], "torch")
    try:
        problem = load_torch_problem(path, constants=_small(entry), alt_shapes=False, timeout_s=120)
    except CudaperfError as exc:
        res.error = _one_line(exc)
        return res
    _plan_torch(res, problem, work, compile_mode=compile_mode, arch=arch)
    return res


def check_torch_batch(root: Path, entries: Sequence[dict[str, Any]], work: Path, *, compile_mode: str,
                      arch: str) -> list[CheckResult]:
    """Check several PyTorch problems with one loader child (``load_torch_problems`` over a
    folder of their copies: PyTorch is imported once, not once a file); otherwise as
    :func:`check_torch`. ``seconds`` of each result: its share of the load plus its own
    planning and compiling."""
    from cudaperf_cli.problems.pytorch import load_torch_problems

    folder = work / "problems"
    folder.mkdir(parents=True)
    by_stem = {}
    for e in entries:
        stem = Path(e["id"]).stem
        shutil.copyfile(root / e["id"], folder / f"{stem}.py")
        by_stem[stem] = e
    t0 = time.perf_counter()
    results = {stem: CheckResult(e["id"], "torch") for stem, e in by_stem.items()}
    try:
        problems, errors = load_torch_problems(folder, constants={s: _small(e) or {} for s, e in by_stem.items()},
                                               alt_shapes=False, timeout_s=120)
    except CudaperfError as exc:
        problems, errors = [], []
        for r in results.values():
            r.error = _one_line(exc)
    share = (time.perf_counter() - t0) / max(1, len(entries))
    for err in errors:
        results[err.path.stem].error = _one_line(err.message)
    for problem in problems:
        stem = Path(problem.path).stem
        t1 = time.perf_counter()
        _plan_torch(results[stem], problem, work / stem, compile_mode=compile_mode, arch=arch)
        results[stem].seconds = time.perf_counter() - t1
    for r in results.values():
        r.seconds += share
    return [results[Path(e["id"]).stem] for e in entries]


def _plan_torch(res: CheckResult, problem: Any, work: Path, *, compile_mode: str, arch: str) -> None:
    """The built-in PyTorch policy's plan of a loaded problem and its variants' compile."""
    from cudaperf_cli.policies.base import PolicyRefusal
    from cudaperf_cli.policies.builtin_torch import BuiltinTorchPolicy
    from cudaperf_cli.policies.builtin_torch.codegen import VARIANTS

    work.mkdir(parents=True, exist_ok=True)
    res.loads, res.reference = True, "ok"
    policy = BuiltinTorchPolicy()
    try:
        plan = policy.plan(problem)
        if not plan.kernels:
            raise PolicyRefusal(plan.describe())
    except (PolicyRefusal, CudaperfError) as exc:
        res.refusal = _one_line(exc)
        return
    n = len(VARIANTS)
    res.candidates = n
    if compile_mode == "none":
        return
    # distinct: the scalar variant, the one with every template, the one-pass variances
    distinct = sorted({0, n - 1} | {t for t, v in enumerate(VARIANTS) if v.one_pass})
    picks = {"all": list(range(n)), "first": [0], "distinct": distinct}[compile_mode]
    try:
        sources = [policy.propose(problem, t).files["kernel.cu"] for t in picks]
    except CudaperfError as exc:
        res.compile_failed, res.compile_error = len(picks), f"code generation: {_one_line(exc)}"
        return
    _compile(res, sources, work, arch)


#: PyTorch problems checked by one worker at once (one loader child for them all).
TORCH_BATCH = 20


def _check_batch(root: str, entries: list[dict[str, Any]], compile_mode: str, arch: str) -> list[dict[str, Any]]:
    """Pool worker: check one C problem, or a batch of PyTorch problems, in a scratch folder
    removed afterwards."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cudaperf-check-") as tmp:
        try:
            if entries[0]["kind"] == "torch":
                results = check_torch_batch(Path(root), entries, Path(tmp), compile_mode=compile_mode, arch=arch)
            else:
                results = [check_c(Path(root) / entries[0]["id"], entries[0], Path(tmp), compile_mode=compile_mode,
                                   arch=arch)]
                results[0].seconds = time.perf_counter() - t0
        except Exception as exc:  # a bug of ours, not the problem's: recorded, never fatal
            results = [CheckResult(e["id"], e["kind"], error=f"internal: {type(exc).__name__}: {_one_line(exc)}",
                                   seconds=(time.perf_counter() - t0) / len(entries)) for e in entries]
    return [asdict(r) | {"ok": r.ok} for r in results]


def _pool_init() -> None:
    from cudaperf_cli.data.dataset import _pool_init as init

    init()


def to_check(root: Path, doc: dict[str, Any], done: dict[str, Any], *, kinds: Sequence[str], recheck: bool,
             limit: int | None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The entries a check runs now (of ``kinds``, in manifest order, at most ``limit``):
    those not in ``done`` (the check log), every one with ``recheck``, and those whose file
    changed or went missing since ``data generate`` wrote it (even if an earlier run passed
    it); and ``{id: why}`` of the changed ones."""
    entries = [e for e in doc["problems"] if e["kind"] in kinds]
    changed = {e["id"]: why for e in entries if (why := changed_since_generated(root, e)) is not None}
    todo = [e for e in entries if recheck or e["id"] not in done or e["id"] in changed]
    return (todo[:limit] if limit is not None else todo), changed


def changed_since_generated(root: Path, entry: dict[str, Any]) -> str | None:
    """Why ``entry``'s file is not the one ``data generate`` wrote (missing, or its sha256
    differs from the manifest's), or None."""
    from cudaperf_cli.data.dataset import sha256_text

    try:
        text = (root / entry["id"]).read_text()
    except FileNotFoundError:
        return f"{entry['id']} is missing"
    except (OSError, UnicodeDecodeError) as exc:
        return f"{entry['id']} is unreadable: {exc}"
    want = entry.get("sha256")
    if want and sha256_text(text) != want:
        return f"{entry['id']} changed since data generate wrote it (sha256 differs from the manifest's)"
    return None


def _run_pool(root: Path, todo: Sequence[dict[str, Any]], compile_mode: str, arch: str, jobs: int,
              record: Callable[[dict[str, Any]], None]) -> None:
    """Check ``todo`` in a pool of ``jobs`` workers, ``record``-ing each result as it comes.

    On Ctrl-C (or SIGTERM, which the CLI turns into one) the workers are killed at once
    instead of being waited for (a check can take minutes; without a terminal the wait
    looked like a hang).

    Raises:
        CudaperfError: a worker died (the system killed it: out of memory?).
        KeyboardInterrupt: passed on after the workers are gone.
    """
    from concurrent.futures.process import BrokenProcessPool

    if not todo:
        return
    pool = ProcessPoolExecutor(max_workers=max(1, jobs), initializer=_pool_init)
    c_todo = [[e] for e in todo if e["kind"] == "c"]
    t_todo = [e for e in todo if e["kind"] == "torch"]
    batches = c_todo + [t_todo[i:i + TORCH_BATCH] for i in range(0, len(t_todo), TORCH_BATCH)]
    try:
        futures = [pool.submit(_check_batch, str(root), b, compile_mode, arch) for b in batches]
        for fut in as_completed(futures):
            for row in fut.result():
                record(row)
    except BrokenProcessPool:
        raise CudaperfError("a check worker died (killed by the system: out of memory?); the finished "
                            "checks are kept in check.jsonl",
                            hint="run cudaperf data check DIR again to resume, with fewer --jobs") from None
    except BaseException:
        stop_pool(pool)  # the workers and their nvcc / loader children, now
        raise
    pool.shutdown(wait=True)


def read_check_log(root: Path) -> dict[str, dict[str, Any]]:
    """``DIR/check.jsonl`` as ``{id: result}`` (the last line of an id wins)."""
    out: dict[str, dict[str, Any]] = {}
    path = root / CHECK_LOG
    try:
        text = path.read_text(errors="replace") if path.exists() else ""
    except OSError as exc:
        raise CudaperfError(f"cannot read {path}: {exc.strerror or exc}") from None
    for line in text.splitlines():
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill: that problem is checked again
            if _well_formed(row):  # anything else: that problem is checked again
                out[row["id"]] = row
    return out


def _well_formed(row: Any) -> bool:
    """A check.jsonl row as :func:`check_dataset` writes it (fields and their types)."""
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        return False
    types = {"ok": bool, "loads": bool, "kind": str, "candidates": int, "compiled": int, "compile_failed": int,
             "seconds": (int, float), "compile_s": (int, float)}
    return (all(isinstance(row.get(k), t) and not (t is int and isinstance(row.get(k), bool))
                for k, t in types.items())
            and all(row.get(k) is None or isinstance(row.get(k), str)
                    for k in ("reference", "refusal", "error", "compile_error")))


def check_dataset(root: Path, *, kinds: Sequence[str] = ("c", "torch"), compile_mode: str = "distinct",
                  arch: str = "sm_90", jobs: int = 1, limit: int | None = None, recheck: bool = False,
                  progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Check the problems of ``root`` not checked yet (all with ``recheck``), ``jobs`` at once,
    append each result to ``check.jsonl``, then write every problem's ``check`` into the
    manifest and return :func:`summarise`'s figures.

    Args:
        limit: check at most this many problems (the first unchecked ones, in manifest order).
        progress: called with each result as it finishes.

    Raises:
        CudaperfError: not a dataset, a bad ``compile_mode``, or nvcc missing while
            ``compile_mode`` is not ``none``.
    """
    if compile_mode not in COMPILE_MODES:
        raise CudaperfError(f"--compile must be one of {', '.join(COMPILE_MODES)}, not '{compile_mode}'")
    if compile_mode != "none" and shutil.which("nvcc") is None:
        raise CudaperfError("nvcc is not on PATH: candidates cannot be compiled",
                            hint="install the CUDA toolkit, or pass --compile none")
    doc = read_manifest(root)
    done = read_check_log(root)  # every result so far: the summary covers them all
    todo, changed = to_check(root, doc, done, kinds=kinds, recheck=recheck, limit=limit)
    t0 = time.perf_counter()
    if todo:
        log_path = root / CHECK_LOG
        with open(log_path, "a") as log:
            if log.tell() and not log_path.read_bytes().endswith(b"\n"):
                log.write("\n")  # a line cut by a kill: the next one starts on its own line

            def record(row: dict[str, Any]) -> None:
                row["compile_mode"] = compile_mode
                log.write(json.dumps(row) + "\n")
                log.flush()
                done[row["id"]] = row
                if progress is not None:
                    progress(row)

            for e in todo:  # not what was generated: its check would not be the manifest's
                if e["id"] in changed:
                    record(asdict(CheckResult(e["id"], e["kind"], error=changed[e["id"]])) | {"ok": False})
            _run_pool(root, [e for e in todo if e["id"] not in changed], compile_mode, arch, jobs, record)
    wall = time.perf_counter() - t0
    doc = read_manifest(root)  # again: another run (the other kind's check) may have written it meanwhile
    for e in doc["problems"]:
        row = done.get(e["id"])
        if row is not None:
            e["check"] = {k: row[k] for k in ("ok", "loads", "reference", "candidates", "refusal",
                                              "compiled", "compile_failed", "error")}
    write_manifest(root, doc)
    summary = summarise(doc["problems"], [done[e["id"]] for e in doc["problems"] if e["id"] in done and e["kind"] in kinds])
    summary["wall_s"] = round(wall, 1)
    summary["checked_now"] = len(todo)
    summary["jobs"] = jobs
    return summary


def summarise(entries: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rates per kind and per family: problems, checked, loads, reference runs, planned
    (at least one candidate), refused, candidates compiled / failed, seconds per problem."""
    family = {e["id"]: (e["kind"], e["family"]) for e in entries}
    out: dict[str, Any] = {"kinds": {}}
    for row in rows:
        kind, fam = family.get(row["id"], (row["kind"], "?"))
        k = out["kinds"].setdefault(kind, {"problems": sum(1 for e in entries if e["kind"] == kind),
                                           "families": {}})
        for bucket in (k, k["families"].setdefault(fam, {})):
            for key, add in (("checked", 1), ("loads", row["loads"]), ("reference_ok", row["reference"] == "ok"),
                             ("planned", row["candidates"] > 0), ("refused", row["refusal"] is not None),
                             ("candidates", row["candidates"]), ("compiled", row["compiled"]),
                             ("compile_failed", row["compile_failed"]), ("ok", row["ok"]),
                             ("seconds", row["seconds"]), ("compile_s", row["compile_s"])):
                bucket[key] = bucket.get(key, 0) + add
    for k in out["kinds"].values():
        refusals: dict[str, int] = {}
        errors: dict[str, int] = {}
        k["refusals"], k["errors"] = refusals, errors
        for bucket in [k, *k["families"].values()]:
            bucket["seconds"] = round(bucket.get("seconds", 0.0), 1)
            bucket["compile_s"] = round(bucket.get("compile_s", 0.0), 1)
    for row in rows:
        kind = family.get(row["id"], (row["kind"], "?"))[0]
        if row["refusal"]:
            head = row["refusal"].split(":")[0][:100]
            out["kinds"][kind]["refusals"][head] = out["kinds"][kind]["refusals"].get(head, 0) + 1
        for text in (row["error"], row["compile_error"]):
            if text:
                head = text[:100]
                out["kinds"][kind]["errors"][head] = out["kinds"][kind]["errors"].get(head, 0) + 1
    return out


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """People's summary of :func:`summarise`: one line per kind, one per family."""
    lines = []
    for kind, k in summary["kinds"].items():
        n = max(1, k.get("checked", 0))
        lines.append(
            f"{kind}: {k.get('checked', 0)} of {k['problems']} checked: loads {k.get('loads', 0)}, reference runs "
            f"{k.get('reference_ok', 0)}, planned {k.get('planned', 0)} ({100 * k.get('planned', 0) / n:.0f}%), "
            f"refused {k.get('refused', 0)}; candidates compiled {k.get('compiled', 0)}, failed "
            f"{k.get('compile_failed', 0)}; {k.get('seconds', 0) / n:.2f} s a problem (nvcc {k.get('compile_s', 0) / n:.2f} s)")
        for fam, b in sorted(k["families"].items()):
            lines.append(f"  {fam}: {b.get('checked', 0)} checked, loads {b.get('loads', 0)}, reference "
                         f"{b.get('reference_ok', 0)}, planned {b.get('planned', 0)}, refused {b.get('refused', 0)}, "
                         f"compiled {b.get('compiled', 0)}/{b.get('compiled', 0) + b.get('compile_failed', 0)}")
        for title, counts in (("refusals", k["refusals"]), ("errors", k["errors"])):
            for text, c in sorted(counts.items(), key=lambda kv: -kv[1])[:5]:
                lines.append(f"  {title[:-1]} x{c}: {text}")
    return lines


__all__ = ["CHECK_LOG", "COMPILE_MODES", "CheckResult", "check_c", "check_dataset", "check_torch", "check_torch_batch",
           "changed_since_generated", "nvcc_cubin", "read_check_log", "summarise", "summary_lines", "to_check"]
