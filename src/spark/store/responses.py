"""The `responses` table: Responses API answers kept for `previous_response_id` and retrieval.

Each row holds what one request added to a conversation, its own input items
and the response object it was answered with (both as the client's JSON), and
the id of the response it continued. A conversation is read back by following
those links; only the key that made a response (its `owner`) can read or
delete it. Rows older than the retention are pruned as new ones are written.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from spark.store.db import Database

MAX_CHAIN = 4096  # responses read back for one conversation at most (as many as a request's messages)
PRUNE_EVERY = 100  # writes between two prunes by age


def owner_of(key_name: str, key_prefix: str) -> str:
    """Who a stored response belongs to: an API key, by name and prefix (a new key of the same name
    is someone else)."""
    return f"{key_name}/{key_prefix}"


def key_of(owner: str) -> tuple[str, str]:
    """The key an `owner_of` names: its name and prefix."""
    name, _, prefix = owner.rpartition("/")
    return name, prefix


class StoredResponse(msgspec.Struct, frozen=True, kw_only=True):
    """One stored answer: the input items its request added and the response object."""

    id: str
    owner: str
    created_at: float
    previous_id: str | None
    input: list[Any]
    response: dict[str, Any]

    @property
    def items(self) -> list[Any]:
        """What it adds to its conversation: its input, then the response's output."""
        output = self.response.get("output")
        return [*self.input, *(output if isinstance(output, list) else ())]


class ResponseTable:
    """Reads and writes stored responses in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._writes = 0

    def put(self, stored: StoredResponse, *, retention_seconds: float) -> None:
        """Keep `stored`, and now and then forget those older than `retention_seconds`."""
        self.db.execute(
            "INSERT OR REPLACE INTO responses (id, owner, created_at, previous_id, input, response) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                stored.id,
                stored.owner,
                stored.created_at,
                stored.previous_id,
                msgspec.json.encode(stored.input).decode(),
                msgspec.json.encode(stored.response).decode(),
            ),
        )
        if self._writes % PRUNE_EVERY == 0:
            self.prune(time.time() - retention_seconds)
        self._writes += 1

    def replace(self, stored: StoredResponse) -> bool:
        """Replace the response object of `stored` where it is still kept (a background response's
        end); whether it was."""
        cursor = self.db.execute(
            "UPDATE responses SET response = ? WHERE id = ? AND owner = ?",
            (msgspec.json.encode(stored.response).decode(), stored.id, stored.owner),
        )
        return cursor.rowcount > 0

    def get(self, response_id: str, owner: str) -> StoredResponse | None:
        """The response `response_id` when `owner` made it."""
        row = self.db.execute(
            "SELECT id, owner, created_at, previous_id, input, response FROM responses WHERE id = ? AND owner = ?",
            (response_id, owner),
        ).fetchone()
        if row is None:
            return None
        return StoredResponse(
            id=row["id"],
            owner=row["owner"],
            created_at=row["created_at"],
            previous_id=row["previous_id"],
            input=msgspec.json.decode(row["input"]),
            response=msgspec.json.decode(row["response"]),
        )

    def conversation(self, response_id: str, owner: str) -> list[StoredResponse] | None:
        """The responses of the conversation `response_id` ends, oldest first (a link pruned or
        deleted ends it there); None when `response_id` itself is not `owner`'s."""
        chain: list[StoredResponse] = []
        next_id: str | None = response_id
        while next_id is not None and len(chain) < MAX_CHAIN:
            stored = self.get(next_id, owner)
            if stored is None:
                break
            chain.append(stored)
            next_id = stored.previous_id
        return chain[::-1] if chain else None

    def end_unfinished(self, message: str) -> int:
        """Mark the background responses stored as `queued` or `in_progress` (a server that stopped
        left them so) as failed with `message`; how many."""
        rows = self.db.execute(
            "SELECT id, response FROM responses WHERE json_extract(response, '$.status') IN ('queued', 'in_progress')"
        ).fetchall()
        for row in rows:
            response = msgspec.json.decode(row["response"])
            response.update(status="failed", error={"code": "server_error", "message": message})
            self.db.execute(
                "UPDATE responses SET response = ? WHERE id = ?", (msgspec.json.encode(response).decode(), row["id"])
            )
        return len(rows)

    def delete(self, response_id: str, owner: str) -> bool:
        """Forget the response `response_id` of `owner`; whether there was one."""
        cursor = self.db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
        return cursor.rowcount > 0

    def prune(self, before: float) -> int:
        """Forget the responses made before `before` (Unix time); how many."""
        return self.db.execute("DELETE FROM responses WHERE created_at < ?", (before,)).rowcount
