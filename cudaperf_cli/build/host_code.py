"""What a candidate's host code may call: a check of the compiled object before it is linked.

A C candidate's host code (its ``<fn>_cuda`` launcher) runs inside the evaluation worker, a
Python process.  From there it can reach the worker's interpreter (``dlsym(RTLD_DEFAULT,
"PyRun_SimpleString")``) and replace the function that compares outputs: on the H200 a
kernel that wrote one element was reported correct at 3764x that way (issue 14).  A launcher
needs none of that: it launches kernels, allocates device memory, prints.  So the object nvcc
compiled from the candidate (``candidate.o``, before the CUDA runtime is linked in: the
runtime itself uses ``dlopen`` and threads) is read with ``nm`` and refused when it imports
a symbol of these kinds (:data:`RULES`):

* the Python C API (``Py*``, ``_Py*``): the harness's interpreter;
* run-time symbol lookup (``dlopen``, ``dlsym``, ``dl_iterate_phdr`` ...): a way to both;
* threads and processes (``pthread_create``, ``std::thread``, ``fork``, ``system`` ...):
  work left running after the call returns escapes the timing;
* files and sockets (``open``, ``fopen``, ``std::ifstream``, ``socket`` ...): a candidate
  works on the arrays it is given (the worker may read the run's stored reference outputs);
* memory mappings and raw system calls (``mprotect``, ``mmap``, ``syscall``, ``ptrace``),
  signals (``kill``, ``sigaction``, ``setitimer``);

and when its machine code holds a system-call instruction (``syscall``, ``sysenter``,
``int $0x80``: ``objdump -d``).

Limits: this reads what the object imports, so code that finds such a function without
importing it (walking the loaded libraries' symbol tables by hand from an allowed function's
address) is not caught; the worker's Landlock confinement (``cudaperf_cli.confine``) still
keeps files and the network out of reach.  ``nm`` and ``objdump`` come with binutils, which
nvcc's host compiler needs; without them the check is skipped with a warning.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: (pattern over the imported symbol's mangled name, what it is, why it is refused).
RULES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"^_?Py[A-Z_]|^_Py"), "the Python C API",
     "host code may not reach the evaluation worker's interpreter"),
    (re.compile(r"^(dlopen|dlmopen|dlsym|dlvsym|dlinfo|dladdr1?|dl_iterate_phdr|_dl_sym|"
                r"__libc_dlsym|__libc_dlopen_mode)$"), "run-time symbol lookup",
     "host code may not look up code it did not link"),
    (re.compile(r"^(pthread_create|thrd_create)$|_M_start_thread"), "a thread",
     "work left running after the call returns escapes the timing"),
    (re.compile(r"^(fork|vfork|_Fork|clone|clone3|system|popen|posix_spawnp?|execl|execle|"
                r"execlp|execv|execve|execvp|execvpe|fexecve|daemon)$"), "a process",
     "host code may not start processes"),
    (re.compile(r"^(open|open64|openat|openat64|__open_2|__open64_2|__openat_2|creat|creat64|"
                r"fopen|fopen64|freopen|freopen64|fdopen|opendir|fdopendir|read|pread|pread64|"
                r"readv|preadv|preadv2|readlink|readlinkat|mkfifo|unlink|rename|truncate)$|"
                r"basic_ifstream|basic_ofstream|basic_fstream|basic_filebuf"), "file access",
     "a candidate works on the arrays it is given, not on files"),
    (re.compile(r"^(socket|socketpair|connect|bind|listen|accept|accept4|sendto|sendmsg|"
                r"recvfrom|recvmsg|getaddrinfo|gethostbyname)$"), "the network",
     "host code may not open connections"),
    (re.compile(r"^(syscall|mprotect|pkey_mprotect|mmap|mmap64|mremap|munmap|ptrace|prctl|"
                r"process_vm_readv|process_vm_writev|personality)$"), "memory mappings or a raw system call",
     "host code may not change memory protection or bypass the C library"),
    (re.compile(r"^(kill|tgkill|tkill|killpg|raise|sigaction|signal|sigset|setitimer|alarm|"
                r"timer_create|pthread_kill)$"), "signals",
     "host code may not send or handle signals"),
)

#: Machine-code instructions that make a system call (x86-64 and AArch64 spellings).
SYSCALL_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(syscall|sysenter|int\s+\$0x80|svc\s+#0(?:x0)?)\b", re.MULTILINE)


@dataclass(frozen=True)
class HostCodeViolation:
    """One thing the candidate's host code may not do.

    Attributes:
        symbol: the imported symbol (demangled when ``c++filt`` is there), or the
            instruction.
        kind: what it is (``"the Python C API"``...).
        why: why it is refused.
    """

    symbol: str
    kind: str
    why: str

    def __str__(self) -> str:
        return f"candidate.cu: error: the host code uses {self.symbol} ({self.kind}): {self.why}"


def _demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True,
                             timeout=30).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def imported_symbols(obj: Path, nm: str | None = None) -> list[str] | None:
    """The undefined (imported) symbols of object file ``obj``, mangled, or None when
    ``nm`` is missing or cannot read it."""
    tool = nm or shutil.which("nm")
    if not tool:
        return None
    try:
        proc = subprocess.run([tool, "-u", "-P", str(obj)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    names = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts:
            names.append(parts[0].split("@", 1)[0])  # printf@GLIBC_2.2.5 -> printf
    return names


def syscall_instructions(obj: Path) -> list[str] | None:
    """The system-call instructions in ``obj``'s machine code (``objdump -d``), or None when
    objdump is missing or cannot read it."""
    tool = shutil.which("objdump")
    if not tool:
        return None
    try:
        proc = subprocess.run([tool, "-d", "--no-show-raw-insn", str(obj)], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return sorted({m.group(1) for m in SYSCALL_INSN.finditer(proc.stdout)})


def check_host_object(obj: Path) -> tuple[list[HostCodeViolation], str | None]:
    """Check the candidate's compiled object (module docstring).

    Args:
        obj: ``candidate.o`` as nvcc compiled it (``-c``), before linking.

    Returns:
        (violations, one by symbol; a note when the check could not run: no ``nm``/
        ``objdump``, or they could not read the object).
    """
    names = imported_symbols(obj)
    if names is None:
        return [], "host-code check skipped: nm (binutils) is missing or cannot read candidate.o"
    hits: list[tuple[str, str, str]] = []
    for n in names:
        for pattern, kind, why in RULES:
            if pattern.search(n):
                hits.append((n, kind, why))
                break
    shown = _demangle([h[0] for h in hits])
    out = [HostCodeViolation(shown.get(n, n), kind, why) for n, kind, why in hits]
    insns = syscall_instructions(obj)
    for insn in insns or []:
        out.append(HostCodeViolation(f"a '{insn}' instruction", "a raw system call",
                                     "host code may not bypass the C library"))
    note = None if insns is not None else "system-call instruction check skipped: objdump is missing"
    return out, note


__all__ = ["RULES", "HostCodeViolation", "check_host_object", "imported_symbols", "syscall_instructions"]
