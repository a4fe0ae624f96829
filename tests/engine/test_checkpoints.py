"""A small sliding-window cache: the memory of a window, the answers and the prefix reuse of a full one.

The tiny Gemma 3 (`tiny_swa`) attends over 16 tokens. With micro-batches of 32,
llama.cpp keeps 256 cells per slot for it (16 + 32, rounded up to 256), half of
its 512-token context: a slot that went past 256 tokens can no longer be cut
back more than about 240 tokens without a checkpoint.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.checkpoints import PER_SLOT
from spark.engine.native import Context
from spark.library.metadata import read_gguf_info
from spark.placement.estimate import SWA_CHECKPOINTS, estimate_load, estimate_memory, model_shape
from spark.types import CompletionRequest, Done, LoadOptions, SamplingParams, SlotInfo

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
]
PROMPT = " ".join(WORDS[i % len(WORDS)] for i in range(0, 40, 3))


def options(path: Path, **extra: object) -> LoadOptions:
    base: dict[str, object] = {"n_threads": 1, "n_ctx": 512, "n_parallel": 1, "n_batch": 32}
    return LoadOptions(model_id="tiny", path=str(path), **{**base, **extra})  # type: ignore[arg-type]


def complete(prompt: str | list[int], max_tokens: int) -> CompletionRequest:
    return CompletionRequest(
        model="tiny", prompt=prompt, sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0)
    )


def run(engine: Engine, request: CompletionRequest, name: str = "r") -> Collector:
    c = Collector(name)
    engine.submit(name, request, c)
    assert isinstance(c.wait(), Done), c.events[-1]
    return c


def info(c: Collector) -> SlotInfo:
    first = c.events[0]
    assert isinstance(first, SlotInfo)
    return first


@pytest.fixture
def engine(tiny_swa: Path) -> Iterator[Engine]:
    with Engine(options(tiny_swa)) as e:
        yield e


def cold(tiny_swa: Path, request: CompletionRequest) -> str:
    with Engine(options(tiny_swa, snapshot_ram_bytes=0)) as fresh:
        c = run(fresh, request, "cold")
    assert info(c).cached_tokens == 0
    return c.text


def test_the_sliding_window_layers_keep_their_window_and_a_micro_batch(
    tiny_swa: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="spark.engine.llama"), Engine(options(tiny_swa, n_parallel=2)):
        pass
    assert "SWA KV cache, size = 256 cells" in caplog.text  # of 512 per slot
    assert "full-size SWA cache" not in caplog.text


def test_a_small_cache_answers_as_a_full_size_one(tiny_swa: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request = complete(PROMPT * 3, 300)
    with Engine(options(tiny_swa)) as e:
        small = run(e, request).text
    init = Context.__init__
    monkeypatch.setattr(Context, "__init__", lambda self, *a, **k: init(self, *a, **{**k, "swa_full": True}))
    with Engine(options(tiny_swa)) as e:
        full = run(e, request).text
    assert small == full and len(small) > 100


def test_a_conversation_that_goes_on_reuses_the_whole_cache(engine: Engine, tiny_swa: Path) -> None:
    run(engine, complete(PROMPT, 300), "a")  # past the small cache's 256 cells
    follow = [*engine._slots[0].cached, 40, 41, 42]  # the next turn: what the slot holds, and more
    c = run(engine, complete(follow, 20), "b")
    assert info(c).cache == "slot" and info(c).cached_tokens == len(follow) - 3
    assert c.text == cold(tiny_swa, complete(follow, 20))


def test_a_regenerated_long_answer_goes_back_to_the_prompts_checkpoint(engine: Engine, tiny_swa: Path) -> None:
    n_prompt = engine.count_tokens(complete(PROMPT, 1))
    first = run(engine, complete(PROMPT, 300), "a")
    (checkpoint,) = engine._snapshots.checkpoints._slots[0]
    # taken where the prompt's last chunk of 32 started
    assert len(checkpoint.tokens) == (n_prompt - 1) // 32 * 32 > 0
    again = run(engine, complete(PROMPT, 300), "again")  # 300 tokens back: past what the window holds
    assert info(again).cache == "slot" and info(again).cached_tokens == len(checkpoint.tokens)
    assert again.text == first.text == cold(tiny_swa, complete(PROMPT, 300))


def test_the_next_turns_checkpoint_is_where_its_cache_ended(engine: Engine, tiny_swa: Path) -> None:
    run(engine, complete(PROMPT, 100), "a")
    turn2 = [*engine._slots[0].cached, 40, 41, 42]
    first = run(engine, complete(turn2, 300), "b")
    assert [len(c.tokens) for c in engine._snapshots.checkpoints._slots[0]][-1] == len(turn2) - 3
    again = run(engine, complete(turn2, 300), "again")
    assert info(again).cached_tokens == len(turn2) - 3 and again.text == first.text


def test_without_a_checkpoint_a_long_way_back_is_evaluated_again(
    engine: Engine, tiny_swa: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Context, "save_window", lambda self, seq: None)  # llama.cpp gives no checkpoint
    run(engine, complete(PROMPT, 300), "a")
    again = run(engine, complete(PROMPT, 300), "again")
    assert info(again).cache == "none" and info(again).cached_tokens == 0
    assert again.text == cold(tiny_swa, complete(PROMPT, 300))


def test_a_short_way_back_needs_no_checkpoint(engine: Engine, tiny_swa: Path) -> None:
    n_prompt = engine.count_tokens(complete(PROMPT, 1))
    run(engine, complete(PROMPT, 40), "a")  # the window still holds where the prompt ends
    again = run(engine, complete(PROMPT, 40), "again")
    assert info(again).cached_tokens == n_prompt - 1


def test_checkpoints_of_another_conversation_serve_nothing(engine: Engine, tiny_swa: Path) -> None:
    other = PROMPT.replace("alpha", "omega")
    run(engine, complete(PROMPT, 300), "a")
    run(engine, complete(other, 300), "b")  # the slot's cache parts from A's at its first tokens
    kept = engine._snapshots.checkpoints._slots[0]
    assert len(kept) == 1 and list(kept[0].tokens) == engine._prep.prompt(complete(other, 1))[0][: len(kept[0].tokens)]
    again = run(engine, complete(other, 300), "again")
    assert again.text == cold(tiny_swa, complete(other, 300))


def test_each_slot_keeps_its_newest_checkpoints(engine: Engine) -> None:
    text = PROMPT
    for turn in range(PER_SLOT + 2):
        text += run(engine, complete(text, 20), f"t{turn}").text + " next"
    kept = engine._snapshots.checkpoints._slots[0]
    assert len(kept) == PER_SLOT
    assert [len(c.tokens) for c in kept] == sorted(len(c.tokens) for c in kept)


@pytest.mark.parametrize(("n_batch", "n_parallel"), [(32, 1), (32, 3), (512, 2)])
def test_the_memory_estimate_follows_the_cache_and_checkpoints_the_engine_makes(
    tiny_swa: Path, caplog: pytest.LogCaptureFixture, n_batch: int, n_parallel: int
) -> None:
    shape = model_shape(read_gguf_info(tiny_swa))
    load = options(tiny_swa, n_batch=n_batch, n_parallel=n_parallel)
    estimate = estimate_load(shape, load)
    full = estimate_memory(shape, n_ctx=512, n_parallel=n_parallel, n_batch=n_batch, swa_full=True)
    with caplog.at_level(logging.DEBUG, logger="spark.engine.llama"), Engine(load) as e:
        run(e, complete(PROMPT * 3, 20))
        run(e, complete([*e._slots[0].cached, 40, 41], 1))  # its checkpoint: where the cache ended
        kept = e._snapshots.checkpoints._slots[0]
        checkpoint = sum(len(c.data) for c in kept) // len(kept)
    cells = int(re.findall(r"SWA KV cache, size = (\d+) cells", caplog.text)[-1])
    assert estimate.kv_bytes == full.kv_bytes * cells // 512
    # the checkpoints' room, per checkpoint, is what one holds (within its cells' positions)
    room = (estimate.host_bytes - full.host_bytes) // (n_parallel * SWA_CHECKPOINTS)
    assert SWA_CHECKPOINTS == PER_SLOT and room <= checkpoint <= 1.1 * room
