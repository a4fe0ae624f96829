#!/usr/bin/env bash
# Spark's HTTP server against llama.cpp's llama-server, measured by the same client
# (shared/tools/peer_bench.py): single stream, 1/4/8 concurrent streams, long-prefix
# next turn, and conversation interleaving. Both serve SmolLM2-135M with 2 threads, 8 slots.
#   bench/http_bench.sh [LLAMA_SERVER_BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
PEER_BIN=${1:-/tmp/llama-peer/build/bin/llama-server}
BENCH=../shared/tools/peer_bench.py
MODEL=$("$PY" -c 'from spark.library.bundled import bundled_model_path as p; print(p())')
HOME_DIR=$(mktemp -d)
trap 'kill $SPARK_PID $PEER_PID 2>/dev/null || true; rm -rf "$HOME_DIR"' EXIT

export SPARK_HOME=$HOME_DIR SPARK_THREADS=2 SPARK_PARALLEL=8 SPARK_CONTEXT_LENGTH=2048 SPARK_PORT=18080
KEY=$("$PY" -m spark keys create bench 2>/dev/null)
"$PY" -m spark serve >/dev/null 2>&1 & SPARK_PID=$!
LD_LIBRARY_PATH=$(dirname "$PEER_BIN") "$PEER_BIN" -m "$MODEL" -t 2 -tb 2 -np 8 -c 16384 --port 18081 \
    --host 127.0.0.1 --no-webui >/dev/null 2>&1 & PEER_PID=$!
for url in http://127.0.0.1:18080/health http://127.0.0.1:18081/health; do
    for _ in $(seq 100); do curl -sf "$url" >/dev/null && break; sleep 0.3; done
done
"$PY" "$BENCH" http://127.0.0.1:18080 smollm2-135m-instruct-q4_1 --key "$KEY" --json "$HOME_DIR/spark.json" >/dev/null
"$PY" "$BENCH" http://127.0.0.1:18081 smollm2 --json "$HOME_DIR/peer.json" >/dev/null
"$PY" - "$HOME_DIR/spark.json" "$HOME_DIR/peer.json" <<'PYEOF'
import json, sys
s, p = (json.load(open(f)) for f in sys.argv[1:3])
def flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, f"{prefix}{k}.")
        elif isinstance(v, (int, float)):
            yield f"{prefix}{k}", v
ps = dict(flat(p))
print(f"{'':40} {'spark':>10} {'llama-server':>13}")
for k, v in flat(s):
    print(f"{k:40} {v:10.1f} {ps.get(k, float('nan')):13.1f}")
PYEOF
