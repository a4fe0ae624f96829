"""API keys: created once, stored as a hash, verified, listed, removed, uses recorded in batches."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from spark.errors import InvalidRequest, KeyNotFound
from spark.store.chats import ChatCompletionTable, StoredChat
from spark.store.conversations import Conversation, ConversationTable
from spark.store.db import Database
from spark.store.keys import CONSOLE_KEY_NAME, KEY_PREFIX, KeyTable
from spark.store.responses import ResponseTable, StoredResponse, owner_of


@pytest.fixture
def keys(tmp_path: Path) -> KeyTable:
    return KeyTable(Database(tmp_path / "spark.db"))


def test_create_and_verify(keys: KeyTable) -> None:
    record, secret = keys.create("laptop")
    assert re.fullmatch(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{43}", secret)
    assert record.name == "laptop" and secret.startswith(record.prefix) and len(record.prefix) == len(KEY_PREFIX) + 4
    assert record.last_used_at is None and not record.zero_retention
    assert keys.verify(secret) == record
    for wrong in ("", secret[:-1], secret + "x", secret.upper(), "x" * 10_000):
        assert keys.verify(wrong) is None

    other, other_secret = keys.create("ci", zero_retention=True)
    assert other_secret != secret and keys.verify(other_secret) == other and other.zero_retention
    assert [k.name for k in keys.list()] == ["laptop", "ci"] and keys.count() == 2


def test_the_key_is_never_stored(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    db = Database(folder / "spark.db")
    record, secret = KeyTable(db).create("laptop")
    stored = b"".join(p.read_bytes() for p in folder.iterdir())  # the database and its WAL
    db.close()
    stored += (folder / "spark.db").read_bytes()  # and after the WAL is folded in
    assert record.prefix.encode() in stored, "the bytes searched hold the key's row"
    assert secret.encode() not in stored
    assert secret[len(KEY_PREFIX) :].encode() not in stored


def test_names(keys: KeyTable) -> None:
    keys.create("a.b_c-1")
    with pytest.raises(InvalidRequest, match="already exists") as e:
        keys.create("a.b_c-1")
    assert e.value.param == "name"
    for bad in ("", "-x", "has space", "x" * 65, "ü", "a/b"):
        with pytest.raises(InvalidRequest, match="not a valid key name"):
            keys.create(bad)
    assert keys.count() == 1
    # the web console's own key: no one else may take the name, which its Playground would revoke
    for take in (lambda: keys.create(CONSOLE_KEY_NAME), lambda: keys.rename("a.b_c-1", CONSOLE_KEY_NAME)):
        with pytest.raises(InvalidRequest, match="web console's own key") as e:
            take()
        assert e.value.param == "name"
    keys.create_console_key()
    assert {k.name for k in keys.list()} == {"a.b_c-1", CONSOLE_KEY_NAME}


def test_remove(keys: KeyTable) -> None:
    _, secret = keys.create("old")
    keys.remove("old")
    assert keys.verify(secret) is None and keys.list() == []
    with pytest.raises(KeyNotFound, match="no key named 'old'"):
        keys.remove("old")


def test_a_keys_stored_responses_and_conversations_follow_its_renaming_and_go_with_it(keys: KeyTable) -> None:
    responses, conversations, chats = ResponseTable(keys.db), ConversationTable(keys.db), ChatCompletionTable(keys.db)
    key, _ = keys.create("laptop")
    chat = StoredChat(
        id="chatcmpl-1",
        owner=owner_of("laptop", key.prefix),
        created_at=time.time(),
        model="m",
        metadata={},
        messages=[],
        completion={},
    )
    chats.put(chat, retention_seconds=3600)
    kept = StoredResponse(
        id="resp_1",
        owner=owner_of("laptop", key.prefix),
        created_at=time.time(),
        previous_id=None,
        input=[],
        response={},
    )
    responses.put(kept, retention_seconds=3600)
    talk = Conversation(id="conv_1", owner=owner_of("laptop", key.prefix), created_at=time.time(), metadata={})
    conversations.create(talk, [{"id": "msg_1", "role": "user", "content": "hi"}])
    keys.rename("laptop", "desk")
    assert responses.get("resp_1", owner_of("laptop", key.prefix)) is None
    assert responses.get("resp_1", owner_of("desk", key.prefix)) is not None
    assert conversations.get("conv_1", owner_of("laptop", key.prefix)) is None
    assert conversations.items("conv_1", owner_of("desk", key.prefix)) == [
        {"id": "msg_1", "role": "user", "content": "hi"}
    ]
    assert chats.get("chatcmpl-1", owner_of("laptop", key.prefix)) is None
    assert chats.get("chatcmpl-1", owner_of("desk", key.prefix)) is not None
    with pytest.raises(KeyNotFound):
        keys.rename("laptop", "other")
    keys.remove("desk")
    assert chats.get("chatcmpl-1", owner_of("desk", key.prefix)) is None
    assert responses.get("resp_1", owner_of("desk", key.prefix)) is None
    assert conversations.get("conv_1", owner_of("desk", key.prefix)) is None
    assert keys.db.execute("SELECT count(*) FROM conversation_items").fetchone()[0] == 0


def test_uses_are_written_in_batches(keys: KeyTable) -> None:
    keys.create("a")
    keys.create("b")
    keys.note_use("a", 100.0)
    keys.note_use("a", 200.0)
    assert keys.list()[0].last_used_at is None, "nothing written before a flush"
    assert keys.flush_uses() == 1
    assert {k.name: k.last_used_at for k in keys.list()} == {"a": 200.0, "b": None}
    assert keys.flush_uses() == 0
    keys.note_use("a", 150.0)  # an older time never moves last use back
    keys.flush_uses()
    assert keys.list()[0].last_used_at == 200.0
