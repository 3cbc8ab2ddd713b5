"""PyTorch problem loading (cudaperf_cli.problems.pytorch): CPU only unless marked gpu.

The loader runs problem files in a child process that imports torch (about 2-3 s to start),
so the error cases share one folder load (one child for all of them); the cases that kill
the child (a hang, a crash) get their own.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from cudaperf_cli.core import ProblemError, ToolchainError
from cudaperf_cli.problems.pytorch import (
    TensorSpec,
    TorchLoadError,
    TorchProblem,
    defines_model,
    input_constant_names,
    load_torch_problem,
    load_torch_problems,
    read_constants,
)
from cudaperf_cli.problems.pytorch_probe import alt_candidates, odd_half

EXAMPLES = Path(__file__).parent.parent / "examples" / "torch"

#: Test sizes of the examples (the defaults are sized for H200 timing; see the README).
SMALL: dict[str, dict[str, int]] = {
    "swish_bias": {"batch_size": 8, "dim": 64},
    "gelu": {"batch_size": 8, "dim": 64},
    "relu_scale": {"batch_size": 8, "dim": 64},
    "softmax": {"batch_size": 8, "dim": 64},
    "layernorm": {"batch_size": 8, "hidden": 64},
    "rmsnorm": {"batch_size": 8, "hidden": 64},
    "row_sum": {"batch_size": 8, "dim": 64},
    "mean_dim": {"batch_size": 2, "dim1": 16, "dim2": 32},
    "matmul_bias_relu": {"m": 16, "k": 32, "n": 24},
    "conv2d_relu": {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 10, "width": 12},
    "batchnorm_eval": {"batch_size": 2, "channels": 3, "height": 5, "width": 7},
    "groupnorm": {"batch_size": 2, "channels": 8, "height": 6, "width": 5},
    "mlp_gelu": {"batch_size": 4, "in_features": 16, "hidden": 32, "out_features": 8},
    "residual_layernorm": {"batch_size": 8, "hidden": 64},
}

#: Expected (input shapes, output shapes) at the SMALL sizes.
EXPECTED: dict[str, tuple[list[tuple[int, ...]], list[tuple[int, ...]]]] = {
    "swish_bias": ([(8, 64)], [(8, 64)]),
    "gelu": ([(8, 64)], [(8, 64)]),
    "relu_scale": ([(8, 64)], [(8, 64)]),
    "softmax": ([(8, 64)], [(8, 64)]),
    "layernorm": ([(8, 64)], [(8, 64)]),
    "rmsnorm": ([(8, 64)], [(8, 64)]),
    "row_sum": ([(8, 64)], [(8,)]),
    "mean_dim": ([(2, 16, 32)], [(2, 32)]),
    "matmul_bias_relu": ([(16, 32)], [(16, 24)]),
    "conv2d_relu": ([(2, 3, 10, 12)], [(2, 4, 10, 12)]),
    "batchnorm_eval": ([(2, 3, 5, 7)], [(2, 3, 5, 7)]),
    "groupnorm": ([(2, 8, 6, 5)], [(2, 8, 6, 5)]),
    "mlp_gelu": ([(4, 16)], [(4, 8)]),
    "residual_layernorm": ([(8, 64), (8, 64)], [(8, 64)]),
}


# ---------------------------------------------------------------------------------------
# Without torch: static reading, alternative values, dataclasses
# ---------------------------------------------------------------------------------------


def test_read_constants_takes_int_literals_only():
    src = textwrap.dedent(
        """
        batch_size = 16
        dim: int = 4 * 1024
        eps = 1e-5
        flag = True
        derived = dim * 2
        batch_size = 32
        name = "x"
        """
    )
    assert read_constants(src) == {"batch_size": 32, "dim": 4096}


def test_read_constants_follows_every_binding_as_python_runs_it():
    src = textwrap.dedent(
        """
        height = width = 2048
        height, width = 32, 32
        depth, (rows, cols) = 8, (3, 5)
        a, b = divmod(7, 2)
        n = 4
        n += 1
        """
    )
    assert read_constants(src) == {"height": 32, "width": 32, "depth": 8, "rows": 3, "cols": 5}


def test_input_constant_names_follow_helpers():
    src = textwrap.dedent(
        """
        import torch
        batch_size = 4
        dim = 8
        hidden = 16
        unused = 3
        def _shape():
            return (batch_size, dim)
        def get_inputs():
            return [torch.randn(*_shape())]
        def get_init_inputs():
            return [dim, hidden]
        """
    )
    assert input_constant_names(src) == (["batch_size", "dim"], ["batch_size", "dim", "hidden"])


def test_syntax_error_is_one_line_with_the_line_number():
    with pytest.raises(ProblemError, match=r"bad\.py: syntax error at line 3"):
        read_constants("x = 1\n\ndef f(:\n", "bad.py")


def test_defines_model():
    assert defines_model("class Model:\n    pass\n")
    assert defines_model("from ref import Model\n")
    assert defines_model("Model = make()\n")
    assert defines_model("def broken(:\n")  # reported, not skipped
    assert not defines_model("class ModelNew:\n    pass\n")


def test_odd_half_and_alt_candidates():
    assert [odd_half(v) for v in (1, 2, 3, 4, 16, 64, 4096, 1000)] == [1, 1, 1, 3, 9, 33, 2049, 501]
    for v in range(2, 300):
        h = odd_half(v)
        assert 1 <= h < v and (h % 2 == 1)
    cands = alt_candidates({"b": 16, "c": 8})
    assert cands == [{"b": 9, "c": 5}, {"b": 8, "c": 4}, {"b": 9, "c": 8}, {"b": 16, "c": 5}]
    cands = alt_candidates({"b": 4, "c": 8, "h": 6})
    assert cands[:2] == [{"b": 3, "c": 5, "h": 3}, {"b": 2, "c": 4, "h": 3}]
    assert cands[2:5] == [{"b": 4, "c": 5, "h": 3}, {"b": 3, "c": 8, "h": 3}, {"b": 3, "c": 5, "h": 6}]
    assert len(cands) == 8
    assert alt_candidates({"b": 1}) == []


def test_problem_json_round_trip():
    p = TorchProblem(
        path=Path("/x/p.py"), name="p", source="src", constants={"n": 4}, input_constants=("n",),
        inputs=(TensorSpec("tensor", (4, 2), "float32"), TensorSpec("float", (), "float64", 0.5)),
        init_inputs=(3, [1, 2], "s"), outputs=(TensorSpec("tensor", (4,), "float32"),),
        output_is_tuple=False, param_count=7, alt_shapes={"n": 3},
        alt_inputs=(TensorSpec("tensor", (3, 2), "float32"), TensorSpec("float", (), "float64", 0.5)),
        alt_outputs=(TensorSpec("tensor", (3,), "float32"),), warnings=("w",),
    )
    doc = json.loads(json.dumps(p.to_json()))
    q = TorchProblem.from_json(doc)
    assert q.to_json() == p.to_json()
    assert q.inputs[0].numel == 8
    assert p.describe() == "p: float32[4, 2], float=0.5 -> float32[4] (7 parameters)"


def test_missing_file_and_bad_device(tmp_path: Path):
    with pytest.raises(ProblemError, match="no such file"):
        load_torch_problem(tmp_path / "nope.py")
    with pytest.raises(ProblemError, match="unknown device"):
        load_torch_problem(tmp_path / "nope.py", device="tpu")
    with pytest.raises(ProblemError, match="no such file or folder"):
        load_torch_problems(tmp_path / "nope")
    (tmp_path / "helper.py").write_text("x = 1\n")
    with pytest.raises(ProblemError, match="no \\*\\.py file defining class Model"):
        load_torch_problems(tmp_path)


def test_unknown_constant_override_is_refused_before_running(tmp_path: Path):
    path = tmp_path / "p.py"
    path.write_text("batch_size = 4\nclass Model: pass\n")
    with pytest.raises(ProblemError, match=r"unknown constant 'dim' \(module-level int constants: batch_size\)"):
        load_torch_problem(path, constants={"dim": 3})
    with pytest.raises(ProblemError, match="must be an int >= 1"):
        load_torch_problem(path, constants={"batch_size": 0})


# ---------------------------------------------------------------------------------------
# The examples
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples() -> tuple[list[TorchProblem], list[TorchLoadError]]:
    pytest.importorskip("torch")
    return load_torch_problems(EXAMPLES, constants=SMALL, timeout_s=60)


def test_every_example_loads_with_small_sizes(examples):
    problems, errors = examples
    assert errors == []
    names = [p.name for p in problems]
    assert len(names) >= 12
    assert sorted(names) == sorted(SMALL), "SMALL must list every example"
    assert names == sorted(names)
    for p in problems:
        ins, outs = EXPECTED[p.name]
        assert [s.shape for s in p.inputs] == ins, p.name
        assert [s.shape for s in p.outputs] == outs, p.name
        assert all(s.dtype == "float32" and s.kind == "tensor" for s in p.inputs + p.outputs), p.name
        assert p.constants == {**p.constants, **SMALL[p.name]}
        assert p.load_seconds >= 0.0
        assert p.warnings == ()
        # small sizes: the data checks ran at the main sizes, whose footprint is known
        assert p.probe_constants is None and p.outputs_at_main, p.name
        assert p.footprint_bytes == sum(
            4 * s.numel for s in p.inputs + p.outputs) + 4 * (p.param_count + p.buffer_count) + (
            p.footprint["buffers_bytes"] - 4 * p.buffer_count), p.name
        # alternative shapes exist, are smaller and change the inputs
        assert p.alt_shapes is not None, (p.name, p.alt_note)
        assert p.alt_inputs is not None and p.alt_outputs is not None
        assert [s.shape for s in p.alt_inputs] != ins
        assert all(p.alt_shapes[k] <= p.constants[k] for k in p.alt_shapes)
        assert set(p.alt_shapes) == set(p.input_constants)


def test_example_details(examples):
    by = {p.name: p for p in examples[0]}
    assert by["swish_bias"].param_count == 64
    assert by["matmul_bias_relu"].param_count == 32 * 24 + 24
    assert by["mlp_gelu"].param_count == 16 * 32 + 32 + 32 * 8 + 8
    assert by["batchnorm_eval"].buffer_count == 2 * 3
    assert by["relu_scale"].init_inputs == (0.5,)
    assert by["conv2d_relu"].init_inputs == (3, 4, 3)
    # odd halves where the model allows them ...
    assert by["softmax"].alt_shapes == {"batch_size": 5, "dim": 33}
    assert [s.shape for s in by["softmax"].alt_inputs] == [(5, 33)]
    # ... and halved sizes where it needs divisibility (channels % num_groups == 0)
    # (odd and halved channel counts break GroupNorm(8, c): channels keeps its value)
    assert by["groupnorm"].alt_shapes == {"batch_size": 1, "channels": 8, "height": 3, "width": 3}
    # kernel_size and num_groups are not shape constants of the inputs
    assert "kernel_size" not in by["conv2d_relu"].input_constants
    assert "num_groups" not in by["groupnorm"].input_constants
    assert "reduce_dim" not in by["mean_dim"].input_constants


def test_readme_lists_every_example():
    readme = (EXAMPLES / "README.md").read_text()
    for name in SMALL:
        assert f"`{name}.py`" in readme, name


@pytest.mark.gpu
def test_examples_load_on_cuda():
    problems, errors = load_torch_problems(EXAMPLES, constants=SMALL, device="cuda", timeout_s=120)
    assert errors == []
    assert len(problems) == len(SMALL)
    assert all(p.device == "cuda" for p in problems)


# ---------------------------------------------------------------------------------------
# Bad problems: one folder, one child
# ---------------------------------------------------------------------------------------

GOOD = """
import torch
import torch.nn as nn

batch_size = 4
dim = 6

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        print("forward prints to stdout; the protocol must survive it")
        return x * self.w

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return [dim]
"""

CASES: dict[str, str] = {
    "a_good": GOOD,
    "b_no_get_inputs": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x
def get_init_inputs():
    return []
""",
    "c_no_model_alias": """
import torch
Model = None
def get_inputs():
    return [torch.randn(2)]
def get_init_inputs():
    return []
""",
    "d_forward_raises": """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        y = x.sum()
        return torch.matmul(x, torch.ones(3, 2))

def get_inputs():
    return [torch.randn(4, 5)]

def get_init_inputs():
    return []
""",
    "e_constant_output": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.ones(3) * 2
def get_inputs():
    return [torch.randn(4)]
def get_init_inputs():
    return []
""",
    "f_syntax": """
import torch
class Model(torch.nn.Module):
    def forward(self, x)
        return x
""",
    "g_nan": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.log(x)
def get_inputs():
    return [torch.randn(64)]
def get_init_inputs():
    return []
""",
    "h_non_tensor_output": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return float(x.sum())
def get_inputs():
    return [torch.randn(4)]
def get_init_inputs():
    return []
""",
    "i_same_inputs": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.ones(4)]
def get_init_inputs():
    return []
""",
    "j_nondeterministic": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)
    def forward(self, x):
        return self.drop(x)
def get_inputs():
    return [torch.randn(256)]
def get_init_inputs():
    return []
""",
    "k_tuple_and_scalar": """
import torch
import torch.nn as nn
n = 5
class Model(nn.Module):
    def forward(self, x, scale):
        return x * scale, x.sum(dim=0)
def get_inputs():
    return [torch.randn(n, 3), 1.5]
def get_init_inputs():
    return []
""",
    "l_fixed_shapes": """
import torch
import torch.nn as nn
batch_size = 4
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
    def forward(self, x):
        return x.relu()
def get_inputs():
    return [torch.randn(8, 8)]
def get_init_inputs():
    return [batch_size]
""",
    "m_inplace": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x.relu_()
def get_inputs():
    return [torch.randn(16)]
def get_init_inputs():
    return []
""",
    "n_import_raises": """
import torch

raise RuntimeError("cannot import this")

class Model:
    pass
""",
    "o_cuda_inputs": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x + 1
def get_inputs():
    return [torch.randn(4, device="cuda")]
def get_init_inputs():
    return []
""",
    "p_init_not_list": """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x + 1
def get_inputs():
    return [torch.randn(4)]
def get_init_inputs():
    return 3
""",
    "q_breaks_when_smaller": """
import torch
import torch.nn as nn
size = 16
class Model(nn.Module):
    def forward(self, x):
        assert x.shape[0] == 16, "only size 16"
        return x * 2
def get_inputs():
    return [torch.randn(size)]
def get_init_inputs():
    return []
""",
    "z_candidate_only": """
import torch.nn as nn
class ModelNew(nn.Module):
    pass
""",
}


@pytest.fixture(scope="module")
def bad_folder(tmp_path_factory) -> tuple[dict[str, TorchProblem], dict[str, TorchLoadError], Path]:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("torch_cases")
    for name, text in CASES.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text).lstrip())
    (root / "notes.txt").write_text("not python")
    problems, errors = load_torch_problems(root, timeout_s=60)
    return {p.name: p for p in problems}, {e.path.stem: e for e in errors}, root


def _err(bad_folder, name: str) -> TorchLoadError:
    errors = bad_folder[1]
    assert name in errors, f"{name} loaded: {bad_folder[0].get(name)}"
    e = errors[name]
    assert e.message.startswith(f"{name}.py: ")
    assert "\n" not in e.message
    return e


def test_folder_keeps_good_files_and_reports_bad_ones(bad_folder):
    problems, errors, _ = bad_folder
    assert set(problems) == {"a_good", "e_constant_output", "k_tuple_and_scalar", "l_fixed_shapes",
                             "m_inplace", "q_breaks_when_smaller"}
    assert "z_candidate_only" not in errors  # no Model: skipped, not an error
    assert set(problems) | set(errors) == set(CASES) - {"z_candidate_only"}
    good = problems["a_good"]
    assert good.constants == {"batch_size": 4, "dim": 6}
    assert good.alt_shapes == {"batch_size": 3, "dim": 3}
    assert [s.shape for s in good.inputs] == [(4, 6)]


def test_missing_get_inputs(bad_folder):
    e = _err(bad_folder, "b_no_get_inputs")
    assert "defines no get_inputs()" in e.message
    assert e.hint and "KernelBench format" in e.hint


def test_model_not_a_module(bad_folder):
    assert "not callable" in _err(bad_folder, "c_no_model_alias").message


def test_failing_forward_names_the_line(bad_folder):
    msg = _err(bad_folder, "d_forward_raises").message
    assert "forward(*get_inputs()) (seed 1) failed at d_forward_raises.py:7: RuntimeError" in msg
    assert "cannot be multiplied" in msg


def test_constant_output_loads_as_degenerate_with_a_warning(bad_folder):
    """KernelBench ships files whose outputs do not depend on the inputs (a ReLU after a
    shift that makes everything negative) and runs them: they load, flagged."""
    p = bad_folder[0]["e_constant_output"]
    assert p.degenerate is True
    assert any(w.startswith("degenerate: the outputs do not depend on the inputs") for w in p.warnings)
    assert not bad_folder[0]["a_good"].degenerate


def test_syntax_error_in_folder(bad_folder):
    assert _err(bad_folder, "f_syntax").message == "f_syntax.py: syntax error at line 3: expected ':'"


def test_nan_output(bad_folder):
    assert "NaN/inf" in _err(bad_folder, "g_nan").message


def test_non_tensor_output(bad_folder):
    assert "forward returned a float" in _err(bad_folder, "h_non_tensor_output").message


def test_same_inputs_for_both_seeds(bad_folder):
    assert "returns the same inputs for seeds 1 and 2" in _err(bad_folder, "i_same_inputs").message


def test_nondeterministic_forward(bad_folder):
    assert "not deterministic" in _err(bad_folder, "j_nondeterministic").message


def test_import_error_names_the_line(bad_folder):
    msg = _err(bad_folder, "n_import_raises").message
    assert msg == "n_import_raises.py: importing the file failed at n_import_raises.py:3: RuntimeError: cannot import this"


def test_cuda_tensors_on_cpu_get_a_hint(bad_folder):
    e = _err(bad_folder, "o_cuda_inputs")
    assert "get_inputs() failed at o_cuda_inputs.py:" in e.message
    assert e.hint and "device='cuda'" in e.hint


def test_init_inputs_not_a_list(bad_folder):
    assert "get_init_inputs() returned a int, not a list" in _err(bad_folder, "p_init_not_list").message


def test_tuple_output_and_number_input(bad_folder):
    p = bad_folder[0]["k_tuple_and_scalar"]
    assert p.output_is_tuple
    assert [s.shape for s in p.outputs] == [(5, 3), (3,)]
    assert p.inputs[1] == TensorSpec("float", (), "float64", 1.5)
    assert p.alt_shapes == {"n": 3}


def test_alt_shapes_none_when_constants_do_not_change_inputs(bad_folder):
    p = bad_folder[0]["l_fixed_shapes"]
    assert p.alt_shapes is None and p.alt_inputs is None
    assert "reads no module-level int constant" in p.alt_note
    assert p.constants == {"batch_size": 4} and p.input_constants == ()


def test_alt_shapes_none_when_smaller_sizes_break_the_model(bad_folder):
    p = bad_folder[0]["q_breaks_when_smaller"]
    assert p.alt_shapes is None
    assert "only size 16" in p.alt_note


def test_in_place_forward_is_a_warning(bad_folder):
    assert bad_folder[0]["m_inplace"].warnings == ("forward modifies its input 0 in place",)


# ---------------------------------------------------------------------------------------
# Single files, time limits, crashes
# ---------------------------------------------------------------------------------------


def test_single_file_error_is_a_problem_error(tmp_path: Path):
    pytest.importorskip("torch")
    path = tmp_path / "const.py"
    path.write_text(textwrap.dedent(CASES["e_constant_output"]))
    p = load_torch_problem(path)
    assert p.degenerate and p.to_json()["degenerate"] is True
    assert TorchProblem.from_json(p.to_json()).degenerate is True


def test_hanging_file_is_killed_at_the_time_limit_and_the_folder_goes_on(tmp_path: Path):
    pytest.importorskip("torch")
    (tmp_path / "a_hang.py").write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn as nn
            class Model(nn.Module):
                def forward(self, x):
                    while True:
                        pass
            def get_inputs():
                return [torch.randn(4)]
            def get_init_inputs():
                return []
            """
        )
    )
    (tmp_path / "b_crash.py").write_text("import os\nos._exit(7)\n\nclass Model: pass\n")
    (tmp_path / "c_good.py").write_text(textwrap.dedent(GOOD))
    t0 = time.monotonic()
    # 15 s: each child imports torch within its limit, which took over 3 s on a loaded
    # 2-core machine (c_good timed out beside pytest-xdist workers)
    problems, errors = load_torch_problems(tmp_path, timeout_s=15)
    elapsed = time.monotonic() - t0
    assert [p.name for p in problems] == ["c_good"], [e.message for e in errors]
    by = {e.path.stem: e.message for e in errors}
    assert by["a_hang"].startswith("a_hang.py: timed out after 15.")
    assert "in forward" in by["a_hang"]
    assert by["b_crash"] == "b_crash.py: the loader process exited with status 7 while importing the file"
    # three children (hang, crash, rest), each importing torch: well under a minute
    assert elapsed < 60


def test_a_loader_past_its_memory_bound_is_killed_with_a_message(tmp_path: Path, monkeypatch) -> None:
    """A problem whose data run would take most of the machine's memory (here: the bound is
    set tiny) is stopped with one line naming the bytes, and the folder goes on."""
    pytest.importorskip("torch")
    import cudaperf_cli.problems.pytorch as P

    monkeypatch.setattr(P, "LOADER_MEMORY_SHARE", 1e-9)  # a few bytes: torch alone passes it
    (tmp_path / "a.py").write_text(textwrap.dedent(GOOD))
    with pytest.raises(ToolchainError, match="the loader passed .* GB of host memory"):
        load_torch_problems(tmp_path, timeout_s=30)


def test_a_problem_that_forks_at_import_does_not_hang_the_loader(tmp_path: Path) -> None:
    """A forked process of the problem keeps the answer pipe open: the loader stops reading
    once every file has answered instead of waiting for the end of the pipe."""
    pytest.importorskip("torch")
    (tmp_path / "forker.py").write_text(textwrap.dedent(GOOD) + textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        """))
    t0 = time.monotonic()
    p = load_torch_problem(tmp_path / "forker.py", timeout_s=60)
    assert p.name == "forker" and time.monotonic() - t0 < 90
