"""Fleet nodes known to this (central) server: names, join tokens, where they listen.

A join token is `spark-join-` and 43 random URL-safe characters; like API keys
only its SHA-256 is kept, so a plain hash is a safe one-way store. The route
secret is different: this server presents it to the node on every routed
request, so it is kept as is (in the database file, which only its owner
reads); the node keeps only its hash. Each join replaces it.
"""

from __future__ import annotations

import hmac
import secrets
import sqlite3
import time

import msgspec

from spark.errors import InvalidRequest, NodeNotFound
from spark.store.db import Database
from spark.store.keys import MAX_KEY_LENGTH, check_key_name, key_hash

JOIN_TOKEN_PREFIX = "spark-join-"
ROUTE_SECRET_PREFIX = "spark-route-"


class NodeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A node as stored: never its join token."""

    name: str
    added_at: float  # Unix time
    url: str | None = None  # the address it advertised when it joined; None until it joins
    route_secret: str | None = None  # what this server presents to it on routed requests
    joined_at: float | None = None
    draining: bool = False


_COLUMNS = "name, added_at, url, route_secret, joined_at, draining"


def _from_row(row: sqlite3.Row) -> NodeRecord:
    return NodeRecord(
        name=row["name"],
        added_at=row["added_at"],
        url=row["url"],
        route_secret=row["route_secret"],
        joined_at=row["joined_at"],
        draining=bool(row["draining"]),
    )


def _not_found(name: str) -> NodeNotFound:
    return NodeNotFound(f"there is no node named '{name}' (see `spark nodes ls`)", param="name")


def new_route_secret() -> str:
    return ROUTE_SECRET_PREFIX + secrets.token_urlsafe(32)


class NodeTable:
    """Adds, lists, removes and authenticates the fleet's nodes in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, name: str) -> tuple[NodeRecord, str]:
        """A new node named `name` (not yet joined): its record and its join token, never stored."""
        check_key_name(name, "node")
        token = JOIN_TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = NodeRecord(name=name, added_at=time.time())
        try:
            self.db.execute(
                "INSERT INTO nodes (name, token_hash, added_at) VALUES (?, ?, ?)",
                (name, key_hash(token), record.added_at),
            )
        except sqlite3.IntegrityError:
            raise InvalidRequest(
                f"a node named '{name}' already exists; remove it first (`spark nodes rm {name}`) "
                "or choose another name",
                param="name",
            ) from None
        return record, token

    def list(self) -> list[NodeRecord]:
        """Every node, in the order they were added."""
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM nodes ORDER BY added_at, name").fetchall()
        return [_from_row(r) for r in rows]

    def get(self, name: str) -> NodeRecord:
        row = self.db.execute(f"SELECT {_COLUMNS} FROM nodes WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _not_found(name)
        return _from_row(row)

    def remove(self, name: str) -> None:
        """Forget the node: its token and route secret stop working at once."""
        if self.db.execute("DELETE FROM nodes WHERE name = ?", (name,)).rowcount == 0:
            raise _not_found(name)

    def verify(self, token: str) -> NodeRecord | None:
        """The node whose join token is `token`, else None."""
        if not token or len(token) > MAX_KEY_LENGTH:
            return None
        digest = key_hash(token)
        row = self.db.execute(f"SELECT {_COLUMNS}, token_hash FROM nodes WHERE token_hash = ?", (digest,)).fetchone()
        if row is None or not hmac.compare_digest(row["token_hash"], digest):
            return None
        return _from_row(row)

    def joined(self, name: str, url: str) -> NodeRecord:
        """Record that `name` joined from `url`, with a fresh route secret."""
        now = time.time()
        changed = self.db.execute(
            "UPDATE nodes SET url = ?, route_secret = ?, joined_at = ? WHERE name = ?",
            (url, new_route_secret(), now, name),
        ).rowcount
        if changed == 0:
            raise _not_found(name)
        return self.get(name)

    def set_draining(self, name: str, draining: bool) -> NodeRecord:
        if self.db.execute("UPDATE nodes SET draining = ? WHERE name = ?", (int(draining), name)).rowcount == 0:
            raise _not_found(name)
        return self.get(name)
