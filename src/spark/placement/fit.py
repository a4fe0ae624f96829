"""Would a model fit on this machine now? The planner's answer as a verdict, for people to read.

`judge` asks the planner where a model with a given estimate would go, given
the models loaded now, without loading anything: it fits (where), fits only
once idle models are unloaded (which ones), or does not fit (the arithmetic).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from spark.errors import PlacementRefused
from spark.placement.devices import Device
from spark.placement.estimate import MemoryEstimate
from spark.placement.planner import LoadedModel, plan_placement

Verdict = Literal["fits", "fits_after_unloading", "does_not_fit"]


class Fit(msgspec.Struct, frozen=True, kw_only=True):
    """Where a model would go now, and the arithmetic behind it."""

    verdict: Verdict
    devices: list[str] = []  # where its layers would run (cpu, cuda:0, ...); empty when it does not fit
    unload: list[str] = []  # idle models unloaded first
    n_ctx: int  # tokens per slot the estimate is for
    n_parallel: int
    kv_type: str
    total_bytes: int  # with the model on the CPU alone
    weights_bytes: int
    kv_bytes: int
    buffers_bytes: int
    grammar_bytes: int = 0  # a grammar sampler's working set (JSON mode, schemas, forced tool calls)
    projector_bytes: int = 0
    draft_bytes: int = 0  # the draft model, its cache and buffers
    adapter_bytes: int = 0  # LoRA adapters
    device_bytes: dict[str, int] = {}  # what it would take on each device
    arithmetic: str  # `needs 1.1 GiB (weights ...); cpu, uses 1.1 GiB of the 12.0 GiB free`, or the refusal


def judge(
    estimate: MemoryEstimate,
    devices: list[Device],
    loaded: list[LoadedModel],
    *,
    max_loaded_models: int = 0,
) -> Fit:
    """The verdict for a model with `estimate`, given the models `loaded` now."""
    try:
        plan = plan_placement(estimate, devices, loaded, max_loaded_models=max_loaded_models)
    except PlacementRefused as refused:
        return _fit(estimate, "does_not_fit", refused.message)
    return _fit(
        estimate,
        "fits_after_unloading" if plan.evictions else "fits",
        f"{estimate.describe()}; {plan.explain()}",
        devices=list(plan.devices),
        unload=[e.model_id for e in plan.evictions],
        device_bytes=dict(plan.device_bytes),
    )


def _fit(
    estimate: MemoryEstimate,
    verdict: Verdict,
    arithmetic: str,
    *,
    devices: list[str] | None = None,
    unload: list[str] | None = None,
    device_bytes: dict[str, int] | None = None,
) -> Fit:
    return Fit(
        verdict=verdict,
        devices=devices or [],
        unload=unload or [],
        n_ctx=estimate.n_ctx,
        n_parallel=estimate.n_parallel,
        kv_type=estimate.kv_type,
        total_bytes=estimate.total_bytes,
        weights_bytes=estimate.weights_bytes,
        kv_bytes=estimate.kv_bytes,
        buffers_bytes=estimate.buffers_bytes,
        grammar_bytes=estimate.grammar_bytes,
        projector_bytes=estimate.projector_bytes,
        draft_bytes=estimate.draft_bytes,
        adapter_bytes=estimate.adapter_bytes,
        device_bytes=device_bytes or {},
        arithmetic=arithmetic,
    )
