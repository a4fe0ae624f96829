"""Spark's SQLite database: connections and schema migrations.

One file (`settings.db_path`) in WAL mode, so a server and CLI commands can use
it at the same time. Each thread gets its own connection. The schema version is
`PRAGMA user_version`; `MIGRATIONS` is the ordered list of steps that bring a
database from one version to the next. Append new steps at the end; never edit
or reorder a released one.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spark.errors import SparkError

# MIGRATIONS[i] takes the schema from version i to i + 1; one statement per string.
MIGRATIONS: list[tuple[str, ...]] = [
    (
        # Installed models. `info` and `settings` are JSON documents owned by spark.library.
        """CREATE TABLE models (
            id TEXT PRIMARY KEY,
            path TEXT NOT NULL,
            shards TEXT NOT NULL,
            mmproj_path TEXT,
            mmproj_owned INTEGER NOT NULL DEFAULT 0,
            size_bytes INTEGER NOT NULL,
            info TEXT NOT NULL,
            settings TEXT NOT NULL,
            source TEXT NOT NULL,
            owned INTEGER NOT NULL,
            added_at REAL NOT NULL
        )""",
        # Small facts about this installation (key -> text).
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ),
    (
        # API keys: only a hash of each key is kept (spark.store.keys).
        """CREATE TABLE api_keys (
            name TEXT PRIMARY KEY,
            prefix TEXT NOT NULL,
            key_hash TEXT NOT NULL UNIQUE,
            created_at REAL NOT NULL,
            last_used_at REAL,
            zero_retention INTEGER NOT NULL DEFAULT 0
        )""",
    ),
    (
        # The request log (spark.store.requests): one row per API request, written in batches.
        # `content` is NULL for zero-retention keys; `size_bytes` is what the row and its
        # steps take, for pruning by size.
        """CREATE TABLE requests (
            id TEXT PRIMARY KEY,
            request_id TEXT NOT NULL,
            started_at REAL NOT NULL,
            route TEXT NOT NULL,
            model TEXT,
            key_name TEXT,
            key_prefix TEXT,
            node TEXT NOT NULL,
            status INTEGER NOT NULL,
            finish_reason TEXT,
            error_type TEXT,
            error_message TEXT,
            stream INTEGER NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            ttft_ms REAL,
            duration_ms REAL NOT NULL,
            tokens_per_second REAL,
            zero_retention INTEGER NOT NULL,
            content TEXT,
            size_bytes INTEGER NOT NULL
        )""",
        "CREATE INDEX requests_started_at ON requests (started_at)",
        "CREATE INDEX requests_request_id ON requests (request_id)",
        # Each request's timeline: steps with their time since it was received.
        """CREATE TABLE request_steps (
            request TEXT NOT NULL REFERENCES requests (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            name TEXT NOT NULL,
            at_ms REAL NOT NULL,
            details TEXT NOT NULL,
            PRIMARY KEY (request, seq)
        ) WITHOUT ROWID""",
    ),
    (
        # Server-side pull jobs (spark.store.pulls): `job` is a JSON document owned by
        # spark.library.jobs; unfinished jobs resume when the server starts again.
        """CREATE TABLE pulls (
            id TEXT PRIMARY KEY,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            job TEXT NOT NULL
        )""",
    ),
    (
        # Fleet nodes (spark.store.nodes): the join token only as a hash; `route_secret` is the
        # credential this server presents to the node on every routed request (the node keeps
        # only its hash), replaced at each join.
        """CREATE TABLE nodes (
            name TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL UNIQUE,
            added_at REAL NOT NULL,
            url TEXT,
            route_secret TEXT,
            joined_at REAL,
            draining INTEGER NOT NULL DEFAULT 0
        )""",
    ),
    (
        # Stored Responses API answers (spark.store.responses): the request's own input items and
        # the response object, as JSON; `previous_id` links a conversation's responses; `owner`
        # is the API key that made it (its name and prefix).
        """CREATE TABLE responses (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            created_at REAL NOT NULL,
            previous_id TEXT,
            input TEXT NOT NULL,
            response TEXT NOT NULL
        )""",
        "CREATE INDEX responses_created_at ON responses (created_at)",
    ),
    (
        # Conversations API (spark.store.conversations): a conversation's items in order, each as
        # the client's JSON with its id; `owner` is the API key that made it, as for responses.
        """CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            created_at REAL NOT NULL,
            metadata TEXT NOT NULL
        )""",
        """CREATE TABLE conversation_items (
            conversation TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            id TEXT NOT NULL,
            item TEXT NOT NULL,
            PRIMARY KEY (conversation, seq)
        ) WITHOUT ROWID""",
        "CREATE INDEX conversation_items_id ON conversation_items (conversation, id)",
        "CREATE INDEX conversations_owner ON conversations (owner)",
    ),
    (
        # Files API (spark.store.files): uploaded files, their bytes in the row; `owner` is the API
        # key that uploaded them, as for responses.
        """CREATE TABLE files (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            filename TEXT NOT NULL,
            purpose TEXT NOT NULL,
            media_type TEXT NOT NULL,
            size INTEGER NOT NULL,
            created_at REAL NOT NULL,
            data BLOB NOT NULL
        )""",
        "CREATE INDEX files_owner ON files (owner, created_at)",
    ),
    (
        # Batch APIs (spark.store.batches): a batch of requests run by the server on its own, each
        # request's body and, once answered, its HTTP status and answer.
        """CREATE TABLE batches (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            api TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at REAL NOT NULL,
            ended_at REAL,
            cancelled_at REAL,
            input_file_id TEXT,
            output_file_id TEXT,
            error_file_id TEXT,
            metadata TEXT NOT NULL
        )""",
        """CREATE TABLE batch_items (
            batch TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            custom_id TEXT NOT NULL,
            body BLOB NOT NULL,
            status INTEGER,
            request_id TEXT,
            answer BLOB,
            PRIMARY KEY (batch, seq)
        ) WITHOUT ROWID""",
        "CREATE INDEX batches_owner ON batches (owner, created_at)",
    ),
    (
        # a conversation's item found by its id alone (a Responses request's `item_reference`)
        "CREATE INDEX conversation_items_item ON conversation_items (id)",
    ),
    (
        # Stored chat completions (spark.store.chats): a chat completion made with `store`, its
        # request's messages and the completion object, as JSON; `owner` is the API key, as above.
        """CREATE TABLE chat_completions (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            created_at REAL NOT NULL,
            model TEXT NOT NULL,
            metadata TEXT NOT NULL,
            messages TEXT NOT NULL,
            completion TEXT NOT NULL
        )""",
        "CREATE INDEX chat_completions_owner ON chat_completions (owner, created_at)",
        "CREATE INDEX chat_completions_created_at ON chat_completions (created_at)",
    ),
    (
        # LoRA adapters attached to a model, a JSON list of {"path", "scale"} (spark.library)
        "ALTER TABLE models ADD COLUMN lora TEXT NOT NULL DEFAULT '[]'",
    ),
    (
        # Web console sessions (spark.store.sessions), kept across restarts: the token only as its
        # hash, and `bound` ties it to the admin password it was signed in with
        """CREATE TABLE console_sessions (
            token_hash TEXT PRIMARY KEY,
            bound TEXT NOT NULL,
            csrf TEXT NOT NULL,
            expires_at REAL NOT NULL
        )""",
    ),
]

BUSY_TIMEOUT_MS = 10_000


class Database:
    """The SQLite database at `path`, migrated to the latest schema when opened."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        try:
            self._migrate()
        except sqlite3.DatabaseError as e:
            self.close()
            raise SparkError(f"{self.path} is not a usable Spark database: {e}") from None

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (autocommit; use `transaction()` to group writes)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            except sqlite3.Error as e:
                raise SparkError(f"cannot open the database {self.path}: {e}") from None
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA foreign_keys = ON")
            except sqlite3.Error as e:
                conn.close()
                raise SparkError(f"cannot open the database {self.path}: {e}") from None
            conn.row_factory = sqlite3.Row
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, taken at once (BEGIN IMMEDIATE) so it cannot deadlock later."""
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def execute(self, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> sqlite3.Cursor:
        """Run one statement on this thread's connection."""
        return self.connection().execute(sql, params)

    def close(self) -> None:
        """Close every connection this object opened (call when no thread uses it any more)."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def _migrate(self) -> None:
        with self.transaction() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > len(MIGRATIONS):
                raise SparkError(
                    f"the database {self.path} has schema version {version}, newer than this Spark "
                    f"knows ({len(MIGRATIONS)}); upgrade Spark"
                )
            for steps in MIGRATIONS[version:]:
                for statement in steps:
                    conn.execute(statement)
            if version < len(MIGRATIONS):
                conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
