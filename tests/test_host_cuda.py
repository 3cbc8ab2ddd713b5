"""The built-in PyTorch policy's generated CUDA run on the CPU (:mod:`hostcuda`).

The emulated checks of ``test_builtin_torch_policy`` interpret the plan; these compile the
generated ``kernel.cu`` itself with the host compiler against the CUDA stand-in and run it
(threads as fibers, a device of 4 multiprocessors of 2 resident blocks), so that the CUDA
text's indexing, trees and launch paths are checked without a GPU: rows split over a
cooperative grid (MODE 2), phased launches (MODE 3), the online softmax's pairs, column
kernels, argmax, scans, the whole-tensor kernel.  Each launch is traced
(``CP_HOST_TRACE``) so that a test also says which path ran.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from cudaperf_cli.policies.builtin_torch import VARIANTS, BuiltinTorchPolicy
from cudaperf_cli.policies.builtin_torch.hostcuda import HostCudaLib, build_host_library, host_source
from cudaperf_cli.policies.builtin_torch.selfcheck import check_candidate
from cudaperf_cli.problems.pytorch import load_torch_problem
from tests.test_builtin_torch_policy import (_SHORT_ROWS, _TILE_POOLS, _WIDE_COLS, OPERATOR_PROBLEMS,
                                            _short_rows_source, _tile_pool_source, _wide_cols_source)
from tests.test_gpu_builtin_torch import _PHASED_ROWS, _SPLIT_ROWS

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ for the host CUDA build")

#: name -> (source, configs at the host device's sizes, the path the first config must take)
HOST_PROBLEMS: dict[str, tuple[str, list[dict[str, int]], str]] = {
    "split_batch_norm_train": (_SPLIT_ROWS["batch_norm_train"][0],
                               [{"n": 4, "c": 2, "h": 64, "w": 64}, {"n": 3, "c": 2, "h": 33, "w": 31}], "coop"),
    "split_layer_norm": (_SPLIT_ROWS["layer_norm"][0], [{"n": 2, "c": 8, "w": 1024}, {"n": 3, "c": 7, "w": 1001}], "coop"),
    "split_softmax": (_SPLIT_ROWS["softmax"][0], [{"n": 2, "d": 20000}, {"n": 3, "d": 7777}], "coop"),
    "split_group_norm_max_mean": (_SPLIT_ROWS["group_norm_max_mean"][0],
                                  [{"n": 2, "c": 8, "h": 32, "w": 32}, {"n": 3, "c": 6, "h": 15, "w": 17}], "coop"),
    "split_var_std": (_SPLIT_ROWS["var_std"][0], [{"n": 2, "d": 20000}, {"n": 3, "d": 7777}], "coop"),
    "phased_layer_norm_sum": (_PHASED_ROWS["phased_layer_norm_sum"][0],
                              [{"n": 12, "w": 20000}, {"n": 10, "w": 17001}], "phased"),
    "phased_log_softmax": (_PHASED_ROWS["phased_log_softmax"][0], [{"n": 12, "d": 20000}, {"n": 10, "d": 19999}], "phased"),
    "phased_batch_norm_train": (_PHASED_ROWS["phased_batch_norm_train"][0],
                                [{"n": 2, "c": 12, "h": 100, "w": 100}, {"n": 3, "c": 10, "h": 77, "w": 75}], "phased"),
    "phased_group_norm": (_PHASED_ROWS["phased_group_norm"][0],
                          [{"n": 3, "c": 8, "h": 100, "w": 100}, {"n": 5, "c": 8, "h": 99, "w": 101}], "phased"),
}

#: Operator problems of the CPU tests run at their own (small) sizes: one block per row, one
#: warp per row, columns, index reductions, scans, the whole-tensor kernel (and its 0-d result
#: read as a number by the next kernel), pooling.
OPERATORS = ["softmax_softmax_over_channels", "softmax_softmax_with_neg_inf", "softmax_logsumexp_two_dims",
             "softmax_logsumexp_infinite_rows",
             "arg_argmax_after_softmax", "scan_cumsum_reverse", "whole_sum_max_mean", "whole_softmax_of_everything",
             "norm_l2_dim1_keep", "pool_max3d_into_a_channel_softmax", "instance_norm_module_1d_affine",
             "batch_norm_train_module_1d_no_affine_momentum", "scan_cumsum_middle_dim", "arg_argmax_nan_first",
             "arg_argmin_neg_inf_ties", "arg_argmax_all_neg_inf", "arg_argmin_ties_middle_dim",
             "whole_frobenius_normalize", "scan_cumsum_exclusive", "scan_cumsum_exclusive_odd_neg_dim",
             "scan_cumsum_exclusive_middle_dim", "cross_entropy_mean", "cross_entropy_none_default_ignore",
             "cross_entropy_module_sum_ignored_class", "cross_entropy_mean_with_ignored_rows",
             "row_operands_channel_bias_then_layer_norm", "row_operands_softmax_of_scaled_plus_channel_bias",
             "row_operands_layer_norm_two_dims_partial_operands"]


def _candidates(path: Path, tmp_path: Path) -> list[Path]:
    """Every variant's candidate of the problem at ``path``, written to ``tmp_path/cand<t>``."""
    p = load_torch_problem(path, alt_shapes=False)
    pol = BuiltinTorchPolicy()
    try:
        props = [pol.propose(p, t) for t in range(len(VARIANTS))]
    finally:
        pol.close()
    out = []
    for t, prop in enumerate(props):
        d = tmp_path / f"cand{t}"
        d.mkdir()
        for name, text in prop.files.items():
            (d / name).write_text(text)
        out.append(d)
    return out


def _check(path: Path, cand: Path, configs: list[dict[str, int]], trace: Path, **env: str) -> dict[str, Any]:
    return check_candidate(path, cand / "model.py", configs, host_cuda=True, timeout_s=900,
                           env={"CP_HOST_TRACE": str(trace), "CP_HOST_SMS": "4", "CP_HOST_BLOCKS_PER_SM": "2", **env})


@pytest.mark.parametrize("name", sorted(HOST_PROBLEMS))
def test_split_and_phased_rows_run_on_the_host(name: str, tmp_path: Path) -> None:
    """Every variant's ``kernel.cu``, run on the host device, matches ``Model`` (outputs and
    running statistics) at a size that takes the split path (``coop``: rows over a
    cooperative grid; ``phased``: one launch per reduction level and one for the outputs,
    seen on turn 0, block 256) and at a scalar-path size."""
    src, configs, path_kind = HOST_PROBLEMS[name]
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    traces = []
    for t, cand in enumerate(_candidates(path, tmp_path)):
        trace = tmp_path / f"trace{t}.txt"
        r = _check(path, cand, configs, trace)
        assert r["ok"], f"{name} variant {VARIANTS[t].name}: {r}"
        traces.append(trace.read_text())
    if path_kind == "coop":
        assert all(" coop=1" in tr for tr in traces), traces
    else:
        assert re.search(r"_row<[^>]*, 3> grid=\d+ ", traces[0]), traces[0]


@pytest.mark.parametrize("name, config", [("split_batch_norm_train", {"n": 4, "c": 2, "h": 64, "w": 64}),
                                          ("split_layer_norm", {"n": 2, "c": 16, "w": 1024})])
def test_without_cooperative_launches_few_rows_take_the_phased_launches(name: str, config: dict[str, int],
                                                                       tmp_path: Path) -> None:
    """On a device that cannot launch cooperatively, few long rows go to the phased
    launches (MODE 3, no residency needed) rather than one block per row (rows of 16384:
    two blocks of 512 threads at 16 elements a thread); every variant still matches
    ``Model``."""
    src, _, _ = HOST_PROBLEMS[name]
    configs = [config]
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    for t, cand in enumerate(_candidates(path, tmp_path)):
        trace = tmp_path / f"trace{t}.txt"
        r = _check(path, cand, configs, trace, CP_HOST_NO_COOP="1")
        assert r["ok"], f"{name} variant {VARIANTS[t].name}: {r}"
        text = trace.read_text()
        assert " coop=1" not in text and re.search(r"_row<[^>]*, 3> grid=\d+ ", text), text


@pytest.mark.parametrize("name", OPERATORS)
def test_operator_kernels_run_on_the_host(name: str, tmp_path: Path) -> None:
    """Every variant's ``kernel.cu`` of a few operator problems of the CPU tests, at their
    own sizes, run on the host device, matches ``Model``."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(OPERATOR_PROBLEMS[name]))
    p = load_torch_problem(path, alt_shapes=False)
    configs = [dict(p.constants)]
    for t, cand in enumerate(_candidates(path, tmp_path)):
        r = _check(path, cand, configs, tmp_path / f"trace{t}.txt")
        assert r["ok"], f"{name} variant {VARIANTS[t].name}: {r}"


_CE_LONG_ROWS = """
    import torch
    import torch.nn.functional as F
    batch_size = 2
    classes = 20000
    class Model(torch.nn.Module):
        def forward(self, x, t):
            return F.cross_entropy(x, t, reduction='none')
    def get_inputs():
        return [torch.randn(batch_size, classes) * 3.0, torch.tensor([classes - 1, 0])]
    def get_init_inputs():
        return []
"""


@pytest.mark.parametrize("no_coop", [False, True])
def test_cross_entropy_rows_split_over_the_grid(no_coop: bool, tmp_path: Path) -> None:
    """Cross entropy's picked logit where two long rows are split over blocks (a cooperative
    grid, or phased launches on a device without cooperative launches): the element
    positions are the row's, targets at both ends of the row."""
    path = tmp_path / "ce.py"
    path.write_text(textwrap.dedent(_CE_LONG_ROWS))
    p = load_torch_problem(path, alt_shapes=False)
    for t, cand in enumerate(_candidates(path, tmp_path)):
        trace = tmp_path / f"trace{t}.txt"
        r = _check(path, cand, [dict(p.constants)], trace, **({"CP_HOST_NO_COOP": "1"} if no_coop else {}))
        assert r["ok"], f"variant {VARIANTS[t].name}: {r}"
        text = trace.read_text()
        assert (re.search(r"_row<[^>]*, 3> grid=\d+ ", text) if no_coop else " coop=1" in text), text


def test_a_wrong_phase_is_caught(tmp_path: Path) -> None:
    """The host run can fail: turn 1's phased group norm with its statistics loop moved to
    the output phase (the partials never written) is off everywhere."""
    src, configs, _ = HOST_PROBLEMS["phased_group_norm"]
    path = tmp_path / "gn.py"
    path.write_text(textwrap.dedent(src))
    cand = _candidates(path, tmp_path)[1]
    text = (cand / "kernel.cu").read_text()
    assert "if (MODE != 3 || phase == 0) {" in text
    (cand / "kernel.cu").write_text(text.replace("if (MODE != 3 || phase == 0) {", "if (MODE != 3 || phase == 1) {"))
    r = _check(path, cand, configs[:1], tmp_path / "trace.txt")
    assert not r["ok"] and "elements off" in r["configs"][0]["message"], r


#: Pooling whose window is a module constant, so that a configuration can change it: the
#: first configuration keeps the traced window (turns 1-2: ``cp_pool_k``, the window as
#: constants), the second changes it (every turn: ``cp_pool``, the run-time window).
_POOL_WINDOWS = {
    "max2d_dilated": ("""
        import torch
        import torch.nn as nn
        n, c, h, w = 2, 3, 17, 19
        k, s, p, d = 3, 1, 1, 2
        class Model(nn.Module):
            def __init__(self, k, s, p, d):
                super().__init__()
                self.pool = nn.MaxPool2d(k, stride=s, padding=p, dilation=d)
            def forward(self, x):
                return torch.relu(self.pool(x) * 2.0 - 0.5)
        def get_inputs():
            return [torch.randn(n, c, h, w)]
        def get_init_inputs():
            return [k, s, p, d]
    """, [{"k": 3, "s": 1, "p": 1, "d": 2}, {"k": 2, "s": 2, "p": 0, "d": 1}], "if (v > m || v != v) m = v;"),
    "avg3d_ceil_no_pad_count": ("""
        import torch
        import torch.nn as nn
        n, c, dd, h, w = 2, 2, 9, 10, 11
        k, s, p = 3, 2, 1
        class Model(nn.Module):
            def __init__(self, k, s, p):
                super().__init__()
                self.pool = nn.AvgPool3d(k, stride=s, padding=p, ceil_mode=True, count_include_pad=False)
            def forward(self, x):
                return self.pool(x) + 1.0
        def get_inputs():
            return [torch.randn(n, c, dd, h, w)]
        def get_init_inputs():
            return [k, s, p]
    """, [{"k": 3, "s": 2, "p": 1}, {"k": 2, "s": 1, "p": 0}], "m += v;"),
    "avg1d_padded": ("""
        import torch
        n, c, L = 3, 4, 50
        k, s, p = 8, 1, 4
        class Model(torch.nn.Module):
            def __init__(self, k, s, p):
                super().__init__()
                self.pool = torch.nn.AvgPool1d(k, s, p)
            def forward(self, x):
                return torch.sigmoid(self.pool(x))
        def get_inputs():
            return [torch.randn(n, c, L)]
        def get_init_inputs():
            return [k, s, p]
    """, [{"k": 8, "s": 1, "p": 4}, {"k": 5, "s": 3, "p": 2}], "m += v;"),
}


@pytest.mark.parametrize("name", sorted(_POOL_WINDOWS))
def test_pooling_windows_unrolled_and_at_run_time(name: str, tmp_path: Path) -> None:
    """Every variant's pooled read matches ``Model`` at the traced window (turns 1-2 take
    the unrolled ``cp_pool_k``) and at another window (the run-time ``cp_pool``); turn 1's
    ``cp_pool_k`` with its accumulation broken is off at the traced window only, so the
    traced window runs the unrolled code and the other window does not."""
    src, windows, step = _POOL_WINDOWS[name]
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    p = load_torch_problem(path, alt_shapes=False)
    configs = [{**p.constants, **wnd} for wnd in windows]
    cands = _candidates(path, tmp_path)
    for t, cand in enumerate(cands):
        assert ("cp_pool_k<" in (cand / "kernel.cu").read_text()) == VARIANTS[t].unroll_pool
        r = _check(path, cand, configs, tmp_path / f"trace{t}.txt")
        assert r["ok"], f"{name} variant {VARIANTS[t].name}: {r}"
    text = (cands[1] / "kernel.cu").read_text()
    head, _, rest = text.partition("__device__ __forceinline__ float cp_pool_k(")
    assert step in rest
    broken = rest.replace(step, step.replace("m = v", "m = v + 1.0f").replace("m += v", "m += 2.0f * v"), 1)
    (cands[1] / "kernel.cu").write_text(head + "__device__ __forceinline__ float cp_pool_k(" + broken)
    r = _check(path, cands[1], configs[:1], tmp_path / "traced.txt")
    assert not r["ok"] and "elements off" in r["configs"][0]["message"], r
    r = _check(path, cands[1], configs[1:], tmp_path / "other.txt")
    assert r["ok"], r


_TOY = r"""
#include <cuda_runtime.h>
#include <cooperative_groups.h>
__global__ void k_sum(const float *x, float *out, int n) {
    __shared__ float sm[32];
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (unsigned w = 0; w < blockDim.x / 32; ++w) s += sm[w];
        out[blockIdx.x] = s;
    }
}
__global__ void k_grid(float *out) {
    if (threadIdx.x == 0) out[blockIdx.x] = (float)blockIdx.x;
    cooperative_groups::this_grid().sync();
    if (threadIdx.x == 0) out[gridDim.x + blockIdx.x] = out[gridDim.x - 1 - blockIdx.x];
}
__global__ void k_hang(float *out) {
    float v = 1.0f;
    if (threadIdx.x < 16) __syncthreads();  /* half a warp at the block's barrier, */
    else v = __shfl_xor_sync(0xffffffffu, v, 1);  /* the rest at a shuffle of that warp */
    out[threadIdx.x] = v;
}
__global__ void k_grid_hang(float *out) {
    if (blockIdx.x == 0) return;  /* block 0 never reaches the grid barrier */
    cooperative_groups::this_grid().sync();
    out[blockIdx.x] = 1.0f;
}
__global__ void k_race(const float *x, float *out) {  /* a block sum, then a max, one scratch */
    __shared__ float sm[32];
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float v = x[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (unsigned w = 0; w < nw; ++w) s += sm[w];
    float m = x[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
%(race_barrier)s    if (lane == 0) sm[warp] = m;  /* overwrites what slower warps still read above */
    __syncthreads();
    float mx = sm[0];
    for (unsigned w = 1; w < nw; ++w) mx = fmaxf(mx, sm[w]);
    out[threadIdx.x] = s + mx;
}
extern "C" int toy_race(const float *x, float *out, cudaStream_t stream) {
    k_race<<<1, 256, 0, stream>>>(x, out);
    return (int)cudaGetLastError();
}
extern "C" int toy_sum(const float *x, float *out, int64_t n, int64_t blocks, cudaStream_t stream) {
    k_sum<<<(unsigned)blocks, 128, 0, stream>>>(x, out, (int)n);
    return (int)cudaGetLastError();
}
static int coop(void (*kern)(float *), unsigned grid, unsigned block, float *out, cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.stream = stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, out);
    if (e != cudaSuccess) cudaGetLastError(); /* read, as CUDA keeps it for the next caller */
    return (int)e;
}
extern "C" int toy_grid(float *out, int64_t blocks, cudaStream_t stream) {
    return coop(k_grid, (unsigned)blocks, 64, out, stream);
}
extern "C" int toy_hang(float *out, cudaStream_t stream) {
    k_hang<<<1, 64, 0, stream>>>(out);
    return (int)cudaGetLastError();
}
extern "C" int toy_grid_hang(float *out, cudaStream_t stream) {
    return coop(k_grid_hang, 4, 32, out, stream);
}
"""


def test_the_stand_in_runs_blocks_shuffles_and_grid_barriers(tmp_path: Path) -> None:
    """The stand-in itself on a hand-written file: block sums through warp shuffles and
    shared memory, a cooperative grid's barrier (each block reads what another wrote
    before it), a cooperative grid over the resident blocks refused (CUDA's error 720)."""
    import torch

    lib = HostCudaLib(_TOY % {"race_barrier": "    __syncthreads();\n"}, tmp_path)
    x = torch.arange(1000, dtype=torch.float32)
    out = torch.full((3,), float("nan"))
    lib.toy_sum(x, out, 1000, 3)
    assert float(out.sum()) == float(x.sum())
    g = torch.full((16,), float("nan"))
    lib.toy_grid(g, 8)
    assert g.tolist() == [float(i) for i in range(8)] + [float(7 - i) for i in range(8)]
    with pytest.raises(RuntimeError, match="error 720"):
        lib.toy_grid(torch.zeros(18), 9)  # 4 SMs x 2 blocks


def test_a_deadlock_ends_the_child_with_one_line(tmp_path: Path) -> None:
    """Threads of a block at different barriers, or a cooperative block returning while the
    others wait at the grid barrier: the stand-in aborts with a line that says so, rather
    than hanging (it is run in a child)."""
    import subprocess
    import sys

    so = build_host_library(_TOY % {"race_barrier": ""}, tmp_path)
    for fn, words in (("toy_hang", "threads of a block wait at different barriers"),
                      ("toy_grid_hang", "a block of a cooperative launch returned")):
        code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); buf = (ctypes.c_float * 64)(); "
                f"lib.{fn}.argtypes = [ctypes.c_void_p, ctypes.c_void_p]; lib.{fn}(buf, None)")
        proc = subprocess.run([sys.executable, "-c", code, str(so)], capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode != 0 and f"host cuda: deadlock: {words}" in proc.stderr, (fn, proc.stderr)


def test_a_missing_barrier_between_warps_is_caught(tmp_path: Path) -> None:
    """Two block reductions through one shared scratch: without the barrier before the
    second writes it, a warp that runs ahead overwrites what another has not read yet.
    Warps drift as far apart as a GPU allows, so the result is wrong without the barrier
    and right with it."""
    import torch

    x = torch.rand(256) + torch.arange(256, dtype=torch.float32) % 7
    want = float(x.sum() + x.max())
    for barrier, ok in (("    __syncthreads();\n", True), ("", False)):
        lib = HostCudaLib(_TOY % {"race_barrier": barrier}, tmp_path / f"b{int(ok)}")
        out = torch.full((256,), float("nan"))
        lib.toy_race(x, out)
        right = bool(torch.allclose(out, torch.full((256,), want), rtol=1e-5))
        assert right == ok, (barrier, out[:4].tolist(), want)


def test_launch_syntax_is_rewritten() -> None:
    text = "x(); k0_row<int, true, 2><<<cp_grid((outer + 7) / 8), 256, 0, stream>>>(L0, (int)n, f(a, b));\n"
    out = host_source(text)
    assert out == ('x(); cp_host::launch(dim3(cp_grid((outer + 7) / 8)), dim3(256), false, '
                   '[&] { k0_row<int, true, 2>(L0, (int)n, f(a, b)); }, "k0_row<int, true, 2>");\n')
    with pytest.raises(ValueError, match="do not close"):
        host_source("k<<<1, 2, 0, s>>>(a, (b);")


@pytest.mark.parametrize("name", sorted(_TILE_POOLS))
def test_pooling_from_shared_memory_tiles_runs_on_the_host(name: str, tmp_path: Path) -> None:
    """Turn 2's 1-D/2-D pooling from a shared-memory tile of the input (stride 1 with
    padding and dilation, stride 2 with ceil_mode, count_include_pad=False), fused with
    the ops after it, matches ``Model`` on the host device, the tiles in every position
    (edges, several per plane, blocks striding over more tiles than the grid's 128); at a window other than the
    traced one (an init input) the untiled kernel runs instead and matches too."""
    path = tmp_path / f"{name}.py"
    path.write_text(_tile_pool_source(name))
    _, _, _, first, more = _TILE_POOLS[name]
    cands = _candidates(path, tmp_path)
    tiled = [t for t, v in enumerate(VARIANTS) if v.tile_pool]
    assert tiled and all("_tile(" in (cands[t] / "kernel.cu").read_text() for t in tiled)
    for t in tiled:
        trace = tmp_path / f"trace{t}.txt"
        r = _check(path, cands[t], [first, *more], trace)
        assert r["ok"], f"{name} variant {VARIANTS[t].name}: {r}"
        text = trace.read_text()
        assert "_tile<" in text, text
        if name == "avg1d_window_from_an_init_input":  # kernel_size 11 is not the traced 8
            assert "_ew<" in text, text


def _traces_of_variants(name: str, source: str, configs: list[dict[str, int]], flag: str,
                        tmp_path: Path) -> list[str]:
    """The problem ``source`` run on the host device at ``configs`` by every variant whose
    attribute ``flag`` is set, each matching ``Model``; their launch traces (kernel
    instantiations and grids), in turn order."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    cands = _candidates(path, tmp_path)
    texts = []
    for t, v in enumerate(VARIANTS):
        if not getattr(v, flag):
            continue
        trace = tmp_path / f"trace{t}.txt"
        r = _check(path, cands[t], configs, trace)
        assert r["ok"], f"{name} variant {v.name}: {r}"
        texts.append(trace.read_text())
    assert texts, f"no variant has {flag}"
    return texts


@pytest.mark.parametrize("name", sorted(_SHORT_ROWS))
def test_short_rows_take_eight_lanes_each_on_the_host(name: str, tmp_path: Path) -> None:
    """Rows of up to 64 elements in the warp-rows variant: 8 lanes each, reduced by
    shuffles within the 8 (sums, maxima, variances, log_softmax's pairs, argmax), the
    warp's rows past the end repeating the last row; matches ``Model`` on the host device;
    a longer row takes one warp (MODE 1)."""
    _, _, configs = _SHORT_ROWS[name]
    for text in _traces_of_variants(name, _short_rows_source(name), configs, "warp_rows", tmp_path):
        assert re.search(r"_row<[^>]*, 4> grid=", text), text
        if len(configs) > 1:
            assert re.search(r"_row<[^>]*, 1> grid=", text), text


@pytest.mark.parametrize("name", sorted(_WIDE_COLS))
def test_wide_column_tiles_run_on_the_host(name: str, tmp_path: Path) -> None:
    """The wide-columns variant's middle-dim reductions (sums, means, argmin,
    variance, maxima, logsumexp's pairs) over tiles of 128 columns, the last one partial,
    match ``Model`` on the host device; an inner dim under 128 takes tiles of 32."""
    configs = _WIDE_COLS[name][1]
    for text in _traces_of_variants(name, _wide_cols_source(name), configs, "wide_cols", tmp_path):
        assert re.search(r"_col<int, 128> grid=", text), text
        if len(configs) > 1:
            assert re.search(r"_col<int, 32> grid=", text), text
