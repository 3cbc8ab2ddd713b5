#!/usr/bin/env bash
# The field's suites as published, through `cudaperf bench`, on one GPU machine (the H200
# runs of issue 21).  No suite code is in this repository: pass the checkouts.
#
#   KERNELBENCH=path/to/KernelBench POLYBENCH=path/to/PolyBenchC-4.2.1 \
#     bash benchmarks/suites_h200.sh GROUP...
#
# A GROUP is stages joined by '+', run at once, with one time limit: `kb1+gpu-tests:420`
# (seconds; default 540).  Groups run one after the other, each as soon as the one before
# it ended; a group ending in '&' (`'gpu-tests:900&'`) starts and is not waited for (it runs
# beside the groups after it, and the script waits for it at the end).  Stages:
#   gpu-tests  the GPU tests (python -m pytest -m gpu ${GPU_TESTS:-tests} $GPU_TESTS_ARGS; e.g.
#              GPU_TESTS_ARGS='-n 8 --durations=30': pytest-xdist, the GPU lock serialises device work)
#   kb1 / kb2  KernelBench level 1 / level 2, --turns $KB_TURNS (default 1), -j $KB_JOBS (default 8);
#              torch.compile is timed too with KB_COMPILE=1
#   pb8 / pb1  PolyBench/C 4.2.1 LARGE (benchmarks/polybench.py manifest), --turns ${PB_TURNS:-3},
#              -j 8 / -j 1 (PB_ONLY='gemm atax': those kernels alone)
#   acc        PolyBench-ACC's hand-written CUDA at PolyBench/C's LARGE sizes, in double
#              (benchmarks/polybench_acc.py run; ACC=path/to/PolyBench-ACC): acc.json.  Run it
#              alone (its times are wall clock around its launches).
#   ex         the bundled examples (examples/bench.toml: C and PyTorch), --turns 3, -j 8
# A stage past its group's limit gets SIGTERM (a stage runs in the background, where SIGINT is
# ignored; cudaperf treats SIGTERM as Ctrl-C): bench writes the report of the problems that
# finished (`--resume`, RESUME=1, continues it in the same output folder W, default /tmp/w).
# A run longer than one device call (KernelBench's 152 files at --turns 3 with torch.compile
# timed: about an hour on one H200) goes on across calls and machines of the same GPU:
# carry the <stage>.tgz archives an earlier call brought back in a folder and set
# RESTORE=that/folder: they are unpacked into W and every bench stage resumes (finished
# problems are kept, the rest run; `cudaperf bench --resume` refuses another GPU model).
#
# Results go to $RESULTS (default: $OUT, else suites-out), which may outlive the command
# that started the script (a device call that starts it with setsid and later calls that
# collect it): <stage>.tgz (the bench folder without build products and stored reference
# outputs, made when the stage ends), <stage>.log, gpu_tests.log, stages.txt (one line per
# stage: exit code and seconds), machine.txt, and DONE when every group has ended.
#
# On a lent device machine, where one command may run 10 minutes: start the script with
# setsid in a copy of the repository, RESULTS outside $OUT, then, in each later command,
#   RESULTS=... bash benchmarks/suites_h200.sh --collect SECONDS [--stop]
# waits up to SECONDS for DONE (with --stop, then sends SIGTERM to the benches still
# running and waits for their reports), and copies to $OUT what is there so far: the
# stage archives, stages.txt, machine.txt and logs.tgz (every log; at most 8 files).
set -u
if [ "${1:-}" = --collect ]; then
  R=${RESULTS:?set RESULTS to the folder the running script writes}; end=$(( $(date +%s) + ${2:-0} ))
  while [ ! -f "$R/DONE" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  if [ "${3:-}" = --stop ] && [ ! -f "$R/DONE" ]; then
    pkill -TERM -f "^python3 -m cudaperf_cli bench run"; sleep 45  # the benches, not their timeout
  fi
  cp "$R"/*.tgz "$R"/acc.json "$R"/stages.txt "$R"/machine.txt "$OUT"/ 2>/dev/null
  ( cd "$R" && tar czf "$OUT/logs.tgz" ./*.log 2>/dev/null )
  for f in "$R"/*.log; do echo "== $f"; grep -E "^problems|^speedup|^seconds|^memory|^peak|^interrupted|passed|failed" "$f" | tail -6; done
  cat "$R/stages.txt" 2>/dev/null; exit 0
fi
RESULTS=${RESULTS:-${OUT:-suites-out}}; W=${W:-/tmp/w}; mkdir -p "$RESULTS" "$W"
KB=${KERNELBENCH:?set KERNELBENCH to a KernelBench checkout}
PB=${POLYBENCH:?set POLYBENCH to a PolyBenchC-4.2.1 checkout}
[ -d "$KB/KernelBench" ] && KB="$KB/KernelBench"
. tests/gpu_setup.sh 2>/dev/null || true
export PYTHONUNBUFFERED=1 COLUMNS=160
RES=(); [ "${RESUME:-0}" = 1 ] && RES=(--resume)
if [ -n "${RESTORE:-}" ]; then
  for a in "$RESTORE"/*.tgz; do
    [ -f "$a" ] || { echo "RESTORE=$RESTORE holds no <stage>.tgz" >&2; exit 2; }
    tar xzf "$a" -C "$W" || { echo "cannot unpack $a into $W" >&2; exit 2; }
  done
  RES=(--resume)
fi
KB_BASELINE=--no-compile-baseline; [ "${KB_COMPILE:-0}" = 1 ] && KB_BASELINE=--compile-baseline
rm -f "$RESULTS/DONE"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nproc; free -g | head -2
  python3 -c 'import torch; print("torch", torch.__version__)'; nvcc --version | tail -2; } > "$RESULTS/machine.txt" 2>&1

bench() {  # bench NAME LIMIT_S SUITE FLAGS...
  local name=$1 limit=$2 suite=$3; shift 3
  local t0=$(date +%s)
  timeout -s TERM -k 60 "$limit" python3 -m cudaperf_cli bench run "$suite" -o "$W/$name" "${RES[@]}" "$@" \
    > "$RESULTS/$name.log" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - t0 )) s" >> "$RESULTS/stages.txt"
  tar czf "$RESULTS/$name.tgz" -C "$W" --exclude='*.so' --exclude='*.npy' --exclude='*/outputs/*' \
    --exclude='*/builds/*' "$name" 2>/dev/null
}
pbmanifest() {
  [ -f "$W/pb/bench.toml" ] || python3 benchmarks/polybench.py manifest --polybench "$PB" -o "$W/pb/bench.toml" \
    ${PB_ONLY:+--only $PB_ONLY} > "$RESULTS/pb-manifest.log" 2>&1
}
stage() {  # stage NAME LIMIT_S
  local limit=$2 t0
  case $1 in
    gpu-tests) t0=$(date +%s)
               timeout -k 10 "$limit" python3 -m pytest -m gpu ${GPU_TESTS:-tests} -q -rs -p no:cacheprovider ${GPU_TESTS_ARGS:-} \
                 > "$RESULTS/gpu_tests.log" 2>&1
               echo "gpu-tests: exit $? after $(( $(date +%s) - t0 )) s" >> "$RESULTS/stages.txt" ;;
    kb1) bench kb1 "$limit" "$KB/level1" --turns "${KB_TURNS:-1}" -j "${KB_JOBS:-8}" "$KB_BASELINE" ;;
    kb2) bench kb2 "$limit" "$KB/level2" --turns "${KB_TURNS:-1}" -j "${KB_JOBS:-8}" "$KB_BASELINE" ;;
    pb8) pbmanifest; bench pb8 "$limit" "$W/pb/bench.toml" --turns "${PB_TURNS:-3}" -j 8 ;;
    pb1) pbmanifest; bench pb1 "$limit" "$W/pb/bench.toml" --turns "${PB_TURNS:-3}" -j 1 ;;
    acc) t0=$(date +%s)
         timeout -k 10 "$limit" python3 benchmarks/polybench_acc.py run --acc "${ACC:?set ACC to a PolyBench-ACC checkout}" \
           --polybench "$PB" -o "$RESULTS/acc.json" > "$RESULTS/acc.log" 2>&1
         echo "acc: exit $? after $(( $(date +%s) - t0 )) s" >> "$RESULTS/stages.txt" ;;
    ex)  bench ex "$limit" examples --turns 3 -j 8 ;;
    *) echo "unknown stage $1" >> "$RESULTS/stages.txt" ;;
  esac
}
bg=()
for group in "$@"; do
  detach=0; [ "${group: -1}" = "&" ] && { detach=1; group=${group%&}; }
  stages=${group%%:*}; limit=${group#*:}; [ "$limit" = "$group" ] && limit=540
  IFS=+ read -ra names <<< "$stages"
  pids=()
  for s in "${names[@]}"; do stage "$s" "$limit" & pids+=($!); done
  if [ "$detach" = 1 ]; then bg+=("${pids[@]}"); else wait "${pids[@]}"; fi
done
[ "${#bg[@]}" -gt 0 ] && wait "${bg[@]}"
touch "$RESULTS/DONE"
cat "$RESULTS/stages.txt"
