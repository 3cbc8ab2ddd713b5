"""``cudaperf port`` on the CPU (issue 16): marked functions found in a temporary git
repository, ported through optimize's loop (nvcc compiles; nothing runs without a GPU) and
committed on a branch with ``--allow-unverified``, the user's branch, index and work tree
left byte for byte as they were; re-runs skip unchanged functions; bad markers, a
directory outside git, a bad ``[port]`` table and a missing GitPython are one line each;
without ``--allow-unverified`` and without a GPU, exit 4 and no branch.

The commands run here are the ones ``examples/ci/port.yml`` runs (checked below).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, cuda_device_status, run_cli

pytest.importorskip("git", reason="cudaperf port needs GitPython (pip install 'cudaperf[port]')")

#: The commands of the CI workflow: the GPU job's and the CPU-only job's.
CI_GPU_ARGS = ["port", "--json"]
CI_CPU_ARGS = ["port", "--allow-unverified", "--turns", "1", "--json"]
WORKFLOW = REPO / "examples" / "ci" / "port.yml"
BRANCH = "cudaperf/port-test"

KERNELS_C = r"""#include <stdio.h>

#ifndef N
#error "N comes from cudaperf.toml"
#endif

// cudaperf: port
// cudaperf: x[n] y[n]
void saxpy_rows(int n, float a, const float *x, float *y)
{
    for (int i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}

/* Row sums of a matrix.
 * cudaperf: port
 */
void row_sums(int n, int m, const double A[n][m], double s[n])
{
    for (int i = 0; i < n; i++) {
        double acc = 0.0;
        for (int j = 0; j < m; j++)
            acc += A[i][j];
        s[i] = acc;
    }
}

// cudaperf: x[n] y[n]
void scale_copy(int n, float a, const float *x, float *y)
{
    for (int i = 0; i < n; i++)
        y[i] = a * x[i];
}

int main(void)
{
    static float x[N], y[N];
    static double A[200][300], s[200];
    saxpy_rows(N, 2.0f, x, y);
    row_sums(200, 300, A, s);
    scale_copy(N, 0.5f, x, y);
    printf("%f %f\n", y[0], s[0]);
    return 0;
}
"""

#: A marked function the loader refuses (it returns a value).
BAD_C = r"""// cudaperf: port
// cudaperf: x[n] y[n]
double dot(int n, const double *x, const double *y)
{
    double acc = 0.0;
    for (int i = 0; i < n; i++)
        acc += x[i] * y[i];
    return acc;
}

int main(void)
{
    static double x[100], y[100];
    return (int)dot(100, x, y);
}
"""

CONFIG = '[port.files."src/kernels.c"]\ndefines = ["N=1000"]\n'


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> Path:
    """A git repository at ``path`` with ``files`` committed on ``main``."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Port Test")
    git(path, "config", "user.email", "port@test.invalid")
    git(path, "config", "commit.gpgsign", "false")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "initial")
    return path


def checkout_state(repo: Path) -> dict[str, Any]:
    """What the user sees: HEAD, the checked-out branch, the index file's bytes and the
    hash of every work-tree file."""
    files = {}
    for p in sorted(repo.rglob("*")):
        rel = p.relative_to(repo)
        if rel.parts[0] != ".git" and p.is_file():
            files[rel.as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return {"head": git(repo, "rev-parse", "HEAD"), "branch": git(repo, "symbolic-ref", "HEAD"),
            "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(), "files": files}


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The repository after one ``port --allow-unverified`` (the CI's CPU command) with a
    dirty work tree: its state before and after, the run and its JSON report."""
    repo = make_repo(tmp_path_factory.mktemp("port") / "repo",
                     {"src/kernels.c": KERNELS_C, "src/bad.c": BAD_C, "cudaperf.toml": CONFIG,
                      "README": "a project\n"})
    (repo / "src" / "kernels.c").write_text(KERNELS_C + "/* edited, not committed */\n")
    (repo / "notes.txt").write_text("untracked\n")
    before = checkout_state(repo)
    proc = run_cli(*CI_CPU_ARGS, "--branch", BRANCH, cwd=repo)
    return {"repo": repo, "before": before, "after": checkout_state(repo), "proc": proc,
            "report": json.loads(proc.stdout) if proc.stdout.strip() else None}


def test_port_unverified_commits_beside_the_sources_and_leaves_the_checkout_alone(ported: dict[str, Any]) -> None:
    proc, report, repo = ported["proc"], ported["report"], ported["repo"]
    assert proc.returncode == 1, proc.stderr  # bad.c's dot() failed; the others committed
    assert report is not None, proc.stderr
    status = {f["function"]: f for f in report["functions"]}
    assert set(status) == {"saxpy_rows", "row_sums", "dot"}  # scale_copy is not marked
    assert status["saxpy_rows"]["status"] == status["row_sums"]["status"] == "unverified"
    assert status["dot"]["status"] == "failed" and "returns 'double'" in status["dot"]["message"]
    assert status["saxpy_rows"]["worktree_differs"] and not status["dot"]["worktree_differs"]
    assert "dot (src/bad.c)" in proc.stderr and "port: [1/3]" in proc.stderr

    # the user's branch, HEAD, index and work tree: byte for byte as before
    assert ported["after"] == ported["before"]
    assert not (repo / "cudaperf-runs").exists()
    assert list((repo / ".git" / "cudaperf" / "runs").iterdir())

    commit = report["commit"]
    assert commit and git(repo, "rev-parse", BRANCH) == commit
    assert git(repo, "rev-parse", f"{commit}^") == ported["before"]["head"]
    added = set(git(repo, "diff", "--name-only", ported["before"]["head"], commit).splitlines())
    assert added == {"src/kernels.saxpy_rows.cu", "src/kernels.saxpy_rows.h",
                     "src/kernels.row_sums.cu", "src/kernels.row_sums.h"}
    cu = git(repo, "show", f"{commit}:src/kernels.saxpy_rows.cu")
    assert cu.startswith("// UNVERIFIED") and "__global__" in cu
    assert 'extern "C" void saxpy_rows(int n, float a, const float *x_host, float *y_host)' in cu
    header = git(repo, "show", f"{commit}:src/kernels.row_sums.h")
    assert "UNVERIFIED" in header.splitlines()[1]
    assert "void row_sums(int n, int m, const double A[n][m], double s[n]);" in header
    message = git(repo, "log", "-1", "--format=%B", commit)
    assert message.splitlines()[0] == "cudaperf port: 2 functions, UNVERIFIED (no CUDA device)"
    row = next(ln for ln in message.splitlines() if ln.startswith("| saxpy_rows |"))
    assert "src/kernels.c:9" in row and "UNVERIFIED" in row and "gcc -O3" in row and "grid1d" in row
    assert "nvcc -O3 -arch=" in message and "-DN=1000 -c src/kernels.saxpy_rows.cu" in message
    assert "- src/bad.c:3 dot: failed:" in message
    assert message.count("Cudaperf-Port: ") == 2


def test_port_rerun_skips_unchanged_functions(ported: dict[str, Any]) -> None:
    repo = ported["repo"]
    tip = git(repo, "rev-parse", BRANCH)
    proc = run_cli(*CI_CPU_ARGS, "--branch", BRANCH, "src/kernels.c", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [f["status"] for f in report["functions"]] == ["unchanged", "unchanged"]
    assert report["commit"] is None and "nothing to commit" in report["message"]
    assert git(repo, "rev-parse", BRANCH) == tip
    assert "saxpy_rows: unchanged since" in proc.stderr
    assert checkout_state(repo) == ported["after"]


def test_port_branch_without_head_is_refused_unless_force(ported: dict[str, Any], tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ported["repo"], repo)
    (repo / "src" / "kernels.c").write_text(KERNELS_C.replace("row_sums(200, 300", "row_sums(100, 300"))
    git(repo, "commit", "-q", "-am", "smaller sums")
    old_tip = git(repo, "rev-parse", BRANCH)
    proc = run_cli(*CI_CPU_ARGS, "--branch", BRANCH, cwd=repo)
    assert proc.returncode == 2
    assert error_lines(proc) == [f"error: branch {BRANCH} exists and does not contain HEAD "
                                 f"({git(repo, 'rev-parse', 'HEAD')[:12]})"]
    assert git(repo, "rev-parse", BRANCH) == old_tip

    proc = run_cli(*CI_CPU_ARGS, "--branch", BRANCH, "--force", "src", cwd=repo)
    assert proc.returncode == 1, proc.stderr  # dot() still fails
    report = json.loads(proc.stdout)
    assert report["reset"] and git(repo, "rev-parse", f"{BRANCH}^") == git(repo, "rev-parse", "HEAD")
    assert {f["function"]: f["status"] for f in report["functions"]} == {
        "saxpy_rows": "unverified", "row_sums": "unverified", "dot": "failed"}


def test_verified_port_commits_what_optimize_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU path, with optimize's result faked (this machine has no GPU): the .cu is
    optimize's result file unchanged, the message names the GPU, speedups and baseline."""
    import cudaperf_cli.agent.optimize as optimize
    import cudaperf_cli.port as port
    from cudaperf_cli.agent.kinds.base import DeviceInfo

    repo = make_repo(tmp_path / "repo", {"src/kernels.c": KERNELS_C, "cudaperf.toml": CONFIG})
    before = checkout_state(repo)
    written: list[str] = []

    def fake_optimize(opts: Any, given: Any = frozenset()) -> int:
        text = f"// Generated by cudaperf from kernels.c, function {opts.function}.\n__global__ void k() {{}}\n"
        opts.output.parent.mkdir(parents=True, exist_ok=True)
        opts.output.write_text(text)
        written.append(text)
        best = {"speedup_kernel": 250.0, "speedup_e2e": 1.5, "baseline": "gcc -O3, 1 thread", "cpu_ms": 1.0,
                "gpu_ms": 0.004, "e2e_ms": 0.66, "description": "grid1d, block 256", "structure_score": 0.8}
        print(json.dumps({"output": str(opts.output), "best": best, "arch": "sm_90", "run_dir": str(tmp_path),
                          "device": {"name": "NVIDIA H200"}, "warnings": []}))
        return 0

    monkeypatch.setattr(optimize, "run_optimize_command", fake_optimize)
    monkeypatch.setattr(port, "_probe_device", lambda: DeviceInfo(arch="sm_90", name="NVIDIA H200"))
    code, report = port.run_port(port.PortOptions(branch=BRANCH, optimize={"turns": 1}, cwd=repo),
                                 progress=lambda line: None)
    assert code == 0 and [f["status"] for f in report["functions"]] == ["verified", "verified"]
    commit = report["commit"]
    assert git(repo, "show", f"{commit}:src/kernels.saxpy_rows.cu") + "\n" == written[0]
    message = git(repo, "log", "-1", "--format=%B", commit)
    assert message.splitlines()[0] == "cudaperf port: 2 functions verified on NVIDIA H200"
    row = next(ln for ln in message.splitlines() if ln.startswith("| row_sums |"))
    assert "250x (!) (GPU 0.004 ms)" in row and "1.5x" in row and "gcc -O3, 1 thread: 1 ms" in row
    assert "NVIDIA H200" in row and "grid1d, block 256" in row
    assert "UNVERIFIED" not in git(repo, "show", f"{commit}:src/kernels.row_sums.h")
    assert checkout_state(repo) == before


def test_no_gpu_without_allow_unverified_exits_4_and_makes_no_branch(tmp_path: Path) -> None:
    usable, why = cuda_device_status()
    if usable:
        pytest.skip(f"a CUDA device is usable here ({why})")
    repo = make_repo(tmp_path / "repo", {"src/kernels.c": KERNELS_C, "cudaperf.toml": CONFIG})
    before = checkout_state(repo)
    proc = run_cli(*CI_GPU_ARGS, cwd=repo)
    assert proc.returncode == 4, proc.stderr
    assert error_lines(proc)[0].startswith("error: no CUDA device: nothing can be verified; nothing written")
    assert json.loads(proc.stdout)["commit"] is None
    assert git(repo, "for-each-ref", "refs/heads/cudaperf") == ""
    assert not (repo / ".git" / "cudaperf" / "runs").exists()
    assert checkout_state(repo) == before


@pytest.mark.parametrize("source, line", [
    ("int counter;\n// cudaperf: port\nint total;\n", "src/x.c:2: '// cudaperf: port' is not directly above a "
     "function definition (it is above a declaration (mark the definition))"),
    ("void f(int n, float *x)\n{\n    // cudaperf: port\n    x[0] = 1;\n}\n", "src/x.c:3: '// cudaperf: port' is "
     "not directly above a function definition (it is above an expression statement)"),
    ("// cudaperf: port\nint main(void) { return 0; }\n", "src/x.c:1: 'main' cannot be ported: mark the function "
     "it calls"),
])
def test_bad_marker_is_one_line_exit_2(tmp_path: Path, source: str, line: str) -> None:
    repo = make_repo(tmp_path / "repo", {"src/x.c": source})
    proc = run_cli("port", "--allow-unverified", cwd=repo)
    assert proc.returncode == 2 and error_lines(proc) == [f"error: {line}"], proc.stderr
    assert "Traceback" not in proc.stderr and git(repo, "for-each-ref", "refs/heads/cudaperf") == ""


def test_outside_git_and_bad_config_are_one_line_exit_2(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "k.c").write_text(KERNELS_C)
    if subprocess.run(["git", "rev-parse"], cwd=plain, capture_output=True).returncode == 0:
        pytest.skip(f"{tmp_path} is inside a git repository")
    proc = run_cli("port", cwd=plain)
    assert proc.returncode == 2
    assert error_lines(proc) == [f"error: {plain.resolve()} is not inside a git repository"]

    repo = make_repo(tmp_path / "repo", {"src/kernels.c": KERNELS_C,
                                         "cudaperf.toml": '[port.files."src/kernels.c"]\ninclude = ["inc"]\n'})
    proc = run_cli("port", cwd=repo)
    assert proc.returncode == 2
    assert error_lines(proc) == ['error: cudaperf.toml [port.files."src/kernels.c"]: unknown key(s) include; '
                                 "known: includes, defines, sources, sizes, init, functions"]


def test_missing_gitpython_is_exit_3_with_the_pip_hint(tmp_path: Path) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['git'] = None  # import git fails\n")
    proc = run_cli("port", cwd=tmp_path, env={"PYTHONPATH": os.pathsep.join([str(hide), str(REPO)])})
    assert proc.returncode == 3, proc.stderr
    assert error_lines(proc) == ["error: cudaperf port needs the GitPython package, which is not installed"]
    assert "hint: pip install " in proc.stderr and "[port]'" in proc.stderr


def test_port_help_at_80_columns() -> None:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}
    env.pop("TYPER_USE_RICH", None)
    proc = subprocess.run([sys.executable, "-m", "cudaperf_cli", "port", "--help"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and max(len(ln) for ln in proc.stdout.splitlines()) <= 80
    for option in ("--branch", "--allow-unverified", "--force", "--json", "--turns", "--policy"):
        assert option in proc.stdout


def _port_commands(run: str) -> list[list[str]]:
    """The ``cudaperf port`` commands of a step's script, as argument lists (up to a
    redirection or another shell operator)."""
    out = []
    for line in run.splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] == ["cudaperf", "port"]:
            cut = next((i for i, w in enumerate(words) if w in (">", "|", "&&", ";", "||") or w.startswith(">")),
                       len(words))
            out.append(words[1:cut])
    return out


def test_ci_workflow_runs_the_commands_tested_here() -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml (in the test extra) parses the workflow")
    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = doc["jobs"]
    found = {name: [c for step in job["steps"] for c in _port_commands(step.get("run", ""))]
             for name, job in jobs.items()}
    assert found == {"port-gpu": [CI_GPU_ARGS], "port-cpu": [CI_CPU_ARGS]}
    assert "gpu" in jobs["port-gpu"]["runs-on"] and "self-hosted" in jobs["port-gpu"]["runs-on"]
    for job in jobs.values():
        scripts = " ".join(step.get("run", "") for step in job["steps"])
        assert "gh pr create" in scripts and "git push origin" in scripts
    doc_text = (REPO / "docs" / "ci-port.md").read_text()
    assert WORKFLOW.read_text().strip() in doc_text  # the doc shows the file as it is


def test_force_never_resets_a_branch_with_the_users_commits(tmp_path: Path) -> None:
    """--force moves a port branch back onto HEAD; a branch holding commits port did not
    make (the user's own, named with --branch) is refused, one line, before any work."""
    repo = make_repo(tmp_path / "repo", {"src/kernels.c": KERNELS_C, "cudaperf.toml": CONFIG})
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "work.txt").write_text("my important work\n")
    git(repo, "add", "work.txt")
    git(repo, "commit", "-q", "-m", "my important work")
    mine = git(repo, "rev-parse", "feature")
    git(repo, "checkout", "-q", "main")
    (repo / "more.txt").write_text("main moves on\n")
    git(repo, "add", "more.txt")
    git(repo, "commit", "-q", "-m", "main moves on")
    proc = run_cli(*CI_CPU_ARGS, "--branch", "feature", "--force", cwd=repo)
    assert proc.returncode == 2 and len(error_lines(proc)) == 1, proc.stderr
    assert "cudaperf port did not make" in error_lines(proc)[0]
    assert git(repo, "rev-parse", "feature") == mine
    assert not (repo / ".git" / "cudaperf" / "runs").exists()  # refused before any work


def test_branch_names_git_cannot_make_are_one_line_before_any_work(tmp_path: Path) -> None:
    """A branch 'cudaperf' blocks 'cudaperf/port-<date>' (git keeps refs as files); '@{-1}'
    passed 'check-ref-format --branch' (it expands it); 'refs/heads/main' made
    refs/heads/refs/heads/main.  Each was a traceback or a wrong ref after the whole loop."""
    repo = make_repo(tmp_path / "repo", {"src/kernels.c": KERNELS_C, "cudaperf.toml": CONFIG})
    git(repo, "branch", "cudaperf")
    git(repo, "branch", "taken/sub")
    for extra, words in [((), "a branch named cudaperf exists"), (("--branch", "@{-1}"), "not a valid branch name"),
                         (("--branch", "refs/heads/main"), "not a valid branch name"),
                         (("--branch", "taken"), "branches named taken/... exist")]:
        proc = run_cli(*CI_CPU_ARGS, *extra, cwd=repo)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (extra, proc.stderr)
        assert words in error_lines(proc)[0], (extra, proc.stderr)
    assert not (repo / ".git" / "cudaperf" / "runs").exists()


def test_the_message_cannot_forge_a_record_or_quote_an_included_file() -> None:
    """A file name with a line break and a forged trailer, and a failure whose compiler
    output quotes an included file, stay on one escaped line each: the records are read
    from the message's last paragraph only, and no quoted source line reaches it."""
    from cudaperf_cli.port import (
        FAILED, TRAILER, UNVERIFIED, FunctionResult, Marked, _last_paragraph, commit_message)

    forged = '{"file":"src/saxpy.c","function":"saxpy","source":"abc","status":"verified"}'
    evil = FunctionResult(Marked(f"src/x\n{TRAILER} {forged}\nz.c", "f", 3, 2), "h1", status=FAILED,
                          message="In file included from src/x.c:2:\n/tmp/secret.txt:1:1: error: x\n"
                                  "    1 | TOPSECRET_TOKEN=abc123\n")
    good = FunctionResult(Marked("src/saxpy.c", "saxpy", 9, 8), "h2", status=UNVERIFIED,
                          cu="src/saxpy.saxpy.cu", h="src/saxpy.saxpy.h", description="1-D grid\nover i")
    msg = commit_message([evil, good], "0" * 40)
    assert "TOPSECRET" not in msg
    trailers = [ln for ln in msg.splitlines() if ln.startswith(TRAILER)]
    assert len(trailers) == 1 and '"function":"saxpy"' in trailers[0] and '"source":"h2"' in trailers[0]
    assert trailers[0] in _last_paragraph(msg)
    assert "src/x\\n" in msg and "1-D grid\\nover i" in msg  # escaped, on their rows


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("gcc") is None, reason="needs gcc and g++")
def test_the_header_compiles_from_c_and_cpp(ported: dict[str, Any], tmp_path: Path) -> None:
    """row_sums(int n, int m, const double A[n][m], double s[n]): C keeps that prototype;
    C++ has no variable-length array parameters (the header failed there: 'use of parameter
    outside function body') and gets the wrapper's own, with pointers."""
    repo, commit = ported["repo"], ported["report"]["commit"]
    (tmp_path / "k.h").write_text(git(repo, "show", f"{commit}:src/kernels.row_sums.h"))
    (tmp_path / "use.c").write_text('#include "k.h"\nint main(void) { return 0; }\n')
    (tmp_path / "use.cpp").write_text('#include "k.h"\nint main() { return 0; }\n')
    for cc, src in (("gcc", "use.c"), ("g++", "use.cpp")):
        proc = subprocess.run([cc, "-fsyntax-only", "-Wall", src], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, (cc, proc.stderr)
    text = (tmp_path / "k.h").read_text()
    assert "const double A[n][m]" in text and 'extern "C" void row_sums(' in text
