"""benchmarks/polybench.py, and PolyBench/C 4.2.1 as published.

The first tests build a tiny stand-in folder of our own (no PolyBench code) for the manifest
writer and its checks.  The last ones need the real suite: set
``CUDAPERF_POLYBENCH=/path/to/PolyBenchC-4.2.1`` (they skip without it); every one of the 30
kernels is loaded as a user runs it, its reference built with ``utilities/polybench.c`` and
run through the reference-only evaluation job, at the MINI dataset (LARGE is for
``python benchmarks/polybench.py check``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cudaperf_cli.bench.suite import load_suite
from cudaperf_cli.core import ProblemError
from cudaperf_cli.policies.builtin.emulate import have_emulation
from tests.conftest import load_benchmark

pb = load_benchmark("polybench")


def _stand_in(tmp_path: Path, skip: str | None = None) -> Path:
    """A folder shaped like PolyBench/C 4.2.1: README, utilities, one tiny kernel per name."""
    root = tmp_path / "pb"
    (root / "utilities").mkdir(parents=True)
    (root / "README").write_text("Stand-in for tests: PolyBench/C 4.2.1 layout\n")
    (root / "utilities" / "polybench.h").write_text("void *pb_alloc(int n);\n")
    (root / "utilities" / "polybench.c").write_text(
        "#include <stdlib.h>\nvoid *pb_alloc(int n) { return calloc(n, 8); }\n"
    )
    for name in pb.KERNELS:
        if name == skip:
            continue
        d = root / "group" / name
        d.mkdir(parents=True)
        (d / f"{name}.h").write_text("#ifdef MINI_DATASET\n#define N 7\n#else\n#define N 40\n#endif\n")
        fn = "kernel_" + name.replace("-", "_")
        (d / f"{name}.c").write_text(
            f'#include <polybench.h>\n#include "{name}.h"\n'
            "static void init_array(int n, double A[N]) {\n"
            "  double *t = pb_alloc(n); for (int i = 0; i < n; i++) A[i] = i + t[i]; }\n"
            f"static void {fn}(int n, double A[N]) {{\n#pragma scop\n"
            "  for (int i = 0; i < n; i++) A[i] = 2 * A[i];\n#pragma endscop\n}\n"
            f"int main(void) {{ int n = N; double A[N]; init_array(n, A); {fn}(n, A); return 0; }}\n"
        )
    (root / "group" / "nussinov" / "Nussinov.orig.c").write_text("int main(void) { return 0; }\n")
    return root


def test_not_polybench_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ProblemError, match="no such folder"):
        pb.polybench_root(tmp_path / "nothere")
    with pytest.raises(ProblemError, match="is not a PolyBench/C checkout: no utilities/polybench.c"):
        pb.polybench_root(tmp_path)
    root = _stand_in(tmp_path)
    (root / "README").write_text("PolyBench/C 3.2\n")
    with pytest.raises(ProblemError, match="is not PolyBench/C 4.2.1"):
        pb.polybench_root(root)


def test_no_folder_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pb.ENV, raising=False)
    with pytest.raises(ProblemError, match="pass --polybench DIR or set"):
        pb.polybench_root(None)


def test_missing_kernel_is_named(tmp_path: Path) -> None:
    root = _stand_in(tmp_path, skip="lu")
    with pytest.raises(ProblemError, match=r"missing lu$"):
        pb.find_kernels(pb.polybench_root(root))


def test_manifest_of_the_stand_in(tmp_path: Path) -> None:
    root = pb.polybench_root(_stand_in(tmp_path))
    kernels, left_out = pb.find_kernels(root)
    assert len(kernels) == 30 and [f.name for f in left_out] == ["Nussinov.orig.c"]
    out = tmp_path / "elsewhere" / "bench.toml"
    assert pb.main(["manifest", "--polybench", str(root), "-o", str(out), "--dataset", "MINI"]) == 0
    suite = load_suite(out)
    assert suite.name == "polybench-4.2.1-mini" and len(suite.problems) == 30
    gemm = next(p for p in suite.problems if p.id == "group/gemm/gemm.c")
    assert gemm.path == root / "group" / "gemm" / "gemm.c"
    assert gemm.defines == ("MINI_DATASET",)
    assert gemm.includes == (str(root / "utilities"), str(root / "group" / "gemm"))
    assert gemm.sources == (str(root / "utilities" / "polybench.c"),)
    # optimize FILE utilities/polybench.c ... (the source is a positional file)
    assert gemm.optimize_args()[0] == str(root / "utilities" / "polybench.c")


def test_manifest_refuses_a_folder_as_output(tmp_path: Path, capsys) -> None:
    root = _stand_in(tmp_path)
    assert pb.main(["manifest", "--polybench", str(root), "-o", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_check_of_the_stand_in(tmp_path: Path, capsys) -> None:
    root = _stand_in(tmp_path)
    code = pb.main(["check", "--polybench", str(root), "--dataset", "MINI", "--only", "gemm",
                    "lu", "--no-policy", "--work", str(tmp_path / "w"),
                    "--json", str(tmp_path / "rows.json")])
    assert code == 0
    out = capsys.readouterr().out
    assert "| gemm | ok | ok |" in out and "| lu | ok | ok |" in out


@pytest.mark.skipif(not have_emulation(), reason="needs g++ with C++20 <barrier>")
def test_emulate_of_the_stand_in(tmp_path: Path, capsys) -> None:
    """The stand-in's kernels (A[i] = 2 * A[i]) through the emulation and the verifier."""
    root = _stand_in(tmp_path)
    out_json = tmp_path / "rows.json"
    code = pb.main(["emulate", "--polybench", str(root), "--only", "gemm", "--turns", "2",
                    "--work", str(tmp_path / "w"), "--json", str(out_json)])
    assert code == 0
    out = capsys.readouterr().out
    assert "| gemm | 1 | grid1d i->x block 256 | correct | correct on 3 configuration(s)" in out
    assert "kernels: 1; with candidates: 1; without (refused or not loaded): 0" in out
    assert "candidates: 2; correct 2" in out
    rows = json.loads(out_json.read_text())
    assert [(r["turn"], r["status"]) for r in rows] == [(0, "correct"), (1, "correct")]
    # bad input: one line, exit 2, before any work
    for bad, says in ((["--turns", "0"], "--turns must be at least 1"),
                      (["--timeout", "-5"], "--timeout must be more than 0 seconds"),
                      (["--json", str(tmp_path / "nodir" / "r.json")], "no such folder"),
                      (["--json", str(tmp_path)], "is a folder"),
                      (["--work", str(out_json)], "is a file, not a folder")):
        assert pb.main(["emulate", "--polybench", str(root), *bad]) == 2, bad
        err = capsys.readouterr().err
        assert says in err and "machine:" not in err and "Traceback" not in err, (bad, err)


def test_optimize_command_puts_the_source_after_the_file(tmp_path: Path) -> None:
    root = pb.polybench_root(_stand_in(tmp_path))
    kernel = root / "group" / "lu" / "lu.c"
    cmd = pb.optimize_command(root, kernel, tmp_path / "w", "SMALL")
    i = cmd.index("optimize")
    assert cmd[i + 1 : i + 3] == [str(kernel), str(root / "utilities" / "polybench.c")]
    assert ["-D", "SMALL_DATASET"] == cmd[i + 3 : i + 5]
    assert cmd[cmd.index("--turns") + 1] == "1" and "--json" in cmd


# ---------------------------------------------------------------------------------------
# The real suite (skipped without $CUDAPERF_POLYBENCH)
# ---------------------------------------------------------------------------------------

REAL = os.environ.get(pb.ENV)
needs_polybench = pytest.mark.skipif(not REAL, reason=f"set {pb.ENV} to a PolyBench/C 4.2.1 checkout")


@needs_polybench
def test_manifest_of_polybench(tmp_path: Path) -> None:
    root = pb.polybench_root(REAL)
    out = pb.write_manifest(root, tmp_path / "bench.toml")
    suite = load_suite(out)
    assert sorted(p.path.stem for p in suite.problems) == sorted(pb.KERNELS)
    for p in suite.problems:
        assert p.kind == "c" and p.id == p.path.relative_to(root).as_posix()
        assert p.sources == (str(root / "utilities" / "polybench.c"),)
        assert p.includes[0] == str(root / "utilities") and p.defines == ("LARGE_DATASET",)


@needs_polybench
@pytest.mark.parametrize("name", pb.KERNELS)
def test_polybench_kernel_loads_builds_and_runs(name: str, tmp_path: Path) -> None:
    root = pb.polybench_root(REAL)
    kernels, _ = pb.find_kernels(root)
    kernel = next(k for k in kernels if k.stem == name)
    row = pb.check_kernel(root, kernel, tmp_path, dataset="MINI", policy=False, timeout_s=120)
    assert row.load == "ok", row.load
    assert row.function == "kernel_" + name.replace("-", "_")
    assert row.init == "init_array"  # every 4.2.1 kernel has one, and it is used
    assert row.reference == "ok", row.reference
    assert row.status == "reference_only" and row.reference_s is not None


@needs_polybench
@pytest.mark.parametrize("name", ["gemm", "bicg", "gramschmidt"])
def test_polybench_candidates_verify_on_the_cpu_emulation(name: str, tmp_path: Path) -> None:
    """gemm (interchange and fusion), bicg (distribution): every candidate of the first three
    correct at MINI; gramschmidt (fewer rows than columns: its last norms are rounding
    noise): the parallel sums are wrong, the source-order entry is correct."""
    root = pb.polybench_root(REAL)
    kernel = next(k for k in pb.find_kernels(root)[0] if k.stem == name)
    rows = pb.emulate_kernel(root, kernel, tmp_path, dataset="MINI", turns=3)
    by_turn = {r.turn: r for r in rows}
    if name == "gramschmidt":
        exact = [r for r in rows if r.mapping.startswith("sums in source order: ")]
        assert len(exact) == 1 and exact[0].status == "correct", rows
    else:
        assert len(rows) == 3 and all(r.status == "correct" for r in rows), rows
    if name == "gemm":
        assert "(k, j interchanged, 2 j loops fused)" in by_turn[0].mapping
