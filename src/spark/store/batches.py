"""The `batches` and `batch_items` tables: OpenAI's Batch API and Anthropic's Message Batches.

A batch is a list of requests to one endpoint that the server answers on its
own (`spark.server.batches`), for the key that sent it (its `owner`, as for
stored responses). Each request's answer (HTTP status and body) is written as
it comes, so a server that stops goes on with the requests left when it starts
again. A batch is kept until deleted (Anthropic's) or with its key.
"""

from __future__ import annotations

import msgspec

from spark.store.db import Database

_FIELDS = (
    "id, owner, api, endpoint, status, created_at, ended_at, cancelled_at, "
    "input_file_id, output_file_id, error_file_id, metadata"
)
_JOINED_FIELDS = ", ".join(f"b.{name.strip()}" for name in _FIELDS.split(","))
UNFINISHED = ("in_progress", "cancelling")
# an item's status when the batch was cancelled: never sent (no request_id), or cut short while it ran
CANCELLED_STATUS = 0


class Batch(msgspec.Struct, frozen=True, kw_only=True):
    """A batch's own fields (its requests are read apart)."""

    id: str
    owner: str
    api: str  # "openai" or "anthropic": whose shapes it speaks
    endpoint: str  # the path every request goes to, e.g. /v1/chat/completions
    status: str  # in_progress, cancelling, completed, cancelled
    created_at: float
    ended_at: float | None = None
    cancelled_at: float | None = None  # when its cancel was asked for
    input_file_id: str | None = None  # OpenAI's: the uploaded JSONL of requests
    output_file_id: str | None = None  # OpenAI's: the answers, as an uploaded file
    error_file_id: str | None = None
    metadata: dict[str, str] = {}


class BatchItem(msgspec.Struct, frozen=True, kw_only=True):
    """One request of a batch, and its answer once it has one."""

    seq: int
    custom_id: str
    body: bytes
    status: int | None = None  # the answer's HTTP status; CANCELLED_STATUS: cancelled (see CANCELLED_STATUS)
    request_id: str | None = None
    answer: bytes | None = None


class Counts(msgspec.Struct, frozen=True):
    """How a batch's requests stand."""

    total: int
    succeeded: int
    errored: int
    cancelled: int  # never sent, or cut short
    cut: int = 0  # of the cancelled, those running when the cancel came (the request log has them)

    @property
    def processing(self) -> int:
        return self.total - self.succeeded - self.errored - self.cancelled


class BatchTable:
    """Reads and writes batches in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, batch: Batch, items: list[tuple[str, bytes]]) -> None:
        """Keep a new `batch` with its requests, as (custom_id, body) in order."""
        with self.db.transaction() as conn:
            conn.execute(f"INSERT INTO batches ({_FIELDS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _row(batch))
            conn.executemany(
                "INSERT INTO batch_items (batch, seq, custom_id, body) VALUES (?, ?, ?, ?)",
                [(batch.id, seq, custom_id, body) for seq, (custom_id, body) in enumerate(items)],
            )

    def get(self, batch_id: str, owner: str | None) -> Batch | None:
        """The batch `batch_id` when `owner` made it (None: whoever did)."""
        sql, params = f"SELECT {_FIELDS} FROM batches WHERE id = ?", [batch_id]
        if owner is not None:
            sql, params = sql + " AND owner = ?", [*params, owner]
        row = self.db.execute(sql, tuple(params)).fetchone()
        return None if row is None else _batch(row)

    def listed(
        self, owner: str | None = None, api: str | None = None, *, newest: int | None = None
    ) -> list[tuple[Batch, Counts]]:
        """The batches of `owner` in `api` (None: anyone's, either API) with their counts, oldest first;
        with `newest`, only that many of the newest, newest first."""
        where = [(column, value) for column, value in (("b.owner", owner), ("b.api", api)) if value is not None]
        sql = (
            f"SELECT {_JOINED_FIELDS}, count(i.seq) AS total, "
            "coalesce(sum(i.status BETWEEN 200 AND 299), 0) AS succeeded, "
            "coalesce(sum(i.status >= 300), 0) AS errored, coalesce(sum(i.status = ?), 0) AS cancelled, "
            "coalesce(sum(i.status = ? AND i.request_id IS NOT NULL), 0) AS cut "
            "FROM batches b LEFT JOIN batch_items i ON i.batch = b.id "
            + ("WHERE " + " AND ".join(f"{column} = ?" for column, _ in where) + " " if where else "")
            + "GROUP BY b.id "
            + ("ORDER BY b.created_at, b.id" if newest is None else "ORDER BY b.created_at DESC, b.id DESC LIMIT ?")
        )
        limit = () if newest is None else (newest,)
        rows = self.db.execute(sql, (CANCELLED_STATUS, CANCELLED_STATUS, *(value for _, value in where), *limit))
        listed = []
        for row in rows:
            fields = dict(row)
            counts = Counts(*(fields.pop(name) for name in Counts.__struct_fields__))
            listed.append((_batch(fields), counts))
        return listed

    def unfinished(self) -> list[Batch]:
        """The batches still to be answered (or cancelled), whoever made them."""
        marks = ", ".join("?" * len(UNFINISHED))
        return [
            _batch(r) for r in self.db.execute(f"SELECT {_FIELDS} FROM batches WHERE status IN ({marks})", UNFINISHED)
        ]

    def update(self, batch: Batch) -> None:
        self.db.execute(
            "UPDATE batches SET status = ?, ended_at = ?, cancelled_at = ?, output_file_id = ?, error_file_id = ? "
            "WHERE id = ?",
            (batch.status, batch.ended_at, batch.cancelled_at, batch.output_file_id, batch.error_file_id, batch.id),
        )

    def items(self, batch_id: str, *, pending: bool = False) -> list[BatchItem]:
        """The batch's requests in order (only those without an answer, with `pending`)."""
        sql = "SELECT seq, custom_id, body, status, request_id, answer FROM batch_items WHERE batch = ?"
        rows = self.db.execute(sql + (" AND status IS NULL" if pending else "") + " ORDER BY seq", (batch_id,))
        return [BatchItem(**{**dict(row), "body": bytes(row["body"])}) for row in rows]

    def answered(self, batch_id: str, seq: int, status: int, request_id: str | None, answer: bytes | None) -> None:
        self.db.execute(
            "UPDATE batch_items SET status = ?, request_id = ?, answer = ? WHERE batch = ? AND seq = ?",
            (status, request_id, answer, batch_id, seq),
        )

    def cancel_pending(self, batch_id: str) -> None:
        """Mark the requests not yet answered as never sent."""
        self.db.execute(
            "UPDATE batch_items SET status = ? WHERE batch = ? AND status IS NULL", (CANCELLED_STATUS, batch_id)
        )

    def counts(self, batch_id: str) -> Counts:
        row = self.db.execute(
            "SELECT count(*), "
            "coalesce(sum(status BETWEEN 200 AND 299), 0), "
            "coalesce(sum(status >= 300), 0), "
            "coalesce(sum(status = ?), 0), "
            "coalesce(sum(status = ? AND request_id IS NOT NULL), 0) "
            "FROM batch_items WHERE batch = ?",
            (CANCELLED_STATUS, CANCELLED_STATUS, batch_id),
        ).fetchone()
        return Counts(*row)

    def delete(self, batch_id: str, owner: str) -> bool:
        """Forget the batch `batch_id` of `owner` and its requests; whether there was one."""
        return self.db.execute("DELETE FROM batches WHERE id = ? AND owner = ?", (batch_id, owner)).rowcount > 0


def _row(batch: Batch) -> tuple[object, ...]:
    return (
        batch.id,
        batch.owner,
        batch.api,
        batch.endpoint,
        batch.status,
        batch.created_at,
        batch.ended_at,
        batch.cancelled_at,
        batch.input_file_id,
        batch.output_file_id,
        batch.error_file_id,
        msgspec.json.encode(batch.metadata).decode(),
    )


def _batch(row: object) -> Batch:
    fields = dict(row)  # type: ignore[call-overload]  # a sqlite3.Row, or a dict of one
    return Batch(**{**fields, "metadata": msgspec.json.decode(fields["metadata"])})
