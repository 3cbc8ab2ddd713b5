"""Benchmark reports: ``report.json`` (machines), ``report.md`` (people), ``report.png``
(matplotlib, Agg), ``candidates.jsonl`` (every candidate), the Rich summary table, and
``bench compare`` of two ``report.json`` files.  Schemas: docs/bench.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from cudaperf_cli.bench import metrics as M
from cudaperf_cli.bench.runner import READABLE_SCHEMAS, SCHEMA_VERSION
from cudaperf_cli.core import CudaperfError

REPORT_KIND = "cudaperf-bench-report"
#: Speedups above this are flagged "(!)": they are against one CPU thread (README).
FLAG_SPEEDUP = 10.0
#: Bytes per GB in the reports (decimal: 1e9, as nvidia-smi's and the issue's figures).
GB = 1e9
#: Longest reason shown in a table cell (the full line is in report.json).
REASON_CHARS = 160


def build_report(
    *,
    suite: Any,
    settings: dict[str, Any],
    env: dict[str, Any],
    results: Sequence[dict[str, Any]],
    interrupted: bool,
    created: str,
    wall_s: float,
    primary: str = "kernel",
    executor: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``report.json`` document.

    Args:
        suite: the :class:`~cudaperf_cli.bench.suite.Suite`.
        settings: :func:`~cudaperf_cli.bench.runner.settings_doc`.
        env: :func:`~cudaperf_cli.bench.env.collect_env`.
        results: the finished problem results, any order (sorted here in suite order).
        interrupted: Ctrl-C stopped the run; metrics then cover the finished problems.
        created: when the run started (ISO 8601).
        wall_s: the run's wall time, seconds.
        primary: the headline speedup key.
        executor: where this session's problems ran
            (:meth:`~cudaperf_cli.bench.executor.Executor.describe`; each problem's own
            ``placement`` says where it ran).
    """
    order = {p.id: i for i, p in enumerate(suite.problems)}
    done = sorted(results, key=lambda r: order.get(r["id"], len(order)))
    finished = {r["id"] for r in done}
    not_run = [p.id for p in suite.problems if p.id not in finished]
    records = [[c for c in r.get("candidates", [])] for r in done]
    turns = settings.get("turns")
    curves = M.suite_curves(records, primary, turns if isinstance(turns, int) else None)
    problems = []
    for r, recs in zip(done, records):
        row = {k: v for k, v in r.items() if k != "candidates"}
        row["curve"] = M.best_so_far(recs, primary, len(curves["turn"]))
        problems.append(row)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": REPORT_KIND,
        "suite": {
            "name": suite.name,
            "source": str(suite.source),
            "root": str(suite.root),
            "problems": len(suite.problems),
            "finished": len(done),
            "not_run": not_run,
            "skipped": suite.skipped,
        },
        "created": created,
        "complete": not interrupted and not not_run,
        "interrupted": interrupted,
        "wall_s": wall_s,
        "settings": settings,
        "env": env,
        "executor": executor or {"executor": "local"},
        "metrics": M.suite_metrics(done, primary),
        "curves": curves,
        "problems": problems,
        "files": {"candidates": "candidates.jsonl", "markdown": "report.md", "plot": "report.png"},
    }


def write_candidates(path: Path, results: Sequence[dict[str, Any]]) -> int:
    """Write every candidate of ``results`` (suite order) to ``path``; returns the count."""
    n = 0
    with path.open("w") as fh:
        for r in results:
            for c in r.get("candidates", []):
                fh.write(json.dumps(c, default=str) + "\n")
                n += 1
    return n


def fmt_x(v: Any, flag: bool = True) -> str:
    """A speedup: ``0.512x``, ``12.3x``, ``1450x`` (three significant digits, whole numbers
    from 100x, never an exponent there); below 0.001x ``1.2e-04x``; ``(!)`` above
    :data:`FLAG_SPEEDUP` (README: every speedup above 10x is flagged); ``-`` for none."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-"
    if v >= 100:
        text = f"{v:.0f}x"
    elif v >= 1e-3 or v == 0:
        text = f"{v:.3g}x"
    else:
        text = f"{v:.1e}x"
    return text + (" (!)" if flag and v > FLAG_SPEEDUP else "")


def fmt_gb(v: Any) -> str:
    """Bytes as GB (1e9 bytes), 3 significant digits; ``-`` for none."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-"
    return f"{v / GB:.3g}"


def fmt_s(v: Any) -> str:
    """Seconds, 3 significant digits; ``-`` for none."""
    return fmt_num(v, 3)


def _cell(text: str) -> str:
    """Text safe in a markdown table cell (no pipes, no newlines)."""
    return " ".join(str(text).split()).replace("|", "/")


def _short(text: str, n: int = REASON_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def status_cell(pr: dict[str, Any]) -> str:
    """A problem's status for tables: its status name, with its reason for the statuses of
    ``metrics.WITH_REASON`` (refused at load, does not fit, error, problem timeout, ...)
    and ``(degenerate)`` for a problem whose outputs do not depend on its inputs."""
    text = str(pr.get("status"))
    if pr.get("status") in M.WITH_REASON and pr.get("message"):
        text += f": {_short(pr['message'])}"
    if pr.get("degenerate"):
        text += " (degenerate)"
    return text


def fmt_rate(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def fmt_num(v: Any, digits: int = 3) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "-"
    return f"{v:.{digits}g}"


def fmt_score(v: Any) -> str:
    """A structure score in [0, 1] with two decimals always (``1.00`` beside ``0.95``, not
    ``1``)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "-"
    return f"{v:.2f}"


def env_line(env: dict[str, Any]) -> str:
    """One line: GPU, driver, CUDA, nvcc, clocks, CPU."""
    gpu = env.get("gpu") or {}
    clocks = env.get("clocks") or {}
    parts = [
        f"GPU {gpu.get('name') or 'none'}" + ("" if gpu.get("available") else " (not usable: "
                                                f"{gpu.get('reason') or 'unknown'})"),
        f"driver {gpu.get('driver_version') or '-'}",
        f"CUDA {gpu.get('cuda_version') or '-'}",
        f"nvcc {env.get('nvcc') or '-'}",
        "clocks SM/mem {}/{} MHz (max {}/{})".format(
            *(clocks.get(k) if clocks.get(k) is not None else "-"
              for k in ("sm_mhz", "mem_mhz", "max_sm_mhz", "max_mem_mhz"))),
        f"CPU {env.get('cpu') or '-'}",
        f"cudaperf {env.get('cudaperf_version')}",
    ]
    return "; ".join(parts)


def executor_line(ex: dict[str, Any]) -> str:
    """One line: the executor, and for Ray the cluster (address, nodes, GPUs, CPUs)."""
    if ex.get("executor") != "ray":
        return "local (child processes of this machine)"
    if ex.get("started_here"):
        where = f"a Ray started by the bench ({ex.get('gcs_address')})"
    else:
        gcs = ex.get("gcs_address")
        where = str(ex.get("address")) + (f" ({gcs})" if gcs and gcs != ex.get("address") else "")
    gpus = ex.get("gpus", 0)
    share = f"{ex.get('per_gpu')} problem(s) per GPU" if gpus else "no GPU: compile-only"
    return (f"ray at {where}: {len(ex.get('nodes') or [])} node(s), {gpus} GPU(s), "
            f"{ex.get('cpus', 0)} CPU(s), {share}, {ex.get('retries')} retries, "
            f"Ray {ex.get('ray_version')}")


def placement_counts(problems: Sequence[dict[str, Any]]) -> str:
    """Where the report's problems ran, e.g. "5 on ray, 2 local" ("" when all in one way
    that the executor line already says)."""
    counts: dict[str, int] = {}
    for p in problems:
        ex = (p.get("placement") or {}).get("executor") or "local"
        counts[ex] = counts.get(ex, 0) + 1
    if len(counts) <= 1:
        return ""
    return ", ".join(f"{n} on {ex}" if ex != "local" else f"{n} local" for ex, n in sorted(counts.items()))


def settings_line(settings: dict[str, Any]) -> str:
    keys = ("policy", "model", "base_url", "turns", "samples", "temperature", "target_speedup",
            "patience", "timeout", "jobs", "problem_timeout_s")
    return ", ".join(f"{k}={settings[k]}" for k in keys if settings.get(k) is not None)


def markdown(report: dict[str, Any]) -> str:
    """``report.md``: settings, machine, suite metrics, per-turn curve, per-problem table."""
    m = report["metrics"]
    primary = m["primary"]
    s = report["suite"]
    lines = [
        f"# cudaperf bench: {s['name']}",
        "",
        f"{s['finished']} of {s['problems']} problem(s) finished"
        + ("" if report["complete"] else " (**incomplete**: interrupted or not run: "
           + ", ".join(s["not_run"]) + ")")
        + f"; started {report['created']}; wall {report['wall_s']:.0f} s.",
        "",
        f"- settings: {settings_line(report['settings'])}",
        f"- machine: {env_line(report['env'])}",
        f"- executor: {executor_line(report.get('executor') or {})}"
        + (f" (this session; problems of a resumed run: {placement_counts(report['problems'])})"
           if placement_counts(report["problems"]) else ""),
        (f"- baseline(s): {', '.join(m['baselines']) or '-'}; headline speedup: `{primary}`"
         " (kernel: each problem's own baseline median / candidate median: the C function on one"
         " CPU thread, or PyTorch eager; e2e: C copies in and out included; compile: vs"
         " torch.compile)"),
        "",
        "## Suite",
        "",
        "| metric | value |",
        "|---|---:|",
        f"| problems | {m['problems']}" + (f" ({m['problems'] - m['ran']} not run: a missing tool; the rates "
                                           f"are over the {m['ran']} that ran)" if m.get('ran', m['problems'])
                                           != m['problems'] else "") + " |",
        f"| compile rate | {fmt_rate(m['compile_rate'])} ({m['compiled']}) |",
        f"| correct rate | {fmt_rate(m['correct_rate'])} ({m['correct']}) |",
    ]
    for key, st in m["speedup"].items():
        for p, v in st["fast_p"].items():
            lines.append(f"| fast_{p} ({key}) | {fmt_rate(v)} |")
        lines.append(f"| geomean speedup ({key}, {st['n']} correct) | {fmt_x(st['geomean'])} |")
        lines.append(f"| mean / median ({key}) | {fmt_x(st['mean'])} / {fmt_x(st['median'])} |")
    verdict = verdict_section(m)
    if not verdict:  # a report without the verdict table: the statuses in one line
        statuses = ", ".join(f"{k} {v}" for k, v in m["statuses"].items())
        lines += ["", f"Statuses: {statuses or '-'}."]
    lines += ["", *verdict]
    lines += eval_seconds_section(m)
    lines += memory_section(m)
    c = report["curves"]
    if c["turn"]:
        lines += ["## By turn (best so far)", "",
                  f"| turn | correct rate | geomean best ({primary}) | fast_1 |", "|---:|---:|---:|---:|"]
        for i, t in enumerate(c["turn"]):
            lines.append(f"| {t} | {fmt_rate(c['correct_rate'][i])} | "
                         f"{fmt_x(c['geomean_best'][i])} | {fmt_rate(c['fast_1'][i])} |")
        lines.append("")
    lines += ["## Problems", "",
              ("| problem | status | speedup | e2e / vs compile | best | candidates | struct | "
               "eval s | wall s |"),
              "|---|---|---:|---:|---|---:|---:|---:|---:|"]
    for pr in report["problems"]:
        best = pr.get("best") or {}
        where = f"turn {best['turn']}.{best['sample']}" if pr.get("correct") and best else "-"
        lines.append(
            f"| {pr['id']} | {_cell(status_cell(pr))} | {fmt_x(pr['speedups'].get('kernel'))} | "
            f"{fmt_x(_second(pr))} | {where} | {pr['candidate_count']} | "
            f"{fmt_score(pr.get('structure_score'))} | {fmt_num(pr.get('eval_s'))} | "
            f"{fmt_num(pr.get('wall_s'))} |"
        )
    warned = [(pr["id"], w) for pr in report["problems"] for w in pr.get("warnings") or []]
    if warned:
        lines += ["", "## Warnings", ""]
        lines += [f"- {pid}: {_cell(w)}" for pid, w in warned]
    if s["skipped"]:
        lines += ["", "Left out: " + "; ".join(f"{x['file']} ({x['reason']})" for x in s["skipped"]) + "."]
    lines += ["", (f"(!) marks speedups above {FLAG_SPEEDUP:g}x: against one CPU thread, worth a "
                   "second look. fast_p counts problems correct AND faster than p x baseline, over "
                   "all finished problems."), ""]
    return "\n".join(lines)


KIND_NAMES = {"c": "C", "torch": "PyTorch", "all": "all"}


def verdict_section(m: dict[str, Any]) -> list[str]:
    """report.md's verdict table: problems per final status (and per kind when the suite
    mixes C and PyTorch), the degenerate count, the reasons of problem-level verdicts."""
    v = m.get("verdicts")
    if not v or not v.get("order"):
        return []
    kinds = list(v["by_kind"])
    mixed = len(kinds) > 1
    head = "| verdict | problems |" + ("".join(f" {KIND_NAMES.get(k, k)} |" for k in kinds) if mixed else "")
    rule = "|---|---:|" + ("---:|" * len(kinds) if mixed else "")
    out = ["## Verdicts", "", head, rule]
    for st in v["order"]:
        row = f"| {v['labels'][st]} (`{st}`) | {v['counts'][st]} |"
        if mixed:
            row += "".join(f" {v['by_kind'][k].get(st, 0)} |" for k in kinds)
        out.append(row)
    out += ["", f"Degenerate problems (outputs independent of the inputs; evaluated anyway, as the "
                f"suites ship them): {v['degenerate']}"
            + (f" ({', '.join(v['degenerate_problems'])})" if v["degenerate_problems"] else "") + "."]
    for st, items in v["reasons"].items():
        grouped = (v.get("grouped") or {}).get(st)
        if grouped:
            out += ["", f"{v['labels'][st]}, by reason:", ""]
            for g in grouped:
                ids = g["problems"]
                shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
                out.append(f"- {g['count']} x {_cell(g['message'])} ({shown})")
            continue
        out += ["", f"{v['labels'][st]}:", ""]
        out += [f"- {it['problem']}: {_cell(it['message']) or '(no message)'}" for it in items]
    out.append("")
    return out


def eval_seconds_section(m: dict[str, Any]) -> list[str]:
    """report.md's table of seconds per candidate evaluation (median, p90), with the
    GPU-lock wait given apart, per kind."""
    e = m.get("eval_seconds")
    if not e:
        return []
    out = ["## Seconds per candidate evaluation", "",
           ("| kind | evaluations | median s | p90 s | median s excl. lock wait | p90 s excl. lock "
            "wait | median lock wait s | p90 lock wait s |"),
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind, g in e.items():
        if kind == "all" and len(e) == 2:
            continue  # one kind: "all" repeats it
        out.append(
            f"| {KIND_NAMES.get(kind, kind)} | {g['eval_s']['n']} | {fmt_s(g['eval_s']['median'])} | "
            f"{fmt_s(g['eval_s']['p90'])} | {fmt_s(g['excl_lock_s']['median'])} | "
            f"{fmt_s(g['excl_lock_s']['p90'])} | {fmt_s(g['lock_wait_s']['median'])} | "
            f"{fmt_s(g['lock_wait_s']['p90'])} |")
    out += ["", ("eval s: the whole evaluation of one candidate (its child process, verification "
                 "and timing), lock wait included; excl. lock wait: minus the wait for the GPU lock "
                 "(another evaluation held the GPU). p90: linear interpolation between order "
                 "statistics."), ""]
    for kind, g in e.items():
        if (kind == "all" and len(e) == 2) or not g.get("phases"):
            continue
        parts = ", ".join(f"{p} {fmt_s(s['median'])}" for p, s in g["phases"].items() if s["median"])
        out += [f"Median seconds by phase of the worker, {KIND_NAMES.get(kind, kind)}: {parts}.", ""]
    return out


def memory_section(m: dict[str, Any]) -> list[str]:
    """report.md's table of the worst ratios of peak GPU memory to footprint."""
    mem = m.get("memory")
    if not mem or not mem.get("worst"):
        return []
    out = [f"## Peak GPU memory against footprint (worst {len(mem['worst'])} of "
           f"{mem['problems']} problem(s), {mem['evaluations']} evaluation(s))", "",
           ("| problem | candidate | peak GB | footprint GB | ratio | reference alone GB | over "
            "reference GB | bound GB | within bound |"),
           "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for w in mem["worst"]:
        within = "-" if w["within_bound"] is None else ("yes" if w["within_bound"] else "**no**")
        out.append(f"| {w['problem']} | turn {w['turn']}.{w['sample']} | {fmt_gb(w['peak_gpu_bytes'])} | "
                   f"{fmt_gb(w['footprint_bytes'])} | {fmt_num(w['ratio'])} | "
                   f"{fmt_gb(w.get('reference_peak_gpu_bytes'))} | {fmt_gb(w.get('over_reference_bytes'))} | "
                   f"{fmt_gb(w['bound_bytes'])} | {within} |")
    m1 = M.MEMORY_BOUND_FACTOR - 1
    out += ["", (f"GB = 1e9 bytes. Footprint: the problem's inputs, outputs, parameters and buffers "
                 f"at its main size. Reference alone: the peak of the run's baseline job (PyTorch: "
                 f"the reference's intermediates and library workspace included). Bound: "
                 f"{M.MEMORY_BOUND_FACTOR:g} x footprint + the L2-flush buffer, or the reference "
                 f"alone + {m1:g} x footprint when that is larger."), ""]
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    """``report.png``: speedup per problem (log scale; a problem that is not correct shows
    its status instead of a bar; more than 40 problems are sorted and unlabelled) and the
    best-so-far geomean and correct rate per turn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    primary = report["metrics"]["primary"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2), layout="constrained")
    probs = list(report["problems"])
    many = len(probs) > 40

    def speed(p: dict[str, Any]) -> float | None:
        return p["speedups"].get(primary) if p.get("correct") else None

    if many:
        probs.sort(key=lambda p: -(speed(p) or 0.0))
    vals = [speed(p) for p in probs]
    xs = list(range(len(probs)))
    ax1.set_yscale("log")
    if any(v is not None for v in vals):
        ax1.bar([x for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None],
                color=["tab:green" if v > 1 else "tab:orange" for v in vals if v is not None])
    else:
        ax1.set_ylim(0.1, 10)
        ax1.text(0.5, 0.6, "no correct problem", transform=ax1.transAxes, ha="center", fontsize=11)
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    if not many:
        for x, p, v in zip(xs, probs, vals):
            if v is None:  # the status where the bar would be
                ax1.text(x, 0.03, p["status"], rotation=90, ha="center", va="bottom", fontsize=7,
                         transform=ax1.get_xaxis_transform(), color="tab:red")
        ax1.set_xticks(xs, [p["id"] for p in probs], rotation=60, ha="right", fontsize=7)
    else:
        ax1.set_xticks([])
        ax1.set_xlabel(f"{len(probs)} problems, fastest first")
    ax1.set_xlim(-0.6, max(len(probs), 1) - 0.4)
    ax1.set_ylabel(f"speedup ({primary}), x")
    ax1.set_title("Speedup per problem (log scale)")
    c = report["curves"]
    if c["turn"]:
        geo = [v if v is not None else float("nan") for v in c["geomean_best"]]
        ax2.plot(c["turn"], geo, marker="o", label=f"geomean best so far ({primary})")
        ax2.set_yscale("log")
        if all(math.isnan(v) for v in geo):  # an empty log axis, not a negative linear one
            ax2.set_ylim(0.1, 10)
            ax2.text(0.5, 0.6, "no correct candidate", transform=ax2.transAxes, ha="center",
                     fontsize=11)
        ax2.set_xlabel("turn")
        ax2.set_ylabel("speedup, x")
        ax2.set_xticks(c["turn"])
        ax3 = ax2.twinx()
        ax3.plot(c["turn"], [100 * (v or 0) for v in c["correct_rate"]], marker="s",
                 color="tab:red", label="correct rate")
        ax3.set_ylabel("correct, % of problems")
        ax3.set_ylim(-2, 105)
        h1, l1 = ax2.get_legend_handles_labels()
        h2, l2 = ax3.get_legend_handles_labels()
        ax2.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=8)
    ax2.set_title("Best so far, by turn")
    gpu = (report["env"].get("gpu") or {}).get("name") or "no GPU"
    fig.suptitle(f"{report['suite']['name']}: {report['settings'].get('policy')} policy, {gpu}")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out_dir: Path, report: dict[str, Any], results: Sequence[dict[str, Any]]) -> None:
    """Write report.json, report.md, report.png and candidates.jsonl into ``out_dir``."""
    from cudaperf_cli.bench.runner import write_json_atomic

    order = {p["id"]: i for i, p in enumerate(report["problems"])}
    write_candidates(out_dir / "candidates.jsonl",
                     sorted(results, key=lambda r: order.get(r["id"], len(order))))
    (out_dir / "report.md").write_text(markdown(report))
    plot(report, out_dir / "report.png")
    write_json_atomic(out_dir / "report.json", report)


def summary_table(report: dict[str, Any]) -> Any:
    """The Rich table printed at the end of a run (one row per problem)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"cudaperf bench: {report['suite']['name']}", header_style="bold")
    for col, just in (("problem", "left"), ("status", "left"), ("speedup", "right"),
                      ("e2e|compile", "right"), ("best", "left"), ("cand.", "right"),
                      ("struct", "right"), ("wall s", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for pr in report["problems"]:
        best = pr.get("best") or {}
        style = M.status_style(pr["status"])
        cell = escape(status_cell(pr))
        t.add_row(
            escape(pr["id"]), f"[{style}]{cell}[/]" if style else cell,
            fmt_x(pr["speedups"].get("kernel")), fmt_x(_second(pr)),
            f"{best['turn']}.{best['sample']}" if pr.get("correct") and best else "-",
            str(pr["candidate_count"]), fmt_score(pr.get("structure_score")), fmt_num(pr.get("wall_s")),
        )
    return t


def metrics_lines(report: dict[str, Any]) -> list[str]:
    """Suite metrics as a few plain lines: rates and verdicts, speedups, seconds per
    candidate evaluation (lock wait apart), the worst peak-memory ratio."""
    m = report["metrics"]
    v = m.get("verdicts")
    if v and v.get("order"):
        verdict = ", ".join(f"{v['labels'][st]} {v['counts'][st]}" for st in v["order"])
    else:
        verdict = ", ".join(f"{k} {n}" for k, n in m["statuses"].items())
    degenerate = f"; degenerate {m['degenerate']}" if m.get("degenerate") else ""
    out = [
        f"problems {m['problems']}"
        + (f" ({m['problems'] - m['ran']} not run: a missing tool)" if m.get("ran", m["problems"]) != m["problems"]
           else "")
        + f": compiled {fmt_rate(m['compile_rate'])}, correct "
        f"{fmt_rate(m['correct_rate'])}; verdicts: {verdict}{degenerate}",
    ]
    for key, st in m["speedup"].items():
        fp = ", ".join(f"fast_{p} {fmt_rate(val)}" for p, val in st["fast_p"].items())
        out.append(f"speedup {key} (vs {', '.join(m['baselines']) or '-'}): geomean "
                   f"{fmt_x(st['geomean'])} over {st['n']} correct, median "
                   f"{fmt_x(st['median'])}; {fp}")
    for kind, g in (m.get("eval_seconds") or {}).items():
        if kind == "all" and len(m["eval_seconds"]) == 2:
            continue  # one kind: "all" repeats it
        out.append(
            f"seconds per candidate evaluation ({KIND_NAMES.get(kind, kind)}, {g['eval_s']['n']}): "
            f"median {fmt_s(g['eval_s']['median'])}, p90 {fmt_s(g['eval_s']['p90'])}; excl. lock "
            f"wait median {fmt_s(g['excl_lock_s']['median'])}, p90 {fmt_s(g['excl_lock_s']['p90'])}; "
            f"lock wait median {fmt_s(g['lock_wait_s']['median'])}, p90 {fmt_s(g['lock_wait_s']['p90'])}")
    mem = m.get("memory") or {}
    if mem.get("worst"):
        w = mem["worst"][0]
        flush = f", {fmt_gb(w['flush_bytes'])} GB L2 flush" if w.get("flush_bytes") else ""
        line = (f"peak GPU memory / footprint: worst {fmt_num(w['ratio'])}x ({w['problem']}: "
                f"{fmt_gb(w['peak_gpu_bytes'])} GB peak, {fmt_gb(w['footprint_bytes'])} GB "
                f"footprint{flush}) over {mem['evaluations']} evaluation(s)")
        if mem.get("with_bound"):
            over = mem.get("over_bound") or []
            line += (f"; within the bound for {mem['with_bound'] - len(over)} of "
                     f"{mem['with_bound']} problem(s)")
            if over:
                line += " (over: " + ", ".join(over[:3]) + (", ..." if len(over) > 3 else "") + ")"
        out.append(line)
    for st, items in ((v or {}).get("reasons") or {}).items():
        if st in (M.REFUSED_AT_LOAD, M.DOES_NOT_FIT):
            for it in items:
                out.append(f"{v['labels'][st]}: {it['problem']}: {_short(it['message'])}")
    return out


# ---------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------


def load_report(path: Path) -> dict[str, Any]:
    """A ``report.json`` (or the one in the output folder ``path``).

    Raises:
        CudaperfError: missing, not JSON, or not a cudaperf bench report (exit 2).
    """
    if path.is_dir():  # an output folder: its report
        path = path / "report.json"
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise CudaperfError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CudaperfError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != REPORT_KIND:
        raise CudaperfError(f"{path}: not a cudaperf bench report.json",
                            hint="pass the report.json of a 'cudaperf bench' output folder")
    if doc.get("schema_version") not in READABLE_SCHEMAS:
        raise CudaperfError(f"{path}: report schema {doc.get('schema_version')}, this cudaperf "
                            f"reads {' or '.join(map(str, READABLE_SCHEMAS))}")
    return doc


def compare_reports(a: dict[str, Any], b: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """Side by side: per problem (union, A's order first) the two speedups ``key`` (default:
    A's headline) and their ratio B/A; the suite metrics of both; the environment
    differences (see :func:`cudaperf_cli.bench.env.env_differences`)."""
    from cudaperf_cli.bench.env import env_differences

    key = key or a["metrics"]["primary"]
    pa = {p["id"]: p for p in a["problems"]}
    pb = {p["id"]: p for p in b["problems"]}
    ids = list(pa) + [i for i in pb if i not in pa]
    rows = []
    for i in ids:
        x, y = pa.get(i), pb.get(i)
        sa = x["speedups"].get(key) if x and x.get("correct") else None
        sb = y["speedups"].get(key) if y and y.get("correct") else None
        rows.append({
            "problem": i,
            "a_status": x["status"] if x else None,
            "b_status": y["status"] if y else None,
            "a_speedup": sa,
            "b_speedup": sb,
            "ratio": (sb / sa) if sa and sb else None,
        })
    warnings, gpu_differs = env_differences(a.get("env") or {}, b.get("env") or {})
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    return {
        "key": key,
        "problems": rows,
        "geomean_ratio": M.geomean(ratios),
        "metrics": {"a": a["metrics"], "b": b["metrics"]},
        "settings": {"a": a.get("settings"), "b": b.get("settings")},
        "env_warnings": warnings,
        "gpu_differs": gpu_differs,
    }


def compare_tables(cmp: dict[str, Any], name_a: str, name_b: str) -> list[Any]:
    """Rich tables of a comparison: per problem, then the suite metrics side by side."""
    from rich.table import Table

    key = cmp["key"]
    t = Table(title=f"speedup ({key}) per problem", header_style="bold")
    for col, just in (("problem", "left"), (f"A {name_a}", "right"), (f"B {name_b}", "right"),
                      ("B/A", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in cmp["problems"]:
        def cell(s: Any, status: Any) -> str:
            return fmt_x(s) if s is not None else (status or "absent")
        t.add_row(r["problem"], cell(r["a_speedup"], r["a_status"]),
                  cell(r["b_speedup"], r["b_status"]), fmt_num(r["ratio"]))
    t.add_row("[bold]geomean of ratios[/]", "", "", fmt_num(cmp["geomean_ratio"]))
    ma, mb = cmp["metrics"]["a"], cmp["metrics"]["b"]
    s = Table(title="suite metrics", header_style="bold")
    for col, just in (("metric", "left"), ("A", "right"), ("B", "right")):
        s.add_column(col, justify=just)  # type: ignore[arg-type]
    s.add_row("problems", str(ma["problems"]), str(mb["problems"]))
    s.add_row("compile rate", fmt_rate(ma["compile_rate"]), fmt_rate(mb["compile_rate"]))
    s.add_row("correct rate", fmt_rate(ma["correct_rate"]), fmt_rate(mb["correct_rate"]))
    sa, sb = ma["speedup"].get(key) or {}, mb["speedup"].get(key) or {}
    for p in (f"{x:g}" for x in M.FAST_P):
        s.add_row(f"fast_{p} ({key})", fmt_rate((sa.get("fast_p") or {}).get(p)),
                  fmt_rate((sb.get("fast_p") or {}).get(p)))
    for stat in ("geomean", "mean", "median"):
        s.add_row(f"{stat} speedup ({key})", fmt_x(sa.get(stat)), fmt_x(sb.get(stat)))
    sta, stb = cmp["settings"]["a"] or {}, cmp["settings"]["b"] or {}
    s.add_row("settings", settings_line(sta), settings_line(stb))
    return [t, s]


__all__ = [
    "FLAG_SPEEDUP",
    "GB",
    "REPORT_KIND",
    "build_report",
    "compare_reports",
    "compare_tables",
    "eval_seconds_section",
    "fmt_gb",
    "fmt_x",
    "load_report",
    "markdown",
    "memory_section",
    "metrics_lines",
    "plot",
    "status_cell",
    "summary_table",
    "verdict_section",
    "write_candidates",
    "write_report",
]


def _second(pr: dict) -> float | None:
    """The second speedup of a problem row: end-to-end (C problems: copies included) or
    against torch.compile (PyTorch problems)."""
    sp = pr.get("speedups") or {}
    return sp.get("e2e") if sp.get("e2e") is not None else sp.get("compile")
