"""The ranker suite (examples/ranker/): every problem loads, plans and compiles (CPU only).

* C problems: loaded as ``cudaperf optimize`` does (``load_c_problem`` with the sizes
  ``main`` passes); the built-in policy's plan has at least two mappings, and every
  mapping's source compiles with nvcc for sm_90 (skipped without nvcc).
* PyTorch problems (skipped without torch): loaded at small test sizes, the built-in
  PyTorch policy fuses at least one kernel, and the ``kernel.cu`` of each of its three
  variants compiles with nvcc for sm_90 (skipped without nvcc).

To stay near a minute on two cores, the compiles run one per core and only the sources
that differ in structure get the full ``nvcc -arch=sm_90 -c`` (front end, device code and
the host compiler): per C problem the first mapping of each combination of kinds, per
PyTorch problem the first and last variants (scalar only, and every template).  The
others, C block-shape variants and the middle PyTorch variant, differ from one of those
in numbers or in one template; they get ``nvcc -arch=sm_90 -cubin``, which runs the whole
C++ front end (host code included: an undefined name or a bad call in the wrapper is an
error) and the device compiler, but not the host compiler.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cudaperf_cli.core import CProblem
from cudaperf_cli.policies.builtin import BuiltinPolicy
from cudaperf_cli.problems.c import load_c_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (a dependency there)
    import tomli as tomllib

SUITE = Path(__file__).parent.parent / "examples" / "ranker"
C_FILES = sorted(SUITE.glob("*.c"))
TORCH_FILES = sorted((SUITE / "torch").glob("*.py"))

NVCC = shutil.which("nvcc")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
JOBS = max(2, os.cpu_count() or 1)

#: Test sizes of examples/ranker/torch (README.md of the suite): every shape constant.
TORCH_SMALL: dict[str, dict[str, int]] = {
    "clamp_affine": {"batch_size": 8, "dim": 64},
    "l2_normalize_rows": {"batch_size": 8, "dim": 64},
    "layernorm_noaffine_3d": {"batch_size": 2, "seq_len": 4, "hidden": 16},
    "leaky_relu_act": {"batch_size": 8, "dim": 64},
    "log_softmax_rows": {"batch_size": 8, "dim": 64},
    "logsumexp_rows": {"batch_size": 8, "dim": 64},
    "min_dim1": {"batch_size": 2, "dim1": 16, "dim2": 32},
    "mish_act": {"batch_size": 2, "channels": 4, "length": 16},
    "row_amax": {"batch_size": 8, "dim": 64},
    "silu_scale_bias": {"batch_size": 8, "dim": 64},
    "std_dim1": {"batch_size": 2, "dim1": 16, "dim2": 32},
    "sumsq_rows": {"batch_size": 8, "dim": 64},
    "swish_residual": {"batch_size": 2, "seq_len": 4, "hidden": 16},
    "tanh_gate": {"batch_size": 8, "dim": 64},
}


def nvcc(src: str, cu: Path, full: bool) -> tuple[Path, subprocess.CompletedProcess]:
    """``nvcc -arch=sm_90 -c`` (``full``) or ``-cubin`` of ``src`` written to ``cu``."""
    cu.write_text(src)
    mode, out = ("-c", cu.with_suffix(".o")) if full else ("-cubin", cu.with_suffix(".cubin"))
    proc = subprocess.run(
        [NVCC or "nvcc", "-arch=sm_90", mode, "-o", str(out), str(cu)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    return cu, proc


def compile_all(jobs: list[tuple[str, Path, bool]]) -> None:
    """Compile ``(source, path.cu, full)`` jobs, one per core; every failure in one message."""
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        results = list(pool.map(lambda j: nvcc(*j), jobs))
    failed = [f"{cu.name}:\n{proc.stderr[-2000:]}" for cu, proc in results if proc.returncode != 0]
    assert not failed, "\n".join(failed)


# ---------------------------------------------------------------------------------------
# The suite itself
# ---------------------------------------------------------------------------------------


def test_suite_manifest_and_names() -> None:
    manifest = tomllib.loads((SUITE / "bench.toml").read_text())
    assert manifest["suite"]["name"] == "ranker"
    assert manifest["suite"]["files"] == ["*.c", "torch/*.py"]
    assert len(C_FILES) >= 12 and len(TORCH_FILES) >= 12
    # distinct from the bundled examples, so that pairs of both suites keep apart
    bundled = {p.stem for p in (SUITE.parent).glob("*.c")} | {p.stem for p in (SUITE.parent / "torch").glob("*.py")}
    ours = [p.stem for p in C_FILES + TORCH_FILES]
    assert not bundled & set(ours)
    assert len(set(ours)) == len(ours)
    assert sorted(p.stem for p in TORCH_FILES) == sorted(TORCH_SMALL)


def test_suite_loads_as_a_bench_suite() -> None:
    from cudaperf_cli.bench.suite import load_suite

    suite = load_suite(SUITE / "bench.toml")
    ids = sorted(p.id for p in suite.problems)
    assert ids == sorted([p.name for p in C_FILES] + [f"torch/{p.name}" for p in TORCH_FILES])


# ---------------------------------------------------------------------------------------
# C problems
# ---------------------------------------------------------------------------------------

POLICY = BuiltinPolicy()


@pytest.fixture(scope="module")
def c_problems() -> dict[str, CProblem]:
    return {f.stem: load_c_problem(f) for f in C_FILES}


@pytest.mark.parametrize("path", C_FILES, ids=[f.stem for f in C_FILES])
def test_c_problem_has_several_mappings(path: Path, c_problems: dict[str, CProblem]) -> None:
    p = c_problems[path.stem]
    assert p.sizes_source == "main"
    plan = POLICY.plan(p)
    assert len(plan) >= 2, [m.describe() for m in plan]
    assert len({m.describe() for m in plan}) == len(plan)


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_every_c_mapping_compiles_with_nvcc(c_problems: dict[str, CProblem], tmp_path: Path) -> None:
    jobs = []
    for name, p in c_problems.items():
        seen: set[tuple[str, ...]] = set()
        for t, m in enumerate(POLICY.plan(p)):
            kinds = tuple(n.kind for n in m.nests)  # block-shape variants share their default's
            jobs.append((POLICY.source(p, m), tmp_path / f"{name}_{t}.cu", kinds not in seen))
            seen.add(kinds)
    assert len(jobs) >= 2 * len(c_problems)
    compile_all(jobs)


# ---------------------------------------------------------------------------------------
# PyTorch problems
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_candidates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, list[dict[str, str]]]]:
    """name -> (plan, [files of variant 0, 1, 2]): one child loads every problem, then they
    are traced two at a time."""
    if not HAVE_TORCH:
        pytest.skip("torch is not installed")
    from cudaperf_cli.policies.builtin_torch import BuiltinTorchPolicy
    from cudaperf_cli.policies.builtin_torch.codegen import VARIANTS
    from cudaperf_cli.problems.pytorch import load_torch_problems

    loaded, errors = load_torch_problems(SUITE / "torch", constants=TORCH_SMALL, alt_shapes=False)
    assert not errors, errors
    policy = BuiltinTorchPolicy()

    def one(p) -> tuple[str, tuple[object, list[dict[str, str]]]]:
        plan = policy.plan(p)  # traces in a child process
        return p.name, (plan, [policy.propose(p, t).files for t in range(len(VARIANTS))])

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, loaded))


def test_torch_problems_fuse_at_least_one_kernel(torch_candidates) -> None:
    assert sorted(torch_candidates) == sorted(TORCH_SMALL)
    for name, (plan, variants) in torch_candidates.items():
        assert len(plan.kernels) >= 1, (name, plan.describe())
        assert plan.describe().startswith("fused: "), (name, plan.describe())
        assert len(variants) == 3, name
        sources = [v["kernel.cu"] for v in variants]
        assert len(set(sources)) == 3, f"{name}: the variants' kernel.cu are not distinct"


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_every_torch_variant_compiles_with_nvcc(torch_candidates, tmp_path: Path) -> None:
    jobs = []
    for name, (_, variants) in torch_candidates.items():
        for t, files in enumerate(variants):
            jobs.append((files["kernel.cu"], tmp_path / f"{name}_{t}.cu", t in (0, len(variants) - 1)))
    compile_all(jobs)
