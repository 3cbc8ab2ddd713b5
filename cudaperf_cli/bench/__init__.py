"""``cudaperf bench``: run a suite of problems through ``optimize`` and report on it.

Built on the optimize command, never inside it: every problem runs as its own
``python -m cudaperf_cli optimize --json`` child process (docs/bench.md).

Modules::

    suite.py     suites: folders, manifests (bench.toml), per-problem settings
    runner.py    the child processes: -j at once, time limits, results per problem, resume
    metrics.py   pure functions: per-problem and suite metrics, fast_p, per-turn curves
    env.py       the machine: GPU, driver, CUDA, nvcc, clocks, CPU, timing method
    report.py    report.json / report.md / report.png / candidates.jsonl; compare
    command.py   the two commands end to end (bench SUITE, bench compare A B)
"""

from cudaperf_cli.bench.metrics import (
    fast_p,
    geomean,
    problem_summary,
    suite_curves,
    suite_metrics,
)
from cudaperf_cli.bench.suite import BenchProblem, Suite, load_suite

__all__ = [
    "BenchProblem",
    "Suite",
    "fast_p",
    "geomean",
    "load_suite",
    "problem_summary",
    "suite_curves",
    "suite_metrics",
]
