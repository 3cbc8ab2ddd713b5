"""Pairwise feature ranker: logistic regression on feature differences (scikit-learn).

For candidates ``a`` and ``b`` of one problem with feature vectors ``f(a)``, ``f(b)``
(:mod:`.features`), the model is

    p(a better than b) = sigmoid(w . s(impute(f(a) - f(b))))

- ``impute``: a difference with a missing side (``NaN``) is 0 ("no evidence");
- ``s``: division by each difference's standard deviation over the training pairs
  (``StandardScaler(with_mean=False)``: no centring);
- no intercept; training sees every pair in both orders (``d, y`` and ``-d, 1 - y``).

Every step is odd in ``d``, so ``p(a, b) = 1 - p(b, a)`` exactly, by construction.

Checkpoint folder: ``model.joblib`` (the fitted scikit-learn pipeline, a pickle: load only
checkpoints you trust) and ``metadata.json`` (:func:`save`).
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from cudaperf_cli.core import CudaperfError
from cudaperf_cli.ranker import features as F

CHECKPOINT_KIND = "cudaperf-ranker"
CHECKPOINT_SCHEMA = 1
MODEL_FILE = "model.joblib"
METADATA_FILE = "metadata.json"
#: Calibration bins of p(a better), [lo, hi).
CALIBRATION_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0000001)


def side_features(side: Mapping[str, Any]) -> list[float]:
    """The feature vector of one side of a pair: its stored ``features`` when complete,
    else computed from its ``source`` (and its recorded ``registers``/``spill_bytes``)."""
    stored = side.get("features")
    if isinstance(stored, Mapping) and all(name in stored for name in F.FEATURE_NAMES):
        return F.vector(stored)
    source = side.get("source")
    if not isinstance(source, str):
        raise CudaperfError("a pair side has neither features nor a source")
    return F.vector(F.source_features(source, registers=side.get("registers"), spill_bytes=side.get("spill_bytes")))


def _difference(fa: Any, fb: Any) -> np.ndarray:
    """``f(a) - f(b)`` with an infinite difference (values near the float64 limit) made
    missing (NaN, imputed 0 like a missing side): no evidence rather than an overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.asarray(fa, float) - np.asarray(fb, float)
    d[np.isinf(d)] = np.nan
    return d


class PairwiseRanker:
    """The fitted model (see the module docstring).

    Attributes:
        pipeline: the scikit-learn pipeline (imputer, scaler, logistic regression).
        feature_names: the names of the input columns (:data:`features.FEATURE_NAMES`).
    """

    def __init__(self, pipeline: Any = None, feature_names: Sequence[str] = F.FEATURE_NAMES, *, c: float = 1.0, seed: int = 0):
        if pipeline is None:
            from sklearn.impute import SimpleImputer
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import Pipeline
            from sklearn.preprocessing import StandardScaler

            pipeline = Pipeline([
                ("impute", SimpleImputer(strategy="constant", fill_value=0.0, keep_empty_features=True)),
                ("scale", StandardScaler(with_mean=False)),
                ("logreg", LogisticRegression(C=c, fit_intercept=False, max_iter=2000, random_state=seed)),
            ])
        self.pipeline = pipeline
        self.feature_names = tuple(feature_names)

    def fit(self, fa: np.ndarray, fb: np.ndarray, y: np.ndarray) -> "PairwiseRanker":
        """Fit on pairs: rows of ``fa``/``fb`` are the two sides' features, ``y`` is 1 when
        ``a`` is better.  Each pair is used in both orders."""
        d = _difference(fa, fb)
        y = np.asarray(y, int)
        self.pipeline.fit(np.vstack([d, -d]), np.concatenate([y, 1 - y]))
        return self

    def predict_proba(self, fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
        """p(a better than b) for each row (1-D array); one vector each gives one value."""
        proba = self.pipeline.predict_proba(np.atleast_2d(_difference(fa, fb)))
        col = list(self.pipeline.classes_).index(1)
        return proba[:, col]

    def compare_sources(self, source_a: str, source_b: str, problem: str = "") -> float:
        """p(a better than b) of two CUDA sources, from features of the sources alone (no
        compile: registers and spills unknown).  ``problem`` is unused (the LM ranker's
        interface, :class:`cudaperf_cli.ranker.lm.LMRanker`)."""
        fa, fb = (F.vector(F.source_features(s)) for s in (source_a, source_b))
        return float(self.predict_proba(fa, fb)[0])

    def weights(self) -> dict[str, float]:
        """Coefficient of each feature on the standardised difference (larger: that feature
        larger in ``a`` makes ``a`` more likely better)."""
        coef = self.pipeline.named_steps["logreg"].coef_[0]
        return {n: float(w) for n, w in zip(self.feature_names, coef)}


# ------------------------------------------------------------------------------ evaluation


def _credit(pred: float | None, label: int) -> float:
    """1 for a right call, 0 for a wrong one, 0.5 for no call (a tie or an unknown)."""
    if pred is None:
        return 0.5
    return 1.0 if int(pred) == label else 0.0


def accuracy(calls: Sequence[int | None], labels: Sequence[int]) -> float:
    """Pairwise accuracy: the mean credit (a tie or an unknown counts as a coin flip, 0.5)."""
    if not labels:
        return math.nan
    return sum(_credit(c, y) for c, y in zip(calls, labels)) / len(labels)


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _side_value(side: Mapping[str, Any], key: str) -> float | None:
    v = _num(side.get(key))
    if v is None and isinstance(side.get("features"), Mapping):
        v = _num(side["features"].get(key))
    return v


def baseline_structure(pair: Mapping[str, Any]) -> int | None:
    """Baseline "the higher structural score wins": 1 if ``a``'s is higher, 0 if lower,
    None when equal or unknown.  The score recorded with the candidate (the pipeline's),
    else the source-only one of its features."""
    a, b = _side_value(pair["a"], "structure_score"), _side_value(pair["b"], "structure_score")
    if a is None or b is None or a == b:
        return None
    return 1 if a > b else 0


def baseline_registers(pair: Mapping[str, Any]) -> int | None:
    """Baseline "fewer registers wins": 1 if ``a`` uses fewer registers per thread, 0 if
    more, None when equal or unknown."""
    a, b = _side_value(pair["a"], "registers"), _side_value(pair["b"], "registers")
    if a is None or b is None or a == b:
        return None
    return 1 if a < b else 0


BASELINES: dict[str, Callable[[Mapping[str, Any]], int | None]] = {
    "higher_structure_score": baseline_structure,
    "fewer_registers": baseline_registers,
}


def calibration(proba: Sequence[float], labels: Sequence[int]) -> dict[str, Any]:
    """Brier score (mean of (p - label)^2; 0.25 for always 0.5) and, per bin of p in
    :data:`CALIBRATION_EDGES`, the mean predicted probability vs the observed rate."""
    p = np.asarray(proba, float)
    y = np.asarray(labels, float)
    bins = []
    for lo, hi in zip(CALIBRATION_EDGES, CALIBRATION_EDGES[1:]):
        m = (p >= lo) & (p < hi)
        if m.any():
            bins.append({"lo": lo, "hi": min(hi, 1.0), "n": int(m.sum()),
                         "mean_predicted": float(p[m].mean()), "observed": float(y[m].mean())})
    brier = float(np.mean((p - y) ** 2)) if len(p) else math.nan
    return {"brier": brier, "bins": bins}


def evaluate(ranker: PairwiseRanker, pairs: Sequence[Mapping[str, Any]], fa: np.ndarray, fb: np.ndarray) -> dict[str, Any]:
    """Held-out metrics of the feature ranker (:func:`evaluate_proba` of its predictions)."""
    return evaluate_proba(pairs, ranker.predict_proba(fa, fb) if len(pairs) else np.zeros(0))


def evaluate_proba(pairs: Sequence[Mapping[str, Any]], proba: Sequence[float]) -> dict[str, Any]:
    """Held-out metrics from any ranker's ``p(a better than b)`` of each pair (``proba``, in
    the order of ``pairs``): the model's and each baseline's pairwise accuracy (overall and
    per pair kind), how often each baseline made a call, and the calibration."""
    labels = [int(p["label"]) for p in pairs]
    proba = np.asarray(proba, float).reshape(-1)
    model_calls = [None if q == 0.5 else int(q > 0.5) for q in proba]
    out: dict[str, Any] = {
        "pairs": len(pairs),
        "problems": len({p["problem"] for p in pairs}),
        "accuracy": accuracy(model_calls, labels),
        "baselines": {},
        "by_kind": {},
        "calibration": calibration(proba, labels),
    }
    for name, fn in BASELINES.items():
        calls = [fn(p) for p in pairs]
        out["baselines"][name] = {
            "accuracy": accuracy(calls, labels),
            "decided": sum(c is not None for c in calls) / len(calls) if calls else math.nan,
        }
    for kind in sorted({str(p["kind"]) for p in pairs}):
        idx = [i for i, p in enumerate(pairs) if p["kind"] == kind]
        ys = [labels[i] for i in idx]
        row = {"pairs": len(idx), "accuracy": accuracy([model_calls[i] for i in idx], ys)}
        for name, fn in BASELINES.items():
            row[name] = accuracy([fn(pairs[i]) for i in idx], ys)
        out["by_kind"][kind] = row
    families = sorted({f"{p.get('problem_kind') or '?'}/{p['family']}" for p in pairs if p.get("family")})
    if families:  # pairs of cudaperf data measure: accuracy per problem family
        out["by_family"] = {}
        for fam in families:
            idx = [i for i, p in enumerate(pairs) if p.get("family")
                   and f"{p.get('problem_kind') or '?'}/{p['family']}" == fam]
            ys = [labels[i] for i in idx]
            row = {"pairs": len(idx), "accuracy": accuracy([model_calls[i] for i in idx], ys)}
            for name, fn in BASELINES.items():
                row[name] = accuracy([fn(pairs[i]) for i in idx], ys)
            out["by_family"][fam] = row
    return out


# ------------------------------------------------------------------------------ checkpoints


def library_versions() -> dict[str, str]:
    """Versions of the libraries a checkpoint depends on."""
    import joblib
    import sklearn

    from cudaperf_cli import __version__

    return {"cudaperf": __version__, "scikit-learn": sklearn.__version__, "numpy": np.__version__,
            "joblib": joblib.__version__, "python": platform.python_version()}


def _clean(obj: Any) -> Any:
    """JSON-ready copy: non-finite floats -> None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def save(ranker: PairwiseRanker, out_dir: Path, metadata: Mapping[str, Any]) -> Path:
    """Write ``out_dir/model.joblib`` and ``out_dir/metadata.json``.

    ``metadata.json`` holds ``kind`` ("cudaperf-ranker"), ``schema_version``, ``model_kind``
    ("features"), ``features_version``, ``feature_names``, ``weights``, ``created`` (ISO
    8601), ``versions`` (:func:`library_versions`) and the caller's fields (data hash,
    split, metrics).
    """
    import joblib

    out_dir.mkdir(parents=True, exist_ok=True)
    joblib.dump(ranker.pipeline, out_dir / MODEL_FILE)
    doc = {
        "kind": CHECKPOINT_KIND,
        "schema_version": CHECKPOINT_SCHEMA,
        "model_kind": "features",
        "features_version": F.FEATURES_VERSION,
        "feature_names": list(ranker.feature_names),
        "weights": ranker.weights(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": library_versions(),
        **metadata,
    }
    (out_dir / METADATA_FILE).write_text(json.dumps(_clean(doc), indent=2) + "\n")
    return out_dir


def read_metadata(ckpt_dir: Path) -> dict[str, Any]:
    """``metadata.json`` of a ranker checkpoint folder, checked for kind and schema.

    Raises:
        CudaperfError: no ``metadata.json``, not JSON, or another kind or schema.
    """
    meta_path = ckpt_dir / METADATA_FILE
    if not meta_path.is_file():
        raise CudaperfError(
            f"no ranker checkpoint in {ckpt_dir} (needs {METADATA_FILE} and {MODEL_FILE} or a saved language model)",
            hint="train one: cudaperf train ranker --data pairs.jsonl -o checkpoints/NAME",
        )
    try:
        meta = json.loads(meta_path.read_text())
    except ValueError:
        raise CudaperfError(f"{meta_path}: not JSON") from None
    if (not isinstance(meta, dict) or meta.get("kind") != CHECKPOINT_KIND
            or meta.get("schema_version") != CHECKPOINT_SCHEMA):
        raise CudaperfError(f"{ckpt_dir}: not a cudaperf ranker checkpoint of schema_version {CHECKPOINT_SCHEMA}")
    return meta


def load(ckpt_dir: Path) -> tuple[Any, dict[str, Any]]:
    """Load a checkpoint folder, of either kind (``metadata.json``'s ``model_kind``):
    ``"features"`` (written by :func:`save`) gives a :class:`PairwiseRanker`, ``"lm"`` a
    :class:`cudaperf_cli.ranker.lm.LMRanker` (:func:`cudaperf_cli.ranker.lm.load`).  Both
    have ``compare_sources(source_a, source_b, problem="") -> p(a better)``.

    Raises:
        CudaperfError: missing files, another kind or schema, features of another version
            (retrain with this cudaperf), or an LM checkpoint without its libraries.
    """
    meta = read_metadata(ckpt_dir)
    if meta.get("model_kind") == "lm":
        from cudaperf_cli.ranker import lm

        return lm.load(ckpt_dir, meta)
    if meta.get("model_kind", "features") != "features":
        raise CudaperfError(f"{ckpt_dir}: unknown model_kind {meta.get('model_kind')!r} (this cudaperf knows features, lm)")
    if not (ckpt_dir / MODEL_FILE).is_file():
        raise CudaperfError(
            f"no ranker checkpoint in {ckpt_dir} (needs {METADATA_FILE} and {MODEL_FILE})",
            hint="train one: cudaperf train ranker --data pairs.jsonl -o checkpoints/NAME",
        )
    if meta.get("features_version") != F.FEATURES_VERSION:
        raise CudaperfError(
            f"{ckpt_dir}: trained on features version {meta.get('features_version')}, this cudaperf computes "
            f"version {F.FEATURES_VERSION}",
            hint="retrain: cudaperf train ranker --data pairs.jsonl -o " + str(ckpt_dir),
        )
    if tuple(meta.get("feature_names") or ()) != F.FEATURE_NAMES:
        raise CudaperfError(f"{ckpt_dir}: metadata.json's feature_names differ from features version "
                            f"{F.FEATURES_VERSION}'s (a damaged or edited checkpoint)",
                            hint="retrain: cudaperf train ranker --data pairs.jsonl -o " + str(ckpt_dir))
    import joblib

    try:
        pipeline = joblib.load(ckpt_dir / MODEL_FILE)
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign pickle raises anything
        raise CudaperfError(f"{ckpt_dir / MODEL_FILE}: not a readable ranker model ({type(exc).__name__})",
                            hint="retrain: cudaperf train ranker --data pairs.jsonl -o " + str(ckpt_dir)) from None
    if not (hasattr(pipeline, "predict_proba") and hasattr(pipeline, "named_steps")
            and "logreg" in getattr(pipeline, "named_steps", {})):
        raise CudaperfError(f"{ckpt_dir / MODEL_FILE}: holds a {type(pipeline).__name__}, not the ranker's pipeline",
                            hint="retrain: cudaperf train ranker --data pairs.jsonl -o " + str(ckpt_dir))
    return PairwiseRanker(pipeline, meta["feature_names"]), meta


__all__ = [
    "BASELINES",
    "PairwiseRanker",
    "accuracy",
    "baseline_registers",
    "baseline_structure",
    "calibration",
    "evaluate",
    "evaluate_proba",
    "library_versions",
    "load",
    "read_metadata",
    "save",
    "side_features",
]
