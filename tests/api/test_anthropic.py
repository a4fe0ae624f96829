"""Anthropic Messages API <-> spark.types, checked with the anthropic SDK's models and client."""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message as SDKMessage
from anthropic.types import MessageTokensCount, ModelInfo

from spark.api import anthropic as api
from spark.api.common import Fetch, ModelEntry
from spark.errors import (
    Cancelled,
    ContextLengthExceeded,
    DownloadError,
    InvalidRequest,
    ModelFileError,
    ModelNotFound,
    Overloaded,
    PlacementRefused,
    RunnerFailed,
    SettingsError,
    SparkError,
    Unauthorized,
)
from spark.types import (
    ChatResult,
    Done,
    Failed,
    ImagePart,
    Message,
    PromptDone,
    Reasoning,
    ReasoningDelta,
    ResponseFormat,
    SamplingParams,
    SlotInfo,
    TextDelta,
    TextPart,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    Usage,
)
from tiny_pdf import make_pdf

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))
PNG_B64 = base64.b64encode(PNG).decode()
USAGE = Usage(prompt_tokens=12, completion_tokens=5, cached_tokens=8)
SSE = {"content-type": "text/event-stream"}
USER = [{"role": "user", "content": "hi"}]


def body(**fields: Any) -> bytes:
    fields.setdefault("messages", USER)
    return json.dumps({"model": "m", **fields}).encode()


def parse(**fields: Any):
    fields.setdefault("max_tokens", 100)
    return api.parse_messages(body(**fields)).request


def error(**fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse(**fields)
    return info.value


# --- requests ---------------------------------------------------------------------------


def test_sdk_request_with_every_parameter(anthropic_client) -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(400, json={"type": "error", "error": {"type": "x", "message": "stop"}})

    with pytest.raises(anthropic.BadRequestError):
        anthropic_client(handler).messages.create(
            model="smollm2",
            max_tokens=512,
            system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Weather here?"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Use the tool.", "signature": "sig"},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                        {"type": "text", "text": "Thanks!"},
                    ],
                },
            ],
            stop_sequences=["\n\nHuman:"],
            metadata={"user_id": "u1"},
            tools=[
                {
                    "name": "weather",
                    "description": "Weather now",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            ],
            tool_choice={"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
            thinking={"type": "enabled", "budget_tokens": 256},
            # this SDK release has no keyword for the sampling parameters older ones sent
            extra_body={"keep_alive": "2m", "temperature": 0.3, "top_p": 0.9, "top_k": 40},
        )
    request = api.parse_messages(seen[0]).request
    assert request.model == "smollm2" and request.stream is False
    assert request.messages == [
        Message("system", "Be brief.\nBe kind."),
        Message("user", [TextPart("Weather here?"), ImagePart(PNG, "image/png")]),
        Message(
            "assistant",
            "Checking.",
            reasoning_content="Use the tool.",
            tool_calls=[ToolCall("toolu_1", "weather", '{"city":"Oslo"}')],
        ),
        Message("tool", "Sunny", tool_call_id="toolu_1"),
        Message("user", "Thanks!"),
    ]
    assert request.sampling == SamplingParams(temperature=0.3, top_p=0.9, top_k=40, max_tokens=512, stop=["\n\nHuman:"])
    assert request.tools == [
        Tool("weather", "Weather now", {"type": "object", "properties": {"city": {"type": "string"}}})
    ]
    assert request.tool_choice == ToolChoice("required", "weather")
    assert request.parallel_tool_calls is False
    assert request.reasoning == Reasoning(budget_tokens=256)
    assert request.keep_alive == 120


SCHEMA = {"type": "json_schema", "schema": {"type": "object"}}


def test_system_turns_in_the_conversation_and_claude_codes_billing_header() -> None:
    """As Claude Code sends them: a system turn among the messages (Anthropic's mid-conversation
    system beta), and a first system block of billing metadata, left out for the prompt cache's sake
    (a new hash each session kept the long system prompt after it from being reused)."""
    billing = "x-anthropic-billing-header: cc_version=2.1.197.a1b; cc_entrypoint=sdk-cli;"
    system = [{"type": "text", "text": billing}, {"type": "text", "text": "You are Claude Code."}]
    turns = [*USER, {"role": "system", "content": [{"type": "text", "text": "Agents: none."}]}]
    request = parse(system=system, messages=turns)
    assert request.messages == [
        Message("system", "You are Claude Code."),
        Message("user", "hi"),
        Message("system", "Agents: none."),
    ]
    assert parse(system=billing).messages == [Message("user", "hi")]
    # a system turn between a tool_use and its tool_result does not part them
    use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
    calls = [*USER, {"role": "assistant", "content": [use]}, turns[1], {"role": "user", "content": [result]}]
    assert [m.role for m in parse(messages=calls).messages] == ["user", "assistant", "system", "tool"]


def test_output_format_is_output_config_formats_older_name() -> None:
    request = parse(output_format=SCHEMA)
    assert request.response_format == ResponseFormat(
        "json_schema", {"type": "object"}, param="output_format", strict=True
    )


def test_a_server_tool_is_refused_saying_only_custom_tools_run() -> None:
    refused = error(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 8}])
    assert "server tool 'web_search_20250305' is not supported" in refused.message


def test_minimal_request() -> None:
    request = parse()
    assert request.messages == [Message("user", "hi")]
    assert request.sampling == SamplingParams(max_tokens=100)
    assert request.tools is None and request.tool_choice is None
    assert request.reasoning == Reasoning(enabled=False)  # Anthropic's models think only when asked
    assert request.parallel_tool_calls is True


def test_llama_server_sampling_extensions() -> None:
    fields = {"min_p": 0.1, "repeat_penalty": 1.1, "repeat_last_n": 32, "dry_multiplier": 0.8, "dry_base": 2.0}
    fields |= {"dry_allowed_length": 3, "dry_penalty_last_n": -1}
    assert parse(**fields).sampling == SamplingParams(max_tokens=100, **fields)  # type: ignore[arg-type]


RESULT_A = {"type": "tool_result", "tool_use_id": "a", "content": "1"}
ASKED_A = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
]


def test_tool_results_keep_their_order_and_errors() -> None:
    content = [
        {
            "type": "tool_result",
            "tool_use_id": "a",
            "content": [{"type": "text", "text": "1"}, {"type": "text", "text": "2"}],
        },
        {"type": "tool_result", "tool_use_id": "b", "content": "no such city", "is_error": True},
        {
            "type": "tool_result",
            "tool_use_id": "c",
            "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}],
        },
        {"type": "tool_result", "tool_use_id": "d"},
    ]
    calls = [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in "abcd"]
    turns = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": content},
    ]
    assert parse(messages=turns).messages[2:] == [
        Message("tool", "1\n2", tool_call_id="a"),
        Message("tool", "Error:\nno such city", tool_call_id="b"),
        Message("tool", [ImagePart(PNG, "image/png")], tool_call_id="c"),
        Message("tool", "", tool_call_id="d"),
    ]


@pytest.mark.parametrize(
    ("turns", "param", "says"),
    [
        ([{"role": "user", "content": [RESULT_A]}], "messages[0].content", "unexpected `tool_use_id`"),
        ([*ASKED_A, {"role": "user", "content": [{**RESULT_A, "tool_use_id": "z"}]}], "messages[2].content", ": z."),
        ([*ASKED_A, {"role": "user", "content": "and?"}], "messages[1].content", "without `tool_result`"),
    ],
)
def test_tool_results_answer_the_calls_just_before_them(turns: list, param: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(messages=turns)
    assert refused.value.param == param and says in refused.value.message
    # a call answered in the next turn, its result split over turns of one role in a row, is fine
    assert (
        len(
            parse(
                messages=[*ASKED_A, {"role": "user", "content": "x"}, {"role": "user", "content": [RESULT_A]}]
            ).messages
        )
        == 4
    )


def test_consecutive_turns_of_one_role_are_combined_as_anthropic_does() -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    messages = [
        {"role": "user", "content": "Hello."},
        {"role": "user", "content": [{"type": "text", "text": "Add 2 and 2."}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Easy.", "signature": ""}, call]},
        {"role": "assistant", "content": "Calling f."},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "4"}]},
        {"role": "user", "content": "Thanks. And 3 and 3?"},
        {"role": "assistant", "content": "It is"},
        {"role": "assistant", "content": "six"},  # the prefill is both
    ]
    assert parse(messages=messages).messages == [
        Message("user", "Hello.\nAdd 2 and 2."),
        Message("assistant", "Calling f.", tool_calls=[ToolCall("toolu_1", "f", "{}")], reasoning_content="Easy."),
        Message("tool", "4", tool_call_id="toolu_1"),  # a tool result stays a turn of its own
        Message("user", "Thanks. And 3 and 3?"),
        Message("assistant", "It is\nsix"),
    ]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
    with_image = [{"role": "user", "content": "Look:"}, {"role": "user", "content": [image]}]
    assert parse(messages=with_image).messages == [Message("user", [TextPart("Look:"), ImagePart(PNG, "image/png")])]


def test_prefill_and_redacted_thinking() -> None:
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": [{"type": "redacted_thinking", "data": "xxx"}, {"type": "text", "text": "The answer is ("}],
        },
    ]
    assert parse(messages=messages).messages[-1] == Message("assistant", "The answer is (")
    trailing = error(messages=[*USER, {"role": "assistant", "content": "The answer is "}])
    assert trailing.message == "messages[1].content: final assistant content cannot end with trailing whitespace"
    earlier = [*USER, {"role": "assistant", "content": "Hi "}, *USER]  # only the final turn is a prefill
    assert parse(messages=earlier).messages[1] == Message("assistant", "Hi ")


@pytest.mark.parametrize(
    ("thinking", "effort", "expected"),
    [
        ({"type": "disabled"}, None, Reasoning(enabled=False)),
        ({"type": "between_tools"}, "low", Reasoning(enabled=False)),  # Claude's notes between calls: none here
        ({"type": "adaptive"}, None, Reasoning()),
        ({"type": "adaptive"}, "high", Reasoning(effort="high")),
        (None, "low", Reasoning(effort="low")),
        (None, None, Reasoning(enabled=False)),
        ({"type": "enabled", "budget_tokens": 50}, "max", Reasoning(effort="max", budget_tokens=50)),
    ],
)
def test_thinking_and_effort(thinking: dict | None, effort: str | None, expected: Reasoning) -> None:
    fields: dict[str, Any] = {"output_config": {"effort": effort}} if effort else {}
    if thinking:
        fields["thinking"] = thinking
    assert parse(**fields).reasoning == expected


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, ToolChoice("auto")),
        ({"type": "any"}, ToolChoice("required")),
        ({"type": "none"}, ToolChoice("none")),
    ],
)
def test_tool_choices(choice: dict, expected: ToolChoice) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    assert parse(tools=tools, tool_choice=choice).tool_choice == expected


@pytest.mark.parametrize(
    ("choice", "parallel"),
    [
        ({"type": "auto"}, True),
        ({"type": "auto", "disable_parallel_tool_use": False}, True),
        ({"type": "auto", "disable_parallel_tool_use": True}, False),
        ({"type": "any", "disable_parallel_tool_use": True}, False),
        ({"type": "tool", "name": "f", "disable_parallel_tool_use": True}, False),
        ({"type": "none"}, True),
    ],
)
def test_disable_parallel_tool_use(choice: dict, parallel: bool) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    assert parse(tools=tools, tool_choice=choice).parallel_tool_calls is parallel


def test_structured_output() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert parse(output_config={"format": {"type": "json_schema", "schema": schema}}).response_format == ResponseFormat(
        "json_schema", schema, param="output_config.format", strict=True
    )


def test_text_documents_are_read_with_their_title_and_context() -> None:
    documents = [
        {"type": "text", "text": "Summarise:"},
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "The grass is green."},
            "title": "Grass",
            "context": "From a field guide",
            "citations": {"enabled": True},
        },
        {"type": "document", "source": {"type": "content", "content": "Plain content."}},
    ]
    (message,) = parse(messages=[{"role": "user", "content": documents}]).messages
    assert message.content == "Summarise:\nGrass\nFrom a field guide\nThe grass is green.\nPlain content."
    with_image = {
        "type": "document",
        "source": {
            "type": "content",
            "content": [
                {"type": "text", "text": "First part."},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
            ],
        },
    }
    (message,) = parse(messages=[{"role": "user", "content": [with_image]}]).messages
    assert message.content == [TextPart("First part."), ImagePart(PNG, "image/png")]
    url = {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}
    refused = error(messages=[{"role": "user", "content": [url]}])
    assert refused.param == "messages[0].content[0].source.type" and "sent inline" in refused.message


def test_pdf_documents_are_read_as_their_text() -> None:
    pdf = base64.b64encode(
        make_pdf("Kestrel Point light: electrified in 1938.", "Last keeper: Margaret Hale.")
    ).decode()
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
        "title": "Lighthouse",
        "cache_control": {"type": "ephemeral"},
    }
    question = {"type": "text", "text": "Who was the last keeper?"}
    (message,) = parse(messages=[{"role": "user", "content": [document, question]}]).messages
    assert message.content == (
        "Lighthouse\nKestrel Point light: electrified in 1938.\n\nLast keeper: Margaret Hale.\nWho was the last keeper?"
    )
    scanned = {
        **document,
        "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(make_pdf("")).decode()},
    }
    refused = error(messages=[{"role": "user", "content": [question, scanned]}])
    assert refused.param == "messages[0].content[1].source.data" and "no text layer" in refused.message


def test_remote_image_needs_a_fetcher() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    messages = [{"role": "user", "content": [image]}]
    assert error(messages=messages).param == "messages[0].content[0].source.url"
    got = api.parse_messages(
        body(messages=messages, max_tokens=5), fetch=Fetch(image=lambda url, param: ImagePart(PNG))
    ).request
    assert got.messages[0].content == [ImagePart(PNG)]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [*USER, {"role": "system", "content": [{"type": "image"}]}]}, "messages[1].content[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages[0].content[0].type"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {"type": "base64", "media_type": "application/pdf", "data": "x"},
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].source.data",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "document", "source": {"type": "file", "file_id": "f"}}]}
                ]
            },
            "messages[0].content[0].source.file_id",  # no uploaded files where none are given
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
            "messages[0].content[0].source.file_id",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "text"}}]}]},
            "messages[0].content[0].source.data",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/tiff", "data": PNG_B64}}
                        ],
                    }
                ]
            },
            "messages[0].content[0].source.media_type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "@@"}}
                        ],
                    }
                ]
            },
            "messages[0].content[0].source.data",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}}],
                    }
                ]
            },
            "messages[0].content[0].source.url",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
                        ],
                    }
                ]
            },
            "messages[0].content[0].type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f"}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [*USER, {"role": "assistant", "content": "The answer is "}]}, "messages[1].content"),
        (
            {"messages": [*USER, {"role": "assistant", "content": [{"type": "text", "text": "Sure:\n"}]}]},
            "messages[1].content",
        ),
        ({"system": 5}, "system"),
        ({"temperature": 1.5}, "temperature"),
        ({"top_p": -0.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"stop_sequences": [""]}, "stop_sequences[0]"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 8}]}, "tools[0].type"),
        ({"tools": [{"name": "f", "input_schema": {}}, {"name": "f", "input_schema": {}}]}, "tools[1].name"),
        ({"tools": [{"name": "f", "input_schema": {}}, {"name": "f.g", "input_schema": {}}]}, "tools[1].name"),
        ({"tools": [{"name": "f" * 129, "input_schema": {}}]}, "tools[0].name"),
        ({"tools": [{"name": "f", "input_schema": {"type": "object", "required": "a"}}]}, "tools[0].input_schema"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name"),
        (
            {"tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}},
            "tool_choice.disable_parallel_tool_use",
        ),
        ({"output_format": SCHEMA, "output_config": {"format": SCHEMA}}, "output_format"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking.budget_tokens"),
        ({"keep_alive": "forever-ish"}, "keep_alive"),
        ({"dry_multiplier": -1}, "dry_multiplier"),
        ({"dry_base": 0}, "dry_base"),
        ({"repeat_penalty": 0}, "repeat_penalty"),
        ({"min_p": 2}, "min_p"),
        ({"typical_p": 3}, "typical_p"),
    ],
)
def test_bad_requests_name_the_param(fields: dict, param: str) -> None:
    got = error(**fields)
    assert got.param == param and got.status == 400


def test_max_tokens_required_and_limited() -> None:
    assert error(max_tokens=None).message == "Missing required parameter: 'max_tokens'."
    with pytest.raises(InvalidRequest) as info:
        api.parse_messages(body(max_tokens=5000), max_tokens_limit=4096)
    assert info.value.param == "max_tokens"


def test_count_tokens_does_not_need_max_tokens(anthropic_client) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        request_ = api.parse_count_tokens(request.content)
        return httpx.Response(200, content=api.count_tokens_body(10 * len(request_.messages)))

    counted = anthropic_client(handler).messages.count_tokens(
        model="m", system="s", messages=[{"role": "user", "content": "hello"}]
    )
    assert counted.input_tokens == 20
    assert MessageTokensCount.model_validate_json(api.count_tokens_body(7)).input_tokens == 7


# --- responses --------------------------------------------------------------------------


def test_message_body() -> None:
    raw = api.message_body("r1", "smollm2", ChatResult("Hello!", "stop", USAGE))
    message = SDKMessage.model_validate_json(raw)
    assert message.id == "msg_r1" and message.type == "message" and message.role == "assistant"
    assert message.model == "smollm2"
    assert [(b.type, b.text) for b in message.content] == [("text", "Hello!")]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (4, 5)
    assert message.usage.cache_read_input_tokens == 8
    assert message.usage.cache_creation_input_tokens == 0


def test_message_body_with_thinking_and_tools() -> None:
    result = ChatResult(
        "",
        "tool_calls",
        USAGE,
        reasoning="Use weather.",
        tool_calls=[ToolCall("call_a1", "weather", '{"city": "Oslo"}'), ToolCall("Ab3dE5gH9", "broken", "{not json")],
    )
    message = SDKMessage.model_validate_json(api.message_body("r", "m", result))
    assert [b.type for b in message.content] == ["thinking", "tool_use", "tool_use"]
    assert message.content[0].thinking == "Use weather."
    # the engine's call_ ids read as Anthropic's; a Mistral id, which its template checks, is kept
    assert message.content[1].input == {"city": "Oslo"} and message.content[1].id == "toolu_a1"
    assert message.content[2].id == "Ab3dE5gH9"
    assert message.content[2].input == {}
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("finish", "stop_sequence", "reason", "sequence"),
    [
        ("stop", None, "end_turn", None),
        ("stop", "END", "stop_sequence", "END"),
        ("length", None, "max_tokens", None),
        ("cancelled", None, "end_turn", None),
    ],
)
def test_stop_reasons(finish: str, stop_sequence: str | None, reason: str, sequence: str | None) -> None:
    result = ChatResult("x", finish, USAGE, stop_sequence=stop_sequence)  # type: ignore[arg-type]
    message = SDKMessage.model_validate_json(api.message_body("r", "m", result))
    assert (message.stop_reason, message.stop_sequence) == (reason, sequence)


def test_model_bodies() -> None:
    entries = [ModelEntry("smollm2", 1700000000, loaded=True), ModelEntry("qwen", 1700000100)]
    embedders = [ModelEntry("bert", 1, info={"embedding": True}), ModelEntry("rank", 1, info={"rerank": True})]
    page = json.loads(api.model_list_body(entries + embedders, limit=20, after_id=None, before_id=None))
    assert (page["first_id"], page["last_id"], page["has_more"]) == ("smollm2", "qwen", False)
    info = ModelInfo.model_validate(page["data"][0])
    assert info.id == "smollm2" and info.created_at.timestamp() == 1700000000
    assert ModelInfo.model_validate_json(api.model_body(entries[1])).id == "qwen"
    assert json.loads(api.model_list_body([], limit=20, after_id=None, before_id=None))["data"] == []


@pytest.mark.parametrize(
    ("after_id", "before_id", "ids", "more"),
    [(None, None, ["a", "b"], True), ("b", None, ["c", "d"], False), (None, "d", ["b", "c"], True)],
)
def test_model_pages(after_id: str | None, before_id: str | None, ids: list[str], more: bool) -> None:
    entries = [ModelEntry(i, 1) for i in "abcd"]
    page = json.loads(api.model_list_body(entries, limit=2, after_id=after_id, before_id=before_id))
    assert ([m["id"] for m in page["data"]], page["has_more"]) == (ids, more)


def test_a_model_says_its_context_window_and_what_it_can_read() -> None:
    thinker = ModelEntry("qwen", 1, info={"context_window": 8192, "thinking": True, "vision": True})
    info = ModelInfo.model_validate_json(api.model_body(thinker))
    assert (info.max_input_tokens, info.max_tokens) == (8192, 8192)  # a prompt and its answer share it
    caps = info.capabilities
    assert caps is not None
    assert caps.image_input.supported and caps.pdf_input.supported and caps.structured_outputs.supported
    assert caps.thinking.supported and caps.thinking.types.enabled.supported and caps.effort.high.supported
    assert caps.batch.supported  # Message Batches are served
    assert not (caps.citations.supported or caps.server_tools.web_search.supported)
    plain = ModelInfo.model_validate_json(api.model_body(ModelEntry("smol", 1, info={"context_window": 512})))
    assert plain.capabilities is not None and not plain.capabilities.thinking.supported
    assert plain.capabilities.thinking.types.disabled.supported and not plain.capabilities.image_input.supported
    # every key Anthropic lists is there (its SDK would fill a missing one with None)
    assert None not in plain.capabilities.model_dump(exclude={"effort": {"xhigh"}}).values()
    # a fleet node's model is known by its id alone
    remote = ModelInfo.model_validate_json(api.model_body(ModelEntry("far", 0, info={"nodes": ["gpu-box"]})))
    assert (remote.max_input_tokens, remote.capabilities) == (None, None)


# --- streams ----------------------------------------------------------------------------


def events_of(stream: bytes) -> list[tuple[str, dict]]:
    """(event name, data) of each SSE frame; the name must match the data's type."""
    out = []
    for frame in stream.split(b"\n\n")[:-1]:
        name_line, data_line = frame.split(b"\n")
        name = name_line.removeprefix(b"event: ").decode()
        data = json.loads(data_line.removeprefix(b"data: "))
        assert data["type"] == name
        out.append((name, data))
    return out


def feed_all(stream: api.MessageStream, events: list) -> bytes:
    return b"".join(stream.feed(e) for e in events)


FULL = [
    SlotInfo(slot=0, prompt_tokens=12, cached_tokens=8),
    PromptDone(evaluated_tokens=4, seconds=0.01),
    ReasoningDelta("Hm."),
    TextDelta("Let me "),
    TextDelta("check."),
    ToolCallDelta(0, id="toolu_w", name="weather", arguments='{"city":'),
    ToolCallDelta(0, arguments=' "Oslo"}'),
    ToolCallDelta(1, name="time"),
    Done("tool_calls", USAGE),
]


def test_stream_event_order() -> None:
    got = events_of(feed_all(api.MessageStream("r", "m"), FULL))
    assert [(n, d.get("index"), d.get("delta", {}).get("type")) for n, d in got] == [
        ("message_start", None, None),
        ("content_block_start", 0, None),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, None),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, None),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
        ("content_block_start", 3, None),
        ("content_block_stop", 3, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    start = got[0][1]["message"]
    assert start["id"] == "msg_r" and start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 4 and start["usage"]["cache_read_input_tokens"] == 8
    assert got[8][1]["content_block"] == {"type": "tool_use", "id": "toolu_w", "name": "weather", "input": {}}
    assert got[12][1]["content_block"]["id"].startswith("toolu_")
    assert got[14][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert got[14][1]["usage"]["output_tokens"] == 5


def test_the_sdk_accumulates_the_stream(anthropic_client) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        parsed = api.parse_messages(request.content).request
        stream = api.MessageStream("r", parsed.model)
        return httpx.Response(200, headers=SSE, content=stream.ping() + feed_all(stream, FULL))

    client = anthropic_client(handler)
    with client.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Let me check."
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert final.content[0].thinking == "Hm."
    assert final.content[2].input == {"city": "Oslo"} and final.content[3].input == {}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 5 and final.usage.input_tokens == 4
    assert final.usage.cache_read_input_tokens == 8


def test_early_start_and_ping_then_stop_sequence() -> None:
    stream = api.MessageStream("r", "m")
    out = stream.ping() + stream.ping() + stream.start()
    out += feed_all(stream, [SlotInfo(0, 12, 8), TextDelta("a"), Done("stop", USAGE, stop_sequence="###")])
    got = events_of(out)
    assert [n for n, _ in got] == [
        "message_start",
        "ping",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[0][1]["message"]["usage"]["input_tokens"] == 0  # not known yet
    assert got[-2][1]["usage"]["input_tokens"] == 4  # message_delta brings it
    assert got[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "###"}
    assert stream.finished and stream.ping() == b"" and stream.feed(TextDelta("x")) == b""


def test_empty_output_stream() -> None:
    got = events_of(feed_all(api.MessageStream("r", "m"), [Done("length", USAGE)]))
    assert [n for n, _ in got] == ["message_start", "message_delta", "message_stop"]
    assert got[1][1]["delta"]["stop_reason"] == "max_tokens"


def test_error_after_partial_output(anthropic_client) -> None:
    stream = api.MessageStream("r", "m")
    raw = feed_all(
        stream,
        [SlotInfo(0, 3, 0), TextDelta("Par"), Failed(RunnerFailed("the runner crashed").info()), TextDelta("late")],
    )
    got = events_of(raw)
    assert [n for n, _ in got] == ["message_start", "content_block_start", "content_block_delta", "error"]
    assert got[-1][1] == {"type": "error", "error": {"type": "api_error", "message": "the runner crashed"}}
    client = anthropic_client(lambda request: httpx.Response(200, headers=SSE, content=raw))
    with (
        pytest.raises(anthropic.APIStatusError, match="the runner crashed"),
        client.messages.stream(model="m", max_tokens=5, messages=USER) as s,
    ):
        s.get_final_message()


def test_fail_for_errors_outside_the_runner() -> None:
    stream = api.MessageStream("r", "m")
    got = events_of(stream.start() + stream.fail(Overloaded("queue full")))
    assert got[-1][1]["error"] == {"type": "overloaded_error", "message": "queue full"}
    assert stream.fail(Overloaded("again")) == b""


# --- errors -----------------------------------------------------------------------------

ERRORS: list[tuple[SparkError, int, str]] = [
    (InvalidRequest("bad", param="temperature"), 400, "invalid_request_error"),
    (Unauthorized("no key"), 401, "authentication_error"),
    (ModelNotFound("nope"), 404, "not_found_error"),
    (ContextLengthExceeded(5000, 4096), 400, "invalid_request_error"),
    (ModelFileError("truncated"), 400, "invalid_request_error"),
    (Cancelled("cancelled"), 499, "invalid_request_error"),
    (Overloaded("busy"), 529, "overloaded_error"),
    (RunnerFailed("crashed"), 502, "api_error"),
    (DownloadError("gone"), 502, "api_error"),
    (PlacementRefused("needs 5 GiB"), 507, "api_error"),
    (SettingsError("bad port", param="port"), 500, "api_error"),
    (SparkError("boom"), 500, "api_error"),
]


@pytest.mark.parametrize(("error_", "status", "kind"), ERRORS)
def test_error_bodies(error_: SparkError, status: int, kind: str) -> None:
    got_status, raw = api.error_body(error_)
    assert got_status == status
    message = json.loads(raw)["error"]["message"]
    assert json.loads(raw) == {"type": "error", "error": {"type": kind, "message": message}}
    if isinstance(error_, ContextLengthExceeded):  # in Anthropic's words, which clients match
        assert message.startswith("prompt is too long: 5000 tokens > 4096 maximum")
    elif isinstance(error_, ModelNotFound):
        assert message == f"model: nope. {error_.message}"
    else:
        assert message.endswith(error_.message)


def test_error_message_names_the_parameter() -> None:
    # Anthropic's error shape has no `param` field: the message carries it.
    _, raw = api.error_body(InvalidRequest("must be between 0 and 1", param="temperature"))
    assert json.loads(raw)["error"]["message"] == "temperature: must be between 0 and 1"
    _, raw = api.error_body(ModelNotFound("nope"))
    # named as Anthropic names it (Claude Code's --fallback-model looks for "model:"), and not twice
    assert json.loads(raw)["error"]["message"] == f"model: nope. {ModelNotFound('nope').message}"


def test_sdk_sees_typed_errors(anthropic_client) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        try:
            parsed = api.parse_messages(request.content).request
        except InvalidRequest as e:
            status, raw = api.error_body(e)
            return httpx.Response(status, content=raw)
        failure = {"nope": ModelNotFound("nope"), "busy": Overloaded("busy"), "key": Unauthorized("Invalid API key.")}[
            parsed.model
        ]
        status, raw = api.error_body(failure)
        return httpx.Response(status, content=raw)

    client = anthropic_client(handler)
    with pytest.raises(
        anthropic.NotFoundError,
        match=r"model: nope\. The model 'nope' does not exist on this server \(see GET /v1/models\)\.",
    ):
        client.messages.create(model="nope", max_tokens=5, messages=USER)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="key", max_tokens=5, messages=USER)
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        client.messages.create(model="busy", max_tokens=5, messages=USER)
    assert overloaded.value.status_code == 529
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        client.messages.create(model="m", max_tokens=5, messages=USER, extra_body={"temperature": 1.5})
