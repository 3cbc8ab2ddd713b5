"""Run folders: everything one ``optimize`` run did, for the user to inspect later.

Layout of ``<run-root>/<stem>-<function>-<YYYYmmdd-HHMMSS>/`` (``<stem>-torch-...`` for a
PyTorch problem)::

    run.json          the options of the run (no API key), the problem file's SHA-256
                      (--resume) and the problem's kind ("c" or "torch")
    problem.json      the loaded problem (C: parameters, extents, sizes, configs, init;
                      PyTorch: inputs, outputs, constants, alt shapes, footprint) and the
                      memory plan of one evaluation
    baseline.json     the baseline measured once per run (C: the CPU reference's median and
                      IQR per timed configuration, array roles, the reference-outputs
                      folder; PyTorch: eager and torch.compile medians, footprint, peak
                      memory, degenerate); read back by --resume
    hints.jsonl       hints the user gave after a turn (interactive runs)
    reference/        C: the reference wrapper source and shared library; outputs/: the
                      reference's outputs written by the baseline job, read by every
                      candidate job of the run
    candidates/       every candidate as files: C turnT-sampleK.cu; PyTorch one folder per
                      candidate (turnT-sampleK/: model.py, kernel.cu)
    turns.jsonl       one JSON object per candidate (every sample of every turn): source,
                      model reply, build log, ptxas report, evaluation results, feedback
                      (see TurnRecord in agent/loop.py)
    summary.json      the same document ``--json`` prints

A new run never reuses a folder: a name clash gets a numeric suffix.  ``--resume`` opens an
existing one (:meth:`RunStore.open`) and appends to it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from cudaperf_cli.core import CudaperfError, to_jsonable


def candidate_stem(record: Any) -> str:
    """A candidate's name under ``candidates/``: ``turnT-sampleK`` (1-based), the C file
    ``turnT-sampleK.cu`` or the PyTorch folder ``turnT-sampleK/``."""
    return f"turn{int(record.turn) + 1}-sample{int(record.sample) + 1}"


class RunStore:
    """Writes one run folder.  All writes are append-only or new files."""

    #: The folder this process is writing (for the Ctrl-C message), or None.
    active: Path | None = None

    def __init__(self, root: Path, name: str):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = root / f"{name}-{stamp}"
        path, k = base, 1
        while True:  # mkdir is the test: two runs started in the same second get -2, -3...
            try:
                path.mkdir(parents=True)
                break
            except FileExistsError:
                k += 1
                path = base.with_name(f"{base.name}-{k}")
            except OSError as exc:
                raise CudaperfError(
                    f"cannot create the run folder {path}: {exc.strerror or exc}",
                    hint="choose another place with --run-dir DIR",
                ) from None
        self.path = path
        self.lock()

    @classmethod
    def open(cls, path: Path) -> "RunStore":
        """An existing run folder (``--resume``); appends go to its files."""
        store = cls.__new__(cls)
        store.path = Path(path)
        store.lock()
        return store

    def write_json(self, name: str, obj: Any) -> Path:
        out = self.path / name
        out.write_text(json.dumps(to_jsonable(obj), indent=2, default=str) + "\n")
        return out

    def append_jsonl(self, name: str, obj: Any) -> None:
        """Append one JSON line; a last line cut by a crash (no newline) is closed first so
        the new record stays readable."""
        path = self.path / name
        line = json.dumps(to_jsonable(obj), default=str) + "\n"
        with path.open("ab+") as fh:
            fh.seek(0, 2)
            if fh.tell() > 0:
                fh.seek(-1, 2)
                if fh.read(1) != b"\n":
                    line = "\n" + line
            fh.write(line.encode())

    def lock(self) -> None:
        """Hold ``.lock`` in the folder for this process's life, so two cudaperf processes
        never write one run (e.g. two ``--resume`` at once).

        Raises:
            CudaperfError: another process holds it (exit code 2).
        """
        import fcntl

        fh = (self.path / ".lock").open("a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise CudaperfError(
                f"{self.path} is in use by another cudaperf process",
                hint="wait for it to finish (or stop it), then resume",
            ) from None
        self._lock_file = fh  # released when the process exits
        RunStore.active = self.path

    def write_candidate(self, record: Any) -> Path | None:
        """Write a finished candidate's source as ``candidates/turnT-sampleK.cu`` (a C
        candidate: without a GPU it was otherwise only a JSON string in ``turns.jsonl``);
        a PyTorch candidate's folder ``candidates/turnT-sampleK/`` is its kind's, left as
        it is.  Returns the file or folder, or None for a record without source."""
        source = getattr(record, "source", None)
        if not source:
            return None
        folder = self.path / "candidates"
        stem = candidate_stem(record)
        if (folder / stem).is_dir():
            return folder / stem
        folder.mkdir(exist_ok=True)
        out = folder / f"{stem}.cu"
        out.write_text(source)
        return out

    def subdir(self, name: str) -> Path:
        d = self.path / name
        d.mkdir(exist_ok=True)
        return d
