"""Failures inside the decode loop end one request, never the engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.native import Batch
from spark.types import (
    ChatRequest,
    Done,
    Event,
    Failed,
    LoadOptions,
    Message,
    SamplingParams,
    TextDelta,
)


@pytest.fixture
def engine(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_parallel=2)) as e:
        yield e


def chat(n: int = 6) -> ChatRequest:
    return ChatRequest(model="tiny", messages=[Message("user", "hi")], sampling=SamplingParams(max_tokens=n, seed=1))


def finish(engine: Engine, name: str = "ok") -> Event:
    c = Collector(name)
    engine.submit(name, chat(), c)
    return c.wait()


def test_a_raising_callback_fails_only_its_request(engine: Engine) -> None:
    events: list[Event] = []

    def broken(event: Event) -> None:
        events.append(event)
        if isinstance(event, TextDelta):
            raise RuntimeError("client went away")

    engine.submit("broken", chat(), broken)
    other = finish(engine)
    assert isinstance(other, Done) and other.usage.completion_tokens == 6
    assert isinstance(events[-1], Failed) and "client went away" in events[-1].error.message
    assert sum(isinstance(e, (Done, Failed)) for e in events) == 1
    assert engine.busy == 0


def test_no_kv_room_retries_with_smaller_prompt_chunks(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Batch.decode
    refused: list[int] = []

    def decode(self: Batch, ctx: object) -> int:
        if self.n > 4 and not refused:  # the first prompt batch finds "no KV slot"
            refused.append(self.n)
            return 1
        return real(self, ctx)

    monkeypatch.setattr(Batch, "decode", decode)
    done = finish(engine)
    assert refused and isinstance(done, Done) and done.usage.completion_tokens == 6
    assert engine._prompt_budget < engine._batch.capacity


def test_a_failing_decode_fails_the_batch_then_recovers(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_parallel=1)) as engine:
        first = finish(engine, "first")
        assert isinstance(first, Done)
        real = Batch.decode
        calls: list[int] = []

        def decode(self: Batch, ctx: object) -> int:
            calls.append(self.n)
            return -3 if len(calls) == 1 else real(self, ctx)

        monkeypatch.setattr(Batch, "decode", decode)
        failed = finish(engine, "second")
        assert isinstance(failed, Failed) and failed.error.code == "runner_failed" and "-3" in failed.error.message
        done = finish(engine, "third")
        # the sequence the failed decode may have half-written was dropped, not reused
        assert isinstance(done, Done) and done.usage.cached_tokens == 0
        assert first.usage.prompt_tokens == done.usage.prompt_tokens
