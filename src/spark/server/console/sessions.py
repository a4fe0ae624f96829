"""Browser sessions of the web console, and the brake on guessing the admin password.

A session is a random token in an HttpOnly, SameSite=Strict cookie; the database keeps
what it maps to (`spark.store.sessions`: a restart signs nobody out, a new admin password
everybody). Each session has its own CSRF token, which every state-changing request from
the console must echo in the `X-CSRF-Token` header. Failed sign-ins are counted per client
address; past a few, that address must wait, longer after each failure.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time

from spark.store.db import Database
from spark.store.sessions import SessionTable, StoredSession

COOKIE = "spark_session"
CSRF_HEADER = "x-csrf-token"
SESSION_SECONDS = 12 * 3600
FREE_FAILURES = 5  # failed sign-ins from one address before it must wait
FIRST_WAIT_SECONDS = 2.0
MAX_WAIT_SECONDS = 300.0
FORGET_FAILURES_SECONDS = 3600.0

Session = StoredSession


class SessionStore:
    """The signed-in browsers, kept in `db` for the admin `password` they signed in with."""

    def __init__(self, db: Database, password: str | None, lifetime: float = SESSION_SECONDS) -> None:
        self._table = SessionTable(db, password)
        self._lifetime = lifetime

    def create(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(24), time.time() + self._lifetime)
        self._table.add(session)
        return session

    def get(self, token: str | None) -> Session | None:
        """The live session for a cookie's token, or None."""
        return self._table.get(token) if token else None

    def end(self, token: str | None) -> None:
        if token:
            self._table.remove(token)


def csrf_matches(session: Session, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(session.csrf.encode(), presented.encode())


class LoginThrottle:
    """Failed sign-ins per client address; past `FREE_FAILURES` each one doubles the wait (up to 5 min)."""

    def __init__(self) -> None:
        self._failures: dict[str, tuple[int, float]] = {}  # address -> (count, time of the last)
        self._lock = threading.Lock()

    def wait_seconds(self, address: str) -> float:
        """How long `address` must still wait before it may try again (0: it may)."""
        with self._lock:
            count, last = self._failures.get(address, (0, 0.0))
        if count < FREE_FAILURES:
            return 0.0
        wait = min(MAX_WAIT_SECONDS, FIRST_WAIT_SECONDS * 2.0 ** (count - FREE_FAILURES))
        return max(0.0, last + wait - time.time())

    def failed(self, address: str) -> int:
        """Record a failure; the number of failures from `address` so far."""
        now = time.time()
        with self._lock:
            count, last = self._failures.get(address, (0, 0.0))
            if now - last > FORGET_FAILURES_SECONDS:
                count = 0
            self._failures[address] = (count + 1, now)
            return count + 1

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)
