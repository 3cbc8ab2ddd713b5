"""Measured side of the structural score (cudaperf_cli.structure.ncu), CPU only.

The ncu output here is written by hand in the documented ``ncu --csv --page raw`` layout
(header, units row, one row per launch; values with or without thousands separators), with
the counter values a kernel of the corpus must produce (e.g. a stride-32 float load: one
request and 32 sectors per warp).  ``profile_executable`` runs against a fake ``ncu``
script that writes such text to its ``--log-file``.  The real thing: tests/test_gpu_structure.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cudaperf_cli.core import ToolchainError
from cudaperf_cli.structure import METRIC_KEYS, analyze_source
from cudaperf_cli.structure.ncu import (
    BARRIER_STALL,
    DEFAULT_METRICS,
    DRAM_READ,
    DURATION,
    FLOP_METRICS,
    G_LD_EFF,
    G_LD_REQUESTS,
    G_LD_SECTORS,
    G_ST_SECTORS,
    NCU_METRICS,
    OCCUPANCY,
    REGISTERS,
    SH_LD_CONFLICTS,
    SH_LD_INST,
    SH_LD_WAVEFRONTS,
    SH_ST_CONFLICTS,
    SH_ST_INST,
    SH_ST_WAVEFRONTS,
    THREADS_ACTIVE,
    THREADS_PRED_ON,
    KernelProfile,
    NcuError,
    aggregate_launches,
    apply_measurements,
    barrier_stall_factor,
    find_ncu,
    has_main,
    kernel_base_name,
    kernel_name_regex,
    ncu_command,
    parse_ncu_csv,
    parse_number,
    profile_executable,
    unit_scale,
)
from cudaperf_cli.structure.score import (
    bank_conflict_score,
    coalescing_score,
    intensity_score,
    kernel_total,
    occupancy_score,
)
from tests.conftest import run_cli

KERNELS = Path(__file__).parent / "data" / "kernels"
ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------
# Recorded ncu output (hand-written, documented --page raw layout)
# ---------------------------------------------------------------------------------------

# Two launches of copy_strided (n = 1<<20, 4096 blocks of 256: 32768 warps, one load and
# one store request each; the stride-32 load touches 32 sectors, the store 4) and one of
# copy_coalesced (n = 1<<24: 524288 warps, 4 sectors per request).  Default formatting:
# thousands separators, quoted fields, ==PROF== lines around the table.
RECORDED_COPY = """\
==PROF== Connected to process 4242 (/tmp/cudaperf/exe/program)
==PROF== Profiling "copy_strided" - 0: 0%....50%....100% - 12 passes
==PROF== Profiling "copy_strided" - 1: 0%....50%....100% - 12 passes
==PROF== Profiling "copy_coalesced" - 2: 0%....50%....100% - 12 passes
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","l1tex__t_requests_pipe_lsu_mem_global_op_st.sum","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum","sm__warps_active.avg.pct_of_peak_sustained_active","smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct","smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct","smsp__thread_inst_executed_per_inst_executed.ratio","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
"","","","","","","","","","","","nsecond","request","request","sector","sector","%","%","%","",""
"0","4242","program","127.0.0.1","copy_strided(float *, const float *, int, int)","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","31,712","32,768","32,768","1,048,576","131,072","81.52","12.50","100","32","n/a"
"1","4242","program","127.0.0.1","copy_strided(float *, const float *, int, int)","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","30,688","32,768","32,768","1,048,576","131,072","80.48","12.50","100","32","n/a"
"2","4242","program","127.0.0.1","copy_coalesced(float *, const float *, int)","1","7","(256, 1, 1)","(65536, 1, 1)","0","9.0","38,944","524,288","524,288","2,097,152","2,097,152","88.10","100","100","32","n/a"
"""

# --print-units base with plain numbers, a template kernel, scaled units on one column.
RECORDED_PLAIN = """\
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","gpu__time_duration.sum","launch__registers_per_thread"
"","","","","","","","","","","","Mbyte","usecond","register/thread"
"0","77","app","h","void saxpy_rows<128>(float *, const float *, float, int, int)","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","2.5","12.5","16"
"""


def raw_csv(
    launches: list[tuple[str, dict[str, float | str]]], units: dict[str, str] | None = None
) -> str:
    """ncu --csv --page raw text for ``launches`` [(kernel name, {metric: value})]."""
    metrics: list[str] = []
    for _, vals in launches:
        metrics += [m for m in vals if m not in metrics]
    fixed = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
             "Stream", "Block Size", "Grid Size", "Device", "CC"]

    def q(xs: list[str]) -> str:
        return ",".join(f'"{x}"' for x in xs)

    units_row = [""] * len(fixed) + [(units or {}).get(m, "") for m in metrics]
    lines = [q(fixed + metrics), q(units_row)]
    for i, (name, vals) in enumerate(launches):
        ident = [str(i), "1", "program", "h", name, "1", "7", "(256, 1, 1)", "(1024, 1, 1)",
                 "0", "9.0"]
        lines.append(q(ident + [str(vals.get(m, "n/a")) for m in metrics]))
    return "\n".join(lines) + "\n"


def profile(name: str, **metrics: float) -> KernelProfile:
    """A KernelProfile with ncu metric values given by the constants' names."""
    import cudaperf_cli.structure.ncu as ncu_mod

    vals = {getattr(ncu_mod, k): v for k, v in metrics.items() if not k.startswith("flop_")}
    for k, v in metrics.items():
        if k.startswith("flop_"):
            vals[FLOP_METRICS[k[5:]]] = v
    return KernelProfile(name=name, launches=1, metrics=vals, duration_ns=vals.get(DURATION))


def static(name: str, kernel: str | None = None, **kw):
    rep = analyze_source((KERNELS / name).read_text(), source_name=name, **kw)
    return rep if kernel is None else (rep, rep.kernel(kernel))


# ---------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------


def test_parse_recorded_raw_csv_with_units_row_and_thousands_separators():
    recs = parse_ncu_csv(RECORDED_COPY)
    assert [r.name for r in recs] == ["copy_strided", "copy_strided", "copy_coalesced"]
    r = recs[0]
    assert r.kernel.startswith("copy_strided(") and r.id == "0"
    assert r.block == (256, 1, 1) and r.grid == (4096, 1, 1)
    assert r.values[G_LD_SECTORS] == 1048576 and r.values[G_LD_REQUESTS] == 32768
    assert r.values[DURATION] == 31712  # nsecond: base unit
    assert r.values[OCCUPANCY] == pytest.approx(81.52)
    assert r.values[SH_LD_CONFLICTS] is None  # n/a


def test_parse_plain_numbers_template_names_and_scaled_units():
    (r,) = parse_ncu_csv(RECORDED_PLAIN)
    assert r.name == "saxpy_rows"
    assert r.values[DRAM_READ] == pytest.approx(2.5e6)  # Mbyte -> byte (SI)
    assert r.values[DURATION] == pytest.approx(12500.0)  # usecond -> ns
    assert r.values[REGISTERS] == 16


def test_parse_without_table_or_with_junk():
    assert parse_ncu_csv("") == []
    assert parse_ncu_csv("==PROF== Connected\n==WARNING== No kernels were profiled.\n") == []
    # program output before the table and a ==PROF== line inside are ignored
    text = "hello from main\n" + RECORDED_PLAIN.replace('"0","77"', '==PROF== x\n"0","77"')
    assert [r.name for r in parse_ncu_csv(text)] == ["saxpy_rows"]


@pytest.mark.parametrize(
    "text, value",
    [
        ("1,234", 1234.0),
        ("1,048,576", 1048576.0),
        ("1,234.5", 1234.5),
        ("1234567", 1234567.0),
        ("98.5", 98.5),
        ("4.0e-05", 4e-05),
        ("n/a", None),
        ("N/A", None),
        ("", None),
        ("12,34", None),  # not a thousands grouping: refused rather than guessed
        ("abc", None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    "unit, factor",
    [("nsecond", 1), ("usecond", 1e3), ("msecond", 1e6), ("second", 1e9), ("byte", 1),
     ("Kbyte", 1e3), ("Mbyte", 1e6), ("Gbyte", 1e9), ("Kibyte", 1024), ("Msector", 1e6),
     ("%", 1), ("", 1), ("register/thread", 1)],
)
def test_unit_scale(unit, factor):
    assert unit_scale(unit) == factor


@pytest.mark.parametrize(
    "printed, base",
    [
        ("copy_strided", "copy_strided"),
        ("copy_strided(float *, const float *, int, int)", "copy_strided"),
        ("void saxpy_rows<128>(float *, const float *, float, int, int)", "saxpy_rows"),
        ("void ns::inner::k<float, std::pair<int, int>>(T1 *)", "k"),
        ("(anonymous namespace)::hidden(int)", "hidden"),
        ("regs_heavy", "regs_heavy"),
    ],
)
def test_kernel_base_name(printed, base):
    assert kernel_base_name(printed) == base


def test_aggregate_sums_counts_and_averages_ratios():
    (strided, coalesced) = aggregate_launches(parse_ncu_csv(RECORDED_COPY), DEFAULT_METRICS)
    assert strided.name == "copy_strided" and strided.launches == 2
    assert strided.get(G_LD_SECTORS) == 2 * 1048576  # .sum: summed
    assert strided.get(OCCUPANCY) == pytest.approx((81.52 + 80.48) / 2)  # .pct: mean
    assert strided.get(THREADS_ACTIVE) == 32  # .ratio: mean
    assert strided.duration_ns == 31712 + 30688
    assert strided.mean_duration_ns == pytest.approx((31712 + 30688) / 2)
    assert strided.grid == (4096, 1, 1) and strided.full_name.startswith("copy_strided(")
    # n/a and never-printed metrics are absent and listed
    assert strided.get(SH_LD_CONFLICTS) is None
    assert SH_LD_CONFLICTS in strided.missing and BARRIER_STALL in strided.missing
    assert coalesced.launches == 1 and coalesced.get(G_ST_SECTORS) == 2097152


def test_metric_table_is_consistent():
    names = [m.name for m in NCU_METRICS]
    assert len(names) == len(set(names)) == len(DEFAULT_METRICS)
    assert all("__" in n for n in names)
    assert {m.feeds for m in NCU_METRICS} == set(METRIC_KEYS) | {"duration"}
    assert all(m.meaning for m in NCU_METRICS)


# ---------------------------------------------------------------------------------------
# Measured values -> scores (same score functions as the static side)
# ---------------------------------------------------------------------------------------


def test_copy_pair_measured_coalescing_orders_like_static():
    profs = aggregate_launches(parse_ncu_csv(RECORDED_COPY), DEFAULT_METRICS)
    rs, ks = static("copy_strided.cu", "copy_strided")
    rc, kc = static("copy_coalesced.cu", "copy_coalesced")
    ms = apply_measurements(rs, profs).kernel("copy_strided")
    mc = apply_measurements(rc, profs).kernel("copy_coalesced")
    s, c = ms.metric("coalescing"), mc.metric("coalescing")
    # (32 + 4 sectors) / 2 requests per warp; ideal 4 + 4 sectors -> 4.5x
    assert s.measured == pytest.approx(18.0) and c.measured == pytest.approx(4.0)
    assert s.score == pytest.approx(coalescing_score(4.5)) and c.score == pytest.approx(1.0)
    assert s.score < c.score and ks.metric("coalescing").score < kc.metric("coalescing").score
    assert s.reason.startswith("measured: 18.0 sectors/request (loads 32.0, stores 4.0)")
    assert "22% of the fetched sector bytes" in s.reason  # 8 of 36 sectors
    assert G_LD_SECTORS in s.measured_source and G_LD_EFF in s.measured_source
    assert s.value == s.measured and s.static == ks.metric("coalescing").static
    assert s.details["static"]["score"] == ks.metric("coalescing").score
    # the kernel total is recomputed from the new scores
    assert (ms.score, ms.coverage) == kernel_total(ms.metrics)
    assert ms.measured_launches == 2 and ms.measured_duration_ns == pytest.approx(31200)
    assert any("measured with Nsight Compute: 2 launch(es)" in n for n in ms.notes)
    # the static report itself is left alone
    assert rs.kernel("copy_strided").metric("coalescing").measured is None


def test_coalescing_without_efficiency_metrics_uses_static_ideal():
    rep, k = static("copy_strided.cu", "copy_strided")
    prof = profile("copy_strided", G_LD_SECTORS=32 * 100, G_LD_REQUESTS=100,
                   G_ST_SECTORS=4 * 100, G_ST_REQUESTS=100)
    m = apply_measurements(rep, [prof]).kernel("copy_strided").metric("coalescing")
    ideal = k.metric("coalescing").details["ideal_sectors_per_request"]
    assert m.measured == 18.0 and m.score == pytest.approx(coalescing_score(18.0 / ideal))
    assert "static" in m.measured_source


def test_missing_metrics_keep_static_value_with_note():
    rep, k = static("transpose_tiled.cu", "transpose_tiled")
    prof = profile("transpose_tiled", OCCUPANCY=90.0)  # nothing else measured
    mk = apply_measurements(rep, [prof]).kernel("transpose_tiled")
    sh = mk.metric("shared_memory")
    assert sh.measured is None and sh.score == k.metric("shared_memory").score
    assert "not measured: ncu reported no value for" in sh.reason
    assert SH_LD_WAVEFRONTS in sh.details["measured_missing"]
    occ = mk.metric("occupancy")
    assert occ.measured == 90.0 and occ.score == pytest.approx(occupancy_score(0.9))
    assert occ.reason.startswith("measured: 90% achieved occupancy")


def test_transpose_bank_conflicts_tiled_vs_padded():
    # 4096x4096 transpose, 32x8 blocks: 131072 warps x 4 shared loads and 4 stores each;
    # the [32][32] column read is 32-way (32 wavefronts, 31 of them conflicts)
    inst = 131072 * 4
    text = raw_csv([
        ("transpose_tiled(float *, const float *, int)", {
            SH_LD_WAVEFRONTS: f"{32 * inst:,}", SH_LD_CONFLICTS: f"{31 * inst:,}",
            SH_ST_WAVEFRONTS: f"{inst:,}", SH_ST_CONFLICTS: 0,
            SH_LD_INST: f"{inst:,}", SH_ST_INST: f"{inst:,}"}),
        ("transpose_padded(float *, const float *, int)", {
            SH_LD_WAVEFRONTS: f"{inst:,}", SH_LD_CONFLICTS: 0,
            SH_ST_WAVEFRONTS: f"{inst:,}", SH_ST_CONFLICTS: 0,
            SH_LD_INST: f"{inst:,}", SH_ST_INST: f"{inst:,}"}),
    ])
    profs = aggregate_launches(parse_ncu_csv(text), DEFAULT_METRICS)
    rt, kt = static("transpose_tiled.cu", "transpose_tiled")
    rp, _ = static("transpose_padded.cu", "transpose_padded")
    mt = apply_measurements(rt, profs).kernel("transpose_tiled").metric("shared_memory")
    mp = apply_measurements(rp, profs).kernel("transpose_padded").metric("shared_memory")
    assert mt.measured == pytest.approx(16.5) == kt.metric("shared_memory").static
    assert mt.score == pytest.approx(bank_conflict_score(16.5))
    assert mp.measured == pytest.approx(1.0) and mp.score == pytest.approx(1.0)
    assert mt.score < mp.score
    assert mt.details["measured"]["bank_conflicts"] == 31 * inst


def test_store_conflicts_overcounted_are_bounded_by_instructions():
    # bank-conflict counters above wavefronts - instructions cannot make ways < 1 or inf
    rep, _ = static("transpose_padded.cu", "transpose_padded")
    prof = profile("transpose_padded", SH_LD_WAVEFRONTS=1000, SH_LD_CONFLICTS=0,
                   SH_ST_WAVEFRONTS=1300, SH_ST_CONFLICTS=900, SH_LD_INST=1000, SH_ST_INST=1000)
    m = apply_measurements(rep, [prof]).kernel("transpose_padded").metric("shared_memory")
    assert m.measured == pytest.approx(2300 / 2000)


def test_divergence_prefers_predicated_on_lanes():
    rep, k = static("branch_divergent.cu", "branch_divergent")
    both = profile("branch_divergent", THREADS_ACTIVE=32.0, THREADS_PRED_ON=22.4)
    m = apply_measurements(rep, [both]).kernel("branch_divergent").metric("divergence")
    assert m.measured == pytest.approx(70.0) and m.score == pytest.approx(0.7)
    assert THREADS_PRED_ON in m.measured_source and "32.0 active" in m.reason
    only_active = profile("branch_divergent", THREADS_ACTIVE=24.0)
    m2 = apply_measurements(rep, [only_active]).kernel("branch_divergent").metric("divergence")
    assert m2.score == pytest.approx(0.75) and THREADS_ACTIVE in m2.measured_source


def test_sync_keeps_static_hazard_factor_and_measures_barrier_stalls():
    rep = static("barrier_in_branch.cu")
    profs = [profile("barrier_in_branch", BARRIER_STALL=10.0),
             profile("barrier_outside", BARRIER_STALL=30.0)]
    out = apply_measurements(rep, profs)
    bad, good = out.kernel("barrier_in_branch"), out.kernel("barrier_outside")
    hz = rep.kernel("barrier_in_branch").metric("synchronization").details["factors"]["hazard"]
    mb, mg = bad.metric("synchronization"), good.metric("synchronization")
    assert mb.score == pytest.approx(hz * 0.9) and mg.score == pytest.approx(0.7)
    assert mb.score < mg.score  # the hazard still dominates, as in the static scores
    assert mb.value_unit == "% barrier stall" and mb.unit == "barriers"
    assert "hazard" in mb.reason and mb.measured == 10.0
    assert barrier_stall_factor(0.0) == 1.0 and barrier_stall_factor(0.25) == pytest.approx(0.75)
    assert barrier_stall_factor(1.0) == 0.0
    assert barrier_stall_factor(0.5, k=3.0) == pytest.approx(1 / 4)


def test_arithmetic_intensity_from_flop_counts_and_dram_bytes():
    rep, k = static("branch_divergent.cu", "branch_divergent")
    prof = profile("branch_divergent", DRAM_READ=64e6, DRAM_WRITE=64e6,
                   flop_ffma=8e6, flop_fmul=16e6, flop_fadd=8e6, flop_dfma=0.0)
    m = apply_measurements(rep, [prof]).kernel("branch_divergent").metric("arithmetic_intensity")
    ai = (2 * 8e6 + 16e6 + 8e6) / 128e6
    ridge = 67e12 / 4.8e12  # H200 fp32
    assert m.measured == pytest.approx(ai)
    assert m.score == pytest.approx(intensity_score(ai, ridge))
    assert m.details["measured"]["dtype"] == "fp32" and m.status == "ok"
    # a copy: no FLOPs measured -> n/a, as on the static side
    rc, _ = static("copy_coalesced.cu", "copy_coalesced")
    copy = profile("copy_coalesced", DRAM_READ=64e6, DRAM_WRITE=64e6, flop_ffma=0.0)
    mc = apply_measurements(rc, [copy]).kernel("copy_coalesced").metric("arithmetic_intensity")
    assert mc.status == "n/a" and mc.score is None and mc.measured == 0.0


def test_load_balance_from_waves_and_registers_from_launch():
    rep, k = static("partial_wave.cu", "scale_partial")
    prof = profile("scale_partial", WAVES=300 / 264, REGISTERS=8.0,
                   LOCAL_LD_SECTORS=0.0, LOCAL_ST_SECTORS=0.0)
    mk = apply_measurements(rep, [prof]).kernel("scale_partial")
    lb = mk.metric("load_balance")
    assert lb.measured == pytest.approx(1.136, abs=1e-3)
    assert lb.score == pytest.approx((300 / 264) / 2)
    assert lb.score == pytest.approx(k.metric("load_balance").score, abs=0.01)
    rp = mk.metric("register_pressure")
    assert rp.measured == 8.0 and "0 MB local-memory traffic" in rp.reason


def test_registers_without_ptxas_report_scored_when_no_local_traffic():
    rep, k = static("regs_light.cu", "regs_light")  # no ptxas report: unknown
    assert k.metric("register_pressure").score is None
    prof = profile("regs_light", REGISTERS=10.0, LOCAL_LD_SECTORS=0.0, LOCAL_ST_SECTORS=0.0)
    m = apply_measurements(rep, [prof]).kernel("regs_light").metric("register_pressure")
    assert m.score == 1.0 and m.status == "ok"


def test_unmatched_kernels_and_profiles_are_noted():
    rep = static("barrier_in_branch.cu")
    out = apply_measurements(rep, [profile("barrier_outside", OCCUPANCY=50.0),
                                   profile("other_kernel", OCCUPANCY=10.0)])
    assert any("not measured" in n for n in out.kernel("barrier_in_branch").notes)
    assert out.kernel("barrier_in_branch").measured_launches == 0
    assert any("other_kernel" in n for n in out.notes)


def test_json_carries_measured_values_and_units():
    rep = static("barrier_in_branch.cu")
    out = apply_measurements(rep, [profile("barrier_outside", BARRIER_STALL=5.0)])
    doc = json.loads(out.to_json())
    k = next(k for k in doc["kernels"] if k["name"] == "barrier_outside")
    m = next(m for m in k["metrics"] if m["key"] == "synchronization")
    assert m["measured"] == 5.0 and m["value"] == 5.0 and m["value_unit"] == "% barrier stall"
    assert m["measured_source"].startswith("ncu " + BARRIER_STALL)


# ---------------------------------------------------------------------------------------
# Running ncu (a fake ncu script), building programs
# ---------------------------------------------------------------------------------------

FAKE_NCU = """\
#!{python}
import json, os, sys, time
argv = sys.argv[1:]
if os.environ.get("FAKE_NCU_ARGV"):
    with open(os.environ["FAKE_NCU_ARGV"], "a") as f:
        f.write(json.dumps(argv) + "\\n")
mode = os.environ.get("FAKE_NCU_MODE", "ok")
log = argv[argv.index("--log-file") + 1] if "--log-file" in argv else None
metrics = argv[argv.index("--metrics") + 1].split(",")
print("program output line")
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    sys.exit(1)
if mode == "none":
    print("==WARNING== No kernels were profiled.")
    sys.exit(0)
if mode == "nolib":
    print("==ERROR== Failed to prepare kernel for profiling: LibraryNotLoaded")
    print("==WARNING== No kernels were profiled.")
    sys.exit(0)
if mode == "sleep":
    time.sleep(60)
if mode == "crash":
    print("==ERROR== The application returned an error code (11).")
    sys.exit(11)
bad = [m for m in metrics if m.startswith("bogus__")]
if bad:
    print("==ERROR== Failed to find metric " + bad[0])
    sys.exit(1)
with open(os.environ["FAKE_NCU_CSV"]) as src, open(log, "w") as dst:
    dst.write(src.read())
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    script = tmp_path / "ncu"
    script.write_text(FAKE_NCU.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    csv_file = tmp_path / "recorded.csv"
    csv_file.write_text(RECORDED_COPY)
    argv_file = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_NCU_CSV", str(csv_file))
    monkeypatch.setenv("FAKE_NCU_ARGV", str(argv_file))
    monkeypatch.setenv("CUDAPERF_NCU", str(script))

    def calls() -> list[list[str]]:
        return [json.loads(ln) for ln in argv_file.read_text().splitlines()]

    return calls


def test_profile_executable_command_and_result(fake_ncu):
    profs = profile_executable(["./program", "--n", "4096"], kernel_regex="copy_.*",
                               timeout_s=30, launch_count=3)
    assert [p.name for p in profs] == ["copy_strided", "copy_coalesced"]
    (argv,) = fake_ncu()
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert sum(a.startswith("--clock") or a.startswith("--lock") for a in argv) == 1
    assert argv[argv.index("--page") + 1] == "raw" and "--csv" in argv
    assert argv[argv.index("--metrics") + 1] == ",".join(DEFAULT_METRICS)
    assert argv[argv.index("--kernel-name") + 1] == "regex:copy_.*"
    assert argv[argv.index("--launch-count") + 1] == "3"
    assert argv[-3:] == ["./program", "--n", "4096"]


def test_profile_executable_errors(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    with pytest.raises(NcuError, match="ERR_NVGPUCTRPERM") as e:
        profile_executable(["./p"], timeout_s=30)
    assert e.value.kind == "permission" and e.value.exit_code == 3
    monkeypatch.setenv("FAKE_NCU_MODE", "none")
    with pytest.raises(NcuError, match="profiled no kernel: no kernel launch matched") as e:
        profile_executable(["./p"], kernel_regex="nothing", timeout_s=30)
    assert e.value.kind == "no_kernels" and e.value.exit_code == 2
    monkeypatch.setenv("FAKE_NCU_MODE", "crash")
    with pytest.raises(NcuError, match=r"ncu failed \(exit status 11\).*error code \(11\)"):
        profile_executable(["./p"], timeout_s=30)
    monkeypatch.setenv("FAKE_NCU_MODE", "sleep")
    with pytest.raises(NcuError, match="did not finish within 1 s") as e:
        profile_executable(["./p"], timeout_s=1)
    assert e.value.kind == "timeout"


def test_unknown_metric_is_dropped_and_retried(fake_ncu):
    profs = profile_executable(["./p"], metrics=[G_LD_SECTORS, "bogus__thing.sum"], timeout_s=30)
    assert len(fake_ncu()) == 2
    assert profs[0].get(G_LD_SECTORS) == 2 * 1048576
    assert "bogus__thing.sum" in profs[0].missing


def test_missing_ncu_is_a_toolchain_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDAPERF_NCU", str(tmp_path / "no-such-ncu"))
    with pytest.raises(ToolchainError, match="ncu not found"):
        find_ncu()
    monkeypatch.delenv("CUDAPERF_NCU")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if not Path("/usr/local/cuda/bin/ncu").is_file():
        with pytest.raises(ToolchainError, match="Nsight Compute"):
            profile_executable(["./p"], timeout_s=5)


def test_ncu_command_has_only_clock_control_none():
    argv = ncu_command("ncu", ["./a"], ["x__y.sum"], kernel_regex="regex:k", launch_count=None)
    assert argv[:3] == ["ncu", "--clock-control", "none"]
    assert "--launch-count" not in argv and argv[argv.index("--kernel-name") + 1] == "regex:k"


@pytest.mark.parametrize("text", ["copy_strided", "copy_strided(float *, int)",
                                  "void copy_strided<4>(float *)", "ns::copy_strided"])
def test_kernel_name_regex_matches_whole_names(text):
    import re

    rx = kernel_name_regex(["copy_strided", "other"])
    assert re.search(rx, text) and re.fullmatch(rx, text)
    assert not re.search(rx, "copy_strided2") and not re.search(rx, "my_copy_strided(int)")


def test_has_main():
    assert has_main((KERNELS / "copy_coalesced.cu").read_text())
    assert not has_main((KERNELS / "regs_light.cu").read_text())
    assert not has_main("// int main() {}\n__global__ void k() {}\n/* int main(void) */")
    assert has_main("int main(int argc, char** argv) { return 0; }")


def test_build_executable_and_cache(tmp_path):
    pytest.importorskip("cudaperf_cli.build")
    from cudaperf_cli.build import find_nvcc
    from cudaperf_cli.structure.ncu import build_executable
    from cudaperf_cli.structure.resources import CompileError

    try:
        find_nvcc()
    except ToolchainError as exc:
        pytest.skip(str(exc))
    src = (KERNELS / "copy_coalesced.cu").read_text()
    exe = build_executable(src, arch="sm_90", cache_root=tmp_path)
    assert exe.is_file() and os.access(exe, os.X_OK)
    assert build_executable(src, arch="sm_90", cache_root=tmp_path) == exe
    with pytest.raises(CompileError, match=r"bad\.cu does not compile as a program: .*error"):
        build_executable("int main() { return undefined_name; }", cache_root=tmp_path,
                         name="bad.cu")


# ---------------------------------------------------------------------------------------
# CLI: cudaperf score --ncu [--run CMD]
# ---------------------------------------------------------------------------------------


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli("score", *args, cwd=ROOT, env=env)


def test_cli_ncu_without_main_or_run_is_one_line_exit_2():
    p = cli(str(KERNELS / "regs_light.cu"), "--ncu", "--no-build")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1
    assert "has no main()" in lines[0] and "--run" in lines[0]


def test_cli_run_profiles_the_command(fake_ncu, tmp_path):
    p = cli(str(KERNELS / "copy_strided.cu"), "--run", "./program 1", "--no-build", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    (k,) = doc["kernels"]
    m = next(m for m in k["metrics"] if m["key"] == "coalescing")
    assert m["measured"] == pytest.approx(18.0) and m["reason"].startswith("measured:")
    assert k["measured_launches"] == 2
    assert [pr["name"] for pr in doc["ncu_profiles"]] == ["copy_strided", "copy_coalesced"]
    assert any("profiled: ./program 1" in n for n in doc["notes"])
    (argv,) = fake_ncu()
    assert argv[-2:] == ["./program", "1"]
    import re

    rx = argv[argv.index("--kernel-name") + 1][len("regex:"):]
    assert re.fullmatch(rx, "copy_strided") and not re.search(rx, "copy_coalesced")
    # the table shows measured values
    p2 = cli(str(KERNELS / "copy_strided.cu"), "--run", "./program", "--no-build")
    assert p2.returncode == 0 and "(m)" in p2.stdout and "measured:" in p2.stdout


def test_cli_ncu_permission_error_is_one_warning_line_and_the_static_score(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    p = cli(str(KERNELS / "copy_strided.cu"), "--run", "./program", "--no-build")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 0 and len(lines) == 1 and "ERR_NVGPUCTRPERM" in lines[0]
    assert lines[0].startswith("warning: profiler unavailable:") and "coalescing" in p.stdout


@pytest.mark.parametrize("mode, words", [
    ("perm", "ERR_NVGPUCTRPERM"),
    ("nolib", "LibraryNotLoaded"),
    ("missing", "ncu not found"),
])
def test_score_keeps_the_static_score_when_the_profiler_cannot_run(fake_ncu, monkeypatch, tmp_path,
                                                                   nvcc_path, mode, words):
    """`score --ncu` where ncu has no access to the counters, or cannot load its library
    into the program: the static score with one warning line, exit 0 (was: an error that
    threw the static score away, or blamed the user's program)."""
    import subprocess

    src = tmp_path / "copy.cu"
    src.write_text("__global__ void copy(const float *a, float *b, int n) {\n"
                   "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] = a[i];\n}\n"
                   "int main() { float *a, *b; cudaMalloc(&a, 4096); cudaMalloc(&b, 4096);\n"
                   "  copy<<<4, 256>>>(a, b, 1024); cudaDeviceSynchronize(); return 0; }\n")
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    if mode == "missing":
        monkeypatch.setenv("CUDAPERF_NCU", str(tmp_path / "no" / "ncu"))
    proc = subprocess.run([sys.executable, "-m", "cudaperf_cli", "score", str(src), "--ncu", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ncu"]["status"] == "profiler_unavailable" and words in doc["ncu"]["reason"]
    assert doc["kernels"] and "ncu_profiles" not in doc
    warn = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(warn) == 1 and warn[0].startswith("warning: profiler unavailable:"), proc.stderr
