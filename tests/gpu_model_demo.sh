#!/usr/bin/env bash
# The model-policy loop end to end on a GPU machine: the replay server serves the five
# scripted replies of examples/replies/matmul.jsonl as an OpenAI-compatible endpoint and
# `cudaperf optimize --policy openai` runs five turns against it; then the model-policy and
# refine-loop tests (they require verified kernels where a GPU is present).
# Usage (repo root): OUT=dir bash tests/gpu_model_demo.sh
set -u
OUT=${OUT:-gpu-model-out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 COLUMNS=160
python3 -m cudaperf_cli.policies.replay_server examples/replies/matmul.jsonl --port 8765 > "$OUT/server.log" 2>&1 &
SERVER=$!
sleep 2
cd /tmp && ( time python3 -m cudaperf_cli optimize "$OLDPWD/examples/matmul.c" --policy openai \
  --base-url http://127.0.0.1:8765/v1 --model replay --turns 5 --yes -o /tmp/matmul.cu ) > "$OUT/optimize.txt" 2>&1
echo "exit code $?" >> "$OUT/optimize.txt"
cd "$OLDPWD"
kill $SERVER
cp -r /tmp/cudaperf-runs "$OUT/runs"
timeout 400 python3 -m pytest tests/test_model_policies.py tests/test_refine_loop.py -q -p no:cacheprovider > "$OUT/tests.log" 2>&1
cat "$OUT/optimize.txt"; tail -5 "$OUT/tests.log"
