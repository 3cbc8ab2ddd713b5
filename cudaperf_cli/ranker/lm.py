"""Language-model ranker (``cudaperf train ranker --kind lm``): a Bradley-Terry reward model.

A sequence-classification language model with one output (``num_labels=1``) reads the text
of one candidate and gives it a reward ``r``; for two candidates of one problem

    p(a better than b) = sigmoid(r(a) - r(b))

so ``p(a, b) = 1 - p(b, a)`` by construction (both rewards come from one batch whatever the
order, :meth:`LMRanker.rewards`) and identical texts give 0.5.

- **Text of one side** (:func:`side_text`): ``// problem: <problem file name>\\n`` followed
  by the kernel source without its comments and string literals (code only: a comment such
  as the built-in policy's header naming its mapping is not evidence about speed),
  tokenised, cut to its first ``max_length - 1`` tokens, then the tokenizer's EOS token.
  The problem id is reduced to its file name (:func:`problem_name`), so bench pairs
  (``torch/x.py``), optimize runs (``gemm.c:kernel_gemm``), ``cudaperf rank --problem`` and
  ``optimize --ranker`` write the same line.  The same function encodes training pairs and
  ranking inputs.
- **Training**: TRL's :class:`trl.RewardTrainer` on a pre-tokenised preference dataset
  (``chosen_ids``, ``rejected_ids`` and an optional ``margin``); its loss is
  ``-log sigmoid(r_chosen - r_rejected - margin)``.  ``margin`` (:data:`MARGIN_MODES`):
  ``"speedup"`` (default) uses the pair's ``margin`` = ``ln(slow / fast)`` for a speed pair
  and :data:`CORRECTNESS_MARGIN` (an option) for a correctness pair; ``"none"`` trains
  without margins.  Pre-tokenising is deliberate: TRL 1.16 *drops* pairs longer than
  ``RewardConfig.max_length`` instead of truncating them.
- **Base model** (``--model``): ``"tiny"`` (the default, the only choice without a
  download) builds a randomly initialised 2-layer Llama-style model (:data:`TINY_CONFIG`)
  and a byte-level BPE tokenizer trained from scratch on the training pairs' texts
  (:data:`TINY_VOCAB_SIZE`); anything else is a local folder loaded with
  ``AutoModelForSequenceClassification.from_pretrained(PATH, num_labels=1)`` and
  ``AutoTokenizer`` (``local_files_only``: the hub is never contacted).  ``lora``: train a
  LoRA adapter (peft, ``task_type="SEQ_CLS"``, peft's default target modules for the
  architecture, the reward head fully trained) and merge it into the saved model.
- **Hardware**: CUDA when available (bf16 mixed precision when the GPU supports it,
  activation checkpointing for a ``--model`` base), else the CPU in float32.

The split by problem, the baselines and the metrics are those of the feature ranker
(:func:`pairs.split_by_problem`, :func:`model.evaluate_proba`).  Checkpoint folder: the
model and tokenizer (``save_pretrained``) and ``metadata.json`` (:func:`save`).

torch, transformers, tokenizers (and, to train, trl, datasets, accelerate; peft for LoRA)
come with ``pip install 'cudaperf[train]'``; they are imported only inside the functions.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from cudaperf_cli.core import CudaperfError, install_hint
from cudaperf_cli.ranker import model as M
from cudaperf_cli.ranker import pairs as P
from cudaperf_cli.ranker import train as T

#: ``--model`` value of the randomly initialised model built from :data:`TINY_CONFIG`.
TINY = "tiny"
#: Architecture of the tiny model (``transformers.LlamaConfig`` fields; the vocabulary size
#: is the trained tokenizer's, ``max_position_embeddings`` the ``max_length``).
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}
#: Target vocabulary of the tiny model's byte-level BPE tokenizer (256 bytes, the special
#: tokens and up to ~3,800 merges; fewer when the training texts have fewer pairs seen twice).
TINY_VOCAB_SIZE = 4096
TINY_MIN_FREQUENCY = 2
TINY_PAD, TINY_EOS = "<pad>", "<eos>"

#: Margin modes: ``speedup`` (ln(slow/fast) for speed pairs, :data:`CORRECTNESS_MARGIN` for
#: correctness pairs) or ``none``.
MARGIN_MODES = ("speedup", "none")
#: Default margin of a correctness pair in ``speedup`` mode (a failed candidate counts as
#: e = 2.7 times slower than the correct one).
CORRECTNESS_MARGIN = 1.0

DEFAULT_EPOCHS = 3
DEFAULT_BATCH_SIZE = 8
DEFAULT_MAX_LENGTH = 512
#: Learning rate when none is given: a randomly initialised tiny model, a pretrained base.
DEFAULT_LR_TINY = 1e-3
DEFAULT_LR_PRETRAINED = 1e-5
#: LoRA settings of ``lora=True``.
LORA_R, LORA_ALPHA, LORA_DROPOUT = 16, 32, 0.05
#: Texts per forward pass at inference.
INFERENCE_BATCH = 16

TRAIN_EXTRA = install_hint("train")
TEXT_FORMAT = ("// problem: <problem file name>\\n<kernel source without comments and strings>, "
               "first max_length-1 tokens + EOS")


def problem_name(problem: str) -> str:
    """The file name of a problem id: ``torch/row_amax.py`` -> ``row_amax.py``,
    ``gemm.c:kernel_gemm`` -> ``gemm.c``, ``""`` -> ``""``."""
    return Path(str(problem).split(":", 1)[0]).name


def side_text(problem: str, source: str) -> str:
    """The text of one candidate: the problem's file name line, then the kernel source
    without comments and string literals (:func:`features.strip_comments_and_strings`)."""
    from cudaperf_cli.ranker.features import strip_comments_and_strings

    return f"// problem: {problem_name(problem)}\n{strip_comments_and_strings(source)}"


# ------------------------------------------------------------------------------ libraries


def require_libraries(*, training: bool = True, lora: bool = False) -> None:
    """Import the libraries the LM ranker needs, and keep the Hugging Face libraries
    offline (``HF_HUB_OFFLINE=1`` unless set: no download ever happens).

    Raises:
        CudaperfError: a library is missing or broken (names the ``train`` extra).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    names = ["torch", "transformers", "tokenizers"]
    if training:  # trl first: it is the one most often missing
        names = ["trl", *names, "datasets", "accelerate"]
    if lora:
        names.append("peft")
    for name in names:
        _import(name)


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == name
        why = "not installed" if missing else f"cannot be imported: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}"
        raise CudaperfError(
            f"the language-model ranker needs {name}, {why}; install the training extra: {TRAIN_EXTRA}"
        ) from None


def library_versions(lora: bool = False) -> dict[str, str]:
    """Versions of the libraries an LM checkpoint depends on."""
    from cudaperf_cli import __version__

    out = {"cudaperf": __version__}
    for name in ("trl", "transformers", "torch", "tokenizers", "datasets", "accelerate", *(["peft"] if lora else [])):
        try:
            out[name] = str(importlib.import_module(name).__version__)
        except ImportError:
            continue
    out["numpy"] = np.__version__
    out["python"] = platform.python_version()
    return out


# ------------------------------------------------------------------------------ tokens


def encode(tokenizer: Any, text: str, max_length: int) -> tuple[list[int], bool]:
    """Token ids of ``text``: its first ``max_length - 1`` tokens (the tokenizer's own
    special tokens included), then EOS (when the tokenizer has one and it is not last).
    Returns ``(ids, truncated)``."""
    eos = tokenizer.eos_token_id
    room = max_length - (1 if eos is not None else 0)
    ids = list(tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"])
    truncated = len(ids) > room
    ids = ids[:room]
    if eos is not None and (not ids or ids[-1] != eos):
        ids.append(eos)
    return ids, truncated


@contextlib.contextmanager
def _no_hf_bars() -> Iterator[None]:
    """No transformers progress bar ("Loading weights", "Writing model shards") inside."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _library_noise(*, quiet: bool) -> Iterator[None]:
    """Inside: no deprecation warnings from the libraries; with ``quiet``, no warnings, no
    transformers/datasets logs below errors and no progress bars either.  Restored after."""
    import datasets
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_bars = hf_logging.is_progress_bar_enabled()
    ds_bars = datasets.is_progress_bar_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        if quiet:
            warnings.simplefilter("ignore")
            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
            datasets.disable_progress_bars()
        try:
            yield
        finally:
            hf_logging.set_verbosity(verbosity)
            if hf_bars:
                hf_logging.enable_progress_bar()
            if ds_bars:
                datasets.enable_progress_bars()


def _sigmoid(d: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -d))


class LMRanker:
    """A reward model and its tokenizer: ``p(a better than b) = sigmoid(r(a) - r(b))``.

    Attributes:
        model: a ``transformers`` sequence-classification model with one label.
        tokenizer: its tokenizer (a pad token set).
        max_length: tokens per text, EOS included (:func:`encode`).
    """

    def __init__(self, model: Any, tokenizer: Any, max_length: int):
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (tokenizer.eos_token_id or 0))

    def rewards(self, texts: Sequence[str]) -> np.ndarray:
        """The reward of each text (float64).  Distinct texts are scored once, in batches of
        :data:`INFERENCE_BATCH` ordered by (length, text), so a text's reward does not depend
        on the order it was given in."""
        import torch

        uniq = sorted(set(texts))
        enc = {t: encode(self.tokenizer, t, self.max_length)[0] for t in uniq}
        order = sorted(uniq, key=lambda t: (len(enc[t]), t))
        device = next(self.model.parameters()).device
        self.model.eval()
        out: dict[str, float] = {}
        with torch.no_grad():
            for i in range(0, len(order), INFERENCE_BATCH):
                chunk = order[i:i + INFERENCE_BATCH]
                width = max(len(enc[t]) for t in chunk)
                ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for j, t in enumerate(chunk):
                    ids[j, :len(enc[t])] = torch.tensor(enc[t], dtype=torch.long)
                    mask[j, :len(enc[t])] = 1
                logits = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
                for t, r in zip(chunk, logits.float().reshape(len(chunk), -1)[:, 0].tolist()):
                    out[t] = float(r)
        return np.asarray([out[t] for t in texts], dtype=np.float64)

    def predict_proba(self, texts_a: Sequence[str], texts_b: Sequence[str]) -> np.ndarray:
        """p(a better than b) for each pair of texts (:func:`side_text`), a 1-D array."""
        if len(texts_a) != len(texts_b):
            raise ValueError("texts_a and texts_b differ in length")
        r = self.rewards(list(texts_a) + list(texts_b))
        n = len(texts_a)
        return _sigmoid(r[:n] - r[n:])

    def compare_sources(self, source_a: str, source_b: str, problem: str = "") -> float:
        """p(a better than b) of two CUDA sources of the problem whose id is ``problem``
        (``""``: unknown, an empty id line)."""
        return float(self.predict_proba([side_text(problem, source_a)], [side_text(problem, source_b)])[0])


# ------------------------------------------------------------------------------ base models


def check_model_option(model: str) -> None:
    """Refuse a ``--model`` that is neither ``tiny`` nor an existing folder (no download).

    Raises:
        CudaperfError: the folder does not exist.
    """
    if model != TINY and not Path(model).is_dir():
        raise CudaperfError(
            f"no such model folder: {model}",
            hint="give a local folder written by save_pretrained (nothing is downloaded), or --model tiny",
        )


def build_tiny_tokenizer(texts: Sequence[str], vocab_size: int = TINY_VOCAB_SIZE) -> Any:
    """A byte-level BPE tokenizer trained from scratch on ``texts`` (``tokenizers``),
    wrapped as a ``PreTrainedTokenizerFast`` with ``<pad>`` and ``<eos>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=TINY_MIN_FREQUENCY, special_tokens=[TINY_PAD, TINY_EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(sorted(set(texts)), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=TINY_PAD, eos_token=TINY_EOS)


def build_tiny_model(tokenizer: Any, max_length: int, seed: int) -> tuple[Any, dict[str, Any]]:
    """A randomly initialised ``LlamaForSequenceClassification`` of :data:`TINY_CONFIG` (one
    label), seeded; and its config for the metadata."""
    from transformers import LlamaConfig, LlamaForSequenceClassification, set_seed

    config = {**TINY_CONFIG, "vocab_size": len(tokenizer), "max_position_embeddings": int(max_length)}
    set_seed(seed)
    model = LlamaForSequenceClassification(LlamaConfig(
        **config, num_labels=1, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None, tie_word_embeddings=False,
    ))
    return model, {"architecture": "LlamaForSequenceClassification", **config}


def load_base(path: str, dtype: Any = None) -> tuple[Any, Any]:
    """``AutoModelForSequenceClassification`` (one label, weights in ``dtype``: float32 when
    None, as TRL does) and ``AutoTokenizer`` of a local folder (``local_files_only``, no
    remote code); a tokenizer without a pad token pads with its EOS token.

    Raises:
        CudaperfError: the folder is missing, or holds no model or tokenizer these classes
            can load, or a tokenizer with neither pad nor EOS token.
    """
    check_model_option(path)
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    def why(exc: Exception) -> str:
        text = str(exc).strip().splitlines()
        return (text[0][:200] if text else type(exc).__name__)

    try:
        with warnings.catch_warnings(), _no_hf_bars():
            warnings.simplefilter("ignore")
            model = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=1, local_files_only=True, ignore_mismatched_sizes=True,
                dtype=dtype if dtype is not None else torch.float32,
            )
    except Exception as exc:  # noqa: BLE001 - any loading failure is the folder's
        raise CudaperfError(
            f"{path}: not a model AutoModelForSequenceClassification can load ({why(exc)})",
            hint="give a folder written by save_pretrained of a transformers model (config.json + weights), or --model tiny",
        ) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise CudaperfError(f"{path}: no tokenizer AutoTokenizer can load ({why(exc)})") from None
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise CudaperfError(f"{path}: the tokenizer has neither a pad token nor an EOS token")
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


# ------------------------------------------------------------------------------ training


@dataclass
class LMOptions:
    """Training options of the LM ranker (the ``cudaperf train ranker --kind lm`` flags).

    Attributes:
        model: ``"tiny"`` or a local model folder.
        epochs: passes over the training pairs.
        learning_rate: AdamW learning rate; None: :data:`DEFAULT_LR_TINY` for the tiny
            model, :data:`DEFAULT_LR_PRETRAINED` for a ``--model`` folder.
        batch_size: pairs per step (two texts each).
        max_length: tokens per text, EOS included.
        margin: one of :data:`MARGIN_MODES`.
        correctness_margin: margin of a correctness pair in ``speedup`` mode.
        lora: train a LoRA adapter (merged into the saved model).
        quiet: no progress bar, no library logs or warnings (``--json``).
    """

    model: str = TINY
    epochs: int = DEFAULT_EPOCHS
    learning_rate: float | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    max_length: int = DEFAULT_MAX_LENGTH
    margin: str = "speedup"
    correctness_margin: float = CORRECTNESS_MARGIN
    lora: bool = False
    quiet: bool = False

    def lr(self) -> float:
        if self.learning_rate is not None:
            return float(self.learning_rate)
        return DEFAULT_LR_TINY if self.model == TINY else DEFAULT_LR_PRETRAINED

    def check(self) -> None:
        """Raises: CudaperfError: an option out of range."""
        if self.epochs < 1:
            raise CudaperfError(f"--epochs must be >= 1, got {self.epochs}")
        if self.batch_size < 1:
            raise CudaperfError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.max_length < 16:
            raise CudaperfError(f"--max-length must be >= 16 tokens, got {self.max_length}")
        if not (self.lr() > 0 and math.isfinite(self.lr())):
            raise CudaperfError(f"--learning-rate must be > 0, got {self.learning_rate}")
        if self.margin not in MARGIN_MODES:
            raise CudaperfError(f"unknown --margin '{self.margin}'", hint="--margin " + " or ".join(MARGIN_MODES))
        if not (self.correctness_margin >= 0 and math.isfinite(self.correctness_margin)):
            raise CudaperfError(f"--correctness-margin must be >= 0, got {self.correctness_margin}")
        check_model_option(self.model)


@dataclass
class LMTrainResult:
    """A trained LM ranker, its held-out metrics, the split and what it was built from
    (the fields :func:`train.metadata` reads, plus ``base_model`` and ``training``)."""

    ranker: LMRanker
    metrics: dict[str, Any]
    train_problems: list[str]
    test_problems: list[str]
    train_pairs: int
    base_model: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    test_index: list[int] = field(default_factory=list)  #: indices of the held-out pairs
    test_proba: list[float] = field(default_factory=list)  #: p(a better) of each of them


def pair_texts(pair: Mapping[str, Any], index: int = 0) -> tuple[str, str]:
    """``(text of a, text of b)`` of a pair.

    Raises:
        CudaperfError: a side without a source.
    """
    out = []
    for key in ("a", "b"):
        source = pair[key].get("source") if isinstance(pair[key], Mapping) else None
        if not isinstance(source, str):
            raise CudaperfError(f"pair {index + 1}: side '{key}' has no source (the LM ranker reads sources)")
        out.append(side_text(str(pair["problem"]), source))
    return out[0], out[1]


def pair_margin(pair: Mapping[str, Any], options: LMOptions) -> float:
    """The margin of a pair in ``speedup`` mode: its ``ln(slow/fast)`` for a speed pair,
    ``options.correctness_margin`` for a correctness pair, 0 when unknown."""
    if pair.get("kind") == "correctness":
        return float(options.correctness_margin)
    m = pair.get("margin")
    if isinstance(m, (int, float)) and not isinstance(m, bool) and math.isfinite(m) and m > 0:
        return float(m)
    return 0.0


def _progress_callback() -> Any:
    """A training bar on stderr (the transformers bar writes its logs to stdout)."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class Bar(TrainerCallback):
        bar: Any = None

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            self.bar = tqdm(total=state.max_steps, desc="training (lm)", unit="step", file=sys.stderr,
                            dynamic_ncols=True, leave=False)

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            if self.bar is not None:
                self.bar.update(state.global_step - self.bar.n)

        def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    return Bar()


def train(
    pairs: Sequence[Mapping[str, Any]],
    options: LMOptions | None = None,
    *,
    test_fraction: float = 0.25,
    seed: int = 0,
    test_problems: Sequence[str] | None = None,
    split_by: str = "problem",
) -> LMTrainResult:
    """Split by problem, train the reward model on the training problems' pairs with TRL's
    ``RewardTrainer``, evaluate on the held-out ones (ranker, baselines, calibration).

    Raises:
        CudaperfError: too little data, a bad option, a missing library, or a base model
            that cannot be loaded.
    """
    options = options or LMOptions()
    options.check()
    T.check_enough(pairs)
    train_idx, test_idx, train_p, test_p = P.split_by_problem(
        pairs, test_fraction=test_fraction, seed=seed, test_problems=test_problems, by=split_by)
    texts = [pair_texts(p, i) for i, p in enumerate(pairs)]
    require_libraries(training=True, lora=options.lora)

    import torch
    from transformers import PrinterCallback, ProgressCallback

    with _library_noise(quiet=options.quiet):
        try:
            from datasets import Dataset
            from trl import RewardConfig, RewardTrainer
        except ImportError as exc:
            raise CudaperfError(f"cannot import TRL's RewardTrainer ({exc}); install the training extra: {TRAIN_EXTRA}") from None

        tiny = options.model == TINY
        cuda = torch.cuda.is_available()
        bf16 = bool(cuda and torch.cuda.is_bf16_supported())
        if tiny:
            tokenizer = build_tiny_tokenizer([t for i in train_idx for t in texts[i]])
            model, config = build_tiny_model(tokenizer, options.max_length, seed)
            base = {"name": TINY, "config": config,
                    "tokenizer": {"kind": "byte-level BPE (tokenizers), trained on the training pairs' texts",
                                  "vocab_size": len(tokenizer), "target_vocab_size": TINY_VOCAB_SIZE,
                                  "min_frequency": TINY_MIN_FREQUENCY}}
        else:
            # LoRA freezes the base: keep it in bf16 on a GPU that has it; else float32 weights
            model, tokenizer = load_base(options.model, torch.bfloat16 if (options.lora and bf16) else torch.float32)
            base = {"name": options.model, "path": str(Path(options.model).resolve()),
                    "architecture": (getattr(model.config, "architectures", None) or [type(model).__name__])[0],
                    "model_type": getattr(model.config, "model_type", None),
                    "parameters": int(sum(p.numel() for p in model.parameters()))}
            positions = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
            if isinstance(positions, int) and options.max_length > positions:
                raise CudaperfError(f"--max-length {options.max_length} exceeds the {positions} positions of {options.model}",
                                    hint=f"--max-length {positions} or less")

        rows: dict[str, list[Any]] = {"chosen_ids": [], "rejected_ids": []}
        if options.margin == "speedup":
            rows["margin"] = []
        truncated = 0
        for i in train_idx:
            (ta, tb), pair = texts[i], pairs[i]
            (ia, cut_a), (ib, cut_b) = encode(tokenizer, ta, options.max_length), encode(tokenizer, tb, options.max_length)
            truncated += cut_a + cut_b
            chosen, rejected = (ia, ib) if int(pair["label"]) == 1 else (ib, ia)
            rows["chosen_ids"].append(chosen)
            rows["rejected_ids"].append(rejected)
            if "margin" in rows:
                rows["margin"].append(pair_margin(pair, options))
        dataset = Dataset.from_dict(rows)

        peft_config = None
        if options.lora:
            from peft import LoraConfig

            peft_config = LoraConfig(task_type="SEQ_CLS", r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=LORA_DROPOUT)
        training = {
            "epochs": options.epochs, "learning_rate": options.lr(), "batch_size": options.batch_size,
            "max_length": options.max_length, "margin": options.margin,
            "correctness_margin": options.correctness_margin if options.margin == "speedup" else None,
            "lora": ({"r": LORA_R, "alpha": LORA_ALPHA, "dropout": LORA_DROPOUT, "task_type": "SEQ_CLS", "merged": True}
                     if options.lora else None),
            "seed": seed, "device": "cuda" if cuda else "cpu", "bf16": bf16, "trainer": "trl.RewardTrainer",
        }
        with tempfile.TemporaryDirectory(prefix="cudaperf-lm-") as tmp:
            args = RewardConfig(
                output_dir=tmp, num_train_epochs=options.epochs, per_device_train_batch_size=options.batch_size,
                learning_rate=options.lr(), seed=seed, data_seed=seed, use_cpu=not cuda, bf16=bf16, fp16=False,
                activation_checkpointing=bool(cuda and not tiny), report_to="none", logging_strategy="no",
                save_strategy="no", eval_strategy="no", disable_tqdm=True, max_length=None,
                dataloader_num_workers=0, dataloader_pin_memory=cuda,
            )
            try:
                trainer = RewardTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                                        peft_config=peft_config)
            except ValueError as exc:  # e.g. peft has no default target modules for the architecture
                raise CudaperfError(f"cannot set up the reward trainer: {str(exc).splitlines()[0][:200]}") from None
            trainer.remove_callback(PrinterCallback)  # prints the logs on stdout
            trainer.remove_callback(ProgressCallback)
            if not options.quiet:
                trainer.add_callback(_progress_callback())
            started = time.monotonic()
            try:
                out = trainer.train()
            except torch.cuda.OutOfMemoryError:
                raise CudaperfError("out of GPU memory while training the LM ranker",
                                    hint="lower --batch-size or --max-length, or add --lora") from None
            training["steps"] = int(trainer.state.global_step)
            training["seconds"] = round(time.monotonic() - started, 3)
            trained = trainer.model
        if options.lora:
            trained = trained.merge_and_unload()
        trained.eval()

    ranker = LMRanker(trained, tokenizer, options.max_length)
    test_pairs = [pairs[i] for i in test_idx]
    proba = ranker.predict_proba([texts[i][0] for i in test_idx], [texts[i][1] for i in test_idx]) if test_idx else []
    metrics = M.evaluate_proba(test_pairs, proba)
    metrics["train_pairs"] = len(train_idx)
    metrics["train_problems"] = len({pairs[i]["problem"] for i in train_idx})  # train_p: families with --split-by family
    metrics["train_loss"] = float(out.training_loss)
    metrics["truncated_train_texts"] = truncated
    return LMTrainResult(ranker, metrics, train_p, test_p, len(train_idx), base, training,
                         list(test_idx), [float(q) for q in proba])


# ------------------------------------------------------------------------------ checkpoints


def save(result: LMTrainResult, out_dir: Path, metadata: Mapping[str, Any]) -> Path:
    """Write the model and tokenizer (``save_pretrained``) and ``metadata.json`` to
    ``out_dir``.

    ``metadata.json``: ``kind`` ("cudaperf-ranker"), ``schema_version``, ``model_kind``
    ("lm"), ``base_model``, ``text_format``, ``training`` (epochs, learning rate, batch
    size, max length, margin mode, correctness margin, LoRA, seed, device, bf16, steps),
    ``created``, ``versions`` and the caller's fields (data hash, split, metrics:
    :func:`train.metadata`).
    """
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    with _no_hf_bars():
        result.ranker.model.save_pretrained(out_dir)
        result.ranker.tokenizer.save_pretrained(out_dir)
    doc = {
        "kind": M.CHECKPOINT_KIND,
        "schema_version": M.CHECKPOINT_SCHEMA,
        "model_kind": "lm",
        "base_model": result.base_model,
        "text_format": TEXT_FORMAT,
        "training": result.training,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": library_versions(lora=bool(result.training.get("lora"))),
        **metadata,
    }
    (out_dir / M.METADATA_FILE).write_text(json.dumps(M._clean(doc), indent=2) + "\n")
    return out_dir


def load(ckpt_dir: Path, meta: Mapping[str, Any] | None = None) -> tuple[LMRanker, dict[str, Any]]:
    """Load an LM checkpoint folder written by :func:`save` (on CUDA when available).

    Raises:
        CudaperfError: not an LM checkpoint, a missing library, or a model or tokenizer
            that cannot be loaded.
    """
    meta = dict(meta if meta is not None else M.read_metadata(ckpt_dir))
    if meta.get("model_kind") != "lm":
        raise CudaperfError(f"{ckpt_dir}: not a language-model ranker checkpoint (model_kind {meta.get('model_kind')!r})")
    max_length = (meta.get("training") or {}).get("max_length")
    if not isinstance(max_length, int) or max_length < 2:
        raise CudaperfError(f"{ckpt_dir}: metadata.json has no training.max_length")
    require_libraries(training=False)
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    try:
        with warnings.catch_warnings(), _no_hf_bars():
            warnings.simplefilter("ignore")
            tokenizer = AutoTokenizer.from_pretrained(ckpt_dir, local_files_only=True)
            model = AutoModelForSequenceClassification.from_pretrained(ckpt_dir, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        text = str(exc).strip().splitlines()
        raise CudaperfError(
            f"{ckpt_dir}: cannot load the language model ({text[0][:200] if text else type(exc).__name__})",
            hint="retrain: cudaperf train ranker --kind lm --data pairs.jsonl -o " + str(ckpt_dir),
        ) from None
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    if torch.cuda.is_available():
        model = model.to("cuda")
    model.eval()
    return LMRanker(model, tokenizer, max_length), meta


__all__ = [
    "CORRECTNESS_MARGIN",
    "MARGIN_MODES",
    "TINY",
    "TINY_CONFIG",
    "LMOptions",
    "LMRanker",
    "LMTrainResult",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "check_model_option",
    "encode",
    "load",
    "load_base",
    "pair_margin",
    "pair_texts",
    "require_libraries",
    "save",
    "side_text",
    "train",
]
