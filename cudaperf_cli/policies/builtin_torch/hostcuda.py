"""Run the built-in PyTorch policy's generated ``kernel.cu`` on the CPU (tests, debugging).

The policy's CUDA is otherwise only run on a GPU.  This module compiles the generated text
itself (not an interpretation of the plan, as :mod:`.selfcheck`'s ``emulate`` does) with the
host C++ compiler against a small CUDA stand-in (:data:`HOST_CUDA_H`, put first on the
include path as ``cuda_runtime.h`` and ``cooperative_groups.h``):

- a block's threads are fibers (``ucontext``) of one OS thread, switched at
  ``__syncthreads``, at every warp shuffle (the warp's 32 lanes exchange through a buffer)
  and at a grid synchronisation; ``__shared__`` variables are ``thread_local``, so each
  block (OS thread) has its own;
- one CUDA state per process (the last error, as the CUDA runtime's: a refused launch's
  error waits for the next ``cudaGetLastError`` of any library); a launch runs its blocks
  one after another; a cooperative launch
  (``cudaLaunchKernelEx`` with ``cudaLaunchAttributeCooperative``) runs every block at once,
  one OS thread each, and ``this_grid().sync()`` waits for all of them; a cooperative grid
  larger than the occupancy query allows is refused, as CUDA refuses it;
- the device has ``CP_HOST_SMS`` multiprocessors (default 4) and ``CP_HOST_BLOCKS_PER_SM``
  resident blocks of any kernel (default 2), so small shapes reach the launchers' split
  paths (rows over a cooperative grid, phased launches) that need thousands of rows on an
  H200; ``CP_HOST_NO_COOP=1``: a device without cooperative launches.

Warps run one at a time, in a seeded random order (``CP_HOST_SEED``), each to its next
``__syncthreads`` (its shuffles release within): the widest drift between warps a GPU
allows, so a missing barrier between warps shows (a reduction whose shared scratch is
overwritten before another warp read it was caught this way).

What it checks: the generated text's indexing, reductions, trees, phases and launch logic,
barriers between warps, and that a warp shuffle's mask names no lane that returned (a
lane that left a row loop early while the others shuffle: a hang or garbage on a GPU).
What it does not: timing; races between blocks of one ordinary launch (they run one
after another, so a block may see another's writes); shared memory read before it is
written (it keeps the previous block's values, not garbage); lanes of a mask that are
alive but elsewhere (the shuffle waits for the live lanes that reach it); the GPU's memory
ordering beyond what fibers and OS threads share; float rounding of the GPU's special
functions (the host's libm is used).

A deadlock (threads of a block at different barriers, or a block of a cooperative launch
returning while others wait at the grid barrier) aborts the process with a line on stderr;
run it in a child (:func:`~.selfcheck.check_candidate` with ``host_cuda=True``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from cudaperf_cli.torch_runtime import split_top_level

__all__ = ["HOST_CUDA_H", "HostCudaLib", "build_host_library", "host_source"]

#: The CUDA stand-in, included as both ``cuda_runtime.h`` and ``cooperative_groups.h``.
HOST_CUDA_H = r"""#ifndef CP_HOST_CUDA_H
#define CP_HOST_CUDA_H
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcg(const T *p) { std::atomic_thread_fence(std::memory_order_acquire); return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <typename T> inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorCooperativeLaunchTooLarge = 720 };
typedef void *cudaStream_t;
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrCooperativeLaunch = 95 };
enum cudaLaunchAttributeID { cudaLaunchAttributeCooperative = 2 };
union cudaLaunchAttributeValue { int cooperative; };
struct cudaLaunchAttribute { cudaLaunchAttributeID id; cudaLaunchAttributeValue val; };
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned numAttrs;
};

/* The running thread's coordinates: set by the scheduler of the OS thread running the block
 * before it switches to a fiber (threadIdx) or starts a block (the others). */
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

namespace cp_host {

inline int env_int(const char *name, int dflt) {
    const char *v = std::getenv(name);
    return v && *v ? std::atoi(v) : dflt;
}
inline int sms() { return env_int("CP_HOST_SMS", 4); }
inline int blocks_per_sm() { return env_int("CP_HOST_BLOCKS_PER_SM", 2); }
inline thread_local cudaError_t last_error = cudaSuccess;

[[noreturn]] inline void fail(const char *what) {
    std::fprintf(stderr, "host cuda: %s\n", what);
    std::fflush(stderr);
    std::abort();
}

/* All blocks of a cooperative launch at the grid barrier. */
struct GridBarrier {
    std::mutex mu;
    std::condition_variable cv;
    unsigned count = 0, gen = 0, size = 0, finished = 0;
    void wait();
    void finish() { /* a block returned: no barrier can complete after it */
        std::lock_guard<std::mutex> lk(mu);
        ++finished;
        cv.notify_all();
    }
};

enum State { READY, AT_BLOCK, AT_WARP, AT_GRID, DONE };
struct Fiber {
    ucontext_t ctx;
    uint3 tid;
    State state = READY;
    unsigned mask = 0; /* the lanes named by its current shuffle */
    std::unique_ptr<char[]> stack;
};
struct Block {
    uint3 bid;
    dim3 bdim, gdim;
    std::vector<Fiber> fibers;
    ucontext_t sched;
    int cur = 0;
    GridBarrier *grid = nullptr;
    alignas(16) unsigned char xbuf[32][32][16]; /* [warp][lane]: a shuffle's values */
};
inline thread_local Block *blk = nullptr;

inline void GridBarrier::wait() {
    std::unique_lock<std::mutex> lk(mu);
    const unsigned g = gen;
    if (++count == size) { count = 0; ++gen; cv.notify_all(); return; }
    cv.wait(lk, [&] { return gen != g || finished > 0; });
    if (gen == g) fail("deadlock: a block of a cooperative launch returned while others wait at this_grid().sync()");
}

inline void yield(State s) {
    Fiber &f = blk->fibers[blk->cur];
    f.state = s;
    if (swapcontext(&f.ctx, &blk->sched) != 0) fail("swapcontext failed");
}

template <typename F> void trampoline_of(unsigned lo, unsigned hi) {
    const uintptr_t p = ((uintptr_t)hi << 32) | (uintptr_t)lo;
    (*(const F *)p)();
    blk->fibers[blk->cur].state = DONE;
    swapcontext(&blk->fibers[blk->cur].ctx, &blk->sched);
}

/* Run one block of fn: every thread a fiber, until all return. */
template <typename F> void run_block(Block &b, const F &fn) {
    const unsigned n = b.bdim.x * b.bdim.y * b.bdim.z;
    if (n == 0 || n > 1024 || n % 32) fail("block size must be a multiple of 32 up to 1024");
    constexpr size_t STACK = 64 * 1024;
    if (b.fibers.size() != n) b.fibers = std::vector<Fiber>(n);
    const uintptr_t p = (uintptr_t)&fn;
    for (unsigned t = 0; t < n; ++t) {
        Fiber &f = b.fibers[t];
        if (!f.stack) f.stack.reset(new char[STACK]);
        f.tid = uint3{t % b.bdim.x, (t / b.bdim.x) % b.bdim.y, t / (b.bdim.x * b.bdim.y)};
        f.state = READY;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.get();
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, (void (*)())&trampoline_of<F>, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
    }
    blk = &b;
    blockIdx = b.bid;
    blockDim = b.bdim;
    gridDim = b.gdim;
    /* Warps run one at a time, in a random order, each to its next block-level wait
     * (__syncthreads, a grid barrier, its end; its shuffles release within): the widest
     * drift between warps a GPU allows, so that a missing barrier between warps (shared
     * memory read after another warp overwrote it) shows.  The order comes from a fixed
     * seed (CP_HOST_SEED) and the block's index, so a run repeats. */
    const unsigned nw = n / 32;
    uint64_t rng = 0x9e3779b97f4a7c15ull * ((uint64_t)env_int("CP_HOST_SEED", 1) + 1) ^
                   (((uint64_t)b.bid.x << 32) | ((uint64_t)b.bid.y << 16) | b.bid.z);
    std::vector<unsigned> order(nw);
    for (;;) {
        bool ran = false;
        for (unsigned w = 0; w < nw; ++w) order[w] = w;
        for (unsigned w = nw; w > 1; --w) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            std::swap(order[w - 1], order[rng % w]);
        }
        for (unsigned w : order) {
            for (;;) {
                bool any = false;
                for (unsigned l = 0; l < 32; ++l) {
                    const unsigned t = w * 32 + l;
                    if (b.fibers[t].state != READY) continue;
                    b.cur = (int)t;
                    threadIdx = b.fibers[t].tid;
                    any = ran = true;
                    if (swapcontext(&b.sched, &b.fibers[t].ctx) != 0) fail("swapcontext failed");
                }
                unsigned at = 0, live = 0; /* the warp's shuffle: all its live lanes there */
                for (unsigned l = 0; l < 32; ++l) {
                    const State st = b.fibers[w * 32 + l].state;
                    live += st != DONE;
                    at += st == AT_WARP;
                }
                if (at && at == live) {
                    /* CUDA: every lane a *_sync shuffle's mask names must execute it; a lane
                       that returned never does (undefined on a GPU: a hang or garbage). */
                    unsigned named = 0, gone = 0;
                    for (unsigned l = 0; l < 32; ++l) {
                        const Fiber &f = b.fibers[w * 32 + l];
                        if (f.state == AT_WARP) named |= f.mask;
                        if (f.state == DONE) gone |= 1u << l;
                    }
                    if (named & gone) fail("a warp shuffle names lanes of its mask that returned");
                    for (unsigned l = 0; l < 32; ++l)
                        if (b.fibers[w * 32 + l].state == AT_WARP) b.fibers[w * 32 + l].state = READY;
                    continue;
                }
                if (!any) break;
            }
        }
        unsigned done = 0, at_block = 0, at_grid = 0;
        for (auto &f : b.fibers) {
            done += f.state == DONE;
            at_block += f.state == AT_BLOCK;
            at_grid += f.state == AT_GRID;
        }
        if (done == n) break;
        bool released = false;
        if (at_block && at_block == n - done) {
            for (auto &f : b.fibers) if (f.state == AT_BLOCK) f.state = READY;
            released = true;
        }
        if (!released && at_grid && at_grid == n - done) {
            if (!b.grid) fail("this_grid().sync() in a launch that is not cooperative");
            if (done) fail("this_grid().sync() after some threads of the block returned");
            b.grid->wait();
            for (auto &f : b.fibers) f.state = READY;
            released = true;
        }
        if (!ran && !released) fail("deadlock: threads of a block wait at different barriers");
    }
    blk = nullptr;
}

/* CP_HOST_TRACE: a file that gets one line per launch, "<kernel> grid=<blocks> block=<threads>
 * coop=<0|1>" (the kernel as written at the launch; "cooperative" for cudaLaunchKernelEx). */
inline void trace(const char *kern, uint64_t blocks, unsigned threads, bool coop) {
    const char *path = std::getenv("CP_HOST_TRACE");
    if (!path || !*path) return;
    static std::mutex mu;
    std::lock_guard<std::mutex> lk(mu);
    if (FILE *f = std::fopen(path, "a")) {
        std::fprintf(f, "%s grid=%llu block=%u coop=%d\n", kern, (unsigned long long)blocks, threads, (int)coop);
        std::fclose(f);
    }
}

template <typename F> cudaError_t launch(dim3 grid, dim3 block, bool coop, const F &fn, const char *kern = "cooperative") {
    const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    trace(kern, nblocks, block.x * block.y * block.z, coop);
    if (nblocks == 0 || block.x * block.y * block.z == 0) { last_error = cudaErrorInvalidValue; return last_error; }
    auto one = [&](Block &b, uint64_t i, GridBarrier *gb) {
        b.bid = uint3{(unsigned)(i % grid.x), (unsigned)((i / grid.x) % grid.y), (unsigned)(i / ((uint64_t)grid.x * grid.y))};
        b.bdim = block;
        b.gdim = grid;
        b.grid = gb;
        run_block(b, fn);
    };
    if (!coop) {
        auto b = std::make_unique<Block>();
        for (uint64_t i = 0; i < nblocks; ++i) one(*b, i, nullptr);
        return cudaSuccess;
    }
    if (nblocks > (uint64_t)sms() * blocks_per_sm()) {
        last_error = cudaErrorCooperativeLaunchTooLarge;
        return last_error;
    }
    GridBarrier gb;
    gb.size = (unsigned)nblocks;
    std::vector<std::thread> threads;
    for (uint64_t i = 0; i < nblocks; ++i)
        threads.emplace_back([&, i] { auto b = std::make_unique<Block>(); one(*b, i, &gb); gb.finish(); });
    for (auto &t : threads) t.join();
    return cudaSuccess;
}

template <typename T> inline T shfl(T v, int src, unsigned mask) {
    static_assert(sizeof(T) <= 16, "shuffle of a value over 16 bytes");
    blk->fibers[blk->cur].mask = mask;
    const unsigned t = blk->fibers[blk->cur].tid.x + blk->bdim.x * (blk->fibers[blk->cur].tid.y + blk->bdim.y * blk->fibers[blk->cur].tid.z);
    const unsigned w = t / 32, lane = t % 32;
    std::memcpy(blk->xbuf[w][lane], &v, sizeof(T));
    yield(AT_WARP);
    T out;
    std::memcpy(&out, blk->xbuf[w][src & 31], sizeof(T));
    yield(AT_WARP); /* every lane has read before the buffer is written again */
    return out;
}
inline unsigned lane_id() {
    const Fiber &f = blk->fibers[blk->cur];
    return (f.tid.x + blk->bdim.x * (f.tid.y + blk->bdim.y * f.tid.z)) % 32;
}

}  // namespace cp_host

inline void __syncthreads() { cp_host::yield(cp_host::AT_BLOCK); }
template <typename T> inline T __shfl_xor_sync(unsigned m, T v, int o, int = 32) { return cp_host::shfl(v, (int)cp_host::lane_id() ^ o, m); }
template <typename T> inline T __shfl_sync(unsigned m, T v, int src, int = 32) { return cp_host::shfl(v, src, m); }
template <typename T> inline T __shfl_up_sync(unsigned m, T v, unsigned d, int = 32) {
    const int l = (int)cp_host::lane_id();
    return cp_host::shfl(v, l >= (int)d ? l - (int)d : l, m);
}
template <typename T> inline T __shfl_down_sync(unsigned m, T v, unsigned d, int = 32) {
    const int l = (int)cp_host::lane_id();
    return cp_host::shfl(v, l + (int)d < 32 ? l + (int)d : l, m);
}

namespace cooperative_groups {
struct grid_group { void sync() { cp_host::yield(cp_host::AT_GRID); } };
inline grid_group this_grid() { return grid_group{}; }
}  // namespace cooperative_groups

inline cudaError_t cudaGetLastError() { cudaError_t e = cp_host::last_error; cp_host::last_error = cudaSuccess; return e; }
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    *v = a == cudaDevAttrMultiProcessorCount ? cp_host::sms() : !cp_host::env_int("CP_HOST_NO_COOP", 0);
    return cudaSuccess;
}
template <typename K> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K, int, size_t) {
    *n = cp_host::blocks_per_sm();
    return cudaSuccess;
}
template <typename... P, typename... A>
inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *cfg, void (*kern)(P...), A... args) {
    bool coop = false;
    for (unsigned i = 0; i < cfg->numAttrs; ++i)
        coop |= cfg->attrs[i].id == cudaLaunchAttributeCooperative && cfg->attrs[i].val.cooperative;
    return cp_host::launch(cfg->gridDim, cfg->blockDim, coop, [&] { kern(args...); });
}
#endif
"""

_LAUNCH = re.compile(r"<<<")


def host_source(cu_text: str) -> str:
    """``cu_text`` with each ``kern<<<grid, block, smem, stream>>>(args);`` written as
    ``cp_host::launch(dim3(grid), dim3(block), false, [&] { kern(args); }, "kern");``.

    Raises:
        ValueError: a launch whose ``>>>`` or argument list does not close.
    """
    out, pos = [], 0
    for m in _LAUNCH.finditer(cu_text):
        if m.start() < pos:
            continue
        # the kernel expression: back from <<< over the template arguments and the name
        j = m.start()
        depth = 0
        k = j - 1
        while k >= 0:
            ch = cu_text[k]
            if ch == ">":
                depth += 1
            elif ch == "<":
                depth -= 1
            elif depth == 0 and not (ch.isalnum() or ch in "_:"):
                break
            k -= 1
        kern = cu_text[k + 1:j]
        close = cu_text.find(">>>", j)
        if close < 0:
            raise ValueError("a launch's >>> is missing")
        cfg = split_top_level(cu_text[j + 3:close])
        if cu_text[close + 3] != "(":
            raise ValueError(f"a launch of {kern} has no argument list")
        depth, e = 0, close + 3
        while True:
            if e >= len(cu_text):
                raise ValueError(f"the arguments of a launch of {kern} do not close")
            if cu_text[e] == "(":
                depth += 1
            elif cu_text[e] == ")":
                depth -= 1
                if depth == 0:
                    break
            e += 1
        args = cu_text[close + 4:e]
        out.append(cu_text[pos:k + 1])
        out.append(f"cp_host::launch(dim3({cfg[0]}), dim3({cfg[1]}), false, [&] {{ {kern}({args}); }}, \"{kern}\")")
        pos = e + 1
    out.append(cu_text[pos:])
    return "".join(out)


def build_host_library(cu_text: str, folder: str | os.PathLike[str], *, timeout_s: float = 300) -> Path:
    """Compile ``cu_text`` for the host into ``folder/kernel_host.so`` (reused when the same
    text was built there).

    Raises:
        RuntimeError: no C++ compiler, or it failed (its first error lines) or timed out.
    """
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) for the host CUDA build")
    folder = Path(folder)
    inc = folder / "host_cuda_include"
    inc.mkdir(parents=True, exist_ok=True)
    for name in ("cuda_runtime.h", "cooperative_groups.h"):
        (inc / name).write_text(HOST_CUDA_H)
    src_text = host_source(cu_text)
    digest = hashlib.sha256((HOST_CUDA_H + src_text).encode()).hexdigest()[:16]
    so = folder / f"kernel_host_{digest}.so"
    if so.exists():
        return so
    src = folder / f"kernel_host_{digest}.cpp"
    src.write_text(src_text)
    cmd = [cxx, "-std=c++17", "-O1", "-g0", "-fPIC", "-shared", "-pthread", "-w", "-I", str(inc),
           "-o", str(so), str(src)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"the host CUDA build timed out after {timeout_s:g} s") from exc
    if proc.returncode != 0:
        errs = [l for l in proc.stderr.splitlines() if "error" in l][:8]
        raise RuntimeError("the host CUDA build failed: " + " | ".join(errs or proc.stderr.splitlines()[:8]))
    return so


class HostCudaLib:
    """Stands in for a :class:`~cudaperf_cli.torch_runtime.CudaLib` with the launchers of a
    host build (:func:`build_host_library`): ``lib.<launcher>(*tensors_and_numbers)`` on CPU
    tensors (contiguous, of the parameter's dtype), synchronously.

    Raises (on a call):
        TypeError: a wrong argument count, type, dtype or a non-contiguous or non-CPU tensor.
        RuntimeError: the launcher returned a non-zero CUDA error code.
    """

    def __init__(self, cu_text: str, folder: str | os.PathLike[str]):
        from cudaperf_cli.torch_runtime import parse_launchers

        self.sigs = {s.name: s for s in parse_launchers(cu_text)}
        self.path = build_host_library(cu_text, folder)
        self._dll = ctypes.CDLL(str(self.path))
        self._fns: dict[str, Any] = {}
        for name, sig in self.sigs.items():
            fn = getattr(self._dll, name)
            fn.argtypes = sig.argtypes()
            fn.restype = ctypes.c_int
            self._fns[name] = fn

    def __getattr__(self, name: str) -> Any:
        fns = self.__dict__.get("_fns", {})
        if name not in fns:
            raise AttributeError(name)
        return lambda *args: self.call(name, args)

    def call(self, name: str, args: tuple[Any, ...]) -> None:
        import torch

        sig = self.sigs[name]
        if len(args) != len(sig.params):
            raise TypeError(f"{name}() takes {len(sig.params)} arguments, got {len(args)}")
        cargs: list[Any] = []
        for p, a in zip(sig.params, args):
            if p.pointer:
                if not isinstance(a, torch.Tensor) or a.device.type != "cpu" or not a.is_contiguous():
                    raise TypeError(f"{name}: {p.name} must be a contiguous CPU tensor")
                if p.dtype is not None and a.dtype != getattr(torch, p.dtype):
                    raise TypeError(f"{name}: {p.name} is {a.dtype}, the parameter is {p.ctype}*")
                cargs.append(ctypes.c_void_p(a.data_ptr()))
            else:
                if isinstance(a, torch.Tensor):
                    raise TypeError(f"{name}: {p.name} must be a number")
                cargs.append(a)
        cargs.append(None)  # the stream
        code = self._fns[name](*cargs)
        if code != 0:
            raise RuntimeError(f"{name} returned CUDA error {code}")
