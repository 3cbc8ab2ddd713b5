"""Regression tests from a hostile user's session against the refine loop: damaged run
folders, two processes on one run, SIGTERM, malformed model servers, bad replay and config
files.  CPU only."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.agent.store import RunStore
from cudaperf_cli.core import CudaperfError
from cudaperf_cli.policies.replay_server import ReplayServer
from tests.conftest import fake_chat_server
from tests.test_cli import EXAMPLES, cli, error_lines
from tests.test_model_policies import BAD, GOOD, fenced, needs_nvcc, write_replay

ELEMENTWISE = str(EXAMPLES / "elementwise.c")


def test_a_cut_last_line_is_closed_before_the_next_record(tmp_path):
    store = RunStore(tmp_path, "r")
    (store.path / "turns.jsonl").write_text('{"turn": 0, "policy": "x", "description": "d", "sta')
    store.append_jsonl("turns.jsonl", TurnRecord(1, "x", "d", "wrong"))
    lines = (store.path / "turns.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["turn"] == 1


@pytest.mark.parametrize("line", ["[1, 2]", "null", "42", '{"turn": 0, "policy": "p", "description": "d", '
                                  '"status": "correct", "gpu_ms": "fast"}'])
def test_damaged_records_are_refused_not_run(line):
    with pytest.raises((TypeError, ValueError, KeyError)):
        TurnRecord.from_json(json.loads(line))


def test_one_run_folder_one_process(tmp_path):
    store = RunStore(tmp_path, "r")
    code = ("import sys; from pathlib import Path; from cudaperf_cli.agent.store import RunStore\n"
            "from cudaperf_cli.core import CudaperfError\n"
            "try:\n    RunStore.open(Path(sys.argv[1]))\nexcept CudaperfError as e:\n    print(e); sys.exit(2)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "in use by another cudaperf process" in proc.stdout


@pytest.mark.parametrize("body", [b"not json at all", b"[1, 2, 3]", b"<html>hi</html>",
                                  b'{"id": "x", "object": "chat.completion", "choices": []}'])
def test_a_malformed_answer_is_a_model_server_error(body):
    from cudaperf_cli.policies.openai_policy import ModelServerError, OpenAIChatModel

    with fake_chat_server(body) as (url, _):
        chat = OpenAIChatModel("m", url, max_retries=0)
        with pytest.raises(ModelServerError) as info:
            chat.complete([{"role": "user", "content": "hi"}])
        assert url in str(info.value) and info.value.exit_code == 3


def test_bad_replay_and_config_files_are_one_line(tmp_path):
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    proc = cli("optimize", ELEMENTWISE, "--policy", "replay", "--replay", "bin.jsonl", cwd=tmp_path)
    assert proc.returncode == 2 and "not UTF-8" in error_lines(proc)[0]
    for text, want in [('[optimize]\nsize = "n=1000"\n', "expected a list of strings"),
                       ("[optimize]\nturns = true\n", "expected a number"),
                       ("[optimise]\nturns = 2\n", "unknown table [optimise]"),
                       ("turns = 2\n", "must be inside a table"),
                       ('[optimize]\nbase-url = 5\n', "expected a string")]:
        (tmp_path / "c.toml").write_text(text)
        proc = cli("optimize", ELEMENTWISE, "--config", "c.toml", cwd=tmp_path)
        assert proc.returncode == 2 and want in error_lines(proc)[0], (text, proc.stderr)
    # one file for both commands: optimize reads [optimize], leaves train policy's tables alone
    (tmp_path / "c.toml").write_text('[optimize]\nturns = "x"\n[train.policy]\nturns = 3\n[reward]\ndiscount = 0.4\n')
    proc = cli("optimize", ELEMENTWISE, "--config", "c.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "turns" in error_lines(proc)[0] and "table" not in error_lines(proc)[0]
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00")
    proc = cli("optimize", ELEMENTWISE, "--config", "bin.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = cli("optimize", ELEMENTWISE, "--policy", "openai", "--model", "m", "--base-url", "nope",
               cwd=tmp_path)
    assert proc.returncode == 2 and "not an http:// or https:// URL" in error_lines(proc)[0]


def test_the_replay_server_refuses_bad_files(tmp_path):
    from cudaperf_cli.policies.replay_server import read_replies

    for text, want in [("", "holds no replies"), ('{"status": "abc"}\n', "status must be"),
                       ('{"text": "x", "sleep": -1}\n', "sleep must be")]:
        (tmp_path / "r.jsonl").write_text(text)
        with pytest.raises(ValueError, match=want):
            read_replies(tmp_path / "r.jsonl")


@needs_nvcc
def test_sigterm_is_an_interrupt_and_the_run_resumes(tmp_path):
    arrived = threading.Event()
    with ReplayServer([fenced(BAD), {"sleep": 30, "text": fenced(GOOD)}],
                      on_request=lambda i, body: i == 1 and arrived.set()) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cudaperf_cli", "optimize", ELEMENTWISE, "--size", "n=1000",
             "--policy", "openai", "--base-url", server.url, "--model", "m", "--turns", "2", "--yes"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert arrived.wait(120)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "resume with: cudaperf optimize --resume" in err and "Traceback" not in err


@needs_nvcc
def test_a_builtin_run_past_its_plan_stops_at_once_on_resume(tmp_path):
    proc = cli("optimize", ELEMENTWISE, "--size", "n=1000", "--turns", "9", "--json", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert doc["turns"][-1]["status"] == "refused"
    run = Path(doc["run_dir"])
    run = run if run.is_absolute() else tmp_path / run
    before = (run / "turns.jsonl").read_text()
    proc = cli("optimize", "--resume", str(run), "--turns", "12", "--json", cwd=tmp_path)
    assert json.loads(proc.stdout)["stop_reason"].startswith("the policy had no more candidates")
    assert (run / "turns.jsonl").read_text() == before  # no new refused turn


def _completion(text: str, finish: str, tokens: int = 900) -> bytes:
    return json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": tokens + 10},
    }).encode()


def test_a_reply_cut_at_the_token_limit_is_recorded_and_fed_back_as_such():
    """finish_reason 'length' is kept in the record, and the feedback says the reply was
    cut (not 'no fenced code block', which sent the model after the wrong fix)."""
    from cudaperf_cli.policies.model_policy import ModelPolicy
    from cudaperf_cli.policies.openai_policy import OpenAIChatModel
    from cudaperf_cli.problems.c import load_c_problem

    problem = load_c_problem(Path(ELEMENTWISE))
    cut = "Here is the kernel:\n```cuda\n__global__ void k(float *x) {\n  int i = threadIdx"
    with fake_chat_server(_completion(cut, "length")) as (url, _):
        policy = ModelPolicy(OpenAIChatModel("m", url, max_retries=0, max_tokens=900), "openai")
        (p,) = policy.propose_samples(problem, 0, [], 1)
    assert p.source == "" and p.mapping["finish_reason"] == "length"
    fb = p.mapping["format_error"]
    assert "cut off after 900 tokens (max_tokens=900)" in fb and "fenced code block" in fb
    with fake_chat_server(_completion("no code here", "stop", 5)) as (url, _):
        (p,) = ModelPolicy(OpenAIChatModel("m", url, max_retries=0), "openai").propose_samples(problem, 0, [], 1)
    assert p.mapping["finish_reason"] == "stop" and "cut off" not in p.mapping["format_error"]


def test_re_requests_for_missing_samples_change_the_seed():
    """A server that ignores n answers one choice a request; the policy asks again, and a
    repeated seed would repeat the reply."""
    from cudaperf_cli.policies.model_policy import ModelPolicy
    from cudaperf_cli.policies.openai_policy import OpenAIChatModel
    from cudaperf_cli.problems.c import load_c_problem

    problem = load_c_problem(Path(ELEMENTWISE))
    with fake_chat_server(_completion("no code", "stop", 3)) as (url, bodies):
        policy = ModelPolicy(OpenAIChatModel("m", url, max_retries=0, seed=7), "openai")
        assert len(policy.propose_samples(problem, 0, [], 3)) == 3
    sent = [json.loads(b) for b in bodies]
    assert [b["seed"] for b in sent] == [7, 8, 9] and [b["n"] for b in sent] == [3, 2, 1]


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path):
    """The folder name has the second it started; 8 runs starting at once each get one
    (was: 'File exists' with a hint to use another --run-dir, when two raced)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        stores = list(pool.map(lambda _: RunStore(tmp_path, "same"), range(8)))
    assert len({s.path for s in stores}) == 8 and all(s.path.is_dir() for s in stores)


def test_a_result_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """--force replaces the user's earlier result through a temporary file and a rename: a
    write that fails (disk full) leaves the old file as it was and no temporary file."""
    import os

    from cudaperf_cli.core import write_text_atomic

    out = tmp_path / "matmul.cu"
    out.write_text("// the user's earlier result\n")
    write_text_atomic(out, "// new\n")
    assert out.read_text() == "// new\n"

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        write_text_atomic(out, "// half" * 1000)
    assert out.read_text() == "// new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["matmul.cu"]
