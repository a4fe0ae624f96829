#!/usr/bin/env python3
"""Turns of the Responses API, over HTTP against over one WebSocket.

    python bench/responses_turns.py --url http://127.0.0.1:8080 --key sk-spark-... [--model M]
                                    [--turns 20] [--rounds 3] [--tokens 8]

An agent makes many short responses in a row, each continuing the last (`previous_response_id`,
`store: false` over the socket, stored over HTTP). Each round makes `--turns` such responses over
HTTP (streamed, one keep-alive connection), then over one WebSocket, alternating the two.
Prints the median time per turn (first event to last) and the time to the first text, per transport.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httpx
import websockets

ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


def _http_turns(args: argparse.Namespace) -> list[tuple[float, float]]:
    timings = []
    previous = None
    with httpx.Client(base_url=args.url, headers={"authorization": f"Bearer {args.key}"}, timeout=120) as http:
        for turn in range(args.turns):
            body = {"model": args.model, "input": f"Turn {turn}.", "max_output_tokens": args.tokens, "stream": True}
            if previous:
                body["previous_response_id"] = previous
            started, first = time.perf_counter(), None
            with http.stream("POST", "/v1/responses", json=body) as response:
                for line in response.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    if first is None and event["type"] == "response.output_text.delta":
                        first = time.perf_counter()
                    if event["type"] in ENDS:
                        previous = event.get("response", {}).get("id")
            timings.append((time.perf_counter() - started, (first or time.perf_counter()) - started))
    return timings


async def _socket_turns(args: argparse.Namespace) -> list[tuple[float, float]]:
    timings = []
    previous = None
    url = args.url.replace("http", "ws", 1) + "/v1/responses"
    async with websockets.connect(url, additional_headers={"authorization": f"Bearer {args.key}"}) as socket:
        for turn in range(args.turns):
            event: dict[str, object] = {"type": "response.create", "model": args.model, "input": f"Turn {turn}."}
            event.update(max_output_tokens=args.tokens, store=False)
            if previous:
                event["previous_response_id"] = previous
            started, first = time.perf_counter(), None
            await socket.send(json.dumps(event))
            while True:
                message = json.loads(await socket.recv())
                if first is None and message["type"] == "response.output_text.delta":
                    first = time.perf_counter()
                if message["type"] in ENDS:
                    previous = message.get("response", {}).get("id")
                    break
            timings.append((time.perf_counter() - started, (first or time.perf_counter()) - started))
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--key", required=True)
    parser.add_argument("--model", default="smollm2-135m-instruct-q4_1")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=8)
    args = parser.parse_args()
    figures: dict[str, list[tuple[float, float]]] = {"HTTP": [], "WebSocket": []}
    _http_turns(args)  # warm up: the model loads
    for _ in range(args.rounds):
        figures["HTTP"] += _http_turns(args)
        figures["WebSocket"] += asyncio.run(_socket_turns(args))
    print(f"{args.turns} turns x {args.rounds} rounds, {args.tokens} tokens each, {args.model}")
    print(f"{'transport':<12}{'turn ms':>10}{'first text ms':>15}")
    for name, timings in figures.items():
        turn = statistics.median(t for t, _ in timings) * 1000
        first = statistics.median(f for _, f in timings) * 1000
        print(f"{name:<12}{turn:>10.1f}{first:>15.1f}")


if __name__ == "__main__":
    main()
