"""Online RL of the policy: ``cudaperf train policy`` (multi-turn GRPO on the unified reward,
with TRL).  See ``docs/rl.md``.

Built on the agent loop's stages, never inside them (docs/architecture.md):

==================  ====================================================================
module              what it does
==================  ====================================================================
``config.py``       :class:`PolicyTrainConfig` (TRL config style) and the TOML loader
``problems.py``     a folder of ``*.c`` / ``*.py`` problems -> :class:`ProblemSpec` (the
                    loaded problem, its first prompt, its sha256)
``evaluate.py``     the evaluation of one candidate (build, verify, time) for C and
                    PyTorch problems, on a chosen GPU, run by a thread pool
``rollout.py``      the ``rollout_func``: K trajectories of T turns per problem, the
                    feedback of turn t in the prompt of turn t+1, one GRPO completion per
                    turn with its discounted return
``metrics.py``      per-step metrics: ``metrics.jsonl``, one Rich line, TensorBoard
``tiny.py``         a tiny randomly initialised model + tokenizer for tests and smoke runs
``trainer.py``      GRPOConfig + GRPOTrainer, LoRA, the checkpoint and its metadata
==================  ====================================================================

Nothing heavy (torch, transformers, trl) is imported by this package's ``__init__``.
"""
