"""PyTorch-problem evaluation on the CPU: job/result JSON, comparison rules, guard decisions
(on synthetic profiler records), the parent's process handling (no device, timeouts, build
timeouts, syntax and compile errors), and the whole worker pipeline against the host test
backend (``CUDAPERF_WORKER_BACKEND=host``: models on the CPU, the host clock for timing, no
profiler guards).  The same pipeline on a GPU: tests/test_gpu_torch_eval.py."""

from __future__ import annotations

import json
import re
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from cudaperf_cli.evaluate.job import BACKEND_ENV, HOOKS_ENV, TimingSettings, TimingStats
from cudaperf_cli.evaluate.torch_job import (
    ALIASING,
    BACKGROUND_THREAD,
    COMPILE_ERROR,
    COMPILE_TIMEOUT,
    DEFAULT_TORCH_TOLERANCES,
    DYNAMIC_GUARDS,
    GUARD_REJECTED,
    INHERITS_MODEL,
    LOWER_PRECISION,
    NO_CUSTOM_KERNEL,
    OUTPUT_TYPE,
    PATCHING,
    RESULT_CACHE,
    SHAPE_SPECIALISED,
    SIDE_STREAM,
    TORCH_FALLBACK,
    OutputCheck,
    TorchConfigResult,
    TorchEvalJob,
    TorchEvalResult,
    TorchTiming,
    run_torch_evaluation,
    torch_tolerance,
    trial_seed,
)
from cudaperf_cli.evaluate.torch_worker import (
    FORWARD_ANNOTATION,
    MARKER_ANNOTATION,
    analyze_profile,
    apply_constant_overrides,
    inherits_model,
    lower_precision_verdict,
    profile_verdict,
)
from cudaperf_cli.problems.pytorch import read_constants

DATA = Path(__file__).parent / "data"
PROBLEM = DATA / "torch_problems" / "scaled_relu.py"
BIAS_PROBLEM = DATA / "torch_problems" / "bias_relu.py"
HOST = {"CUDAPERF_WORKER_BACKEND": "host"}
FAST_TIMING = TimingSettings(
    warmup_reps=1, min_reps=3, max_reps=5, min_total_ms=0.0, flush_l2=False, sync_reps=2
)


# ---------------------------------------------------------------------------------------
# Job and result
# ---------------------------------------------------------------------------------------


def _cand(tmp_path: Path, py: str, *, cu: bool = True, name: str = "cand") -> list[str]:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "model.py").write_text(py)
    files = [str(d / "model.py")]
    if cu:
        (d / "kernel.cu").write_text('extern "C" int noop(cudaStream_t stream) { return 0; }\n')
        files.append(str(d / "kernel.cu"))
    return files


def test_job_json_round_trip(tmp_path: Path) -> None:
    files = _cand(tmp_path, "class ModelNew: pass\n")
    job = TorchEvalJob(
        problem=str(PROBLEM),
        candidate=files,
        shapes=[{"batch_size": 7}],
        tolerances={"float32": {"atol": 1e-3, "rtol": 1e-3}},
        timing=TimingSettings(min_reps=4),
        allowed_ops=["softmax"],
        disabled_guards=[SIDE_STREAM],
        build_root=str(tmp_path / "b"),
    )
    job.validate()
    back = TorchEvalJob.from_json(json.loads(json.dumps(job.to_json())))
    assert back == job
    assert back.module_path == files[0] and back.cuda_files == [files[1]]
    assert job.extensions_dir() == tmp_path / "b" / "ext" / job.content_key()
    key = job.content_key()
    Path(files[1]).write_text("// changed\n")
    assert job.content_key() != key


def test_result_json_round_trip() -> None:
    stats = TimingStats(n=5, median_ms=1.5, min_ms=1.0, max_ms=2.0, p25_ms=1.2, p75_ms=1.7, mean_ms=1.5)
    res = TorchEvalResult(
        status="wrong",
        message="m",
        configs=[TorchConfigResult(
            name="default", constants={}, status="wrong", trials_run=1, failed_trial=0,
            seeds=[1], inputs=[{"shape": [2, 3], "dtype": "float32"}],
            outputs=[OutputCheck(path="out", ok=False, shape=[2, 3], dtype="float32",
                                 n_mismatch=1, worst_mismatch={"index": [1, 2], "got": "nan",
                                                               "expected": 0.5, "abs_err": "nan",
                                                               "rel_err": None})],
        )],
        worst_mismatch={"path": "out", "index": [1, 2]},
        timing=TorchTiming(config="default", candidate=stats, eager=stats, compile=None,
                           compile_error="boom", speedup_eager=1.0),
        guard={"id": ALIASING, "reason": "r", "config": "default", "trial": 0},
        warnings=["w"],
    )
    text = json.dumps(res.to_json(), allow_nan=False)
    assert TorchEvalResult.from_json(json.loads(text)) == res


@pytest.mark.parametrize(
    "change, words",
    [
        ({"trials": 2}, "trials must be at least 3"),
        ({"format": "triton"}, "format 'triton'"),
        ({"problem": "/nonexistent/p.py"}, "file not found"),
        ({"shapes": [{"nope": 3}]}, "'nope' is not a module-level int constant"),
        ({"shapes": [{"batch_size": 2.5}]}, "must be an int"),
        ({"shapes": [{}]}, "shapes[0] is empty"),
        ({"disabled_guards": ["bogus"]}, "unknown guard ids"),
        ({"tolerances": {"float32": {"eps": 1}}}, "tolerances['float32']"),
    ],
)
def test_malformed_jobs_raise(tmp_path: Path, change: dict[str, Any], words: str) -> None:
    files = _cand(tmp_path, "class ModelNew: pass\n")
    job = TorchEvalJob(**{"problem": str(PROBLEM), "candidate": files, **change})
    with pytest.raises(ValueError) as ei:
        run_torch_evaluation(job, timeout_s=5)
    assert words in str(ei.value)


def test_candidate_file_rules(tmp_path: Path) -> None:
    py_only = _cand(tmp_path, "class ModelNew: pass\n", cu=False)
    with pytest.raises(ValueError, match="fast format needs a .cu"):
        TorchEvalJob(problem=str(PROBLEM), candidate=py_only).validate()
    TorchEvalJob(problem=str(PROBLEM), candidate=py_only, format="load_inline").validate()
    two = [*py_only, str(PROBLEM)]
    with pytest.raises(ValueError, match="exactly one .py"):
        TorchEvalJob(problem=str(PROBLEM), candidate=two, format="load_inline").validate()


def test_constant_overrides_reach_derived_values() -> None:
    src = ("import torch\nbatch_size = 16\ndim: int = 8\ntotal = batch_size * dim\n"
           "rows = cols = 4\nscale = 0.5\n")
    ns: dict[str, Any] = {}
    code = apply_constant_overrides(src, {"batch_size": 3, "dim": 5, "cols": 9}, "p.py")
    exec(code, ns)  # noqa: S102
    assert (ns["batch_size"], ns["dim"], ns["total"], ns["rows"], ns["cols"]) == (3, 5, 15, 4, 9)
    with pytest.raises(ValueError, match="no module-level assignment of missing"):
        apply_constant_overrides(src, {"missing": 1}, "p.py")


def test_constant_overrides_reach_tuple_assignments() -> None:
    # KernelBench level 2 (e.g. 11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm) sets
    # `height = width = 2048` and later `height, width = 32, 32`: the last binding counts.
    src = "height = width = 2048\nheight, width = 32, 32\nbatch = 4\narea = height * width\n"
    ns: dict[str, Any] = {}
    exec(apply_constant_overrides(src, {"height": 7}, "p.py"), ns)  # noqa: S102
    assert (ns["height"], ns["width"], ns["area"], ns["batch"]) == (7, 32, 224, 4)
    # every statement binding an overridden name runs as written (its other targets, its
    # calls) and is followed by the override
    ns = {}
    src2 = "D = {}\nbatch = D['b'] = 16\nn, (k, j) = 8, divmod(7, 2)\nm = n * 2\n"
    exec(apply_constant_overrides(src2, {"batch": 7, "n": 3}, "p.py"), ns)  # noqa: S102
    assert (ns["batch"], ns["D"], ns["n"], ns["k"], ns["j"], ns["m"]) == (7, {"b": 16}, 3, 3, 1, 6)
    assert read_constants("a, b = 1, 2\na, b = b, a\n") == {}  # a swap: no constants


def test_names_bound_by_what_runs_are_not_constants() -> None:
    src = ("batch_size = 16\nif True:\n    batch_size = 256\nn = 4\nfor n in range(3):\n    pass\n"
           "import math as k\nk = 3\nw = 2\n[w := 5 for _ in range(1)]\ng = 1\n"
           "def f():\n    global g\n    g = 2\nshift = 1 >> -1\ndim = 64\n")
    assert read_constants(src) == {"dim": 64}


def test_tolerances_and_seeds() -> None:
    assert torch_tolerance("float32") == (1e-4, 1e-4)
    assert torch_tolerance("torch.bfloat16") == (1e-2, 1e-2)
    assert torch_tolerance("int64") == (0.0, 0.0) and torch_tolerance("bool") == (0.0, 0.0)
    assert torch_tolerance("float32", {"float32": {"atol": 1e-3}}) == (1e-3, 1e-4)
    assert set(DEFAULT_TORCH_TOLERANCES) == {"float32", "float16", "bfloat16", "float64"}
    assert trial_seed(42, 0, 0) == trial_seed(42, 0, 0)
    seeds = {trial_seed(42, c, t) for c in range(3) for t in range(5)}
    assert len(seeds) == 15 and all(0 <= s < 2**63 for s in seeds)


# ---------------------------------------------------------------------------------------
# Comparison, aliasing, inputs (torch on the CPU)
# ---------------------------------------------------------------------------------------


def test_compare_reports_the_worst_mismatch_index() -> None:
    torch = pytest.importorskip("torch")
    from cudaperf_cli.evaluate.torch_worker import compare_outputs

    ref = torch.rand(4, 6)
    got = ref.clone()
    got[1, 2] += 5e-4  # out of tolerance, small
    got[3, 4] += 1.0  # the worst
    (chk,) = compare_outputs(got, ref)
    assert not chk.ok and chk.n_mismatch == 2 and chk.n_elements == 24
    assert chk.worst_mismatch is not None and chk.worst_mismatch["index"] == [3, 4]
    assert chk.worst_mismatch["got"] == pytest.approx(float(got[3, 4]))
    assert chk.worst_mismatch["expected"] == pytest.approx(float(ref[3, 4]))
    assert chk.worst_mismatch["abs_err"] == pytest.approx(1.0, rel=1e-5)
    assert chk.max_abs_err == pytest.approx(1.0, rel=1e-5)
    assert "2 of 24 elements differ (atol 0.0001, rtol 0.0001); worst at [3, 4]" in chk.message
    (ok,) = compare_outputs(ref + 5e-5, ref)
    assert ok.ok and ok.max_abs_err == pytest.approx(5e-5, rel=1e-2)


def test_nan_never_passes_and_equal_infinities_do() -> None:
    torch = pytest.importorskip("torch")
    from cudaperf_cli.evaluate.torch_worker import compare_outputs

    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    got = torch.tensor([1.0, float("nan"), float("inf"), float("nan")])
    (chk,) = compare_outputs(got, ref)
    assert not chk.ok and chk.n_mismatch == 2 and chk.n_nan == 2
    assert chk.worst_mismatch is not None and chk.worst_mismatch["index"] == [1]
    assert chk.worst_mismatch["got"] == "nan"
    (inf_ok,) = compare_outputs(torch.tensor([float("inf"), -1.0]), torch.tensor([float("inf"), -1.0]))
    assert inf_ok.ok


def test_shape_dtype_structure_and_integers() -> None:
    torch = pytest.importorskip("torch")
    from cudaperf_cli.evaluate.torch_worker import compare_outputs

    (s,) = compare_outputs(torch.zeros(2, 3), torch.zeros(3, 2))
    assert not s.ok and s.message == "out: shape [2, 3] differs from the expected [3, 2]"
    (d,) = compare_outputs(torch.zeros(2, dtype=torch.float64), torch.zeros(2))
    assert not d.ok and "dtype float64 differs from the expected float32" in d.message
    (st,) = compare_outputs((torch.zeros(2), torch.zeros(2)), torch.zeros(2))
    assert not st.ok and "a tuple of 2" in st.message and "a tensor [2] float32" in st.message
    big = torch.tensor([2**60, 5], dtype=torch.int64)
    (i,) = compare_outputs(big + torch.tensor([1, 0]), big)
    assert not i.ok and i.n_mismatch == 1 and i.worst_mismatch["index"] == [0]
    checks = compare_outputs([torch.ones(2), 3], [torch.ones(2), 3])
    assert [c.path for c in checks] == ["out[0]", "out[1]"] and all(c.ok for c in checks)


def test_aliasing_and_input_checks() -> None:
    torch = pytest.importorskip("torch")
    from cudaperf_cli.evaluate.torch_worker import check_inputs, find_aliasing

    x = torch.rand(8)
    rx = x.clone()
    assert "shares memory with input 0" in (find_aliasing(x.view(2, 4), [x], rx * 2, [rx]) or "")
    # A view problem: the reference returns its input's memory too, so the candidate may.
    assert find_aliasing(x.view(2, 4), [x], rx.view(2, 4), [rx]) is None
    r_out = torch.rand(8)
    assert "reference's output out" in (find_aliasing(r_out[2:], [x], r_out, [rx]) or "")
    assert find_aliasing(torch.rand(8), [x], r_out, [rx]) is None

    pristine = torch.rand(4)
    c, r = pristine.clone(), pristine.clone()
    c[0] += 1
    why, ref_mod = check_inputs([c], [r], [pristine], None)
    assert why is not None and "modified input 0" in why and not ref_mod
    c2, r2 = pristine.clone(), pristine.clone()
    c2.mul_(2)
    r2.mul_(2)
    assert check_inputs([c2], [r2], [pristine], None) == (None, True)  # in-place problem


# ---------------------------------------------------------------------------------------
# Guard decisions
# ---------------------------------------------------------------------------------------


def _rec(kind: str, name: str, i: int, start: float, end: float, **kw: Any) -> dict[str, Any]:
    return {"kind": kind, "name": name, "id": i, "linked_id": kw.get("linked", 0),
            "start_us": start, "end_us": end, "thread": kw.get("thread", 1),
            "stream": kw.get("stream")}


def _profile(*fwd: dict[str, Any]) -> list[dict[str, Any]]:
    """Marker (stream 7) - forward window [100, 200] - marker."""
    return [
        _rec("annotation", MARKER_ANNOTATION, 1, 10, 20),
        _rec("cpu_op", "aten::add_", 2, 11, 19),
        _rec("runtime", "cudaLaunchKernel", 1001, 12, 13),
        _rec("kernel", "void at::native::vectorized_elementwise_kernel<add>", 1001, 30, 31, stream=7),
        _rec("annotation", FORWARD_ANNOTATION, 3, 100, 200),
        *fwd,
        _rec("annotation", MARKER_ANNOTATION, 4, 300, 310),
        _rec("cpu_op", "aten::add_", 5, 301, 309),
        _rec("runtime", "cudaLaunchKernel", 1009, 302, 303),
        _rec("kernel", "void at::native::vectorized_elementwise_kernel<add>", 1009, 320, 321, stream=7),
    ]


CUSTOM = [
    _rec("cpu_op", "aten::empty_like", 10, 101, 105),
    _rec("cpu_op", "aten::empty_strided", 11, 102, 104),
    _rec("runtime", "cudaLaunchKernel", 1002, 110, 112),
    _rec("kernel", "scaled_relu_kernel(float const*, float*, long, float)", 1002, 150, 160, stream=7),
]


def test_profile_custom_kernel_passes() -> None:
    rep = analyze_profile(_profile(*CUSTOM))
    assert rep["current_streams"] == [7]
    assert rep["custom_kernels"] == ["scaled_relu_kernel(float const*, float*, long, float)"]
    assert rep["kernels"][0]["owner"] == FORWARD_ANNOTATION
    assert rep["torch_ops"] == {"empty_like": 1, "empty_strided": 1}
    assert rep["disallowed_ops"] == [] and rep["side_stream_launches"] == []
    assert profile_verdict(rep) is None


def test_profile_pytorch_only_is_no_custom_kernel() -> None:
    fwd = [
        _rec("cpu_op", "aten::relu", 10, 101, 110),
        _rec("cpu_op", "aten::clamp_min", 11, 102, 109),
        _rec("runtime", "cudaLaunchKernel", 1002, 103, 104),
        # anonymous-namespace name: attributed to PyTorch by the op around its launch
        _rec("kernel", "void (anonymous namespace)::launch_clamp_scalar", 1002, 150, 160, stream=7),
        _rec("cpu_op", "aten::mul", 12, 120, 130),
        # clock skew put the launch record outside aten::mul: the correlation link decides
        _rec("runtime", "cudaLaunchKernel", 1003, 131, 132),
        _rec("kernel", "void at::native::vectorized_elementwise_kernel<mul>", 1003, 170, 180,
             stream=7, linked=12),
    ]
    rep = analyze_profile(_profile(*fwd))
    assert rep["custom_kernels"] == [] and len(rep["kernels"]) == 2
    assert [k["owner"] for k in rep["kernels"]] == ["aten::clamp_min", "aten::mul"]
    gid, why = profile_verdict(rep)  # type: ignore[misc]
    assert gid == NO_CUSTOM_KERNEL and "no kernel of the candidate's own" in why
    # with no_custom_kernel off, the same forward is a torch_fallback
    gid2, why2 = profile_verdict(rep, [NO_CUSTOM_KERNEL])  # type: ignore[misc]
    assert gid2 == TORCH_FALLBACK and "aten::clamp_min, aten::mul, aten::relu" in why2


def test_profile_decoy_kernel_plus_pytorch_is_torch_fallback() -> None:
    fwd = [*CUSTOM, _rec("cpu_op", "aten::mm", 20, 120, 130),
           _rec("runtime", "cudaLaunchKernel", 1005, 121, 122),
           _rec("kernel", "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32", 1005, 165, 190, stream=7)]
    rep = analyze_profile(_profile(*fwd))
    assert rep["disallowed_ops"] == ["mm"]
    assert profile_verdict(rep) == (
        TORCH_FALLBACK,
        "forward ran PyTorch compute ops: aten::mm (allowed in forward: allocation, views and copies)",
    )
    assert profile_verdict(analyze_profile(_profile(*fwd), allow_torch_ops=True), allow_torch_ops=True) is None
    assert profile_verdict(analyze_profile(_profile(*fwd), allowed_ops=["mm"])) is None


def test_profile_work_inside_allowed_convolutions_is_the_librarys() -> None:
    # KernelBench level 2 (19_ConvTranspose2d_GELU_GroupNorm, 24_Conv3d_Min_Softmax): cuDNN's
    # transposed convolution adds its bias with aten::add_ inside aten::convolution, and its
    # FFT algorithms run on cuDNN's own streams; the candidate's kernel follows on stream 7.
    conv = [
        _rec("cpu_op", "aten::conv_transpose2d", 20, 101, 140),
        _rec("cpu_op", "aten::convolution", 21, 102, 139),
        _rec("cpu_op", "aten::cudnn_convolution_transpose", 22, 103, 130),
        _rec("runtime", "cudaLaunchKernel", 1003, 104, 105),
        _rec("kernel", "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*)", 1003, 150, 152,
             stream=13),
        _rec("runtime", "cudaLaunchKernel", 1004, 106, 107),
        _rec("kernel", "void fft2d_c2r_32x32<float, false>(float*, float2 const*)", 1004, 153, 155,
             stream=14, linked=22),
        _rec("cpu_op", "aten::add_", 23, 131, 138),
        _rec("runtime", "cudaLaunchKernel", 1005, 132, 133),
        _rec("kernel", "void at::native::vectorized_elementwise_kernel<add>", 1005, 156, 157, stream=7),
    ]
    fwd = [*conv, _rec("runtime", "cudaLaunchKernel", 1006, 150, 151),
           _rec("kernel", "gelu_groupnorm_kernel(float const*, float*)", 1006, 160, 170, stream=7)]
    rep = analyze_profile(_profile(*fwd), allow_torch_ops=True)
    assert rep["disallowed_ops"] == [] and rep["side_stream_launches"] == []
    assert any("aten::add_" in n for n in rep["notes"]) and any("own stream(s) [13, 14]" in n for n in rep["notes"])
    assert profile_verdict(rep, allow_torch_ops=True) is None
    # the same add_ outside the convolution is the candidate's PyTorch fallback
    outside = [*fwd, _rec("cpu_op", "aten::add_", 30, 175, 180),
               _rec("runtime", "cudaLaunchKernel", 1007, 176, 177),
               _rec("kernel", "void at::native::vectorized_elementwise_kernel<add>", 1007, 185, 186, stream=7)]
    rep2 = analyze_profile(_profile(*outside), allow_torch_ops=True)
    assert rep2["disallowed_ops"] == ["add_"]
    # only bias additions are the library's: a softmax "inside" a convolution (a tensor
    # subclass's __torch_dispatch__) is the candidate's PyTorch fallback
    inside = [*fwd, _rec("cpu_op", "aten::_softmax", 31, 135, 137)]
    assert analyze_profile(_profile(*inside), allow_torch_ops=True)["disallowed_ops"] == ["_softmax"]
    # a kernel of the candidate's own on another stream is still a side stream, next to a
    # convolution or not; without allow_torch_ops cuDNN's streams count too
    own_side = [*fwd, _rec("runtime", "cudaLaunchKernel", 1008, 181, 182),
                _rec("kernel", "my_kernel", 1008, 190, 5000, stream=21)]
    rep3 = analyze_profile(_profile(*own_side), allow_torch_ops=True)
    assert rep3["side_stream_launches"] == [{"name": "my_kernel", "stream": 21}]
    # cuDNN's kernels still running when the candidate's kernel starts were not waited
    # for (a convolution on a side stream, outside the timed events): side stream
    late = [dict(r, end_us=165) if r["name"].startswith("void fft2d_c2r") else r for r in fwd]
    rep5 = analyze_profile(_profile(*late), allow_torch_ops=True)
    assert [s["stream"] for s in rep5["side_stream_launches"]] == [14]
    assert rep["library_stream_launches"] and rep3["library_stream_launches"]
    # a matmul's kernels on the candidate's own stream, joined or not, are a side stream
    # (cuBLAS does not run on streams of its own: `with torch.cuda.stream(s): x @ w`)
    mm = [_rec("cpu_op", "aten::mm", 40, 101, 120),
          _rec("runtime", "cudaLaunchKernel", 1010, 102, 103),
          _rec("kernel", "nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NNT", 1010, 130, 140, stream=21),
          _rec("runtime", "cudaLaunchKernel", 1011, 150, 151),
          _rec("kernel", "bias_relu_kernel(float const*, float*)", 1011, 160, 170, stream=7)]
    assert [s["stream"] for s in analyze_profile(_profile(*mm), allow_torch_ops=True)["side_stream_launches"]] == [21]
    # a launch from another thread while a convolution runs is not the convolution's
    other = [*conv, _rec("runtime", "cudaLaunchKernel", 1012, 108, 109, thread=2),
             _rec("kernel", "cutlass_my_gemm", 1012, 150, 151, stream=22),
             _rec("runtime", "cudaLaunchKernel", 1013, 150, 151),
             _rec("kernel", "gelu_groupnorm_kernel(float const*, float*)", 1013, 160, 170, stream=7)]
    assert [s["stream"] for s in analyze_profile(_profile(*other), allow_torch_ops=True)["side_stream_launches"]] == [22]
    rep4 = analyze_profile(_profile(*fwd))
    assert {s["stream"] for s in rep4["side_stream_launches"]} == {13, 14}
    assert rep4["disallowed_ops"] == ["add_", "conv_transpose2d", "convolution", "cudnn_convolution_transpose"]


def test_profile_library_kernel_names_are_not_custom() -> None:
    # cuBLAS called directly from the candidate's own code: no aten op around the launch,
    # but the name is a library's.
    fwd = [_rec("runtime", "cudaLaunchKernel", 1002, 110, 112),
           _rec("kernel", "nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NNT", 1002, 150, 160, stream=7)]
    rep = analyze_profile(_profile(*fwd))
    assert rep["custom_kernels"] == []
    assert profile_verdict(rep)[0] == NO_CUSTOM_KERNEL  # type: ignore[index]


def test_profile_side_stream_and_host_copies() -> None:
    side = [_rec("runtime", "cudaLaunchKernel", 1002, 110, 112),
            _rec("kernel", "my_kernel", 1002, 150, 5000, stream=21)]
    rep = analyze_profile(_profile(*side))
    assert rep["side_stream_launches"] == [{"name": "my_kernel", "stream": 21}]
    gid, why = profile_verdict(rep)  # type: ignore[misc]
    assert gid == SIDE_STREAM and "stream(s) [21], not on the current stream [7]" in why
    assert profile_verdict(rep, [SIDE_STREAM]) is None

    dtoh = [*CUSTOM, _rec("cpu_op", "aten::_to_copy", 30, 120, 140),
            _rec("runtime", "cudaMemcpyAsync", 1006, 121, 122),
            _rec("memcpy", "Memcpy DtoH (Device -> Pageable)", 1006, 170, 175, stream=7)]
    gid, why = profile_verdict(analyze_profile(_profile(*dtoh)))  # type: ignore[misc]
    assert gid == TORCH_FALLBACK and "device-to-host" in why
    item = [*CUSTOM, _rec("cpu_op", "aten::_local_scalar_dense", 30, 120, 140),
            _rec("runtime", "cudaMemcpyAsync", 1006, 121, 122),
            _rec("memcpy", "Memcpy DtoH (Device -> Pageable)", 1006, 170, 175, stream=7)]
    assert profile_verdict(analyze_profile(_profile(*item))) is None


def test_profile_without_runtime_records_uses_correlation_links() -> None:
    recs = [r for r in _profile(*CUSTOM) if r["kind"] != "runtime"]
    for r in recs:
        if r["name"].startswith("scaled_relu_kernel"):
            r["linked_id"] = 3  # the forward annotation
    rep = analyze_profile(recs)
    assert rep["custom_kernels"] and rep["notes"]
    assert rep["current_streams"] == []  # markers cannot be placed: side streams unchecked
    with pytest.raises(ValueError, match="no forward window"):
        analyze_profile([r for r in recs if r["name"] != FORWARD_ANNOTATION])


def test_inherits_model_and_precision_verdicts() -> None:
    class Model:
        def forward(self, x: Any) -> Any:
            return x

    class Sub(Model):
        pass

    class Copy:
        forward = Model.forward

    class Own:
        def forward(self, x: Any) -> Any:
            return x

    assert "subclass" in (inherits_model(Sub, Model) or "")
    assert inherits_model(Copy, Model) == "ModelNew.forward is Model.forward"
    assert inherits_model(Own, Model) is None
    NamedModel = type("Model", (), {})
    Indirect = type("ModelNew", (NamedModel,), {"forward": lambda self, x: x})
    assert "a class named Model" in (inherits_model(Indirect, Model) or "")

    assert lower_precision_verdict(6e-8, 6e-8, 64, 2**-16) == (False, 2**-16)
    tf32_like = 2**-11
    assert lower_precision_verdict(tf32_like, 6e-8, 64, 2**-16)[0]
    assert not lower_precision_verdict(60 * 1e-6, 1e-6, 64, 2**-16)[0]
    assert lower_precision_verdict(65 * 1e-6, 1e-6, 64, 2**-16)[0]


def test_patches_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import cudaperf_cli.evaluate.torch_worker as tw

    snap = tw.snapshot_patchables(torch, tw)
    assert tw.find_patches(snap) == []
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 1e-3)
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(tw, "compare_outputs", lambda *a, **k: [])
    assert tw.find_patches(snap) == [
        "torch.cuda.Event.elapsed_time",
        "time.perf_counter",
        "cudaperf_cli.evaluate.torch_worker.compare_outputs",
    ]


def test_tensor_dunders_builtins_and_global_state_are_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import builtins

    import cudaperf_cli.evaluate.torch_output_checks as oc
    import cudaperf_cli.evaluate.torch_worker as tw

    snap = tw.snapshot_patchables(torch, tw)
    state = oc.global_state(torch)
    # ordinary tensor work, a profiler and a module call change nothing
    with torch.autograd.profiler.profile():
        torch.nn.Linear(4, 4)(torch.ones(2, 4)).sum().item()
    assert tw.find_patches(snap) == [] and oc.global_state_changes(state, oc.global_state(torch)) == []
    # every method and dunder torch.Tensor resolves is recorded: shadowing TensorBase's is seen
    for name in ("__int__", "__float__", "__bool__", "__index__", "item", "tolist", "__lt__",
                 "__gt__", "__abs__", "numel", "max", "sum", "__eq__", "__ne__", "__sub__"):
        assert f"torch.Tensor.{name}" in snap, name
    monkeypatch.setattr(torch.Tensor, "__int__", lambda self: 0, raising=False)
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: [], raising=False)
    monkeypatch.setattr(builtins, "float", lambda x=0.0: 0.0)
    monkeypatch.setattr(oc, "output_type_problem", lambda *a, **k: None)
    found = tw.find_patches(snap)
    monkeypatch.undo()
    assert found == ["torch.Tensor.__int__", "torch.Tensor.tolist", "builtins.float",
                     "cudaperf_cli.evaluate.torch_output_checks.output_type_problem"], found
    # modes and global hooks that reroute every op or rewrite the reference's output
    from torch.overrides import TorchFunctionMode

    with TorchFunctionMode():
        assert oc.global_state_changes(state, oc.global_state(torch)) == ["torch function modes"]
    h = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)
    try:
        assert oc.global_state_changes(state, oc.global_state(torch)) == [
            "torch.nn.modules.module._global_forward_hooks"]
    finally:
        h.remove()
    assert oc.global_state_changes(state, oc.global_state(torch)) == []


def test_comparison_reads_values_through_saved_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.Tensor's dunders replaced (as a candidate could, even just for the moment of a
    comparison): the comparison, the fingerprints and bits_equal still see the difference."""
    torch = pytest.importorskip("torch")
    import cudaperf_cli.evaluate.torch_worker as tw

    tw.saved_ops()
    got, ref = torch.zeros(4, 8), torch.randn(4, 8) + 3.0
    for name, fn in [("__int__", lambda self: 0), ("__index__", lambda self: 0),
                     ("__float__", lambda self: 0.0), ("__bool__", lambda self: False),
                     ("__le__", lambda self, o: torch.ones_like(self, dtype=torch.bool)),
                     ("__sub__", lambda self, o: torch.zeros_like(self)),
                     ("__ne__", lambda self, o: torch.zeros_like(self, dtype=torch.bool)),
                     ("abs", lambda self: torch.zeros_like(self)),
                     ("sum", lambda self, *a, **k: torch.zeros(())),
                     ("item", lambda self: 0), ("max", lambda self, *a, **k: torch.zeros(()))]:
        monkeypatch.setattr(torch.Tensor, name, fn, raising=False)
    chk = tw.compare_tensor("out", got, ref, 1e-4, 1e-4)
    ints = tw.compare_tensor("out", torch.zeros(5, dtype=torch.int64), torch.arange(5), 0, 0)
    bits = tw.bits_equal(got, ref)
    fps = tw.same_fingerprints(tw.fingerprints([got]), tw.fingerprints([ref]))
    monkeypatch.undo()
    assert not chk.ok and chk.n_mismatch == 32 and chk.max_abs_err > 0, chk
    assert not ints.ok and ints.n_mismatch == 4
    assert not bits and fps == [0]


def test_output_type_rules() -> None:
    torch = pytest.importorskip("torch")
    from cudaperf_cli.evaluate.torch_output_checks import NO_REFERENCE, output_type_problem

    ref = torch.randn(3, 4)
    ok = torch.randn(3, 4)
    assert output_type_problem(ok) is None and output_type_problem(ok, ref) is None

    class Sub(torch.Tensor):
        pass

    sub = ok.as_subclass(Sub)
    assert "not a torch.Tensor" in output_type_problem(sub)
    assert "out[1] is a" in output_type_problem((ok, sub), (ref, ref))
    p = torch.nn.Parameter(ok.clone(), requires_grad=False)
    assert output_type_problem(p) is None  # decided with the reference:
    assert "not a torch.Tensor" in output_type_problem(p, ref)
    assert output_type_problem(p, torch.nn.Parameter(ref, requires_grad=False)) is None
    assert "layout" in output_type_problem(ok.to_sparse())
    assert "meta device" in output_type_problem(torch.empty(3, 4, device="meta"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype
        nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    assert "nested" in output_type_problem(nested)
    assert "not contiguous" in output_type_problem(ok.t().contiguous().t(), ref)
    assert output_type_problem(ok.t(), ref.t()) is None  # as strided as the reference
    expanded = torch.randn(4).expand(3, 4)
    assert "overlapping" in output_type_problem(expanded, ref.t())
    assert "negation" in output_type_problem(torch._neg_view(ok), ref)
    # containers: plain types, or exactly the reference's
    assert output_type_problem([ok, ok], (ref, ref)) is None
    assert output_type_problem({"a": ok}, {"a": ref}) is None
    mx = torch.max(ref, dim=1)
    assert output_type_problem(torch.max(ok, dim=1), mx) is None

    class MyTuple(tuple):
        pass

    assert "MyTuple" in output_type_problem(MyTuple((ok,)), (ref,))
    assert output_type_problem(MyTuple((ok,))) is None  # decided with the reference
    # scalars: the reference's exact type (int/float/bool may mix)
    class Lying(float):
        def __float__(self):
            return 2.0

    assert output_type_problem((ok, 2), (ref, 2.0)) is None
    assert "Lying" in output_type_problem((ok, Lying(1.0)), (ref, 2.0))
    assert "str" in output_type_problem("x", None)
    # a structure that differs is the comparison's (wrong), not a type problem
    assert output_type_problem((ok,), (ref, ref)) is None
    assert output_type_problem(ok, (ref,)) is None
    assert NO_REFERENCE is not None


def test_thread_watch(tmp_path: Path) -> None:
    import ctypes
    import threading

    from cudaperf_cli.evaluate.torch_output_checks import ThreadWatch, native_threads

    w = ThreadWatch()
    assert w.python_leftovers() is None
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="helper", daemon=True)
    w.before_call()
    t.start()
    why = w.after_call()
    assert why is not None and "'helper'" in why
    stop.set()
    t.join()
    assert w.python_leftovers() is None
    if native_threads() is None:
        pytest.skip("no /proc/self/task")
    libc = ctypes.CDLL(None)

    def native() -> None:
        tid = ctypes.c_ulong()
        libc.pthread_create(ctypes.byref(tid), None, ctypes.cast(libc.sleep, ctypes.c_void_p),
                            ctypes.c_void_p(2))
        libc.pthread_detach(tid)

    w = ThreadWatch()
    w.before_call()
    native()
    assert w.after_call() is None and w.first_call_new  # the first call: library threads start
    w.before_call()
    native()
    why = w.after_call()
    assert why is not None and why.startswith("OS thread(s)"), why
    w.before_call()
    assert w.after_call() is None  # nothing new in this call
    calls = []
    watched = w.wrap(lambda: calls.append(threading.Thread(target=stop.wait, daemon=True)) or calls[-1].start())
    stop.clear()
    watched()
    assert w.timed_leftover is not None
    stop.set()


def test_thread_watch_sees_a_thread_before_it_runs() -> None:
    """A thread started through ``_thread`` counts from the start call on, before it runs:
    ``_thread._count()`` and ``sys._current_frames()`` see it only once it runs, which on a
    loaded machine came after forward returned (the output was then merely ``wrong``).
    Here the thread starts for real only after the check."""
    import _thread
    import threading

    from cudaperf_cli.evaluate import torch_output_checks as toc

    w = toc.ThreadWatch()
    real_start = _thread.start_new_thread.__wrapped__
    pending: list[tuple] = []
    counted = toc.THREAD_STARTS._wrap(lambda fn, args: pending.append((fn, args)))
    done = threading.Event()
    w.before_call()
    counted(done.set, ())
    why = w.after_call()
    assert why is not None and "still running" in why, why
    real_start(*pending[0])  # now it runs, and ends
    assert done.wait(5)
    for _ in range(500):  # the count drops when its function has returned
        if toc.THREAD_STARTS.running == w.running0:
            break
        threading.Event().wait(0.01)
    assert w.python_leftovers() is None


def test_host_lazy_output_only_in_timed_calls_is_output_type(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain tensors while verified, a lazy subclass once timing starts: the timed calls whose
    outputs are checked (verified timed calls, the last one) are type-checked too."""
    fwd = ("    def forward(self, x):\n        CALLS.append(1)\n"
           "        if len(CALLS) <= 6:\n            return torch.relu(x) * self.scale\n"
           "        return Lazy(x, self.scale)\n")
    job = _host_job(tmp_path, small_problem, build_root, fwd, extra=LAZY_CLASS + "CALLS = []\n\n", time=True)
    r = _run_host(job, monkeypatch)
    assert r.status == GUARD_REJECTED and r.guard is not None and r.guard["id"] == OUTPUT_TYPE, r.message
    assert "not a torch.Tensor" in r.guard["reason"]
    assert r.configs[0].status == "correct"  # verification saw plain tensors
    # without the guard its values pass every comparison: only the type tells it apart
    (tmp_path / "off").mkdir()
    off = _run_host(_host_job(tmp_path / "off", small_problem, build_root, fwd,
                              extra=LAZY_CLASS + "CALLS = []\n\n", time=True,
                              disabled_guards=[OUTPUT_TYPE]), monkeypatch)
    assert off.status == "correct", off.message


def test_host_dunder_patch_cannot_fool_the_comparison(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the patching guard off, a zero output whose comparison would read 0 mismatches
    through a replaced torch.Tensor.__int__/__float__ is still wrong."""
    extra = ("torch.Tensor.__int__ = lambda self: 0\ntorch.Tensor.__index__ = lambda self: 0\n"
             "torch.Tensor.__float__ = lambda self: 0.0\n\n")
    r = _run_host(_host_job(tmp_path, small_problem, build_root, ZERO_FWD, extra=extra,
                            disabled_guards=[PATCHING]), monkeypatch)
    assert r.status == "wrong", r.message
    assert r.worst_mismatch is not None and r.worst_mismatch["got"] == 0.0


# ---------------------------------------------------------------------------------------
# Parent process handling
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def build_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("torch-builds")


@pytest.fixture
def small_problem(tmp_path: Path) -> Path:
    p = tmp_path / "problem.py"
    p.write_text(PROBLEM.read_text().replace("batch_size = 64", "batch_size = 4").replace(
        "dim = 16384", "dim = 64"))
    return p


def test_syntax_error_is_a_compile_error_without_a_child(tmp_path: Path) -> None:
    files = _cand(tmp_path, "import torch\nclass ModelNew(torch.nn.Module:\n    pass\n", cu=False)
    r = run_torch_evaluation(TorchEvalJob(problem=str(PROBLEM), candidate=files, format="load_inline"),
                             timeout_s=30)
    assert r.status == COMPILE_ERROR and r.phase == "syntax"
    assert r.message.startswith("SyntaxError in model.py, line 2: ")
    assert "class ModelNew(torch.nn.Module:" in r.message
    assert r.error is not None and r.error["line"] == 2 and r.exit_code is None


def test_fast_format_compile_error_has_nvcc_text(tmp_path: Path, build_root: Path, nvcc_path: str) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / "model.py").write_text("class ModelNew: pass\n")
    (d / "kernel.cu").write_text('extern "C" int f(float *x, cudaStream_t s)\n{\n    return nope;\n}\n')
    r = run_torch_evaluation(
        TorchEvalJob(problem=str(PROBLEM), candidate=[str(d / "model.py"), str(d / "kernel.cu")],
                     build_root=str(build_root), arch="sm_90", static_guards=False),
        timeout_s=60,
    )
    assert r.status == COMPILE_ERROR and r.phase == "build"
    assert r.message.startswith("nvcc failed to compile kernel.cu:\n")
    assert 'kernel.cu(3): error: identifier "nope" is undefined' in r.message
    assert 'kernel.cu(3): error: identifier "nope" is undefined' in r.build["errors"]


def test_missing_launcher_is_a_compile_error(tmp_path: Path, build_root: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / "model.py").write_text("class ModelNew: pass\n")
    (d / "kernel.cu").write_text("__global__ void k(float *x) {}\n")
    r = run_torch_evaluation(
        TorchEvalJob(problem=str(PROBLEM), candidate=[str(d / "model.py"), str(d / "kernel.cu")],
                     build_root=str(build_root), static_guards=False),
        timeout_s=60,
    )
    assert r.status == COMPILE_ERROR and 'no extern "C" launcher found in kernel.cu' in r.message


def test_worker_answers_no_device_without_cuda(build_root: Path, nvcc_path: str) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    d = DATA / "torch_cands" / "fast_ok"
    r = run_torch_evaluation(
        TorchEvalJob(problem=str(PROBLEM), candidate=[str(d / "model.py"), str(d / "kernel.cu")],
                     build_root=str(build_root), arch="sm_90"),
        timeout_s=120,
    )
    assert r.status == "no_device", (r.message, r.stderr_tail)
    assert r.message.startswith("no CUDA device: torch.cuda.is_available() is False")
    assert r.exit_code == 0 and r.build["libs"][0]["launchers"] == [
        "int scaled_relu(const float *x, float *y, int64_t n, float scale, cudaStream_t stream)"
    ]


def test_hanging_worker_is_killed_at_the_time_limit(tmp_path: Path, build_root: Path, nvcc_path: str) -> None:
    files = _cand(tmp_path, "class ModelNew: pass\n")
    job = TorchEvalJob(problem=str(PROBLEM), candidate=files, build_root=str(build_root),
                       arch="sm_90", debug_hook="spawn-sleep:120", static_guards=False)
    t0 = time.monotonic()
    # The host test backend lets the worker "open a device" here and pass the GPU gate; the
    # hook then hangs in the device phase, where the time limit runs.
    r = run_torch_evaluation(job, timeout_s=3, env={HOOKS_ENV: "1", BACKEND_ENV: "host"})
    assert time.monotonic() - t0 < 30
    assert r.status == "timeout" and r.signal == "SIGKILL" and r.phase == "hook.spawn-sleep"
    assert r.prepare_s is not None and r.prepare_s > 0 and r.lock_wait_s >= 0
    assert re.match(r"timed out after \d+\.\d s \(limit 3 s\) in phase 'hook.spawn-sleep'", r.message)
    m = re.search(r"spawned pid (\d+)", r.stderr_tail)
    assert m, r.stderr_tail
    pid = int(m.group(1))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {pid} survived the timeout")


def test_load_inline_build_has_its_own_time_limit(tmp_path: Path, build_root: Path) -> None:
    files = _cand(tmp_path, "import time\ntime.sleep(120)\nclass ModelNew: pass\n", cu=False)
    job = TorchEvalJob(problem=str(PROBLEM), candidate=files, format="load_inline",
                       build_root=str(build_root), build_timeout_s=2, static_guards=False)
    t0 = time.monotonic()
    r = run_torch_evaluation(job, timeout_s=600)
    assert time.monotonic() - t0 < 20
    assert r.status == COMPILE_TIMEOUT and r.phase == "build"
    assert "did not finish within 2 s" in r.message
    assert Path(r.build["extensions_dir"]) == job.extensions_dir()
    assert not job.extensions_dir().exists()  # a timed-out build is not kept


def test_load_inline_build_failure_is_a_compile_error(tmp_path: Path, build_root: Path) -> None:
    # What torch.utils.cpp_extension raises when nvcc fails (the build child classifies it).
    files = _cand(tmp_path, (
        "raise RuntimeError(\"Error building extension 'ext': [1/2] nvcc ... -c cuda.cu\\n"
        "FAILED: cuda.cuda.o\\n"
        "cuda.cu(7): error: identifier \\\"nope\\\" is undefined\\n\\n"
        "1 error detected in the compilation of \\\"cuda.cu\\\".\\n"
        "ninja: build stopped: subcommand failed.\")\n"
    ), cu=False)
    job = TorchEvalJob(problem=str(PROBLEM), candidate=files, format="load_inline",
                       build_root=str(build_root), static_guards=False)
    r = run_torch_evaluation(job, timeout_s=60)
    assert r.status == COMPILE_ERROR, r.message
    assert r.message.startswith("load_inline failed while importing model.py: Error building extension 'ext'")
    assert 'cuda.cu(7): error: identifier "nope" is undefined' in r.build["errors"]


def test_static_guards_run_first(tmp_path: Path, build_root: Path) -> None:
    pytest.importorskip("cudaperf_cli.evaluate.static_guards")
    files = _cand(tmp_path, (
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, scale):\n        super().__init__()\n        self.scale = scale\n\n"
        "    def forward(self, x):\n        return torch.relu(x) * self.scale\n"
    ))
    r = run_torch_evaluation(TorchEvalJob(problem=str(PROBLEM), candidate=files,
                                          build_root=str(build_root)), timeout_s=30)
    assert r.status == GUARD_REJECTED and r.phase == "static_guards"
    assert r.guard is not None and r.guard["id"] == "torch_fallback" and r.guard["static"]
    assert "model.py:10" in r.guard["reason"]


# ---------------------------------------------------------------------------------------
# The worker pipeline on the host test backend
# ---------------------------------------------------------------------------------------

HEAD = "import torch\nimport torch.nn as nn\n\n"
INIT = (
    "    def __init__(self, scale):\n        super().__init__()\n        self.scale = scale\n\n"
)


def _host_job(tmp_path: Path, problem: Path, build_root: Path, forward: str, *,
              extra: str = "", init: str = INIT, **kw: Any) -> TorchEvalJob:
    py = HEAD + extra + "class ModelNew(nn.Module):\n" + init + forward
    files = _cand(tmp_path, py)
    kw.setdefault("time", False)
    kw.setdefault("timing", FAST_TIMING)
    return TorchEvalJob(problem=str(problem), candidate=files, build_root=str(build_root),
                        arch="sm_90", static_guards=False, compile_baseline=False, **kw)


def _run_host(job: TorchEvalJob, monkeypatch: pytest.MonkeyPatch) -> TorchEvalResult:
    pytest.importorskip("torch")
    for k, v in HOST.items():
        monkeypatch.setenv(k, v)
    r = run_torch_evaluation(job, timeout_s=120)
    assert r.status != "crash", (r.message, r.stderr_tail, r.details)
    return r


CORRECT_FWD = "    def forward(self, x):\n        return torch.relu(x) * self.scale\n"
ZERO_FWD = "    def forward(self, x):\n        return torch.zeros_like(x)\n"
#: A tensor subclass whose values are computed when something reads them.
LAZY_CLASS = """from torch.utils._pytree import tree_map


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, x, scale):
        r = torch.Tensor._make_wrapper_subclass(cls, x.shape, strides=x.stride(), dtype=x.dtype,
                                                device=x.device)
        r._x, r._scale = x, scale
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(a):
            return torch.relu(a._x) * a._scale if isinstance(a, Lazy) else a

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


"""
LAZY_FWD = "    def forward(self, x):\n        return Lazy(x, self.scale)\n"
#: forward returns zeros; a thread writes the result 0.2 s later.
THREAD_FWD = (
    "    def forward(self, x):\n        y = torch.zeros_like(x)\n\n"
    "        def later():\n            time.sleep(0.2)\n            y.copy_(torch.relu(x) * self.scale)\n\n"
    "        {start}\n        return y\n"
)
#: forward computes the result and starts an OS thread (pthread_create, no Python in it)
#: that sleeps 2 s: seen through /proc/self/task from the second call on.
NATIVE_THREAD_EXTRA = """import ctypes

LIBC = ctypes.CDLL(None)


def native_sleeper():
    tid = ctypes.c_ulong()
    LIBC.pthread_create(ctypes.byref(tid), None, ctypes.cast(LIBC.sleep, ctypes.c_void_p),
                        ctypes.c_void_p(2))
    LIBC.pthread_detach(tid)


"""
NATIVE_THREAD_FWD = ("    def forward(self, x):\n        native_sleeper()\n"
                     "        return torch.relu(x) * self.scale\n")


def test_host_correct_candidate_is_verified_and_timed(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _host_job(tmp_path, small_problem, build_root, CORRECT_FWD,
                    shapes=[{"batch_size": 3, "dim": 17}], time=True)
    r = _run_host(job, monkeypatch)
    assert r.status == "correct", r.message
    assert [c.name for c in r.configs] == ["default", "alt1"]
    assert r.configs[0].inputs == [{"shape": [4, 64], "dtype": "float32"}]
    assert r.configs[1].inputs == [{"shape": [3, 17], "dtype": "float32"}]
    assert r.configs[1].constants == {"batch_size": 3, "dim": 17}
    assert all(c.trials_run == 3 and len(set(c.seeds)) == 3 for c in r.configs)
    # the float64 comparison runs on the smallest configuration (the alternative one)
    assert r.configs[0].lower_precision is None
    lp = r.configs[1].lower_precision
    assert lp is not None and lp["candidate_rel_err"] <= lp["threshold"]
    t = r.timing
    assert t is not None and t.eager is not None and t.compile is None
    assert 3 <= t.candidate.n <= 5 and t.candidate.median_ms > 0
    assert t.speedup_eager == pytest.approx(t.eager.median_ms / t.candidate.median_ms)
    assert t.baselines["eager"] == "PyTorch eager (fp32, TF32 off)"
    assert r.summary["speedup_eager"] == t.speedup_eager
    assert "profiler guards not run: host test backend (no CUDA)" in r.warnings
    phases = r.details["phase_s"]  # where the worker's time went
    print("phase_s", phases)
    assert {"startup", "import_torch", "device", "load_problem", "timing"} <= set(phases)


def test_host_wrong_candidate_reports_the_worst_index(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fwd = ("    def forward(self, x):\n        y = torch.relu(x) * self.scale\n"
           "        y.view(-1)[77] += 1.0\n        return y\n")
    r = _run_host(_host_job(tmp_path, small_problem, build_root, fwd), monkeypatch)
    assert r.status == "wrong", r.message
    assert r.worst_mismatch is not None and r.worst_mismatch["index"] == [1, 13]
    assert r.worst_mismatch["path"] == "out"
    assert r.message.startswith("config 'default' trial 0: out: 1 of 256 elements differ")
    assert r.configs[0].failed_trial == 0


@pytest.mark.parametrize(
    "gid, forward, extra, kw",
    [
        (ALIASING, "    def forward(self, x):\n        return x.relu_().mul_(self.scale)\n", "", {}),
        (RESULT_CACHE,
         "    def forward(self, x):\n        k = x.data_ptr()\n"
         "        if k not in CACHE:\n            CACHE[k] = torch.relu(x) * self.scale\n"
         "        return CACHE[k]\n", "CACHE = {}\n\n", {}),
        (SHAPE_SPECIALISED,
         "    def forward(self, x):\n        y = torch.zeros_like(x)\n"
         "        y.view(-1)[:256] = (torch.relu(x) * self.scale).view(-1)[:256]\n        return y\n",
         "", {"shapes": [{"batch_size": 5}]}),
        (LOWER_PRECISION,
         "    def forward(self, x):\n        return (torch.relu(x.half()) * self.scale).float()\n", "", {}),
        (PATCHING, CORRECT_FWD, "torch.cuda.Event.elapsed_time = lambda self, end: 1e-3\n\n", {}),
        (LOWER_PRECISION, CORRECT_FWD, "torch.backends.cuda.matmul.allow_tf32 = True\n\n", {}),
        (INHERITS_MODEL, "    pass\n",
         "class Model(nn.Module):\n" + INIT + CORRECT_FWD + "\n\n", {}),
        (OUTPUT_TYPE, LAZY_FWD, LAZY_CLASS, {}),
        (OUTPUT_TYPE,
         "    def forward(self, x):\n        return (torch.relu(x) * self.scale).t().contiguous().t()\n", "", {}),
        (OUTPUT_TYPE,
         "    def forward(self, x):\n        return nn.Parameter(torch.relu(x) * self.scale, requires_grad=False)\n",
         "", {}),
        (PATCHING, ZERO_FWD, "torch.Tensor.__int__ = lambda self: 0\ntorch.Tensor.__float__ = lambda self: 0.0\n\n",
         {}),
        (PATCHING, CORRECT_FWD, "from torch.overrides import TorchFunctionMode\nTorchFunctionMode().__enter__()\n\n",
         {}),
        (PATCHING, CORRECT_FWD,
         "torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)\n\n", {}),
        (BACKGROUND_THREAD, THREAD_FWD.format(start="threading.Thread(target=later).start()"),
         "import threading\nimport time\n\n", {}),
        (BACKGROUND_THREAD, THREAD_FWD.format(start="_thread.start_new_thread(later, ())"),
         "import _thread\nimport time\n\n", {}),
        (BACKGROUND_THREAD, NATIVE_THREAD_FWD, NATIVE_THREAD_EXTRA, {}),
        (BACKGROUND_THREAD, CORRECT_FWD,
         "import threading\nimport time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n\n",
         {}),
    ],
    ids=["aliasing", "result_cache", "shape_specialised", "lower_precision_fp16",
         "patching", "lower_precision_tf32_flag", "inherits_model", "output_type_lazy_subclass",
         "output_type_not_contiguous", "output_type_parameter", "patching_dunder",
         "patching_function_mode", "patching_global_hook", "background_thread",
         "background_thread_start_new_thread", "background_thread_native", "background_thread_at_import"],
)
def test_host_cheats_are_rejected(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch,
    gid: str, forward: str, extra: str, kw: dict[str, Any],
) -> None:
    if gid == INHERITS_MODEL:
        job = _host_job(tmp_path, small_problem, build_root, forward, extra=extra, init="", **kw)
        job_py = Path(job.module_path)
        job_py.write_text(job_py.read_text().replace("class ModelNew(nn.Module):", "class ModelNew(Model):"))
    else:
        job = _host_job(tmp_path, small_problem, build_root, forward, extra=extra, **kw)
    r = _run_host(job, monkeypatch)
    assert r.status == GUARD_REJECTED, (r.status, r.message)
    assert r.guard is not None and r.guard["id"] == gid, r.message
    assert r.message.startswith(f"rejected by guard '{gid}'")
    assert gid in DYNAMIC_GUARDS


def test_host_guard_messages(tmp_path: Path, small_problem: Path, build_root: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    fwd = ("    def forward(self, x):\n        y = torch.zeros_like(x)\n"
           "        y.view(-1)[:256] = (torch.relu(x) * self.scale).view(-1)[:256]\n        return y\n")
    r = _run_host(_host_job(tmp_path, small_problem, build_root, fwd,
                            shapes=[{"batch_size": 5}]), monkeypatch)
    assert r.guard is not None and r.guard["config"] == "alt1"
    assert "correct on the default shapes but wrong on config 'alt1' (batch_size=5)" in r.guard["reason"]
    assert [c.status for c in r.configs] == ["correct", "wrong"]
    assert r.configs[1].outputs[0].worst_mismatch is not None


def test_host_parameters_are_copied_or_refused(
    tmp_path: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = tmp_path / "bias.py"
    problem.write_text(BIAS_PROBLEM.read_text().replace("batch_size = 32", "batch_size = 3").replace(
        "dim = 4096", "dim = 16"))
    init = ("    def __init__(self, dim):\n        super().__init__()\n"
            "        self.{name} = nn.Parameter(torch.zeros(dim))\n\n")
    fwd = "    def forward(self, x):\n        return torch.relu(x + self.{name})\n"
    ok = _run_host(_host_job(tmp_path, problem, build_root, fwd.format(name="bias"),
                             init=init.format(name="bias")), monkeypatch)
    assert ok.status == "correct", ok.message  # zeros replaced by Model's random bias
    bad = _run_host(_host_job(tmp_path, problem, build_root, fwd.format(name="b"),
                              init=init.format(name="b")), monkeypatch)
    assert bad.status == "runtime_error"
    assert bad.message.startswith("ModelNew's parameters and buffers do not match Model's")
    assert "bias" in bad.message and bad.error is not None and bad.error["source"] == "state_dict"


def test_host_candidate_errors(tmp_path: Path, small_problem: Path, build_root: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    raising = _run_host(_host_job(
        tmp_path, small_problem, build_root,
        "    def forward(self, x):\n        raise RuntimeError('kernel exploded')\n"), monkeypatch)
    assert raising.status == "runtime_error"
    assert raising.message == (
        "ModelNew.forward raised RuntimeError: kernel exploded (config 'default', trial 0)"
    )
    assert raising.error is not None and raising.error["source"] == "forward"
    assert "kernel exploded" in raising.error["traceback"]

    files = _cand(tmp_path, "import torch\nx = 1\n", name="nomodel")
    none = _run_host(TorchEvalJob(problem=str(small_problem), candidate=files, build_root=str(build_root),
                                  arch="sm_90", static_guards=False), monkeypatch)
    assert none.status == COMPILE_ERROR and none.message == "model.py defines no class ModelNew(torch.nn.Module)"

    files = _cand(tmp_path, "import torch\nraise ValueError('bad import')\n", name="imp")
    imp = _run_host(TorchEvalJob(problem=str(small_problem), candidate=files, build_root=str(build_root),
                                 arch="sm_90", static_guards=False), monkeypatch)
    assert imp.status == "runtime_error" and imp.message == "importing model.py raised ValueError: bad import"


def test_prompt_template_renders() -> None:
    pytest.importorskip("jinja2")
    from cudaperf_cli.policies.prompts import render

    text = render(
        "torch_to_cuda.j2",
        source=PROBLEM.read_text(),
        inputs=[{"name": "x", "shape": [64, 16384], "dtype": "float32"}],
        init_inputs=["0.01"],
        arch="sm_90",
    )
    assert "class Model(nn.Module)" in text and "- `x`: float32 [64, 16384]" in text
    assert "`Model(0.01)`" in text and "sm_90" in text
    assert 'extern "C" int name(<arguments>, cudaStream_t stream)' in text
    assert 'lib = load_cuda("kernel.cu")' in text and "load_inline(" in text
    assert text.count("```cuda\n") == 1 and text.count("```python\n") == 2  # fenced blocks
    unnamed = render("torch_to_cuda.j2", source="s", inputs=[{"value": "3"}],
                     init_inputs=[], arch="sm_90")
    assert "- `input 0`: 3" in unnamed


def test_profile_records_of_a_real_cpu_profile() -> None:
    # The FunctionEvent attributes profile_records reads exist in the installed torch, and
    # the window/op bookkeeping holds on a real (CPU-only) profile.
    torch = pytest.importorskip("torch")
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    from cudaperf_cli.evaluate.torch_worker import profile_records

    x, marker = torch.randn(64), torch.zeros(1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(MARKER_ANNOTATION):
            marker.add_(1)
        with record_function(FORWARD_ANNOTATION):
            torch.empty_like(x)
            torch.relu(x)
        with record_function(MARKER_ANNOTATION):
            marker.add_(1)
    recs = profile_records(prof.events(), DeviceType.CUDA)
    kinds = {(r["kind"], r["name"]) for r in recs}
    assert ("annotation", FORWARD_ANNOTATION) in kinds and ("cpu_op", "aten::relu") in kinds
    rep = analyze_profile(recs)
    assert rep["torch_ops"]["relu"] == 1 and "add_" not in rep["torch_ops"]
    assert "relu" in rep["disallowed_ops"] and "empty_like" not in rep["disallowed_ops"]
    assert profile_verdict(rep)[0] == NO_CUSTOM_KERNEL  # type: ignore[index]


# ---------------------------------------------------------------------------------------
# The evaluation core of issue 21: baseline once per run, slow, memory, training mode
# ---------------------------------------------------------------------------------------


def _problem_file(tmp_path: Path, body: str, name: str = "prob.py") -> Path:
    p = tmp_path / name
    p.write_text("import torch\nimport torch.nn as nn\n\n" + body)
    return p


def test_host_baseline_job_times_eager_and_flags_nothing(
    tmp_path: Path, small_problem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = TorchEvalJob(problem=str(small_problem), candidate=[], mode="baseline",
                       timing=FAST_TIMING, compile_baseline=False)
    r = _run_host(job, monkeypatch)
    assert r.status == "reference_only", r.message
    assert r.timing is not None and r.timing.candidate is None and r.timing.eager.n >= 3
    assert r.degenerate is False
    # scaled_relu at batch 4, dim 64: input and output float32[4, 64], no parameters
    assert r.footprint_bytes == 2 * 4 * 64 * 4
    assert r.prepare_s is not None and r.prepare_s > 0
    assert r.message.startswith("baseline: PyTorch eager ")


def test_host_baseline_job_flags_a_degenerate_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prob = _problem_file(tmp_path, (
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x - 10.0)\n\n"
        "n = 8\n\ndef get_inputs():\n    return [torch.rand(n, n)]\n\n"
        "def get_init_inputs():\n    return []\n"))
    job = TorchEvalJob(problem=str(prob), candidate=[], mode="baseline", timing=FAST_TIMING,
                       compile_baseline=False)
    r = _run_host(job, monkeypatch)
    assert r.status == "reference_only" and r.degenerate is True
    assert any(w.startswith("degenerate: Model's outputs are the same") for w in r.warnings)


def test_baseline_job_takes_no_candidate() -> None:
    with pytest.raises(ValueError, match="no candidate"):
        TorchEvalJob(problem=str(PROBLEM), candidate=[str(PROBLEM)], mode="baseline").validate()
    with pytest.raises(ValueError, match="mode"):
        TorchEvalJob(problem=str(PROBLEM), candidate=[], mode="nope").validate()


def test_host_candidate_with_the_runs_baseline_times_only_itself(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _host_job(tmp_path, small_problem, build_root, CORRECT_FWD, time=True,
                    baseline_ms={"eager": 50.0, "compile": 25.0})
    r = _run_host(job, monkeypatch)
    assert r.status == "correct", r.message
    t = r.timing
    assert t.eager is None and t.compile is None and t.candidate is not None
    assert t.speedup_eager == pytest.approx(50.0 / t.candidate.median_ms)
    assert t.speedup_compile == pytest.approx(25.0 / t.candidate.median_ms)
    assert r.summary["gpu_ms"] == r.summary["candidate_ms"] == t.candidate.median_ms
    assert "eager and torch.compile times from the run's baseline measurement" in r.warnings


def test_host_candidate_far_slower_than_the_limit_is_slow(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_fwd = ("    def forward(self, x):\n        import time\n        time.sleep(0.05)\n"
                "        return torch.relu(x) * self.scale\n")
    job = _host_job(tmp_path, small_problem, build_root, slow_fwd, time=True,
                    baseline_ms={"eager": 0.1, "compile": None}, slow_ms=1.0)
    r = _run_host(job, monkeypatch)
    assert r.status == "slow", r.message
    t = r.timing
    assert t.candidate.n == 1 and t.candidate_estimate_ms >= 40 and t.slow_ms == 1.0
    assert t.warmup_reps == 1  # stopped after the first call
    assert r.summary["gpu_ms"] == t.candidate_estimate_ms
    assert "timing stopped early" in r.message and "slow limit 1 ms" in r.message


TIMED_CACHE_FWD = (
    "    def forward(self, x):\n"
    "        f = x.reshape(-1)\n"
    "        key = (x.data_ptr(), tuple(f[:4].tolist()), tuple(f[-4:].tolist()))\n"
    "        hit = CACHE.get(key)\n"
    "        if hit is None:\n"
    "            CACHE.clear()\n"
    "            hit = CACHE[key] = torch.relu(x) * self.scale\n"
    "        return hit.clone()\n"
)


def test_host_timed_result_cache_is_caught(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result cache keyed by the input's address and its first and last 4 values (it
    passes the result_cache guard: new values there change the key) was timed on cache hits
    when every timed call got the same inputs; with two input sets that differ in a sparse
    subset of elements, a verified timed call gets the other set's output."""
    from dataclasses import replace

    from cudaperf_cli.evaluate.torch_job import TIMED_RESULT

    for d in ("one", "two", "honest"):
        (tmp_path / d).mkdir()
    one = _run_host(_host_job(tmp_path / "one", small_problem, build_root, TIMED_CACHE_FWD,
                              extra="CACHE = {}\n\n", time=True,
                              timing=replace(FAST_TIMING, input_sets=1)), monkeypatch)
    assert one.status == "correct", one.message  # the hole this closes
    assert one.timing.input_sets == 1 and len(one.timing.checked_reps) == 2
    r = _run_host(_host_job(tmp_path / "two", small_problem, build_root, TIMED_CACHE_FWD,
                            extra="CACHE = {}\n\n", time=True), monkeypatch)
    assert r.status == GUARD_REJECTED, (r.status, r.message)
    assert r.guard is not None and r.guard["id"] == TIMED_RESULT and TIMED_RESULT in DYNAMIC_GUARDS
    assert re.match(r"rejected by guard 'timed_result' \(config 'default'\): timed call \d+ of \d+ "
                    r"\(input set [01]\): out: \d+ of 256 elements differ", r.message), r.message
    ok = _run_host(_host_job(tmp_path / "honest", small_problem, build_root, CORRECT_FWD, time=True),
                   monkeypatch)
    assert ok.status == "correct", ok.message
    t = ok.timing
    assert t.input_sets == 2 and min(t.input_set_calls) > 0 and len(t.checked_reps) == 2, t
    assert all(1 <= i <= t.candidate.n for i in t.checked_reps)
    # the guard off: one set, no verified call
    off = _run_host(_host_job(tmp_path / "one", small_problem, build_root, TIMED_CACHE_FWD,
                              extra="CACHE = {}\n\n", time=True, disabled_guards=[TIMED_RESULT]),
                    monkeypatch)
    assert off.status == "correct" and off.timing.input_sets == 1 and off.timing.checked_reps == []


def test_host_in_place_problem_gives_the_candidate_copies(
    tmp_path: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prob = _problem_file(tmp_path, (
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n        x.mul_(2.0)\n        return x.sum(dim=1)\n\n"
        "n = 6\n\ndef get_inputs():\n    return [torch.rand(n, n + 1)]\n\n"
        "def get_init_inputs():\n    return []\n"))
    fwd = "    def forward(self, x):\n        x.mul_(2.0)\n        return x.sum(dim=1)\n"
    for flagged in (True, False):  # told by the loader, or found out in the first trial
        (tmp_path / str(flagged)).mkdir()
        job = _host_job(tmp_path / str(flagged), prob, build_root, fwd, init="", modifies_inputs=flagged)
        r = _run_host(job, monkeypatch)
        assert r.status == "correct", (flagged, r.message)
        assert flagged or any("modifies an input in place" in w for w in r.warnings)
    bad = "    def forward(self, x):\n        return (2.0 * x).sum(dim=1)\n"  # forgets the write
    (tmp_path / "bad").mkdir()
    job = _host_job(tmp_path / "bad", prob, build_root, bad, init="", modifies_inputs=True)
    r = _run_host(job, monkeypatch)
    assert r.status == "wrong" and "input 0 differs from the reference's" in r.message


def test_host_candidate_writing_an_input_is_wrong_without_copies(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fwd = "    def forward(self, x):\n        y = torch.relu(x) * self.scale\n        x.zero_()\n        return y\n"
    r = _run_host(_host_job(tmp_path, small_problem, build_root, fwd), monkeypatch)
    assert r.status == "wrong"
    assert "the candidate modified input 0 ([4, 64] float32), which the reference leaves unchanged" in r.message


BN_PROBLEM = (
    "class Model(nn.Module):\n"
    "    def __init__(self, c):\n        super().__init__()\n        self.bn = nn.BatchNorm1d(c)\n\n"
    "    def forward(self, x):\n        return self.bn(x)\n\n"
    "batch = 16\nc = 5\n\ndef get_inputs():\n    return [torch.randn(batch, c)]\n\n"
    "def get_init_inputs():\n    return [c]\n")


@pytest.mark.parametrize("updates", [True, False])
def test_host_batchnorm_in_training_mode_starts_every_trial_from_the_same_buffers(
    tmp_path: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch, updates: bool
) -> None:
    """Model stays in training mode (batch statistics; running buffers updated on every
    forward), as KernelBench runs it.  Both models get the initial buffers back before each
    trial; a ModelNew whose running statistics do not follow Model's is correct (the
    outputs match, which is what KernelBench compares) with a warning."""
    prob = _problem_file(tmp_path, BN_PROBLEM)
    init = "    def __init__(self, c):\n        super().__init__()\n        self.bn = nn.BatchNorm1d(c)\n\n"
    if updates:
        fwd = ("    def forward(self, x):\n"
               "        return nn.functional.batch_norm(x, self.bn.running_mean, self.bn.running_var,\n"
               "            self.bn.weight, self.bn.bias, True, 0.1, self.bn.eps)\n")
    else:
        fwd = ("    def forward(self, x):\n"
               "        m = x.mean(0)\n        v = x.var(0, unbiased=False)\n"
               "        return (x - m) / torch.sqrt(v + self.bn.eps) * self.bn.weight + self.bn.bias\n")
    job = _host_job(tmp_path, prob, build_root, fwd, init=init)
    r = _run_host(job, monkeypatch)
    assert r.status == "correct", r.message
    warned = [w for w in r.warnings if "updates its buffer" in w]
    assert bool(warned) is (not updates), r.warnings


def test_compare_tensor_in_chunks_matches_the_whole() -> None:
    torch = pytest.importorskip("torch")
    from cudaperf_cli.evaluate.torch_worker import compare_tensor, flat_chunks

    a = torch.randn(300, 701)
    b = a.clone()
    b[7, 9] += 1.0
    b[299, 700] = float("nan")
    for got, exp in ((b, a), (b.t(), a.t())):  # contiguous, then cut along dim 0
        chk = compare_tensor("out", got, exp, 1e-4, 1e-4)
        assert not chk.ok and chk.n_mismatch == 2 and chk.n_nan == 1
        assert chk.worst_mismatch["got"] == "nan"
    pieces = list(flat_chunks(a.t(), chunk=1000))
    assert sum(p[0].numel() for _, p in pieces) == a.numel() and len(pieces) > 1
    assert compare_tensor("o", a, a.clone(), 0.0, 0.0).ok
    inf = torch.tensor([float("inf"), 1.0])
    assert compare_tensor("o", inf, inf.clone(), 1e-4, 1e-4).ok


def test_fingerprint_sees_every_write() -> None:
    torch = pytest.importorskip("torch")
    from cudaperf_cli.evaluate.torch_worker import fingerprint

    x = torch.randn(1000, 33)
    f0 = fingerprint(x)
    assert torch.equal(f0, fingerprint(x.clone()))
    y = x.clone()
    y[999, 32] = y[999, 32] + 1e-3
    assert not torch.equal(f0, fingerprint(y))
    assert not torch.equal(fingerprint(torch.zeros(3, dtype=torch.uint8)),
                           fingerprint(torch.tensor([0, 0, 1], dtype=torch.uint8)))


def test_torch_memory_plan_is_three_footprints_plus_the_flush_buffer() -> None:
    from types import SimpleNamespace

    from cudaperf_cli.evaluate.torch_job import plan_torch_memory

    gb = 10**9
    p = SimpleNamespace(footprint={"inputs_bytes": 6 * gb, "outputs_bytes": 6 * gb, "params_bytes": 0,
                                   "buffers_bytes": 0, "total_bytes": 12 * gb}, modifies_inputs=False)
    plan = plan_torch_memory(p, l2_bytes=60 * 2**20)
    assert plan.footprint_bytes == 12 * gb and plan.flush_bytes == 256 * 2**20
    assert plan.gpu_bytes == 36 * gb + 256 * 2**20
    # three copies of the inputs while the candidate is timed on two input sets: the timing
    # inputs, the second set and the candidate's working copy (within 3 x the footprint)
    assert plan.parts["inputs"] == 18 * gb and plan.parts["outputs (candidate, reference)"] == 12 * gb
    one = plan_torch_memory(p, l2_bytes=60 * 2**20, timing=TimingSettings(input_sets=1))
    assert one.parts["inputs"] == 6 * gb and one.gpu_bytes == plan.gpu_bytes
    from cudaperf_cli.evaluate.memory import does_not_fit

    line = does_not_fit(plan, gpu_free=30 * gb, host_total=None, what="19_ReLU")
    assert line == ("19_ReLU does not fit: one evaluation needs 36.3 GB of GPU memory (footprint "
                    "12.0 GB) and the GPU has 30.0 GB free")
    assert does_not_fit(plan, gpu_free=140 * gb, host_total=None, what="x") is None


def test_host_memory_limit_of_the_torch_worker() -> None:
    from cudaperf_cli.evaluate.torch_job import HOST_BASE_BYTES, host_memory_limit

    assert host_memory_limit(0, host_total=64 << 30) == HOST_BASE_BYTES
    assert host_memory_limit(4 << 30, host_total=64 << 30) == HOST_BASE_BYTES + (4 << 30)
    assert host_memory_limit(100 << 30, host_total=24 << 30) == int(0.75 * (24 << 30))


def test_float64_check_is_planned_with_the_reference_alone(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """The float64 run at the default configuration counts twice the reference's own peak
    (its intermediates in float64): KernelBench's 100_HingeLoss (4.3 GB of inputs, 13.2 GB
    for the reference alone) peaked at 30.1 GB with it.  A small problem still runs it."""
    torch = pytest.importorskip("torch")
    from cudaperf_cli.evaluate.torch_worker import TorchWorker

    GB, flush = 10**9, 268_435_456

    def worker(footprint: int, held: int, ref_peak: int | None) -> Any:
        w = TorchWorker.__new__(TorchWorker)
        w.torch, w.dev, w.host = torch, None, False
        w.footprint_bytes, w.device_info, w.warnings = footprint, {"l2_bytes": 0}, []
        prob = tmp_path / "p.py"
        prob.write_text("x = 1\n")
        w.job = TorchEvalJob(problem=str(prob), candidate=[], mode="baseline",
                             reference_peak_bytes=ref_peak)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: held)
        return w

    x = torch.zeros(4)  # the run's inputs as the worker holds them (bytes do not matter here)
    big = worker(int(4.3 * GB), int(4.3 * GB), int(13.2 * GB))
    assert not big._fp64_fits(torch.nn.Identity(), [x], x, "default")
    assert "not run at config 'default'" in big.precision_note and "GB" in big.precision_note
    assert big._fp64_fits(torch.nn.Identity(), [x], x, "alt1")  # the peak is the default's
    small = worker(8 * 2**20, 8 * 2**20, flush + 12 * 2**20)
    assert small._fp64_fits(torch.nn.Identity(), [x], x, "default")
    unknown = worker(int(4.3 * GB), int(4.3 * GB), None)
    assert unknown._fp64_fits(torch.nn.Identity(), [x], x, "default")


def test_host_candidate_cannot_read_the_users_files(
    tmp_path: Path, small_problem: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A candidate that reads a file at import and raises its text (which would go back to
    the model as feedback) gets a PermissionError in the confined worker."""
    from cudaperf_cli.confine import landlock_abi

    if landlock_abi() == 0:
        pytest.skip("this kernel has no Landlock")
    secret = tmp_path / "netrc"
    secret.write_text("machine api login me password sk-not-for-the-model\n")
    extra = f"raise RuntimeError(open({str(secret)!r}).read())\n"
    job = _host_job(tmp_path, small_problem, build_root, CORRECT_FWD, extra=extra)
    r = _run_host(job, monkeypatch)
    conf = r.details.get("confinement") or {}
    if not conf.get("applied"):  # offered but refused (a container's seccomp profile)
        pytest.skip(str(conf.get("reason")))
    assert "sk-not-for-the-model" not in json.dumps(r.to_json())
    assert "PermissionError" in r.message, r.message
    monkeypatch.setenv("CUDAPERF_NO_CONFINE", "1")  # unconfined it leaks: the check can fail
    r = _run_host(_host_job(tmp_path, small_problem, build_root, CORRECT_FWD, extra=extra), monkeypatch)
    assert "sk-not-for-the-model" in r.message


def test_fast_format_host_code_that_starts_a_thread_is_refused(tmp_path: Path, build_root: Path,
                                                                nvcc_path: str) -> None:
    """The fast format's launchers go through the same host-code check as a C candidate
    (build/host_code.py): a launcher that starts a thread is refused before it is linked."""
    src = DATA / "torch_cands" / "fast_ok"
    d = tmp_path / "c"
    d.mkdir()
    (d / "model.py").write_text((src / "model.py").read_text())
    cu = (src / "kernel.cu").read_text().replace(
        "#include <cstdint>\n", "#include <cstdint>\n#include <thread>\n").replace(
        "    if (n > 0)\n", "    std::thread([] {}).detach();\n    if (n > 0)\n")
    (d / "kernel.cu").write_text(cu)
    r = run_torch_evaluation(
        TorchEvalJob(problem=str(PROBLEM), candidate=[str(d / "model.py"), str(d / "kernel.cu")],
                     build_root=str(build_root), arch="sm_90", static_guards=False),
        timeout_s=120,
    )
    assert r.status == GUARD_REJECTED, (r.status, r.message)
    assert "kernel.cu was refused before it was linked" in r.message
    assert "std::thread" in r.message and "(a thread)" in r.message


def test_a_build_only_job_starts_no_worker(build_root: Path, nvcc_path: str, monkeypatch) -> None:
    """No device here (the run's probe said so): the candidate is built and ends no_device
    without an evaluation worker (it imported torch, about 5 s, to find no device)."""
    pytest.importorskip("torch")
    import cudaperf_cli.evaluate.torch_job as tj

    monkeypatch.setattr(tj, "_start_worker", lambda *a, **k: pytest.fail("a worker was started"))
    d = DATA / "torch_cands" / "fast_ok"
    r = run_torch_evaluation(
        TorchEvalJob(problem=str(PROBLEM), candidate=[str(d / "model.py"), str(d / "kernel.cu")],
                     build_root=str(build_root), arch="sm_90", build_only=True),
        timeout_s=120,
    )
    assert r.status == "no_device" and r.phase == "build", r.message
    assert r.build["libs"][0]["launchers"]
    bad = DATA / "torch_cands"  # a build failure is still the build's verdict
    files = [str(p) for p in sorted((bad / "fast_ok").iterdir()) if p.suffix == ".py"]
    (build_root / "broken.cu").write_text("__global__ void k( {\n")
    r = run_torch_evaluation(TorchEvalJob(problem=str(PROBLEM), candidate=[*files, str(build_root / "broken.cu")],
                                          build_root=str(build_root), arch="sm_90", build_only=True),
                             timeout_s=120)
    assert r.status == "compile_error", r.message
