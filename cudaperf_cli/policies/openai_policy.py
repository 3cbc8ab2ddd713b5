"""Any OpenAI-compatible chat-completions server through the official ``openai`` client.

``vllm serve``, a hosted provider or an RL rollout server: ``model`` and ``base_url`` choose
it; the API key comes from the environment variable named by ``api_key_env`` (default
``OPENAI_API_KEY``) and is never logged or written.  Local servers that need no key get
``"EMPTY"`` when the variable is unset and a ``base_url`` is given.  Retries (connection
errors, 408/409/429/5xx) are the client's own (``max_retries``, with its back-off).
"""

from __future__ import annotations

import os
import time
from typing import Any

from cudaperf_cli.core import CudaperfError, install_hint
from cudaperf_cli.policies.base import Reply


class ModelServerError(CudaperfError):
    """The model server could not be reached, or kept failing after the client's retries."""

    exit_code = 3


class OpenAIChatModel:
    """A :class:`~cudaperf_cli.policies.base.ChatModel` on an OpenAI-compatible server."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        n: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        timeout: float = 600.0,
        max_retries: int = 2,
    ):
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.n = n
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.seed = seed
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: Any = None
        self.requests = 0  #: requests sent so far (the k-th is sent with ``seed + k``)

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    def client(self) -> Any:
        if self._client is None:
            try:
                import openai
            except ImportError:  # pragma: no cover - depends on the install
                from cudaperf_cli.core import MissingPackageError

                raise MissingPackageError(
                    "the openai policy needs the openai package, which is not installed",
                    hint=install_hint("llm"),
                ) from None
            from cudaperf_cli.sandbox import mark_secret

            mark_secret(self.api_key_env)  # never in a child's environment, whatever its name
            key = os.environ.get(self.api_key_env)
            if not key:
                if self.base_url is None:
                    raise CudaperfError(
                        f"the openai policy needs an API key in ${self.api_key_env}",
                        hint="set it, or pass --base-url for a local server (no key needed)",
                    )
                key = "EMPTY"
            self._client = openai.OpenAI(
                api_key=key, base_url=self.base_url, timeout=self.timeout,
                max_retries=self.max_retries,
            )
        return self._client

    def where(self) -> str:
        return str(self.base_url or getattr(self._client, "base_url", "") or "https://api.openai.com/v1")

    def complete(self, messages: list[dict[str, str]], n: int | None = None) -> list[Reply]:
        import openai

        client = self.client()
        n = n or self.n
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "n": n}
        # A re-request for the samples a server did not return (it ignored n) must not
        # repeat the first request's seed, or it repeats its reply: the k-th request of
        # this model is sent with seed + k (reproducible for the same run).
        seed = None if self.seed is None else self.seed + self.requests
        self.requests += 1
        for key, value in (("temperature", self.temperature), ("top_p", self.top_p),
                           ("max_tokens", self.max_tokens), ("seed", seed)):
            if value is not None:
                kwargs[key] = value
        t0 = time.perf_counter()
        try:
            response = client.chat.completions.create(**kwargs)
        except openai.APITimeoutError:
            raise ModelServerError(
                f"the model server at {self.where()} did not answer within {self.timeout:g} s "
                f"({self.max_retries} retries)"
            ) from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            why = " ".join(str(cause).split()) or type(cause).__name__
            raise ModelServerError(
                f"cannot reach the model server at {self.where()} after {self.max_retries} "
                f"retries: {why}"
            ) from None
        except openai.APIStatusError as exc:
            detail = " ".join(str(getattr(exc, "message", exc)).split())[:200]
            raise ModelServerError(
                f"the model server at {self.where()} answered HTTP {exc.status_code}: {detail}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - a 200 whose body is not a chat completion
            why = " ".join(str(exc).split())[:200]
            raise ModelServerError(
                f"the model server at {self.where()} answered something that is not a chat "
                f"completion: {type(exc).__name__}: {why}"
            ) from None
        latency = time.perf_counter() - t0
        if isinstance(response, (str, bytes)) or not hasattr(response, "choices"):
            raise ModelServerError(
                f"the model server at {self.where()} answered something that is not a chat completion"
            )
        usage = getattr(response, "usage", None)
        prompt = _count(getattr(usage, "prompt_tokens", 0))
        completion = _count(getattr(usage, "completion_tokens", 0))
        choices = list(response.choices or [])
        if not choices:
            raise ModelServerError(f"the model server at {self.where()} answered with no choices")
        share = completion // len(choices)
        return [Reply(_text(getattr(c, "message", None)), None, prompt, share, latency,
                      _finish(getattr(c, "finish_reason", None))) for c in choices]


def _finish(value: Any) -> str | None:
    """A choice's ``finish_reason`` as a short string, None when absent."""
    return str(value)[:40] if isinstance(value, str) and value else None


def _count(value: Any) -> int:
    """A usage count as the server gave it; anything but a whole number counts as 0."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0


def _text(message: Any) -> str:
    """The text of a choice's message: a string, or the text parts of a list of parts."""
    content = getattr(message, "content", None) if message is not None else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else getattr(p, "text", "") for p in content]
        return "".join(str(x) for x in parts if x)
    return ""


__all__ = ["ModelServerError", "OpenAIChatModel"]
