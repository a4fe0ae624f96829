"""Which runner serves a request: one runner process per model, loaded on first use.

This version loads a model when a request first needs it (concurrent first
requests share one load) and keeps it until `unload` or `close`. Placement by
memory, eviction of idle models, bounded queues and keep-alive belong in
`_runner_for` / `_load`, which are the only places that decide what is loaded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing

import msgspec

from spark.errors import ModelNotFound, Overloaded, RunnerFailed
from spark.library import Library, ModelEntry
from spark.runners.supervisor import RunnerProcess, RunnerStatus
from spark.settings import Settings
from spark.types import Event, LoadOptions, Request

log = logging.getLogger("spark.runners")

FALLBACK_CONTEXT = 4096  # when neither the settings nor the model file give a context length


class RunnerState(msgspec.Struct, frozen=True):
    """A snapshot of one runner, for the admin API, the console and the CLI."""

    model: str
    status: RunnerStatus
    pid: int | None
    rss_bytes: int
    busy: int  # requests queued or in a slot, as the runner reports
    in_flight: int  # requests the server is waiting on
    last_used: float  # time.monotonic() of the server process
    restarts: int
    n_ctx: int  # tokens per slot
    n_parallel: int


def load_options(entry: ModelEntry, settings: Settings) -> LoadOptions:
    """How to load `entry`: its own settings first, then the server's, capped at its training context."""
    trained = entry.info.context_length
    n_ctx = entry.settings.context_length or settings.context_length or trained or FALLBACK_CONTEXT
    if trained:
        n_ctx = min(n_ctx, trained)
    return LoadOptions(
        model_id=entry.id,
        path=entry.path,
        n_ctx=n_ctx,
        n_parallel=entry.settings.parallel or settings.parallel,
        n_threads=settings.threads,
        kv_type=settings.kv_type,  # type: ignore[arg-type]  # validated by load_settings
        embedding=entry.info.is_embedding,
        mmproj_path=entry.mmproj_path,
        system_prompt=entry.settings.system_prompt,
        sampling=entry.settings.sampling,
    )


class Scheduler:
    """Routes requests to runner processes, loading each model once, on first use."""

    def __init__(self, settings: Settings, library: Library) -> None:
        self._settings = settings
        self._library = library
        self._runners: dict[str, RunnerProcess] = {}
        self._loading: dict[str, asyncio.Task[RunnerProcess]] = {}
        self._closed = False

    async def stream(self, request: Request) -> AsyncGenerator[Event, None]:
        """The events of `request`, ending with `Done`, `Embeddings` or `Failed`.

        Raises `ModelNotFound` for an unknown model, and the load error
        (`RunnerFailed`, `ModelFileError`) when the model cannot be loaded.
        Closing the generator early cancels the request in its runner.
        """
        runner = await self._runner_for(request.model)
        async with aclosing(runner.stream(request)) as events:
            async for event in events:
                yield event

    async def count_tokens(self, request: Request) -> int:
        """Prompt tokens of `request` on its model (loading the model if needed)."""
        runner = await self._runner_for(request.model)
        return await runner.count_tokens(request)

    async def unload(self, model_id: str) -> bool:
        """Stop the runner of `model_id` (after its load, if one is under way); False if none."""
        key = model_id if model_id in self._runners or model_id in self._loading else self._canonical(model_id)
        if key is None:
            return False
        task = self._loading.get(key)
        if task is not None:
            await asyncio.wait({task})
        runner = self._runners.pop(key, None)
        if runner is None:
            return False
        await runner.stop()
        log.info("unloaded %s", key)
        return True

    def loaded(self) -> list[RunnerState]:
        """Every runner, loading or loaded."""
        return [
            RunnerState(
                model=model_id,
                status=runner.status,
                pid=runner.pid,
                rss_bytes=runner.rss_bytes,
                busy=runner.busy,
                in_flight=runner.in_flight,
                last_used=runner.last_used,
                restarts=runner.restarts,
                n_ctx=runner.options.n_ctx,
                n_parallel=runner.options.n_parallel,
            )
            for model_id, runner in self._runners.items()
        ]

    async def close(self) -> None:
        """Stop every runner (and abandon loads under way); new requests are refused."""
        self._closed = True
        loads = list(self._loading.values())
        for task in loads:
            task.cancel()
        if loads:
            await asyncio.wait(loads)
        runners = list(self._runners.values())
        self._runners.clear()
        await asyncio.gather(*(runner.stop() for runner in runners))

    # --- placement ---------------------------------------------------------
    async def _runner_for(self, model: str) -> RunnerProcess:
        if self._closed:
            raise Overloaded("The server is shutting down and takes no new requests.")
        entry = self._library.get(model)
        runner = self._runners.get(entry.id)
        if runner is not None and runner.status not in ("failed", "stopped"):
            return runner
        task = self._loading.get(entry.id)
        if task is None:
            task = asyncio.create_task(self._load(entry), name=f"load {entry.id}")
            self._loading[entry.id] = task
            task.add_done_callback(lambda t: self._load_finished(entry.id, t))
        try:
            # shielded: one waiter giving up must not abort the load the others wait for
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and not (current is not None and current.cancelling()):
                raise RunnerFailed(
                    f"Loading the model {entry.id} was abandoned: the server is shutting down."
                ) from None
            raise

    async def _load(self, entry: ModelEntry) -> RunnerProcess:
        runner = RunnerProcess(load_options(entry, self._settings), self._settings)
        self._runners[entry.id] = runner
        try:
            await runner.start()
        except BaseException:
            if self._runners.get(entry.id) is runner:
                del self._runners[entry.id]
            raise
        log.info("loaded %s in runner pid %s", entry.id, runner.pid)
        return runner

    def _load_finished(self, model_id: str, task: asyncio.Task[RunnerProcess]) -> None:
        if self._loading.get(model_id) is task:
            del self._loading[model_id]
        if not task.cancelled() and task.exception() is not None:
            log.warning("loading %s failed: %s", model_id, task.exception())

    def _canonical(self, model_id: str) -> str | None:
        try:
            return self._library.get(model_id).id
        except ModelNotFound:
            return None
