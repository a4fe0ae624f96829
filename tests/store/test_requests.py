"""The request log table and its writer: rows with timelines, filters, paging, activity, pruning, batching."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from spark.errors import InvalidRequest, RequestNotFound
from spark.store.db import MIGRATIONS, Database
from spark.store.requests import (
    ROW_BYTES,
    RequestContent,
    RequestFilter,
    RequestRecord,
    RequestTable,
    parse_since,
)
from spark.store.writer import LogWriter
from spark.trace import Step
from spark.types import ToolCall

NOW = 1_800_000_000.0


def record(n: int, **changes: object) -> RequestRecord:
    values: dict[str, object] = {
        "id": f"id{n}",
        "request_id": f"req_id{n}",
        "started_at": NOW + n,
        "route": "/v1/chat/completions",
        "status": 200,
        "duration_ms": 12.5,
        "model": "tiny",
        "key_name": "laptop",
        "key_prefix": "sk-spark-AbCd",
        "finish_reason": "length",
        "stream": False,
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "cached_tokens": 2,
        "ttft_ms": 3.0,
        "tokens_per_second": 100.0,
        "content": RequestContent(
            request={"messages": [{"role": "user", "content": f"hello {n}"}]},
            output="out",
            tool_calls=[ToolCall("c1", "f", "{}")],
        ),
        "timeline": [
            Step("received", 0.0),
            Step("slot", 1.5, {"slot": 0, "cached_tokens": 2}),
            Step("finished", 12.5, {"finish_reason": "length"}),
        ],
    }
    values.update(changes)
    return RequestRecord(**values)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(tmp_path / "spark.db")


@pytest.fixture
def table(db: Database) -> RequestTable:
    return RequestTable(db)


def test_schema_is_the_latest_migration(db: Database) -> None:
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"requests", "request_steps"} <= tables


def test_a_record_reads_back_whole(table: RequestTable) -> None:
    table.insert_many([record(1), record(2)])
    got = table.get("id1")
    assert got == msgspec.structs.replace(record(1), seq=1)
    assert got.content is not None and got.content.tool_calls == [ToolCall("c1", "f", "{}")]
    assert [s.name for s in got.timeline] == ["received", "slot", "finished"]
    assert got.timeline[1].details == {"slot": 0, "cached_tokens": 2}
    assert table.get("req_id2").id == "id2"  # by the x-request-id too
    with pytest.raises(RequestNotFound, match="'nope'") as e:
        table.get("nope")
    assert e.value.status == 404 and e.value.param == "id"


def test_a_client_id_used_twice_finds_the_latest(table: RequestTable) -> None:
    table.insert_many([record(1, request_id="mine"), record(2, request_id="mine")])
    assert table.get("mine").id == "id2"
    table.insert_many([record(2, status=500)])  # the same row again is ignored, the batch is not lost
    assert table.get("id2").status == 200


def test_zero_retention_rows_keep_no_content(table: RequestTable, db: Database) -> None:
    table.insert_many([record(1, zero_retention=True, content=RequestContent(output="SECRET"))])
    got = table.get("id1")
    assert got.zero_retention and got.content is None and got.timeline
    assert db.execute("SELECT content FROM requests").fetchone()[0] is None


def test_filters_and_paging(table: RequestTable) -> None:
    table.insert_many(
        [
            record(1),
            record(2, model="other"),
            record(3, status=400, error_type="invalid_request"),
            record(4, key_name="ci", key_prefix="sk-spark-Zz99"),
            record(5, status=200, finish_reason="cancelled"),
            record(6, status=499, error_type="cancelled"),
        ]
    )

    def ids(**f: object) -> list[str]:
        return [r.id for r in table.list(RequestFilter(**f))]  # type: ignore[arg-type]

    assert ids() == ["id6", "id5", "id4", "id3", "id2", "id1"]  # newest first
    assert ids(model="other") == ["id2"]
    assert ids(key="ci") == ids(key="sk-spark-Zz99") == ["id4"]
    assert ids(status="error") == ["id6", "id3"]
    assert ids(status="failed") == ["id3"]  # an error, but not the cancelled one
    assert ids(status="ok") == ["id5", "id4", "id2", "id1"]
    assert ids(status="499") == ["id6"]
    assert ids(since=NOW + 4) == ["id6", "id5", "id4"]
    assert ids(limit=2) == ["id6", "id5"] and ids(limit=2, offset=2) == ["id4", "id3"]
    assert table.count(RequestFilter(status="ok")) == 4
    page = table.page(RequestFilter(limit=1))
    assert [r.id for r in page.requests] == ["id6"] and page.total == 6 and page.last_seq == 6
    summary = page.requests[0]
    assert not summary.ok and summary.error_type == "cancelled" and not hasattr(summary, "content")


def test_following_sees_late_finishers_in_write_order(table: RequestTable) -> None:
    table.insert_many([record(1), record(2)])
    seen = table.last_seq()
    table.insert_many([record(0, id="late", started_at=NOW - 100)])  # started first, finished last
    assert [r.id for r in table.list(RequestFilter(after_seq=seen))] == ["late"]
    assert table.list(RequestFilter(after_seq=table.last_seq())) == []


@pytest.mark.parametrize(
    ("field", "value"), [("status", "bad"), ("status", "99"), ("limit", 0), ("limit", 5000), ("offset", -1)]
)
def test_bad_filters_name_their_parameter(table: RequestTable, field: str, value: object) -> None:
    with pytest.raises(InvalidRequest) as e:
        table.list(RequestFilter(**{field: value}))  # type: ignore[arg-type]
    assert e.value.param == field


def test_parse_since() -> None:
    assert parse_since("90s", now=1000.0) == 910.0
    assert parse_since("2h", now=10_000.0) == 2800.0
    assert parse_since("2026-11-29") == datetime(2026, 11, 29).timestamp()
    assert parse_since("2026-11-29T10:30") == datetime(2026, 11, 29, 10, 30).timestamp()
    for bad in ("yesterday", "2026-13-45", "-5m", ""):
        with pytest.raises(InvalidRequest, match="neither a duration") as e:
            parse_since(bad)
        assert e.value.param == "since"


def test_activity_per_minute_and_model(table: RequestTable) -> None:
    base = 60.0 * 30_000_000  # a whole minute
    table.insert_many(
        [
            record(1, started_at=base + 1),
            record(2, started_at=base + 59, status=500, error_type="internal_error"),
            record(3, started_at=base + 61, model="other", completion_tokens=7),
            record(4, started_at=base - 3600),
        ]
    )
    report = table.activity(base - 60)
    got = [(b.start, b.model, b.requests, b.errors, b.prompt_tokens, b.completion_tokens) for b in report.buckets]
    assert got == [(base, "tiny", 2, 1, 20, 8), (base + 60, "other", 1, 0, 10, 7)]
    hourly = table.activity(base - 60, bucket_seconds=3600).buckets  # base starts an hour too
    assert [(b.start, b.model, b.requests) for b in hourly] == [(base, "other", 1), (base, "tiny", 2)]


def test_prune_by_age_and_by_size(table: RequestTable, db: Database) -> None:
    table.insert_many([record(n) for n in range(10)])
    assert table.prune(older_than=NOW + 3) == 3
    assert [r.id for r in table.list()][-1] == "id3"
    assert db.execute("SELECT count(*) FROM request_steps WHERE request = 'id0'").fetchone()[0] == 0  # cascaded
    each = table.size_bytes() // 7
    assert each > ROW_BYTES
    assert table.prune(max_bytes=each * 3 + 1) == 4  # the three newest fit
    assert [r.id for r in table.list()] == ["id9", "id8", "id7"]
    assert table.prune(max_bytes=10**9, older_than=0) == 0


def test_writer_batches_and_flushes_on_close(table: RequestTable, db: Database) -> None:
    writer = LogWriter(table, retention_seconds=None, max_bytes=None)
    for n in range(300):
        writer.submit(record(n))
    assert writer.flush(10)
    assert table.count() == 300 and writer.written == 300
    for n in range(300, 350):
        writer.submit(record(n))
    writer.close()  # a clean shutdown writes everything queued
    assert table.count() == 350 and writer.dropped == 0
    writer.submit(record(999))  # after close: dropped, never an error
    assert writer.dropped == 1 and table.count() == 350


def test_submit_never_waits_on_the_database(table: RequestTable, db: Database) -> None:
    """While another connection holds the write lock, submitting still returns at once."""
    writer = LogWriter(table, retention_seconds=None, max_bytes=None)
    other = Database(db.path)
    holding = threading.Event()
    release = threading.Event()

    def hold_lock() -> None:
        with other.transaction():
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    holding.wait(5)
    for n in range(100):  # a submit that waited for the lock would hang here: it is released below
        writer.submit(record(n))
    assert not writer.flush(0.3)  # the writer is stuck behind the lock...
    release.set()
    holder.join()
    assert writer.flush(10) and table.count() == 100  # ...and catches up without losing anything
    writer.close()
    other.close()


def test_writer_prunes_when_it_starts(table: RequestTable) -> None:
    table.insert_many([record(1, started_at=time.time() - 3 * 86400), record(2, started_at=time.time())])
    writer = LogWriter(table, retention_seconds=86400, max_bytes=None)
    writer.flush(10)
    writer.close()
    assert [r.id for r in table.list()] == ["id2"]
