"""The Responses API's translation: input items -> chat messages, events -> the SDK's stream events."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

import httpx
import msgspec
import pytest
from openai.types.responses import Response

from spark.api.common import finish_reason_in, usage_in
from spark.api.openai import ResponseStream, parse_responses, response_body
from spark.api.openai.responses_api import compacted_body, parse_compact
from spark.api.openai.responses_api.requests import COMPACT_PROMPT, compactable, compacted_request, summary_request
from spark.api.openai.responses_api.stored import (
    Continuation,
    continuation,
    earlier_items,
    input_items_body,
    new_items,
    own_items,
    parse_items_query,
    stored_item,
    with_history,
    with_references,
)
from spark.errors import ContextLengthExceeded, InvalidRequest, RunnerFailed
from spark.store.responses import StoredResponse
from spark.types import (
    ChatResult,
    Done,
    Failed,
    ImagePart,
    Message,
    ReasoningDelta,
    SlotInfo,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    Usage,
)
from tiny_pdf import make_pdf

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def parse(**body: Any) -> Any:
    return parse_responses(json.dumps({"model": "m", **body}).encode())


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    call = parse(input="hi", instructions="Be brief.", max_output_tokens=5, temperature=0.5, stream=True)
    assert call.request.messages == [Message("system", "Be brief."), Message("user", "hi")]
    assert call.request.sampling.max_tokens == 5 and call.request.sampling.temperature == 0.5
    assert call.request.stream and call.echo.instructions == "Be brief."


def test_an_assistants_items_become_one_message() -> None:
    """Reasoning, text and function calls are separate items in the Responses API and one
    assistant message in a chat template."""
    call = parse(
        input=[
            {"role": "developer", "content": "Use tools."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Ask."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"Oslo"}'},
            {"type": "function_call", "call_id": "c2", "name": "time", "arguments": ""},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
            {"role": "assistant", "content": "Sunny at noon."},
            {"role": "user", "content": "Thanks"},
            {"role": "assistant", "content": "You're welcome."},
            {"role": "assistant", "content": "Bye."},
        ]
    )
    assert call.request.messages == [
        Message("developer", "Use tools."),
        Message("user", "Weather?"),
        Message(
            "assistant",
            "Let me look.",
            tool_calls=[ToolCall("c1", "weather", '{"city":"Oslo"}'), ToolCall("c2", "time", "{}")],
            reasoning_content="Ask.",
        ),
        Message("tool", "sunny", tool_call_id="c1"),
        Message("tool", "noon", tool_call_id="c2"),
        Message("assistant", "Sunny at noon."),
        Message("user", "Thanks"),
        Message("assistant", "You're welcome."),
        Message("assistant", "Bye."),  # a second answer in a row stays its own message
    ]


def test_images_tools_formats_and_reasoning() -> None:
    call = parse(
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
                ],
            }
        ],
        tools=[{"type": "function", "name": "look", "parameters": {"type": "object"}, "strict": True}],
        tool_choice={"type": "function", "name": "look"},
        parallel_tool_calls=False,
        text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        reasoning={"effort": "low"},
    )
    request = call.request
    parts = request.messages[0].content
    assert isinstance(parts, list) and isinstance(parts[1], ImagePart)
    assert request.tools is not None and request.tools[0].name == "look"
    assert request.tool_choice is not None and request.tool_choice.name == "look"
    assert request.parallel_tool_calls is False
    assert request.response_format is not None and request.response_format.type == "json_schema"
    assert request.tools[0].strict and not request.response_format.strict  # strict only when it says so
    strict = parse(input="x", text={"format": {"type": "json_schema", "name": "x", "schema": {}, "strict": True}})
    assert strict.request.response_format.strict
    assert request.reasoning is not None and request.reasoning.effort == "low"
    assert parse(input="x", reasoning={"effort": "none"}).request.reasoning.enabled is False
    assert call.echo.tool_choice == {"type": "function", "name": "look"}


def test_allowed_tools_offer_only_those_tools() -> None:
    tools = [{"type": "function", "name": name, "parameters": {"type": "object"}} for name in ("a", "b")]
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "b"}]}
    call = parse(input="x", tools=tools, tool_choice=choice)
    assert [t.name for t in call.request.tools or ()] == ["b"] and call.request.tool_choice == ToolChoice("required")
    assert call.echo.tool_choice == choice  # the response object repeats it as sent
    with pytest.raises(InvalidRequest) as unknown:
        parse(input="x", tools=tools, tool_choice={**choice, "tools": [{"type": "function", "name": "z"}]})
    assert unknown.value.param == "tool_choice.tools[0]"


NAMESPACE: Any = {
    "type": "namespace",
    "name": "agents",
    "description": "Other agents",
    "tools": [
        {"type": "function", "name": "spawn", "parameters": {"type": "object"}},
        {"type": "custom", "name": "script"},
    ],
}
HOSTED: Any = [{"type": "web_search", "external_web_access": False}, {"type": "apply_patch"}]


def test_namespace_tools_are_seen_by_their_own_names_and_calls_name_the_namespace() -> None:
    """Codex sends a namespace of functions and tools only OpenAI runs: the model sees the
    functions (a namespace's too), the response repeats the tools as sent, and a call to a
    namespace's function names it again, as Codex needs to run it."""
    tools = [{"type": "function", "name": "shell"}, NAMESPACE, *HOSTED]
    call = parse(input="x", tools=tools, tool_choice={"type": "function", "name": "spawn"})
    assert [t.name for t in call.request.tools] == ["shell", "spawn", "script"]
    assert call.request.tool_choice == ToolChoice("required", "spawn")
    assert call.echo.tools[1]["tools"][1] == NAMESPACE["tools"][1] and call.echo.tools[2:] == HOSTED
    assert call.echo.tools[0] == {
        "type": "function",
        "name": "shell",
        "description": None,
        "parameters": None,
        "strict": None,
    }

    calls = [ToolCall("call_1", "spawn", "{}"), ToolCall("call_2", "shell", "{}")]
    body = json.loads(response_body("abc", "m", 1, ChatResult("", "tool_calls", USAGE, tool_calls=calls), call.echo))
    spawned, shell = Response.model_validate(body).output
    assert spawned.type == "function_call" and spawned.namespace == "agents"
    assert "namespace" not in body["output"][1] and shell.type == "function_call" and shell.namespace is None

    stream = ResponseStream("abc", "m", 1, call.echo)
    frames = stream.feed(ToolCallDelta(0, id="call_1", name="spawn", arguments="{}")) + stream.feed(
        Done("tool_calls", USAGE)
    )
    items = [e["item"] for e in events(frames) if e["type"].startswith("response.output_item.")]
    assert [item["namespace"] for item in items] == ["agents", "agents"]
    assert events(frames)[-1]["response"]["output"][0]["namespace"] == "agents"

    # a call sent back with its namespace (Codex replays the history) reads as any call
    history = [{"role": "user", "content": "x"}, body["output"][0]]
    assert parse(input=history, tools=tools).request.messages[1].tool_calls == [calls[0]]


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ([NAMESPACE, {"type": "function", "name": "spawn"}], "tools[1].name"),  # a namespace's name clash
        ([NAMESPACE, {**NAMESPACE, "name": "more"}], "tools[1].tools[0].name"),
        ([{**NAMESPACE, "name": None}], "tools[0].name"),
        ([{**NAMESPACE, "tools": [{"type": "web_search"}]}], "tools[0].tools[0].type"),
        ([{**NAMESPACE, "tools": [{"type": "function", "name": "a/b"}]}], "tools[0].tools[0].name"),
        ([{"type": "websearch"}], "tools[0].type"),  # not one of OpenAI's types
    ],
)
def test_bad_tools_are_named_where_they_are(tools: list[Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(input="x", tools=tools)
    assert e.value.param == param


@pytest.mark.parametrize(
    "choice",
    [{"type": "function", "name": "apply_patch"}, {"type": "web_search_preview"}, {"type": "custom", "name": "x"}],
)
def test_a_tool_choice_naming_a_tool_left_out_is_refused(choice: Any) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(input="x", tools=HOSTED, tool_choice=choice)
    assert e.value.param.startswith("tool_choice")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "conversation": "conv_1", "previous_response_id": "resp_1"}, "conversation"),
        ({"input": "x", "conversation": 5}, "conversation"),
        ({"input": [{"role": "user"}]}, "input[0].content"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
        (
            {"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
        ),
        ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input[0].content[0]"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "https://x.test/a.pdf"}]}]},
            "input[0].content[0].file_data",
        ),
        (
            {"input": "x", "tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "a"}]},
            "tools[1].name",
        ),
        (
            {"input": "x", "tools": [{"type": "function", "name": "a", "parameters": {"properties": []}}]},
            "tools[0].parameters",
        ),
        ({"input": "x", "tools": [{"type": "function", "name": "a/b"}]}, "tools[0].name"),
    ],
)
def test_refusals_name_the_param(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(**body)
    assert e.value.param == param


def test_input_files_are_read_as_their_name_and_text() -> None:
    pdf = base64.b64encode(make_pdf("Invoice 7", "Total: 42 EUR")).decode()
    file = {"type": "input_file", "filename": "invoice.pdf", "file_data": f"data:application/pdf;base64,{pdf}"}
    question = {"type": "input_text", "text": "What is the total?"}
    request = parse(input=[{"role": "user", "content": [file, question]}]).request
    assert request.messages[-1].content == "invoice.pdf\nInvoice 7\n\nTotal: 42 EUR\nWhat is the total?"


USAGE = Usage(prompt_tokens=12, completion_tokens=5, cached_tokens=4)


def test_response_body_is_the_sdks_response() -> None:
    echo = parse(input="x", max_output_tokens=9).echo
    result = ChatResult("", "tool_calls", USAGE, reasoning="Think.", tool_calls=[ToolCall("call_1", "f", '{"a":1}')])
    body = json.loads(response_body("abc", "m", 1700000000, result, echo))
    response = Response.model_validate(body)  # the SDK's own model, validated
    assert [item.type for item in response.output] == ["reasoning", "function_call"]
    assert response.status == "completed" and response.max_output_tokens == 9
    assert response.usage is not None and response.usage.input_tokens_details.cached_tokens == 4
    # no write is billed: the AI SDK takes input - cached - written as the uncached input
    assert response.usage.input_tokens_details.cache_write_tokens == 0 and response.usage.input_tokens == 12
    assert usage_in(body) == USAGE and finish_reason_in({"response": body}) == "stop"
    thought = ChatResult("", "stop", Usage(12, 5, reasoning_tokens=3), reasoning="Think.")
    thinking = Response.model_validate(json.loads(response_body("abc", "m", 1, thought, echo)))
    assert thinking.usage is not None and thinking.usage.output_tokens_details.reasoning_tokens == 3
    cut = json.loads(response_body("abc", "m", 1, ChatResult("Hel", "length", USAGE), echo))
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut["output"][0]["content"][0]["text"] == "Hel"
    assert finish_reason_in({"type": "response.incomplete", "response": cut}) == "length"


def test_a_call_cut_short_is_incomplete_and_not_continued() -> None:
    echo = parse(input="x").echo
    calls = [ToolCall("call_1", "f", '{"a": 1}'), ToolCall("call_2", "f", '{"a": ')]
    body = json.loads(response_body("abc", "m", 1, ChatResult("", "length", USAGE, tool_calls=calls), echo))
    assert [item["status"] for item in body["output"]] == ["completed", "incomplete"]
    stream = ResponseStream("abc", "m", 1, echo)
    frames = stream.feed(ToolCallDelta(0, id="call_2", name="f", arguments='{"a": ')) + stream.feed(
        Done("length", USAGE)
    )
    assert events(frames)[-1]["response"]["output"][0]["status"] == "incomplete"
    # continuing that answer leaves the cut call out; its text, cut short too, stays
    earlier = [{"type": "message", "role": "user", "content": "x"}, *body["output"]]
    earlier.append({"type": "message", "role": "assistant", "status": "incomplete", "content": "Hel"})
    asked = json.dumps({"model": "m", "input": "go on"}).encode()
    kept = earlier_items(earlier)
    messages = parse_responses(asked, earlier=kept).request.messages
    assert [len(m.tool_calls or ()) for m in messages] == [0, 1, 0, 0] and messages[2].content == "Hel"
    assert parse_responses(with_history(asked, kept)).request.messages == messages  # what a fleet node reads


def test_a_continued_requests_own_items_are_named_as_sent() -> None:
    earlier = [{"type": "message", "role": "user", "content": "x"}]
    asked = json.dumps({"model": "m", "input": [{"role": "user"}]}).encode()
    with pytest.raises(InvalidRequest) as refused:
        parse_responses(asked, earlier=earlier, earlier_param="conversation")
    assert refused.value.param == "input[0].content"
    for broken in ([{"type": "message", "role": "user"}], [{"role": 5}]):
        with pytest.raises(InvalidRequest) as refused:
            parse_responses(asked, earlier=broken, earlier_param="conversation")
        assert (refused.value.param or "").startswith("conversation")


def test_a_conversations_new_items_get_ids_and_keep_their_own() -> None:
    added = new_items(
        [
            {"role": "user", "content": "a"},
            {"id": "fc_mine", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "b", "id": ""},
            {"type": "reasoning", "summary": []},
        ]
    )
    assert [item["id"].split("_")[0] for item in added] == ["msg", "fc", "fco", "rs"]
    assert added[1]["id"] == "fc_mine" and len({item["id"] for item in added}) == 4
    assert added[0] == {
        "id": added[0]["id"],
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": "a"}],
    }
    assert all(item["status"] == "completed" for item in added)


def events(frames: bytes) -> list[dict[str, Any]]:
    out = []
    for frame in frames.decode().split("\n\n"):
        if frame:
            kind, data = frame.split("\n")
            payload = json.loads(data.removeprefix("data: "))
            assert kind == "event: " + payload["type"]
            out.append(payload)
    return out


def test_stream_of_reasoning_text_and_a_call() -> None:
    stream = ResponseStream("abc", "m", 1, parse(input="x").echo)
    frames = b"".join(
        stream.feed(e)
        for e in [
            SlotInfo(0, 12, 4),
            ReasoningDelta("Hm"),
            ReasoningDelta("m."),
            TextDelta("Hi"),
            ToolCallDelta(0, id="call_1", name="f"),
            ToolCallDelta(0, arguments='{"a":'),
            ToolCallDelta(0, arguments="1}"),
            Done("tool_calls", USAGE),
        ]
    )
    got = events(frames)
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    assert [e["type"].removeprefix("response.") for e in got] == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "reasoning_text.delta",
        "reasoning_text.delta",
        "reasoning_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    final = Response.model_validate(got[-1]["response"])
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "Hi" and final.output[2].arguments == '{"a":1}'  # type: ignore[union-attr]
    assert final.output[0].content[0].text == "Hmm."  # type: ignore[union-attr,index]
    assert {e["output_index"] for e in got if "item_id" in e} == {0, 1, 2}
    assert stream.finished and stream.feed(TextDelta("late")) == b""


def test_asked_for_a_summary_the_reasoning_is_its_summary_too(openai_client) -> None:
    """Local models think in the open: `reasoning.summary` gets the whole thinking as the summary (the AI
    SDK and Codex show only summaries), streamed with OpenAI's summary events, beside `reasoning_text`."""
    echo = parse(input="x", reasoning={"effort": "high", "summary": "auto"}).echo
    stream = ResponseStream("abc", "m", 1, echo)
    frames = b"".join(
        stream.feed(e) for e in [ReasoningDelta("Hm"), ReasoningDelta("m."), TextDelta("Hi"), Done("stop", USAGE)]
    )
    kinds = [e["type"].removeprefix("response.") for e in events(frames)]
    assert kinds[2:12] == [
        "output_item.added",
        "content_part.added",
        "reasoning_summary_part.added",
        "reasoning_text.delta",
        "reasoning_summary_text.delta",
        "reasoning_text.delta",
        "reasoning_summary_text.delta",
        "reasoning_text.done",
        "content_part.done",
        "reasoning_summary_text.done",
    ]
    client = openai_client(
        lambda request: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=frames)
    )
    with client.responses.stream(model="m", input="x") as sdk:  # the SDK's own event types, and its accumulator
        summary = "".join(e.delta for e in sdk if e.type == "response.reasoning_summary_text.delta")
        final = sdk.get_final_response()
    assert summary == "Hmm." and final.reasoning is not None and final.reasoning.summary == "auto"
    (thought, answer) = final.output
    assert answer.type == "message" and thought.type == "reasoning" and [p.text for p in thought.summary] == ["Hmm."]
    assert thought.content is not None and [p.text for p in thought.content] == ["Hmm."]
    whole = Response.model_validate_json(
        response_body("abc", "m", 1, ChatResult("Hi", "stop", USAGE, reasoning="Hmm."), echo)
    )
    assert whole.output[0].summary[0].text == "Hmm."  # type: ignore[union-attr]
    plain = json.loads(
        response_body("abc", "m", 1, ChatResult("Hi", "stop", USAGE, reasoning="Hmm."), parse(input="x").echo)
    )
    assert plain["output"][0]["summary"] == [] and plain["reasoning"]["summary"] is None  # not asked: none
    with pytest.raises(InvalidRequest) as e:
        parse(input="x", reasoning={"summary": "long"})
    assert e.value.param == "reasoning.summary"


def test_a_failure_ends_the_stream_with_response_failed() -> None:
    stream = ResponseStream("abc", "m", 1, parse(input="x").echo)
    frames = stream.feed(TextDelta("Hel")) + stream.feed(Failed(RunnerFailed("the model's runner crashed").info()))
    got = events(frames)
    assert got[-1]["type"] == "response.failed"
    failed = Response.model_validate(got[-1]["response"])
    assert failed.status == "failed" and failed.error is not None
    assert "crashed" in failed.error.message
    assert failed.output[0].status == "incomplete" and failed.output_text == "Hel"  # type: ignore[union-attr]
    assert stream.fail(RunnerFailed("again")) == b""
    # a prompt found too long once the stream had begun (pings while a model loaded): the code clients
    # compact on (Codex), and the prompt named as this API names it
    pinged = ResponseStream("abc", "m", 1, parse(input="x").echo)
    frames = pinged.ping() + pinged.ping() + pinged.feed(Failed(ContextLengthExceeded(900, 512).info()))
    got = events(frames)
    assert [e["type"] for e in got] == [
        "response.created",
        "response.in_progress",
        "response.in_progress",
        "response.failed",
    ]
    error = got[-1]["response"]["error"]
    assert error["code"] == "context_length_exceeded" and "Shorten 'input'" in error["message"]


def test_an_empty_answer_is_one_empty_message() -> None:
    stream = ResponseStream("abc", "m", 1, parse(input="x").echo)
    got = events(stream.feed(Done("stop", USAGE)))
    final = msgspec.json.decode(json.dumps(got[-1]["response"]))
    assert got[-1]["type"] == "response.completed"
    assert [item["type"] for item in final["output"]] == ["message"]
    assert final["output"][0]["content"][0]["text"] == ""


def test_a_continued_conversation_puts_its_stored_items_before_the_input() -> None:
    earlier = [{"role": "user", "content": "one"}, {"type": "message", "role": "assistant", "content": "two"}]
    body = json.dumps({"model": "m", "previous_response_id": "resp_1", "input": "three"}).encode()
    assert continuation(body) == Continuation("resp_1", None)
    continued = parse_responses(with_history(body, earlier), store=True)
    assert [m.content for m in continued.request.messages] == ["one", "two", "three"]
    assert continued.echo.previous_response_id == "resp_1" and continued.echo.store is True
    # an input of no valid shape is left as it is, for the parse to name
    bad = json.dumps({"model": "m", "previous_response_id": "resp_1", "input": 3}).encode()
    assert with_history(bad, earlier) == bad and own_items(bad) == []
    with pytest.raises(InvalidRequest) as refused:
        parse_responses(json.dumps({"model": "m", "input": "x", "previous_response_id": 5}).encode())
    assert refused.value.param == "previous_response_id"
    with pytest.raises(InvalidRequest, match="nested"):
        continuation(b'{"input": ' + b"[" * 500 + b"]" * 500 + b"}")


def test_input_items_are_listed_with_ids_a_page_at_a_time() -> None:
    items = [{"role": "user", "content": "a"}, {"type": "function_call_output", "call_id": "c", "output": "b"}]
    page = json.loads(input_items_body("resp_x", items, parse_items_query({"order": "asc", "limit": "1"})))
    assert page["data"] == [
        {
            "id": "in_x00",
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "a"}],
            "status": "completed",
        }
    ]
    assert page["has_more"] is True and page["first_id"] == page["last_id"] == "in_x00"
    rest = json.loads(input_items_body("resp_x", items, parse_items_query({"order": "asc", "after": "in_x00"})))
    assert [i["id"] for i in rest["data"]] == ["in_x01"] and rest["has_more"] is False
    for query, param in (({"limit": "0"}, "limit"), ({"order": "sideways"}, "order")):
        with pytest.raises(InvalidRequest) as refused:
            parse_items_query(query)
        assert refused.value.param == param


def test_item_references_are_replaced_by_the_items_they_name() -> None:
    stored = StoredResponse(
        id="resp_abc",
        owner="me/sk",
        created_at=0,
        previous_id=None,
        input=[{"role": "user", "content": "hi"}],
        response={"output": [{"id": "msg_abc00", "type": "message", "role": "assistant", "content": []}]},
    )
    responses = {"resp_abc": stored}

    def find(item_id: str) -> dict[str, Any] | None:
        return stored_item(item_id, responses.get)

    assert find("msg_abc00") == stored.response["output"][0]
    assert find("in_abc00") == {
        "id": "in_abc00",
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hi"}],
        "status": "completed",
    }
    assert find("in_abc01") is None and find("msg_zzz00") is None and find("msg") is None and find("msg_abcxx") is None
    body = json.dumps({"input": [{"type": "item_reference", "id": "msg_abc00"}, {"role": "user", "content": "and?"}]})
    assert json.loads(with_references(body.encode(), find))["input"][0]["id"] == "msg_abc00"
    assert with_references(b'{"input": "no references"}', find) == b'{"input": "no references"}'
    with pytest.raises(InvalidRequest) as refused:
        with_references(
            json.dumps(
                {"input": [{"role": "user", "content": "x"}, {"type": "item_reference", "id": "nope"}]}
            ).encode(),
            find,
        )
    assert refused.value.param == "input[1].id"


# --- compaction ----------------------------------------------------------------


def test_compact_asks_the_model_to_sum_the_whole_conversation_up() -> None:
    earlier = [
        {"type": "message", "role": "user", "content": "My name is Ada."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello Ada."}]},
    ]
    body = {"model": "m", "instructions": "Be terse.", "input": [{"role": "user", "content": "I like tea."}]}
    call = parse_compact(json.dumps(body).encode(), earlier=earlier, earlier_param="previous_response_id")
    roles = [(m.role, m.content) for m in call.request.messages]
    assert roles == [
        ("system", "Be terse."),
        ("user", "My name is Ada."),
        ("assistant", "Hello Ada."),
        ("user", "I like tea."),
        ("user", COMPACT_PROMPT),
    ]
    # the compacted output keeps every user message, as given, each with its text as a part
    assert [m["content"] for m in call.user_items] == [
        [{"type": "input_text", "text": "My name is Ada."}],
        [{"type": "input_text", "text": "I like tea."}],
    ]
    only = parse_compact(b'{"model": "m", "input": "hi"}')
    assert only.user_items == [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": [{"type": "compaction"}]}, "input[0].encrypted_content"),
        ({"model": "m", "input": [{"type": "bogus"}]}, "input[0].type"),
    ],
)
def test_a_bad_compact_body_names_its_parameter(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_compact(json.dumps(body).encode())
    assert e.value.param == param


def test_a_compaction_item_reads_back_as_its_summary() -> None:
    request_id = "abc123"
    usage = Usage(prompt_tokens=40, completion_tokens=12)
    user = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    body = msgspec.json.decode(compacted_body(request_id, 7, user, "Ada likes tea. Left: the parser.", usage))
    assert body["object"] == "response.compaction" and body["id"] == "resp_abc123" and body["created_at"] == 7
    assert body["output"][:-1] == [{"id": "msg_abc12300", **user[0], "status": "completed"}]
    assert body["usage"]["output_tokens"] == 12
    item = body["output"][-1]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert "Ada" not in item["encrypted_content"]  # opaque to the client
    later = parse(input=[*body["output"], {"role": "user", "content": "And now?"}])  # sent back whole
    summary = later.request.messages[1]
    assert summary.role == "user" and str(summary.content).endswith("Ada likes tea. Left: the parser.")
    assert [m.content for m in later.request.messages] == ["hi", summary.content, "And now?"]


@pytest.mark.parametrize(
    "content",
    [
        "garbage",
        "spark-compaction-1:!!!",
        "spark-compaction-1:" + base64.urlsafe_b64encode(b"not zlib").decode(),
        base64.urlsafe_b64encode(zlib.compress(b"no prefix")).decode(),
        "spark-compaction-1:" + base64.urlsafe_b64encode(zlib.compress(b"\xff\xfe")).decode(),
        "spark-compaction-1:" + base64.urlsafe_b64encode(zlib.compress(b"x" * (2 << 20))).decode(),  # a bomb
        "spark-compaction-1:" + base64.urlsafe_b64encode(zlib.compress(b"cut")[:-3]).decode(),
    ],
)
def test_a_compaction_no_spark_server_made_is_refused(content: str) -> None:
    with pytest.raises(InvalidRequest, match="not a compaction this server made") as e:
        parse(input=[{"type": "compaction", "encrypted_content": content}])
    assert e.value.param == "input[0].encrypted_content"


def test_a_compacted_request_keeps_its_system_messages_the_summary_and_its_last_turn() -> None:
    call = parse(
        instructions="Be terse.",
        input=[
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "three"},
            {"type": "function_call_output", "call_id": "c", "output": "four"},
        ],
        context_management=[{"type": "compaction", "compact_threshold": 1000}],
    )
    assert call.compaction and call.compact_threshold == 1000 and compactable(call.request)
    asked = summary_request(call.request)
    assert asked.messages[-1] == Message("user", COMPACT_PROMPT) and asked.tools is None
    compacted = compacted_request(call.request, "Ada likes tea.")
    assert [(m.role, m.content) for m in compacted.messages] == [
        ("system", "Be terse."),
        ("user", compacted.messages[1].content),
        ("user", "three"),
        ("tool", "four"),
    ]
    assert str(compacted.messages[1].content).endswith("Ada likes tea.")
    assert not compactable(parse(input="only one turn").request)
    assert not parse(input="hi").compaction
    with pytest.raises(InvalidRequest) as e:
        parse(input="hi", context_management=[{"type": "compaction", "compact_threshold": 0}])
    assert e.value.param == "context_management[0].compact_threshold"
