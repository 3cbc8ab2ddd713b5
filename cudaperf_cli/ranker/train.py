"""Training of the feature ranker from a ``pairs.jsonl`` (``cudaperf train ranker``).

The pairs are split by problem (:func:`pairs.split_by_problem`), the model is fitted on the
training problems only and evaluated on the held-out ones against the two baselines
(:data:`model.BASELINES`); the saved checkpoint is that same model, so its recorded metrics
describe it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.ranker import model as M
from cudaperf_cli.ranker import pairs as P

#: Least data ``train ranker`` accepts.
MIN_PAIRS = 10
MIN_PROBLEMS = 2


@dataclass
class TrainResult:
    """A fitted ranker, its held-out metrics and the split."""

    ranker: M.PairwiseRanker
    metrics: dict[str, Any]
    train_problems: list[str]
    test_problems: list[str]
    train_pairs: int


def pair_matrices(
    pairs: Sequence[Mapping[str, Any]], advance: Callable[[int], None] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(F_a, F_b, labels)`` of ``pairs``; features computed once per distinct side
    (``advance(1)`` after each pair, for a progress bar)."""
    cache: dict[str, list[float]] = {}

    def feats(side: Mapping[str, Any]) -> list[float]:
        key = f"{side.get('source_sha256')}|{side.get('registers')}|{side.get('spill_bytes')}"
        if key not in cache:
            cache[key] = M.side_features(side)
        return cache[key]

    fa, fb, y = [], [], []
    for p in pairs:
        fa.append(feats(p["a"]))
        fb.append(feats(p["b"]))
        y.append(int(p["label"]))
        if advance is not None:
            advance(1)
    n = len(M.F.FEATURE_NAMES)
    return (np.asarray(fa, float).reshape(-1, n), np.asarray(fb, float).reshape(-1, n), np.asarray(y, int))


def check_enough(pairs: Sequence[Mapping[str, Any]]) -> None:
    """Refuse too little data.

    Raises:
        CudaperfError: fewer than :data:`MIN_PAIRS` pairs or :data:`MIN_PROBLEMS` problems.
    """
    problems = {p["problem"] for p in pairs}
    if len(pairs) < MIN_PAIRS or len(problems) < MIN_PROBLEMS:
        raise CudaperfError(
            f"too little data: {len(pairs)} pair(s) of {len(problems)} problem(s); training needs at least "
            f"{MIN_PAIRS} pairs of {MIN_PROBLEMS} problems",
            hint="measure more candidates (cudaperf bench SUITE --samples 4), then cudaperf data pairs",
        )


def train(
    pairs: Sequence[Mapping[str, Any]],
    *,
    test_fraction: float = 0.25,
    seed: int = 0,
    advance: Callable[[int], None] | None = None,
) -> TrainResult:
    """Split by problem, fit on the training problems, evaluate on the held-out ones.

    Raises:
        CudaperfError: too little data (:func:`check_enough`) or a bad ``test_fraction``.
    """
    check_enough(pairs)
    train_idx, test_idx, train_p, test_p = P.split_by_problem(pairs, test_fraction=test_fraction, seed=seed)
    fa, fb, y = pair_matrices(pairs, advance)
    ranker = M.PairwiseRanker(seed=seed).fit(fa[train_idx], fb[train_idx], y[train_idx])
    test_pairs = [pairs[i] for i in test_idx]
    metrics = M.evaluate(ranker, test_pairs, fa[test_idx], fb[test_idx])
    metrics["train_pairs"] = len(train_idx)
    metrics["train_problems"] = len(train_p)
    return TrainResult(ranker, metrics, train_p, test_p, len(train_idx))


def metadata(result: TrainResult, data: Path, *, test_fraction: float, seed: int, pairs: int) -> dict[str, Any]:
    """The data and evaluation fields of the checkpoint's ``metadata.json``."""
    return {
        "data": {"path": str(data), "sha256": P.file_sha256(data), "pairs": pairs},
        "split": {"by": "problem", "test_fraction": test_fraction, "seed": seed,
                  "train_problems": result.train_problems, "test_problems": result.test_problems},
        "metrics": result.metrics,
    }


def summary_lines(metrics: Mapping[str, Any]) -> list[str]:
    """The human summary: accuracy vs baselines on the held-out pairs, per kind, calibration."""
    def pct(x: float | None) -> str:
        return "n/a" if x is None or x != x else f"{100 * x:.1f}%"

    lines = [
        f"held-out: {metrics['pairs']} pairs of {metrics['problems']} problem(s) "
        f"(trained on {metrics['train_pairs']} pairs of {metrics['train_problems']})",
        f"pairwise accuracy: ranker {pct(metrics['accuracy'])}"
        + "".join(f", {name.replace('_', ' ')} {pct(b['accuracy'])} (decides {pct(b['decided'])})"
                  for name, b in metrics["baselines"].items())
        + "  (ties and unknowns count 0.5)",
    ]
    for kind, row in metrics["by_kind"].items():
        lines.append(
            f"  {kind}: {row['pairs']} pairs, ranker {pct(row['accuracy'])}, "
            + ", ".join(f"{name.replace('_', ' ')} {pct(row[name])}" for name in metrics["baselines"])
        )
    cal = metrics["calibration"]
    bins = " | ".join(f"[{b['lo']:.1f},{b['hi']:.1f}) pred {b['mean_predicted']:.2f} obs {b['observed']:.2f} n={b['n']}"
                      for b in cal["bins"])
    lines.append(f"calibration: Brier {cal['brier']:.3f} (0.25 = always 0.5); {bins}")
    return lines
