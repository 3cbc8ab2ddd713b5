"""Training of the feature ranker from a ``pairs.jsonl`` (``cudaperf train ranker``).

The pairs are split by problem (:func:`pairs.split_by_problem`), the model is fitted on the
training problems only and evaluated on the held-out ones against the two baselines
(:data:`model.BASELINES`); the saved checkpoint is that same model, so its recorded metrics
describe it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    test_index: list[int] = field(default_factory=list)  #: indices of the held-out pairs
    test_proba: list[float] = field(default_factory=list)  #: p(a better) of each of them


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


def evaluate_on(ranker: M.PairwiseRanker, pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`model.evaluate_proba` of a fitted feature ranker on other pairs (a held-out
    set it never saw, e.g. an older measurement: ``train ranker --eval-on PAIRS``)."""
    fa, fb, _ = pair_matrices(pairs)
    return M.evaluate_proba(pairs, ranker.predict_proba(fa, fb) if len(pairs) else np.zeros(0))


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
    test_problems: Sequence[str] | None = None,
    split_by: str = "problem",
) -> TrainResult:
    """Split by problem (or hold out ``test_problems``), fit on the training problems,
    evaluate on the held-out ones (``test_index``/``test_proba`` of the result: the
    held-out pairs and the ranker's p(a better) of each, for :func:`cross_validate`).

    Raises:
        CudaperfError: too little data (:func:`check_enough`) or a bad ``test_fraction``.
    """
    check_enough(pairs)
    train_idx, test_idx, train_p, test_p = P.split_by_problem(
        pairs, test_fraction=test_fraction, seed=seed, test_problems=test_problems, by=split_by)
    fa, fb, y = pair_matrices(pairs, advance)
    ranker = M.PairwiseRanker(seed=seed).fit(fa[train_idx], fb[train_idx], y[train_idx])
    test_pairs = [pairs[i] for i in test_idx]
    proba = ranker.predict_proba(fa[test_idx], fb[test_idx]) if test_idx else np.zeros(0)
    metrics = M.evaluate_proba(test_pairs, proba)
    metrics["train_pairs"] = len(train_idx)
    metrics["train_problems"] = len({pairs[i]["problem"] for i in train_idx})  # train_p: families with --split-by family
    return TrainResult(ranker, metrics, train_p, test_p, len(train_idx), test_idx, [float(q) for q in proba])


def cross_validate(
    pairs: Sequence[Mapping[str, Any]], k: int, seed: int,
    fit_fold: Callable[[list[str]], Any],
    split_by: str = "problem",
) -> dict[str, Any]:
    """Cross-validation **by problem**: ``k`` folds of problems (:func:`pairs.problem_folds`);
    each fold's pairs are predicted by a ranker trained without its problems
    (``fit_fold(test_problems)``, which trains either kind).  Every pair is predicted
    exactly once, so the pooled metrics (:func:`model.evaluate_proba`: accuracy of the
    ranker and both baselines, calibration) cover all pairs and problems.

    Returns:
        the pooled metrics plus ``folds`` (k), ``fold_accuracy`` (ranker accuracy per
        fold, in fold order) and ``seed``.
    """
    folds = P.problem_folds(pairs, k, seed, by=split_by)
    order: list[int] = []
    proba: list[float] = []
    per_fold: list[float] = []
    for fold in folds:
        res = fit_fold(fold)
        order += res.test_index
        proba += res.test_proba
        per_fold.append(res.metrics["accuracy"])
    metrics = M.evaluate_proba([pairs[i] for i in order], proba)
    metrics.update({"folds": k, "fold_accuracy": per_fold, "seed": seed, "by": split_by})
    return metrics


def metadata(result: TrainResult, data: Path, *, test_fraction: float, seed: int, pairs: int,
             split_by: str = "problem") -> dict[str, Any]:
    """The data and evaluation fields of the checkpoint's ``metadata.json``."""
    return {
        "data": {"path": str(data), "sha256": P.file_sha256(data), "pairs": pairs},
        "split": {"by": split_by, "test_fraction": test_fraction, "seed": seed,
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
    cv = metrics.get("cv")
    if cv:
        lines.append(
            f"cross-validated by {cv.get('by', 'problem')} ({cv['folds']} folds, every pair predicted once by a "
            f"ranker that never saw its {cv.get('by', 'problem')}): {cv['pairs']} pairs of {cv['problems']} problem(s); ranker "
            f"{pct(cv['accuracy'])}"
            + "".join(f", {name.replace('_', ' ')} {pct(b['accuracy'])}" for name, b in cv["baselines"].items())
            + f"; per fold {' '.join(pct(a) for a in cv['fold_accuracy'])}; Brier {cv['calibration']['brier']:.3f}"
        )
    for path, ev in (metrics.get("eval_on") or {}).items():
        lines.append(f"on {path} (never trained on): {ev['pairs']} pairs of {ev['problems']} problem(s); ranker "
                     f"{pct(ev['accuracy'])}"
                     + "".join(f", {name.replace('_', ' ')} {pct(b['accuracy'])}" for name, b in ev["baselines"].items()))
    for title, rows in (("by family (held-out split)", metrics.get("by_family")),
                        ("by family (cross-validated)", (cv or {}).get("by_family"))):
        for fam, row in sorted((rows or {}).items()):
            lines.append(f"  {title}: {fam}: {row['pairs']} pairs, ranker {pct(row['accuracy'])}, "
                         + ", ".join(f"{name.replace('_', ' ')} {pct(row[name])}" for name in metrics["baselines"]))
    return lines
