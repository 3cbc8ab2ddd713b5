"""The PyTorch result folder: what ``-o DIR [--force]`` may replace (nothing the user had)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from cudaperf_cli.agent.kinds.pytorch import TorchKind, resolve_torch_output
from cudaperf_cli.core import CudaperfError


def _opts(problem: Path, output: Path | None, force: bool = False, run_root: Path | None = None):
    return SimpleNamespace(file=problem, output=output, force=force,
                           run_root=run_root or problem.parent / "cudaperf-runs")


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "keep.txt").write_text("mine")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "relu.py").write_text("# problem\n")
    monkeypatch.chdir(sub)
    return tmp_path


@pytest.mark.parametrize("where", ["..", ".", "cudaperf-runs", "~"])
def test_folders_holding_the_users_files_are_refused(sandbox: Path, where: str) -> None:
    problem = sandbox / "sub" / "relu.py"
    out = Path(where).expanduser()
    with pytest.raises(CudaperfError, match="choose a new one with -o DIR"):
        resolve_torch_output(_opts(problem, out, force=True, run_root=Path("cudaperf-runs")))
    assert (sandbox / "keep.txt").read_text() == "mine" and problem.exists()


def test_force_replaces_an_earlier_result_only(sandbox: Path) -> None:
    problem = sandbox / "sub" / "relu.py"
    other = sandbox / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(CudaperfError, match="more than an earlier result"):
        resolve_torch_output(_opts(problem, other, force=True))
    with pytest.raises(CudaperfError, match="pass --force"):
        resolve_torch_output(_opts(problem, other))
    earlier = sandbox / "res"
    earlier.mkdir()
    (earlier / "model.py").write_text("old")
    (earlier / "kernel.cu").write_text("old")
    assert resolve_torch_output(_opts(problem, earlier, force=True)) == earlier


def test_write_replaces_the_folder_whole_and_only_at_the_end(sandbox: Path) -> None:
    cand = sandbox / "cand"
    cand.mkdir()
    (cand / "model.py").write_text("new")
    (cand / "kernel.cu").write_text("new kernel")
    out = sandbox / "res"
    out.mkdir()
    (out / "model.py").write_text("old")
    (out / "stale.cu").write_text("old")
    best = SimpleNamespace(build_dir=str(cand))
    lines = TorchKind.write(object.__new__(TorchKind), best, None, out, None)
    assert sorted(p.name for p in out.iterdir()) == ["kernel.cu", "model.py"]
    assert (out / "model.py").read_text() == "new" and "written" in lines[0]
    assert not [p for p in sandbox.iterdir() if p.name.startswith(".res.")]
    with pytest.raises(CudaperfError, match="cannot write"):
        TorchKind.write(object.__new__(TorchKind), SimpleNamespace(build_dir=str(sandbox / "gone")), None, out, None)
    assert (out / "model.py").read_text() == "new"  # a failed write leaves the old result
