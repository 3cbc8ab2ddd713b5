"""Policies and their proposals for the optimize driver: which policy, is it ready, the
``n`` proposals of a turn, the ranker's order among them.

The policy's kind-specific part (the built-in policy of a C file or of a PyTorch file) comes
from the problem kind (agent/kinds/); everything else is the same for both kinds.
"""

from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path
from typing import Any

from cudaperf_cli.agent.feedback import feedback_for
from cudaperf_cli.agent.kinds.pytorch import cuda_source_of
from cudaperf_cli.agent.loop import TurnRecord
from cudaperf_cli.agent.options import POLICIES, OptimizeOptions
from cudaperf_cli.agent.store import RunStore
from cudaperf_cli.core import CudaperfError


def make_policy(name: str, opts: OptimizeOptions | None = None) -> Any:
    """The policy named ``name`` (``builtin``, ``openai``, ``vllm``, ``transformers`` or
    ``replay``), configured by ``opts``; ``builtin`` is the built-in policy of the kind of
    ``opts.file`` (C without ``opts``).

    Raises:
        CudaperfError: an unknown policy, or a model policy missing its ``--model`` /
            ``--replay`` (exit code 2); vllm/transformers not installed, or (transformers) a
            ``--model`` that is not a local model folder (``ModelServerError``, exit code 3).
    """
    if name == "builtin":
        from cudaperf_cli.agent.kinds import kind_for, kind_named

        return (kind_named("c") if opts is None else kind_for(opts.file)).builtin_policy()
    if name not in POLICIES:
        raise CudaperfError(f"unknown policy '{name}': available policies: {', '.join(POLICIES)}")
    from cudaperf_cli.policies.model_policy import ModelPolicy

    opts = opts or OptimizeOptions(file=Path("."))
    chat: Any
    if name == "openai":
        if not opts.model:
            raise CudaperfError("--policy openai needs --model NAME (the served model's name)")
        if opts.base_url is not None and not opts.base_url.startswith(("http://", "https://")):
            raise CudaperfError(f"--base-url {opts.base_url!r} is not an http:// or https:// URL",
                                hint="e.g. --base-url http://127.0.0.1:8000/v1")
        from cudaperf_cli.policies.openai_policy import OpenAIChatModel

        chat = OpenAIChatModel(
            opts.model, opts.base_url, api_key_env=opts.api_key_env,
            temperature=opts.temperature, top_p=opts.top_p, max_tokens=opts.max_tokens,
            seed=opts.sampling_seed, timeout=opts.request_timeout_s, max_retries=opts.max_retries,
        )
        chat.client()  # a missing package or API key fails now, before any work
    elif name == "vllm":
        if not opts.model:
            raise CudaperfError("--policy vllm needs --model NAME_OR_PATH (Hugging Face name or local weights)")
        import importlib.util

        from cudaperf_cli.policies.vllm_policy import INSTALL_HINT, VLLMChatModel

        if importlib.util.find_spec("vllm") is None:  # before any work; the model loads later
            from cudaperf_cli.policies.openai_policy import ModelServerError

            raise ModelServerError("the vllm policy needs the vllm package, which is not installed",
                                   hint=INSTALL_HINT)

        chat = VLLMChatModel(
            opts.model, temperature=opts.temperature, top_p=opts.top_p,
            max_tokens=opts.max_tokens, seed=opts.sampling_seed,
        )
    elif name == "transformers":
        if not opts.model:
            raise CudaperfError("--policy transformers needs --model PATH (a local model folder saved "
                                "with save_pretrained)")
        from cudaperf_cli.policies.transformers_policy import (
            TransformersChatModel, check_installed, check_model_folder,
        )

        check_installed()  # before any work; the model loads on the first turn
        check_model_folder(opts.model)
        chat = TransformersChatModel(
            opts.model, temperature=opts.temperature, top_p=opts.top_p,
            max_tokens=opts.max_tokens, seed=opts.sampling_seed,
        )
    else:
        if opts.replay is None:
            raise CudaperfError("--policy replay needs --replay FILE (a JSONL file of replies)")
        from cudaperf_cli.policies.replay import ReplayChatModel

        chat = ReplayChatModel(opts.replay)
    return ModelPolicy(chat, name, context_tokens=opts.context_tokens)


#: Seconds to wait for the model server's TCP connection in :func:`check_policy_ready`.
CONNECT_TIMEOUT_S = 10.0


def check_policy_ready(policy: Any, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Before any work (the baseline, the turns): a policy that talks to an
    OpenAI-compatible server must reach it.  Opens (and closes) one TCP connection to the
    server's host and port; no request is sent, so no reply of a replay server is used and
    no tokens are spent.  Other policies: nothing to check here (their packages and model
    folders were checked when they were made).

    A model policy's packages are checked here too (jinja2 for its prompts; openai and
    the API key for a server), so that a missing one is the first line, not the line after
    the baseline.

    Raises:
        ModelServerError: the server cannot be reached (exit code 3), e.g. connection
            refused, unknown host, no answer within ``timeout_s`` seconds.
        MissingPackageError: jinja2 or openai is not installed (exit code 3).
        CudaperfError: no API key where one is needed.
    """
    from cudaperf_cli.policies.model_policy import ModelPolicy
    from cudaperf_cli.policies.openai_policy import ModelServerError, OpenAIChatModel

    if isinstance(policy, ModelPolicy):  # its prompts need jinja2: say so now, not after the baseline
        from cudaperf_cli.policies.prompts import _environment

        _environment()
    chat = getattr(policy, "chat_model", None)
    if not isinstance(chat, OpenAIChatModel):
        return
    chat.client()  # the openai package and the API key, before any work
    import socket
    from urllib.parse import urlsplit

    where = chat.where()
    parts = urlsplit(where)
    host = parts.hostname
    if not host:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=min(timeout_s, chat.timeout)):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise ModelServerError(f"cannot reach the model server at {where}: {why}",
                               hint="start the server (or check --base-url), then run again") from None


def make_ranker(opts: OptimizeOptions) -> Any:
    """The ``--ranker`` checkpoint, loaded (None without one).

    Raises:
        CudaperfError: ``--ranker-top`` without ``--ranker``, or a checkpoint that cannot be
            loaded (exit 2, before any work).
    """
    if opts.ranker is None:
        if opts.ranker_top is not None:
            raise CudaperfError("--ranker-top needs --ranker CHECKPOINT_DIR")
        return None
    from cudaperf_cli.ranker.select import load_sample_ranker

    return load_sample_ranker(opts.ranker)


def propose_samples(policy: Any, problem: Any, turn: int, history: list[TurnRecord], n: int) -> list[Any]:
    """Turn ``turn``'s ``n`` proposals.  A model policy answers ``n`` replies to one request;
    the built-in policy's plan is walked in order (turn ``t`` takes mappings ``t*n .. t*n+n-1``).

    Raises:
        PolicyRefusal: no candidate at all for this turn.
    """
    if hasattr(policy, "propose_samples"):
        return list(policy.propose_samples(problem, turn, history, n))
    from cudaperf_cli.policies.base import PolicyRefusal

    out = []
    for k in range(turn * n, turn * n + n):
        try:
            out.append(policy.propose(problem, k, history=history))
        except PolicyRefusal:
            if not out:
                raise
            break
    return out


def has_candidate(policy: Any, problem: Any) -> bool:
    """Whether the policy has a first candidate (the loop's turn 0 then records a refusal).

    A model policy is not probed (that would spend a request): it is assumed to have one.
    """
    if getattr(policy, "asks_a_model", False):
        return True
    try:
        policy.propose(problem, 0)
    except Exception:  # noqa: BLE001 - a refusal, or a policy bug: turn 0 records either
        return False
    return True


def propose_or_refuse(
    policy: Any, problem: Any, turn: int, history: list[TurnRecord], opts: OptimizeOptions,
    store: RunStore, ranker: Any = None,
) -> tuple[list[Any], TurnRecord | None]:
    """Turn ``turn``'s proposals, or the ``refused`` record that ends the turn: the policy's
    refusal, an empty answer, or a policy bug (its traceback goes to
    ``policy-error-turn<N>.txt`` in the run folder; the run goes on).

    With a ``ranker`` (:class:`~cudaperf_cli.ranker.select.SampleRanker`, ``--ranker``) and
    several proposals, they come back best-ranked first (:func:`rank_proposals`).

    Raises:
        CudaperfError: a run-ending error, e.g. the model server cannot be reached.
    """
    from cudaperf_cli.policies.base import PolicyRefusal

    def refused(why: str) -> tuple[list[Any], TurnRecord]:
        record = TurnRecord(turn, opts.policy, "no candidate", "refused", message=why,
                            samples=opts.samples)
        record.feedback = feedback_for(record)
        return [], record

    try:
        proposals = propose_samples(policy, problem, turn, list(history), opts.samples)
    except PolicyRefusal as refusal:
        return refused(str(refusal))
    except CudaperfError:
        raise
    except Exception as exc:  # noqa: BLE001 - a policy bug ends its turns, not the run
        log = store.path / f"policy-error-turn{turn + 1}.txt"
        log.write_text("".join(traceback.format_exception(exc)))
        return refused(f"the {opts.policy} policy failed: {type(exc).__name__}: {exc} (see {log.name})")
    if not proposals:
        return refused("the policy returned no candidate")
    if ranker is not None and len(proposals) > 1:
        proposals = rank_proposals(ranker, proposals, problem, turn, opts.ranker_top, store)
    return proposals, None


def _ranked_text(proposal: Any) -> str:
    """The CUDA a ranker reads: a PyTorch candidate's ``.cu`` file, else its source."""
    cu = cuda_source_of(getattr(proposal, "files", {}) or {})
    return cu if cu is not None else proposal.source


def problem_id(problem: Any) -> str:
    """The problem as the LM ranker's id line reads it (as ``cudaperf data pairs`` names
    an optimize run's problem): ``<file name>:<function>`` for C, the file name for PyTorch."""
    path = getattr(problem, "path", None)
    name = Path(path).name if path is not None else ""
    function = getattr(problem, "function", None)
    return f"{name}:{function}" if function else name


def rank_proposals(
    ranker: Any, proposals: list[Any], problem: Any, turn: int, top: int | None, store: RunStore,
) -> list[Any]:
    """``proposals`` ordered by the ranker's score (mean win probability against the
    others; docs/ranker.md), best first, cut to the ``top`` best when given.  Each kept
    proposal's ``mapping["ranker"]`` records ``score``, ``rank`` (1 = best) and ``of``;
    the ones cut are appended to ``ranked-out.jsonl`` in the run folder (turn, 0-based as
    in ``turns.jsonl``; rank, score, description, source, files), so nothing the policy
    wrote is lost.  With the built-in policy, the mappings cut are not tried in later turns.

    A proposal without code (a model's reply with no usable code) scores 0 and ranks last.
    """
    from cudaperf_cli.ranker.select import order

    texts = [_ranked_text(p) for p in proposals]
    have = [i for i, t in enumerate(texts) if t.strip()]
    scored = ranker.scores([texts[i] for i in have], problem_id(problem)) if len(have) > 1 else [0.5] * len(have)
    scores = [0.0] * len(proposals)
    for i, s in zip(have, scored):
        scores[i] = float(s)
    ranked = order(scores)
    keep = ranked if top is None else ranked[:top]
    out = []
    for rank, i in enumerate(ranked, start=1):
        info = {"score": round(scores[i], 4), "rank": rank, "of": len(proposals),
                "checkpoint": str(ranker.path)}
        p = proposals[i]
        if i in keep:
            out.append(dataclasses.replace(p, mapping={**dict(p.mapping), "ranker": info}))
        else:
            row = {"turn": turn, **info, "description": p.description, "policy": p.policy,
                   "source": p.source, "files": dict(getattr(p, "files", {}) or {})}
            store.append_jsonl("ranked-out.jsonl", row)
    return out


__all__ = ["check_policy_ready", "has_candidate", "make_policy", "make_ranker", "problem_id",
           "propose_or_refuse", "propose_samples", "rank_proposals"]
