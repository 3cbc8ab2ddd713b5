"""Measuring a generated dataset: ``cudaperf data measure DIR`` (bench over the set, then pairs).

For each input configuration asked (``--configs``, default ``main``) the dataset's problems
become one bench suite, ``DIR/measure/<config>/suite/`` (copies of the files; a C problem's
sizes in its ``bench.toml`` table, a PyTorch problem's constants written into its copy,
since PyTorch shapes are module constants), and ``cudaperf bench`` runs it into
``DIR/measure/<config>/bench/`` with the given policy settings and executor (``local`` or
``ray``).  A bench folder that exists is resumed (``--resume``), so an interrupted measure
continues where it stopped.

Then everything measured so far is gathered, whatever this run's ``--configs``, ``--kind``
or ``--limit``: every finished problem result (``problems/*.json``) of every configuration's
bench folder, also those of earlier runs with other options.  Each configuration's
candidates go to ``DIR/measure/<config>/candidates.jsonl`` (a bench's own
``candidates.jsonl`` holds only its last suite) and all of them to ``DIR/candidates.jsonl``
(each row with its ``config``, ``family`` and ``split`` added); the ranker's pairs are built
per configuration (one input = one configuration on one GPU: pairs never mix sizes or
machines) into ``DIR/pairs.jsonl``, each pair with ``family``, ``split`` and ``config``, so
that ``cudaperf train ranker --split-by family`` keeps every family on one side.
"""

from __future__ import annotations

import ast
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from cudaperf_cli.core import CudaperfError, write_text_atomic
from cudaperf_cli.data.dataset import read_manifest, split_of
from cudaperf_cli.data.spec import CONFIG_NAMES

MEASURE_DIR = "measure"


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a TOML basic string is a JSON string for our ids and names


def select(doc: dict[str, Any], *, kinds: Sequence[str], split: str | None, limit: int | None,
           only_checked: bool, offset: int = 0) -> list[dict[str, Any]]:
    """The manifest entries to measure: of ``kinds``, of ``split`` (``train``/``test``, None:
    both), those whose check passed when ``only_checked`` (unchecked ones are kept: a
    dataset generated with ``--no-check``), each kind's entries interleaved by family (so a
    small ``limit`` still covers every family), the first ``offset`` of that order skipped
    (measured elsewhere: another machine, an earlier session), then the next ``limit``;
    the kinds interleaved."""
    per_kind = []
    for kind in kinds:
        entries = [e for e in doc["problems"] if e["kind"] == kind
                   and (split is None or split_of(doc, kind, e["family"]) == split)
                   and not (only_checked and e.get("check") and not e["check"].get("ok"))
                   and not (only_checked and e.get("check") and not e["check"].get("candidates"))]
        by_family: dict[str, list[dict[str, Any]]] = {}
        for e in entries:
            by_family.setdefault(e["family"], []).append(e)
        order: list[dict[str, Any]] = []
        queues = [list(v) for _, v in sorted(by_family.items())]
        while any(queues):
            for q in queues:
                if q:
                    order.append(q.pop(0))
        order = order[offset:]
        per_kind.append(order[:limit] if limit is not None else order)
    out = []  # the kinds interleaved too: a measure cut short still has both
    for i in range(max((len(k) for k in per_kind), default=0)):
        out += [k[i] for k in per_kind if i < len(k)]
    return out


def write_suite(root: Path, config: str, entries: Sequence[dict[str, Any]]) -> Path:
    """Write ``DIR/measure/<config>/suite/`` (files and ``bench.toml``); returns the manifest.

    Raises:
        CudaperfError: a problem has no such configuration, or its file is missing.
    """
    from cudaperf_cli.problems.pytorch import override_constants

    suite = root / MEASURE_DIR / config / "suite"
    lines = ["# written by cudaperf data measure: the dataset's problems at configuration "
             f"'{config}'", "[suite]", f"name = {_toml_str('dataset-' + config)}",
             "files = [" + ", ".join(_toml_str(e["id"]) for e in entries) + "]", ""]
    for e in entries:
        sizes = next((c["sizes"] for c in e["configs"] if c["name"] == config), None)
        if sizes is None:
            raise CudaperfError(f"{e['id']} has no configuration '{config}'",
                                hint="configurations: " + ", ".join(c["name"] for c in e["configs"]))
        try:
            text = (root / e["id"]).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CudaperfError(f"{root / e['id']}: {getattr(exc, 'strerror', None) or exc}") from None
        if e["kind"] == "torch" and config != "main":
            text = ast.unparse(override_constants(text, sizes, e["id"])) + "\n"
        dest = suite / e["id"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists() or dest.read_text() != text:
            write_text_atomic(dest, text, fsync=False)
        if e["kind"] == "c":
            table = ", ".join(f"{k} = {int(v)}" for k, v in sizes.items())
            lines += [f"[problems.{_toml_str(e['id'])}]", f"function = {_toml_str(e['function'])}",
                      f"sizes = {{ {table} }}", ""]
    manifest = suite / "bench.toml"
    write_text_atomic(manifest, "\n".join(lines), fsync=False)
    return manifest


@dataclass
class MeasureSummary:
    """What :func:`gather` wrote: rows in ``candidates.jsonl``, pairs and their kinds, problems
    with a pair, families, seconds of the bench runs."""

    candidates: int = 0
    correct: int = 0
    speed_pairs: int = 0
    correctness_pairs: int = 0
    problems: int = 0
    problems_with_pairs: int = 0
    families_with_pairs: int = 0
    bench_wall_s: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def bench_dirs(root: Path, configs: Sequence[str] | None = None) -> list[tuple[str, Path]]:
    """The ``(config, bench folder)`` pairs with results, in ``configs`` order (None: every
    configuration measured so far, in :data:`CONFIG_NAMES` order)."""
    if configs is None:
        base = root / MEASURE_DIR
        names = sorted((d.name for d in base.iterdir() if d.is_dir()) if base.is_dir() else (),
                       key=lambda n: (CONFIG_NAMES.index(n) if n in CONFIG_NAMES else len(CONFIG_NAMES), n))
    else:
        names = list(configs)
    return [(c, root / MEASURE_DIR / c / "bench") for c in names
            if (root / MEASURE_DIR / c / "bench" / "problems").is_dir()]


def finished_results(bench: Path, order: Sequence[str]) -> list[dict[str, Any]]:
    """The finished problem results of a bench folder (``problems/*.json``; interrupted,
    unreadable and not-run-by-the-executor ones left out), problems in ``order`` (the
    manifest's) first, the rest by name."""
    rank = {pid: i for i, pid in enumerate(order)}
    out = []
    for path in sorted((bench / "problems").glob("*.json")):
        try:
            res = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (isinstance(res, dict) and isinstance(res.get("id"), str) and res.get("status") != "interrupted"
                and not res.get("executor_error")):
            out.append(res)
    return sorted(out, key=lambda r: (rank.get(r["id"], len(rank)), r["id"]))


def gather(root: Path, configs: Sequence[str] | None = None, *, min_margin: float = 0.05) -> MeasureSummary:
    """Gather what the benches measured into ``DIR/measure/<config>/candidates.jsonl``,
    ``DIR/candidates.jsonl`` and ``DIR/pairs.jsonl`` (module docstring).

    Args:
        configs: the configurations to gather; None (what ``measure`` passes): every one
            measured so far, so a run with other options never drops earlier results.

    Raises:
        CudaperfError: no bench of these configurations has a finished problem.
    """
    from cudaperf_cli.bench.report import write_candidates
    from cudaperf_cli.ranker import pairs as P

    doc = read_manifest(root)
    info = {e["id"]: e for e in doc["problems"]}
    order = [e["id"] for e in doc["problems"]]
    benches = [(c, b, finished_results(b, order)) for c, b in bench_dirs(root, configs)]
    benches = [(c, b, rs) for c, b, rs in benches if rs]
    if not benches:
        raise CudaperfError(f"no measured candidates under {root / MEASURE_DIR}"
                            + (f" for {', '.join(configs)}" if configs else ""),
                            hint="run cudaperf data measure DIR first")
    s = MeasureSummary()
    cand_lines, pair_lines = [], []
    problems, with_pairs, families = set(), set(), set()

    def tags(problem: str, config: str) -> dict[str, Any]:
        e = info.get(problem, {})
        fam = e.get("family")
        return {"config": config, "family": fam, "problem_kind": e.get("kind"),
                "split": split_of(doc, e.get("kind", ""), fam) if fam else None}

    for config, bench, results in benches:
        path = bench.parent / "candidates.jsonl"
        write_candidates(path, results)
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            row.update(tags(row.get("problem", ""), config))
            cand_lines.append(json.dumps(row))
            problems.add(row.get("problem"))
            s.correct += row.get("status") in ("correct", "slow")
            s.statuses[str(row.get("status"))] = s.statuses.get(str(row.get("status")), 0) + 1
        cands = P.read_candidates_file(path)
        pairs, stats = P.build_pairs(cands, min_margin=min_margin)
        for p in pairs:
            p.update(tags(p["problem"], config))
            pair_lines.append(json.dumps(p))
            with_pairs.add(p["problem"])
            families.add((p.get("problem_kind"), p.get("family")))
        s.speed_pairs += stats.speed_pairs
        s.correctness_pairs += stats.correctness_pairs
        try:
            report = json.loads((bench / "report.json").read_text())
            s.bench_wall_s += float(report.get("wall_s") or report.get("settings", {}).get("wall_s") or 0.0)
        except (OSError, ValueError, TypeError):
            pass
    s.candidates = len(cand_lines)
    s.problems, s.problems_with_pairs, s.families_with_pairs = len(problems), len(with_pairs), len(families)
    write_text_atomic(root / "candidates.jsonl", "".join(ln + "\n" for ln in cand_lines))
    write_text_atomic(root / "pairs.jsonl", "".join(ln + "\n" for ln in pair_lines))
    return s


def measure(root: Path, *, configs: Sequence[str], kinds: Sequence[str], split: str | None, limit: int | None,
            only_checked: bool, bench_options: Any, min_margin: float = 0.05,
            offset: int = 0) -> tuple[MeasureSummary, list[int]]:
    """Write each configuration's suite, run (or resume) its bench, then :func:`gather`.

    Args:
        bench_options: a ``bench.runner.BenchOptions`` whose ``out_dir`` and ``resume`` are
            replaced per configuration.

    Returns:
        ``(summary, the benches' exit codes)``.

    Raises:
        CudaperfError: not a dataset, nothing to measure, a bench's bad input.
    """
    from dataclasses import replace

    from cudaperf_cli.bench.command import run_bench_command

    from cudaperf_cli.data.check import changed_since_generated

    doc = read_manifest(root)
    entries = select(doc, kinds=kinds, split=split, limit=limit, only_checked=only_checked, offset=offset)
    # a file edited since data generate wrote it is not the manifest's problem: left out
    # (the CLI names how many; data check reports each)
    entries = [e for e in entries if changed_since_generated(root, e) is None]
    if not entries:
        raise CudaperfError(f"nothing to measure in {root} (kinds {', '.join(kinds)}"
                            + (f", split {split}" if split else "") + ")")
    codes = []
    t0 = time.perf_counter()
    for config in configs:
        manifest = write_suite(root, config, entries)
        out = root / MEASURE_DIR / config / "bench"
        resume = out.exists() and any(out.iterdir())
        try:
            codes.append(run_bench_command(manifest, replace(bench_options, out_dir=out, resume=resume)))
        except CudaperfError as err:  # the bench's hints name its -o, which data measure has not
            if resume and err.hint and "-o" in err.hint:
                err.hint = (f"measure {config} with the options it was measured with, or remove {out} "
                            f"to measure it again from the start")
            raise
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: what finished is gathered, a rerun resumes
            codes.append(130)
        if codes[-1] == 130:
            break
    summary = gather(root, min_margin=min_margin)  # all measured so far, not only this run's
    summary.bench_wall_s = round(time.perf_counter() - t0, 1)
    return summary, codes


__all__ = ["MEASURE_DIR", "MeasureSummary", "bench_dirs", "finished_results", "gather", "measure", "select", "write_suite"]
