#!/usr/bin/env bash
# Measure a generated dataset on a GPU (docs/dataset.md): `cudaperf data measure` over a copy
# of DATASET (default .dev/dataset) in WORK (default /tmp/dataset: a later call on the same warm
# machine resumes there, even when the carried DATASET replaced the repository's copy), every
# built-in candidate (--turns 12), PyTorch problems timed against eager only.
# Usage (repository root, a GPU machine):
#   OUT=/folder [DATASET=.dev/dataset] [LIMIT=200] [MEASURE_LIMIT_S=480] [JOBS=12] \
#     bash tests/gpu_dataset_measure.sh [more data measure flags]
# MEASURE_LIMIT_S bounds the wall time (SIGTERM: what finished is gathered, a rerun resumes).
# Writes $OUT/measure.log, $OUT/gpu.csv and $OUT/measured.tar.gz (candidates.jsonl,
# pairs.jsonl, manifest.json, the bench's report.json).
set -uo pipefail
. tests/gpu_setup.sh
OUT=${OUT:?set OUT to an output folder}
DS=${DATASET:-.dev/dataset}
WORK=${WORK:-/tmp/dataset}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/gpu.csv" 2>&1
[ -f "$WORK/manifest.json" ] || cp -r "$DS" "$WORK"
start=$(date +%s)
timeout -s TERM "${MEASURE_LIMIT_S:-480}" python3 -m cudaperf_cli data measure "$WORK" --configs main \
  --limit "${LIMIT:-200}" -j "${JOBS:-12}" --no-compile-baseline --json "$@" > "$OUT/measure.log" 2>&1
echo "measure exit: $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/measure.log"
tail -3 "$OUT/measure.log"
(cd "$WORK" && tar czf "$OUT/measured.tar.gz" candidates.jsonl pairs.jsonl manifest.json measure/main/bench/report.json 2>/dev/null)
ls -la "$OUT"
