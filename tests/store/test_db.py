"""The SQLite store: migrations, connections, the models and meta tables."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from spark.errors import SparkError
from spark.store import (
    MIGRATIONS,
    Database,
    ModelRecord,
    ModelTable,
    get_meta,
    set_meta,
)


def _record(model_id: str = "tiny", **changes: object) -> ModelRecord:
    values: dict[str, object] = {
        "id": model_id,
        "path": f"/models/{model_id}.gguf",
        "shards": [f"/models/{model_id}.gguf"],
        "mmproj_path": None,
        "mmproj_owned": False,
        "size_bytes": 1234,
        "info": {"architecture": "llama", "layer_bytes": [1, 2]},
        "settings": {"system_prompt": "hi"},
        "source": "local:/models",
        "owned": False,
        "added_at": 1.5,
    }
    values.update(changes)
    return ModelRecord(**values)  # type: ignore[arg-type]


def test_new_database_is_migrated_to_latest(tmp_path: Path) -> None:
    db = Database(tmp_path / "sub" / "spark.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"models", "meta"} <= tables
    db.close()


def test_reopening_keeps_data_and_does_not_migrate_twice(tmp_path: Path) -> None:
    path = tmp_path / "spark.db"
    db = Database(path)
    ModelTable(db).insert(_record())
    db.close()
    again = Database(path)
    assert ModelTable(again).get("tiny") == _record()
    again.close()


def test_partial_migration_resumes_from_user_version(tmp_path: Path) -> None:
    path = tmp_path / "spark.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE unrelated (x)")
    conn.commit()
    conn.close()
    db = Database(path)  # version 0 with a foreign table: every step runs
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    db.close()


def test_models_stored_before_lora_adapters_read_with_none(tmp_path: Path) -> None:
    path = tmp_path / "spark.db"
    conn = sqlite3.connect(path)
    before = next(i for i, steps in enumerate(MIGRATIONS) if any("ADD COLUMN lora" in s for s in steps))
    for steps in MIGRATIONS[:before]:  # the schema before `models.lora`
        for statement in steps:
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {before}")
    row = _record()
    conn.execute(
        "INSERT INTO models (id, path, shards, mmproj_path, mmproj_owned, size_bytes, info, settings, source, owned,"
        " added_at) VALUES (?, ?, '[]', NULL, 0, 1, '{}', '{}', ?, 0, 1.5)",
        (row.id, row.path, row.source),
    )
    conn.commit()
    conn.close()
    db = Database(path)
    stored = ModelTable(db).get(row.id)
    assert stored is not None and stored.lora == []
    db.close()


def test_database_from_newer_spark_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spark.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    conn.close()
    with pytest.raises(SparkError, match="newer than this Spark"):
        Database(path)


def test_garbage_file_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "spark.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(SparkError, match="spark.db: file is not a database"):
        Database(path)


def test_each_thread_gets_its_own_connection(tmp_path: Path) -> None:
    db = Database(tmp_path / "spark.db")
    table = ModelTable(db)
    seen: list[sqlite3.Connection] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            seen.append(db.connection())
            assert table.insert(_record(f"m{i}"))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({id(c) for c in seen}) == 4
    assert [r.id for r in table.all()] == ["m0", "m1", "m2", "m3"]
    db.close()


def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    db = Database(tmp_path / "spark.db")
    table = ModelTable(db)
    with pytest.raises(RuntimeError), db.transaction():
        table.insert(_record("a"))
        raise RuntimeError("boom")
    assert table.get("a") is None
    with db.transaction():
        table.insert(_record("b"))
    assert table.get("b") is not None
    db.close()


def test_models_table_crud(tmp_path: Path) -> None:
    db = Database(tmp_path / "spark.db")
    table = ModelTable(db)
    assert table.insert(_record())
    assert not table.insert(_record(size_bytes=1))  # id taken: nothing written
    assert table.get("tiny") == _record()
    changed = _record(settings={"parallel": 2}, mmproj_path="/p.gguf", mmproj_owned=True)
    assert table.update(changed)
    assert table.get("tiny") == changed
    assert not table.update(_record("missing"))
    assert table.delete("tiny")
    assert not table.delete("tiny")
    assert table.all() == []
    db.close()


def test_meta_values_round_trip(tmp_path: Path) -> None:
    db = Database(tmp_path / "spark.db")
    assert get_meta(db, "k") is None
    set_meta(db, "k", "1")
    set_meta(db, "k", "2")
    assert get_meta(db, "k") == "2"
    db.close()
