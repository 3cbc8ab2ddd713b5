"""Compile a candidate ``.cu`` into a shared library with nvcc, with a content-hash cache.

One build directory per candidate, named by a hash of (source, arch, extra flags, nvcc
version, command-line revision) under ``cache_root``::

    <cache_root>/<key>/candidate.cu    the source, as given
                       candidate.so    the library (when the build succeeded)
                       build.log       nvcc's full output (stdout + stderr)
                       build.json      the BuildResult (read back on a cache hit)

A build runs in a temporary sibling directory that is renamed into place when done, so a
half-written directory never looks like a cache hit.  Timed-out builds are not cached.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from cudaperf_cli.build.host_code import RAW_SYSCALL, check_host_object
from cudaperf_cli.build.ptxas import KernelResources, parse_ptxas_report
from cudaperf_cli.core import ToolchainError, kill_process_group, to_jsonable
from cudaperf_cli.evaluate.static_guards import check_includes
from cudaperf_cli.sandbox import NVCC_LIMITS, limit_hit, scrubbed_env

#: Bump when the nvcc command line or the BuildResult layout changes (invalidates caches).
BUILD_REVISION = 4  # 2: compile, check the host code (host_code.py), link; 3: HOST_RELAYOUTS; 4: every executable section, seams

SOURCE_NAME = "candidate.cu"
OBJ_NAME = "candidate.o"
#: Host-compiler alignments tried, in order, when the bytes of a system-call instruction turn
#: up only inside other instructions of the default layout (check_host_object).
HOST_RELAYOUTS = ("-falign-jumps=32", "-falign-labels=32,-falign-loops=32")
LIB_NAME = "candidate.so"

#: Limits of :attr:`BuildResult.errors` (the text fed back to the model).
MAX_ERROR_LINES = 40
MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class BuildResult:
    """Outcome of one nvcc build.

    Attributes:
        ok: the library was built.
        status: ``"ok"``, ``"compile_error"``, ``"compile_timeout"`` or ``"guard_rejected"``
            (the source makes the compiler read a file outside the toolkit and the include
            path: ``static_guards.check_includes``, nvcc did not run; or the compiled host
            code calls what a launcher may not: ``host_code.check_host_object``, not linked).
        lib_path: the built ``candidate.so`` (None unless ``ok``).
        log: nvcc's full output (stdout then stderr), temporary paths replaced.
        errors: the error lines with their context, verbatim, trimmed to about
            ``MAX_ERROR_LINES`` lines / ``MAX_ERROR_CHARS`` characters ("" when ok).
        resources: one :class:`KernelResources` per kernel from ``-Xptxas -v``.
        seconds: wall time of the nvcc run (of the original build on a cache hit), s.
        cached: this result was read from the cache.
        command: the nvcc command line (run inside the build directory).
        arch: the target, e.g. ``"sm_90"``.
        build_dir: the cache directory of this candidate (None for a timed-out build).
        key: the content hash naming ``build_dir``.
        warnings: compiler warning lines (trimmed like ``errors``).
    """

    ok: bool
    status: str
    lib_path: Path | None
    log: str
    errors: str
    resources: list[KernelResources]
    seconds: float
    cached: bool
    command: list[str]
    arch: str
    build_dir: Path | None = None
    key: str = ""
    warnings: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (paths as strings)."""
        return to_jsonable(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "BuildResult":
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["resources"] = [KernelResources.from_dict(r) for r in d.get("resources", [])]
        for p in ("lib_path", "build_dir"):
            kw[p] = Path(kw[p]) if kw.get(p) else None
        kw["command"] = list(kw.get("command", []))
        return cls(**kw)


# ---------------------------------------------------------------------------------------
# nvcc discovery
# ---------------------------------------------------------------------------------------


#: Toolkit directories searched after PATH, $CUDA_HOME and $CUDA_PATH.
_FALLBACK_HOMES: tuple[str, ...] = ("/usr/local/cuda",)


def default_cache_root() -> Path:
    """Build cache shared by every command: ``$XDG_CACHE_HOME/cudaperf/build``
    (``~/.cache/cudaperf/build`` when the variable is unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cudaperf" / "build"


def find_nvcc(nvcc: str | None = None) -> str:
    """Path of nvcc: ``nvcc`` argument, ``$CUDAPERF_NVCC``, PATH, ``$CUDA_HOME/bin``,
    ``/usr/local/cuda/bin``.

    Raises:
        ToolchainError: nvcc is not found.
    """
    candidates = [nvcc, os.environ.get("CUDAPERF_NVCC")]
    for c in candidates:
        if c:
            found = shutil.which(c)
            if found:
                return found
            raise ToolchainError(f"nvcc not found at '{c}'")
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *_FALLBACK_HOMES):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    raise ToolchainError(
        "nvcc not found: install the CUDA toolkit and put nvcc on PATH "
        "(or set CUDA_HOME or CUDAPERF_NVCC)"
    )


@functools.lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    """The ``nvcc --version`` text (its last line, e.g. ``Build cuda_13.0.r13.0/...``).

    Raises:
        ToolchainError: nvcc cannot be run.
    """
    try:
        proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolchainError(f"cannot run '{nvcc} --version': {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError(f"'{nvcc} --version' failed with exit status {proc.returncode}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return "\n".join(lines[-2:]) if lines else "unknown"


# ---------------------------------------------------------------------------------------
# Device architecture
# ---------------------------------------------------------------------------------------


def detect_arch(ordinal: int = 0) -> str | None:
    """``"sm_XY"`` of GPU ``ordinal`` (first GPU by default) via cuda.bindings.

    Returns None when there is no driver, no device, or anything else fails; never raises.
    """
    try:
        from cuda.bindings import driver as drv

        (err,) = drv.cuInit(0)
        if int(err) != 0:
            return None
        err, count = drv.cuDeviceGetCount()
        if int(err) != 0 or count <= ordinal:
            return None
        err, dev = drv.cuDeviceGet(ordinal)
        if int(err) != 0:
            return None
        attr = drv.CUdevice_attribute
        err1, major = drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
        )
        err2, minor = drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
        )
        if int(err1) != 0 or int(err2) != 0:
            return None
        return f"sm_{int(major)}{int(minor)}"
    except BaseException:  # noqa: BLE001 - documented as never raising
        return None


# ---------------------------------------------------------------------------------------
# Error extraction
# ---------------------------------------------------------------------------------------

_ERROR_HEAD = re.compile(
    r"(\berrors?\b|\bfatal\b|catastrophic|undefined reference|Segmentation fault)", re.IGNORECASE
)
_SUMMARY = re.compile(r"^\d+ errors? detected in the compilation of")
_WARNING_HEAD = re.compile(r"\bwarning\b", re.IGNORECASE)
_INFO = re.compile(r"^ptxas\s+info\b")
_TMPXFT = re.compile(r"(?:/[^\s:()\"']*/)?tmpxft_[0-9a-fA-F_]+-\d+_(candidate)(\.[\w.]+)?")


def _blocks(log: str, head: re.Pattern[str]) -> list[str]:
    """Diagnostic blocks: a header line matching ``head`` plus the lines after it up to
    the next blank line (nvcc prints the source line and a caret under an error)."""
    out: list[str] = []
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() and not line[:1].isspace() and head.search(line) and not _INFO.match(line):
            block = [line]
            i += 1
            while i < len(lines) and lines[i].strip():
                nxt = lines[i]
                if _INFO.match(nxt):
                    break
                # Another header of the other kind ends the block.
                if not nxt[:1].isspace() and head is _ERROR_HEAD and _WARNING_HEAD.search(nxt) \
                        and not _ERROR_HEAD.search(nxt):
                    break
                block.append(nxt)
                i += 1
            out.extend(block)
            out.append("")
            continue
        i += 1
    while out and not out[-1]:
        out.pop()
    return out


def _trim(lines: list[str], max_lines: int, max_chars: int) -> str:
    kept: list[str] = []
    size = 0
    for n, line in enumerate(lines):
        if n >= max_lines or size + len(line) + 1 > max_chars:
            rest = len(lines) - n
            kept.append(f"... ({rest} more line{'s' if rest != 1 else ''} in the full build log)")
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept)


#: A diagnostic's location at the start of a line: ``file(12): ``, ``file:12:5: ``,
#: ``file:12: `` (nvcc's front end, gcc, the GNU assembler).
_LOCATION = re.compile(r"^(?:In file included from |\s*from )?(?P<path>[^\s:()][^:()]*?)(?:\((?P<a>\d+)\)|:(?P<b>\d+))[:,]")
#: Lines without a location kept: nvcc's and ptxas's own (they name the candidate's kernels
#: and flags), the linker's on the candidate's symbols, crashes of the compiler itself.
_TOOL_LINE = re.compile(r"^(nvcc|ptxas|nvlink|fatbinary|cicc)\b|undefined reference|multiple definition|"
                        r"^collect2:|Segmentation fault|^\d+ errors? detected in the compilation of")


def confine_diagnostics(lines: Sequence[str], own: Sequence[str] = (SOURCE_NAME,),
                        any_dir: bool = False) -> tuple[list[str], int]:
    """The compiler output lines that may go back to a model: the diagnostics located in
    the candidate's own files (``own``, names after :func:`_clean_paths`) with the source
    lines they quote, and the toolchain's own lines (:data:`_TOOL_LINE`).  A diagnostic
    located in any other file is withheld with the lines under it: the compiler quotes the
    file it reports, and ``%:include``, ``#line 1 "/etc/passwd"`` or an assembler
    ``.include`` can make that any readable file (``static_guards.check_includes`` refuses
    what it can see before nvcc runs; this is the second layer).

    Args:
        lines: compiler output lines.
        own: the candidate's file names (a diagnostic in ``<stem>.<anything>`` counts too:
            nvcc's intermediates such as ``candidate.cudafe1.cpp``).
        any_dir: accept those names in any folder (torch's extension builds report
            ``/root/.cache/torch_extensions/.../cuda.cu(12)``); else only bare names (a
            candidate build runs in its own folder).

    Returns:
        (the kept lines, the number of lines withheld).
    """
    kept: list[str] = []
    withheld = 0
    keep = True
    for line in lines:
        if not line.strip():
            kept.append(line)
            keep = True
            continue
        m = _LOCATION.match(line)
        if m is not None:
            path = m.group("path").strip()
            name = os.path.basename(path)
            # the candidate's file, or nvcc's intermediates of it (candidate.cudafe1.cpp, ...)
            keep = (any_dir or "/" not in path) and (
                name in own or any(name.startswith(Path(o).stem + ".") for o in own))
        elif not line[:1].isspace():  # an unlocated header line
            keep = bool(_TOOL_LINE.search(line))
        if keep:
            kept.append(line)
        else:
            withheld += 1
    while kept and not kept[-1].strip():
        kept.pop()
    return kept, withheld


def extract_errors(
    log: str, *, max_lines: int = MAX_ERROR_LINES, max_chars: int = MAX_ERROR_CHARS,
    own: Sequence[str] = (SOURCE_NAME,), any_dir: bool = False,
) -> str:
    """The error diagnostics of a compiler log, verbatim, trimmed to ``max_lines`` lines and
    ``max_chars`` characters (a final ``... (N more lines ...)`` line says what was cut),
    confined to the candidate's own file (:func:`confine_diagnostics`; a line says how
    many were withheld).

    Falls back to the last lines of the log (confined too) when no line looks like an error.
    """
    lines = _blocks(log, _ERROR_HEAD)
    if not lines:
        tail = [ln for ln in log.splitlines() if ln.strip() and not _INFO.match(ln)]
        lines = tail[-max_lines:]
    lines, withheld = confine_diagnostics(lines, own, any_dir)
    if withheld:
        lines.append(f"({withheld} line(s) located outside {', '.join(own)} withheld: they may quote other files)")
    text = _trim(lines, max_lines, max_chars)
    summary = [ln for ln in log.splitlines() if _SUMMARY.search(ln)]
    if summary and summary[-1] not in text:
        text += "\n" + summary[-1]  # keep "N errors detected ..." even when trimmed
    return text


def extract_warnings(log: str, *, max_lines: int = 20, max_chars: int = 2000) -> str:
    """Warning diagnostics of a compiler log (ptxas register-limit notes included), trimmed,
    confined to the candidate's own file (:func:`confine_diagnostics`)."""
    return _trim(confine_diagnostics(_blocks(log, _WARNING_HEAD))[0], max_lines, max_chars)


def _clean_paths(text: str, tmpdir: str) -> str:
    text = text.replace(tmpdir + os.sep, "").replace(tmpdir, ".")
    return _TMPXFT.sub(lambda m: m.group(1) + (m.group(2) or ""), text)


# ---------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------


def nvcc_command(nvcc: str, arch: str, extra_flags: Sequence[str] = ()) -> list[str]:
    """The nvcc command that compiles a candidate into its object (run inside its build
    directory); :func:`link_command` then makes the library."""
    return [
        nvcc,
        "-O3",
        f"-arch={arch}",
        "-c",
        "-Xcompiler",
        "-fPIC",
        "-Xptxas",
        "-v",
        "-lineinfo",
        *extra_flags,
        "-o",
        OBJ_NAME,
        SOURCE_NAME,
    ]


def link_command(nvcc: str, arch: str) -> list[str]:
    """The nvcc command that links the checked object into ``candidate.so`` (the CUDA
    runtime, statically, as a one-step ``nvcc -shared`` build does)."""
    return [nvcc, f"-arch={arch}", "-shared", "-o", LIB_NAME, OBJ_NAME]


def _run_tool(cmd: Sequence[str], cwd: str, timeout_s: float) -> tuple[int | None, str, bool]:
    """Run one nvcc command in ``cwd`` under :data:`NVCC_LIMITS` with a scrubbed
    environment, its process group killed after ``timeout_s`` (at once when it is not
    positive): (returncode, stdout + stderr, timed out).

    Raises:
        ToolchainError: nvcc cannot be started.
    """
    try:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            # model-written code: no API keys where it is compiled; nvcc's intermediate
            # files (tmpxft_*) in the build folder, removed with it when nvcc is killed
            env=scrubbed_env({"TMPDIR": str(cwd)}),
            preexec_fn=NVCC_LIMITS.preexec(),
        )
    except OSError as exc:
        raise ToolchainError(f"cannot run nvcc ({cmd[0]}): {exc}") from None
    timed_out = False
    try:
        out_b, err_b = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_process_group(proc)
        try:
            out_b, err_b = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            out_b, err_b = b"", b""
    except BaseException:
        kill_process_group(proc)
        proc.wait()
        raise
    return proc.returncode, out_b.decode(errors="replace") + err_b.decode(errors="replace"), timed_out


def cache_key(source: str, arch: str, extra_flags: Sequence[str], version: str) -> str:
    """Content hash (hex, 24 chars) of everything that determines a build."""
    blob = json.dumps(
        {
            "revision": BUILD_REVISION,
            "source": source,
            "arch": arch,
            "flags": list(extra_flags),
            "nvcc": version,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _load_cached(build_dir: Path) -> BuildResult | None:
    meta = build_dir / "build.json"
    if not meta.is_file():
        return None
    try:
        res = BuildResult.from_json(json.loads(meta.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    lib = build_dir / LIB_NAME
    if res.ok and not lib.is_file():
        return None
    return replace(
        res, cached=True, build_dir=build_dir, lib_path=lib if res.ok else None
    )


def _checked_host_code(nvcc_path: str, arch: str, extra_flags: Sequence[str], tmpdir: str,
                       left_s: float) -> tuple[list[Any], list[str], list[str]]:
    """Check the compiled ``candidate.o`` in ``tmpdir`` (:func:`check_host_object`).

    When the only refusal is the bytes of a system-call instruction, they may lie inside
    another instruction of honest host code (a jump's displacement of 0x50f: ``0f 8e 0f 05
    00 00``): the object is compiled again with each of :data:`HOST_RELAYOUTS` (other
    jump-target alignments move displacements; bytes the source put there stay) until a
    layout passes the whole check.  A rebuild that fails, times out or cannot be checked
    leaves the refusal standing.

    Returns:
        (violations, empty when the object may be linked; the nvcc command of the object
        now in ``tmpdir``; notes for the warnings).
    """
    t0 = time.monotonic()
    obj = Path(tmpdir) / OBJ_NAME
    cmd = nvcc_command(nvcc_path, arch, extra_flags)
    refused, note = check_host_object(obj)
    notes = [note] if note else []
    if not refused or not all(v.kind == RAW_SYSCALL for v in refused):
        return refused, cmd, notes
    tried: list[str] = []
    for layout in HOST_RELAYOUTS:
        left = left_s - (time.monotonic() - t0)
        if left <= 0:
            break
        again_cmd = nvcc_command(nvcc_path, arch, [*extra_flags, "-Xcompiler", layout])
        tried.append(layout)
        code, _log, timed_out = _run_tool(again_cmd, tmpdir, left)
        if timed_out or code != 0 or not obj.is_file():
            notes.append(f"host code rebuilt with -Xcompiler {layout}: the build did not finish; "
                         "the refusal stands")
            break
        again, note = check_host_object(obj)
        if note:  # the check could not run on the rebuilt object: not a pass
            notes.append(note)
            break
        if not again:
            notes.append(f"host code rebuilt with -Xcompiler {layout}: the bytes of a system-call "
                         "instruction lay inside another instruction of the default layout")
            return [], again_cmd, notes
        refused = again
        if not all(v.kind == RAW_SYSCALL for v in refused):
            break
    if tried:
        notes.append(f"host code rebuilt with -Xcompiler {', '.join(tried)}: the refusal stands")
    return refused, cmd, notes


def build_candidate(
    source: str,
    *,
    arch: str = "sm_90",
    cache_root: Path,
    timeout_s: float = 120,
    extra_flags: Sequence[str] = (),
    nvcc: str | None = None,
) -> BuildResult:
    """Compile ``source`` into ``candidate.so`` (or return the cached result).

    Runs ``nvcc -O3 -arch=<arch> -c -Xcompiler -fPIC -Xptxas -v -lineinfo <extra_flags>
    -o candidate.o candidate.cu`` in the candidate's build directory, checks the object's
    host code (:func:`~cudaperf_cli.build.host_code.check_host_object`: no Python C API, no
    dlsym, threads, processes, files, sockets, raw system calls; status ``guard_rejected``
    otherwise), then links it: ``nvcc -arch=<arch> -shared -o candidate.so candidate.o``.
    nvcc and its children are killed after ``timeout_s`` seconds in all.

    Args:
        source: the CUDA source text.
        arch: SASS target such as ``"sm_90"``.
        cache_root: directory holding one build directory per candidate (created).
        timeout_s: wall-clock limit of the nvcc run, seconds.
        extra_flags: more nvcc flags (part of the cache key).
        nvcc: nvcc to use (default: see :func:`find_nvcc`).

    Returns:
        A :class:`BuildResult`; compile errors and timeouts are results, not exceptions.

    Raises:
        ToolchainError: nvcc is missing or cannot run at all.
    """
    nvcc_path = find_nvcc(nvcc)
    version = nvcc_version(nvcc_path)
    cmd = nvcc_command(nvcc_path, arch, extra_flags)
    refused = check_includes(source, file=SOURCE_NAME)
    if refused:  # nvcc's errors quote what it reads, and they go back to the model
        text = "\n".join(str(v) for v in refused)
        return BuildResult(ok=False, status="guard_rejected", lib_path=None, log=text, errors=text,
                           resources=[], seconds=0.0, cached=False, command=cmd, arch=arch)
    key = cache_key(source, arch, extra_flags, version)
    cache_root = Path(cache_root)
    cache_root.mkdir(parents=True, exist_ok=True)
    final_dir = cache_root / key

    hit = _load_cached(final_dir)
    if hit is not None:
        return hit
    if final_dir.exists():  # a broken or foreign directory: rebuild it
        shutil.rmtree(final_dir, ignore_errors=True)

    tmpdir = tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=cache_root)
    tmp = Path(tmpdir)
    (tmp / SOURCE_NAME).write_text(source)
    t0 = time.monotonic()
    used = cmd
    try:
        code, log, timed_out = _run_tool(cmd, tmpdir, timeout_s)
        status, errors, notes = "ok", "", []
        if not timed_out and code == 0 and (tmp / OBJ_NAME).is_file():
            # The host code, before the CUDA runtime is linked in (it uses dlopen itself).
            refused, used, checked = _checked_host_code(nvcc_path, arch, extra_flags, tmpdir, timeout_s - (time.monotonic() - t0))
            notes += checked
            if refused:
                status, errors = "guard_rejected", "\n".join(dict.fromkeys(str(v) for v in refused))
            else:
                left = timeout_s - (time.monotonic() - t0)
                code, link_log, timed_out = _run_tool(link_command(nvcc_path, arch), tmpdir, left)
                log += link_log
    except BaseException:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    seconds = time.monotonic() - t0
    log = _clean_paths(log, tmpdir)

    if timed_out:
        shutil.rmtree(tmpdir, ignore_errors=True)
        msg = f"nvcc did not finish within {timeout_s:g} s and was killed"
        return BuildResult(
            ok=False,
            status="compile_timeout",
            lib_path=None,
            log=(log + "\n" if log else "") + msg,
            errors=msg,
            resources=parse_ptxas_report(log),
            seconds=seconds,
            cached=False,
            command=used,
            arch=arch,
            build_dir=None,
            key=key,
        )

    ok = status == "ok" and code == 0 and (tmp / LIB_NAME).is_file()
    if status == "ok" and not ok:
        status = "compile_error"
        errors = extract_errors(log)
        hit = limit_hit(code, log, NVCC_LIMITS)
        if hit:
            errors = (f"nvcc ran into {hit} ({NVCC_LIMITS.describe()})"
                      + (f"\n{errors}" if errors else ""))
        if not errors:
            errors = f"nvcc exited with status {code} and printed nothing"
    if status == "guard_rejected":
        log += "\n" + errors
    result = BuildResult(
        ok=ok,
        status=status,
        lib_path=None,
        log=log,
        errors=errors,
        resources=parse_ptxas_report(log),
        seconds=seconds,
        cached=False,
        command=used,
        arch=arch,
        build_dir=None,
        key=key,
        warnings="\n".join([*notes, extract_warnings(log)]).strip(),
    )
    with contextlib.suppress(OSError):
        (tmp / OBJ_NAME).unlink()  # linked (or refused): the library is what is kept
    (tmp / "build.log").write_text(log)
    (tmp / "build.json").write_text(json.dumps(result.to_json(), indent=1))
    try:
        os.rename(tmpdir, final_dir)
    except OSError:
        # Another process finished the same build first: use its result.
        hit = _load_cached(final_dir)
        if hit is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
            return replace(hit, cached=False)
        # Unusable directory in the way: keep this build where it is.
        final_dir = tmp
    return replace(
        result, build_dir=final_dir, lib_path=(final_dir / LIB_NAME) if ok else None
    )


__all__ = [
    "BuildResult",
    "build_candidate",
    "cache_key",
    "detect_arch",
    "confine_diagnostics",
    "extract_errors",
    "extract_warnings",
    "find_nvcc",
    "link_command",
    "nvcc_command",
    "nvcc_version",
]
