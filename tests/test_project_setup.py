"""The README's two commands and .ci/run agree, and the test command stays small on a
machine without a GPU (issue 18, item 1)."""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the project depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


def _fenced_commands(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```\n(.*?)```", text, flags=re.S)]


def test_the_test_extra_pulls_in_no_torch():
    """trl, peft and accelerate require torch, and pip's default torch for Linux x86-64 is
    the CUDA build (about 20 nvidia-* wheels): they belong to the train extra, so the
    README's test command downloads no CUDA build on a machine without a GPU."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in extras["test"]}
    assert not names & {"torch", "trl", "peft", "accelerate", "vllm"}, names
    assert {"pytest", "pytest-xdist"} <= names
    train = {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in extras["train"]}
    assert {"trl", "peft", "accelerate"} <= train


def test_ci_runs_the_readme_test_command_after_a_cpu_torch():
    """.ci/run installs the CPU build of torch and the train extra, then runs the README's
    test command (the second fenced command of the Quick start)."""
    readme = (ROOT / "README.md").read_text()
    commands = _fenced_commands(readme)
    install, tests = commands[0], commands[1]
    assert install.startswith("python3 -m venv .venv") and "cudaperf optimize examples/" in install
    assert tests == "pip install -e '.[test]' && python -m pytest -n auto"
    ci = (ROOT / ".ci" / "run").read_text()
    torch_at = ci.index("torch==2.13.0+cpu")
    train_at = ci.index("-e '.[train]'")
    run_at = ci.index("python -m pip install -q -e '.[test]' && python -m pytest -n auto")
    assert torch_at < train_at < run_at
    assert "torch.version.cuda is None" in ci  # a CUDA build getting in stops the run


def test_install_hints_name_the_checkout_cudaperf_runs_from():
    """cudaperf is not on an index: a hint 'pip install cudaperf[train]' names nothing pip
    can find; from a checkout it is 'pip install -e <checkout>[train]'.  Torch's hint names
    the CPU build for a machine without a GPU."""
    from cudaperf_cli.core import TORCH_INSTALL_HINT, install_hint, source_checkout

    assert source_checkout() == str(ROOT)
    assert install_hint("train") == f"pip install -e '{ROOT}[train]'"
    assert "download.pytorch.org/whl/cpu" in TORCH_INSTALL_HINT
