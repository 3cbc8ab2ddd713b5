"""The built-in, model-free policy (see ``docs/builtin-policy.md``).

Modules, in pipeline order:

* :mod:`.ir` -- loop-nest IR of the C function, from tree-sitter-c;
* :mod:`.dependence` -- conservative parallelism, reduction and interchange tests;
* :mod:`.analysis` -- what runs on the host, in parallel kernels, in one-thread kernels;
* :mod:`.mapping` -- :class:`Mapping` / :class:`NestMapping` (loop -> grid choices);
* :mod:`.codegen` -- the ``.cu`` source for one mapping;
* :mod:`.policy` -- :class:`BuiltinPolicy` (``plan`` / ``propose``).
"""

from cudaperf_cli.policies.builtin.mapping import Mapping, NestMapping
from cudaperf_cli.policies.builtin.policy import BuiltinPolicy

__all__ = ["BuiltinPolicy", "Mapping", "NestMapping"]
