"""Console sessions in the database: kept hashed, bound to the admin password, gone when expired."""

from __future__ import annotations

import time
from pathlib import Path

from spark.store.db import Database
from spark.store.sessions import SessionTable, StoredSession


def test_a_session_is_found_by_its_token_under_its_password_until_it_expires(tmp_path: Path) -> None:
    db = Database(tmp_path / "spark.db")
    table = SessionTable(db, "pw")
    live, old = StoredSession("t" * 43, "c1", time.time() + 60), StoredSession("o" * 43, "c2", time.time() - 1)
    table.add(live)
    table.add(old)
    assert table.get(live.token) == live and table.get(old.token) is None and table.get("x" * 43) is None
    assert SessionTable(db, "other").get(live.token) is None and SessionTable(db, None).get(live.token) is None
    assert [r[0] for r in db.execute("SELECT csrf FROM console_sessions")] == ["c1", "c2"]
    table.add(StoredSession("n" * 43, "c3", time.time() + 60))  # a new session clears the expired ones
    assert sorted(r[0] for r in db.execute("SELECT csrf FROM console_sessions")) == ["c1", "c3"]
    assert not db.execute("SELECT 1 FROM console_sessions WHERE token_hash = ?", (live.token,)).fetchall()
    table.remove(live.token)
    assert table.get(live.token) is None
