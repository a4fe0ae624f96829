"""The stored responses table: conversations read back by their links, per owner, pruned by age."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from spark.store.db import Database
from spark.store.responses import PRUNE_EVERY, ResponseTable, StoredResponse


def _stored(n: int, previous: str | None, *, owner: str = "me/sk-1", at: float | None = None) -> StoredResponse:
    return StoredResponse(
        id=f"resp_{n}",
        owner=owner,
        created_at=time.time() if at is None else at,
        previous_id=previous,
        input=[{"role": "user", "content": f"ask {n}"}],
        response={"id": f"resp_{n}", "output": [{"type": "message", "content": [{"text": f"answer {n}"}]}]},
    )


def test_a_conversation_is_read_back_oldest_first(tmp_path: Path) -> None:
    table = ResponseTable(Database(tmp_path / "spark.db"))
    for n, previous in ((1, None), (2, "resp_1"), (3, "resp_2")):
        table.put(_stored(n, previous), retention_seconds=3600)
    chain = table.conversation("resp_3", "me/sk-1")
    assert chain is not None and [s.id for s in chain] == ["resp_1", "resp_2", "resp_3"]
    assert [len(s.items) for s in chain] == [2, 2, 2] and chain[0].items[0]["content"] == "ask 1"
    assert table.conversation("resp_3", "you/sk-2") is None  # another key's
    assert table.get("resp_2", "you/sk-2") is None and table.get("resp_2", "me/sk-1") == chain[1]
    # a link deleted ends the conversation there
    assert table.delete("resp_2", "me/sk-1") and not table.delete("resp_2", "me/sk-1")
    assert [s.id for s in table.conversation("resp_3", "me/sk-1") or []] == ["resp_3"]
    assert table.conversation("resp_2", "me/sk-1") is None


def test_old_responses_are_pruned_as_new_ones_are_written(tmp_path: Path) -> None:
    table = ResponseTable(Database(tmp_path / "spark.db"))
    table.put(_stored(1, None, at=time.time() - 7200), retention_seconds=3600)  # the first write prunes
    assert table.get("resp_1", "me/sk-1") is None
    table.put(_stored(2, None, at=time.time() - 7200), retention_seconds=3600)
    for n in range(3, PRUNE_EVERY + 1):
        table.put(_stored(n, None), retention_seconds=3600)
    assert table.get("resp_2", "me/sk-1") is not None  # not yet: pruning waits for its turn
    table.put(_stored(PRUNE_EVERY + 1, None), retention_seconds=3600)
    assert table.get("resp_2", "me/sk-1") is None and table.get("resp_3", "me/sk-1") is not None


def test_responses_a_stopped_server_left_unfinished_read_failed(tmp_path: Path) -> None:
    table = ResponseTable(Database(tmp_path / "spark.db"))
    for n, status in ((1, "queued"), (2, "in_progress"), (3, "completed")):
        stored = _stored(n, None)
        table.put(msgspec.structs.replace(stored, response={**stored.response, "status": status}), retention_seconds=60)
    assert table.end_unfinished("The server stopped.") == 2
    statuses = {n: table.get(f"resp_{n}", "me/sk-1") for n in (1, 2, 3)}
    assert {n: s.response["status"] for n, s in statuses.items() if s} == {1: "failed", 2: "failed", 3: "completed"}
    assert statuses[1] and statuses[1].response["error"] == {"code": "server_error", "message": "The server stopped."}
    assert statuses[1].response["output"]  # the rest as it was


def test_a_response_is_replaced_only_where_it_is_still_kept(tmp_path: Path) -> None:
    table = ResponseTable(Database(tmp_path / "spark.db"))
    table.put(_stored(1, None), retention_seconds=60)
    ended = msgspec.structs.replace(_stored(1, None), response={"id": "resp_1", "status": "completed"})
    assert table.replace(ended) is True
    stored = table.get("resp_1", "me/sk-1")
    assert stored is not None and stored.response["status"] == "completed"
    table.delete("resp_1", "me/sk-1")  # e.g. its key was revoked
    assert table.replace(ended) is False and table.get("resp_1", "me/sk-1") is None
