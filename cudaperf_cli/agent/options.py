"""What ``cudaperf optimize`` was asked, and the exit codes it answers with.

Shared by the optimize driver (agent/optimize.py) and the problem kinds (agent/kinds/):
both import this module, neither imports the other's internals.  ``run.json`` of a run
folder holds :func:`options_to_json` of the options; ``--resume`` reads them back with
:func:`options_from_json`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaperf_cli.core import to_jsonable

#: Exit codes (docs/exit-codes.md).
EXIT_OK = 0
EXIT_NO_CORRECT = 1
EXIT_NO_DEVICE = 4
#: The problem's planned memory exceeds the device's free memory (or the host's): nothing ran.
EXIT_DOES_NOT_FIT = 5
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class OptimizeOptions:
    """Everything ``cudaperf optimize`` was asked (see ``cudaperf optimize --help``)."""

    file: Path
    #: C problems: more C sources linked into the reference (``utilities/polybench.c``).
    sources: tuple[Path, ...] = ()
    cpp_args: tuple[str, ...] = ()
    function: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    init: str | None = None
    turns: int = 3
    policy: str = "builtin"
    arch: str | None = None
    output: Path | None = None
    force: bool = False
    run_root: Path = Path("cudaperf-runs")
    eval_timeout_s: float = 300.0
    compile_timeout_s: float = 120.0
    seed: int = 0
    #: Comparison tolerances for every floating dtype; None: the per-dtype defaults
    #: (float32 1e-4/1e-4, KernelBench's; float64 atol 1e-9, rtol 1e-7).
    atol: float | None = None
    rtol: float | None = None
    #: A verified candidate this many times slower than the run's best correct candidate
    #: or the baseline stops timing early (status ``slow``); 0: never.
    slow_factor: float = 10.0
    json_output: bool = False
    target_speedup: float | None = None
    patience: int | None = None
    # model policies (openai, replay); the key is read from the variable, never stored
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    sampling_seed: int | None = None
    request_timeout_s: float = 600.0
    max_retries: int = 2
    replay: Path | None = None
    samples: int = 1
    context_tokens: int = 16384
    # interaction: ask after each turn (a terminal, not --yes, not --json)
    interactive: bool = False
    resume: Path | None = None
    # PyTorch problems: also time torch.compile(Model) (once per run, in the baseline)
    compile_baseline: bool = True
    # pre-ranking of the samples of a turn (docs/ranker.md): a checkpoint folder, and how
    # many of the best-ranked samples to evaluate (None: all of them, best-ranked first)
    ranker: Path | None = None
    ranker_top: int | None = None
    # C problems: a verified candidate about to become the run's best is run once more under
    # compute-sanitizer memcheck and initcheck (evaluate/sanitize.py); --no-sanitize: not
    sanitize: bool = True


POLICIES = ("builtin", "openai", "vllm", "transformers", "replay")

#: Options a resumed run (``--resume``) may change; every other one is the run's own.
RESUME_OVERRIDES = frozenset({
    "turns", "target_speedup", "patience", "output", "force", "json_output", "interactive",
    "eval_timeout_s", "compile_timeout_s", "request_timeout_s", "max_retries", "base_url",
    "compile_baseline", "ranker", "ranker_top", "sanitize",
})

#: OptimizeOptions field -> its command-line flag, where the names differ.
FLAG_OF_FIELD = {
    "eval_timeout_s": "--timeout", "compile_timeout_s": "--compile-timeout", "json_output": "--json",
    "request_timeout_s": "--request-timeout", "interactive": "--yes", "sizes": "--size",
    "cpp_args": "-I/-D", "run_root": "--run-dir", "sources": "extra source files",
}


def flag_of(name: str) -> str:
    """The command-line flag of OptimizeOptions field ``name`` (``eval_timeout_s`` -> ``--timeout``)."""
    return FLAG_OF_FIELD.get(name, "--" + name.replace("_", "-"))


def options_to_json(opts: OptimizeOptions) -> dict[str, Any]:
    """``opts`` as JSON for ``run.json`` (paths absolute; no API key: only its variable's name)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(opts):
        value = getattr(opts, f.name)
        if isinstance(value, Path):
            value = str(value.resolve())
        elif f.name == "sources":
            value = [str(Path(v).resolve()) for v in value]
        out[f.name] = to_jsonable(value)
    return out


def options_from_json(data: dict[str, Any]) -> OptimizeOptions:
    """The inverse of :func:`options_to_json` (unknown keys ignored).

    Raises:
        TypeError: a value of the wrong type (a hand-edited ``run.json``).
    """
    kinds = {f.name: f for f in dataclasses.fields(OptimizeOptions)}
    kw: dict[str, Any] = {}
    for name, value in data.items():
        if name not in kinds:
            continue
        if name in ("file", "output", "run_root", "replay", "resume", "ranker") and value is not None:
            value = Path(value)
        elif name == "cpp_args":
            value = tuple(value)
        elif name == "sources":
            value = tuple(Path(v) for v in value)
        kw[name] = value
    opts = OptimizeOptions(**kw)
    defaults = OptimizeOptions(file=Path("."))
    for f in dataclasses.fields(OptimizeOptions):  # a hand-edited run.json: types checked
        value, default = getattr(opts, f.name), getattr(defaults, f.name)
        if value is None or default is None:
            continue
        ok = (isinstance(value, type(default)) and not (isinstance(value, bool) != isinstance(default, bool))
              or (isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool)))
        if not ok:
            raise TypeError(f"option {f.name} is {value!r}, expected a {type(default).__name__}")
    return opts


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def version() -> str:
    """cudaperf's version string."""
    from cudaperf_cli import __version__

    return __version__


__all__ = [
    "EXIT_DOES_NOT_FIT", "EXIT_INTERRUPTED", "EXIT_NO_CORRECT", "EXIT_NO_DEVICE", "EXIT_OK",
    "FLAG_OF_FIELD", "OptimizeOptions", "POLICIES", "RESUME_OVERRIDES", "file_sha256", "flag_of",
    "options_from_json", "options_to_json", "version",
]
