"""KV snapshots: a conversation pushed out of the only slot comes back without re-evaluation."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.snapshots import Snapshot, SnapshotStore
from spark.types import (
    ChatRequest,
    CompletionRequest,
    Done,
    LoadOptions,
    Message,
    PromptDone,
    SamplingParams,
    SlotInfo,
)

P_A = "Numbers 0 1 2 3 4 5 6 7 8 9 and some words about a first topic"
P_B = "Completely different text that pushes the other one out"
P_C = P_A + " and then a lot more words follow"


def options(path: Path, **extra: object) -> LoadOptions:
    return LoadOptions(model_id="tiny", path=str(path), n_threads=1, n_ctx=512, n_parallel=1, **extra)  # type: ignore[arg-type]


@pytest.fixture
def engine(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(options(tiny_llama)) as e:
        yield e


def run(engine: Engine, request: CompletionRequest | ChatRequest, name: str = "r") -> Collector:
    c = Collector(name)
    engine.submit(name, request, c)
    assert isinstance(c.wait(), Done), c.events[-1]
    return c


def complete(prompt: str, max_tokens: int) -> CompletionRequest:
    return CompletionRequest(
        model="tiny", prompt=prompt, sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0)
    )


def slot_info(c: Collector) -> SlotInfo:
    info = c.events[0]
    assert isinstance(info, SlotInfo)
    return info


def test_a_conversation_pushed_out_comes_back_exactly(engine: Engine, tiny_llama: Path) -> None:
    n_a = engine.count_tokens(complete(P_A, 1))
    run(engine, complete(P_A, 1), "a")  # the slot now holds exactly A's prompt
    b = run(engine, complete(P_B, 4), "b")
    assert slot_info(b).cache == "none"
    c = run(engine, complete(P_C, 12), "c")
    info = slot_info(c)
    assert info.cache == "ram" and info.cached_tokens == n_a and info.restore_seconds is not None
    prompt_done = c.events[1]
    assert isinstance(prompt_done, PromptDone) and prompt_done.evaluated_tokens == info.prompt_tokens - n_a
    done = c.final
    assert isinstance(done, Done) and done.usage.cached_tokens == n_a
    with Engine(options(tiny_llama)) as fresh:
        cold = run(fresh, complete(P_C, 12), "cold")
    assert slot_info(cold).cached_tokens == 0
    assert c.text == cold.text and c.text


def test_a_chat_with_its_answer_comes_back_as_it_would_from_its_slot(engine: Engine, tiny_llama: Path) -> None:
    sampling = SamplingParams(max_tokens=8, temperature=0.0)
    turn1 = [Message("system", "You answer briefly."), Message("user", "Name a colour and a fruit please")]
    first = run(engine, ChatRequest(model="tiny", messages=turn1, sampling=sampling), "a")
    turn2 = [*turn1, Message("assistant", first.text), Message("user", "And another one?")]
    req2 = ChatRequest(model="tiny", messages=turn2, sampling=sampling)
    run(engine, complete(P_B, 4), "b")
    back = run(engine, req2, "a2")
    with Engine(options(tiny_llama)) as fresh:  # the same turns with nothing in between
        run(fresh, ChatRequest(model="tiny", messages=turn1, sampling=sampling), "a")
        kept = run(fresh, req2, "a2")
    assert slot_info(back).cache == "ram" and slot_info(kept).cache == "slot"
    assert slot_info(back).cached_tokens == slot_info(kept).cached_tokens
    assert slot_info(back).cached_tokens > engine.count_tokens(ChatRequest(model="tiny", messages=turn1))
    assert back.text == kept.text


def test_a_budget_too_small_keeps_nothing_and_answers_the_same(tiny_llama: Path) -> None:
    with Engine(options(tiny_llama, snapshot_ram_bytes=1024)) as e:
        run(e, complete(P_A, 1), "a")
        run(e, complete(P_B, 4), "b")
        c = run(e, complete(P_C, 12), "c")
        again = run(e, complete(P_C, 12), "c2")  # its own slot still works as before
    with Engine(options(tiny_llama, snapshot_ram_bytes=0)) as cold_engine:
        cold = run(cold_engine, complete(P_C, 12), "cold")
    assert slot_info(c).cache != "ram" and slot_info(c).cached_tokens < 4
    assert c.text == cold.text
    assert slot_info(again).cached_tokens == slot_info(again).prompt_tokens - 1 and again.text == cold.text


def test_a_snapshot_that_cannot_be_restored_falls_back_to_evaluation(engine: Engine, tiny_llama: Path) -> None:
    run(engine, complete(P_A, 1), "a")
    run(engine, complete(P_B, 4), "b")
    store = engine._snapshots.ram
    assert len(store) == 1
    snapshot, _ = store.best(engine._prep.prompt(complete(P_A, 1))[0])
    assert snapshot is not None
    ctypes.memset(snapshot.data, 0, snapshot.nbytes)  # not a state llama.cpp can read
    c = run(engine, complete(P_C, 12), "c")
    with Engine(options(tiny_llama)) as fresh:
        cold = run(fresh, complete(P_C, 12), "cold")
    assert slot_info(c).cache != "ram" and slot_info(c).cached_tokens < 4
    assert c.text == cold.text


def snap(tokens: list[int], nbytes: int) -> Snapshot:
    return Snapshot(tokens, (ctypes.c_uint8 * nbytes)())


def test_store_drops_the_least_recently_stored_past_its_budget() -> None:
    store = SnapshotStore(250)
    a, b, c = snap([1, 2, 3], 100), snap([4, 5, 6], 100), snap([7, 8], 100)
    assert store.put(a) == [] and store.put(b) == []
    assert store.used == 200
    assert store.put(c) == [a]  # a goes (to disk, where there is one)
    assert len(store) == 2 and store.used == 200
    assert store.best([1, 2, 3, 9]) == (None, 0)
    assert store.best([4, 5, 9]) == (b, 2)
    assert store.best([7, 8, 9]) == (c, 2)
    store.take(b)
    assert len(store) == 1 and store.used == 100 and store.best([4, 5]) == (None, 0)
    big = snap([1], 251)
    assert store.put(big) == [big]  # alone over the budget: not kept, nothing dropped
    assert store.best([7, 8]) == (c, 2)


def test_store_picks_the_longest_prefix_and_drops_what_a_new_snapshot_extends() -> None:
    store = SnapshotStore(10_000)
    short, other = snap([1, 2], 10), snap([1, 5, 6], 10)
    store.put(short)
    store.put(other)
    assert store.best([1, 5, 6, 7]) == (other, 3)
    assert store.best([1, 2, 3]) == (short, 2)
    longer = snap([1, 2, 3, 4], 10)
    store.put(longer)  # holds everything `short` holds
    assert len(store) == 2 and store.used == 20
    assert store.best([1, 2, 3]) == (longer, 3)
    one = snap([1], 1)
    assert SnapshotStore(-5).budget == 0 and SnapshotStore(0).put(one) == [one]


def test_a_private_snapshot_does_not_replace_one_that_may_go_to_disk() -> None:
    store = SnapshotStore(10_000)
    shared, private = snap([1, 2], 10), snap([1, 2, 3], 10)
    private.private = True
    store.put(shared)
    store.put(private)
    assert store.items() == [shared, private]
    longer = snap([1, 2, 3, 4], 10)
    store.put(longer)  # not private: it replaces both
    assert store.items() == [longer]
