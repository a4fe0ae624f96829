"""The memory Spark may place models in: CPU RAM and NVIDIA GPUs (through NVML)."""

from __future__ import annotations

import logging
import os
from typing import Any, Literal

import msgspec
import psutil

from spark.settings import Settings

log = logging.getLogger(__name__)

DeviceKind = Literal["cpu", "cuda"]


class Device(msgspec.Struct, frozen=True, kw_only=True):
    """One place a model's memory can live, with what is free there now.

    `index` is the CUDA ordinal llama.cpp uses for a GPU (for `main_gpu` and
    `tensor_split`); None for the CPU. `limit` says what bounded the figures.
    """

    id: str  # "cpu", "cuda:0", ...
    kind: DeviceKind
    name: str
    total_bytes: int
    free_bytes: int
    index: int | None = None
    limit: str = ""


def detect_devices(settings: Settings) -> list[Device]:
    """The CPU first, then every NVIDIA GPU NVML reports (none without a driver)."""
    return [cpu_device(settings), *gpu_devices(settings)]


def cpu_device(settings: Settings) -> Device:
    """System RAM: its total and what is available, capped by `max_ram` when set."""
    mem = psutil.virtual_memory()
    total, free, limit = int(mem.total), int(mem.available), "available RAM"
    cap = settings.max_ram_bytes
    if cap is not None and cap < total:
        total, free, limit = cap, min(free, cap), f"max_ram {settings.max_ram}"
    return Device(id="cpu", kind="cpu", name="CPU RAM", total_bytes=total, free_bytes=free, limit=limit)


def gpu_devices(settings: Settings) -> list[Device]:
    """NVIDIA GPUs as CUDA numbers them, less `gpu_reserve` each; [] without NVML.

    CUDA_VISIBLE_DEVICES (indices or UUIDs) is honoured, so `cuda:N` is the
    device llama.cpp calls N. The ordinals assume CUDA_DEVICE_ORDER=PCI_BUS_ID,
    NVML's own order, in the runner's environment.
    """
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:  # no driver or no library: a machine without GPUs
        log.debug("NVML unavailable: %s", e)
        return []
    try:
        return _list_gpus(pynvml, settings.gpu_reserve_bytes, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except pynvml.NVMLError as e:
        log.warning("could not read the GPUs through NVML: %s", e)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _list_gpus(nvml: Any, reserve: int, visible: str | None) -> list[Device]:
    found = []
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        name = nvml.nvmlDeviceGetName(handle)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        found.append((str(i), _text(uuid), _text(name), int(mem.total), int(mem.free)))
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        chosen = []
        for w in wanted:
            match = next((g for g in found if g[0] == w or g[1].startswith(w)), None)
            if match is None:
                break  # CUDA stops at the first entry it cannot resolve
            chosen.append(match)
        found = chosen
    limit = f"NVML free less gpu_reserve {reserve // 2**20} MiB"
    return [
        Device(
            id=f"cuda:{ordinal}",
            kind="cuda",
            name=name,
            total_bytes=max(0, total - reserve),
            free_bytes=max(0, free - reserve),
            index=ordinal,
            limit=limit,
        )
        for ordinal, (_, _, name, total, free) in enumerate(found)
    ]


def _text(value: str | bytes) -> str:
    # older NVML bindings return bytes
    return value.decode() if isinstance(value, bytes) else value
