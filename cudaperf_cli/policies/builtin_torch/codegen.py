"""Fast-format candidate files from a :class:`~.fusion.FusionPlan` (pure, no torch).

:func:`generate` returns ``{"kernel.cu": ..., "model.py": ...}``:

* ``kernel.cu``: float32 CUDA, one ``extern "C" int <kernel>(<pointers>, <int64 sizes>,
  <float constants>, cudaStream_t stream)`` launcher per fused kernel.  Elementwise
  kernels are grid-stride loops; reduction kernels walk ``[outer, R, inner]`` (computed
  at run time from the shapes): ``inner == 1`` runs one block (or, in the warp variant, one
  warp) per row with warp-shuffle + shared-memory reductions, ``inner > 1`` runs 32
  columns x ``block/32`` rows per block (strided reductions).  Sizes and broadcast
  strides are launcher arguments; no shape is compiled in.  Kernels are templates on the
  index type (``int`` when every index fits, else ``int64_t``) and, in the float4
  variants, on vectorised loads chosen at run time (sizes divisible by 4 and 16-byte
  aligned pointers), with a scalar fallback.
* ``model.py``: ``ModelNew`` is ``Model``'s class body (its ``__init__`` and helpers copied
  from the problem file, so parameter and buffer names match and ``load_state_dict``
  copies the weights) with a generated ``forward``: PyTorch calls for library ops and
  views, ``lib.<kernel>(...)`` for fused kernels, outputs from ``torch.empty``, inputs made
  contiguous, broadcast strides computed from the run-time shapes by small helpers.
  No fp16/TF32, no try/except, no caching, no side streams.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cudaperf_cli.policies.base import PolicyRefusal
from cudaperf_cli.policies.builtin_torch.fusion import (
    POSITION_OPS,
    CRef,
    FusedKernel,
    FusionPlan,
    PRef,
    Prim,
    RowLen,
    XRef,
    _bind,
    _broadcast,
)

__all__ = ["VARIANTS", "Variant", "generate", "generate_cuda", "generate_model"]


@dataclass(frozen=True)
class Variant:
    """Code-generation choices of one turn.

    Attributes:
        name: short id (``"block256"``).
        block: threads per block (a multiple of 32, at most 1024).
        vec: float4 loads/stores when the run-time sizes allow (else the scalar loop).
        warp_rows: rows of at most ``warp_max`` elements get one warp each
            (``block / 32`` rows per block) instead of one block.
        warp_max: the row length limit for ``warp_rows``.
        one_pass: kernels of the one-pass plan (:func:`~.fusion.plan_fusion`'s
            ``one_pass``): variances and softmax sums on the level of the mean or max.
        unroll_pool: pooled reads with the traced window as constants (``cp_pool_k``:
            the window loops unrolled), the run-time window's loops where it differs.
        tile_pool: an elementwise kernel whose one pooled read is a 1-D or 2-D pool
            with a traced window takes it from a shared-memory tile of the input
            (:meth:`_KernelWriter.tile_kernel`) when the run-time window is the traced one.
        wide_cols: reductions over a middle dim (the column kernel) take tiles of
            :data:`COL_WIDE` columns (4 warps side by side: a block reads 512 contiguous
            bytes of each row) where ``inner`` has that many, else 32 (one warp).
    """

    name: str
    block: int
    vec: bool
    warp_rows: bool = False
    warp_max: int = 1024
    one_pass: bool = False
    unroll_pool: bool = False
    tile_pool: bool = False
    wide_cols: bool = False

    def describe(self, pooling: bool = False, tiling: bool = False) -> str:
        """One line of the choices; ``pooling``: the plan has a pooled read with a traced
        window (names ``unroll_pool``, :func:`unrolls_pooling`); ``tiling``: one of them gets
        a shared-memory tile under this variant (names ``tile_pool``, :func:`tiles_pooling`)."""
        parts = [f"block {self.block}"]
        parts.append("float4 loads where sizes allow" if self.vec else "scalar loads")
        if self.warp_rows:
            parts.append(f"one warp per row up to {self.warp_max} elements ({self.block // 32} rows per block), "
                         f"8 lanes per row up to {ROW_LANES8_MAX}")
        else:
            parts.append("one block per row")
        parts.append("a few long rows split over the grid")
        if self.one_pass:
            parts.append("variances (shifted sums in double) and softmax sums (online (max, sum) pairs) in one pass")
        if self.wide_cols:
            parts.append(f"middle-dim reductions over tiles of {COL_WIDE} columns")
        if tiling and self.tile_pool:
            parts.append("1-D/2-D pooling windows read from a shared-memory tile of the input")
        if pooling and self.unroll_pool:
            parts.append("pooling windows unrolled as the traced constants" + (" elsewhere" if tiling and self.tile_pool else ""))
        return ", ".join(parts)

    def to_json(self, pooling: bool = False, tiling: bool = False) -> dict[str, Any]:
        return {"name": self.name, "block": self.block, "vec": self.vec, "warp_rows": self.warp_rows,
                "warp_max": self.warp_max, "one_pass": self.one_pass, "unroll_pool": self.unroll_pool,
                "tile_pool": self.tile_pool, "wide_cols": self.wide_cols, "description": self.describe(pooling, tiling)}


#: The variants :class:`~.policy.BuiltinTorchPolicy` proposes, one per turn.
VARIANTS: tuple[Variant, ...] = (
    Variant("block256", 256, False),
    Variant("block256_vec4", 256, True, one_pass=True, unroll_pool=True),
    Variant("block512_vec4_warprows", 512, True, warp_rows=True, unroll_pool=True, tile_pool=True, wide_cols=True),
)

# ---------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------

_PRELUDE = r"""#include <cuda_runtime.h>
#include <cstdint>
#include <math.h>

#define CP_INF __int_as_float(0x7f800000)

/* NaN-propagating helpers (PyTorch's semantics for relu, clamp, max, min). */
__device__ __forceinline__ float cp_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float cp_min(float a, float b) { return (a != a || a < b) ? a : b; }
__device__ __forceinline__ float cp_xlogy(float x, float y) { return y != y ? y : (x == 0.0f ? 0.0f : x * logf(y)); }
__device__ __forceinline__ float cp_relu(float a) { return a != a ? a : fmaxf(a, 0.0f); }
__device__ __forceinline__ float cp_clamp(float a, float lo, float hi) { return a != a ? a : fminf(fmaxf(a, lo), hi); }
__device__ __forceinline__ float cp_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
__device__ __forceinline__ float cp_silu(float a) { return a / (1.0f + expf(-a)); }
__device__ __forceinline__ float cp_gelu(float a) { return a * 0.5f * (1.0f + erff(a * 0.70710678118654752440f)); }
__device__ __forceinline__ float cp_gelu_tanh(float a) {
    const float inner = 0.79788456080286535588f * (a + 0.044715f * a * a * a);
    return 0.5f * a * (1.0f + tanhf(inner));
}
__device__ __forceinline__ float cp_mish(float a) { return a * tanhf(log1pf(expf(a))); }
__device__ __forceinline__ float cp_softplus(float a, float beta, float threshold) {
    return (a * beta) > threshold ? a : log1pf(expf(a * beta)) / beta;
}
__device__ __forceinline__ float cp_elu(float a, float alpha) { return a > 0.0f ? a : alpha * expm1f(a); }
__device__ __forceinline__ float cp_celu(float a, float alpha) { return a > 0.0f ? a : alpha * expm1f(a / alpha); }
__device__ __forceinline__ float cp_selu(float a) {
    return 1.0507009873554804934193349852946f * (a > 0.0f ? a : 1.6732632423543772848170429916717f * expm1f(a));
}
__device__ __forceinline__ float cp_leaky_relu(float a, float slope) { return a > 0.0f ? a : a * slope; }
__device__ __forceinline__ float cp_hardsigmoid(float a) { return fminf(fmaxf(a + 3.0f, 0.0f), 6.0f) / 6.0f; }
__device__ __forceinline__ float cp_hardswish(float a) { return a * fminf(fmaxf(a + 3.0f, 0.0f), 6.0f) / 6.0f; }
__device__ __forceinline__ float cp_logsigmoid(float a) { return fminf(a, 0.0f) - log1pf(expf(-fabsf(a))); }

/* The online softmax (Milakov and Gimelshein 2018, "Online normalizer calculation for
 * softmax"): a thread's running max m and s = sum(exp(x - m)) over its elements, s rescaled
 * where m grows (s in double, as the other sums).  -inf elements add 0 (exp(x - max) where
 * the max is finite; a row of -inf alone sums to 0); a NaN makes s NaN, and so does a +inf
 * once the pair is combined (cp_lse_comb: s * exp(inf - inf)), as exp(x - max) does in the
 * two passes.  Every tree combines each thread's pair at least once (with the identity). */
__device__ __forceinline__ void cp_lse_push(float &m, double &s, float x) {
    if (x > m) {
        s = s * (double)expf(m - x) + 1.0;
        m = x;
    } else if (x != -CP_INF) {
        s += (double)expf(x - m);
        if (x != x) m = x;
    }
}
/* Two (max, sum) pairs as one: each sum rescaled to the larger max (an empty pair, sum 0,
 * adds 0).  Commutative, so a butterfly leaves every lane the same pair. */
__device__ __forceinline__ float2 cp_lse_comb(float2 a, float2 b) {
    const float m = cp_max(a.x, b.x);
    const float sa = a.y == 0.0f ? 0.0f : a.y * expf(a.x - m);
    const float sb = b.y == 0.0f ? 0.0f : b.y * expf(b.x - m);
    return make_float2(m, sa + sb);
}
/* Reductions: OP 0 = sum, 1 = max, 2 = min with T float, or double for the shifted sums of
 * a one-pass variance (cp_var_sums); OP 3 = the online softmax's (max, sum) pairs, T float2. */
template <int OP, typename T = float> __device__ __forceinline__ T cp_ident() {
    if constexpr (OP == 3) return make_float2(-CP_INF, 0.0f);
    else return OP == 0 ? T(0) : (OP == 1 ? -T(CP_INF) : T(CP_INF));
}
template <int OP, typename T> __device__ __forceinline__ T cp_comb(T a, T b) {
    if constexpr (OP == 0) return a + b;
    else if constexpr (OP == 3) return cp_lse_comb(a, b);
    else return OP == 1 ? cp_max(a, b) : cp_min(a, b);
}
__device__ __forceinline__ float cp_shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double cp_shfl_xor(double v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ float2 cp_shfl_xor(float2 v, int o) {
    return make_float2(__shfl_xor_sync(0xffffffffu, v.x, o), __shfl_xor_sync(0xffffffffu, v.y, o));
}
/* Over each aligned group of W lanes (W a power of 2 up to 32), every lane of a group ends
   with the same value (butterfly; every OP is commutative); the whole warp takes part, so
   every lane of it must be here. */
template <int OP, int W, typename T> __device__ __forceinline__ T cp_lanes_reduce(T v) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v = cp_comb<OP, T>(v, cp_shfl_xor(v, o));
    return v;
}
template <int OP, typename T> __device__ __forceinline__ T cp_warp_reduce(T v) { return cp_lanes_reduce<OP, 32, T>(v); }
/* Whole block (blockDim.x a multiple of 32); every thread gets the result. */
template <int OP, typename T> __device__ __forceinline__ T cp_block_reduce(T v, T *sm) {
    v = cp_warp_reduce<OP, T>(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sm may still be read by the previous reduction */
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    v = lane < nw ? sm[lane] : cp_ident<OP, T>();
    return cp_warp_reduce<OP, T>(v);
}
/* Column blocks of CW columns (32 or 128): thread (tx, ty) = (t % CW, t / CW); reduce over
 * ty for each tx. */
template <int OP, int CW, typename T> __device__ __forceinline__ T cp_col_reduce(T v, T *sm) {
    const int tx = threadIdx.x % CW, ny = blockDim.x / CW;
    __syncthreads();
    sm[threadIdx.x] = v;
    __syncthreads();
    T r = cp_ident<OP, T>();
    for (int k = 0; k < ny; ++k) r = cp_comb<OP, T>(r, sm[k * CW + tx]);
    return r;
}
/* The variance of a row from its shifted sums (one pass): s = sum(x - K), q = sum((x - K)^2)
 * over n elements (K: the row's first element, so that the cancellation in q / n - (s / n)^2
 * stays small; the sums are double, each square exact); c: the correction (1: unbiased). */
__device__ __forceinline__ float cp_var_sums(double s, double q, double n, double c) {
    const double m = s / n;
    double v = q / n - m * m;
    if (v < 0.0) v = 0.0; /* rounding; a NaN (a NaN or inf in the row, an empty row) stays */
    return (float)(v * n / (n - c));
}
/* A whole-tensor reduction over many blocks: each block writes its partial, and the last
 * block to finish (counted with an atomic after a fence: threadFenceReduction) combines
 * them, computes what follows from the reduced values and resets the counter.  The
 * partials and the counter are static (per kernel and device): two launches of one kernel
 * must not overlap (one stream, as the evaluation and the generated forward use). */
#define CP_SPLIT_MAX 2048
__device__ __forceinline__ bool cp_last_block(unsigned int *done) {
    __shared__ bool last;
    __threadfence(); /* this block's partials are visible before it is counted */
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    return last;
}
template <int OP> __device__ __forceinline__ float cp_combine_parts(const float *p, int n, float *sm) {
    double acc = OP == 0 ? 0.0 : (double)cp_ident<OP>();
    for (int b = threadIdx.x; b < n; b += blockDim.x) {
        const float v = __ldcg(p + b); /* written by other blocks: past L1 */
        acc = OP == 0 ? acc + (double)v : (double)cp_comb<OP>((float)acc, v);
    }
    return cp_block_reduce<OP>((float)acc, sm);
}
/* argmax (MAX) / argmin: (value, index) pairs.  (v, k) beats (bv, bk) when it is NaN and bv
 * is not, or both NaN and k is first; else when v is larger (smaller), or equal and k first:
 * PyTorch's first largest (smallest) element, NaN counting as the largest (smallest).  A
 * total order, so the butterfly leaves every lane the same pair.  The identity is
 * (-inf, 0) (+inf for argmin): it loses to every element but an equal -inf, which index 0
 * then rightly wins (a row of -inf alone gives 0). */
template <bool MAX> __device__ __forceinline__ bool cp_arg_better(float v, int64_t k, float bv, int64_t bk) {
    const bool vn = v != v, bn = bv != bv;
    if (vn || bn) return vn && (!bn || k < bk);
    if (v == bv) return k < bk;
    return MAX ? v > bv : v < bv;
}
template <bool MAX> __device__ __forceinline__ void cp_arg_step(float &bv, int64_t &bk, float v, int64_t k) {
    if (cp_arg_better<MAX>(v, k, bv, bk)) { bv = v; bk = k; }
}
/* A thread's own elements, which come in increasing k (every loop steps forward): (v, k)
 * replaces (bv, bk) when v is larger (smaller), or NaN where bv is not; an equal v never
 * does (the earlier index stays).  Fewer tests per element than cp_arg_step's total order,
 * the same result for such a sequence (the identity's (-inf, 0) included: a thread that saw
 * only -inf keeps index 0, which the trees' total order resolves as cp_arg_step would). */
template <bool MAX> __device__ __forceinline__ void cp_arg_next(float &bv, int64_t &bk, float v, int64_t k) {
    if ((MAX ? v > bv : v < bv) || (v != v && bv == bv)) { bv = v; bk = k; }
}
template <bool MAX, int W = 32> __device__ __forceinline__ int64_t cp_warp_argreduce(float v, int64_t k) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int64_t ok = __shfl_xor_sync(0xffffffffu, (long long)k, o);
        cp_arg_step<MAX>(v, k, ov, ok);
    }
    return k;
}
template <bool MAX> __device__ __forceinline__ int64_t cp_block_argreduce(float v, int64_t k, float *sm) {
    __shared__ int64_t smk[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int64_t ok = __shfl_xor_sync(0xffffffffu, (long long)k, o);
        cp_arg_step<MAX>(v, k, ov, ok);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sm may still be read by the previous reduction */
    if (lane == 0) { sm[warp] = v; smk[warp] = k; }
    __syncthreads();
    v = lane < nw ? sm[lane] : (MAX ? -CP_INF : CP_INF);
    k = lane < nw ? smk[lane] : 0;
    return cp_warp_argreduce<MAX>(v, k);
}
template <bool MAX, int CW> __device__ __forceinline__ int64_t cp_col_argreduce(float v, int64_t k, float *sm, int64_t *smk) {
    const int tx = threadIdx.x % CW, ny = blockDim.x / CW;
    __syncthreads();
    sm[threadIdx.x] = v;
    smk[threadIdx.x] = k;
    __syncthreads();
    float bv = MAX ? -CP_INF : CP_INF;
    int64_t bk = 0;
    for (int j = 0; j < ny; ++j) cp_arg_step<MAX>(bv, bk, sm[j * CW + tx], smk[j * CW + tx]);
    return bk;
}
/* Scans (PROD: product, else sum).  cp_block_exscan: the block's exclusive scan of one
 * value per thread (thread order), and the block's total in total; warp shuffles, then one
 * warp over the warps' totals.  Every thread of the block calls it. */
template <bool PROD> __device__ __forceinline__ float cp_scomb(float a, float b) { return PROD ? a * b : a + b; }
template <bool PROD> __device__ __forceinline__ float cp_block_exscan(float v, float *sm, float &total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float id = PROD ? 1.0f : 0.0f;
    float x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x = cp_scomb<PROD>(y, x);
    }
    __syncthreads(); /* the previous tile's readers of sm are done */
    if (lane == 31) sm[warp] = x;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nw ? sm[lane] : id;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w = cp_scomb<PROD>(y, w);
        }
        if (lane < nw) sm[lane] = w;
    }
    __syncthreads();
    total = sm[nw - 1];
    float before = __shfl_up_sync(0xffffffffu, x, 1);
    if (lane == 0) before = id;
    return warp == 0 ? before : cp_scomb<PROD>(sm[warp - 1], before);
}
/* A bool mask's 4 elements i0..i0+3 (i0 % 4 == 0, p 4-byte aligned) as 0.0f/1.0f. */
__device__ __forceinline__ void cp_load4(const bool *__restrict__ p, int64_t i0, float (&v)[4]) {
    const uchar4 t = *reinterpret_cast<const uchar4 *>(p + i0);
    v[0] = t.x ? 1.0f : 0.0f; v[1] = t.y ? 1.0f : 0.0f; v[2] = t.z ? 1.0f : 0.0f; v[3] = t.w ? 1.0f : 0.0f;
}
template <typename IdxT>
__device__ __forceinline__ void cp_bload4(const bool *__restrict__ p, IdxT i0, IdxT inner, IdxT size, float (&v)[4]) {
#pragma unroll
    for (int l = 0; l < 4; ++l) v[l] = p[((i0 + l) / inner) % size] ? 1.0f : 0.0f;
}
/* int64 values (cross entropy's class indices) as floats: exact below 2^24. */
__device__ __forceinline__ void cp_load4(const int64_t *__restrict__ p, int64_t i0, float (&v)[4]) {
#pragma unroll
    for (int l = 0; l < 4; ++l) v[l] = (float)p[i0 + l];
}
template <typename IdxT>
__device__ __forceinline__ void cp_bload4(const int64_t *__restrict__ p, IdxT i0, IdxT inner, IdxT size, float (&v)[4]) {
    if ((inner & 3) == 0) {
        const float t = (float)p[(i0 / inner) % size];
        v[0] = t; v[1] = t; v[2] = t; v[3] = t;
    } else {
#pragma unroll
        for (int l = 0; l < 4; ++l) v[l] = (float)p[((i0 + l) / inner) % size];
    }
}
/* Broadcast operand p[(i / inner) % size] for the 4 elements i0..i0+3 (i0 % 4 == 0). */
template <typename IdxT>
__device__ __forceinline__ void cp_bload4(const float *__restrict__ p, IdxT i0, IdxT inner, IdxT size, float (&v)[4]) {
    if (inner == 1 && (size & 3) == 0) {
        const float4 t = *reinterpret_cast<const float4 *>(p + (i0 % size));
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else if ((inner & 3) == 0) {
        const float t = p[(i0 / inner) % size];
        v[0] = t; v[1] = t; v[2] = t; v[3] = t;
    } else {
#pragma unroll
        for (int l = 0; l < 4; ++l) v[l] = p[((i0 + l) / inner) % size];
    }
}
/* The same in a contiguous row kernel, without index arithmetic where the operand's layout
 * along the row allows (HOW, uniform over the grid, from cp_row_how): 1, the operand runs
 * along the row (inner 1, size R: layer norm's weight, a linear's bias before a softmax):
 * element pos of the row is p[pos]; 2, it is constant along each row (a channel's bias
 * under a norm over the last dim): p[at], at computed once per row. */
template <typename IdxT>
__device__ __forceinline__ void cp_bload4_row(const float *__restrict__ p, IdxT i0, IdxT pos, int how, IdxT at,
                                              IdxT inner, IdxT size, float (&v)[4]) {
    if (how == 1) {
        const float4 t = *reinterpret_cast<const float4 *>(p + pos);
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else if (how == 2) {
        const float t = p[at];
        v[0] = t; v[1] = t; v[2] = t; v[3] = t;
    } else {
        cp_bload4<IdxT>(p, i0, inner, size, v);
    }
}
/* cp_bload4_row's HOW of an operand read at (i / inner) % size in rows of R elements. */
template <typename IdxT>
__device__ __forceinline__ int cp_row_how(IdxT inner, IdxT size, IdxT R) {
    return (inner == 1 && size == R) ? 1 : (R > 0 && inner % R == 0) ? 2 : 0;
}
__device__ __forceinline__ void cp_load4(const float *__restrict__ p, int64_t i0, float (&v)[4]) {
    const float4 t = *reinterpret_cast<const float4 *>(p + i0);
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
__device__ __forceinline__ void cp_store4(float *__restrict__ p, int64_t i0, const float (&v)[4]) {
    *reinterpret_cast<float4 *>(p + i0) = make_float4(v[0], v[1], v[2], v[3]);
}
/* The average's divisor for the window starting at (z0, y0, x0) (ATen's rules, as cp_pool
   says), 0 where the window holds no input element (the average is then 0). */
template <typename IdxT>
__device__ __forceinline__ IdxT cp_pool_divisor(IdxT z0, IdxT y0, IdxT x0, IdxT kd, IdxT kh, IdxT kw,
    IdxT id, IdxT ih, IdxT iw, IdxT pd, IdxT ph, IdxT pw, IdxT cip, IdxT divisor) {
    const IdxT z1 = z0 + kd < id + pd ? z0 + kd : id + pd;
    const IdxT y1 = y0 + kh < ih + ph ? y0 + kh : ih + ph;
    const IdxT x1 = x0 + kw < iw + pw ? x0 + kw : iw + pw;
    const IdxT za = z0 > 0 ? z0 : 0, ya = y0 > 0 ? y0 : 0, xa = x0 > 0 ? x0 : 0;
    const IdxT zb = z1 < id ? z1 : id, yb = y1 < ih ? y1 : ih, xb = x1 < iw ? x1 : iw;
    if (za >= zb || ya >= yb || xa >= xb) return 0;
    if (divisor) return divisor;
    return cip ? (z1 - z0) * (y1 - y0) * (x1 - x0) : (zb - za) * (yb - ya) * (xb - xa);
}
/* Max (OP 1) or average (OP 0) pooling of output element i over the last three dims (1-D
   and 2-D pooling pass leading 1s), as ATen's CUDA kernels: the max starts at -inf, skips
   padding and propagates NaN (max_pool_forward_nchw); the average sums the window clipped to
   the input and divides by divisor_override, or by the window clipped to input + padding
   (count_include_pad) or to the input (avg_pool3d_cuda_update_output), 0 for an empty one. */
template <int OP, typename IdxT>
__device__ __forceinline__ float cp_pool(const float *__restrict__ x, IdxT i,
    IdxT id, IdxT ih, IdxT iw, IdxT od, IdxT oh, IdxT ow, IdxT kd, IdxT kh, IdxT kw,
    IdxT sd, IdxT sh, IdxT sw, IdxT pd, IdxT ph, IdxT pw, IdxT dd, IdxT dh, IdxT dw,
    IdxT cip, IdxT divisor) {
    const IdxT xo = i % ow;
    IdxT t = i / ow;
    const IdxT yo = t % oh;
    t /= oh;
    const IdxT zo = t % od;
    t /= od;
    const float *__restrict__ p = x + t * (id * ih * iw);
    const IdxT z0 = zo * sd - pd, y0 = yo * sh - ph, x0 = xo * sw - pw;
    if (OP == 1) {
        float m = -CP_INF;
        for (IdxT a = 0; a < kd; ++a) {
            const IdxT z = z0 + a * dd;
            if (z < 0 || z >= id) continue;
            for (IdxT b = 0; b < kh; ++b) {
                const IdxT y = y0 + b * dh;
                if (y < 0 || y >= ih) continue;
                const float *__restrict__ row = p + (z * ih + y) * iw;
                for (IdxT c = 0; c < kw; ++c) {
                    const IdxT xx = x0 + c * dw;
                    if (xx < 0 || xx >= iw) continue;
                    const float v = __ldg(row + xx);
                    if (v > m || v != v) m = v;
                }
            }
        }
        return m;
    }
    const IdxT cnt = cp_pool_divisor<IdxT>(z0, y0, x0, kd, kh, kw, id, ih, iw, pd, ph, pw, cip, divisor);
    if (cnt == 0) return 0.0f;
    const IdxT za = z0 > 0 ? z0 : 0, ya = y0 > 0 ? y0 : 0, xa = x0 > 0 ? x0 : 0;
    const IdxT z1 = z0 + kd < id ? z0 + kd : id, y1 = y0 + kh < ih ? y0 + kh : ih, x1 = x0 + kw < iw ? x0 + kw : iw;
    float s = 0.0f;
    for (IdxT z = za; z < z1; ++z)
        for (IdxT y = ya; y < y1; ++y) {
            const float *__restrict__ row = p + (z * ih + y) * iw;
            for (IdxT xx = xa; xx < x1; ++xx) s += __ldg(row + xx);
        }
    return s / (float)cnt;
}
/* cp_pool with the window (K*, S*, P*, D*, CIP, DIV) as constants and ND pooled dims (the
   leading extents 1): the window loops unroll into loads at fixed offsets, each guarded by
   its bounds test, the index splits only over the pooled dims. The same elements in the
   same order as cp_pool, so the same float results. */
template <int OP, int ND, int KD, int KH, int KW, int SD, int SH, int SW, int PD, int PH, int PW,
          int DD, int DH, int DW, int CIP, int DIV, typename IdxT>
__device__ __forceinline__ float cp_pool_k(const float *__restrict__ x, IdxT i,
    IdxT id, IdxT ih, IdxT iw, IdxT od, IdxT oh, IdxT ow) {
    if (ND < 3) { id = 1; od = 1; }
    if (ND < 2) { ih = 1; oh = 1; }
    const IdxT xo = i % ow;
    IdxT t = i / ow;
    IdxT yo = 0, zo = 0;
    if (ND >= 2) { yo = t % oh; t /= oh; }
    if (ND >= 3) { zo = t % od; t /= od; }
    const float *__restrict__ p = x + t * (id * ih * iw);
    const IdxT z0 = zo * SD - PD, y0 = yo * SH - PH, x0 = xo * SW - PW;
    float m = OP == 1 ? -CP_INF : 0.0f;
#pragma unroll
    for (int a = 0; a < KD; ++a) {
        const IdxT z = z0 + a * DD;
        const bool zin = ND < 3 || (z >= 0 && z < id);
#pragma unroll
        for (int b = 0; b < KH; ++b) {
            const IdxT y = y0 + b * DH;
            const bool yin = zin && (ND < 2 || (y >= 0 && y < ih));
#pragma unroll
            for (int c = 0; c < KW; ++c) {
                const IdxT xx = x0 + c * DW;
                if (yin && xx >= 0 && xx < iw) {
                    const float v = __ldg(p + (z * ih + y) * iw + xx);
                    if (OP == 1) {
                        if (v > m || v != v) m = v;
                    } else {
                        m += v;
                    }
                }
            }
        }
    }
    if (OP == 1) return m;
    const IdxT cnt = cp_pool_divisor<IdxT>(z0, y0, x0, KD, KH, KW, id, ih, iw, PD, PH, PW, CIP, DIV);
    return cnt ? m / (float)cnt : 0.0f;
}
inline bool cp_aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
inline int64_t cp_sms() {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    return v > 0 ? v : 1;
}
inline unsigned cp_grid(int64_t blocks) {
    if (blocks < 1) return 1u;
    return blocks > 1048576 ? 1048576u : (unsigned)blocks;
}
"""

#: Appended to the prelude when a kernel updates a BatchNorm module's running statistics:
#: the module's forward also counts the batch (``num_batches_tracked += 1``, int64).
_COUNT_PRELUDE = r"""
__global__ void cp_count_batch(int64_t *n) { if (threadIdx.x == 0) *n += 1; }  /* one warp, one thread counts */
"""

#: Appended to the prelude when a kernel reduces rows (they may be split over the grid).
_SPLIT_PRELUDE = r"""#include <cooperative_groups.h>

/* Few, long rows (batch norm's channels, KernelBench's 16 rows of layer norm) spread over
 * the grid: MODE 2 of a row kernel runs outer * S blocks, S per row, all resident at once
 * (a cooperative launch, at most CP_GRID_MAX blocks); each block reduces its share of the
 * row, writes one partial, the grid synchronises, and every block of the row combines the
 * row's S partials in a fixed order (the same value in each: deterministic).
 * More long rows than stay resident at once, too few to fill the last wave of one block per
 * row (KernelBench's 896 group-norm rows of 2M elements: 1.4 waves): MODE 3 runs the same
 * outer * S blocks, none of them waiting for another, in depth + 1 launches, phase 0 ..
 * depth.  In phase p a block runs reduction level p + 1's loop over its share and writes its
 * partial; the levels before combine the partials the earlier launches wrote, as MODE 2
 * does after its synchronisation; the last phase writes the outputs.
 * part: the row's S slots in a static __device__ array of the kernel, CP_PART_MAX values per
 * reduction (two launches of one kernel must not overlap: one stream, as the evaluation and
 * the generated forward use). */
#define CP_GRID_MAX 4096
#define CP_PART_MAX 65536
template <int OP, typename T> __device__ __forceinline__ T cp_phase_reduce(T v, T *sm, T *part, unsigned rank,
                                                               unsigned S, bool write) {
    if (write) { /* this block's partial */
        v = cp_block_reduce<OP, T>(v, sm);
        if (threadIdx.x == 0) part[rank] = v;
        return v;
    }
    T r = cp_ident<OP, T>(); /* the row's partials: thread t takes t, t + blockDim.x, ..., then the tree */
    for (unsigned b = threadIdx.x; b < S; b += blockDim.x) r = cp_comb<OP, T>(r, __ldcg(part + b));
    return cp_block_reduce<OP, T>(r, sm);
}
template <int OP, typename T> __device__ __forceinline__ T cp_grid_reduce(T v, T *sm, T *part,
                                                              unsigned rank, unsigned S) {
    cp_phase_reduce<OP, T>(v, sm, part, rank, S, true);
    cooperative_groups::this_grid().sync();
    return cp_phase_reduce<OP, T>(v, sm, part, rank, S, false);
}
/* A channel row's element c = n * inner + s (0 <= s < inner) advanced by a step of
 * dn * inner + ds elements (ds < inner): no division per element. */
template <typename IdxT>
__device__ __forceinline__ void cp_chan_step(IdxT &n, IdxT &s, IdxT dn, IdxT ds, IdxT inner) {
    s += ds;
    n += dn;
    if (s >= inner) { s -= inner; ++n; }
}
/* Blocks of kern (block threads) resident at once on the current device (0 where the
 * occupancy query fails); cp_coop_fill: 0 also where the device cannot launch cooperatively. */
template <typename K> inline int64_t cp_fill(K *kern, int block) {
    int per = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, block, 0) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return (int64_t)per * cp_sms();
}
template <typename K> inline int64_t cp_coop_fill(K *kern, int block) {
    int dev = 0, coop = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess || !coop) {
        cudaGetLastError();
        return 0;
    }
    return cp_fill(kern, block);
}
/* Blocks per row of a phased launch (MODE 3), 0 for one block per row: where one block per
 * row leaves its waves under 90% full (outer rows, fill0 resident blocks of MODE 0), S such
 * that outer * S blocks make about 4 waves of MODE 3's fill3, at least 16 elements a thread,
 * outer * S <= CP_PART_MAX. */
inline int64_t cp_phase_blocks(int64_t fill0, int64_t fill3, int64_t outer, int64_t R, int block) {
    if (fill0 <= 0 || fill3 <= 0 || outer <= 0) return 0;
    const int64_t waves = (outer + fill0 - 1) / fill0;
    if (outer * 10 >= waves * fill0 * 9) return 0;
    int64_t S = (4 * fill3 + outer - 1) / outer;
    if (S > R / (16 * (int64_t)block)) S = R / (16 * (int64_t)block);
    if (S * outer > CP_PART_MAX) S = CP_PART_MAX / outer;
    return S >= 2 ? S : 0;
}
/* Blocks per row of a split launch: as many as stay resident (fill), at least 4 elements a
 * thread, outer * S <= CP_GRID_MAX; under 2, no split (0). */
inline int64_t cp_split_blocks(int64_t fill, int64_t outer, int64_t R, int block) {
    if (outer <= 0) return 0;
    int64_t S = fill / outer;
    if (S > R / (4 * (int64_t)block)) S = R / (4 * (int64_t)block);
    if (S * outer > CP_GRID_MAX) S = CP_GRID_MAX / outer;
    return S >= 2 ? S : 0;
}
/* kern<<<grid, block, 0, stream>>>(args...) as a cooperative launch (grid.sync() allowed). */
template <typename... P, typename... A>
static cudaError_t cp_launch_coop(void (*kern)(P...), unsigned grid, unsigned block, cudaStream_t stream, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kern, ((P)args)...);
}
"""

_UNARY_FN = {
    "id": "{0}", "neg": "(-{0})", "relu": "cp_relu({0})", "sigmoid": "cp_sigmoid({0})",
    "tanh": "tanhf({0})", "exp": "expf({0})", "exp2": "exp2f({0})", "log": "logf({0})",
    "log2": "log2f({0})", "log10": "log10f({0})", "log1p": "log1pf({0})", "expm1": "expm1f({0})",
    "sqrt": "sqrtf({0})", "rsqrt": "rsqrtf({0})", "abs": "fabsf({0})", "reciprocal": "(1.0f / {0})",
    "square": "({0} * {0})", "sin": "sinf({0})", "cos": "cosf({0})", "erf": "erff({0})",
    "gelu": "cp_gelu({0})", "gelu_tanh": "cp_gelu_tanh({0})", "silu": "cp_silu({0})",
    "mish": "cp_mish({0})", "selu": "cp_selu({0})", "hardsigmoid": "cp_hardsigmoid({0})",
    "hardswish": "cp_hardswish({0})", "softsign": "({0} / (1.0f + fabsf({0})))",
    "logsigmoid": "cp_logsigmoid({0})", "floor": "floorf({0})", "ceil": "ceilf({0})",
    "round": "rintf({0})", "trunc": "truncf({0})", "inf_to_zero": "(fabsf({0}) == CP_INF ? 0.0f : {0})",
}
_NARY_FN = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "pow": "powf({0}, {1})", "maximum": "cp_max({0}, {1})", "minimum": "cp_min({0}, {1})",
    "leaky_relu": "cp_leaky_relu({0}, {1})", "elu": "cp_elu({0}, {1})", "celu": "cp_celu({0}, {1})",
    "softplus": "cp_softplus({0}, {1}, {2})", "clamp": "cp_clamp({0}, {1}, {2})",
    "xlogy": "cp_xlogy({0}, {1})", "lse_finish": "({1} == CP_INF ? {1} : logf({0}) + {1})",
}
_RED_OP = {"red_sum": 0, "red_max": 1, "red_min": 2}
#: The sizes a pooled leaf ``L<i>`` passes (``L<i>_id`` ...), in order: input and output
#: extents, window, stride, padding, dilation (depth, height, width; 1-D and 2-D pooling
#: have leading 1s and 0 padding), count_include_pad (0/1), divisor_override (0: none).
POOL_SIZES = ("id", "ih", "iw", "od", "oh", "ow", "kd", "kh", "kw", "sd", "sh", "sw",
              "pd", "ph", "pw", "dd", "dh", "dw", "cip", "div")
#: The longest row the warp-rows variants give 8 lanes (MODE 4: four rows a warp); longer
#: rows up to :attr:`Variant.warp_max` get a warp (MODE 1).  Level 2's 34 (layer norm over
#: rows of 64) left half of each warp idle at one warp per row (twenty-second session).
ROW_LANES8_MAX = 64
#: Columns per tile of :attr:`Variant.wide_cols`' column kernels: 4 warps side by side, a
#: block reading 512 contiguous bytes of each row it walks (32 columns: 128 bytes).
#: KernelBench's middle-dim reductions of [128, 4096, 4095] ran at 3.0-3.7 TB/s with 32
#: columns (PyTorch eager 4.07; twenty-fourth session): measured next on the H200.
COL_WIDE = 128
#: The largest window (kd * kh * kw elements) :attr:`Variant.unroll_pool` unrolls.
POOL_UNROLL_MAX = 64


def unrolls_pooling(plan: FusionPlan) -> bool:
    """Whether a pooled read of ``plan`` gets a traced window (:func:`pool_window`)."""
    return any(pool_window(next(p for p in k.prims if p.id == l.pool), l.shape) is not None
               for k in plan.kernels for l in k.leaves if l.pool is not None)


def pool_window(p: Prim, shape: Sequence[int]) -> tuple[int, ...] | None:
    """The traced window of pooling primitive ``p`` over an input of ``shape``: the 14
    launcher sizes after the extents (``POOL_SIZES[6:]``: window, stride, padding,
    dilation, count_include_pad, divisor_override), computed by model.py's own
    ``_cp_pool``; None when an argument was not traced as an int or the window has more
    than :data:`POOL_UNROLL_MAX` elements."""
    traced = p.params.get("traced")
    if not traced:
        return None
    try:
        sizes = _MODEL_HELPERS["_cp_pool"](tuple(shape), p.params["nd"], **traced)[1]
    except (TypeError, ValueError):
        return None
    window = tuple(sizes[6:])
    return window if window[0] * window[1] * window[2] <= POOL_UNROLL_MAX else None


#: Outputs per thread of a tiled pooling kernel (:meth:`_KernelWriter.tile_kernel`), and the
#: output columns a block of a 2-D tile covers per pass (a 1-D tile: ``block`` columns).
POOL_TILE_PER_THREAD = 4
POOL_TILE_COLS_2D = 64
#: The largest input tile (floats) a block stages in shared memory (static: 48 KB).
POOL_TILE_MAX_FLOATS = 12288


@dataclass(frozen=True)
class PoolTile:
    """The shared-memory tile of a tiled pooling kernel: a block computes ``rows x cols``
    outputs of one (n, c) plane (``per_pass_rows x per_pass_cols`` per pass,
    :data:`POOL_TILE_PER_THREAD` passes: along the rows for 2-D, along the columns for 1-D)
    from an ``in_rows x in_cols`` input tile, ``window`` being :func:`pool_window`'s."""

    leaf: int
    nd: int
    op: int  # 1 max, 0 average
    window: tuple[int, ...]
    rows: int
    cols: int
    per_pass_rows: int
    per_pass_cols: int
    in_rows: int
    in_cols: int


def pool_tile(k: FusedKernel, block: int) -> PoolTile | None:
    """The tile of elementwise kernel ``k`` at ``block`` threads, or None: ``k`` must have
    exactly one pooled leaf, a 1-D or 2-D pool whose window was traced
    (:func:`pool_window`), and the input tile must fit :data:`POOL_TILE_MAX_FLOATS`."""
    if k.rows is not None or k.kind == "scan":
        return None
    pooled = [i for i, l in enumerate(k.leaves) if l.pool is not None]
    if len(pooled) != 1:
        return None
    i = pooled[0]
    p = next(q for q in k.prims if q.id == k.leaves[i].pool)
    nd = p.params["nd"]
    window = pool_window(p, k.leaves[i].shape)
    if nd not in (1, 2) or window is None:
        return None
    _, kh, kw, _, sh, sw, _, _, _, _, dh, dw, _, _ = window
    if nd == 1:
        ppr, ppc = 1, block
        rows, cols = 1, block * POOL_TILE_PER_THREAD
    else:
        ppc = min(POOL_TILE_COLS_2D, block)
        ppr = block // ppc
        rows, cols = ppr * POOL_TILE_PER_THREAD, ppc
    in_rows = (rows - 1) * sh + (kh - 1) * dh + 1
    in_cols = (cols - 1) * sw + (kw - 1) * dw + 1
    if in_rows * in_cols > POOL_TILE_MAX_FLOATS:
        return None
    return PoolTile(i, nd, 1 if p.params["kind"] == "max" else 0, window, rows, cols, ppr, ppc,
                    in_rows, in_cols)


def tiles_pooling(plan: FusionPlan, block: int) -> bool:
    """Whether a kernel of ``plan`` gets a shared-memory pooling tile (:func:`pool_tile`)."""
    return any(pool_tile(k, block) is not None for k in plan.kernels)


def _same_window(i: int, window: Sequence[int]) -> str:
    """The C test that pooled leaf ``i``'s run-time window (kernel arguments
    ``L<i>_kd`` ... ``L<i>_div``) is ``window`` (:func:`pool_window`'s)."""
    return " && ".join(f"L{i}_{n} == {v}" for n, v in zip(POOL_SIZES[6:], window))


def _flit(v: float) -> str:
    """A float as a CUDA literal."""
    if math.isnan(v):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(v):
        return "CP_INF" if v > 0 else "(-CP_INF)"
    text = repr(float(v))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"


def _powc(x: str, e: float) -> str:
    table = {2.0: f"({x} * {x})", 3.0: f"({x} * {x} * {x})", 0.5: f"sqrtf({x})", -0.5: f"rsqrtf({x})",
             -1.0: f"(1.0f / {x})", -2.0: f"(1.0f / ({x} * {x}))", 1.0: x, 0.0: "1.0f"}
    return table.get(float(e), f"powf({x}, {_flit(e)})")


class _KernelWriter:
    """The CUDA of one fused kernel."""

    def __init__(self, k: FusedKernel, v: Variant):
        self.k = k
        self.v = v
        #: writing a contiguous row kernel (``L<i>_how``/``L<i>_at`` declared: :meth:`row_leaves`)
        self.in_rows = False
        #: the pooled read's shared-memory tile under the variant (:func:`pool_tile`), or None
        self.tile = pool_tile(k, v.block) if v.tile_pool else None
        self.members = {p.id: p for p in k.prims}
        self.levels = k.levels
        self.full_leaves = [i for i, l in enumerate(k.leaves) if l.domain == "full"]
        self.red_leaves = [i for i, l in enumerate(k.leaves) if l.domain == "reduced"]
        self.leaf_index = {(l.ref.key, l.ref.at, l.domain, l.pool): i for i, l in enumerate(k.leaves)}
        self.const_index = {c: i for i, c in enumerate(k.consts)}
        # Members some output depends on (dead code in forward is not computed).
        self.needed: set[int] = set()
        stack = [pid for pid, _ in k.outputs]
        while stack:
            pid = stack.pop()
            if pid in self.needed:
                continue
            self.needed.add(pid)
            stack += [r.id for r in self.members[pid].ins if isinstance(r, PRef) and r.id in self.members]

    def dom_of(self, pid: int) -> str:
        """``"full"`` or ``"reduced"`` (a reduction, or computed from reductions per row)."""
        return self.k.roles[pid]

    # -- names ------------------------------------------------------------------------

    def leaf_of(self, p: Prim, r: XRef, domain: str) -> int:
        """Index of the leaf through which ``p`` reads ``r`` in ``domain``."""
        if p.op == "pool":
            return self.leaf_index[(r.key, r.at, "pool", p.id)]
        return self.leaf_index[(r.key, r.at, domain, None)]

    def leaf_var(self, r: XRef, domain: str) -> str:
        i = self.leaf_index[(r.key, r.at, domain, None)]
        return f"a{i}" if domain == "full" else f"b{i}"

    def operand(self, r: Any, consumer_domain: str) -> str:
        if isinstance(r, PRef):
            return f"r{r.id}" if self.dom_of(r.id) == "reduced" else f"t{r.id}"
        if isinstance(r, XRef):
            return self.leaf_var(r, consumer_domain)
        if isinstance(r, CRef):
            return f"c{self.const_index[r]}"
        if isinstance(r, RowLen):
            return "rl" if not r.correction else f"(rl - {_flit(r.correction)})"
        raise PolicyRefusal(f"internal error: unknown operand {r!r}")

    def expr(self, p: Prim, domain: str) -> str:
        if p.op == "pool":  # computed where its leaf is loaded
            return f"a{self.leaf_of(p, p.ins[0], domain)}"
        args = [self.operand(r, domain) for r in p.ins]
        if p.op in ("ce_pick", "ce_hit", "ce_loss"):
            return self.cross_entropy_expr(p, args)
        if p.op == "powc":
            return _powc(args[0], float(p.params["exponent"]))
        if p.op in _UNARY_FN:
            return _UNARY_FN[p.op].format(*args)
        if p.op in _NARY_FN:
            return _NARY_FN[p.op].format(*args)
        raise PolicyRefusal(f"internal error: no CUDA for primitive '{p.op}'")

    def cross_entropy_expr(self, p: Prim, args: Sequence[str]) -> str:
        """Cross entropy's primitives (:meth:`.fusion._Planner.cross_entropy`): ``cpos`` is
        the element's position along the row, ``R``/``rl`` the row's length; the class
        index ``t`` and ``ignore_index`` are floats, exact below 2^24 (longer rows: ``ce_loss``
        is NaN)."""
        nan = "__int_as_float(0x7fc00000)"
        if p.op == "ce_loss":
            ls, pk, hit = args
            return f"(R > (IdxT)16777216 ? {nan} : {hit} > 0.0f ? {ls} - {pk} : {pk})"
        t, ign = args[-2], args[-1]
        at = f"((float)cpos == {t} && {t} != {ign})"
        if p.op == "ce_hit":
            return f"({at} ? 1.0f : 0.0f)"
        outside = f"(cpos == 0 && {t} != {ign} && ({t} < 0.0f || {t} >= rl))"
        return f"({at} ? {args[0]} : {outside} ? {nan} : 0.0f)"

    # -- cones ------------------------------------------------------------------------

    def cone(self, targets: Sequence[int], given: Sequence[int] = ()) -> list[Prim]:
        """Full-domain members needed to compute ``targets`` (reduced values are already in
        registers, as are the members in ``given``), in order."""
        need: set[int] = set()
        stack = list(targets)
        while stack:
            pid = stack.pop()
            if pid in need:
                continue
            p = self.members[pid]
            if self.dom_of(pid) == "reduced" or pid in given:
                continue
            need.add(pid)
            for r in p.ins:
                if isinstance(r, PRef) and r.id in self.members:
                    stack.append(r.id)
        return [self.members[i] for i in sorted(need)]

    def leaves_of(self, prims: Sequence[Prim], domain: str) -> list[int]:
        out: list[int] = []
        for p in prims:
            for r in p.ins:
                if isinstance(r, XRef):
                    i = self.leaf_of(p, r, domain)
                    if i not in out:
                        out.append(i)
        return sorted(out)

    # -- signature ---------------------------------------------------------------------

    def params(self, idx_type: str) -> list[tuple[str, str]]:
        """(type, name) of the kernel's parameters, launcher order (no stream)."""
        ps: list[tuple[str, str]] = []
        for i, l in enumerate(self.k.leaves):
            ps.append(({"bool": "const bool *", "int64": "const int64_t *"}.get(l.dtype, "const float *"), f"L{i}"))
        for j, (pid, _) in enumerate(self.k.outputs):
            ps.append(("int64_t *" if self.members[pid].is_index else "float *", f"O{j}"))
        if self.k.rows is None:
            ps.append((idx_type, "n"))
        else:
            ps += [(idx_type, "outer"), (idx_type, "R"), (idx_type, "inner")]
        for i, l in enumerate(self.k.leaves):
            if l.pool is not None:
                ps += [(idx_type, f"L{i}_{n}") for n in POOL_SIZES]
            elif not l.full:
                ps += [(idx_type, f"L{i}_inner"), (idx_type, f"L{i}_size")]
        for i, _ in enumerate(self.k.consts):
            ps.append(("float", f"c{i}"))
        return ps

    # -- bodies -----------------------------------------------------------------------

    def pool_load(self, i: int, index: str) -> str:
        """The pooled window of element ``index`` of the domain, through leaf ``i``: with
        :attr:`Variant.unroll_pool` and a traced window of at most :data:`POOL_UNROLL_MAX`
        elements, ``cp_pool_k`` with that window as constants when the run-time window
        equals it (a test of kernel arguments, uniform over the grid), else ``cp_pool``."""
        p = self.members[self.k.leaves[i].pool]
        op = 1 if p.params["kind"] == "max" else 0
        sizes = ", ".join(f"L{i}_{n}" for n in POOL_SIZES)
        generic = f"cp_pool<{op}, IdxT>(L{i}, {index}, {sizes})"
        window = pool_window(p, self.k.leaves[i].shape) if self.v.unroll_pool else None
        if window is None:
            return generic
        same = _same_window(i, window)
        extents = ", ".join(f"L{i}_{n}" for n in POOL_SIZES[:6])
        consts = ", ".join(str(v) for v in window)
        fixed = f"cp_pool_k<{op}, {p.params['nd']}, {consts}, IdxT>(L{i}, {index}, {extents})"
        return f"(({same}) ? {fixed} : {generic})"

    def load_scalar(self, i: int, index: str, pos: str | None = None) -> str:
        """``a<i>`` (``b<i>`` for a reduced-domain leaf): leaf ``i`` at element ``index``;
        ``pos``: the element's position in its contiguous row, in a row kernel
        (:meth:`row_leaves` then spares the index arithmetic)."""
        l = self.k.leaves[i]
        if l.pool is not None:
            return f"const float a{i} = {self.pool_load(i, index)};"
        var = f"a{i}" if l.domain == "full" else f"b{i}"
        if pos is not None and i in self.row_leaves():
            at = f"(L{i}_how == 1 ? {pos} : L{i}_how == 2 ? L{i}_at : {self.bcast_at(i, index)})"
        else:
            at = index if l.full else self.bcast_at(i, index)
        return f"const float {var} = {'(float)' if l.dtype in ('bool', 'int64') else ''}L{i}[{at}];"

    def row_leaves(self) -> list[int]:
        """Leaves a contiguous row kernel reads per element through ``(i / inner) % size``
        (float32, not 0-d, not pooled): their layout along the row is tested once per
        kernel (``L<i>_how``, :func:`cp_row_how`) and a row-constant one is read at
        ``L<i>_at``, computed once per row: layer norm over the last dim read its weight,
        bias and a channel's bias with a division and a modulo per element and pass."""
        return [i for i, l in enumerate(self.k.leaves)
                if l.domain == "full" and not l.full and l.pool is None and l.shape and l.dtype == "float32"]

    def bcast_at(self, i: int, index: str) -> str:
        """Where broadcast leaf ``i`` holds element ``index`` of the domain: ``0`` for a
        0-d leaf (a rank is the same at every size: a whole-tensor reduction's result, a
        number), else ``(index / inner) % size``."""
        return "0" if not self.k.leaves[i].shape else f"({index} / L{i}_inner) % L{i}_size"

    def bload4(self, i: int, index: str, ind: str, pos: str | None = None) -> str:
        """``float v<i>[4]``: broadcast leaf ``i`` at elements ``index`` .. ``index + 3``
        (``pos``: their position in a contiguous row, as :meth:`load_scalar`)."""
        if not self.k.leaves[i].shape:
            cast = "(float)" if self.k.leaves[i].dtype in ("bool", "int64") else ""
            return (f"{ind}const float u{i} = {cast}L{i}[0]; "
                    f"float v{i}[4] = {{u{i}, u{i}, u{i}, u{i}}};")
        if pos is not None and i in self.row_leaves():
            return (f"{ind}float v{i}[4]; cp_bload4_row<IdxT>(L{i}, {index}, {pos}, L{i}_how, L{i}_at, "
                    f"L{i}_inner, L{i}_size, v{i});")
        return f"{ind}float v{i}[4]; cp_bload4<IdxT>(L{i}, {index}, L{i}_inner, L{i}_size, v{i});"

    def body(self, prims: Sequence[Prim], ind: str) -> list[str]:
        return [f"{ind}const float t{p.id} = {self.expr(p, 'full')};" for p in prims]

    def element_loop(self, prims: Sequence[Prim], tails: Sequence[str], vec_tails: Sequence[str],
                     out_stores: Sequence[tuple[int, int]], ind: str, kind: str,
                     extra: Sequence[int] = (), pos: bool = False) -> list[str]:
        """One pass over the elements: ``kind`` is ``ew`` (grid-stride), ``row`` or ``col``.
        ``tails``: statements after the body (accumulations); ``out_stores``: (output
        index, prim id) stored per element; ``extra``: leaves read by the tails; ``pos``:
        the tails read ``cpos``, the element's position along its row (argmax)."""
        leaves = sorted(set(self.leaves_of(prims, "full")) | set(extra))
        lines: list[str] = []
        rpos: str | None = None  # the element's position in its row (scalar / float4 loop)
        vpos: str | None = None
        scalar_stores = [f"O{j}[i] = t{pid};" for j, pid in out_stores]
        if pos and kind not in ("row", "col"):
            raise PolicyRefusal(f"internal error: element positions in a {kind} loop")
        if kind == "col":
            lines.append(f"{ind}if (valid) {{")
            lines.append(f"{ind}    for (IdxT r = ty; r < R; r += ny) {{")
            lines.append(f"{ind}        const IdxT i = (o * R + r) * inner + in;")
            if pos:
                lines.append(f"{ind}        const IdxT cpos = r;")
            for li in leaves:
                lines.append(f"{ind}        {self.load_scalar(li, 'i')}")
            lines += self.body(prims, ind + "        ")
            lines += [f"{ind}        {t}" for t in list(tails) + scalar_stores]
            lines.append(f"{ind}    }}")
            lines.append(f"{ind}}}")
            return lines
        if kind == "ew":
            scalar_head = [f"{ind}    for (IdxT i = (IdxT)blockIdx.x * {self.v.block} + threadIdx.x; i < n; i += stride) {{"]
            vec_head = [
                f"{ind}    const IdxT n4 = n >> 2;",
                f"{ind}    for (IdxT q = (IdxT)blockIdx.x * {self.v.block} + threadIdx.x; q < n4; q += stride) {{",
                f"{ind}        const IdxT i0 = q << 2;",
            ]
        elif kind == "chan":
            # row = channel; element c of the row is (n, s) = divmod(c, inner), kept as (en, es)
            # and stepped without a division (a 64-bit division per element made batch norm
            # over 2^30 elements compute-bound on the H200: 17.9 ms, 0.46x eager)
            scalar_head = [f"{ind}    const IdxT dn = tpr / inner, ds = tpr % inner;",
                           f"{ind}    IdxT en = tid / inner, es = tid % inner;",
                           f"{ind}    for (IdxT c = tid; c < R; c += tpr, cp_chan_step(en, es, dn, ds, inner)) {{",
                           f"{ind}        const IdxT i = (en * outer + row) * inner + es;"]
            vec_head = [  # inner % 4 == 0: es stays a multiple of 4, the 4 elements are contiguous
                f"{ind}    const IdxT R4 = R >> 2;",
                f"{ind}    const IdxT dn = (tpr << 2) / inner, ds = (tpr << 2) % inner;",
                f"{ind}    IdxT en = (tid << 2) / inner, es = (tid << 2) % inner;",
                f"{ind}    for (IdxT q = tid; q < R4; q += tpr, cp_chan_step(en, es, dn, ds, inner)) {{",
                f"{ind}        const IdxT i0 = (en * outer + row) * inner + es;",
            ]
        else:
            if self.in_rows and kind == "row":
                rpos, vpos = "c", "(q << 2)"
            scalar_head = [f"{ind}    for (IdxT c = tid; c < R; c += tpr) {{", f"{ind}        const IdxT i = base + c;"]
            if pos:
                scalar_head.append(f"{ind}        const IdxT cpos = c;")
            vec_head = [
                f"{ind}    const IdxT R4 = R >> 2;",
                f"{ind}    for (IdxT q = tid; q < R4; q += tpr) {{",
                f"{ind}        const IdxT i0 = base + (q << 2);",
            ]
        if self.v.vec:
            lines.append(f"{ind}if constexpr (VEC) {{")
            lines += vec_head
            for li in leaves:
                l = self.k.leaves[li]
                if l.pool is not None:
                    lines.append(f"{ind}        float v{li}[4];")
                    lines.append(f"{ind}#pragma unroll")
                    lines.append(f"{ind}        for (int l = 0; l < 4; ++l) v{li}[l] = {self.pool_load(li, 'i0 + l')};")
                elif l.full:
                    lines.append(f"{ind}        float v{li}[4]; cp_load4(L{li}, (int64_t)i0, v{li});")
                else:
                    lines.append(self.bload4(li, "i0", f"{ind}        ", vpos))
            for j, _ in out_stores:
                lines.append(f"{ind}        float w{j}[4];")
            lines.append(f"{ind}#pragma unroll")
            lines.append(f"{ind}        for (int l = 0; l < 4; ++l) {{")
            if pos:
                lines.append(f"{ind}            const IdxT cpos = (q << 2) + l;")
            for li in leaves:
                lines.append(f"{ind}            const float a{li} = v{li}[l];")
            lines += self.body(prims, ind + "            ")
            lines += [f"{ind}            {t}" for t in vec_tails]
            lines += [f"{ind}            w{j}[l] = t{pid};" for j, pid in out_stores]
            lines.append(f"{ind}        }}")
            for j, _ in out_stores:
                lines.append(f"{ind}        cp_store4(O{j}, (int64_t)i0, w{j});")
            lines.append(f"{ind}    }}")
            lines.append(f"{ind}}} else {{")
        else:
            lines.append(f"{ind}{{")
        lines += scalar_head
        for li in leaves:
            lines.append(f"{ind}        {self.load_scalar(li, 'i', rpos)}")
        lines += self.body(prims, ind + "        ")
        lines += [f"{ind}        {t}" for t in list(tails) + scalar_stores]
        lines.append(f"{ind}    }}")
        lines.append(f"{ind}}}")
        return lines

    # -- kernels ----------------------------------------------------------------------

    def kernel_head(self, suffix: str, tmpl: str, extra: Sequence[tuple[str, str]] = ()) -> list[str]:
        """The kernel's template line, signature (:meth:`params`, then ``extra``) and ``{``."""
        # A buffer updated in place is read and written through two pointers: no __restrict__.
        restrict = "" if self.k.writes else "__restrict__ "
        ps = ",\n    ".join(f"{t}{'' if t.endswith('*') else ' '}{restrict if t.endswith('*') else ''}{n}"
                           for t, n in list(self.params("IdxT")) + list(extra))
        return [tmpl, f"__global__ void __launch_bounds__({self.v.block}) {self.k.name}_{suffix}(", f"    {ps})", "{"]

    def elementwise_kernel(self) -> list[str]:
        outs = [(j, pid) for j, (pid, _) in enumerate(self.k.outputs)]
        prims = self.cone([pid for _, pid in outs])
        tmpl = "template <typename IdxT, bool VEC>" if self.v.vec else "template <typename IdxT>"
        lines = self.kernel_head("ew", tmpl)
        lines.append(f"    const IdxT stride = (IdxT)gridDim.x * {self.v.block};")
        lines += self.element_loop(prims, [], [], outs, "    ", "ew")
        lines.append("}")
        return lines

    def tile_kernel(self) -> list[str]:
        """The elementwise kernel with its pooled read from a shared-memory tile: a block
        stages the input rows and columns its outputs' windows cover (coalesced loads;
        outside the input the pool's identity: -inf for max, 0 for the average's sum,
        which skip such taps as ATen does), then each thread computes
        :data:`POOL_TILE_PER_THREAD` outputs from the tile (consecutive lanes read
        consecutive words) and the fused ops after the pool, blocks striding over the
        tiles.  The taps are summed in the window's order, as ``cp_pool_k``: the same
        float results.  Launched only when the run-time window is the traced one."""
        t = self.tile
        assert t is not None
        i = t.leaf
        _, kh, kw, _, sh, sw, _, ph, pw, _, dh, dw, cip, div = t.window
        outs = [(j, pid) for j, (pid, _) in enumerate(self.k.outputs)]
        prims = self.cone([pid for _, pid in outs])
        others = [li for li in self.leaves_of(prims, "full") if li != i]
        ident = "-CP_INF" if t.op == 1 else "0.0f"
        b = self.v.block
        lines = self.kernel_head("tile", "template <typename IdxT>")
        lines += [
            f"    __shared__ float tile[{t.in_rows * t.in_cols}];",
            f"    const IdxT oh = L{i}_oh, ow = L{i}_ow, ih = L{i}_ih, iw = L{i}_iw;",
            f"    const IdxT th = (oh + {t.rows - 1}) / {t.rows}, tw = (ow + {t.cols - 1}) / {t.cols};",
            "    const IdxT per_plane = th * tw, tiles = (n / (oh * ow)) * per_plane;",
            f"    const int ly0 = threadIdx.x / {t.per_pass_cols}, lx0 = threadIdx.x % {t.per_pass_cols};",
            "    for (IdxT bt = blockIdx.x; bt < tiles; bt += gridDim.x) {",
            "        const IdxT plane = bt / per_plane, r = bt % per_plane;",
            f"        const IdxT oy0 = (r / tw) * {t.rows}, ox0 = (r % tw) * {t.cols};",
            f"        const IdxT iy0 = oy0 * {sh} - {ph}, ix0 = ox0 * {sw} - {pw};",
            f"        const float *__restrict__ src = L{i} + plane * (ih * iw);",
            "        __syncthreads(); /* the previous tile's reads are done */",
            f"        for (int e = threadIdx.x; e < {t.in_rows * t.in_cols}; e += {b}) {{",
            f"            const int ey = e / {t.in_cols}, ex = e - ey * {t.in_cols};",
            "            const IdxT y = iy0 + ey, x = ix0 + ex;",
            f"            tile[e] = (y >= 0 && y < ih && x >= 0 && x < iw) ? __ldg(src + y * iw + x) : {ident};",
            "        }",
            "        __syncthreads();",
            "#pragma unroll",
            f"        for (int j = 0; j < {POOL_TILE_PER_THREAD}; ++j) {{",
            f"            const int ly = ly0{f' + j * {t.per_pass_rows}' if t.nd == 2 else ''}, "
            f"lx = lx0{f' + j * {t.per_pass_cols}' if t.nd == 1 else ''};",
            "            const IdxT oy = oy0 + ly, ox = ox0 + lx;",
            "            if (oy >= oh || ox >= ow) continue;",
            f"            float m = {ident};",
            "#pragma unroll",
            f"            for (int a = 0; a < {kh}; ++a) {{",
            "#pragma unroll",
            f"                for (int c = 0; c < {kw}; ++c) {{",
            f"                    const float v = tile[(ly * {sh} + a * {dh}) * {t.in_cols} + lx * {sw} + c * {dw}];",
            "                    if (v > m || v != v) m = v;" if t.op == 1 else "                    m += v;",
            "                }",
            "            }",
        ]
        if t.op == 0:
            lines += [
                f"            const IdxT cnt = cp_pool_divisor<IdxT>(0, oy * {sh} - {ph}, ox * {sw} - {pw}, 1, {kh}, {kw}, "
                f"1, ih, iw, 0, {ph}, {pw}, {cip}, {div});",
                "            m = cnt ? m / (float)cnt : 0.0f;",
            ]
        lines.append("            const IdxT i = (plane * oh + oy) * ow + ox;")
        lines.append(f"            const float a{i} = m;")
        for li in others:
            lines.append(f"            {self.load_scalar(li, 'i')}")
        lines += self.body(prims, "            ")
        lines += [f"            O{j}[i] = t{pid};" for j, pid in outs]
        lines += ["        }", "    }", "}"]
        return lines

    def reduction_steps(self, kind: str, ind: str) -> list[str]:
        """The per-row (or per-column) program: one loop per reduction level, the reduced
        values, then the final loop over the full-domain outputs."""
        k = self.k
        lines: list[str] = []
        depth = k.depth
        full_outs = [(j, pid) for j, (pid, d) in enumerate(k.outputs) if self.dom_of(pid) == "full"]
        red_outs = {pid: j for j, (pid, d) in enumerate(k.outputs) if self.dom_of(pid) == "reduced"}
        reds_by_level: dict[int, list[Prim]] = {}
        for p in k.prims:
            if p.is_reduction and p.id in self.needed:
                reds_by_level.setdefault(self.levels[p.id], []).append(p)
        reduced_ew = [p for p in k.prims
                      if not p.is_reduction and self.dom_of(p.id) == "reduced" and p.id in self.needed]
        loaded_red: set[int] = set()
        guard = "valid && ty == 0" if kind == "col" else "threadIdx.x == 0" if kind == "whole" else "tid == 0"
        phased = kind in ("row", "chan") and self.split_ok()
        if phased:  # MODE 3: the reduced outputs and running statistics once, in the last phase
            guard += f" && (MODE != 3 || phase == {depth})"
        for level in range(1, depth + 1):
            reds = reds_by_level.get(level, [])
            if not reds:
                continue
            srcs = [r.ins[0] for r in reds]
            targets = [s.id for s in srcs if isinstance(s, PRef)]
            extra = [self.leaf_index[(s.key, s.at, "full", None)] for s in srcs if isinstance(s, XRef)]
            prims = self.cone(targets)
            tails: list[str] = []
            for r in reds:
                src = self.operand(r.ins[0], "full")
                if r.op == "red_var":  # shifted sums in double (cp_var_sums)
                    lines += self.row_first_value(r, kind, ind)
                    lines.append(f"{ind}double s{r.id} = 0.0, q{r.id} = 0.0;")
                    tails.append(f"{{ const float dv = {src} - K{r.id}; s{r.id} += (double)dv; "
                                 f"q{r.id} += (double)dv * (double)dv; }}")
                    continue
                if r.op == "red_lse":  # the online softmax's running (max, sum)
                    lines.append(f"{ind}float m{r.id} = -CP_INF;")
                    lines.append(f"{ind}double s{r.id} = 0.0;")
                    tails.append(f"cp_lse_push(m{r.id}, s{r.id}, {src});")
                    continue
                if r.is_index:
                    mx = "true" if r.op == "red_argmax" else "false"
                    lines.append(f"{ind}float s{r.id} = {'-CP_INF' if mx == 'true' else 'CP_INF'};")
                    lines.append(f"{ind}int64_t k{r.id} = 0;")
                    tails.append(f"cp_arg_next<{mx}>(s{r.id}, k{r.id}, {src}, (int64_t)cpos);")
                    continue
                op = _RED_OP[r.op]
                if op == 0:
                    # A thread's partial sum runs over up to R / (threads per row or column)
                    # terms (4096 for a 32768-row column sum): in float that drifts past
                    # KernelBench's 1e-4; a double partial costs nothing in a memory-bound
                    # loop.  The tree across threads stays float (log2 of a few hundred).
                    lines.append(f"{ind}double s{r.id} = 0.0;")
                    tails.append(f"s{r.id} += (double)({src});")
                else:
                    lines.append(f"{ind}float s{r.id} = cp_ident<{op}>();")
                    tails.append(f"s{r.id} = cp_comb<{op}>(s{r.id}, {src});")
            arg = any(r.is_index for r in reds)
            if arg and kind not in ("row", "col"):
                raise PolicyRefusal(f"argmax/argmin over {self.k.rows.describe() if self.k.rows else 'no rows'}")
            pos = arg or any(p.op in POSITION_OPS for p in prims)
            loop = self.element_loop(prims, tails, tails, [], ind, "row" if kind == "whole" else kind, extra, pos=pos)
            if phased:  # MODE 3: this level's loop in its own phase only
                loop = [f"{ind}if (MODE != 3 || phase == {level - 1}) {{"] + ["    " + l for l in loop] + [f"{ind}}}"]
            lines += loop
            if kind == "whole":  # block partials, then the last block combines them
                for j, r in enumerate(reds):
                    op = _RED_OP[r.op]
                    part = f"(float)s{r.id}" if op == 0 else f"s{r.id}"
                    lines.append(f"{ind}const float q{r.id} = cp_block_reduce<{op}>({part}, sm);")
                    lines.append(f"{ind}if (threadIdx.x == 0) {self.k.name}_part[{j} * CP_SPLIT_MAX + blockIdx.x] = q{r.id};")
                lines.append(f"{ind}if (!cp_last_block(&{self.k.name}_done)) return;")
                for j, r in enumerate(reds):
                    op = _RED_OP[r.op]
                    lines.append(f"{ind}const float r{r.id} = cp_combine_parts<{op}>({self.k.name}_part + {j} * CP_SPLIT_MAX, "
                                 "(int)gridDim.x, sm);")
            for r in reds if kind != "whole" else []:
                if r.is_index:
                    mx = "true" if r.op == "red_argmax" else "false"
                    if kind == "col":
                        red = f"cp_col_argreduce<{mx}, CW>(s{r.id}, k{r.id}, sm, smk)"
                    elif self.v.warp_rows:
                        red = (f"(MODE == 1 || MODE == 4) ? cp_warp_argreduce<{mx}, LPR>(s{r.id}, k{r.id}) "
                               f": cp_block_argreduce<{mx}>(s{r.id}, k{r.id}, sm)")
                    else:
                        red = f"cp_block_argreduce<{mx}>(s{r.id}, k{r.id}, sm)"
                    lines.append(f"{ind}const int64_t r{r.id} = {red};")
                    continue
                if r.op == "red_var":  # two sums in double, one after the other (shared scratch smd)
                    for h, acc in enumerate("sq"):
                        slot = f"{self.k.name}_gpartd + {self.split_dslots()[r.id] + h} * CP_PART_MAX"
                        tree = self.row_tree(0, f"{acc}{r.id}", kind, "smd", slot, level)
                        lines.append(f"{ind}const double {acc.upper()}{r.id} = {tree};")
                    lines.append(f"{ind}const float r{r.id} = cp_var_sums(S{r.id}, Q{r.id}, (double)R, "
                                 f"{float(r.params.get('corr', 0.0))!r});")
                    continue
                if r.op == "red_lse":  # (max, sum) pairs (float2, shared scratch sml)
                    slot = f"{self.k.name}_gpartl + {self.split_lslots()[r.id]} * CP_PART_MAX"
                    tree = self.row_tree(3, f"make_float2(m{r.id}, (float)s{r.id})", kind, "sml", slot, level)
                    lines.append(f"{ind}const float r{r.id} = {tree}.y;")
                    continue
                op = _RED_OP[r.op]
                part = f"(float)s{r.id}" if op == 0 else f"s{r.id}"
                slot = f"{self.k.name}_gpart + {self.split_slots()[r.id]} * CP_PART_MAX"
                lines.append(f"{ind}const float r{r.id} = {self.row_tree(op, part, kind, 'sm', slot, level)};")
            if phased:
                lines.append(f"{ind}if (MODE == 3 && phase == {level - 1}) continue; /* its partials written */")
            for p in reduced_ew:
                if self.levels[p.id] != level:
                    continue
                for rr in p.ins:
                    if isinstance(rr, XRef):
                        i = self.leaf_index[(rr.key, rr.at, "reduced", None)]
                        if i not in loaded_red:
                            loaded_red.add(i)
                            l = k.leaves[i]
                            at = "ridx" if l.full else self.bcast_at(i, "ridx")
                            if kind == "col":
                                lines.append(f"{ind}const float b{i} = valid ? L{i}[{at}] : 0.0f;")
                            else:
                                lines.append(f"{ind}const float b{i} = L{i}[{at}];")
                lines.append(f"{ind}const float r{p.id} = {self.expr(p, 'reduced')};")
            stores = [f"O{red_outs[p.id]}[ridx] = r{p.id};" for p in k.prims
                      if p.id in red_outs and self.levels[p.id] == level]
            if stores:
                lines.append(f"{ind}if ({guard}) {{ {' '.join(stores)} }}")
        if full_outs:
            prims = self.cone([pid for _, pid in full_outs])
            lines += self.element_loop(prims, [], [], full_outs, ind, kind)
        return lines

    def wide_cols(self) -> bool:
        """Whether the column kernel takes its tile width ``CW`` as a template argument
        (:attr:`Variant.wide_cols`: COL_WIDE where ``inner`` has that many, else 32)."""
        return self.v.wide_cols and self.v.block % COL_WIDE == 0

    def split_ok(self) -> bool:
        """Whether the row kernel has MODE 2 (rows split over a cooperative grid): it
        reduces rows (contiguous, grouped or batch norm's channels) with sums, maxima or
        minima only (an argmax's (value, index) pairs are not split)."""
        k = self.k
        return (k.kind != "scan" and k.rows is not None
                and any(p.is_reduction for p in k.prims) and not any(p.is_index for p in k.prims))

    def split_slots(self) -> dict[int, int]:
        """Reduction prim id -> its slot in ``<kernel>_gpart`` (CP_PART_MAX floats each);
        ``red_var``'s are in ``<kernel>_gpartd`` (:meth:`split_dslots`)."""
        reds = [p.id for p in self.k.prims if p.is_reduction and p.op not in ("red_var", "red_lse")]
        return {pid: j for j, pid in enumerate(reds)}

    def split_lslots(self) -> dict[int, int]:
        """``red_lse`` prim id -> its slot in ``<kernel>_gpartl`` (CP_PART_MAX float2 (max,
        sum) pairs each)."""
        reds = [p.id for p in self.k.prims if p.op == "red_lse"]
        return {pid: j for j, pid in enumerate(reds)}

    def split_dslots(self) -> dict[int, int]:
        """``red_var`` prim id -> its first slot in ``<kernel>_gpartd`` (CP_PART_MAX doubles
        each; two per variance: the shifted sum and the sum of squares)."""
        reds = [p.id for p in self.k.prims if p.op == "red_var"]
        return {pid: 2 * j for j, pid in enumerate(reds)}

    def has_var(self) -> bool:
        return any(p.op == "red_var" for p in self.k.prims)

    def has_lse(self) -> bool:
        return any(p.op == "red_lse" for p in self.k.prims)

    def row_tree(self, op: int, value: str, kind: str, scratch: str, slots: str, level: int) -> str:
        """The reduction (``op``: 0 sum, 1 max, 2 min, 3 (max, sum) pairs) of a thread's
        ``value`` (float, double for a variance's sums, float2 for pairs) of reduction level
        ``level`` over its row's threads: column, block, warp (MODE 1), grid (MODE 2) or
        the phased launches (MODE 3: written in phase ``level - 1``, combined in the later
        ones), the partials at ``slots + row * cs``; ``scratch``: the kernel's shared array
        of the value's type (``sm``, ``smd``, ``sml``)."""
        if kind == "col":
            return f"cp_col_reduce<{op}, CW>({value}, {scratch})"
        red = f"cp_block_reduce<{op}>({value}, {scratch})"
        if self.split_ok():
            part = f"{slots} + row * cs, (unsigned)rank, (unsigned)cs"
            red = (f"(MODE == 2 ? cp_grid_reduce<{op}>({value}, {scratch}, {part}) : "
                   f"MODE == 3 ? cp_phase_reduce<{op}>({value}, {scratch}, {part}, phase == {level - 1}) : {red})")
        if self.v.warp_rows and kind == "row":
            red = f"((MODE == 1 || MODE == 4) ? cp_lanes_reduce<{op}, LPR>({value}) : {red})"
        return red

    def row_first_value(self, r: Prim, kind: str, ind: str) -> list[str]:
        """``float K<id>``: the operand of ``red_var`` ``r`` at the row's first element (0
        for an empty row), the shift of its one-pass sums."""
        src = r.ins[0]
        cone = self.cone([src.id]) if isinstance(src, PRef) else []
        leaves = set(self.leaves_of(cone, "full"))
        if isinstance(src, XRef):
            leaves.add(self.leaf_index[(src.key, src.at, "full", None)])
        first = {"row": "base", "chan": "row * inner", "col": "o * R * inner + in"}[kind]
        guard = "valid && R > 0" if kind == "col" else "R > 0"
        lines = [f"{ind}float K{r.id} = 0.0f; /* the row's first element: the one-pass variance's shift */",
                 f"{ind}if ({guard}) {{", f"{ind}    const IdxT i = {first};"]
        rpos = "(IdxT)0" if self.in_rows and kind == "row" else None
        lines += [f"{ind}    {self.load_scalar(li, 'i', rpos)}" for li in sorted(leaves)]
        lines += self.body(cone, ind + "    ")
        lines.append(f"{ind}    K{r.id} = {self.operand(src, 'full')};")
        lines.append(f"{ind}}}")
        return lines

    def row_modes(self, kind: str) -> list[str]:
        """The row kernel's MODEs: 0 one block per row, 1 one warp per row and 4 eight
        lanes per row, four rows a warp (the warp-rows variants; 4 not where the kernel
        updates a buffer in place: a warp's rows past the end repeat its last row), 2 a row
        over several blocks of a cooperative grid and 3 the same blocks in one launch per
        reduction level and one for the outputs (:meth:`split_ok`)."""
        modes = ["0"]
        if self.v.warp_rows and kind == "row":
            modes.append("1")
            if not self.k.writes:
                modes.append("4")
        if self.split_ok():
            modes += ["2", "3"]
        return modes

    def row_kernel(self, kind: str = "row") -> list[str]:
        """Rows of the domain (``kind`` ``"row"``: contiguous rows; ``"chan"``: batch norm's
        channels, element ``c`` of row ``ch`` at ``(c / inner, ch, c % inner)``).  MODE 0: one
        block per row; 1: one warp per row; 2: ``cs`` blocks per row (the grid is ``outer *
        cs`` blocks, each doing one row: ``rank`` is its place in the row, ``tid``/``tpr``
        the thread's place among the row's threads), all resident; 3: the same grid in
        ``depth + 1`` launches, argument ``phase`` (:meth:`reduction_steps`)."""
        v = self.v
        tmpl_parts = ["typename IdxT"]
        if v.vec:
            tmpl_parts.append("bool VEC")
        tmpl_parts.append("int MODE")
        lines: list[str] = []
        if self.split_ok():
            if self.split_slots():
                lines.append(f"__device__ float {self.k.name}_gpart[{len(self.split_slots())} * CP_PART_MAX];")
            if self.has_var():
                lines.append(f"__device__ double {self.k.name}_gpartd[{2 * len(self.split_dslots())} * CP_PART_MAX];")
            if self.has_lse():
                lines.append(f"__device__ float2 {self.k.name}_gpartl[{len(self.split_lslots())} * CP_PART_MAX];")
        phase = [("int", "phase")] if self.split_ok() else []  # MODE 3's launch (0 .. depth)
        lines += self.kernel_head("row", f"template <{', '.join(tmpl_parts)}>", phase)
        lines.append("    __shared__ float sm[32];")
        lines.append("    (void)sm;")
        if self.has_var():
            lines.append("    __shared__ double smd[32];")
        if self.has_lse():
            lines.append("    __shared__ float2 sml[32];")
        lines += [
            "    constexpr int LPR = MODE == 4 ? 8 : 32; /* lanes per row of MODEs 1 and 4 */",
            "    constexpr bool LANES = MODE == 1 || MODE == 4;",
            "    const IdxT cs = (MODE == 2 || MODE == 3) ? (IdxT)gridDim.x / outer : 1; /* blocks per row */",
            "    const IdxT rank = (IdxT)blockIdx.x % cs;",
            f"    const IdxT tpr = LANES ? LPR : cs * {v.block};",
            f"    const IdxT tid = LANES ? (IdxT)(threadIdx.x & (LPR - 1)) : rank * {v.block} + threadIdx.x;",
            f"    const IdxT rpb = LANES ? {v.block} / LPR : 1; /* rows per block */",
            "    const IdxT row0 = LANES ? (IdxT)blockIdx.x * rpb + (IdxT)(threadIdx.x / LPR) : (IdxT)blockIdx.x / cs;",
            "    const IdxT rstep = LANES ? (IdxT)gridDim.x * rpb : (IdxT)gridDim.x / cs;",
            "    /* MODE 4: the row's place in its warp; the warp runs while its first row is in range (its",
            "       shuffles need every lane) and rows past the end repeat the last one: the same stores */",
            "    const IdxT wg = MODE == 4 ? (IdxT)((threadIdx.x / LPR) & (32 / LPR - 1)) : 0;",
            "    (void)LANES;",
            "    (void)rank;",
            "    const float rl = (float)R;",
            "    (void)rl; (void)inner;",
        ]
        rows = self.row_leaves() if kind == "row" else []
        lines += [f"    const int L{i}_how = cp_row_how<IdxT>(L{i}_inner, L{i}_size, R); (void)L{i}_how;"
                  for i in rows]
        lines += [
            "    for (IdxT row_ = row0; row_ - wg < outer; row_ += rstep) {",
            "        const IdxT row = row_ < outer ? row_ : outer - 1;",
            "        const IdxT base = row * R;",
            "        const IdxT ridx = row;",
            "        (void)base; (void)ridx;",
        ]
        lines += [f"        const IdxT L{i}_at = L{i}_how == 2 ? (base / L{i}_inner) % L{i}_size : 0; (void)L{i}_at;"
                  for i in rows]
        self.in_rows = kind == "row"
        try:
            lines += self.reduction_steps(kind, "        ")
        finally:
            self.in_rows = False
        lines.append("    }")
        lines.append("}")
        return lines

    def whole_ok(self) -> bool:
        """Whether the kernel reduces the whole tensor in one level to reduced values only
        (sums, maxima, minima): it then also gets a kernel over many blocks (``_whole``)."""
        k = self.k
        return (k.rows is not None and k.rows.kind == "dims" and k.rows.start == 0
                and k.rows.stop == len(k.domain) and k.depth == 1
                and all(self.dom_of(pid) == "reduced" for pid, _ in k.outputs)
                and not any(p.is_index for p in k.prims) and not k.writes and not self.has_var()
                and not self.has_lse())

    def whole_kernel(self) -> list[str]:
        """The whole tensor as one row spread over the grid: thread ``tid`` of ``tpr`` (all
        the grid's threads) walks the row; the last block writes the reduced outputs."""
        v = self.v
        nred = sum(1 for p in self.k.prims if p.is_reduction)
        tmpl = "template <typename IdxT, bool VEC>" if v.vec else "template <typename IdxT>"
        lines = [f"__device__ float {self.k.name}_part[{nred} * CP_SPLIT_MAX];",
                 f"__device__ unsigned int {self.k.name}_done = 0u;"]
        lines += self.kernel_head("whole", tmpl)
        lines += [
            "    __shared__ float sm[32];",
            f"    const IdxT tpr = (IdxT)gridDim.x * {v.block};",
            f"    const IdxT tid = (IdxT)blockIdx.x * {v.block} + threadIdx.x;",
            "    const IdxT base = 0, ridx = 0;",
            "    const float rl = (float)R;",
            "    (void)rl; (void)inner; (void)outer; (void)base; (void)ridx;",
        ]
        lines += self.reduction_steps("whole", "    ")
        lines.append(f"    if (threadIdx.x == 0) {self.k.name}_done = 0u; /* for the next launch */")
        lines.append("}")
        return lines

    def col_kernel(self) -> list[str]:
        v = self.v
        wide = self.wide_cols()
        lines = self.kernel_head("col", "template <typename IdxT, int CW>" if wide else "template <typename IdxT>")
        if not wide:
            lines.append("    constexpr int CW = 32; /* columns per tile: one warp */")
        lines.append(f"    __shared__ float sm[{v.block}];")
        if any(p.is_index for p in self.k.prims):
            lines.append(f"    __shared__ int64_t smk[{v.block}];")
        if self.has_var():
            lines.append(f"    __shared__ double smd[{v.block}];")
        if self.has_lse():
            lines.append(f"    __shared__ float2 sml[{v.block}];")
        lines.append("    (void)sm; /* unused when the only reductions are variances or (max, sum) pairs */")
        lines += [
            "    const IdxT tx = threadIdx.x % CW;",
            "    const IdxT ty = threadIdx.x / CW;",
            f"    const IdxT ny = {v.block} / CW;",
            "    const IdxT ntile = (inner + CW - 1) / CW;",
            "    const IdxT tiles = outer * ntile;",
            "    const float rl = (float)R;",
            "    (void)rl; (void)ny;",
            "    for (IdxT tile = blockIdx.x; tile < tiles; tile += gridDim.x) {",
            "        const IdxT o = tile / ntile;",
            "        const IdxT in = (tile % ntile) * CW + tx;",
            "        const bool valid = in < inner;",
            "        const IdxT ridx = o * inner + in;",
            "        (void)ridx;",
        ]
        lines += self.reduction_steps("col", "        ")
        lines.append("    }")
        lines.append("}")
        return lines

    def scan_parts(self) -> tuple[Prim, list[Prim], list[Prim], list[tuple[int, int]]]:
        """(the scan, the members its input needs, the members the outputs need once the
        scan's value is known, the (output index, prim id) stores)."""
        scan = next(p for p in self.k.prims if p.is_scan)
        src = scan.ins[0]
        pre = self.cone([src.id]) if isinstance(src, PRef) else []
        outs = [(j, pid) for j, (pid, _) in enumerate(self.k.outputs)]
        post = self.cone([pid for _, pid in outs], given=[scan.id])
        return scan, pre, post, outs

    def scan_kernels(self) -> list[str]:
        """The scan along rows: ``_scan`` for contiguous rows (inner == 1: one block per row,
        tiles of 4 x block elements, 4 consecutive ones per thread, scanned in registers,
        then across the block, plus the carry of the tiles before); ``_scol`` for a middle
        dim (one thread per column, in order).  A reverse scan reads the row from its end;
        an exclusive one gives each element the scan of the elements before it.
        Sums carry in double (a 32768-element row drifts past 1e-4 in float)."""
        v = self.v
        scan, pre, post, outs = self.scan_parts()
        prod = "true" if scan.op == "scan_prod" else "false"
        rev = bool(scan.params.get("reverse"))
        carry_t = "float" if scan.op == "scan_prod" else "double"
        ident = "1.0f" if scan.op == "scan_prod" else "0.0"
        src = self.operand(scan.ins[0], "full")
        pre_leaves = set(self.leaves_of(pre, "full"))
        if isinstance(scan.ins[0], XRef):
            pre_leaves.add(self.leaf_index[(scan.ins[0].key, scan.ins[0].at, "full", None)])
        post_leaves = set(self.leaves_of(post, "full"))
        # the scan's value at the thread's element l: the carry, the threads before (ex) and
        # its own elements up to l (inclusive) or before l (exclusive: the identity at l = 0)
        excl = bool(scan.params.get("exclusive"))
        own = f"(l == 0 ? {'1.0f' if prod == 'true' else '0.0f'} : u[l - 1])" if excl else "u[l]"
        value = f"carry * (ex * {own})" if prod == "true" else f"(float)(carry + (double)(ex + {own}))"
        at = "R - 1 - c" if rev else "c"
        lines = self.kernel_head("scan", "template <typename IdxT, bool VEC>" if v.vec else "template <typename IdxT>")
        lines += [
            "    __shared__ float sm[32];",
            "    for (IdxT row = blockIdx.x; row < outer; row += gridDim.x) {",
            "        const IdxT base = row * R;",
            f"        {carry_t} carry = {ident};",
            f"        for (IdxT tb = 0; tb < R; tb += {4 * v.block}) {{ /* tb, not t0: t<id> are the prims */",
            "            const IdxT p0 = tb + (IdxT)threadIdx.x * 4;",
            f"            float u[4] = {{{', '.join(['1.0f' if prod == 'true' else '0.0f'] * 4)}}};",
        ]
        ind = "            "

        def vec_block(leaves: set[int], inner: list[str], ind: str) -> list[str]:
            """float4 loads of ``leaves`` at the thread's 4 elements (in memory order; a
            reverse scan's element l is lane 3 - l), then ``inner`` per element."""
            out = [f"{ind}const IdxT q0 = base + {'R - 4 - p0' if rev else 'p0'};"]
            for li in sorted(leaves):
                l = self.k.leaves[li]
                if l.full:
                    out.append(f"{ind}float v{li}[4]; cp_load4(L{li}, (int64_t)q0, v{li});")
                else:
                    out.append(self.bload4(li, "q0", ind))
            out += ["#pragma unroll", f"{ind}for (int l = 0; l < 4; ++l) {{"]
            for li in sorted(leaves):
                out.append(f"{ind}    const float a{li} = v{li}[{'3 - l' if rev else 'l'}];")
            out += [f"{ind}    {x}" for x in inner]
            out.append(f"{ind}}}")
            return out

        def scalar_block(leaves: set[int], inner: list[str], ind: str) -> list[str]:
            out = ["#pragma unroll", f"{ind}for (int l = 0; l < 4; ++l) {{",
                   f"{ind}    const IdxT c = p0 + l;", f"{ind}    if (c < R) {{",
                   f"{ind}        const IdxT i = base + {at};"]
            for li in sorted(leaves):
                out.append(f"{ind}        {self.load_scalar(li, 'i')}")
            out += [f"{ind}        {x}" for x in inner]
            out += [f"{ind}    }}", f"{ind}}}"]
            return out

        def both(leaves: set[int], inner: list[str], vec_head: Sequence[str] = (), vec_tail: Sequence[str] = (),
                 vec_after: Sequence[str] = (), scalar_tail: Sequence[str] = ()) -> list[str]:
            """The float4 path (VEC; R % 4 == 0: a thread's 4 elements are all in the row,
            or none) and the scalar one.  ``inner`` runs per element in both; ``vec_head``
            before the float4 loop, ``vec_tail`` per element in it, ``vec_after`` after it;
            ``scalar_tail`` per element of the scalar loop."""
            if not v.vec:
                return scalar_block(leaves, list(inner) + list(scalar_tail), ind)
            return ([f"{ind}if constexpr (VEC) {{", f"{ind}    if (p0 < R) {{"]
                    + [f"{ind}        {x}" for x in vec_head]
                    + vec_block(leaves, list(inner) + list(vec_tail), ind + "        ")
                    + [f"{ind}        {x}" for x in vec_after]
                    + [f"{ind}    }}", f"{ind}}} else {{"]
                    + scalar_block(leaves, list(inner) + list(scalar_tail), ind + "    ")
                    + [f"{ind}}}"])

        load_body = [x.strip() for x in self.body(pre, "")] + [f"u[l] = {src};"]
        store_body = [f"const float t{scan.id} = {value};"] + [x.strip() for x in self.body(post, "")]
        lines += both(pre_leaves, load_body)
        lines += [
            f"{ind}u[1] = cp_scomb<{prod}>(u[0], u[1]);",
            f"{ind}u[2] = cp_scomb<{prod}>(u[1], u[2]);",
            f"{ind}u[3] = cp_scomb<{prod}>(u[2], u[3]);",
            f"{ind}float total;",
            f"{ind}const float ex = cp_block_exscan<{prod}>(u[3], sm, total);",
        ]
        lines += both(post_leaves, store_body,
                      vec_head=[f"float w{j}[4];" for j, _ in outs],
                      vec_tail=[f"w{j}[{'3 - l' if rev else 'l'}] = t{pid};" for j, pid in outs],
                      vec_after=[f"cp_store4(O{j}, (int64_t)q0, w{j});" for j, _ in outs],
                      scalar_tail=[f"O{j}[i] = t{pid};" for j, pid in outs])
        lines += [
            f"{ind}carry = {'carry * total' if prod == 'true' else 'carry + (double)total'};",
            "        }",
            "    }",
            "}",
            "",
        ]
        # the column scan
        lines += self.kernel_head("scol", "template <typename IdxT>")
        lines += [
            "    const IdxT cols = outer * inner;",
            f"    for (IdxT col = (IdxT)blockIdx.x * {v.block} + threadIdx.x; col < cols; col += (IdxT)gridDim.x * {v.block}) {{",
            "        const IdxT o = col / inner, in = col % inner;",
            f"        {carry_t} carry = {ident};",
            "        for (IdxT c = 0; c < R; ++c) {",
            f"            const IdxT i = (o * R + {at}) * inner + in;",
        ]
        for li in sorted(pre_leaves | post_leaves):
            lines.append(f"            {self.load_scalar(li, 'i')}")
        lines += self.body(pre, "            ")
        step = f"            carry = {'carry * ' + src if prod == 'true' else 'carry + (double)' + src};"
        value_line = f"            const float t{scan.id} = (float)carry;"
        lines += [value_line, step] if excl else [step, value_line]  # exclusive: the value before the step
        lines += self.body(post, "            ")
        lines += [f"            O{j}[i] = t{pid};" for j, pid in outs]
        lines += ["        }", "    }", "}"]
        return lines

    # -- launcher ---------------------------------------------------------------------

    def launcher(self) -> list[str]:
        k, v = self.k, self.v
        ps = self.params("int64_t")
        ptrs = [n for t, n in ps if t.endswith("*")]
        # batch norm modules' num_batches_tracked, after the outputs (the launcher's alone)
        counts = [("int64_t *", f"B{j}") for j, _ in enumerate(k.batch_counts)]
        sig = ", ".join(f"{t}{'' if t.endswith('*') else ' '}{n}" for t, n in ps[:len(ptrs)] + counts + ps[len(ptrs):])
        lines = [f'extern "C" int {k.name}({sig}, cudaStream_t stream)', "{"]
        lines += [f"    cp_count_batch<<<1, 32, 0, stream>>>({n});" for _, n in counts]

        phased = k.kind != "scan" and self.split_ok()  # row kernels take MODE 3's phase

        def args_of(kern: str, idx: str, phase: str = "0") -> str:
            args = ", ".join(f"({idx}){n}" if t == "int64_t" else n for t, n in ps)
            return args + (f", {phase}" if phased and kern.endswith("_row") else "")

        def call(kern: str, chosen: list[str], grid: str) -> str:
            return f"{kern}<{', '.join(chosen)}><<<{grid}, {v.block}, 0, stream>>>({args_of(kern, chosen[0])});"

        def split_call(kern: str, chosen: list[str], fallback: str, ind: str) -> list[str]:
            """MODE 2 (``chosen`` ends with it): ``outer * S`` blocks in one cooperative
            launch, S from the device's resident blocks of this instantiation; where no
            split fits or the launch is refused (a device without cooperative launches),
            the phased launches (MODE 3, :func:`phased_call`), which need no residency."""
            inst = f"{kern}<{', '.join(chosen)}>"
            return [
                f"{ind}static const int64_t fill = cp_coop_fill({inst}, {v.block});",
                f"{ind}const int64_t S = cp_split_blocks(fill, outer, R, {v.block});",
                f"{ind}bool done = false;",
                f"{ind}if (S > 0) {{",
                f"{ind}    done = cp_launch_coop({inst}, (unsigned)(outer * S), {v.block}, stream, "
                f"{args_of(kern, chosen[0])}) == cudaSuccess;",
                f"{ind}    if (!done) cudaGetLastError(); /* the refused launch's error, not a kernel's */",
                f"{ind}}}",
                f"{ind}if (!done) {{",
                *phased_call(kern, chosen[:-1] + ["3"], fallback, ind + "    "),
                f"{ind}}}",
            ]

        def phased_call(kern: str, chosen: list[str], fallback: str, ind: str) -> list[str]:
            """MODE 3 (``chosen`` ends with it): ``outer * S`` blocks in ``depth + 1``
            launches (phase 0 .. depth) where one block per row would leave its waves
            under 90% full (:func:`cp_phase_blocks`), else MODE 0 on ``fallback`` blocks."""
            zero = f"{kern}<{', '.join(chosen[:-1] + ['0'])}>"
            inst = f"{kern}<{', '.join(chosen)}>"
            return [
                f"{ind}static const int64_t fill0 = cp_fill({zero}, {v.block}), fill3 = cp_fill({inst}, {v.block});",
                f"{ind}const int64_t S = cp_phase_blocks(fill0, fill3, outer, R, {v.block});",
                f"{ind}if (S > 0) {{",
                f"{ind}    for (int ph = 0; ph <= {k.depth}; ++ph)",
                f"{ind}        {inst}<<<(unsigned)(outer * S), {v.block}, 0, stream>>>({args_of(kern, chosen[0], 'ph')});",
                f"{ind}}} else {{",
                f"{ind}    {call(kern, chosen[:-1] + ['0'], fallback)}",
                f"{ind}}}",
            ]

        def dispatch(kern: str, flags: list[tuple[str, list[tuple[str, str | None]]]],
                     grid_of: Callable[[list[str]], str], ind: str) -> list[str]:
            """Nested ifs over the template parameters: ``flags`` holds (name, options), an
            option (value, runtime condition; None: the rest); ``grid_of(chosen)`` is a
            launch's grid.  ``MODE`` 2 (split rows) is a cooperative launch."""
            out: list[str] = []

            def rec(i: int, chosen: list[str], ind: str) -> None:
                if i == len(flags):
                    if flags and flags[-1][0] == "MODE" and chosen[-1] in ("2", "3"):
                        launch = split_call if chosen[-1] == "2" else phased_call
                        out.extend(launch(kern, chosen, grid_of(chosen[:-1] + ["0"]), ind))
                    else:
                        out.append(f"{ind}{call(kern, chosen, grid_of(chosen))}")
                    return
                opts = flags[i][1]
                if len(opts) == 1:
                    rec(i + 1, chosen + [opts[0][0]], ind)
                    return
                for j, (value, cond) in enumerate(opts):
                    if cond is None:
                        out.append(f"{ind}}} else {{")
                    else:
                        out.append(f"{ind}{'if' if j == 0 else '} else if'} ({cond}) {{")
                    rec(i + 1, chosen + [value], ind + "    ")
                out.append(f"{ind}}}")

            rec(0, [], ind)
            return out

        def idx_flag() -> tuple[str, list[tuple[str, str | None]]]:
            return ("IdxT", [("int", "small"), ("int64_t", None)])

        def bool_flag(name: str, cond: str) -> tuple[str, list[tuple[str, str | None]]]:
            return (name, [("true", cond), ("false", None)])

        aligned = " && ".join(f"cp_aligned16({p})" for p in ptrs) or "true"

        def flat_launch(kern: str, grid: str, vec_cond: str, ind: str) -> list[str]:
            """``kern`` on one grid: 32-bit indices where ``small``; on the float4 variants
            the float4 path where ``vec_cond`` holds and every pointer is aligned."""
            out: list[str] = []
            flags = [idx_flag()]
            if v.vec:
                out.append(f"{ind}const bool vec = {vec_cond} && {aligned};")
                flags.append(bool_flag("VEC", "vec"))
            return out + dispatch(kern, flags, lambda chosen: grid, ind)

        def pooled_small(total: str) -> str:
            """32-bit indices also need each pooled input below 2^30 elements."""
            return "".join(
                f" && ({total} / (L{i}_od * L{i}_oh * L{i}_ow)) * (L{i}_id * L{i}_ih * L{i}_iw) < (1LL << 30)"
                for i, l in enumerate(k.leaves) if l.pool is not None
            )

        def row_launch(vec_cond: str, ind: str, kind: str = "row") -> list[str]:
            """The row kernel's launch (:meth:`row_kernel`'s MODEs): rows split over the
            grid where there are few (under 2 per SM) and long ones (at least 2 blocks of 4
            elements a thread); split in phased launches where there are more long rows (at
            least 32 x block elements) than one block per row runs in full waves; one warp
            per row for short rows (warp-rows variants); else one block per row."""
            out: list[str] = []
            flags = [idx_flag()]
            if v.vec:
                out.append(f"{ind}const bool vec = {vec_cond} && {aligned};")
                flags.append(bool_flag("VEC", "vec"))
            modes: list[tuple[str, str | None]] = []
            have = self.row_modes(kind)
            if "2" in have:
                out.append(f"{ind}const bool split = outer < 2 * cp_sms() && R >= {8 * v.block};")
                modes.append(("2", "split"))
            if "3" in have:
                out.append(f"{ind}const bool phased = outer >= 2 * cp_sms() && R >= {32 * v.block};")
                modes.append(("3", "phased"))
            if "4" in have:  # rows of up to 64 elements: 8 lanes each (a float4 or 8 elements a lane)
                out.append(f"{ind}const bool lanes8 = R <= {ROW_LANES8_MAX};")
                modes.append(("4", "lanes8"))
            if "1" in have:
                out.append(f"{ind}const bool warp = R <= {v.warp_max};")
                modes.append(("1", "warp"))
            modes.append(("0", None))
            flags.append(("MODE", modes))
            out.append(f"{ind}const unsigned grid_b = cp_grid(outer);")
            if "1" in have:
                out.append(f"{ind}const unsigned grid_w = cp_grid((outer + {v.block // 32 - 1}) / {v.block // 32});")
            if "4" in have:
                out.append(f"{ind}const unsigned grid_8 = cp_grid((outer + {v.block // 8 - 1}) / {v.block // 8});")
            grids = {"1": "grid_w", "4": "grid_8"}
            return out + dispatch(f"{k.name}_row", flags, lambda chosen: grids.get(chosen[-1], "grid_b"), ind)

        if k.kind == "scan":
            lines += [
                "    if (outer <= 0 || R <= 0 || inner <= 0) return (int)cudaGetLastError();",
                "    const bool small = outer * R * inner < (1LL << 30);",
                "    if (inner == 1) {",
                "        const unsigned grid_r = cp_grid(outer);",
            ]
            lines += flat_launch(f"{k.name}_scan", "grid_r", "(R % 4) == 0", "        ")
            lines.append("    } else {")
            lines.append(f"        const unsigned grid_c = cp_grid((outer * inner + {v.block - 1}) / {v.block});")
            lines += dispatch(f"{k.name}_scol", [idx_flag()], lambda chosen: "grid_c", "        ")
            lines.append("    }")
        elif k.rows is not None and k.rows.kind == "channels":
            # outer = C rows of R = N * inner elements; the row kernel only.
            lines += [
                "    if (outer <= 0 || R <= 0 || inner <= 0) return (int)cudaGetLastError();",
                f"    const bool small = outer * R < (1LL << 30){pooled_small('(outer * R)')};",
            ]
            lines += row_launch("(inner % 4) == 0", "    ", kind="chan")
        elif k.rows is None:
            lines.append("    if (n <= 0) return (int)cudaGetLastError();")
            lines.append(f"    const bool small = n < (1LL << 30){pooled_small('n')}; /* 32-bit indices: no overflow of i + stride */")
            t = self.tile
            if t is not None:  # the traced window at run time: the shared-memory tile
                same = _same_window(t.leaf, t.window)
                lines.append(f"    if ({same} && L{t.leaf}_od == 1 && L{t.leaf}_id == 1) {{")
                lines.append(f"        const int64_t tiles = (n / (L{t.leaf}_oh * L{t.leaf}_ow)) * "
                             f"((L{t.leaf}_oh + {t.rows - 1}) / {t.rows}) * ((L{t.leaf}_ow + {t.cols - 1}) / {t.cols});")
                # 8 waves of resident blocks striding over the tiles (also on the test
                # device of 4 multiprocessors: the stride loop is exercised there)
                cap = max(1, 2048 // v.block) * 8
                lines.append(f"        const int64_t cap = cp_sms() * {cap};")
                lines.append("        const unsigned grid_t = cp_grid(tiles < cap ? tiles : cap);")
                lines += dispatch(f"{k.name}_tile", [idx_flag()], lambda chosen: "grid_t", "        ")
                lines.append("        return (int)cudaGetLastError();")
                lines.append("    }")
            flags = [idx_flag()]
            if v.vec:
                lines.append(f"    const bool vec = (n % 4) == 0 && {aligned};")
                flags.append(bool_flag("VEC", "vec"))
            lines.append(f"    const unsigned grid_s = cp_grid((n + {v.block - 1}) / {v.block});")
            if v.vec:
                lines.append(f"    const unsigned grid_v = cp_grid((n / 4 + {v.block - 1}) / {v.block});")
            lines += dispatch(f"{k.name}_ew", flags, lambda chosen: "grid_v" if chosen[1:] == ["true"] else "grid_s", "    ")
        else:
            lines += [
                "    if (outer <= 0 || inner <= 0) return (int)cudaGetLastError();",
                f"    const bool small = outer * R * inner < (1LL << 30){pooled_small('(outer * R * inner)')};",
            ]
            if self.whole_ok():  # one long row: over the whole grid, the last block finishing
                lines += [
                    f"    if (outer == 1 && inner == 1 && R >= {4 * 4 * v.block}) {{",
                    f"        int64_t want = R / {4 * v.block};",
                    f"        const int64_t fill = cp_sms() * {max(1, 2048 // v.block)};",
                    "        if (want > fill) want = fill;",
                    "        if (want > CP_SPLIT_MAX) want = CP_SPLIT_MAX;",
                    "        const unsigned grid_s = (unsigned)want;",
                ]
                lines += flat_launch(f"{k.name}_whole", "grid_s", "(R % 4) == 0", "        ")
                lines.append("        return (int)cudaGetLastError();")
                lines.append("    }")
            lines.append("    if (inner == 1) {")
            lines += row_launch("(R % 4) == 0", "        ")
            lines.append("    } else {")
            if self.wide_cols():  # tiles of COL_WIDE columns where inner has them
                lines.append(f"        const bool wide = inner >= {COL_WIDE};")
                lines.append(f"        const unsigned grid_c = cp_grid(outer * (wide ? (inner + {COL_WIDE - 1}) / {COL_WIDE} "
                             ": (inner + 31) / 32));")
                flags = [idx_flag(), ("CW", [(str(COL_WIDE), "wide"), ("32", None)])]
            else:
                lines.append("        const unsigned grid_c = cp_grid(outer * ((inner + 31) / 32));")
                flags = [idx_flag()]
            lines += dispatch(f"{k.name}_col", flags, lambda chosen: "grid_c", "        ")
            lines.append("    }")
        lines.append("    return (int)cudaGetLastError();")
        lines.append("}")
        return lines

    def source(self) -> str:
        k = self.k
        if k.kind == "scan":
            what = f", scans {k.rows.describe()}" if k.rows else ""
        else:
            what = f", reduces {k.rows.describe()}, {k.depth} level{'s' if k.depth != 1 else ''}" if k.rows else ""
        head = [f"/* ---- {k.name}: {k.describe()} ({k.kind}{what}) ---- */"]
        if k.kind == "scan":
            body = self.scan_kernels()
        elif k.rows is None:
            body = self.elementwise_kernel()
            if self.tile is not None:
                body += [""] + self.tile_kernel()
        elif k.rows.kind == "channels":
            body = self.row_kernel("chan")
        else:
            body = self.row_kernel() + [""] + self.col_kernel()
            if self.whole_ok():
                body += [""] + self.whole_kernel()
        return "\n".join(head + body + [""] + self.launcher()) + "\n"


def generate_cuda(plan: FusionPlan, variant: Variant) -> str:
    """``kernel.cu`` for ``plan`` under ``variant`` (one launcher per kernel).

    Raises:
        PolicyRefusal: the plan has no kernels, or holds a primitive with no CUDA form
            (an internal error).
    """
    if not plan.kernels:
        raise PolicyRefusal("nothing to fuse")
    head = (
        f"/* Generated by cudaperf's built-in PyTorch policy (variant {variant.name}: {variant.describe()}).\n"
        f" * Plan: {plan.describe()}\n"
        " * float32 throughout; sizes and broadcast strides are launcher arguments. */\n"
    )
    parts = [head, _PRELUDE]
    if any(k.rows is not None and k.kind != "scan" for k in plan.kernels):
        parts.append(_SPLIT_PRELUDE)
    if any(k.batch_counts for k in plan.kernels):
        parts.append(_COUNT_PRELUDE)
    for k in plan.kernels:
        parts.append(_KernelWriter(k, variant).source())
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------
# model.py
# ---------------------------------------------------------------------------------------

_HELPERS = '''

def _cp_numel(shape):
    """Elements of a shape."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _cp_bshape(*shapes):
    """PyTorch's broadcast of several shapes."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(1, rank + 1):
        d = 1
        for s in shapes:
            if k <= len(s) and int(s[-k]) != 1:
                if d != 1 and d != int(s[-k]):
                    raise ValueError(f"shapes {shapes} do not broadcast")
                d = int(s[-k])
        out.append(d)
    return tuple(reversed(out))


def _cp_full(t, shape):
    """``t`` with exactly ``shape``, contiguous (expanded when it broadcasts)."""
    if tuple(t.shape) != tuple(shape):
        t = t.expand(shape)
    return t.contiguous()


def _cp_operand(t, shape, at):
    """``(tensor, inner, size)`` such that element ``i`` of a contiguous ``shape`` reads
    ``tensor[(i // inner) % size]``; ``at``: dim of ``shape`` where ``t``'s first dim lies
    (None: right-aligned, PyTorch broadcasting).  A tensor whose dims do not form one
    contiguous block of ``shape`` is expanded and copied."""
    rank = len(shape)
    ts = tuple(t.shape)
    first = rank - len(ts) if at is None else at
    dims = [1] * rank
    for k in range(len(ts)):
        dims[first + k] = int(ts[k])
    lo = rank
    hi = 0
    for k in range(rank):
        if dims[k] != 1:
            lo = k if k < lo else lo
            hi = k + 1
    if lo >= hi:
        return t.contiguous(), 1, 1
    for k in range(lo, hi):
        if dims[k] != int(shape[k]):
            return t.reshape(dims).expand(shape).contiguous(), 1, _cp_numel(shape)
    return t.contiguous(), _cp_numel(shape[hi:]), _cp_numel(shape[lo:hi])


def _cp_rows(shape, start, stop):
    """``(outer, R, inner)`` of a reduction over dims ``[start, stop)``."""
    return _cp_numel(shape[:start]), _cp_numel(shape[start:stop]), _cp_numel(shape[stop:])


def _cp_group_rows(shape, groups):
    """``(outer, R, 1)`` of group norm: ``groups`` contiguous groups per sample."""
    outer = int(shape[0]) * groups
    return outer, (_cp_numel(shape) // outer if outer else 0), 1


def _cp_pool(shape, nd, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             count_include_pad=True, divisor_override=None):
    """(output shape, the 20 launcher sizes) of PyTorch's max or average pooling of a
    tensor of ``shape`` over its last ``nd`` dims (ATen's pooling_output_shape)."""
    def per_dim(v, name):
        v = [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)]
        v = v * nd if len(v) == 1 else v
        if len(v) != nd:
            raise ValueError(f"{name}={v} for {nd}-d pooling")
        return v
    k = per_dim(kernel_size, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else per_dim(stride, "stride")
    p = per_dim(padding, "padding")
    d = per_dim(dilation, "dilation")
    ins = [int(x) for x in shape[-nd:]]
    outs = []
    for L, kk, ss, pp, dd in zip(ins, k, s, p, d):
        o = (L + 2 * pp - dd * (kk - 1) - 1 + (ss - 1 if ceil_mode else 0)) // ss + 1
        if ceil_mode and (o - 1) * ss >= L + pp:
            o -= 1
        if o < 1 or pp * 2 > kk:
            raise ValueError(f"pooling of {tuple(shape)} with kernel {k}, stride {s}, padding {p}: no output")
        outs.append(o)

    def lead(v, fill):
        return [fill] * (3 - nd) + v
    sizes = (lead(ins, 1) + lead(outs, 1) + lead(k, 1) + lead(s, 1) + lead(p, 0) + lead(d, 1)
             + [int(bool(count_include_pad)), int(divisor_override or 0)])
    return tuple(int(x) for x in shape[:-nd]) + tuple(outs), sizes


def _cp_channel_rows(shape):
    """``(C, N * S, S)`` of batch norm's statistics over ``[N, C, *spatial]`` (S: the
    spatial size): one row per channel."""
    inner = _cp_numel(shape[2:])
    return int(shape[1]), int(shape[0]) * inner, inner


def _cp_reduced(shape, start, stop, keepdim):
    """The shape after reducing dims ``[start, stop)``."""
    if keepdim:
        return tuple(1 if start <= k < stop else int(d) for k, d in enumerate(shape))
    return tuple(int(d) for k, d in enumerate(shape) if not start <= k < stop)
'''
#: model.py's helper functions, for plan-time use of the same definitions (``_cp_pool``).
_MODEL_HELPERS: dict[str, Any] = {}
exec(compile(_HELPERS, "<model.py helpers>", "exec"), _MODEL_HELPERS)  # noqa: S102 (our own text)


_LIB_CALLS = {
    "linear": "_cp_F.linear", "matmul": "_cp_torch.matmul", "mm": "_cp_torch.mm", "bmm": "_cp_torch.bmm",
    "addmm": "_cp_torch.addmm", "baddbmm": "_cp_torch.baddbmm", "conv1d": "_cp_F.conv1d",
    "conv2d": "_cp_F.conv2d", "conv3d": "_cp_F.conv3d", "conv_transpose1d": "_cp_F.conv_transpose1d",
    "conv_transpose2d": "_cp_F.conv_transpose2d", "conv_transpose3d": "_cp_F.conv_transpose3d",
}
#: Positional parameters of the library calls (the rest are keywords).
_LIB_POSITIONAL = {
    "linear": ("input", "weight", "bias"), "matmul": ("input", "other"), "mm": ("input", "mat2"),
    "bmm": ("input", "mat2"), "addmm": ("input", "mat1", "mat2"), "baddbmm": ("input", "batch1", "batch2"),
    "conv1d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv2d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv3d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv_transpose1d": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
    "conv_transpose2d": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
    "conv_transpose3d": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
}
_LIB_KEYWORDS = {"addmm": ("beta", "alpha"), "baddbmm": ("beta", "alpha")}


def _attr_expr(path: str) -> str:
    out = "self"
    for part in path.split("."):
        if part.isidentifier():
            out += f".{part}"
        elif part.isdigit():
            out += f"[{part}]"
        else:
            out += f"[{part!r}]"
    return out


class _ModelWriter:
    def __init__(self, plan: FusionPlan, problem_source: str, problem_name: str):
        self.plan = plan
        self.g = plan.graph
        self.nodes = self.g.by_name()
        self.source = problem_source
        self.problem_name = problem_name
        self.var_of_prim: dict[int, str] = {}
        for k in plan.kernels:
            for pid, _ in k.outputs:
                self.var_of_prim[pid] = f"p{pid}"
        self.inputs = {n.name: n for n in self.g.nodes if n.op == "input"}

    # -- values -----------------------------------------------------------------------

    def node_expr(self, name: str) -> str:
        n = self.nodes[name]
        if n.op == "input":
            return n.target
        if n.op == "attr":
            return _attr_expr(n.target)
        v = self.plan.values.get(name)
        if isinstance(v, PRef):
            return self.var_of_prim[v.id]
        if isinstance(v, XRef):
            return self.xref_expr(v)
        return f"v_{name}"

    def xref_expr(self, r: XRef) -> str:
        kind, name = r.key
        if kind == "attr":
            return _attr_expr(name)
        if kind == "prim":
            return self.var_of_prim[int(name)]
        n = self.nodes[name]
        if n.op == "input":
            return n.target
        if n.op == "attr":
            return _attr_expr(n.target)
        return f"v_{name}"

    def arg(self, a: Any, subscript: bool = False) -> str:
        if isinstance(a, dict):
            if "node" in a and len(a) == 1:
                return self.node_expr(a["node"])
            if "attr" in a:
                return _attr_expr(a["attr"])
            if "modattr" in a:  # a module's structural attribute, as __init__ set it
                return _attr_expr(a["modattr"])
            if "float" in a:
                return f'float("{a["float"]}")'
            if "dtype" in a:
                return f"_cp_torch.{a['dtype']}"
            if "slice" in a:
                s, e, st = (self.arg(x) if x is not None else "" for x in a["slice"])
                if subscript:
                    return f"{s}:{e}" + (f":{st}" if st else "")
                return f"slice({s or 'None'}, {e or 'None'}, {st or 'None'})"
            if "ellipsis" in a:
                return "..."
            if "device" in a:
                return repr(a["device"])
            raise PolicyRefusal(f"cannot write the argument {a!r} in model.py")
        if isinstance(a, list):
            inner = ", ".join(self.arg(x) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        return repr(a)

    # -- forward ----------------------------------------------------------------------

    def emit_node(self, name: str) -> list[str]:
        n = self.nodes[name]
        unit = "lib" if any(l.node == name for l in self.plan.left) else None
        t = n.target
        out = f"v_{name}"
        if unit == "lib":
            a = _bind(n)
            if name in self.plan.peeled:
                a["bias"] = None
            pos_names = _LIB_POSITIONAL[t]
            last = max((i for i, p in enumerate(pos_names) if p in a), default=0)
            pos = [self.arg(a.get(p)) if a.get(p) is not None or i <= last else "None"
                   for i, p in enumerate(pos_names[: last + 1])]
            kws = [f"{k}={self.arg(a[k])}" for k in _LIB_KEYWORDS.get(t, ()) if k in a and a[k] is not None]
            return [f"{out} = {_LIB_CALLS[t]}({', '.join(pos + kws)})"]
        # views and Python values
        if t == "getattr":
            return [f"{out} = {self.arg(n.args[0])}.{n.args[1]}"]
        if t == "getitem":
            base = self.arg(n.args[0])
            idx = n.args[1]
            if isinstance(idx, list):
                text = ", ".join(self.arg(x, subscript=True) for x in idx) or "()"
                if len(idx) == 1:
                    text += ","
            else:
                text = self.arg(idx, subscript=True)
            return [f"{out} = {base}[{text}]"]
        if t in ("size", "dim", "numel"):
            rest = [self.arg(x) for x in n.args[1:]] + [f"{k}={self.arg(v)}" for k, v in n.kwargs.items()]
            return [f"{out} = {self.arg(n.args[0])}.{t}({', '.join(rest)})"]
        if t == "len":
            return [f"{out} = len({self.arg(n.args[0])})"]
        if n.kind in ("number", "shape") and t in ("add", "sub", "mul", "div", "floordiv", "mod", "pow", "neg"):
            a = _bind(n)
            ops = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "pow": "**"}
            if t == "neg":
                return [f"{out} = -({self.arg(a.get('input'))})"]
            x = a.get("input", n.args[0] if n.args else None)
            y = a.get("other", a.get("exponent", n.args[1] if len(n.args) > 1 else None))
            return [f"{out} = ({self.arg(x)}) {ops[t]} ({self.arg(y)})"]
        if n.kind in ("number", "shape", "none"):
            raise PolicyRefusal(
                f"cannot port {t} ({n.source}, node '{name}'): a Python value the built-in "
                "policy cannot write in model.py"
            )
        # tensor views: method form on the first argument
        if n.normalized:
            items = list(n.kwargs.items())
            recv = self.arg(items[0][1]) if items else ""
            rest = [self.arg(v) for _, v in items[1:] if v is not None]
            return [f"{out} = {recv}.{t}({', '.join(rest)})"]
        recv = self.arg(n.args[0])
        rest = [self.arg(x) for x in n.args[1:]] + [f"{k}={self.arg(v)}" for k, v in n.kwargs.items()]
        return [f"{out} = {recv}.{t}({', '.join(rest)})"]

    def emit_kernel(self, k: FusedKernel) -> list[str]:
        i = k.index
        lines = [f"# kernel {i}: {k.describe()}"]
        shape_srcs = [l for l in k.leaves if l.domain == "full" and l.ref.at is None]
        pooled = [l for l in k.leaves if l.pool is not None]
        if not shape_srcs and not pooled:
            raise PolicyRefusal(f"internal error: kernel {k.name} has no tensor that sets its shape")
        outs_traced = [tuple(next(p for p in k.prims if p.id == l.pool).shape) for l in pooled]
        srcs_traced = outs_traced + [tuple(l.shape) for l in shape_srcs]
        traced = srcs_traced[0]
        for sh in srcs_traced[1:]:
            traced = _broadcast(traced, sh) or traced
        if traced != tuple(k.domain):
            raise PolicyRefusal(
                f"cannot port {', '.join(k.labels)}: the shape of kernel {k.name} {list(k.domain)} is not "
                f"the broadcast of its inputs {list(traced)}"
            )
        S = f"_s{i}"
        shape_exprs = [self.xref_expr(l.ref) + ".shape" for l in shape_srcs]
        for j, l in enumerate(k.leaves):
            if l.pool is not None:
                shape_exprs.insert(0, f"_l{i}_{j}_out")
                lines += self.pool_sizes(k, j, f"_l{i}_{j}")
        lines.append(f"{S} = _cp_bshape({', '.join(shape_exprs)})")
        red_shape = None
        if k.rows is not None:
            if k.rows.kind == "groups":
                ref = k.rows.groups_ref
                G = (str(k.rows.groups) if ref is None else _attr_expr(ref[1]) if ref[0] == "attr"
                     else f"int({S}[{int(ref[1])}])" if ref[0] == "dim" else f"int({self.node_expr(ref[1])})")
                lines.append(f"_outer{i}, _R{i}, _inner{i} = _cp_group_rows({S}, {G})")
            elif k.rows.kind == "channels":
                lines.append(f"_outer{i}, _R{i}, _inner{i} = _cp_channel_rows({S})")
                if any(l.domain == "reduced" for l in k.leaves):
                    red_shape = f"_k{i}"
                    lines.append(f"{red_shape} = tuple(int(d) if j == 1 else 1 for j, d in enumerate({S}))")
            else:
                lines.append(f"_outer{i}, _R{i}, _inner{i} = _cp_rows({S}, {k.rows.start}, {k.rows.stop})")
                if any(l.domain == "reduced" for l in k.leaves):
                    red_shape = f"_k{i}"
                    lines.append(f"{red_shape} = _cp_reduced({S}, {k.rows.start}, {k.rows.stop}, True)")
                if any(l.domain == "reduced" and not l.keep for l in k.leaves):
                    lines.append(f"_k{i}n = _cp_reduced({S}, {k.rows.start}, {k.rows.stop}, False)")
        args: list[str] = []
        sizes: list[str] = []
        for j, l in enumerate(k.leaves):
            src = self.xref_expr(l.ref)
            if l.pool is not None:  # made contiguous, its sizes from _cp_pool above
                sizes += [f"_l{i}_{j}_pp[{q}]" for q in range(len(POOL_SIZES))]
                args.append(f"_l{i}_{j}")
                continue
            nokeep = not l.keep and k.rows is not None and k.rows.kind == "dims"
            dshape = S if l.domain == "full" else f"_k{i}n" if nokeep else red_shape
            if dshape is None:
                raise PolicyRefusal(f"internal error: kernel {k.name} reads a per-group tensor")
            if l.full:
                lines.append(f"_l{i}_{j} = _cp_full({src}, {dshape})")
            else:
                at = "None" if l.ref.at is None else str(l.ref.at)
                lines.append(f"_l{i}_{j}, _l{i}_{j}_in, _l{i}_{j}_sz = _cp_operand({src}, {dshape}, {at})")
                sizes += [f"_l{i}_{j}_in", f"_l{i}_{j}_sz"]
            args.append(f"_l{i}_{j}")
        first = f"_l{i}_{self._first_full(k)}"
        for pid, dom in k.outputs:
            p = next(q for q in k.prims if q.id == pid)
            if pid in k.writes:  # updated in place (running statistics)
                args.append(_attr_expr(k.writes[pid]))
                continue
            if dom == "full":
                shape = S
            elif k.rows is not None and k.rows.kind == "dims":
                keep = len(p.shape) == len(k.domain)
                shape = f"_cp_reduced({S}, {k.rows.start}, {k.rows.stop}, {keep})"
            else:
                raise PolicyRefusal(f"internal error: kernel {k.name} writes per-group statistics")
            dtype = "_cp_torch.int64" if p.is_index else "_cp_torch.float32"  # (the first input may be a bool mask)
            lines.append(f"p{pid} = _cp_torch.empty({shape}, device={first}.device, dtype={dtype})")
            args.append(f"p{pid}")
        for owner in k.batch_counts:  # a BatchNorm module's forward counts its batches (int64)
            args.append(_attr_expr(f"{owner}.num_batches_tracked" if owner else "num_batches_tracked"))
        if k.rows is None:
            args.append(f"_cp_numel({S})")
        else:
            args += [f"_outer{i}", f"_R{i}", f"_inner{i}"]
        args += sizes
        for c in k.consts:
            if c.var is not None and c.var.startswith("modattr:"):  # a module's attribute, read now
                args.append(f"float({_attr_expr(c.var[len('modattr:'):])})")
            elif c.var is not None:
                args.append(f"float({self.node_expr(c.var)})")
            else:
                v = float(c.value)  # type: ignore[arg-type]
                args.append(f'float("{v}")' if math.isinf(v) or math.isnan(v) else repr(v))
        lines.append(f"lib.{k.name}({', '.join(args)})")
        return lines

    def pool_sizes(self, k: FusedKernel, j: int, var: str) -> list[str]:
        """model.py lines for pooled leaf ``j``: ``var`` (the input, contiguous), ``var_out``
        (the pooled shape) and ``var_pp`` (the launcher's sizes), from the call's arguments
        as written (module attributes are read at run time)."""
        l = k.leaves[j]
        p = next(q for q in k.prims if q.id == l.pool)
        a = p.params["args"]
        kw = ", ".join(f"{name}={self.arg(a[name])}" for name in
                       ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
                        "divisor_override") if name in a)
        return [
            f"{var} = {self.xref_expr(l.ref)}.contiguous()",
            f"{var}_out, {var}_pp = _cp_pool({var}.shape, {p.params['nd']}, {kw})",
        ]

    def _first_full(self, k: FusedKernel) -> int:
        for j, l in enumerate(k.leaves):
            if l.domain == "full" and l.ref.at is None:
                return j
        return 0

    def forward(self, sig: str) -> list[str]:
        lines = [f"    def forward({sig}):"]
        body: list[str] = []
        for kind, what in self.plan.schedule:
            if kind == "node":
                body += self.emit_node(what)
            else:
                body += self.emit_kernel(self.plan.kernels[what])
        outs = self.plan.outputs
        if isinstance(outs, list):
            ret = "(" + ", ".join(self.arg(o) for o in outs) + ("," if len(outs) == 1 else "") + ")"
        else:
            ret = self.arg(outs)
        body.append(f"return {ret}")
        lines += [f"        {b}" for b in body]
        return lines

    # -- the file ---------------------------------------------------------------------

    def module(self, header: str) -> str:
        tree = ast.parse(self.source)
        model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
        if model is None:
            raise PolicyRefusal(f"{self.problem_name}: Model is not a class defined in the file (cannot copy its __init__)")
        fwd = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
        if fwd is None:
            raise PolicyRefusal(f"{self.problem_name}: Model defines no forward of its own")
        if fwd.args.vararg or fwd.args.kwarg or fwd.args.kwonlyargs or fwd.args.posonlyargs:
            raise PolicyRefusal(f"{self.problem_name}: Model.forward takes *args/**kwargs or keyword-only arguments")
        sig_args = [a.arg for a in fwd.args.args]
        if sig_args[1:] != list(self.g.forward_args):
            raise PolicyRefusal(
                f"{self.problem_name}: Model.forward's arguments {sig_args[1:]} differ from the traced ones "
                f"{list(self.g.forward_args)}"
            )
        defaults = [ast.unparse(d) for d in fwd.args.defaults]
        params = list(sig_args)
        for i, d in enumerate(defaults):
            params[len(params) - len(defaults) + i] += f"={d}"
        sig = ", ".join(params)

        class _Super(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> Any:
                self.generic_visit(node)
                if isinstance(node.func, ast.Name) and node.func.id == "super" and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.Name) and first.id == "Model":
                        node.args = []
                return node

        body = [s for s in model.body if not (isinstance(s, ast.FunctionDef) and s.name == "forward")]
        cls = ast.ClassDef(name="ModelNew", bases=model.bases, keywords=model.keywords, body=body or [ast.Pass()],
                           decorator_list=[], type_params=[])
        cls = _Super().visit(cls)
        ast.fix_missing_locations(cls)
        for node in ast.walk(cls):
            if isinstance(node, ast.Name) and node.id == "Model":
                raise PolicyRefusal(
                    f"{self.problem_name}: Model's class body refers to Model itself (line {node.lineno}); "
                    "the built-in policy copies it into ModelNew"
                )
        # Module-level definitions the class body needs (transitively).
        skip = {"Model", "get_inputs", "get_init_inputs"}
        defs: dict[str, ast.stmt] = {}
        for s in tree.body:
            if isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and s.name not in skip:
                defs[s.name] = s
            elif isinstance(s, (ast.Assign, ast.AnnAssign)):
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                for t in targets:
                    for nm in ast.walk(t):
                        if isinstance(nm, ast.Name) and nm.id not in skip:
                            defs[nm.id] = s
        wanted: list[ast.stmt] = []
        todo = [cls]
        seen_names: set[str] = set()
        while todo:
            node = todo.pop()
            for nm in ast.walk(node):
                if isinstance(nm, ast.Name) and nm.id in defs and nm.id not in seen_names:
                    seen_names.add(nm.id)
                    st = defs[nm.id]
                    if st not in wanted:
                        wanted.append(st)
                        todo.append(st)
        for st in wanted:
            for nm in ast.walk(st):
                if isinstance(nm, ast.Name) and nm.id == "Model":
                    raise PolicyRefusal(
                        f"{self.problem_name}: a helper Model's __init__ uses refers to Model (line {nm.lineno})"
                    )
        helpers = [s for s in tree.body if s in wanted]
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        future = [s for s in imports if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
        imports = [s for s in imports if s not in future]
        for s in imports:
            for a in s.names:
                if (a.asname or a.name).split(".")[0] in ("lib", "_cp_torch", "_cp_F", "load_cuda"):
                    raise PolicyRefusal(f"{self.problem_name}: the file imports a name the candidate needs ({a.asname or a.name})")
        parts: list[str] = [header]
        parts += [ast.unparse(s) for s in future]
        parts += [ast.unparse(s) for s in imports]
        parts += [
            "import torch as _cp_torch",
            "import torch.nn.functional as _cp_F",
            "from cudaperf_cli.torch_runtime import load_cuda",
            "",
            'lib = load_cuda("kernel.cu")',
        ]
        parts.append(_HELPERS)
        for s in helpers:
            parts.append("\n" + ast.unparse(s) + "\n")
        cls_text = ast.unparse(cls)
        fwd_text = "\n".join(self.forward(sig))
        parts.append("\n" + cls_text + "\n\n" + fwd_text + "\n")
        text = "\n".join(parts)
        # unused-name noise: _cp_torch / _cp_F are referenced by library calls only
        return text


def generate_model(plan: FusionPlan, problem_source: str, variant: Variant, *, problem_name: str = "problem") -> str:
    """``model.py`` for ``plan``: ``Model``'s class body copied as ``ModelNew`` with a
    generated ``forward``.

    Raises:
        PolicyRefusal: ``Model`` is not a plain class in ``problem_source``, its forward
            takes ``*args``, its class body refers to ``Model``, or a traced value cannot be
            written as Python.
    """
    header = (
        f'"""Generated by cudaperf\'s built-in PyTorch policy (variant {variant.name}: {variant.describe()}).\n\n'
        f"Plan: {plan.describe()}\n"
        '"""'
    )
    return _ModelWriter(plan, problem_source, problem_name).module(header)


def generate(plan: FusionPlan, problem_source: str, variant: Variant, *, problem_name: str = "problem") -> dict[str, str]:
    """``{"model.py": ..., "kernel.cu": ...}`` for ``plan`` under ``variant``.

    Raises:
        PolicyRefusal: see :func:`generate_cuda` and :func:`generate_model`.
    """
    return {
        "model.py": generate_model(plan, problem_source, variant, problem_name=problem_name),
        "kernel.cu": generate_cuda(plan, variant),
    }
