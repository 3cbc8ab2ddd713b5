"""What a candidate's host code may call: a check of the compiled object before it is linked.

A C candidate's host code (its ``<fn>_cuda`` launcher) runs inside a Python process: the
evaluation worker's until issue 14's split, the candidate's process now
(``evaluate/device_side.py``), which holds the device work for the judge.  From there it can
reach that process's interpreter (``dlsym(RTLD_DEFAULT, "PyRun_SimpleString")``): before the
split that replaced the function that compares outputs (on the H200 a kernel that wrote one
element was reported correct at 3764x, issue 14); now it would reach the copies, the events
and the replies the judge relies on, and the pipes and staging file of the protocol.  A launcher
needs none of that: it launches kernels, allocates device memory, prints.  So the object nvcc
compiled from the candidate (``candidate.o``, before the CUDA runtime is linked in: the
runtime itself uses ``dlopen`` and threads) is read with ``nm`` and refused when it imports
a symbol of these kinds (:data:`RULES`):

* the Python C API (``Py*``, ``_Py*``): the harness's interpreter;
* run-time symbol lookup (``dlopen``, ``dlsym``, ``dl_iterate_phdr`` ...): a way to both;
* threads and processes (``pthread_create``, ``std::thread``, ``fork``, ``system`` ...):
  work left running after the call returns escapes the timing;
* files and sockets (``open``, ``fopen``, ``std::ifstream``, ``socket`` ...): a candidate
  works on the arrays it is given (its process holds the protocol's pipes and staging file);
* memory mappings and raw system calls (``mprotect``, ``mmap``, ``syscall``, ``ptrace``),
  signals (``kill``, ``sigaction``, ``setitimer``);

and, since an attack pass got past a list of what is refused (``setmntent`` reads a file,
``wordexp`` runs a shell, ``__openat64_2`` is ``open`` by another name, ``_r_debug`` leads to
every loaded library's symbols), **any import that is not on the list of what a launcher
needs** (:data:`ALLOWED`: the CUDA runtime, printing to stdout/stderr, memory, strings,
math, clocks, ``getenv``, the C++ runtime's allocation, exceptions, strings and streams).
Its machine code is refused when an executable section holds the bytes of a system-call
instruction anywhere (``0f 05``, ``0f 34``, ``cd 80`` on x86-64: a jump into the middle of an
instruction runs bytes a disassembler never shows as one).

Limits: code that finds a function without importing it (from the address of an allowed one,
walking memory by hand) is not caught; nor are bytes the linker writes (a relocation whose
addend makes them: the object holds zeros there), nor a jump into the CUDA runtime's own
system calls; the candidate's process's Landlock confinement
(``cudaperf_cli.confine``) still keeps files and TCP out of reach.  ``nm`` comes with
binutils, which nvcc's host compiler needs; without it the check is skipped with a warning.
"""

from __future__ import annotations

import re
import shutil
import struct
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

#: What a launcher may import (mangled names): anything else is refused.  The CUDA runtime
#: (not host callbacks, which run on the driver's threads, nor IPC with other processes),
#: the C++ ABI and unwinder, stdio on the streams it has, memory, strings, numbers, math,
#: clocks, getenv, exit; in C++ allocation, exceptions, std::string, ostreams, containers'
#: helpers and std::chrono.
ALLOWED = re.compile(
    r"^(?:__cuda\w+|cuda(?!LaunchHostFunc|StreamAddCallback|Ipc|Graph\w*HostNode)[A-Z]\w*"
    r"|__cxa_\w+|__gxx_personality_v0|_Unwind_\w+|atexit|__dso_handle|__stack_chk_fail"
    r"|__assert_fail|__tls_get_addr|_GLOBAL_OFFSET_TABLE_|__libc_single_threaded"
    r"|(?:__)?v?f?printf(?:_chk)?|puts|fputs|putchar|fputc|putc|fwrite|fflush|perror|stdout|stderr"
    r"|(?:__)?v?s(?:n)?printf(?:_chk)?"
    r"|malloc|calloc|realloc|free|aligned_alloc|posix_memalign|memalign"
    r"|(?:__)?mem(?:cpy|move|set|cmp|chr)(?:_chk)?|(?:__)?str(?:len|nlen|cmp|ncmp|cpy|ncpy|cat|ncat|chr|rchr|str|dup|tol|toul|toll|toull|tod|tof)(?:_chk)?"
    r"|ato[ifl]|abs|labs|llabs|div|ldiv|rand|srand|qsort|bsearch|abort|exit|_exit|getenv"
    r"|clock|clock_gettime|gettimeofday|time"
    r"|(?:sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|tanh|exp|exp2|expm1|log|log2|log10|log1p|"
    r"pow|sqrt|cbrt|hypot|fabs|floor|ceil|round|lround|llround|trunc|fmod|remainder|fmin|fmax|"
    r"fma|ldexp|frexp|modf|erf|erfc|tgamma|lgamma|nearbyint|rint|lrint|llrint|copysign|nan)[fl]?"
    r"|__(?:isnan|isinf|finite)[fl]?"
    r"|pthread_(?:mutex_(?:lock|unlock|trylock)|once|key_create|getspecific|setspecific)"
    r"|_Zn[wa]\w*|_Zd[la]\w*|_ZSt\d+__throw_\w+|_ZT[IVS]\w+|_ZSt9terminatev"
    r"|_ZN(?:K)?St7__cxx11\d+basic_(?:string|ostringstream|stringbuf)\w*"
    r"|_ZN(?:K)?So\w*|_ZSt4(?:cout|cerr|clog|endl\w*)|_ZStlsI\w+|_ZSt16__ostream_insert\w+"
    r"|_ZN(?:K)?St8ios_base\w+|_ZN(?:K)?St9basic_ios\w+|_ZNKSt5ctypeIcE\w+"
    r"|_ZN(?:K)?St(?:9exception|13runtime_error|11logic_error|12out_of_range|16invalid_argument|"
    r"12length_error|9bad_alloc|20bad_array_new_length)\w*|_ZNSt15__exception_ptr\w+"
    r"|_ZSt17rethrow_exception\w*|_ZSt\d+_Rb_tree\w+|_ZNSt8__detail15_Prime_rehash_policy\w+"
    r"|_ZNSt6chrono\w+)$"
)

#: :attr:`HostCodeViolation.kind` of the bytes of a system-call instruction.
RAW_SYSCALL = "a raw system call"

#: Byte sequences of system-call instructions, by ELF machine (x86-64: 62, AArch64: 183).
SYSCALL_BYTES: dict[int, tuple[bytes, ...]] = {62: (b"\x0f\x05", b"\x0f\x34", b"\xcd\x80"),
                                               183: (b"\x01\x00\x00\xd4",)}


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


def syscall_bytes(obj: Path) -> list[str] | None:
    """The system-call instruction byte sequences found anywhere in ``obj``'s executable
    sections (hex, e.g. ``["0f 05"]``), or None when it is not a 64-bit little-endian ELF
    object this knows."""
    try:
        data = obj.read_bytes()
    except OSError:
        return None
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] != 2 or data[5] != 1:
        return None
    machine = struct.unpack_from("<H", data, 0x12)[0]
    patterns = SYSCALL_BYTES.get(machine)
    if patterns is None:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    found: set[str] = set()
    texts: list[bytes] = []
    for i in range(shnum):
        at = shoff + i * shentsize
        if at + 40 > len(data):
            return None
        _name, kind, flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, at)
        # Every section the loader maps executable (SHF_EXECINSTR), whatever its type (an
        # SHT_NOTE section flagged "ax" lands in the executable segment too); not SHT_NOBITS,
        # which has no bytes in the file.
        if flags & 0x4 and kind != 8:
            texts.append(data[offset:offset + size])
    for text in texts:
        found.update(p.hex(" ") for p in patterns if p in text)
    # The linker may join two sections end to start (one ending in 0f, the next starting
    # with 05): every ordered pair's seam.
    for p in patterns:
        k = len(p) - 1
        for a in texts:
            for b in texts:
                if a is not b and p in a[-k:] + b[:k]:
                    found.add(p.hex(" "))
    return sorted(found)


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
        else:
            if not ALLOWED.match(n):
                hits.append((n, "not on the list of what a launcher may call",
                             "launch kernels, call the CUDA runtime, allocate, print, compute; "
                             "nothing else"))
    shown = _demangle([h[0] for h in hits])
    out = [HostCodeViolation(shown.get(n, n), kind, why) for n, kind, why in hits]
    found = syscall_bytes(obj)
    for seq in found or []:
        out.append(HostCodeViolation(f"the bytes of a system-call instruction ({seq})",
                                     RAW_SYSCALL, "host code may not bypass the C library"))
    note = None if found is not None else "system-call check skipped: candidate.o is not an ELF object it reads"
    return out, note


__all__ = ["ALLOWED", "RAW_SYSCALL", "RULES", "HostCodeViolation", "check_host_object", "imported_symbols", "syscall_bytes"]
