"""What every policy returns (:class:`Proposal`) and how it declines (:class:`PolicyRefusal`).

A policy turns a :class:`~cudaperf_cli.core.CProblem` into candidate CUDA sources, one per
turn.  The rest of the pipeline only relies on the fields of :class:`Proposal`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from cudaperf_cli.core import ProblemError


@dataclass(frozen=True)
class Proposal:
    """One candidate written by a policy.

    Attributes:
        source: the complete ``.cu`` text; defines ``extern "C" int <fn>_cuda(...)``.
        description: one human-readable line, e.g. ``"grid2d i->y j->x block 32x8; k
            sequential"``.
        mapping: JSON-serialisable details of how loops were mapped (policy specific).
        policy: the name of the policy that wrote it (``"builtin"``...).
        files: a PyTorch candidate's files by name, e.g. ``{"model.py": ..., "kernel.cu":
            ...}`` (the fast format; ``model.py`` alone for ``load_inline``); ``source`` is
            then ``model.py``'s text.  Empty for C candidates.
    """

    source: str
    description: str
    mapping: dict[str, Any] = field(default_factory=dict)
    policy: str = ""
    files: dict[str, str] = field(default_factory=dict)


class PolicyRefusal(ProblemError):
    """The policy cannot (or can no longer) propose a candidate for this problem.

    ``str(err)`` says why, e.g. the reasons each loop could not be parallelised, or
    ``"no more mappings to try"`` once every mapping has been proposed.
    """


@dataclass(frozen=True)
class Reply:
    """One reply of a language model (in the spirit of simonw/llm's ``Model.execute``).

    Attributes:
        text: the model's full reply text.
        code: the candidate ``.cu`` source extracted from ``text`` (``None``: no usable code).
        prompt_tokens: tokens of the request, as the server counted them (0 if unknown).
        completion_tokens: tokens of this reply (0 if unknown).
        latency_s: seconds the request took (shared by the ``n`` replies of one request).
        finish_reason: why the server stopped this reply (``"stop"``, ``"length"``: cut at
            the token limit, ``"content_filter"``...), None when not reported.
    """

    text: str
    code: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str | None = None


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: given the conversation so far, return ``n`` candidate replies.

    ``messages`` are OpenAI-style ``{"role": "system"|"user"|"assistant", "content": str}``
    dicts.  Implementations: :class:`~cudaperf_cli.policies.openai_policy.OpenAIChatModel`,
    :class:`~cudaperf_cli.policies.replay.ReplayChatModel`.  They fill ``Reply.text`` and the
    token counts; :class:`~cudaperf_cli.policies.model_policy.ModelPolicy` extracts the code.
    """

    def complete(self, messages: list[dict[str, str]], n: int = 1) -> list[Reply]: ...


__all__ = ["ChatModel", "PolicyRefusal", "Proposal", "Reply"]
