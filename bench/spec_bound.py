#!/usr/bin/env python3
"""How fast speculative decoding can make an answer on this machine: the drafter against its bounds.

    python bench/spec_bound.py [--model GGUF] [--threads 2] [--only code,quote,long]
                               [--flash-attention auto|on|off]

Wall-clock rounds of spec_bench.py swing by more than a drafter change moves them, and a greedy answer
itself changes between runs (near ties broken otherwise by batched evaluation), so this replays one
answer per workload offline, deterministically:

1. the engine answers each workload of spec_bench.py once, without speculation (greedy);
2. a llama.cpp context measures what a decode step of 1 to 17 tokens (logits for every token, as
   verifying a draft needs) costs at the depth of that answer's middle;
3. the answer is replayed through the engine's `NgramDrafter` with those costs (`DecodeCosts` learns
   them as in the engine; a draft holds while it equals the answer), and through two bounds: the
   n-gram oracle (the same guesses, verified only as far as they hold) and perfect drafts (every step
   verifies MAX_DRAFT right tokens).

Prints, per workload, the speed-up over plain decoding of each: how much of what n-gram lookup can
give the drafter gets, and how much the machine's batch costs allow at all.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from spec_bench import SYSTEM, WORKLOADS, smollm2

from spark.engine import Engine
from spark.engine.native import Batch, Context, Model
from spark.engine.speculative import MAX_DRAFT, DecodeCosts, NgramDrafter
from spark.types import ChatRequest, Done, Event, Failed, LoadOptions, Message, SamplingParams, TextDelta

SIZES = range(1, MAX_DRAFT + 2)
REPEATS = 9


def answer(engine: Engine, prompt: str, max_tokens: int) -> str:
    """The engine's greedy answer to `prompt` as a chat message."""
    pieces: list[str] = []
    done: list[Event] = []

    def emit(event: Event) -> None:
        if isinstance(event, TextDelta):
            pieces.append(event.text)
        elif isinstance(event, (Done, Failed)):
            done.append(event)

    request = ChatRequest(
        model="m",
        messages=[Message(role="user", content=prompt)],
        sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
    )
    engine.submit("bound", request, emit)
    while not done:
        time.sleep(0.01)
    if isinstance(done[0], Failed):
        raise SystemExit(f"the engine failed: {done[0]}")
    return "".join(pieces)


def step_costs(model: Model, depth: int, threads: int, flash_attention: str) -> dict[int, float]:
    """Seconds per decode step of each size in SIZES, every token with logits, at `depth`."""
    ctx = Context(
        model,
        n_ctx=depth + 2 * MAX_DRAFT + 64,
        n_seq_max=1,
        n_batch=512,
        n_ubatch=512,
        n_threads=threads,
        kv_type="f16",
        flash_attention=flash_attention,
        embedding=False,
    )
    batch, rng = Batch(512), random.Random(0)
    for pos in range(0, depth, 512):
        batch.clear()
        batch.add_run([rng.randrange(1000, 20000) for _ in range(min(512, depth - pos))], pos, 0, "last")
        batch.decode(ctx)
    costs = {}
    for n in SIZES:
        seconds = []
        for _ in range(REPEATS):
            batch.clear()
            batch.add_run([rng.randrange(1000, 20000) for _ in range(n)], depth, 0, "all")
            started = time.perf_counter()
            batch.decode(ctx)
            seconds.append(time.perf_counter() - started)
            ctx.trim(0, depth)
        costs[n] = statistics.median(seconds)
    ctx.close()
    return costs


def replay(prompt: list[int], output: list[int], table: dict[int, float], *, oracle: bool) -> float:
    """Seconds to produce `output` with n-gram drafts at `table`'s costs: as the drafter chooses, or
    (`oracle`) verifying exactly the guessed tokens that hold, where that pays."""
    drafter, costs, seconds, i = NgramDrafter(prompt), DecodeCosts(), 0.0, 0
    while i < len(output):
        guess = drafter.draft(MAX_DRAFT, _Free() if oracle else costs)
        held = 0
        while held < len(guess) and i + held < len(output) and guess[held] == output[i + held]:
            held += 1
        if oracle:
            guess = guess[:held] if held and table[held + 1] < (held + 1) * table[1] else []
        step = table[len(guess) + 1]
        seconds += step
        costs.observe(len(guess) + 1, step)
        if guess and not oracle:
            drafter.verified(len(guess), held)
        for token in output[i : i + held + 1] if guess else output[i : i + 1]:
            drafter.push(token)
        i += held + 1 if guess else 1
    return seconds


class _Free(DecodeCosts):
    """Every batch at one step's cost: the drafter offers its longest guess."""

    def seconds(self, n_tokens: int) -> float:
        return 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a GGUF chat model (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="code,quote,long", help="workloads, comma-separated")
    parser.add_argument("--flash-attention", choices=("auto", "on", "off"), default="auto")
    args = parser.parse_args()
    model_path = args.model or smollm2()
    options = LoadOptions(
        model_id="m",
        path=str(model_path),
        n_ctx=4096,
        n_threads=args.threads,
        speculative=False,
        flash_attention=args.flash_attention,
        system_prompt=SYSTEM,  # and greedy without DRY, as spec_bench asks every server
    )
    workloads = args.only.split(",")
    with Engine(options) as engine:
        answers = {w: answer(engine, *WORKLOADS[w]) for w in workloads}
    model = Model(str(model_path))
    print(
        f"model {model_path.name}, {args.threads} threads, flash attention {args.flash_attention}; "
        "one greedy answer each\n"
    )
    print("| workload | tokens | depth | step ms (1 / 4 / 17 tokens) | drafter | n-gram oracle | perfect drafts |")
    print("|---|---|---|---|---|---|---|")
    for workload in workloads:
        prompt = model.tokenize(WORKLOADS[workload][0], add_special=True, parse_special=False)
        output = model.tokenize(answers[workload], add_special=False, parse_special=False)
        depth = len(prompt) + len(output) // 2
        table = step_costs(model, depth, args.threads, args.flash_attention)
        plain = len(output) * table[1]
        drafter = plain / replay(prompt, output, table, oracle=False)
        oracle = plain / replay(prompt, output, table, oracle=True)
        perfect = table[1] * len(SIZES) / table[len(SIZES)]
        steps = " / ".join(f"{table[n] * 1000:.1f}" for n in (1, 4, len(SIZES)))
        print(
            f"| {workload} | {len(output)} | {depth} | {steps} | {drafter:.2f}x | {oracle:.2f}x | {perfect:.2f}x |",
            flush=True,
        )
    model.close()


if __name__ == "__main__":
    main()
