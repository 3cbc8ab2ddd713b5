"""A chat model run in this process by vLLM's offline engine (``--policy vllm``).

The model (a Hugging Face name or a local directory) is loaded once, on the first
:meth:`VLLMChatModel.complete` (or an explicit :meth:`VLLMChatModel.load`), onto the GPUs
of this machine; ``vllm`` is imported only then, never when this module is imported.
Conversations go through ``vllm.LLM.chat``, which applies the model's own chat template.

Sampling: what is not set here falls back to the model's ``generation_config.json``
defaults (temperature, top-p, top-k, min-p, repetition penalty), as ``vllm serve`` does;
an unset ``max_tokens`` lets a reply run to the context limit (``max_model_len`` minus the
prompt), again as ``vllm serve`` does (``SamplingParams`` on its own would stop at 16).

Install: ``pip install 'cudaperf[vllm]'`` (vLLM brings its own torch).  To share one
loaded model between runs, or to run it on another machine, serve it with
``vllm serve M`` and use ``--policy openai --base-url http://HOST:8000/v1`` instead.
"""

from __future__ import annotations

import time
from typing import Any

from cudaperf_cli.core import install_hint
from cudaperf_cli.policies.base import Reply
from cudaperf_cli.policies.openai_policy import ModelServerError

INSTALL_HINT = (
    f"{install_hint('vllm')} (vllm brings its own torch), or serve the model with `vllm serve M` "
    "and use --policy openai --base-url ..."
)

#: Sampling fields taken from the model's generation config when not set here.
_MODEL_DEFAULT_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of ``str(exc)``, or the exception's type name."""
    for line in str(exc).splitlines():
        if line.strip():
            return " ".join(line.split())
    return type(exc).__name__


def _count(token_ids: Any) -> int:
    """Number of token ids (``None``: 0)."""
    return 0 if token_ids is None else len(token_ids)


class VLLMChatModel:
    """A :class:`~cudaperf_cli.policies.base.ChatModel` on an in-process ``vllm.LLM``.

    Args:
        model: Hugging Face model name or local directory, e.g.
            ``"Qwen/Qwen2.5-Coder-7B-Instruct"``.
        n: replies per request when :meth:`complete` is not given ``n``.
        temperature: sampling temperature (0 = greedy); ``None``: the model's default.
        top_p: nucleus-sampling probability mass in (0, 1]; ``None``: the model's default.
        max_tokens: most tokens per reply; ``None``: up to the context limit.
        seed: sampling seed of each request (reply ``i`` of a request uses ``seed + i``);
            ``None``: unseeded.
        tensor_parallel_size: number of GPUs the model is split over.
        gpu_memory_utilization: fraction (0, 1] of each GPU's memory vLLM may take for
            weights, activations and KV cache; ``None``: vLLM's default (0.9).
        max_model_len: context length in tokens (prompt + reply); ``None``: the model's.
        dtype: weight/activation dtype (``"auto"``, ``"bfloat16"``, ``"float16"``...);
            ``None``: vLLM's default (``"auto"``).

    Only the options that are set are passed to vLLM.  Nothing is loaded or imported
    until the first :meth:`complete` or :meth:`load`.
    """

    def __init__(
        self,
        model: str,
        *,
        n: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float | None = None,
        max_model_len: int | None = None,
        dtype: str | None = None,
    ):
        self.model = str(model)
        self.n = n
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.seed = seed
        self.tensor_parallel_size = tensor_parallel_size
        self.gpu_memory_utilization = gpu_memory_utilization
        self.max_model_len = max_model_len
        self.dtype = dtype
        self._vllm: Any = None
        self._llm: Any = None
        self._model_defaults: dict[str, Any] = {}
        self.load_s: float = 0.0  #: seconds the model took to load (0 until loaded)

    def __repr__(self) -> str:
        return f"VLLMChatModel(model={self.model!r}, tensor_parallel_size={self.tensor_parallel_size})"

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded."""
        return self._llm is not None

    def llm_kwargs(self) -> dict[str, Any]:
        """The keyword arguments given to ``vllm.LLM``: ``model``, ``tensor_parallel_size``
        and whichever of ``gpu_memory_utilization``, ``max_model_len``, ``dtype`` are set."""
        kwargs: dict[str, Any] = {"model": self.model, "tensor_parallel_size": self.tensor_parallel_size}
        for key, value in (("gpu_memory_utilization", self.gpu_memory_utilization),
                           ("max_model_len", self.max_model_len), ("dtype", self.dtype)):
            if value is not None:
                kwargs[key] = value
        return kwargs

    def _import_vllm(self) -> Any:
        try:
            import vllm
        except ModuleNotFoundError as exc:
            if exc.name not in (None, "vllm"):  # vllm is there, one of its dependencies is not
                raise ModelServerError(
                    f"vLLM is installed but cannot be imported: {_first_line(exc)}", hint=INSTALL_HINT
                ) from None
            raise ModelServerError(
                "the vllm policy needs the vllm package, which is not installed", hint=INSTALL_HINT
            ) from None
        except Exception as exc:  # noqa: BLE001 - a broken install (torch/CUDA mismatch...)
            raise ModelServerError(
                f"vLLM is installed but cannot be imported: {_first_line(exc)}", hint=INSTALL_HINT
            ) from None
        return vllm

    def load(self) -> None:
        """Import vLLM and load the model onto the GPU(s); does nothing once loaded.

        Raises:
            ModelServerError: vllm is not installed or cannot be imported, or the model
                cannot be loaded (unknown name, bad path, out of GPU memory...); exit code 3.
        """
        if self._llm is not None:
            return
        vllm = self._import_vllm()
        t0 = time.perf_counter()
        try:
            llm = vllm.LLM(**self.llm_kwargs())
        except Exception as exc:  # noqa: BLE001 - vLLM raises many kinds; all end the run
            raise ModelServerError(f"cannot load {self.model} with vLLM: {_first_line(exc)}") from None
        self.load_s = time.perf_counter() - t0
        self._vllm, self._llm = vllm, llm
        self._model_defaults = self._read_model_defaults()

    def _read_model_defaults(self) -> dict[str, Any]:
        """Sampling values of the model's generation config that differ from vLLM's neutral
        ones (``LLM.get_default_sampling_params``, what ``LLM.chat`` uses when given none)."""
        getter = getattr(self._llm, "get_default_sampling_params", None)
        if getter is None:
            return {}
        try:
            defaults, neutral = getter(), self._vllm.SamplingParams()
        except Exception:  # noqa: BLE001 - a nicety only: fall back to neutral defaults
            return {}
        out: dict[str, Any] = {}
        for key in _MODEL_DEFAULT_FIELDS:
            value = getattr(defaults, key, None)
            if value is not None and value != getattr(neutral, key, None):
                out[key] = value
        return out

    def sampling_kwargs(self, n: int) -> dict[str, Any]:
        """The keyword arguments given to ``vllm.SamplingParams`` for a request of ``n``
        replies: the model's generation-config defaults, then ``n``, ``max_tokens`` (always:
        ``None`` means up to the context limit) and whichever of ``temperature``, ``top_p``,
        ``seed`` are set."""
        kwargs: dict[str, Any] = dict(self._model_defaults)
        kwargs["n"] = n
        kwargs["max_tokens"] = self.max_tokens
        for key, value in (("temperature", self.temperature), ("top_p", self.top_p),
                           ("seed", self.seed)):
            if value is not None:
                kwargs[key] = value
        return kwargs

    def complete(self, messages: list[dict[str, str]], n: int | None = None) -> list[Reply]:
        """``n`` replies (default: the constructor's ``n``) to the conversation ``messages``.

        Loads the model on the first call.  Each :class:`Reply` has the reply text,
        ``prompt_tokens`` (the templated prompt), ``completion_tokens`` (that reply's
        tokens) and ``latency_s``: wall-clock seconds of the whole request (shared by its
        ``n`` replies; the first call's load time is not included, see :attr:`load_s`).

        Raises:
            ModelServerError: vllm is missing, the model cannot be loaded, or vLLM fails
                on the request (prompt longer than ``max_model_len``, out of memory...);
                exit code 3.
        """
        self.load()
        n = n or self.n
        try:
            params = self._vllm.SamplingParams(**self.sampling_kwargs(n))
        except Exception as exc:  # noqa: BLE001 - pydantic/msgspec/ValueError by version
            raise ModelServerError(f"vLLM rejected the sampling settings: {_first_line(exc)}") from None
        t0 = time.perf_counter()
        try:
            outputs = self._llm.chat(messages, sampling_params=params, use_tqdm=False)
        except Exception as exc:  # noqa: BLE001 - too-long prompt, OOM...: end the run
            raise ModelServerError(f"vLLM ({self.model}) failed on the request: {_first_line(exc)}") from None
        latency = time.perf_counter() - t0
        if not outputs:
            return [Reply("", None, 0, 0, latency)]
        request = outputs[0]  # one conversation in, one RequestOutput out
        prompt = _count(getattr(request, "prompt_token_ids", None))
        replies = [
            Reply(c.text or "", None, prompt, _count(c.token_ids), latency)
            for c in (request.outputs or [])
        ]
        return replies or [Reply("", None, prompt, 0, latency)]


__all__ = ["INSTALL_HINT", "VLLMChatModel"]
