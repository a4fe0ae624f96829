"""The request log: one row per API request, its timeline, and the queries over them.

Rows are written in batches by `spark.store.writer.LogWriter`, never by a
request itself. A zero-retention request is stored with its numbers and its
timeline but `content` None: the table never sees its prompt or output.

Listing orders by arrival, newest first; following (`after_seq`) orders by
`seq`, the order rows were written in, so a request that finishes late is
still seen once it is written.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import msgspec

from spark.errors import InvalidRequest, RequestNotFound, SettingsError
from spark.store.db import Database
from spark.trace import Step
from spark.types import ToolCall
from spark.units import parse_duration

LOCAL_NODE = "local"
MAX_LIMIT = 1000
ROW_BYTES = 256  # what a row takes besides its content (columns, both indexes), for pruning by size
STEP_BYTES = 48  # the same for one timeline step besides its details


class RequestContent(msgspec.Struct, frozen=True, omit_defaults=True):
    """What was asked and answered; never stored for zero-retention keys."""

    request: dict[str, Any] | None = None  # the decoded request (images left out)
    body: str | None = None  # the raw body, when it could not be decoded (cut at a limit)
    output: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = []


class RequestSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One logged request without its content and timeline (what lists show)."""

    id: str  # Spark's own id, unique
    request_id: str  # the x-request-id the client got (its own when it sent one)
    started_at: float  # Unix time it was received
    route: str  # e.g. /v1/chat/completions
    status: int  # HTTP status answered
    duration_ms: float
    seq: int = 0  # order in which rows were written (set when read back)
    model: str | None = None  # as the client named it
    key_name: str | None = None
    key_prefix: str | None = None
    node: str = LOCAL_NODE
    finish_reason: str | None = None
    error_type: str | None = None  # the error's code, e.g. context_length_exceeded
    error_message: str | None = None  # generic for zero-retention keys
    stream: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: float | None = None
    tokens_per_second: float | None = None  # output tokens per second after the first token
    zero_retention: bool = False

    @property
    def ok(self) -> bool:
        return self.status < 400 and self.error_type is None


class RequestRecord(RequestSummary, frozen=True, kw_only=True):
    """One logged request with everything kept about it."""

    content: RequestContent | None = None
    timeline: list[Step] = []


class RequestFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which requests to list. Without `after_seq`: newest first, paged by `offset`;
    with it: those written after row `after_seq`, oldest first (to follow the log)."""

    model: str | None = None
    key: str | None = None  # key name or prefix
    status: str | None = None  # "ok", "error", "failed" (an error, not a cancellation) or an HTTP status code
    since: float | None = None  # Unix time
    limit: int = 50
    offset: int = 0
    after_seq: int | None = None


EVERYTHING = RequestFilter()  # the newest requests, unfiltered


class RequestPage(msgspec.Struct, frozen=True):
    """One page of a listing, and how many requests the filter selects in all."""

    requests: list[RequestSummary]
    total: int
    last_seq: int  # the latest row written: follow the log from here with `after_seq`


class ActivityBucket(msgspec.Struct, frozen=True):
    """Requests of one model in one time bucket."""

    start: float  # Unix time the bucket starts
    model: str | None
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    ttft_ms: float | None = None  # mean time to first token of the bucket's requests that produced one
    tokens_per_second: float | None = None  # mean output speed of its requests (after the first token)
    max_queue: int = 0  # the most requests one of them found waiting ahead of it for a slot


class KeyUsage(msgspec.Struct, frozen=True):
    """What one API key's requests amounted to over a period."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Activity(msgspec.Struct, frozen=True):
    since: float
    bucket_seconds: int
    buckets: list[ActivityBucket]


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([ T].*)?")


def parse_since(text: str, now: float | None = None) -> float:
    """Unix time from a duration back from now (`90s`, `1h`, `2d`) or a date or ISO time
    (`2026-11-29`, `2026-11-29T10:30`, local time unless it names a zone)."""
    now = time.time() if now is None else now
    text = text.strip()
    if _DATE.fullmatch(text):
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            pass
    else:
        try:
            seconds = parse_duration(text, "since")
        except SettingsError:
            pass
        else:
            if seconds >= 0:
                return now - seconds
    raise InvalidRequest(
        f"since: '{text}' is neither a duration (e.g. 30m, 1h, 2d) nor a date (e.g. 2026-11-29 or 2026-11-29T10:30)",
        param="since",
    )


def check_filter(f: RequestFilter) -> RequestFilter:
    """`f` when its values make sense, else `InvalidRequest` naming the bad one."""
    if (
        f.status is not None
        and f.status not in ("ok", "error", "failed")
        and not (f.status.isdigit() and 100 <= int(f.status) <= 599)
    ):
        raise InvalidRequest(f"status: '{f.status}' is not ok, error, failed or an HTTP status code", param="status")
    if not 1 <= f.limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}, not {f.limit}", param="limit")
    if f.offset < 0:
        raise InvalidRequest(f"offset must not be negative, not {f.offset}", param="offset")
    return f


_COLUMNS = (
    "id",
    "request_id",
    "started_at",
    "route",
    "model",
    "key_name",
    "key_prefix",
    "node",
    "status",
    "finish_reason",
    "error_type",
    "error_message",
    "stream",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "ttft_ms",
    "duration_ms",
    "tokens_per_second",
    "zero_retention",
)
_SELECT = f"SELECT rowid AS seq, {', '.join(_COLUMNS)} FROM requests"
_INSERT = (
    f"INSERT OR IGNORE INTO requests ({', '.join(_COLUMNS)}, content, size_bytes) "
    f"VALUES ({', '.join('?' * (len(_COLUMNS) + 2))})"
)
_INSERT_STEP = "INSERT OR IGNORE INTO request_steps (request, seq, name, at_ms, details) VALUES (?, ?, ?, ?, ?)"
_encode = msgspec.json.Encoder().encode
_decode_content = msgspec.json.Decoder(RequestContent).decode
_decode_details = msgspec.json.Decoder(dict[str, Any]).decode


def _summary(values: dict[str, Any]) -> RequestSummary:
    values["stream"] = bool(values["stream"])
    values["zero_retention"] = bool(values["zero_retention"])
    return RequestSummary(**values)


class RequestTable:
    """Writes, queries and prunes the request log in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def insert_many(self, records: list[RequestRecord]) -> None:
        """Write `records` and their timelines in one transaction (a record already there is kept)."""
        rows, steps = [], []
        for r in records:
            content = None if r.content is None or r.zero_retention else _encode(r.content).decode()
            size = ROW_BYTES + len(content or "") + len(r.error_message or "")
            for seq, step in enumerate(r.timeline):
                details = _encode(step.details).decode()
                size += STEP_BYTES + len(details)
                steps.append((r.id, seq, step.name, step.at_ms, details))
            rows.append((*(getattr(r, c) for c in _COLUMNS), content, size))
        with self.db.transaction() as conn:
            conn.executemany(_INSERT, rows)
            conn.executemany(_INSERT_STEP, steps)

    def get(self, request_id: str) -> RequestRecord:
        """The request with Spark's id or x-request-id `request_id` (the latest of that x-request-id);
        `RequestNotFound` when there is none."""
        row = self.db.execute(
            f"{_SELECT.replace('FROM requests', ', content FROM requests')} WHERE id = ? OR request_id = ? "
            "ORDER BY started_at DESC LIMIT 1",
            (request_id, request_id),
        ).fetchone()
        if row is None:
            raise RequestNotFound(
                f"No logged request has the id '{request_id}' (it may have been pruned; "
                "`spark log` lists the recent ones).",
                param="id",
            )
        values = dict(row)
        raw = values.pop("content")
        summary = _summary(values)
        steps = self.db.execute(
            "SELECT name, at_ms, details FROM request_steps WHERE request = ? ORDER BY seq", (values["id"],)
        ).fetchall()
        return RequestRecord(
            **msgspec.structs.asdict(summary),
            content=_decode_content(raw) if raw is not None else None,
            timeline=[Step(s["name"], s["at_ms"], _decode_details(s["details"])) for s in steps],
        )

    def list(self, f: RequestFilter = EVERYTHING) -> list[RequestSummary]:
        """The requests `f` selects (see `RequestFilter` for the order)."""
        check_filter(f)
        where, params = _where(f)
        if f.after_seq is not None:
            where.append("rowid > ?")
            params.append(f.after_seq)
            order = "rowid ASC"
        else:
            order = "started_at DESC, rowid DESC"
        sql = f"{_SELECT}{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY {order} LIMIT ? OFFSET ?"
        return [_summary(dict(r)) for r in self.db.execute(sql, (*params, f.limit, f.offset)).fetchall()]

    def page(self, f: RequestFilter = EVERYTHING) -> RequestPage:
        """`list`, with the total count and the latest `seq`."""
        return RequestPage(self.list(f), self.count(f), self.last_seq())

    def count(self, f: RequestFilter = EVERYTHING) -> int:
        """How many requests `f` selects, paging aside."""
        where, params = _where(check_filter(f))
        sql = f"SELECT count(*) FROM requests{' WHERE ' + ' AND '.join(where) if where else ''}"
        return int(self.db.execute(sql, tuple(params)).fetchone()[0])

    def last_seq(self) -> int:
        """The `seq` of the latest row written (0 for an empty log)."""
        return int(self.db.execute("SELECT coalesce(max(rowid), 0) FROM requests").fetchone()[0])

    def activity(self, since: float, bucket_seconds: int = 60) -> Activity:
        """Requests, errors, tokens, speed and queueing per model per `bucket_seconds` since `since`, oldest first."""
        if bucket_seconds < 1:
            raise InvalidRequest(f"bucket must be at least 1 second, not {bucket_seconds}", param="bucket")
        rows = self.db.execute(
            "SELECT CAST(started_at / :b AS INTEGER) * :b AS start, model, count(*) AS requests, "
            "sum(status >= 400 OR error_type IS NOT NULL) AS errors, sum(prompt_tokens) AS prompt_tokens, "
            "sum(completion_tokens) AS completion_tokens, avg(ttft_ms) AS ttft_ms, "
            "avg(tokens_per_second) AS tokens_per_second, coalesce(max((SELECT json_extract(s.details, "
            "'$.position') FROM request_steps s WHERE s.request = requests.id AND s.name = 'queued')), 0) "
            "AS max_queue FROM requests WHERE started_at >= :since GROUP BY start, model ORDER BY start, model",
            {"b": bucket_seconds, "since": since},
        ).fetchall()
        return Activity(
            since,
            bucket_seconds,
            [
                ActivityBucket(
                    float(r["start"]),
                    r["model"],
                    r["requests"],
                    r["errors"],
                    r["prompt_tokens"],
                    r["completion_tokens"],
                    None if r["ttft_ms"] is None else round(r["ttft_ms"], 3),
                    None if r["tokens_per_second"] is None else round(r["tokens_per_second"], 2),
                    int(r["max_queue"]),
                )
                for r in rows
            ],
        )

    def usage_by_key(self, since: float) -> dict[str, KeyUsage]:
        """Requests and tokens per key name since Unix time `since` (keys without requests left out)."""
        rows = self.db.execute(
            "SELECT key_name, count(*) AS requests, sum(prompt_tokens) AS prompt_tokens, "
            "sum(completion_tokens) AS completion_tokens FROM requests "
            "WHERE started_at >= ? AND key_name IS NOT NULL GROUP BY key_name",
            (since,),
        ).fetchall()
        return {r["key_name"]: KeyUsage(r["requests"], r["prompt_tokens"], r["completion_tokens"]) for r in rows}

    def size_bytes(self) -> int:
        """What the log takes, as counted for pruning."""
        return int(self.db.execute("SELECT coalesce(sum(size_bytes), 0) FROM requests").fetchone()[0])

    def prune(self, *, older_than: float | None = None, max_bytes: int | None = None) -> int:
        """Delete requests received before Unix time `older_than`, then the oldest ones until the
        log fits in `max_bytes`; returns how many were deleted."""
        deleted = 0
        with self.db.transaction() as conn:
            if older_than is not None:
                deleted += conn.execute("DELETE FROM requests WHERE started_at < ?", (older_than,)).rowcount
            if max_bytes is not None:
                # the newest rows that fit stay; the first row past the limit and all older ones go
                row = conn.execute(
                    "SELECT started_at FROM (SELECT started_at, sum(size_bytes) OVER "
                    "(ORDER BY started_at DESC, rowid DESC) AS total FROM requests) WHERE total > ? LIMIT 1",
                    (max_bytes,),
                ).fetchone()
                if row is not None:
                    deleted += conn.execute("DELETE FROM requests WHERE started_at <= ?", (row[0],)).rowcount
        return deleted


def _where(f: RequestFilter) -> tuple[list[str], list[object]]:
    where: list[str] = []
    params: list[object] = []
    if f.model is not None:
        where.append("model = ?")
        params.append(f.model)
    if f.key is not None:
        where.append("(key_name = ? OR key_prefix = ?)")
        params += [f.key, f.key]
    if f.status == "ok":
        where.append("status < 400 AND error_type IS NULL")
    elif f.status in ("error", "failed"):
        where.append("(status >= 400 OR error_type IS NOT NULL)")
        if f.status == "failed":  # a request its client (or its batch's owner) cancelled did not fail
            where.append("coalesce(error_type, '') != 'cancelled'")
    elif f.status is not None:
        where.append("status = ?")
        params.append(int(f.status))
    if f.since is not None:
        where.append("started_at >= ?")
        params.append(f.since)
    return where, params
