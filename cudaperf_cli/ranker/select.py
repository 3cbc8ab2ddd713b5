"""Pre-ranking the samples of one turn with a trained ranker (``cudaperf optimize --ranker``).

A turn of ``--samples K`` gives K candidates written from one conversation.  Before any of
them is built or run, a pairwise ranker (docs/ranker.md) scores each one by its mean win
probability against the others (a Borda-style count over the K-1 comparisons, in [0, 1]):

    score(i) = mean over j != i of p(i better than j)

The loop evaluates them in decreasing score (ties keep the policy's order) and, with
``--ranker-top M``, only the M best-ranked; the others are written to the run folder's
``ranked-out.jsonl`` (nothing the policy wrote is lost).  Features come from the sources
alone (no compile), as in ``cudaperf rank``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaperf_cli.core import CudaperfError


@dataclass
class SampleRanker:
    """A loaded ranker checkpoint that scores the candidates of one problem.

    Attributes:
        path: the checkpoint folder.
        kind: ``metadata.json``'s ``model_kind`` (``features`` or ``lm``).
        model: the loaded model (``ranker.model.PairwiseRanker`` or the LM ranker).
    """

    path: Path
    kind: str
    model: Any

    def p_matrix(self, sources: Sequence[str], problem_id: str = "") -> list[list[float]]:
        """``P[i][j]`` = probability that ``sources[i]`` is better than ``sources[j]`` (``problem_id``:
        the id line the LM ranker reads, ``<file name>:<function>`` or a PyTorch file name)
        (``P[i][i]`` = 0.5; ``P[i][j] + P[j][i] = 1`` for both model kinds)."""
        n = len(sources)
        out = [[0.5] * n for _ in range(n)]
        if n < 2:
            return out
        if self.kind == "lm":
            import math

            from cudaperf_cli.ranker.lm import side_text

            r = self.model.rewards([side_text(problem_id, s) for s in sources])
            for i in range(n):
                for j in range(n):
                    if i != j:
                        out[i][j] = 1.0 / (1.0 + math.exp(-(float(r[i]) - float(r[j]))))
            return out
        import numpy as np

        from cudaperf_cli.ranker import features as F

        vecs = [F.vector(F.source_features(s)) for s in sources]
        ia, ib = zip(*[(i, j) for i in range(n) for j in range(n) if i != j])
        p = self.model.predict_proba(np.array([vecs[i] for i in ia], dtype=float),
                                     np.array([vecs[j] for j in ib], dtype=float))
        for i, j, v in zip(ia, ib, p):
            out[i][j] = float(v)
        return out

    def scores(self, sources: Sequence[str], problem_id: str = "") -> list[float]:
        """Each source's mean win probability against the others, in [0, 1] (0.5 alone)."""
        n = len(sources)
        if n < 2:
            return [0.5] * n
        m = self.p_matrix(sources, problem_id)
        return [sum(m[i][j] for j in range(n) if j != i) / (n - 1) for i in range(n)]


def load_sample_ranker(path: Path) -> SampleRanker:
    """Load the ranker checkpoint in folder ``path`` (either kind, by ``metadata.json``).

    Raises:
        CudaperfError: no such folder, no ``metadata.json``, an unknown kind, or a
            checkpoint the installed libraries cannot load (one line, exit 2).
    """
    path = Path(path)
    if not path.is_dir():
        raise CudaperfError(f"--ranker {path}: no such folder", hint="a folder written by cudaperf train ranker")
    from cudaperf_cli.ranker import model as M

    if not (path / M.METADATA_FILE).is_file():
        raise CudaperfError(f"--ranker {path}: no {M.METADATA_FILE} (not a ranker checkpoint)")
    model, meta = M.load(path)
    kind = str(meta.get("model_kind") or "features")
    return SampleRanker(path, kind, model)


def order(scores: Sequence[float]) -> list[int]:
    """Indices of ``scores`` best first; equal scores keep their original order."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


__all__ = ["SampleRanker", "load_sample_ranker", "order"]
