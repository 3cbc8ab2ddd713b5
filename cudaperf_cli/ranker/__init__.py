"""Offline pairwise ranker (issue 7): which of two CUDA candidates of one problem is better.

- :mod:`.pairs`: training pairs from measured candidates (``candidates.jsonl`` of
  ``cudaperf bench``, ``turns.jsonl`` of ``cudaperf optimize`` run folders), their JSONL
  schema, and the split by problem.
- :mod:`.features`: a fixed, named feature vector of a candidate's CUDA source (structural
  metrics, ptxas resources when recorded, launch shape, static counts).
- :mod:`.model`: a pairwise logistic regression on feature differences, its checkpoint
  folder, and the evaluation against two baselines.

Built on the structure stage and on evaluation records; nothing in the optimize loop imports
it.  See docs/ranker.md.
"""
