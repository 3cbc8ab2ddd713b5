"""The multi-turn refine loop around model policies: n samples a turn, the conversation
rebuilt from history (followed sample, token budget, hints), interactive decisions, TOML
defaults, ``--resume`` and Ctrl-C.  CPU only (compile-only where nvcc is needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cudaperf_cli.agent.loop import Decision, TurnRecord, run_loop
from cudaperf_cli.agent.render import QuietObserver
from cudaperf_cli.policies.base import Reply
from cudaperf_cli.policies.replay_server import ReplayServer
from tests.conftest import cuda_device_status
from tests.test_cli import EXAMPLES, cli, error_lines
from tests.test_model_policies import BAD, GOOD, NO_CODE, fenced, needs_nvcc, write_replay

ELEMENTWISE = str(EXAMPLES / "elementwise.c")
SMALL = ("--size", "n=100000")


def rec(turn, status, gpu_ms=None, sample=0, samples=1, **kw):
    return TurnRecord(turn, "test", f"c{turn}.{sample}", status, gpu_ms=gpu_ms,
                      speedup_kernel=None if gpu_ms is None else 10 / gpu_ms,
                      sample=sample, samples=samples, baseline="gcc -O3, 1 thread", **kw)


# ----------------------------------------------------------------------------- the loop

def test_samples_of_a_turn_are_records_and_the_best_is_over_all_of_them():
    def run_turn(t, history):
        return [rec(t, "wrong", sample=0, samples=3), rec(t, "correct", 3.0 - t, 1, 3),
                rec(t, "compile_error", sample=2, samples=3)]

    res = run_loop(run_turn, turns=2, observer=QuietObserver())
    assert len(res.turns) == 6 and res.turn_count == 2
    assert res.best.turn == 1 and res.best.sample == 1 and res.best.label == "2.2"


def test_ask_accept_stop_and_not_after_the_last_turn():
    asked = []

    def ask(action):
        def f(t, batch, best):
            asked.append(t)
            return Decision(action)
        return f

    run_turn = lambda t, h: rec(t, "correct", 2.0 - t / 10)  # noqa: E731
    res = run_loop(run_turn, turns=3, observer=QuietObserver(), ask=ask("accept"))
    assert len(res.turns) == 1 and res.stopped_by_user and "accepted" in res.stop_reason
    asked.clear()
    res = run_loop(run_turn, turns=3, observer=QuietObserver(), ask=ask("stop"))
    assert len(res.turns) == 1 and "stopped the run after turn 1" in res.stop_reason
    asked.clear()
    res = run_loop(run_turn, turns=3, observer=QuietObserver(), ask=ask("continue"))
    assert len(res.turns) == 3 and asked == [0, 1] and not res.stopped_by_user


def test_history_of_a_resumed_run_counts_and_is_not_rerun():
    seen = []

    def run_turn(t, history):
        seen.append((t, len(history)))
        return rec(t, "correct", 5.0)

    history = [rec(0, "correct", 1.0), rec(1, "wrong")]
    res = run_loop(run_turn, turns=4, observer=QuietObserver(), history=history, patience=2)
    # turns 2 and 3 run with the whole history; the best stays turn 1 (1.0 ms)
    assert seen == [(2, 2)] and res.best_index == 0
    assert "2 turn(s) in a row" in res.stop_reason  # turn 2 (history) + turn 3
    done = run_loop(run_turn, turns=2, observer=QuietObserver(), history=history)
    assert "already had 2 turn(s)" in done.stop_reason and len(done.turns) == 2


def test_follow_picks_the_fastest_correct_else_the_furthest_stage():
    from cudaperf_cli.agent.feedback import feedback_for, follow

    batch = [rec(0, "compile_error", sample=0, samples=3, message="error: x"),
             rec(0, "correct", 2.0, 1, 3, max_rel_err=0.0, registers=8, spill_bytes=0),
             rec(0, "correct", 1.0, 2, 3, max_rel_err=0.0, registers=8, spill_bytes=0)]
    for r in batch:
        r.speedup_e2e = 1.0
        r.feedback = feedback_for(r)
    chosen = follow(batch)
    assert chosen is batch[2] and chosen.followed and not batch[1].followed
    assert "sample 3, the fastest correct one" in chosen.turn_feedback
    assert "- sample 1: compile error: error: x" in chosen.turn_feedback
    assert "- sample 2: correct, GPU 2 ms" in chosen.turn_feedback
    failing = [rec(0, "compile_error", sample=0, samples=2, message="e"),
               rec(0, "wrong", sample=1, samples=2, message="mismatch at [3]")]
    assert follow(failing) is failing[1]


# ----------------------------------------------------------------------------- the conversation

class Canned:
    """A ChatModel answering scripted texts; keeps each request's messages."""

    def __init__(self, texts):
        self.texts, self.requests = list(texts), []

    def complete(self, messages, n=1):
        self.requests.append(messages)
        out = [Reply(self.texts.pop(0), None, 10, 5, 0.0) for _ in range(min(n, len(self.texts)))]
        return out


@pytest.fixture
def problem():
    from cudaperf_cli.problems.c import load_c_problem

    return load_c_problem(EXAMPLES / "elementwise.c", sizes={"n": 1000})


def model_record(turn, proposal, status, *, gpu_ms=None, sample=0, feedback="", followed=True):
    r = TurnRecord(turn, "test", proposal.description, status, source=proposal.source,
                   mapping=dict(proposal.mapping), gpu_ms=gpu_ms, sample=sample,
                   speedup_kernel=None if gpu_ms is None else 3.0, baseline="gcc -O3, 1 thread",
                   feedback=feedback, followed=followed)
    r.turn_feedback = feedback
    return r


def test_conversation_follows_the_marked_sample_and_carries_hints(problem):
    from cudaperf_cli.policies.model_policy import ModelPolicy

    chat = Canned([fenced(BAD), fenced(GOOD, prose="Second."), fenced(GOOD, prose="Third.")])
    policy = ModelPolicy(chat, "test")
    first = policy.propose_samples(problem, 0, [], n=2)
    assert [p.description for p in first] == ["One thread per element.", "Second."]
    history = [model_record(0, first[0], "compile_error", feedback="F-BAD", followed=False),
               model_record(0, first[1], "correct", gpu_ms=1.0, sample=1, feedback="F-GOOD")]
    policy.hints[0] = "use float4 loads"
    policy.propose_samples(problem, 1, history, n=1)
    msgs = chat.requests[1]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[2]["content"] == first[1].mapping["reply"]  # the followed (correct) sample
    assert "F-GOOD" in msgs[3]["content"] and "F-BAD" not in msgs[3]["content"]
    assert "Hint from the user: use float4 loads" in msgs[3]["content"]


def test_old_turns_are_summarised_to_the_token_budget_keeping_the_best_kernel(problem):
    from cudaperf_cli.policies.model_policy import ModelPolicy, estimate_tokens

    texts = [fenced(GOOD, prose=f"Reply {k}.") for k in range(6)]
    policy = ModelPolicy(Canned(texts), "test")
    history = []
    for t in range(5):
        (p,) = policy.propose_samples(problem, t, history, n=1)
        history.append(model_record(t, p, "correct", gpu_ms=2.0 - (t == 1), feedback=f"FB{t} " + "x" * 800))
    full, folded = policy.conversation(problem, history)
    assert folded == 0 and len(full) == 2 + 2 * 5
    budget = estimate_tokens(full) - 400  # forces folding of the oldest turns
    policy.context_tokens = budget
    msgs, folded = policy.conversation(problem, history)
    assert folded >= 1 and estimate_tokens(msgs) <= budget
    assert len(msgs) == 2 + 2 * (5 - folded)
    first_user = msgs[1]["content"]
    assert "Earlier turns, summarised" in first_user and "- Turn 1: correct, GPU 2 ms" in first_user
    # turn 2 (index 1) was the fastest: its kernel is kept in full once folded away
    assert folded >= 2, folded
    assert "fastest correct kernel so far (turn 2, 1 ms)" in first_user
    assert "magnitude_kernel" in first_user
    policy.context_tokens = 10  # impossible budget: the last turn stays verbatim
    msgs, folded = policy.conversation(problem, history)
    assert folded == 4 and msgs[-2]["role"] == "assistant"


@needs_nvcc
def test_samples_over_the_real_client_one_request_per_turn(tmp_path):
    replies = [fenced(BAD), fenced(GOOD), NO_CODE, fenced(GOOD, prose="Again.")]
    with ReplayServer(replies) as server:
        proc = cli("optimize", ELEMENTWISE, *SMALL, "--policy", "openai", "--base-url", server.url,
                   "--model", "m", "--samples", "2", "--turns", "2", "--json", cwd=tmp_path)
        gpu = cuda_device_status()[0]
        assert proc.returncode == (0 if gpu else 4), proc.stderr
        doc = json.loads(proc.stdout)
        assert [(t["turn"], t["sample"]) for t in doc["turns"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert [t["status"] for t in doc["turns"]][:3] == ["compile_error", "correct" if gpu else "no_device", "format_error"]
        assert len(server.requests) == 2 and all(r["n"] == 2 for r in server.requests)
        second = server.requests[1]["messages"]
        assert "You wrote 2 candidates this turn" in second[-1]["content"]
        assert "- sample 1: compile error" in second[-1]["content"]
        assert doc["samples"] == 2 and doc["turn_count"] == 2


def test_a_server_ignoring_n_is_asked_again(problem):
    from cudaperf_cli.policies.model_policy import ModelPolicy
    from cudaperf_cli.policies.openai_policy import OpenAIChatModel

    with ReplayServer([fenced(GOOD), fenced(BAD), fenced(GOOD)], ignore_n=True) as server:
        policy = ModelPolicy(OpenAIChatModel("m", server.url, max_retries=0), "openai")
        props = policy.propose_samples(problem, 0, [], n=3)
        assert len(props) == 3 and len(server.requests) == 3
        assert [r["n"] for r in server.requests] == [3, 2, 1]


# ----------------------------------------------------------------------------- interactive

def test_terminal_ask_reads_hints_accept_and_stop():
    from rich.console import Console

    from cudaperf_cli.agent.interact import TerminalAsk

    def asker(answers, hints=None):
        it = iter(answers)

        def read(prompt):
            prompts.append(prompt)
            try:
                return next(it)
            except StopIteration:
                raise EOFError from None

        on_hint = None if hints is None else (lambda t, h: hints.append((t, h)))
        return TerminalAsk(Console(file=open(os.devnull, "w")), on_hint=on_hint, read=read)

    best = rec(0, "correct", 1.0)
    prompts: list[str] = []
    hints: list = []
    assert asker(["h", "tile it"], hints)(0, [best], best) == Decision("continue", "tile it")
    assert hints == [(0, "tile it")] and "h hint" in prompts[0] and "a accept best (1, 10x)" in prompts[0]
    assert asker(["?", "a"])(1, [best], best).action == "accept"
    assert asker(["a", "s"])(1, [], None).action == "stop"  # nothing to accept yet: asked again
    prompts.clear()
    ask = asker([])
    assert ask(0, [], None) == Decision() and not ask.enabled  # Ctrl-D: no more questions
    assert "h hint" not in prompts[0]  # the built-in policy takes no hints


# ----------------------------------------------------------------------------- config file

def test_config_file_defaults_and_the_command_line_wins(tmp_path):
    cfg = tmp_path / "cudaperf.toml"
    cfg.write_text('[optimize]\npolicy = "replay"\n')
    proc = cli("optimize", ELEMENTWISE, cwd=tmp_path)  # ./cudaperf.toml is found
    assert proc.returncode == 2 and "--policy replay needs --replay" in error_lines(proc)[0]
    cfg.write_text('[optimize]\nturns = 0\n')
    proc = cli("optimize", ELEMENTWISE, "--config", str(cfg), cwd=tmp_path)
    assert proc.returncode == 2 and "[optimize] turns" in error_lines(proc)[0]
    cfg.write_text('[optimize]\nturn = 2\n')
    proc = cli("optimize", ELEMENTWISE, cwd=tmp_path)
    lines = error_lines(proc)
    assert proc.returncode == 2 and "unknown key 'turn'" in lines[0] and "turns" in lines[1]
    cfg.write_text("[optimize\n")
    proc = cli("optimize", ELEMENTWISE, cwd=tmp_path)
    assert proc.returncode == 2 and "not valid TOML" in error_lines(proc)[0]
    proc = cli("optimize", ELEMENTWISE, "--config", str(tmp_path / "nope.toml"), cwd=tmp_path)
    assert proc.returncode == 2 and "no such file" in error_lines(proc)[0]


@needs_nvcc
def test_config_values_reach_the_run(tmp_path):
    (tmp_path / "cfg.toml").write_text(
        '[optimize]\nturns = 1\nsize = ["n=1000"]\npolicy = "replay"\nsamples = 2\n'
        f'replay = "{write_replay(tmp_path / "r.jsonl", [fenced(GOOD), fenced(BAD)])}"\n'
    )
    env = {**os.environ, "CUDAPERF_CONFIG": str(tmp_path / "cfg.toml")}
    proc = subprocess.run([sys.executable, "-m", "cudaperf_cli", "optimize", ELEMENTWISE, "--json",
                           "--turns", "1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    doc = json.loads(proc.stdout)
    assert doc["sizes"] == {"n": 1000} and len(doc["turns"]) == 2, proc.stderr
    assert doc["turns"][1]["status"] == "compile_error"


# ----------------------------------------------------------------------------- resume, Ctrl-C

@needs_nvcc
def test_resume_continues_a_run_and_keeps_everything(tmp_path):
    replay = write_replay(tmp_path / "r.jsonl", [NO_CODE, fenced(BAD), fenced(GOOD)])
    proc = cli("optimize", ELEMENTWISE, *SMALL, "--policy", "replay", "--replay", str(replay),
               "--turns", "1", "--json", cwd=tmp_path)
    first = json.loads(proc.stdout)
    run = tmp_path / first["run_dir"]
    assert [t["status"] for t in first["turns"]] == ["format_error"]
    before = (run / "turns.jsonl").read_text()
    proc = cli("optimize", "--resume", str(run), "--turns", "3", "--json", cwd=tmp_path)
    gpu = cuda_device_status()[0]
    assert proc.returncode == (0 if gpu else 4), proc.stderr
    doc = json.loads(proc.stdout)
    assert [t["status"] for t in doc["turns"]] == ["format_error", "compile_error",
                                                   "correct" if gpu else "no_device"]
    assert Path(doc["run_dir"]).resolve() == run.resolve()
    assert doc["cpu_baseline"] == first["cpu_baseline"]
    assert (run / "turns.jsonl").read_text().startswith(before)  # appended, nothing lost
    # the resumed conversation carries turn 1's reply and feedback
    lines = (run / "turns.jsonl").read_text().splitlines()
    assert json.loads(lines[1])["mapping"]["messages"] == 5
    # options of the run cannot change; a non-run folder is refused
    proc = cli("optimize", "--resume", str(run), "--policy", "builtin", cwd=tmp_path)
    assert proc.returncode == 2 and "cannot change --policy" in error_lines(proc)[0]
    proc = cli("optimize", "--resume", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "not a resumable run folder" in error_lines(proc)[0]
    proc = cli("optimize", ELEMENTWISE, "--resume", str(run), cwd=tmp_path)
    assert proc.returncode == 2 and "not both" in error_lines(proc)[0]


def test_resume_refuses_a_changed_source(tmp_path):
    src = tmp_path / "scale.c"
    src.write_text("// cudaperf: x[n]\nvoid scale(int n, double *x) { for (int i = 0; i < n; i++) x[i] *= 2; }\n")
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    from cudaperf_cli.agent.optimize import OptimizeOptions, options_to_json

    opts = OptimizeOptions(file=src, sizes={"n": 10})
    (run / "run.json").write_text(json.dumps({"options": options_to_json(opts), "file_sha256": "0" * 64}))
    proc = cli("optimize", "--resume", str(run), cwd=tmp_path)
    assert proc.returncode == 2 and "changed since the run started" in error_lines(proc)[0]


@needs_nvcc
def test_ctrl_c_keeps_the_run_and_resume_finishes_it(tmp_path):
    arrived = threading.Event()

    def on_request(index, body):
        if index == 1:
            arrived.set()

    replies = [fenced(BAD), {"sleep": 30, "text": fenced(GOOD)}, fenced(GOOD)]
    with ReplayServer(replies, on_request=on_request) as server:
        args = ["optimize", ELEMENTWISE, *SMALL, "--policy", "openai", "--base-url", server.url,
                "--model", "m", "--turns", "2", "--json", "--request-timeout", "60"]
        proc = subprocess.Popen([sys.executable, "-m", "cudaperf_cli", *args], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert arrived.wait(120), "the second request never came"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "interrupted: resume with: cudaperf optimize --resume" in err and "Traceback" not in err
        run = Path(err.strip().splitlines()[-1].split("--resume ", 1)[1])
        run = run if run.is_absolute() else tmp_path / run
        summary = json.loads((run / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted (Ctrl-C)" and len(summary["turns"]) == 1
        proc2 = cli("optimize", "--resume", str(run), "--json", cwd=tmp_path)
        gpu = cuda_device_status()[0]
        assert proc2.returncode == (0 if gpu else 4), proc2.stderr
        doc = json.loads(proc2.stdout)
        assert [t["status"] for t in doc["turns"]] == ["compile_error", "correct" if gpu else "no_device"]
        # the server was asked turn 2 again after the resume, with turn 1's feedback
        assert "did not compile" in server.requests[-1]["messages"][-1]["content"]
