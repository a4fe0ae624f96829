#!/usr/bin/env python3
"""How long the web console's pages take the server, with a request log of 1,000 requests.

    python bench/console_pages.py [--logged 1000] [--rounds 40]

Starts `spark serve` with its own SPARK_HOME, an admin password, the tiny
test model and `--logged` made-up requests written straight into the request
log (spread over the last day, two models, a few errors), signs in, and
fetches each page in turn, round after round, so whatever else the machine
does slows every page alike. Prints the median, p90 and mean time per page:
the round trip on loopback, which is the server's time plus well under a
millisecond.
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
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-pw"
WARMUP = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare(home: Path, logged: int) -> dict[str, str]:
    """The server's environment, with the model added and the log filled."""
    sys.path.insert(0, str(ROOT / "tests"))
    import tiny_gguf  # the test suite's own generator
    from server.console.records import made_up, write
    from spark.library import Library
    from spark.settings import load_settings

    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_THREADS": "1",
        "SPARK_LOG_LEVEL": "warning",
        "SPARK_ADMIN_PASSWORD": PASSWORD,
    }
    settings = load_settings(env=env)
    with Library(settings) as library:
        library.add_local(tiny_gguf.write_tiny_llama(home / "tiny.gguf"), model_id="tiny-chat")
    now = time.time()
    spacing = 86400 / logged
    records = [
        made_up(
            n,
            at=now - n * spacing,
            model="tiny-chat" if n % 3 else "other-model",
            status=200 if n % 17 else 500,
            error_type=None if n % 17 else "runner_failed",
        )
        for n in range(logged)
    ]
    write(settings.db_path, records)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logged", type=int, default=1000, help="requests in the log")
    parser.add_argument("--rounds", type=int, default=40, help="fetches of each page (after a warm-up)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = prepare(Path(tmp), args.logged)
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "spark", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if client.get("/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit("the server did not start")
                    time.sleep(0.1)
                signed = client.post("/login", data={"password": PASSWORD})
                assert signed.status_code == 303, signed.text
                pages = {
                    "Models": "/models",
                    "A model": "/models/tiny-chat",
                    "Discover": "/discover",
                    "Runners": "/runners",
                    "Keys": "/keys",
                    "Settings": "/settings",
                    "Nodes": "/nodes",
                    "Batches": "/batches",
                    "Files": "/files",
                    "Requests": "/requests",
                    "Requests, filtered": "/requests?model=tiny-chat&status=error&since=24h",
                    "A request": "/requests/made00500",
                    "Activity (hour)": "/activity",
                    "Activity (day)": "/activity?window=24h",
                    "Playground": "/playground",
                }
                times: dict[str, list[float]] = {name: [] for name in pages}
                for round_ in range(WARMUP + args.rounds):
                    for name, path in pages.items():
                        started = time.perf_counter()
                        response = client.get(path)
                        took = time.perf_counter() - started
                        assert response.status_code == 200, (path, response.status_code)
                        if round_ >= WARMUP:
                            times[name].append(took * 1000)
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{args.logged} logged requests, {args.rounds} fetches per page (ms, loopback round trip)")
    print(f"{'page':<22}{'median':>8}{'p90':>8}{'mean':>8}")
    for name, values in times.items():
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
        print(f"{name:<22}{statistics.median(values):>8.1f}{p90:>8.1f}{statistics.mean(values):>8.1f}")


if __name__ == "__main__":
    main()
