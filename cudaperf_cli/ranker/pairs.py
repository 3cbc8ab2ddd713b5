"""Training pairs for the ranker, from measured candidates (``cudaperf data pairs``).

Inputs (any mix):

- a ``candidates.jsonl`` file, or a ``cudaperf bench`` output folder holding one
  (docs/bench.md, schema_version 1 or 2): the problem id is the row's ``problem``;
- an ``optimize`` run folder (``turns.jsonl`` + ``problem.json``): the problem id is
  ``<file name>:<function>`` from ``problem.json`` (``<file name>`` alone for a PyTorch
  problem);
- a folder holding any of these deeper down (searched recursively; a folder with a
  ``candidates.jsonl`` is read through that file only, not through its ``runs/``).

Pairs are formed only between candidates of one problem **measured in one input** (one
``candidates.jsonl`` file or one run folder: one GPU, one set of sizes); the ``problem``
field, used for the split, is the id alone, so the same problem from two inputs always falls
on one side of a split.  Identical sources (same SHA-256) in one input are kept once (the
first measured).

"Correct" below means verified (``statuses.VERIFIED``: ``correct``, and ``slow``, whose timing
stopped after the warm-up because it was already far slower; its time is that estimate).

- **speed** pair: two correct candidates with median GPU kernel times ``t_a``, ``t_b`` (ms)
  and IQRs ``iqr_a``, ``iqr_b`` (ms) when ``|t_a - t_b| > iqr_a + iqr_b`` (the gap exceeds
  the measured noise) and ``slow / fast > 1 + min_margin``; ``margin = ln(slow / fast)``.
  Candidates without a positive time or without an IQR are left out of speed pairs.
- **correctness** pair: a correct candidate against one that compiled or ran but failed
  (:data:`INCORRECT`); the correct one is better; ``margin`` is null.

In a written pair, ``a`` is the candidate whose ``source_sha256`` sorts first, so labels are
not all 1; ``label`` is 1 when ``a`` is the better one.  Schema in docs/ranker.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from cudaperf_cli import statuses
from cudaperf_cli.core import CudaperfError
from cudaperf_cli.ranker import features as F

SCHEMA_VERSION = 1
#: ``candidates.jsonl`` schema versions read here (docs/bench.md; 2 added ``slow`` and
#: made ``correct`` mean verified; the fields read here did not change).
CANDIDATES_SCHEMAS = (1, 2)
#: Statuses of a candidate with a source that failed: the losing side of a correctness pair
#: (``statuses.INCORRECT``: the compile, runtime and wrong stages).  Left out: ``no_device``,
#: ``does_not_fit``, ``refused``, ``format_error``, ``pending`` (never built or run),
#: ``guard_rejected`` (a reward hack, not a slower or broken kernel), ``reference_error``
#: (the reference failed, not the candidate).
INCORRECT = statuses.INCORRECT
#: Statuses of the better side: verified (``correct``, ``slow``).
VERIFIED = statuses.VERIFIED


@dataclass
class Candidate:
    """One measured candidate, as read from an input.

    Attributes:
        problem: problem id (see the module docstring).
        group: the input it was measured in (file or run folder path) + problem id.
        source: CUDA source text.
        sha256: SHA-256 of ``source`` (hex).
        status: candidate status (docs/bench.md).
        gpu_ms: median GPU kernel time, ms (None when not measured).
        gpu_ms_iqr: its interquartile range, ms (None when not recorded).
        registers: most registers per thread (ptxas), None when unknown.
        spill_bytes: spill store + load bytes (ptxas), None when unknown.
        structure_score: the pipeline's structural score in [0, 1] (None when unknown).
        origin: ``<input>#<line>`` for messages.
    """

    problem: str
    group: str
    source: str
    sha256: str
    status: str
    gpu_ms: float | None
    gpu_ms_iqr: float | None
    registers: float | None
    spill_bytes: float | None
    structure_score: float | None
    origin: str


@dataclass
class PairStats:
    """What :func:`build_pairs` did, for the command's summary line."""

    inputs: int = 0
    candidates: int = 0
    correct: int = 0
    duplicates: int = 0
    speed_pairs: int = 0
    correctness_pairs: int = 0
    within_noise: int = 0  #: correct pairs whose gap was within the IQRs or the margin
    untimed: int = 0  #: correct candidates left out of speed pairs (no time or no IQR)
    problems: set[str] = field(default_factory=set)


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def read_text(path: Path) -> str:
    """The text of a JSON-lines file, gunzipped when its name ends in ``.gz`` (the
    measured datasets under ``data/`` are kept compressed).

    Raises:
        OSError: unreadable file; gzip.BadGzipFile (an OSError): a ``.gz`` that is not gzip.
    """
    if path.suffix == ".gz":
        import gzip

        with gzip.open(path, "rt", errors="replace") as fh:
            return fh.read()
    return path.read_text(errors="replace")


def _read_jsonl(path: Path, tolerant: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each JSON line of ``path``.  A line that does not parse
    is skipped when it is the last one (a killed writer) or, with ``tolerant`` (a run
    folder's ``turns.jsonl``, where a resumed run closes a cut line and goes on), anywhere.

    Raises:
        CudaperfError: unreadable file; another bad line; a line that is not an object.
    """
    try:
        text = read_text(path)
    except (OSError, EOFError) as exc:
        raise CudaperfError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines, 1) if line.strip()), default=0)
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if tolerant or (i == last and i > 1):  # a half-written line of a killed run
                continue
            raise CudaperfError(f"{path}:{i}: not a JSON line", hint="is this a candidates.jsonl or turns.jsonl?") from None
        if not isinstance(obj, dict):
            raise CudaperfError(f"{path}:{i}: not a JSON object", hint="is this a candidates.jsonl or turns.jsonl?")
        yield i, obj


def _candidate(row: Mapping[str, Any], problem: str, group: str, origin: str) -> Candidate | None:
    source = row.get("source")
    if not isinstance(source, str) or not source.strip():
        return None
    regs, spill = F.resources_of(row)
    return Candidate(
        problem=problem,
        group=group,
        source=source,
        sha256=hashlib.sha256(source.encode()).hexdigest(),
        status=str(row.get("status") or ""),
        gpu_ms=_num(row.get("gpu_ms")),
        gpu_ms_iqr=_num(row.get("gpu_ms_iqr")),
        registers=None if math.isnan(regs) else regs,
        spill_bytes=None if math.isnan(spill) else spill,
        structure_score=_num(row.get("structure_score")),
        origin=origin,
    )


def read_candidates_file(path: Path) -> list[Candidate]:
    """Candidates of a ``candidates.jsonl`` (rows without a source are skipped).

    Raises:
        CudaperfError: a row of another ``schema_version`` or without ``problem``.
    """
    out = []
    for line, row in _read_jsonl(path):
        version = row.get("schema_version")
        if version not in CANDIDATES_SCHEMAS:
            raise CudaperfError(
                f"{path}:{line}: candidates.jsonl schema_version {version!r}, this cudaperf reads "
                + " or ".join(map(str, CANDIDATES_SCHEMAS))
            )
        problem = row.get("problem")
        if not isinstance(problem, str) or not problem:
            raise CudaperfError(f"{path}:{line}: row without 'problem'", hint="is this a bench candidates.jsonl?")
        c = _candidate(row, problem, f"{path}::{problem}", f"{path}:{line}")
        if c is not None:
            out.append(c)
    return out


def run_problem_id(run_dir: Path) -> str:
    """``<file name>:<function>`` of an optimize run folder (``problem.json``), or the file
    name alone for a PyTorch problem; the folder's name when ``problem.json`` is unreadable."""
    try:
        doc = json.loads((run_dir / "problem.json").read_text())
    except (OSError, ValueError):
        return run_dir.name
    file = doc.get("file") or doc.get("path") or run_dir.name
    name = Path(str(file)).name
    function = doc.get("function")
    return f"{name}:{function}" if function else name


def read_run_dir(run_dir: Path) -> list[Candidate]:
    """Candidates of an optimize run folder's ``turns.jsonl``."""
    problem = run_problem_id(run_dir)
    path = run_dir / "turns.jsonl"
    out = []
    for line, row in _read_jsonl(path, tolerant=True):
        c = _candidate(row, problem, f"{run_dir}::{problem}", f"{path}:{line}")
        if c is not None:
            out.append(c)
    return out


def discover(paths: Sequence[Path]) -> list[Path]:
    """The inputs under ``paths``: ``candidates.jsonl`` files and run folders.

    Raises:
        CudaperfError: a path is missing, or nothing readable is found under one.
    """
    found: list[Path] = []

    def walk(d: Path) -> None:
        if (d / "candidates.jsonl").is_file():
            found.append(d / "candidates.jsonl")
            return
        if (d / "turns.jsonl").is_file():
            found.append(d)
            return
        for child in sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")):
            walk(child)

    for p in paths:
        if not p.exists():
            raise CudaperfError(f"no such file or folder: {p}", hint="give candidates.jsonl files, bench output folders or optimize run folders")
        before = len(found)
        if p.is_file():
            if p.name == "turns.jsonl":
                found.append(p.parent)
            else:
                found.append(p)
        else:
            walk(p)
        if len(found) == before:
            raise CudaperfError(
                f"{p}: no candidates.jsonl or turns.jsonl found",
                hint="give candidates.jsonl files, bench output folders or optimize run folders",
            )
    return found


def read_inputs(paths: Sequence[Path]) -> tuple[list[Candidate], int]:
    """All candidates under ``paths`` (see :func:`discover`) and the number of inputs."""
    inputs = discover(paths)
    cands: list[Candidate] = []
    for item in inputs:
        cands.extend(read_run_dir(item) if item.is_dir() else read_candidates_file(item))
    return cands, len(inputs)


def speed_gap(a: Candidate, b: Candidate, min_margin: float) -> float | None:
    """``ln(slow / fast)`` when the two times differ by more than the noise rule allows
    (``|t_a - t_b| > iqr_a + iqr_b`` and ``slow / fast > 1 + min_margin``), else None
    (also when a time or an IQR is missing)."""
    ta, tb = a.gpu_ms, b.gpu_ms
    if ta is None or tb is None or ta <= 0 or tb <= 0 or a.gpu_ms_iqr is None or b.gpu_ms_iqr is None:
        return None
    if abs(ta - tb) <= a.gpu_ms_iqr + b.gpu_ms_iqr:
        return None
    slow, fast = max(ta, tb), min(ta, tb)
    if slow / fast <= 1.0 + min_margin:
        return None
    return math.log(slow / fast)


def _side(c: Candidate, feats: Mapping[str, float]) -> dict[str, Any]:
    return {
        "source": c.source,
        "source_sha256": c.sha256,
        "status": c.status,
        "gpu_ms": c.gpu_ms,
        "gpu_ms_iqr": c.gpu_ms_iqr,
        "registers": c.registers,
        "spill_bytes": c.spill_bytes,
        "structure_score": c.structure_score,
        "origin": c.origin,
        "features": F.to_json(feats),
    }


def build_pairs(
    cands: Iterable[Candidate], *, min_margin: float = 0.05, with_features: bool = True
) -> tuple[list[dict[str, Any]], PairStats]:
    """Speed and correctness pairs (module docstring) as JSON-ready dicts.

    Args:
        cands: candidates, in the order they were measured.
        min_margin: relative speed margin below which a correct pair is left out (0.05: the
            slower must take more than 1.05 x the faster's time).
        with_features: compute each side's features (:func:`features.source_features`;
            once per distinct source); False leaves ``features`` empty (tests, speed).

    Raises:
        CudaperfError: ``min_margin`` is negative.
    """
    if not (min_margin >= 0):
        raise CudaperfError(f"--min-margin must be >= 0, got {min_margin}")
    stats = PairStats()
    groups: dict[str, list[Candidate]] = {}
    for c in cands:
        stats.candidates += 1
        g = groups.setdefault(c.group, [])
        if any(o.sha256 == c.sha256 for o in g):
            stats.duplicates += 1
            continue
        g.append(c)
    cache: dict[tuple[str, float | None, float | None], dict[str, float]] = {}

    def feats(c: Candidate) -> dict[str, float]:
        if not with_features:
            return {}
        key = (c.sha256, c.registers, c.spill_bytes)
        if key not in cache:
            cache[key] = F.source_features(c.source, registers=c.registers, spill_bytes=c.spill_bytes)
        return cache[key]

    pairs: list[dict[str, Any]] = []

    def emit(x: Candidate, y: Candidate, x_better: bool, kind: str, margin: float | None) -> None:
        a, b, a_better = (x, y, x_better) if x.sha256 < y.sha256 else (y, x, not x_better)
        pairs.append({
            "schema_version": SCHEMA_VERSION,
            "problem": a.problem,
            "kind": kind,
            "label": 1 if a_better else 0,
            "margin": margin,
            "features_version": F.FEATURES_VERSION if with_features else None,
            "a": _side(a, feats(a)),
            "b": _side(b, feats(b)),
        })

    for group in groups.values():
        correct = [c for c in group if c.status in VERIFIED]
        wrong = [c for c in group if c.status in INCORRECT]
        stats.correct += len(correct)
        if correct or wrong:
            stats.problems.add(group[0].problem)
        timed = [c for c in correct if c.gpu_ms is not None and c.gpu_ms > 0 and c.gpu_ms_iqr is not None]
        stats.untimed += len(correct) - len(timed)
        for i, x in enumerate(timed):
            for y in timed[i + 1:]:
                gap = speed_gap(x, y, min_margin)
                if gap is None:
                    stats.within_noise += 1
                    continue
                emit(x, y, x.gpu_ms < y.gpu_ms, "speed", gap)  # type: ignore[operator]
                stats.speed_pairs += 1
        for x in correct:
            for y in wrong:
                emit(x, y, True, "correctness", None)
                stats.correctness_pairs += 1
    return pairs, stats


def write_pairs(pairs: Iterable[Mapping[str, Any]], path: Path) -> None:
    """Write pairs as JSONL (one object a line), creating the parent folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for p in pairs:
            fh.write(json.dumps(p, allow_nan=False) + "\n")


def read_pairs(path: Path) -> list[dict[str, Any]]:
    """Pairs of a ``pairs.jsonl`` written by :func:`write_pairs`.

    Raises:
        CudaperfError: missing file, malformed line, or a line missing a required field.
    """
    if not path.is_file():
        gz = path.with_name(path.name + ".gz")
        raise CudaperfError(f"no such pairs file: {path}",
                            hint=f"did you mean {gz}? (gzipped pairs are read as they are)" if gz.exists()
                            else "write one with: cudaperf data pairs RUNS... -o pairs.jsonl")
    try:
        text = read_text(path)
    except (OSError, EOFError) as exc:
        raise CudaperfError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise CudaperfError(f"{path}:{i}: not a JSON line") from None
        if not isinstance(obj, dict) or obj.get("schema_version") != SCHEMA_VERSION:
            raise CudaperfError(f"{path}:{i}: not a pairs.jsonl line of schema_version {SCHEMA_VERSION}")
        for key in ("problem", "label", "kind", "a", "b"):
            if key not in obj:
                raise CudaperfError(f"{path}:{i}: missing '{key}'")
        if obj["label"] not in (0, 1) or not isinstance(obj["a"], dict) or not isinstance(obj["b"], dict):
            raise CudaperfError(f"{path}:{i}: 'label' must be 0 or 1 and 'a', 'b' objects")
        out.append(obj)
    return out


SPLIT_KEYS = ("problem", "family")


def group_of(pair: Mapping[str, Any], by: str = "problem") -> str:
    """The split group of a pair: its ``problem`` id, or with ``by="family"`` its
    ``family`` (pairs of ``cudaperf data measure``) prefixed by the problem's kind
    (``c/stencil2d``), since the two generators name their families independently.

    Raises:
        CudaperfError: an unknown ``by``, or a pair without a family.
    """
    if by == "problem":
        return str(pair["problem"])
    if by == "family":
        fam = pair.get("family")
        if not fam:
            raise CudaperfError(f"a pair of problem {pair.get('problem')} has no 'family'",
                                hint="family splits need pairs from cudaperf data measure; use --split-by problem")
        return f"{pair.get('problem_kind') or '?'}/{fam}"
    raise CudaperfError(f"--split-by must be one of {', '.join(SPLIT_KEYS)}, not '{by}'")


def split_by_problem(
    pairs: Sequence[Mapping[str, Any]], *, test_fraction: float = 0.25, seed: int = 0,
    test_problems: Sequence[str] | None = None, by: str = "problem",
) -> tuple[list[int], list[int], list[str], list[str]]:
    """Split pair indices into train and test **by problem** (never by pair), or by family
    (``by="family"``: :func:`group_of`; no family on both sides).

    The distinct groups, sorted then shuffled with ``random.Random(seed)``; the first
    ``max(1, round(test_fraction * n))`` (at most ``n - 1``) are the test groups.
    ``test_problems`` (a fold of :func:`problem_folds`) names the test groups instead.

    Returns:
        ``(train indices, test indices, train groups, test groups)``.

    Raises:
        CudaperfError: fewer than 2 groups, ``test_fraction`` not in (0, 1), a pair without
            the group key.
    """
    if not (0.0 < test_fraction < 1.0):
        raise CudaperfError(f"--test-fraction must be between 0 and 1 (exclusive), got {test_fraction}")
    keys = [group_of(p, by) for p in pairs]
    problems = sorted(set(keys))
    if len(problems) < 2:
        raise CudaperfError(
            f"pairs of {len(problems)} {by}(s): a split by {by} needs at least 2",
            hint="measure more problems (cudaperf bench SUITE), then cudaperf data pairs",
        )
    if test_problems is not None:
        test_set = set(test_problems) & set(problems)
        if not test_set or len(test_set) == len(problems):
            raise CudaperfError(f"a fold must hold out some {by}s, not all of them")
    else:
        random.Random(seed).shuffle(problems)
        n_test = min(len(problems) - 1, max(1, round(test_fraction * len(problems))))
        test_set = set(problems[:n_test])
    test_p = sorted(test_set)
    train_idx = [i for i, k in enumerate(keys) if k not in test_set]
    test_idx = [i for i, k in enumerate(keys) if k in test_set]
    return train_idx, test_idx, sorted(set(problems) - test_set), test_p


def problem_folds(pairs: Sequence[Mapping[str, Any]], k: int, seed: int = 0, by: str = "problem") -> list[list[str]]:
    """``k`` disjoint folds of the distinct problem ids (or families, ``by="family"``) for
    cross-validation: sorted, shuffled with ``random.Random(seed)``, dealt round-robin.

    Raises:
        CudaperfError: ``k`` below 2 or above the number of groups.
    """
    problems = sorted({group_of(p, by) for p in pairs})
    if not 2 <= k <= len(problems):
        raise CudaperfError(f"--cv {k}: needs 2 to {len(problems)} folds ({len(problems)} {by}s)")
    random.Random(seed).shuffle(problems)
    return [sorted(problems[i::k]) for i in range(k)]


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


__all__ = [
    "CANDIDATES_SCHEMAS",
    "INCORRECT",
    "VERIFIED",
    "SCHEMA_VERSION",
    "Candidate",
    "PairStats",
    "build_pairs",
    "discover",
    "file_sha256",
    "read_candidates_file",
    "read_inputs",
    "read_pairs",
    "read_run_dir",
    "run_problem_id",
    "speed_gap",
    "split_by_problem",
    "group_of",
    "SPLIT_KEYS",
    "write_pairs",
]
