"""Benchmark suites: which problem files, and each C problem's flags and sizes.

A suite is one of (docs/bench.md):

- a **folder**: every ``*.c`` file and every KernelBench-format ``*.py`` file (one that
  defines ``class Model``) directly in it; other ``.py`` files (scripts, helpers) are listed
  as skipped.  A ``bench.toml`` in the folder may name the files (``[suite] files``) and
  give per-problem settings; a ``<stem>.bench.toml`` beside a file gives that file's.
- a **manifest** ``*.toml``: ``[suite] files`` (paths or globs, relative to the suite's
  root or absolute; default: the keys of ``[problems]``) and ``[problems."<file>"]``
  settings.  The root is the manifest's folder, or ``[suite] root`` (a folder, relative to
  the manifest or absolute): problem ids, ``files``, ``includes`` and ``sources`` are
  relative to it, so a manifest may live outside the suite it describes.
- a single ``.c`` or ``.py`` file: a suite of one.

Per-problem settings (all optional)::

    function = "kernel_gemm"                  # --function
    sizes    = { ni = 2000, nj = 2000 }       # --size NAME=VALUE
    defines  = ["LARGE_DATASET", "T=double"]  # -D (or a table: { LARGE_DATASET = true, T = "double" })
    includes = ["include"]                    # -I, relative to the suite's root
    sources  = ["utilities/polybench.c"]      # C files linked into the reference (optimize FILE SRC...)
    init     = "init_array"                   # --init
    timeout  = 1200                           # seconds: this problem's whole optimize run
    skip     = "needs 40 GB"                  # true or a reason: listed, not run

Every error is a :class:`~cudaperf_cli.core.ProblemError` (exit code 2) naming the file.
"""

from __future__ import annotations

import glob
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cudaperf_cli.core import ProblemError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: File suffix -> problem kind.
KINDS = {".c": "c", ".py": "torch"}
MANIFEST_NAME = "bench.toml"
PER_FILE_SUFFIX = ".bench.toml"
PROBLEM_KEYS = ("function", "sizes", "defines", "includes", "sources", "init", "timeout", "skip")
SUITE_KEYS = ("name", "files", "root")
DOC_HINT = "see docs/bench.md (suite manifests)"
_MODEL_CLASS = re.compile(r"^class\s+Model\b", re.MULTILINE)


@dataclass(frozen=True)
class BenchProblem:
    """One problem of a suite.

    Attributes:
        id: the file's path relative to the suite root, ``/``-separated (``matmul.c``).
        path: the file, absolute.
        kind: ``c`` or ``torch`` (KernelBench format).
        function, sizes, defines, includes, init: ``optimize``'s ``--function``,
            ``--size``, ``-D``, ``-I`` (absolute paths), ``--init``.
        sources: more C files linked into the CPU reference (absolute paths), given to
            ``optimize`` as positional files after the problem file (C problems only).
        timeout_s: this problem's time limit (whole optimize run), seconds; None: the
            suite's.
        settings_from: the manifest its settings came from, or None.
    """

    id: str
    path: Path
    kind: str
    function: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    defines: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    init: str | None = None
    timeout_s: float | None = None
    settings_from: str | None = None

    @property
    def safe_name(self) -> str:
        """The id as one file name: characters other than letters, digits, ``.``, ``_``,
        ``-`` become ``_`` (``sub/a.c`` -> ``sub_a.c``)."""
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.id).lstrip(".") or "problem"

    def optimize_args(self) -> list[str]:
        """This problem's own ``optimize`` arguments: its extra C sources first (positional
        files, so they must follow the problem file: ``optimize FILE SRC... FLAGS``), then
        the flags (function, sizes, defines, includes, init)."""
        args: list[str] = list(self.sources)
        if self.function:
            args += ["--function", self.function]
        for name, value in self.sizes.items():
            args += ["--size", f"{name}={value}"]
        for d in self.defines:
            args += ["-D", d]
        for inc in self.includes:
            args += ["-I", inc]
        if self.init:
            args += ["--init", self.init]
        return args


@dataclass(frozen=True)
class Suite:
    """A suite: its name, root folder, the problems (in natural order) and the files that
    were looked at and left out (``{"file", "reason"}``: ``.py`` files without ``class
    Model``, problems with ``skip`` set)."""

    name: str
    root: Path
    source: Path
    problems: list[BenchProblem]
    skipped: list[dict[str, str]] = field(default_factory=list)


def natural_key(text: str) -> list[Any]:
    """Sort key putting ``2_relu.py`` before ``10_gelu.py``."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", text)]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ProblemError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProblemError(f"{path}: not valid TOML: {exc}", hint=DOC_HINT) from None


def _settings(table: Any, where: str, base: Path) -> dict[str, Any]:
    """Validated per-problem settings from a manifest table (``where`` names it)."""
    if not isinstance(table, Mapping):
        raise ProblemError(f"{where}: expected a table of settings", hint=DOC_HINT)
    unknown = sorted(set(table) - set(PROBLEM_KEYS))
    if unknown:
        raise ProblemError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(PROBLEM_KEYS)}",
            hint=DOC_HINT,
        )
    out: dict[str, Any] = {}
    for key in ("function", "init"):
        if key in table:
            if not isinstance(table[key], str) or not table[key].strip():
                raise ProblemError(f"{where}: '{key}' must be a non-empty string", hint=DOC_HINT)
            out[key] = table[key].strip()
    if "sizes" in table:
        sizes = table["sizes"]
        if not isinstance(sizes, Mapping) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in sizes.values()
        ):
            raise ProblemError(f"{where}: 'sizes' must be a table of integers, e.g. "
                               "sizes = { n = 1024 }", hint=DOC_HINT)
        out["sizes"] = {str(k): int(v) for k, v in sizes.items()}
    if "defines" in table:
        d = table["defines"]
        if isinstance(d, Mapping):
            items = []
            for k, v in d.items():
                if v is True:
                    items.append(str(k))
                elif isinstance(v, (int, float, str)) and not isinstance(v, bool):
                    items.append(f"{k}={v}")
                else:
                    raise ProblemError(f"{where}: defines.{k} must be true, a number or a string",
                                       hint=DOC_HINT)
            out["defines"] = tuple(items)
        elif isinstance(d, list) and all(isinstance(x, str) and x.strip() for x in d):
            out["defines"] = tuple(x.strip() for x in d)
        else:
            raise ProblemError(f"{where}: 'defines' must be a list of NAME[=VALUE] strings or "
                               "a table", hint=DOC_HINT)
    if "includes" in table:
        inc = table["includes"]
        if not isinstance(inc, list) or not all(isinstance(x, str) and x.strip() for x in inc):
            raise ProblemError(f"{where}: 'includes' must be a list of folders", hint=DOC_HINT)
        out["includes"] = tuple(str((base / x).resolve()) for x in inc)
    if "sources" in table:
        src = table["sources"]
        if not isinstance(src, list) or not all(isinstance(x, str) and x.strip() for x in src):
            raise ProblemError(f"{where}: 'sources' must be a list of C files, e.g. "
                               'sources = ["utilities/polybench.c"]', hint=DOC_HINT)
        files: list[str] = []
        for x in src:
            f = (base / x.strip()).resolve()
            if not f.is_file():
                raise ProblemError(f"{where}: source '{x}' is not a file ({f})", hint=DOC_HINT)
            if str(f) not in files:
                files.append(str(f))
        out["sources"] = tuple(files)
    if "timeout" in table:
        t = table["timeout"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
            raise ProblemError(f"{where}: 'timeout' must be a positive number of seconds",
                               hint=DOC_HINT)
        out["timeout_s"] = float(t)
    if "skip" in table:
        s = table["skip"]
        if s is True:
            out["skip"] = "skip = true in the manifest"
        elif isinstance(s, str) and s.strip():
            out["skip"] = s.strip()
        elif s is not False:
            raise ProblemError(f"{where}: 'skip' must be true, false or a reason", hint=DOC_HINT)
    return out


def _suite_table(doc: Mapping[str, Any], path: Path) -> dict[str, Any]:
    unknown_top = sorted(set(doc) - {"suite", "problems"})
    if unknown_top:
        raise ProblemError(
            f"{path}: unknown table(s) {', '.join(unknown_top)}; a manifest has [suite] and "
            "[problems.\"<file>\"]", hint=DOC_HINT)
    suite = doc.get("suite", {})
    if not isinstance(suite, Mapping):
        raise ProblemError(f"{path}: [suite] must be a table", hint=DOC_HINT)
    unknown = sorted(set(suite) - set(SUITE_KEYS))
    if unknown:
        raise ProblemError(f"{path}: [suite] has unknown key(s) {', '.join(unknown)}; known: "
                           f"{', '.join(SUITE_KEYS)}", hint=DOC_HINT)
    if "name" in suite and (not isinstance(suite["name"], str) or not suite["name"].strip()):
        raise ProblemError(f"{path}: [suite] name must be a non-empty string", hint=DOC_HINT)
    if "root" in suite and (not isinstance(suite["root"], str) or not suite["root"].strip()):
        raise ProblemError(f"{path}: [suite] root must be a folder (a non-empty string)",
                           hint=DOC_HINT)
    files = suite.get("files")
    if files is not None and (
        not isinstance(files, list) or not all(isinstance(f, str) and f.strip() for f in files)
    ):
        raise ProblemError(f"{path}: [suite] files must be a list of paths or globs",
                           hint=DOC_HINT)
    problems = doc.get("problems", {})
    if not isinstance(problems, Mapping):
        raise ProblemError(f"{path}: [problems] must hold one table per file, e.g. "
                           "[problems.\"matmul.c\"]", hint=DOC_HINT)
    return {"name": suite.get("name"), "files": files, "problems": dict(problems),
            "root": suite.get("root")}


def _expand(patterns: list[str], base: Path, manifest: Path) -> list[Path]:
    """Files named by ``patterns`` (paths or globs relative to ``base``), in order, once."""
    out: list[Path] = []
    for pat in patterns:
        if any(ch in pat for ch in "*?["):
            hits = sorted((Path(p) for p in glob.glob(str(base / pat), recursive=True)),
                          key=lambda p: natural_key(str(p)))
            hits = [h for h in hits if h.is_file() and h.suffix in KINDS]
            if not hits:
                raise ProblemError(f"{manifest}: '{pat}' matches no .c or .py file", hint=DOC_HINT)
        else:
            p = base / pat
            if not p.is_file():
                raise ProblemError(f"{manifest}: listed file '{pat}' does not exist", hint=DOC_HINT)
            if p.suffix not in KINDS:
                raise ProblemError(f"{manifest}: '{pat}' is neither a .c nor a .py problem",
                                   hint=DOC_HINT)
            hits = [p]
        for h in hits:
            if h.resolve() not in {o.resolve() for o in out}:
                out.append(h)
    return out


def _discover(folder: Path) -> tuple[list[Path], list[dict[str, str]]]:
    """Problem files directly in ``folder`` and the ``.py`` files left out."""
    files, skipped = [], []
    for p in sorted(folder.iterdir(), key=lambda q: natural_key(q.name)):
        if not p.is_file() or p.name.startswith((".", "_")) or p.suffix not in KINDS:
            continue
        if p.suffix == ".py":
            try:
                text = p.read_text(errors="replace")
            except OSError as exc:
                skipped.append({"file": p.name, "reason": f"unreadable: {exc.strerror or exc}"})
                continue
            if not _MODEL_CLASS.search(text):
                skipped.append({"file": p.name, "reason": "no 'class Model' (not a KernelBench-format file)"})
                continue
        files.append(p)
    return files, skipped


def _problem_id(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # a manifest may list files outside its folder
        return path.name


def load_suite(source: Path) -> Suite:
    """The suite at ``source`` (a folder, a ``.toml`` manifest or one problem file).

    Raises:
        ProblemError: no such path, a malformed manifest, a listed file missing, settings
            for a file that is not in the suite, two problems with one id, or no problem.
    """
    if not source.exists():
        raise ProblemError(f"{source}: no such file or folder")
    manifest: Path | None = None
    if source.is_dir():
        root = source
        if (source / MANIFEST_NAME).is_file():
            manifest = source / MANIFEST_NAME
    elif source.suffix == ".toml":
        root, manifest = source.parent, source
    elif source.suffix in KINDS:
        root = source.parent
    else:
        raise ProblemError(f"{source}: a suite is a folder, a .toml manifest, or a .c/.py file",
                           hint=DOC_HINT)

    table: dict[str, Any] = {"name": None, "files": None, "problems": {}, "root": None}
    if manifest is not None:
        table = _suite_table(_read_toml(manifest), manifest)
        if table["root"] is not None:  # the folder the manifest's relative paths start from
            root = (manifest.parent / Path(table["root"].strip()).expanduser()).resolve()
            if not root.is_dir():
                raise ProblemError(f"{manifest}: [suite] root '{table['root']}' is not a "
                                   f"folder ({root})", hint=DOC_HINT)
    skipped: list[dict[str, str]] = []
    if source.is_file() and source.suffix in KINDS:
        files = [source]
    elif table["files"] is not None:
        files = _expand(table["files"], root, manifest or source)
    elif source.is_dir():
        files, skipped = _discover(source)
    else:  # a manifest without [suite] files: the files it has settings for
        files = _expand(list(table["problems"]), root, manifest or source)

    by_id: dict[str, Path] = {}
    for f in files:
        pid = _problem_id(f, root)
        if pid in by_id:
            raise ProblemError(f"two problems share the id '{pid}': {by_id[pid]} and {f}",
                               hint="list them from one folder, or give them distinct names")
        by_id[pid] = f
    unknown = [k for k in table["problems"] if k not in by_id]
    if unknown:
        raise ProblemError(
            f"{manifest}: settings for {', '.join(repr(k) for k in unknown)}, which is not a "
            f"problem of the suite (problems: {', '.join(list(by_id)[:8]) or 'none'})",
            hint=DOC_HINT,
        )

    problems: list[BenchProblem] = []
    safe_names: dict[str, str] = {}
    for pid, f in by_id.items():
        settings: dict[str, Any] = {}
        origin = None
        if pid in table["problems"]:
            settings = _settings(table["problems"][pid], f"{manifest} [problems.\"{pid}\"]",
                                 root if manifest is not None else f.parent)
            origin = str(manifest)
        per_file = f.with_name(f.stem + PER_FILE_SUFFIX)
        if per_file.is_file():
            if origin is not None:
                raise ProblemError(f"{pid} has settings in both {manifest} and {per_file}",
                                   hint="keep one of them")
            twins = [g for g in by_id.values() if g != f and g.parent == f.parent and g.stem == f.stem]
            if twins:
                raise ProblemError(f"{per_file} is ambiguous: both {f.name} and {twins[0].name} exist",
                                   hint="move one of them, or use bench.toml")
            doc = _read_toml(per_file)
            settings = _settings(doc, str(per_file), per_file.parent)
            origin = str(per_file)
        if settings.get("sources") and KINDS[f.suffix] != "c":
            raise ProblemError(f"{origin}: 'sources' is for C problems only, not for {pid}",
                               hint=DOC_HINT)
        skip = settings.pop("skip", None)
        if skip is not None:
            skipped.append({"file": pid, "reason": skip})
            continue
        problem = BenchProblem(
            id=pid, path=f.resolve(), kind=KINDS[f.suffix], settings_from=origin, **settings
        )
        if problem.safe_name in safe_names:
            raise ProblemError(f"problems '{safe_names[problem.safe_name]}' and '{pid}' would "
                               "share result files", hint="rename one of them")
        safe_names[problem.safe_name] = pid
        problems.append(problem)
    if not problems:
        if skipped and by_id:
            raise ProblemError(f"{source}: every problem of the suite is skipped", hint=DOC_HINT)
        what = "no .c file and no KernelBench-format .py file (defining class Model)"
        raise ProblemError(f"{source}: the suite has {what}", hint=DOC_HINT)
    name = table["name"] or (source.resolve().name if source.is_dir() else source.stem)
    return Suite(name=str(name).strip() or "suite", root=root.resolve(), source=source,
                 problems=problems, skipped=skipped)


__all__ = ["KINDS", "MANIFEST_NAME", "BenchProblem", "Suite", "load_suite", "natural_key"]
