"""Run the built-in policy's CUDA on the CPU: a small emulation of the CUDA subset it emits.

Why: the built-in policy's candidates must be correct before they are fast, and a wrong
mapping (a loop declared parallel that is not) is found only by running it.  On a machine
without a GPU the emulation runs every candidate of a plan through the real verifier
(:mod:`cudaperf_cli.evaluate` with its host backend), so a dependence-test bug shows up as
``wrong`` on the CPU, on the field's own suites (``benchmarks/polybench.py emulate``).

What is emulated (enough for the policy's code, nothing else):

* ``k<<<grid, block>>>(args)`` becomes ``cp_emu_launch(grid, block, lambda)``: the threads of
  a block are OS threads (``std::thread``) with real barriers (``std::barrier``), the blocks
  of the grid run one after another, every thread loops over them in the same order;
* ``__syncthreads``/``__syncwarp`` are barriers of the block / of the warp;
  ``__shfl_down_sync`` exchanges values through the warp's buffer between two barriers;
* ``atomicAdd`` takes one mutex; ``__shared__`` and ``static __device__`` variables are
  plain statics (one block runs at a time, so a block's shared memory is its own);
* ``cudaGetLastError`` returns 0; ``cudaMallocAsync``, ``cudaFreeAsync``,
  ``cudaMemcpyAsync`` and ``cudaMemcpy2DAsync`` (the policy's scratch copies) are
  ``malloc``, ``free`` and ``memmove``;
  ``<cuda_runtime.h>`` is an empty file.

Not emulated: the memory model beyond barriers (a race that the GPU would expose may pass
here, since OS threads interleave differently), warp-synchronous code without ``__syncwarp``,
streams, the rest of the runtime API.  A candidate is therefore shown wrong by the emulation
with certainty, but shown right only for the interleavings that ran.  Model-written
candidates use far more of CUDA and are not emulated.

Needs g++ with C++20 ``<barrier>`` (GCC 11 and later); :func:`have_emulation` says.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from cudaperf_cli.core import ToolchainError, write_text_atomic

#: Prepended to every emulated source (``-include``).
EMULATION_HEADER = r"""
// CPU emulation of the CUDA subset emitted by cudaperf's built-in policy.
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(...)
typedef int cudaError_t;
#define cudaSuccess 0
static inline cudaError_t cudaGetLastError(void) { return 0; }
// Stream-ordered scratch memory and device copies (privatised arrays): host memory here.
typedef void *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyDeviceToDevice = 3 };
static inline cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t)
{
    *p = std::malloc(n);
    return *p ? 0 : 2;
}
static inline cudaError_t cudaFreeAsync(void *p, cudaStream_t) { std::free(p); return 0; }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind,
                                          cudaStream_t)
{
    std::memmove(d, s, n);
    return 0;
}
static inline cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch,
                                            size_t width, size_t height, cudaMemcpyKind,
                                            cudaStream_t)
{
    for (size_t r = 0; r < height; r++)
        std::memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    return 0;
}
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int a = 1, unsigned int b = 1, unsigned int c = 1) : x(a), y(b), z(c) {}
};
struct cp_emu_warp { std::barrier<> *bar; unsigned char slot[32][16]; };
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static std::barrier<> *cp_emu_block_bar;
static thread_local cp_emu_warp *cp_emu_w;
static thread_local int cp_emu_lane;
static std::mutex cp_emu_mtx;
static inline void __syncthreads(void) { cp_emu_block_bar->arrive_and_wait(); }
static inline void __syncwarp(unsigned int = 0xffffffffu) { cp_emu_w->bar->arrive_and_wait(); }
template <class T> static T __shfl_down_sync(unsigned int, T v, int off)
{
    std::memcpy(cp_emu_w->slot[cp_emu_lane], &v, sizeof(T));
    cp_emu_w->bar->arrive_and_wait();
    T r = v;
    if (cp_emu_lane + off < 32) std::memcpy(&r, cp_emu_w->slot[cp_emu_lane + off], sizeof(T));
    cp_emu_w->bar->arrive_and_wait();
    return r;
}
// Rounded products that nvcc never contracts (the host compiler emits no FMA without -march).
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
template <class T> static T atomicAdd(T *p, T v)
{
    std::lock_guard<std::mutex> g(cp_emu_mtx);
    T old = *p;
    *p = old + v;
    return old;
}
// One OS thread per thread of a block; the blocks of the grid run one after another.
static void cp_emu_launch(dim3 grid, dim3 block, std::function<void()> body)
{
    blockDim = block;
    gridDim = grid;
    int nt = block.x * block.y * block.z, nw = (nt + 31) / 32;
    std::barrier<> bbar(nt);
    cp_emu_block_bar = &bbar;
    std::vector<std::unique_ptr<std::barrier<>>> wbars;
    std::vector<cp_emu_warp> warps(nw);
    for (int w = 0; w < nw; w++) {
        wbars.emplace_back(new std::barrier<>(w == nw - 1 ? nt - 32 * w : 32));
        warps[w].bar = wbars.back().get();
    }
    std::vector<std::thread> ts;
    for (int t = 0; t < nt; t++)
        ts.emplace_back([&, t]() {
            threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
            cp_emu_w = &warps[t / 32];
            cp_emu_lane = t % 32;
            for (unsigned int bz = 0; bz < grid.z; bz++)
                for (unsigned int by = 0; by < grid.y; by++)
                    for (unsigned int bx = 0; bx < grid.x; bx++) {
                        blockIdx = dim3(bx, by, bz);
                        body();
                        bbar.arrive_and_wait();
                    }
        });
    for (auto &th : ts) th.join();
}
"""


def emulated_source(cuda_source: str) -> str:
    """The policy's ``.cu`` text with each ``k<<<grid, block>>>(args);`` rewritten to
    ``cp_emu_launch(dim3(grid), dim3(block), [&]() { k(args); });`` (other text unchanged).

    Raises:
        ValueError: a ``<<<`` without its ``>>>``.
    """
    out, i = [], 0
    while (k := cuda_source.find("<<<", i)) >= 0:
        j = k
        while j > 0 and (cuda_source[j - 1].isalnum() or cuda_source[j - 1] == "_"):
            j -= 1
        e = cuda_source.find(">>>", k)
        if e < 0:
            raise ValueError("a kernel launch '<<<' without its '>>>'")
        cfg, depth = cuda_source[k + 3 : e], 0
        for cut, ch in enumerate(cfg):
            depth += ch in "(["
            depth -= ch in ")]"
            if ch == "," and depth == 0:
                break
        depth = 0
        for q in range(e + 3, len(cuda_source)):
            depth += cuda_source[q] == "("
            depth -= cuda_source[q] == ")"
            if depth == 0:
                break
        launch = (f"cp_emu_launch(dim3({cfg[:cut]}), dim3({cfg[cut + 1:]}), "
                  f"[&]() {{ {cuda_source[j:k]}({cuda_source[e + 4:q]}); }})")
        out.append(cuda_source[i:j] + launch)
        i = q + 1
    out.append(cuda_source[i:])
    return "".join(out)


@functools.lru_cache(maxsize=1)
def have_emulation() -> bool:
    """Whether g++ compiles C++20 ``<barrier>`` (the emulation's one requirement)."""
    if shutil.which("g++") is None:
        return False
    r = subprocess.run(["g++", "-std=c++20", "-x", "c++", "-fsyntax-only", "-"],
                       input="#include <barrier>\nstd::barrier<> b(1);\n", text=True,
                       capture_output=True, check=False)
    return r.returncode == 0


def build_emulated(cuda_source: str, out_dir: Path, name: str = "candidate",
                   extra_flags: Sequence[str] = (), timeout_s: float = 300.0) -> Path:
    """Compile the policy's ``.cu`` text for the CPU: ``out_dir/<name>.so``, a shared library
    whose ``<fn>_cuda`` symbol takes host pointers where the CUDA one takes device pointers.

    Args:
        cuda_source: the candidate (:attr:`Proposal.source`).
        out_dir: folder for the header, the C++ file and the library (created).
        name: file stem.
        extra_flags: more g++ flags (the problem's ``-I``/``-D``).
        timeout_s: limit of the compile, seconds.

    Raises:
        ToolchainError: no g++ with C++20 ``<barrier>``, or the compile failed or timed out
            (the message carries g++'s first error line).
    """
    if not have_emulation():
        raise ToolchainError("the CUDA emulation needs g++ with C++20 <barrier> (GCC 11 or later)")
    out_dir.mkdir(parents=True, exist_ok=True)
    inc = out_dir / "emu-include"
    inc.mkdir(exist_ok=True)
    # Several builds may share out_dir at once (a plan's candidates built in parallel):
    # a header is replaced atomically, and only when it differs, never truncated under a
    # compiler reading it.
    for name_h, text in (("cuda_runtime.h", ""), ("cp_emu.h", EMULATION_HEADER)):
        target = inc / name_h
        if not (target.is_file() and target.read_text() == text):
            write_text_atomic(target, text)
    cpp, lib = out_dir / f"{name}.cpp", out_dir / f"{name}.so"
    cpp.write_text(emulated_source(cuda_source))
    cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-include",
           str(inc / "cp_emu.h"), f"-I{inc}", *extra_flags, "-o", str(lib), str(cpp)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"g++ (emulation) timed out after {timeout_s:g} s on {cpp}") from None
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:300])
        raise ToolchainError(f"g++ (emulation) failed on {cpp}: {first}")
    return lib
