"""Ranker commands (issue 7; docs/ranker.md):

    cudaperf data pairs RUNS_OR_FILES... -o pairs.jsonl [--min-margin 0.05]
    cudaperf train ranker --data pairs.jsonl [--kind features] -o checkpoints/NAME
    cudaperf rank A.cu B.cu [--checkpoint DIR] [--json]

Registered by ``cudaperf_cli/cli/main.py``: ``data_app`` as ``data``, ``train_app`` as
``train``, :func:`rank` as ``rank``.  scikit-learn is imported only inside the commands.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from cudaperf_cli.cli.common import fail
from cudaperf_cli.core import CudaperfError

data_app = typer.Typer(
    name="data", help="Build training data from measured candidates (cudaperf data pairs).",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
train_app = typer.Typer(
    name="train", help="Train models on measured data (cudaperf train ranker).",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)

#: Environment variable naming the default checkpoint of ``cudaperf rank``.
RANKER_ENV = "CUDAPERF_RANKER"


def default_checkpoint() -> Path:
    """``$CUDAPERF_RANKER``, else ``checkpoints/ranker`` of the repository holding this
    package (the bundled default, not trained yet: docs/ranker.md)."""
    env = os.environ.get(RANKER_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "checkpoints" / "ranker"


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
        "duplicates": stats.duplicates, "problems": len(stats.problems), "speed_pairs": stats.speed_pairs,
        "correctness_pairs": stats.correctness_pairs, "within_noise": stats.within_noise,
        "untimed_correct": stats.untimed, "min_margin": min_margin,
    }
    if json_out:
        print(json.dumps(doc))
    else:
        print(
            f"{output}: {stats.speed_pairs} speed + {stats.correctness_pairs} correctness pairs of "
            f"{len(stats.problems)} problem(s) from {stats.candidates} candidates in {n_inputs} input(s) "
            f"({stats.within_noise} correct pairs within noise, {stats.duplicates} duplicate sources, "
            f"{stats.untimed} correct without time/IQR left out)"
        )


@train_app.command("ranker")
def train_ranker(
    data: Path = typer.Option(..., "--data", help="pairs.jsonl from cudaperf data pairs."),
    output: Path = typer.Option(..., "--output", "-o", help="Checkpoint folder to write (model.joblib, metadata.json)."),
    kind: str = typer.Option("features", "--kind", help="features (logistic regression on feature differences); "
                             "lm is not available yet."),
    test_fraction: float = typer.Option(0.25, "--test-fraction", help="Fraction of the problems held out (split by problem)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the problem split and the solver."),
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty checkpoint folder."),
    json_out: bool = typer.Option(False, "--json", help="Print the held-out metrics as one JSON document."),
) -> None:
    """Train the pairwise ranker, report held-out accuracy (split by problem) against two
    baselines and the calibration, and write a checkpoint folder."""
    try:
        if kind == "lm":
            raise CudaperfError(
                "--kind lm is not available yet: the language-model (Bradley-Terry) ranker of issue 7 is not built",
                hint="use --kind features",
            )
        if kind != "features":
            raise CudaperfError(f"unknown --kind '{kind}'", hint="--kind features (lm: not available yet)")
        if output.exists() and (not output.is_dir() or any(output.iterdir())) and not force:
            raise CudaperfError(f"{output} exists and is not an empty folder", hint="choose another -o, or --force")
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        from cudaperf_cli.ranker import model as M
        from cudaperf_cli.ranker import pairs as P
        from cudaperf_cli.ranker import train as T

        pairs = P.read_pairs(data)
        T.check_enough(pairs)
        console = Console(stderr=True)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=console, transient=True, disable=json_out) as progress:
            task = progress.add_task("features", total=len(pairs))
            result = T.train(pairs, test_fraction=test_fraction, seed=seed,
                             advance=lambda n: progress.advance(task, n))
        meta = T.metadata(result, data, test_fraction=test_fraction, seed=seed, pairs=len(pairs))
        M.save(result.ranker, output, meta)
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    if json_out:
        print(json.dumps(M._clean({"checkpoint": str(output), **meta["metrics"]})))
    else:
        for line in T.summary_lines(result.metrics):
            print(line)
        print(f"checkpoint: {output}")


def rank(
    a: Path = typer.Argument(..., metavar="A.cu", help="First CUDA candidate."),
    b: Path = typer.Argument(..., metavar="B.cu", help="Second CUDA candidate (same problem)."),
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", help=f"Ranker checkpoint folder (default: ${RANKER_ENV}, else checkpoints/ranker)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Which of two CUDA candidates of one problem is better, and the ranker's probability
    (features from the sources alone, no compile: registers and spills count as equal)."""
    try:
        from cudaperf_cli.ranker import features as F
        from cudaperf_cli.ranker import model as M

        texts = []
        for path in (a, b):
            if not path.is_file():
                raise CudaperfError(f"no such file: {path}")
            texts.append(path.read_text(errors="replace"))
        ckpt = checkpoint or default_checkpoint()
        ranker, _meta = M.load(ckpt)
        fa, fb = (F.vector(F.source_features(t)) for t in texts)
        p = float(ranker.predict_proba(fa, fb)[0])
    except CudaperfError as err:
        fail(err)
    except OSError as exc:
        fail(CudaperfError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)))
    better, worse, p_better = (a, b, p) if p >= 0.5 else (b, a, 1.0 - p)
    if json_out:
        print(json.dumps({"a": str(a), "b": str(b), "p_a_better": p, "better": str(better),
                          "checkpoint": str(ckpt)}))
    else:
        print(f"{better} is better than {worse}: p = {p_better:.2f}" + (" (a coin flip)" if p == 0.5 else ""))
    sys.stdout.flush()
