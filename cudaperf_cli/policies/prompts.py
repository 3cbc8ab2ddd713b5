"""Render the model policies' prompt templates (``cudaperf_cli/prompts/*.j2``, Jinja2).

Jinja2 is imported only when a template is rendered (the ``llm`` extra).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from cudaperf_cli.core import ArrayParam, CProblem, MissingPackageError, install_hint


@lru_cache(maxsize=None)
def _environment() -> Any:
    try:
        import jinja2
    except ImportError:  # pragma: no cover - depends on the install
        raise MissingPackageError(
            "the model policies need the jinja2 package, which is not installed",
            hint=install_hint("llm"),
        ) from None
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True, autoescape=False,
    )


def _load(name: str) -> str:
    return (resources.files("cudaperf_cli") / "prompts" / name).read_text(encoding="utf-8")


def render(name: str, **context: Any) -> str:
    """Render template ``name`` (e.g. ``"system.j2"``) with ``context``."""
    return _environment().get_template(name).render(**context).strip() + "\n"


def cuda_signature(problem: CProblem) -> str:
    """The entry point's parameter list: arrays as device pointers, scalars by value."""
    parts = []
    for p in problem.params:
        if isinstance(p, ArrayParam):
            parts.append(f"{'const ' if p.const else ''}{p.ctype} *{p.name}")
        else:
            parts.append(f"{p.ctype} {p.name}")
    return ", ".join(parts)


def param_lines(problem: CProblem) -> list[dict[str, str]]:
    """One ``{"name", "text"}`` per parameter: its role, type and extents."""
    out = []
    for p in problem.params:
        if isinstance(p, ArrayParam):
            shape = "][".join(p.extents)
            use = "read-only input" if p.const else "output (may also be read)"
            text = f"array of {p.ctype}[{shape}], row-major, {use}; a device pointer on the GPU"
        elif p.kind.value == "size":
            text = f"{p.ctype} size (value {problem.sizes.get(p.name, '?')} in the timed run)"
        else:
            text = f"{p.ctype} coefficient, passed by value"
        out.append({"name": p.name, "text": text})
    return out


def system_prompt(arch: str = "sm_90") -> str:
    return render("system.j2", arch=arch)


def c_to_cuda_prompt(problem: CProblem) -> str:
    """The first user message: the C source, the entry point, parameters and sizes."""
    from cudaperf_cli.problems.c import small_sizes

    def fmt(sizes: dict[str, int]) -> str:
        return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "none"

    return render(
        "c_to_cuda.j2",
        fn=problem.function,
        source=problem.function_source.strip(),
        signature=cuda_signature(problem),
        params=param_lines(problem),
        sizes=fmt(problem.sizes),
        small_sizes=fmt(small_sizes(problem)),
    )


def torch_to_cuda_prompt(problem: Any, arch: str = "sm_90") -> str:
    """The first user message for a PyTorch problem (``prompts/torch_to_cuda.j2``): the
    Model source, the forward inputs (shapes, dtypes), the two candidate formats and rules.

    ``problem`` is a :class:`~cudaperf_cli.problems.pytorch.TorchProblem`.
    """
    inputs = []
    for spec in problem.inputs:
        if spec.kind == "tensor":
            inputs.append({"shape": list(spec.shape), "dtype": spec.dtype})
        else:
            inputs.append({"value": repr(spec.value)})
    return render(
        "torch_to_cuda.j2", source=problem.source.strip(), inputs=inputs,
        init_inputs=[repr(v) for v in problem.init_inputs], arch=arch,
    )


def is_torch_problem(problem: Any) -> bool:
    """True for a :class:`~cudaperf_cli.problems.pytorch.TorchProblem` (C problems have a
    ``function``)."""
    return not hasattr(problem, "function")


def task_prompt(problem: Any, arch: str = "sm_90") -> str:
    """The first user message for a C or a PyTorch problem."""
    return torch_to_cuda_prompt(problem, arch) if is_torch_problem(problem) else c_to_cuda_prompt(problem)


def system_prompt_for(problem: Any, arch: str = "sm_90") -> str:
    """The system message for a C or a PyTorch problem."""
    return render("torch_system.j2", arch=arch) if is_torch_problem(problem) else system_prompt(arch)


def feedback_prompt(feedback: str, status: str, fn: str, hint: str | None = None, *, torch: bool = False) -> str:
    """A later user message: the previous turn's feedback and what to do next.  ``fn``: the
    C function (C problems); ``torch``: a PyTorch problem (the format reminder differs)."""
    return render("feedback.j2", feedback=feedback.strip(), status=status, fn=fn, hint=hint,
                  torch=torch)


__all__ = [
    "c_to_cuda_prompt", "cuda_signature", "feedback_prompt", "is_torch_problem", "render",
    "system_prompt", "system_prompt_for", "task_prompt", "torch_to_cuda_prompt",
]
