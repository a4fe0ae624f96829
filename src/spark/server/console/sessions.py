"""Browser sessions of the web console, and the brake on guessing the admin password.

A session is a random token in an HttpOnly, SameSite=Strict cookie; the server
keeps what it maps to (in memory: a restart signs everyone out). Each session
has its own CSRF token, which every state-changing request from the console
must echo in the `X-CSRF-Token` header. Failed sign-ins are counted per client
address; past a few, that address must wait, longer after each failure.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time

import msgspec

COOKIE = "spark_session"
CSRF_HEADER = "x-csrf-token"
SESSION_SECONDS = 12 * 3600
FREE_FAILURES = 5  # failed sign-ins from one address before it must wait
FIRST_WAIT_SECONDS = 2.0
MAX_WAIT_SECONDS = 300.0
FORGET_FAILURES_SECONDS = 3600.0


class Session(msgspec.Struct, frozen=True):
    token: str
    csrf: str
    expires_at: float  # Unix time


class SessionStore:
    """The signed-in browsers; thread-safe."""

    def __init__(self, lifetime: float = SESSION_SECONDS) -> None:
        self._lifetime = lifetime
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(24), time.time() + self._lifetime)
        with self._lock:
            self._drop_expired()
            self._sessions[session.token] = session
        return session

    def get(self, token: str | None) -> Session | None:
        """The live session for a cookie's token, or None."""
        if not token:
            return None
        with self._lock:
            # compare in constant time against each: a dict lookup by secret would leak timing
            found = next((s for t, s in self._sessions.items() if hmac.compare_digest(t, token)), None)
        return found if found is not None and found.expires_at > time.time() else None

    def end(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._sessions.pop(token, None)

    def _drop_expired(self) -> None:
        now = time.time()
        for token in [t for t, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[token]


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
