"""The `files` table: files uploaded through the Files API (OpenAI's and Anthropic's).

A file is kept with its bytes until deleted, for the key that uploaded it (its
`owner`, as for stored responses): requests of that key name it by id (a PDF or
text file to read, an image to see) instead of sending it inline.
"""

from __future__ import annotations

import msgspec

from spark.store.db import Database

_FIELDS = "id, owner, filename, purpose, media_type, size, created_at"


class StoredFile(msgspec.Struct, frozen=True, kw_only=True):
    """An uploaded file's record (its bytes are read apart)."""

    id: str
    owner: str
    filename: str
    purpose: str  # OpenAI's purpose (user_data, batch, ...); empty for Anthropic's uploads
    media_type: str
    size: int
    created_at: float


class FileTable:
    """Reads and writes uploaded files in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def put(self, file: StoredFile, data: bytes) -> None:
        self.db.execute(
            f"INSERT INTO files ({_FIELDS}, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (file.id, file.owner, file.filename, file.purpose, file.media_type, file.size, file.created_at, data),
        )

    def get(self, file_id: str, owner: str | None) -> StoredFile | None:
        """The file `file_id` when `owner` uploaded it (None: whoever did)."""
        sql, params = f"SELECT {_FIELDS} FROM files WHERE id = ?", [file_id]
        if owner is not None:
            sql, params = sql + " AND owner = ?", [*params, owner]
        row = self.db.execute(sql, tuple(params)).fetchone()
        return None if row is None else StoredFile(**dict(row))

    def content(self, file_id: str, owner: str) -> tuple[StoredFile, bytes] | None:
        """The file `file_id` with its bytes, when `owner` uploaded it."""
        row = self.db.execute(
            f"SELECT {_FIELDS}, data FROM files WHERE id = ? AND owner = ?", (file_id, owner)
        ).fetchone()
        if row is None:
            return None
        fields = dict(row)
        return StoredFile(**{k: v for k, v in fields.items() if k != "data"}), bytes(fields["data"])

    def list(self, owner: str | None, purpose: str | None = None, *, newest: int | None = None) -> list[StoredFile]:
        """`owner`'s files (None: everyone's), oldest first (of one `purpose`, when given); with `newest`,
        only that many of the newest, newest first."""
        where = [(column, value) for column, value in (("owner", owner), ("purpose", purpose)) if value is not None]
        sql = f"SELECT {_FIELDS} FROM files" + (" WHERE " + " AND ".join(f"{c} = ?" for c, _ in where) if where else "")
        order = " ORDER BY created_at, id" if newest is None else " ORDER BY created_at DESC, id DESC LIMIT ?"
        limit = () if newest is None else (newest,)
        rows = self.db.execute(sql + order, (*(value for _, value in where), *limit))
        return [StoredFile(**dict(row)) for row in rows]

    def delete(self, file_id: str, owner: str | None) -> bool:
        """Forget the file `file_id` of `owner` (None: whoever uploaded it); whether there was one."""
        sql, params = "DELETE FROM files WHERE id = ?", [file_id]
        if owner is not None:
            sql, params = sql + " AND owner = ?", [*params, owner]
        return self.db.execute(sql, tuple(params)).rowcount > 0
