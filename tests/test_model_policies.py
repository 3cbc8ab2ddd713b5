"""Model policies on the CPU, without network: code extraction, prompt rendering, the real
``openai`` client against a small OpenAI-compatible server on loopback, and replay."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.policies.base import PolicyRefusal, Reply
from cudaperf_cli.policies.extract import extract_code, missing_code_feedback
from cudaperf_cli.policies.replay_server import ReplayServer
from tests.conftest import cuda_device_status
from tests.test_cli import EXAMPLES, cli, error_lines

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

GOOD = '''#include <cuda_runtime.h>

__global__ void magnitude_kernel(int n, float scale, const float *u, const float *v, float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = scale * sqrtf(u[i] * u[i] + v[i] * v[i]);
}

extern "C" int magnitude_cuda(int n, float scale, const float *u, const float *v, float *out)
{
    if (n > 0)
        magnitude_kernel<<<(n + 255) / 256, 256>>>(n, scale, u, v, out);
    return (int)cudaGetLastError();
}
'''
BAD = GOOD.replace("out[i] = scale", "out[i] = undeclared_thing_xyz")
NO_CODE = "I would map each element to one thread with a 1-D grid of 256-thread blocks."


def fenced(code: str, label: str = "cuda", prose: str = "One thread per element.") -> str:
    return f"{prose}\n\n```{label}\n{code}```\n"


# ----------------------------------------------------------------------------- extraction

@pytest.mark.parametrize("label", ["cuda", "cu", "c++", "cpp", ""])
def test_extracts_each_accepted_fence(label):
    assert extract_code(fenced(GOOD, label), "magnitude") == GOOD


def test_picks_the_block_defining_the_entry_point():
    text = "Helper:\n```cuda\n__device__ float sq(float x) { return x * x; }\n```\n" + fenced(GOOD)
    text += "\nBuild with:\n```bash\nnvcc -shared x.cu\n```\n"
    assert extract_code(text, "magnitude") == GOOD


def test_no_usable_code_and_what_was_missing():
    assert extract_code(NO_CODE, "magnitude") is None
    assert "no fenced code block" in missing_code_feedback("magnitude", NO_CODE)
    other = fenced(GOOD.replace("magnitude_cuda", "other_cuda"))
    assert extract_code(other, "magnitude") is None
    why = missing_code_feedback("magnitude", other)
    assert 'defines `extern "C" int magnitude_cuda(`' in why
    assert "labelled python" in missing_code_feedback("magnitude", fenced(GOOD, "python"))
    assert 'extern "C" int magnitude_cuda(' in missing_code_feedback("magnitude")


# ----------------------------------------------------------------------------- prompts

@pytest.fixture(scope="module")
def problem():
    from cudaperf_cli.problems.c import load_c_problem

    return load_c_problem(EXAMPLES / "elementwise.c")


def test_prompts_carry_the_function_and_the_format(problem):
    from cudaperf_cli.policies.prompts import c_to_cuda_prompt, feedback_prompt, system_prompt

    system = system_prompt("sm_90")
    assert 'extern "C" int <fn>_cuda(' in system and "default stream" in system
    assert "saxpy_cuda" in system  # the worked example
    user = c_to_cuda_prompt(problem)
    assert "sqrtf(u[i] * u[i] + v[i] * v[i])" in user  # the C source
    assert 'extern "C" int magnitude_cuda(int n, float scale, const float *u, const float *v, float *out)' in user
    assert "n=20000000" in user
    fb = feedback_prompt("Turn 1 did not compile with nvcc. Compiler output:\nE1", "compile_error", "magnitude")
    assert "E1" in fb and "Fix the compile errors" in fb


def test_model_policy_conversation_and_format_error(problem):
    from cudaperf_cli.agent.loop import TurnRecord
    from cudaperf_cli.policies.model_policy import ModelPolicy

    class Canned:
        def __init__(self, texts):
            self.texts, self.requests = list(texts), []

        def complete(self, messages, n=1):
            self.requests.append(messages)
            return [Reply(self.texts.pop(0), None, 10, 5, 0.01)]

    chat = Canned([NO_CODE, fenced(GOOD)])
    policy = ModelPolicy(chat, "test")
    first = policy.propose(problem, 0)
    assert first.source == "" and "no fenced code block" in first.mapping["format_error"]
    assert first.mapping["prompt_tokens"] == 10 and first.mapping["completion_tokens"] == 5
    prev = TurnRecord(0, "test", first.description, "format_error", feedback="Turn 1: FEEDBACK-1",
                      mapping=dict(first.mapping))
    second = policy.propose(problem, 1, history=[prev])
    assert second.source == GOOD and second.description == "One thread per element."
    roles = [m["role"] for m in chat.requests[1]]
    assert roles == ["system", "user", "assistant", "user"]
    assert "FEEDBACK-1" in chat.requests[1][-1]["content"]


# ----------------------------------------------------------------------------- server

@pytest.fixture
def server(request):
    srv = ReplayServer(request.param)
    yield srv
    srv.close()


@needs_nvcc
@pytest.mark.parametrize("server", [[NO_CODE, fenced(BAD), fenced(GOOD)]], indirect=True)
def test_openai_policy_multi_turn_optimize(server, tmp_path):
    proc = cli(
        "optimize", str(EXAMPLES / "elementwise.c"), "--size", "n=100000",
        "--policy", "openai", "--base-url", server.url, "--model", "m",
        "--temperature", "0.2", "--max-tokens", "2000", "--turns", "3", "--json", cwd=tmp_path,
    )
    gpu = cuda_device_status()[0]
    assert proc.returncode == (0 if gpu else 4), proc.stderr
    doc = json.loads(proc.stdout)
    statuses = [t["status"] for t in doc["turns"]]
    assert statuses == ["format_error", "compile_error", "correct" if gpu else "no_device"]
    assert "no fenced code block" in doc["turns"][0]["feedback"]
    assert doc["turns"][2]["mapping"]["completion_tokens"] == 50
    # server side: what each request carried
    assert len(server.requests) == 3
    assert all(r["model"] == "m" and r["temperature"] == 0.2 and r["max_tokens"] == 2000
               for r in server.requests)
    assert "sqrtf(u[i] * u[i] + v[i] * v[i])" in server.requests[0]["messages"][1]["content"]
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "no fenced code block" in second[-1]["content"]
    third = server.requests[2]["messages"]
    assert len(third) == 6 and third[-1]["role"] == "user"
    assert "did not compile" in third[-1]["content"]
    assert "undeclared_thing_xyz" in third[-1]["content"] and "undefined" in third[-1]["content"]
    run = tmp_path / doc["run_dir"]
    assert len((run / "turns.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("server", [[500, fenced(GOOD)]], indirect=True)
def test_server_error_is_retried(server):
    from cudaperf_cli.policies.openai_policy import OpenAIChatModel

    chat = OpenAIChatModel("m", server.url, api_key_env="CUDAPERF_TEST_NO_SUCH_KEY", max_retries=2)
    (reply,) = chat.complete([{"role": "user", "content": "hi"}], n=1)
    assert extract_code(reply.text, "magnitude") == GOOD
    assert (reply.prompt_tokens, reply.completion_tokens) == (100, 50)
    assert len(server.requests) == 2


@pytest.mark.parametrize("server", [[500, 500, 500]], indirect=True)
def test_server_error_after_retries_is_one_clear_error(server):
    from cudaperf_cli.policies.openai_policy import ModelServerError, OpenAIChatModel

    chat = OpenAIChatModel("m", server.url, max_retries=1)
    with pytest.raises(ModelServerError, match="HTTP 500") as info:
        chat.complete([{"role": "user", "content": "hi"}])
    assert server.url in str(info.value) and info.value.exit_code == 3


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_one_line_exit_3(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    proc = cli(
        "optimize", str(EXAMPLES / "elementwise.c"), "--size", "n=1000", "--policy", "openai",
        "--base-url", url, "--model", "m", "--turns", "2", "--json", cwd=tmp_path,
    )
    assert proc.returncode == 3, proc.stderr
    lines = error_lines(proc)
    assert url in lines[0] and "cannot reach" in lines[0], lines
    # checked before any work (issue 18): one error line, a hint to start the server, and
    # no resume hint (no turn ran: there is nothing to resume)
    assert len(lines) == 2 and lines[1].startswith("hint: ") and "--resume" not in proc.stderr, lines
    assert not (tmp_path / "cudaperf-runs").exists()
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,flag", [
    (["--policy", "openai"], "--model"), (["--policy", "replay"], "--replay"),
])
def test_model_policy_missing_its_option_is_a_usage_error(tmp_path, args, flag):
    proc = cli("optimize", str(EXAMPLES / "elementwise.c"), *args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = error_lines(proc)
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in proc.stderr


def test_api_key_is_never_written(tmp_path, monkeypatch):
    from cudaperf_cli.policies.openai_policy import OpenAIChatModel

    monkeypatch.setenv("CUDAPERF_TEST_KEY", "sk-secret-123")
    chat = OpenAIChatModel("m", "http://127.0.0.1:1/v1", api_key_env="CUDAPERF_TEST_KEY")
    assert chat.client().api_key == "sk-secret-123"
    assert "sk-secret" not in repr(chat) and "sk-secret" not in json.dumps(vars(chat), default=str)


# ----------------------------------------------------------------------------- replay

def write_replay(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def test_replay_serves_in_order_then_refuses(tmp_path):
    from cudaperf_cli.policies.replay import ReplayChatModel

    chat = ReplayChatModel(write_replay(tmp_path / "r.jsonl", ["a", "b"]))
    assert [r.text for r in chat.complete([], 1) + chat.complete([], 1)] == ["a", "b"]
    with pytest.raises(PolicyRefusal, match="replay file exhausted"):
        chat.complete([], 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(CudaperfError, match="bad.jsonl:2"):
        ReplayChatModel(bad)


@needs_nvcc
def test_replay_policy_drives_optimize(tmp_path):
    replay = write_replay(tmp_path / "replies.jsonl", [fenced(BAD), fenced(GOOD)])
    proc = cli(
        "optimize", str(EXAMPLES / "elementwise.c"), "--size", "n=100000", "--policy", "replay",
        "--replay", str(replay), "--turns", "3", "--json", cwd=tmp_path,
    )
    gpu = cuda_device_status()[0]
    assert proc.returncode == (0 if gpu else 4), proc.stderr
    doc = json.loads(proc.stdout)
    statuses = [t["status"] for t in doc["turns"]]
    assert statuses[0] == "compile_error" and statuses[1] == ("correct" if gpu else "no_device")
    assert statuses[2] == "refused" and "replay file exhausted" in doc["turns"][2]["message"]
    assert "policy had no more candidates" in doc["stop_reason"]
