#!/usr/bin/env python3
"""A soak: mixed traffic on a real `spark serve` for a long time, with a runner killed every few minutes.

    python bench/soak.py [--minutes 30] [--kill-every 180] [--workers 4]

Chats, streams (some cancelled mid-stream), tool calls, embeddings and bad requests from `--workers`
clients, on the tiny random-weight test models (tests/tiny_gguf.py). Prints requests by kind, runners
killed, requests that failed because of a kill, any other 5xx, the server's file descriptors and RSS
over the run, and the runner processes left once the server stopped (should be 0).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import tiny_gguf  # noqa: E402  (the test suite's own generator and traffic driver)
from traffic import prepare_home, run_soak, runners_gone, spark_serve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kill-every", type=float, default=180.0, help="seconds between runner kills")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-soak-") as tmp:
        home = Path(tmp) / "home"
        chat = tiny_gguf.write_tiny_llama(Path(tmp) / "tiny-llama-tools.gguf", template="tools")
        embed = tiny_gguf.write_tiny_bert(Path(tmp) / "tiny-bert-embed.gguf")
        key, (chat_id, embed_id) = prepare_home(home, chat, embed)
        with spark_serve(home, SPARK_PARALLEL="2", SPARK_CONTEXT_LENGTH="512", SPARK_LOG_LEVEL="warning") as served:
            report = run_soak(
                served, key, chat_id, embed_id, args.minutes * 60, kill_every=args.kill_every, workers=args.workers
            )
            runners = served.runner_pids()
        report.runners_left = runners_gone(runners)
    print(report.table())
    for line in report.server_errors[:10]:
        print("error:", line)


if __name__ == "__main__":
    main()
