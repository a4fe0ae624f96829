"""The stored chat completions table: pages in a stable order, filters, metadata, pruning."""

from __future__ import annotations

from pathlib import Path

from spark.store.chats import ChatCompletionTable, StoredChat
from spark.store.db import Database


def _chat(n: int, *, at: float, owner: str = "k/p", model: str = "m", **metadata: str) -> StoredChat:
    return StoredChat(
        id=f"chatcmpl-{n}",
        owner=owner,
        created_at=at,
        model=model,
        metadata=metadata,
        messages=[{"role": "user", "content": str(n)}],
        completion={"id": f"chatcmpl-{n}", "object": "chat.completion"},
    )


def _ids(page: tuple[list[StoredChat], bool]) -> tuple[list[str], bool]:
    return [c.id for c in page[0]], page[1]


def test_pages_follow_creation_order_even_within_one_second(tmp_path: Path) -> None:
    table = ChatCompletionTable(Database(tmp_path / "spark.db"))
    for n in range(5):  # three made at the same time: they keep the order they were written in
        table.put(_chat(n, at=100.0 if n < 3 else 100.0 + n), retention_seconds=1e12)
    assert _ids(table.list("k/p", limit=2)) == (["chatcmpl-0", "chatcmpl-1"], True)
    assert _ids(table.list("k/p", limit=2, after="chatcmpl-1")) == (["chatcmpl-2", "chatcmpl-3"], True)
    assert _ids(table.list("k/p", limit=2, after="chatcmpl-3")) == (["chatcmpl-4"], False)
    assert _ids(table.list("k/p", limit=2, order="desc", after="chatcmpl-3")) == (["chatcmpl-2", "chatcmpl-1"], True)
    assert _ids(table.list("other/q", limit=10)) == ([], False)


def test_filters_by_model_and_every_metadata_pair(tmp_path: Path) -> None:
    table = ChatCompletionTable(Database(tmp_path / "spark.db"))
    table.put(_chat(1, at=1, model="a", team="x", env="prod"), retention_seconds=1e12)
    table.put(_chat(2, at=2, model="b", team="x"), retention_seconds=1e12)
    table.put(_chat(3, at=3, model="a", team="y", env="prod"), retention_seconds=1e12)
    assert _ids(table.list("k/p", limit=10, model="a"))[0] == ["chatcmpl-1", "chatcmpl-3"]
    assert _ids(table.list("k/p", limit=10, metadata={"team": "x"}))[0] == ["chatcmpl-1", "chatcmpl-2"]
    assert _ids(table.list("k/p", limit=10, metadata={"team": "x", "env": "prod"}))[0] == ["chatcmpl-1"]
    assert _ids(table.list("k/p", limit=10, metadata={'te"am': "x"}))[0] == []  # a key is a value, not a path


def test_metadata_is_replaced_and_old_completions_are_pruned(tmp_path: Path) -> None:
    table = ChatCompletionTable(Database(tmp_path / "spark.db"))
    table.put(_chat(1, at=10, a="1"), retention_seconds=1e12)
    table.put(_chat(2, at=20), retention_seconds=1e12)
    updated = table.set_metadata("chatcmpl-1", "k/p", {"b": "2"})
    assert (
        updated is not None
        and updated.metadata == {"b": "2"}
        and updated.messages == [{"role": "user", "content": "1"}]
    )
    assert table.set_metadata("chatcmpl-1", "other/q", {}) is None
    assert table.prune(15) == 1
    assert table.get("chatcmpl-1", "k/p") is None and table.get("chatcmpl-2", "k/p") is not None
    assert table.delete("chatcmpl-2", "k/p") and not table.delete("chatcmpl-2", "k/p")
