"""``cudaperf optimize --resume RUN_DIR``: what a run folder gives back.

``run.json`` (the options), ``turns.jsonl`` (the records; a line cut by a crash is
skipped), ``hints.jsonl`` (the user's hints), ``baseline.json`` (the baseline measured
once, parsed by the problem's kind) and ``summary.json``'s ``output_sha256`` (a result
this run wrote may be replaced without ``--force``).  The same for both kinds.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.agent.options import (
    RESUME_OVERRIDES, OptimizeOptions, file_sha256, flag_of, options_from_json,
)
from cudaperf_cli.agent.store import RunStore
from cudaperf_cli.core import CudaperfError


@dataclass
class ResumeState:
    """What ``--resume RUN`` reads back from a run folder.

    Attributes:
        store: the run folder, opened (and locked) for appending.
        records: every readable record of ``turns.jsonl``, in order.
        hints: turn -> the user's hint after it.
        baseline: ``baseline.json`` as JSON (the kind parses it), or None when absent or
            unreadable.
        output_sha256: the digest of the result this run wrote (``summary.json``), or None.
    """

    store: RunStore
    records: list[TurnRecord]
    hints: dict[int, str]
    baseline: Any
    output_sha256: str | None


def read_records(path: Path) -> tuple[list[TurnRecord], int]:
    """The readable records of a ``turns.jsonl`` and how many lines were skipped."""
    out, skipped = [], 0
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            out.append(TurnRecord.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError):
            skipped += 1  # e.g. the last line cut by a crash
    return out, skipped


def load_resume(opts: OptimizeOptions, given: frozenset[str]) -> tuple[OptimizeOptions, ResumeState]:
    """Read the run folder ``opts.resume``: its options (``run.json``), turns, hints and
    baseline; options in ``given`` (named on this command line) override the run's when
    they are in :data:`~cudaperf_cli.agent.options.RESUME_OVERRIDES`.

    Raises:
        CudaperfError: not a run folder, an option that cannot change on resume, or the
            problem file changed since the run (exit code 2).
    """
    run_dir = Path(opts.resume or ".")
    meta_path = run_dir / "run.json"
    if not run_dir.exists():
        raise CudaperfError(f"{run_dir}: no such folder",
                            hint="pass a folder under cudaperf-runs/ made by cudaperf optimize")
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
        flags = ", ".join(flag_of(name) for name in changed)
        raise CudaperfError(
            f"cannot change {flags} when resuming; the run keeps its own options",
            hint="start a new run for other options; on resume you may change: "
            + ", ".join(sorted(flag_of(n) for n in RESUME_OVERRIDES)),
        )
    overrides = {name: getattr(opts, name) for name in given & RESUME_OVERRIDES}
    # How to present this invocation is always its own, never the stored run's.
    overrides.update(interactive=opts.interactive, json_output=opts.json_output, force=opts.force)
    merged = dataclasses.replace(stored, resume=run_dir, **overrides)
    if not merged.file.is_file():
        raise CudaperfError(f"the run's problem file {merged.file} no longer exists")
    if meta.get("file_sha256") and file_sha256(merged.file) != meta["file_sha256"]:
        raise CudaperfError(
            f"{merged.file} changed since the run started; its turns no longer apply",
            hint="start a new run (cudaperf optimize FILE)",
        )
    store = RunStore.open(run_dir)
    turns_path = run_dir / "turns.jsonl"
    records, skipped = read_records(turns_path)
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
            baseline = json.loads((run_dir / "baseline.json").read_text())
        except (OSError, ValueError):
            baseline = None
    summary_sha = None
    try:
        summary_sha = json.loads((run_dir / "summary.json").read_text()).get("output_sha256")
    except (OSError, ValueError, AttributeError):
        pass
    return merged, ResumeState(store, records, hints, baseline, summary_sha)


def restore_run(resumed: ResumeState, policy: Any, samples: int) -> tuple[RunStore, list[TurnRecord]]:
    """The run folder and records of a resumed run (``--resume``); the policy gets back the
    user's hints and, where it keeps a place (the built-in policy's plan), its place."""
    if hasattr(policy, "hints"):
        policy.hints.update(resumed.hints)
    if hasattr(policy, "resume"):
        policy.resume(resumed.records, samples)
    return resumed.store, resumed.records


__all__ = ["ResumeState", "load_resume", "read_records", "restore_run"]
