"""A policy that writes candidates with a language model, turn after turn.

The conversation is rebuilt from the run's history at every turn (nothing lives only in
memory, so ``--resume`` continues exactly where a run stopped)::

    system      prompts/system.j2: the candidate format, one worked example
    user        prompts/c_to_cuda.j2: the C function, parameters, sizes
    assistant   turn 1's reply (the sample the run followed, see below)
    user        prompts/feedback.j2: turn 1's feedback (+ the user's hint, if any)
    assistant   turn 2's reply ...

With ``n`` samples a turn, one request asks for ``n`` replies; the conversation then follows
the sample the agent marked ``followed`` (the fastest correct one, else the one that got
furthest: wrong result > crash > compile error > no code), and its feedback message also
says in one line what each other sample did.

Token budget: when the estimated size of the conversation exceeds ``context_tokens``, the
oldest turns are folded into one summary (a line per turn, the user's hints, and the
fastest correct kernel so far in full) appended to the first user message; the most recent
turns stay verbatim.  Tokens are estimated as characters / 4 (OpenAI's rule of thumb for
English text and code: https://help.openai.com/en/articles/4936856).

A reply without usable code is not a refusal (that would end the run): the proposal has an
empty ``source`` and ``mapping["format_error"]`` says what was missing; the loop records it
as a failed candidate with status ``format_error``.
"""

from __future__ import annotations

from cudaperf_cli.statuses import VERIFIED

from typing import Any, Sequence

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.policies.base import ChatModel, PolicyRefusal, Proposal, Reply
from cudaperf_cli.policies.extract import (
    extract_code, extract_torch_files, missing_code_feedback, missing_torch_code_feedback,
    truncated_reply_feedback,
)

#: Characters per token of the estimate (see the module docstring).
CHARS_PER_TOKEN = 4
#: Default prompt budget in tokens: leaves room for a long reply in a 32k-token context.
DEFAULT_CONTEXT_TOKENS = 16384


def estimate_tokens(messages: Sequence[dict[str, str]]) -> int:
    """Approximate prompt size of ``messages`` in tokens (characters / 4, plus 4 a message
    for the chat template's role markers)."""
    return sum(len(m.get("content", "")) // CHARS_PER_TOKEN + 4 for m in messages)


def outcome_line(r: Any) -> str:
    """One line on what a candidate record did (for summaries written for the model):
    ``"correct, GPU 0.52 ms, 12.3x kernel-only vs gcc -O3, 1 thread"`` or ``"compile error:
    <first line>"``.  ``r`` is a :class:`~cudaperf_cli.agent.loop.TurnRecord`."""
    status = getattr(r, "status", "?")
    if status in VERIFIED and getattr(r, "gpu_ms", None) is not None:
        speed = getattr(r, "speedup_kernel", None)
        vs = f", {speed:.3g}x kernel-only vs {r.baseline}" if speed is not None else ""
        return f"{status}, GPU {r.gpu_ms:.4g} ms{vs}"
    message = " ".join((getattr(r, "message", "") or "").split())
    if len(message) > 160:
        message = message[:157] + "..."
    words = status.replace("_", " ")
    return f"{words}: {message}" if message else words


class ModelPolicy:
    """Candidates from ``chat_model`` (an OpenAI-compatible server, vLLM, a replay file...).

    Attributes:
        hints: turn index -> the user's hint given after that turn (interactive runs); it is
            added to the next turn's feedback message.
        context_tokens: prompt budget in tokens (estimated); older turns are summarised
            beyond it.
    """

    #: The loop must not call propose() just to probe for a first candidate.
    asks_a_model = True

    def __init__(
        self,
        chat_model: ChatModel,
        name: str = "model",
        *,
        arch: str = "sm_90",
        context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    ):
        self.chat_model = chat_model
        self.name = name
        self.arch = arch
        self.context_tokens = context_tokens
        self.hints: dict[int, str] = {}

    # ------------------------------------------------------------------ conversation

    def conversation(self, problem: Any, history: Sequence[Any] = ()) -> tuple[list[dict[str, str]], int]:
        """The messages for the next request and how many earlier turns were summarised.

        ``problem``: a C problem or a PyTorch problem (TorchProblem: the PyTorch prompt, and
        replies must hold model.py (+ kernel.cu)).  ``history``: every earlier
        :class:`~cudaperf_cli.agent.loop.TurnRecord`; records
        without a model reply (``mapping["reply"]``) are skipped.
        """
        from cudaperf_cli.policies.prompts import (
            feedback_prompt, is_torch_problem, system_prompt_for, task_prompt,
        )

        torch = is_torch_problem(problem)
        fn = "" if torch else problem.function
        system = {"role": "system", "content": system_prompt_for(problem, self.arch)}
        task = task_prompt(problem, self.arch)
        exchanges: list[tuple[Any, list[dict[str, str]]]] = []
        for turn, group in _turns(history):
            followed = _followed(group)
            if followed is None:
                continue
            feedback = (getattr(followed, "turn_feedback", "") or followed.feedback
                        or "No result is available for your previous candidate.")
            exchanges.append((followed, [
                {"role": "assistant", "content": followed.mapping["reply"]},
                {"role": "user", "content": feedback_prompt(
                    feedback, followed.status, fn, self.hints.get(turn), torch=torch)},
            ]))
        for folded in range(len(exchanges)):
            first = task
            if folded:
                first = task + "\n\n" + _summary(exchanges[:folded], history, self.hints)
            messages = [system, {"role": "user", "content": first}]
            for _, pair in exchanges[folded:]:
                messages.extend(pair)
            if estimate_tokens(messages) <= self.context_tokens:
                return messages, folded
        if not exchanges:
            return [system, {"role": "user", "content": task}], 0
        # Over budget even with only the last turn verbatim: keep that much.
        return messages, len(exchanges) - 1

    # ------------------------------------------------------------------ proposals

    def propose_samples(
        self, problem: Any, turn: int, history: Sequence[Any] | None = None, n: int = 1
    ) -> list[Proposal]:
        """Ask the model for turn ``turn``'s ``n`` candidates (one request; more requests
        if the server returns fewer than ``n`` choices).

        Raises:
            PolicyRefusal: the chat model has no more replies (e.g. a replay file ran out).
            CudaperfError: the model server cannot be reached (exit code 3).
        """
        messages, folded = self.conversation(problem, history or ())
        replies: list[Reply] = []
        for _ in range(n):  # servers that ignore n answer one choice a request
            try:
                got = self.chat_model.complete(list(messages), n=n - len(replies))
            except (PolicyRefusal, CudaperfError):
                if not replies:
                    raise
                break  # a follow-up request failed (replies ran out): keep what came
            replies.extend(got[: n - len(replies)])
            if len(replies) >= n or not got:
                break
        from cudaperf_cli.policies.prompts import is_torch_problem

        torch = is_torch_problem(problem)
        proposals = []
        for reply in replies:
            files: dict[str, str] = {}
            if torch:
                files = extract_torch_files(reply.text) or {}
                code = files.get("model.py")
            else:
                code = reply.code if reply.code is not None else extract_code(reply.text, problem.function)
            mapping: dict[str, Any] = {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "estimated_prompt_tokens": estimate_tokens(messages),
                "latency_s": round(reply.latency_s, 3),
                "messages": len(messages) + 1,
                "summarised_turns": folded,
                "reply": reply.text,
            }
            if reply.finish_reason is not None:
                mapping["finish_reason"] = reply.finish_reason
            if code is None:
                if reply.finish_reason == "length":  # cut at the token limit: say so
                    mapping["format_error"] = truncated_reply_feedback(
                        reply.completion_tokens, getattr(self.chat_model, "max_tokens", None))
                else:
                    mapping["format_error"] = (missing_torch_code_feedback(reply.text) if torch
                                               else missing_code_feedback(problem.function, reply.text))
                proposals.append(Proposal("", "reply had no usable code", mapping, self.name))
            else:
                proposals.append(Proposal(code, _describe(reply.text, self.name), mapping, self.name,
                                          files))
        return proposals

    def propose(self, problem: Any, turn: int, history: Sequence[Any] | None = None) -> Proposal:
        """One candidate (``propose_samples`` with ``n=1``)."""
        return self.propose_samples(problem, turn, history, 1)[0]

    def resume(self, history: Sequence[Any], n: int) -> None:
        """Continue after ``history`` (``--resume``): a replay file skips the replies the
        earlier turns used (``n`` a turn)."""
        used = n * sum(1 for _, group in _turns(history) if any("reply" in r.mapping for r in group))
        skip = getattr(self.chat_model, "skip", None)
        if callable(skip):
            skip(used)


def _turns(history: Sequence[Any]) -> list[tuple[int, list[Any]]]:
    groups: dict[int, list[Any]] = {}
    for r in history:
        groups.setdefault(r.turn, []).append(r)
    return sorted(groups.items())


def _followed(group: list[Any]) -> Any:
    """The record the conversation follows: the one the agent marked, else the first with
    a reply."""
    with_reply = [r for r in group if "reply" in (r.mapping or {})]
    for r in with_reply:
        if getattr(r, "followed", False):
            return r
    return with_reply[0] if with_reply else None


def _summary(exchanges: list[tuple[Any, list[dict[str, str]]]], history: Sequence[Any],
             hints: dict[int, str]) -> str:
    """Earlier turns folded into a few lines, plus the fastest correct kernel so far when it
    came from one of them."""
    turns = sorted({rec.turn for rec, _ in exchanges})
    lines = ["Earlier turns, summarised to keep this conversation short:"]
    for turn, group in _turns(history):
        if turn not in turns:
            continue
        for r in group:
            tag = f"Turn {turn + 1}" + (f" sample {r.sample + 1}" if len(group) > 1 else "")
            lines.append(f"- {tag}: {outcome_line(r)}")
        if hints.get(turn):
            lines.append(f"- Hint from the user after turn {turn + 1}: {hints[turn]}")
    fastest = None
    for r in history:
        if r.status in VERIFIED and r.gpu_ms is not None and (fastest is None or r.gpu_ms < fastest.gpu_ms):
            fastest = r
    if fastest is not None and fastest.turn in turns and fastest.source:
        lines.append(
            f"The fastest correct kernel so far (turn {fastest.turn + 1}, {fastest.gpu_ms:.4g} ms):\n"
            f"```cuda\n{fastest.source.strip()}\n```"
        )
    return "\n".join(lines)


def _describe(text: str, name: str) -> str:
    """One line: the reply's first line of prose before its code, else ``"<name> candidate"``."""
    before = text.split("```", 1)[0]
    for line in before.splitlines():
        line = " ".join(line.strip().lstrip("#*-> ").split())
        if line:
            return line if len(line) <= 70 else line[:67] + "..."
    return f"{name} candidate"


__all__ = ["DEFAULT_CONTEXT_TOKENS", "ModelPolicy", "estimate_tokens", "outcome_line"]
