"""A policy that writes candidates with a language model, turn after turn.

Turn 0 sends the system prompt and the C function (``prompts/system.j2``,
``prompts/c_to_cuda.j2``).  Each later turn appends the model's previous reply and a user
message with the previous turn's feedback (``prompts/feedback.j2``), so the model sees what
its candidate did: the compiler's errors, the wrong result, the speedup.  The conversation
lives in the policy (one policy object per run).

A reply without usable code is not a refusal (that would end the run): the proposal has an
empty ``source`` and ``mapping["format_error"]`` says what was missing; the loop records it
as a failed candidate with status ``format_error``.
"""

from __future__ import annotations

from typing import Any, Sequence

from cudaperf_cli.core import CProblem
from cudaperf_cli.policies.base import ChatModel, Proposal, Reply
from cudaperf_cli.policies.extract import extract_code, missing_code_feedback


class ModelPolicy:
    """Candidates from ``chat_model`` (an OpenAI-compatible server, a replay file...)."""

    #: The loop must not call propose() just to probe for a first candidate.
    asks_a_model = True

    def __init__(self, chat_model: ChatModel, name: str = "model", *, arch: str = "sm_90"):
        self.chat_model = chat_model
        self.name = name
        self.arch = arch
        self.messages: list[dict[str, str]] = []

    def _start(self, problem: CProblem) -> None:
        from cudaperf_cli.policies.prompts import c_to_cuda_prompt, system_prompt

        self.messages = [
            {"role": "system", "content": system_prompt(self.arch)},
            {"role": "user", "content": c_to_cuda_prompt(problem)},
        ]

    def propose(self, problem: CProblem, turn: int, history: Sequence[Any] | None = None) -> Proposal:
        """Ask the model for turn ``turn``'s candidate.

        ``history``: the :class:`~cudaperf_cli.agent.loop.TurnRecord` of every earlier turn;
        the last one's ``feedback`` becomes this turn's user message.

        Raises:
            PolicyRefusal: the chat model has no more replies (e.g. a replay file ran out).
            CudaperfError: the model server cannot be reached (exit code 3).
        """
        from cudaperf_cli.policies.prompts import feedback_prompt

        if turn == 0 or not self.messages:
            self._start(problem)
        else:
            prev = history[-1] if history else None
            feedback = getattr(prev, "feedback", "") or "No result is available for your previous candidate."
            status = getattr(prev, "status", "")
            self.messages.append(
                {"role": "user", "content": feedback_prompt(feedback, status, problem.function)}
            )
        reply: Reply = self.chat_model.complete(list(self.messages), n=1)[0]
        self.messages.append({"role": "assistant", "content": reply.text})
        code = reply.code if reply.code is not None else extract_code(reply.text, problem.function)
        mapping: dict[str, Any] = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "latency_s": round(reply.latency_s, 3),
            "messages": len(self.messages),
            "reply": reply.text,
        }
        if code is None:
            mapping["format_error"] = missing_code_feedback(problem.function, reply.text)
            return Proposal("", "reply had no usable code", mapping, self.name)
        return Proposal(code, _describe(reply.text, self.name), mapping, self.name)


def _describe(text: str, name: str) -> str:
    """One line: the reply's first line of prose before its code, else ``"<name> candidate"``."""
    before = text.split("```", 1)[0]
    for line in before.splitlines():
        line = " ".join(line.strip().lstrip("#*-> ").split())
        if line:
            return line if len(line) <= 70 else line[:67] + "..."
    return f"{name} candidate"


__all__ = ["ModelPolicy"]
