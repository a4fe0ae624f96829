"""Stored Responses API answers (`previous_response_id`, `GET`/`DELETE /v1/responses/{id}`,
`/input_items`), driven by the official `openai` SDK against a real server."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from server.helpers import LiveServer, Models, openai_error, wait_for
from spark.store.db import Database
from spark.store.keys import KeyTable


def _client(live: LiveServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.url + "/v1", api_key=key, max_retries=0, timeout=60)


def test_a_conversation_continues_from_a_stored_response(live: LiveServer, models: Models) -> None:
    client = live.openai()
    first = client.responses.create(
        model=models.chat, instructions="You are terse.", input="My name is Ada.", max_output_tokens=4
    )
    assert first.store is True and first.previous_response_id is None
    then = client.responses.create(
        model=models.chat, previous_response_id=first.id, input="What is my name?", max_output_tokens=4
    )
    assert then.previous_response_id == first.id and then.store is True
    # the prompt is the whole conversation, as a client sending it all would send it (the first
    # turn's instructions are not carried over, as with OpenAI)
    whole: Any = [
        {"role": "user", "content": "My name is Ada."},
        *[item.model_dump() for item in first.output],
        {"role": "user", "content": "What is my name?"},
    ]
    sent = client.responses.input_tokens.count(model=models.chat, input=whole).input_tokens
    assert then.usage is not None and then.usage.input_tokens == sent
    continued = client.responses.input_tokens.count(
        model=models.chat, previous_response_id=first.id, input="What is my name?"
    )
    assert continued.input_tokens == sent
    # and a third turn continues the second: the whole chain
    third = client.responses.create(model=models.chat, previous_response_id=then.id, input="Bye.", max_output_tokens=2)
    whole += [*[item.model_dump() for item in then.output], {"role": "user", "content": "Bye."}]
    assert third.usage is not None
    assert third.usage.input_tokens == client.responses.input_tokens.count(model=models.chat, input=whole).input_tokens


def test_a_streamed_response_is_stored_before_it_ends(live: LiveServer, models: Models) -> None:
    client = live.openai()
    with client.responses.stream(model=models.chat, input="hi", max_output_tokens=3) as stream:
        events = list(stream)
    final = events[-1].response  # type: ignore[union-attr]
    kept = client.responses.retrieve(final.id)
    assert kept.model_dump() == final.model_dump() and kept.store is True
    then = client.responses.create(model=models.chat, previous_response_id=final.id, input="more", max_output_tokens=2)
    assert then.previous_response_id == final.id


def test_a_streamed_response_can_be_read_while_it_streams(live: LiveServer, models: Models) -> None:
    """Its id comes with the first event: read then, it is `in_progress` with its output so far,
    for its own key only, and cannot be streamed again (it is no background response). Its
    client gone, the answer stops unstored and reads as none; one not stored never reads."""
    client = live.openai()
    other = _client(live, KeyTable(Database(live.settings.db_path)).create("onlooker")[1])
    with client.responses.stream(model=models.slow, input="hi", max_output_tokens=4000) as stream:
        response_id = ""
        for event in stream:
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_text.delta":
                break
        during = client.responses.retrieve(response_id)
        assert during.status == "in_progress" and during.output_text
        assert during.output[0].status == "in_progress"  # type: ignore[union-attr]
        later = client.responses.retrieve(response_id)
        assert later.output_text.startswith(during.output_text)
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(response_id)
        error = openai_error(live.http().get(f"/v1/responses/{response_id}?stream=true"), 400)
        assert error["param"] == "stream"
    wait_for(lambda: live.http().get(f"/v1/responses/{response_id}").status_code == 404, 10, "the response to go")

    with client.responses.stream(model=models.chat, input="hi", max_output_tokens=40, store=False) as stream:
        created = next(e for e in stream if e.type == "response.created")
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.response.id)  # type: ignore[union-attr]


def test_retrieve_list_input_items_and_delete(live: LiveServer, models: Models) -> None:
    client = live.openai()
    asked: Any = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
    ]
    made = client.responses.create(model=models.chat, input=asked, max_output_tokens=3, metadata={"k": "v"})
    kept = client.responses.retrieve(made.id)
    assert kept.id == made.id and kept.output_text == made.output_text and kept.metadata == {"k": "v"}
    items = client.responses.input_items.list(made.id, order="asc")
    texts = [item.content[0].text for item in items.data]  # type: ignore[union-attr]
    assert texts == ["one", "two", "three"] and len({item.id for item in items.data}) == 3
    assert [item.content[0].type for item in items.data] == ["input_text", "output_text", "input_text"]  # type: ignore[union-attr]
    page = client.responses.input_items.list(made.id, limit=2)  # newest first
    assert [item.content[0].text for item in page.data] == ["three", "two"]  # type: ignore[union-attr]
    assert page.has_more is True and page.last_id == page.data[-1].id
    rest = client.responses.input_items.list(made.id, limit=2, after=page.last_id)
    assert [item.content[0].text for item in rest.data] == ["one"] and rest.has_more is False  # type: ignore[union-attr]
    deleted = live.http().delete(f"/v1/responses/{made.id}")
    assert deleted.status_code == 200 and deleted.json() == {"id": made.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve(made.id)
    assert gone.value.code == "response_not_found"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=models.chat, previous_response_id=made.id, input="x", max_output_tokens=1)
    assert refused.value.code == "previous_response_not_found" and refused.value.param == "previous_response_id"


def test_only_the_key_that_made_a_response_can_see_it(live: LiveServer, models: Models) -> None:
    made = live.openai().responses.create(model=models.chat, input="secret", max_output_tokens=2)
    other = _client(live, KeyTable(Database(live.settings.db_path)).create("other")[1])
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.input_items.list(made.id)
    with pytest.raises(openai.BadRequestError) as refused:
        other.responses.create(model=models.chat, previous_response_id=made.id, input="x", max_output_tokens=1)
    assert refused.value.param == "previous_response_id"
    assert openai_error(live.http(key=other.api_key).delete(f"/v1/responses/{made.id}"), 404)["code"] == (
        "response_not_found"
    )
    assert live.openai().responses.retrieve(made.id).id == made.id  # still there for its own key


def test_nothing_is_stored_without_store_or_with_a_zero_retention_key(live: LiveServer, models: Models) -> None:
    client = live.openai()
    unstored = client.responses.create(model=models.chat, input="hi", max_output_tokens=2, store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    private = _client(live, KeyTable(Database(live.settings.db_path)).create("private", zero_retention=True)[1])
    made = private.responses.create(model=models.chat, input="hi", max_output_tokens=2)
    assert made.store is False
    with pytest.raises(openai.NotFoundError):
        private.responses.retrieve(made.id)


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=101", "limit"), ("limit=many", "limit"), ("order=up", "order")],
)
def test_a_bad_input_items_query_names_its_parameter(live: LiveServer, models: Models, query: str, param: str) -> None:
    made = live.openai().responses.create(model=models.chat, input="hi", max_output_tokens=1)
    error = openai_error(live.http().get(f"/v1/responses/{made.id}/input_items?{query}"), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_unknown_responses_are_openai_errors(live: LiveServer) -> None:
    http = live.http()
    for response in (http.get("/v1/responses/resp_nope"), http.delete("/v1/responses/resp_nope")):
        error = openai_error(response, 404)
        assert error["code"] == "response_not_found" and "resp_nope" in error["message"]
    assert openai_error(http.get("/v1/responses/resp_nope/input_items"), 404)["code"] == "response_not_found"
    assert http.get("/v1/responses/resp_nope", headers={"authorization": ""}).status_code == 401


def test_a_call_result_continues_the_response_that_made_the_call(live: LiveServer, models: Models) -> None:
    client = live.openai()
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                "required": ["city"],
            },
        }
    ]
    asked: Any = {"model": models.chat, "tools": tools}
    first = client.responses.create(
        **asked, input="Weather in Paris?", tool_choice="required", max_output_tokens=200, extra_body={"seed": 3}
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    result: Any = [{"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}]
    then = client.responses.create(**asked, previous_response_id=first.id, input=result, max_output_tokens=3)
    whole: Any = [{"role": "user", "content": "Weather in Paris?"}, *[i.model_dump() for i in first.output], *result]
    counted = client.responses.input_tokens.count(model=models.chat, tools=tools, input=whole).input_tokens
    assert then.usage is not None and then.usage.input_tokens == counted


def test_item_references_stand_for_the_stored_items_they_name(live: LiveServer, models: Models) -> None:
    client = live.openai()
    made = client.responses.create(
        model=models.chat, input=[{"role": "user", "content": "one"}], max_output_tokens=3, store=True
    )
    [asked] = client.responses.input_items.list(made.id).data
    talk = client.conversations.create(items=[{"role": "user", "content": "three"}])
    [kept] = client.conversations.items.list(talk.id).data
    refs: Any = [{"type": "item_reference", "id": i} for i in (asked.id, made.output[0].id, kept.id)]
    whole: Any = [
        {"role": "user", "content": "one"},
        made.output[0].model_dump(),
        {"role": "user", "content": "three"},
    ]
    count = client.responses.input_tokens.count
    assert count(model=models.chat, input=refs).input_tokens == count(model=models.chat, input=whole).input_tokens
    answered = client.responses.create(model=models.chat, input=refs, max_output_tokens=2)
    stored = [i.model_dump() for i in client.responses.input_items.list(answered.id, order="asc").data]
    assert [i["type"] for i in stored] == ["message"] * 3  # kept as the items, not as references
    assert stored[1]["content"][0]["text"] == made.output_text
    # another key's items are not there for a key
    other = _client(live, KeyTable(Database(live.settings.db_path)).create("refs-other")[1])
    with pytest.raises(openai.BadRequestError) as refused:
        other.responses.create(model=models.chat, input=refs[1:2], max_output_tokens=1)
    assert refused.value.param == "input[0].id"  # type: ignore[attr-defined]
    # a conversation's items hold no references
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.items.create(talk.id, items=refs[:1])
    assert refused.value.param == "items[0].type"  # type: ignore[attr-defined]
