"""What a problem generator hands to the dataset builder (``cudaperf data generate``).

A generator (``c_gen.generate_c``, ``torch_gen.generate_torch``) draws one problem from
its grammar with a ``random.Random`` and returns a :class:`GeneratedProblem`: the file's
text, its family and knobs (the grammar's choices), its input configurations and a
normalised structure key for deduplication. It writes nothing and runs nothing; the
dataset builder (``dataset.py``) deduplicates, writes and checks (``check.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Configuration names, in the order they are listed; ``main`` is the one written in the
#: file (C: the sizes ``main()`` passes; PyTorch: the module constants).
CONFIG_NAMES = ("small_odd", "main", "large")


@dataclass(frozen=True)
class GeneratedProblem:
    """One generated problem, not yet written.

    Attributes:
        kind: ``"c"`` or ``"torch"``.
        family: the grammar production it came from (``"stencil2d"``, ``"gemm_tail"``):
            the split key (no family in both train and test).
        knobs: the grammar's other choices (dtype, radius, loop order, operator chain...),
            JSON values only; sizes are not knobs.
        source: the file's text (C: a function, an init function and ``main``; PyTorch:
            KernelBench format).
        configs: input configurations, ``{"name": ..., "sizes": {NAME: int}}``: C size
            parameters of the ported function, or PyTorch module constants. One is named
            ``main`` and equals what the file itself uses. Names from ``CONFIG_NAMES``.
        structure_key: the normalised structure (family, knobs and the statement shapes,
            no sizes, no names that the draw numbered): two problems with one key are
            duplicates.
        function: the C function to port (``None`` for PyTorch).
    """

    kind: str
    family: str
    knobs: dict[str, Any]
    source: str
    configs: list[dict[str, Any]]
    structure_key: str
    function: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def suffix(self) -> str:
        """``.c`` or ``.py``."""
        return ".c" if self.kind == "c" else ".py"

    def config(self, name: str) -> dict[str, int]:
        """The sizes of configuration ``name``. Raises KeyError if there is none."""
        for c in self.configs:
            if c["name"] == name:
                return dict(c["sizes"])
        raise KeyError(name)
