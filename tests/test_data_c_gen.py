"""The C problem generator (cudaperf_cli/data/c_gen.py): determinism, variety, configurations,
and that its files load as a user's file and their reference runs (CPU; gcc and tree-sitter)."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest

from cudaperf_cli.data import c_gen
from cudaperf_cli.data.spec import CONFIG_NAMES

DRAWS = 300


def draw(family: str, i: int, seed: int = 0):
    return c_gen.generate_c(random.Random(f"{seed}:c:{i}"), family)


def test_same_state_same_problem_and_families_differ() -> None:
    for fam in c_gen.FAMILIES:
        a, b = draw(fam, 3), draw(fam, 3)
        assert a == b
        assert a.family == fam and a.kind == "c" and a.function == fam and a.suffix == ".c"
        assert a.structure_key.startswith(fam + "|")
    assert draw("map1d", 1).source != draw("map1d", 2).source


@pytest.mark.parametrize("family", c_gen.FAMILIES)
def test_each_family_has_many_structures(family: str) -> None:
    keys = {draw(family, i).structure_key for i in range(DRAWS)}
    assert len(keys) >= 90, f"{family}: only {len(keys)} distinct structures in {DRAWS} draws"


def test_structure_key_ignores_weights_and_sizes() -> None:
    text = "void f(int n, float x[n]) { y[i] = 0.25f * x[i] + 1.5 * x[i + 1]; }"
    other = "void f(int n, float x[n]) { y[i] = 0.75f * x[i] + 2.0 * x[i + 1]; }"
    shifted = "void f(int n, float x[n]) { y[i] = 0.25f * x[i] + 1.5 * x[i + 2]; }"
    key = c_gen.normalised_structure("fam", text)
    assert key == c_gen.normalised_structure("fam", other)
    assert key != c_gen.normalised_structure("fam", shifted)  # an offset is structure
    # the same draw with other sizes has the same key: sizes are not in the function text
    p = draw("stencil2d", 5)
    assert not re.search(r"\b\d{3,}\b", p.structure_key)


def _defines(source: str) -> dict[str, int]:
    return {m.group(1).lower(): int(m.group(2)) for m in re.finditer(r"^#define (\w+) (\d+)$", source, re.M)}


@pytest.mark.parametrize("family", c_gen.FAMILIES)
def test_configurations(family: str) -> None:
    for i in range(12):
        p = draw(family, i)
        assert [c["name"] for c in p.configs] == list(CONFIG_NAMES)
        small, main, large = (p.config(n) for n in CONFIG_NAMES)
        assert set(small) == set(main) == set(large)
        assert _defines(p.source) == main  # main() passes exactly the main configuration
        for name, v in small.items():
            assert v >= 1 and v <= max(main[name], 3)
            if name != "tsteps":
                assert v % 2 == 1, (family, name, small)
        assert all(large[n] >= main[n] for n in main)
        by = {c["name"]: c for c in p.configs}
        assert by["main"]["bytes"] <= c_gen.MAIN_BYTES[1] * 1.01 or by["main"]["flop"] <= c_gen.MAIN_FLOP
        assert by["main"]["flop"] <= c_gen.MAIN_FLOP * 1.01
        assert by["large"]["flop"] <= c_gen.LARGE_FLOP * 1.01
        assert by["large"]["bytes"] <= c_gen.LARGE_BYTES[1] * 1.01
        assert max(small.values()) <= 101


needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")


@needs_cc
@pytest.mark.parametrize("family", c_gen.FAMILIES)
def test_loads_as_a_user_file_and_reference_runs(family: str, tmp_path: Path) -> None:
    """One draw per family through the dataset check (loader at every configuration, init
    function, the reference built and run at small_odd, the built-in policy's plan)."""
    from cudaperf_cli.data.check import check_c

    p = draw(family, 7, seed=11)
    path = tmp_path / f"{family}.c"
    path.write_text(p.source)
    entry = {"id": f"c/{family}.c", "function": p.function, "configs": p.configs}
    res = check_c(path, entry, tmp_path / "work", compile_mode="none", arch="sm_90")
    assert res.loads and res.reference == "ok", (res.error, p.source)
    assert res.error is None

    from cudaperf_cli.problems.c import load_c_problem

    problem = load_c_problem(path)  # found without --function: the only ported candidate
    assert problem.function == family and problem.init is not None and problem.init.name == f"init_{family}"


@needs_cc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_candidates_compile(tmp_path: Path) -> None:
    from cudaperf_cli.data.check import check_c

    for family in ("stencil2d", "matmul", "norm_rows"):
        p = draw(family, 2, seed=5)
        path = tmp_path / f"{family}.c"
        path.write_text(p.source)
        res = check_c(path, {"id": path.name, "function": family, "configs": p.configs}, tmp_path / family,
                      compile_mode="first", arch="sm_90")
        assert res.candidates > 0 and res.compiled == 1 and res.compile_failed == 0, res


def test_no_draw_reads_a_sum_back_as_its_old_value_or_sums_millions_in_float() -> None:
    """Two grammar warts the H200 measurement showed: an alpha/beta matvec summed into
    y[i] itself then read ``beta * y[i]`` (computing (alpha + beta) A x), and a float sum
    of a whole array in one float (the reference's rounding above the tolerance)."""
    seen_ab = seen_full = 0
    for i in range(DRAWS):
        src = draw("matvec", i).source
        if "beta * y[i]" in src:
            seen_ab += 1
            assert "y[i] += " not in src, src
        k = draw("reduction", i).knobs
        if k["pattern"] == "full" and k["dtype"] == "float" and k["op"] not in ("max", "min"):
            seen_full += 1
            assert k["accumulate"] == "double" and "double s[1]" in draw("reduction", i).source, k
    assert seen_ab > 5 and seen_full > 5, (seen_ab, seen_full)
