"""What every policy returns (:class:`Proposal`) and how it declines (:class:`PolicyRefusal`).

A policy turns a :class:`~cudaperf_cli.core.CProblem` into candidate CUDA sources, one per
turn.  The rest of the pipeline only relies on the fields of :class:`Proposal`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudaperf_cli.core import ProblemError


@dataclass(frozen=True)
class Proposal:
    """One candidate written by a policy.

    Attributes:
        source: the complete ``.cu`` text; defines ``extern "C" int <fn>_cuda(...)``.
        description: one human-readable line, e.g. ``"grid2d i->y j->x block 32x8; k
            sequential"``.
        mapping: JSON-serialisable details of how loops were mapped (policy specific).
        policy: the name of the policy that wrote it (``"builtin"``...).
    """

    source: str
    description: str
    mapping: dict[str, Any] = field(default_factory=dict)
    policy: str = ""


class PolicyRefusal(ProblemError):
    """The policy cannot (or can no longer) propose a candidate for this problem.

    ``str(err)`` says why, e.g. the reasons each loop could not be parallelised, or
    ``"no more mappings to try"`` once every mapping has been proposed.
    """


__all__ = ["PolicyRefusal", "Proposal"]
