"""Turns: a burst of requests enters the app a few per turn of the event loop, in order; /health at once."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from spark.server.turns import Turns


def scope(path: str) -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "GET"}


async def nothing(*_: Any) -> Any:
    return None


def test_a_burst_enters_a_few_per_turn_in_arrival_order_and_health_never_waits() -> None:
    async def scenario() -> tuple[list[tuple[str, int]], int]:
        loop = asyncio.get_running_loop()
        turn = 0

        def tick() -> None:  # counts the turns of the loop
            nonlocal turn
            turn += 1
            loop.call_soon(tick)

        loop.call_soon(tick)
        entered: list[tuple[str, int]] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            entered.append((scope["path"], turn))

        turns = Turns(app, per_turn=3)
        burst = [asyncio.create_task(turns(scope(f"/v1/{i}"), nothing, nothing)) for i in range(10)]
        await asyncio.sleep(0)  # the burst has arrived; some of it waits
        waiting = turns.waiting
        await turns(scope("/health"), nothing, nothing)
        await asyncio.gather(*burst)
        return entered, waiting

    entered, waiting = asyncio.run(scenario())
    assert waiting == 7, "three entered in the first turn, the rest wait"
    assert [path for path, _ in entered if path != "/health"] == [f"/v1/{i}" for i in range(10)]
    health_turn = next(t for path, t in entered if path == "/health")
    per_turn = Counter(t for path, t in entered if path != "/health")
    assert max(per_turn.values()) == 3 and len(per_turn) == 4
    assert health_turn < max(per_turn), "/health was answered while the burst still waited"


def test_a_request_that_went_away_while_waiting_gives_its_turn_to_the_next() -> None:
    async def scenario() -> list[str]:
        entered: list[str] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            entered.append(scope["path"])

        turns = Turns(app, per_turn=1)
        first = asyncio.create_task(turns(scope("/v1/first"), nothing, nothing))
        gone = asyncio.create_task(turns(scope("/v1/gone"), nothing, nothing))
        last = asyncio.create_task(turns(scope("/v1/last"), nothing, nothing))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(first, last)
        assert gone.cancelled() and turns.waiting == 0
        return entered

    assert asyncio.run(scenario()) == ["/v1/first", "/v1/last"]


def test_other_scopes_pass_straight_through() -> None:
    async def scenario() -> list[str]:
        seen: list[str] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            seen.append(scope["type"])

        turns = Turns(app, per_turn=1)
        await turns({"type": "lifespan"}, nothing, nothing)
        await turns({"type": "websocket", "path": "/x"}, nothing, nothing)
        return seen

    assert asyncio.run(scenario()) == ["lifespan", "websocket"]
