"""A generated dataset on disk: drawing, deduplicating, writing, the manifest and the splits.

``cudaperf data generate --kind c|torch --count N --seed S -o DIR`` (``cli/data.py``) calls
:func:`generate` here, then :func:`cudaperf_cli.data.check.check_dataset`.  The layout:

```
DIR/manifest.json        every problem: id, kind, family, knobs, configurations, structure
                         key, sha256, its check; per kind the generation's figures; the split
DIR/c/<family>_<NNNNN>.c        C problems (a function, an init function and main)
DIR/torch/<family>_<NNNNN>.py   PyTorch problems (KernelBench format)
DIR/check.jsonl          one line per checked problem (check.py), appended as they finish
DIR/measure/...          cudaperf data measure's bench runs (measure.py)
```

Drawing is deterministic: draw ``i`` of kind ``k`` uses ``random.Random(f"{seed}:{k}:{i}")``,
families are visited round-robin (draw ``i`` is of family ``FAMILIES[i % F]``), so the set
is the same on every machine and a larger ``--count`` with the same seed extends a smaller
one.  A draw whose ``structure_key`` was already drawn is a duplicate and is dropped; a
family whose last :data:`EXHAUSTED_AFTER` draws were all duplicates is exhausted (its
grammar has no new structure left) and is skipped from then on.  PyTorch draws are also
rejected when their output does not depend on their input (``torch_gen.is_degenerate``,
run in a child process at the ``small_odd`` configuration).

The split is by **family** (no family in both train and test): every family of the kind's
grammar (drawn or not, so that a small set and a large one of the same seed agree), sorted
and shuffled with ``random.Random(seed)``, the first ``round(test_fraction * F)`` (at least
one, at most F - 1) held out.

One ``cudaperf data`` command writes a dataset at a time (:func:`dataset_lock`): a second
one started meanwhile (another kind's ``generate``, a ``check``) stops with one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from cudaperf_cli.core import CudaperfError, write_text_atomic
from cudaperf_cli.data.spec import GeneratedProblem

MANIFEST = "manifest.json"
SCHEMA_VERSION = 1
KINDS = ("c", "torch")
#: A family whose last this-many draws were all duplicates is exhausted.
EXHAUSTED_AFTER = 200
#: Default fraction of the families held out as the test split.
TEST_FRACTION = 0.2
#: Version of the grammars (c_gen, torch_gen), recorded with each kind's generation: a
#: change that alters what a seed draws bumps it (2: bicg's checksum loop, double sums of
#: float full reductions, alpha/beta matvecs summed in a scalar).
GRAMMAR_VERSION = 2
#: The lock file of a dataset folder (:func:`dataset_lock`).
LOCK_FILE = ".cudaperf-data.lock"
#: Problems drawn between two progress updates (PyTorch: each batch's degenerate check).
DRAW_BATCH = {"c": 512, "torch": 32}


@contextlib.contextmanager
def dataset_lock(root: Path, *, create: bool = False) -> Iterator[None]:
    """Hold ``root``'s lock (an exclusive ``flock`` on ``root/.cudaperf-data.lock``) while a
    data command writes the dataset; released when the process ends, however it ends.

    Args:
        create: make ``root`` first (``data generate`` into a new folder).

    Raises:
        CudaperfError: another process holds it (another ``cudaperf data`` command on the
            same folder), or ``root`` cannot be written (read-only, not a folder).
    """
    import fcntl

    try:
        if create:
            root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK):
            raise PermissionError(13, "Permission denied")
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except FileNotFoundError:
        raise CudaperfError(f"{root} is not a dataset: no such folder",
                            hint="make one with cudaperf data generate --kind c --count N -o DIR") from None
    except OSError as exc:
        why = "its lock file is a symbolic link" if exc.errno == 40 else (exc.strerror or str(exc))
        raise CudaperfError(f"cannot write the dataset {root}: {why}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            raise CudaperfError(f"another cudaperf data command (pid {holder}) is writing {root}",
                                hint="wait for it to finish: one data command per dataset at a time") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _generator(kind: str) -> tuple[Sequence[str], Callable[..., GeneratedProblem]]:
    """``(FAMILIES, generate)`` of a kind. Raises CudaperfError for an unknown kind."""
    if kind == "c":
        from cudaperf_cli.data import c_gen

        return c_gen.FAMILIES, c_gen.generate_c
    if kind == "torch":
        from cudaperf_cli.data import torch_gen

        return torch_gen.FAMILIES, torch_gen.generate_torch
    raise CudaperfError(f"--kind must be c or torch, not '{kind}'")


def draw(kind: str, seed: int, index: int) -> GeneratedProblem:
    """Draw ``index`` of a kind's sequence for ``seed`` (family ``FAMILIES[index % F]``)."""
    families, gen = _generator(kind)
    rng = random.Random(f"{seed}:{kind}:{index}")
    return gen(rng, families[index % len(families)])


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Drawn:
    """The outcome of :func:`draw_unique`.

    Attributes:
        problems: the kept problems with their draw index, in draw order.
        draws: draws made; duplicates: dropped as a repeated structure; degenerate: dropped
            (PyTorch) with their reasons counted; exhausted: families that ran out.
        seconds: wall time of drawing (and of the degenerate checks).
    """

    problems: list[tuple[int, GeneratedProblem]] = field(default_factory=list)
    draws: int = 0
    duplicates: int = 0
    degenerate: int = 0
    degenerate_reasons: dict[str, int] = field(default_factory=dict)
    exhausted: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _degenerate_reason(source: str, sizes: dict[str, int]) -> str | None:
    """Pool worker: ``torch_gen.is_degenerate`` (never in the CLI's own process)."""
    from cudaperf_cli.data.torch_gen import is_degenerate

    try:
        return is_degenerate(source, sizes)
    except Exception as exc:  # a draw that does not even run is rejected, with its reason
        return f"does not run: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _pool_init() -> None:
    """Bound a pool worker (it runs generated PyTorch code): 16 GiB of address space,
    no secrets in its environment, SIGTERM and SIGHUP back to their default (the CLI's
    handlers, inherited, would turn them into a traceback of the worker)."""
    import os
    import signal

    from cudaperf_cli.sandbox import GIB, Limits, is_secret_name

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)

    for name in [n for n in os.environ if is_secret_name(n)]:
        del os.environ[name]
    apply = Limits(address_space_bytes=16 * GIB, cpu_s=3600).preexec()
    if apply is not None:
        apply()
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now, not when its running tasks end: its workers and everything they
    started (nvcc, a loader child) are killed, queued tasks cancelled.  A plain shutdown
    waits for the workers, and after Ctrl-C or SIGTERM the interpreter's exit joined a
    worker that never ended (the command hung)."""
    from cudaperf_cli.evaluate.child import group_and_descendants

    workers = list(getattr(pool, "_processes", {}).values())
    victims: set[int] = set()
    for proc in workers:
        if proc.pid is not None:
            victims |= group_and_descendants(proc.pid) - {os.getpid(), os.getpgrp()}
    for pid in victims:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        proc.join(timeout=5)


def draw_unique(kind: str, count: int, seed: int, *, seen: Iterable[str] = (), jobs: int = 1,
                progress: Callable[[int], None] | None = None) -> Drawn:
    """Draw until ``count`` problems of distinct structure are kept (or every family is
    exhausted: fewer are returned, ``exhausted`` says which).

    Args:
        kind: ``"c"`` or ``"torch"``; count: problems wanted; seed: the sequence's seed.
        seen: structure keys already in the dataset (kept out).
        jobs: worker processes for the PyTorch degenerate check.
        progress: called with the number of problems newly kept.

    Raises:
        CudaperfError: an unknown kind.
    """
    families, _ = _generator(kind)
    t0 = time.perf_counter()
    out = Drawn()
    keys = set(seen)
    misses = {f: 0 for f in families}
    index = 0
    pool = ProcessPoolExecutor(max_workers=max(1, jobs), initializer=_pool_init) if kind == "torch" else None
    try:
        while len(out.problems) < count and len(out.exhausted) < len(families):
            batch: list[tuple[int, GeneratedProblem]] = []
            want = max(1, min(DRAW_BATCH.get(kind, 64), count - len(out.problems)))
            while len(batch) < want and len(out.exhausted) < len(families):
                family = families[index % len(families)]
                i, index = index, index + 1
                if family in out.exhausted:
                    continue
                p = draw(kind, seed, i)
                out.draws += 1
                if p.structure_key in keys:
                    out.duplicates += 1
                    misses[family] += 1
                    if misses[family] >= EXHAUSTED_AFTER:
                        out.exhausted.append(family)
                    continue
                misses[family] = 0
                keys.add(p.structure_key)
                batch.append((i, p))
            if pool is not None:
                reasons = list(pool.map(_degenerate_reason, [p.source for _, p in batch],
                                        [p.config("small_odd") for _, p in batch]))
            else:
                reasons = [None] * len(batch)
            kept = 0
            for (i, p), why in zip(batch, reasons):
                if why is not None:
                    out.degenerate += 1
                    head = why.split(":")[0][:80]
                    out.degenerate_reasons[head] = out.degenerate_reasons.get(head, 0) + 1
                    continue
                if len(out.problems) < count:
                    out.problems.append((i, p))
                    kept += 1
            if progress is not None and kept:
                progress(kept)
    except BaseException:
        if pool is not None:
            stop_pool(pool)
            pool = None
        raise
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    out.seconds = time.perf_counter() - t0
    return out


# ---------------------------------------------------------------------------------------
# The manifest
# ---------------------------------------------------------------------------------------


def read_manifest(root: Path) -> dict[str, Any]:
    """``DIR/manifest.json``. Raises CudaperfError when missing or malformed."""
    path = root / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise CudaperfError(f"{root} is not a dataset: no {MANIFEST}",
                            hint="make one with cudaperf data generate --kind c --count N -o DIR") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CudaperfError(f"{path}: unreadable ({exc})",
                            hint=f"if a crash cut it, move it away and generate again: cudaperf data generate "
                                 f"--force -o {root}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION or not isinstance(doc.get("problems"), list):
        raise CudaperfError(f"{path}: not a cudaperf dataset manifest (schema_version {SCHEMA_VERSION})")
    seen: set[str] = set()
    for i, e in enumerate(doc["problems"]):
        bad = ("not an object" if not isinstance(e, dict) else
               "no id" if not isinstance(e.get("id"), str) or not e["id"] else
               f"kind {e.get('kind')!r}" if e.get("kind") not in KINDS else
               f"id {e['id']!r} is not {e['kind']}/<file> inside the dataset"
               if not re.fullmatch(re.escape(e["kind"]) + r"/[A-Za-z0-9_][A-Za-z0-9_.-]*", e["id"]) else
               f"id {e['id']!r} appears twice" if e["id"] in seen else
               "no family" if not isinstance(e.get("family"), str) else
               "no configs" if not isinstance(e.get("configs"), list) else None)
        if bad:
            raise CudaperfError(f"{path}: problem {i} is malformed ({bad})",
                                hint="regenerate the kind with cudaperf data generate --force")
        seen.add(e["id"])
    for key in ("generation", "splits"):
        if not isinstance(doc.setdefault(key, {}), dict):
            raise CudaperfError(f"{path}: '{key}' is not an object")
    for kind, split in doc["splits"].items():
        if not isinstance(split, dict) or not all(isinstance(split.get(k, []), list) for k in ("train", "test")):
            raise CudaperfError(f"{path}: the split of '{kind}' is not {{\"train\": [...], \"test\": [...]}}")
    return doc


def write_manifest(root: Path, doc: dict[str, Any]) -> None:
    write_text_atomic(root / MANIFEST, json.dumps(doc, indent=1, sort_keys=False) + "\n")


def family_split(families: Sequence[str], *, seed: int, test_fraction: float = TEST_FRACTION) -> dict[str, list[str]]:
    """Families of one kind into ``{"train": [...], "test": [...]}`` (sorted, shuffled with
    ``random.Random(seed)``; ``round(test_fraction * F)`` held out, at least 1 and at most
    F - 1; one family: train only)."""
    fams = sorted(set(families))
    if len(fams) < 2:
        return {"train": fams, "test": []}
    random.Random(seed).shuffle(fams)
    n_test = min(len(fams) - 1, max(1, round(test_fraction * len(fams))))
    return {"train": sorted(fams[n_test:]), "test": sorted(fams[:n_test])}


def split_of(doc: dict[str, Any], kind: str, family: str) -> str | None:
    """``"train"``, ``"test"`` or None (a family the split does not name)."""
    split = doc.get("splits", {}).get(kind, {})
    for name in ("train", "test"):
        if family in split.get(name, ()):
            return name
    return None


def check_output(root: Path, kind: str, *, force: bool = False) -> dict[str, Any]:
    """Check that ``root`` may receive ``kind``'s problems before anything is drawn or written;
    returns its manifest (an empty one for a new dataset).

    Raises:
        CudaperfError: an unknown kind, ``root`` is a file, its manifest is malformed, or
            ``root/<kind>/`` already holds files and ``force`` is not given.
    """
    _generator(kind)
    if root.exists() and not root.is_dir():
        raise CudaperfError(f"{root} exists and is not a folder")
    folder = root / kind
    if folder.exists() and any(folder.iterdir()) and not force:
        raise CudaperfError(f"{folder} already holds problems",
                            hint="pass --force to replace this kind's problems, or choose another -o")
    for path in (root, folder, root / MANIFEST):  # before anything is changed, not halfway
        if path.exists() and not os.access(path, os.W_OK):
            raise CudaperfError(f"cannot write {path}: Permission denied")
    if (root / MANIFEST).exists():
        return read_manifest(root)
    return {"schema_version": SCHEMA_VERSION, "generator": "cudaperf data generate", "problems": [],
            "generation": {}, "splits": {}}


def generate(root: Path, kind: str, count: int, seed: int, *, force: bool = False, jobs: int = 1,
             test_fraction: float = TEST_FRACTION,
             progress: Callable[[int], None] | None = None,
             on_write: Callable[[], None] | None = None) -> dict[str, Any]:
    """Draw ``count`` problems of ``kind`` and write them under ``root/<kind>/`` with the
    manifest (the problems of the other kind already there are kept).

    Everything is drawn before anything is written (an interrupted draw changes nothing);
    then the manifest without this kind's old problems is written first, the old files,
    measurements and checks removed, the new files and the manifest written last, so the
    manifest never names a file that is not there.  ``on_write`` is called when the
    writing starts.

    Returns:
        The kind's generation figures (``manifest["generation"][kind]``).

    Raises:
        CudaperfError: ``root/<kind>/`` already holds files and ``force`` is not given (the
            user's data is never overwritten without asking), ``root`` is a file, or a bad
            kind/count.
    """
    if count < 1:
        raise CudaperfError("--count must be at least 1")
    check_output(root, kind, force=force)
    folder = root / kind
    # draw first: an interrupted draw (Ctrl-C) has changed nothing on disk
    drawn = draw_unique(kind, count, seed, jobs=jobs, progress=progress)
    # then replace, in an order that never leaves the manifest naming a removed file
    doc = check_output(root, kind, force=force)  # as it is now
    if on_write is not None:
        on_write()
    doc["problems"] = [p for p in doc["problems"] if p.get("kind") != kind]
    doc["generation"].pop(kind, None)
    doc["splits"].pop(kind, None)
    root.mkdir(parents=True, exist_ok=True)
    write_manifest(root, doc)
    if force:  # measurements of the replaced problems would be resumed as the new ones'
        _forget_measurements(root, kind)
    if folder.exists():
        for f in folder.iterdir():
            if f.is_file() and f.suffix in (".c", ".py"):
                f.unlink()
    check_log = root / "check.jsonl"
    if check_log.exists():  # keep the other kind's checks only (a line cut by a kill goes)
        keep = []
        for ln in check_log.read_text(errors="replace").splitlines():
            try:
                row = json.loads(ln)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and row.get("kind") != kind:
                keep.append(ln)
        write_text_atomic(check_log, "".join(ln + "\n" for ln in keep))
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for n, (index, p) in enumerate(drawn.problems):
        name = f"{p.family}_{n:05d}{p.suffix}"
        write_text_atomic(folder / name, p.source, fsync=False)
        entries.append({
            "id": f"{kind}/{name}", "kind": kind, "family": p.family, "draw": index,
            "function": p.function, "knobs": p.knobs, "configs": p.configs,
            "structure_key": p.structure_key, "sha256": sha256_text(p.source),
        })
    families, _ = _generator(kind)
    per_family: dict[str, int] = {}
    for e in entries:
        per_family[e["family"]] = per_family.get(e["family"], 0) + 1
    gen = {"grammar_version": GRAMMAR_VERSION, "seed": seed, "count_asked": count, "count": len(entries), "draws": drawn.draws,
           "duplicates": drawn.duplicates, "degenerate": drawn.degenerate,
           "degenerate_reasons": drawn.degenerate_reasons, "exhausted_families": drawn.exhausted,
           "per_family": per_family, "seconds": round(drawn.seconds, 3),
           "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    doc["problems"] += entries
    doc["generation"][kind] = gen
    doc["splits"][kind] = {"by": "family", "seed": seed, "test_fraction": test_fraction,
                           **family_split(list(families), seed=seed, test_fraction=test_fraction)}
    write_manifest(root, doc)
    if force:
        _regather(root)
    return gen


def _forget_measurements(root: Path, kind: str) -> None:
    """Remove what ``data measure`` recorded of ``kind``'s problems (their bench results and
    suite copies) and the gathered files; the other kind's measurements stay (:func:`_regather`
    writes the gathered files again from them)."""
    import shutil

    for stale in ("candidates.jsonl", "pairs.jsonl"):
        (root / stale).unlink(missing_ok=True)
    base = root / "measure"
    for config in (base.iterdir() if base.is_dir() else ()):
        if not config.is_dir():
            continue
        (config / "candidates.jsonl").unlink(missing_ok=True)
        shutil.rmtree(config / "suite" / kind, ignore_errors=True)
        for res in (config / "bench" / "problems").glob("*.json"):
            try:
                pid = json.loads(res.read_text()).get("id")
            except (OSError, ValueError, AttributeError):
                pid = None
            if not isinstance(pid, str) or pid.startswith(kind + "/"):
                res.unlink(missing_ok=True)


def _regather(root: Path) -> None:
    """``DIR/candidates.jsonl`` and ``pairs.jsonl`` again from the measurements left."""
    from cudaperf_cli.data.measure import bench_dirs, gather

    if any(any((b / "problems").glob("*.json")) for _, b in bench_dirs(root)):
        gather(root)


__all__ = ["KINDS", "LOCK_FILE", "MANIFEST", "Drawn", "check_output", "dataset_lock", "draw", "draw_unique",
           "family_split", "generate",
           "read_manifest", "sha256_text", "split_of", "write_manifest"]
