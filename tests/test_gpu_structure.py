"""Measured (Nsight Compute) vs static structural scores on a real GPU.

``@pytest.mark.gpu``: skipped without a CUDA device; skipped too without ``ncu``.  Run::

    python -m pytest -s -q tests/test_gpu_structure.py

Each corpus file of tests/data/kernels runs as a program: its own ``main()``, or a
generated one (the corpus source pasted into a launcher with a ``main()``; an existing
``main`` is renamed away with ``#define main``), built with nvcc and profiled by
``profile_executable`` once (``--launch-count`` = the launches of that main, one ncu call
per program, cached for the module).  The pair tests assert that the measured values order
each pair as the static scores do; each prints one ``[ncu]`` line per kernel: pair, kernel,
metric, static value and score, measured value and score, GPU time per launch.  The last
test prints the whole static-vs-measured table as Markdown.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cudaperf_cli.core import ToolchainError
from cudaperf_cli.structure import LaunchConfig, analyze_file
from cudaperf_cli.structure.gpus import default_gpu
from cudaperf_cli.structure.model import KernelReport, StructureReport
from cudaperf_cli.structure.ncu import (
    DEFAULT_METRICS,
    KernelProfile,
    SH_LD_CONFLICTS,
    apply_measurements,
    build_executable,
    find_ncu,
    has_main,
    profile_executable,
)

pytestmark = pytest.mark.gpu

KERNELS = Path(__file__).parent / "data" / "kernels"
NCU_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Program:
    """One program to profile: a corpus file with its own or a generated ``main()``.

    ``launch``/``sizes`` are given to the static analysis so that it sees the launch the
    generated main makes; ``launches`` is the number of kernel launches of the main.
    """

    file: str
    main: str | None = None
    launch: str | None = None
    launches: int = 1
    sizes: dict = field(default_factory=dict)


_CHECK = r"""
static int cudaperf_check(const char* what) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e)); return 1; }
    return 0;
}
"""

PROGRAMS: dict[str, Program] = {
    # own main()s: the launch sizes of the corpus (64 MB copies, 4096x4096 transposes...)
    "copy_coalesced": Program("copy_coalesced.cu"),
    "copy_strided": Program("copy_strided.cu"),
    "transpose_naive": Program("transpose_naive.cu"),
    "transpose_tiled": Program("transpose_tiled.cu"),
    "transpose_padded": Program("transpose_padded.cu"),
    "branch_divergent": Program("branch_divergent.cu"),
    "branch_uniform": Program("branch_uniform.cu"),
    "barrier_in_branch": Program("barrier_in_branch.cu", launches=2),
    "partial_wave": Program("partial_wave.cu"),
    "atomic_loop": Program("atomic_loop.cu", launches=2),
    "bank_double": Program("bank_double.cu", launches=2),
    "reduce_shared": Program("reduce_shared.cu"),
    # generated main()s
    "partial_wave_full": Program(
        "partial_wave.cu",
        main=r"""
int main() {
    const int blocks = @FULL_WAVE@, n = blocks * 1024;  // SMs x 2 blocks: one full wave
    float* x; cudaMalloc(&x, n * sizeof(float)); cudaMemset(x, 0, n * sizeof(float));
    scale_partial<<<blocks, 1024>>>(x, 2.0f, n);
    return cudaperf_check("scale_partial");
}""",
        launch="@FULL_WAVE@,1024",
    ),
    "regs_heavy": Program(
        "regs_heavy.cu",
        main=r"""
int main() {
    const int n = 1 << 20, iters = 16;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, n * sizeof(float));
    cudaMemset(x, 0, n * sizeof(float));
    regs_heavy<<<n / 1024, 1024>>>(y, x, n, iters);
    return cudaperf_check("regs_heavy");
}""",
        launch="1024,1024",
        sizes={"n": 1 << 20, "iters": 16},
    ),
    "regs_light": Program(
        "regs_light.cu",
        main=r"""
int main() {
    const int n = 1 << 24;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, n * sizeof(float));
    cudaMemset(x, 0, n * sizeof(float)); cudaMemset(y, 0, n * sizeof(float));
    regs_light<<<n / 256, 256>>>(y, x, 2.0f, n);
    return cudaperf_check("regs_light");
}""",
        launch="65536,256",
        sizes={"n": 1 << 24},
    ),
    "matmul_naive": Program(
        "matmul_naive.cu",
        main=r"""
int main() {
    const int n = 1024;
    float *A, *B, *C;
    cudaMalloc(&A, n * n * sizeof(float)); cudaMalloc(&B, n * n * sizeof(float));
    cudaMalloc(&C, n * n * sizeof(float));
    cudaMemset(A, 0, n * n * sizeof(float)); cudaMemset(B, 0, n * n * sizeof(float));
    matmul_naive<<<dim3(n / 16, n / 16), dim3(16, 16)>>>(A, B, C, n);
    return cudaperf_check("matmul_naive");
}""",
        launch="64x64,16x16",
        sizes={"n": 1024},
    ),
    "matmul_tiled": Program(
        "matmul_tiled.cu",
        main=r"""
int main() {
    const int n = 1024;
    float *A, *B, *C;
    cudaMalloc(&A, n * n * sizeof(float)); cudaMalloc(&B, n * n * sizeof(float));
    cudaMalloc(&C, n * n * sizeof(float));
    cudaMemset(A, 0, n * n * sizeof(float)); cudaMemset(B, 0, n * n * sizeof(float));
    matmul_tiled<<<dim3(n / TILE, n / TILE), dim3(TILE, TILE)>>>(A, B, C, n);
    return cudaperf_check("matmul_tiled");
}""",
        launch="64x64,16x16",
        sizes={"n": 1024},
    ),
    "vector_copy": Program(
        "vector_copy.cu",
        main=r"""
int main() {
    const int n = 1 << 24, n4 = n / 4;
    float *in, *out;
    cudaMalloc(&in, n * sizeof(float)); cudaMalloc(&out, n * sizeof(float));
    cudaMemset(in, 0, n * sizeof(float));
    copy_float4<<<n4 / 256, 256>>>((float4*)out, (const float4*)in, n4);
    copy_cast<<<n4 / 256, 256>>>(out, in, n);
    return cudaperf_check("vector_copy");
}""",
        launch="16384,256",
        launches=2,
        sizes={"n": 1 << 24, "n4": 1 << 22},
    ),
    "spmv_csr": Program(
        "spmv_csr.cu",
        main=r"""
#include <cstdlib>
int main() {
    const int nrows = 1 << 20, per = 8, nnz = nrows * per;
    int* rp = (int*)malloc((nrows + 1) * sizeof(int));
    int* col = (int*)malloc(nnz * sizeof(int));
    for (int i = 0; i <= nrows; ++i) rp[i] = i * per;
    for (int j = 0; j < nnz; ++j) col[j] = (int)(((long long)j * 7919) % nrows);
    int *d_rp, *d_col; double *val, *x, *y;
    cudaMalloc(&d_rp, (nrows + 1) * sizeof(int)); cudaMalloc(&d_col, nnz * sizeof(int));
    cudaMalloc(&val, nnz * sizeof(double)); cudaMalloc(&x, nrows * sizeof(double));
    cudaMalloc(&y, nrows * sizeof(double));
    cudaMemcpy(d_rp, rp, (nrows + 1) * sizeof(int), cudaMemcpyHostToDevice);
    cudaMemcpy(d_col, col, nnz * sizeof(int), cudaMemcpyHostToDevice);
    cudaMemset(val, 0, nnz * sizeof(double)); cudaMemset(x, 0, nrows * sizeof(double));
    spmv_csr<<<nrows / 256, 256>>>(d_rp, d_col, val, x, y, nrows);
    return cudaperf_check("spmv_csr");
}""",
        launch="4096,256",
        sizes={"nrows": 1 << 20},
    ),
    "dyn_shared": Program(
        "dyn_shared.cu",
        main=r"""
int main() {
    const int n = 1 << 24;
    float *in, *out;
    cudaMalloc(&in, n * sizeof(float)); cudaMalloc(&out, n * sizeof(float));
    cudaMemset(in, 0, n * sizeof(float));
    launch(in, out, n);
    return cudaperf_check("stencil_dyn");
}""",
        launch=f"65536,256,{258 * 4}",
        sizes={"n": 1 << 24},
    ),
    "helpers": Program(
        "helpers.cu",
        main=r"""
int main() {
    const int rows = 64, ld = 1 << 16;
    float *x, *y;
    cudaMalloc(&x, ld * sizeof(float)); cudaMalloc(&y, rows * ld * sizeof(float));
    cudaMemset(x, 0, ld * sizeof(float)); cudaMemset(y, 0, rows * ld * sizeof(float));
    saxpy_rows<128><<<ld / 128, 128>>>(y, x, 2.0f, rows, ld);
    return cudaperf_check("saxpy_rows");
}""",
        launch="512,128",
        sizes={"rows": 64, "ld": 1 << 16},
    ),
    "host_sync": Program(
        "host_sync.cu",
        main=r"""
int main() {
    const int n = 1 << 22;
    float *u, *v;
    cudaMalloc(&u, n * sizeof(float)); cudaMalloc(&v, n * sizeof(float));
    cudaMemset(u, 0, n * sizeof(float)); cudaMemset(v, 0, n * sizeof(float));
    run_steps(u, v, n, 2);
    return cudaperf_check("run_steps");
}""",
        launches=4,
    ),
}


@dataclass
class Measured:
    program: str
    static: StructureReport
    measured: StructureReport
    profiles: list[KernelProfile]
    seconds: float


@functools.lru_cache(maxsize=1)
def _device() -> dict:
    """The device (probed in a child process, as conftest does)."""
    from cudaperf_cli.evaluate import probe_device

    return probe_device()


def _arch() -> str:
    return str(_device().get("arch") or "sm_90")


def _sm_count() -> int:
    return int(_device().get("sm_count") or 132)


def _subst(text: str) -> str:
    """``@FULL_WAVE@`` -> blocks of one full wave of 1024-thread blocks (2 per SM)."""
    return text.replace("@FULL_WAVE@", str(2 * _sm_count()))


@pytest.fixture(scope="module")
def ncu_tool() -> str:
    try:
        return find_ncu()
    except ToolchainError as exc:
        pytest.skip(str(exc))


def program_source(prog: Program) -> str:
    """The source that is built: the corpus file, or the file plus a generated main."""
    src = (KERNELS / prog.file).read_text()
    if prog.main is None:
        return src
    head = "#include <cstdio>\n#include <cuda_runtime.h>\n"
    if has_main(src):
        head += "#define main cudaperf_corpus_main\n"
    return (
        head
        + f'#line 1 "{prog.file}"\n'
        + src
        + "\n#undef main\n"
        + _CHECK
        + _subst(prog.main)
        + "\n"
    )


@functools.lru_cache(maxsize=None)
def measure(key: str) -> Measured:
    """Build, profile (one ncu call) and analyse program ``key``; cached per module."""
    prog = PROGRAMS[key]
    arch = _arch()
    exe = build_executable(
        program_source(prog), arch=arch, include_dir=KERNELS, name=prog.file
    )
    t0 = time.monotonic()
    profiles = profile_executable(
        [str(exe)],
        kernel_regex=None,
        metrics=DEFAULT_METRICS,
        timeout_s=NCU_TIMEOUT_S,
        launch_count=prog.launches,
        cwd=KERNELS,
    )
    seconds = time.monotonic() - t0
    static = analyze_file(
        KERNELS / prog.file,
        arch=arch,
        launch=LaunchConfig.parse(_subst(prog.launch)) if prog.launch else None,
        gpu=default_gpu(arch),
        sizes=prog.sizes or None,
    )
    return Measured(key, static, apply_measurements(static, profiles), profiles, seconds)


def kernels(key: str, name: str) -> tuple[KernelReport, KernelReport]:
    """(static, measured) reports of kernel ``name`` of program ``key``."""
    r = measure(key)
    km = r.measured.kernel(name)
    assert km.measured_launches > 0, f"{name} was not profiled: {km.notes}"
    return r.static.kernel(name), km


def _f(x: float | None, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    return f"{x:.{nd}f}" if abs(x) < 1e5 else f"{x:.3g}"


def report_line(pair: str, key: str, name: str, metric: str) -> tuple[float | None, float | None]:
    """Print one [ncu] line; return (measured value, measured score)."""
    ks, km = kernels(key, name)
    ms, mm = ks.metric(metric), km.metric(metric)
    t = km.measured_duration_ns
    print(
        f"[ncu] pair={pair} kernel={name} metric={metric} "
        f"static={_f(ms.static)} {ms.unit} static_score={_f(ms.score)} "
        f"measured={_f(mm.measured)} {mm.value_unit} measured_score={_f(mm.score)} "
        f"time_us={_f(None if t is None else t / 1e3, 1)}",
        flush=True,
    )
    return mm.measured, mm.score


# ---------------------------------------------------------------------------------------
# Pairs
# ---------------------------------------------------------------------------------------


def test_copy_coalesced_vs_strided(ncu_tool):
    vc, sc = report_line("copy", "copy_coalesced", "copy_coalesced", "coalescing")
    vs, ss = report_line("copy", "copy_strided", "copy_strided", "coalescing")
    assert vs > vc and ss < sc
    assert 3.5 <= vc <= 4.5, vc  # 4 sectors per 128-byte warp request
    _, km = kernels("copy_strided", "copy_strided")
    assert km.metric("coalescing").details["measured"]["sectors_per_request_ld"] >= 28


def test_transpose_coalescing_naive_vs_tiled_vs_padded(ncu_tool):
    vn, sn = report_line("transpose", "transpose_naive", "transpose_naive", "coalescing")
    vt, st = report_line("transpose", "transpose_tiled", "transpose_tiled", "coalescing")
    vp, sp = report_line("transpose", "transpose_padded", "transpose_padded", "coalescing")
    assert vn > vt and vn > vp and sn < st and sn < sp
    assert 3.5 <= vt <= 4.5 and 3.5 <= vp <= 4.5, (vt, vp)


def test_transpose_bank_conflicts_tiled_vs_padded(ncu_tool):
    wt, st = report_line("transpose-smem", "transpose_tiled", "transpose_tiled", "shared_memory")
    wp, sp = report_line("transpose-smem", "transpose_padded", "transpose_padded", "shared_memory")
    assert wt > 4 * wp and st < sp
    assert wp <= 1.1, wp  # padded: conflict-free
    prof = {p.name: p for p in measure("transpose_tiled").profiles}["transpose_tiled"]
    assert (prof.get(SH_LD_CONFLICTS) or 0) > 0


def test_divergence_divergent_vs_uniform(ncu_tool):
    ed, sd = report_line("divergence", "branch_divergent", "branch_divergent", "divergence")
    eu, su = report_line("divergence", "branch_uniform", "branch_uniform", "divergence")
    assert ed < eu - 5.0 and sd < su, (ed, eu)


def test_barrier_in_branch_vs_outside(ncu_tool):
    # ncu measures barrier stalls, not the hazard: the hazard factor is the static one, so
    # the measured score still ranks the barrier inside the branch lower
    report_line("barrier", "barrier_in_branch", "barrier_in_branch", "occupancy")
    _, sb = report_line("barrier", "barrier_in_branch", "barrier_in_branch", "synchronization")
    _, so = report_line("barrier", "barrier_in_branch", "barrier_outside", "synchronization")
    assert sb < so


def test_registers_heavy_vs_light(ncu_tool):
    rh, sh = report_line("registers", "regs_heavy", "regs_heavy", "register_pressure")
    rl, sl = report_line("registers", "regs_light", "regs_light", "register_pressure")
    assert rh > rl and sh < sl
    _, kh = kernels("regs_heavy", "regs_heavy")
    _, kl = kernels("regs_light", "regs_light")
    local_h = kh.metric("register_pressure").details["measured"]["local_bytes"]
    local_l = kl.metric("register_pressure").details["measured"]["local_bytes"]
    assert local_h > 0 and local_l == 0, (local_h, local_l)
    oh, _ = report_line("registers", "regs_heavy", "regs_heavy", "occupancy")
    ol, _ = report_line("registers", "regs_light", "regs_light", "occupancy")
    assert oh < ol


def test_partial_wave_vs_full_wave(ncu_tool):
    wp, sp = report_line("waves", "partial_wave", "scale_partial", "load_balance")
    wf, sf = report_line("waves", "partial_wave_full", "scale_partial", "load_balance")
    # 1024-thread blocks of 8 registers: 2 resident per SM
    assert wp == pytest.approx(300 / (2 * _sm_count()), abs=0.01), wp
    assert wf == pytest.approx(1.0, abs=0.01), wf
    assert sp < sf


# ---------------------------------------------------------------------------------------
# The whole table
# ---------------------------------------------------------------------------------------


def _cell(k_static: KernelReport, k_meas: KernelReport, key: str, nd: int = 1) -> str:
    s, m = k_static.metric(key), k_meas.metric(key)
    return f"{_f(s.static, nd)} → {_f(m.measured, nd)}"


def test_static_vs_measured_table(ncu_tool):
    t0 = time.monotonic()
    rows = [
        "| program | kernel | µs/launch | coalescing sectors/req | occupancy % (theor. → achieved) "
        "| active lanes % | shared ways | barriers → stall % | waves | score static → measured |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    problems = []
    for key in PROGRAMS:
        r = measure(key)
        for ks in r.static.kernels:
            km = r.measured.kernel(ks.name)
            if not km.measured_launches:
                problems.append(f"{key}/{ks.name}: not profiled")
                continue
            for m in km.metrics:
                if m.score is not None and not 0.0 <= m.score <= 1.0:
                    problems.append(f"{key}/{ks.name}/{m.key}: score {m.score}")
            t = km.measured_duration_ns
            rows.append(
                f"| {key} | {ks.name} | {_f(None if t is None else t / 1e3, 1)} "
                f"| {_cell(ks, km, 'coalescing')} | {_cell(ks, km, 'occupancy', 0)} "
                f"| {_cell(ks, km, 'divergence', 0)} | {_cell(ks, km, 'shared_memory')} "
                f"| {_cell(ks, km, 'synchronization')} | {_cell(ks, km, 'load_balance', 2)} "
                f"| {_f(ks.score)} → {_f(km.score)} |"
            )
    total_ncu = sum(measure(k).seconds for k in PROGRAMS)
    print("\n" + "\n".join(rows), flush=True)
    print(
        f"\n{len(PROGRAMS)} programs, ncu time {total_ncu:.0f} s, this test "
        f"{time.monotonic() - t0:.0f} s (arch {_arch()})",
        flush=True,
    )
    assert not problems, problems
