"""The `chat_completions` table: chat completions made with `store`, for OpenAI's stored-completion routes.

Each row holds the request's messages and the completion object (both as the
client's JSON), the model and the metadata the client can filter and update.
Only the key that made a completion (its `owner`) can read, update or delete
it. Rows older than the retention are pruned as new ones are written.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec

from spark.store.db import Database

PRUNE_EVERY = 100  # writes between two prunes by age
_COLUMNS = "id, owner, created_at, model, metadata, messages, completion"


class StoredChat(msgspec.Struct, frozen=True, kw_only=True):
    """One stored chat completion: the messages it answered and the completion object."""

    id: str
    owner: str
    created_at: float
    model: str
    metadata: dict[str, str]
    messages: list[Any]
    completion: dict[str, Any]


class ChatCompletionTable:
    """Reads and writes stored chat completions in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._writes = 0

    def put(self, stored: StoredChat, *, retention_seconds: float) -> None:
        """Keep `stored`, and now and then forget those older than `retention_seconds`."""
        self.db.execute(
            f"INSERT OR REPLACE INTO chat_completions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                stored.id,
                stored.owner,
                stored.created_at,
                stored.model,
                _json(stored.metadata),
                _json(stored.messages),
                _json(stored.completion),
            ),
        )
        if self._writes % PRUNE_EVERY == 0:
            self.prune(time.time() - retention_seconds)
        self._writes += 1

    def get(self, completion_id: str, owner: str) -> StoredChat | None:
        """The completion `completion_id` when `owner` made it."""
        row = self.db.execute(
            f"SELECT {_COLUMNS} FROM chat_completions WHERE id = ? AND owner = ?", (completion_id, owner)
        ).fetchone()
        return None if row is None else _stored(row)

    def list(
        self,
        owner: str,
        *,
        limit: int,
        after: str | None = None,
        order: Literal["asc", "desc"] = "asc",
        model: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> tuple[list[StoredChat], bool]:
        """A page of `owner`'s completions by creation time (of `model`, with every pair of
        `metadata`): the `limit` after the completion `after`, and whether more follow."""
        where, params = ["owner = ?"], [owner]
        if model is not None:
            where.append("model = ?")
            params.append(model)
        for key, value in (metadata or {}).items():
            where.append("EXISTS (SELECT 1 FROM json_each(metadata) WHERE key = ? AND value = ?)")
            params += [key, value]
        if after is not None:
            # the same order of rows whatever the times: creation time, then rowid
            compare = ">" if order == "asc" else "<"
            where.append(
                f"(created_at, rowid) {compare} "
                "(SELECT created_at, rowid FROM chat_completions WHERE id = ? AND owner = ?)"
            )
            params += [after, owner]
        direction = "ASC" if order == "asc" else "DESC"
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM chat_completions WHERE {' AND '.join(where)} "
            f"ORDER BY created_at {direction}, rowid {direction} LIMIT ?",
            (*params, limit + 1),
        ).fetchall()
        return [_stored(row) for row in rows[:limit]], len(rows) > limit

    def set_metadata(self, completion_id: str, owner: str, metadata: dict[str, str]) -> StoredChat | None:
        """Replace the metadata of `owner`'s completion `completion_id`; the completion, or None."""
        self.db.execute(
            "UPDATE chat_completions SET metadata = ? WHERE id = ? AND owner = ?",
            (_json(metadata), completion_id, owner),
        )
        return self.get(completion_id, owner)

    def delete(self, completion_id: str, owner: str) -> bool:
        """Forget `owner`'s completion `completion_id`; whether there was one."""
        cursor = self.db.execute("DELETE FROM chat_completions WHERE id = ? AND owner = ?", (completion_id, owner))
        return cursor.rowcount > 0

    def prune(self, before: float) -> int:
        """Forget the completions made before `before` (Unix time); how many."""
        return self.db.execute("DELETE FROM chat_completions WHERE created_at < ?", (before,)).rowcount


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _stored(row: Any) -> StoredChat:
    return StoredChat(
        id=row["id"],
        owner=row["owner"],
        created_at=row["created_at"],
        model=row["model"],
        metadata=msgspec.json.decode(row["metadata"]),
        messages=msgspec.json.decode(row["messages"]),
        completion=msgspec.json.decode(row["completion"]),
    )
