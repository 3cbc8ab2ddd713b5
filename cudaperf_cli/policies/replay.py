"""Replies recorded in a JSONL file, served in order: for tests, demos and re-running a run.

File format: one JSON object per line, ``{"text": "<the model's whole reply>"}``; optional
``"prompt_tokens"`` and ``"completion_tokens"`` (integers).  Blank lines are skipped.  A run
folder's ``turns.jsonl`` is a replay file too: its records carry the reply in
``mapping.reply`` (records without one, e.g. refusals, are skipped), so a past model run can
be re-run (another GPU, another cudaperf version).  Each request takes the next ``n`` replies
(fewer when fewer are left); once they run out the policy refuses with ``"replay file
exhausted"`` and the loop stops.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cudaperf_cli.core import ProblemError
from cudaperf_cli.policies.base import PolicyRefusal, Reply


class ReplayChatModel:
    """A :class:`~cudaperf_cli.policies.base.ChatModel` reading replies from ``path``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ProblemError(f"cannot read the replay file {self.path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ProblemError(f"the replay file {self.path} is not UTF-8 text (JSONL expected)") from None
        self.replies: list[Reply] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj: Any = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ProblemError(f"{self.path}:{number}: not JSON ({exc.msg})") from None
            if isinstance(obj, dict) and isinstance(obj.get("mapping"), dict) and "text" not in obj:
                if not isinstance(obj["mapping"].get("reply"), str):
                    continue  # a run record without a model reply (refusal, builtin policy)
                obj = {**obj["mapping"], "text": obj["mapping"]["reply"]}
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise ProblemError(f'{self.path}:{number}: expected an object {{"text": "..."}}')
            self.replies.append(Reply(
                obj["text"], None, _count(obj.get("prompt_tokens")), _count(obj.get("completion_tokens")), 0.0,
            ))
        if not self.replies:
            raise ProblemError(f"the replay file {self.path} holds no replies")
        self.served = 0
        self.requests: list[list[dict[str, str]]] = []  #: the messages of every request

    def skip(self, k: int) -> None:
        """Mark the first ``k`` replies as used (a resumed run continues after them)."""
        self.served = min(len(self.replies), self.served + max(0, k))

    def complete(self, messages: list[dict[str, str]], n: int = 1) -> list[Reply]:
        self.requests.append(messages)
        if self.served >= len(self.replies):
            raise PolicyRefusal("replay file exhausted")
        out = self.replies[self.served:self.served + n]
        self.served += n
        return out


def _count(value: Any) -> int:
    """A token count from a replay line (anything else than a whole number counts as 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


__all__ = ["ReplayChatModel"]
