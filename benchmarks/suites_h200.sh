#!/usr/bin/env bash
# The field's suites as published, through `cudaperf bench`, on one GPU machine (the H200
# runs of issue 21).  No suite code is in this repository: pass the checkouts.
#
#   KERNELBENCH=path/to/KernelBench POLYBENCH=path/to/PolyBenchC-4.2.1 \
#     bash benchmarks/suites_h200.sh STAGE... [-- EXTRA BENCH FLAGS]
#
# Stages (run in the order given, each under its own time limit, `<stage>:<seconds>`):
#   gpu-tests  the GPU tests of the evaluation core (pytest -m gpu, in the background)
#   kb1 / kb2  KernelBench level 1 / level 2, --turns 1 (-j $KB_JOBS, default 6; both
#              run at once when given together as kb12)
#   pb8 / pb1  PolyBench/C 4.2.1 LARGE (benchmarks/polybench.py manifest), --turns 3, -j 8 / -j 1
# A stage past its limit gets SIGINT: bench writes the report of the problems that finished,
# and `--resume` (RESUME=1) continues it in the same output folder (W, default /tmp/w).
# Results: $OUT/<stage>.tgz (the bench folder without build products and stored reference
# outputs), $OUT/logs.tgz (<stage>.log, gpu_tests.log), $OUT/stages.txt, $OUT/machine.txt.
set -u
OUT=${OUT:-suites-out}; W=${W:-/tmp/w}; mkdir -p "$OUT" "$W"
KB=${KERNELBENCH:?set KERNELBENCH to a KernelBench checkout}
PB=${POLYBENCH:?set POLYBENCH to a PolyBenchC-4.2.1 checkout}
[ -d "$KB/KernelBench" ] && KB="$KB/KernelBench"
. tests/gpu_setup.sh 2>/dev/null || true
export PYTHONUNBUFFERED=1 COLUMNS=160
RES=(); [ "${RESUME:-0}" = 1 ] && RES=(--resume)
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nproc; free -g | head -2; } > "$OUT/machine.txt" 2>&1
bench() {  # bench NAME LIMIT_S SUITE FLAGS...
  local name=$1 limit=$2 suite=$3; shift 3
  local t0=$(date +%s)
  timeout -s INT -k 30 "$limit" python3 -m cudaperf_cli bench run "$suite" -o "$W/$name" "${RES[@]}" "$@" \
    > "$OUT/$name.log" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/stages.txt"
  tar czf "$OUT/$name.tgz" -C "$W" --exclude='*.so' --exclude='*.npy' --exclude='*/outputs/*' \
    --exclude='*/builds/*' "$name" 2>/dev/null
}
pbmanifest() { [ -f "$W/pb/bench.toml" ] || python3 benchmarks/polybench.py manifest --polybench "$PB" -o "$W/pb/bench.toml" > "$OUT/pb-manifest.log" 2>&1; }
for arg in "$@"; do
  stage=${arg%%:*}; limit=${arg#*:}; [ "$limit" = "$arg" ] && limit=540
  case $stage in
    gpu-tests) ( timeout -k 10 "$limit" python3 -m pytest -m gpu tests/test_gpu_torch_eval.py tests/test_gpu_evaluate.py \
                   -q -rs -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1; echo "gpu-tests: exit $?" >> "$OUT/stages.txt" ) & ;;
    kb1) bench kb1 "$limit" "$KB/level1" --turns 1 -j "${KB_JOBS:-6}" --no-compile-baseline ;;
    kb2) bench kb2 "$limit" "$KB/level2" --turns 1 -j "${KB_JOBS:-6}" --no-compile-baseline ;;
    kb12) bench kb1 "$limit" "$KB/level1" --turns 1 -j "${KB_JOBS:-6}" --no-compile-baseline & p1=$!
          bench kb2 "$limit" "$KB/level2" --turns 1 -j "${KB_JOBS:-6}" --no-compile-baseline; wait "$p1" ;;
    pb8) pbmanifest; bench pb8 "$limit" "$W/pb/bench.toml" --turns 3 -j 8 ;;
    pb1) pbmanifest; bench pb1 "$limit" "$W/pb/bench.toml" --turns 3 -j 1 ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
wait
cat "$OUT/stages.txt"
for f in "$OUT"/kb1.log "$OUT"/kb2.log "$OUT"/pb8.log "$OUT"/pb1.log; do [ -f "$f" ] && { echo "== $f"; grep -E "^problems|^speedup|^seconds|^memory|^verdicts|^refused|^report" "$f" | tail -12; }; done
grep -E "passed|failed|FAILED|ERROR" "$OUT/gpu_tests.log" 2>/dev/null | tail -25
# few files come back from a device machine: the logs go into one archive
( cd "$OUT" && tar czf logs.tgz ./*.log 2>/dev/null && rm -f ./*.log )
