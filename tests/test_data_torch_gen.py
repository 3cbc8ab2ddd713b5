"""The PyTorch problem generator (``cudaperf_cli.data.torch_gen``): determinism, structure
keys, configurations, the degenerate check, and generated files through the loader and the
built-in PyTorch policy (CPU only).
"""

from __future__ import annotations

import ast
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf_cli.data import torch_gen  # noqa: E402
from cudaperf_cli.data.spec import CONFIG_NAMES, GeneratedProblem  # noqa: E402


def draw(family: str, i: int, seed: int = 0) -> GeneratedProblem:
    return torch_gen.generate_torch(random.Random(f"{seed}:torch:{family}:{i}"), family)


def module_constants(source: str) -> dict[str, int]:
    """Top-level ``NAME = <int>`` of a file."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            out[node.targets[0].id] = node.value.value
    return out


def test_families_are_the_split_keys() -> None:
    assert len(torch_gen.FAMILIES) == len(set(torch_gen.FAMILIES)) >= 8
    assert all(f.isidentifier() and f == f.lower() for f in torch_gen.FAMILIES)
    with pytest.raises(KeyError):
        torch_gen.generate_torch(random.Random(0), "no_such_family")


def test_same_rng_state_same_problem() -> None:
    for family in torch_gen.FAMILIES:
        for i in range(3):
            a, b = draw(family, i), draw(family, i)
            assert a == b
            assert a.kind == "torch" and a.family == family and a.function is None
    assert draw("elementwise_chain", 0).source != draw("elementwise_chain", 1).source


def test_each_family_has_many_structures() -> None:
    """>= 50 distinct keys in 300 draws per family (the dataset asks ~110 per family and
    gives up on a family after 200 duplicates in a row); numbers never enter the key."""
    for family in torch_gen.FAMILIES:
        keys = set()
        for i in range(300):
            p = draw(family, i)
            keys.add(p.structure_key)
            assert p.structure_key.startswith(family + ":")
            json.dumps(p.knobs)  # JSON values only
            for word in ("batch_size", "numbers"):
                assert word not in p.structure_key
        assert len(keys) >= 50, (family, len(keys))


def test_configurations() -> None:
    """small_odd / main / large with one set of names; main is the file's constants; every
    small_odd size odd and small; main and large sized as asked (the FLOP and footprint
    estimates are the generator's)."""
    for family in torch_gen.FAMILIES:
        for i in range(12):
            p = draw(family, i)
            assert [c["name"] for c in p.configs] == list(CONFIG_NAMES)
            names = [list(c["sizes"]) for c in p.configs]
            assert names[0] == names[1] == names[2]
            assert module_constants(p.source) == p.config("main")
            small = p.config("small_odd")
            assert all(v % 2 == 1 and 3 <= v <= 99 for v in small.values()), small
            assert all(v >= 1 for c in p.configs for v in c["sizes"].values())
            assert p.config("large") != p.config("main")
            b = [c["bytes"] for c in p.configs]  # the footprint estimate, like C's configs
            assert b[0] < b[1] < b[2] and 8 * 2**20 * 0.5 <= b[1] <= 64 * 2**20 * 1.05, (family, b)
            assert all(c["flop"] > 0 for c in p.configs if "flop" in c)
            text = p.source
            assert text.startswith('"""') and "import torch\nimport torch.nn as nn\n" in text
            assert "class Model(nn.Module):" in text and "def get_inputs():" in text and "def get_init_inputs():" in text
            assert ("import torch.nn.functional as F" in text) == ("F." in text.split('"""', 2)[2])
            compile(text, "<generated>", "exec")


def _footprint(source: str, sizes: dict[str, int]) -> int:
    """Bytes of inputs, outputs, parameters and buffers, from fake tensors (no memory)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from cudaperf_cli.problems.pytorch import override_constants

    ns: dict = {}
    exec(compile(override_constants(source, sizes), "<generated>", "exec"), ns)
    with FakeTensorMode():
        model = ns["Model"](*ns["get_init_inputs"]())
        inputs = ns["get_inputs"]()
        out = model(*inputs)
        tensors = [*inputs, *(out if isinstance(out, (tuple, list)) else [out]),
                   *model.parameters(), *model.buffers()]
        return sum(t.numel() * t.element_size() for t in tensors)


def test_main_and_large_footprints() -> None:
    for family in torch_gen.FAMILIES:
        for i in range(2):
            p = draw(family, i)
            small = _footprint(p.source, p.config("small_odd"))
            main = _footprint(p.source, p.config("main"))
            large = _footprint(p.source, p.config("large"))
            assert small <= 4 * 110_000, (family, i, small)
            assert 8 << 20 <= main <= 64 << 20, (family, i, main / 2**20)
            assert 256 << 20 <= large <= 1 << 30, (family, i, large / 2**20)


def test_draws_run_and_are_rarely_degenerate() -> None:
    degenerate = []
    total = 0
    for family in torch_gen.FAMILIES:
        for i in range(3):
            p = draw(family, i)
            ns: dict = {}
            from cudaperf_cli.problems.pytorch import override_constants

            exec(compile(override_constants(p.source, p.config("small_odd")), "<generated>", "exec"), ns)
            torch.manual_seed(0)
            model = ns["Model"](*ns["get_init_inputs"]())
            with torch.no_grad():
                out = model(*ns["get_inputs"]())
            assert isinstance(out, torch.Tensor)
            assert bool(torch.isfinite(out.double()).all()), (family, i)
            why = torch_gen.is_degenerate(p.source, p.config("small_odd"))
            total += 1
            if why is not None:
                assert why.split(":")[0] in ("not finite", "all zeros", "constant output", "does not depend on its input")
                degenerate.append((family, i, why))
    assert len(degenerate) / total < 0.2, degenerate


PLAIN = '''"""A test file."""
import torch
import torch.nn as nn

batch_size = 8
dim = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return BODY


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("body, head", [
    ("x * 0", "all zeros"),
    ("x * 0 + 2.5", "constant output"),
    ("self.w * 1.0 + 0 * x.sum()", "does not depend on its input"),
    ("torch.log(x)", "not finite"),
    ("x.sum() * 0", "all zeros"),
])
def test_hand_written_degenerate_modules_are_flagged(body: str, head: str) -> None:
    why = torch_gen.is_degenerate(PLAIN.replace("BODY", body), {"batch_size": 3, "dim": 5})
    assert why is not None and why.split(":")[0] == head, why
    assert "\n" not in why


def test_a_healthy_module_is_not_flagged() -> None:
    assert torch_gen.is_degenerate(PLAIN.replace("BODY", "torch.relu(x) * self.w"), {"batch_size": 3, "dim": 5}) is None
    assert torch_gen.is_degenerate(PLAIN.replace("BODY", "x.sum()"), {"batch_size": 3, "dim": 5}) is None  # a scalar
    with pytest.raises(ValueError):  # a constant the file does not bind
        torch_gen.is_degenerate(PLAIN.replace("BODY", "x"), {"nope": 3})


@pytest.mark.slow
def test_generated_files_load_and_the_builtin_policy_plans_or_refuses(tmp_path: Path) -> None:
    """Two draws per family through the loader at their small_odd constants (one child for
    the folder; one file through load_torch_problem), then the built-in policy on a few:
    a plan or a PolicyRefusal, never another error."""
    from cudaperf_cli.policies.base import PolicyRefusal
    from cudaperf_cli.policies.builtin_torch import BuiltinTorchPolicy
    from cudaperf_cli.problems.pytorch import load_torch_problem, load_torch_problems

    drawn = {}
    for family in torch_gen.FAMILIES:
        for i in range(2):
            p = draw(family, i, seed=7)
            name = f"{family}_{i}"
            (tmp_path / f"{name}.py").write_text(p.source)
            drawn[name] = p
    constants = {n: p.config("small_odd") for n, p in drawn.items()}
    problems, errors = load_torch_problems(tmp_path, alt_shapes=False, constants=constants)
    assert not errors, [(e.path, e.message) for e in errors]
    assert len(problems) == len(drawn)
    for prob in problems:
        assert dict(prob.constants) == constants[prob.name]
        assert not prob.degenerate, prob.name
    one = load_torch_problem(tmp_path / "norm_0.py", constants=constants["norm_0"], alt_shapes=False)
    assert one.outputs

    by_name = {p.name: p for p in problems}
    picked = [by_name[n] for n in ("elementwise_chain_0", "gemm_tail_0", "norm_0", "scan_0")]

    def plan(prob):
        try:
            return prob.name, BuiltinTorchPolicy().plan(prob)
        except PolicyRefusal as exc:
            return prob.name, exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        plans = dict(pool.map(plan, picked))
    ew = plans["elementwise_chain_0"]
    assert not isinstance(ew, Exception) and ew.kernels, ew
    for name, got in plans.items():
        assert isinstance(got, PolicyRefusal) or got.describe(), name
