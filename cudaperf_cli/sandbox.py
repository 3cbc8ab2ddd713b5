"""What a child process that handles untrusted input gets: an environment without secrets,
and resource limits that end it with one line naming the limit.

Untrusted here: code a model wrote (the candidate's build by nvcc, the evaluation workers
that load it, the profiler that runs it) and the user's C input on its way through the
preprocessor and the compiler (``#include "/dev/zero"`` drove ``cc -E`` to 23.7 GB on a
25 GB machine).  The children that need the user's credentials (``bench`` starting
``cudaperf optimize`` with a model server's key) do not go through here.

* :func:`scrubbed_env`: ``os.environ`` without any variable whose name says it holds a
  secret (:func:`is_secret_name`): API keys, tokens, passwords, cloud credentials, the SSH
  agent.  A candidate that prints its environment, or a compiler error that quotes it,
  cannot carry ``OPENAI_API_KEY`` into the next request to the model server.
* :class:`Limits`: ``setrlimit`` values applied in the child before ``exec``
  (``preexec_fn``): address space (never for a process that opens a CUDA context: the
  driver reserves far more virtual memory than it uses, so the evaluation workers are
  bounded by their resident memory instead, ``evaluate/child.py``), CPU seconds, the size
  of a file it writes, open files.  :func:`limit_hit` turns the way a child died into the
  line that names the limit.
"""

from __future__ import annotations

import os
import re
import resource
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

GIB = 1 << 30

#: A variable whose name matches this (case-insensitive) holds a secret: keys, tokens,
#: passwords (``MYSQL_PWD``, ``REDIS_PASS``), credentials, cookies, sessions, private
#: keys, DSNs and webhooks (URLs that carry a secret), JWTs, Kerberos caches, ``*_SK``.
SECRET_WORDS = re.compile(r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|"
                          r"_PWD$|(?:^|_)PASS(?:_|$)|DSN|WEBHOOK|JWT|KRB5|_SK$|_SA_JSON",
                          re.IGNORECASE)
#: ... and so does one that starts with one of these (services whose variables carry
#: account data whatever they are called).
SECRET_PREFIXES = ("OPENAI_", "ANTHROPIC_", "NETRC", "KUBECONFIG", "VAULT_", "DATABASE_URL")
#: A value with credentials in a URL (``https://user:pass@proxy``, a database URL, a
#: package index with a token) is a secret whatever its name.
SECRET_VALUE = re.compile(r"://[^/\s:@]*:[^/\s@]+@")
#: Names that match :data:`SECRET_WORDS` and are known to hold none (kept).
NOT_SECRETS = frozenset({"KEYTIMEOUT", "TOKENIZERS_PARALLELISM"})
#: More names to drop, registered at run time (:func:`mark_secret`: the variable a model
#: policy reads its API key from, ``--api-key-env``).
_MARKED: set[str] = set()


def mark_secret(name: str) -> None:
    """Drop variable ``name`` from every scrubbed environment from now on (the model
    server's key under a name of the user's choosing)."""
    if name:
        _MARKED.add(name.upper())


def is_secret_name(name: str) -> bool:
    """Whether environment variable ``name`` may hold a secret (see :data:`SECRET_WORDS`,
    :data:`SECRET_PREFIXES`); our own ``CUDAPERF_*`` variables never do, except one that
    names a key (``CUDAPERF_API_KEY``)."""
    upper = name.upper()
    if upper in _MARKED:
        return True
    if upper in NOT_SECRETS:
        return False
    if upper.startswith("CUDAPERF_") and not SECRET_WORDS.search(upper[len("CUDAPERF_"):]):
        return False
    return bool(SECRET_WORDS.search(upper)) or upper.startswith(SECRET_PREFIXES)


def scrubbed_env(extra: Mapping[str, str] | None = None,
                 base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) without the variables :func:`is_secret_name`
    flags or whose value carries credentials in a URL (:data:`SECRET_VALUE`), then
    ``extra`` on top (the caller's own settings, not checked).

    Returns:
        A new dict for ``subprocess``'s ``env``.
    """
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not is_secret_name(k) and not SECRET_VALUE.search(v)}
    if extra:
        env.update(extra)
    return env


#: The folder that holds this ``cudaperf_cli`` package.
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def python_child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a ``python -m cudaperf_cli...`` child, made to import this very copy of
    the package: ``PYTHONSAFEPATH=1`` (Python 3.11 and later; 3.10 ignores it) keeps
    ``python -m`` from putting the current folder first, where a ``cudaperf_cli/`` folder
    (an old clone) would win over the installed package and the verifier would run other
    code than the CLI; and when this copy is not in a site-packages folder (a source
    checkout, editable or on ``PYTHONPATH``), ``PYTHONPATH`` starts with
    :data:`PACKAGE_ROOT` (the caller's entries follow).  Modified in place and returned."""
    import site

    sites = {str(Path(x).resolve()) for x in [*site.getsitepackages(), site.getusersitepackages()]}
    if PACKAGE_ROOT not in sites:
        given = env.get("PYTHONPATH", "")
        parts = [PACKAGE_ROOT] + [x for x in given.split(os.pathsep) if x and x != PACKAGE_ROOT]
        env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONSAFEPATH"] = "1"
    return env


@dataclass(frozen=True)
class Limits:
    """Resource limits of one child (``None``: left as inherited).

    Attributes:
        address_space_bytes: ``RLIMIT_AS``, bytes (never for a CUDA process, see the module).
        cpu_s: ``RLIMIT_CPU``, CPU seconds (the kernel sends SIGXCPU, then SIGKILL).
        file_bytes: ``RLIMIT_FSIZE``, bytes of any one file it writes (SIGXFSZ past it).
        open_files: ``RLIMIT_NOFILE``, open file descriptors.
    """

    address_space_bytes: int | None = None
    cpu_s: int | None = None
    file_bytes: int | None = None
    open_files: int | None = None

    def _pairs(self) -> list[tuple[int, int]]:
        out = []
        for res, value in ((resource.RLIMIT_AS, self.address_space_bytes),
                           (resource.RLIMIT_CPU, self.cpu_s),
                           (resource.RLIMIT_FSIZE, self.file_bytes),
                           (resource.RLIMIT_NOFILE, self.open_files)):
            if value is not None:
                out.append((res, max(int(value), 1)))
        return out

    def preexec(self) -> Callable[[], None] | None:
        """A ``preexec_fn`` that sets the limits in the child (never above a hard limit it
        inherited); None when no limit is set."""
        pairs = self._pairs()
        if not pairs:
            return None

        def apply() -> None:
            for res, value in pairs:
                _soft, hard = resource.getrlimit(res)
                if hard != resource.RLIM_INFINITY:
                    value = min(value, hard)
                resource.setrlimit(res, (value, value))

        return apply

    def describe(self) -> str:
        """The limits in words, e.g. ``"address space 4 GiB, CPU 120 s"``."""
        parts = []
        if self.address_space_bytes is not None:
            parts.append(f"address space {_size(self.address_space_bytes)}")
        if self.cpu_s is not None:
            parts.append(f"CPU {self.cpu_s} s")
        if self.file_bytes is not None:
            parts.append(f"file size {_size(self.file_bytes)}")
        if self.open_files is not None:
            parts.append(f"{self.open_files} open files")
        return ", ".join(parts) or "none"


def _size(n: int) -> str:
    return f"{n / GIB:g} GiB" if n >= GIB else f"{n / (1 << 20):g} MiB"


#: Words in a compiler's stderr that say it could not allocate memory.
_OUT_OF_MEMORY = re.compile(r"out of memory|memory exhausted|cannot allocate memory|std::bad_alloc|"
                            r"virtual memory exhausted", re.IGNORECASE)


def limit_hit(returncode: int | None, stderr: str, limits: Limits) -> str | None:
    """Which limit of ``limits`` a child that ended with ``returncode`` (negative: the
    signal) and ``stderr`` ran into, in words (``"its address-space limit of 4 GiB"``), or
    None when nothing says so."""
    if returncode is None or returncode == 0:
        return None
    sig = -returncode if returncode < 0 else None
    if sig == signal.SIGXCPU and limits.cpu_s is not None:
        return f"its CPU-time limit of {limits.cpu_s} s"
    if limits.file_bytes is not None and (sig == signal.SIGXFSZ
                                          or "file too large" in (stderr or "").lower()):
        return f"its file-size limit of {_size(limits.file_bytes)}"
    if limits.address_space_bytes is not None and _OUT_OF_MEMORY.search(stderr or ""):
        return f"its address-space limit of {_size(limits.address_space_bytes)}"
    if limits.open_files is not None and "too many open files" in (stderr or "").lower():
        return f"its limit of {limits.open_files} open files"
    return None


#: The C preprocessor and compiler on the user's C input and our generated reference
#: wrappers: 4 GiB of address space (PolyBench's largest file preprocesses in 30 MB),
#: 300 CPU seconds, 1 GiB files.
C_TOOL_LIMITS = Limits(address_space_bytes=4 * GIB, cpu_s=300, file_bytes=GIB, open_files=1024)
#: nvcc on a candidate (its cicc and ptxas children inherit them): 16 GiB of address space
#: (cicc on a large unrolled kernel stays under 3 GB), 1200 CPU seconds, 2 GiB files.
NVCC_LIMITS = Limits(address_space_bytes=16 * GIB, cpu_s=1200, file_bytes=2 * GIB, open_files=1024)
#: A process that opens a CUDA context and runs candidate code: open files only (its memory
#: is bounded by the resident-memory watchdog of evaluate/child.py, its time by deadlines).
CUDA_CHILD_LIMITS = Limits(open_files=4096)


__all__ = [
    "CUDA_CHILD_LIMITS",
    "C_TOOL_LIMITS",
    "GIB",
    "Limits",
    "NVCC_LIMITS",
    "SECRET_PREFIXES",
    "SECRET_WORDS",
    "is_secret_name",
    "limit_hit",
    "mark_secret",
    "scrubbed_env",
]
