"""Shared fixtures: GPU detection (``gpu`` marker), C/nvcc compile helpers, the one helper
that runs the CLI in a child process (:func:`run_cli`).

Tests marked ``@pytest.mark.gpu`` are skipped when no CUDA device is usable.  Detection
runs in a *child* process (``cudaperf_cli.evaluate.probe_device``), so the pytest process
itself never initialises CUDA (and stays fork-safe).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator, Mapping

import pytest

# Human output (tables) follows $COLUMNS when it is set: CI's environment may set it (an 80
# column log), this machine's does not.  One width for every test and every child it starts;
# a test of narrow output sets its own.
os.environ["COLUMNS"] = "200"

# A test run started in the background by a shell without job control (`nohup ... &` in a
# script) inherits SIGINT ignored; Python then installs no KeyboardInterrupt handler, and
# neither do the children it starts, so every Ctrl-C test would fail for a reason that is
# not the code's.  A handler here (in each pytest-xdist worker too) makes the children's
# SIGINT default again: exec resets caught signals to their default.
import signal  # noqa: E402

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from cudaperf_cli.evaluate import probe_device

#: This checkout (the package the tests test).
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _cpu_math_warmed_up() -> None:
    """Tests that compare torch results in this process get the accuracy that the children
    get (:mod:`cudaperf_cli.torch_cpu_math`, pytorch/pytorch#188792): the first
    multi-threaded ``exp``/``tanh`` of a process can be off by 1e-4 otherwise."""
    torch = sys.modules.get("torch")
    if torch is not None:
        from cudaperf_cli.torch_cpu_math import warm_up_cpu_math

        warm_up_cpu_math(torch)


def load_benchmark(name: str):
    """The module ``benchmarks/<name>.py`` (the benchmark scripts are no package), registered
    in ``sys.modules`` as ``cudaperf_benchmarks_<name>`` (its dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location(f"cudaperf_benchmarks_{name}",
                                                  REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_cli(*args: str, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
            timeout: float = 300.0) -> subprocess.CompletedProcess:
    """``python -m cudaperf_cli ARGS...`` in a child process, as a user runs it: output
    captured as text, 200 columns (Rich tables unwrapped), this checkout first on
    ``PYTHONPATH`` (a worktree tests its own package), ``env`` on top of the environment."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    full = {**os.environ, "COLUMNS": "200", "PYTHONPATH": path, **(env or {})}
    return subprocess.run([sys.executable, "-m", "cudaperf_cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=full, timeout=timeout)

@functools.lru_cache(maxsize=1)
def cuda_device_status() -> tuple[bool, str]:
    """(usable, reason): the evaluate stage's device probe (a child process), once a session."""
    info = probe_device()
    if info.get("available"):
        return True, f"{info.get('name')} ({info.get('arch')})"
    return False, str(info.get("reason", "no CUDA device"))


#: Tests marked ``slow`` (``python -m pytest -m "not slow"`` leaves them out): each took
#: about 15 s or more in the CPU suite on 2 cores (``--durations``, pytest-xdist ``-n 2``,
#: 2026-12-02), whole optimize/bench/training runs and compile-everything sweeps.  A file
#: name marks every test in it; ``file::test`` one test (its parametrisations too).
SLOW_TESTS = (
    "test_bench_ray.py",
    "test_ranker_suite.py",
    "test_builtin_policy.py",
    "test_rl_train.py",
    "test_builtin_torch_policy.py",
    "test_torch_large_load.py",
    "test_ranker_lm.py",
    "test_bench_cleanup.py",
    "test_optimize_driver.py::test_torch_baseline_once_then_every_candidate_job_gets_it_and_resume_reads_it",
    "test_torch_eval.py::test_host_candidate_errors",
    "test_torch_eval.py::test_hanging_worker_is_killed_at_the_time_limit",
    "test_ranker.py::test_damaged_inputs_are_one_line",
    "test_ranker.py::test_cli_pairs_train_rank",
    "test_ranker.py::test_cli_cv_line",
    "test_bench.py::test_resume_skips_done_problems_and_checks_settings",
    "test_bench.py::test_compare_warns_and_refuses_other_gpus",
    "test_bench.py::test_ctrl_c_kills_children_writes_partial_report_and_resumes",
    "test_bench.py::test_hang_crash_and_error_do_not_stop_the_suite",
    "test_torch_optimize.py::test_model_replies_through_the_loop_with_guards",
    "test_torch_problems.py::test_hanging_file_is_killed_at_the_time_limit_and_the_folder_goes_on",
    "test_torch_problems.py::test_a_problem_that_forks_at_import_does_not_hang_the_loader",
    "test_torch_problems.py::test_single_file_error_is_a_problem_error",
    "test_sandbox.py::test_a_dev_zero_include_is_one_line_under_the_memory_limit",
    "test_transformers_policy.py::test_optimize_end_to_end_with_a_random_model",
    "test_polybench.py::test_polybench_candidates_verify_on_the_cpu_emulation",
)


def _is_slow(item: pytest.Item) -> bool:
    file = item.path.name
    test = f"{file}::{item.originalname if hasattr(item, 'originalname') else item.name}"
    return file in SLOW_TESTS or test in SLOW_TESTS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for it in items:
        if _is_slow(it):
            it.add_marker(pytest.mark.slow)
    gpu_items = [it for it in items if it.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    ok, reason = cuda_device_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA device: {reason}")
    for it in gpu_items:
        it.add_marker(skip)


@pytest.fixture
def gpu() -> str:
    """Skip the test unless a CUDA device is usable; returns the probe's answer."""
    ok, reason = cuda_device_status()
    if not ok:
        pytest.skip(f"needs a CUDA device: {reason}")
    return reason


def requires_gpu() -> None:
    """Call inside a test to skip it when no CUDA device is usable."""
    ok, reason = cuda_device_status()
    if not ok:
        pytest.skip(f"needs a CUDA device: {reason}")


# ---------------------------------------------------------------------------------------
# Compile helpers
# ---------------------------------------------------------------------------------------


@pytest.fixture
def compile_c(tmp_path: Path) -> Callable[..., Path]:
    """``compile_c(source, name="lib") -> Path`` of a ``cc -O3 -shared -fPIC`` library."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc)")

    def build(source: str, name: str = "lib") -> Path:
        src = tmp_path / f"{name}.c"
        lib = tmp_path / f"{name}.so"
        src.write_text(source)
        proc = subprocess.run(
            [cc, "-O3", "-shared", "-fPIC", "-o", str(lib), str(src)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        return lib

    return build


@pytest.fixture
def nvcc_path() -> str:
    """Path of nvcc, or skip."""
    from cudaperf_cli.build import find_nvcc
    from cudaperf_cli.core import ToolchainError

    try:
        return find_nvcc()
    except ToolchainError as exc:
        pytest.skip(str(exc))


@contextlib.contextmanager
def fake_chat_server(body: bytes) -> Iterator[tuple[str, list[bytes]]]:
    """A local HTTP server that answers every POST with ``body`` (JSON content type):
    yields ``(base URL ending in /v1, the request bodies received so far)``."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", received
    finally:
        httpd.shutdown()
        httpd.server_close()
