"""``cudaperf bench --executor ray`` on a Ray cluster this test starts on 127.0.0.1 (a head
node with 2 CPUs and no GPU) and stops by its own process group; the problems run through
the fake optimize of tests/test_bench.py (and one real one, compile-only without a GPU).

What must hold: the same statuses and the same report schema as ``--executor local``; a
worker killed mid-task costs that attempt, which is retried and recorded; Ctrl-C cancels
every task (no process left) and writes the partial report, and ``--resume`` continues it
on another executor; an unreachable cluster and a node that does not see the output folder
are one clear line each."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.test_bench import FAKE_OPTIMIZE, ROOT, alive, bench, calls, make_suite

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cudaperf[ray]')")

#: The fake optimize, plus a problem whose first attempt starts a child and kills its Ray
#: worker (its parent).
FAKE_WITH_DIE = FAKE_OPTIMIZE.replace(
    'stem = file.stem\n',
    'stem = file.stem\n'
    'if stem == "die" and not Path(os.environ["FAKE_PIDS"], "died").exists():\n'
    '    worker = os.getppid()\n'
    '    Path(os.environ["FAKE_PIDS"], "died").write_text(str(worker))\n'
    '    orphan = subprocess.Popen(["sleep", "600"])\n'
    '    Path(os.environ["FAKE_PIDS"], "orphan.pid").write_text(str(orphan.pid))\n'
    '    os.kill(worker, signal.SIGKILL)  # the Ray worker\n'
    '    time.sleep(60)\n', 1)
assert FAKE_WITH_DIE != FAKE_OPTIMIZE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A Ray head on 127.0.0.1 (2 CPUs, no GPU): its address; stopped by its process group."""
    from cudaperf_cli.ray_cluster import local_head

    with local_head(2, num_gpus=0) as address:
        yield address


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "fake_optimize.py"
    script.write_text(FAKE_WITH_DIE)
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {"FAKE_LOG": str(tmp_path / "calls.log"), "FAKE_PIDS": str(pids)}
    # a node's optimize gets the driver's CUDAPERF_* variables only: the fake's own go on its
    # command line (the Ray head runs with the environment of this test's start)
    cmd = ["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, str(script)]
    return {
        **env,
        "CUDAPERF_BENCH_OPTIMIZE": shlex.join(cmd),
        "CUDAPERF_GPU_LOCK_DIR": str(tmp_path / "locks"),
        "RAY_ADDRESS": "",  # only --ray-address
    }


def _shape(obj: object) -> object:
    """The keys of a JSON document, recursively (lists by their first item)."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shape(obj[0])] if obj and isinstance(obj[0], dict) else []
    return None


def test_ray_and_local_give_the_same_statuses_and_schema(tmp_path: Path, fake: dict[str, str],
                                                         ray_head: str) -> None:
    suite = make_suite(tmp_path / "s", ["bad.c", "crash.c", "fast.c", "hang.c", "slow.c"])
    reports = {}
    for executor in ("local", "ray"):
        extra = ["--ray-address", ray_head] if executor == "ray" else []
        out = tmp_path / executor
        proc = bench(str(suite), "-o", str(out), "-j", "2", "--problem-timeout", "4", "--json",
                     "--executor", executor, *extra, env=fake)
        assert proc.returncode == 0, proc.stderr
        reports[executor] = json.loads(proc.stdout)
        assert not (out / ".cudaperf-node-check").exists()
    local, remote = reports["local"], reports["ray"]
    status = {p["id"]: (p["status"], p["message"]) for p in local["problems"]}
    assert status == {p["id"]: (p["status"], p["message"]) for p in remote["problems"]}
    assert status["hang.c"][0] == "problem_timeout" and status["fast.c"][0] == "correct"
    assert status["bad.c"][0] == "refused_at_load" and status["crash.c"][0] == "error"
    assert local["metrics"] == remote["metrics"]
    ex = remote["executor"]
    assert ex["executor"] == "ray" and ex["address"] == ray_head and ex["gpus"] == 0
    assert ex["cpus"] == 2 and len(ex["nodes"]) == 1 and ex["gpu_per_task"] == 0.0
    assert local["executor"]["executor"] == "local"
    assert remote["settings"]["executor"] == "ray" and remote["settings"]["ray_address"] == ray_head
    for p in remote["problems"]:
        pl = p["placement"]
        assert pl["executor"] == "ray" and pl["node_id"] == ex["nodes"][0]["node_id"], pl
        assert pl["attempts"] == 1 and pl["lost"] == [] and pl["gpus"] == [] and pl["gpu_name"] is None
    for p in local["problems"]:
        assert p["placement"]["executor"] == "local" and p["placement"]["attempts"] == 1
    # same schema: the report's keys (values differ: times, paths, placement's details)
    lk, rk = _shape(local), _shape(remote)
    for doc in (lk, rk):
        doc["problems"][0].pop("placement")  # type: ignore[index]
        doc.pop("executor")  # type: ignore[union-attr]
    assert lk == rk
    assert "- executor: ray at " + ray_head in (tmp_path / "ray" / "report.md").read_text()
    hang = int((Path(fake["FAKE_PIDS"]) / "hang.pid").read_text())
    assert not alive(hang)  # the timed-out problem's group died on the node too


def test_a_worker_killed_mid_task_is_retried(tmp_path: Path, fake: dict[str, str], ray_head: str) -> None:
    suite = make_suite(tmp_path / "s", ["die.c", "fast.c"])
    proc = bench(str(suite), "-o", str(tmp_path / "out"), "--json", "--executor", "ray",
                 "--ray-address", ray_head, env=fake)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    by_id = {p["id"]: p for p in report["problems"]}
    died = by_id["die.c"]
    assert died["status"] == "correct", died["message"]
    pl = died["placement"]
    assert pl["attempts"] == 2 and len(pl["lost"]) == 1, pl
    assert pl["lost"][0]["attempt"] == 1 and "Worker" in pl["lost"][0]["reason"], pl
    killed = int((Path(fake["FAKE_PIDS"]) / "died").read_text())
    assert pl["pid"] != killed
    # the lost attempt's own child died with it (the reaper killed its process group)
    assert not alive(int((Path(fake["FAKE_PIDS"]) / "orphan.pid").read_text()))
    # the first attempt killed its worker before its log line; the second ran to the end
    assert calls(fake).count("die") == 1 and by_id["fast.c"]["placement"]["attempts"] == 1


def test_retries_are_bounded(tmp_path: Path, fake: dict[str, str], ray_head: str) -> None:
    script = Path(shlex.split(fake["CUDAPERF_BENCH_OPTIMIZE"])[-1])
    script.write_text(FAKE_WITH_DIE.replace('and not Path(os.environ["FAKE_PIDS"], "died").exists()', ""))
    suite = make_suite(tmp_path / "s", ["die.c"])
    proc = bench(str(suite), "-o", str(tmp_path / "out"), "--json", "--executor", "ray",
                 "--ray-address", ray_head, "--retries", "1", env=fake)
    assert proc.returncode == 0, proc.stderr
    p = json.loads(proc.stdout)["problems"][0]
    assert p["status"] == "error" and p["message"].startswith("lost 2 time(s) (worker or node died)")
    assert p["placement"]["attempts"] == 2 and len(p["placement"]["lost"]) == 2


def _bench_with_a_hung_problem(tmp_path: Path, fake: dict[str, str], ray_head: str
                               ) -> tuple[Path, Path, subprocess.Popen, Path]:
    """A bench on Ray of fast.c and hang.c, returned once fast.c is done and hang.c hangs:
    (suite, output folder, the bench process, the file holding the hung child's pid)."""
    suite = make_suite(tmp_path / "s", ["fast.c", "hang.c"])
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cudaperf_cli", "bench", str(suite), "-o", str(out), "-j", "2",
         "--executor", "ray", "--ray-address", ray_head],
        cwd=ROOT, env={**os.environ, **fake}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid_file = Path(fake["FAKE_PIDS"]) / "hang.pid"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (pid_file.exists() and (out / "problems" / "fast.c.json").exists()):
        time.sleep(0.1)
    assert pid_file.exists(), "the fake optimize never started"
    return suite, out, proc, pid_file


def _gone_within(pid_file: Path, seconds: float = 20.0) -> float:
    """Seconds until the pid in ``pid_file`` is gone (the watcher on the node stops the tree
    within a few); ``seconds`` at most."""
    t0 = time.monotonic()
    while alive(int(pid_file.read_text())) and time.monotonic() - t0 < seconds:
        time.sleep(0.1)
    return time.monotonic() - t0


def test_ctrl_c_cancels_every_task_and_resume_continues_locally(
    tmp_path: Path, fake: dict[str, str], ray_head: str
) -> None:
    suite, out, proc, pid_file = _bench_with_a_hung_problem(tmp_path, fake, ray_head)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert "--resume" in err
    print(f"the hung problem's child died {_gone_within(pid_file):.1f} s after the bench exited")
    assert not alive(int(pid_file.read_text()))  # the hung problem's whole group, on the node
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] and report["suite"]["not_run"] == ["hang.c"]
    assert [p["id"] for p in report["problems"]] == ["fast.c"]
    Path(fake["FAKE_LOG"]).unlink()
    done = bench(str(suite), "-o", str(out), "--resume", "--executor", "local",
                 env={**fake, "FAKE_NOHANG": "1"})
    assert done.returncode == 0, done.stderr
    assert calls(fake) == ["hang"]
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] and [p["status"] for p in report["problems"]] == ["correct", "correct"]
    assert [p["placement"]["executor"] for p in report["problems"]] == ["ray", "local"]


def test_unreachable_cluster_is_one_line_and_leaves_no_folder(tmp_path: Path, fake: dict[str, str]) -> None:
    suite = make_suite(tmp_path / "s", ["fast.c"])
    t0 = time.monotonic()
    proc = bench(str(suite), "-o", str(tmp_path / "out"), "--executor", "ray", "--ray-address",
                 f"127.0.0.1:{_free_port()}", env=fake)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot reach the Ray cluster at 127.0.0.1:"), proc.stderr
    assert time.monotonic() - t0 < 60 and not (tmp_path / "out").exists()
    bad = bench(str(suite), "-o", str(tmp_path / "out"), "--executor", "ray", "--ray-address", "nowhere",
                env=fake)
    assert bad.returncode == 2 and "--ray-address must be host:port" in bad.stderr
    local = bench(str(suite), "-o", str(tmp_path / "out"), "--ray-address", "127.0.0.1:1", env=fake)
    assert local.returncode == 2 and "--ray-address needs --executor ray" in local.stderr
    local = bench(str(suite), "-o", str(tmp_path / "out"), "--per-gpu", "3", env=fake)
    assert local.returncode == 2 and "--per-gpu needs --executor ray" in local.stderr


def test_a_node_that_does_not_see_the_output_folder_refuses_the_problem(
    tmp_path: Path, fake: dict[str, str], ray_head: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudaperf_cli.bench.executor import Launch, RayExecutor

    for k, v in fake.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "out"
    ex = RayExecutor(ray_head, out, per_gpu=2, retries=0)
    try:
        ex.token_file.write_text("another run's token\n")  # as a node without the folder
        fin = ex.execute(Launch(problem_id="x", args=[str(tmp_path / "x.c")],
                                stdout_path=str(tmp_path / "o"), stderr_path=str(tmp_path / "e"),
                                limit_s=30))
    finally:
        ex.close()
    assert fin.rc is None and "does not see the output folder" in fin.error, fin
    assert "needs the suite and -o on a filesystem every node shares" in fin.error
    assert not (tmp_path / "o").exists()  # nothing ran


# ---------------------------------------------------------------------------------------
# train policy --executor ray: the rollout's candidates evaluated by Ray actors
# ---------------------------------------------------------------------------------------


def test_train_policy_evaluates_on_ray_actors(tmp_path: Path, ray_head: str) -> None:
    """The recorded-replies run of tests/test_rl_train.py (compile-only without a GPU), with
    its candidates evaluated by Ray actors: the same statuses, rewards and advantages."""
    import shutil

    from tests.conftest import cuda_device_status
    from tests.test_rl_train import EXAMPLES, cli

    pytest.importorskip("trl", reason="the train extra is not installed")
    if cuda_device_status()[0]:
        pytest.skip("a GPU is present: the statuses below are the compile-only ones")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(EXAMPLES / "matmul.c", problems / "matmul.c")
    out = tmp_path / "ckpt"
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(problems), "-o", str(out),
               "--steps", "1", "--turns", "2", "--trajectories", "3", "--max-new-tokens", "8",
               "--replies", str(EXAMPLES / "replies" / "matmul.jsonl"), "--executor", "ray",
               "--ray-address", ray_head, "--eval-workers", "2")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "evaluation actor 0: " in proc.stdout and "evaluation actor 1: " in proc.stdout
    rows = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert [(r["trajectory"], r["turn"], r["status"]) for r in rows] == [
        (0, 1, "format_error"), (0, 2, "no_device"), (1, 1, "compile_error"), (1, 2, "no_device"),
        (2, 1, "no_device"), (2, 2, "format_error")]
    assert 'identifier "alpah" is undefined' in rows[2]["message"]
    assert [r["return"] for r in rows] == [-1.0, None, -0.6, None, None, -1.0]
    meta = json.loads((out / "metadata.json").read_text())
    dev = meta["devices"]
    assert dev["executor"] == "ray" and dev["eval_device"] is None and len(dev["eval_actors"]) == 2
    names = sorted(p["name"] for p in meta["problems"])
    assert all(a["problems"] == names and a["gpus"] == [] for a in dev["eval_actors"]), dev
    assert meta["train"]["executor"] == "ray" and meta["train"]["ray_address"] == ray_head


def test_train_policy_executor_settings_are_checked(tmp_path: Path) -> None:
    from tests.test_rl_train import cli, one_error

    problems = tmp_path / "p"
    problems.mkdir()
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(problems), "-o",
               str(tmp_path / "o"), "--executor", "slurm")
    one_error(proc, "executor must be one of local, ray")
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(problems), "-o",
               str(tmp_path / "o"), "--ray-address", "127.0.0.1:1")
    one_error(proc, "--ray-address needs --executor ray")


def test_train_policy_with_an_unreachable_cluster_leaves_no_folder(tmp_path: Path) -> None:
    from tests.test_rl_train import EXAMPLES, cli, one_error

    pytest.importorskip("trl", reason="the train extra is not installed")
    problems = tmp_path / "p"
    problems.mkdir()
    (problems / "matmul.c").write_text((EXAMPLES / "matmul.c").read_text())
    proc = cli("train", "policy", "--model", "tiny", "--problems", str(problems), "-o",
               str(tmp_path / "o"), "--executor", "ray", "--ray-address", f"127.0.0.1:{_free_port()}")
    one_error(proc, "cannot reach the Ray cluster at 127.0.0.1:")
    assert not (tmp_path / "o").exists()


def test_relative_output_folder_and_suite_from_another_directory(tmp_path: Path, fake: dict[str, str],
                                                                 ray_head: str) -> None:
    make_suite(tmp_path / "s", ["fast.c", "slow.c"])
    here = tmp_path / "here"
    here.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "cudaperf_cli", "bench", "../s", "-o", "rel", "--json", "--executor",
         "ray", "--ray-address", ray_head],
        cwd=here, env={**os.environ, **fake}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [p["status"] for p in report["problems"]] == ["correct", "correct"], report["problems"]
    assert sorted(x.name for x in (here / "rel").iterdir() if x.name.startswith(".")) == []


def test_sigterm_to_the_bench_writes_the_report_and_kills_the_tasks(
    tmp_path: Path, fake: dict[str, str], ray_head: str
) -> None:
    suite, out, proc, pid_file = _bench_with_a_hung_problem(tmp_path, fake, ray_head)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    _gone_within(pid_file)
    assert not alive(int(pid_file.read_text()))
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] and [p["id"] for p in report["problems"]] == ["fast.c"]
    assert not list(out.glob(".cudaperf-node-check-*"))


def test_a_port_that_is_not_ray_is_given_up(tmp_path: Path, fake: dict[str, str]) -> None:
    import http.server
    import socketserver
    import threading

    suite = make_suite(tmp_path / "s", ["fast.c"])
    srv = socketserver.TCPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t0 = time.monotonic()
        proc = bench(str(suite), "-o", str(tmp_path / "out"), "--executor", "ray", "--ray-address",
                     f"127.0.0.1:{srv.server_address[1]}",
                     env={**fake, "CUDAPERF_RAY_CONNECT_TIMEOUT_S": "8"}, timeout=120)
        took = time.monotonic() - t0
    finally:
        srv.shutdown()
    assert proc.returncode == 2, proc.stderr
    assert "no answer from Ray within 8 s" in proc.stderr and took < 60, (took, proc.stderr)
    assert not (tmp_path / "out").exists()


def test_executor_errors_are_not_results_for_resume(tmp_path: Path) -> None:
    from cudaperf_cli.bench.runner import BenchOptions, SuiteRun
    from cudaperf_cli.bench.suite import load_suite

    suite = load_suite(make_suite(tmp_path / "s", ["a.c", "b.c"]))
    run = SuiteRun(suite, BenchOptions(), tmp_path / "out", {})
    for p, extra in zip(suite.problems, ({"executor_error": True}, {})):
        (tmp_path / "out" / "problems" / f"{p.safe_name}.json").write_text(
            json.dumps({"id": p.id, "status": "error", **extra}))
    assert sorted(run.load_done()) == ["b.c"]
