"""What a node tells its central: who it is when it joins, then its capacity every few seconds.

The same `Capacity` describes the central's own models when routing weighs
serving a request itself against sending it to a node.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from pathlib import Path

import msgspec

from spark.library import Library
from spark.placement.devices import detect_devices
from spark.runners.scheduler import Scheduler
from spark.settings import Settings

ROUTE_HEADER = "x-spark-route"  # the central's route secret, on each routed request
ZERO_RETENTION_HEADER = (
    "x-spark-zero-retention"  # "1": the client's key is zero-retention (trusted from the central only)
)
HASH_CHUNK = 1 << 20


class InstalledModel(msgspec.Struct, frozen=True):
    id: str
    size_bytes: int
    sha256: str | None = None  # None until the node has hashed the file


class LoadedRunner(msgspec.Struct, frozen=True):
    model: str
    status: str
    slots_busy: int
    slots_free: int
    queued: int


class DeviceMemory(msgspec.Struct, frozen=True):
    id: str  # "cpu", "cuda:0", ...
    free_bytes: int
    total_bytes: int


class Capacity(msgspec.Struct, frozen=True, kw_only=True):
    """A server's models, runners, memory and load at one moment."""

    models: list[InstalledModel] = []
    runners: list[LoadedRunner] = []
    devices: list[DeviceMemory] = []
    slots_busy: int = 0
    slots_free: int = 0
    queued: int = 0
    decode_tokens_per_second: float | None = None  # recent requests' output speed

    def has(self, model: str) -> bool:
        return any(m.id == model for m in self.models)

    def size_of(self, model: str) -> int:
        return next((m.size_bytes for m in self.models if m.id == model), 0)

    def runner(self, model: str) -> LoadedRunner | None:
        return next((r for r in self.runners if r.model == model and r.status == "ready"), None)

    @property
    def most_free_bytes(self) -> int:
        return max((d.free_bytes for d in self.devices), default=0)


class JoinRequest(msgspec.Struct, frozen=True):
    url: str  # where the central reaches the node
    version: str = ""


class JoinAnswer(msgspec.Struct, frozen=True):
    name: str  # the node's name on the central
    route_secret: str  # what the central will present on every routed request
    report_seconds: float


class Checksums:
    """SHA-256 of model files, computed once per file (path, size, mtime) in a background thread."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()
        self._busy = False

    def of(self, path: str) -> str | None:
        """The file's hash when known; otherwise None, and hashing starts."""
        key = _file_key(path)
        if key is None:
            return None
        with self._lock:
            known = self._known.get(key)
            if known is None and not self._busy:
                self._busy = True
                threading.Thread(target=self._hash, args=(key,), name="spark-model-hash", daemon=True).start()
        return known

    def _hash(self, key: tuple[str, int, int]) -> None:
        digest = hashlib.sha256()
        try:
            with Path(key[0]).open("rb") as f:
                while chunk := f.read(HASH_CHUNK):
                    digest.update(chunk)
            result: str | None = digest.hexdigest()
        except OSError:
            result = None
        with self._lock:
            if result is not None:
                self._known[key] = result
            self._busy = False


def _file_key(path: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_size, st.st_mtime_ns)


class DecodeRates:
    """The output speed of the last requests (tokens per second after the first token)."""

    def __init__(self, keep: int = 20) -> None:
        self._rates: deque[float] = deque(maxlen=keep)

    def add(self, rate: float | None) -> None:
        if rate is not None and rate > 0:
            self._rates.append(rate)

    def mean(self) -> float | None:
        return round(sum(self._rates) / len(self._rates), 2) if self._rates else None


def capacity(
    settings: Settings,
    library: Library,
    scheduler: Scheduler,
    *,
    checksums: Checksums | None = None,
    rates: DecodeRates | None = None,
) -> Capacity:
    """This server's capacity now (`checksums`: hash the model files too)."""
    runners = scheduler.loaded()
    models = [
        InstalledModel(e.id, e.size_bytes, checksums.of(e.path) if checksums is not None else None)
        for e in library.list()
    ]
    return Capacity(
        models=models,
        runners=[LoadedRunner(r.model, r.status, r.slots_busy, r.slots_free, r.queued) for r in runners],
        devices=[DeviceMemory(d.id, d.free_bytes, d.total_bytes) for d in detect_devices(settings)],
        slots_busy=sum(r.slots_busy for r in runners),
        slots_free=sum(r.slots_free for r in runners),
        queued=sum(r.queued for r in runners),
        decode_tokens_per_second=rates.mean() if rates is not None else None,
    )
