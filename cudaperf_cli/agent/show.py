"""``cudaperf show RUN_DIR``: a finished (or stopped) run folder, read back.

What ``optimize`` printed at the end, from the files it left: the per-turn table
(``turns.jsonl``), the best candidate and its source file (``candidates/``), where the
result went and why the run ended (``summary.json``).  ``--json``: one document with the
same facts.  Nothing is run or rewritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.loop import TurnRecord, best_index
from cudaperf_cli.agent.resume import read_records
from cudaperf_cli.agent.store import candidate_stem
from cudaperf_cli.core import CudaperfError


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def candidate_file(run_dir: Path, r: TurnRecord) -> Path | None:
    """The file (C) or folder (PyTorch) of record ``r`` under ``candidates/``, if written."""
    stem = candidate_stem(r)
    for p in (run_dir / "candidates" / f"{stem}.cu", run_dir / "candidates" / stem):
        if p.exists():
            return p
    return None


def run_facts(run_dir: Path) -> dict[str, Any]:
    """The run folder's facts as a JSON-ready dict: ``run_dir``, ``kind``, ``turns`` (one
    entry per candidate, the table's columns: ``turn``/``sample`` 1-based, ``description``,
    ``status``, ``message``, ``max_rel_err``, ``gpu_ms`` (ms), ``speedup_kernel``,
    ``speedup_e2e``, ``speedup_compile`` (PyTorch: vs torch.compile), ``structure_score``
    (0-1), ``registers``, ``spill_bytes``, ``compile_s``, ``compile_cached``, ``eval_s``
    (seconds), ``file``), ``best`` (that entry, or None),
    ``summary`` (``summary.json``, None for a run that never finished) and
    ``skipped_lines`` (unreadable lines of ``turns.jsonl``).

    Raises:
        CudaperfError: not a run folder, or its run.json or summary.json unreadable (exit
            code 2).
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise CudaperfError(f"{run_dir}: no such folder",
                            hint="run folders are under cudaperf-runs/ (optimize --run-dir)")
    if not run_dir.is_dir() or not (run_dir / "run.json").is_file():
        raise CudaperfError(f"{run_dir} is not a cudaperf run folder (no run.json in it)",
                            hint="run folders are under cudaperf-runs/ (optimize --run-dir)")
    run = _read_json(run_dir / "run.json")
    if run is None:
        raise CudaperfError(f"{run_dir / 'run.json'} is unreadable (not a JSON object): the run folder is "
                            "damaged and cannot be resumed")
    summary_path = run_dir / "summary.json"
    summary = _read_json(summary_path)
    if summary is None and summary_path.exists():
        raise CudaperfError(f"{summary_path} is unreadable (not a JSON object): the run's end was not "
                            "recorded whole", hint=f"its turns are in {run_dir / 'turns.jsonl'}")
    records, skipped = read_records(run_dir / "turns.jsonl")
    turns = []
    for r in records:
        f = candidate_file(run_dir, r)
        turns.append({"turn": r.turn + 1, "sample": r.sample + 1, "description": r.description,
                      "status": r.status, "message": r.message, "max_rel_err": r.max_rel_err,
                      "gpu_ms": r.gpu_ms, "speedup_kernel": r.speedup_kernel, "speedup_e2e": r.speedup_e2e,
                      "speedup_compile": r.speedup_compile, "structure_score": r.structure_score,
                      "registers": r.registers, "spill_bytes": r.spill_bytes, "compile_s": r.compile_s,
                      "compile_cached": r.compile_cached, "eval_s": r.eval_s,
                      "file": str(f) if f is not None else None})
    best = best_index(records)
    return {"run_dir": str(run_dir), "kind": run.get("kind") or "c", "turns": turns,
            "best": turns[best] if best is not None else None,
            "summary": summary, "skipped_lines": skipped,
            "records": records}


def show_run(run_dir: Path, json_out: bool = False) -> int:
    """Print the run folder (a Rich table, or ``--json``); returns 0.

    Raises:
        CudaperfError: not a run folder (exit code 2).
    """
    facts = run_facts(run_dir)
    records = facts.pop("records")
    if json_out:
        print(json.dumps(facts, indent=2, default=str))
        return 0
    from cudaperf_cli.agent.render import stdout_console, turns_table

    console = stdout_console()
    kind = "torch" if facts["kind"] == "torch" else "c"
    console.print(turns_table(records, title=f"cudaperf run {facts['run_dir']}", width=console.width, kind=kind))
    best = facts["best"]
    if best is None:
        console.print("best: none verified", markup=False)
    else:
        speed = f", {best['speedup_kernel']:.3g}x" if best["speedup_kernel"] else ""
        console.print(f"best: turn {best['turn']}.{best['sample']} ({best['status']}{speed})"
                      + (f": {best['file']}" if best["file"] else ""), markup=False)
    summary = facts["summary"]
    if summary is None:
        console.print("no summary.json: the run never finished (resume it with cudaperf optimize "
                      f"--resume {facts['run_dir']})", markup=False)
    else:
        if summary.get("output"):
            console.print(f"written: {summary['output']}", markup=False)
        if summary.get("stop_reason"):
            console.print(f"ended: {summary['stop_reason']} (exit {summary.get('exit_code')})", markup=False)
    if facts["skipped_lines"]:
        console.print(f"{facts['skipped_lines']} unreadable line(s) in turns.jsonl skipped", markup=False)
    return 0
