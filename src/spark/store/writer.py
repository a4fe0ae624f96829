"""The request log's one writer: a background thread that writes records in batches.

`submit` only puts a record on a queue, so a request never waits on the
disk. The thread takes whatever has queued up, writes it in one transaction
(`RequestTable.insert_many`), and prunes the log by age and size every
`prune_seconds`. `close` writes everything still queued before it returns.
When the disk cannot keep up and the queue is full, records are dropped and
counted rather than slowing requests down.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Final

from spark.store.requests import RequestRecord, RequestTable

log = logging.getLogger("spark.store")

BATCH_SIZE: Final = 512
QUEUE_SIZE: Final = 50_000
PRUNE_SECONDS: Final = 300.0


class _Flush:
    """Queued by `flush`: set once everything queued before it is written."""

    def __init__(self) -> None:
        self.done = threading.Event()


class _Stop:
    """Queued by `close`: the thread writes what came before and ends."""


_STOP: Final = _Stop()


class LogWriter:
    """Writes request records to `table` from one background thread.

    `retention_seconds` and `max_bytes` bound the log (None: no bound); the
    first prune runs when the writer starts.
    """

    def __init__(
        self,
        table: RequestTable,
        *,
        retention_seconds: float | None,
        max_bytes: int | None,
        prune_seconds: float = PRUNE_SECONDS,
    ) -> None:
        self._table = table
        self._retention = retention_seconds
        self._max_bytes = max_bytes
        self._prune_seconds = prune_seconds
        self._queue: queue.Queue[RequestRecord | _Flush | _Stop] = queue.Queue(QUEUE_SIZE)
        self._closed = False
        self.dropped = 0  # records lost to a full queue or a failed write
        self.written = 0
        self._thread = threading.Thread(target=self._run, name="spark-log-writer", daemon=True)
        self._thread.start()

    def submit(self, record: RequestRecord) -> None:
        """Queue `record` for writing; never blocks (a full queue drops it)."""
        if self._closed:
            self.dropped += 1
            return
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("the request log cannot keep up: %d records dropped so far", self.dropped)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record submitted so far is written; False if `timeout` passed first."""
        if self._closed:
            return True
        marker = _Flush()
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def close(self) -> None:
        """Write what is queued, then stop the thread (later submissions are dropped)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        next_prune = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_prune:
                self._prune()
                next_prune = now + self._prune_seconds
            try:
                first = self._queue.get(timeout=max(0.0, next_prune - time.monotonic()))
            except queue.Empty:
                continue
            batch: list[RequestRecord] = []
            markers: list[_Flush] = []
            stop = False
            item: RequestRecord | _Flush | _Stop = first
            while True:
                if isinstance(item, RequestRecord):
                    batch.append(item)
                elif isinstance(item, _Flush):
                    markers.append(item)
                else:
                    stop = True
                if stop or len(batch) >= BATCH_SIZE:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write(batch)
            for marker in markers:
                marker.done.set()
            if stop:
                return

    def _write(self, batch: list[RequestRecord]) -> None:
        if not batch:
            return
        try:
            self._table.insert_many(batch)
            self.written += len(batch)
        except Exception:  # a full disk or a locked file must not end the thread
            self.dropped += len(batch)
            log.exception("could not write %d requests to the log", len(batch))

    def _prune(self) -> None:
        if self._retention is None and self._max_bytes is None:
            return
        older_than = None if self._retention is None else time.time() - self._retention
        try:
            deleted = self._table.prune(older_than=older_than, max_bytes=self._max_bytes)
        except Exception:
            log.exception("could not prune the request log")
            return
        if deleted:
            log.info("pruned %d old requests from the log", deleted)
