"""The `pulls` table: server-side pull jobs, kept so that an unfinished one resumes after a restart.

Each row is a job's JSON document, whose shape belongs to `spark.library.jobs`;
`state` is copied into its own column so unfinished jobs are found without
decoding every row.
"""

from __future__ import annotations

from typing import Any

import msgspec

from spark.store.db import Database


class PullTable:
    """Reads and writes pull jobs in `db`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def put(self, job_id: str, state: str, created_at: float, job: dict[str, Any]) -> None:
        """Insert or overwrite the job `job_id`."""
        self.db.execute(
            "INSERT INTO pulls (id, state, created_at, job) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET state = excluded.state, job = excluded.job",
            (job_id, state, created_at, msgspec.json.encode(job).decode()),
        )

    def all(self) -> list[dict[str, Any]]:
        """Every job, oldest first."""
        rows = self.db.execute("SELECT job FROM pulls ORDER BY created_at, id").fetchall()
        return [msgspec.json.decode(r[0]) for r in rows]

    def prune(self, finished_states: tuple[str, ...], keep: int) -> list[str]:
        """Delete all but the `keep` newest jobs in `finished_states`; the ids deleted."""
        marks = ", ".join("?" * len(finished_states))
        rows = self.db.execute(
            f"SELECT id FROM pulls WHERE state IN ({marks}) ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?",
            (*finished_states, keep),
        ).fetchall()
        ids = [r[0] for r in rows]
        for job_id in ids:
            self.db.execute("DELETE FROM pulls WHERE id = ?", (job_id,))
        return ids
