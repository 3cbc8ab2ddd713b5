#!/usr/bin/env bash
# One call on a GPU machine: the GPU tests, the examples benchmark and an ncu metric check.
# Usage (from the repo root; OUT is a folder for logs, default ./gpu-check-out):
#   bash tests/gpu_check.sh [TURNS]
# Where the machine's Python lacks tree-sitter or cuda-core, bring wheels first (.whl/,
# see ../shared/tools/device-wheels.sh) and this script installs them into /tmp/site.
set -u
OUT=${OUT:-gpu-check-out}; mkdir -p "$OUT"
TURNS=${1:-3}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv > "$OUT/smi.txt" 2>&1
nvcc --version | tail -2 >> "$OUT/smi.txt"
# 1. ncu knows the metric names the structural score asks for.
if command -v ncu >/dev/null; then
  ncu --query-metrics --chip gh100 > /tmp/ncu-metrics.txt 2>&1
  python3 -c "from cudaperf_cli.structure.ncu import DEFAULT_METRICS as M;print('\n'.join(sorted({m.split('.')[0] for m in M})))" |
    while read -r b; do grep -qw "$b" /tmp/ncu-metrics.txt && echo "ok $b" || echo "MISSING $b"; done > "$OUT/ncu-metrics.txt"
fi
# 2. Every bundled example through `cudaperf optimize`, one Markdown table.
( time timeout 220 python3 examples/run_all.py --turns "$TURNS" --out /tmp/ex ) > "$OUT/examples.md" 2>&1
tar czf "$OUT/ex.tgz" -C /tmp ex 2>/dev/null
# 3. The GPU tests.
timeout 320 python3 -m pytest -m gpu tests/ -v -rs -s -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
cat "$OUT/smi.txt" "$OUT/examples.md"; grep -c "^ok" "$OUT/ncu-metrics.txt" 2>/dev/null; grep MISSING "$OUT/ncu-metrics.txt" 2>/dev/null
grep -E "^\[|^\| |FAILED|passed|failed" "$OUT/gpu_tests.log" | tail -60
