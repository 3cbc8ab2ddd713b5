"""The command line as a user meets it: help, version, and one clear line on bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudaperf_cli.core import install_hint

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.strip()]


def test_help_lists_commands():
    proc = cli("--help")
    assert proc.returncode == 0
    for cmd in ("optimize", "doctor"):
        assert cmd in proc.stdout


def test_optimize_help_names_flags():
    proc = cli("optimize", "--help")
    assert proc.returncode == 0
    for flag in ("--function", "--size", "--turns", "--arch", "--force", "--json", "-I", "-D"):
        assert flag in proc.stdout


def test_version():
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("cudaperf ")


def test_missing_file_is_one_line(tmp_path):
    proc = cli("optimize", str(tmp_path / "nope.c"), cwd=tmp_path)
    assert proc.returncode == 2
    lines = error_lines(proc)
    assert len(lines) == 1 and "no such file" in lines[0]
    assert "Traceback" not in proc.stderr


def test_malformed_c_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("void f(int n, double x[n]) { for (int i = 0; i < n; i++) x[i] = ; }\n")
    proc = cli("optimize", str(bad), "--size", "n=10", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc)[0].startswith("error: ")
    assert "Traceback" not in proc.stderr


def test_missing_extent_shows_the_annotation(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text("void scale(int n, double *x) { for (int i = 0; i < n; i++) x[i] *= 2; }\n")
    proc = cli("optimize", str(src), "--size", "n=10", cwd=tmp_path)
    assert proc.returncode == 2
    lines = error_lines(proc)
    assert lines[0].startswith("error: ") and "x" in lines[0]
    assert any("// cudaperf: x[n]" in ln for ln in lines)


def test_bad_size_syntax(tmp_path):
    proc = cli("optimize", str(EXAMPLES / "matmul.c"), "--size", "ni", cwd=tmp_path)
    assert proc.returncode == 2
    assert "NAME=VALUE" in proc.stderr


def test_existing_output_is_not_overwritten(tmp_path):
    out = tmp_path / "matmul.cu"
    out.write_text("// mine\n")
    proc = cli("optimize", str(EXAMPLES / "matmul.c"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "--force" in proc.stderr
    assert out.read_text() == "// mine\n"


# ---------------------------------------------------------------------------------------
# Hostile and careless use: one line (and a hint), the right exit code, nothing lost
# ---------------------------------------------------------------------------------------

SCALE_1D = "// cudaperf: x[n]\nvoid f(int n, double *x) { for (int i = 0; i < n; i++) x[i] = i; }\n"


def assert_one_error(proc: subprocess.CompletedProcess, code: int, text: str) -> None:
    lines = error_lines(proc)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines and lines[0].startswith("error: ") and text in lines[0], proc.stderr
    assert all(ln.startswith("hint: ") for ln in lines[1:]), proc.stderr


def test_non_utf8_file_is_one_line(tmp_path):
    bad = tmp_path / "binary.c"
    bad.write_bytes(SCALE_1D.encode() + bytes(range(128, 256)) + b"\n")
    proc = cli("optimize", str(bad), "--size", "n=10", cwd=tmp_path)
    assert_one_error(proc, 2, "binary.c")


def test_usage_errors_are_one_line(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    for args, text in (
        (["--turns", "0"], "--turns"),
        (["--bogus"], "No such option: --bogus"),
        (["--seed", "-1"], "--seed"),
        (["--compile-timeout", "inf"], "--compile-timeout"),  # was an OverflowError traceback
        (["--timeout", "inf"], "--timeout"),
    ):
        proc = cli("optimize", str(src), "--size", "n=10", *args, cwd=tmp_path)
        assert_one_error(proc, 2, text)
        assert "╭" not in proc.stderr and "--help" in error_lines(proc)[-1]
    proc = cli("optimize", cwd=tmp_path)
    assert_one_error(proc, 2, "missing the problem file")


def test_bad_arch_is_refused_before_any_work(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    proc = cli("optimize", str(src), "--size", "n=10", "--arch", "sm_90; rm -rf ~", cwd=tmp_path)
    assert_one_error(proc, 2, "--arch")
    assert not (tmp_path / "cudaperf-runs").exists()


def test_arch_unknown_to_nvcc_is_refused(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    proc = cli("optimize", str(src), "--size", "n=10", "--arch", "sm_12", cwd=tmp_path)
    assert_one_error(proc, 2, "sm_12")
    assert "sm_90" in error_lines(proc)[1]


def test_unusable_outputs_are_refused_before_any_work(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    (tmp_path / "adir").mkdir()
    os.link(src, tmp_path / "same.cu")
    for out, text in (
        ("adir", "is a directory"),
        ("scale.c/out.cu", "is not a directory"),
        ("same.cu", "is the input file"),
    ):
        proc = cli("optimize", str(src), "--size", "n=10", "-o", out, "--force", cwd=tmp_path)
        assert_one_error(proc, 2, text)
    assert src.read_text() == SCALE_1D
    assert not (tmp_path / "cudaperf-runs").exists()


def test_size_values_read_like_a_user_means_them():
    from cudaperf_cli.cli.common import parse_sizes

    assert parse_sizes(["n=010", "m=0x10", "k= 7 "]) == {"n": 10, "m": 16, "k": 7}


def test_directory_as_input(tmp_path):
    (tmp_path / "d.c").mkdir()
    proc = cli("optimize", "d.c", cwd=tmp_path)
    assert_one_error(proc, 2, "is a directory")


def test_run_folder_that_cannot_be_created(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    proc = cli("optimize", str(src), "--size", "n=10", "--run-dir", "scale.c", cwd=tmp_path)
    assert_one_error(proc, 2, "cannot create the run folder")


def test_sizes_too_large(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    proc = cli("optimize", str(src), "--size", "n=99999999999", cwd=tmp_path)
    assert_one_error(proc, 2, "does not fit its C type 'int'")
    cube = tmp_path / "cube.c"
    cube.write_text(
        "void f(int n, double x[n][n][n]) { for (int i = 0; i < n; i++) x[i][0][0] = i; }\n"
    )
    proc = cli("optimize", str(cube), "--size", "n=100000", cwd=tmp_path)
    # planned before anything runs: does not fit (exit 5), the bytes needed and available
    assert_one_error(proc, 5, "cube.c does not fit: one evaluation needs")
    assert "GB of host memory (footprint 8000000.0 GB) and this machine has" in error_lines(proc)[0]


def test_line_breaks_in_values_stay_on_one_line(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    proc = cli("optimize", str(src), "--function", "a\nb", cwd=tmp_path)
    assert_one_error(proc, 2, "'a\\nb'")
    assert len(error_lines(proc)) == 1


def test_empty_include_value_does_not_swallow_the_next_flag(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    proc = cli("optimize", str(src), "-I", "", "-D", "X", "--size", "n=10", cwd=tmp_path)
    assert_one_error(proc, 2, "'-I' needs a value")


def test_score_without_kernels(tmp_path):
    (tmp_path / "empty.cu").write_text("")
    proc = cli("score", "empty.cu", "--no-build", cwd=tmp_path)
    assert_one_error(proc, 2, "no __global__ kernel")
    (tmp_path / "d.cu").mkdir()
    assert_one_error(cli("score", "d.cu", cwd=tmp_path), 2, "is a directory")
    # a problem file, not kernels: said so (nvcc's "does not compile" was the answer)
    (tmp_path / "scale.c").write_text(SCALE_1D)
    assert_one_error(cli("score", "scale.c", cwd=tmp_path), 2, "not a CUDA source file (.cu)")
    (tmp_path / "README.md").write_text("# notes\n")
    assert_one_error(cli("score", "README.md", cwd=tmp_path), 2, "not a CUDA source file")


def test_optimize_refuses_a_file_that_is_no_problem(tmp_path):
    """`optimize README.md` went to the C preprocessor and came back with a hint about -I
    and -D: a file that is neither C nor Python is refused by its name, before any work."""
    (tmp_path / "README.md").write_text("# cudaperf: not C\n")
    proc = cli("optimize", "README.md", cwd=tmp_path)
    assert_one_error(proc, 2, "README.md is not a problem file")
    assert "-I DIR" not in proc.stderr and not (tmp_path / "cudaperf-runs").exists()


def test_doctor_reads_cc_and_nvcc_like_the_pipeline(tmp_path):
    fake = tmp_path / "fake-nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 99.9, V99.9'\n")
    fake.chmod(0o755)
    env = {**os.environ, "CUDAPERF_NVCC": str(fake), "CC": "cc -O2"}
    proc = subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", "doctor", "--json"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    doc = json.loads(proc.stdout)
    assert doc["nvcc"]["path"] == str(fake) and "99.9" in doc["nvcc"]["version"]
    assert doc["cc"]["ok"], doc["cc"]
    env["CC"] = '"cc'
    proc = subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", "doctor", "--json"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert "Traceback" not in proc.stderr and json.loads(proc.stdout)["cc"]["ok"] is False


def test_doctor_names_the_driver_and_the_optional_packages():
    """The driver gets its own row and key; torch (with its build), openai, jinja2,
    transformers, trl, peft and vllm each say their version or what needs them; ray is not
    listed while nothing uses it (no Ray executor yet); every check has a boolean ``ok``."""
    from importlib import metadata

    proc = subprocess.run([sys.executable, "-m", "cudaperf_cli", "doctor", "--json"], capture_output=True,
                          text=True, timeout=300, check=False)
    report = json.loads(proc.stdout)
    pk = report["packages"]
    assert set(pk) == {"torch", "openai", "jinja2", "transformers", "trl", "peft", "vllm", "GitPython"}
    for key in ("nvcc", "cc", "gpu", "driver", "cuda_core", "confinement"):
        assert isinstance(report[key]["ok"], bool), key
    assert report["driver"]["ok"] == report["gpu"]["ok"]
    for name, doc in pk.items():
        try:
            want = metadata.version(name)
        except metadata.PackageNotFoundError:
            want = None
        assert doc["version"] == want and doc["for"], name
    table = cli("doctor").stdout
    assert "driver" in table and "ray" not in table
    assert "[vllm]'" in table.replace("\n", "") or pk["vllm"]["version"]  # not eaten as Rich markup
    # whether candidate processes can be confined here, tried as a worker does it
    from cudaperf_cli.confine import landlock_abi

    conf = json.loads(proc.stdout)["confinement"]
    assert "confinement" in table and conf["detail"]
    if landlock_abi() == 0:
        assert not conf["ok"] and "could read the user's files" in conf["detail"]


# In-process checks of the optimize command's stages (no GPU, no nvcc needed).


def _problem(tmp_path: Path):
    from cudaperf_cli.problems.c import load_c_problem

    src = tmp_path / "scale.c"
    src.write_text(SCALE_1D)
    return load_c_problem(src, sizes={"n": 10})


def _options(tmp_path: Path, **kw):
    from cudaperf_cli.agent.optimize import OptimizeOptions

    return OptimizeOptions(file=tmp_path / "scale.c", run_root=tmp_path / "runs", **kw)


def test_no_device_and_nothing_compiled_is_no_correct_candidate(tmp_path):
    """Exit 4 promises compiled candidates; when none compiled, a GPU would not help: 1."""
    from cudaperf_cli.agent.kinds.c import CKind
    from cudaperf_cli.agent.loop import LoopResult, TurnRecord
    from cudaperf_cli.agent.optimize import EXIT_NO_CORRECT, EXIT_NO_DEVICE, finish_result

    _problem(tmp_path)
    turns = [
        TurnRecord(0, "builtin", "x", "compile_error"), TurnRecord(1, "builtin", "y", "refused")
    ]
    code, _, written = finish_result(CKind(), LoopResult(turns, None, "done"), None,
                                     tmp_path / "out.cu", _options(tmp_path))
    assert code == EXIT_NO_CORRECT and written is None
    turns[0].status = "no_device"
    code, _, _ = finish_result(CKind(), LoopResult(turns, None, "done"), None,
                               tmp_path / "out.cu", _options(tmp_path))
    assert code == EXIT_NO_DEVICE


def test_unwritable_result_is_a_clean_error(tmp_path):
    from types import SimpleNamespace

    from cudaperf_cli.agent.kinds.c import CKind
    from cudaperf_cli.agent.loop import LoopResult, TurnRecord
    from cudaperf_cli.agent.optimize import finish_result
    from cudaperf_cli.core import CudaperfError

    problem = _problem(tmp_path)
    best = TurnRecord(0, "builtin", "x", "correct", source="// kernel\n", gpu_ms=1.0)
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    evaluation = SimpleNamespace(problem=problem, settings=SimpleNamespace(arch="sm_90"))
    with pytest.raises(CudaperfError, match="cannot write"):
        finish_result(CKind(), LoopResult([best], 0, "done"), evaluation, blocker / "sub" / "out.cu",
                      _options(tmp_path))


def test_policy_exception_is_a_refused_turn(tmp_path, monkeypatch):
    """A bug in the policy (here a RecursionError) ends its turns, not the run."""
    import cudaperf_cli.build
    from cudaperf_cli.agent import optimize

    class Broken:
        def propose(self, problem, turn, history=None):
            raise RecursionError("maximum recursion depth exceeded")

    _problem(tmp_path)
    monkeypatch.setattr(optimize, "make_policy", lambda name, *a: Broken())
    monkeypatch.setattr(cudaperf_cli.build, "detect_arch", lambda *a, **k: None)
    monkeypatch.setattr(cudaperf_cli.build, "default_cache_root", lambda: tmp_path / "cache")
    code = optimize.run_optimize_command(
        _options(tmp_path, sizes={"n": 10}, turns=2, json_output=True, output=tmp_path / "scale.cu")
    )
    assert code == optimize.EXIT_NO_CORRECT
    (run,) = (tmp_path / "runs").iterdir()
    records = [json.loads(ln) for ln in (run / "turns.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["refused"]  # a refusal ends the turns
    assert "RecursionError" in records[0]["message"]
    assert "RecursionError" in (run / "policy-error-turn1.txt").read_text()


HELP_COMMANDS = ["", "optimize", "show", "doctor", "score", "rank", "bench", "bench run", "bench compare",
                 "data", "data pairs", "train", "train ranker", "train policy"]


def test_help_at_80_columns_cuts_no_option_name():
    """Rich help panels cut option names at 80 columns (``--request-timeo…``); below 150
    columns, and piped, the help is click's plain text: every option of every command
    appears whole, no line passes 80 columns."""
    import click
    import typer.main

    from cudaperf_cli.cli.main import app

    root = typer.main.get_command(app)
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("TYPER_USE_RICH", None)
    for words in HELP_COMMANDS:
        args = words.split()
        proc = subprocess.run([sys.executable, "-m", "cudaperf_cli", *args, "--help"], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 0, (words, proc.stderr)
        text = proc.stdout
        assert "…" not in text and "╭" not in text, (words, text)
        # types as a command line names them (TEXT, INTEGER, DIR), not Python annotations
        # (<list[str]>, <int range>); a required argument is SUITE, not {SUITE}
        assert not re.search(r"<(list\[|str|int|float|bool|Path)", text), (words, text)
        assert "{" not in text.splitlines()[0], (words, text.splitlines()[0])
        assert max(len(line) for line in text.splitlines()) <= 80, words
        cmd = root
        for w in args:
            cmd = cmd.commands[w]  # type: ignore[attr-defined]
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                for name in param.opts + param.secondary_opts:
                    assert name in text, (words, name)


def test_a_missing_package_exits_3_whichever_it_is(monkeypatch, tmp_path):
    """jinja2, openai, trl, peft and vllm missing: one exit code (3, as for a missing
    tool; docs/exit-codes.md), with the pip command as the hint."""
    import importlib.util

    from cudaperf_cli.core import MissingPackageError, ToolchainError
    from cudaperf_cli.policies import prompts
    from cudaperf_cli.policies.openai_policy import OpenAIChatModel
    from cudaperf_cli.rl import trainer

    assert issubclass(MissingPackageError, ToolchainError) and MissingPackageError.exit_code == 3
    monkeypatch.setitem(sys.modules, "jinja2", None)
    prompts._environment.cache_clear()
    with pytest.raises(MissingPackageError, match="jinja2") as info:
        prompts._environment()
    assert info.value.hint == install_hint("llm") and "[llm]'" in info.value.hint
    prompts._environment.cache_clear()
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingPackageError, match="openai"):
        OpenAIChatModel("m", "http://127.0.0.1:9/v1").client()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    (tmp_path / "p.c").write_text("void f(int n, float x[n]) { for (int i = 0; i < n; i++) x[i] = 0; }\n")
    with pytest.raises(MissingPackageError, match="trl"):
        trainer.preflight("tiny", [tmp_path], tmp_path / "out", force=False, use_vllm=False, lora=False)


def test_the_wheel_carries_the_bundled_ranker_and_prompts(tmp_path, monkeypatch):
    """A non-editable install (`pip install .`) found no ranker checkpoint: it lived beside
    the package, not in it.  The wheel now carries it, and the default points inside the
    package."""
    import fnmatch
    import zipfile

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    from cudaperf_cli.cli.ranker import default_checkpoint

    # the package-data globs cover the checkpoint's files (always checked) ...
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["cudaperf_cli"]
    monkeypatch.delenv("CUDAPERF_RANKER", raising=False)
    ckpt = default_checkpoint()
    files = [f.relative_to(ROOT / "cudaperf_cli").as_posix() for f in ckpt.iterdir() if f.is_file()]
    assert {"metadata.json", "model.joblib"} <= {Path(f).name for f in files}
    assert all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)
    assert ckpt.parent.parent.name == "cudaperf_cli"
    # ... and a real build puts them in the wheel, where this Python's setuptools can build
    # it without isolation (pyproject's license needs setuptools >= 77; a fresh 3.11 venv has 65)
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} < 77 cannot build this project without isolation")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("cudaperf-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"cudaperf_cli/checkpoints/ranker/metadata.json", "cudaperf_cli/checkpoints/ranker/model.joblib",
            "cudaperf_cli/prompts/system.j2"} <= names


def test_candidates_are_files_and_show_reads_the_run_back(tmp_path, nvcc_path):
    """Without a GPU a candidate's source was only a JSON string in turns.jsonl: every
    candidate is now candidates/turnT-sampleK.cu, and `cudaperf show RUN_DIR` prints the
    turns, the best candidate and how the run ended again (--json too)."""
    proc = cli("optimize", str(EXAMPLES / "elementwise.c"), "-n", "2", "-y", "--run-dir", str(tmp_path / "runs"),
               "-o", str(tmp_path / "out.cu"), cwd=tmp_path)
    assert proc.returncode in (0, 1, 4), proc.stderr  # 4: no GPU here
    (run_dir,) = (tmp_path / "runs").iterdir()
    records = [json.loads(ln) for ln in (run_dir / "turns.jsonl").read_text().splitlines()]
    for r in records:
        f = run_dir / "candidates" / f"turn{r['turn'] + 1}-sample{r['sample'] + 1}.cu"
        assert f.read_text() == r["source"]
    doc = json.loads(cli("show", str(run_dir), "--json").stdout)
    assert [t["turn"] for t in doc["turns"]] == [1, 2] and doc["kind"] == "c"
    assert all(Path(t["file"]).is_file() for t in doc["turns"])
    # the table's columns are in the document too (struct, regs, spills, seconds)
    for t, r in zip(doc["turns"], records):
        assert (t["structure_score"], t["registers"], t["compile_s"], t["eval_s"]) == (
            r["structure_score"], r["registers"], r["compile_s"], r["eval_s"])
        assert t["description"] == r["description"] and "spill_bytes" in t
    assert any(t["structure_score"] is not None for t in doc["turns"])
    assert doc["summary"]["exit_code"] == proc.returncode and doc["skipped_lines"] == 0
    text = cli("show", str(run_dir)).stdout
    assert "turn" in text and ("best: none verified" in text or "best: turn" in text) and "ended:" in text
    bad = cli("show", str(tmp_path))
    assert bad.returncode == 2 and error_lines(bad)[0].startswith("error: ") and "not a cudaperf run folder" in bad.stderr


def test_a_model_policy_without_jinja2_fails_before_the_baseline(tmp_path):
    """`--policy replay` without jinja2 failed only after measuring the CPU baseline; now
    the model policy's packages are checked first: exit 3, one line, no baseline."""
    code = ("import sys; sys.modules['jinja2'] = None; sys.argv = ['cudaperf'] + sys.argv[1:]\n"
            "from cudaperf_cli.cli.main import main; main()")
    proc = subprocess.run(
        [sys.executable, "-c", code, "optimize", str(EXAMPLES / "matmul.c"), "--policy", "replay", "--replay",
         str(EXAMPLES / "replies" / "matmul.jsonl"), "-n", "1", "-y", "--run-dir", str(tmp_path / "runs"),
         "-o", str(tmp_path / "o.cu")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 3, proc.stderr
    lines = error_lines(proc)
    assert lines[0] == "error: the model policies need the jinja2 package, which is not installed", proc.stderr
    assert not list(tmp_path.glob("runs/*/baseline.json"))


def test_a_run_folder_that_does_not_exist_says_so(tmp_path):
    """`show` and `--resume` on a path that is not there: 'no such folder' (was: 'is not a
    cudaperf run folder (no run.json in it)')."""
    missing = tmp_path / "nonexist"
    assert_one_error(cli("show", str(missing)), 2, "no such folder")
    assert_one_error(cli("optimize", "--resume", str(missing)), 2, "no such folder")
    missing.mkdir()
    assert_one_error(cli("show", str(missing)), 2, "is not a cudaperf run folder")
    # a damaged run.json or summary.json: said so (show had said 'the run never finished,
    # resume it', and the resume then failed)
    (missing / "run.json").write_text("{not json")
    assert_one_error(cli("show", str(missing)), 2, "run.json is unreadable")
    (missing / "run.json").write_text("{}")
    (missing / "summary.json").write_text("[1, 2")
    proc = cli("show", str(missing))
    assert proc.returncode == 2 and "summary.json is unreadable" in error_lines(proc)[0]
    # a file that is not a regular file: not 'no such file'
    if Path("/dev/null").exists():
        assert_one_error(cli("optimize", "/dev/null"), 2, "is not a regular file")


def test_piped_tables_follow_columns_when_it_is_set(tmp_path):
    """Piped, the tables were 160 columns whatever $COLUMNS said; now $COLUMNS rules when
    set (160 stays the width of a pipe without it)."""
    kernel = Path(__file__).parent / "data" / "kernels" / "atomic_loop.cu"
    narrow = run_cli("score", str(kernel), "--no-build", env={"COLUMNS": "90"})
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 90
    wide = run_cli("score", str(kernel), "--no-build", env={"COLUMNS": ""})
    assert max(len(line) for line in wide.stdout.splitlines()) > 90
