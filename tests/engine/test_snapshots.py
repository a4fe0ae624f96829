"""KV snapshots: a conversation pushed out of the only slot comes back without re-evaluation."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.native import Batch, Context, Model, holds_window
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
from tiny_gguf import TINY_WINDOW

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


def answer_cold(model: Path, request: CompletionRequest) -> str:
    with Engine(options(model)) as fresh:
        cold = run(fresh, request, "cold")
    assert slot_info(cold).cached_tokens == 0
    return cold.text


def test_a_sliding_window_models_conversation_pushed_out_comes_back_exactly(tiny_swa: Path) -> None:
    # llama.cpp saves only the last window of it: a prompt that extends it whole can still use it.
    with Engine(options(tiny_swa)) as e:
        n_a = e.count_tokens(complete(P_A, 1))
        assert n_a > TINY_WINDOW
        run(e, complete(P_A, 1), "a")
        run(e, complete(P_B, 4), "b")
        c = run(e, complete(P_C, 12), "c")
        again = run(e, complete(P_C + " again", 12), "again")  # its slot, put back from the snapshot, serves on
    info = slot_info(c)
    assert info.cache == "ram" and info.cached_tokens == n_a and info.restore_seconds is not None
    assert c.text == answer_cold(tiny_swa, complete(P_C, 12)) and c.text
    assert slot_info(again).cache == "slot" and slot_info(again).cached_tokens > n_a


def test_a_sliding_window_snapshot_that_cannot_serve_a_prompt_leaves_it_to_the_slot(tiny_swa: Path) -> None:
    # D shares more with A's snapshot than with the slot (holding B), but not all of it: the window
    # before where D leaves A is not in the snapshot. Restoring it would empty the slot for nothing.
    b = P_A + " but other words this time"
    d = P_A + " and then a lot of something else"
    with Engine(options(tiny_swa)) as e:
        run(e, complete(P_C, 1), "a")
        run(e, complete(b, 1), "b")  # A leaves the slot for RAM; the slot keeps P_A for B
        assert len(e._snapshots.ram) == 1
        back = run(e, complete(d, 12), "d")
        n_shared = e.count_tokens(complete(P_A, 1))
    info = slot_info(back)
    assert info.cache == "slot" and info.cached_tokens == n_shared and info.restore_seconds is None
    assert back.text == answer_cold(tiny_swa, complete(d, 12))


def test_a_snapshot_put_back_that_serves_less_than_expected_is_evaluated_with_a_warning(
    tiny_swa: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    d = P_A + " and then a lot of something else"
    monkeypatch.setattr(Context, "restored_floor", lambda self, n_tokens: 0)  # as if it held every position
    with Engine(options(tiny_swa)) as e:
        run(e, complete(P_C, 1), "a")
        run(e, complete(P_B, 1), "b")
        back = run(e, complete(d, 12), "d")
    info = slot_info(back)
    assert info.cache == "none" and info.cached_tokens == 0 and info.restore_seconds is not None
    assert "cannot serve" in caplog.text
    assert back.text == answer_cold(tiny_swa, complete(d, 12))


@pytest.mark.parametrize("window", [0, TINY_WINDOW], ids=["full attention", "sliding window"])
def test_a_restored_sequence_is_cut_only_where_its_window_allows(window: int, tiny_llama: Path, tiny_swa: Path) -> None:
    model = Model(str(tiny_swa if window else tiny_llama))
    ctx = Context(
        model,
        n_ctx=256,
        n_seq_max=1,
        n_batch=64,
        n_ubatch=64,
        n_threads=1,
        kv_type="f16",
        flash_attention="off",
        embedding=False,
    )
    try:
        batch = Batch(64)
        batch.add_run(list(range(10, 50)), 0, 0, "last")
        assert batch.decode(ctx) == 0
        assert ctx.keep(0, 30)  # a live cache holds every position
        data = ctx.save(0)
        assert data is not None
        floor = ctx.restored_floor(30)
        assert floor == (30 if window else 0) and ctx.restored_floor(window) == 0
        for n in (29, 30):
            ctx.forget(0)
            assert ctx.restore(0, data) and ctx.last_position(0) == 29
            assert ctx.keep(0, n) == (n >= floor)  # llama.cpp put back what the floor says, no more
    finally:
        ctx.close()
        model.close()


def test_the_window_rule() -> None:
    assert holds_window(-1, 0, 0) and holds_window(0, 12, 0)
    assert not holds_window(-1, 12, 0)  # cut to 12 positions, yet holding none
    assert holds_window(0, 12, 16) and holds_window(84, 100, 16)
    assert not holds_window(85, 100, 16)  # position 84 is in the window of the token at 100
    assert holds_window(99, 100, 0)  # a recurrent state: whole, at its last position


def test_store_picks_the_longest_prefix_a_snapshot_can_serve() -> None:
    store = SnapshotStore(10_000)
    short, long = snap([1, 2, 3], 10), snap([1, 2, 3, 7, 8], 10)
    long.private = True  # so that it does not replace `short`
    store.put(short)
    store.put(long)

    def whole(tokens: Sequence[int], n: int) -> bool:
        return n == len(tokens)

    assert store.best([1, 2, 3, 7, 5]) == (long, 4)
    assert store.best([1, 2, 3, 7, 5], whole) == (short, 3)
    assert store.best([1, 2, 9], whole) == (None, 0)


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
