"""OpenAI's Conversations API (`/v1/conversations` and its items, a Responses request's
`conversation`), driven by the official `openai` SDK against a real server."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from server.helpers import LiveServer, Models, openai_error
from spark.store.db import Database
from spark.store.keys import KeyTable


def _client(live: LiveServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.url + "/v1", api_key=key, max_retries=0, timeout=60)


def _texts(items: Any) -> list[str]:
    return [item.content[0].text for item in items]


def test_a_response_reads_its_conversation_and_adds_to_it(live: LiveServer, models: Models) -> None:
    client = live.openai()
    talk = client.conversations.create(items=[{"role": "user", "content": "My name is Ada."}], metadata={"k": "v"})
    assert talk.object == "conversation" and talk.id.startswith("conv_") and talk.metadata == {"k": "v"}
    first = client.responses.create(
        model=models.chat, conversation=talk.id, input="What is my name?", max_output_tokens=4
    )
    assert first.conversation is not None and first.conversation.id == talk.id
    # the prompt is the conversation, then the input
    whole: Any = [{"role": "user", "content": "My name is Ada."}, {"role": "user", "content": "What is my name?"}]
    counted = client.responses.input_tokens.count(model=models.chat, input=whole).input_tokens
    assert first.usage is not None and first.usage.input_tokens == counted
    assert client.responses.input_tokens.count(model=models.chat, conversation=talk.id, input="x").input_tokens > 0
    # the input and the output are the conversation's from now on, the output items by their ids
    items = list(client.conversations.items.list(talk.id, order="asc"))
    assert _texts(items[:2]) == ["My name is Ada.", "What is my name?"]
    assert [item.id for item in items[2:]] == [item.id for item in first.output]
    assert [item.status for item in items[:2]] == ["completed", "completed"]  # type: ignore[union-attr]
    # a streamed turn, naming the conversation as an object, reads all of that
    with client.responses.stream(
        model=models.chat, conversation={"id": talk.id}, input="Again?", max_output_tokens=3
    ) as stream:
        final = list(stream)[-1].response  # type: ignore[union-attr]
    whole += [*[item.model_dump() for item in first.output], {"role": "user", "content": "Again?"}]
    counted = client.responses.input_tokens.count(model=models.chat, input=whole).input_tokens
    assert final.usage is not None and final.usage.input_tokens == counted
    assert len(list(client.conversations.items.list(talk.id))) == len(items) + 1 + len(final.output)
    # the response is stored too (store defaults to true), and continuing it needs no conversation
    assert client.responses.retrieve(final.id).conversation.id == talk.id  # type: ignore[union-attr]


def test_a_request_that_fails_adds_nothing_to_its_conversation(live: LiveServer, models: Models) -> None:
    client = live.openai()
    talk = client.conversations.create(items=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", conversation=talk.id, input="x")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=models.chat, conversation=talk.id, input=[{"role": "user"}])  # type: ignore[typeddict-item]
    assert refused.value.param == "input[0].content"  # the request's own items are named as sent
    assert len(list(client.conversations.items.list(talk.id))) == 1


def test_items_are_paged_added_read_and_deleted(live: LiveServer) -> None:
    client = live.openai()
    asked: Any = [
        {"role": "user", "content": "one"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "two"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
    ]
    talk = client.conversations.create(items=asked)
    assert client.conversations.retrieve(talk.id).model_dump() == talk.model_dump()
    page = client.conversations.items.list(talk.id, limit=2)  # newest first
    assert _texts(page.data) == ["three", "two"] and page.has_more is True
    rest = client.conversations.items.list(talk.id, limit=2, after=page.last_id)
    assert _texts(rest.data) == ["one"] and rest.has_more is False
    assert _texts(client.conversations.items.list(talk.id, order="asc")) == ["one", "two", "three"]
    call: Any = [
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ]
    added = client.conversations.items.create(talk.id, items=call)
    assert [item.type for item in added.data] == ["function_call", "function_call_output"]
    assert added.first_id == added.data[0].id and added.data[0].id.startswith("fc_")
    result = client.conversations.items.retrieve(added.last_id, conversation_id=talk.id)
    assert result.type == "function_call_output" and result.output == "42"  # type: ignore[union-attr]
    assert client.conversations.items.delete(added.last_id, conversation_id=talk.id).id == talk.id
    with pytest.raises(openai.NotFoundError) as gone:
        client.conversations.items.retrieve(added.last_id, conversation_id=talk.id)
    assert gone.value.param == "item_id"  # type: ignore[attr-defined]
    assert [item.type for item in client.conversations.items.list(talk.id, limit=1).data] == ["function_call"]
    updated = client.conversations.update(talk.id, metadata={"topic": "numbers"})
    assert updated.metadata == {"topic": "numbers"} and client.conversations.retrieve(talk.id).metadata == {
        "topic": "numbers"
    }
    deleted = client.conversations.delete(talk.id)
    assert deleted.deleted is True and deleted.object == "conversation.deleted"
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(talk.id)
    empty = client.conversations.create()
    assert list(client.conversations.items.list(empty.id)) == [] and empty.metadata == {}


def test_only_the_key_that_made_a_conversation_can_use_it(live: LiveServer, models: Models) -> None:
    talk = live.openai().conversations.create(items=[{"role": "user", "content": "secret"}])
    other = _client(live, KeyTable(Database(live.settings.db_path)).create("stranger")[1])
    for attempt in (
        lambda: other.conversations.retrieve(talk.id),
        lambda: other.conversations.items.list(talk.id),
        lambda: other.conversations.items.create(talk.id, items=[{"role": "user", "content": "x"}]),
        lambda: other.conversations.update(talk.id, metadata={}),
        lambda: other.conversations.delete(talk.id),
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            attempt()
        assert refused.value.code == "conversation_not_found"  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError) as refused:
        other.responses.create(model=models.chat, conversation=talk.id, input="x", max_output_tokens=1)
    assert refused.value.param == "conversation"  # type: ignore[attr-defined]
    assert _texts(live.openai().conversations.items.list(talk.id)) == ["secret"]  # untouched


def test_a_zero_retention_key_cannot_use_conversations(live: LiveServer, models: Models) -> None:
    private = _client(live, KeyTable(Database(live.settings.db_path)).create("unkept", zero_retention=True)[1])
    with pytest.raises(openai.PermissionDeniedError) as refused:
        private.conversations.create()
    assert "zero-retention" in refused.value.message
    talk = live.openai().conversations.create()
    with pytest.raises(openai.PermissionDeniedError):
        private.responses.create(model=models.chat, conversation=talk.id, input="x", max_output_tokens=1)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/conversations", {"items": [{"role": "user"}]}, "items[0].content"),
        ("/v1/conversations", {"items": [{"type": "web_search_call"}]}, "items[0].type"),
        ("/v1/conversations", {"items": [{"role": "user", "content": 5}]}, "items[0].content"),
        ("/v1/conversations", {"items": [{"role": "user", "content": "x"}] * 21}, "items"),
        ("/v1/conversations", {"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
        ("/v1/conversations", {"metadata": {"k": "v" * 513}}, "metadata"),
        ("/v1/conversations", {"metadata": {"k": 1}}, "metadata"),
        ("/v1/conversations/{id}", {}, "metadata"),
        ("/v1/conversations/{id}/items", {"items": []}, "items"),
        ("/v1/conversations/{id}/items", {}, "items"),
        (
            "/v1/conversations/{id}/items",
            {"items": [{"type": "function_call", "call_id": "c", "arguments": "{"}]},
            "items[0].name",
        ),
    ],
)
def test_a_bad_conversation_body_names_its_parameter(
    live: LiveServer, path: str, body: dict[str, Any], param: str
) -> None:
    talk = live.openai().conversations.create()
    error = openai_error(live.http().post(path.format(id=talk.id), json=body), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert list(live.openai().conversations.items.list(talk.id)) == []


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"conversation": 5}, "conversation"), ({"conversation": {}}, "conversation.id")],
)
def test_a_bad_conversation_parameter_is_named(
    live: LiveServer, models: Models, extra: dict[str, Any], param: str
) -> None:
    body = {"model": models.chat, "input": "x", **extra}
    assert openai_error(live.http().post("/v1/responses", json=body), 400)["param"] == param


def test_a_conversation_and_a_previous_response_are_not_both_continued(live: LiveServer, models: Models) -> None:
    client = live.openai()
    made = client.responses.create(model=models.chat, input="hi", max_output_tokens=1)
    for talk_id in (client.conversations.create().id, "conv_gone"):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model=models.chat, conversation=talk_id, previous_response_id=made.id, input="x", max_output_tokens=1
            )
        assert refused.value.param == "conversation" and "Mutually exclusive" in refused.value.message  # type: ignore[attr-defined]


def test_unknown_conversations_are_openai_errors(live: LiveServer) -> None:
    http = live.http()
    for response in (
        http.get("/v1/conversations/conv_nope"),
        http.delete("/v1/conversations/conv_nope"),
        http.post("/v1/conversations/conv_nope", json={"metadata": {}}),
        http.get("/v1/conversations/conv_nope/items"),
        http.get("/v1/conversations/conv_nope/items/msg_1"),
        http.delete("/v1/conversations/conv_nope/items/msg_1"),
    ):
        error = openai_error(response, 404)
        assert error["code"] == "conversation_not_found" and "conv_nope" in error["message"]
    assert http.get("/v1/conversations/conv_nope", headers={"authorization": ""}).status_code == 401
