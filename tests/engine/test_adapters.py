"""LoRA scales per request: each request answers as a model loaded with its scales would, side
by side with requests under other scales, and no cache crosses from one set of scales to another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.adapters import TURN_STEPS, AdapterTurns, request_scales
from spark.engine.native import Context, Model
from spark.engine.slots import Slot
from spark.errors import InvalidRequest
from spark.types import CompletionRequest, Done, Failed, LoadOptions, LoraAdapter, SamplingParams, SlotInfo

PROMPT = "Hello there, what comes next"


def _options(model: Path, *lora: LoraAdapter, **extra: Any) -> LoadOptions:
    return LoadOptions(model_id="t", path=str(model), n_threads=1, n_ctx=256, lora=list(lora), **extra)


def _request(lora: dict[int, float] | None = None, prompt: str = PROMPT) -> CompletionRequest:
    sampling = SamplingParams(max_tokens=8, temperature=0.0)
    return CompletionRequest(model="t", prompt=prompt, sampling=sampling, lora=lora)


def _run(engine: Engine, request: CompletionRequest, name: str = "r") -> Collector:
    answer = Collector(name)
    engine.submit(name, request, answer)
    assert isinstance(answer.wait(), Done), answer.final
    return answer


def _loaded_with(options: LoadOptions, *scales: float) -> str:
    """The greedy answer of the model loaded with its adapters at `scales`."""
    lora = [LoraAdapter(a.path, s) for a, s in zip(options.lora, scales, strict=True)]
    with Engine(msgspec.structs.replace(options, lora=lora, n_parallel=1)) as engine:
        return _run(engine, _request()).text


@pytest.fixture(scope="module")
def two_adapters(tiny_lora: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[LoraAdapter, LoraAdapter]:
    other = tiny_gguf.write_tiny_lora(tmp_path_factory.mktemp("lora") / "other.gguf", seed=5)
    return LoraAdapter(str(tiny_lora)), LoraAdapter(str(other), scale=0.5)


@pytest.fixture
def engine(tiny_llama: Path, two_adapters: tuple[LoraAdapter, ...]) -> Iterator[Engine]:
    with Engine(_options(tiny_llama, *two_adapters, n_parallel=3)) as e:
        yield e


def test_each_request_answers_as_the_model_loaded_with_its_scales(
    engine: Engine, tiny_llama: Path, two_adapters: tuple[LoraAdapter, ...]
) -> None:
    """Three requests under three sets of scales, batched side by side, then again one at a time
    (each slot's cache now holds another set's prompt): every answer is the one a model loaded
    with that set gives. Ids not named apply at 0; naming the attached scales is no change."""
    options = _options(tiny_llama, *two_adapters)
    asked: list[dict[int, float] | None] = [None, {}, {0: 0.25, 1: 1.0}]
    expected = [_loaded_with(options, 1.0, 0.5), _loaded_with(options, 0.0, 0.0), _loaded_with(options, 0.25, 1.0)]
    assert len(set(expected)) == 3  # the scales change the answer: the test can fail

    answers = [Collector(str(i)) for i in range(3)]
    for i, lora in enumerate(asked):
        engine.submit(str(i), _request(lora), answers[i])
    assert [a.wait() and a.text for a in answers] == expected
    assert len({cast(SlotInfo, a.events[0]).slot for a in answers}) == 3  # side by side, one slot each

    for lora, answer in zip(reversed(asked), reversed(expected), strict=True):
        assert _run(engine, _request(lora)).text == answer
    assert _run(engine, _request({0: 1.0, 1: 0.5})).text == expected[0]


def test_a_cache_serves_only_a_request_under_its_own_scales(tiny_llama: Path, tiny_lora: Path) -> None:
    with Engine(_options(tiny_llama, LoraAdapter(str(tiny_lora)), n_parallel=1)) as engine:
        _run(engine, _request({0: 0.5}))
        again = _run(engine, _request({0: 0.5}))
        assert cast(SlotInfo, again.events[0]).cached_tokens > 0  # same scales: the prompt is reused
        attached = _run(engine, _request())
        assert cast(SlotInfo, attached.events[0]).cached_tokens == 0
        other = _run(engine, _request({0: 0.7}))
        assert cast(SlotInfo, other.events[0]).cached_tokens == 0


def test_a_cache_under_a_request_s_own_scales_is_never_a_snapshot(tiny_llama: Path, tiny_lora: Path) -> None:
    """The attached scales' conversation pushed out by another set's comes back from RAM; the
    other set's own is not kept, so a request under the attached scales cannot be served from it."""
    with Engine(_options(tiny_llama, LoraAdapter(str(tiny_lora)), n_parallel=1)) as engine:
        _run(engine, _request(prompt="A first conversation about numbers"))
        _run(engine, _request({0: 0.5}, prompt="Another conversation under other scales"))
        back = _run(engine, _request(prompt="A first conversation about numbers and more"))
        assert cast(SlotInfo, back.events[0]).cache == "ram"
        other = cast(SlotInfo, _run(engine, _request(prompt="Another conversation under other scales")).events[0])
        assert other.cache != "ram" and other.cached_tokens < 4  # at most the start both prompts share


def test_an_adapter_id_the_model_has_not_is_refused(engine: Engine, tiny_llama: Path) -> None:
    for lora, says in (({2: 1.0}, "adapter id 2, but this model has adapters 0 to 1"), ({-1: 1.0}, "id -1")):
        answer = Collector()
        engine.submit("r", _request(lora), answer)
        failed = answer.wait()
        assert isinstance(failed, Failed) and failed.error.param == "lora" and says in failed.error.message
    with Engine(_options(tiny_llama)) as plain:
        assert _run(plain, _request({})).text  # an empty list on a model without adapters is no change
        answer = Collector()
        plain.submit("r", _request({0: 1.0}), answer)
        failed = answer.wait()
        assert isinstance(failed, Failed) and "this model has no LoRA adapters" in failed.error.message


def test_request_scales() -> None:
    adapters = [LoraAdapter("a", 1.0), LoraAdapter("b", 0.5)]
    assert request_scales(adapters, None) is None
    assert request_scales(adapters, {0: 1.0, 1: 0.5}) is None  # the attached set
    assert request_scales(adapters, {1: 0.5}) == (0.0, 0.5)
    assert request_scales(adapters, {}) == (0.0, 0.0)
    with pytest.raises(InvalidRequest, match="adapter id 5"):
        request_scales(adapters, {0: 1.0, 5: 1.0})


class _Context:
    def __init__(self) -> None:
        self.applied: list[list[float]] = []

    def set_adapters(self, model: Model, lora: list[LoraAdapter]) -> None:
        self.applied.append([a.scale for a in lora])


def test_the_sets_of_busy_slots_take_turns() -> None:
    ctx = _Context()
    turns = AdapterTurns(cast(Model, None), cast(Context, ctx), [LoraAdapter("a", 1.0)])
    slots = [Slot(i) for i in range(4)]
    for slot, lora in zip(slots, [None, (0.5,), None, (0.0,)], strict=True):
        slot.lora, slot.work = lora, cast(Any, object())
    steps = [turns.turn(slots) for _ in range(3 * TURN_STEPS + 1)]
    assert steps == [None] * TURN_STEPS + [(0.5,)] * TURN_STEPS + [(0.0,)] * TURN_STEPS + [None]
    assert ctx.applied == [[0.5], [0.0], [1.0]]  # once per turn
    slots[1].work = slots[3].work = None  # only the attached set is busy: it stays
    assert [turns.turn(slots) for _ in range(2 * TURN_STEPS)] == [None] * 2 * TURN_STEPS
    assert len(ctx.applied) == 3
    slots[1].work = cast(Any, object())  # another set comes: its turn once this one's is over
    assert [turns.turn(slots) for _ in range(TURN_STEPS)][-1] == (0.5,) and ctx.applied[-1] == [0.5]
    assert turns.turn([Slot(0)]) == (0.5,)  # nothing busy: nothing changes
