"""Memory over time: one sample of every runner's memory every `SAMPLE_SECONDS`, kept for a day.

The request log says what was asked and when; it cannot say how much memory
the loaded models held in between. This sampler keeps that in memory only
(8,640 small samples, a restart starts afresh) for `GET /api/memory` and the
console's Activity page.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import cast

import msgspec
import psutil
from litestar import Litestar

from spark.placement import Device
from spark.runners.scheduler import Scheduler

SAMPLE_SECONDS = 10.0
KEEP_SECONDS = 24 * 3600

log = logging.getLogger("spark.server")


class MemorySample(msgspec.Struct, frozen=True):
    """What memory the server and its runners held at one moment."""

    at: float  # Unix time
    server_bytes: int  # the server process itself (resident)
    models: dict[str, int] = {}  # model -> its runner process's resident memory
    system_available_bytes: int = 0  # RAM the machine still has available


class MemoryHistory(msgspec.Struct, frozen=True):
    interval_seconds: float
    samples: list[MemorySample]  # oldest first
    devices: list[Device] = []  # each device's memory now: CPU RAM, then every GPU's VRAM


class MemorySampler:
    """The last day of memory samples; `sample` adds one, `since` reads them."""

    def __init__(self, scheduler: Scheduler, interval: float = SAMPLE_SECONDS) -> None:
        self.interval = interval
        self._scheduler = scheduler
        self._process = psutil.Process()
        self._samples: collections.deque[MemorySample] = collections.deque(maxlen=int(KEEP_SECONDS / interval))

    def sample(self) -> MemorySample:
        """Measure now and keep the sample."""
        models: dict[str, int] = {}
        for runner in self._scheduler.loaded():
            models[runner.model] = models.get(runner.model, 0) + runner.rss_bytes
        taken = MemorySample(time.time(), self._process.memory_info().rss, models, psutil.virtual_memory().available)
        self._samples.append(taken)
        return taken

    def since(self, start: float) -> MemoryHistory:
        """The samples taken at or after Unix time `start`."""
        return MemoryHistory(self.interval, [s for s in list(self._samples) if s.at >= start])

    async def run(self) -> None:
        """Sample every `interval` seconds until cancelled."""
        while True:
            try:
                await asyncio.to_thread(self.sample)
            except Exception:  # a failed measurement must never stop the server or the sampler
                log.exception("could not sample memory")
            await asyncio.sleep(self.interval)


def memory_sampler_of(app: Litestar) -> MemorySampler:
    return cast(MemorySampler, app.state.memory)


@asynccontextmanager
async def sample_memory(app: Litestar) -> AsyncIterator[None]:
    """Lifespan: sample memory (in `app.state.memory`) while the app runs."""
    task = asyncio.create_task(memory_sampler_of(app).run(), name="sample memory")
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
