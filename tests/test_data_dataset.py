"""cudaperf data generate / check / measure (cudaperf_cli/data): the manifest, deduplication,
the family split, never overwriting without --force, resumable checks, and a measure through
bench with a fake optimize (no GPU) whose pairs carry family and split."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.data import dataset as D

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudaperf_cli", "data", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})


def test_generate_writes_files_manifest_and_a_family_split(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    gen = D.generate(root, "c", 30, 4)
    doc = D.read_manifest(root)
    assert gen["count"] == 30 and gen["draws"] == 30 + gen["duplicates"]
    assert len(doc["problems"]) == 30
    from cudaperf_cli.data.c_gen import FAMILIES

    assert set(gen["per_family"]) == set(FAMILIES)
    for e in doc["problems"]:
        text = (root / e["id"]).read_text()
        assert D.sha256_text(text) == e["sha256"]
        assert e["id"] == f"c/{e['family']}_{doc['problems'].index(e):05d}.c"
        assert {c["name"] for c in e["configs"]} == {"small_odd", "main", "large"}
    keys = [e["structure_key"] for e in doc["problems"]]
    assert len(set(keys)) == len(keys)
    split = doc["splits"]["c"]
    assert split["by"] == "family" and split["test"] and split["train"]
    assert not set(split["train"]) & set(split["test"])
    assert set(split["train"]) | set(split["test"]) == set(FAMILIES)
    assert D.split_of(doc, "c", split["test"][0]) == "test"


def test_same_seed_same_set_and_a_larger_count_extends(tmp_path: Path) -> None:
    a = D.generate(tmp_path / "a", "c", 20, 9)
    D.generate(tmp_path / "b", "c", 35, 9)
    da, db = D.read_manifest(tmp_path / "a"), D.read_manifest(tmp_path / "b")
    assert [e["sha256"] for e in da["problems"]] == [e["sha256"] for e in db["problems"]][:20]
    assert a["count"] == 20
    other = D.generate(tmp_path / "c", "c", 20, 10)
    assert other["count"] == 20
    assert [e["sha256"] for e in D.read_manifest(tmp_path / "c")["problems"]] != [e["sha256"] for e in da["problems"]]


def test_duplicates_are_dropped_and_families_run_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudaperf_cli.data import c_gen

    real = c_gen.generate_c

    def few(rng, family):  # a grammar with 3 structures in "map1d", the real one elsewhere
        p = real(rng, family)
        if family == "map1d":
            from dataclasses import replace

            return replace(p, structure_key=f"map1d|{rng.randrange(3)}")
        return p

    monkeypatch.setattr(c_gen, "generate_c", few)
    monkeypatch.setattr(D, "EXHAUSTED_AFTER", 5)
    drawn = D.draw_unique("c", 150, 1)
    fams = [p.family for _, p in drawn.problems]
    assert fams.count("map1d") == 3 and len(fams) == 150
    assert "map1d" in drawn.exhausted and drawn.duplicates >= 5


def test_never_overwrites_without_force(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    D.generate(root, "c", 5, 1)
    before = {p: p.read_text() for p in (root / "c").iterdir()}
    with pytest.raises(CudaperfError, match="already holds problems"):
        D.generate(root, "c", 5, 2)
    assert {p: p.read_text() for p in (root / "c").iterdir()} == before
    D.generate(root, "c", 3, 2, force=True)
    assert len(list((root / "c").iterdir())) == 3 and len(D.read_manifest(root)["problems"]) == 3
    (tmp_path / "file").write_text("x")
    with pytest.raises(CudaperfError, match="not a folder"):
        D.generate(tmp_path / "file", "c", 1, 1)
    with pytest.raises(CudaperfError, match="--kind"):
        D.generate(tmp_path / "x", "fortran", 1, 1)


def test_read_manifest_errors(tmp_path: Path) -> None:
    with pytest.raises(CudaperfError, match="not a dataset"):
        D.read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(CudaperfError, match="unreadable"):
        D.read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"schema_version": 99, "problems": []}')
    with pytest.raises(CudaperfError, match="not a cudaperf dataset"):
        D.read_manifest(tmp_path)


def test_family_split_edges() -> None:
    assert D.family_split(["a"], seed=1) == {"train": ["a"], "test": []}
    two = D.family_split(["a", "b"], seed=1, test_fraction=0.9)
    assert len(two["test"]) == 1 and len(two["train"]) == 1
    many = D.family_split([f"f{i}" for i in range(10)], seed=3, test_fraction=0.2)
    assert len(many["test"]) == 2 and many == D.family_split([f"f{i}" for i in range(10)], seed=3)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_cli_generate_check_resume_and_errors(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    proc = cli("generate", "--kind", "c", "--count", "4", "--seed", "3", "-o", str(root), "--compile", "none",
               "-j", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["generation"]["count"] == 4 and out["check"]["kinds"]["c"]["reference_ok"] == 4
    doc = D.read_manifest(root)
    assert all(e["check"]["ok"] and e["check"]["reference"] == "ok" for e in doc["problems"])
    rows = (root / "check.jsonl").read_text().splitlines()
    assert len(rows) == 4
    # a second check resumes: nothing left to check
    again = cli("check", str(root), "--compile", "none", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["checked_now"] == 0
    assert len((root / "check.jsonl").read_text().splitlines()) == 4
    # a problem broken by hand fails its check: exit 1, one line per failure kind
    first = doc["problems"][0]
    (root / first["id"]).write_text("void broken(int n, double x[n]) { for (;;) }\n")
    bad = cli("check", str(root), "--compile", "none", "--recheck")
    assert bad.returncode == 1
    assert "loads 3" in bad.stdout
    # the user's data is kept: generate into it again refuses
    refused = cli("generate", "--kind", "c", "--count", "2", "-o", str(root), "--no-check")
    assert refused.returncode != 0
    assert "already holds problems" in refused.stderr and len(refused.stderr.strip().splitlines()) <= 2
    missing = cli("check", str(tmp_path / "nothing"))
    assert missing.returncode != 0 and "not a dataset" in missing.stderr
    badkind = cli("generate", "--kind", "rust", "--count", "2", "-o", str(tmp_path / "z"))
    assert badkind.returncode != 0 and "--kind" in badkind.stderr


def test_measure_through_bench_writes_candidates_and_family_pairs(tmp_path: Path) -> None:
    """data measure with a fake optimize (tests/test_bench.py's): a suite per configuration,
    bench's candidates gathered with config/family/split, pairs that never mix families."""
    from tests.test_bench import FAKE_OPTIMIZE

    root = tmp_path / "ds"
    D.generate(root, "c", 6, 5)
    script = tmp_path / "fake_optimize.py"
    script.write_text(FAKE_OPTIMIZE)
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {"CUDAPERF_BENCH_OPTIMIZE": f"{sys.executable} {script}", "FAKE_LOG": str(tmp_path / "calls.log"),
           "FAKE_PIDS": str(pids), "CUDAPERF_GPU_LOCK_DIR": str(tmp_path / "locks")}
    proc = cli("measure", str(root), "--configs", "main,small_odd", "--limit", "4", "-j", "2", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # --json: one document on stdout
    assert summary["problems"] == 4 and summary["candidates"] == 2 * 4 * 3
    toml = (root / "measure" / "small_odd" / "suite" / "bench.toml").read_text()
    doc = D.read_manifest(root)
    picked = [e for e in doc["problems"] if e["id"] in toml]
    assert len(picked) == 4 and len({e["family"] for e in picked}) == 4  # round-robin over families
    small = picked[0]["configs"][0]["sizes"]
    assert "sizes = { " + ", ".join(f"{k} = {v}" for k, v in small.items()) + " }" in toml
    rows = [json.loads(ln) for ln in (root / "candidates.jsonl").read_text().splitlines()]
    assert {r["config"] for r in rows} == {"main", "small_odd"}
    fam = {e["id"]: e["family"] for e in doc["problems"]}
    assert all(r["family"] == fam[r["problem"]] and r["split"] in ("train", "test") for r in rows)
    pairs = [json.loads(ln) for ln in (root / "pairs.jsonl").read_text().splitlines()]
    assert pairs and all(p["family"] == fam[p["problem"]] and p["config"] in ("main", "small_odd") for p in pairs)
    # a second run resumes the benches: no problem runs again
    calls = (tmp_path / "calls.log").read_text().splitlines()
    again = cli("measure", str(root), "--configs", "main,small_odd", "--limit", "4", "-j", "2", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "calls.log").read_text().splitlines() == calls
    # a run with other options (one configuration, fewer problems) keeps what was measured
    fewer = cli("measure", str(root), "--configs", "main", "--limit", "2", "-j", "2", "--json", env=env)
    assert fewer.returncode == 0, fewer.stderr
    assert json.loads(fewer.stdout)["candidates"] == 2 * 4 * 3
    assert (root / "candidates.jsonl").read_text().splitlines() == [json.dumps(r) for r in rows]
    assert len((root / "pairs.jsonl").read_text().splitlines()) == len(pairs)
    assert (tmp_path / "calls.log").read_text().splitlines() == calls
    other = cli("measure", str(root), "--configs", "main", "--turns", "3", env=env)
    assert other.returncode == 2 and "used other settings: turns 12 -> 3" in other.stderr, other.stderr
    assert "remove " in other.stderr and " -o" not in other.stderr
    bad = cli("measure", str(root), "--configs", "huge")
    assert bad.returncode != 0 and "unknown configuration" in bad.stderr


def test_torch_check_in_batches_keeps_each_problems_own_verdict(tmp_path: Path) -> None:
    """PyTorch problems are checked TORCH_BATCH at a time by one loader child: a broken file
    of a batch fails alone, the others load and are planned."""
    pytest.importorskip("torch")
    from cudaperf_cli.data import check as C

    root = tmp_path / "ds"
    D.generate(root, "torch", 4, 2)
    doc = D.read_manifest(root)
    broken = doc["problems"][1]
    path = root / broken["id"]
    path.write_text(path.read_text() + "\nraise ValueError('boom')\n")
    broken["sha256"] = D.sha256_text(path.read_text())  # as if it had been generated so
    D.write_manifest(root, doc)
    summary = C.check_dataset(root, kinds=["torch"], compile_mode="none", jobs=1)
    rows = C.read_check_log(root)
    assert len(rows) == 4 and summary["checked_now"] == 4
    assert not rows[broken["id"]]["loads"] and "boom" in rows[broken["id"]]["error"]
    others = [rows[e["id"]] for e in doc["problems"] if e["id"] != broken["id"]]
    assert all(r["loads"] and r["reference"] == "ok" and (r["candidates"] > 0 or r["refusal"]) for r in others)
    assert all(r["seconds"] > 0 for r in rows.values())


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine times candidates")
def test_measure_without_a_gpu_says_so(tmp_path: Path) -> None:
    """On a machine without a GPU nothing can be timed: one error line and its hint, exit 4
    (incomplete: no CUDA device), before anything is compiled or written."""
    root = tmp_path / "ds"
    D.generate(root, "c", 1, 1)
    proc = cli("measure", str(root), "--turns", "1", "--patience", "1")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()  # the unchecked problem's warning, the error, its hint
    assert lines[0].startswith("warning: 1 of the 1 problems to measure were never checked")
    assert lines[1].startswith("error: data measure verifies and times candidates on a GPU, and there is no CUDA "
                               "device here") and lines[2].startswith("hint: ") and len(lines) == 3
    assert not (root / "measure").exists()
    nothing = cli("measure", str(root), "--offset", "5")  # bad options are said first, GPU or not
    assert nothing.returncode == 2 and "nothing to measure" in nothing.stderr and "offset 5" in nothing.stderr


def test_bad_compile_mode_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    proc = cli("generate", "--kind", "c", "--count", "2", "-o", str(tmp_path / "x"), "--compile", "bogus")
    assert proc.returncode == 2 and "--compile must be one of" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_a_changed_or_missing_problem_fails_its_check_without_running(tmp_path: Path) -> None:
    from cudaperf_cli.data import check as C

    root = tmp_path / "ds"
    D.generate(root, "c", 3, 4)
    doc = D.read_manifest(root)
    edited, gone = doc["problems"][0], doc["problems"][1]
    (root / edited["id"]).write_text((root / edited["id"]).read_text() + "\n// edited\n")
    (root / gone["id"]).unlink()
    with open(root / "check.jsonl", "w") as fh:  # a line cut by a kill: the next starts afresh
        fh.write('{"id": "c/x.c", "kind": "c", "ok": tr')
    C.check_dataset(root, kinds=["c"], compile_mode="none", jobs=1)
    rows = C.read_check_log(root)
    assert "changed since data generate wrote it" in rows[edited["id"]]["error"]
    assert rows[gone["id"]]["error"] == f"{gone['id']} is missing"
    assert rows[doc["problems"][2]["id"]]["ok"]
    assert len((root / "check.jsonl").read_text().splitlines()) == 4  # the cut line, then 3


def test_force_after_a_cut_check_log_and_an_interrupted_draw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """generate --force reads a check.jsonl with a cut last line; a draw interrupted by
    Ctrl-C changes nothing on disk (the draw comes before any write)."""
    root = tmp_path / "ds"
    D.generate(root, "c", 3, 1)
    D.generate(root, "torch", 2, 1) if _has_torch() else None
    with open(root / "check.jsonl", "w") as fh:
        fh.write('{"id": "torch/t.py", "kind": "torch", "ok": true}\n{"id": "c/a.c", "ki')
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(D, "draw_unique", interrupted)
    with pytest.raises(KeyboardInterrupt):
        D.generate(root, "c", 4, 2, force=True)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    monkeypatch.undo()
    D.generate(root, "c", 4, 2, force=True)
    doc = D.read_manifest(root)
    assert sum(e["kind"] == "c" for e in doc["problems"]) == 4
    assert all((root / e["id"]).exists() for e in doc["problems"])
    assert (root / "check.jsonl").read_text() == '{"id": "torch/t.py", "kind": "torch", "ok": true}\n'


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def test_one_data_command_per_dataset_at_a_time(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    D.generate(root, "c", 2, 1)
    with D.dataset_lock(root):
        proc = cli("check", str(root), "--compile", "none")
        assert proc.returncode == 2, proc.stderr
        assert f"is writing {root}" in proc.stderr and f"pid {os.getpid()}" in proc.stderr
        other = cli("generate", "--kind", "torch", "--count", "2", "-o", str(root), "--no-check")
        assert other.returncode == 2 and "is writing" in other.stderr
    assert "torch" not in {e["kind"] for e in D.read_manifest(root)["problems"]}
    assert cli("check", str(root), "--compile", "none").returncode == 0


def test_bad_options_and_unwritable_or_malformed_datasets_are_one_line(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    D.generate(root, "c", 2, 1)
    arch = cli("check", str(root), "--arch", "hopper")
    assert arch.returncode == 2 and "--arch must be an nvcc architecture" in arch.stderr
    gen_arch = cli("generate", "--kind", "c", "--count", "2", "-o", str(tmp_path / "n"), "--arch", "90")
    assert gen_arch.returncode == 2 and not (tmp_path / "n").exists()
    doc = D.read_manifest(root)
    doc["problems"][1] = {"id": "c/x.c"}
    (root / "manifest.json").write_text(json.dumps(doc))
    bad = cli("check", str(root))
    assert bad.returncode == 2 and "problem 1 is malformed (kind None)" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 2
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        D.generate(ro, "c", 1, 1)
        (ro / D.LOCK_FILE).unlink(missing_ok=True)
        ro.chmod(0o555)
        try:
            proc = cli("check", str(ro))
            assert proc.returncode == 2 and "cannot write the dataset" in proc.stderr, proc.stderr
        finally:
            ro.chmod(0o755)


def test_select_offset_takes_the_next_slice_of_the_round_robin_order(tmp_path: Path) -> None:
    from cudaperf_cli.data.measure import select

    root = tmp_path / "ds"
    D.generate(root, "c", 40, 3)
    doc = D.read_manifest(root)
    everything = select(doc, kinds=["c"], split=None, limit=None, only_checked=True)
    first = select(doc, kinds=["c"], split=None, limit=15, only_checked=True)
    nxt = select(doc, kinds=["c"], split=None, limit=15, only_checked=True, offset=15)
    assert [e["id"] for e in first + nxt] == [e["id"] for e in everything[:30]]
    assert len({e["family"] for e in first}) == 15  # round-robin: every family in the first 15
    assert select(doc, kinds=["c"], split=None, limit=5, only_checked=True, offset=40) == []


def test_a_file_edited_after_its_check_is_checked_again(tmp_path: Path) -> None:
    from cudaperf_cli.data import check as C

    root = tmp_path / "ds"
    D.generate(root, "c", 2, 6)
    C.check_dataset(root, kinds=["c"], compile_mode="none", jobs=1)
    doc = D.read_manifest(root)
    e = doc["problems"][0]
    (root / e["id"]).write_text((root / e["id"]).read_text() + "// edited later\n")
    again = C.check_dataset(root, kinds=["c"], compile_mode="none", jobs=1)
    assert again["checked_now"] == 1 and again["kinds"]["c"]["checked"] == 2 and again["kinds"]["c"]["ok"] == 1
    assert "changed since data generate" in C.read_check_log(root)[e["id"]]["error"]
    recheck = C.check_dataset(root, kinds=["c"], compile_mode="none", jobs=1, recheck=True, limit=1)
    assert recheck["checked_now"] == 1 and recheck["kinds"]["c"]["checked"] == 2  # the summary covers both


def test_force_replaces_one_kinds_measurements_and_keeps_the_others(tmp_path: Path) -> None:
    from tests.test_bench import FAKE_OPTIMIZE

    pytest.importorskip("torch")
    root = tmp_path / "ds"
    D.generate(root, "c", 2, 5)
    D.generate(root, "torch", 2, 5)
    script = tmp_path / "fake_optimize.py"
    script.write_text(FAKE_OPTIMIZE)
    (tmp_path / "pids").mkdir()
    env = {"CUDAPERF_BENCH_OPTIMIZE": f"{sys.executable} {script}", "FAKE_LOG": str(tmp_path / "calls.log"),
           "FAKE_PIDS": str(tmp_path / "pids"), "CUDAPERF_GPU_LOCK_DIR": str(tmp_path / "locks")}
    proc = cli("measure", str(root), "-j", "2", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    kinds = {json.loads(ln)["problem_kind"] for ln in (root / "candidates.jsonl").read_text().splitlines()}
    assert kinds == {"c", "torch"}
    D.generate(root, "c", 2, 6, force=True)
    rows = [json.loads(ln) for ln in (root / "candidates.jsonl").read_text().splitlines()]
    assert rows and {r["problem_kind"] for r in rows} == {"torch"}
    left = [json.loads(p.read_text())["id"] for p in (root / "measure" / "main" / "bench" / "problems").glob("*.json")]
    assert left and all(i.startswith("torch/") for i in left)


def test_measure_that_times_nothing_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    D.generate(root, "c", 1, 5)
    proc = cli("measure", str(root), "--json", env={"CUDAPERF_BENCH_OPTIMIZE": "/bin/false"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no candidate was verified and timed (no candidate at all)" in proc.stderr


def test_malformed_check_rows_are_checked_again_and_a_linked_lock_is_refused(tmp_path: Path) -> None:
    from cudaperf_cli.data import check as C

    root = tmp_path / "ds"
    D.generate(root, "c", 3, 5)
    ids = [e["id"] for e in D.read_manifest(root)["problems"]]
    (root / "check.jsonl").write_bytes(
        json.dumps({"id": ids[0]}).encode() + b"\n\xff\xfe garbage\n"
        + json.dumps({"id": ids[1], "kind": "c", "ok": True, "loads": True, "candidates": "many"}).encode() + b"\n")
    assert C.read_check_log(root) == {}
    summary = C.check_dataset(root, kinds=["c"], compile_mode="none", jobs=1)
    assert summary["checked_now"] == 3 and summary["kinds"]["c"]["ok"] == 3
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    (root / D.LOCK_FILE).unlink(missing_ok=True)
    (root / D.LOCK_FILE).symlink_to(precious)
    proc = cli("check", str(root), "--compile", "none")
    assert proc.returncode == 2 and "its lock file is a symbolic link" in proc.stderr
    assert precious.read_text() == "mine\n"


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["problems"][1].update(id=d["problems"][0]["id"]), "appears twice"),
    (lambda d: d["problems"][0].update(id="c/../../escaped.c"), "is not c/<file> inside the dataset"),
    (lambda d: d["problems"][0].update(id="/etc/passwd"), "is not c/<file> inside the dataset"),
    (lambda d: d["splits"].update(c=[1]), "the split of 'c' is not"),
])
def test_manifests_that_could_mislead_are_refused(tmp_path: Path, edit, words: str) -> None:
    root = tmp_path / "ds"
    D.generate(root, "c", 2, 5)
    doc = D.read_manifest(root)
    edit(doc)
    (root / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(CudaperfError, match=words.replace("(", r"\(")):
        D.read_manifest(root)


def test_sigterm_while_drawing_pytorch_problems_exits_at_once(tmp_path: Path) -> None:
    """The draw's pool workers are stopped, not joined (the command hung after SIGTERM)."""
    import signal
    import time

    pytest.importorskip("torch")
    proc = subprocess.Popen([sys.executable, "-m", "cudaperf_cli", "data", "generate", "--kind", "torch",
                             "--count", "50000", "-o", str(tmp_path / "ds"), "--no-check", "-j", "1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(5)  # the worker is importing torch or checking draws (400 take 5 s)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted while drawing" in err and "Traceback" not in err
    assert not (tmp_path / "ds").exists()
