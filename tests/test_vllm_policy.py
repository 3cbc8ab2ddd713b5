"""``VLLMChatModel`` on the CPU, without vLLM: a fake ``vllm`` module in ``sys.modules``
records what the model passes to ``vllm.LLM``, ``LLM.chat`` and ``vllm.SamplingParams``
and answers with objects shaped like vLLM's ``RequestOutput``/``CompletionOutput``.
One test loads a real model; it needs vllm, a GPU and ``CUDAPERF_VLLM_TEST_MODEL``."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from cudaperf_cli.core import install_hint

from cudaperf_cli.policies.base import ChatModel, Reply
from cudaperf_cli.policies.openai_policy import ModelServerError
from cudaperf_cli.policies.vllm_policy import VLLMChatModel

MESSAGES = [
    {"role": "system", "content": "You write CUDA."},
    {"role": "user", "content": "Port magnitude() to CUDA."},
]


@dataclass
class FakeCompletionOutput:  # the fields of vllm.outputs.CompletionOutput used here
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = "stop"


@dataclass
class FakeRequestOutput:  # the fields of vllm.outputs.RequestOutput used here
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    outputs: list[FakeCompletionOutput] = field(default_factory=list)
    finished: bool = True


def make_fake_vllm(
    *,
    load_error: BaseException | None = None,
    chat_error: BaseException | None = None,
    model_defaults: dict[str, Any] | None = None,
    prompt_len: int = 7,
) -> types.ModuleType:
    """A module standing in for ``vllm``: ``LLM`` and ``SamplingParams`` that record calls."""
    mod = types.ModuleType("vllm")
    mod.llm_instances = []  # type: ignore[attr-defined]

    class SamplingParams:
        # vLLM's neutral defaults (vllm/sampling_params.py)
        n = 1
        temperature = 1.0
        top_p = 1.0
        top_k = 0
        min_p = 0.0
        repetition_penalty = 1.0
        seed = None
        max_tokens = 16

        def __init__(self, **kwargs: Any):
            self.kwargs = kwargs
            for key, value in kwargs.items():
                setattr(self, key, value)

    class LLM:
        def __init__(self, **kwargs: Any):
            self.kwargs = kwargs
            self.chat_calls: list[dict[str, Any]] = []
            if load_error is not None:
                raise load_error
            mod.llm_instances.append(self)  # type: ignore[attr-defined]

        def chat(self, messages, sampling_params=None, use_tqdm=True, **rest):
            self.chat_calls.append({"messages": messages, "sampling_params": sampling_params,
                                    "use_tqdm": use_tqdm, **rest})
            if chat_error is not None:
                raise chat_error
            n = sampling_params.kwargs.get("n", 1)
            outs = [FakeCompletionOutput(i, f"reply {i}", list(range(3 + i))) for i in range(n)]
            return [FakeRequestOutput("0", None, list(range(prompt_len)), outs)]

        if model_defaults is not None:
            def get_default_sampling_params(self):
                return SamplingParams(**model_defaults)

    mod.LLM = LLM  # type: ignore[attr-defined]
    mod.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    return mod


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = make_fake_vllm()
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return mod


# ----------------------------------------------------------------------------- the happy path

def test_is_a_chat_model():
    assert isinstance(VLLMChatModel("m"), ChatModel)


def test_llm_gets_only_the_options_that_are_set(fake_vllm):
    VLLMChatModel("Qwen/Qwen2.5-Coder-7B-Instruct").complete(MESSAGES)
    (llm,) = fake_vllm.llm_instances
    assert llm.kwargs == {"model": "Qwen/Qwen2.5-Coder-7B-Instruct", "tensor_parallel_size": 1}


def test_llm_gets_every_option_set(fake_vllm):
    model = VLLMChatModel("/models/coder", tensor_parallel_size=2, gpu_memory_utilization=0.8,
                          max_model_len=16384, dtype="bfloat16", seed=5)
    model.load()
    (llm,) = fake_vllm.llm_instances
    assert llm.kwargs == {"model": "/models/coder", "tensor_parallel_size": 2,
                          "gpu_memory_utilization": 0.8, "max_model_len": 16384,
                          "dtype": "bfloat16"}
    assert model.loaded and model.load_s >= 0


def test_sampling_params_only_the_set_ones(fake_vllm):
    VLLMChatModel("m").complete(MESSAGES)
    params = fake_vllm.llm_instances[0].chat_calls[0]["sampling_params"]
    # max_tokens=None is passed on purpose: vLLM then generates up to the context limit,
    # where SamplingParams' own default would stop every reply at 16 tokens.
    assert params.kwargs == {"n": 1, "max_tokens": None}


def test_sampling_params_all_set(fake_vllm):
    VLLMChatModel("m", n=2, temperature=0.2, top_p=0.95, max_tokens=4000, seed=7).complete(MESSAGES)
    params = fake_vllm.llm_instances[0].chat_calls[0]["sampling_params"]
    assert params.kwargs == {"n": 2, "max_tokens": 4000, "temperature": 0.2, "top_p": 0.95,
                             "seed": 7}


def test_chat_call_passes_the_conversation_without_progress_bar(fake_vllm):
    VLLMChatModel("m").complete(MESSAGES)
    (call,) = fake_vllm.llm_instances[0].chat_calls
    assert call["messages"] == MESSAGES
    assert call["use_tqdm"] is False
    assert set(call) == {"messages", "sampling_params", "use_tqdm"}


def test_n_replies_mapped_with_token_counts(fake_vllm):
    replies = VLLMChatModel("m", n=2).complete(MESSAGES, n=3)
    assert fake_vllm.llm_instances[0].chat_calls[0]["sampling_params"].kwargs["n"] == 3
    assert [r.text for r in replies] == ["reply 0", "reply 1", "reply 2"]
    assert all(isinstance(r, Reply) and r.code is None for r in replies)
    assert [r.prompt_tokens for r in replies] == [7, 7, 7]
    assert [r.completion_tokens for r in replies] == [3, 4, 5]
    assert len({r.latency_s for r in replies}) == 1 and replies[0].latency_s >= 0


def test_default_n_comes_from_the_constructor(fake_vllm):
    assert len(VLLMChatModel("m", n=2).complete(MESSAGES)) == 2


def test_model_is_loaded_once(fake_vllm):
    model = VLLMChatModel("m")
    model.complete(MESSAGES)
    model.complete(MESSAGES + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}])
    assert len(fake_vllm.llm_instances) == 1
    assert len(fake_vllm.llm_instances[0].chat_calls) == 2


def test_model_generation_defaults_fill_unset_fields(monkeypatch):
    mod = make_fake_vllm(model_defaults={"temperature": 0.7, "top_p": 0.8, "top_k": 20,
                                         "repetition_penalty": 1.05, "min_p": 0.0})
    monkeypatch.setitem(sys.modules, "vllm", mod)
    VLLMChatModel("m", temperature=0.2).complete(MESSAGES)
    params = mod.llm_instances[0].chat_calls[0]["sampling_params"]
    # the user's temperature wins; neutral values (min_p 0.0) are not passed
    assert params.kwargs == {"temperature": 0.2, "top_p": 0.8, "top_k": 20,
                             "repetition_penalty": 1.05, "n": 1, "max_tokens": None}


def test_empty_outputs_give_one_empty_reply(monkeypatch, fake_vllm):
    monkeypatch.setattr(fake_vllm.LLM, "chat", lambda self, *a, **k: [])
    (reply,) = VLLMChatModel("m").complete(MESSAGES)
    assert reply.text == "" and reply.completion_tokens == 0


# ----------------------------------------------------------------------------- laziness

def test_constructing_does_not_import_vllm(monkeypatch):
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    model = VLLMChatModel("m", n=4, temperature=0.5)
    assert "vllm" not in sys.modules
    assert not model.loaded


def test_constructing_does_not_load_the_model(fake_vllm):
    VLLMChatModel("m")
    assert fake_vllm.llm_instances == []


def test_importing_the_module_does_not_import_vllm():
    code = ("import sys, cudaperf_cli.policies.vllm_policy as m; m.VLLMChatModel('x'); "
            "assert 'vllm' not in sys.modules, 'vllm imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


# ----------------------------------------------------------------------------- errors

def test_missing_vllm_is_a_model_server_error_with_the_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` -> ModuleNotFoundError
    with pytest.raises(ModelServerError) as info:
        VLLMChatModel("m").complete(MESSAGES)
    err = info.value
    assert err.exit_code == 3
    assert "\n" not in str(err) and "vllm" in str(err)
    assert install_hint("vllm") in err.hint and "vllm serve" in err.hint
    assert "--policy openai --base-url" in err.hint
    assert err.__cause__ is None and err.__suppress_context__


def test_load_without_vllm_raises_too(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ModelServerError):
        VLLMChatModel("m").load()


def test_broken_vllm_install_is_one_line(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "vllm":
            raise ImportError("libcudart.so.12: cannot open shared object file\nsecond line")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ModelServerError) as info:
        VLLMChatModel("m").complete(MESSAGES)
    assert str(info.value) == ("vLLM is installed but cannot be imported: "
                               "libcudart.so.12: cannot open shared object file")
    assert info.value.exit_code == 3


def test_vllm_missing_a_dependency_is_not_reported_as_missing_vllm(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "vllm":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ModelServerError) as info:
        VLLMChatModel("m").load()
    assert str(info.value) == "vLLM is installed but cannot be imported: No module named 'torch'"


@pytest.mark.parametrize("exc, expected", [
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\n  File x.py, line 3\nmore"),
     "cannot load big/model with vLLM: CUDA out of memory. Tried to allocate 2.00 GiB"),
    (OSError("\nbig/model is not a local folder and is not a valid model identifier"),
     ("cannot load big/model with vLLM: big/model is not a local folder and is not a valid "
      "model identifier")),
    (ValueError(""), "cannot load big/model with vLLM: ValueError"),
])
def test_load_failure_is_one_line(monkeypatch, exc, expected):
    monkeypatch.setitem(sys.modules, "vllm", make_fake_vllm(load_error=exc))
    model = VLLMChatModel("big/model")
    with pytest.raises(ModelServerError) as info:
        model.complete(MESSAGES)
    assert str(info.value) == expected
    assert info.value.exit_code == 3
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert not model.loaded


def test_request_failure_is_one_line(monkeypatch):
    exc = ValueError("The decoder prompt (length 40000) is longer than the maximum model "
                     "length of 32768.\nMake sure that `max_model_len` is no smaller")
    monkeypatch.setitem(sys.modules, "vllm", make_fake_vllm(chat_error=exc))
    with pytest.raises(ModelServerError) as info:
        VLLMChatModel("m").complete(MESSAGES)
    assert str(info.value) == ("vLLM (m) failed on the request: The decoder prompt (length "
                               "40000) is longer than the maximum model length of 32768.")
    assert info.value.exit_code == 3


# ----------------------------------------------------------------------------- a real model

@pytest.mark.gpu
def test_real_vllm_tiny_model():
    """Set CUDAPERF_VLLM_TEST_MODEL to a small chat model (e.g. Qwen/Qwen2.5-0.5B-Instruct)."""
    name = os.environ.get("CUDAPERF_VLLM_TEST_MODEL")
    if not name:
        pytest.skip("set CUDAPERF_VLLM_TEST_MODEL to a small chat model to run this test")
    pytest.importorskip("vllm")
    model = VLLMChatModel(name, n=2, temperature=0.8, max_tokens=32, seed=0,
                          max_model_len=2048, gpu_memory_utilization=0.5)
    replies = model.complete([{"role": "user", "content": "Say hello in one word."}])
    assert len(replies) == 2
    for reply in replies:
        assert reply.text.strip()
        assert reply.prompt_tokens > 0
        assert 0 < reply.completion_tokens <= 32
        assert reply.latency_s > 0
