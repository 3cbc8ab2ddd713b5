"""``TransformersChatModel`` on the CPU with a tiny randomly initialised Llama (2 layers,
hidden 64) and a byte-level BPE tokenizer trained here on a few strings: nothing is
downloaded.  The model writes garbage, so the end-to-end run's turn has no code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudaperf_cli.core import install_hint

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.policies.base import ChatModel, Reply
from cudaperf_cli.policies.openai_policy import ModelServerError
from cudaperf_cli.policies.transformers_policy import TransformersChatModel, plain_prompt
from tests.test_cli import EXAMPLES, cli, error_lines

MESSAGES = [
    {"role": "system", "content": "You write CUDA."},
    {"role": "user", "content": "Port magnitude() to CUDA."},
]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tiny_model(folder: Path, *, chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """Save a tiny random causal LM and its tokenizer to ``folder`` (save_pretrained)."""
    pytest.importorskip("torch", reason="the transformers policy needs torch")
    pytest.importorskip("transformers", reason="the transformers policy needs transformers")
    tokenizers = pytest.importorskip("tokenizers")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    pre = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([
        'extern "C" int kernel_gemm_cuda(int ni, int nj, double *C) { return 0; }',
        "__global__ void magnitude_kernel(int n, const float *u, float *out) {}",
        "You write CUDA. Port the C function to CUDA, one thread per element.",
    ], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")
    if chat_template:
        fast.chat_template = chat_template
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384,
        pad_token_id=fast.pad_token_id, bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


# ----------------------------------------------------------------------------- the happy path

def test_is_a_chat_model():
    assert isinstance(TransformersChatModel("/nowhere"), ChatModel)


def test_n_replies_with_token_counts(tiny):
    model = TransformersChatModel(tiny, temperature=0.8, max_tokens=12, seed=0)
    replies = model.complete(MESSAGES, n=3)
    assert len(replies) == 3
    assert all(isinstance(r, Reply) and isinstance(r.text, str) and r.code is None for r in replies)
    assert all(r.prompt_tokens > 0 for r in replies)
    assert len({r.prompt_tokens for r in replies}) == 1
    assert all(0 < r.completion_tokens <= 12 for r in replies)
    assert len({r.latency_s for r in replies}) == 1 and replies[0].latency_s > 0
    assert model.loaded and model.device == "cpu"  # no GPU in CI; float32 there
    assert str(model._model.dtype) == "torch.float32"


def test_same_seed_same_replies_other_seed_other_replies(tiny):
    first = [r.text for r in TransformersChatModel(tiny, temperature=1.0, max_tokens=10, seed=7).complete(MESSAGES, n=2)]
    again = [r.text for r in TransformersChatModel(tiny, temperature=1.0, max_tokens=10, seed=7).complete(MESSAGES, n=2)]
    other = [r.text for r in TransformersChatModel(tiny, temperature=1.0, max_tokens=10, seed=8).complete(MESSAGES, n=2)]
    assert first == again
    assert first != other


def test_seeding_leaves_the_global_rng_alone(tiny):
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    TransformersChatModel(tiny, temperature=1.0, max_tokens=4, seed=1).complete(MESSAGES)
    assert torch.equal(torch.rand(3), expected)


def test_greedy_with_n_gives_the_same_reply_n_times(tiny):
    model = TransformersChatModel(tiny, temperature=0, max_tokens=6)
    replies = model.complete(MESSAGES, n=3)
    assert len(replies) == 3 and len({r.text for r in replies}) == 1
    assert model.generate_kwargs(3, 10)["num_return_sequences"] == 1
    assert model.generate_kwargs(3, 10)["do_sample"] is False


def test_generate_kwargs(tiny):
    model = TransformersChatModel(tiny, temperature=0.6, top_p=0.9, max_tokens=100)
    model.load()
    kwargs = model.generate_kwargs(4, 50)
    assert kwargs == {"max_new_tokens": 100, "do_sample": True, "temperature": 0.6, "top_p": 0.9,
                      "num_return_sequences": 4, "pad_token_id": model._tokenizer.pad_token_id}
    # the context (16384) bounds a reply; unset max_tokens -> DEFAULT_MAX_NEW_TOKENS
    assert model.generate_kwargs(1, 16380)["max_new_tokens"] == 4
    unset = TransformersChatModel(tiny)
    unset.load()
    kwargs = unset.generate_kwargs(2, 10)
    assert kwargs["max_new_tokens"] == 8192 and "temperature" not in kwargs and "top_p" not in kwargs


def test_chat_template_is_applied(tiny):
    model = TransformersChatModel(tiny)
    text = model.prompt_text(MESSAGES)
    assert text == "<s><|system|>You write CUDA.</s><|user|>Port magnitude() to CUDA.</s><|assistant|>"


def test_no_chat_template_is_plain_role_content(tmp_path):
    folder = build_tiny_model(tmp_path / "plain", chat_template=None)
    model = TransformersChatModel(folder, temperature=0.5, max_tokens=5, seed=0)
    assert model.prompt_text(MESSAGES) == plain_prompt(MESSAGES)
    assert plain_prompt(MESSAGES) == "system: You write CUDA.\n\nuser: Port magnitude() to CUDA.\n\nassistant:"
    (reply,) = model.complete(MESSAGES)
    assert 0 < reply.completion_tokens <= 5


@pytest.mark.filterwarnings("ignore::FutureWarning")  # peft on transformers 5
def test_a_peft_adapter_folder_on_a_local_base(tmp_path, tiny):
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny, local_files_only=True)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
                   ).save_pretrained(tmp_path)  # adapter only: no config.json, no tokenizer
    model = TransformersChatModel(tmp_path, temperature=0.5, max_tokens=4, seed=0)
    (reply,) = model.complete(MESSAGES)
    assert 0 < reply.completion_tokens <= 4
    assert getattr(model._model, "_hf_peft_config_loaded", False)


def test_model_loads_once_per_process(tiny):
    a = TransformersChatModel(tiny, max_tokens=2)
    b = TransformersChatModel(str(tiny) + "/", temperature=0.3, max_tokens=2)
    a.complete(MESSAGES)
    b.complete(MESSAGES)
    assert a._model is b._model and a._tokenizer is b._tokenizer


def test_prompt_longer_than_the_context_is_one_line(tiny):
    model = TransformersChatModel(tiny, max_tokens=2)
    model.load()
    long = [{"role": "user", "content": "x" * 20000}]
    with pytest.raises(ModelServerError) as info:
        model.complete(long)
    assert "longer than the context" in str(info.value) and info.value.exit_code == 3


# ----------------------------------------------------------------------------- laziness and errors

def test_importing_the_module_does_not_import_transformers():
    code = ("import sys, cudaperf_cli.policies.transformers_policy as m; m.TransformersChatModel('x'); "
            "assert 'transformers' not in sys.modules and 'torch' not in sys.modules, 'imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def _raises(model: TransformersChatModel) -> ModelServerError:
    with pytest.raises(ModelServerError) as info:
        model.complete(MESSAGES)
    err = info.value
    assert err.exit_code == 3 and "\n" not in str(err)
    assert err.__cause__ is None
    assert not model.loaded
    return err


def test_missing_folder(tmp_path):
    err = _raises(TransformersChatModel(tmp_path / "nope"))
    assert str(err) == f"cannot load {tmp_path / 'nope'} with transformers: no such folder"
    assert "local folders only" in err.hint


def test_folder_without_a_model(tmp_path):
    err = _raises(TransformersChatModel(tmp_path))
    assert "no config.json" in str(err)
    (tmp_path / "weights.bin").write_text("")
    assert "not a folder" in str(_raises(TransformersChatModel(tmp_path / "weights.bin")))


def test_folder_without_weights_or_tokenizer(tmp_path, tiny):
    (tmp_path / "config.json").write_text((tiny / "config.json").read_text())
    assert "cannot load the tokenizer of" in str(_raises(TransformersChatModel(tmp_path)))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_text((tiny / name).read_text())
    err = _raises(TransformersChatModel(tmp_path))
    assert str(err).startswith(f"cannot load {tmp_path} with transformers: ")


def test_not_a_causal_lm(tmp_path, tiny):
    pytest.importorskip("transformers")
    from transformers import T5Config

    T5Config(d_model=8, num_layers=1, num_heads=1, d_ff=8, d_kv=8, vocab_size=16).save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_text((tiny / name).read_text())
    err = _raises(TransformersChatModel(tmp_path))
    assert str(err) == f"cannot load {tmp_path} with transformers: not a causal language model (model_type 't5')"


@pytest.mark.parametrize("missing", ["transformers", "torch"])
def test_missing_package_is_one_line_with_the_hint(monkeypatch, tmp_path, tiny, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # `import X` -> ModuleNotFoundError
    err = _raises(TransformersChatModel(tiny))  # checked before the per-process cache
    assert str(err) == f"the transformers policy needs the {missing} package, which is not installed"
    assert install_hint("train") in err.hint


def test_bad_dtype():
    with pytest.raises(ModelServerError, match="unknown dtype"):
        TransformersChatModel("x", dtype="int3")


# ----------------------------------------------------------------------------- make_policy and the CLI

def test_make_policy(tmp_path, tiny, monkeypatch):
    from cudaperf_cli.agent.optimize import POLICIES, OptimizeOptions, make_policy

    assert "transformers" in POLICIES
    with pytest.raises(CudaperfError) as info:
        make_policy("transformers", OptimizeOptions(file=Path(".")))
    assert info.value.exit_code == 2 and "--model" in str(info.value)
    with pytest.raises(ModelServerError, match="no such folder"):
        make_policy("transformers", OptimizeOptions(file=Path("."), model=str(tmp_path / "nope")))
    opts = OptimizeOptions(file=Path("."), model=str(tiny), temperature=0.4, top_p=0.8,
                           max_tokens=33, sampling_seed=5)
    policy = make_policy("transformers", opts)
    chat = policy.chat_model
    assert isinstance(chat, TransformersChatModel) and not chat.loaded  # loads on the first turn
    assert (chat.temperature, chat.top_p, chat.max_tokens, chat.seed) == (0.4, 0.8, 33, 5)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    with pytest.raises(ModelServerError, match="needs the transformers package"):
        make_policy("transformers", opts)


def test_cli_without_model_is_a_usage_error(tmp_path):
    proc = cli("optimize", str(EXAMPLES / "elementwise.c"), "--policy", "transformers", cwd=tmp_path)
    assert proc.returncode == 2
    lines = error_lines(proc)
    assert len(lines) == 1 and "--model" in lines[0] and "Traceback" not in proc.stderr


def test_optimize_end_to_end_with_a_random_model(tmp_path, tiny):
    """The random model writes no code: one ``format_error`` turn, no result, exit 1."""
    proc = cli(
        "optimize", str(EXAMPLES / "matmul.c"), "--size", "ni=40", "--size", "nj=50", "--size", "nk=60",
        "--policy", "transformers", "--model", str(tiny), "--max-tokens", "16", "--sampling-seed", "0",
        "--turns", "1", "--yes", "--json", cwd=tmp_path,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    (turn,) = doc["turns"]
    assert turn["policy"] == "transformers" and turn["status"] in ("format_error", "refused")
    if turn["status"] == "format_error":
        assert 0 < turn["mapping"]["completion_tokens"] <= 16 and turn["mapping"]["prompt_tokens"] > 0
    # no GPU: no CPU baseline either (nothing is timed against it); with one, it ran
    from tests.conftest import cuda_device_status

    assert bool(doc["cpu_baseline"]) == cuda_device_status()[0]


def test_a_classifier_is_not_a_causal_lm(tmp_path):
    """A sequence classifier (e.g. a ranker checkpoint) would load with a random text head."""
    from cudaperf_cli.policies.transformers_policy import check_model_folder

    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForSequenceClassification"]}')
    with pytest.raises(ModelServerError, match="holds a LlamaForSequenceClassification, not a causal"):
        check_model_folder(tmp_path)
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    assert check_model_folder(tmp_path) == tmp_path
