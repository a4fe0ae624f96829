#!/usr/bin/env python3
"""What per-request LoRA scales cost: concurrent streams under one set of scales, or several.

    python bench/lora_bench.py [--model GGUF] [--threads 2] [--rounds 3] [--streams 4]

Loads the model (the bundled SmolLM2 by default) in the engine with one random rank-8 LoRA adapter
(tests/tiny_gguf.py's generator, shaped for the model) and runs `--streams` greedy completions at
once, `TOKENS` tokens each, under 1, 2 and `--streams` different sets of scales (requests of
different sets are batched apart and take turns), alternating the cases round by round. Prints
aggregate decode tokens/s per case (median over rounds) and its ratio to the one-set case.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import tiny_gguf  # noqa: E402  (the test suite's own generator)
from spark.engine import Engine  # noqa: E402
from spark.library.bundled import bundled_model_path  # noqa: E402
from spark.library.metadata import read_gguf_info  # noqa: E402
from spark.types import CompletionRequest, Done, Event, LoadOptions, LoraAdapter, SamplingParams  # noqa: E402

TOKENS = 64
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def _adapter_for(model: Path, folder: Path) -> Path:
    """A random adapter with the model's attention shapes (its deltas small: the answers stay text)."""
    info = read_gguf_info(model)
    return tiny_gguf.write_tiny_lora(
        folder / "random-lora.gguf", n_embd=info.n_embd, n_layer=info.n_layers, n_head=info.n_heads, rank=8
    )


def _round(engine: Engine, sets: list[dict[int, float] | None]) -> float:
    """Aggregate tokens/s of one stream per entry of `sets`, all started at once."""
    done = threading.Event()
    tokens: list[int] = []

    def emit(event: Event) -> None:  # on the engine's thread
        if isinstance(event, Done):
            tokens.append(event.usage.completion_tokens)
            if len(tokens) == len(sets):
                done.set()

    sampling = SamplingParams(max_tokens=TOKENS, temperature=0.0, ignore_eos=True)
    started = time.perf_counter()
    for i, lora in enumerate(sets):
        engine.submit(
            f"r{i}", CompletionRequest(model="m", prompt=f"{PROMPT} ({i})", sampling=sampling, lora=lora), emit
        )
    done.wait()
    return sum(tokens) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=bundled_model_path())
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=4)
    args = parser.parse_args()
    n = args.streams
    cases: dict[str, list[dict[int, float] | None]] = {
        "1 set (attached)": [None] * n,
        f"1 set, {n // 2} streams": [None] * (n // 2),
        "1 set, 1 stream": [None],
        "2 sets": [None, {0: 0.5}] * (n // 2) + [None] * (n % 2),
        f"{n} sets": [None] + [{0: 0.1 * (i + 1)} for i in range(n - 1)],
    }
    with tempfile.TemporaryDirectory() as folder:
        adapter = _adapter_for(args.model, Path(folder))
        options = LoadOptions(
            model_id="m",
            path=str(args.model),
            n_threads=args.threads,
            n_parallel=n,
            n_ctx=1024,
            speculative=False,
            lora=[LoraAdapter(str(adapter), scale=0.2)],
        )
        figures: dict[str, list[float]] = {name: [] for name in cases}
        with Engine(options) as engine:
            _round(engine, cases["1 set (attached)"])  # warm up
            for _ in range(args.rounds):
                for name, sets in cases.items():
                    figures[name].append(_round(engine, sets))
    base = statistics.median(figures["1 set (attached)"])
    print(f"{n} streams x {TOKENS} tokens, {args.threads} threads, {args.model.name}, median of {args.rounds} rounds")
    print(f"{'case':<20}{'tokens/s':>10}{'ratio':>8}")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"{name:<20}{median:>10.1f}{median / base:>8.2f}")


if __name__ == "__main__":
    main()
