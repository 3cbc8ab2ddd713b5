"""The training problems: C functions (``*.c``) and KernelBench-format PyTorch modules
(``*.py``), loaded exactly as ``cudaperf optimize`` loads them, with their first prompt.

``load_problems([DIR_OR_FILE, ...], arch)`` reads the files of each folder (not its
subfolders, in name order) and each file given; a ``.py`` file that defines no ``class
Model`` at module level (a helper, a candidate) is skipped without a word, a file that does
not load is skipped with its reason (:attr:`LoadedProblems.skipped`).

The first prompt of a problem is ``ModelPolicy.conversation(problem, [])``: the system
message (``prompts/system.j2`` or ``torch_system.j2``) and the task
(``prompts/c_to_cuda.j2`` or ``torch_to_cuda.j2``), exactly what ``cudaperf optimize
--policy openai`` sends at turn 1.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from cudaperf_cli.core import CudaperfError

_MODEL_CLASS = re.compile(r"^class\s+Model\b", re.M)


@dataclass
class ProblemSpec:
    """One training problem.

    Attributes:
        path: the file (absolute).
        kind: ``"c"`` or ``"torch"``.
        name: ``<stem>`` for a C file's function (``matmul:kernel_gemm``), the stem for a
            PyTorch file; unique within a run (a suffix is added on a clash).
        problem: the loaded :class:`~cudaperf_cli.core.CProblem` or
            :class:`~cudaperf_cli.problems.pytorch.TorchProblem`.
        sha256: hex digest of the file's bytes (checkpoint metadata).
        messages: the first prompt, ``[{"role": "system", ...}, {"role": "user", ...}]``.
    """

    path: Path
    kind: str
    name: str
    problem: Any
    sha256: str
    messages: list[dict[str, str]] = field(default_factory=list)

    @property
    def key(self) -> str:
        """What identifies the problem in a prompt: its first user message."""
        return self.messages[-1]["content"]

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "kind": self.kind, "name": self.name, "sha256": self.sha256}


@dataclass
class LoadedProblems:
    """The problems loaded, and ``(file, reason)`` for each file skipped."""

    problems: list[ProblemSpec]
    skipped: list[tuple[str, str]]


def candidate_files(paths: Sequence[Path]) -> list[Path]:
    """The ``*.c`` and ``*.py`` files of ``paths`` (folders: their own files, sorted by name).

    Raises:
        CudaperfError: a path that does not exist, or a file that is neither ``.c`` nor ``.py``.
    """
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(f for f in p.iterdir() if f.is_file() and f.suffix in (".c", ".py")))
        elif p.is_file():
            if p.suffix not in (".c", ".py"):
                raise CudaperfError(f"--problems {p}: not a .c or .py file")
            out.append(p)
        else:
            raise CudaperfError(f"--problems {p}: no such file or folder")
    seen: set[Path] = set()
    unique = []
    for f in out:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(f)
    return unique


def first_messages(problem: Any, arch: str, context_tokens: int = 16384) -> list[dict[str, str]]:
    """The first request of ``cudaperf optimize`` for ``problem`` (system + task)."""
    from cudaperf_cli.policies.model_policy import ModelPolicy

    policy = ModelPolicy(None, "train", arch=arch, context_tokens=context_tokens)  # type: ignore[arg-type]
    messages, _ = policy.conversation(problem, [])
    return messages


def load_problems(paths: Sequence[Path], arch: str = "sm_90", *, torch_timeout_s: float = 120.0,
                  context_tokens: int = 16384) -> LoadedProblems:
    """Load every problem of ``paths`` (see the module docstring).

    Raises:
        CudaperfError: a path that does not exist or is of another kind.
    """
    from cudaperf_cli.agent.checks import check_memory

    specs: list[ProblemSpec] = []
    skipped: list[tuple[str, str]] = []
    names: set[str] = set()
    for f in candidate_files(paths):
        try:
            data = f.read_bytes()
            if f.suffix == ".py":
                if not _MODEL_CLASS.search(data.decode(errors="replace")):
                    continue
                from cudaperf_cli.problems.pytorch import load_torch_problem

                problem = load_torch_problem(f, timeout_s=torch_timeout_s)
                kind, name = "torch", f.stem
            else:
                from cudaperf_cli.problems.c import load_c_problem

                problem = load_c_problem(f)
                check_memory(problem)
                kind, name = "c", f"{f.stem}:{problem.function}"
        except CudaperfError as err:
            skipped.append((str(f), str(err)))
            continue
        except OSError as exc:
            skipped.append((str(f), exc.strerror or str(exc)))
            continue
        unique, i = name, 2
        while unique in names:
            unique, i = f"{name}#{i}", i + 1
        spec = ProblemSpec(
            path=f.resolve(), kind=kind, name=unique, problem=problem,
            sha256=hashlib.sha256(data).hexdigest(),
            messages=first_messages(problem, arch, context_tokens),
        )
        twin = next((s for s in specs if s.key == spec.key), None)
        if twin is not None:  # the rollout tells problems apart by their prompt
            skipped.append((str(f), f"the same prompt as {twin.path.name} (a copy?)"))
            continue
        names.add(unique)
        specs.append(spec)
    return LoadedProblems(specs, skipped)


__all__ = ["LoadedProblems", "ProblemSpec", "candidate_files", "first_messages", "load_problems"]
