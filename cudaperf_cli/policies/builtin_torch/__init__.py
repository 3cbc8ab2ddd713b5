"""The built-in, model-free policy for PyTorch problems (see ``docs/builtin-torch-policy.md``).

Modules, in pipeline order:

* :mod:`.trace` -- ``torch.fx`` trace of ``Model`` in a child process -> :class:`Graph`;
* :mod:`.fusion` -- the plan: fused kernels (elementwise chains, row reductions) and the
  operations left to PyTorch (cuBLAS/cuDNN);
* :mod:`.codegen` -- the fast-format candidate files (``kernel.cu``, ``model.py``);
* :mod:`.policy` -- :class:`BuiltinTorchPolicy` (one variant per turn).

Importing this package never imports torch.
"""

from cudaperf_cli.policies.builtin_torch.codegen import VARIANTS, Variant, generate
from cudaperf_cli.policies.builtin_torch.fusion import (
    FusedKernel,
    FusionPlan,
    LeftOp,
    plan_fusion,
    supported_ops,
)
from cudaperf_cli.policies.builtin_torch.policy import BuiltinTorchPolicy
from cudaperf_cli.policies.builtin_torch.trace import Graph, GraphNode, trace_problem

__all__ = [
    "VARIANTS",
    "BuiltinTorchPolicy",
    "FusedKernel",
    "FusionPlan",
    "Graph",
    "GraphNode",
    "LeftOp",
    "Variant",
    "generate",
    "plan_fusion",
    "supported_ops",
    "trace_problem",
]
