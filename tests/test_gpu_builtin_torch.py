"""On a GPU: the built-in PyTorch policy's candidates are correct on CUDA.

* Every examples/torch problem, every variant: ``model.py`` + ``kernel.cu`` written to a
  temporary folder, imported in a child process (``selfcheck``), ``Model``'s state_dict
  copied into ``ModelNew``, outputs compared on CUDA with atol = rtol = 1e-4 at the test
  sizes and at the problem's alternative shapes (odd sizes: the scalar fallback of the
  float4 variants, the warp-per-row and block-per-row paths).
* The same candidates through the evaluation worker (``run_torch_evaluation``) at the
  default (H200) sizes and their alternative shapes.
* A problem above 2**30 elements, for the 64-bit index path of every kernel kind.
"""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from cudaperf_cli.policies.builtin_torch import VARIANTS, BuiltinTorchPolicy
from cudaperf_cli.policies.builtin_torch.selfcheck import check_candidate
from cudaperf_cli.problems.pytorch import load_torch_problem
from tests.test_builtin_torch_policy import EXAMPLES, OPERATOR_PROBLEMS, PLANS, SMALL, SPLIT_LAYER_NORM

pytestmark = pytest.mark.gpu


def _write(files: dict[str, str], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder / "model.py"


def _run_on_cuda(path: Path, props: list[Any], configs: list[dict[str, int]], tmp_path: Path) -> dict[int, dict[str, Any]]:
    """Every proposal (one per variant) written to its folder and run against ``Model`` on
    CUDA at ``configs``, 3 trials each, the variants' builds in parallel: turn -> result."""
    env = {"CUDAPERF_TORCH_BUILD_ROOT": str(tmp_path / "build")}

    def run(turn: int) -> tuple[int, dict[str, Any]]:
        model = _write(props[turn].files, tmp_path / str(turn))
        return turn, check_candidate(path, model, configs, device="cuda", trials=3, timeout_s=420, env=env)

    with ThreadPoolExecutor(max_workers=len(props)) as ex:
        return dict(ex.map(run, range(len(props))))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_candidates_match_model_on_cuda(name: str, tmp_path: Path) -> None:
    p = load_torch_problem(EXAMPLES / f"{name}.py", constants=SMALL[name])
    assert p.alt_shapes, p.alt_note
    configs = [dict(p.constants), {**p.constants, **p.alt_shapes}]
    policy = BuiltinTorchPolicy()
    assert policy.plan(p).fused_ops() == PLANS[name][0]
    env = {"CUDAPERF_TORCH_BUILD_ROOT": str(tmp_path / "build")}

    def run(turn: int) -> tuple[int, dict[str, Any]]:
        model = _write(policy.propose(p, turn).files, tmp_path / str(turn))
        return turn, check_candidate(p.path, model, configs, device="cuda", trials=3, timeout_s=420, env=env)

    with ThreadPoolExecutor(max_workers=len(VARIANTS)) as ex:
        results = dict(ex.map(run, range(len(VARIANTS))))
    for turn, r in sorted(results.items()):
        assert r["ok"], f"{name} variant {VARIANTS[turn].name}: {r}"
        assert [c["constants"] for c in r["configs"]] == configs
        print(f"{name} {VARIANTS[turn].name}: max |err| "
              + ", ".join(f"{c['max_abs_err']:.2e}" for c in r["configs"]))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_evaluation_worker_verifies_the_candidate_at_default_sizes(name: str, tmp_path: Path) -> None:
    from cudaperf_cli.evaluate.torch_job import TorchEvalJob, run_torch_evaluation

    p = load_torch_problem(EXAMPLES / f"{name}.py")  # the H200 sizes
    assert p.alt_shapes, p.alt_note
    prop = BuiltinTorchPolicy().propose(p, 1)
    model = _write(prop.files, tmp_path / "cand")
    job = TorchEvalJob(
        problem=str(p.path),
        candidate=[str(model), str(model.parent / "kernel.cu")],
        format="fast",
        shapes=[dict(p.alt_shapes)],
        time=False,
        compile_baseline=False,
        allow_torch_ops=True,
        build_root=str(tmp_path / "build"),
    )
    result = run_torch_evaluation(job, timeout_s=600)
    assert result.status == "correct", f"{name}: {result.status}: {result.message} {result.guard or ''}"
    assert [c.status for c in result.configs] == ["correct", "correct"]


def test_sixty_four_bit_indices(tmp_path: Path) -> None:
    """More than 2**30 elements: the int64_t instantiations of the elementwise, row and
    column kernels (vectorised rows: 32772 % 4 == 0)."""
    path = tmp_path / "huge.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn
        rows = 8
        cols = 12
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x) * 2.0, torch.softmax(x, dim=-1), x.sum(dim=0)
        def get_inputs():
            return [torch.randn(rows, cols)]
        def get_init_inputs():
            return []
    """))
    p = load_torch_problem(path, alt_shapes=False)
    policy = BuiltinTorchPolicy()
    assert policy.plan(p).fused_ops() == ["[relu, mul 2]", "softmax", "sum"]
    big = {"rows": 32768, "cols": 32772}
    assert big["rows"] * big["cols"] > 2**30
    env = {"CUDAPERF_TORCH_BUILD_ROOT": str(tmp_path / "build")}
    for turn in (0, len(VARIANTS) - 1):
        model = _write(policy.propose(p, turn).files, tmp_path / str(turn))
        r = check_candidate(path, model, [big], device="cuda", trials=1, timeout_s=600, env=env)
        assert r["ok"], r


@pytest.mark.parametrize("name", sorted(OPERATOR_PROBLEMS))
def test_operator_candidates_match_model_on_cuda(name: str, tmp_path: Path) -> None:
    """The operators the CPU tests check with emulated kernels (pooling, batch norm in
    training mode with its running statistics, instance norm, vector norms, losses): every
    variant's CUDA on the GPU, at the test sizes and the alternative shapes."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(OPERATOR_PROBLEMS[name]))
    p = load_torch_problem(path)
    assert p.alt_shapes, p.alt_note
    configs = [dict(p.constants), {**p.constants, **p.alt_shapes}]
    policy = BuiltinTorchPolicy()
    try:
        props = [policy.propose(p, t) for t in range(len(VARIANTS))]
    finally:
        policy.close()
    for turn, r in sorted(_run_on_cuda(path, props, configs, tmp_path).items()):
        assert r["ok"], f"{name} variant {VARIANTS[turn].name}: {r}"


#: Few, long rows (under 2 per SM on an H200, at least 8 x block elements): the row kernels'
#: MODE 2, each row over several blocks of a cooperative grid.  name -> (source, configs:
#: float4 sizes, then odd ones for the scalar path; a small one on one block per row).
_SPLIT_ROWS: dict[str, tuple[str, list[dict[str, int]]]] = {
    "batch_norm_train": ("""
        import torch
        import torch.nn as nn
        n = 16
        c = 8
        h = 64
        w = 64
        class Model(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.bn = nn.BatchNorm2d(c, momentum=0.3)
                with torch.no_grad():
                    self.bn.weight.uniform_(0.5, 1.5)
                    self.bn.bias.uniform_(-1.0, 1.0)
            def forward(self, x):
                return torch.tanh(self.bn(x * 2.0))
        def get_inputs():
            return [torch.randn(n, c, h, w) * 3.0 + 1.0]
        def get_init_inputs():
            return [c]
    """, [{"n": 16, "c": 8, "h": 64, "w": 64}, {"n": 32, "c": 16, "h": 33, "w": 31},
          {"n": 5, "c": 6, "h": 7, "w": 4}]),
    "layer_norm": (SPLIT_LAYER_NORM, [{"n": 4, "c": 64, "w": 1024}, {"n": 3, "c": 33, "w": 1001}, {"n": 5, "c": 3, "w": 7}]),
    "softmax": ("""
        import torch
        import torch.nn as nn
        n = 4
        d = 100000
        class Model(nn.Module):
            def forward(self, x):
                return torch.softmax(x * 3.0, dim=-1)
        def get_inputs():
            return [torch.randn(n, d)]
        def get_init_inputs():
            return []
    """, [{"n": 4, "d": 100000}, {"n": 5, "d": 77777}, {"n": 3, "d": 50}]),
    "group_norm_max_mean": ("""
        import torch
        import torch.nn as nn
        n = 2
        c = 8
        h = 64
        w = 64
        class Model(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.gn = nn.GroupNorm(2, c)
            def forward(self, x):
                y = self.gn(x)
                return y - y.amax(dim=(1, 2, 3), keepdim=True) + x.mean(dim=(1, 2, 3), keepdim=True)
        def get_inputs():
            return [torch.randn(n, c, h, w) + 0.5]
        def get_init_inputs():
            return [c]
    """, [{"n": 2, "c": 8, "h": 64, "w": 64}, {"n": 3, "c": 6, "h": 45, "w": 53}, {"n": 2, "c": 4, "h": 5, "w": 3}]),
    "var_std": ("""
        import torch
        import torch.nn as nn
        n = 4
        d = 100000
        class Model(nn.Module):
            def forward(self, x):
                return x.var(dim=-1, keepdim=True) + x.std(dim=-1, unbiased=False, keepdim=True) * x
        def get_inputs():
            return [torch.randn(n, d) * 2.0 + 5.0]
        def get_init_inputs():
            return []
    """, [{"n": 4, "d": 100000}, {"n": 5, "d": 77777}, {"n": 3, "d": 50}]),
}

#: Rows for MODE 3 (phased launches): 300 rows of about 20000 elements, whatever the H200's
#: resident blocks (2-8 per SM of 132: one block per row fills its waves under 90% at 300
#: rows), so the first two shapes of each run split in depth + 1 launches; the last runs one
#: block per row.
_PHASED_ROWS: dict[str, tuple[str, list[dict[str, int]]]] = {
    "phased_layer_norm_sum": ("""
        import torch
        import torch.nn as nn
        n = 300
        w = 20000
        class Model(nn.Module):
            def __init__(self, w):
                super().__init__()
                self.ln = nn.LayerNorm(w)
                with torch.no_grad():
                    self.ln.weight.uniform_(0.5, 1.5)
                    self.ln.bias.uniform_(-1.0, 1.0)
            def forward(self, x):
                return self.ln(x) * 2.0, x.sum(dim=-1), x.amax(dim=-1)
        def get_inputs():
            return [torch.randn(n, w) * 2.0 + 3.0]
        def get_init_inputs():
            return [w]
    """, [{"n": 300, "w": 20000}, {"n": 280, "w": 17001}, {"n": 3, "w": 7}]),
    "phased_log_softmax": ("""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        n = 300
        d = 20000
        class Model(nn.Module):
            def forward(self, x):
                return F.log_softmax(x * 3.0, dim=-1)
        def get_inputs():
            return [torch.randn(n, d)]
        def get_init_inputs():
            return []
    """, [{"n": 300, "d": 20000}, {"n": 290, "d": 19999}, {"n": 3, "d": 50}]),
    "phased_batch_norm_train": ("""
        import torch
        import torch.nn as nn
        n = 2
        c = 300
        h = 100
        w = 100
        class Model(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.bn = nn.BatchNorm2d(c, momentum=0.3)
                with torch.no_grad():
                    self.bn.weight.uniform_(0.5, 1.5)
                    self.bn.bias.uniform_(-1.0, 1.0)
            def forward(self, x):
                return torch.tanh(self.bn(x * 2.0))
        def get_inputs():
            return [torch.randn(n, c, h, w) * 3.0 + 1.0]
        def get_init_inputs():
            return [c]
    """, [{"n": 2, "c": 300, "h": 100, "w": 100}, {"n": 3, "c": 280, "h": 77, "w": 75}, {"n": 5, "c": 6, "h": 7, "w": 4}]),
    "phased_group_norm": ("""
        import torch
        import torch.nn as nn
        n = 75
        c = 8
        h = 100
        w = 100
        class Model(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.gn = nn.GroupNorm(4, c)
            def forward(self, x):
                return self.gn(x) + 1.0
        def get_inputs():
            return [torch.randn(n, c, h, w) + 0.5]
        def get_init_inputs():
            return [c]
    """, [{"n": 75, "c": 8, "h": 100, "w": 100}, {"n": 70, "c": 8, "h": 99, "w": 101}, {"n": 2, "c": 4, "h": 5, "w": 3}]),
}


@pytest.mark.parametrize("name", sorted(_SPLIT_ROWS) + sorted(_PHASED_ROWS))
def test_split_rows_on_cuda(name: str, tmp_path: Path) -> None:
    """Long rows split over several blocks.  Few rows (``_SPLIT_ROWS``): a cooperative grid
    (MODE 2: each block reduces its share, the grid synchronises, every block combines the
    row's partials): batch norm's channels (the running statistics updated once per
    channel), layer norm's and group norm's rows (two levels: mean, then the centred
    squares; one level on the one-pass variant), softmax (a max, then a sum; the online
    pairs on the one-pass variant), maxima next to sums, var and std (unbiased, biased).
    More rows than fill whole waves (``_PHASED_ROWS``): the same partials in one launch per
    level and one for the outputs (MODE 3), reduced outputs and running statistics written
    once.  The float4 and scalar paths, and a small size on one block per row.  Every
    variant."""
    src, configs = {**_SPLIT_ROWS, **_PHASED_ROWS}[name]
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    p = load_torch_problem(path, alt_shapes=False)
    policy = BuiltinTorchPolicy()
    try:
        props = [policy.propose(p, t) for t in range(len(VARIANTS))]
    finally:
        policy.close()
    assert all("cp_launch_coop(" in prop.files["kernel.cu"] for prop in props)
    for turn, r in sorted(_run_on_cuda(path, props, configs, tmp_path).items()):
        assert r["ok"], f"{name} variant {VARIANTS[turn].name}: {r}"
