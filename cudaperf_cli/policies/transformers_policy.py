"""A local Hugging Face causal LM run in this process with ``transformers`` (``--policy transformers``).

For a checkpoint folder (``save_pretrained``: ``config.json``, the weights and the
tokenizer files; or a PEFT adapter folder whose base model is a local folder too) where
vLLM is not installed.  Nothing is downloaded: only local folders are loaded
(``local_files_only=True``).  ``transformers`` and ``torch`` are imported on the first
:meth:`TransformersChatModel.complete` (or an explicit :meth:`TransformersChatModel.load`),
never when this module is imported.  A model is loaded once per process: every
:class:`TransformersChatModel` of the same folder, device and dtype shares it.

The prompt is the tokenizer's chat template (``add_generation_prompt=True``) when it has
one; otherwise the messages are joined as plain text, one ``"<role>: <content>"`` block
each, separated by a blank line, ending with ``"assistant:"`` (see :func:`plain_prompt`).
Either text is tokenized as is (no BOS added), as the policy trainer does.

Sampling (``model.generate``, under ``torch.inference_mode``): ``temperature > 0`` samples,
``temperature == 0`` is greedy, unset follows the model's ``generation_config.json`` (and
transformers' own defaults, e.g. top-k 50, for what it does not set).  The ``n`` replies of a
request are decoded together (``num_return_sequences=n``).  ``seed``: every request is
seeded with it (the global torch RNG is forked, so the process' own state is untouched):
the same conversation and seed give the same replies on the same machine and versions.

Device: ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``; weights in bfloat16 on a
GPU, float32 on the CPU (``dtype`` overrides).  The model then shares the GPU with the
candidates being timed, as with ``--policy vllm``.

Install: ``pip install 'cudaperf[train]'`` (transformers, and torch through it).  For big
models, or to share one loaded model between runs, prefer ``--policy vllm`` or a server with
``--policy openai``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from cudaperf_cli.core import install_hint
from cudaperf_cli.policies.base import Reply
from cudaperf_cli.policies.openai_policy import ModelServerError

INSTALL_HINT = (
    f"{install_hint('train')} (or pip install transformers torch), or serve the model with "
    "`vllm serve PATH` and use --policy openai --base-url ..."
)
#: Most new tokens of a reply when ``max_tokens`` is not set (also bounded by the context).
DEFAULT_MAX_NEW_TOKENS = 8192
#: Context length assumed when the model's config names none.
DEFAULT_CONTEXT = 32768

_DTYPES = ("auto", "bfloat16", "float16", "float32")
_CACHE: dict[tuple[str, str, str], tuple[Any, Any]] = {}  # (folder, device, dtype) -> (tokenizer, model)
_CACHE_LOCK = threading.Lock()


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of ``str(exc)``, or the exception's type name."""
    for line in str(exc).splitlines():
        if line.strip():
            return " ".join(line.split())
    return type(exc).__name__


def plain_prompt(messages: list[dict[str, str]]) -> str:
    """The prompt of a tokenizer without a chat template: ``"system: ...\\n\\nuser: ...\\n\\n
    assistant:"`` (each message as ``"<role>: <content>"``, blank-line separated)."""
    blocks = [f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages]
    return "\n\n".join([*blocks, "assistant:"])


def check_model_folder(model_path: str | Path) -> Path:
    """``model_path`` as a folder holding a model saved with ``save_pretrained``
    (``config.json``) or a PEFT adapter (``adapter_config.json``).  Cheap: nothing is imported.

    Raises:
        ModelServerError: no such folder, or no model in it (exit code 3).
    """
    path = Path(model_path).expanduser()
    where = str(model_path)
    if not path.exists():
        raise ModelServerError(
            f"cannot load {where} with transformers: no such folder",
            hint="--policy transformers loads local folders only (saved with save_pretrained); "
            "for a Hugging Face name use --policy vllm, or a server with --policy openai",
        )
    if not path.is_dir():
        raise ModelServerError(f"cannot load {where} with transformers: not a folder",
                               hint="give the checkpoint folder (with config.json), not a file in it")
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise ModelServerError(
            f"cannot load {where} with transformers: no config.json in it (not a model saved "
            "with save_pretrained)",
        )
    other = non_causal_architecture(path)
    if other is not None:
        raise ModelServerError(
            f"cannot load {where} with transformers: it holds a {other}, not a causal language "
            "model (its head would be random)",
            hint="give a model saved from an *ForCausalLM class (e.g. a cudaperf train policy checkpoint)",
        )
    return path


#: Class-name endings of the causal (text-generating) heads of transformers.
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def non_causal_architecture(path: Path) -> str | None:
    """The architecture named by ``path/config.json`` when it is not a causal LM head (e.g.
    ``LlamaForSequenceClassification``: a ranker checkpoint), else None (also when the file
    names none or cannot be read: loading decides then)."""
    try:
        archs = json.loads((Path(path) / "config.json").read_text()).get("architectures") or []
    except Exception:  # noqa: BLE001 - no verdict: the loader reports a damaged file
        return None
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        return None
    return None if any(a.endswith(CAUSAL_SUFFIXES) for a in archs) else archs[0]


def check_installed() -> None:
    """Raise unless ``transformers`` and ``torch`` can be found (cheap: nothing is imported).

    Raises:
        ModelServerError: either is not installed (exit code 3).
    """
    import importlib.util

    for name in ("transformers", "torch"):
        if importlib.util.find_spec(name) is None:
            raise ModelServerError(
                f"the transformers policy needs the {name} package, which is not installed",
                hint=INSTALL_HINT,
            )


class TransformersChatModel:
    """A :class:`~cudaperf_cli.policies.base.ChatModel` on a local Hugging Face causal LM.

    Args:
        model_path: a local checkpoint folder (``save_pretrained``), e.g. a trained policy.
        n: replies per request when :meth:`complete` is not given ``n``.
        temperature: sampling temperature; ``0``: greedy; ``None``: the model's
            generation config (greedy if it does not ask for sampling).
        top_p: nucleus-sampling probability mass in (0, 1]; ``None``: the model's default.
            Ignored when greedy.
        max_tokens: most new tokens per reply; ``None``: the checkpoint's
            ``generation_config.max_new_tokens`` when it sets one, else
            :data:`DEFAULT_MAX_NEW_TOKENS`.
            Either way at most the model's context minus the prompt.
        seed: seed of every request's sampling; ``None``: unseeded.
        device: ``"cuda"``, ``"cuda:1"``, ``"cpu"``...; ``None``: ``cuda`` if available.
        dtype: ``"bfloat16"``, ``"float16"``, ``"float32"`` or ``"auto"`` (the checkpoint's);
            ``None``: bfloat16 on a GPU, float32 on the CPU.

    Greedy decoding with ``n > 1`` (``temperature=0``, or unset and a model that does not
    sample): the ``n`` replies would all be the same, so one reply is decoded and returned
    ``n`` times (transformers refuses ``num_return_sequences > 1`` without sampling).

    Nothing is loaded or imported until the first :meth:`complete` or :meth:`load`.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        n: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        device: str | None = None,
        dtype: str | None = None,
    ):
        if dtype is not None and dtype not in _DTYPES:
            raise ModelServerError(f"unknown dtype {dtype!r} for --policy transformers: one of {', '.join(_DTYPES)}")
        self.model_path = str(model_path)
        self.n = n
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.seed = seed
        self.device = device
        self.dtype = dtype
        self._torch: Any = None
        self._tokenizer: Any = None
        self._model: Any = None
        self.load_s: float = 0.0  #: seconds the model took to load (0 until loaded, or if cached)

    def __repr__(self) -> str:
        return f"TransformersChatModel(model_path={self.model_path!r}, device={self.device!r})"

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded."""
        return self._model is not None

    # ------------------------------------------------------------------ loading

    def _import(self) -> tuple[Any, Any]:
        try:
            import torch
            import transformers
        except ModuleNotFoundError as exc:
            if exc.name in ("transformers", "torch"):
                raise ModelServerError(
                    f"the transformers policy needs the {exc.name} package, which is not installed",
                    hint=INSTALL_HINT,
                ) from None
            raise ModelServerError(
                f"transformers is installed but cannot be imported: {_first_line(exc)}", hint=INSTALL_HINT
            ) from None
        except Exception as exc:  # noqa: BLE001 - a broken install (torch/CUDA mismatch...)
            raise ModelServerError(
                f"transformers is installed but cannot be imported: {_first_line(exc)}", hint=INSTALL_HINT
            ) from None
        return torch, transformers

    def load(self) -> None:
        """Import transformers and torch and load the tokenizer and the model (once per
        process and folder/device/dtype); does nothing once loaded.

        Raises:
            ModelServerError: transformers or torch is missing or broken, the folder is
                missing or holds no causal LM, or loading fails (out of memory...); exit code 3.
        """
        if self._model is not None:
            return
        path = check_model_folder(self.model_path)
        torch, transformers = self._import()
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype_name = self.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
        key = (str(path.resolve()), device, dtype_name)
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
            if cached is None:
                t0 = time.perf_counter()
                with _quiet_progress(transformers):
                    cached = self._load_from(path, torch, transformers, device, dtype_name)
                self.load_s = time.perf_counter() - t0
                _CACHE[key] = cached
        self.device = device
        self._torch = torch
        self._tokenizer, self._model = cached

    def _load_from(self, path: Path, torch: Any, transformers: Any, device: str, dtype_name: str) -> tuple[Any, Any]:
        where = self.model_path
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - OSError, ValueError...: one line
            tokenizer = self._adapter_base_tokenizer(path, transformers)
            if tokenizer is None:
                raise ModelServerError(
                    f"cannot load the tokenizer of {where} with transformers: {_first_line(exc)}"
                ) from None
        dtype = "auto" if dtype_name == "auto" else getattr(torch, dtype_name)
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(path), dtype=dtype, local_files_only=True
            )
        except ValueError as exc:
            message = _first_line(exc)
            if "Unrecognized configuration class" in message:
                model_type = _model_type(path)
                message = f"not a causal language model (model_type {model_type!r})" if model_type else message
            raise ModelServerError(f"cannot load {where} with transformers: {message}") from None
        except Exception as exc:  # noqa: BLE001 - OSError, missing weights, OOM...: one line
            raise ModelServerError(f"cannot load {where} with transformers: {_first_line(exc)}") from None
        try:
            model.to(device)
        except Exception as exc:  # noqa: BLE001 - out of memory, bad device name
            raise ModelServerError(f"cannot move {where} to {device}: {_first_line(exc)}") from None
        model.eval()
        return tokenizer, model

    @staticmethod
    def _adapter_base_tokenizer(path: Path, transformers: Any) -> Any:
        """The tokenizer of a PEFT adapter's base model (an adapter folder saved without
        one), or ``None``."""
        try:
            base = json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
            return transformers.AutoTokenizer.from_pretrained(base, local_files_only=True)
        except Exception:  # noqa: BLE001 - not an adapter, or its base has no tokenizer either
            return None

    # ------------------------------------------------------------------ generation

    def prompt_text(self, messages: list[dict[str, str]]) -> str:
        """The prompt for ``messages``: the tokenizer's chat template with the generation
        prompt, else :func:`plain_prompt`.  A template that refuses the system role (some
        do) gets the system message prepended to the first user message instead."""
        self.load()
        tok = self._tokenizer
        if not getattr(tok, "chat_template", None):
            return plain_prompt(messages)
        try:
            return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - jinja errors raised by the template itself
            if len(messages) > 1 and messages[0].get("role") == "system" and messages[1].get("role") == "user":
                merged = [{"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]},
                          *messages[2:]]
                try:
                    return tok.apply_chat_template(merged, tokenize=False, add_generation_prompt=True)
                except Exception:  # noqa: BLE001 - report the first error
                    pass
            raise ModelServerError(f"the chat template of {self.model_path} failed: {_first_line(exc)}") from None

    def _context(self) -> int:
        config = self._model.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            value = getattr(text, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return DEFAULT_CONTEXT

    def generate_kwargs(self, n: int, prompt_len: int) -> dict[str, Any]:
        """The sampling keyword arguments given to ``model.generate`` for ``n`` replies to a
        prompt of ``prompt_len`` tokens (``num_return_sequences`` is 1 when greedy)."""
        max_new = self.max_tokens
        if max_new is None:  # the checkpoint's own limit (cudaperf train policy writes one)
            saved = getattr(self._model.generation_config, "max_new_tokens", None)
            max_new = saved if isinstance(saved, int) and saved > 0 else DEFAULT_MAX_NEW_TOKENS
        max_new = max(1, min(max_new, self._context() - prompt_len))
        kwargs: dict[str, Any] = {"max_new_tokens": max_new}
        if self.temperature is None:
            sample = bool(getattr(self._model.generation_config, "do_sample", False))
        elif self.temperature > 0:
            sample = True
            kwargs["do_sample"] = True
            kwargs["temperature"] = float(self.temperature)
        else:
            sample = False
            kwargs["do_sample"] = False
        if sample and self.top_p is not None:
            kwargs["top_p"] = float(self.top_p)
        kwargs["num_return_sequences"] = n if sample else 1
        gen = self._model.generation_config
        pad = self._tokenizer.pad_token_id
        if pad is None:
            pad = gen.pad_token_id if gen.pad_token_id is not None else _first_id(self._eos_ids())
        if pad is not None:
            kwargs["pad_token_id"] = pad
        return kwargs

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self._model.generation_config.eos_token_id, self._tokenizer.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(int(i) for i in source)
        return ids

    def _seeded(self) -> Any:
        """A context: the torch RNG forked and seeded with ``seed`` (nothing if unset)."""
        if self.seed is None:
            return contextlib.nullcontext()
        torch = self._torch
        devices: list[int] = []
        if str(self.device).startswith("cuda"):
            index = torch.device(self.device).index
            devices = [torch.cuda.current_device() if index is None else index]

        @contextlib.contextmanager
        def seeded():
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(self.seed)
                yield

        return seeded()

    def complete(self, messages: list[dict[str, str]], n: int | None = None) -> list[Reply]:
        """``n`` replies (default: the constructor's ``n``) to the conversation ``messages``.

        Loads the model on the first call.  Each :class:`Reply` has the reply text (the new
        tokens only, up to the first end-of-sequence token, special tokens skipped),
        ``prompt_tokens`` (the templated prompt), ``completion_tokens`` (that reply's new
        tokens, at most ``max_tokens``; an end-of-sequence token counts) and ``latency_s``:
        wall-clock seconds of the whole request (shared by its ``n`` replies; the first
        call's load time is not included, see :attr:`load_s`).

        Raises:
            ModelServerError: transformers is missing, the model cannot be loaded, the prompt
                does not fit the model's context, or generation fails (out of memory...);
                exit code 3.
        """
        self.load()
        n = n or self.n
        torch = self._torch
        text = self.prompt_text(messages)
        # as is: a chat template writes its own special tokens (BOS...); a plain prompt gets
        # none, as in training (TRL's GRPO and cudaperf_cli.rl.rollout.encode_prompt)
        enc = self._tokenizer(text, return_tensors="pt", add_special_tokens=False)
        input_ids = enc["input_ids"]
        prompt_len = int(input_ids.shape[-1])
        context = self._context()
        if prompt_len >= context:
            raise ModelServerError(
                f"the prompt ({prompt_len} tokens) is longer than the context of {self.model_path} "
                f"({context} tokens)", hint="lower --context-tokens so older turns are summarised",
            )
        kwargs = self.generate_kwargs(n, prompt_len)
        attention = enc.get("attention_mask")
        if attention is None:
            attention = torch.ones_like(input_ids)
        t0 = time.perf_counter()
        try:
            with torch.inference_mode(), self._seeded():
                out = self._model.generate(
                    input_ids=input_ids.to(self._model.device),
                    attention_mask=attention.to(self._model.device), **kwargs,
                )
        except Exception as exc:  # noqa: BLE001 - OOM, bad sampling values...: end the run
            raise ModelServerError(f"transformers ({self.model_path}) failed on the request: {_first_line(exc)}") from None
        latency = time.perf_counter() - t0
        sequences = out.sequences if hasattr(out, "sequences") else out
        eos = self._eos_ids()
        pad = kwargs.get("pad_token_id")
        replies = []
        for row in sequences[:, prompt_len:].tolist():
            new = _until_eos(row, eos, pad)
            body = [t for t in new if t not in eos]
            replies.append(Reply(self._tokenizer.decode(body, skip_special_tokens=True), None,
                                 prompt_len, len(new), latency))
        if not replies:
            return [Reply("", None, prompt_len, 0, latency)]
        while len(replies) < n:  # greedy: one decode, the same reply n times
            replies.append(replies[len(replies) % max(1, len(sequences))])
        return replies[:n]


@contextlib.contextmanager
def _quiet_progress(transformers: Any) -> Any:
    """transformers' progress bars (loading weights) off for the block, as they were after."""
    logging = getattr(getattr(transformers, "utils", None), "logging", None)
    was_on = bool(logging and logging.is_progress_bar_enabled())
    if was_on:
        logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            logging.enable_progress_bar()


def _first_id(ids: set[int]) -> int | None:
    return min(ids) if ids else None


def _until_eos(row: list[int], eos: set[int], pad: int | None) -> list[int]:
    """The new tokens of one sequence up to and including its first end-of-sequence token;
    trailing padding (sequences that finished before the others) dropped."""
    for i, token in enumerate(row):
        if token in eos:
            return row[: i + 1]
    if pad is not None:
        while row and row[-1] == pad:
            row = row[:-1]
    return row


def _model_type(path: Path) -> str | None:
    try:
        return json.loads((path / "config.json").read_text()).get("model_type")
    except Exception:  # noqa: BLE001 - only for the error message
        return None


__all__ = ["DEFAULT_MAX_NEW_TOKENS", "INSTALL_HINT", "TransformersChatModel", "check_installed",
           "check_model_folder", "non_causal_architecture", "plain_prompt"]
