"""benchmarks/polybench_acc.py: the table against a bench report (synthetic data), and, with
``CUDAPERF_POLYBENCH`` and ``CUDAPERF_POLYBENCH_ACC`` set to checkouts of PolyBench/C 4.2.1
and PolyBench-ACC (they skip without them), the sizes and the builds of the real suites."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

acc_mod = load_benchmark("polybench_acc")

GEMM_SIZES = {"NI": 1000, "NJ": 1100, "NK": 1200}


def _report(problems: list[dict]) -> dict:
    return {"kind": "cudaperf-bench-report", "problems": problems}


def _problem(name: str, status: str, ms: float | None, desc: str = "") -> dict:
    return {"id": f"linear-algebra/blas/{name}/{name}.c", "status": status,
            "correct": status in ("correct", "slow"),
            "best": {"gpu_ms": ms, "description": desc} if ms is not None else None}


def test_compare_joins_the_reports_and_the_hand_written_times():
    acc = {"kind": "polybench-acc-times", "sizes": {"gemm": GEMM_SIZES, "mvt": {"N": 2000}},
           "kernels": [{"kernel": "gemm", "gpu_ms": 2.5, "non_matching": 7, "build_error": "",
                        "error": ""},
                       {"kernel": "mvt", "gpu_ms": 0.8, "non_matching": None, "build_error": "",
                        "error": ""},
                       {"kernel": "3mm", "gpu_ms": None, "non_matching": None,
                        "build_error": "nvcc exit 2: ...", "error": ""}]}
    first = _report([_problem("gemm", "correct", 1.0, "grid2d"), _problem("mvt", "wrong", None)])
    rerun = _report([_problem("mvt", "correct", 0.05, "warp_reduce")])
    merged = acc_mod.merge_reports([first, rerun])
    assert [p["status"] for p in merged["problems"]] == ["correct", "correct"]  # mvt re-run
    res = acc_mod.compare(acc, merged)
    rows = {r["kernel"]: r for r in res["rows"]}
    assert rows["gemm"]["ratio"] == pytest.approx(2.5)
    # PolyBench/C's gemm: NI * NJ * (2 NK + 1) FLOP in 1.0 ms
    assert rows["gemm"]["gflops"] == pytest.approx(1000 * 1100 * 2401 / 1e6)
    assert rows["gemm"]["acc_non_matching"] == 7
    assert rows["mvt"]["gbs"] == pytest.approx(8 * 2000 * 2000 / (0.05 * 1e6))
    assert rows["3mm"]["status"] == "not run" and rows["3mm"]["ratio"] is None
    assert res["n"] == 2 and res["geomean"] == pytest.approx(math.sqrt(2.5 * 16))
    text = acc_mod.compare_table(res)
    assert "hand-written fails its own check: 7 elements" in text
    assert "over 2 kernels with both" in text


def test_bad_inputs_are_one_line_and_exit_2(tmp_path, capsys):
    assert acc_mod.main(["run", "--acc", str(tmp_path), "--polybench", str(tmp_path),
                         "-o", str(tmp_path / "a.json")]) == 2
    assert "not a PolyBench-ACC checkout" in capsys.readouterr().err
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"kind": "other"}))
    (tmp_path / "acc.json").write_text(json.dumps({"kind": "polybench-acc-times"}))
    assert acc_mod.main(["compare", str(tmp_path / "acc.json"), str(bad)]) == 2
    assert "not a cudaperf bench report" in capsys.readouterr().err


PB = os.environ.get("CUDAPERF_POLYBENCH")
ACC = os.environ.get("CUDAPERF_POLYBENCH_ACC")


@pytest.mark.skipif(not PB, reason="set CUDAPERF_POLYBENCH to a PolyBench/C 4.2.1 checkout")
def test_sizes_are_read_from_polybench():
    root = Path(PB)
    sizes = acc_mod.polybench_sizes(root, "gemm", "LARGE")
    assert sizes == GEMM_SIZES  # the header's macros only, not the compiler's predefined ones
    assert acc_mod.polybench_sizes(root, "bicg", "MINI")["M"] == 38


@pytest.mark.skipif(not (PB and ACC), reason="set CUDAPERF_POLYBENCH and CUDAPERF_POLYBENCH_ACC")
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_hand_written_kernels_build_at_polybench_sizes(tmp_path):
    """Without a GPU every kernel is built and not run; 3mm does not compile at non-square
    sizes (PolyBench-ACC passes its arrays in another order than its function declares)."""
    res = acc_mod.run_acc(Path(ACC), Path(PB), tmp_path / "acc.json", jobs=2,
                          only=["gemm", "atax", "3mm"])
    rows = {r["kernel"]: r for r in res["kernels"]}
    assert rows["gemm"]["built"] and rows["gemm"]["defines"] == GEMM_SIZES
    assert rows["atax"]["defines"] == {"NX": 1900, "NY": 2100}
    assert not rows["3mm"]["built"] and "nvcc exit" in rows["3mm"]["build_error"]
    assert json.loads((tmp_path / "acc.json").read_text())["kind"] == "polybench-acc-times"
