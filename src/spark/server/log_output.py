"""The server's log lines are written by a thread of their own, never by the event loop.

A handler writing to stderr/stdout blocks when whatever reads that stream stops
(a pipe nobody drains, a paused terminal); on the event loop that write would
stop every request at once, request timeouts included. The server's loggers
hand their records to a bounded queue instead, and one thread writes them out.
When the queue is full (the reader is stuck) records are dropped and counted,
and their count is logged once the output has caught up.
"""

from __future__ import annotations

import logging
import queue
import threading
from contextlib import suppress

QUEUE_RECORDS = 10_000  # records kept while the output is not read; past that they are dropped
STOP_SECONDS = 5.0  # at shutdown, how long the lines still queued may take to be written

log = logging.getLogger("spark.server")


class _Queued(logging.Handler):
    """Stands in for `target` on a logger: queues each record for the writer thread."""

    def __init__(self, output: LogOutput, target: logging.Handler) -> None:
        super().__init__(target.level)
        self._output = output
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        self._output.put(self.target, record)


class LogOutput:
    """The writer thread and its queue; `install` moves loggers' handlers behind it."""

    def __init__(self, size: int = QUEUE_RECORDS) -> None:
        self._queue: queue.Queue[tuple[logging.Handler, logging.LogRecord] | None] = queue.Queue(size)
        self._lock = threading.Lock()
        self._dropped = 0
        self._thread = threading.Thread(target=self._run, name="spark-log-output", daemon=True)
        self._loggers: list[tuple[logging.Logger, list[logging.Handler]]] = []

    @property
    def dropped(self) -> int:
        """Records dropped (and not yet reported) because the output was not being read."""
        return self._dropped

    def install(self, *names: str) -> None:
        """Queue the records of the loggers `names` (their handlers then run on the writer thread)."""
        for name in names:
            logger = logging.getLogger(name)
            self._loggers.append((logger, list(logger.handlers)))
            logger.handlers = [_Queued(self, h) for h in logger.handlers]
        self._thread.start()

    def put(self, target: logging.Handler, record: logging.LogRecord) -> None:
        try:
            self._queue.put_nowait((target, record))
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            target, record = item
            target.handle(record)
            if self._queue.empty():  # caught up: the count has room in the queue
                self._report_dropped()

    def _report_dropped(self) -> None:
        with self._lock:
            dropped, self._dropped = self._dropped, 0
        if dropped:
            log.warning("log lines dropped while the server's output was not being read: %d", dropped)

    def stop(self) -> None:
        """Write what is queued (for up to STOP_SECONDS), then give the loggers their handlers back."""
        if self._thread.is_alive():
            with suppress(queue.Full):
                self._queue.put(None, timeout=STOP_SECONDS)
            self._thread.join(STOP_SECONDS)
        for logger, handlers in self._loggers:
            logger.handlers = handlers
        self._loggers.clear()
        self._report_dropped()  # what the writer had no time to tell
