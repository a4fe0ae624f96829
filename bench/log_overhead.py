#!/usr/bin/env python3
"""What the request log costs a request: latency with the log on against the log off.

    python bench/log_overhead.py [--requests 300] [--model GGUF] [--max-tokens 1]

Starts two `spark serve` processes side by side, the same model and settings,
one with the request log (SPARK_LOG_RETENTION_DAYS=30) and one without it
(0: nothing is recorded to disk). Requests alternate between the two, so
whatever else the machine does slows both alike. Each is a small non-streamed
chat completion; the client measures its whole round trip. Prints a table of
median, p90, p99 and mean latency per server and the difference.

Without --model it uses the tiny random-weight test model (tests/tiny_gguf.py),
which answers in about a millisecond, so any logging cost stands out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from serving import free_port, wait_ready

ROOT = Path(__file__).resolve().parent.parent
WARMUP = 20
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say one word."}]


def tiny_model(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    import tiny_gguf  # the test suite's own generator

    return tiny_gguf.write_tiny_llama(folder / "tiny-llama-chatml.gguf", template="chatml")


class Server:
    """One `spark serve` with its own SPARK_HOME, the model and an API key."""

    def __init__(self, name: str, home: Path, model_path: Path, retention_days: int) -> None:
        from spark.library import Library
        from spark.settings import load_settings
        from spark.store.db import Database
        from spark.store.keys import KeyTable

        self.name = name
        self.env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_THREADS": "1",
            "SPARK_LOG_LEVEL": "warning",
            "SPARK_LOG_RETENTION_DAYS": str(retention_days),
        }
        settings = load_settings(env=self.env)
        with Library(settings) as library:
            self.model = library.add_local(model_path).id
        key = KeyTable(Database(settings.db_path)).create("bench")[1]
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spark", "serve", "--port", str(self.port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", timeout=120, headers={"authorization": f"Bearer {key}"}
        )
        self.latencies: list[float] = []

    def wait_ready(self) -> None:
        wait_ready(self.proc, self.http, self.name)

    def request(self, max_tokens: int) -> float:
        started = time.perf_counter()
        response = self.http.post(
            "/v1/chat/completions", json={"model": self.model, "messages": MESSAGES, "max_tokens": max_tokens}
        )
        took = time.perf_counter() - started
        response.raise_for_status()
        return took

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(30)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per server (after a warm-up)")
    parser.add_argument("--model", type=Path, help="a GGUF chat model (default: the tiny test model)")
    parser.add_argument("--max-tokens", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="spark-log-bench-") as tmp:
        folder = Path(tmp)
        model = args.model or tiny_model(folder)
        servers = [Server("log on", folder / "on", model, 30), Server("log off", folder / "off", model, 0)]
        try:
            for server in servers:
                server.wait_ready()
            for _ in range(WARMUP):  # loads the model, warms caches and connections
                for server in servers:
                    server.request(args.max_tokens)
            for i in range(args.requests):
                for server in servers if i % 2 == 0 else reversed(servers):
                    server.latencies.append(server.request(args.max_tokens))
        finally:
            for server in servers:
                server.stop()

    print(
        f"{args.requests} chat completions per server, max_tokens={args.max_tokens}, model {model.name}, "
        "requests alternating between the servers\n"
    )
    print(f"{'server':<10}{'median ms':>11}{'p90 ms':>9}{'p99 ms':>9}{'mean ms':>10}")
    for server in servers:
        values = [v * 1000 for v in server.latencies]
        print(
            f"{server.name:<10}{statistics.median(values):>11.3f}{percentile(values, 0.9):>9.3f}"
            f"{percentile(values, 0.99):>9.3f}{statistics.fmean(values):>10.3f}"
        )
    on, off = ([v * 1000 for v in s.latencies] for s in servers)
    diff = statistics.median(on) - statistics.median(off)
    print(
        f"\nlog on - log off: {diff:+.3f} ms median ({diff / statistics.median(off):+.1%}), "
        f"{statistics.fmean(on) - statistics.fmean(off):+.3f} ms mean"
    )


if __name__ == "__main__":
    main()
