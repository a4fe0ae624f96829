"""The conversations tables: items kept in order, per owner, gone with their conversation."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spark.store import conversations as store
from spark.store.conversations import Conversation, ConversationTable
from spark.store.db import Database


def _message(n: int) -> dict[str, str]:
    return {"id": f"msg_{n}", "type": "message", "role": "user", "content": f"say {n}"}


@pytest.fixture
def table(tmp_path: Path) -> ConversationTable:
    return ConversationTable(Database(tmp_path / "spark.db"))


def _make(table: ConversationTable, conversation_id: str = "conv_1", owner: str = "me/sk-1") -> Conversation:
    made = Conversation(id=conversation_id, owner=owner, created_at=time.time(), metadata={"k": "v"})
    table.create(made, [_message(1), _message(2)])
    return made


def test_items_are_kept_in_order_for_their_owner(table: ConversationTable) -> None:
    made = _make(table)
    assert table.get("conv_1", "me/sk-1") == made and table.get("conv_1", "you/sk-2") is None
    assert table.add_items("conv_1", "me/sk-1", [_message(3)])
    assert [i["id"] for i in table.items("conv_1", "me/sk-1") or []] == ["msg_1", "msg_2", "msg_3"]
    # another key can neither read nor add to it
    assert table.items("conv_1", "you/sk-2") is None and not table.add_items("conv_1", "you/sk-2", [_message(4)])
    assert table.item("conv_1", "you/sk-2", "msg_2") is None and table.item("conv_1", "me/sk-1", "msg_2") == _message(2)
    assert not table.delete_item("conv_1", "you/sk-2", "msg_2")
    # an item taken out leaves the others in order; one added later goes after the last
    assert table.delete_item("conv_1", "me/sk-1", "msg_2") and not table.delete_item("conv_1", "me/sk-1", "msg_2")
    table.add_items("conv_1", "me/sk-1", [_message(5)])
    assert [i["id"] for i in table.items("conv_1", "me/sk-1") or []] == ["msg_1", "msg_3", "msg_5"]


def test_metadata_is_replaced_and_a_deleted_conversation_takes_its_items(table: ConversationTable) -> None:
    _make(table)
    _make(table, "conv_2")
    changed = table.set_metadata("conv_1", "me/sk-1", {"topic": "x"})
    assert changed is not None and changed.metadata == {"topic": "x"}
    assert table.set_metadata("conv_1", "you/sk-2", {}) is None
    assert not table.delete("conv_1", "you/sk-2") and table.delete("conv_1", "me/sk-1")
    assert table.items("conv_1", "me/sk-1") is None and table.item("conv_1", "me/sk-1", "msg_1") is None
    rows = table.db.execute("SELECT DISTINCT conversation FROM conversation_items").fetchall()
    assert [row[0] for row in rows] == ["conv_2"]


def test_a_long_conversation_is_read_back_by_its_latest_items(
    table: ConversationTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "MAX_ITEMS", 3)
    _make(table)
    table.add_items("conv_1", "me/sk-1", [_message(3), _message(4)])
    assert [i["id"] for i in table.items("conv_1", "me/sk-1") or []] == ["msg_2", "msg_3", "msg_4"]
