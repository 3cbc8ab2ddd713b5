"""The built-in PyTorch policy on the CPU: tracing (child process), fusion plans, generated
files (static guards, launcher signatures, nvcc compile-only), refusals, and the candidates
run against ``Model`` with the fused kernels emulated in PyTorch (plan, model.py and shapes;
the CUDA text itself is checked on a GPU by tests/test_gpu_builtin_torch.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from cudaperf_cli.evaluate.static_guards import LIBRARY_OPS, check_candidate_source
from cudaperf_cli.policies.base import PolicyRefusal, Proposal
from cudaperf_cli.policies.builtin_torch import (
    VARIANTS,
    BuiltinTorchPolicy,
    Graph,
    GraphNode,
    plan_fusion,
    supported_ops,
    trace_problem,
)
from cudaperf_cli.policies.builtin_torch.selfcheck import check_candidate
from cudaperf_cli.policies.builtin_torch.trace import SHRINK_ABOVE, TraceChild, trace_constant_sets
from cudaperf_cli.problems.pytorch import (
    TorchProblem,
    load_torch_problem,
    load_torch_problems,
)
from cudaperf_cli.torch_runtime import parse_launchers

EXAMPLES = Path(__file__).parent.parent / "examples" / "torch"

#: Test sizes of examples/torch (examples/torch/README.md).
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

#: Per example: (fused kernels as described, ops left to PyTorch, reduction kind of each
#: kernel: None = elementwise, else the rows spec text).
PLANS: dict[str, tuple[list[str], list[str], list[str | None]]] = {
    "swish_bias": (["[sigmoid, mul, add bias]"], [], [None]),
    "gelu": (["gelu"], [], [None]),
    "relu_scale": (["[relu, mul 0.5]"], [], [None]),
    "softmax": (["softmax"], [], ["dims [1, 2)"]),
    "layernorm": (["layer_norm"], [], ["dims [1, 2)"]),
    "rmsnorm": (["[pow 2, mean, add 1e-06, rsqrt, mul, mul weight]"], [], ["dims [1, 2)"]),
    "row_sum": (["sum"], [], ["dims [1, 2)"]),
    "mean_dim": (["mean"], [], ["dims [1, 2)"]),
    "matmul_bias_relu": (["matmul->[add bias, relu]"], ["matmul (cuBLAS)"], [None]),
    "conv2d_relu": (["conv2d->[add bias, relu]"], ["conv2d (cuDNN, bias fused)"], [None]),
    "batchnorm_eval": (["batch_norm"], [], [None]),
    "groupnorm": (["group_norm"], [], ["8 groups per sample"]),
    "mlp_gelu": (["linear->[add bias, gelu]"], ["linear (cuBLAS, bias fused)", "linear (cuBLAS)"], [None]),
    "residual_layernorm": (["[add, layer_norm]"], [], ["dims [1, 2)"]),
}

#: Reduction levels (one loop each before the output loop) of the reduction kernels.
DEPTHS = {"softmax": 2, "layernorm": 2, "rmsnorm": 1, "row_sum": 1, "mean_dim": 1, "groupnorm": 2,
          "residual_layernorm": 2}


# ---------------------------------------------------------------------------------------
# Fixtures: one folder load, traces two at a time (each trace is a child importing torch)
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def problems() -> dict[str, TorchProblem]:
    loaded, errors = load_torch_problems(EXAMPLES, constants=SMALL)
    assert not errors, errors
    return {p.name: p for p in loaded}


@pytest.fixture(scope="module")
def policy(problems: dict[str, TorchProblem]) -> BuiltinTorchPolicy:
    """A policy with every example traced (two trace children at a time)."""
    pol = BuiltinTorchPolicy()
    with ThreadPoolExecutor(max_workers=2) as ex:
        list(ex.map(pol.plan, problems.values()))
    return pol


@pytest.fixture(scope="module")
def candidates(policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem], tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    """(example, turn) -> the folder holding its model.py and kernel.cu."""
    root = tmp_path_factory.mktemp("cands")
    out = {}
    for name, p in problems.items():
        for turn in range(len(VARIANTS)):
            prop = policy.propose(p, turn)
            d = root / name / str(turn)
            d.mkdir(parents=True)
            for fname, text in prop.files.items():
                (d / fname).write_text(text)
            out[(name, turn)] = d
    return out


def _write_problem(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


# ---------------------------------------------------------------------------------------
# Tracing
# ---------------------------------------------------------------------------------------


def test_every_example_traces(policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem]) -> None:
    assert sorted(problems) == sorted(SMALL)
    for name, p in problems.items():
        graph = policy.graph(p)
        inputs = [n for n in graph.nodes if n.op == "input"]
        assert [n.index for n in inputs] == list(range(len(p.inputs))), name
        for n, spec in zip(inputs, p.inputs):
            assert n.shape == spec.shape and n.dtype == "float32", name
        # every parameter and buffer of Model, with its shape
        assert set(graph.params) >= {a.target for a in graph.nodes if a.op == "attr"}, name
        assert graph.constants == p.constants, name  # small problems are traced as loaded


def test_trace_names_parameters_and_canonical_ops(policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem]) -> None:
    def graph(name: str) -> Graph:
        return policy.graph(problems[name])

    ln = [n for n in graph("layernorm").nodes if n.op == "call"]
    assert [n.target for n in ln] == ["layer_norm"]
    assert ln[0].kwargs["weight"] == {"attr": "norm.weight"} and ln[0].kwargs["eps"] == 1e-5
    assert ln[0].source == "nn.LayerNorm norm" and ln[0].shape == (8, 64)
    mlp = [(n.target, n.kwargs.get("bias")) for n in graph("mlp_gelu").nodes if n.op == "call"]
    assert mlp == [("linear", {"attr": "fc1.bias"}), ("gelu", None), ("linear", {"attr": "fc2.bias"})]
    gelu = next(n for n in graph("mlp_gelu").nodes if n.target == "gelu")
    assert gelu.kwargs["approximate"] == "none"
    rms = {n.name: n for n in graph("rmsnorm").nodes}
    assert rms["pow_1"].target == "pow" and rms["pow_1"].kwargs == {"input": {"node": "x"}, "exponent": 2}
    assert rms["mean"].kwargs["dim"] == -1 and rms["mean"].kwargs["keepdim"] is True
    assert rms["mean"].shape == (8, 1)
    res = {n.name: n for n in graph("residual_layernorm").nodes}
    assert res["getattr_1"].kind == "shape" and res["getattr_1"].value == [8, 64]
    assert res["getitem"].kind == "number" and res["getitem"].value == 64
    bn = [n for n in graph("batchnorm_eval").nodes if n.op == "attr"]
    assert {n.target: n.attr_kind for n in bn} == {
        "weight": "parameter", "bias": "parameter", "running_mean": "buffer", "running_var": "buffer"
    }
    conv = next(n for n in graph("conv2d_relu").nodes if n.target == "conv2d")
    assert conv.kwargs["padding"] == [1, 1] and conv.kwargs["bias"] == {"attr": "conv.bias"}
    assert Graph.from_json(graph("softmax").to_json()) == graph("softmax")


def test_large_problems_are_traced_at_shrunken_sizes(tmp_path: Path) -> None:
    p = load_torch_problem(EXAMPLES / "groupnorm.py", constants={"batch_size": 8, "channels": 64, "height": 64, "width": 64}, alt_shapes=False)
    sets = trace_constant_sets(p)
    assert sum(s.numel for s in p.inputs) > SHRINK_ABOVE
    assert sets[0] == {"batch_size": 4, "channels": 4, "height": 4, "width": 4, "num_groups": 8}
    assert sets[-1] == p.constants
    g = trace_problem(p)
    # channels=4 and 16 break GroupNorm(8, C): the first set that runs keeps C a multiple of 8
    assert g.constants["channels"] % 8 == 0 and g.constants["height"] < 64
    small = load_torch_problem(EXAMPLES / "gelu.py", constants={"batch_size": 2, "dim": 3}, alt_shapes=False)
    assert trace_constant_sets(small) == [small.constants]


def test_untraceable_model_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "branchy", """
        import torch
        import torch.nn as nn
        batch_size = 4
        class Model(nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return torch.relu(x)
                return -x
        def get_inputs():
            return [torch.randn(batch_size, 8)]
        def get_init_inputs():
            return []
    """)
    p = load_torch_problem(path, alt_shapes=False)
    with pytest.raises(PolicyRefusal) as exc:
        BuiltinTorchPolicy().propose(p, 0)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("branchy.py: torch.fx cannot trace Model.forward (TraceError:")
    assert "control flow" in msg and "control flow" in (exc.value.hint or "")


def test_trace_timeout_kills_the_child(tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "slow_init", """
        import time
        import torch
        import torch.nn as nn
        batch_size = 4
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                if __name__.startswith("_cudaperf_trace"):  # slow only in the trace child
                    time.sleep(60)
            def forward(self, x):
                return torch.relu(x)
        def get_inputs():
            return [torch.randn(batch_size, 8)]
        def get_init_inputs():
            return []
    """)
    p = load_torch_problem(path, alt_shapes=False)
    with pytest.raises(PolicyRefusal, match=r"slow_init.py: tracing timed out after \d+\.\d s \(limit 2 s\)"):
        trace_problem(p, timeout_s=2)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_trace_child_started_ahead_serves_the_first_trace(tmp_path: Path) -> None:
    """warm_up (what optimize calls before loading) starts the trace child; the first
    trace uses it, the same graph as a child started then, and it is gone after."""
    policy = BuiltinTorchPolicy()
    policy.warm_up()
    warm = policy._warm
    assert warm is not None and _alive(warm.proc.pid)
    p = load_torch_problem(EXAMPLES / "gelu.py", constants={"batch_size": 2, "dim": 3}, alt_shapes=False)
    graph = policy.graph(p)
    assert policy._warm is None and not _alive(warm.proc.pid)
    assert graph.to_json() == trace_problem(p).to_json()


def test_an_unused_trace_child_is_ended(tmp_path: Path) -> None:
    """close() ends a child no trace used; a child whose stdin closes without a job exits."""
    policy = BuiltinTorchPolicy()
    policy.warm_up()
    pid = policy._warm.proc.pid  # type: ignore[union-attr]
    policy.close()
    assert policy._warm is None and not _alive(pid)
    policy.close()  # idempotent
    child = TraceChild()
    try:
        child.proc.stdin.close()  # type: ignore[union-attr]
        assert child.proc.wait(timeout=120) == 0
    finally:
        child.close()


# ---------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SMALL))
def test_plan_of_each_example(name: str, policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem]) -> None:
    fused, left, rows = PLANS[name]
    plan = policy.plan(problems[name])
    assert plan.fused_ops() == fused
    assert plan.left_ops() == left
    assert [None if k.rows is None else k.rows.describe() for k in plan.kernels] == rows
    if name in DEPTHS:
        assert [k.depth for k in plan.kernels] == [DEPTHS[name]]
    expected_line = "fused: " + "; ".join(f"{f} (1 kernel)" for f in fused)
    if left:
        counts: dict[str, int] = {}
        for item in left:
            counts[item] = counts.get(item, 0) + 1
        expected_line += "; left to PyTorch: " + ", ".join(t if n == 1 else f"{n}x {t}" for t, n in counts.items())
    assert plan.describe() == expected_line


def test_plan_details(policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem]) -> None:
    def kernel(name: str) -> Any:
        (k,) = policy.plan(problems[name]).kernels
        return k

    # swish: x read at i, bias broadcast along the last dim
    k = kernel("swish_bias")
    assert [(l.ref.key, l.ref.at, l.full) for l in k.leaves] == [(("node", "x"), None, True), (("attr", "bias"), None, False)]
    # batch norm (running statistics): per-channel vectors aligned at dim 1, eps a constant
    k = kernel("batchnorm_eval")
    assert [(l.ref.key[1], l.ref.at) for l in k.leaves] == [
        ("x", None), ("running_mean", 1), ("running_var", 1), ("weight", 1), ("bias", 1)
    ]
    assert [c.value for c in k.consts] == [1e-5]
    # group norm: rows are the groups, the affine is per channel
    k = kernel("groupnorm")
    assert k.rows is not None and k.rows.kind == "groups" and k.rows.groups == 8
    assert [(l.ref.key[1], l.ref.at) for l in k.leaves] == [("x", None), ("norm.weight", 1), ("norm.bias", 1)]
    # row_sum / mean_dim write the reduced tensor only
    assert [d for _, d in kernel("row_sum").outputs] == ["reduced"]
    assert [d for _, d in kernel("mean_dim").outputs] == ["reduced"]
    # conv: the bias is peeled out of cuDNN's call into the kernel, per channel
    plan = policy.plan(problems["conv2d_relu"])
    assert plan.peeled == {"conv": "bias"} and plan.left[0].bias_fused
    assert [(l.ref.key, l.ref.at) for l in plan.kernels[0].leaves] == [(("node", "conv"), None), (("attr", "conv.bias"), 1)]
    # mlp: fc1's bias fused, fc2 (a forward output) keeps its bias in cuBLAS
    plan = policy.plan(problems["mlp_gelu"])
    assert plan.peeled == {"fc1": "bias"}
    assert plan.schedule == [("node", "fc1"), ("kernel", 0), ("node", "fc2")]


def test_supported_ops_lists_every_kind() -> None:
    ops = supported_ops()
    assert {"gelu", "sigmoid", "add", "batch_norm (running statistics)"} <= set(ops["elementwise"])
    assert {"softmax", "log_softmax", "layer_norm", "group_norm", "rms_norm", "sum", "mean", "amax"} <= set(ops["reductions"])
    assert {"linear", "matmul", "bmm", "addmm", "conv2d"} <= set(ops["library"])


# Hand-written graphs (no torch): grouping rules


def _node(name: str, target: str, shape: tuple[int, ...] | None, *args: Any, op: str = "call", kind: str = "tensor", **kwargs: Any) -> GraphNode:
    return GraphNode(name=name, op=op, target=target, args=tuple(args), kwargs=kwargs, kind=kind,
                     shape=shape, dtype="float32" if kind == "tensor" else None, source=target.split(":")[-1])


def _graph(nodes: list[GraphNode], outputs: Any, params: dict[str, Any] | None = None) -> Graph:
    return Graph(nodes=tuple(nodes), outputs=outputs, params=params or {},
                 forward_args=tuple(n.name for n in nodes if n.op == "input"))


def _x(shape: tuple[int, ...], name: str = "x", index: int = 0) -> GraphNode:
    return GraphNode(name=name, op="input", target=name, shape=shape, dtype="float32", index=index)


def test_fusion_does_not_create_a_cycle_through_a_library_op() -> None:
    # r = relu(x); m = r @ w; out = r + m: relu feeds the GEMM, so it must be written out
    # before the GEMM, and the add (which reads the GEMM) cannot join relu's kernel.
    g = _graph(
        [
            _x((4, 8)),
            GraphNode(name="w", op="attr", target="w", shape=(8, 8), dtype="float32", attr_kind="parameter"),
            _node("relu", "relu", (4, 8), {"node": "x"}),
            _node("mm", "mm", (4, 8), {"node": "relu"}, {"node": "w"}),
            _node("add", "add", (4, 8), {"node": "relu"}, {"node": "mm"}),
        ],
        {"node": "add"},
        {"w": {"shape": [8, 8], "dtype": "float32", "kind": "parameter"}},
    )
    plan = plan_fusion(g)
    assert plan.fused_ops() == ["relu", "mm->add"]
    assert plan.schedule == [("kernel", 0), ("node", "mm"), ("kernel", 1)]


def test_manual_softmax_is_one_kernel_with_two_levels() -> None:
    g = _graph(
        [
            _x((8, 64)),
            _node("amax", "amax", (8, 1), {"node": "x"}, -1, True),
            _node("sub", "sub", (8, 64), {"node": "x"}, {"node": "amax"}),
            _node("exp", "exp", (8, 64), {"node": "sub"}),
            _node("sum_1", "sum", (8, 1), {"node": "exp"}, -1, True),
            _node("div", "div", (8, 64), {"node": "exp"}, {"node": "sum_1"}),
        ],
        {"node": "div"},
    )
    (k,) = plan_fusion(g).kernels
    assert k.labels == ["amax", "sub", "exp", "sum", "div"] and k.depth == 2
    assert k.rows is not None and (k.rows.start, k.rows.stop) == (1, 2)


def test_reduction_without_keepdim_is_not_broadcast_back_along_rows() -> None:
    # s = x.sum(-1) is [8]; x - s broadcasts s along the LAST dim (x is [8, 8]), not along
    # rows: it must not become a per-row value of the reduction's kernel.
    g = _graph(
        [
            _x((8, 8)),
            _node("s", "sum", (8,), {"node": "x"}, -1, False),
            _node("sub", "sub", (8, 8), {"node": "x"}, {"node": "s"}),
        ],
        {"node": "sub"},
    )
    plan = plan_fusion(g)
    assert plan.fused_ops() == ["sum", "sub"]
    (leaf,) = [l for l in plan.kernels[1].leaves if l.ref.key[0] == "prim"]
    assert leaf.ref.at is None and not leaf.full  # read with PyTorch broadcasting


def test_strided_reduction_and_shape_arithmetic() -> None:
    # y = x.mean(1) * x.shape[-1]: a column reduction, the number computed in Python
    g = _graph(
        [
            _x((2, 16, 32)),
            _node("getattr_1", "getattr", None, {"node": "x"}, "shape", kind="shape"),
            _node("getitem", "getitem", None, {"node": "getattr_1"}, -1, kind="number"),
            _node("mean", "mean", (2, 32), {"node": "x"}, 1),
            _node("mul", "mul", (2, 32), {"node": "mean"}, {"node": "getitem"}),
        ],
        {"node": "mul"},
    )
    plan = plan_fusion(g)
    (k,) = plan.kernels
    assert k.labels == ["mean", "mul"] and k.rows is not None and (k.rows.start, k.rows.stop) == (1, 2)
    assert [c.var for c in k.consts] == ["getitem"]
    assert plan.schedule == [("node", "getattr_1"), ("node", "getitem"), ("kernel", 0)]


@pytest.mark.parametrize(
    "nodes, words",
    [
        ([_node("cs", "unknown:torch.cumsum", (4, 8), {"node": "x"}, 1)], "cannot port torch.cumsum (node 'cs'): not an operation"),
        ([_node("ap", "adaptive_avg_pool1d", (4, 2), {"node": "x"}, 2)], "adaptive pooling to output_size=2"),
        ([_node("s", "sum", (4,), {"node": "x"}, [0, 2])], "are not adjacent"),
        ([_node("d", "dropout", (4, 8), {"node": "x"}, 0.5, True)], "dropout in training mode"),
        ([_node("m", "module:LSTM", (4, 8), {"node": "x"})], "cannot port LSTM"),
    ],
)
def test_unsupported_operations_are_named(nodes: list[GraphNode], words: str) -> None:
    shape = (4, 8, 2) if "adjacent" in words else (4, 8)
    g = _graph([_x(shape)] + nodes, {"node": nodes[-1].name})
    with pytest.raises(PolicyRefusal) as exc:
        plan_fusion(g)
    assert words in str(exc.value) and "\n" not in str(exc.value)


# ---------------------------------------------------------------------------------------
# Generated files
# ---------------------------------------------------------------------------------------


def test_proposals_carry_files_description_and_mapping(policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem]) -> None:
    p = problems["mlp_gelu"]
    props = [policy.propose(p, t) for t in range(len(VARIANTS))]
    for t, prop in enumerate(props):
        assert isinstance(prop, Proposal) and prop.policy == "builtin"
        assert set(prop.files) == {"model.py", "kernel.cu"} and prop.source == prop.files["model.py"]
        assert prop.description.startswith(
            "fused: linear->[add bias, gelu] (1 kernel); left to PyTorch: linear (cuBLAS, bias fused), linear (cuBLAS) ["
        )
        assert prop.mapping["fused"] == ["linear->[add bias, gelu]"]
        assert prop.mapping["left_to_pytorch"] == ["linear (cuBLAS, bias fused)", "linear (cuBLAS)"]
        assert prop.mapping["variant"]["name"] == VARIANTS[t].name
    assert len({p.files["kernel.cu"] for p in props}) == len(VARIANTS)
    assert "_cp_F.linear(x, self.fc1.weight, None)" in props[0].source
    assert "_cp_F.linear(p1, self.fc2.weight, self.fc2.bias)" in props[0].source
    with pytest.raises(PolicyRefusal, match="^no more variants to try$"):
        policy.propose(p, len(VARIANTS))


def test_model_py_copies_the_constructor(candidates: dict[tuple[str, int], Path]) -> None:
    text = (candidates[("groupnorm", 0)] / "model.py").read_text()
    assert "class ModelNew(nn.Module):" in text
    assert "self.norm = nn.GroupNorm(num_groups, channels, eps=1e-05)" in text
    assert "def forward(self, x):" in text and "class Model(" not in text
    assert "lib.k0_group_norm(" in text and "_cp_group_rows(_s0, self.norm.num_groups)" in text


@pytest.mark.parametrize("name", sorted(SMALL))
def test_generated_files_pass_the_static_guards(name: str, candidates: dict[tuple[str, int], Path], problems: dict[str, TorchProblem]) -> None:
    for turn in range(len(VARIANTS)):
        d = candidates[(name, turn)]
        violations = check_candidate_source(
            (d / "model.py").read_text(),
            problem=problems[name],
            allow_torch_ops=LIBRARY_OPS,
            cuda_sources={"kernel.cu": (d / "kernel.cu").read_text()},
        )
        assert violations == [], [str(v) for v in violations]


@pytest.mark.parametrize("name", sorted(SMALL))
def test_launchers_parse_and_match_the_plan(name: str, candidates: dict[tuple[str, int], Path], policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem]) -> None:
    plan = policy.plan(problems[name])
    for turn in range(len(VARIANTS)):
        d = candidates[(name, turn)]
        sigs = parse_launchers((d / "kernel.cu").read_text())
        assert [s.name for s in sigs] == [k.name for k in plan.kernels]
        model = (d / "model.py").read_text()
        for s, k in zip(sigs, plan.kernels):
            ptrs = [p for p in s.params if p.pointer]
            assert len(ptrs) == len(k.leaves) + len(k.outputs)
            assert all(p.dtype == "float32" for p in ptrs)
            assert [p.const for p in ptrs] == [True] * len(k.leaves) + [False] * len(k.outputs)
            scalars = [p.ctype for p in s.params if not p.pointer]
            assert scalars.count("float") == len(k.consts)
            # model.py passes exactly as many arguments as the launcher takes
            call = re.search(rf"lib\.{s.name}\((.*)\)\n", model)
            assert call is not None
            assert len(call.group(1).split(", ")) == len(s.params)


def test_no_shape_is_compiled_in(tmp_path: Path, policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem]) -> None:
    """The same problem traced at other sizes gives byte-identical files."""
    other = {
        "softmax": {"batch_size": 5, "dim": 33},
        "groupnorm": {"batch_size": 3, "channels": 16, "height": 7, "width": 9},
        "mean_dim": {"batch_size": 3, "dim1": 7, "dim2": 40},
        "conv2d_relu": {"batch_size": 1, "in_channels": 2, "out_channels": 6, "height": 9, "width": 7},
    }
    pol = BuiltinTorchPolicy()
    for name, consts in other.items():
        q = load_torch_problem(EXAMPLES / f"{name}.py", constants=consts, alt_shapes=False)
        for turn in range(len(VARIANTS)):
            assert pol.propose(q, turn).files == policy.propose(problems[name], turn).files, (name, turn)


def test_kernel_cu_compiles(candidates: dict[tuple[str, int], Path], nvcc_path: str, tmp_path: Path) -> None:
    jobs = []
    for (name, turn), d in sorted(candidates.items()):
        if turn in (0, len(VARIANTS) - 1) or VARIANTS[turn].one_pass:  # scalar-only, every template, one-pass
            jobs.append((name, turn, d / "kernel.cu"))

    def build(job: tuple[str, int, Path]) -> tuple[str, int, int, str]:
        name, turn, src = job
        out = tmp_path / f"{name}_{turn}.so"
        proc = subprocess.run(
            [nvcc_path, "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", "-o", str(out), str(src)],
            capture_output=True, text=True, timeout=300, check=False,
        )
        return name, turn, proc.returncode, proc.stdout + proc.stderr

    with ThreadPoolExecutor(max_workers=2) as ex:
        results = list(ex.map(build, jobs))
    for name, turn, rc, log in results:
        assert rc == 0, f"{name} turn {turn}:\n{log}"
        assert "warning" not in log.lower(), f"{name} turn {turn}:\n{log}"


# ---------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------


def test_nothing_to_fuse_is_refused(tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "bare_conv", """
        import torch
        import torch.nn as nn
        batch_size = 2
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3)
            def forward(self, x):
                return self.conv(x)
        def get_inputs():
            return [torch.randn(batch_size, 3, 8, 8)]
        def get_init_inputs():
            return []
    """)
    p = load_torch_problem(path, alt_shapes=False)
    with pytest.raises(PolicyRefusal, match="^nothing to fuse: conv2d is left to cuDNN$"):
        BuiltinTorchPolicy().propose(p, 0)


def test_an_unsupported_op_is_refused(tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "cums", """
        import torch
        import torch.nn as nn
        batch_size = 2
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.bn = nn.BatchNorm1d(8)
            def forward(self, x):
                return torch.triu(torch.relu(x))
        def get_inputs():
            return [torch.randn(batch_size, 8)]
        def get_init_inputs():
            return []
    """)
    p = load_torch_problem(path, alt_shapes=False)
    with pytest.raises(PolicyRefusal, match=r"^cannot port torch\.triu \(node 'triu'\): not an operation"):
        BuiltinTorchPolicy().propose(p, 0)


# ---------------------------------------------------------------------------------------
# The candidates against Model, kernels emulated (CPU)
# ---------------------------------------------------------------------------------------


def _configs(p: TorchProblem) -> list[dict[str, int]]:
    base = dict(p.constants)
    assert p.alt_shapes, p.alt_note
    return [base, {**base, **p.alt_shapes}]


def _variant_plan(plan: Any, files: dict[str, str]) -> Any:
    """``plan``, or for a candidate of a one-pass variant (its model.py names the variant)
    the plan of the same graph with one-pass variances: the kernels it was written from."""
    m = re.search(r"\(variant (\w+):", files["model.py"])
    variant = next((v for v in VARIANTS if m is not None and v.name == m.group(1)), None)
    return plan_fusion(plan.graph, one_pass=True) if variant is not None and variant.one_pass else plan


def _check_emulated(path: Path, p: TorchProblem, plan: Any, files: dict[str, str], folder: Path) -> dict[str, Any]:
    """A candidate's ``files`` written to ``folder`` (created) and run against ``Model`` at
    the problem's test and alternative shapes with the kernels of ``plan`` (of the variant's
    plan, :func:`_variant_plan`) emulated."""
    plan = _variant_plan(plan, files)
    folder.mkdir()
    for fname, text in files.items():
        (folder / fname).write_text(text)
    return check_candidate(path, folder / "model.py", _configs(p), emulate=True, kernels=plan.kernels)


def _plan_and_variants(path: Path) -> tuple[TorchProblem, Any, list[Any]]:
    """The problem at ``path``, its plan and every variant's proposal (turn order)."""
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        return p, pol.plan(p), [pol.propose(p, t) for t in range(len(VARIANTS))]
    finally:
        pol.close()


def _assert_variants_match_model(path: Path, p: TorchProblem, plan: Any, props: list[Any], tmp_path: Path) -> None:
    """Every variant's candidate, kernels emulated, against ``Model`` at both shapes."""
    for t, prop in enumerate(props):
        r = _check_emulated(path, p, plan, prop.files, tmp_path / f"cand{t}")
        assert r["ok"], (t, r)


def _kernel_cu(path: Path, turn: int) -> str:
    """``kernel.cu`` of the problem at ``path`` for variant ``turn``."""
    pol = BuiltinTorchPolicy()
    try:
        return pol.propose(load_torch_problem(path), turn).files["kernel.cu"]
    finally:
        pol.close()


def _assert_builds_without_warning(text: str, nvcc_path: str, tmp_path: Path, arch: str = "sm_90") -> None:
    """``text`` as ``kernel.cu`` through ``nvcc -arch=<arch> -shared``: no error, no warning."""
    src = tmp_path / "kernel.cu"
    src.write_text(text)
    proc = subprocess.run([nvcc_path, f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", "-o", str(tmp_path / "k.so"), str(src)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "warning" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr


def test_emulated_candidates_match_model_at_both_shapes(candidates: dict[tuple[str, int], Path], policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem]) -> None:
    def run(name: str) -> tuple[str, dict[str, Any]]:
        p = problems[name]
        d = candidates[(name, 1)]
        return name, check_candidate(p.path, d / "model.py", _configs(p), emulate=True,
                                     kernels=policy.variant_plan(p, VARIANTS[1].one_pass).kernels, timeout_s=240)

    with ThreadPoolExecutor(max_workers=2) as ex:
        results = dict(ex.map(run, sorted(problems)))
    for name, r in results.items():
        assert r["ok"], (name, r)
        assert len(r["configs"]) == 2 and all(c["ok"] for c in r["configs"]), (name, r)
        assert r["configs"][0]["constants"] != r["configs"][1]["constants"]


def test_emulation_catches_a_wrong_candidate(candidates: dict[tuple[str, int], Path], policy: BuiltinTorchPolicy, problems: dict[str, TorchProblem], tmp_path: Path) -> None:
    """The check can fail: layer norm with the affine parameters swapped."""
    p = problems["layernorm"]
    d = candidates[("layernorm", 0)]
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copy(d / "kernel.cu", bad / "kernel.cu")
    text = (d / "model.py").read_text()
    swapped = text.replace("_cp_operand(self.norm.weight,", "_cp_operand(self.norm.TMP,").replace(
        "_cp_operand(self.norm.bias,", "_cp_operand(self.norm.weight,").replace("_cp_operand(self.norm.TMP,", "_cp_operand(self.norm.bias,")
    assert swapped != text
    (bad / "model.py").write_text(swapped)
    r = check_candidate(p.path, bad / "model.py", _configs(p), emulate=True, kernels=policy.plan(p).kernels)
    assert not r["ok"] and "elements off" in r["configs"][0]["message"]


def test_a_problem_with_views_tuples_numbers_and_strided_reductions(tmp_path: Path) -> None:
    """Several kernels, library ops with and without their bias, views, a Python number
    input, a tuple output, log_softmax/logsumexp over a middle dim."""
    path = _write_problem(tmp_path, "mixed", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 4
        channels = 6
        length = 10
        hidden = 12
        class Block(nn.Module):
            def __init__(self, c, h):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(c, h), nn.SiLU(), nn.Linear(h, c))
            def forward(self, x):
                return self.net(x)
        class Model(nn.Module):
            def __init__(self, channels, hidden):
                super(Model, self).__init__()
                self.block = Block(channels, hidden)
                self.ln = nn.LayerNorm(channels)
                self.alpha = 0.7
            def forward(self, x, scale):
                y = x.transpose(1, 2)
                h = self.block(y)
                z = self.ln(h + y) * scale
                lse = torch.logsumexp(z, dim=1)
                sm = F.log_softmax(x, dim=1)
                v = z.var(dim=-1, keepdim=True)
                return lse, sm * self.alpha, torch.clamp(z - v, min=-0.5, max=0.5).flatten(1)
        def get_inputs():
            return [torch.randn(batch_size, channels, length), 1.5]
        def get_init_inputs():
            return [channels, hidden]
    """)
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    plan = pol.plan(p)
    assert plan.fused_ops() == [
        "linear->[add bias, silu]",
        "[log_softmax, mul 0.7]",
        "linear->[add bias, add, layer_norm, mul, var, sub, clamp]",
        "logsumexp",
    ]
    assert plan.left_ops() == ["linear (cuBLAS, bias fused)", "linear (cuBLAS, bias fused)"]
    prop = pol.propose(p, 2)
    assert "super().__init__()" in prop.source and "class Block(nn.Module):" in prop.source
    assert "self.block.net[0].weight" in prop.source and "float(scale)" in prop.source
    assert check_candidate_source(prop.source, problem=p, allow_torch_ops=LIBRARY_OPS,
                                  cuda_sources={"kernel.cu": prop.files["kernel.cu"]}) == []
    r = _check_emulated(path, p, plan, prop.files, tmp_path / "cand")
    assert r["ok"], r


_SIZE_SET_STRUCTURE = {
    "depthwise_conv": """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 16
        channels = 24
        height = 20
        width = 28
        class Model(nn.Module):
            def __init__(self, channels):
                super().__init__()
                self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels)
            def forward(self, x):
                return torch.logsumexp(F.gelu(self.conv(x)).abs(), dim=1, keepdim=True)
        def get_inputs():
            return [torch.randn(batch_size, channels, height, width)]
        def get_init_inputs():
            return [channels]
    """,
    "group_norm_of_shape": """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 6
        channels = 40
        height = 24
        width = 20
        class Model(nn.Module):
            def forward(self, x):
                x = F.softplus(x)
                return F.softsign(torch.relu(F.group_norm(x, x.shape[1], eps=1e-6)))
        def get_inputs():
            return [torch.randn(batch_size, channels, height, width)]
        def get_init_inputs():
            return []
    """,
    "group_norm_of_arithmetic": """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 6
        channels = 40
        length = 500
        class Model(nn.Module):
            def forward(self, x):
                return F.group_norm(x * 1.5, x.size(1) // 4) + 1.0
        def get_inputs():
            return [torch.randn(batch_size, channels, length)]
        def get_init_inputs():
            return []
    """,
    "group_norm_module": """
        import torch
        import torch.nn as nn
        batch_size = 6
        channels = 48
        length = 300
        class Model(nn.Module):
            def __init__(self, channels):
                super().__init__()
                self.gn = nn.GroupNorm(channels // 4, channels)
            def forward(self, x):
                return torch.tanh(self.gn(x * 2.0))
        def get_inputs():
            return [torch.randn(batch_size, channels, length)]
        def get_init_inputs():
            return [channels]
    """,
}


@pytest.mark.parametrize("name", sorted(_SIZE_SET_STRUCTURE))
def test_structure_set_by_a_size_constant_is_read_at_run_time(name: str, tmp_path: Path) -> None:
    """groups / num_groups equal to (or computed from) a size constant: the trace runs at
    shrunken constants, so the traced value must not be written into model.py (a depthwise
    conv and group norms of the generated dataset failed at their real sizes)."""
    path = _write_problem(tmp_path, name, _SIZE_SET_STRUCTURE[name])
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        g = pol.graph(p)
        assert g.constants != p.constants, "traced at the real sizes: nothing tested"
        plan = pol.plan(p)
        prop = pol.propose(p, 1)
    finally:
        pol.close()
    r = _check_emulated(path, p, plan, prop.files, tmp_path / "cand")
    assert r["ok"], r


_INSTANCE_NORMS = {
    "module_2d": ("self.norm = nn.InstanceNorm2d(channels)", "torch.relu(self.norm(x))", 4),
    "module_1d_affine": ("self.norm = nn.InstanceNorm1d(channels, affine=True)", "self.norm(x) * 0.5", 3),
    "functional_3d": ("pass", "F.instance_norm(torch.tanh(x), eps=1e-3)", 5),
}


def _instance_norm_source(name: str) -> str:
    init, expr, rank = _INSTANCE_NORMS[name]
    dims = ["batch_size", "channels", "d1", "d2", "d3"][:rank]
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 5
        channels = 12
        d1 = 22
        d2 = 9
        d3 = 7
        class Model(nn.Module):
            def __init__(self, channels):
                super().__init__()
                {init}
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn({", ".join(dims)})]
        def get_init_inputs():
            return [channels]
    """


@pytest.mark.parametrize("name", sorted(_INSTANCE_NORMS))
def test_instance_norm_is_group_norm_with_a_group_per_channel(name: str, tmp_path: Path) -> None:
    path = _write_problem(tmp_path, name, _instance_norm_source(name))
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        plan = pol.plan(p)
        assert any("instance_norm" in op for op in plan.fused_ops()), plan.fused_ops()
        prop = pol.propose(p, 1)
    finally:
        pol.close()
    assert "_cp_group_rows(_s0, int(_s0[1]))" in prop.files["model.py"]
    r = _check_emulated(path, p, plan, prop.files, tmp_path / "cand")
    assert r["ok"], r


def test_instance_norm_with_running_statistics_is_refused(tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "inorm_eval", """
        import torch
        import torch.nn as nn
        batch_size = 4
        channels = 6
        length = 30
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.InstanceNorm1d(channels, track_running_stats=True)
                self.norm.eval()
            def forward(self, x):
                return self.norm(x) + 1.0
        def get_inputs():
            return [torch.randn(batch_size, channels, length)]
        def get_init_inputs():
            return []
    """)
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match="instance_norm with running statistics"):
            pol.plan(load_torch_problem(path))
    finally:
        pol.close()


_NORMS = {
    "frobenius_all": "x / torch.norm(x, p='fro')",
    "l2_dim1_keep": "x / torch.norm(x, p=2, dim=1, keepdim=True)",
    "l1_method": "torch.relu(x).norm(p=1, dim=-1)",
    "linf_keep": "x - torch.norm(x, p=float('inf'), dim=-1, keepdim=True)",
    "linalg_vector_norm": "torch.linalg.vector_norm(x, ord=2, dim=-1) + 1.0",
    "normalize_l1": "torch.nn.functional.normalize(x, p=1.0, dim=1)",
    "normalize_linf": "torch.nn.functional.normalize(x.abs() + 0.1, p=float('inf'), dim=-1)",
}


def _norm_source(name: str) -> str:
    return f"""
        import torch
        import torch.nn as nn
        batch_size = 6
        dim = 40
        width = 33
        class Model(nn.Module):
            def forward(self, x):
                return {_NORMS[name]}
        def get_inputs():
            return [torch.randn(batch_size, dim, width)]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_NORMS))
def test_vector_norms(name: str, tmp_path: Path) -> None:
    """torch.norm / Tensor.norm / torch.linalg.vector_norm with p = 1, 2, 'fro', inf as
    reductions, F.normalize with p = 1 and inf (KernelBench level 1's Frobenius and L2 norms
    and the generated dataset's vector_norm and normalize(p=1) were refused)."""
    path = _write_problem(tmp_path, name, _norm_source(name))
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        plan = pol.plan(p)
        assert any("norm" in op for op in plan.fused_ops()), plan.fused_ops()
        prop = pol.propose(p, 1)
    finally:
        pol.close()
    r = _check_emulated(path, p, plan, prop.files, tmp_path / "cand")
    assert r["ok"], r


def test_a_norm_of_another_order_is_refused_with_its_reason(tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "p3", """
        import torch
        import torch.nn as nn
        batch_size = 4
        dim = 8
        class Model(nn.Module):
            def forward(self, x):
                return torch.norm(x, p=3, dim=1)
        def get_inputs():
            return [torch.randn(batch_size, dim)]
        def get_init_inputs():
            return []
    """)
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match=r"norm with p=3"):
            pol.plan(load_torch_problem(path))
    finally:
        pol.close()


def test_max_with_dim_values_attribute(tmp_path: Path) -> None:
    """``torch.max(x, dim).values`` is the max reduction, as ``[0]`` is; arithmetic on
    ``.indices`` is refused (int64; KernelBench level 2's Gemm_Max_Subtract_GELU was refused
    at ``.values``)."""
    body = """
        import torch
        import torch.nn as nn
        batch_size = 6
        dim = 40
        class Model(nn.Module):
            def forward(self, x):
                return torch.nn.functional.gelu(torch.max(x, dim=1, keepdim=True).{attr} - 0.5)
        def get_inputs():
            return [torch.randn(batch_size, dim)]
        def get_init_inputs():
            return []
    """
    path = _write_problem(tmp_path, "maxvalues", body.replace("{attr}", "values"))
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        plan = pol.plan(p)
        prop = pol.propose(p, 1)
        with pytest.raises(PolicyRefusal, match=r"getattr.*int64; only float32 is supported"):
            pol.plan(load_torch_problem(_write_problem(tmp_path, "maxindices", body.replace(
                "{attr}", "indices.float()"))))
    finally:
        pol.close()
    r = _check_emulated(path, p, plan, prop.files, tmp_path / "cand")
    assert r["ok"], r


_LOSSES = {
    "mse_mean": ("pass", "F.mse_loss(torch.tanh(x), y)"),
    "l1_sum": ("pass", "F.l1_loss(x, y, reduction='sum') * 0.01"),
    "smooth_l1_beta": ("pass", "F.smooth_l1_loss(x * 2.0, y, beta=0.7)"),
    "smooth_l1_none": ("pass", "torch.relu(F.smooth_l1_loss(x, y, reduction='none') - 0.1)"),
    "huber_module": ("self.loss = nn.HuberLoss(delta=0.6)", "self.loss(x, y)"),
    "smooth_l1_module": ("self.loss = nn.SmoothL1Loss()", "self.loss(torch.sigmoid(x), y)"),
    # a loss module called with keywords (was refused as an unsupported layer)
    "mse_module_keywords": ("self.loss = nn.MSELoss(reduction='sum')", "self.loss(target=y, input=x * 0.5)"),
}


def _loss_source(name: str) -> str:
    init, expr = _LOSSES[name]
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 6
        dim = 50
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init}
            def forward(self, x, y):
                return {expr}
        def get_inputs():
            return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_LOSSES))
def test_pointwise_losses(name: str, tmp_path: Path) -> None:
    """mse, L1, smooth L1 and Huber losses (functions and modules) as an elementwise chain
    and a sum (KernelBench level 1's smooth L1 and the dataset's F.*_loss were refused)."""
    path = _write_problem(tmp_path, name, _loss_source(name))
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        plan = pol.plan(p)
        assert any("loss" in op for op in plan.fused_ops()), plan.fused_ops()
        prop = pol.propose(p, 1)
    finally:
        pol.close()
    r = _check_emulated(path, p, plan, prop.files, tmp_path / "cand")
    assert r["ok"], r


_MORE_LOSSES = {
    "kl_batchmean": ("pass", "F.kl_div(torch.log(x.softmax(-1)), y.softmax(-1), reduction='batchmean')", 2),
    "kl_module_sum_zero_targets": ("self.loss = nn.KLDivLoss(reduction='sum')", "self.loss(x, torch.relu(y))", 2),
    "kl_log_target_mean": ("pass", "F.kl_div(x, y.log_softmax(-1), reduction='mean', log_target=True)", 2),
    "triplet_module": ("self.loss = nn.TripletMarginLoss(margin=0.8)", "self.loss(x, y, x * 0.5 - y)", 2),
    "triplet_module_keywords": ("self.loss = nn.TripletMarginLoss()", "self.loss(x, negative=y, positive=x * 0.5)", 2),
    "triplet_fn_none_3d": ("pass", "F.triplet_margin_loss(x, y, torch.tanh(y), reduction='none') + 1.0", 3),
}


def _more_loss_source(name: str) -> str:
    init, expr, rank = _MORE_LOSSES[name]
    dims = ", ".join(["batch_size", "rows", "dim"][-rank:])
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 6
        rows = 5
        dim = 40
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init}
            def forward(self, x, y):
                return {expr}
        def get_inputs():
            return [torch.randn({dims}), torch.randn({dims})]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_MORE_LOSSES))
def test_kl_divergence_and_triplet_margin_losses(name: str, tmp_path: Path) -> None:
    """KL divergence (PyTorch's xlogy form: 0 where the target is 0) and the triplet margin
    loss (p = 2) as elementwise chains and row sums (KernelBench level 1 refused both)."""
    path = _write_problem(tmp_path, name, _more_loss_source(name))
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        plan = pol.plan(p)
        assert any("loss" in op or "kl_div" in op for op in plan.fused_ops()), plan.fused_ops()
        prop = pol.propose(p, 1)
    finally:
        pol.close()
    r = _check_emulated(path, p, plan, prop.files, tmp_path / "cand")
    assert r["ok"], r


_POOLS = {
    # name: (constants, input dims, __init__ body, forward expression, traced smaller?)
    "max2d_module_padding_dilation": (
        "batch_size = 3\nchannels = 4\nheight = 21\nwidth = 18",
        "batch_size, channels, height, width",
        "self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=2)",
        "F.mish(self.pool(x * 2.0 - 0.5))",
    ),
    "avg3d_ceil_mode_without_padding_count": (
        "batch_size = 2\nchannels = 3\nd1 = 7\nd2 = 9\nd3 = 10",
        "batch_size, channels, d1, d2, d3",
        "self.pool = nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)",
        "self.pool(x) + 1.0",
    ),
    "max1d_functional_ceil_mode": (
        "batch_size = 4\nchannels = 5\nlength = 37",
        "batch_size, channels, length",
        "pass",
        "F.max_pool1d(torch.tanh(x), 4, stride=3, ceil_mode=True)",
    ),
    "avg1d_window_from_a_size_constant": (
        "batch_size = 16\nchannels = 64\nlength = 4096\nkernel_size = 8",
        "batch_size, channels, length",
        "self.pool = nn.AvgPool1d(kernel_size=kernel_size, stride=1, padding=4)",
        "torch.sigmoid(self.pool(x))",
    ),
    "avg2d_divisor_into_a_sum": (
        "batch_size = 2\nchannels = 6\nheight = 12\nwidth = 11",
        "batch_size, channels, height, width",
        "pass",
        "F.avg_pool2d(x, 3, divisor_override=5).sum(dim=(2, 3))",
    ),
    "max3d_into_a_channel_softmax": (
        "batch_size = 2\nchannels = 5\nd1 = 6\nd2 = 8\nd3 = 8",
        "batch_size, channels, d1, d2, d3",
        "self.pool = nn.MaxPool3d(2)",
        "torch.softmax(self.pool(x), dim=1)",
    ),
    "two_pools_in_one_kernel": (
        "batch_size = 2\nchannels = 3\nheight = 16\nwidth = 16",
        "batch_size, channels, height, width",
        "self.a = nn.MaxPool2d(2)\n                self.b = nn.AvgPool2d(2)",
        "self.a(x) - self.b(torch.relu(x))",
    ),
    # windows wider than the unpadded input (the emulation's avg_pool3d refused these:
    # a false error of the verifier; avg_pool1d/2d allow them)
    "avg1d_window_wider_than_the_input": (
        "batch_size = 4\nchannels = 3\nlength = 3",
        "batch_size, channels, length",
        "self.pool = nn.AvgPool1d(8, stride=1, padding=4, count_include_pad=False)",
        "self.pool(x) * 3.0",
    ),
    "avg2d_window_wider_than_the_input": (
        "batch_size = 2\nchannels = 3\nheight = 3\nwidth = 4",
        "batch_size, channels, height, width",
        "pass",
        "F.avg_pool2d(x, 6, stride=1, padding=3) - 1.0",
    ),
    "adaptive_average_to_one": (
        "batch_size = 3\nchannels = 4\nd1 = 5\nd2 = 6\nd3 = 7",
        "batch_size, channels, d1, d2, d3",
        "self.pool = nn.AdaptiveAvgPool3d((1, 1, 1))",
        "self.pool(torch.relu(x)) * 2.0",
    ),
}


def _pool_source(name: str) -> str:
    consts, dims, init, expr = _POOLS[name]
    body = "\n".join("        " + line for line in consts.splitlines())
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
{body}
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init}
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn({dims})]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_POOLS))
def test_pooling(name: str, tmp_path: Path) -> None:
    """Max and average pooling (1-3-D, padding, dilation, ceil_mode, count_include_pad,
    divisor_override, windows set by a size constant) as a pooled read in a kernel whose
    domain is the pooled shape, fused with what follows; adaptive pooling to 1 as a mean
    (KernelBench's 25 pooling files were refused)."""
    path = _write_problem(tmp_path, name, _pool_source(name))
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        g = pol.graph(p)
        plan = pol.plan(p)
        props = [pol.propose(p, t) for t in range(3)]
    finally:
        pol.close()
    if name == "avg1d_window_from_a_size_constant":
        assert g.constants != p.constants, "traced at the real sizes: nothing tested"
    pooled = [l for k in plan.kernels for l in k.leaves if l.pool is not None]
    assert bool(pooled) == (name != "adaptive_average_to_one"), plan.describe()
    if name in ("avg2d_divisor_into_a_sum", "max3d_into_a_channel_softmax", "two_pools_in_one_kernel"):
        assert len([k for k in plan.kernels if any(l.pool is not None for l in k.leaves)]) == 1, plan.describe()
    for t, prop in enumerate(props):
        r = _check_emulated(path, p, plan, prop.files, tmp_path / f"cand{t}")
        assert r["ok"], (t, r)


#: Pooling problems whose turn-2 kernel stages its input in a shared-memory tile
#: (``Variant.tile_pool``): name -> (pool, forward, input dims, constants (first config),
#: more configs).  The sizes make several tiles per plane in both dims (a 2-D tile is 32 x
#: 64 outputs at block 512, a 1-D tile 2048) with partial tiles at the edges; the fused
#: epilogue reads a per-channel operand at the output's index.
_TILE_POOLS: dict[str, tuple[str, str, str, dict[str, int], list[dict[str, int]]]] = {
    "max1d_dilated_padded": ("nn.MaxPool1d(8, stride=1, padding=4, dilation=3)", "self.pool(x) * self.w",
                             "batch_size, channels, length", {"batch_size": 2, "channels": 3, "length": 4500},
                             [{"batch_size": 1, "channels": 3, "length": 50},
                              {"batch_size": 45, "channels": 3, "length": 50}]),  # 135 tiles
    "avg2d_no_pad_count": ("nn.AvgPool2d(4, stride=1, padding=1, count_include_pad=False)",
                           "torch.relu(self.pool(x) + self.w)", "batch_size, channels, height, width",
                           {"batch_size": 1, "channels": 3, "height": 70, "width": 150},
                           [{"batch_size": 2, "channels": 3, "height": 5, "width": 9},
                            {"batch_size": 45, "channels": 3, "height": 5, "width": 9}]),  # 135 tiles
    "max2d_strided_ceil": ("nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True)",
                           "self.pool(x) - self.w", "batch_size, channels, height, width",
                           {"batch_size": 1, "channels": 3, "height": 77, "width": 140}, []),
    "avg1d_window_from_an_init_input": ("nn.AvgPool1d(kernel_size=k, stride=1, padding=4)",
                                     "self.pool(x) + self.w", "batch_size, channels, length",
                                     {"batch_size": 2, "channels": 3, "length": 2100, "kernel_size": 8},
                                     [{"batch_size": 2, "channels": 3, "length": 300, "kernel_size": 11}]),
}


def _tile_pool_source(name: str) -> str:
    pool, expr, dims, first, _ = _TILE_POOLS[name]
    consts = "\n".join(f"{k} = {v}" for k, v in first.items())
    wshape = "c, 1" if dims.count(",") == 2 else "c, 1, 1"
    return f"""
import torch
import torch.nn as nn
{consts}
class Model(nn.Module):
    def __init__(self, k, c):
        super().__init__()
        self.pool = {pool}
        self.w = nn.Parameter(torch.randn({wshape}))
    def forward(self, x):
        return {expr}
def get_inputs():
    return [torch.randn({dims})]
def get_init_inputs():
    return [{"kernel_size" if "kernel_size" in first else 0}, channels]
"""


#: Short rows (at most ROW_LANES8_MAX elements): the warp-rows variant gives each 8 lanes,
#: four rows a warp (MODE 4); the row counts are not multiples of 4, so the last warp's
#: lanes past the end repeat the last row.  name -> (forward, input dims, configs).
_SHORT_ROWS: dict[str, tuple[str, str, list[dict[str, int]]]] = {
    "layer_norm_64": ("torch.nn.functional.gelu(self.ln(x)) * 2.0", "batch_size, rows, dim",
                      [{"batch_size": 3, "rows": 7, "dim": 64}, {"batch_size": 2, "rows": 5, "dim": 200}]),
    "log_softmax_odd": ("torch.log_softmax(x * 0.5, dim=-1)", "batch_size, rows, dim",
                        [{"batch_size": 5, "rows": 3, "dim": 33}]),
    "argmax_50": ("torch.argmax(torch.relu(x), dim=-1)", "batch_size, rows, dim",
                  [{"batch_size": 13, "rows": 1, "dim": 50}]),
    "var_and_max": ("x.var(dim=-1, keepdim=True) + x.amax(dim=-1, keepdim=True)", "batch_size, rows, dim",
                    [{"batch_size": 2, "rows": 11, "dim": 60}]),
}

def _short_rows_source(name: str) -> str:
    expr, dims, configs = _SHORT_ROWS[name]
    consts = "\n".join(f"{k} = {v}" for k, v in configs[0].items())
    return f"""
import torch
import torch.nn as nn
{consts}
class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
    def forward(self, x):
        return {expr}
def get_inputs():
    return [torch.randn({dims})]
def get_init_inputs():
    return [dim]
"""


#: Reductions over a middle dim (the column kernel) whose inner dim has at least 128
#: elements, not a multiple of 128 (the wide variant's tiles of 128 columns, the last one
#: partial); the second config's inner dim is under 128 (tiles of 32): name -> (forward
#: expression, configs of (n, r, c): x is [n, r, c]).
_WIDE_COLS: dict[str, tuple[str, list[dict[str, int]]]] = {
    "sum_plus_mean": ("torch.sum(x, dim=1) + x.mean(dim=1) * 0.5",
                      [{"n": 3, "r": 37, "c": 200}, {"n": 2, "r": 9, "c": 40}]),
    "argmin_relu_ties": ("torch.argmin(torch.relu(x), dim=1)", [{"n": 2, "r": 21, "c": 130}]),
    "var_and_amax": ("x.var(dim=1) + x.amax(dim=1)", [{"n": 2, "r": 19, "c": 257}, {"n": 3, "r": 5, "c": 31}]),
    "logsumexp": ("torch.logsumexp(x * 2.0, dim=1)", [{"n": 1, "r": 33, "c": 140}]),
}


def _wide_cols_source(name: str) -> str:
    expr, configs = _WIDE_COLS[name]
    consts = "\n".join(f"{k} = {v}" for k, v in configs[0].items())
    return f"""
import torch
import torch.nn as nn
{consts}
class Model(nn.Module):
    def forward(self, x):
        return {expr}
def get_inputs():
    return [torch.randn(n, r, c)]
def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("name", sorted(_WIDE_COLS))
def test_wide_column_tiles_build_and_match(name: str, nvcc_path: str, tmp_path: Path) -> None:
    """The wide-columns variant's middle-dim reductions take tiles of COL_WIDE columns
    where ``inner`` has them (a template argument, chosen at launch), else 32; its
    kernel.cu builds for sm_90 without a warning; every variant matches ``Model``
    emulated at both shapes."""
    path = _write_problem(tmp_path, name, _wide_cols_source(name))
    p, plan, props = _plan_and_variants(path)
    wide = [t for t, v in enumerate(VARIANTS) if v.wide_cols]
    assert wide
    for t, prop in enumerate(props):
        text = prop.files["kernel.cu"]
        assert ("_col<int, 128>" in text) == (t in wide), (VARIANTS[t].name, name)
    _assert_builds_without_warning(props[wide[0]].files["kernel.cu"], nvcc_path, tmp_path)
    _assert_variants_match_model(path, p, plan, props, tmp_path)


_TILED = next(t for t, v in enumerate(VARIANTS) if v.tile_pool)


@pytest.mark.parametrize("name", sorted(_POOLS))
def test_pooling_tile_kernels_compile(name: str, nvcc_path: str, tmp_path: Path) -> None:
    """The tiled variant stages a 1-D or 2-D pool's input in shared memory where the pool
    is the one pooled read of an elementwise kernel (its window traced), builds for sm_90
    without a warning; 3-D pools, two pools in one kernel and a pool inside a reduction
    keep the direct reads."""
    text = _kernel_cu(_write_problem(tmp_path, name, _pool_source(name)), _TILED)
    tiled = name in ("max2d_module_padding_dilation", "max1d_functional_ceil_mode",
                     "avg1d_window_from_a_size_constant", "avg1d_window_wider_than_the_input",
                     "avg2d_window_wider_than_the_input")
    assert ("_tile(" in text) == tiled, name
    if tiled:
        assert "__shared__ float tile[" in text
    _assert_builds_without_warning(text, nvcc_path, tmp_path)


def test_pooling_refusals(tmp_path: Path) -> None:
    cases = {
        "indices": ("self.pool = nn.MaxPool2d(2, return_indices=True)", "self.pool(x)[0]", "indices of max pooling"),
        "adaptive": ("self.pool = nn.AdaptiveAvgPool2d((2, 2))", "self.pool(x)", "output_size=[2, 2]"),
        # a window computed in forward from sizes (found by an attack pass: model.py named
        # a shape node it never defined, NameError at every turn)
        "window_from_size": ("pass", "F.max_pool2d(x, x.size(-1) // 4)", "kernel_size computed in forward"),
        "stride_from_shape": ("pass", "F.avg_pool2d(x, 2, stride=x.shape[2:])", "stride computed in forward"),
    }
    for name, (init, expr, words) in cases.items():
        path = _write_problem(tmp_path, name, f"""
            import torch
            import torch.nn as nn
            import torch.nn.functional as F
            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    {init}
                def forward(self, x):
                    return torch.relu({expr})
            def get_inputs():
                return [torch.randn(2, 3, 8, 8)]
            def get_init_inputs():
                return []
        """)
        pol = BuiltinTorchPolicy()
        try:
            with pytest.raises(PolicyRefusal, match=words.replace("[", r"\[").replace("]", r"\]")):
                pol.plan(load_torch_problem(path))
        finally:
            pol.close()


_TRAIN_BATCH_NORMS = {
    # name: (init, forward expression, rank)
    "module_2d_then_tanh": ("self.bn = nn.BatchNorm2d(channels)", "torch.tanh(self.bn(x * 2.0))", 4),
    "module_1d_no_affine_momentum": ("self.bn = nn.BatchNorm1d(channels, affine=False, momentum=0.3)", "self.bn(x)", 3),
    "module_3d_untracked": ("self.bn = nn.BatchNorm3d(channels, track_running_stats=False)", "self.bn(x) + 1.0", 5),
    "functional_2d_features": (
        "self.register_buffer('rm', torch.zeros(channels))\n"
        "                self.register_buffer('rv', torch.ones(channels))\n"
        "                self.w = nn.Parameter(torch.rand(channels))",
        "F.batch_norm(x, self.rm, self.rv, self.w, None, training=True, momentum=0.2, eps=1e-3)", 2),
    # a module counts its batches (num_batches_tracked), F.batch_norm with its buffers does not
    "module_and_functional_on_its_buffers": (
        "self.bn = nn.BatchNorm1d(channels)\n"
        "                self.bn2 = nn.BatchNorm1d(channels)",
        "F.batch_norm(self.bn(x), self.bn2.running_mean, self.bn2.running_var, None, None, True, 0.1, 1e-5)", 3),
}


def _bn_train_source(name: str) -> str:
    init, expr, rank = _TRAIN_BATCH_NORMS[name]
    dims = ", ".join(["batch_size", "channels", "d1", "d2", "d3"][:rank])
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 5
        channels = 6
        d1 = 7
        d2 = 4
        d3 = 3
        class Model(nn.Module):
            def __init__(self, channels):
                super().__init__()
                {init}
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn({dims}) * 3.0 + 1.0]
        def get_init_inputs():
            return [channels]
    """


@pytest.mark.parametrize("name", sorted(_TRAIN_BATCH_NORMS))
def test_batch_norm_in_training_mode(name: str, tmp_path: Path) -> None:
    """Batch norm with the batch's statistics (KernelBench's default: modules never put in
    eval mode): one row per channel over the batch and spatial dims, and the running
    statistics updated in place as PyTorch updates them (the check compares the buffers)."""
    init, expr, rank = _TRAIN_BATCH_NORMS[name]
    path = _write_problem(tmp_path, name, _bn_train_source(name))
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        plan = pol.plan(p)
        props = [pol.propose(p, t) for t in range(3)]
    finally:
        pol.close()
    (k,) = [k for k in plan.kernels if k.rows is not None]
    assert k.rows.kind == ("dims" if rank == 2 else "channels"), plan.describe()
    tracked = name not in ("module_3d_untracked",)
    assert len(k.writes) == {"module_3d_untracked": 0, "module_and_functional_on_its_buffers": 4}.get(name, 2), k.writes
    # the batch counted by module calls only (the check compares num_batches_tracked too)
    assert k.batch_counts == ([] if name in ("module_3d_untracked", "functional_2d_features") else ["bn"])
    for t, prop in enumerate(props):
        assert ("running_mean" in prop.files["model.py"] or "self.rm" in prop.files["model.py"]) == tracked
        r = _check_emulated(path, p, plan, prop.files, tmp_path / f"cand{t}")
        assert r["ok"], (t, r)


@pytest.mark.parametrize("expr", ["self.bn(self.bn(x))", "self.bn(x) + self.bn(x * 2.0)"])
def test_batch_norm_updating_its_running_statistics_twice_is_refused(expr: str, tmp_path: Path) -> None:
    """The second update read the buffer before the first one's write (one kernel): the
    output was right, running_mean and running_var wrong (found by an attack pass)."""
    path = _write_problem(tmp_path, "bn_twice", f"""
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.bn = nn.BatchNorm2d(4)
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn(3, 4, 5, 6)]
        def get_init_inputs():
            return []
    """)
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match="bn.running_mean is updated twice in one forward"):
            pol.plan(load_torch_problem(path))
    finally:
        pol.close()


def test_batch_norm_with_a_cumulative_average_is_refused(tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "bn_cumulative", """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.bn = nn.BatchNorm2d(4, momentum=None)
            def forward(self, x):
                return self.bn(x)
        def get_inputs():
            return [torch.randn(2, 4, 5, 5)]
        def get_init_inputs():
            return []
    """)
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match="momentum=None"):
            pol.plan(load_torch_problem(path))
    finally:
        pol.close()


_ARG_REDUCTIONS = {
    # name: (forward expression, rank); x is randn of [batch_size, d1] or [batch_size, d1, d2]
    "argmax_middle_dim": ("torch.argmax(x, dim=1)", 3),
    "argmin_last_dim_keepdim": ("torch.argmin(torch.tanh(x), dim=-1, keepdim=True)", 2),
    "argmax_ties_first": ("torch.argmax(torch.round(x), dim=1)", 2),
    "argmin_ties_middle_dim": ("x.round().argmin(1)", 3),
    "argmax_flattened": ("torch.argmax(x * 2.0)", 3),
    "argmax_after_softmax": ("torch.softmax(x, dim=-1).argmax(dim=-1)", 2),
    "max_values_and_indices": ("(lambda m: (m[0] * 2.0, m[1]))(torch.max(x, dim=1))", 2),
    "min_indices_attribute": ("torch.min(x - 1.0, dim=2).indices", 3),
    "argmax_nan_first": ("torch.argmax(torch.sqrt(x), dim=1)", 2),  # NaN counts as the largest: the first NaN
    "argmin_neg_inf_ties": ("torch.argmin(torch.log(torch.relu(x)), dim=-1)", 3),  # the first -inf
    "argmax_all_neg_inf": ("torch.argmax(torch.log(torch.relu(x - 100.0)), dim=1)", 3),  # every element -inf: 0
}


def _arg_source(name: str) -> str:
    expr, rank = _ARG_REDUCTIONS[name]
    dims = ", ".join(["batch_size", "d1", "d2"][:rank])
    return f"""
        import torch
        import torch.nn as nn
        batch_size = 5
        d1 = 70
        d2 = 9
        class Model(nn.Module):
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn({dims}) * 3.0]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_ARG_REDUCTIONS))
def test_argmax_and_argmin(name: str, tmp_path: Path) -> None:
    """argmax/argmin (and the indices of ``torch.max/min(x, dim)``) as a reduction of
    (value, index) pairs written out as int64: over the last dim (row kernels), a middle
    dim (column kernels) or every dim (the flattened index); ties give the first index, as
    PyTorch (KernelBench level 1's 51_Argmax and 52_Argmin were refused)."""
    path = _write_problem(tmp_path, name, _arg_source(name))
    p, plan, props = _plan_and_variants(path)
    assert any("arg" in op or "indices" in op for op in plan.fused_ops()), plan.fused_ops()
    assert all("int64_t *O" in prop.files["kernel.cu"] for prop in props)
    _assert_variants_match_model(path, p, plan, props, tmp_path)


@pytest.mark.parametrize("turn", [0, len(VARIANTS) - 1])
def test_arg_reduction_kernels_compile(turn: int, nvcc_path: str, tmp_path: Path) -> None:
    """The (value, index) reductions build without a warning: the row kernel (block and
    warp rows, scalar and float4 loops) and the column kernel of each variant."""
    path = _write_problem(tmp_path, "arg_build", _arg_source("max_values_and_indices"))
    text = _kernel_cu(path, turn)
    assert "cp_block_argreduce<true>" in text and "cp_col_argreduce<true, CW>" in text
    _assert_builds_without_warning(text, nvcc_path, tmp_path)


def test_arithmetic_on_indices_is_refused(tmp_path: Path) -> None:
    body = _arg_source("argmax_middle_dim").replace("return torch.argmax(x, dim=1)",
                                                    "return torch.argmax(x, dim=1) * 2")
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match=r"int64; only float32 is supported"):
            pol.plan(load_torch_problem(_write_problem(tmp_path, "argmul", body)))
    finally:
        pol.close()


_SCANS = {
    # name: (init, forward expression, input shape); rows past 4 x 512 elements take
    # several tiles (the carry), and 1100 % 4 == 0 takes the float4 path
    "cumsum_last": ("pass", "torch.cumsum(x, dim=1)", "batch_size, 1100"),
    "cumsum_last_odd_length": ("pass", "x.cumsum(-1)", "batch_size, 1030"),
    "cumprod_last": ("pass", "torch.cumprod(x * 0.05 + 1.0, dim=1)", "batch_size, 1100"),
    "cumsum_reverse": ("pass", "torch.cumsum(x.flip(1), dim=1).flip(1)", "batch_size, 1100"),
    "cumprod_reverse_odd": ("pass", "torch.flip(torch.cumprod(torch.flip(torch.sigmoid(x) + 0.5, dims=[1]), 1), dims=[1])",
                            "batch_size, 77"),
    "cumsum_middle_dim": ("pass", "torch.cumsum(x, dim=1)", "batch_size, 40, 9"),
    "cumsum_reverse_middle_dim": ("pass", "x.flip(1).cumsum(1).flip(1) * 0.5", "batch_size, 40, 9"),
    "prologue_epilogue": ("self.w = nn.Parameter(torch.randn(1100))",
                          "torch.relu(torch.cumsum(torch.tanh(x) * self.w, dim=-1)) * 2.0", "batch_size, 1100"),
    "scan_and_input_out": ("pass", "(lambda c: (c, c - x))(torch.cumsum(x, 1))", "batch_size, 600"),
    # exclusive scans as KernelBench's 92_cumsum_exclusive writes them (level 1's 92 was refused)
    "cumsum_exclusive": ("pass", "torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), "
                                 "torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1)",
                         "batch_size, 1100"),
    "cumsum_exclusive_odd_neg_dim": ("pass", "torch.cat((torch.zeros_like(x[:, :1]), "
                                             "torch.cumsum(x.narrow(-1, 0, x.size(-1) - 1), -1)), dim=-1) * 2.0",
                                     "batch_size, 2999"),
    "cumsum_exclusive_middle_dim": ("pass", "torch.tanh(torch.cat((torch.zeros_like(x.narrow(1, 0, 1)), "
                                            "torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1)), 1))",
                                    "batch_size, 40, 9"),
}


def _scan_source(name: str) -> str:
    init, expr, shape = _SCANS[name]
    return f"""
        import torch
        import torch.nn as nn
        batch_size = 6
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init}
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn({shape})]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_SCANS))
def test_scans(name: str, tmp_path: Path) -> None:
    """cumsum/cumprod along the last dim (a block per row, tiles with a carry) or a middle
    dim (a thread per column), reversed as ``x.flip(d).cumsum(d).flip(d)``, with the
    elementwise ops before and after fused (KernelBench level 1's 89-91 were refused)."""
    path = _write_problem(tmp_path, name, _scan_source(name))
    p, plan, props = _plan_and_variants(path)
    assert [k.kind for k in plan.kernels] == ["scan"], plan.describe()
    _assert_variants_match_model(path, p, plan, props, tmp_path)


@pytest.mark.parametrize("expr", [
    # the zeros after the scan, a start of 1, the narrow's length a number, ones instead of zeros,
    "torch.cat((torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1), torch.zeros_like(x[:, :1])), 1)",
    "torch.cat((torch.zeros_like(x[:, :1]), torch.cumsum(x.narrow(1, 1, x.size(1) - 1), 1)), 1)",
    "torch.cat((torch.zeros_like(x[:, :1]), torch.cumsum(x.narrow(1, 0, 1099), 1)), 1)",
    "torch.cat((torch.ones_like(x[:, :1]), torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1)), 1)",
    # a start computed from a size: 0 when traced, maybe not at run time (found by review)
    "torch.cat((torch.zeros_like(x[:, :1]), torch.cumsum(x.narrow(1, x.size(0) // 64, x.size(1) - 1), 1)), 1)",
    # found by an attack pass: zeros whose width follows another size (6 - 5 = 1 traced
    # only), zeros of a slice two wide... narrowed by the cat, and cat's `axis=` alias
    # (once read as dim 0)
    "torch.cat((torch.zeros_like(x[:, :x.size(0) - 5]), torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1)), 1)",
    "torch.cat((torch.zeros_like(x[:, 3:4] * 0.0), torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1)), 1)",
    "torch.cat((torch.zeros_like(x[:, :1]), torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1)), axis=1)",
])
def test_near_misses_of_the_exclusive_scan_are_refused(expr: str, tmp_path: Path) -> None:
    """Only the exclusive scan's exact form is rewritten; other uses of ``torch.cat`` and
    ``zeros_like`` stay refused, the message showing the form that is supported."""
    src = f"""
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn(6, 1100)]
        def get_init_inputs():
            return []
    """
    path = _write_problem(tmp_path, "near_miss", src)
    pol = BuiltinTorchPolicy()
    try:
        words = ("not an operation the built-in policy supports" if "ones_like" in expr
                 else r"supported only as the pieces of an exclusive scan, written torch\.cat\(\(torch\.zeros_like")
        with pytest.raises(PolicyRefusal, match=words):
            pol.plan(load_torch_problem(path, alt_shapes=False))
    finally:
        pol.close()


_CROSS_ENTROPY = {
    # name: (init, forward expression, classes, how targets are made from t = randint(0, classes))
    "mean": ("pass", "F.cross_entropy(x, t)", 300, "t"),
    "module_sum_ignored_class": ("self.loss = nn.CrossEntropyLoss(reduction='sum', ignore_index=3)",
                                 "self.loss(x * 2.0, t)", 37, "torch.where(t % 4 == 0, torch.full_like(t, 3), t)"),
    "none_default_ignore": ("pass", "F.cross_entropy(torch.tanh(x) * 5.0, t, reduction='none') + 1.0", 4100,
                            "torch.where(torch.arange(t.numel()) % 3 == 1, torch.full_like(t, -100), t)"),
    "mean_with_ignored_rows": ("self.loss = nn.CrossEntropyLoss()", "self.loss(x, t)", 1030,
                               "torch.where(torch.arange(t.numel()) % 2 == 0, torch.full_like(t, -100), t)"),
    "module_keywords": ("self.loss = nn.CrossEntropyLoss()", "self.loss(input=x, target=t)", 50, "t"),
}


def _cross_entropy_source(name: str) -> str:
    init, expr, classes, targets = _CROSS_ENTROPY[name]
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 6
        classes = {classes}
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init}
            def forward(self, x, t):
                return {expr}
        def get_inputs():
            t = torch.randint(0, classes, (batch_size,))
            return [torch.randn(batch_size, classes), {targets}]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_CROSS_ENTROPY))
def test_cross_entropy(name: str, tmp_path: Path) -> None:
    """Cross entropy of logits [N, C] and int64 class indices [N] (functions and modules;
    reductions none, sum, mean; ignored rows, an ignore_index inside [0, C)): one row kernel
    (max and the target's count, then the exp sum and the picked logit), then the sum over
    rows; every variant matches Model (KernelBench level 1's 95 was refused)."""
    path = _write_problem(tmp_path, name, _cross_entropy_source(name))
    p, plan, props = _plan_and_variants(path)
    assert any("cross_entropy" in op for op in plan.fused_ops()), plan.fused_ops()
    _assert_variants_match_model(path, p, plan, props, tmp_path)


@pytest.mark.parametrize("turn", range(len(VARIANTS)))
def test_cross_entropy_and_exclusive_scan_kernels_compile(turn: int, nvcc_path: str, tmp_path: Path) -> None:
    """Cross entropy's kernels (int64 class indices, element positions, ignore_index as an
    argument) and the exclusive scan's build for sm_90 without a warning."""
    for name, src in [("ce", _cross_entropy_source("module_sum_ignored_class")),
                      ("excl", _scan_source("cumsum_exclusive_odd_neg_dim"))]:
        text = _kernel_cu(_write_problem(tmp_path, f"{name}_build", src), turn)
        assert ("const int64_t *__restrict__ L1" in text) if name == "ce" else ("u[l - 1]" in text)
        _assert_builds_without_warning(text, nvcc_path, tmp_path)


def test_cross_entropy_ignore_index_is_read_at_run_time(tmp_path: Path) -> None:
    """``nn.CrossEntropyLoss(ignore_index=num_classes - 1)`` (a padding class): the trace runs
    at shrunken sizes, where the index is 31, so the candidate reads the module's
    ``ignore_index`` at run time (2047 here) instead of the traced number (found by review:
    the first version compiled 31 in and was off on half the rows)."""
    src = """
        import torch
        import torch.nn as nn
        batch_size = 64
        num_classes = 2048
        class Model(nn.Module):
            def __init__(self, pad):
                super().__init__()
                self.loss = nn.CrossEntropyLoss(ignore_index=pad)
            def forward(self, x, t):
                return self.loss(x, t)
        def get_inputs():
            t = torch.randint(0, num_classes, (batch_size,))
            t[::2] = num_classes - 1
            return [torch.randn(batch_size, num_classes), t]
        def get_init_inputs():
            return [num_classes - 1]
    """
    path = _write_problem(tmp_path, "ce_pad", src)
    p, plan, props = _plan_and_variants(path)
    assert plan.graph.constants["num_classes"] < 2048, plan.graph.constants  # traced shrunken
    assert all("self.loss.ignore_index" in prop.files["model.py"] for prop in props)
    _assert_variants_match_model(path, p, plan, props, tmp_path)


@pytest.mark.parametrize("expr, why", [
    ("F.cross_entropy(x, t, label_smoothing=0.1)", "label_smoothing"),
    ("F.cross_entropy(x, t, weight=self.w)", "weight="),
    ("F.cross_entropy(x, torch.softmax(x * 0.5, 1))", "int64 class indices"),
    ("F.cross_entropy(x.view(6, 5, 2), t.view(6, 1).expand(6, 2))", "int64"),
    ("F.cross_entropy(x, t.flip(0))", "its result is int64"),
    ("F.cross_entropy(x.view(6, 5, 2), t[:, None] * 0 + torch.zeros(6, 2, dtype=torch.long))", "int64"),
])
def test_cross_entropy_outside_the_supported_form_is_refused(expr: str, why: str, tmp_path: Path) -> None:
    """Label smoothing, class weights, probability targets, more than 2 dims and targets
    computed in forward are refused with the reason."""
    src = f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.rand(10))
            def forward(self, x, t):
                return {expr}
        def get_inputs():
            return [torch.randn(6, 10), torch.randint(0, 2, (6,))]
        def get_init_inputs():
            return []
    """
    path = _write_problem(tmp_path, "ce_refused", src)
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match=re.escape(why)):
            pol.plan(load_torch_problem(path, alt_shapes=False))
    finally:
        pol.close()


_MASKS = {
    # name: (forward expression, x's shape, mask's shape)
    "masked_cumsum": ("torch.cumsum(x * mask, dim=1)", "batch_size, 1100", "batch_size, 1100"),
    "mask_broadcast_row": ("torch.relu(x) * mask + 1.0", "batch_size, 64", "64"),
    "mask_in_a_reduction_prologue": ("(x * mask).sum(dim=-1)", "batch_size, 300", "batch_size, 300"),
    "mask_first": ("torch.cumsum(mask * x, dim=1)", "batch_size, 1100", "batch_size, 1100"),
}


def _mask_source(name: str) -> str:
    expr, xs, ms = _MASKS[name]
    return f"""
        import torch
        import torch.nn as nn
        batch_size = 6
        class Model(nn.Module):
            def forward(self, x, mask):
                return {expr}
        def get_inputs():
            return [torch.randn({xs}), torch.randint(0, 2, ({ms},)).bool()]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_MASKS))
def test_bool_masks_in_arithmetic(name: str, tmp_path: Path) -> None:
    """A bool tensor multiplied into float32 arithmetic is read as 0.0/1.0 from its own
    bytes (``const bool *``; four at a time on the float4 path), not converted by PyTorch
    first (KernelBench level 1's 93_masked_cumsum was refused)."""
    path = _write_problem(tmp_path, name, _mask_source(name))
    p, plan, props = _plan_and_variants(path)
    assert len(plan.kernels) == 1 and [l.dtype for l in plan.kernels[0].leaves].count("bool") == 1
    assert all("const bool *L" in prop.files["kernel.cu"] for prop in props)
    _assert_variants_match_model(path, p, plan, props, tmp_path)


def test_a_bool_result_is_still_refused(tmp_path: Path) -> None:
    body = _mask_source("masked_cumsum").replace("torch.cumsum(x * mask, dim=1)", "torch.logical_not(mask).float() * x")
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match="logical_not"):
            pol.plan(load_torch_problem(_write_problem(tmp_path, "notmask", body)))
    finally:
        pol.close()


@pytest.mark.parametrize("turn", [0, len(VARIANTS) - 1])
def test_scan_kernels_compile(turn: int, nvcc_path: str, tmp_path: Path) -> None:
    """Both scan kernels (rows: scalar and float4; columns), with a bool mask's loads,
    build without a warning."""
    path = _write_problem(tmp_path, "scan_build", _mask_source("masked_cumsum"))
    text = _kernel_cu(path, turn)
    assert "cp_block_exscan<false>" in text and "_scol<" in text
    _assert_builds_without_warning(text, nvcc_path, tmp_path)


@pytest.mark.parametrize("expr, words", [
    ("x.flip(1)", "flip is supported only"),
    ("torch.cumsum(x.flip(1), dim=1)", "flip is supported only"),
    ("torch.cumsum(x.flip(0), dim=1).flip(0)", "a flip on another dim than the scan"),
    ("x.flip(1).cumsum(1).flip(1).flip(1)", "flip is supported only"),
    ("x.flip(1).cumsum(1).flip(1).contiguous().flip(1)", "flip is supported only"),
])
def test_flip_outside_a_reverse_scan_is_refused(expr: str, words: str, tmp_path: Path) -> None:
    body = _scan_source("cumsum_last").replace("torch.cumsum(x, dim=1)", expr)
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match=words):
            pol.plan(load_torch_problem(_write_problem(tmp_path, "flip", body)))
    finally:
        pol.close()


_WHOLE = {
    # name: (forward expression, kernels); [batch_size, 5000] takes the many-block kernel
    # (R >= 16 x block), the alternative shapes too
    "mse_mean": ("F.mse_loss(x, y)", 1),
    "huber_mean": ("F.smooth_l1_loss(x, y)", 1),
    "frobenius_normalize": ("x / torch.norm(x, p='fro')", 2),
    "sum_max_mean": ("(x.sum() + y.amax() * 2.0, x - x.mean())", 2),
    "softmax_of_everything": ("torch.softmax(x.flatten(), dim=0)", 3),
}


def _whole_source(name: str) -> str:
    expr, _ = _WHOLE[name]
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 6
        class Model(nn.Module):
            def forward(self, x, y):
                return {expr}
        def get_inputs():
            return [torch.randn(batch_size, 5000), torch.randn(batch_size, 5000)]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_WHOLE))
def test_whole_tensor_reductions(name: str, tmp_path: Path) -> None:
    """A reduction of the whole tensor ends its kernel: what reads its value per element
    is the next kernel, so that the reduction's own kernel can spread its one row over the
    whole grid (``_whole``: block partials, the last block combines them).  In one block,
    KernelBench level 1's MSELoss, HuberLoss and FrobeniusNorm ran 0.016-0.053x eager."""
    path = _write_problem(tmp_path, name, _whole_source(name))
    p, plan, props = _plan_and_variants(path)
    assert len(plan.kernels) == _WHOLE[name][1], plan.describe()
    assert "_whole<" in props[0].files["kernel.cu"]
    _assert_variants_match_model(path, p, plan, props, tmp_path)


def test_whole_tensor_kernel_compiles(nvcc_path: str, tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "whole_build", _whole_source("sum_max_mean"))
    text = _kernel_cu(path, len(VARIANTS) - 1)
    assert "cp_last_block(&" in text and "cp_combine_parts<1>" in text
    _assert_builds_without_warning(text, nvcc_path, tmp_path)


_SOFTMAXES = {
    # name: forward expression over x [batch_size, dim, width]
    "softmax_last": "torch.softmax(x, dim=-1)",
    "log_softmax_scaled": "F.log_softmax(x * 3.0, dim=-1)",
    "logsumexp_minus_mean": "torch.logsumexp(x, dim=-1, keepdim=True) - x.mean(dim=-1, keepdim=True)",
    "softmax_over_channels": "torch.softmax(x, dim=1)",  # a column kernel
    "softmax_with_neg_inf": "torch.softmax(torch.log(torch.relu(x + 0.5)), dim=-1)",  # -inf elements
    "log_softmax_large": "F.log_softmax(x * 40.0 + 100.0, dim=-1)",  # the max grows often
    "logsumexp_two_dims": "torch.logsumexp(torch.tanh(x), dim=(1, 2))",
    # rows of -inf alone (-inf) and rows holding +inf (inf), as PyTorch masks an infinite max,
    # clamped (the loader refuses infinite outputs; a NaN still fails)
    "logsumexp_infinite_rows": ("(torch.clamp(torch.logsumexp(torch.log(torch.relu(x - 2.5)), dim=-1), -50.0, 50.0), "
                                "torch.clamp(torch.logsumexp(x + 1.0 / torch.relu(x + 3.0), dim=-1), -50.0, 50.0))"),
}


def _softmax_source(name: str, width: int = 257) -> str:
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 5
        dim = 33
        width = {width}
        class Model(nn.Module):
            def forward(self, x):
                return {_SOFTMAXES[name]}
        def get_inputs():
            return [torch.randn(batch_size, dim, width)]
        def get_init_inputs():
            return []
    """


@pytest.mark.parametrize("name", sorted(_SOFTMAXES))
def test_online_softmax(name: str, tmp_path: Path) -> None:
    """The one-pass plan's softmax, log_softmax and logsumexp: the sum of ``exp(x - max)``
    is a ``red_lse`` on the max's level (the online softmax: one read of the row for the
    statistics, not two); the two-pass plan keeps a second level.  Every variant's
    candidate, kernels emulated with its own plan, matches ``Model`` at both shapes."""
    path = _write_problem(tmp_path, name, _softmax_source(name))
    p, plan, props = _plan_and_variants(path)
    one = plan_fusion(plan.graph, one_pass=True)
    two_levels = [k.depth for k in plan.kernels if k.rows is not None]
    one_level = [k.depth for k in one.kernels if k.rows is not None]
    assert two_levels and set(two_levels) == {2} and len(one_level) == len(two_levels) and set(one_level) == {1}
    assert any(pr.op == "red_lse" for k in one.kernels for pr in k.prims)
    for t, prop in enumerate(props):
        assert ("cp_lse_push(m" in prop.files["kernel.cu"]) == VARIANTS[t].one_pass
    _assert_variants_match_model(path, p, plan, props, tmp_path)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_online_softmax_kernels_compile(arch: str, nvcc_path: str, tmp_path: Path) -> None:
    """The one-pass variant's (max, sum) pairs through every tree (block, column, grid:
    ``cp_grid_reduce<3>`` over float2 partials) build without a warning."""
    path = _write_problem(tmp_path, "online_softmax", _softmax_source("softmax_last").replace(
        "return torch.softmax(x, dim=-1)", "return torch.softmax(x, dim=-1), torch.logsumexp(x, dim=1)"))
    turn = next(t for t, v in enumerate(VARIANTS) if v.one_pass)
    text = _kernel_cu(path, turn)
    for piece in ("cp_grid_reduce<3>(make_float2(", "cp_block_reduce<3>(make_float2(", "cp_col_reduce<3, CW>(make_float2(",
                  "__shared__ float2 sml[", "_gpartl["):
        assert piece in text, piece
    _assert_builds_without_warning(text, nvcc_path, tmp_path, arch)


_LSE_HARNESS = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#define __device__
#define __forceinline__ inline
struct float2 { float x, y; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
#define CP_INF __int_as_float(0x7f800000)
#define CP_NAN __int_as_float(0x7fffffff)  /* the harness's, for its rows */
%(max)s
%(push)s
%(comb)s
/* (max, sum) of row over T threads (thread t takes elements t, t + T, ...), the pairs
   combined as a butterfly over 32 lanes would and then in rank order, against PyTorch's
   two passes: m = max (NaN first), s = sum(exp(x - m)) with -inf adding 0. */
static int check(const std::vector<float> &row, int T, const char *what) {
    std::vector<float2> part;
    for (int t = 0; t < T; ++t) {
        float m = -CP_INF; double s = 0.0;
        for (size_t i = t; i < row.size(); i += T) cp_lse_push(m, s, row[i]);
        part.push_back(make_float2(m, (float)s));
    }
    for (int w = 0; w + 32 <= T; w += 32)
        for (int o = 16; o > 0; o >>= 1) {
            std::vector<float2> nxt(part.begin() + w, part.begin() + w + 32);
            for (int l = 0; l < 32; ++l) nxt[l] = cp_lse_comb(part[w + l], part[w + (l ^ o)]);
            std::copy(nxt.begin(), nxt.end(), part.begin() + w);
        }
    float2 r = make_float2(-CP_INF, 0.0f);
    for (int t = 0; t < T; t += (T >= 32 ? 32 : 1)) r = cp_lse_comb(r, part[t]);
    double m = -INFINITY; bool nan = false;
    for (float x : row) { if (x != x) nan = true; else if (x > m) m = x; }
    double s = 0.0;
    for (float x : row) if (x != -INFINITY) s += std::exp((double)x - m);
    if (nan) { m = NAN; s = NAN; }
    const bool m_ok = (std::isnan(m) && std::isnan(r.x)) || (double)r.x == m;
    const bool s_ok = (std::isnan(s) && std::isnan(r.y)) || std::fabs(r.y - s) <= 1e-5 * std::fabs(s);
    if (!m_ok || !s_ok) {
        std::printf("%%s (T=%%d, n=%%zu): got (%%g, %%g), want (%%g, %%g)\n", what, T, row.size(), r.x, r.y, m, s);
        return 1;
    }
    return 0;
}
int main() {
    std::mt19937 g(7);
    std::normal_distribution<float> nd;
    int bad = 0;
    for (int T : {1, 3, 32, 256}) for (int n : {1, 2, 31, 1000, 70000}) {
        std::vector<float> r(n);
        for (auto &x : r) x = nd(g) * 3.0f;
        bad |= check(r, T, "normal");
        for (auto &x : r) x = x * 40.0f + 100.0f;
        bad |= check(r, T, "wide");
        for (int i = 0; i < n; ++i) r[i] = (float)i * 0.01f;
        bad |= check(r, T, "increasing");
        for (int i = 0; i < n; ++i) r[i] = -(float)i * 0.01f;
        bad |= check(r, T, "decreasing");
        for (int i = 0; i < n; ++i) r[i] = (i %% 3) ? -CP_INF : nd(g);
        bad |= check(r, T, "some -inf");
        for (auto &x : r) x = -CP_INF;
        bad |= check(r, T, "all -inf");
        for (auto &x : r) x = nd(g);
        r[n / 2] = CP_INF;
        bad |= check(r, T, "one +inf");
        r[n / 2] = CP_NAN;
        bad |= check(r, T, "one NaN");
        r[0] = -CP_INF; r[n - 1] = CP_INF;
        bad |= check(r, T, "NaN, -inf and +inf");
    }
    return bad;
}
"""


def test_online_softmax_pairs_match_two_passes(tmp_path: Path) -> None:
    """``cp_lse_push`` and ``cp_lse_comb`` as generated (cut out of a ``kernel.cu``),
    compiled for the host and run as 1-256 threads and their warp butterflies would, on rows
    of 1-70000 elements (normal, wide, increasing, decreasing, -inf, +inf, NaN): the pair is
    PyTorch's two passes' (max, sum of exp(x - max)), to 1e-5 relative, NaN where they give
    NaN, 0 for a row of -inf (PyTorch's NaN sum there leaves the outputs NaN either way:
    ``exp(x - max)`` is NaN)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    path = _write_problem(tmp_path, "lse_pairs", _softmax_source("softmax_last"))
    turn = next(t for t, v in enumerate(VARIANTS) if v.one_pass)
    text = _kernel_cu(path, turn)
    cut = {name: re.search(rf"__device__ __forceinline__ [\w ]+ {name}\(.*?\n}}\n", text, re.S)
           for name in ("cp_max", "cp_lse_push", "cp_lse_comb")}
    cut["cp_max"] = re.search(r"__device__ __forceinline__ float cp_max\([^\n]*\n", text)
    assert all(cut.values()), {k: bool(v) for k, v in cut.items()}
    src = tmp_path / "harness.cpp"
    src.write_text(_LSE_HARNESS % {"max": cut["cp_max"].group(0), "push": cut["cp_lse_push"].group(0),
                                   "comb": cut["cp_lse_comb"].group(0)})
    exe = tmp_path / "harness"
    subprocess.run([cxx, "-std=c++17", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True, text=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]


_ROW_OPERANDS = {
    # name: (__init__ lines, forward expression) over x [batch_size, ch, h, width]; the row
    # kernel reads each operand by its layout along the row (codegen's row_leaves): along
    # the row (how 1), constant along it (how 2), or through (i / inner) % size (how 0)
    "channel_bias_then_layer_norm": (
        ["self.b = nn.Parameter(torch.randn(ch, 1, 1))", "self.ln = nn.LayerNorm(width)",
         "nn.init.normal_(self.ln.weight)", "nn.init.normal_(self.ln.bias)"],
        "self.ln(x + self.b)"),  # b constant along each row, the norm's weight and bias along it
    "softmax_of_scaled_plus_channel_bias": (
        ["self.w = nn.Parameter(torch.randn(width))", "self.b = nn.Parameter(torch.randn(ch, 1, 1))"],
        "torch.softmax(x * self.w + self.b, dim=-1)"),
    "layer_norm_two_dims_partial_operands": (
        ["self.u = nn.Parameter(torch.randn(width))", "self.v = nn.Parameter(torch.randn(h, 1))"],
        "F.layer_norm(x * self.u + self.v, (h, width))"),  # neither along nor constant: how 0
}


def _row_operands_source(name: str) -> str:
    init, expr = _ROW_OPERANDS[name]
    body = "\n".join(f"                {line}" for line in init)
    return f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        batch_size = 2
        ch = 3
        h = 5
        width = 12
        class Model(nn.Module):
            def __init__(self, ch, h, width):
                super().__init__()
{body}
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn(batch_size, ch, h, width)]
        def get_init_inputs():
            return [ch, h, width]
    """


@pytest.mark.parametrize("name", sorted(_ROW_OPERANDS))
def test_row_kernels_read_operands_by_their_layout_along_the_row(name: str, tmp_path: Path) -> None:
    """A row kernel's broadcast operands: one test per kernel of their layout along the row
    (``L<i>_how``) and a row-constant one's index once per row (``L<i>_at``), in every loop
    of every variant, and the candidates (emulated) match ``Model`` at both shapes; the
    CUDA text itself runs on the host device in tests/test_host_cuda.py and on the GPU."""
    path = _write_problem(tmp_path, name, _row_operands_source(name))
    p, plan, props = _plan_and_variants(path)
    assert [k.rows is not None for k in plan.kernels] == [True]
    for prop in props:
        text = prop.files["kernel.cu"]
        assert "cp_row_how<IdxT>(" in text and "_at = " in text
        row = text[text.index("_row("):]
        assert "cp_bload4<IdxT>(L" not in row.split("extern")[0] or not prop.mapping["variant"]["vec"]
    _assert_variants_match_model(path, p, plan, props, tmp_path)


@pytest.mark.parametrize("turn", range(len(VARIANTS)))
def test_row_operand_kernels_compile(turn: int, nvcc_path: str, tmp_path: Path) -> None:
    """The row kernels with operands read by their layout along the row build for sm_90
    without a warning (an unused ``L<i>_how`` or ``L<i>_at`` would warn)."""
    name = "channel_bias_then_layer_norm"
    text = _kernel_cu(_write_problem(tmp_path, name, _row_operands_source(name)), turn)
    _assert_builds_without_warning(text, nvcc_path, tmp_path)


#: Every operator problem above, by family: name -> its source (the GPU tests run them on
#: CUDA, every variant).
OPERATOR_PROBLEMS: dict[str, str] = {
    **{f"instance_norm_{n}": _instance_norm_source(n) for n in _INSTANCE_NORMS},
    **{f"norm_{n}": _norm_source(n) for n in _NORMS},
    **{f"loss_{n}": _loss_source(n) for n in _LOSSES},
    **{f"loss_{n}": _more_loss_source(n) for n in _MORE_LOSSES},
    **{f"pool_{n}": _pool_source(n) for n in _POOLS},
    **{f"batch_norm_train_{n}": _bn_train_source(n) for n in _TRAIN_BATCH_NORMS},
    **{f"arg_{n}": _arg_source(n) for n in _ARG_REDUCTIONS},
    **{f"scan_{n}": _scan_source(n) for n in _SCANS},
    **{f"mask_{n}": _mask_source(n) for n in _MASKS},
    **{f"whole_{n}": _whole_source(n) for n in _WHOLE},
    **{f"softmax_{n}": _softmax_source(n) for n in _SOFTMAXES},
    **{f"cross_entropy_{n}": _cross_entropy_source(n) for n in _CROSS_ENTROPY},
    **{f"row_operands_{n}": _row_operands_source(n) for n in _ROW_OPERANDS},
    **{f"tile_pool_{n}": _tile_pool_source(n) for n in _TILE_POOLS},
    **{f"short_rows_{n}": _short_rows_source(n) for n in _SHORT_ROWS},
    **{f"wide_cols_{n}": _wide_cols_source(n) for n in _WIDE_COLS},
}


_KERNEL_SIGNATURE = re.compile(r"__global__ void(?:\s+__launch_bounds__\([\d, ]+\))?\s+\w+\s*\(([^)]*)\)\s*\{", re.S)
_LOCAL_DECLARATION = re.compile(r"\b(?:const\s+)?(?:IdxT|float|double|int|int64_t|bool)\s+(\w+)\s*[=;\[]")


def _shadowed_parameters(kernel_cu: str) -> list[tuple[str, str]]:
    """(kernel's first line, name) for every local of a ``__global__`` body that is declared
    with the name of one of the kernel's parameters (legal C++, and silently wrong)."""
    found = []
    sigs = list(_KERNEL_SIGNATURE.finditer(kernel_cu))
    assert len(sigs) == kernel_cu.count("__global__"), "a kernel signature the finder cannot read"
    for m in sigs:
        params = {p.split()[-1].lstrip("*") for p in m.group(1).split(",") if p.strip()}
        depth, end = 1, m.end()
        while depth and end < len(kernel_cu):
            depth += {"{": 1, "}": -1}.get(kernel_cu[end], 0)
            end += 1
        body = kernel_cu[m.end():end]
        found += [(kernel_cu[m.start():m.start() + 60], name)
                  for name in _LOCAL_DECLARATION.findall(body) if name in params]
    return found


def test_shadowed_parameter_finder() -> None:
    text = "__global__ void __launch_bounds__(512) k(const float *L0, float c0)\n{\n  for (;;) { const IdxT c0 = q << 2; }\n}\n"
    assert [n for _, n in _shadowed_parameters(text)] == ["c0"]
    assert _shadowed_parameters(text.replace("IdxT c0", "IdxT cq")) == []


@pytest.mark.parametrize("name", sorted(OPERATOR_PROBLEMS))
def test_no_local_shadows_a_kernel_parameter(name: str, tmp_path: Path) -> None:
    """No variant's kernel declares a local named like one of its parameters: the channel
    rows' float4 path once declared ``c0`` (the element index) over the constant ``c0``, so
    ``BatchNorm2d(x * 2.0)`` multiplied by the index; the emulated check runs the plan, not
    the CUDA text, and only the H200 saw it."""
    p = load_torch_problem(_write_problem(tmp_path, name, OPERATOR_PROBLEMS[name]))
    pol = BuiltinTorchPolicy()
    try:
        texts = [pol.propose(p, t).files["kernel.cu"] for t in range(len(VARIANTS))]
    finally:
        pol.close()
    for t, text in enumerate(texts):
        assert _shadowed_parameters(text) == [], (VARIANTS[t].name, _shadowed_parameters(text))


@pytest.mark.parametrize("name", sorted(OPERATOR_PROBLEMS))
def test_operator_problems_pass_the_static_guards(name: str, tmp_path: Path) -> None:
    """Every variant's candidate of every operator problem passes the judge's static guards
    as the judge runs them (the library calls allowed): batch norm's model.py once counted
    its batches with ``num_batches_tracked.add_(1)``, which the guard rejects as PyTorch
    doing the work, and only KernelBench on the H200 saw it (every batch norm file
    ``guard_rejected``)."""
    p = load_torch_problem(_write_problem(tmp_path, name, OPERATOR_PROBLEMS[name]))
    pol = BuiltinTorchPolicy()
    try:
        props = [pol.propose(p, t) for t in range(len(VARIANTS))]
    finally:
        pol.close()
    for t, prop in enumerate(props):
        violations = check_candidate_source(prop.files["model.py"], problem=p, allow_torch_ops=LIBRARY_OPS,
                                            cuda_sources={"kernel.cu": prop.files["kernel.cu"]})
        assert violations == [], (VARIANTS[t].name, [str(v) for v in violations])


_CHAN_HARNESS = r"""
#include <cstdint>
#include <cstdio>
#include <vector>
#define __device__
#define __forceinline__ inline
%(step)s
template <typename IdxT>
static int visit(bool vec, IdxT outer, IdxT R, IdxT inner, IdxT tpr) {
    std::vector<int> seen((size_t)(outer * R), 0);
    for (IdxT row = 0; row < outer; ++row)
        for (IdxT tid = 0; tid < tpr; ++tid) {
            if (vec) {
%(vec)s
                    for (int l = 0; l < 4; ++l) seen[(size_t)(i0 + l)]++;
                }
            } else {
%(scalar)s
                    seen[(size_t)i]++;
                }
            }
        }
    for (size_t j = 0; j < seen.size(); ++j)
        if (seen[j] != 1) { std::printf("vec=%%d outer=%%ld R=%%ld inner=%%ld tpr=%%ld: element %%zu seen %%d times\n",
                                        (int)vec, (long)outer, (long)R, (long)inner, (long)tpr, j, seen[j]); return 1; }
    return 0;
}
int main() {
    int bad = 0;
    const long inners[] = {1, 3, 4, 7, 28, 100, 512, 4096, 5000};
    const long ns[] = {1, 2, 5, 9};
    const long tprs[] = {256, 512, 2048, 4096, 33 * 256, 100 * 512};
    for (long inner : inners) for (long n : ns) for (long tpr : tprs) for (long outer : {1L, 3L}) {
        bad |= visit<int>(false, outer, n * inner, inner, tpr) | visit<int64_t>(false, outer, n * inner, inner, tpr);
        if (inner %% 4 == 0) bad |= visit<int>(true, outer, n * inner, inner, tpr) | visit<int64_t>(true, outer, n * inner, inner, tpr);
    }
    return bad;
}
"""


def test_channel_rows_visit_every_element_once(tmp_path: Path) -> None:
    """The channel rows' loops as generated (both heads and ``cp_chan_step`` cut out of a
    ``kernel.cu``), compiled for the host and run for every thread of a block or of a row
    split over the grid (up to 100 blocks of 512 threads) over rows of 1-9 samples of 1-5000
    elements: each element of each
    row is visited exactly once, as ``divmod(c, inner)`` would index it.  The CUDA text of
    these loops is otherwise only checked on a GPU."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    path = _write_problem(tmp_path, "bn_rows", _bn_train_source("module_2d_then_tanh"))
    text = _kernel_cu(path, 1)  # block256_vec4
    step = re.search(r"template <typename IdxT>\n__device__ __forceinline__ void cp_chan_step\(.*?\n}\n", text, re.S)
    scalar = re.search(r"( *const IdxT dn = tpr / inner.*?\n *const IdxT i = [^\n]*\n)", text, re.S)
    vec = re.search(r"( *const IdxT R4 = R >> 2;\n *const IdxT dn = \(tpr << 2\).*?\n *const IdxT i0 = [^\n]*\n)", text, re.S)
    assert step and scalar and vec, "the channel rows' loop heads were not found in kernel.cu"
    src = tmp_path / "harness.cpp"
    src.write_text(_CHAN_HARNESS % {"step": step.group(0), "scalar": scalar.group(1), "vec": vec.group(1)})
    exe = tmp_path / "harness"
    subprocess.run([cxx, "-std=c++17", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True, text=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]


#: Layer norm over (c, w) with a few long rows at its own sizes (4 rows of 65536 elements:
#: split over the grid on an H200); the GPU tests run it at more shapes.
SPLIT_LAYER_NORM = """
        import torch
        import torch.nn as nn
        n = 4
        c = 64
        w = 1024
        class Model(nn.Module):
            def __init__(self, c, w):
                super().__init__()
                self.ln = nn.LayerNorm((c, w))
                with torch.no_grad():
                    self.ln.weight.uniform_(0.5, 1.5)
                    self.ln.bias.uniform_(-1.0, 1.0)
            def forward(self, x):
                return self.ln(x) * 2.0
        def get_inputs():
            return [torch.randn(n, c, w) * 2.0 + 3.0]
        def get_init_inputs():
            return [c, w]
    """


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("problem", ["bn_train", "layer_norm"])
@pytest.mark.parametrize("turn", [1, len(VARIANTS) - 1])
def test_split_row_kernels_compile(turn: int, problem: str, arch: str, nvcc_path: str, tmp_path: Path) -> None:
    """Rows split over a cooperative grid (MODE 2: ``cp_grid_reduce``, ``cp_launch_coop`` with
    its fallback to one block per row) and in phased launches (MODE 3: ``cp_phase_reduce``,
    one launch per level and one for the outputs) build without a warning for sm_90 and
    sm_80: batch norm's channel rows and layer norm's contiguous rows, on the warp-rows
    variant (MODEs 0-3; two levels, a grid reduction each, three phases) and on the one-pass
    variant (one level: the mean's sum, and the variance's two sums in double; two phases)."""
    src = _bn_train_source("module_2d_then_tanh") if problem == "bn_train" else SPLIT_LAYER_NORM
    path = _write_problem(tmp_path, problem, src)
    text = _kernel_cu(path, turn)
    assert "cp_launch_coop(" in text and "cp_grid_reduce<0>(" in text and "static const int64_t fill = cp_coop_fill(" in text
    phases = 2 if VARIANTS[turn].one_pass else 3
    assert "cp_phase_reduce<0>(" in text and f"for (int ph = 0; ph <= {phases - 1}; ++ph)" in text
    assert "cp_phase_blocks(fill0, fill3, outer, R," in text
    assert (" = cp_var_sums(S" in text) == VARIANTS[turn].one_pass  # a call, not the prelude's definition
    assert "_row<int, true, 0><<<grid_b" in text  # the fallback
    _assert_builds_without_warning(text, nvcc_path, tmp_path, arch)


_BLOCKS_HARNESS = r"""
#include <cstdint>
#include <cstdio>
#define CP_GRID_MAX %(grid_max)s
#define CP_PART_MAX %(part_max)s
%(split)s
%(phase)s
int main() {
    long fill0, fill3, outer, R; int block;
    while (std::scanf("%%ld %%ld %%ld %%ld %%d", &fill0, &fill3, &outer, &R, &block) == 5)
        std::printf("%%ld %%ld\n", (long)cp_split_blocks(fill3, outer, R, block),
                    (long)cp_phase_blocks(fill0, fill3, outer, R, block));
    return 0;
}
"""


def test_blocks_per_row_of_split_and_phased_launches(tmp_path: Path) -> None:
    """``cp_split_blocks`` (MODE 2) and ``cp_phase_blocks`` (MODE 3) as generated, on the
    host: (fill0, fill3, outer, R, block) -> (S of MODE 2, S of MODE 3), 0 for none."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    path = _write_problem(tmp_path, "blocks", SPLIT_LAYER_NORM)
    text = _kernel_cu(path, 1)
    cut = {name: re.search(rf"inline int64_t {name}\(.*?\n}}\n", text, re.S) for name in ("cp_split_blocks", "cp_phase_blocks")}
    consts = {name: re.search(rf"#define {name} (\d+)", text) for name in ("CP_GRID_MAX", "CP_PART_MAX")}
    assert all(cut.values()) and all(consts.values())
    src = tmp_path / "harness.cpp"
    src.write_text(_BLOCKS_HARNESS % {"grid_max": consts["CP_GRID_MAX"].group(1), "part_max": consts["CP_PART_MAX"].group(1),
                                      "split": cut["cp_split_blocks"].group(0), "phase": cut["cp_phase_blocks"].group(0)})
    exe = tmp_path / "harness"
    subprocess.run([cxx, "-std=c++17", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True, text=True)
    cases = {
        # KernelBench level 1 on an H200 (132 SMs), block 256, 5 resident blocks per SM
        (660, 660, 896, 2 * 512 * 512, 256): (0, 3),  # 35_GroupNorm: 1.4 waves -> 2688 blocks, 2 launches
        (660, 660, 7168, 512 * 512, 256): (0, 0),  # 34_InstanceNorm: 10.9 waves, 98% full
        # under 2 rows per SM the launcher takes MODE 2 first (cp_phase_blocks is not asked)
        (660, 660, 64, 64 * 512 * 512, 256): (10, 42),  # 33_BatchNorm's 64 channels: a cooperative grid
        (660, 660, 16, 64 * 256 * 256, 256): (41, 165),  # 40_LayerNorm's 16 rows
        (660, 660, 1320, 8192 * 8, 256): (0, 0),  # two full waves
        (660, 660, 700, 4096, 256): (0, 0),  # rows too short to split (one S of 16 elements a thread)
        (660, 660, 700, 20000, 256): (0, 4),  # capped at 16 elements a thread
        (264, 264, 300, 20000, 512): (0, 2),  # the GPU test's phased rows at block 512
        (1056, 1056, 60000, 1 << 20, 256): (0, 0),  # 57 waves
        (660, 660, 40000, 1 << 20, 256): (0, 0),  # 61 waves: 98% full
        (660, 660, 700, 1 << 30, 256): (0, 4),  # 700 rows of 2^30: about 4 waves of blocks
        (0, 660, 896, 1 << 21, 256): (0, 0),  # the occupancy query failed
    }
    proc = subprocess.run([str(exe)], input="".join(" ".join(map(str, c)) + "\n" for c in cases),
                          capture_output=True, text=True, timeout=60, check=True)
    got = [tuple(int(v) for v in line.split()) for line in proc.stdout.splitlines()]
    assert dict(zip(cases, got)) == cases


_NUMBER_TENSORS = {
    # name: (init, forward expression, the kernel's ops)
    "device_kwarg": ("", "torch.gelu(torch.min(x + 0.5, torch.tensor(0.0, device=x.device)))"
                     .replace("torch.gelu", "F.gelu"), "[add 0.5, min 0, gelu]"),
    "fx_constant": ("self.c = 0.25", "torch.min(x, torch.tensor(self.c)) * 2.0", "[min 0.25, mul 2]"),
    "int_dtype": ("", "torch.maximum(x, torch.tensor(1)) - 1.0", "[maximum 1, sub 1]"),
}


@pytest.mark.parametrize("name", sorted(_NUMBER_TENSORS))
def test_a_zero_dim_tensor_of_a_number_is_the_number(name: str, tmp_path: Path) -> None:
    """``torch.min(x, torch.tensor(c, device=x.device))`` (KernelBench level 2's 31, 83 and 93
    were refused for it): the 0-d tensor is the number, read at trace time."""
    init, expr, ops = _NUMBER_TENSORS[name]
    path = _write_problem(tmp_path, name, f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        rows = 8
        cols = 12
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init or 'pass'}
            def forward(self, x):
                return {expr}
        def get_inputs():
            return [torch.randn(rows, cols) * 2.0]
        def get_init_inputs():
            return []
    """)
    p = load_torch_problem(path)
    pol = BuiltinTorchPolicy()
    try:
        plan = pol.plan(p)
        prop = pol.propose(p, 1)
    finally:
        pol.close()
    assert plan.fused_ops() == [ops], plan.describe()
    assert "tensor(" not in prop.files["model.py"].split("def forward", 1)[1]
    r = _check_emulated(path, p, plan, prop.files, tmp_path / "cand")
    assert r["ok"], r


@pytest.mark.parametrize("expr, message", [
    ("x + torch.tensor([1.0, 2.0, 3.0], device=x.device)", "other than one Python number"),
    ("x * torch.tensor(2.0, device=x.device).expand(4, 3)", "a 0-d tensor made from a number"),
    ("x + torch.tensor([1.0, 2.0, 3.0])", "neither a parameter nor a buffer"),  # torch.fx's constant
])
def test_other_tensors_made_in_forward_are_refused(expr: str, message: str, tmp_path: Path) -> None:
    path = _write_problem(tmp_path, "made_in_forward", f"""
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu({expr})
        def get_inputs():
            return [torch.randn(4, 3)]
        def get_init_inputs():
            return []
    """)
    pol = BuiltinTorchPolicy()
    try:
        with pytest.raises(PolicyRefusal, match=message):
            pol.plan(load_torch_problem(path))
    finally:
        pol.close()


_AFTER_A_REDUCTION = {
    # name: (forward expression, extra inputs): operands of a reduced value, broadcast
    # against the reduced shape without (or with) its reduced dims
    "bias_after_sum": ("x.sum(-1) + self.b", ""),
    "mean_of_middle_dim_times_input": ("x.mean(1) * y", ", torch.randn(n, length)"),
    "same_shape_after_tanh_sum": ("torch.tanh(x).sum(-1) + y", ", torch.randn(n, c)"),
    "keepdim_column": ("x.amax(-1, keepdim=True) - z", ", torch.randn(c, 1)"),
}


@pytest.mark.parametrize("name", sorted(_AFTER_A_REDUCTION))
def test_operands_after_a_reduction_broadcast_like_pytorch(name: str, tmp_path: Path) -> None:
    """``x.sum(-1) + b`` with ``b`` of shape [C] lines up with [N, C], the reduced shape
    without the reduced dim (the candidate crashed: the operand was expanded to the
    keepdim shape [N, C, 1]; found by an attack pass)."""
    expr, extra = _AFTER_A_REDUCTION[name]
    args = "x" + "".join(f", {v}" for v in ("y", "z") if f" {v}" in expr or expr.endswith(v))
    path = _write_problem(tmp_path, name, f"""
        import torch
        import torch.nn as nn
        n = 4
        c = 6
        length = 10
        class Model(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.b = nn.Parameter(torch.randn(c))
            def forward(self, {args}):
                return {expr}
        def get_inputs():
            return [torch.randn(n, c, length){extra}]
        def get_init_inputs():
            return [c]
    """)
    p, plan, props = _plan_and_variants(path)
    _assert_variants_match_model(path, p, plan, props, tmp_path)
