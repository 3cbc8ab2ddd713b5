"""Bench manifests for suites as published (CPU only): the ``sources`` key, absolute
``[suite] files`` outside the manifest's folder and the ids they get."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudaperf_cli.bench.suite import PROBLEM_KEYS, load_suite
from cudaperf_cli.core import ProblemError


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    for rel in ("a/gemm/gemm.c", "b/lu/lu.c", "utilities/poly.c"):
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("void f(int n, double *a) { for (int i = 0; i < n; i++) a[i] = 0; }\n")
    return root


def test_sources_key_relative_to_the_manifest(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "bench.toml").write_text(
        '[problems."a/gemm/gemm.c"]\n'
        'includes = ["utilities"]\n'
        'sources = ["utilities/poly.c", "./utilities/poly.c"]\n'
        "sizes = { n = 4 }\n"
    )
    suite = load_suite(root / "bench.toml")
    (p,) = suite.problems
    src = str((root / "utilities/poly.c").resolve())
    assert "sources" in PROBLEM_KEYS
    assert p.sources == (src,)  # absolute, once
    # positional files right after FILE (the runner puts these after the problem's path)
    assert p.optimize_args() == [src, "--size", "n=4", "-I", str((root / "utilities").resolve())]


@pytest.mark.parametrize(
    "value, message",
    [
        ('"utilities/poly.c"', "'sources' must be a list of C files"),
        ("[1]", "'sources' must be a list of C files"),
        ('[""]', "'sources' must be a list of C files"),
        ('["utilities/missing.c"]', r"source 'utilities/missing.c' is not a file"),
        ('["utilities"]', r"source 'utilities' is not a file"),
    ],
)
def test_bad_sources_are_one_line(tmp_path: Path, value: str, message: str) -> None:
    root = _tree(tmp_path)
    (root / "bench.toml").write_text(f'[problems."a/gemm/gemm.c"]\nsources = {value}\n')
    with pytest.raises(ProblemError, match=message) as info:
        load_suite(root / "bench.toml")
    assert "\n" not in str(info.value)


def test_sources_for_a_pytorch_problem_are_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "m.py").write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    (root / "bench.toml").write_text('[problems."m.py"]\nsources = ["utilities/poly.c"]\n')
    with pytest.raises(ProblemError, match="'sources' is for C problems only"):
        load_suite(root / "bench.toml")


def test_suite_root_for_a_manifest_outside_the_suite(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.toml").write_text(
        "[suite]\n"
        f'root = "{root}"\n'
        'files = ["a/gemm/gemm.c", "b/*/*.c"]\n'
        '[problems."a/gemm/gemm.c"]\n'
        'includes = ["utilities"]\n'
        'sources = ["utilities/poly.c"]\n'
    )
    suite = load_suite(out / "bench.toml")
    assert suite.root == root.resolve()
    assert [p.id for p in suite.problems] == ["a/gemm/gemm.c", "b/lu/lu.c"]
    gemm, lu = suite.problems
    assert gemm.path == (root / "a/gemm/gemm.c").resolve()
    assert gemm.includes == (str((root / "utilities").resolve()),)
    assert gemm.sources == (str((root / "utilities/poly.c").resolve()),)
    assert lu.sources == ()


def test_suite_root_relative_to_the_manifest(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.toml").write_text('[suite]\nroot = "../suite"\nfiles = ["b/lu/lu.c"]\n')
    assert [p.id for p in load_suite(out / "bench.toml").problems] == ["b/lu/lu.c"]


@pytest.mark.parametrize("value, message", [('"nothere"', "is not a folder"),
                                            ('""', "root must be a folder"),
                                            ("3", "root must be a folder")])
def test_bad_suite_root(tmp_path: Path, value: str, message: str) -> None:
    root = _tree(tmp_path)
    (root / "bench.toml").write_text(f'[suite]\nroot = {value}\nfiles = ["b/lu/lu.c"]\n')
    with pytest.raises(ProblemError, match=message):
        load_suite(root / "bench.toml")


def test_absolute_files_outside_the_manifest_folder(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    gemm = root / "a/gemm/gemm.c"
    (out / "bench.toml").write_text(
        "[suite]\n"
        f'files = ["{gemm}", "{root}/b/*/*.c"]\n'
        '[problems."gemm.c"]\n'
        f'sources = ["{root}/utilities/poly.c"]\n'
    )
    suite = load_suite(out / "bench.toml")
    # outside the root, a file's id is its name
    assert [p.id for p in suite.problems] == ["gemm.c", "lu.c"]
    assert suite.problems[0].path == gemm.resolve()
    assert suite.problems[0].sources == (str((root / "utilities/poly.c").resolve()),)
