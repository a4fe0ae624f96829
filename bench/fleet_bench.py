#!/usr/bin/env python3
"""What routing through a fleet central costs, and what affinity buys.

    python bench/fleet_bench.py [--model GGUF] [--requests 200] [--conversations 8] [--turns 4]

Starts a central and two nodes (`spark serve` processes on loopback ports,
each with its own SPARK_HOME; both nodes have the model, the central none).

1. Time to first token of a streamed 1-token chat, through the central
   against the same node directly; requests alternate, so whatever else the
   machine does slows both alike. Prints median, p90 and the overhead.
2. A multi-turn workload: `--conversations` clients at once, each holding a
   conversation of `--turns` turns. The share of prompt tokens served from
   the nodes' KV caches (`cached_tokens` / `prompt_tokens`), with affinity
   and with it turned off (`fleet_affinity`, changed live through the admin API).

Without --model it uses the tiny random-weight test model (tests/tiny_gguf.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fleet.helpers import Fleet, Server, stop_all  # noqa: E402  (the test suite's own fleet)

MODEL = "bench-llama"
WARMUP = 10


def setup(folder: Path, model_path: Path | None) -> tuple[Fleet, str]:
    """The fleet, and an API key of the node alpha."""
    import tiny_gguf
    from spark.library import Library
    from spark.settings import load_settings
    from spark.store.db import Database
    from spark.store.keys import KeyTable

    path = model_path or tiny_gguf.write_tiny_llama(folder / "tiny-llama-chatml.gguf", template="chatml")
    central = Server("central", folder / "central")
    nodes = {name: Server(name, folder / name) for name in ("alpha", "beta")}
    keys = {}
    for server in (central, *nodes.values()):
        server.home.mkdir(parents=True)
        settings = load_settings(env={"SPARK_HOME": str(server.home)})
        if server is not central:
            with Library(settings) as library:
                library.add_local(path, model_id=MODEL)
        keys[server.name] = KeyTable(Database(settings.db_path)).create("bench")[1]
    central.start()
    with central.admin() as admin:
        for name, node in nodes.items():
            token = admin.post("/api/nodes", json={"name": name}).json()["token"]
            node.args = ["--join", central.url, "--token", token]
    for node in nodes.values():
        node.start()
    fleet = Fleet(central, nodes, keys["central"], keys["central"])
    for name in nodes:
        fleet.wait_state(name, "ready")
    return fleet, keys["alpha"]


def ttft_ms(http: httpx.Client, content: str) -> float:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 1, "stream": True}
    started = time.perf_counter()
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data:") and '"content"' in line:
                return (time.perf_counter() - started) * 1000.0
    raise AssertionError("no token came")


def overhead(fleet: Fleet, node_key: str, requests: int) -> None:
    """TTFT through the central against alpha directly (beta drained, so the central picks alpha)."""
    via = httpx.Client(base_url=fleet.central.url, headers={"authorization": f"Bearer {fleet.key}"}, timeout=60)
    direct = httpx.Client(
        base_url=fleet.nodes["alpha"].url, headers={"authorization": f"Bearer {node_key}"}, timeout=60
    )
    prompt = "The same short prompt, every time."
    central, plain = [], []
    with fleet.central.admin() as admin:
        admin.post("/api/nodes/beta/drain")
        try:
            for _ in range(WARMUP):
                ttft_ms(via, prompt)
                ttft_ms(direct, prompt)
            for _ in range(requests):
                central.append(ttft_ms(via, prompt))
                plain.append(ttft_ms(direct, prompt))
        finally:
            admin.post("/api/nodes/beta/undrain")
    print("\nTTFT of a streamed 1-token chat, ms (alternating, same node)")
    print(f"{'path':<18}{'median':>9}{'p90':>9}{'mean':>9}")
    for name, xs in (("through central", central), ("direct to node", plain)):
        p90 = statistics.quantiles(xs, n=10)[-1]
        print(f"{name:<18}{statistics.median(xs):>9.2f}{p90:>9.2f}{statistics.mean(xs):>9.2f}")
    print(f"overhead (median): {statistics.median(central) - statistics.median(plain):+.2f} ms")


def workload(fleet: Fleet, conversations: int, turns: int, tag: str) -> tuple[int, int, dict[str, int]]:
    totals = {"prompt": 0, "cached": 0}
    hops: dict[str, int] = {"moved": 0, "stayed": 0}
    lock = threading.Lock()
    barrier = threading.Barrier(conversations)

    def client(i: int) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": f"Conversation {tag}-{i}. " + "Context. " * 40},
            {"role": "user", "content": f"Question {i}: tell me a story."},
        ]
        last = None
        with fleet.http() as http:
            barrier.wait()
            for turn in range(turns):
                rid = f"{tag}-{i}-{turn}"
                body = {"model": MODEL, "messages": messages, "max_tokens": 24, "temperature": 0}
                answer = http.post("/v1/chat/completions", json=body, headers={"x-request-id": rid}).json()
                usage = answer["usage"]
                node = fleet.logged(rid)["node"]
                with lock:
                    totals["prompt"] += usage["prompt_tokens"]
                    totals["cached"] += usage["prompt_tokens_details"]["cached_tokens"]
                    if last is not None:
                        hops["moved" if node != last else "stayed"] += 1
                last = node
                messages += [
                    {"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
                    {"role": "user", "content": f"And then, part {turn + 2}?"},
                ]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(conversations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return totals["prompt"], totals["cached"], hops


def cache_share(fleet: Fleet, conversations: int, turns: int) -> None:
    print(f"\nKV cache share on {conversations} conversations x {turns} turns, 2 nodes")
    print(f"{'affinity':<10}{'prompt tok':>12}{'cached tok':>12}{'share':>8}{'next turn moved':>17}")
    with fleet.central.admin() as admin:
        for on in (True, False):
            assert admin.patch("/api/settings", json={"fleet_affinity": on}).status_code == 200
            prompt, cached, hops = workload(fleet, conversations, turns, f"aff{int(on)}-{time.time():.0f}")
            moved = hops["moved"] / max(1, hops["moved"] + hops["stayed"])
            print(f"{'on' if on else 'off':<10}{prompt:>12}{cached:>12}{cached / prompt:>8.1%}{moved:>17.0%}")
        admin.patch("/api/settings", json={"fleet_affinity": True})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a GGUF chat model (default: the tiny test model)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as folder:
        fleet, node_key = setup(Path(folder), args.model)
        try:
            overhead(fleet, node_key, args.requests)
            cache_share(fleet, args.conversations, args.turns)
        finally:
            stop_all([fleet.central, *fleet.nodes.values()])


if __name__ == "__main__":
    main()
