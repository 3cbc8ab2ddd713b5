"""Ranker commands (issue 7; docs/ranker.md):

    cudaperf data pairs RUNS_OR_FILES... -o pairs.jsonl [--min-margin 0.05]
    cudaperf train ranker --data pairs.jsonl [--kind features|lm] [--model PATH|tiny] -o checkpoints/NAME
    cudaperf rank A.cu B.cu [--checkpoint DIR] [--problem FILE] [--json]

Registered by ``cudaperf_cli/cli/main.py``: ``data_app`` as ``data``, ``train_app`` as
``train``, :func:`rank` as ``rank``.  scikit-learn, and torch/transformers/trl for the LM
ranker, are imported only inside the commands.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from cudaperf_cli.cli.common import fail
from cudaperf_cli.core import CudaperfError, check_checkpoint_folder

data_app = typer.Typer(
    name="data", help="Training data: generate and check a dataset of problems, measure it, build the ranker's pairs (cudaperf data generate|check|measure|pairs).",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
train_app = typer.Typer(
    name="train", help="Train models: the pairwise ranker on measured pairs (cudaperf train ranker), "
    "the policy with GRPO (cudaperf train policy).",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)

#: Environment variable naming the default checkpoint of ``cudaperf rank``.
RANKER_ENV = "CUDAPERF_RANKER"


def default_checkpoint() -> Path:
    """``$CUDAPERF_RANKER``, else the checkpoint bundled with the package
    (``cudaperf_cli/checkpoints/ranker``, package data: a ``pip install .`` has it too;
    docs/ranker.md says what it was trained on)."""
    env = os.environ.get(RANKER_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "checkpoints" / "ranker"


@data_app.command("pairs")
def pairs_cmd(
    inputs: List[Path] = typer.Argument(
        ..., metavar="RUNS_OR_FILES...", help="candidates.jsonl files, bench output folders, optimize "
        "run folders, or folders holding them."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Pairs file to write (JSONL, docs/ranker.md)."),
    min_margin: float = typer.Option(
        0.05, "--min-margin", min=0.0, help="Least relative gap of a speed pair: slow/fast must exceed 1 + this "
        "(besides the IQR rule)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output file."),
    json_out: bool = typer.Option(False, "--json", help="Print the counts as one JSON document."),
) -> None:
    """Pairs of candidates of one problem: speed pairs (both correct, times apart by more than
    their IQRs) and correctness pairs (correct vs failed)."""
    from cudaperf_cli.ranker import pairs as P

    try:
        if output.is_dir():
            raise CudaperfError(f"-o {output} is a folder; the pairs go to a file (e.g. -o pairs.jsonl)")
        if any(output.resolve() == Path(i).resolve() for i in inputs):
            raise CudaperfError(f"-o {output} is also an input: writing it would replace the candidates")
        if output.exists() and not force:
            raise CudaperfError(f"{output} exists", hint="choose another -o, or --force to overwrite")
        cands, n_inputs = P.read_inputs(inputs)
        pairs, stats = P.build_pairs(cands, min_margin=min_margin)
        stats.inputs = n_inputs
        if not pairs:
            raise CudaperfError(
                f"no pairs from {stats.candidates} candidate(s) ({stats.correct} correct) of {n_inputs} input(s)",
                hint="pairs need two correct timed candidates of one problem, or a correct and a failed one",
            )
        P.write_pairs(pairs, output)
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    doc = {
        "output": str(output), "inputs": stats.inputs, "candidates": stats.candidates, "correct": stats.correct,
        "duplicates": stats.duplicates, "problems": len(stats.problems),
        "problems_with_pairs": len({p["problem"] for p in pairs}), "speed_pairs": stats.speed_pairs,
        "correctness_pairs": stats.correctness_pairs, "within_noise": stats.within_noise,
        "untimed_correct": stats.untimed, "min_margin": min_margin,
    }
    if json_out:
        print(json.dumps(doc))
    else:
        print(
            f"{output}: {stats.speed_pairs} speed + {stats.correctness_pairs} correctness pairs of "
            f"{doc['problems_with_pairs']} problem(s) ({len(stats.problems)} seen) from {stats.candidates} "
            f"candidates in {n_inputs} input(s) "
            f"({stats.within_noise} correct pairs within noise, {stats.duplicates} duplicate sources, "
            f"{stats.untimed} verified (correct or slow) without a time and IQR left out)"
        )


@train_app.command("ranker")
def train_ranker(
    data: Path = typer.Option(..., "--data", help="pairs.jsonl (or .jsonl.gz) from cudaperf data pairs or data measure."),
    output: Path = typer.Option(..., "--output", "-o", help="Checkpoint folder to write (features: model.joblib; "
                                "lm: the saved model and tokenizer; both: metadata.json)."),
    kind: str = typer.Option("features", "--kind", help="features (logistic regression on feature differences, "
                             "CPU) or lm (Bradley-Terry reward model over (problem, kernel) text, TRL's "
                             "RewardTrainer; needs the train extra)."),
    test_fraction: float = typer.Option(0.25, "--test-fraction", help="Fraction of the problems held out (split by problem)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the problem split and the solver (lm: and of the training)."),
    model: Optional[str] = typer.Option(
        None, "--model", metavar="PATH|tiny", help="lm only: a local model folder (save_pretrained; loaded as a "
        "sequence classifier with one output, never downloaded), or tiny (default): a randomly initialised "
        "2-layer model and a tokenizer trained on the pairs."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="lm only: passes over the training pairs (default 3)."),
    learning_rate: Optional[float] = typer.Option(
        None, "--learning-rate", help="lm only: AdamW learning rate (default 1e-3 for tiny, 1e-5 for --model PATH)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="lm only: pairs per step (default 8)."),
    max_length: Optional[int] = typer.Option(
        None, "--max-length", help="lm only: tokens per text, the rest of a longer source is cut (default 512)."),
    margin: Optional[str] = typer.Option(
        None, "--margin", help="lm only: speedup (default: a speed pair's ln(slow/fast), a correctness pair's "
        "--correctness-margin) or none."),
    correctness_margin: Optional[float] = typer.Option(
        None, "--correctness-margin", help="lm only: margin of a correctness pair with --margin speedup (default 1.0)."),
    lora: bool = typer.Option(False, "--lora", help="lm only: train a LoRA adapter (peft) and merge it into the saved "
                              "model, for a large --model."),
    cv: Optional[int] = typer.Option(
        None, "--cv", min=2, help="Also cross-validate by problem with this many folds: every pair predicted "
        "once by a ranker trained without its problem (K more trainings; the checkpoint is still the --seed "
        "split's model)."),
    split_by: str = typer.Option(
        "problem", "--split-by", help="What the held-out split and the --cv folds keep apart: problem, or family "
        "(pairs of cudaperf data measure: no problem family on both sides)."),
    eval_on: List[Path] = typer.Option(
        [], "--eval-on", metavar="PAIRS", help="features only: also report the trained ranker's accuracy on "
        "these pairs files (a held-out set it never saw, e.g. an older measurement); repeatable."),
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty checkpoint folder."),
    json_out: bool = typer.Option(False, "--json", help="Print the held-out metrics as one JSON document (no bar)."),
) -> None:
    """Train the pairwise ranker, report held-out accuracy (split by problem) against two
    baselines and the calibration, and write a checkpoint folder."""
    lm_flags = {"--model": model, "--epochs": epochs, "--learning-rate": learning_rate, "--batch-size": batch_size,
                "--max-length": max_length, "--margin": margin, "--correctness-margin": correctness_margin,
                "--lora": lora or None}
    try:
        if kind not in ("features", "lm"):
            raise CudaperfError(f"unknown --kind '{kind}'", hint="--kind features or --kind lm")
        if eval_on and kind != "features":
            raise CudaperfError("--eval-on: only for --kind features")
        if split_by not in ("problem", "family"):
            raise CudaperfError(f"--split-by must be problem or family, not '{split_by}'")
        if kind == "features":
            given = [flag for flag, value in lm_flags.items() if value is not None]
            if given:
                raise CudaperfError(f"{', '.join(given)}: only for --kind lm", hint="add --kind lm, or leave them out")
        check_checkpoint_folder(output, force)
        from cudaperf_cli.ranker import model as M
        from cudaperf_cli.ranker import pairs as P
        from cudaperf_cli.ranker import train as T

        if kind == "lm":
            result, meta = _train_lm(data, output, test_fraction=test_fraction, seed=seed, json_out=json_out, cv=cv, split_by=split_by, model=model,
                                     epochs=epochs, learning_rate=learning_rate, batch_size=batch_size,
                                     max_length=max_length, margin=margin, correctness_margin=correctness_margin,
                                     lora=lora)
        else:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            pairs = P.read_pairs(data)
            T.check_enough(pairs)
            console = Console(stderr=True)
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          console=console, transient=True, disable=json_out) as progress:
                task = progress.add_task("features", total=len(pairs))
                result = T.train(pairs, test_fraction=test_fraction, seed=seed, split_by=split_by,
                                 advance=lambda n: progress.advance(task, n))
            if cv is not None:
                result.metrics["cv"] = T.cross_validate(
                    pairs, cv, seed, lambda fold: T.train(pairs, seed=seed, test_problems=fold, split_by=split_by),
                    split_by=split_by)
            for path in eval_on:
                result.metrics.setdefault("eval_on", {})[str(path)] = T.evaluate_on(result.ranker, P.read_pairs(path))
            meta = T.metadata(result, data, test_fraction=test_fraction, seed=seed, pairs=len(pairs),
                              split_by=split_by)
            M.save(result.ranker, output, meta)
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    except KeyboardInterrupt:  # metadata.json is written last: without it, no checkpoint
        print(f"interrupted: no checkpoint written ({output} has no new metadata.json)", file=sys.stderr)
        raise typer.Exit(130)
    if json_out:
        print(json.dumps(M._clean({"checkpoint": str(output), "model_kind": kind, **meta["metrics"]})))
    else:
        if kind == "lm":
            print(_lm_model_line(result))
        for line in T.summary_lines(result.metrics):
            print(line)
        print(f"checkpoint: {output}")


def _train_lm(data: Path, output: Path, *, test_fraction: float, seed: int, json_out: bool, cv: int | None,
              split_by: str = "problem", **flags):  # noqa: ANN003
    """``train ranker --kind lm``: read and check the pairs, train (:func:`lm.train`), save.
    Returns ``(result, metadata)``."""
    from cudaperf_cli.ranker import lm
    from cudaperf_cli.ranker import pairs as P
    from cudaperf_cli.ranker import train as T

    options = lm.LMOptions(**{k: v for k, v in flags.items() if v is not None}, quiet=json_out)
    options.check()
    pairs = P.read_pairs(data)
    T.check_enough(pairs)
    if cv is not None:
        P.problem_folds(pairs, cv, seed, by=split_by)  # a bad --cv fails before any training
    result = lm.train(pairs, options, test_fraction=test_fraction, seed=seed, split_by=split_by)
    if cv is not None:
        result.metrics["cv"] = T.cross_validate(
            pairs, cv, seed, lambda fold: lm.train(pairs, options, seed=seed, test_problems=fold, split_by=split_by),
            split_by=split_by)
    meta = T.metadata(result, data, test_fraction=test_fraction, seed=seed, pairs=len(pairs), split_by=split_by)
    lm.save(result, output, meta)
    return result, meta


def _lm_model_line(result) -> str:  # noqa: ANN001
    """One line: the base model and the training run."""
    base, tr = result.base_model, result.training
    if base.get("name") == "tiny":
        c = base["config"]
        what = (f"tiny (random init, {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, "
                f"vocab {c['vocab_size']})")
    else:
        what = f"{base.get('name')} ({base.get('architecture')}, {base.get('parameters', 0) / 1e6:.1f}M parameters)"
    return (f"lm ranker: {what}{' + LoRA (merged)' if tr.get('lora') else ''}, {tr['epochs']} epoch(s), "
            f"{tr.get('steps')} steps on {tr['device']}{' bf16' if tr.get('bf16') else ''}, "
            f"train loss {result.metrics.get('train_loss', float('nan')):.3f}, margin {tr['margin']}"
            + (f", {result.metrics['truncated_train_texts']} training texts cut at {tr['max_length']} tokens"
               if result.metrics.get("truncated_train_texts") else ""))


def read_cuda_source(path: Path) -> str:
    """The text of a CUDA candidate to rank.

    Raises:
        CudaperfError: no such file, not UTF-8 text (a binary), empty, or no ``__global__``
            kernel in it (a ranker would still answer, with a meaningless probability).
    """
    if not path.is_file():
        raise CudaperfError(f"no such file: {path}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        raise CudaperfError(f"{path}: not a text file (a CUDA source is UTF-8 text)")
    if not text.strip():
        raise CudaperfError(f"{path}: empty file")
    if "__global__" not in text:
        raise CudaperfError(f"{path}: no __global__ kernel in it: not a CUDA candidate")
    return text


def rank(
    a: Path = typer.Argument(..., metavar="A.cu", help="First CUDA candidate."),
    b: Path = typer.Argument(..., metavar="B.cu", help="Second CUDA candidate (same problem)."),
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", help=f"Ranker checkpoint folder (default: ${RANKER_ENV}, else the bundled cudaperf_cli/checkpoints/ranker)."
    ),
    problem: Optional[str] = typer.Option(
        None, "--problem", metavar="FILE|ID", help="LM checkpoints: the problem, as its file (only the name is "
        "used, the file is not read: examples/gemm.c -> gemm.c) or a pairs.jsonl id (torch/x.py, "
        "gemm.c:kernel_gemm -> the file name). Default: none. Ignored by feature checkpoints."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Which of two CUDA candidates of one problem is better, and the ranker's probability
    (feature checkpoints: features from the sources alone, no compile, registers and spills
    count as equal; LM checkpoints: the reward of each (problem, source) text)."""
    try:
        from cudaperf_cli.ranker import model as M

        texts = []
        for path in (a, b):
            texts.append(read_cuda_source(path))
        ckpt = checkpoint or default_checkpoint()
        ranker, meta = M.load(ckpt)
        p = float(ranker.compare_sources(texts[0], texts[1], problem=problem or ""))
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    better, worse, p_better = (a, b, p) if p >= 0.5 else (b, a, 1.0 - p)
    if json_out:
        print(json.dumps({"a": str(a), "b": str(b), "p_a_better": p, "better": str(better),
                          "checkpoint": str(ckpt), "model_kind": meta.get("model_kind", "features")}))
    else:
        print(f"{better} is better than {worse}: p = {p_better:.2f}" + (" (a coin flip)" if p == 0.5 else ""))
    sys.stdout.flush()
