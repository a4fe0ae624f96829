"""Who may use the admin API under /api/: the admin password, or the local admin token.

The admin password (`SPARK_ADMIN_PASSWORD`) comes as `Authorization: Bearer
PASSWORD` or HTTP Basic (any user name), from any client. The local admin
token is written fresh by the server at start to `run_dir/admin.token`,
readable by its own user only (0600), and accepted only from this machine
(loopback): it is how `spark ps`, `spark log` and the TUI on the server's
machine get in when no password is set. Whoever can read it could as well
stop the server. A third credential, `console_secret`, is made at start and
never leaves the server's memory: the web console calls /api/ routes in
process with it, after checking the browser's session (spark.server.console.inprocess).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from spark.errors import Unauthorized
from spark.settings import Settings

ADMIN_TOKEN_FILE = "admin.token"

Guard = Callable[[ASGIConnection[Any, Any, Any, Any], BaseRouteHandler], Awaitable[None]]


def admin_token_path(settings: Settings) -> Path:
    return settings.run_dir / ADMIN_TOKEN_FILE


def write_admin_token(settings: Settings) -> str:
    """A fresh admin token, written to `admin_token_path` with mode 0600 (replacing any older one)."""
    token = secrets.token_urlsafe(32)
    path = admin_token_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_suffix(f".{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others, even briefly
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.replace(temp, path)
    return token


def read_admin_token(settings: Settings) -> str | None:
    """The running server's admin token, or None when it cannot be read."""
    try:
        return admin_token_path(settings).read_text().strip() or None
    except OSError:
        return None


def presented_secret(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The secret in `Authorization: Bearer SECRET` or the password of `Authorization: Basic ...`."""
    scheme, _, value = connection.headers.get("authorization", "").strip().partition(" ")
    value = value.strip()
    if not value:
        return None
    if scheme.lower() == "bearer":
        return value
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value, validate=True).decode("utf-8").partition(":")[2] or None
        except (binascii.Error, UnicodeDecodeError):
            return None
    return None


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())  # bytes: str needs ASCII


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AdminAuth:
    """Checks admin credentials against the admin password and this server's local token."""

    def __init__(self, settings: Settings, token: str) -> None:
        self._settings = settings
        self._password = settings.admin_password
        self._token = token
        self.console_secret = secrets.token_urlsafe(32)

    def allows(self, connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
        secret = presented_secret(connection)
        if secret is None:
            return False
        if self._password and _same(secret, self._password):
            return True
        if _same(secret, self.console_secret):
            return True
        host = connection.client.host if connection.client else ""
        return _is_loopback(host) and _same(secret, self._token)

    def refusal(self) -> Unauthorized:
        token = (
            f"or, on the server's machine, the local admin token from {admin_token_path(self._settings)} "
            "(spark commands send it)"
        )
        if self._password:
            return Unauthorized(
                f"The admin API needs the admin password as `Authorization: Bearer PASSWORD` or HTTP Basic, {token}."
            )
        return Unauthorized(
            "The admin API needs the admin password, and none is set (SPARK_ADMIN_PASSWORD), "
            f"{token} as `Authorization: Bearer TOKEN`."
        )

    async def guard(self, connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        """Guard: refuse a request without admin credentials (`Unauthorized`); a coroutine so that
        Litestar runs it on the loop, not in a worker thread (see `spark.server.auth`)."""
        if not self.allows(connection):
            raise self.refusal()
