#!/usr/bin/env bash
# One GPU-machine call for the PyTorch path and the bench: `cudaperf bench examples/` over the
# bundled C and PyTorch problems (then again with --resume), and the dynamic-guard cheats.
# Usage (repo root): OUT=dir bash tests/gpu_check_torch.sh [BENCH_SECONDS] [TEST_SECONDS]
set -u
OUT=${OUT:-gpu-torch-out}; mkdir -p "$OUT"
. tests/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv > "$OUT/smi.txt" 2>&1
( time timeout "${1:-430}" python3 -m cudaperf_cli bench examples -o /tmp/bench --turns 1 -j 4 ) > "$OUT/bench.txt" 2>&1
( time timeout 60 python3 -m cudaperf_cli bench examples -o /tmp/bench --turns 1 -j 4 --resume ) > "$OUT/bench_resume.txt" 2>&1
cp /tmp/bench/report.md /tmp/bench/report.json /tmp/bench/report.png /tmp/bench/candidates.jsonl "$OUT/" 2>/dev/null
timeout "${2:-150}" python3 -m pytest -m gpu tests/test_gpu_torch_eval.py -q -rs -p no:cacheprovider -k "cheat or private_stream or fast_format" > "$OUT/torch_guards.log" 2>&1
tail -45 "$OUT/bench.txt"; tail -3 "$OUT/bench_resume.txt"; tail -15 "$OUT/torch_guards.log"
