"""The adversarial suite: every cheat of ``tests/data/cheats/`` (C) and
``tests/data/torch_cheats/dynamic_*/`` (PyTorch) through the evaluation a user gets, with a
verdict table; exit status non-zero when a cheat is reported correct (or written as a
result) or an honest control is rejected.

    python benchmarks/adversarial.py [--kind c|torch|all] [--only NAME ...] [--jobs N]
                                     [--timeout S] [--no-sanitize] [--work DIR] [--json FILE]

C cheats (``tests/data/cheats/c_<class>/``: ``candidate.cu`` and ``cheat.toml``) run
through ``cudaperf optimize <problem> --policy replay`` (the candidate is the one reply, in
a fenced block: the whole loop, as the H200 session fed cheats to it): build checks, the
worker, timing, the compute-sanitizer stage, and the result file, which a cheat must never
get.  ``cheat.toml`` keys: ``class``, ``what``, ``problem`` (a C file of this repository),
``guard`` (what should catch it, in words), ``expect`` (the statuses that count as caught),
``source`` (where the class is catalogued), and optionally ``sizes`` (``--size``),
``candidate`` (the file, default ``candidate.cu``), ``match`` (text the turn's message must
hold), ``min_gpus`` (skipped on fewer), ``control = true`` (an honest candidate: it must be
verified and written).

PyTorch cheats run through ``run_torch_evaluation`` the way tests/test_gpu_torch_eval.py
does (static guards off, so the dynamic guard named by the folder, ``dynamic_<guard>`` or
``dynamic_<guard>_<variant>``, is what is tested; a result cache may be caught first by
``no_custom_kernel``).

Without a CUDA device nothing runs: one line on stderr, exit status 4 (the project's "no
CUDA device", docs/exit-codes.md).  Exit 0: every cheat caught, every control passed; 1:
some were not (the table says which).  The functions are imported by the tests
(tests/test_adversarial.py, tests/test_gpu_adversarial.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CHEATS = REPO / "tests" / "data" / "cheats"
TORCH_CHEATS = REPO / "tests" / "data" / "torch_cheats"
#: The PyTorch problem the dynamic cheats are written for.
TORCH_PROBLEM = REPO / "tests" / "data" / "torch_problems" / "scaled_relu.py"
#: Keys every ``cheat.toml`` must have.
REQUIRED_KEYS = ("class", "what", "problem", "guard", "expect", "source")
#: Keys it may have besides.
OPTIONAL_KEYS = ("sizes", "candidate", "match", "min_gpus", "control")
#: Statuses a control may end with (verified).
CONTROL_OK = ("correct", "slow")
#: Exit status without a CUDA device (docs/exit-codes.md).
EXIT_NO_DEVICE = 4


@dataclass
class Cheat:
    """One entry of the suite.

    Attributes:
        name: the folder's name (``c_far_oob_write``, ``dynamic_side_stream``).
        kind: ``c`` or ``torch``.
        folder: the folder.
        cls: the class (``cheat.toml``'s ``class``; PyTorch: the guard id).
        what: what it does, one line.
        guard: what should catch it (C: words; PyTorch: the guard id).
        expect: the statuses that count as caught (controls: verified ones).
        source: where the class is catalogued.
        problem: C: the problem file; PyTorch: the problem module.
        sizes: C: ``--size`` values.
        candidate: the candidate file(s).
        match: text the verdict's message must hold (None: any).
        min_gpus: skipped on a machine with fewer GPUs.
        control: an honest candidate.
    """

    name: str
    kind: str
    folder: Path
    cls: str
    what: str
    guard: str
    expect: list[str]
    source: str
    problem: Path
    sizes: dict[str, int] = field(default_factory=dict)
    candidate: list[Path] = field(default_factory=list)
    match: str | None = None
    min_gpus: int = 1
    control: bool = False


@dataclass
class Verdict:
    """What the evaluation said of one cheat.

    Attributes:
        name, kind: the cheat.
        status: the candidate's status (``guard_rejected``, ``wrong`` ...); ``skipped`` or
            ``error`` (the harness itself failed: see ``message``).
        message: the status's message, one line.
        caught_by: the check that rejected it, in words (:func:`caught_by`); for a control,
            what it passed.
        seconds: wall time.
        written: a result file was written (C; a cheat must never get one).
        ok: caught as expected (a cheat), or verified and written (a control).
        expected: what counts as caught.
        sanitize: C: the compute-sanitizer stage's record (``result``, ``message``), if it ran.
    """

    name: str
    kind: str
    status: str
    message: str
    caught_by: str
    seconds: float
    written: bool
    ok: bool
    expected: list[str]
    control: bool = False
    sanitize: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------


def _toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib.loads(path.read_text())


def check_cheat_toml(doc: dict[str, Any], folder: Path) -> list[str]:
    """What is wrong with a ``cheat.toml`` (``[]``: nothing): required keys, their types,
    the candidate and the problem files, unknown keys."""
    errors = [f"missing key '{k}'" for k in REQUIRED_KEYS if k not in doc]
    errors += [f"unknown key '{k}'" for k in doc if k not in REQUIRED_KEYS + OPTIONAL_KEYS]
    for k in ("class", "what", "guard", "source", "problem"):
        if k in doc and not (isinstance(doc[k], str) and doc[k].strip()):
            errors.append(f"'{k}' must be a non-empty string")
    expect = doc.get("expect")
    if "expect" in doc and not (isinstance(expect, list) and expect and all(isinstance(e, str) for e in expect)):
        errors.append("'expect' must be a non-empty list of statuses")
    elif isinstance(expect, list):
        from cudaperf_cli import statuses

        unknown = [e for e in expect if statuses.info(e) is None]
        if unknown:
            errors.append(f"'expect' names unknown statuses {unknown}")
        verified = [e for e in expect if e in statuses.VERIFIED]
        if doc.get("control") and set(expect) - set(statuses.VERIFIED):
            errors.append("a control expects verified statuses only")
        if not doc.get("control") and verified:
            errors.append(f"a cheat may not expect {verified}: that is not caught")
    sizes = doc.get("sizes", {})
    if not (isinstance(sizes, dict) and all(isinstance(v, int) and v > 0 for v in sizes.values())):
        errors.append("'sizes' must be a table of positive integers")
    cand = folder / str(doc.get("candidate", "candidate.cu"))
    if not cand.is_file():
        errors.append(f"no candidate file {cand.name}")
    if isinstance(doc.get("problem"), str) and not (REPO / doc["problem"]).is_file():
        errors.append(f"no problem file {doc['problem']}")
    if "min_gpus" in doc and not (isinstance(doc["min_gpus"], int) and doc["min_gpus"] >= 1):
        errors.append("'min_gpus' must be a positive integer")
    if "control" in doc and not isinstance(doc["control"], bool):
        errors.append("'control' must be true or false")
    return errors


def load_c_cheats(root: Path = CHEATS) -> list[Cheat]:
    """Every ``c_*`` folder of ``root`` with a ``cheat.toml``, by name.

    Raises:
        ValueError: a ``cheat.toml`` that :func:`check_cheat_toml` refuses.
    """
    out = []
    for folder in sorted(p for p in root.glob("c_*") if p.is_dir()):
        path = folder / "cheat.toml"
        if not path.is_file():
            continue
        doc = _toml(path)
        errors = check_cheat_toml(doc, folder)
        if errors:
            raise ValueError(f"{path}: " + "; ".join(errors))
        out.append(Cheat(
            name=folder.name, kind="c", folder=folder, cls=doc["class"], what=doc["what"],
            guard=doc["guard"], expect=list(doc["expect"]), source=doc["source"],
            problem=REPO / doc["problem"], sizes=dict(doc.get("sizes", {})),
            candidate=[folder / str(doc.get("candidate", "candidate.cu"))], match=doc.get("match"),
            min_gpus=int(doc.get("min_gpus", 1)), control=bool(doc.get("control", False))))
    return out


def torch_guard(folder: str, guards: tuple[str, ...]) -> str | None:
    """The dynamic guard a PyTorch cheat folder names: ``dynamic_<id>`` or
    ``dynamic_<id>_<variant>`` (the longest id that fits), or None."""
    rest = folder.removeprefix("dynamic_")
    fits = [g for g in guards if rest == g or rest.startswith(g + "_")]
    return max(fits, key=len) if fits else None


def load_torch_cheats(root: Path = TORCH_CHEATS) -> list[Cheat]:
    """Every ``dynamic_*`` folder of ``root`` (the PyTorch worker's dynamic guards; their
    static counterparts are single files, tested by tests/test_torch_eval.py)."""
    from cudaperf_cli.evaluate.torch_job import DYNAMIC_GUARDS

    out = []
    for folder in sorted(p for p in root.glob("dynamic_*") if p.is_dir()):
        gid = torch_guard(folder.name, DYNAMIC_GUARDS)
        if gid is None:
            continue
        files = sorted(p for p in folder.iterdir() if p.suffix in (".py", ".cu"))
        expect_ids = [gid, "no_custom_kernel"] if gid == "result_cache" else [gid]
        out.append(Cheat(
            name=folder.name, kind="torch", folder=folder, cls=gid,
            what=_first_comment(files), guard=" or ".join(expect_ids), expect=["guard_rejected"],
            source="tests/test_gpu_torch_eval.py (dynamic guards)", problem=TORCH_PROBLEM,
            candidate=files))
    return out


def _first_comment(files: list[Path]) -> str:
    """The cheat's own description: its first comment line that says ``Cheat``, else its
    first comment (preprocessor lines are not comments)."""
    comments = []
    for p in files:
        for line in p.read_text(errors="replace").splitlines():
            s = line.strip()
            if s.startswith("//") or (s.startswith("#") and not s.startswith(("#include", "#define", "#pragma", "#if", "#endif", "#else"))):
                comments.append(s.lstrip("#/ ").strip())
    return next((c for c in comments if "Cheat" in c), comments[0] if comments else "")


def load_cheats(kind: str = "all") -> list[Cheat]:
    """The suite: C cheats and controls (``kind="c"``), PyTorch ones (``"torch"``), both."""
    out: list[Cheat] = []
    if kind in ("c", "all"):
        out += load_c_cheats()
    if kind in ("torch", "all"):
        out += load_torch_cheats()
    return out


# ---------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------


def caught_by(status: str, message: str) -> str:
    """The check that gave ``status`` (with its ``message``), in words, for the table."""
    m = message or ""
    if status == "guard_rejected":
        if "#include" in m or "[file_access]" in m or "#embed" in m:
            return "include check"
        if "the host code uses" in m:
            kind = m.split("(", 1)[1].split(")", 1)[0] if "(" in m else "host code"
            return f"host-code check: {kind}"
        if m.startswith("rejected by guard '"):
            return "guard " + m.split("'")[1]
        return "static guard"
    if status == "sanitizer_error":
        tool = m.split(":", 1)[0] if ":" in m else "compute-sanitizer"
        return f"compute-sanitizer {tool}" + (" (failed under the tool)" if "under compute-sanitizer" in m else "")
    if status == "wrong":
        if "wrote outside" in m:
            return "guard zones"
        if "an input the reference never changes was modified" in m:
            return "input check"
        if "a stream the launcher does not join" in m:
            return "device busy after the end event"
        if "input set" in m or "timed call" in m:
            return "verified timed call (input sets)"
        if "after the timed repetitions" in m or "after the end-to-end" in m:
            return "post-timing check"
        if " nan " in f" {m} " or "candidate nan" in m:
            return "output comparison (poisoned output)"
        if "trial 1" in m:
            return "output comparison (second trial, new data)"
        return "output comparison"
    if status == "timeout":
        return "slow stop" if "slow limit" in m or "was stopped" in m else "time limit"
    if status == "crash":
        if "host memory" in m:
            return "host-memory watchdog"
        if "without a valid result" in m:
            return "worker exit check"
        return "process isolation"
    if status == "runtime_error":
        return "CUDA error check"
    return status


def judge(cheat: Cheat, status: str, message: str, written: bool) -> bool:
    """Whether a verdict is what the suite wants: a control verified and written; a cheat
    with a status of its ``expect``, its ``match`` in the message, nothing written."""
    if cheat.control:
        return status in CONTROL_OK and (written or cheat.kind != "c")
    if status not in cheat.expect or written:
        return False
    return cheat.match is None or cheat.match.lower() in (message or "").lower()


def _reply(source: str) -> str:
    return "The candidate.\n\n```cuda\n" + source.rstrip("\n") + "\n```\n"


def run_c_cheat(cheat: Cheat, work: Path, *, timeout_s: float = 60.0, sanitize: bool = True,
                problem_timeout_s: float = 600.0) -> Verdict:
    """Run one C cheat (or control) through ``cudaperf optimize --policy replay`` (one turn,
    the candidate as the one reply) in a child process, in a folder of ``work``."""
    folder = work / cheat.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    replies = folder / "replies.jsonl"
    replies.write_text(json.dumps({"text": _reply(cheat.candidate[0].read_text())}) + "\n")
    out = folder / "result.cu"
    cmd = [sys.executable, "-m", "cudaperf_cli", "optimize", str(cheat.problem),
           *[a for k, v in cheat.sizes.items() for a in ("--size", f"{k}={v}")],
           "--policy", "replay", "--replay", str(replies), "--turns", "1", "--yes", "--json",
           "--run-dir", str(folder / "runs"), "--output", str(out), "--timeout", str(timeout_s)]
    if not sanitize:
        cmd.append("--no-sanitize")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=folder, env=env,
                              timeout=problem_timeout_s)
    except subprocess.TimeoutExpired:
        secs = time.perf_counter() - t0
        return Verdict(cheat.name, "c", "error", f"optimize ran past {problem_timeout_s:g} s",
                       "-", secs, out.exists(), False, cheat.expect, cheat.control)
    secs = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout)
        turn = doc["turns"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Verdict(cheat.name, "c", "error", f"optimize exited {proc.returncode}: {tail}", "-", secs,
                       out.exists(), False, cheat.expect, cheat.control)
    status, message = str(turn.get("status")), " ".join(str(turn.get("message") or "").split())
    written = bool(doc.get("output")) or out.exists()
    ok = judge(cheat, status, message, written)
    by = caught_by(status, message) if not cheat.control else (
        "verified" + (", compute-sanitizer clean" if (turn.get("sanitize") or {}).get("result") == "clean" else ""))
    return Verdict(cheat.name, "c", status, message, by, secs, written, ok, cheat.expect,
                   cheat.control, dict(turn.get("sanitize") or {}))


def run_torch_cheat(cheat: Cheat, arch: str, build_root: Path, *, timeout_s: float = 400.0) -> Verdict:
    """Run one PyTorch dynamic cheat through ``run_torch_evaluation`` as
    tests/test_gpu_torch_eval.py does (static guards off; untimed but for ``timed_result``,
    which cheats only in the timed calls)."""
    from cudaperf_cli.evaluate.torch_job import (FAST, LOAD_INLINE, SHAPE_SPECIALISED, TIMED_RESULT, TorchEvalJob,
                                                 run_torch_evaluation)

    files = [str(p) for p in cheat.candidate]
    fmt = FAST if any(f.endswith(".cu") for f in files) else LOAD_INLINE
    kw: dict[str, Any] = {}
    if cheat.cls == SHAPE_SPECIALISED:
        kw["shapes"] = [{"batch_size": 65}]
    if fmt == LOAD_INLINE:
        kw["build_timeout_s"] = timeout_s
    t0 = time.perf_counter()
    try:
        # timed_result cheats only in the timed calls: timed, as tests/test_gpu_torch_eval.py
        job = TorchEvalJob(problem=str(cheat.problem), candidate=files, format=fmt, arch=arch,
                           build_root=str(build_root), static_guards=False,
                           time=cheat.cls == TIMED_RESULT, compile_baseline=False, **kw)
        r = run_torch_evaluation(job, timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - one row says it
        return Verdict(cheat.name, "torch", "error", f"{type(exc).__name__}: {exc}", "-",
                       time.perf_counter() - t0, False, False, cheat.expect)
    secs = time.perf_counter() - t0
    gid = (r.guard or {}).get("id") if isinstance(r.guard, dict) else None
    ids = cheat.guard.split(" or ")
    ok = r.status == "guard_rejected" and gid in ids
    by = f"guard {gid}" if gid else caught_by(r.status, r.message)
    return Verdict(cheat.name, "torch", r.status, " ".join((r.message or "").split()), by, secs, False,
                   ok, cheat.expect)


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------


def gpu_count() -> tuple[int, str | None]:
    """(CUDA devices visible, the first one's arch or None), through the evaluate stage's
    probe (a child process)."""
    from cudaperf_cli.evaluate import probe_device

    info = probe_device()
    if not info.get("available"):
        return 0, None
    try:
        from cuda.bindings import driver as drv

        drv.cuInit(0)
        err, n = drv.cuDeviceGetCount()
        count = int(n) if int(err) == 0 else 1
    except Exception:  # noqa: BLE001
        count = 1
    return count, str(info.get("arch"))


def table(verdicts: list[Verdict]) -> str:
    """The verdict table, plain text."""
    rows = [("cheat", "kind", "verdict", "caught by", "s", "ok")]
    for v in verdicts:
        rows.append((v.name, v.kind, v.status, v.caught_by, f"{v.seconds:.1f}",
                     "ok" if v.ok else ("skip" if v.status == "skipped" else "FAIL")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command (module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(prog="python benchmarks/adversarial.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--kind", choices=("c", "torch", "all"), default="all")
    ap.add_argument("--only", nargs="*", default=None, metavar="NAME", help="these cheats only (folder names)")
    ap.add_argument("--jobs", "-j", type=int, default=4,
                    help="cheats run at once (C: optimize children; PyTorch: evaluations, each its own build)")
    ap.add_argument("--timeout", type=float, default=60.0, help="one candidate evaluation's limit, s")
    ap.add_argument("--no-sanitize", action="store_true", help="optimize --no-sanitize")
    ap.add_argument("--work", type=Path, default=None, help="keep the run folders here")
    ap.add_argument("--json", type=Path, default=None, help="write the verdicts as JSON")
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0:
        print("adversarial suite: --jobs and --timeout must be positive", file=sys.stderr)
        return 2
    cheats = load_cheats(args.kind)
    if args.only:
        unknown = sorted(set(args.only) - {c.name for c in cheats})
        if unknown:
            print(f"adversarial suite: unknown cheats {unknown}", file=sys.stderr)
            return 2
        cheats = [c for c in cheats if c.name in args.only]

    count, arch = gpu_count()
    if count == 0 or arch is None:
        print("adversarial suite: no CUDA device here (the cheats must launch real kernels): "
              "nothing run", file=sys.stderr)
        return EXIT_NO_DEVICE
    work = args.work or Path(tempfile.mkdtemp(prefix="cudaperf-adversarial-"))
    work.mkdir(parents=True, exist_ok=True)
    verdicts: dict[str, Verdict] = {}
    runnable = []
    for c in cheats:
        if c.min_gpus > count:
            verdicts[c.name] = Verdict(c.name, c.kind, "skipped", f"needs {c.min_gpus} GPUs, {count} here",
                                       "-", 0.0, False, True, c.expect, c.control)
        else:
            runnable.append(c)
    c_cheats = [c for c in runnable if c.kind == "c"]
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        for v in pool.map(lambda c: run_c_cheat(c, work / "c", timeout_s=args.timeout,
                                                 sanitize=not args.no_sanitize), c_cheats):
            verdicts[v.name] = v
            print(f"{v.name}: {v.status} ({v.caught_by}) {v.seconds:.1f} s", file=sys.stderr, flush=True)
    torch_cheats = [c for c in runnable if c.kind == "torch"]
    if torch_cheats:
        try:
            import torch  # noqa: F401

            usable = torch.version.cuda is not None
        except ImportError:
            usable = False
        if not usable:
            for c in torch_cheats:
                verdicts[c.name] = Verdict(c.name, "torch", "skipped", "no CUDA build of torch here", "-",
                                           0.0, False, True, c.expect)
        else:  # each in its own build folder: -j of them build at once, the GPU lock orders the rest
            with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
                for v in pool.map(lambda c: run_torch_cheat(c, arch, work / "torch-builds" / c.name),
                                  torch_cheats):
                    verdicts[v.name] = v
                    print(f"{v.name}: {v.status} ({v.caught_by}) {v.seconds:.1f} s", file=sys.stderr,
                          flush=True)
    ordered = [verdicts[c.name] for c in cheats]
    print(table(ordered))
    bad = [v for v in ordered if not v.ok]
    cheats_n = sum(1 for v in ordered if not v.control and v.status != "skipped")
    caught = sum(1 for v in ordered if not v.control and v.ok and v.status != "skipped")
    controls = [v for v in ordered if v.control]
    print(f"\n{caught} of {cheats_n} cheats caught; {sum(v.ok for v in controls)} of {len(controls)} "
          f"controls passed; run folders in {work}")
    for v in bad:
        print(f"FAIL {v.name}: {v.status}: {v.message[:300]}")
    if args.json is not None:
        args.json.write_text(json.dumps({"verdicts": [asdict(v) for v in ordered], "work": str(work)},
                                        indent=2, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
