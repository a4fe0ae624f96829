"""The `models` table: one row per installed model.

Rows are `ModelRecord`s; the metadata and per-model settings are JSON documents
whose shape belongs to `spark.library`, so the store never imports the library.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from spark.store.db import Database

_COLUMNS = (
    "id",
    "path",
    "shards",
    "mmproj_path",
    "mmproj_owned",
    "lora",
    "size_bytes",
    "info",
    "settings",
    "source",
    "owned",
    "added_at",
)
_JSON_COLUMNS = ("shards", "lora", "info", "settings")


class ModelRecord(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    path: str
    shards: list[str]
    mmproj_path: str | None
    mmproj_owned: bool
    size_bytes: int
    lora: list[dict[str, Any]] = []  # LoRA adapters: {"path", "scale"}
    info: dict[str, Any]
    settings: dict[str, Any]
    source: str
    owned: bool
    added_at: float


def _to_row(record: ModelRecord) -> tuple[object, ...]:
    values = msgspec.structs.asdict(record)
    return tuple(msgspec.json.encode(values[c]).decode() if c in _JSON_COLUMNS else values[c] for c in _COLUMNS)


def _from_row(row: sqlite3.Row) -> ModelRecord:
    return ModelRecord(
        id=row["id"],
        path=row["path"],
        shards=msgspec.json.decode(row["shards"]),
        mmproj_path=row["mmproj_path"],
        mmproj_owned=bool(row["mmproj_owned"]),
        lora=msgspec.json.decode(row["lora"]),
        size_bytes=row["size_bytes"],
        info=msgspec.json.decode(row["info"]),
        settings=msgspec.json.decode(row["settings"]),
        source=row["source"],
        owned=bool(row["owned"]),
        added_at=row["added_at"],
    )


class ModelTable:
    """Reads and writes installed models in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def all(self) -> list[ModelRecord]:
        rows = self.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM models ORDER BY id").fetchall()
        return [_from_row(r) for r in rows]

    def get(self, model_id: str) -> ModelRecord | None:
        row = self.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM models WHERE id = ?", (model_id,)).fetchone()
        return _from_row(row) if row else None

    def ids(self) -> list[str]:
        """Every model id, sorted."""
        return [r[0] for r in self.db.execute("SELECT id FROM models ORDER BY id").fetchall()]

    def insert(self, record: ModelRecord) -> bool:
        """Add `record`; False (and nothing written) when its id is taken."""
        marks = ", ".join("?" * len(_COLUMNS))
        try:
            self.db.execute(f"INSERT INTO models ({', '.join(_COLUMNS)}) VALUES ({marks})", _to_row(record))
        except sqlite3.IntegrityError:
            return False
        return True

    def update(self, record: ModelRecord) -> bool:
        """Overwrite the row with `record.id`; False when there is none."""
        sets = ", ".join(f"{c} = ?" for c in _COLUMNS[1:])
        cur = self.db.execute(f"UPDATE models SET {sets} WHERE id = ?", (*_to_row(record)[1:], record.id))
        return cur.rowcount > 0

    def delete(self, model_id: str) -> bool:
        """Remove the row; False when there was none."""
        return self.db.execute("DELETE FROM models WHERE id = ?", (model_id,)).rowcount > 0
