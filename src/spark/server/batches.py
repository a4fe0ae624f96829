"""Answering batches (OpenAI's Batch API, Anthropic's Message Batches) in the background.

Each request of a batch goes through the app's own route for the batch's
endpoint, in process (an ASGI call, no socket), as the key that sent the batch:
so it is checked, served, routed on a fleet and logged exactly as the same
request sent by that client would be. A few run at once (the server's
`parallel`); each answer is written as it comes, so a server that stops goes
on with the requests left when it starts again. Once the server is stopping
no more are sent, and a request the stop refused or cut short is not kept as
an answer: it is sent again, from the start, at the next start. Cancelling
stops the requests running (as a client hanging up would) and sends no more.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import msgspec
from litestar.types import ASGIApp

from spark.api.openai.batches import result_line
from spark.server import in_process
from spark.server.draining import END_SECONDS
from spark.server.request_ids import BATCH_STATE, REQUEST_ID_HEADER
from spark.store.batches import CANCELLED_STATUS, UNFINISHED, Batch, BatchItem, BatchTable
from spark.store.files import FileTable, StoredFile

OUTPUT_PURPOSE = "batch_output"
WATCH_SECONDS = 1.0  # how often a running batch checks that it still exists


class BatchRunner:
    """The batches being answered, each by a task of its own."""

    def __init__(
        self, table: BatchTable, files: FileTable, concurrency: Callable[[], int], stopping: Callable[[], bool]
    ) -> None:
        self.table, self.files, self._concurrency, self._stopping = table, files, concurrency, stopping
        self._app: ASGIApp | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stops: dict[str, asyncio.Event] = {}

    def attach(self, app: ASGIApp) -> None:
        """Serve the batches' requests through `app`, and go on with those a previous run left."""
        self._app = app
        for batch in self.table.unfinished():
            self.start(batch)

    def start(self, batch: Batch) -> None:
        """Answer `batch`'s unanswered requests (none, for one whose cancel was asked: it ends cancelled)."""
        self._stops[batch.id] = stop = asyncio.Event()
        if batch.cancelled_at is not None:
            stop.set()
        self._tasks[batch.id] = asyncio.create_task(self._run(batch), name=f"batch {batch.id}")

    async def cancel(self, batch: Batch) -> Batch:
        """Stop answering `batch`: it is `cancelling` until the requests running end, and no more are
        sent. A batch that ended, or whose cancel was asked already, is as it was."""
        if batch.status not in UNFINISHED or batch.cancelled_at is not None:
            return batch
        batch = msgspec.structs.replace(batch, status="cancelling", cancelled_at=time.time())
        await asyncio.to_thread(self.table.update, batch)
        if (stop := self._stops.get(batch.id)) is not None:
            stop.set()
        return batch

    async def close(self) -> None:
        """Stop every batch (the server is stopping); their unanswered requests wait for the next start.
        After a graceful stop's drain, the requests it ended get a moment to answer with its error,
        so that the log says why they ended."""
        tasks = [t for t in self._tasks.values() if not t.done()]
        if tasks and self._stopping():
            await asyncio.wait(tasks, timeout=END_SECONDS)
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(tasks)

    async def _run(self, batch: Batch) -> None:
        stop = self._stops[batch.id]
        pending = await asyncio.to_thread(self.table.items, batch.id, pending=True)
        slots = asyncio.Semaphore(max(1, self._concurrency()))

        async def answer(item: BatchItem) -> bool:
            """Whether `item` was answered (False: it waits for the next start)."""
            async with slots:
                if stop.is_set():
                    return True  # the cancel ends it
                if self._stopping():
                    return False
                status, request_id, body = await self._call(batch, item, stop)
                kept: bytes | None = body
                if stop.is_set() and not 200 <= status < 300:  # cut short by the cancel: cancelled, having run
                    status, kept = CANCELLED_STATUS, None
                elif self._stopping() and not 200 <= status < 300:
                    return False  # refused or cut short by the stop: not the request's own failure
                await asyncio.to_thread(self.table.answered, batch.id, item.seq, status, request_id, kept)
                return True

        watch = asyncio.create_task(self._watch(batch.id, stop))
        try:
            answered = await asyncio.gather(*(answer(item) for item in pending))
            if all(answered):  # else the server is stopping: the batch goes on at the next start
                await asyncio.to_thread(self._finish, batch.id, stop.is_set())
        finally:
            watch.cancel()
            self._stops.pop(batch.id, None)
            self._tasks.pop(batch.id, None)

    async def _watch(self, batch_id: str, stop: asyncio.Event) -> None:
        """Stop the batch once it is gone (its key was revoked, which takes its batches)."""
        while not stop.is_set():
            await asyncio.sleep(WATCH_SECONDS)
            if await asyncio.to_thread(self.table.get, batch_id, None) is None:
                stop.set()

    async def _call(self, batch: Batch, item: BatchItem, stop: asyncio.Event) -> tuple[int, str, bytes]:
        """The app's answer to one request of `batch`: status, request id and body. The request's
        x-request-id is the batch's id and its place in it, so the log shows where it came from."""
        assert self._app is not None, "attach() first"
        sent_id = f"{batch.id}:{item.seq}"
        headers = [(REQUEST_ID_HEADER.encode(), sent_id.encode())]
        if batch.api == "anthropic":
            headers.append((b"anthropic-version", b"2023-06-01"))
        # a cancelled batch hangs up on its requests, as a client would
        reply = await in_process.post(
            self._app, batch.endpoint, item.body, headers=headers, state={BATCH_STATE: batch.owner}, hang_up=stop
        )
        # its id in the log, even when the hang-up came before the answer's headers
        return reply.status, reply.headers.get(REQUEST_ID_HEADER.lower()) or sent_id, b"".join(reply.body)

    def _finish(self, batch_id: str, cancelled: bool) -> None:
        """The batch's end: its unanswered requests cancelled, OpenAI's output and error files written."""
        batch = self.table.get(batch_id, None)
        if batch is None:
            return  # deleted meanwhile
        if cancelled:
            self.table.cancel_pending(batch_id)
        ended: dict[str, Any] = {"status": "cancelled" if cancelled else "completed", "ended_at": time.time()}
        if batch.api == "openai":
            items = self.table.items(batch_id)
            ok = [i for i in items if i.status is not None and 200 <= i.status < 300]
            failed = [i for i in items if i.status is not None and i.status >= 300]
            ended["output_file_id"] = self._results_file(batch, "output", ok)
            ended["error_file_id"] = self._results_file(batch, "error", failed)
        self.table.update(msgspec.structs.replace(batch, **ended))

    def _results_file(self, batch: Batch, kind: str, items: list[BatchItem]) -> str | None:
        """An uploaded JSONL file of the answers `items` (None when there are none)."""
        if not items:
            return None
        data = b"".join(
            result_line(batch.id, i.seq, i.custom_id, i.status or 0, i.request_id, i.answer or b"") for i in items
        )
        file = StoredFile(
            id=f"file-{batch.id.removeprefix('batch_')}{kind[0]}",
            owner=batch.owner,
            filename=f"{batch.id}_{kind}.jsonl",
            purpose=OUTPUT_PURPOSE,
            media_type="application/jsonl",
            size=len(data),
            created_at=time.time(),
        )
        self.files.put(file, data)
        return file.id
