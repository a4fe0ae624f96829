"""Where routing sends a request: affinity, then a free slot, then load, then fit."""

from __future__ import annotations

from spark.fleet.report import Capacity, DeviceMemory, InstalledModel, LoadedRunner
from spark.fleet.routing import (
    BY_AFFINITY,
    BY_FIT,
    BY_FREE_SLOT,
    BY_LOAD,
    ONLY_PLACE,
    Affinity,
    Place,
    affinity_key,
    choose,
)
from spark.types import ChatRequest, CompletionRequest, EmbeddingRequest, Message

MODEL = "m"
GiB = 1 << 30


def place(
    name: str,
    *,
    loaded: tuple[int, int] | None = None,
    busy: int = 0,
    free_bytes: int = 8 * GiB,
    size: int = GiB,
    in_flight: int = 0,
    models: tuple[str, ...] = (MODEL,),
) -> Place:
    runners = [LoadedRunner(MODEL, "ready", loaded[0], loaded[1], 0)] if loaded else []
    capacity = Capacity(
        models=[InstalledModel(m, size) for m in models],
        runners=runners,
        devices=[DeviceMemory("cpu", free_bytes, 16 * GiB)],
        slots_busy=busy + (loaded[0] if loaded else 0),
        slots_free=loaded[1] if loaded else 0,
    )
    return Place(name, capacity, in_flight)


def names(places: list[Place], last: str | None = None) -> list[str]:
    return [c.name for c in choose(places, MODEL, last)]


def test_only_places_with_the_model_are_chosen() -> None:
    choices = choose([place("a", models=("other",)), place("b")], MODEL)
    assert [(c.name, c.reason) for c in choices] == [("b", ONLY_PLACE)]
    assert choose([place("a", models=("other",))], MODEL) == []


def test_affinity_comes_first_even_when_busier() -> None:
    places = [place("a", loaded=(3, 1)), place("b", loaded=(0, 4))]
    choices = choose(places, MODEL, last="a")
    assert [c.name for c in choices] == ["a", "b"] and choices[0].reason == BY_AFFINITY


def test_a_free_slot_beats_an_idle_place_that_must_load() -> None:
    choices = choose([place("a"), place("b", loaded=(2, 2))], MODEL)
    assert [c.name for c in choices] == ["b", "a"] and choices[0].reason == BY_FREE_SLOT


def test_a_full_runner_counts_as_no_free_slot_once_requests_were_sent_since_its_report() -> None:
    # b reported 1 free slot, but the central has sent it 4 requests since
    assert names([place("a", loaded=(1, 3), in_flight=1), place("b", loaded=(3, 1), in_flight=4)]) == ["a", "b"]


def test_the_least_loaded_goes_first_then_what_fits() -> None:
    choices = choose([place("a", busy=3), place("b", busy=1)], MODEL)
    assert [c.name for c in choices] == ["b", "a"] and choices[0].reason == BY_LOAD
    choices = choose([place("a", free_bytes=GiB // 2), place("b")], MODEL)
    assert [c.name for c in choices] == ["b", "a"] and choices[0].reason == BY_FIT


def test_live_in_flight_counts_beat_a_stale_report() -> None:
    assert names([place("a", in_flight=2), place("b", in_flight=1)]) == ["b", "a"]


def test_the_affinity_key_is_the_same_for_the_next_turn_of_a_chat() -> None:
    system, user = Message("system", "be brief"), Message("user", "hello")
    first = ChatRequest(model=MODEL, messages=[system, user])
    later = ChatRequest(model=MODEL, messages=[system, user, Message("assistant", "hi"), Message("user", "more")])
    other = ChatRequest(model=MODEL, messages=[system, Message("user", "goodbye")])
    assert affinity_key(first) == affinity_key(later) != affinity_key(other)
    assert affinity_key(ChatRequest(model="n", messages=[system, user])) != affinity_key(first)
    prompt = "x" * 300
    assert affinity_key(CompletionRequest(model=MODEL, prompt=prompt)) == affinity_key(
        CompletionRequest(model=MODEL, prompt=prompt + " and more")
    )
    assert affinity_key(EmbeddingRequest(model=MODEL, input=["a"])) is None


def test_affinity_remembers_the_last_place_within_bounds() -> None:
    affinity = Affinity(entries=2)
    affinity.served("k1", "a")
    affinity.served("k2", "b")
    affinity.served("k1", "b")  # the conversation moved
    affinity.served("k3", "a")  # k2, the least recently used, is forgotten
    assert (affinity.get("k1"), affinity.get("k2"), affinity.get("k3")) == ("b", None, "a")
    affinity.forget("a")
    assert affinity.get("k3") is None and affinity.get(None) is None
    expired = Affinity(seconds=0)
    expired.served("k", "a")
    assert expired.get("k") is None
