"""The model-free policy for PyTorch problems: trace, fuse, generate; one variant per turn.

``BuiltinTorchPolicy().propose(problem, turn)`` traces ``problem``'s ``Model`` (torch.fx,
in a child process, once per problem), plans the fused kernels
(:func:`~.fusion.plan_fusion`) and writes the fast-format candidate of the ``turn``-th
variant of :data:`~.codegen.VARIANTS`:

* turn 0 -- block 256, scalar loads, one block per row;
* turn 1 -- block 256, float4 loads/stores where the run-time sizes allow (innermost size
  divisible by 4, 16-byte aligned pointers), scalar fallback otherwise; variances (batch,
  layer, group, instance norm, ``var``/``std``) in one pass over the row;
* turn 2 -- block 512, float4 loads, rows of at most 1024 elements get one warp each
  (16 rows per block); a 1-D or 2-D pool read from a shared-memory tile of its input.

See ``docs/builtin-torch-policy.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cudaperf_cli.policies.base import PolicyRefusal, Proposal
from cudaperf_cli.policies.builtin_torch.codegen import VARIANTS, Variant, generate, tiles_pooling, unrolls_pooling
from cudaperf_cli.policies.builtin_torch.fusion import FusionPlan, plan_fusion
from cudaperf_cli.policies.builtin_torch.trace import Graph, TraceChild, trace_problem

if TYPE_CHECKING:  # pragma: no cover
    from cudaperf_cli.problems.pytorch import TorchProblem

__all__ = ["BuiltinTorchPolicy", "nothing_to_fuse_message"]


def nothing_to_fuse_message(plan: FusionPlan) -> str:
    """The refusal for a plan without kernels: ``"nothing to fuse: conv2d is left to cuDNN"``."""
    if plan.left:
        parts = [f"{l.op} is left to {l.library}" for l in plan.left]
        return "nothing to fuse: " + ", ".join(parts)
    return "nothing to fuse: forward only moves or reshapes its inputs"


class BuiltinTorchPolicy:
    """Model-free policy for PyTorch problems: fused CUDA for elementwise chains and row
    reductions, matmul/conv left to cuBLAS/cuDNN through PyTorch.

    Args:
        trace_timeout_s: time limit of the trace child (seconds, after torch is imported).
        variants: the code-generation variants, one per turn (default :data:`VARIANTS`).
    """

    name = "builtin"

    def __init__(self, trace_timeout_s: float = 120.0, variants: tuple[Variant, ...] = VARIANTS) -> None:
        self.trace_timeout_s = float(trace_timeout_s)
        self.variants = tuple(variants)
        self._plans: dict[Any, tuple[Graph, FusionPlan]] = {}
        self._one_pass: dict[Any, FusionPlan] = {}
        self._warm: TraceChild | None = None

    def warm_up(self) -> None:
        """Start the trace child now, so that it imports torch and TorchDynamo while the
        problem loads (``cudaperf optimize`` calls this before loading); the first trace
        uses it.  :meth:`close` (also at exit) ends it when no trace came."""
        if self._warm is None:
            import atexit

            self._warm = TraceChild()
            atexit.register(self.close)

    def close(self) -> None:
        """End a trace child started by :meth:`warm_up` and not used (idempotent)."""
        warm, self._warm = self._warm, None
        if warm is not None:
            warm.close()

    def _key(self, problem: TorchProblem) -> Any:
        return (str(problem.path), problem.source, tuple(sorted(problem.constants.items())))

    def graph(self, problem: TorchProblem) -> Graph:
        """The traced graph of ``problem`` (traced once per problem and policy).

        Raises:
            PolicyRefusal: the model cannot be traced or an operation is not supported
                (see :meth:`plan`).
            ToolchainError: the trace child cannot import torch.
        """
        key = self._key(problem)
        if key not in self._plans:
            child, self._warm = self._warm, None
            graph = trace_problem(problem, timeout_s=self.trace_timeout_s, child=child)
            self._plans[key] = (graph, plan_fusion(graph))
        return self._plans[key][0]

    def plan(self, problem: TorchProblem) -> FusionPlan:
        """The fusion plan of ``problem`` (traced once per problem and policy).

        Raises:
            PolicyRefusal: the model cannot be traced (one line, e.g. data-dependent
                control flow), an operation is not supported (the message names it), or
                nothing can be fused (``"nothing to fuse: conv2d is left to cuDNN"``).
            ToolchainError: the trace child cannot import torch.
        """
        return self.variant_plan(problem, one_pass=False)

    def variant_plan(self, problem: TorchProblem, one_pass: bool) -> FusionPlan:
        """:meth:`plan`, or with ``one_pass`` the plan whose variances take one pass over
        the row (:func:`~.fusion.plan_fusion`'s ``one_pass``; the same plan where there is no
        variance; the two-pass plan where planning in one pass is refused)."""
        self.graph(problem)
        key = self._key(problem)
        graph, plan = self._plans[key]
        if one_pass:
            if key not in self._one_pass:
                try:
                    self._one_pass[key] = plan_fusion(graph, one_pass=True)
                except PolicyRefusal:
                    self._one_pass[key] = plan
            plan = self._one_pass[key]
        if not plan.kernels:
            raise PolicyRefusal(nothing_to_fuse_message(plan))
        return plan

    def files(self, problem: TorchProblem, variant: Variant) -> dict[str, str]:
        """``{"model.py", "kernel.cu"}`` of ``problem`` under ``variant``."""
        return generate(self.variant_plan(problem, variant.one_pass), problem.source, variant,
                        problem_name=problem.path.name)

    def propose(self, problem: TorchProblem, turn: int, history: Any = None) -> Proposal:
        """The candidate of the ``turn``-th variant (turn 0 = block 256, scalar loads).

        ``history`` (earlier turns' records) is accepted and ignored: the variants are fixed.

        Returns:
            A :class:`~cudaperf_cli.policies.base.Proposal` with ``files = {"model.py",
            "kernel.cu"}``, ``source`` = model.py's text, ``description`` = the plan's one
            line plus the variant, ``mapping = {"fused": [...], "left_to_pytorch": [...],
            "variant": {...}, "kernels": [...], "views": [...]}``.

        Raises:
            PolicyRefusal: ``"no more variants to try"`` once ``turn`` passes the variants;
                the reasons of :meth:`plan`.
        """
        self.plan(problem)
        if turn < 0 or turn >= len(self.variants):
            raise PolicyRefusal("no more variants to try")
        variant = self.variants[turn]
        plan = self.variant_plan(problem, variant.one_pass)
        files = generate(plan, problem.source, variant, problem_name=problem.path.name)
        pooling, tiling = unrolls_pooling(plan), tiles_pooling(plan, variant.block)
        return Proposal(
            source=files["model.py"],
            description=f"{plan.describe()} [{variant.describe(pooling, tiling)}]",
            mapping={
                "fused": plan.fused_ops(),
                "left_to_pytorch": plan.left_ops(),
                "variant": variant.to_json(pooling, tiling),
                "kernels": [k.to_json() for k in plan.kernels],
                "views": list(plan.views),
            },
            policy=self.name,
            files=files,
        )
