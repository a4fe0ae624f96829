"""LoRA scales per request (llama-server's `lora`): which scales a request runs under, and which
set the context decodes under at each step.

A KV cache holds keys and values computed under one set of scales. So a batch holds slots of
one set only (the sets of the active slots take turns), and a slot's cache serves only a request
of its own set. A set other than the attached one is `Scales` (one per adapter); None stands for
the scales the adapters were attached with, the only caches that become snapshots.
"""

from __future__ import annotations

from collections.abc import Sequence

from spark.engine.native import Context, Model
from spark.engine.slots import Scales, Slot
from spark.errors import InvalidRequest
from spark.types import LoraAdapter


def request_scales(adapters: Sequence[LoraAdapter], asked: dict[int, float] | None) -> Scales | None:
    """The scales a request asked for (adapters it does not name at 0), or None where that is the
    attached set; `InvalidRequest` naming `lora` for an id the model has no adapter for."""
    if asked is None:
        return None
    if unknown := sorted(i for i in asked if not 0 <= i < len(adapters)):
        has = f"adapters 0 to {len(adapters) - 1}" if adapters else "no LoRA adapters"
        raise InvalidRequest(f"lora names adapter id {unknown[0]}, but this model has {has}", param="lora")
    scales = tuple(asked.get(i, 0.0) for i in range(len(adapters)))
    return None if scales == tuple(a.scale for a in adapters) else scales


# Steps one set of scales decodes before the next set's turn: each change of scales costs llama.cpp
# a new reservation of its compute graphs (milliseconds), a few steps in a row share it.
TURN_STEPS = 4


class AdapterTurns:
    """Applies to the context the scales of the slots each decode step serves."""

    def __init__(self, model: Model, ctx: Context, adapters: Sequence[LoraAdapter]) -> None:
        self._model = model
        self._ctx = ctx
        self._adapters = adapters
        self._applied: Scales | None = None  # the context is created with the attached scales
        self._steps = 0  # steps decoded under them in a row

    def turn(self, slots: Sequence[Slot]) -> Scales | None:
        """The scales of this step's batch, now applied: the last step's for `TURN_STEPS` steps in a
        row, then the next set among the busy slots' sets, so that each set gets its turn."""
        if not self._adapters:  # the common case: nothing to choose, every step
            return None
        sets = list(dict.fromkeys(s.lora for s in slots if s.work is not None))
        if not sets:
            return self._applied
        if self._applied in sets and self._steps < TURN_STEPS:
            self._steps += 1
            return self._applied
        chosen = sets[(sets.index(self._applied) + 1) % len(sets) if self._applied in sets else 0]
        self._steps = 1
        if chosen != self._applied:
            scales = chosen if chosen is not None else [a.scale for a in self._adapters]
            self._ctx.set_adapters(
                self._model, [LoraAdapter(a.path, s) for a, s in zip(self._adapters, scales, strict=True)]
            )
            self._applied = chosen
        return chosen
