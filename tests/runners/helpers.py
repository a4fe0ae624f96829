"""Helpers for runner tests: request builders, stream collection, process checks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import gguf
import psutil

from spark.types import ChatRequest, Done, Embeddings, Event, Failed, LoadOptions, Message, SamplingParams, TextDelta
from tiny_gguf import SLOW_CONTEXT

T = TypeVar("T")


def control_token_bias(path: Path) -> dict[int, float]:
    """A logit bias that forbids every control token (EOS included): generation runs to max_tokens."""
    field = gguf.GGUFReader(path).fields["tokenizer.ggml.token_type"]
    types = [int(field.parts[i][0]) for i in field.data]
    return {i: -100.0 for i, t in enumerate(types) if t == gguf.TokenType.CONTROL}


def slow_options(path: Path, **overrides: Any) -> LoadOptions:
    values: dict[str, Any] = {"n_ctx": SLOW_CONTEXT, "n_parallel": 1, "n_threads": 1, **overrides}
    return LoadOptions(model_id="slow", path=str(path), **values)


def long_chat(model: Path, model_id: str = "slow") -> ChatRequest:
    """A chat that generates until the context is full (many seconds on `slow_llama`)."""
    return ChatRequest(
        model=model_id,
        messages=[Message(role="user", content="go on")],
        sampling=SamplingParams(max_tokens=SLOW_CONTEXT - 64, logit_bias=control_token_bias(model), seed=1),
    )


def short_chat(model_id: str, n: int = 4, text: str = "hi") -> ChatRequest:
    return ChatRequest(
        model=model_id,
        messages=[Message(role="user", content=text)],
        sampling=SamplingParams(max_tokens=n, seed=7, temperature=0.0),
    )


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    """Run a test scenario on a fresh event loop, bounded so a bug cannot hang the suite."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def final(events: list[Event]) -> Event:
    assert events, "the stream ended without any event"
    assert isinstance(events[-1], (Done, Embeddings, Failed)), f"last event is {events[-1]!r}"
    assert not any(isinstance(e, (Done, Embeddings, Failed)) for e in events[:-1]), "a final event before the last"
    return events[-1]


async def wait_until(predicate: Callable[[], bool], timeout: float = 10, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


# Runner processes alive when the test began (tests/runners/conftest.py sets it): those of the servers
# other test files share, which live on while this worker runs other files.
runners_before: set[int] = set()


def runner_children() -> list[psutil.Process]:
    """Runner processes started by this test process since the test began, zombies included."""
    return [p for p in all_runner_children() if p.pid not in runners_before]


def all_runner_children() -> list[psutil.Process]:
    """Runner processes started by this test process, zombies included."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE or "spark.runners.child" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.ZombieProcess:
            found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def is_gone(pid: int) -> bool:
    """True when `pid` no longer exists (reaped, not a zombie)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_DEAD
    except psutil.NoSuchProcess:
        return True
