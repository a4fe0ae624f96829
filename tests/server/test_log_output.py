"""The server's log lines are written by their own thread: a stuck output never blocks the caller."""

from __future__ import annotations

import logging
import threading

from spark.server.log_output import LogOutput


class _StuckHandler(logging.Handler):
    """Blocks on its first record until released, like a write to a pipe nobody reads."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = threading.Event()
        self.unblock = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.writing.set()
        self.unblock.wait(10)
        self.lines.append(record.getMessage())


def test_records_past_the_queue_are_dropped_and_counted() -> None:
    logger = logging.getLogger("spark.test_log_output")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    stuck = _StuckHandler()
    logger.addHandler(stuck)
    spark = logging.getLogger("spark")  # where the dropped count is reported
    reported = _StuckHandler()
    reported.unblock.set()
    spark.addHandler(reported)
    output = LogOutput(size=3)
    try:
        output.install("spark.test_log_output", "spark")
        logger.info("line 0")
        assert stuck.writing.wait(10)  # the writer took line 0 and is stuck writing it
        for n in range(1, 11):
            logger.info("line %d", n)  # returns at once although nothing is written
        assert output.dropped == 7  # lines 1-3 are queued
        stuck.unblock.set()
    finally:
        output.stop()
        restored = list(logger.handlers)
        logger.removeHandler(stuck)
        spark.removeHandler(reported)
    assert stuck.lines == ["line 0", "line 1", "line 2", "line 3"]
    assert reported.lines == ["log lines dropped while the server's output was not being read: 7"]
    assert restored == [stuck], "stop gives the loggers their own handlers back"
