"""A tiny randomly initialised causal LM and its tokenizer, built locally (no download).

It exists for tests and smoke runs of ``cudaperf train policy --model tiny``: it trains in
seconds on a CPU and its checkpoint loads like any other (``AutoTokenizer`` /
``AutoModelForCausalLM``, and ``cudaperf optimize --policy transformers --model CKPT``).
It writes random text, so its replies hold no code (the format reward); it learns nothing
useful.

- Tokenizer: byte-level BPE trained with the ``tokenizers`` library on the given texts (the
  problems' prompts) plus a little CUDA, wrapped in ``PreTrainedTokenizerFast`` with the
  special tokens below and a chat template::

      <|system|>\\n{content}<|end|>\\n<|user|>\\n{content}<|end|>\\n<|assistant|>\\n

  A reply ends with ``<|end|>``, the EOS token; ``<|pad|>`` pads.
- Model: ``LlamaConfig`` with 2 layers, hidden size 64, 4 heads (2 key/value heads),
  MLP 128, tied embeddings, RoPE (no fixed maximum length beyond
  ``max_position_embeddings``), seeded.
"""

from __future__ import annotations

from typing import Any, Sequence

SPECIAL_TOKENS = ("<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
#: A little CUDA so that common CUDA words get their own tokens.
CUDA_TEXT = """```cuda
#include <cuda_runtime.h>
__global__ void kernel(int n, const float *__restrict__ x, float *__restrict__ y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    __shared__ float tile[32][33];
    if (i < n) y[i] = x[i] * 2.0f;
    __syncthreads();
}
extern "C" int fn_cuda(int n, const float *x, float *y)
{
    kernel<<<(n + 255) / 256, 256>>>(n, x, y);
    return (int)cudaGetLastError();
}
```
"""
#: Shape of the tiny model.
TINY_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2}


def build_tiny_tokenizer(texts: Sequence[str], vocab_size: int = 2048) -> Any:
    """A byte-level BPE tokenizer trained on ``texts`` + :data:`CUDA_TEXT` (a
    ``PreTrainedTokenizerFast`` with pad/EOS tokens and the chat template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([*texts, CUDA_TEXT], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>",
        additional_special_tokens=list(SPECIAL_TOKENS[2:]),
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(tokenizer: Any, seed: int = 0, max_position_embeddings: int = 65536) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` (:data:`TINY_SHAPE`) for ``tokenizer``,
    float32, seeded; its generation config stops at the tokenizer's EOS."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None, **TINY_SHAPE,
    )
    with torch.random.fork_rng(devices=[]):  # the caller's RNG state is left as it was
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


def build_tiny(texts: Sequence[str], seed: int = 0) -> tuple[Any, Any]:
    """``(tokenizer, model)``: see the module docstring."""
    tokenizer = build_tiny_tokenizer(texts)
    return tokenizer, build_tiny_model(tokenizer, seed)


def describe() -> str:
    """One line for checkpoint metadata."""
    shape = ", ".join(f"{k} {v}" for k, v in TINY_SHAPE.items())
    return f"tiny: randomly initialised LlamaForCausalLM ({shape}), byte-level BPE tokenizer trained locally"


__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_tiny", "build_tiny_model", "build_tiny_tokenizer", "describe"]
