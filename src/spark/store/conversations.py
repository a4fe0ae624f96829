"""The `conversations` and `conversation_items` tables: OpenAI's Conversations API.

A conversation is a list of items (messages, function calls and their outputs,
reasoning) that Responses requests naming it read before their input and add
their input and output to. Each item is kept as the client's JSON with its
`id`, in order. Only the key that made a conversation (its `owner`, as for
stored responses) can read, change or delete it; unlike stored responses,
conversations are kept until deleted.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from spark.store.db import Database

MAX_ITEMS = 4096  # items read back for one conversation at most (as many as a request's messages)


class Conversation(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation's own fields (its items are read apart)."""

    id: str
    owner: str
    created_at: float
    metadata: dict[str, str]


class ConversationTable:
    """Reads and writes conversations and their items in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, conversation: Conversation, items: list[dict[str, Any]]) -> None:
        """Keep a new `conversation` with its first `items` (each with an `id`)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO conversations (id, owner, created_at, metadata) VALUES (?, ?, ?, ?)",
                (conversation.id, conversation.owner, conversation.created_at, _json(conversation.metadata)),
            )
            _append(conn, conversation.id, items)

    def get(self, conversation_id: str, owner: str) -> Conversation | None:
        """The conversation `conversation_id` when `owner` made it."""
        row = self.db.execute(
            "SELECT id, owner, created_at, metadata FROM conversations WHERE id = ? AND owner = ?",
            (conversation_id, owner),
        ).fetchone()
        if row is None:
            return None
        return Conversation(
            id=row["id"],
            owner=row["owner"],
            created_at=row["created_at"],
            metadata=msgspec.json.decode(row["metadata"]),
        )

    def set_metadata(self, conversation_id: str, owner: str, metadata: dict[str, str]) -> Conversation | None:
        """Replace the metadata of `owner`'s conversation `conversation_id`; the conversation now,
        None when there is no such conversation of `owner`'s."""
        self.db.execute(
            "UPDATE conversations SET metadata = ? WHERE id = ? AND owner = ?",
            (_json(metadata), conversation_id, owner),
        )
        return self.get(conversation_id, owner)

    def delete(self, conversation_id: str, owner: str) -> bool:
        """Forget `owner`'s conversation `conversation_id` and its items; whether there was one."""
        cursor = self.db.execute("DELETE FROM conversations WHERE id = ? AND owner = ?", (conversation_id, owner))
        return cursor.rowcount > 0

    def items(self, conversation_id: str, owner: str) -> list[dict[str, Any]] | None:
        """The items of `owner`'s conversation `conversation_id`, oldest first (at most `MAX_ITEMS`,
        the latest); None when there is no such conversation of `owner`'s."""
        if self.get(conversation_id, owner) is None:
            return None
        rows = self.db.execute(
            "SELECT item FROM conversation_items WHERE conversation = ? ORDER BY seq DESC LIMIT ?",
            (conversation_id, MAX_ITEMS),
        ).fetchall()
        return [msgspec.json.decode(row["item"]) for row in reversed(rows)]

    def add_items(self, conversation_id: str, owner: str, items: list[dict[str, Any]]) -> bool:
        """Add `items` (each with an `id`) at the end of `owner`'s conversation `conversation_id`;
        whether there is such a conversation."""
        with self.db.transaction() as conn:
            found = conn.execute(
                "SELECT 1 FROM conversations WHERE id = ? AND owner = ?", (conversation_id, owner)
            ).fetchone()
            if found is not None:
                _append(conn, conversation_id, items)
        return found is not None

    def item(self, conversation_id: str | None, owner: str, item_id: str) -> dict[str, Any] | None:
        """The item `item_id` of `owner`'s conversation `conversation_id` (None: of any of theirs)."""
        row = self.db.execute(
            "SELECT i.item FROM conversation_items i JOIN conversations c ON c.id = i.conversation "
            "WHERE coalesce(?, i.conversation) = i.conversation AND c.owner = ? AND i.id = ? "
            "ORDER BY i.seq LIMIT 1",
            (conversation_id, owner, item_id),
        ).fetchone()
        return None if row is None else msgspec.json.decode(row["item"])

    def delete_item(self, conversation_id: str, owner: str, item_id: str) -> bool:
        """Take the item `item_id` out of `owner`'s conversation `conversation_id`; whether it was there."""
        cursor = self.db.execute(
            "DELETE FROM conversation_items WHERE conversation = ? AND id = ? "
            "AND conversation IN (SELECT id FROM conversations WHERE owner = ?)",
            (conversation_id, item_id, owner),
        )
        return cursor.rowcount > 0


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _append(conn: sqlite3.Connection, conversation_id: str, items: list[dict[str, Any]]) -> None:
    last = conn.execute(
        "SELECT coalesce(max(seq), -1) FROM conversation_items WHERE conversation = ?", (conversation_id,)
    ).fetchone()[0]
    conn.executemany(
        "INSERT INTO conversation_items (conversation, seq, id, item) VALUES (?, ?, ?, ?)",
        [(conversation_id, last + 1 + i, item["id"], _json(item)) for i, item in enumerate(items)],
    )
