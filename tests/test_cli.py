"""The command line as a user meets it: help, version, and one clear line on bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300,
    )


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
