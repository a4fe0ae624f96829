"""Where a request goes: the central's own models or a node's, in order of preference.

Among the ready places that have the model, prefer
  1. the one that served the same conversation last (affinity: its KV cache holds the prefix),
  2. one with the model loaded and a free slot,
  3. the least loaded,
  4. one where the model fits without unloading anything.
The order is also the retry order: a place that refuses before the first byte
hands the request to the next one.

Pure decisions: no I/O here (the registry supplies the places' capacity).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from typing import Final

import msgspec

from spark.fleet.report import Capacity
from spark.types import ChatRequest, CompletionRequest, Question

LOCAL: Final = "local"  # the central itself, as a place
AFFINITY_PROMPT_CHARS = 256  # of a completion prompt, what identifies its conversation
AFFINITY_ENTRIES = 10_000  # conversations remembered (least recently used forgotten first)
AFFINITY_SECONDS = 3600.0  # a conversation idle this long has left every cache anyway

# reasons, as the request log's `routed` step gives them
BY_AFFINITY: Final = "affinity"
BY_FREE_SLOT: Final = "loaded with a free slot"
BY_LOAD: Final = "least loaded"
BY_FIT: Final = "fits without unloading"
ONLY_PLACE: Final = "only place with the model"


class Place(msgspec.Struct, frozen=True):
    """A server that may take a request: its capacity as last reported, and what this server
    has sent it that is still running (fresher than any report)."""

    name: str
    capacity: Capacity
    in_flight: int = 0


class Choice(msgspec.Struct, frozen=True):
    name: str
    reason: str


def affinity_key(request: Question) -> str | None:
    """What identifies `request`'s conversation: the model and its leading messages, through the
    first user message (a chat's next turn keeps them); None for requests with no conversation."""
    if isinstance(request, ChatRequest):
        lead = []
        for message in request.messages:
            lead.append(msgspec.json.encode(message))
            if message.role == "user":
                break
        text = b"\x00".join(lead)
    elif isinstance(request, CompletionRequest):
        prompt = request.prompt[:AFFINITY_PROMPT_CHARS]
        text = prompt.encode() if isinstance(prompt, str) else msgspec.json.encode(prompt)
    else:
        return None
    return hashlib.sha256(request.model.encode() + b"\x01" + text).hexdigest()


class Affinity:
    """Which place served each conversation last (bounded, least recently used forgotten first)."""

    def __init__(self, entries: int = AFFINITY_ENTRIES, seconds: float = AFFINITY_SECONDS) -> None:
        self._entries = entries
        self._seconds = seconds
        self._last: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def get(self, key: str | None) -> str | None:
        if key is None or (seen := self._last.get(key)) is None:
            return None
        name, at = seen
        if time.monotonic() - at > self._seconds:
            del self._last[key]
            return None
        return name

    def served(self, key: str | None, name: str) -> None:
        if key is None:
            return
        self._last[key] = (name, time.monotonic())
        self._last.move_to_end(key)
        while len(self._last) > self._entries:
            self._last.popitem(last=False)

    def forget(self, name: str) -> None:
        """Drop every conversation of a place that left (its caches are gone)."""
        for key in [k for k, (n, _) in self._last.items() if n == name]:
            del self._last[key]


def load(place: Place) -> int:
    """Requests a place is busy with: what it reported, or what this server has sent it if more."""
    reported = place.capacity.slots_busy + place.capacity.queued
    return max(reported, place.in_flight)


def _free_slot(place: Place, model: str) -> bool:
    runner = place.capacity.runner(model)
    if runner is None:
        return False
    # requests sent since its report may have taken the free slots
    return runner.slots_free > 0 and place.in_flight < runner.slots_busy + runner.slots_free


def _fits(place: Place, model: str) -> bool:
    return place.capacity.runner(model) is not None or place.capacity.size_of(model) <= place.capacity.most_free_bytes


def choose(places: list[Place], model: str, last: str | None = None) -> list[Choice]:
    """The places that have `model`, best first, each with why it ranks there;
    `last`: the place that served this conversation before."""
    having = [p for p in places if p.capacity.has(model)]

    def rank(p: Place) -> tuple[bool, bool, int, bool, str]:
        return (p.name != last, not _free_slot(p, model), load(p), not _fits(p, model), p.name)

    ordered = sorted(having, key=rank)
    out = []
    for i, place in enumerate(ordered):
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        out.append(Choice(place.name, _reason(place, nxt, model, last) if len(ordered) > 1 else ONLY_PLACE))
    return out


def _reason(place: Place, runner_up: Place | None, model: str, last: str | None) -> str:
    """What put `place` ahead of the next one (the last one ranks by what it has)."""
    if place.name == last:
        return BY_AFFINITY
    if _free_slot(place, model) and (runner_up is None or not _free_slot(runner_up, model)):
        return BY_FREE_SLOT
    if runner_up is None or load(place) != load(runner_up):
        return BY_LOAD
    return BY_FIT if _fits(place, model) else BY_LOAD
