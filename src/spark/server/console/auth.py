"""Who may see the console: sign-in with the admin password (or a one-time link), sessions, sign-out.

With no admin password set, the server prints a one-time sign-in link when
it starts; it works once, and only from this machine (loopback), like the
local admin token it stands in for.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import threading
from typing import Any
from urllib.parse import quote, urlsplit

from litestar.connection import ASGIConnection

from spark.server.console.sessions import COOKIE, LoginThrottle, Session, SessionStore
from spark.settings import Settings
from spark.store.db import Database

log = logging.getLogger("spark.console")


def client_address(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    return connection.client.host if connection.client else ""


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def is_https(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    """Behind https: the cookie must be Secure (a TLS proxy says so with X-Forwarded-Proto)."""
    forwarded = connection.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return connection.url.scheme == "https" or forwarded == "https"


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this server only (never another host)."""
    if not target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def login_url(next_path: str) -> str:
    return "/login" if next_path in ("", "/") else f"/login?next={quote(next_path, safe='/')}"


class ConsoleAuth:
    """The console's sessions, its sign-in throttle and the one-time sign-in code."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.password = settings.admin_password
        self.sessions = SessionStore(db, settings.admin_password)
        self.throttle = LoginThrottle()
        self._one_time: str | None = None
        self._lock = threading.Lock()

    def session_of(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Session | None:
        return self.sessions.get(connection.cookies.get(COOKIE))

    def password_matches(self, presented: str) -> bool:
        return bool(self.password) and hmac.compare_digest(presented.encode(), self.password.encode())

    def new_one_time_code(self) -> str:
        """A fresh sign-in code for a link printed on this machine; it replaces any earlier one."""
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._one_time = code
        return code

    def use_one_time_code(self, presented: str, address: str) -> bool:
        """True once for the current code, from loopback only."""
        if not is_loopback(address):
            return False
        with self._lock:
            if self._one_time is None or not hmac.compare_digest(presented.encode(), self._one_time.encode()):
                return False
            self._one_time = None
        return True
