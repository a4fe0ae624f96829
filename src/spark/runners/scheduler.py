"""Which runner serves a request, and what stays loaded: placement by memory, queues, keep-alive.

One runner process per model, loaded on first use; concurrent first requests
share one load. Before a load, the model's memory is estimated from its GGUF
header and placed by the planner against the devices and the models already
loaded (counted at their measured memory once their runners report it). Idle
models the plan evicts are unloaded first. A model that cannot fit even with
every idle model unloaded is refused at once with `PlacementRefused` and the
arithmetic; one that would fit once busy models finish waits for them, up to
`load_wait`. Loads happen one at a time, so two of them never count the same
free memory.

Each model admits `n_parallel + max_queue` requests; past that a request is
refused at once with `Overloaded`. Requests beyond the slots wait in the
runner's own FIFO queue (or, before the model is loaded, for its load).

A model with no work unloads after its keep-alive: the latest request's `keep_alive` (seconds; 0 unloads
right after it, negative keeps the model loaded), else the one an admin set for it (`warm`, `set_keep_alive`),
else the model's own setting, else `settings.keep_alive`. Changed model settings (context, slots, ...) load a
new runner; the old one finishes the requests it has and then stops. Every runner state change (loading,
ready, restarting, failed with the reason, unloaded) is published on the event bus as `runner.state`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager, suppress
from time import monotonic

import msgspec

from spark import trace as steps
from spark.errors import (
    Cancelled,
    ModelNotFound,
    Overloaded,
    PlacementRefused,
    RunnerFailed,
    RunnerNotFound,
    ShuttingDown,
    SparkError,
)
from spark.events import RUNNER_STATE, EventBus
from spark.library import Library, ModelEntry
from spark.library.metadata import read_gguf_info
from spark.placement import (
    Device,
    LoadedModel,
    MemoryEstimate,
    Plan,
    detect_devices,
    estimate_load,
    model_shape,
    plan_placement,
)
from spark.placement.baseline import idle_runner_bytes
from spark.runners.memory_failure import MemoryFailure
from spark.runners.options import check_keep_alive, load_options, parallel_slots, settings_changes
from spark.runners.retries import RetryListener
from spark.runners.spare import SpareRunner
from spark.runners.supervisor import RunnerProcess, RunnerStatus
from spark.settings import Settings
from spark.trace import NO_TRACE, Trace
from spark.types import Answer, Event, LoadOptions, Question, Request
from spark.units import format_bytes

log = logging.getLogger("spark.runners")

IDLE_CHECK_SECONDS = 1.0  # how often keep-alive expiries and runner memory are checked
DEVICE_CACHE_SECONDS = 2.0  # a device inventory is reused this long (free memory moves on)
PLACEMENT_RECHECK_SECONDS = 5.0  # a load waiting for memory also looks again this often


class RunnerState(msgspec.Struct, frozen=True):
    """A snapshot of one runner, for the admin API, the console and the CLI.

    `estimate_bytes` and `measured_bytes` are the model's own host memory
    (weights, KV cache, buffers) without the runner process itself, so the
    estimate and the measurement compare like for like.
    """

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
    devices: list[str] = []  # where its layers run, GPUs first
    placement: str = ""  # the plan, e.g. "cpu, uses 21 MiB of the 3.1 GiB free"
    estimate_bytes: int = 0  # host memory estimated before the load
    measured_bytes: int | None = None  # the same, measured (peak RSS less an idle runner's); None until known
    device_bytes: dict[str, int] = {}  # what placement counts per device: measured where known, runner included
    slots_busy: int = 0
    slots_free: int = 0
    queued: int = 0  # requests waiting beyond its slots
    idle_seconds: float | None = None  # None while it has work
    keep_alive: float = 0.0  # seconds it stays loaded once idle; negative: forever
    unloads_in: float | None = None  # None while it has work or when kept loaded forever
    reason: str = ""  # why it was loaded, or why it is stopping
    error: str | None = None  # why it failed (status "failed")
    prompt_tokens_per_second: float | None = None  # over its recent requests; None before any
    decode_tokens_per_second: float | None = None  # one stream's speed over its recent requests


class _Runner:
    """One runner process and what the scheduler knows about it."""

    def __init__(
        self,
        process: RunnerProcess,
        requested: LoadOptions,
        estimate: MemoryEstimate,
        plan: Plan,
        reason: str,
        keep_alive: float,
    ) -> None:
        self.process = process
        self.requested = requested  # the options before placement, to notice changed settings
        self.estimate = estimate
        self.plan = plan
        self.reason = reason
        self.keep_alive = keep_alive
        self.admin_keep_alive: float | None = None  # set by an admin; requests without their own keep it
        self.active = 0  # requests using it (streaming, queued in it, or counting tokens)
        self.retiring = False  # replaced after a settings change; stops once idle
        self.peak_rss = 0
        self.reported = False  # the estimate's error has been logged

    @property
    def model_id(self) -> str:
        return self.process.model_id

    @property
    def label(self) -> str:
        """A name unique among the runners (a retiring one shares its model's id)."""
        return f"{self.model_id} (old settings, pid {self.process.pid})" if self.retiring else self.model_id

    @property
    def estimate_host_bytes(self) -> int:
        """The model's estimated host memory, the runner process excluded."""
        return self.plan.device_bytes.get("cpu", 0) - self.estimate.runtime_bytes

    def measured_bytes(self, baseline: int | None) -> int | None:
        """The model's host memory as measured: peak RSS less an idle runner's; None until known."""
        self.peak_rss = max(self.peak_rss, self.process.rss_bytes)
        if baseline is None or not self.peak_rss:
            return None
        return max(0, self.peak_rss - baseline)

    def device_bytes(self, baseline: int | None) -> dict[str, int]:
        """What placement counts on each device: the plan, with the host part measured once known."""
        counted = dict(self.plan.device_bytes)
        measured = self.measured_bytes(baseline)
        if measured is not None:
            counted["cpu"] = measured + self.estimate.runtime_bytes
        return counted


class Scheduler:
    """Routes requests to runner processes: places and loads models, queues, unloads idle ones."""

    def __init__(self, settings: Settings, library: Library, events: EventBus | None = None) -> None:
        self._settings = settings
        self._library = library
        self._events = events if events is not None else EventBus()
        self._failed: dict[str, _Runner] = {}  # loads that failed, shown until the model loads again
        # each model's host memory as its last runner measured it, with the options it ran with
        self._measured: dict[str, tuple[LoadOptions, int]] = {}
        self._out_of_memory: dict[str, MemoryFailure] = {}  # each model's last load, if memory failed it
        self._runners: dict[str, _Runner] = {}  # the current runner of each model
        self._retiring: list[_Runner] = []  # replaced runners finishing their requests
        self._loading: dict[str, asyncio.Task[_Runner]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._pending: Counter[str] = Counter()  # admitted requests per model, waiting or running
        self._place_lock = asyncio.Lock()
        self._changed = asyncio.Event()  # a request ended or a runner stopped: memory may be free
        self._wake = asyncio.Event()  # something to unload may be due now
        self._watcher: asyncio.Task[None] | None = None  # unloads idle models
        self._measuring: asyncio.Task[None] | None = None  # measures an idle runner's memory, once
        self._devices: tuple[float, list[Device]] | None = None
        self._baseline: int | None = None
        self._spare = SpareRunner(settings)
        self._started = False
        self._closed = False

    # --- public API ---------------------------------------------------------
    async def stream(
        self, request: Request, trace: Trace = NO_TRACE, *, whole: bool = False, on_retry: RetryListener | None = None
    ) -> AsyncGenerator[Event, None]:
        """The events of `request`, ending with `Done`, `Embeddings` or `Failed`.

        Raises `ModelNotFound` for an unknown model, `Overloaded` when its queue
        is full, `PlacementRefused` when it does not fit in memory, and the load
        error (`RunnerFailed`, `ModelFileError`) when the model cannot be loaded.
        Closing the generator early cancels the request in its runner. `trace`
        gets the steps of its timeline the scheduler sees (queue, placement, load).
        `whole` and `on_retry`: how a runner failure retries it (`RunnerProcess.stream`).
        """
        async with (
            self._use(request.model, request.keep_alive, trace) as runner,
            aclosing(runner.process.stream(request, whole=whole, on_retry=on_retry)) as events,
        ):
            async for event in events:
                yield event

    def check(self, request: Request) -> None:
        """Raise now what `stream` raises before it waits (shutting down, unknown model, full queue, bad
        keep-alive): a refusal then costs no turn of the event loop, under a burst the burst's work."""
        self._admission(request.model, request.keep_alive)

    async def count_tokens(self, request: Request, trace: Trace = NO_TRACE) -> int:
        """Prompt tokens of `request` on its model (loading the model if needed)."""
        return (await self.ask(request, trace)).n_tokens

    async def ask(self, question: Question, trace: Trace = NO_TRACE) -> Answer:
        """Its model's answer to a question about tokens (loading the model if needed)."""
        async with self._use(question.model, question.keep_alive, trace) as runner:
            return await runner.process.ask(question)

    async def warm(self, model: str, keep_alive: float | None = None) -> RunnerState:
        """Load `model` now unless it is loaded; with `keep_alive` (seconds, negative: forever) it stays
        loaded that long once idle, whatever requests without their own keep-alive say.

        Raises as `stream` does before a request reaches its runner.
        """
        async with self._use(model, keep_alive, NO_TRACE) as runner:
            if keep_alive is not None:
                runner.admin_keep_alive = keep_alive
            runner.process.touch()  # idle from now, not from when the load began
        return self._state(runner, monotonic())

    def set_keep_alive(self, model: str, keep_alive: float) -> RunnerState:
        """Keep the loaded `model` for `keep_alive` seconds once idle (negative: forever), until a
        request names its own. `ModelNotFound` for an unknown model, `RunnerNotFound` when not loaded."""
        check_keep_alive(keep_alive)
        entry = self._library.get(model)
        runner = self._runners.get(entry.id)
        if runner is None or runner.process.status in ("failed", "stopped"):
            raise RunnerNotFound(f"The model {entry.id} is not loaded (load it with POST /api/runners).", param="model")
        runner.keep_alive = runner.admin_keep_alive = keep_alive
        self._wake.set()
        return self._state(runner, monotonic())

    def start(self) -> None:
        """Start the background work of a server: a warm spare runner unless `spare_runner` is off.

        Without it (embedded use, most tests) every load starts its runner process from nothing.
        """
        self._started = True
        self._spare.enable(self._settings.spare_runner)

    @property
    def spare_pid(self) -> int | None:
        """The pid of the warm spare runner ready for the next load (None when none is ready)."""
        return self._spare.pid

    def use_settings(self, settings: Settings) -> None:
        """Use `settings` from now on: queue and memory limits at once, load options from the next
        request (a model whose options change reloads), the spare runner at once, and the new
        keep-alive at once for the loaded models that kept the old one (no request, admin or model
        setting of their own)."""
        old_keep_alive, self._settings = self._settings.keep_alive_seconds, settings
        for runner in self._runners.values():
            if runner.admin_keep_alive is None and runner.keep_alive == old_keep_alive:
                runner.keep_alive = settings.keep_alive_seconds
        self._devices = None
        self._wake.set()
        if self._started:
            self._spare.enable(settings.spare_runner)

    async def unload(self, model_id: str) -> bool:
        """Stop the runner(s) of `model_id` now (after its load, if one is under way); False if none.

        Requests still running on it end with `RunnerFailed`.
        """
        key = model_id if model_id in self._runners or model_id in self._loading else self._canonical(model_id)
        if key is None:
            return False
        failed = self._failed.pop(key, None) is not None
        task = self._loading.get(key)
        if task is not None:
            await asyncio.wait({task})
        targets = [r for r in (self._runners.get(key), *self._retiring) if r is not None and r.model_id == key]
        for runner in targets:
            self._stop(runner, "unloaded on request")
        if targets:
            await self._settle_stops()
        return bool(targets) or failed

    def loaded(self) -> list[RunnerState]:
        """Every runner, loading, loaded or finishing its requests after a settings change."""
        now = monotonic()
        return [self._state(r, now) for r in (*self._runners.values(), *self._retiring)]

    def runners(self) -> list[RunnerState]:
        """`loaded`, and the models whose last load failed (status "failed", with the error)."""
        now = monotonic()
        return [*self.loaded(), *(self._state(r, now) for r in self._failed.values())]

    async def close(self) -> None:
        """Stop every runner (and abandon loads under way); new requests are refused."""
        self._closed = True
        background = [t for t in (self._watcher, self._measuring) if t is not None]
        for task in background:
            task.cancel()
        loads = list(self._loading.values())
        for load in loads:
            load.cancel()
        if loads or background:
            await asyncio.wait([*loads, *background])
        for runner in [*self._runners.values(), *self._retiring]:
            self._stop(runner, "server shutting down")
        await self._spare.close()
        await self._settle_stops()

    # --- admission ------------------------------------------------------------
    @asynccontextmanager
    async def _use(self, model_name: str, keep_alive: float | None, trace: Trace) -> AsyncIterator[_Runner]:
        """The runner for a request for `model_name`, held busy (never unloaded) until the block ends;
        `keep_alive` is the request's own (None: the admin's for the model, else the settings')."""
        entry, waiting = self._admission(model_name, keep_alive)
        options = load_options(entry, self._settings, self._library.draft_for(entry))
        model = entry.id
        if self._watcher is None:  # started here: the scheduler may be made before the loop runs
            self._watcher = asyncio.create_task(self._watch_idle(), name="unload idle models")
        # requests ahead of this one that wait for a slot (0: a slot is free, once the model is loaded)
        trace.step(steps.QUEUED, model=model, position=max(0, waiting + 1), slots=options.n_parallel)
        self._pending[model] += 1
        runner: _Runner | None = None
        try:
            runner = await self._runner_for(entry, options, trace)
            runner.active += 1  # no await since the load finished: nothing can have unloaded it
            # the latest request's keep-alive wins; without one, the admin's or the settings'
            if keep_alive is not None:
                runner.keep_alive = keep_alive
            elif runner.admin_keep_alive is not None:
                runner.keep_alive = runner.admin_keep_alive
            elif entry.settings.keep_alive is not None:
                runner.keep_alive = entry.settings.keep_alive
            else:
                runner.keep_alive = self._settings.keep_alive_seconds
            yield runner
        finally:
            self._pending[model] -= 1
            if not self._pending[model]:
                del self._pending[model]
            if runner is not None:
                runner.active -= 1
                if not runner.active:
                    self._report_estimate(runner)
            self._changed.set()
            self._wake.set()

    def _admission(self, model_name: str, keep_alive: float | None) -> tuple[ModelEntry, int]:
        """The model's entry and how many requests wait for its slots; raises what `check` raises."""
        if self._closed:
            raise ShuttingDown("The server is shutting down and takes no new requests.")
        if keep_alive is not None:
            check_keep_alive(keep_alive)
        entry = self._library.get(model_name)
        waiting = self._pending[entry.id] - parallel_slots(entry, self._settings)
        if waiting >= (limit := self._settings.max_queue):
            raise Overloaded(
                f"The model {entry.id} has {waiting} requests waiting (SPARK_MAX_QUEUE={limit}); try again shortly."
            )
        return entry, waiting

    async def _runner_for(self, entry: ModelEntry, options: LoadOptions, trace: Trace) -> _Runner:
        model = entry.id
        while True:
            current = self._runners.get(model)
            reason = "first request"
            if current is not None and current.process.status in ("ready", "restarting"):
                if current.requested == options:
                    return current
                reason = f"settings changed: {settings_changes(current.requested, options)}"
                self._retire(current, reason)
            elif current is not None and current.process.status in ("failed", "stopped"):
                del self._runners[model]
                self._remember(current)
                reason = f"the previous runner {current.process.status}"
            task = self._loading.get(model)
            joined = task is not None and not task.done()
            if task is None or task.done():  # a finished load is forgotten a moment later
                task = asyncio.create_task(self._load(entry, options, reason, trace), name=f"load {model}")
                self._loading[model] = task
                task.add_done_callback(lambda t: self._load_finished(model, t))
            else:
                trace.step(steps.LOAD_STARTED, reason=reason, joined=True)  # the load another request started
            try:
                # shielded: one waiter giving up must not abort the load the others wait for
                runner = await asyncio.shield(task)
            except asyncio.CancelledError:
                current_task = asyncio.current_task()
                if task.cancelled() and not (current_task is not None and current_task.cancelling()):
                    raise RunnerFailed(
                        f"Loading the model {model} was abandoned: the server is shutting down."
                    ) from None
                raise
            if joined:
                trace.step(steps.LOAD_FINISHED, pid=runner.process.pid, joined=True)
            if runner.requested == options and self._runners.get(model) is runner:
                return runner
            # loaded for other settings (they changed meanwhile) or already gone: look again

    # --- loading and placement ------------------------------------------------
    async def _load(self, entry: ModelEntry, options: LoadOptions, reason: str, trace: Trace) -> _Runner:
        async with self._place_lock:
            await self._settle_stops()  # memory of runners being stopped is not free yet
            # read afresh: a library entry stored by an older version lacks newer fields
            info = await asyncio.to_thread(read_gguf_info, entry.path)
            estimate = estimate_load(model_shape(info), options)
            if (measured := self._measured.get(entry.id)) is not None and measured[0] == options:
                estimate = estimate.with_measurement(measured[1])
            plan, runners = await self._place(entry.id, estimate, trace)
            if (failure := self._out_of_memory.get(entry.id)) is not None and failure.repeats(options, plan):
                raise self._refusal(failure.explain(entry.id, plan))
            trace.step(
                steps.PLACEMENT,
                devices=list(plan.devices),
                plan=plan.explain(),
                estimate=estimate.describe(),
                evictions=[{"model": e.model_id, "reason": e.reason} for e in plan.evictions],
            )
            for eviction in plan.evictions:
                self._stop(runners[eviction.model_id], f"evicted to make room for {entry.id}: {eviction.reason}")
            await self._settle_stops()
            process = RunnerProcess(plan.load_options(options), self._settings, self._status_changed, self._spare)
            runner = _Runner(process, options, estimate, plan, reason, self._settings.keep_alive_seconds)
            self._runners[entry.id] = runner
            self._failed.pop(entry.id, None)
            trace.step(steps.LOAD_STARTED, reason=reason)
            started = monotonic()
            try:
                await process.start()
            except BaseException as e:
                if self._runners.get(entry.id) is runner:
                    del self._runners[entry.id]
                    if process.error is not None:
                        self._failed[entry.id] = runner
                if isinstance(e, RunnerFailed) and e.out_of_memory:
                    self._out_of_memory[entry.id] = MemoryFailure(options, dict(plan.free_bytes), e.message)
                raise
            finally:
                self._devices = None  # free memory has changed
            trace.step(steps.LOAD_FINISHED, pid=process.pid, seconds=round(monotonic() - started, 3))
            self._out_of_memory.pop(entry.id, None)
            if self._measuring is None:
                self._measuring = asyncio.create_task(self._measure_baseline(), name="measure an idle runner")
        loaded = (entry.id, process.pid, reason, plan.explain(), estimate.describe())
        log.info("loaded %s in runner pid %s (%s): %s; %s", *loaded)
        return runner

    async def _place(self, model_id: str, estimate: MemoryEstimate, trace: Trace) -> tuple[Plan, dict[str, _Runner]]:
        """A plan for the model, waiting up to `load_wait` for busy models when only they are in the way."""
        limit = self._settings.max_loaded_models
        deadline: float | None = None
        while True:
            devices = self._device_inventory()
            runners = {
                r.label: r
                for r in (*self._runners.values(), *self._retiring)
                if r.process.status not in ("failed", "stopped")
            }  # those hold no memory
            loaded = [self._as_loaded(r) for r in runners.values()]
            try:
                return plan_placement(estimate, devices, loaded, max_loaded_models=limit), runners
            except PlacementRefused as refused:
                if not any(m.busy for m in loaded):
                    raise self._refusal(refused.message) from None
                try:  # would it fit once the busy models are done? then wait for them
                    idle = [msgspec.structs.replace(m, busy=False) for m in loaded]
                    plan_placement(estimate, devices, idle, max_loaded_models=limit)
                except PlacementRefused:
                    raise self._refusal(refused.message) from None
                wait = self._settings.load_wait_seconds
                now = monotonic()
                if deadline is None:
                    deadline = now + wait
                    if wait > 0:
                        log.info("%s waits up to %g s for busy models to finish: %s", model_id, wait, refused.message)
                        trace.step(steps.MEMORY_WAIT, reason=refused.message, up_to_seconds=wait)
                if not self._pending[model_id]:
                    raise Cancelled(f"Loading {model_id} was abandoned: every request for it went away.") from None
                if now >= deadline:  # busy, not too big: Overloaded, which clients retry (after Retry-After)
                    raise Overloaded(
                        self._refusal(f"{refused.message}; waited {wait:g} s for busy models (SPARK_LOAD_WAIT)").message
                    ) from None
                self._changed.clear()
                await _wait_for_event(self._changed, min(deadline - now, PLACEMENT_RECHECK_SECONDS))
                self._devices = None

    def _refusal(self, arithmetic: str) -> PlacementRefused:
        """The planner's arithmetic, naming the user's own RAM limit when one is set."""
        if self._settings.max_ram_bytes is not None:
            arithmetic += f"; cpu memory is limited by max_ram {self._settings.max_ram} (SPARK_MAX_RAM)"
        return PlacementRefused(arithmetic)

    def _as_loaded(self, runner: _Runner) -> LoadedModel:
        busy = (
            runner.active > 0
            or (not runner.retiring and self._pending[runner.model_id] > 0)
            or runner.process.status not in ("ready", "failed", "stopped")
        )
        return LoadedModel(
            model_id=runner.label,
            device_bytes=runner.device_bytes(self._baseline),
            busy=busy,
            last_used=runner.process.last_used,
        )

    def _device_inventory(self) -> list[Device]:
        now = monotonic()
        if self._devices is None or now - self._devices[0] > DEVICE_CACHE_SECONDS:
            self._devices = (now, detect_devices(self._settings))
        return self._devices[1]

    def _load_finished(self, model_id: str, task: asyncio.Task[_Runner]) -> None:
        if self._loading.get(model_id) is task:
            del self._loading[model_id]
        if not task.cancelled() and (error := task.exception()) is not None:
            if isinstance(error, (PlacementRefused, Cancelled)):  # the caller's answer; not a fault of the server
                log.info("not loading %s: %s", model_id, error)
            else:
                log.warning("loading %s failed: %s", model_id, error)

    # --- unloading ------------------------------------------------------------
    def _retire(self, runner: _Runner, why: str) -> None:
        """Replace `runner`: it takes no new requests and stops once its requests are done."""
        del self._runners[runner.model_id]
        runner.retiring = True
        runner.reason = f"stopping after its requests: {why}"
        log.info("reloading %s: %s", runner.model_id, why)
        if runner.active:
            self._retiring.append(runner)
        else:
            self._stop(runner, why)

    def _stop(self, runner: _Runner, why: str) -> None:
        """Take `runner` out of service now and stop its process in the background."""
        if self._runners.get(runner.model_id) is runner:
            del self._runners[runner.model_id]
        if runner in self._retiring:
            self._retiring.remove(runner)
        self._remember(runner)
        log.info("unloading %s (pid %s): %s", runner.model_id, runner.process.pid, why)
        task = asyncio.create_task(runner.process.stop(why), name=f"stop {runner.model_id}")
        self._stopping.add(task)
        task.add_done_callback(self._stopped)

    def _remember(self, runner: _Runner) -> None:
        """Keep what `runner` measured, for the model's next load with the same options."""
        if (measured := runner.measured_bytes(self._baseline)) is not None:
            self._measured[runner.model_id] = (runner.requested, measured)

    def _stopped(self, task: asyncio.Task[None]) -> None:
        self._stopping.discard(task)
        self._devices = None
        self._changed.set()
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("stopping a runner failed: %s", error)

    async def _settle_stops(self) -> None:
        if self._stopping:
            await asyncio.wait(set(self._stopping))

    async def _watch_idle(self) -> None:
        """Unload models whose keep-alive ran out, and retired runners once their requests are done."""
        while True:
            self._wake.clear()
            now = monotonic()
            for runner in [*self._runners.values(), *self._retiring]:
                runner.measured_bytes(self._baseline)  # keep the peak between heartbeats
                if runner.retiring and not runner.active:
                    self._stop(runner, runner.reason)
                elif (left := self._unloads_in(runner, now)) is not None and left <= 0:
                    self._stop(
                        runner, f"idle for {now - runner.process.last_used:.0f} s (keep_alive {runner.keep_alive:g} s)"
                    )
            await _wait_for_event(self._wake, IDLE_CHECK_SECONDS)

    async def _measure_baseline(self) -> None:
        # a warm spare is exactly an idle runner: no process need be started to measure one
        if (spare := self._spare.warm_rss_bytes) is not None:
            self._baseline = spare
            return
        try:
            self._baseline = await idle_runner_bytes()
        except SparkError as e:
            log.warning("loaded models are counted at their estimates: %s", e.message)

    # --- reporting ------------------------------------------------------------
    def _status_changed(self, process: RunnerProcess, reason: str) -> None:
        runner = self._runners.get(process.model_id)
        if process.status == "ready" and reason and runner is not None and runner.process is process:
            runner.reason = reason  # a restart's reason replaces the first load's
        state = "unloaded" if process.status == "stopped" else process.status
        self._events.publish(
            RUNNER_STATE, model=process.model_id, pid=process.pid, state=state, reason=reason, restarts=process.restarts
        )

    def _unloads_in(self, runner: _Runner, now: float) -> float | None:
        """Seconds until `runner` unloads for being idle; None while it has work or is kept forever."""
        busy = runner.active or (not runner.retiring and self._pending[runner.model_id])
        if busy or runner.process.status != "ready" or runner.keep_alive < 0 or math.isinf(runner.keep_alive):
            return None
        return runner.keep_alive - (now - runner.process.last_used)

    def _report_estimate(self, runner: _Runner) -> None:
        """Log how far the estimate was from the measured memory, once per runner."""
        measured = runner.measured_bytes(self._baseline)
        if runner.reported or measured is None:
            return
        runner.reported = True
        estimate = runner.estimate_host_bytes
        error = (estimate - measured) / measured if measured else 0.0
        log.info(
            "%s uses %s measured against %s estimated (%+.0f%%)",
            runner.model_id,
            format_bytes(measured),
            format_bytes(estimate),
            100 * error,
        )

    def _state(self, runner: _Runner, now: float) -> RunnerState:
        process = runner.process
        slots = process.options.n_parallel
        # a retiring runner gets no new requests; the current one has every admitted one
        requests = runner.active if runner.retiring else self._pending[runner.model_id]
        unloads_in = self._unloads_in(runner, now)
        return RunnerState(
            model=runner.model_id,
            status=process.status,
            pid=process.pid,
            rss_bytes=process.rss_bytes,
            busy=process.busy,
            in_flight=process.in_flight,
            last_used=process.last_used,
            restarts=process.restarts,
            n_ctx=process.options.n_ctx,
            n_parallel=slots,
            devices=list(runner.plan.devices),
            placement=runner.plan.explain(),
            estimate_bytes=runner.estimate_host_bytes,
            measured_bytes=runner.measured_bytes(self._baseline),
            device_bytes=runner.device_bytes(self._baseline),
            slots_busy=min(runner.active, slots),
            slots_free=max(0, slots - runner.active),
            queued=max(0, requests - slots),
            idle_seconds=None if runner.active else max(0.0, now - process.last_used),
            keep_alive=runner.keep_alive,
            unloads_in=None if unloads_in is None else max(0.0, unloads_in),
            reason=runner.reason,
            error=None if process.error is None else process.error.message,
            prompt_tokens_per_second=process.rates.prompt_tokens_per_second,
            decode_tokens_per_second=process.rates.decode_tokens_per_second,
        )

    def _canonical(self, model_id: str) -> str | None:
        try:
            return self._library.get(model_id).id
        except ModelNotFound:
            return None


async def _wait_for_event(event: asyncio.Event, seconds: float) -> None:
    """Wait until `event` is set or `seconds` pass.

    `asyncio.timeout` rather than `wait_for`: in Python 3.11 a cancellation that
    lands as `wait_for` times out is turned into a TimeoutError and lost.
    """
    with suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
