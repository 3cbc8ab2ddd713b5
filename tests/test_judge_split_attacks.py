"""Attacks on the C worker's judge / candidate's process split (docs/evaluation.md §3, "The
judge and the candidate's process"), with host-backend candidates (``CUDAPERF_WORKER_BACKEND
=host``: a plain C library whose ``saxpy_cuda`` gets host pointers).

Each test is one attack a reward-hacking candidate could make from its host code.  Where the
split holds, the test asserts the rejection (a regression test).  Where the attack works
today, the test asserts the secure behaviour and is ``xfail(strict=True, raises=Broken)``:
it must fail with :class:`Broken` (the attack succeeded); any other failure (the harness
itself broke) is reported as a real failure.

Most timing attacks use a man-in-the-middle on the candidate's process's own pipes, in pure
C: a constructor finds the request pipe (the only read-only FIFO) and the reply pipe (the
only write-only FIFO) among its descriptors, ``dup2``s pipes of its own over them and runs
two threads that forward every request and every reply, reading the op of each request and
rewriting numbers in the replies.  The per-request random ``id`` does not help: the real
server still writes every reply, with the right id; the threads only edit it.

On the host backend a candidate is a library gcc built, with no host-code check; through the
real pipeline (nvcc, ``build/host_code.py``) every one of these attacks is refused at build:
it needs ``dup2``, ``pipe``, threads, ``fork``, ``setsid``, ``ftruncate``, ``getppid``, ``open``
or ``read`` on a descriptor, none on the list of what a launcher may import
(:func:`test_the_symbols_these_attacks_need_are_refused_at_build`).  The xfails are the split's
limits without that check: what the candidate's process reports is measured where the
candidate's host code runs.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from cudaperf_cli.confine import landlock_abi
from cudaperf_cli.core import param_to_json
from cudaperf_cli.evaluate import (
    CORRECT,
    CRASH,
    TIMEOUT,
    WRONG,
    ConfigSpec,
    EvalJob,
    EvalResult,
    TimingSettings,
    run_evaluation,
)
from cudaperf_cli.evaluate.device_side import DeviceGone, RemoteDevice
from tests.eval_refs import REF_C, SAXPY_PARAMS, host_clock_verdict

HOST = {"CUDAPERF_WORKER_BACKEND": "host"}
FAST = TimingSettings(warmup_reps=2, min_reps=5, max_reps=20, min_total_ms=1.0,
                      flush_bytes=1 << 16, e2e_reps=3, sync_reps=3)
SAXPY = "for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];"


class Broken(Exception):
    """The attack worked: the secure behaviour the test asserts did not happen."""


def secure(cond: bool, what: str) -> None:
    if not cond:
        raise Broken(what)


def broken(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=Broken, reason=reason)


def skip_if_host_noise(r: EvalResult) -> None:
    """Skip an open attack's test (one of the ``broken`` ones) that was rejected only by a
    rule comparing host wall time across the two processes (the judge's clock, work left
    behind): on a loaded machine those fire for honest candidates too (docs/evaluation.md
    §6), so such a rejection says nothing of the attack, and a strict xfail would report
    it as fixed (seen once in CI, 2026-12-03)."""
    if host_clock_verdict(r.status, r.message):
        pytest.skip(f"inconclusive on a loaded host: {r.message[:200]}")


@pytest.fixture
def ref_lib(compile_c: Callable[..., Path]) -> Path:
    return compile_c(REF_C, "ref")


def _job(ref: Path, cand: Path, timed: bool = False, **kw: Any) -> EvalJob:
    configs = [ConfigSpec("small", {"n": 1000}, trials=1)]
    if timed:
        configs.append(ConfigSpec("main", {"n": 2000}, trials=1, time=True))
    kw.setdefault("timing", FAST)
    kw.setdefault("cpu_reps", 1)
    return EvalJob(ref_lib=str(ref), ref_symbol="cudaperf_ref_saxpy", cand_lib=str(cand),
                   cand_symbol="saxpy_cuda", params=[param_to_json(p) for p in SAXPY_PARAMS],
                   configs=configs, **kw)


def _run(job: EvalJob, timeout_s: float = 30, **kw: Any) -> EvalResult:
    return run_evaluation(job, timeout_s=timeout_s, env=dict(HOST), **kw)


def _why(r: EvalResult) -> str:
    return f"{r.status}: {r.message}\n--- stderr ---\n{r.stderr_tail[-3000:]}"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


HEADERS = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static void spin_ms(double ms) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do clock_gettime(CLOCK_MONOTONIC, &b);
  while ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6 < ms);
}

/* the candidate's process's request pipe (O_RDONLY) or reply pipe (O_WRONLY) */
static int find_fifo(int mode) {
  for (int fd = 3; fd < 256; fd++) {
    struct stat st;
    if (fstat(fd, &st) || !S_ISFIFO(st.st_mode)) continue;
    if ((fcntl(fd, F_GETFL) & O_ACCMODE) == mode) return fd;
  }
  return -1;
}

/* the staging memfd shared with the judge */
static int find_memfd(void) {
  for (int fd = 3; fd < 256; fd++) {
    char p[64], l[256] = {0};
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    if (readlink(p, l, sizeof l - 1) > 0 && strstr(l, "cudaperf-staging")) return fd;
  }
  return -1;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n) { ssize_t k = write(fd, p, n); if (k <= 0) return; p += k; n -= (size_t)k; }
}
"""

# The man-in-the-middle (module docstring).  Knobs (#define before it): SCALE_OPS (bit per
# op whose reply's "ms"/"tails" are multiplied by SCALE), DELAY_PINGS_MS (the 5 pings after
# the load), TRUNCATE_ON_D2H / ZERO_ON_D2H (shrink / zero the staging file after a d2h
# wrote it, before the judge reads it), FORGE_CALL_ERROR (answer a call request with an
# error reply of kind "internal", under the real reply's id).
MITM = r"""
#ifndef SCALE
#define SCALE 1.0
#endif
#ifndef SCALE_OPS
#define SCALE_OPS 0
#endif
#ifndef DELAY_PINGS_MS
#define DELAY_PINGS_MS 0
#endif
#ifndef TRUNCATE_ON_D2H
#define TRUNCATE_ON_D2H 0
#endif
#ifndef ZERO_ON_D2H
#define ZERO_ON_D2H 0
#endif
#ifndef FORGE_CALL_ERROR
#define FORGE_CALL_ERROR 0
#endif
enum { OP_OTHER, OP_TIMED, OP_SYNC_CALL, OP_E2E, OP_CALL, OP_D2H };
static void (*before_d2h)(void);  /* run by the request thread before it forwards a d2h */
static int cur_op, batch_n, batch_i, real_rep = -1, memfd = -1, req_args[2], rep_args[1];

static int count_preps(const char *s) {
  const char *p = strstr(s, "\"preps\": [");
  int n = 0, depth = 1;
  if (!p) return 0;
  for (p = strchr(p, '[') + 1; *p && depth > 0; p++) {
    if (*p == '[') { if (depth == 1) n++; depth++; }
    else if (*p == ']') depth--;
  }
  return n;
}

/* one line from fd (raw read(2): a stdio stream blocked in a thread would hold its lock
   and stall the process's fflush(NULL) at exit) */
typedef struct { int fd; char *buf; size_t len, cap; } lines_t;
static ssize_t next_line(lines_t *r, char **line) {
  for (;;) {
    char *nl = r->len ? memchr(r->buf, '\n', r->len) : NULL;
    if (nl) {
      size_t n = (size_t)(nl - r->buf) + 1;
      *line = malloc(n + 1); memcpy(*line, r->buf, n); (*line)[n] = 0;
      memmove(r->buf, r->buf + n, r->len - n); r->len -= n;
      return (ssize_t)n;
    }
    if (r->len + 65536 > r->cap) { r->cap = (r->len + 65536) * 2; r->buf = realloc(r->buf, r->cap); }
    ssize_t k = read(r->fd, r->buf + r->len, 65536);
    if (k <= 0) return -1;
    r->len += (size_t)k;
  }
}

static void *requests(void *arg) {
  lines_t in = {req_args[0], NULL, 0, 0};
  char *line; ssize_t n;
  while ((n = next_line(&in, &line)) > 0) {
    int op = OP_OTHER;
    if (strstr(line, "\"op\": \"timed\"")) { op = OP_TIMED; batch_n = count_preps(line); }
    else if (strstr(line, "\"op\": \"sync_call\"")) op = OP_SYNC_CALL;
    else if (strstr(line, "\"op\": \"e2e\"")) op = OP_E2E;
    else if (strstr(line, "\"op\": \"call\"")) op = OP_CALL;
    else if (strstr(line, "\"op\": \"d2h\"")) op = OP_D2H;
    __atomic_store_n(&batch_i, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&cur_op, op, __ATOMIC_SEQ_CST);
    if (op == OP_D2H && before_d2h) before_d2h();
    write_all(req_args[1], line, (size_t)n);
    free(line);
  }
  close(req_args[1]);
  return NULL;
}

static void rewrite(const char *in, char *out, double f) {
  while (*in) {
    if (!strncmp(in, "\"ms\": [", 7) || !strncmp(in, "\"tails\": [", 10)) {
      size_t k = (size_t)(strchr(in, '[') - in) + 1;
      memcpy(out, in, k); out += k; in += k;
      while (*in && *in != ']') {
        char *end; double v = strtod(in, &end);
        if (end == in) { *out++ = *in++; continue; }
        out += sprintf(out, "%.9g", v * f); in = end;
      }
      continue;
    }
    *out++ = *in++;
  }
  *out = 0;
}

static void *replies(void *arg) {
  lines_t in = {rep_args[0], NULL, 0, 0};
  char *line; ssize_t n; int pings = 0;
  while ((n = next_line(&in, &line)) > 0) {
    int op = __atomic_load_n(&cur_op, __ATOMIC_SEQ_CST);
    char *out = malloc((size_t)n * 24 + 64);
    rewrite(line, out, (SCALE_OPS >> op) & 1 ? SCALE : 1.0);
    if (pings > 0) { pings--; usleep(DELAY_PINGS_MS * 1000); }
    if (strstr(line, "\"confinement\"")) pings = 5;
    if (TRUNCATE_ON_D2H && op == OP_D2H && memfd >= 0) ftruncate(memfd, 0);
    if (ZERO_ON_D2H && op == OP_D2H && memfd >= 0) {
      struct stat st;
      if (fstat(memfd, &st) == 0 && st.st_size > 0) {
        char *p = mmap(NULL, (size_t)st.st_size, PROT_WRITE, MAP_SHARED, memfd, 0);
        if (p != MAP_FAILED) { memset(p, 0, (size_t)st.st_size); munmap(p, (size_t)st.st_size); }
      }
    }
    const char *id = strstr(line, "\"id\": ");
    if (FORGE_CALL_ERROR && op == OP_CALL && id)  /* the real reply's id, a reply of our own */
      sprintf(out, "{\"ok\": false, \"error\": {\"kind\": \"internal\", \"message\": "
              "\"forged by the candidate\"}, %s", id);
    write_all(real_rep, out, strlen(out));
    free(out); free(line);
  }
  return NULL;
}

__attribute__((constructor)) static void mitm(void) {
  int req = find_fifo(O_RDONLY), rep = find_fifo(O_WRONLY), a[2], b[2];
  pthread_t t;
  memfd = find_memfd();
  if (req < 0 || rep < 0 || pipe(a) || pipe(b)) { dprintf(2, "mitm: no pipes\n"); return; }
  req_args[0] = dup(req); req_args[1] = a[1];
  real_rep = dup(rep); rep_args[0] = b[0];
  dup2(a[0], req); close(a[0]);
  dup2(b[1], rep); close(b[1]);
  pthread_create(&t, NULL, requests, NULL); pthread_detach(t);
  pthread_create(&t, NULL, replies, NULL); pthread_detach(t);
  dprintf(2, "mitm: installed on fds %d/%d\n", req, rep);
}
"""


def _cand(compile_c: Callable[..., Path], body: str, *, mitm: bool = False,
          defines: dict[str, Any] | None = None, prelude: str = "", name: str = "cand") -> Path:
    src = "".join(f"#define {k} {v}\n" for k, v in (defines or {}).items()) + HEADERS
    src += (MITM if mitm else "") + prelude
    src += "int saxpy_cuda(int n, float a, float *x, float *y) {\n" + body + "\n}\n"
    return compile_c(src, name)


# The candidate's call when it knows the request it serves (MITM): `skip_batch` leaves every
# timed call but the last of its request (the only one whose outputs the judge can read: a
# batch ends at each verified call) undone; `skip_sync` leaves the judge-timed call +
# synchronize request undone (its outputs are never compared); the work takes `spin` ms.
def _op_aware(spin_ms: float, skip_batch: bool = False, skip_sync: bool = False) -> str:
    return (
        "int op = __atomic_load_n(&cur_op, __ATOMIC_SEQ_CST);\n"
        "if (op == OP_TIMED) { int i = __atomic_fetch_add(&batch_i, 1, __ATOMIC_SEQ_CST);\n"
        f"  if ({int(skip_batch)} && i < batch_n - 1) return 0; }}\n"
        f"if ({int(skip_sync)} && op == OP_SYNC_CALL) return 0;\n"
        f"spin_ms({spin_ms});\n" + SAXPY + "\nreturn 0;"
    )


# Deferred work: a call outside an end-to-end run only records its arguments; the request
# thread does the work (5 ms) when the next d2h request comes, before the server sees it.
_LAZY = r"""
static int lz_n, lz_pending; static float lz_a, *lz_x, *lz_y;
static void do_work(int n, float a, float *x, float *y) {
  spin_ms(5.0);
  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
static void lazy(void) {
  if (__atomic_exchange_n(&lz_pending, 0, __ATOMIC_SEQ_CST)) do_work(lz_n, lz_a, lz_x, lz_y);
}
__attribute__((constructor(200))) static void hook(void) { before_d2h = lazy; }
"""
_LAZY_CALL = (
    "if (__atomic_load_n(&cur_op, __ATOMIC_SEQ_CST) == OP_E2E) { do_work(n, a, x, y); return 0; }\n"
    "lz_n = n; lz_a = a; lz_x = x; lz_y = y;\n"
    "__atomic_store_n(&lz_pending, 1, __ATOMIC_SEQ_CST); return 0;")


_OPS = {"timed": 1 << 1, "sync_call": 1 << 2, "e2e": 1 << 3, "call": 1 << 4}
ALL_TIMED_OPS = _OPS["timed"] | _OPS["sync_call"] | _OPS["e2e"] | _OPS["call"]


# ---------------------------------------------------------------------------------------
# Timing figures: every one of them is measured in the candidate's process
# ---------------------------------------------------------------------------------------


def test_mitm_scaled_figures_are_caught_by_the_judges_clock(ref_lib, compile_c):
    """Held: the candidate's process reports a thousandth of every call's time (5 ms of
    real work each); the judge's own clock around call + synchronize sees 5 ms."""
    cand = _cand(compile_c, _op_aware(5.0), mitm=True,
                 defines={"SCALE": 1e-3, "SCALE_OPS": ALL_TIMED_OPS})
    r = _run(_job(ref_lib, cand, timed=True))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status == WRONG, _why(r)
    assert "the judge's clock saw" in r.message and "not the calls' time" in r.message


def test_mitm_slow_pings_hide_scaled_figures(ref_lib, compile_c):
    cand = _cand(compile_c, _op_aware(5.0), mitm=True,
                 defines={"SCALE": 1e-3, "SCALE_OPS": ALL_TIMED_OPS, "DELAY_PINGS_MS": 40})
    r = _run(_job(ref_lib, cand, timed=True))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    t = r.configs[-1].timing
    assert r.status in (CORRECT, WRONG), _why(r)
    secure(r.status == WRONG and "judge's clock" in r.message,
           f"accepted: kernel {t.gpu.median_ms if t and t.gpu else None} ms for 5 ms of work; "
           f"ping {r.details.get('processes', {}).get('ping_ms')} ms; {_why(r)}")


@broken("judge_clock's slack (2 ms, and 2x) lets any call under ~2 ms claim any figure")
def test_mitm_scaled_figures_under_the_slack(ref_lib, compile_c):
    cand = _cand(compile_c, _op_aware(0.5), mitm=True,
                 defines={"SCALE": 1e-3, "SCALE_OPS": ALL_TIMED_OPS})
    r = _run(_job(ref_lib, cand, timed=True))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status in (CORRECT, WRONG), _why(r)
    t = r.configs[-1].timing
    skip_if_host_noise(r)
    secure(r.status == WRONG,
           f"accepted: kernel {t.gpu.median_ms if t and t.gpu else None} ms for 0.5 ms of work")


def test_mitm_skips_the_judge_timed_calls(ref_lib, compile_c):
    cand = _cand(compile_c, _op_aware(5.0, skip_sync=True), mitm=True,
                 defines={"SCALE": 1e-3, "SCALE_OPS": _OPS["timed"] | _OPS["e2e"] | _OPS["call"]})
    r = _run(_job(ref_lib, cand, timed=True))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status in (CORRECT, WRONG), _why(r)
    t = r.configs[-1].timing
    secure(r.status == WRONG,
           f"accepted: kernel {t.gpu.median_ms if t and t.gpu else None} ms, judge's clock "
           f"{t.judge_sync.median_ms if t and t.judge_sync else None} ms, for 5 ms of work")


def test_mitm_forges_the_end_to_end_figure_only(ref_lib, compile_c):
    cand = _cand(compile_c, _op_aware(5.0), mitm=True,
                 defines={"SCALE": 1e-3, "SCALE_OPS": _OPS["e2e"]})
    r = _run(_job(ref_lib, cand, timed=True))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status in (CORRECT, WRONG), _why(r)
    t = r.configs[-1].timing
    assert t is not None and t.e2e is not None and t.gpu is not None, _why(r)
    secure(r.status == WRONG or t.e2e.median_ms >= t.gpu.median_ms,
           f"accepted: end to end {t.e2e.median_ms} ms, kernel {t.gpu.median_ms} ms")


@broken("a compound timed request ends at each verified call, so the candidate's process "
        "sees which calls can be checked: only the last of each batch; the others do nothing "
        "and give the kernel figure (honestly measured, no reply edited)")
def test_batch_boundaries_leak_which_timed_calls_are_verified(ref_lib, compile_c):
    cand = _cand(compile_c, _op_aware(3.0, skip_batch=True), mitm=True)
    r = _run(_job(ref_lib, cand, timed=True))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status in (CORRECT, WRONG), _why(r)
    t = r.configs[-1].timing
    skip_if_host_noise(r)
    secure(r.status == WRONG or (t is not None and t.gpu is not None and t.gpu.median_ms >= 1.5),
           f"accepted: kernel {t.gpu.median_ms if t and t.gpu else None} ms for 3 ms of work "
           f"per call; verified reps {t.checked_reps if t else None}")


@broken("work deferred to the next d2h request is never timed: every call (verification, "
        "timed, the judge-timed call + synchronize) only records its arguments, and the "
        "candidate's process does the work when the judge asks for the outputs, before the "
        "copy; all figures are honest and tiny, every compared output is right")
def test_work_deferred_until_the_judge_reads_the_outputs(ref_lib, compile_c):
    cand = _cand(compile_c, _LAZY_CALL, mitm=True, prelude=_LAZY)
    r = _run(_job(ref_lib, cand, timed=True))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status in (CORRECT, WRONG), _why(r)
    t = r.configs[-1].timing
    skip_if_host_noise(r)
    secure(r.status == WRONG or (t is not None and t.gpu is not None and t.gpu.median_ms >= 2.5),
           f"accepted: kernel {t.gpu.median_ms if t and t.gpu else None} ms, call + synchronize "
           f"{t.sync_call.median_ms if t and t.sync_call else None} ms, judge's clock "
           f"{t.judge_sync.median_ms if t and t.judge_sync else None} ms, end to end "
           f"{t.e2e.median_ms if t and t.e2e else None} ms, for 5 ms of work per call")


# ---------------------------------------------------------------------------------------
# The judge's memory, files and process
# ---------------------------------------------------------------------------------------

# Returns a bit per way into the judge that worked (0: none did).
_PROBES = r"""
static int probes(void) {
  pid_t judge = getppid();
  int bits = 0, bit = 1;
  const char *files[] = {"mem", "environ", "maps", "cmdline", "fd/0", "fd/1", "root/etc/hostname"};
  for (unsigned i = 0; i < sizeof files / sizeof *files; i++, bit <<= 1) {
    char p[96];
    snprintf(p, sizeof p, "/proc/%d/%s", (int)judge, files[i]);
    int fd = open(p, O_RDONLY);
    dprintf(2, "probe %s: %s\n", p, fd >= 0 ? "OPEN" : strerror(errno));
    if (fd >= 0) { bits |= bit; close(fd); }
  }
  char buf[16];
  struct iovec l = {buf, sizeof buf}, r = {(void *)0x10000, sizeof buf};
  ssize_t k = syscall(SYS_process_vm_readv, judge, &l, 1, &r, 1, 0);
  dprintf(2, "probe process_vm_readv: %s\n", k >= 0 ? "READ" : strerror(errno));
  if (k >= 0 || errno == EFAULT) bits |= bit;
  bit <<= 1;
  int pidfd = (int)syscall(434 /* pidfd_open */, judge, 0);
  for (int fd = 0; pidfd >= 0 && fd < 64; fd++) {
    int got = (int)syscall(438 /* pidfd_getfd */, pidfd, fd, 0);
    if (got >= 0) { dprintf(2, "probe pidfd_getfd(%d): GOT\n", fd); bits |= bit; close(got); }
    else if (fd == 0) dprintf(2, "probe pidfd_getfd: %s\n", strerror(errno));
  }
  return bits;
}
"""


def test_candidate_cannot_reach_the_judges_memory_or_descriptors(ref_lib, compile_c):
    """Held: /proc/<judge>/{mem,environ,maps,cmdline,fd,root}, process_vm_readv and
    pidfd_getfd (which would hand over the judge's result channel) all fail."""
    if landlock_abi() < 1:
        pytest.skip("no Landlock here")
    cand = _cand(compile_c, "int b = probes(); if (b) return 100 + b;\n" + SAXPY + " return 0;",
                 prelude=_PROBES)
    r = _run(_job(ref_lib, cand))
    assert r.status == CORRECT, _why(r)
    assert "probe process_vm_readv" in r.stderr_tail


def test_candidate_cannot_signal_the_judge(ref_lib, compile_c):
    """Held: Landlock's signal scope (ABI 6): kill(judge, 0) and kill(judge, SIGKILL) fail.
    (kill(-1, 0) cannot tell: it returns 0 when every target refused with EPERM.)"""
    if landlock_abi() < 6:
        pytest.skip("Landlock ABI < 6: signals are not scoped here")
    body = ("int e0 = kill(getppid(), 0) ? errno : 0, e1 = kill(getppid(), SIGKILL) ? errno : 0;\n"
            'dprintf(2, "signals: %d %d\\n", e0, e1);\n'
            "if (!e0 || !e1) return 99;\n" + SAXPY + " return 0;")
    r = _run(_job(ref_lib, _cand(compile_c, body)))
    assert r.status == CORRECT, _why(r)
    assert re.search(r"signals: [1-9]\d* [1-9]\d*", r.stderr_tail), _why(r)


def test_shrinking_the_staging_file_is_refused(ref_lib, compile_c):
    """The staging memfd is open read-write in the candidate's process; an ftruncate there
    would make the judge's next read of its own mapping fault (SIGBUS: the candidate ending
    the judge despite Landlock's signal scope).  The judge seals it against shrinking
    (F_SEAL_SHRINK | F_SEAL_SEAL) once sized: the cut fails, the judge reads on."""
    cand = _cand(compile_c, SAXPY + " return 0;", mitm=True, defines={"TRUNCATE_ON_D2H": 1})
    r = _run(_job(ref_lib, cand))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status == CORRECT and r.signal is None, _why(r)


def test_writing_the_staging_buffer_before_the_judge_reads_it_only_changes_the_candidates_output(
        ref_lib, compile_c):
    """Held: between a d2h's copy into the staging file and the judge's read of it (the
    reply is held back meanwhile), the whole file is zeroed: the judge keeps its own inputs
    and reference outputs, so only the bytes it reads back (the candidate's) change."""
    cand = _cand(compile_c, SAXPY + " return 0;", mitm=True, defines={"ZERO_ON_D2H": 1})
    r = _run(_job(ref_lib, cand))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status == WRONG, _why(r)
    assert [a.name for a in r.configs[0].arrays if not a.ok] == ["x", "y"], _why(r)


# ---------------------------------------------------------------------------------------
# The protocol: floods, garbage, a process that ends, hangs or leaves
# ---------------------------------------------------------------------------------------


def test_a_forged_error_reply_is_blamed_on_the_candidates_process(ref_lib, compile_c):
    cand = _cand(compile_c, SAXPY + " return 0;", mitm=True, defines={"FORGE_CALL_ERROR": 1})
    r = _run(_job(ref_lib, cand))
    assert "mitm: installed" in r.stderr_tail, _why(r)
    assert r.status == CRASH, _why(r)  # rejected either way
    assert "forged by the candidate" in r.message, _why(r)
    secure("internal error in the evaluation worker" not in r.message, r.message)



def test_a_reply_over_4_mib_is_a_crash(ref_lib, compile_c):
    body = ("int fd = find_fifo(O_WRONLY); static char junk[1 << 20]; memset(junk, 'x', sizeof junk);\n"
            "for (int i = 0; i < 5; i++) write_all(fd, junk, sizeof junk);\n" + SAXPY + " return 0;")
    t0 = time.monotonic()
    r = _run(_job(ref_lib, _cand(compile_c, body)))
    assert r.status == CRASH, _why(r)
    assert "sent a reply over 4194304 bytes" in r.stderr_tail, _why(r)
    assert time.monotonic() - t0 < 20


def test_a_reply_that_is_not_json_is_a_crash(ref_lib, compile_c):
    body = ('int fd = find_fifo(O_WRONLY); write_all(fd, "{not json\\n", 10);\n' + SAXPY + " return 0;")
    r = _run(_job(ref_lib, _cand(compile_c, body)))
    assert r.status == CRASH, _why(r)
    assert "a reply that is not JSON" in r.stderr_tail, _why(r)


def test_a_dead_candidate_process_is_noticed_when_a_child_holds_the_reply_pipe(ref_lib, compile_c):
    body = ('pid_t c = fork(); if (c == 0) { sleep(30); _exit(0); }\n'
            'dprintf(2, "grandchild %d\\n", (int)c); _exit(3);')
    t0 = time.monotonic()
    # The time limit is far above the seconds a noticed death takes (a python start, a compile
    # load; 2.6 s on a loaded CI machine), so a missed death shows as a timeout, not as noise.
    r = _run(_job(ref_lib, _cand(compile_c, body)), timeout_s=30)
    took = time.monotonic() - t0
    m = re.search(r"grandchild (\d+)", r.stderr_tail)
    assert m, _why(r)
    pid = int(m.group(1))
    try:
        assert r.status in (CRASH, TIMEOUT), _why(r)
        time.sleep(0.2)
        assert not _alive(pid), "the grandchild outlived the evaluation"  # same process group
    finally:
        _kill(pid)
    secure(r.status == CRASH and took < 15, f"{r.status} after {took:.1f} s: {r.message}")


def test_candidate_process_that_leaves_the_process_group_is_killed(ref_lib, compile_c):
    body = 'setsid(); dprintf(2, "escaped %d\\n", (int)getpid()); for (;;) pause();'
    r = _run(_job(ref_lib, _cand(compile_c, body)), timeout_s=3)
    m = re.search(r"escaped (\d+)", r.stderr_tail)
    assert m, _why(r)
    pid = int(m.group(1))
    try:
        assert r.status == TIMEOUT, _why(r)
        time.sleep(0.3)
        survived = _alive(pid)
    finally:
        _kill(pid)
    secure(not survived, f"the candidate's process {pid} outlived the evaluation")


_HOG = ("if ({escape}) setsid();\n"
        "size_t big = (size_t)1 << 30;\n"
        "char *p = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);\n"
        "if (p == MAP_FAILED) return 98;\n"
        'memset(p, 1, big); dprintf(2, "holding %zu bytes\\n", big); usleep(1500000); munmap(p, big);\n'
        + SAXPY + " return 0;")
_HOG_LIMIT = 700 << 20


def test_host_memory_of_the_candidate_process_is_bounded(ref_lib, compile_c):
    """Held: 1 GiB in the candidate's process, under a 700 MiB limit on the group."""
    r = _run(_job(ref_lib, _cand(compile_c, _HOG.format(escape=0))),
             host_memory_limit_bytes=_HOG_LIMIT)
    assert r.status == CRASH and r.details.get("host_memory_exceeded"), _why(r)


def test_host_memory_of_a_candidate_process_that_left_the_group_is_bounded(ref_lib, compile_c):
    r = _run(_job(ref_lib, _cand(compile_c, _HOG.format(escape=1))),
             host_memory_limit_bytes=_HOG_LIMIT)
    assert r.status in (CORRECT, CRASH), _why(r)
    secure(r.status == CRASH and bool(r.details.get("host_memory_exceeded")),
           f"{r.status}: 1 GiB held under a 700 MiB limit went unseen")


# ---------------------------------------------------------------------------------------
# The compute-sanitizer wrapper
# ---------------------------------------------------------------------------------------

_WRAPPED = r"""
/* under a wrapper the candidate's process is not the judge's child: its own command line
   names the judge (--judge <pid>), its parent is the tool */
static int wrapped(void) {
  char buf[4096] = {0}; int fd = open("/proc/self/cmdline", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : 0;
  for (ssize_t i = 0; i + 8 < n; i++)
    if (!strcmp(buf + i, "--judge")) return atoi(buf + i + 8) != (int)getppid();
  return 0;
}
"""


@broken("pre-existing policy, new tell: the candidate's process sees it is wrapped "
        "(getppid() != its --judge pid) and hangs there; a timeout under the tool is a "
        "tool_failure, so the stage is 'skipped' and a memory error stands")
def test_candidate_that_hangs_only_under_the_sanitizer_is_not_skipped(tmp_path, compile_c, monkeypatch):
    from cudaperf_cli.evaluate.sanitize import run_sanitizer
    from tests.test_sanitize import fake_tool

    ref = compile_c(REF_C, "ref")
    cand = _cand(compile_c, "if (wrapped()) sleep(60);\n" + SAXPY + " return 0;", prelude=_WRAPPED)
    tool = str(fake_tool(tmp_path / "cs"))
    monkeypatch.setenv("CUDAPERF_WORKER_BACKEND", "host")
    monkeypatch.setenv("FAKE_SANITIZER_ERROR", "memcheck")  # the tool would report an error
    job = _job(ref, cand)
    assert _run(job).status == CORRECT  # unwrapped, it behaves
    out = run_sanitizer(job, exe=tool, timeout_s=3)
    assert out.tools and out.tools[0].worker_status == TIMEOUT, out.to_json()
    secure(out.rejected, f"{out.result}: {out.message}")


# ---------------------------------------------------------------------------------------
# RemoteDevice's own resources
# ---------------------------------------------------------------------------------------


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_remote_device_closes_its_descriptors_and_reaps_its_process():
    before = _fds()
    dev = RemoteDevice("host")
    dev.close()
    assert dev.proc.returncode == 0
    assert _fds() - before == set()


def test_remote_device_that_fails_to_start_leaks_no_descriptor():
    before = _fds()
    with pytest.raises(DeviceGone, match="ended while starting"):
        RemoteDevice("host", wrapper=["/bin/false", "--"])
    leaked = _fds() - before
    for fd in leaked:
        try:
            os.close(int(fd))
        except OSError:
            pass
    secure(not leaked, f"leaked descriptors {sorted(leaked)}")


def test_the_symbols_these_attacks_need_are_refused_at_build():
    """The real pipeline's host-code check (docs/evaluation.md §2) refuses every import the
    attacks above rely on: what is left to a candidate that passes it is its own memory."""
    from cudaperf_cli.build import host_code

    for name in ("dup", "dup2", "pipe", "pthread_create", "fork", "vfork", "setsid", "setpgid",
                 "ftruncate", "kill", "getppid", "open", "open64", "openat", "read", "write",
                 "prctl", "process_vm_readv", "select", "poll", "syscall", "mmap", "fcntl"):
        assert not host_code.ALLOWED.fullmatch(name), name
