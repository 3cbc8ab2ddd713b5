#!/usr/bin/env bash
# Measure the ranker's dataset on a GPU (docs/ranker.md): every built-in variant of every
# problem of examples/ranker/all.toml, through `cudaperf bench`, PyTorch problems timed
# against eager only.  Usage (repository root, a GPU machine):
#   OUT=/some/folder bash tests/gpu_ranker_data.sh [--resume]
# Writes $OUT/bench-ranker (report.*, candidates.jsonl); BENCH_LIMIT_S (default 540) bounds
# the bench's wall time: it stops cleanly (SIGTERM) and `--resume` continues later.
set -uo pipefail
. tests/gpu_setup.sh
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/gpu.csv" 2>&1
timeout -s TERM "${BENCH_LIMIT_S:-540}" python3 -m cudaperf_cli bench examples/ranker/all.toml \
  --turns 12 --patience 12 --no-compile-baseline -j "${JOBS:-12}" -o "${BENCH_DIR:-$OUT/bench-ranker}" "$@" \
  > "$OUT/bench.log" 2>&1
echo "bench exit: $?" | tee -a "$OUT/bench.log"
tail -5 "$OUT/bench.log"
