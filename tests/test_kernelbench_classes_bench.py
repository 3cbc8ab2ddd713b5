"""benchmarks/kernelbench_classes.py on a report of our own making (the real one comes from
``cudaperf bench`` over KernelBench on a GPU: see docs/suites-h200.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_benchmark


def _problem(level: str, name: str, status: str, ms: float | None, eager: float, compile_: float,
             footprint: int = 4_000_000_000) -> dict:
    return {"id": name, "file": f"/kb/KernelBench/{level}/{name}", "status": status,
            "best": None if ms is None else {"gpu_ms": ms}, "footprint_bytes": footprint,
            "speedups": {"kernel": eager, "compile": compile_} if status in ("correct", "slow") else {}}


def _report(tmp_path: Path, problems: list[dict], name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"problems": problems}))
    return path


def test_classes_from_file_names() -> None:
    m = load_benchmark("kernelbench_classes")
    cls = m.operator_class
    assert cls("19_ReLU.py", "level1") == "activation"
    assert cls("24_LogSoftmax.py", "level1") == "softmax"
    assert cls("33_BatchNorm.py", "level1") == "norm"
    assert cls("51_Argmax_over_a_dimension.py", "level1") == "index reduction"
    assert cls("92_cumsum_exclusive.py", "level1") == "scan"
    assert cls("96_HuberLoss.py", "level1") == "loss"
    assert cls("1_Square_matrix_multiplication_.py", "level1") == "gemm/conv"
    assert cls("47_Sum_reduction_over_a_dimension.py", "level1") == "reduction"
    assert cls("11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm.py", "level2") == "gemm/conv + norm"
    assert cls("6_Conv3d_Softmax_MaxPool_MaxPool.py", "level2") == "gemm/conv + pooling"
    assert cls("12_Gemm_Multiply_LeakyReLU.py", "level2") == "gemm/conv + elementwise"
    assert cls("18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py", "level2") == "gemm/conv + pooling"


def test_table_pools_reports_and_measures_bandwidth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = load_benchmark("kernelbench_classes")
    a = _report(tmp_path, [
        _problem("level1", "19_ReLU.py", "correct", 1.0, 1.0, 1.5),       # 4e9 B in 1 ms: 4000 GB/s
        _problem("level1", "20_LeakyReLU.py", "correct", 2.0, 4.0, 1.0),  # 2000 GB/s
        _problem("level1", "89_cumsum.py", "refused", None, 0, 0),
    ], "a.json")
    b = _report(tmp_path, [
        _problem("level1", "20_LeakyReLU.py", "correct", 1.0, 4.0, 4.0),  # the later report wins
        _problem("level2", "1_Conv2D_ReLU_BiasAdd.py", "slow", 10.0, 0.5, 0.25),
    ], "b.json")
    rows = {(r["level"], r["class"]): r for r in m.class_table(m.load_problems([a, b]))}
    act = rows[("level1", "activation")]
    assert (act["files"], act["accepted"], act["correct"]) == (2, 2, 2)
    assert act["vs_eager"] == pytest.approx(2.0) and act["vs_compile"] == pytest.approx((1.5 * 4.0) ** 0.5)
    assert act["gbs"] == pytest.approx(4000.0) and act["peak"] == pytest.approx(4000 / 4800)
    scan = rows[("level1", "scan")]
    assert (scan["accepted"], scan["correct"], scan["gbs"], scan["vs_eager"]) == (0, 0, None, None)
    assert rows[("all", "all")]["files"] == 4 and rows[("level2", "all")]["correct"] == 1
    assert m.main([str(a), str(b), "--json", str(tmp_path / "rows.json")]) == 0
    out = capsys.readouterr().out
    assert "| level1 | activation | 2 | 2 | 2 | 2x |" in out
    assert json.loads((tmp_path / "rows.json").read_text())[0]["level"] == "level1"


def test_a_file_that_is_not_a_report_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = load_benchmark("kernelbench_classes")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit) as e:
        m.main([str(bad)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "not a cudaperf bench report" in err[0]
