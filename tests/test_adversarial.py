"""The adversarial suite's data and runner on the CPU (tests/data/cheats/, benchmarks/
adversarial.py): every cheat folder has a valid ``cheat.toml``, every cheat file belongs to
one, the classes docs/evaluation.md lists ("Adversarial suite") are exactly the folders' (so
the suite cannot shrink, or grow, silently), every cheat meant for a build-time guard is
refused by the real build and every other one compiles, the verdict words and the judge,
and the runner's exit status without a GPU.  The GPU run is tests/test_gpu_adversarial.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

adv = load_benchmark("adversarial")
REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "evaluation.md"
C_CHEATS = adv.load_c_cheats()


def doc_table() -> dict[str, dict[str, str]]:
    """The class table of docs/evaluation.md's "Adversarial suite" section: folder -> row."""
    text = DOC.read_text()
    m = re.search(r"^## \d+\. Adversarial suite$", text, re.M)
    assert m, "docs/evaluation.md has no 'Adversarial suite' section"
    start = m.start()
    end = text.find("\n## ", start + 5)
    section = text[start:end if end > 0 else None]
    rows: dict[str, dict[str, str]] = {}
    header: list[str] | None = None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None if not line.strip() else header
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(line) <= set("|-: "):
            continue
        row = dict(zip(header, cells))
        if "folder" in row:
            rows[row["folder"].strip("`")] = row
    return rows


def test_every_cheat_folder_has_a_valid_cheat_toml():
    folders = sorted(p for p in adv.CHEATS.glob("c_*") if p.is_dir())
    assert len(folders) >= 25, folders
    for folder in folders:
        path = folder / "cheat.toml"
        assert path.is_file(), f"{folder.name} has no cheat.toml"
        assert adv.check_cheat_toml(adv._toml(path), folder) == [], folder.name
    assert [c.name for c in C_CHEATS] == [f.name for f in folders]
    assert sum(c.control for c in C_CHEATS) >= 2 and all(c.name.startswith("c_control_") == c.control
                                                         for c in C_CHEATS)
    classes = [c.cls for c in C_CHEATS if not c.control]
    assert len(classes) == len(set(classes)), "one folder per class"
    assert all(c.name == f"c_{c.cls}" for c in C_CHEATS if not c.control)


def test_every_cheat_file_is_in_the_suite():
    """A .cu under tests/data/cheats/ that no cheat.toml names would never run."""
    named = {p.resolve() for c in C_CHEATS for p in c.candidate}
    files = {p.resolve() for p in adv.CHEATS.rglob("*.cu")}
    assert files <= named, sorted(str(p) for p in files - named)


def test_the_checker_refuses_bad_cheat_tomls(tmp_path):
    (tmp_path / "candidate.cu").write_text("// x\n")
    good = {"class": "x", "what": "w", "problem": "examples/elementwise.c", "guard": "g",
            "expect": ["wrong"], "source": "s"}
    assert adv.check_cheat_toml(good, tmp_path) == []
    assert "missing key 'guard'" in adv.check_cheat_toml({k: v for k, v in good.items() if k != "guard"}, tmp_path)
    assert any("unknown statuses" in e for e in adv.check_cheat_toml({**good, "expect": ["nope"]}, tmp_path))
    assert any("not caught" in e for e in adv.check_cheat_toml({**good, "expect": ["correct"]}, tmp_path))
    assert any("verified statuses only" in e for e in adv.check_cheat_toml({**good, "control": True}, tmp_path))
    assert any("no problem file" in e for e in adv.check_cheat_toml({**good, "problem": "nope.c"}, tmp_path))
    assert any("no candidate file" in e for e in adv.check_cheat_toml({**good, "candidate": "x.cu"}, tmp_path))
    assert any("unknown key" in e for e in adv.check_cheat_toml({**good, "extra": 1}, tmp_path))
    assert any("sizes" in e for e in adv.check_cheat_toml({**good, "sizes": {"n": -1}}, tmp_path))


def test_the_documented_classes_are_the_folders():
    rows = doc_table()
    assert set(rows) == {c.name for c in C_CHEATS}, (sorted(set(rows) ^ {c.name for c in C_CHEATS}))
    for c in C_CHEATS:
        row = rows[c.name]
        assert row["class"].strip("`") == c.cls, c.name
        documented = {s.strip().strip("`") for s in row["expected status"].split(",")}
        assert documented == set(c.expect), (c.name, documented, c.expect)
    # the catalogues the issue names are covered
    sources = " ".join(c.source for c in C_CHEATS)
    for catalogue in ("KernelBench", "CUDA-L1", "robust-kbench", "issue 14"):
        assert catalogue in sources, catalogue


def test_the_pytorch_cheats_each_name_a_dynamic_guard():
    from cudaperf_cli.evaluate.torch_job import DYNAMIC_GUARDS

    cheats = adv.load_torch_cheats()
    folders = sorted(p.name for p in adv.TORCH_CHEATS.glob("dynamic_*") if p.is_dir()
                     and adv.torch_guard(p.name, DYNAMIC_GUARDS) is not None)
    assert [c.name for c in cheats] == folders and len(cheats) >= 10
    assert all(c.cls in DYNAMIC_GUARDS and c.what and c.candidate for c in cheats)
    assert all(c.expect == ["guard_rejected"] and c.cls in c.guard.split(" or ") for c in cheats)
    assert adv.torch_guard("dynamic_side_stream_torch_stream", DYNAMIC_GUARDS) == "side_stream"
    assert adv.torch_guard("dynamic_nonsense", DYNAMIC_GUARDS) is None


# ---------------------------------------------------------------------------------------
# Build-time guards, with the real build (nvcc on this machine)
# ---------------------------------------------------------------------------------------

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


@needs_nvcc
@pytest.mark.parametrize("name", [c.name for c in C_CHEATS])
def test_build_time_guards_refuse_exactly_their_cheats(name, tmp_path):
    from cudaperf_cli.build import build_candidate

    cheat = next(c for c in C_CHEATS if c.name == name)
    built = build_candidate(cheat.candidate[0].read_text(), arch="sm_90", cache_root=tmp_path)
    first = (built.errors or "").strip().splitlines()[:1]
    if cheat.expect == ["guard_rejected"]:
        assert built.status == "guard_rejected", (built.status, built.errors)
        assert cheat.match and cheat.match.lower() in first[0].lower(), first
    else:
        assert built.ok, (built.status, built.errors)  # it reaches the GPU to be caught there


# ---------------------------------------------------------------------------------------
# Verdicts and the command
# ---------------------------------------------------------------------------------------


def test_what_caught_it_in_words():
    cb = adv.caught_by
    assert cb("guard_rejected", "candidate.cu: error: the host code uses dlsym (run-time symbol lookup): "
              "host code may not") == "host-code check: run-time symbol lookup"
    assert cb("guard_rejected", "[file_access] candidate.cu:5: #include of an absolute path") == "include check"
    assert cb("guard_rejected", "rejected by guard 'side_stream': x") == "guard side_stream"
    assert cb("sanitizer_error", "memcheck: Invalid __global__ write of size 4 bytes") == "compute-sanitizer memcheck"
    assert cb("sanitizer_error", "initcheck: under compute-sanitizer the candidate ended 'wrong': x") == \
        "compute-sanitizer initcheck (failed under the tool)"
    assert cb("wrong", "config 'small-odd' trial 0: out: ok; wrote outside 'out': 4400 bytes past its end") == "guard zones"
    assert cb("wrong", "config 'main': timed call 3 of 40 (input set 1): y: 1 of 9 differ") == \
        "verified timed call (input sets)"
    assert cb("wrong", "config 'main': after the timed repetitions, out: 3 of 9 differ") == "post-timing check"
    assert cb("wrong", "config 'edge' trial 0: out: 1 of 1 elements differ; first at [0]: candidate nan vs "
              "reference 0.5 (1 of them NaN/inf") == "output comparison (poisoned output)"
    assert cb("wrong", "config 'small-odd' trial 1: out: 99 of 99 elements differ") == \
        "output comparison (second trial, new data)"
    assert cb("wrong", "u: 14 of 99 differ (an input the reference never changes was modified)") == "input check"
    assert cb("crash", "killed: the worker's host memory reached 4.2 GB") == "host-memory watchdog"
    assert cb("crash", "the worker exited without a valid result in the candidate call") == "worker exit check"
    assert cb("timeout", "config 'main' trial 0: the candidate call ran past 10 s (the slow limit ...)") == "slow stop"
    assert cb("timeout", "timed out after 60.0 s (limit 60 s) in the candidate call") == "time limit"
    assert cb("runtime_error", "device synchronize failed") == "CUDA error check"


def test_the_judge():
    cheat = next(c for c in C_CHEATS if c.name == "c_near_oob_write")
    assert adv.judge(cheat, "wrong", "config 'x': wrote outside 'out': 4400 bytes past its end", False)
    assert not adv.judge(cheat, "wrong", "config 'x': out: 1 of 9 differ", False)  # not its guard
    assert not adv.judge(cheat, "wrong", "wrote outside 'out'", True)  # written: never fine
    assert not adv.judge(cheat, "correct", "", False)
    control = next(c for c in C_CHEATS if c.control)
    assert adv.judge(control, "correct", "", True) and adv.judge(control, "slow", "", True)
    assert not adv.judge(control, "correct", "", False) and not adv.judge(control, "wrong", "", False)
    v = adv.Verdict("c_x", "c", "wrong", "m", "guard zones", 1.25, False, True, ["wrong"])
    lines = adv.table([v]).splitlines()
    assert lines[0].split() == ["cheat", "kind", "verdict", "caught", "by", "s", "ok"]
    assert lines[2].split()[:3] == ["c_x", "c", "wrong"] and lines[2].endswith("1.2  ok")


def test_without_a_device_the_runner_says_so_in_one_line(monkeypatch):
    from tests.conftest import cuda_device_status

    if cuda_device_status()[0]:
        pytest.skip("a CUDA device is here: the runner would run the suite")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "adversarial.py"), "--kind", "c"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == adv.EXIT_NO_DEVICE, proc
    assert proc.stdout == "" and proc.stderr.strip().splitlines() == [
        "adversarial suite: no CUDA device here (the cheats must launch real kernels): nothing run"]
    assert re.search(r"exit (status|code) 4", adv.__doc__)
