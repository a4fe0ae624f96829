"""The web console's sessions, kept in the database so that a server restart signs nobody out.

A session's token is random (32 bytes), so it is stored only as its SHA-256, as API keys are.
Each row is also bound to the admin password the session was signed in with: `bound` is a
hash of the token and that password, so a server started with another password (or with one
where there was none) finds no session valid, and the database alone reveals neither.
"""

from __future__ import annotations

import hashlib
import hmac
import time

import msgspec

from spark.store.db import Database


class StoredSession(msgspec.Struct, frozen=True):
    token: str
    csrf: str
    expires_at: float  # Unix time


class SessionTable:
    """Console sessions in `db`, valid for the admin `password` they were made under."""

    def __init__(self, db: Database, password: str | None) -> None:
        self._db = db
        self._password = password or ""

    def add(self, session: StoredSession) -> None:
        """Keep `session` (and forget the expired ones)."""
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM console_sessions WHERE expires_at <= ?", (time.time(),))
            conn.execute(
                "INSERT INTO console_sessions (token_hash, bound, csrf, expires_at) VALUES (?, ?, ?, ?)",
                (_hash(session.token), self._bound(session.token), session.csrf, session.expires_at),
            )

    def get(self, token: str) -> StoredSession | None:
        """The live session whose token this is, made under the current password; None otherwise."""
        row = self._db.execute(
            "SELECT bound, csrf, expires_at FROM console_sessions WHERE token_hash = ?", (_hash(token),)
        ).fetchone()
        if row is None or row["expires_at"] <= time.time():
            return None
        if not hmac.compare_digest(row["bound"], self._bound(token)):
            return None
        return StoredSession(token, row["csrf"], row["expires_at"])

    def remove(self, token: str) -> None:
        self._db.execute("DELETE FROM console_sessions WHERE token_hash = ?", (_hash(token),))

    def _bound(self, token: str) -> str:
        return hashlib.sha256(f"{token}\0{self._password}".encode()).hexdigest()


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
