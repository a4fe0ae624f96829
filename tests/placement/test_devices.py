"""Device detection: the real CPU, the max_ram cap, and NVML present, absent or failing."""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import psutil
import pytest

from spark.placement.devices import cpu_device, detect_devices, gpu_devices
from spark.settings import load_settings

GIB = 2**30


def test_cpu_is_detected_with_sane_numbers() -> None:
    cpu = cpu_device(load_settings())
    assert (cpu.id, cpu.kind, cpu.index) == ("cpu", "cpu", None)
    assert cpu.total_bytes == psutil.virtual_memory().total
    assert 0 < cpu.free_bytes <= cpu.total_bytes
    assert cpu.limit == "available RAM"
    assert detect_devices(load_settings())[0].id == "cpu"


def test_max_ram_caps_total_and_free() -> None:
    cpu = cpu_device(load_settings(max_ram="1GiB"))
    assert cpu.total_bytes == GIB
    assert 0 < cpu.free_bytes <= GIB
    assert cpu.limit == "max_ram 1GiB"
    # a cap above the machine's memory changes nothing
    assert cpu_device(load_settings(max_ram="1000TiB")).total_bytes == psutil.virtual_memory().total


def test_no_nvml_library_means_no_gpus_and_no_noise(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the import fails
    with caplog.at_level(logging.INFO):
        assert gpu_devices(load_settings()) == []
        assert [d.id for d in detect_devices(load_settings())] == ["cpu"]
    assert caplog.records == []


class FakeNVML(types.ModuleType):
    """pynvml's surface as devices.py uses it, over a list of (name, uuid, total, free)."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: list[tuple[str, str, int, int]], fail_init: bool = False) -> None:
        super().__init__("pynvml")
        self.gpus, self.fail_init, self.shutdowns = gpus, fail_init, 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.gpus[h][0].encode()  # old bindings return bytes

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h][1]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return types.SimpleNamespace(total=self.gpus[h][2], free=self.gpus[h][3])


def test_nvml_init_failure_means_no_gpus(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([], fail_init=True))
    with caplog.at_level(logging.INFO):
        assert gpu_devices(load_settings()) == []
    assert caplog.records == []


def test_gpus_are_read_less_the_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = FakeNVML(
        [("NVIDIA RTX 4090", "GPU-aaaa", 24 * GIB, 20 * GIB), ("NVIDIA A2", "GPU-bbbb", 16 * GIB, GIB // 4)]
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpus = gpu_devices(load_settings(gpu_reserve="1GiB"))
    assert [(g.id, g.index, g.name) for g in gpus] == [("cuda:0", 0, "NVIDIA RTX 4090"), ("cuda:1", 1, "NVIDIA A2")]
    assert (gpus[0].total_bytes, gpus[0].free_bytes) == (23 * GIB, 19 * GIB)
    assert (gpus[1].total_bytes, gpus[1].free_bytes) == (15 * GIB, 0)  # never negative
    assert fake.shutdowns == 1
    assert [d.id for d in detect_devices(load_settings())] == ["cpu", "cuda:0", "cuda:1"]


def test_cuda_visible_devices_renumbers_like_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNVML(
        [("A", "GPU-aaaa", 8 * GIB, 8 * GIB), ("B", "GPU-bbbb", 8 * GIB, 8 * GIB), ("C", "GPU-cccc", 8 * GIB, 8 * GIB)]
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-aa")
    assert [(g.id, g.name) for g in gpu_devices(load_settings())] == [("cuda:0", "C"), ("cuda:1", "A")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_devices(load_settings()) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,0")  # CUDA stops at an unknown entry
    assert [g.name for g in gpu_devices(load_settings())] == ["B"]
