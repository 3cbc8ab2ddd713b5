"""Confine a process that is about to run model-written code: which files it may read and
write, and no TCP, through Linux's Landlock LSM (unprivileged, kernel 5.13 and later).

Why: the evaluation workers load the candidate (a C library's host code, a PyTorch
candidate's Python) in their own process.  Without confinement that code can read any file
the user can (``~/.netrc``, an ``.env``, the run's stored reference outputs) and put it
into an exception message that goes back to the model server as feedback, write over the
user's files, or open a connection out.  After :func:`confine_candidate` the process and
everything it starts may

* read and execute beneath the system folders (``/usr``, ``/lib*``, ``/bin``, ``/sbin``,
  ``/etc``, ``/opt``, ``/sys``, ``/proc``), the Python installation (``sys.prefix``,
  ``sys.base_prefix``, the site-packages folders), this package's folder and the CUDA
  toolkit's (``$CUDA_HOME``, ``$CUDA_PATH``, the folder above ``nvcc``), and the paths the
  caller names (the candidate's library or file, its build folder, the problem's file);
* read and write beneath ``/dev`` (the GPU's device files, ``/dev/shm``), the process's
  private scratch folder (``$TMPDIR``, made per child by ``evaluate/child.py``) and the
  paths the caller names (a PyTorch candidate's extension folder);
* nothing else: ``open`` of any other file fails with ``EACCES`` (``PermissionError``);
* no TCP ``connect``/``bind`` (Landlock ABI 4 and later), no signal to a process outside
  the confined ones and no abstract Unix socket of theirs (ABI 6 and later: the CLI cannot
  be killed from a candidate).

Of ``/proc``, the process's own folder and the entries that are not a process
(``/proc/cpuinfo``, ``/proc/driver``, ``/proc/sys``...) are readable; another process's folder
is not: Landlock refuses ``/proc/<pid>/mem`` of a process outside the domain, but not
``/proc/<pid>/environ``, and the CLI's environment holds the model server's key
(``tests/test_confine.py``).

Limits (an attack pass found each): Landlock confines the calling thread and what it starts;
threads that existed before stay unconfined, and code in the same address space can hand
them work (numpy's OpenBLAS threads were made to read a file through OpenBLAS's
``exec_blas``): the workers therefore start with ``OPENBLAS_NUM_THREADS=1`` and
``MKL_NUM_THREADS=1`` (``evaluate/child.py``), and the CUDA driver's own threads remain (the
count is recorded, ``threads``).  Landlock (ABI 7) does not control UDP, connecting to a
named Unix socket, or changing a file's metadata (``chmod``, ``utime``, ``setxattr``); a
seccomp filter or namespaces would.  A kernel
without Landlock (older than 5.13, or built without it) leaves the process unconfined:
:func:`confine_candidate` then returns ``applied=False`` with the reason, the workers record it
in the result (``details.confinement``) and ``cudaperf doctor`` shows it.
``CUDAPERF_NO_CONFINE=1`` turns confinement off (a toolkit in an unusual place that the rules
miss).

Source of the constants: ``include/uapi/linux/landlock.h`` and
https://docs.kernel.org/userspace-api/landlock.html (syscall numbers 444-446 are the same on
every architecture since Linux 5.13).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

#: Environment variable that turns confinement off (``1``).
NO_CONFINE_ENV = "CUDAPERF_NO_CONFINE"

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem access rights (landlock.h), by the ABI version that introduced them.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

#: Rights that apply to a file (the others only to folders).
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
WRITE = (READ | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG
         | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE)

#: System folders a CUDA or PyTorch process reads (libraries, the driver's files, device
#: topology, ``/proc/self``).
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt",
               "/sys")
#: Written too: device files (``/dev/nvidia*``, ``/dev/shm``).
SYSTEM_WRITE = ("/dev",)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc: ctypes.CDLL | None = None


def _syscall(*args: object) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = ctypes.c_long
    return int(_libc.syscall(*args))


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (1-7 as of Linux 6.15), or 0 when it has
    none (not built in, disabled at boot, not Linux).  Never raises."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        v = _syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                     ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(v, 0)


@dataclass
class Confinement:
    """What :func:`confine` did.

    Attributes:
        applied: the process is confined.
        abi: the kernel's Landlock ABI (0: none).
        reason: one line: what is confined, or why nothing is.
        read: the folders and files granted read (and execute).
        write: those granted write.
        threads: the process's threads when it was confined (the calling one and those
            that existed before, which Landlock does not confine).
    """

    applied: bool
    abi: int
    reason: str
    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    threads: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"applied": self.applied, "abi": self.abi, "reason": self.reason,
                "threads": self.threads}


def _threads() -> int:
    """Threads of this process now (``/proc/self/task``), 0 when unknown."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    return rights


def confine(read: Iterable[str | os.PathLike[str]], write: Iterable[str | os.PathLike[str]],
            *, tcp: bool = False) -> Confinement:
    """Confine the calling thread and everything it starts from now on, for good: reading
    (and executing) only beneath ``read`` and ``write``, writing only beneath ``write``;
    without ``tcp``, no TCP connect or bind (ABI 4+); no signals to, and no abstract Unix
    sockets of, processes outside (ABI 6+).

    Paths that do not exist are skipped; a file grants its file rights only.  No rule is
    enforced when any step fails (the reason says which; ``no_new_privs`` may already be
    set then, which only stops set-uid programs from gaining privileges).

    Returns:
        A :class:`Confinement`; never raises for a kernel without Landlock.
    """
    abi = landlock_abi()
    if abi <= 0:
        return Confinement(False, 0, "not confined: this kernel has no Landlock (Linux 5.13+)")
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled, (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 and not tcp else 0,
                        (SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                       ctypes.c_uint32(0))
    if ruleset < 0:
        err = ctypes.get_errno()
        return Confinement(False, abi, f"not confined: landlock_create_ruleset failed ({os.strerror(err)})")
    granted_r: list[str] = []
    granted_w: list[str] = []
    try:
        for paths, rights, granted in ((read, READ, granted_r), (write, WRITE, granted_w)):
            for p in dict.fromkeys(str(x) for x in paths if x):
                try:
                    fd = os.open(p, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # absent: nothing to grant
                try:
                    allowed = rights & handled
                    if not os.path.isdir(p):
                        allowed &= _FILE_RIGHTS
                    rule = _PathBeneathAttr(allowed, fd)
                    if _syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset),
                                ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                ctypes.c_uint32(0)) < 0:
                        err = ctypes.get_errno()
                        return Confinement(False, abi, f"not confined: a rule for {p} was refused "
                                                       f"({os.strerror(err)})")
                    granted.append(p)
                finally:
                    os.close(fd)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            return Confinement(False, abi, f"not confined: prctl(NO_NEW_PRIVS) failed ({os.strerror(err)})")
        if _syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            return Confinement(False, abi, f"not confined: landlock_restrict_self failed ({os.strerror(err)})")
    finally:
        os.close(ruleset)
    what = [f"reads beneath {len(granted_r) + len(granted_w)} paths", f"writes beneath {len(granted_w)}"]
    if abi >= 4 and not tcp:
        what.append("no TCP")
    if abi >= 6:
        what.append("no abstract sockets or signals outside")
    threads = _threads()
    if threads > 1:  # threads that existed before are not confined (module docstring)
        what.append(f"{threads - 1} earlier thread(s) not confined")
    return Confinement(True, abi, f"confined by Landlock ABI {abi}: " + ", ".join(what),
                       granted_r, granted_w, threads)


def proc_entries(pid: int | None = None) -> list[str]:
    """``/proc`` without the folders of other processes: every entry whose name is not a
    number, and ``/proc/<pid>`` (default: this process)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    own = str(os.getpid() if pid is None else pid)
    return [f"/proc/{n}" for n in names
            if (not n.isdigit() and n not in ("self", "thread-self")) or n == own]


def _toolkit_dirs() -> list[str]:
    # CUDAPERF_SANITIZER_DIR: compute-sanitizer's folder, whose injection libraries a worker
    # run under the tool loads (cudaperf_cli/evaluate/sanitize.py)
    out = [os.environ.get(k, "") for k in ("CUDA_HOME", "CUDA_PATH", "CUDAPERF_SANITIZER_DIR")]
    for exe in (os.environ.get("CUDAPERF_NVCC", ""), shutil.which("nvcc") or ""):
        if exe:
            out.append(str(Path(exe).resolve().parent.parent))
    return [p for p in out if p]


def python_dirs() -> list[str]:
    """The folders a Python process imports from: the prefixes, the site-packages folders
    (user site included) and this package's folder (an editable install's source)."""
    dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # virtualenv's old site.py
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    dirs.append(str(Path(__file__).resolve().parent))
    return dirs


def confine_candidate(read: Iterable[str | os.PathLike[str]] = (),
                      write: Iterable[str | os.PathLike[str]] = ()) -> Confinement:
    """Confine this process before it loads model-written code (module docstring): the
    system, Python and toolkit folders readable, ``/dev`` and ``$TMPDIR`` writable, plus
    ``read`` and ``write``.  ``CUDAPERF_NO_CONFINE=1``: nothing is done.

    Returns:
        A :class:`Confinement` (``applied=False`` with the reason when not confined).
    """
    if os.environ.get(NO_CONFINE_ENV) == "1":
        return Confinement(False, landlock_abi(), f"not confined: {NO_CONFINE_ENV}=1")
    readable = [*SYSTEM_READ, *proc_entries(), *python_dirs(), *_toolkit_dirs(), *map(str, read)]
    tmp = os.environ.get("TMPDIR")
    writable = [*SYSTEM_WRITE, *([tmp] if tmp else []), *map(str, write)]
    mps = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    if os.path.isdir(mps):  # an MPS server's pipes
        writable.append(mps)
    return confine(readable, writable)


__all__ = [
    "Confinement",
    "NO_CONFINE_ENV",
    "confine",
    "confine_candidate",
    "landlock_abi",
    "proc_entries",
    "python_dirs",
]
