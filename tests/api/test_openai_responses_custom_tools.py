"""The Responses API's `custom` tools (free-text input, Codex's `apply_patch`): seen by the model as a
function of one string, their calls written as `custom_tool_call` items with the raw text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from spark.api.openai import ResponseStream, parse_responses, response_body
from spark.api.openai.responses_api.stored import earlier_items, new_items
from spark.api.openai.responses_api.tools import InputDecoder, custom_input
from spark.errors import InvalidRequest
from spark.types import ChatResult, Done, Message, ToolCall, ToolCallDelta, ToolChoice, Usage

USAGE = Usage(prompt_tokens=12, completion_tokens=5)
LARK = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
APPLY_PATCH: Any = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": LARK},
}
STRING_ONLY: Any = {"type": "object", "required": ["input"], "additionalProperties": False}
_events = TypeAdapter(ResponseStreamEvent)


def parse(**body: Any) -> Any:
    return parse_responses(json.dumps({"model": "m", **body}).encode())


def events(frames: bytes) -> list[dict[str, Any]]:
    out = []
    for frame in frames.decode().split("\n\n"):
        if frame:
            payload = json.loads(frame.split("\n")[1].removeprefix("data: "))
            _events.validate_python(payload)  # each event is one the SDK knows, with its fields
            out.append(payload)
    return out


@pytest.mark.parametrize(
    ("form", "shown"),
    [
        (None, {"type": "string"}),
        ({"type": "text"}, {"type": "string"}),
        (APPLY_PATCH["format"], {"type": "string", "description": f"Text in this Lark grammar:\n{LARK}"}),
        (
            {"type": "grammar", "syntax": "regex", "definition": "[a-z]{1,8}"},
            {
                "type": "string",
                "description": "Text matching this regular expression: [a-z]{1,8}",
                "pattern": "[a-z]{1,8}",
            },
        ),
        # a regex Python cannot read (Rust's named groups) is shown but not enforced
        (
            {"type": "grammar", "syntax": "regex", "definition": "(?<w>a)"},
            {"type": "string", "description": "Text matching this regular expression: (?<w>a)"},
        ),
    ],
)
def test_the_model_sees_a_custom_tool_as_a_function_of_one_string(form: Any, shown: Any) -> None:
    tool = {"type": "custom", "name": "note", "description": "Take a note."} | ({"format": form} if form else {})
    [seen] = parse(input="x", tools=[tool]).request.tools
    assert (seen.name, seen.description, seen.strict) == ("note", "Take a note.", False)
    assert seen.parameters == {**STRING_ONLY, "properties": {"input": shown}}


def test_a_custom_tool_in_a_namespace_and_chosen_by_name() -> None:
    namespace = {"type": "namespace", "name": "edit", "tools": [APPLY_PATCH]}
    call = parse(input="x", tools=[namespace], tool_choice={"type": "custom", "name": "apply_patch"})
    assert [t.name for t in call.request.tools] == ["apply_patch"]
    assert call.request.tool_choice == ToolChoice("required", "apply_patch")
    assert call.echo.tool_choice == {"type": "custom", "name": "apply_patch"}
    result = ChatResult("", "tool_calls", USAGE, tool_calls=[ToolCall("call_1", "apply_patch", '{"input": "x"}')])
    [item] = json.loads(response_body("abc", "m", 1, result, call.echo))["output"]
    assert (item["type"], item["namespace"], item["input"]) == ("custom_tool_call", "edit", "x")
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "custom", "name": "apply_patch"}]}
    assert parse(input="x", tools=[APPLY_PATCH], tool_choice=allowed).request.tool_choice == ToolChoice("required")


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "custom"}, "tools[0].name"),
        ({**APPLY_PATCH, "format": {"type": "grammar", "definition": "x"}}, "tools[0].format.syntax"),
        ({**APPLY_PATCH, "format": {"type": "grammar", "syntax": "regex"}}, "tools[0].format.definition"),
        ({**APPLY_PATCH, "format": {"type": "grammar", "syntax": "peg", "definition": "x"}}, "tools[0].format.syntax"),
        ({**APPLY_PATCH, "name": "apply patch"}, "tools[0].name"),
    ],
)
def test_a_bad_custom_tool_is_named(tool: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(input="x", tools=[tool])
    assert e.value.param == param


def test_a_call_is_a_custom_tool_call_item_with_the_raw_input() -> None:
    call = parse(input="x", tools=[APPLY_PATCH, {"type": "function", "name": "f"}])
    patch = '*** Begin Patch\n*** Add File: a.txt\n+"hi" \u00e9\n*** End Patch'
    calls = [ToolCall("call_1", "apply_patch", json.dumps({"input": patch})), ToolCall("call_2", "f", "{}")]
    body = json.loads(response_body("abc", "m", 1, ChatResult("", "tool_calls", USAGE, tool_calls=calls), call.echo))
    custom, function = Response.model_validate(body).output
    assert custom.type == "custom_tool_call" and custom.input == patch and custom.call_id == "call_1"
    assert custom.name == "apply_patch" and body["output"][0]["id"].startswith("ctc_")
    assert body["output"][0]["status"] == "completed" and "arguments" not in body["output"][0]
    assert function.type == "function_call"

    # sent back with its output, it reads as the call the model made, then the tool's answer
    output = {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Done!"}
    history = parse(input=[{"role": "user", "content": "x"}, body["output"][0], output], tools=[APPLY_PATCH])
    assert history.request.messages[1:] == [
        Message(
            "assistant",
            None,
            tool_calls=[ToolCall("call_1", "apply_patch", json.dumps({"input": patch}, ensure_ascii=False))],
        ),
        Message("tool", "Done!", tool_call_id="call_1"),
    ]
    # kept in a conversation, items sent without ids get OpenAI's id prefixes
    sent = {k: v for k, v in body["output"][0].items() if k != "id"}
    assert [i["id"].split("_")[0] for i in new_items([sent, output])] == ["ctc", "ctco"]


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "custom_tool_call", "call_id": "c", "name": "apply_patch"}, "input[0].input"),
        ({"type": "custom_tool_call", "call_id": "c", "input": "x"}, "input[0].name"),
        ({"type": "custom_tool_call_output", "call_id": "c"}, "input[0].output"),
        ({"type": "custom_tool_call_output", "output": "x"}, "input[0].call_id"),
    ],
)
def test_a_custom_tool_item_missing_a_field_is_named(item: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(input=[item])
    assert e.value.param == param


PIECES = ['{"inp', 'ut": "a\\', "nb \\u00", "e9 \\ud83d", "\\ude00", ' \\"q\\""', "}"]


def test_a_streamed_call_streams_its_input_as_it_comes() -> None:
    stream = ResponseStream("abc", "m", 1, parse(input="x", tools=[APPLY_PATCH]).echo)
    frames = stream.feed(ToolCallDelta(0, id="call_1", name="apply_patch"))
    frames += b"".join(stream.feed(ToolCallDelta(0, arguments=piece)) for piece in PIECES)
    frames += stream.feed(Done("tool_calls", USAGE))
    seen = events(frames)
    deltas = [e["delta"] for e in seen if e["type"] == "response.custom_tool_call_input.delta"]
    whole = 'a\nb \u00e9 \U0001f600 "q"'
    assert "".join(deltas) == whole and "" not in deltas and len(deltas) == 5
    [done] = [e for e in seen if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == whole and done["item_id"].startswith("ctc_")
    added, finished = [e["item"] for e in seen if e["type"].startswith("response.output_item.")]
    assert (added["type"], added["input"], added["status"]) == ("custom_tool_call", "", "in_progress")
    assert (finished["input"], finished["status"]) == (whole, "completed")
    assert not any("function_call" in e["type"] for e in seen)
    assert Response.model_validate(seen[-1]["response"]).output[0].input == whole  # type: ignore[union-attr]


def test_a_call_cut_short_keeps_the_input_as_far_as_it_got() -> None:
    stream = ResponseStream("abc", "m", 1, parse(input="x", tools=[APPLY_PATCH]).echo)
    frames = stream.feed(ToolCallDelta(0, id="call_1", name="apply_patch"))
    frames += b"".join(stream.feed(ToolCallDelta(0, arguments=piece)) for piece in PIECES[:3])
    seen = events(frames + stream.feed(Done("length", USAGE)))
    [item] = seen[-1]["response"]["output"]
    assert (item["input"], item["status"]) == ("a\nb ", "incomplete")
    # a conversation continued after it leaves the cut call out, as a cut function call
    assert earlier_items([item]) == []


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ('{"input": "x"}', "x"),
        ('{"patch": "x"}', "x"),  # the one string, under another name
        ('{"a": 1}', '{"a": 1}'),  # no string: as written
        ('{"input": "ab\\', "ab"),  # cut in an escape
        ("not json", "not json"),
    ],
)
def test_custom_input(arguments: str, text: str) -> None:
    assert custom_input(arguments) == text


def test_a_call_of_another_shape_streams_its_input_at_its_end() -> None:
    stream = ResponseStream("abc", "m", 1, parse(input="x", tools=[APPLY_PATCH]).echo)
    frames = stream.feed(ToolCallDelta(0, id="call_1", name="apply_patch", arguments='{"patch": "x"}'))
    seen = events(frames + stream.feed(Done("tool_calls", USAGE)))
    assert [e["delta"] for e in seen if e["type"] == "response.custom_tool_call_input.delta"] == ["x"]


def test_input_decoder_waits_for_a_whole_escape() -> None:
    decoder = InputDecoder()
    assert [decoder.feed(p) for p in ['{ "input" :"', "\\", "u00", "41", '"', ' "more"']] == ["", "", "", "A", "", ""]
    assert decoder.decoded == "A" and decoder.started
