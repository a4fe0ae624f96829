"""Stored chat completions (`store: true`, `/v1/chat/completions` listed, `/v1/chat/completions/{id}`
read, updated, deleted and its messages), driven by the official `openai` SDK against a real server."""

from __future__ import annotations

import secrets
from typing import Any

import openai
import pytest

from server.helpers import LiveServer, Models, openai_error
from spark.store.db import Database
from spark.store.keys import KeyTable


def _new_key(live: LiveServer, **options: Any) -> openai.OpenAI:
    """A client with a key of its own: the list holds only what this test stored."""
    key = KeyTable(Database(live.settings.db_path)).create(f"chats-{secrets.token_hex(4)}", **options)[1]
    return openai.OpenAI(base_url=live.url + "/v1", api_key=key, max_retries=0, timeout=60)


def test_a_stored_completion_is_read_updated_listed_and_deleted(live: LiveServer, models: Models) -> None:
    client = _new_key(live)
    asked: Any = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Say "}, {"type": "text", "text": "hi."}]},
    ]
    made = client.chat.completions.create(
        model=models.chat, messages=asked, max_tokens=4, store=True, metadata={"topic": "greeting"}
    )
    got = client.chat.completions.retrieve(made.id)
    assert got.model_dump(exclude={"metadata"}) == made.model_dump(exclude={"metadata"})  # the answer it had
    assert got.metadata == {"topic": "greeting"}
    # the messages it answered, each with an id, a message sent as parts with its parts too
    messages = client.chat.completions.messages.list(made.id)
    assert [(m.id, m.role, m.content) for m in messages.data] == [
        (f"{made.id}-0", "system", "Be brief."),
        (f"{made.id}-1", "user", "Say hi."),
    ]
    assert messages.data[0].content_parts is None and messages.data[1].content_parts is not None
    assert [p.text for p in messages.data[1].content_parts] == ["Say ", "hi."]  # type: ignore[union-attr]
    newest = client.chat.completions.messages.list(made.id, order="desc", limit=1)
    assert [m.id for m in newest.data] == [f"{made.id}-1"] and newest.has_more is True
    # the metadata is replaced, and null clears it
    assert client.chat.completions.update(made.id, metadata={"topic": "hello"}).metadata == {"topic": "hello"}
    assert client.chat.completions.retrieve(made.id).metadata == {"topic": "hello"}
    cleared = live.http(key=client.api_key).post(f"/v1/chat/completions/{made.id}", json={"metadata": None})
    assert cleared.status_code == 200 and cleared.json()["metadata"] == {}
    assert [c.id for c in client.chat.completions.list()] == [made.id]
    deleted = client.chat.completions.delete(made.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (made.id, True, "chat.completion.deleted")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(made.id)
    assert list(client.chat.completions.list()) == []


def test_a_streamed_completion_is_stored_whole_with_every_choice(live: LiveServer, models: Models) -> None:
    client = _new_key(live)
    chunks = list(
        client.chat.completions.create(
            model=models.chat,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            n=2,
            stream=True,
            stream_options={"include_usage": True},
            store=True,
        )
    )
    streamed = {
        i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        for i in (0, 1)
    }
    usage = chunks[-1].usage
    stored = client.chat.completions.retrieve(chunks[0].id)
    assert {c.index: c.message.content for c in stored.choices} == streamed
    assert stored.usage is not None and usage is not None
    assert stored.usage.completion_tokens == usage.completion_tokens
    assert stored.usage.prompt_tokens == usage.prompt_tokens
    assert stored.created == chunks[0].created and stored.model == models.chat


def test_the_list_pages_and_filters_by_model_and_metadata(live: LiveServer, models: Models) -> None:
    client = _new_key(live)
    made = [
        client.chat.completions.create(
            model=models.chat,
            messages=[{"role": "user", "content": f"number {i}"}],
            max_tokens=1,
            store=True,
            metadata={"parity": "even" if i % 2 == 0 else "odd", "n": str(i)},
        ).id
        for i in range(4)
    ]
    page = client.chat.completions.list(limit=3)  # oldest first, as OpenAI lists them
    assert [c.id for c in page.data] == made[:3] and page.has_more is True
    rest = client.chat.completions.list(limit=3, after=page.data[-1].id)
    assert [c.id for c in rest.data] == made[3:] and rest.has_more is False
    assert [c.id for c in client.chat.completions.list(limit=2)] == made  # the SDK follows the pages
    assert [c.id for c in client.chat.completions.list(order="desc")] == made[::-1]
    desc = client.chat.completions.list(order="desc", limit=2, after=made[2])
    assert [c.id for c in desc.data] == made[:2][::-1]
    assert [c.id for c in client.chat.completions.list(metadata={"parity": "odd"})] == [made[1], made[3]]
    assert [c.id for c in client.chat.completions.list(metadata={"parity": "odd", "n": "3"})] == [made[3]]
    assert [c.id for c in client.chat.completions.list(model=models.chat)] == made
    assert list(client.chat.completions.list(model="another-model")) == []
    # a completion made without store is not kept
    unstored = client.chat.completions.create(
        model=models.chat, messages=[{"role": "user", "content": "x"}], max_tokens=1
    )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(unstored.id)
    assert len(list(client.chat.completions.list())) == 4


def test_only_the_key_that_made_a_completion_sees_it(live: LiveServer, models: Models) -> None:
    owner, other = _new_key(live), _new_key(live)
    made = owner.chat.completions.create(
        model=models.chat, messages=[{"role": "user", "content": "secret"}], max_tokens=1, store=True
    )
    for call in (
        lambda: other.chat.completions.retrieve(made.id),
        lambda: other.chat.completions.update(made.id, metadata={"a": "b"}),
        lambda: other.chat.completions.delete(made.id),
        lambda: other.chat.completions.messages.list(made.id),
    ):
        with pytest.raises(openai.NotFoundError) as missing:
            call()
        assert missing.value.code == "chat_completion_not_found" and missing.value.param == "completion_id"
    assert list(other.chat.completions.list()) == []
    assert owner.chat.completions.retrieve(made.id).metadata == {}  # untouched


def test_a_zero_retention_key_stores_nothing(live: LiveServer, models: Models) -> None:
    private = _new_key(live, zero_retention=True)
    made = private.chat.completions.create(
        model=models.chat, messages=[{"role": "user", "content": "hi"}], max_tokens=1, store=True
    )
    assert made.choices[0].message is not None  # answered as usual
    with pytest.raises(openai.NotFoundError):
        private.chat.completions.retrieve(made.id)
    assert list(private.chat.completions.list()) == []


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=many", "limit"),
        ("order=up", "order"),
        ("metadata[]=x", "metadata"),
        ("&".join(f"metadata[k{i}]=v" for i in range(17)), "metadata"),
        (f"metadata[{'k' * 65}]=v", "metadata"),
    ],
)
def test_a_bad_list_query_names_its_parameter(live: LiveServer, query: str, param: str) -> None:
    error = openai_error(live.http().get(f"/v1/chat/completions?{query}"), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({}, "metadata"),
    ],
)
def test_bad_metadata_names_its_parameter(live: LiveServer, models: Models, body: dict[str, Any], param: str) -> None:
    http = live.http()
    chat = {"model": models.chat, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "store": True}
    if body:  # a completion refuses it as its update does
        error = openai_error(http.post("/v1/chat/completions", json={**chat, **body}), 400)
        assert error["param"] == param
    made = http.post("/v1/chat/completions", json=chat).json()["id"]
    assert openai_error(http.post(f"/v1/chat/completions/{made}", json=body), 400)["param"] == param


def test_unknown_completions_are_openai_errors(live: LiveServer) -> None:
    http = live.http()
    for response in (
        http.get("/v1/chat/completions/chatcmpl-nope"),
        http.post("/v1/chat/completions/chatcmpl-nope", json={"metadata": {}}),
        http.delete("/v1/chat/completions/chatcmpl-nope"),
        http.get("/v1/chat/completions/chatcmpl-nope/messages"),
    ):
        error = openai_error(response, 404)
        assert error["code"] == "chat_completion_not_found" and "chatcmpl-nope" in error["message"]
    assert http.get("/v1/chat/completions", headers={"authorization": ""}).status_code == 401
