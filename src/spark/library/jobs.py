"""Server-side pull jobs: start a pull, watch its progress, cancel it, resume it after a restart.

Each job runs `plan_pull` and `run_pull` in its own thread (at most
`MAX_RUNNING` download at once; the others wait as `queued`), so no event loop
ever waits on the network. A job is kept in SQLite (`spark.store.pulls`): one
that was still running when the server stopped starts again with the next
server, and its partial files continue with HTTP Range requests, so the bytes
already fetched are not fetched again. The model is registered only once every
file is complete and matches its SHA-256 (`run_pull`).

Cancelling stops the download at its next chunk and deletes the partial files;
nothing is registered. A failure ends the job with the error's message (no
disk space, repository or file not found, gated repository without a token,
checksum mismatch, ...). Progress goes to the event bus as `pull.progress`
(at most `EVENTS_PER_SECOND` per job) and the end as `pull.finished`.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import msgspec

from spark.errors import InvalidRequest, ModelNotFound, PullNotFound, SparkError
from spark.events import PULL_FINISHED, PULL_PROGRESS, EventBus
from spark.library.catalog import Library, check_scale
from spark.library.download import DownloadProgress, part_path
from spark.library.hub import Hub
from spark.library.pulling import PullPlan, installed_for, plan_pull, pull_adapter, run_pull
from spark.library.spec import LocalSpec, parse_pull_spec
from spark.store.pulls import PullTable

log = logging.getLogger("spark.library")

PullState = Literal["queued", "downloading", "verifying", "done", "failed", "cancelled"]
ACTIVE_STATES: tuple[PullState, ...] = ("queued", "downloading", "verifying")
FINISHED_STATES: tuple[PullState, ...] = ("done", "failed", "cancelled")

MAX_RUNNING = 2  # downloads at once; more jobs wait as queued
EVENTS_PER_SECOND = 4  # pull.progress events per job
SAVE_SECONDS = 1.0  # how often a running job's progress is written to the database
RATE_WINDOW_SECONDS = 5.0  # the rate is measured over this much recent time
KEEP_FINISHED = 100  # finished jobs remembered
STOP_WAIT_SECONDS = 5.0  # how long `close` waits for downloads to notice


class PullJob(msgspec.Struct, frozen=True, kw_only=True):
    """One pull job as the admin API shows it."""

    id: str
    spec: str
    quant: str | None = None
    state: PullState = "queued"
    model: str | None = None  # the model id, once the files are chosen
    repo: str | None = None
    files: list[str] = []  # what is downloaded: the model file(s), then any vision projector
    bytes_done: int = 0
    bytes_total: int | None = None  # None until the files are chosen (or when the Hub gives no size)
    rate: float | None = None  # bytes per second over the last few seconds
    eta_seconds: float | None = None
    error: str | None = None  # why it failed
    already_installed: bool = False  # done at once: the model was installed already
    attach_to: str | None = None  # a LoRA adapter for this installed model, not a model
    scale: float | None = None  # the adapter's scale (None: 1)
    created_at: float
    updated_at: float
    finished_at: float | None = None


class _Stop(BaseException):
    """Raised from the progress callback to end a download: cancelled, or the server stops.

    A BaseException so that no `except Exception` between here and the job swallows it."""


class _Run:
    """A job's mutable state while it runs (guarded by the manager's lock)."""

    def __init__(self, job: PullJob) -> None:
        self.job = job
        self.cancel = threading.Event()
        self.thread: threading.Thread | None = None
        self.file_bytes: dict[str, int] = {}  # bytes on disk per file name
        self.samples: deque[tuple[float, int]] = deque()  # (monotonic, bytes_done)
        self.last_event = 0.0
        self.last_save = 0.0


class PullJobs:
    """The pull jobs of one server; `close` stops the running ones (they resume with the next)."""

    def __init__(
        self,
        library: Library,
        events: EventBus | None = None,
        *,
        hub: Callable[[], Hub] | None = None,
    ) -> None:
        self._library = library
        self._events = events
        self._hub = hub or (lambda: Hub(library.settings))
        self._table = PullTable(library.db)
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(MAX_RUNNING)
        self._stopping = threading.Event()
        self._runs: dict[str, _Run] = {}
        for doc in self._table.all():
            job = msgspec.convert(doc, PullJob)
            if job.state in ACTIVE_STATES:  # stopped with the previous server: start again
                job = msgspec.structs.replace(job, state="queued", rate=None, eta_seconds=None)
            self._runs[job.id] = _Run(job)
        for run in list(self._runs.values()):
            if run.job.state == "queued":
                self._launch(run)

    # --- public API ---------------------------------------------------------
    def start(
        self, spec: str, quant: str | None = None, *, attach_to: str | None = None, scale: float | None = None
    ) -> PullJob:
        """Start pulling `spec` (a Hub repository, file or URL); the job, queued, at once. With
        `attach_to`, `spec` is a LoRA adapter for that installed model, attached at `scale` once
        downloaded (`pull_adapter`).

        The same spec asked again while its job runs answers that job. `InvalidRequest`
        (param `spec` or `quant`) for something that is not a Hub spec.
        """
        if not isinstance(spec, str) or not spec.strip():
            raise InvalidRequest("spec must name a model on the Hub, e.g. org/repo or org/repo:Q4_K_M", param="spec")
        parsed = parse_pull_spec(spec, quant=quant, endpoint=self._library.settings.hf_endpoint)
        if isinstance(parsed, LocalSpec):
            raise InvalidRequest(
                "the server pulls models from the Hub (org/repo, org/repo:QUANT, org/repo/file.gguf or a URL); "
                "add a local file with `spark pull PATH` on the server's machine",
                param="spec",
            )
        if attach_to is not None:
            try:
                attach_to = self._library.get(attach_to).id
            except ModelNotFound:
                raise InvalidRequest(
                    f"attach_to: no installed model is named '{attach_to}'", param="attach_to"
                ) from None
            check_scale(1.0 if scale is None else scale)
        if self._stopping.is_set():
            raise SparkError("the server is shutting down and starts no new pulls")
        now = time.time()
        job = PullJob(
            id="pull_" + secrets.token_hex(6),
            spec=spec.strip(),
            quant=parsed.quant,
            attach_to=attach_to,
            scale=scale,
            created_at=now,
            updated_at=now,
        )
        run = _Run(job)
        with self._lock:
            for other in self._runs.values():
                same = (other.job.spec, other.job.quant, other.job.attach_to) == (job.spec, job.quant, attach_to)
                if other.job.state in ACTIVE_STATES and same:
                    return other.job
            self._runs[job.id] = run
        self._save(run)
        self._launch(run)
        return job

    def list(self) -> list[PullJob]:
        """Every job remembered, newest first."""
        with self._lock:
            jobs = [r.job for r in self._runs.values()]
        return sorted(jobs, key=lambda j: (j.created_at, j.id), reverse=True)

    def get(self, job_id: str) -> PullJob:
        """The job `job_id`; `PullNotFound` when there is none."""
        return self._run(job_id).job

    def cancel(self, job_id: str) -> PullJob:
        """Cancel the job: its download stops and its partial files go; a finished job is left as it is."""
        run = self._run(job_id)
        with self._lock:
            if run.job.state in FINISHED_STATES:
                return run.job
            run.cancel.set()
            if run.thread is None or not run.thread.is_alive():
                self._finish_locked(run, "cancelled")
        if run.thread is not None and run.thread is not threading.current_thread():
            run.thread.join(STOP_WAIT_SECONDS)
        return run.job

    def wait(self, job_id: str, timeout: float) -> PullJob:
        """The job once finished, or as it is after `timeout` seconds."""
        run = self._run(job_id)
        if run.thread is not None:
            run.thread.join(timeout)
        return run.job

    def close(self) -> None:
        """Stop every running download; unfinished jobs stay saved and resume with the next server."""
        self._stopping.set()
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        with self._lock:
            threads = [r.thread for r in self._runs.values() if r.thread is not None]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # --- the job's thread -----------------------------------------------------
    def _launch(self, run: _Run) -> None:
        run.thread = threading.Thread(target=self._work, args=(run,), name=f"pull {run.job.id}", daemon=True)
        run.thread.start()

    def _work(self, run: _Run) -> None:
        while not self._slots.acquire(timeout=0.2):
            if self._stopping.is_set():
                return
            if run.cancel.is_set():
                self._finish(run, "cancelled")
                return
        plan: PullPlan | None = None
        try:
            self._check_stop(run)
            hub = self._hub()
            parsed = parse_pull_spec(run.job.spec, quant=run.job.quant, endpoint=hub.endpoint)
            if isinstance(parsed, LocalSpec):  # refused by `start`; only a hand-edited database has one
                raise InvalidRequest("the server pulls models from the Hub only", param="spec")
            if run.job.attach_to is not None:
                self._attach(run, hub)
                return
            plan = plan_pull(hub, parsed)
            self._check_stop(run)
            existing = installed_for(self._library, plan)
            self._planned(run, plan)
            if existing is not None:
                self._update(run, already_installed=True, model=existing.id)
                self._finish(run, "done")
                return
            entry = run_pull(self._library, hub, plan, progress=lambda p: self._progress(run, p))
            self._update(run, model=entry.id, bytes_done=run.job.bytes_total or run.job.bytes_done)
            self._finish(run, "done")
        except _Stop:
            if run.cancel.is_set():
                self._discard_partial(plan)
                self._finish(run, "cancelled")
            # else the server is stopping: the job stays saved as it is and resumes with the next one
        except SparkError as e:
            self._finish(run, "failed", error=e.message)
        except Exception as e:  # a bug: the job ends with it rather than hanging
            log.exception("pull job %s failed unexpectedly", run.job.id)
            self._finish(run, "failed", error=f"unexpected error: {type(e).__name__}: {e}")
        finally:
            self._slots.release()

    def _attach(self, run: _Run, hub: Hub) -> None:
        """Download the job's LoRA adapter into its model's folder and attach it."""
        assert run.job.attach_to is not None
        planned: list[PullPlan] = []

        def on_plan(plan: PullPlan) -> None:
            planned.append(plan)
            self._planned(run, plan)

        try:
            pull_adapter(
                self._library,
                run.job.attach_to,
                run.job.spec,
                scale=run.job.scale,
                progress=lambda p: self._progress(run, p),
                on_plan=on_plan,
                hub=hub,
            )
        except _Stop:
            if run.cancel.is_set() and planned:  # the partial file goes; the model and its other files stay
                folder = self._library.owned_dir(planned[0].model_id)
                part_path(folder / PurePosixPath(planned[0].files[0].path).name).unlink(missing_ok=True)
            raise
        self._update(run, bytes_done=run.job.bytes_total or run.job.bytes_done)
        self._finish(run, "done")

    def _check_stop(self, run: _Run) -> None:
        if run.cancel.is_set() or self._stopping.is_set():
            raise _Stop

    def _planned(self, run: _Run, plan: PullPlan) -> None:
        wanted = [*plan.files, *([plan.mmproj] if plan.mmproj else [])]
        folder = self._library.owned_dir(plan.model_id)
        with self._lock:
            # files an earlier run finished count as done from the start
            for f in wanted:
                dest = folder / PurePosixPath(f.path).name
                if f.size is not None and _size(dest) == f.size:
                    run.file_bytes[dest.name] = f.size
            self._update_locked(
                run,
                state="downloading",
                model=plan.model_id,
                repo=plan.repo,
                files=[f.path for f in wanted],
                bytes_total=plan.total_bytes,
                bytes_done=sum(run.file_bytes.values()),
            )
        self._save(run)

    def _progress(self, run: _Run, progress: DownloadProgress) -> None:
        self._check_stop(run)
        now = time.monotonic()
        with self._lock:
            run.file_bytes[progress.filename] = progress.completed
            done = sum(run.file_bytes.values())
            run.samples.append((now, done))
            while len(run.samples) > 2 and now - run.samples[0][0] > RATE_WINDOW_SECONDS:
                run.samples.popleft()
            (t0, b0), (t1, b1) = run.samples[0], run.samples[-1]
            rate = (b1 - b0) / (t1 - t0) if t1 - t0 >= 0.2 else run.job.rate
            total = run.job.bytes_total
            eta = (total - done) / rate if rate and total is not None else None
            verifying = progress.total is not None and progress.completed >= progress.total
            state: PullState = "verifying" if verifying else "downloading"
            changed = state != run.job.state
            self._update_locked(run, state=state, bytes_done=done, rate=rate, eta_seconds=eta)
            publish = changed or now - run.last_event >= 1 / EVENTS_PER_SECOND
            if publish:
                run.last_event = now
            save = changed or now - run.last_save >= SAVE_SECONDS
            if save:
                run.last_save = now
            job = run.job
        if publish and self._events is not None:
            self._events.publish(
                PULL_PROGRESS,
                id=job.id,
                model=job.model,
                bytes_done=job.bytes_done,
                bytes_total=job.bytes_total,
                rate=job.rate,
                eta_seconds=job.eta_seconds,
            )
        if save:
            self._save(run)

    def _discard_partial(self, plan: PullPlan | None) -> None:
        """Delete what a cancelled pull wrote, unless a model with that id got registered meanwhile."""
        if plan is None or self._library.exists(plan.model_id):
            return
        shutil.rmtree(self._library.owned_dir(plan.model_id), ignore_errors=True)

    # --- state ------------------------------------------------------------------
    def _run(self, job_id: str) -> _Run:
        with self._lock:
            run = self._runs.get(job_id) if isinstance(job_id, str) else None
        if run is None:
            raise PullNotFound(f"There is no pull job '{job_id}' (see GET /api/pulls).", param="id")
        return run

    def _update(self, run: _Run, **changes: Any) -> None:
        with self._lock:
            self._update_locked(run, **changes)

    def _update_locked(self, run: _Run, **changes: Any) -> None:
        run.job = msgspec.structs.replace(run.job, updated_at=time.time(), **changes)

    def _finish(self, run: _Run, state: PullState, error: str | None = None) -> None:
        with self._lock:
            self._finish_locked(run, state, error)

    def _finish_locked(self, run: _Run, state: PullState, error: str | None = None) -> None:
        if run.job.state in FINISHED_STATES:
            return
        now = time.time()
        run.job = msgspec.structs.replace(
            run.job, state=state, error=error, rate=None, eta_seconds=None, updated_at=now, finished_at=now
        )
        self._save(run)
        for gone in self._table.prune(FINISHED_STATES, KEEP_FINISHED):
            self._runs.pop(gone, None)
        if self._events is not None:
            job = run.job
            self._events.publish(
                PULL_FINISHED,
                id=job.id,
                model=job.model,
                state=job.state,
                bytes_done=job.bytes_done,
                bytes_total=job.bytes_total,
                error=job.error,
            )
        log.info("pull job %s (%s) %s%s", run.job.id, run.job.spec, state, f": {error}" if error else "")

    def _save(self, run: _Run) -> None:
        job = run.job
        self._table.put(job.id, job.state, job.created_at, msgspec.to_builtins(job))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
