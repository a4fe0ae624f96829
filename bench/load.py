#!/usr/bin/env python3
"""Many concurrent clients on one model: what is answered, what is refused, and how /health holds up.

    python bench/load.py [--clients 200] [--max-queue 8] [--parallel 4] [--max-tokens 32] [--model GGUF]

Starts `spark serve` with a small queue bound and sends `--clients` streamed chats at once (half on
the OpenAI route, half on the Anthropic one) while /health is probed every 50 ms from a process of
its own. The clients speak bare HTTP/1.1 (tests/traffic.py, `stream_raw`): through an HTTP client
library, 200 streams on this machine cost the client more CPU than the server, and the figures
measured the client. Prints requests
ok / refused / failed, refusal latency, p50/p99 TTFT and latency, /health latency and the server's RSS
before and after. Without --model it uses the slow random-weight test model (tests/tiny_gguf.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import tiny_gguf  # noqa: E402  (the test suite's own generator and traffic driver)
from traffic import prepare_home, run_load, spark_serve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--max-queue", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--model", type=Path, help="a GGUF file (default: a random-weight test model)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-load-") as tmp:
        home = Path(tmp) / "home"
        model_path = args.model or tiny_gguf.write_tiny_llama(
            Path(tmp) / "slow-llama.gguf", n_ctx=4096, n_embd=256, n_layer=4, n_ff=512, name="slow-llama"
        )
        key, (model,) = prepare_home(home, model_path)
        settings = {
            "SPARK_MAX_QUEUE": str(args.max_queue),
            "SPARK_PARALLEL": str(args.parallel),
            "SPARK_CONTEXT_LENGTH": "512",
            "SPARK_LOG_LEVEL": "warning",
        }
        with spark_serve(home, **settings) as served:
            run_load(served, key, model, 4, max_tokens=2)  # load the model first
            report = run_load(served, key, model, args.clients, max_tokens=args.max_tokens)
    print(f"{args.clients} clients, parallel {args.parallel}, max_queue {args.max_queue}, max_tokens {args.max_tokens}")
    print(report.table())
    failed = [o for o in report.outcomes if o.kind == "failed"]
    for outcome in failed[:5]:
        print(f"failed: HTTP {outcome.status} {outcome.detail[:200]}")


if __name__ == "__main__":
    main()
