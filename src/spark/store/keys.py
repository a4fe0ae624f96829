"""API keys: created once, stored only as a hash, checked on every API request.

A key is `sk-spark-` followed by 43 random URL-safe characters from `secrets`.
Keys are that random, so a plain SHA-256 is a safe one-way store (no salt or
slow hash is needed against guessing). The first characters are kept in clear
as a `prefix` so people can tell their keys apart in `spark keys list`.

The server notes each use in memory (`note_use`) and writes the times in one
go with `flush_uses`, so a request never waits on a database write.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
import time

import msgspec

from spark.errors import InvalidRequest, KeyNotFound
from spark.store.db import Database
from spark.store.responses import owner_of

KEY_PREFIX = "sk-spark-"
CONSOLE_KEY_NAME = "console"  # the web console's own key, made by its Playground
SHOWN_CHARS = 4  # random characters after KEY_PREFIX kept in clear for display
MAX_KEY_LENGTH = 256  # anything longer is not one of ours; not worth hashing
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_OWNED = (
    "responses",
    "chat_completions",
    "conversations",
    "files",
    "batches",
)  # tables whose rows belong to a key (`owner_of`)


class ApiKey(msgspec.Struct, frozen=True, kw_only=True):
    """What is known about a key without the key itself."""

    name: str
    prefix: str  # KEY_PREFIX and the key's first few characters, e.g. "sk-spark-AbC1"
    created_at: float  # Unix time
    last_used_at: float | None = None
    zero_retention: bool = False  # requests made with it are logged without their content


def key_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_key_name(name: str, what: str = "key") -> str:
    """`name` when it is a usable name for a key (or node), else `InvalidRequest` saying what is allowed."""
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"'{name}' is not a valid {what} name: use 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            param="name",
        )
    return name


def _from_row(row: sqlite3.Row) -> ApiKey:
    return ApiKey(
        name=row["name"],
        prefix=row["prefix"],
        created_at=row["created_at"],
        last_used_at=row["last_used_at"],
        zero_retention=bool(row["zero_retention"]),
    )


_COLUMNS = "name, prefix, created_at, last_used_at, zero_retention"


def _not_reserved(name: str) -> str:
    if name == CONSOLE_KEY_NAME:
        raise InvalidRequest(
            f"'{name}' is the web console's own key (its Playground makes and replaces it): choose another name",
            param="name",
        )
    return name


def _not_found(name: str) -> KeyNotFound:
    return KeyNotFound(f"there is no key named '{name}' (see `spark keys list`)", param="name")


class KeyTable:
    """Creates, lists, removes and verifies the API keys in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._uses: dict[str, float] = {}  # key name -> last use not yet written

    def create(self, name: str, *, zero_retention: bool = False) -> tuple[ApiKey, str]:
        """A new key named `name`: its record and the key itself, which is never stored."""
        return self._create(_not_reserved(check_key_name(name)), zero_retention)

    def create_console_key(self) -> str:
        """A new key for the web console's Playground, named `console` (a name no one else may take:
        the console replaces a key of that name whose secret it does not hold)."""
        return self._create(CONSOLE_KEY_NAME, False)[1]

    def _create(self, name: str, zero_retention: bool) -> tuple[ApiKey, str]:
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        record = ApiKey(
            name=name,
            prefix=secret[: len(KEY_PREFIX) + SHOWN_CHARS],
            created_at=time.time(),
            zero_retention=zero_retention,
        )
        try:
            self.db.execute(
                "INSERT INTO api_keys (name, prefix, key_hash, created_at, zero_retention) VALUES (?, ?, ?, ?, ?)",
                (name, record.prefix, key_hash(secret), record.created_at, int(zero_retention)),
            )
        except sqlite3.IntegrityError:
            raise InvalidRequest(
                f"a key named '{name}' already exists; revoke it first (`spark keys revoke {name}`) "
                "or choose another name",
                param="name",
            ) from None
        return record, secret

    def list(self) -> list[ApiKey]:
        """Every key, oldest first."""
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at, name").fetchall()
        return [_from_row(r) for r in rows]

    def get(self, name: str) -> ApiKey:
        """The key named `name`; `KeyNotFound` when there is none."""
        row = self.db.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _not_found(name)
        return _from_row(row)

    def with_pending_use(self, key: ApiKey) -> ApiKey:
        """`key` with its last use noted but not yet written (what a live view shows)."""
        pending = self._uses.get(key.name)
        if pending is None or (key.last_used_at or 0) >= pending:
            return key
        return msgspec.structs.replace(key, last_used_at=pending)

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM api_keys").fetchone()[0])

    def remove(self, name: str) -> None:
        """Revoke the key `name`; requests using it are refused from now on, and what it stored
        (responses, chat completions, conversations, files, batches) is forgotten (`KeyNotFound` if none)."""
        with self.db.transaction() as conn:
            row = conn.execute("SELECT prefix FROM api_keys WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise _not_found(name)
            conn.execute("DELETE FROM api_keys WHERE name = ?", (name,))
            for table in _OWNED:
                conn.execute(f"DELETE FROM {table} WHERE owner = ?", (owner_of(name, row["prefix"]),))
        self._uses.pop(name, None)

    def rename(self, name: str, new_name: str) -> ApiKey:
        """Give the key `name` the name `new_name`; its logged requests and what it stored (responses,
        chat completions, conversations, files, batches) follow it, so its history stays its own.
        `KeyNotFound` when there is no such key, `InvalidRequest` when the name is taken or not a
        valid name."""
        _not_reserved(check_key_name(new_name))
        try:
            with self.db.transaction() as conn:
                row = conn.execute("SELECT prefix FROM api_keys WHERE name = ?", (name,)).fetchone()
                if row is None:
                    raise _not_found(name)
                conn.execute("UPDATE api_keys SET name = ? WHERE name = ?", (new_name, name))
                conn.execute("UPDATE requests SET key_name = ? WHERE key_name = ?", (new_name, name))
                for table in _OWNED:
                    conn.execute(
                        f"UPDATE {table} SET owner = ? WHERE owner = ?",
                        (owner_of(new_name, row["prefix"]), owner_of(name, row["prefix"])),
                    )
        except sqlite3.IntegrityError:
            raise InvalidRequest(
                f"a key named '{new_name}' already exists; choose another name", param="name"
            ) from None
        if name in self._uses:
            self._uses[new_name] = self._uses.pop(name)
        return self.get(new_name)

    def verify(self, secret: str) -> ApiKey | None:
        """The key's record when `secret` is a valid key, else None."""
        if not secret or len(secret) > MAX_KEY_LENGTH:
            return None
        digest = key_hash(secret)
        row = self.db.execute(f"SELECT {_COLUMNS}, key_hash FROM api_keys WHERE key_hash = ?", (digest,)).fetchone()
        # The lookup already matched; the constant-time comparison keeps the check itself
        # free of timing differences whatever the index does.
        if row is None or not hmac.compare_digest(row["key_hash"], digest):
            return None
        return _from_row(row)

    def note_use(self, name: str, when: float | None = None) -> None:
        """Remember that key `name` was used (written by the next `flush_uses`)."""
        self._uses[name] = time.time() if when is None else when

    def flush_uses(self) -> int:
        """Write the uses noted since the last flush; returns how many keys were updated."""
        uses, self._uses = self._uses, {}  # a swap, so uses noted meanwhile wait for the next flush
        if not uses:
            return 0
        with self.db.transaction() as conn:
            conn.executemany(
                "UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE name = ?",
                [(when, name) for name, when in uses.items()],
            )
        return len(uses)
