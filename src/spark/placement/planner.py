"""Where a model goes: a whole GPU, a split by layers, or the CPU; whom to unload; or refuse.

Order of preference: the whole model on one GPU (the one with most free
memory), then all layers split across GPUs in proportion to their free memory,
then as many layers as fit on the GPU(s) with the rest on the CPU, then the CPU
alone. Only when none of these fits are idle models unloaded, least recently
used first and never one with work in flight; `max_loaded_models` is honoured
the same way. When even that is not enough, `PlacementRefused` shows the
arithmetic.
"""

from __future__ import annotations

import time

import msgspec

from spark.errors import PlacementRefused
from spark.placement.devices import Device
from spark.placement.estimate import MemoryEstimate
from spark.types import LoadOptions
from spark.units import format_bytes


class LoadedModel(msgspec.Struct, frozen=True, kw_only=True):
    """A model that is loaded now, as the planner sees it."""

    model_id: str
    device_bytes: dict[str, int]  # device id -> bytes (measured when known, else estimated)
    busy: bool = False  # work in flight or queued
    last_used: float = 0.0  # time.monotonic() of its last request


class Eviction(msgspec.Struct, frozen=True):
    model_id: str
    reason: str


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """Where to load a model, and what to unload first."""

    devices: list[str]  # the devices its layers run on, GPUs first
    n_gpu_layers: int  # 0: CPU only; -1: every layer and the output head
    n_layers: int  # repeating layers of the model
    main_gpu: int = 0
    tensor_split: list[float] | None = None  # share of offloaded layers per GPU ordinal
    device_bytes: dict[str, int]  # what the model will take on each device
    free_bytes: dict[str, int]  # free on each of those devices once the evictions are done
    evictions: list[Eviction] = []

    def load_options(self, options: LoadOptions) -> LoadOptions:
        """`options` with this plan's GPU offload settings."""
        return msgspec.structs.replace(
            options, n_gpu_layers=self.n_gpu_layers, main_gpu=self.main_gpu, tensor_split=self.tensor_split
        )

    def explain(self) -> str:
        """One line for logs and timelines, e.g. `cuda:0 whole model, uses 4.2 GiB of the 20.1 GiB free`."""
        gpus = [d for d in self.devices if d != "cpu"]
        if not gpus:
            where = "cpu"
        elif self.n_gpu_layers < 0 and len(gpus) == 1:
            where = f"{gpus[0]} whole model"
        elif self.n_gpu_layers < 0:
            shares = "/".join(f"{round(100 * s)}" for s in self.tensor_split or [] if s > 0)
            where = f"{'+'.join(gpus)} split {shares}"
        else:
            where = f"{'+'.join(gpus)} {self.n_gpu_layers}/{self.n_layers + 1} layers + cpu"
        usage = [
            f"uses {format_bytes(self.device_bytes.get(d, 0))} of the {format_bytes(self.free_bytes.get(d, 0))} free"
            + (f" on {d}" if len(self.devices) > 1 else "")
            for d in self.devices
        ]
        text = f"{where}, {', '.join(usage)}"
        if self.evictions:
            text += "; evicted " + ", ".join(f"{e.model_id} ({e.reason})" for e in self.evictions)
        return text


class _Fit(msgspec.Struct, frozen=True):
    n_gpu_layers: int
    gpus: list[Device]  # the GPUs in the split, in ordinal order
    split: list[float]  # share per entry of `gpus`
    gpu_bytes: list[int]
    cpu_bytes: int


def plan_placement(
    estimate: MemoryEstimate,
    devices: list[Device],
    loaded: list[LoadedModel],
    *,
    max_loaded_models: int = 0,
    now: float | None = None,
) -> Plan:
    """Place a model with `estimate` on `devices`, given the models already `loaded`.

    Raises `PlacementRefused` with the arithmetic when it fits nowhere even
    after unloading every idle model, or when `max_loaded_models` is reached
    and every loaded model is busy.
    """
    now = time.monotonic() if now is None else now
    cpu = next((d for d in devices if d.kind == "cpu"), None)
    if cpu is None:
        raise ValueError("the device inventory has no CPU")
    gpus = sorted((d for d in devices if d.kind != "cpu"), key=lambda d: d.index or 0)
    idle = sorted((m for m in loaded if not m.busy), key=lambda m: m.last_used)
    evictions: list[Eviction] = []
    evicted: set[str] = set()

    if max_loaded_models > 0:
        for m in idle:
            if len(loaded) - len(evicted) < max_loaded_models:
                break
            evicted.add(m.model_id)
            evictions.append(
                Eviction(m.model_id, f"idle {_duration(now - m.last_used)}; max_loaded_models is {max_loaded_models}")
            )
        if len(loaded) - len(evicted) >= max_loaded_models:
            busy = [m.model_id for m in loaded if m.busy]
            raise PlacementRefused(
                f"max_loaded_models is {max_loaded_models} and all {len(busy)} loaded models are busy "
                f"({', '.join(busy)}); try again when one is idle"
            )

    fit = _fit(estimate, cpu, gpus, _available(devices, loaded, evicted))
    if fit is None:
        # unload idle models, least recently used first, until it fits ...
        tried: list[LoadedModel] = []
        found: _Fit | None = None
        for m in idle:
            if m.model_id in evicted:
                continue
            tried.append(m)
            found = _fit(estimate, cpu, gpus, _available(devices, loaded, evicted | {t.model_id for t in tried}))
            if found is not None:
                break
        if found is None:
            raise PlacementRefused(_refusal(estimate, devices, loaded, evicted | {m.model_id for m in idle}))
        fit = found
        # ... then keep any of them whose memory turned out not to be needed
        for m in reversed(tried[:-1]):
            rest = evicted | {t.model_id for t in tried if t is not m}
            if (smaller := _fit(estimate, cpu, gpus, _available(devices, loaded, rest))) is not None:
                tried.remove(m)
                fit = smaller
        evicted |= {t.model_id for t in tried}
        for m in tried:
            freed = ", ".join(f"{format_bytes(b)} on {d}" for d, b in m.device_bytes.items() if b)
            evictions.append(Eviction(m.model_id, f"idle {_duration(now - m.last_used)}; frees {freed}"))

    return _plan(estimate, fit, cpu, gpus, _available(devices, loaded, evicted), evictions)


def _available(devices: list[Device], loaded: list[LoadedModel], evicted: set[str]) -> dict[str, int]:
    """Free bytes per device once `evicted` are unloaded.

    A device's free figure already excludes what loaded models use; unloading
    adds theirs back. It is also bounded by the total less what the kept models
    use, which is what enforces `max_ram` and keeps memory-mapped weights (which
    the OS reports as available page cache) from being counted twice.
    """
    out = {}
    for d in devices:
        kept = sum(m.device_bytes.get(d.id, 0) for m in loaded if m.model_id not in evicted)
        freed = sum(m.device_bytes.get(d.id, 0) for m in loaded if m.model_id in evicted)
        out[d.id] = max(0, min(d.free_bytes + freed, d.total_bytes - kept))
    return out


def _fit(estimate: MemoryEstimate, cpu: Device, gpus: list[Device], avail: dict[str, int]) -> _Fit | None:
    """The preferred layout that fits in `avail`, or None."""

    def attempt(n_gpu_layers: int, chosen: list[Device], split: list[float]) -> _Fit | None:
        gpu_bytes, cpu_bytes = estimate.device_bytes(n_gpu_layers, split)
        if cpu_bytes > avail[cpu.id] or any(b > avail[g.id] for g, b in zip(chosen, gpu_bytes, strict=False)):
            return None
        return _Fit(n_gpu_layers, chosen, split, gpu_bytes, cpu_bytes)

    usable = [g for g in gpus if avail[g.id] > 0]
    by_room = sorted(usable, key=lambda g: -avail[g.id])
    for g in by_room:  # the whole model on one GPU
        if fit := attempt(-1, [g], [1.0]):
            return fit
    # per-GPU costs that do not depend on the layers, taken off before sharing out layers
    fixed = estimate.compute_bytes + estimate.gpu_context_bytes + estimate.projector_bytes + estimate.draft_bytes
    shares = [float(max(avail[g.id] - fixed, 0)) for g in usable]
    multi = len(usable) > 1 and sum(shares) > 0
    if multi and (fit := attempt(-1, usable, shares)):
        return fit
    layouts = [([g], [1.0]) for g in by_room] + ([(usable, shares)] if multi else [])
    best: _Fit | None = None
    for chosen, split in layouts:  # as many layers as fit, the rest on the CPU
        for n in range(estimate.n_layers, 0, -1):
            if best is not None and n <= best.n_gpu_layers:
                break
            if fit := attempt(n, chosen, split):
                best = fit
                break
    if best is not None:
        return best
    return attempt(0, [], [1.0])


def _plan(
    estimate: MemoryEstimate,
    fit: _Fit,
    cpu: Device,
    gpus: list[Device],
    avail: dict[str, int],
    evictions: list[Eviction],
) -> Plan:
    used = [(g, b) for g, b in zip(fit.gpus, fit.gpu_bytes, strict=False) if b > 0]
    tensor_split = None
    if used and len(gpus) > 1:
        # llama.cpp spreads layers over every visible GPU unless told otherwise
        tensor_split = [0.0] * (max(g.index or 0 for g in gpus) + 1)
        for g, share in zip(fit.gpus, fit.split, strict=False):
            tensor_split[g.index or 0] = share / (sum(fit.split) or 1.0)
    layer_devices = [g.id for g, _ in used]
    if not used or fit.n_gpu_layers >= 0:
        layer_devices.append(cpu.id)
    device_bytes = {g.id: b for g, b in used}
    device_bytes[cpu.id] = fit.cpu_bytes
    main = (max(used, key=lambda u: u[1])[0].index or 0) if used else 0
    return Plan(
        devices=layer_devices,
        n_gpu_layers=fit.n_gpu_layers if used else 0,
        n_layers=estimate.n_layers,
        main_gpu=main,
        tensor_split=tensor_split,
        device_bytes=device_bytes,
        free_bytes={d: avail[d] for d in device_bytes},
        evictions=evictions,
    )


def _refusal(estimate: MemoryEstimate, devices: list[Device], loaded: list[LoadedModel], evictable: set[str]) -> str:
    now = _available(devices, loaded, set())
    after = _available(devices, loaded, evictable)
    parts = [estimate.describe()]
    for d in devices:
        text = f"{d.id}" + (f" ({d.name})" if d.kind != "cpu" else "")
        text += f": {format_bytes(now[d.id])} free of {format_bytes(d.total_bytes)}"
        if after[d.id] != now[d.id]:
            text += f" ({format_bytes(after[d.id])} once idle models are unloaded)"
        here = [m for m in loaded if m.device_bytes.get(d.id, 0) > 0]
        if here:
            names = ", ".join(m.model_id + (" busy" if m.busy else "") for m in here)
            text += f", {len(here)} model{'s' if len(here) != 1 else ''} loaded ({names})"
        parts.append(text)
    return "; ".join(parts)


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
