"""Tool calling end to end: the official `openai` and `anthropic` SDKs against a real server.

The tiny random model only calls a tool when a grammar forces it to (a named
tool_choice), or when its sampling defaults make it answer with a brace (a bare
JSON call, as small models write them whatever their template says). What is
checked is the wire shape, that the arguments match the tool's schema, that a
call's text never leaks into the content, and that a full round trip (call,
result, answer) goes through.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import jsonschema
import pytest

import tiny_gguf
from server.helpers import LiveServer, Models
from spark.library import ModelSettings
from spark.types import SamplingParams

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
OPENAI_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER_SCHEMA},
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
]
ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in OPENAI_TOOLS
]
FORCE_WEATHER: Any = {"type": "function", "function": {"name": "get_weather"}}
QUESTION: Any = {"role": "user", "content": "What is the weather in Paris?"}
RESULT = json.dumps({"temperature": 21, "unit": "celsius", "sky": "clear"})
LONGER = {"note": "a longer call makes a longer prompt"}  # a key no generated call has
# A forced call ends where its grammar does (about 60 tokens); this only bounds a runaway.
CALL_TOKENS = 200


@dataclass(frozen=True)
class Family:
    """A model of one tool-call family, and the request options that let the random model end."""

    model: str
    end: dict[str, Any]


@pytest.fixture(scope="module")
def families(served: tuple[LiveServer, Models], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Family]:
    """Both tool-call families, as models of this module's own.

    - hermes (Hermes/Qwen template): calls written as `<tool_call>{...}</tool_call>`. Its
      forced grammar allows further calls after the first, and the random model never picks
      its end token by itself: `end` pushes the end token up (the grammar keeps it out until
      the call is complete), as a real model would end there. With `parallel_tool_calls`
      off the answer ends with the first call, no push needed.
    - generic (ChatML, no tool support): tools described in the system message, the call a bare
      JSON object; the grammar ends with the object.

    Their context holds the tool listing (about 450 tokens) and a call; the shared
    `models.tools` stays unloaded for the test that watches its first load.
    """
    folder = tmp_path_factory.mktemp("weather")
    library = served[0].state.library
    ids = {}
    for template in ("tools", "chatml"):
        path = tiny_gguf.write_tiny_llama(folder / f"weather-{template}.gguf", template=template, n_ctx=2048)
        ids[template] = library.add_local(path, model_id=f"weather-{template}").id
    eos = gguf.GGUFReader(folder / "weather-tools.gguf").fields["tokenizer.ggml.eos_token_id"].contents()
    return {"hermes": Family(ids["tools"], {"logit_bias": {str(eos): 100}}), "generic": Family(ids["chatml"], {})}


def check_arguments(arguments: str) -> None:
    jsonschema.validate(json.loads(arguments), WEATHER_SCHEMA)


@pytest.mark.parametrize("family", ["hermes", "generic"])
def test_openai_tool_round_trip(live: LiveServer, families: dict[str, Family], family: str) -> None:
    client = live.openai()
    model = families[family].model
    first = client.chat.completions.create(
        model=model,
        messages=[QUESTION],
        tools=OPENAI_TOOLS,
        tool_choice=FORCE_WEATHER,
        max_tokens=CALL_TOKENS,
        seed=3,
        parallel_tool_calls=False,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert first.usage is not None and first.usage.completion_tokens < CALL_TOKENS // 2, "it ended with the call"
    assert not choice.message.content, "the call's text does not leak into the content"
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    check_arguments(call.function.arguments)

    # The assistant message goes back as the SDK returned it, as a user's loop does.
    history: list[Any] = [QUESTION, choice.message, {"role": "tool", "tool_call_id": call.id, "content": RESULT}]
    final = client.chat.completions.create(
        model=model, messages=history, tools=OPENAI_TOOLS, tool_choice="none", max_tokens=8, seed=3
    )
    assert final.choices[0].finish_reason == "length"
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls

    # The call and its result are both in the prompt, though tools are off for the answer.
    def prompt_size(arguments: str, result: str) -> int:
        assistant = {
            "role": "assistant",
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": arguments}}
            ],
        }
        history: list[Any] = [QUESTION, assistant, {"role": "tool", "tool_call_id": call.id, "content": result}]
        usage = client.chat.completions.create(
            model=model, messages=history, tools=OPENAI_TOOLS, tool_choice="none", max_tokens=1
        ).usage
        assert usage is not None
        return usage.prompt_tokens

    assert final.usage is not None and prompt_size(call.function.arguments, RESULT) == final.usage.prompt_tokens
    arguments = json.loads(call.function.arguments)
    assert prompt_size(json.dumps({**arguments, **LONGER}), RESULT) > prompt_size(json.dumps(arguments), RESULT)
    assert prompt_size(call.function.arguments, RESULT + " Light wind.") > final.usage.prompt_tokens


@pytest.mark.parametrize("family", ["hermes", "generic"])
def test_a_forced_call_cut_short_by_max_tokens_is_still_a_call(
    live: LiveServer, families: dict[str, Family], family: str
) -> None:
    """As OpenAI's: a call the request forced comes back as a call, with what its arguments got to."""
    client, model = live.openai(), families[family].model
    for max_tokens in (1, 3, 6):
        cut = client.chat.completions.create(
            model=model, messages=[QUESTION], tools=OPENAI_TOOLS, tool_choice=FORCE_WEATHER, max_tokens=max_tokens
        ).choices[0]
        assert cut.finish_reason == "length" and not cut.message.content, cut
        assert cut.message.tool_calls and cut.message.tool_calls[0].function.name == "get_weather"
        arguments = cut.message.tool_calls[0].function.arguments
        assert not arguments.endswith("}"), "the arguments as far as they got, never made-up `{}`"
        # sent back with the rest of the conversation (as agent loops do), the cut call is no error
        history: list[Any] = [QUESTION, cut.message.model_dump(exclude_none=True)]
        history.append({"role": "tool", "tool_call_id": cut.message.tool_calls[0].id, "content": RESULT})
        again = client.chat.completions.create(model=model, messages=history, max_tokens=2)
        assert again.choices[0].finish_reason in ("length", "stop", "tool_calls")


RESPONSES_TOOLS: list[Any] = [{"type": "function", **t["function"]} for t in OPENAI_TOOLS]


@pytest.mark.parametrize("family", ["hermes", "generic"])
def test_responses_tool_round_trip(live: LiveServer, families: dict[str, Family], family: str) -> None:
    """The Responses API's function calls: an output item, then sent back with its output as the
    SDK returned it; the prompt is the one the chat API builds from the same conversation."""
    client, model = live.openai(), families[family].model
    first = client.responses.create(
        model=model,
        input=[QUESTION],
        tools=RESPONSES_TOOLS,
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        max_output_tokens=CALL_TOKENS,
        extra_body={"seed": 3},
    )
    assert first.status == "completed" and first.output_text == "", "the call's text does not leak"
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    check_arguments(call.arguments)

    history: list[Any] = [
        QUESTION,
        *first.output,
        {"type": "function_call_output", "call_id": call.call_id, "output": RESULT},
    ]
    final = client.responses.create(
        model=model,
        input=history,
        tools=RESPONSES_TOOLS,
        tool_choice="none",
        max_output_tokens=8,
        extra_body={"seed": 3},
    )
    assert final.status == "incomplete" and final.output_text and final.output[0].type == "message"
    chat = client.chat.completions.create(
        model=model,
        messages=[
            QUESTION,
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "content": RESULT},
        ],
        tools=OPENAI_TOOLS,
        tool_choice="none",
        max_tokens=1,
    )
    assert final.usage is not None and chat.usage is not None
    assert final.usage.input_tokens == chat.usage.prompt_tokens

    with client.responses.stream(
        model=model,
        input=[QUESTION],
        tools=RESPONSES_TOOLS,
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=CALL_TOKENS,
        extra_body={"seed": 5, **families[family].end},
    ) as stream:
        events = list(stream)
        streamed = stream.get_final_response()
    pieces = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and done[0].arguments == pieces == streamed.output[0].arguments  # type: ignore[union-attr]
    assert not any(e.type == "response.output_text.delta" for e in events)
    check_arguments(pieces)


# What Codex (0.171) sends as tools, trimmed: functions, a namespace of functions (multi_agent is on
# by default), OpenAI's web search, which no local model can run, and apply_patch as a custom tool.
AGENT_SCHEMA: Any = {
    "type": "object",
    "properties": {"target": {"type": "string", "maxLength": 12}},
    "required": ["target"],
    "additionalProperties": False,
}
CODEX_TOOLS: list[Any] = [
    {"type": "function", "name": "exec_command", "description": "Run a command", "strict": False, "parameters": {}},
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Tools for spawning and managing sub-agents.",
        "tools": [
            {"type": "function", "name": name, "description": "An agent", "strict": False, "parameters": AGENT_SCHEMA}
            for name in ("close_agent", "spawn_agent", "wait_agent")
        ],
    },
    {"type": "web_search", "external_web_access": False},
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Use the `apply_patch` tool to edit files.",
        "format": {
            "type": "grammar",
            "syntax": "lark",
            "definition": 'start: "*** Begin Patch" LF hunk+ "*** End Patch"',
        },
    },
]


def test_a_namespaced_call_names_its_namespace(live: LiveServer, families: dict[str, Family]) -> None:
    """A call to a namespace's function comes back naming the namespace (Codex runs it only then),
    streamed or not, and the SDK reads it; sent back with the conversation, it reads as any call."""
    client, family = live.openai(), families["hermes"]
    asked: Any = {
        "model": family.model,
        "input": [QUESTION],
        "tools": CODEX_TOOLS,
        "tool_choice": {"type": "function", "name": "close_agent"},
        "max_output_tokens": CALL_TOKENS,
    }
    first = client.responses.create(**asked, parallel_tool_calls=False, extra_body={"seed": 3})
    [call] = first.output
    assert call.type == "function_call" and call.name == "close_agent" and call.namespace == "multi_agent_v1"
    assert first.tools[1].type == "namespace" and first.tools[2].type == "web_search"  # as sent

    with client.responses.stream(**asked, extra_body={"seed": 5, **family.end}) as stream:
        items = [e.item for e in stream if e.type in ("response.output_item.added", "response.output_item.done")]
        streamed = stream.get_final_response()
    assert [i.type for i in items] == ["function_call", "function_call"]
    assert [getattr(i, "namespace", None) for i in [*items, *streamed.output]] == ["multi_agent_v1"] * 3

    history = [QUESTION, call, {"type": "function_call_output", "call_id": call.call_id, "output": "closed"}]
    final = client.responses.create(
        model=family.model, input=history, tools=CODEX_TOOLS, tool_choice="none", max_output_tokens=4
    )
    assert final.output[0].type == "message"


def test_codexs_first_request_is_answered(live: LiveServer, families: dict[str, Family]) -> None:
    """Codex's first request (its shape as captured, trimmed), whose tools include a namespace and
    web search, used to be a 400 that ended Codex's run."""
    body = {
        "model": families["generic"].model,
        "instructions": "You are a coding agent.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "01a251f4-d1a2-7541-918c-c08c8c7bb7fc",
        "client_metadata": {"x-codex-window-id": "01a251f4-d1a2-7541-918c-c08c8c7bb7fc:0"},
        "max_output_tokens": 4,
    }
    with live.http().stream("POST", "/v1/responses", json=body) as answer:
        assert answer.status_code == 200
        text = answer.read().decode()
    assert "event: response.incomplete" in text or "event: response.completed" in text


# A custom tool (Codex sends apply_patch as one) whose regex format the grammar holds the input to.
PATCH_REGEX = "\\*\\*\\* [a-z]{1,8}\n[a-z]{1,8}"
CUSTOM_TOOLS: list[Any] = [
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files",
        "format": {"type": "grammar", "syntax": "regex", "definition": PATCH_REGEX},
    },
    RESPONSES_TOOLS[0],
]


@pytest.mark.parametrize("family", ["hermes", "generic"])
def test_a_custom_tool_call_is_its_raw_input(live: LiveServer, families: dict[str, Family], family: str) -> None:
    """A custom tool's call comes back as a `custom_tool_call` item whose input is the raw text (held
    to its regex), streamed as `custom_tool_call_input` events, and goes back with its output."""
    client, model = live.openai(), families[family].model
    asked: Any = {
        "model": model,
        "input": [QUESTION],
        "tools": CUSTOM_TOOLS,
        "tool_choice": {"type": "custom", "name": "apply_patch"},
        "max_output_tokens": CALL_TOKENS,
    }
    first = client.responses.create(**asked, parallel_tool_calls=False, extra_body={"seed": 3})
    [call] = first.output
    assert call.type == "custom_tool_call" and call.name == "apply_patch" and call.call_id.startswith("call_")
    assert re.fullmatch(PATCH_REGEX, call.input), call.input
    assert first.tool_choice.type == "custom"  # type: ignore[union-attr]

    with client.responses.stream(**asked, extra_body={"seed": 5, **families[family].end}) as stream:
        events = list(stream)
        streamed = stream.get_final_response()
    pieces = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert done.input == pieces == streamed.output[0].input  # type: ignore[union-attr]
    assert re.fullmatch(PATCH_REGEX, pieces) and not any("function_call" in e.type for e in events)

    history: list[Any] = [
        QUESTION,
        call,
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done"},
    ]
    final = client.responses.create(
        model=model, input=history, tools=CUSTOM_TOOLS, tool_choice="none", max_output_tokens=4
    )
    assert final.output[0].type == "message"
    shorter = client.responses.create(
        model=model, input=history[:1], tools=CUSTOM_TOOLS, tool_choice="none", max_output_tokens=1
    )
    assert final.usage and shorter.usage and final.usage.input_tokens > shorter.usage.input_tokens + 10


@pytest.mark.parametrize("family", ["hermes", "generic"])
def test_openai_streamed_tool_call(live: LiveServer, families: dict[str, Family], family: str) -> None:
    chunks = list(
        live.openai().chat.completions.create(
            model=families[family].model,
            messages=[QUESTION],
            tools=OPENAI_TOOLS,
            tool_choice=FORCE_WEATHER,
            max_tokens=CALL_TOKENS,
            seed=5,
            stream=True,
            **families[family].end,
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert not "".join(d.content or "" for d in deltas), "no text around a forced call"
    head, *rest = [p for d in deltas for p in d.tool_calls or ()]
    assert head.index == 0 and head.type == "function" and head.id and head.id.startswith("call_")
    assert head.function is not None and head.function.name == "get_weather"
    assert all(p.index == 0 and p.id is None and p.function and p.function.name is None for p in rest)
    fragments = [head.function.arguments or ""] + [p.function.arguments or "" for p in rest if p.function]
    assert len([f for f in fragments if f]) > 1, "the arguments stream in pieces"
    check_arguments("".join(fragments))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]


# The Anthropic API has no logit_bias: its tests use the family whose grammar ends with the call,
# or disable_parallel_tool_use.


def test_anthropic_tool_round_trip(live: LiveServer, families: dict[str, Family]) -> None:
    client = live.anthropic()
    model = families["generic"].model
    first = client.messages.create(
        model=model,
        max_tokens=CALL_TOKENS,
        messages=[QUESTION],
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["tool_use"], "no text block around a forced call"
    use = first.content[0]
    assert use.type == "tool_use" and use.id.startswith("toolu_") and use.name == "get_weather"
    assert isinstance(use.input, dict)
    jsonschema.validate(use.input, WEATHER_SCHEMA)

    # The assistant turn goes back with the content blocks as the SDK returned them.
    result = {"type": "tool_result", "tool_use_id": use.id, "content": RESULT}
    history: list[Any] = [
        QUESTION,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [result]},
    ]
    final = client.messages.create(
        model=model, max_tokens=8, messages=history, tools=ANTHROPIC_TOOLS, tool_choice={"type": "none"}
    )
    assert final.stop_reason == "max_tokens"
    assert [b.type for b in final.content] == ["text"] and final.content[0].text  # type: ignore[union-attr]

    # The call and its result are both in the prompt, though tools are off for the answer.
    def count(tool_input: dict[str, Any], result: str) -> int:
        call = {"type": "tool_use", "id": use.id, "name": use.name, "input": tool_input}
        history: list[Any] = [
            QUESTION,
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": result}]},
        ]
        return client.messages.count_tokens(
            model=model, messages=history, tools=ANTHROPIC_TOOLS, tool_choice={"type": "none"}
        ).input_tokens

    prompt = count(use.input, RESULT)
    assert prompt == final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert count({**use.input, **LONGER}, RESULT) > prompt
    assert count(use.input, RESULT + " Light wind.") > prompt


@pytest.mark.parametrize("family", ["hermes", "generic"])
def test_anthropic_streamed_tool_call(live: LiveServer, families: dict[str, Family], family: str) -> None:
    choice: Any = {"type": "tool", "name": "get_weather"}
    if family == "hermes":
        choice["disable_parallel_tool_use"] = True
    with live.anthropic().messages.stream(
        model=families[family].model,
        max_tokens=CALL_TOKENS,
        messages=[QUESTION],
        tools=ANTHROPIC_TOOLS,
        tool_choice=choice,
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    (start,) = [e for e in events if e.type == "content_block_start"]
    block = start.content_block
    assert block.type == "tool_use" and block.name == "get_weather" and block.id
    fragments = [
        e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert [e.delta.type for e in events if e.type == "content_block_delta"] == ["input_json_delta"] * len(fragments)
    assert len(fragments) > 1, "the input streams in pieces"
    jsonschema.validate(json.loads("".join(fragments)), WEATHER_SCHEMA)
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.id) for b in final.content] == [("tool_use", block.id)]  # type: ignore[union-attr]
    assert final.content[0].input == json.loads("".join(fragments))  # type: ignore[union-attr]


# --- a bare JSON call from a model whose template asks for <tool_call> tags -----------------

WEATHER_ONLY_OPENAI: list[Any] = OPENAI_TOOLS[:1]
WEATHER_ONLY_ANTHROPIC: list[Any] = ANTHROPIC_TOOLS[:1]


@pytest.fixture(scope="module")
def bare_json_model(served: tuple[LiveServer, Models], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Hermes-template tiny model, whose own sampling defaults (so that both SDKs get them)
    push up the opening brace and the end token: with tools offered and no tool_choice it
    answers `{"name": "get_weather", "arguments": {...}}` with no tags, as the small Qwen
    models of issue 18 did, and ends where the call does. The tools' lazy grammar takes
    over at the brace; the parser reads the bare object as a call."""
    path = tiny_gguf.write_tiny_llama(
        tmp_path_factory.mktemp("bare") / "weather-bare.gguf", template="tools", n_ctx=2048
    )
    fields = gguf.GGUFReader(path).fields
    brace = list(fields["tokenizer.ggml.tokens"].contents()).index("{")
    eos = fields["tokenizer.ggml.eos_token_id"].contents()
    library = served[0].state.library
    model = library.add_local(path, model_id="weather-bare").id
    library.update_settings(model, ModelSettings(sampling=SamplingParams(logit_bias={brace: 60.0, eos: 100.0})))
    return model


@pytest.mark.parametrize("seed", [0, 1])
def test_openai_bare_json_call(live: LiveServer, bare_json_model: str, seed: int) -> None:
    client = live.openai()
    answer = client.chat.completions.create(
        model=bare_json_model, messages=[QUESTION], tools=WEATHER_ONLY_OPENAI, max_tokens=CALL_TOKENS, seed=seed
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert not choice.message.content, "the bare call does not show as text"
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    check_arguments(call.function.arguments)
    assert answer.usage is not None and answer.usage.completion_tokens < CALL_TOKENS // 2

    chunks = list(
        client.chat.completions.create(
            model=bare_json_model,
            messages=[QUESTION],
            tools=WEATHER_ONLY_OPENAI,
            max_tokens=CALL_TOKENS,
            seed=seed,
            stream=True,
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert not "".join(d.content or "" for d in deltas)
    head, *rest = [p for d in deltas for p in d.tool_calls or ()]
    assert head.function is not None and head.function.name == "get_weather"
    streamed = (head.function.arguments or "") + "".join(p.function.arguments or "" for p in rest if p.function)
    assert json.loads(streamed) == json.loads(call.function.arguments), "streamed as answered whole"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_anthropic_bare_json_call(live: LiveServer, bare_json_model: str) -> None:
    client = live.anthropic()
    answer = client.messages.create(
        model=bare_json_model, max_tokens=CALL_TOKENS, messages=[QUESTION], tools=WEATHER_ONLY_ANTHROPIC
    )
    assert answer.stop_reason == "tool_use"
    assert [b.type for b in answer.content] == ["tool_use"], "no text block for a bare call"
    use = answer.content[0]
    assert use.type == "tool_use" and use.name == "get_weather" and isinstance(use.input, dict)
    jsonschema.validate(use.input, WEATHER_SCHEMA)
    assert answer.usage.output_tokens < CALL_TOKENS // 2

    with client.messages.stream(
        model=bare_json_model, max_tokens=CALL_TOKENS, messages=[QUESTION], tools=WEATHER_ONLY_ANTHROPIC
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert [e.content_block.type for e in events if e.type == "content_block_start"] == ["tool_use"]
    fragments = [
        e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    jsonschema.validate(json.loads("".join(fragments)), WEATHER_SCHEMA)
    assert final.stop_reason == "tool_use"


# Families whose calls are written in a syntax of their own, each from its model's published template, with
# where its call stands in a prompt that holds it. Thinking is turned off: the random model would think
# for ever (gpt-oss, which always thinks, then calls at once too).
OWN_SYNTAX = {
    "qwen3.5": "<function=get_weather>",
    "glm-4.7-flash": "<tool_call>get_weather",
    "gemma-4": "<|tool_call>call:get_weather{",
    "lfm2.5-instruct": "<|tool_call_start|>[get_weather(",
    "gpt-oss": "to=functions.get_weather<|channel|>commentary",
    # learned from their templates (spark.engine.toolcalls.learned)
    "deepseek-r1": "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{",
    "minimax-m2": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">',
    "nemotron-nano-v2": '<TOOLCALL>[{"name": "get_weather", "arguments": {',
    "apertus": '<|tools_prefix|>[{"get_weather": {',
    "seed-oss": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>",
    "kimi-k2": "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{",
}
TEMPLATES = Path(__file__).parents[1] / "engine" / "templates"


@pytest.fixture(scope="module")
def own_syntax(served: tuple[LiveServer, Models], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Family]:
    folder = tmp_path_factory.mktemp("own-syntax")
    library = served[0].state.library
    out = {}
    for name in OWN_SYNTAX:
        harmony = name == "gpt-oss"
        path = tiny_gguf.write_tiny_llama(
            folder / f"{name}.gguf", template=(TEMPLATES / f"{name}.jinja").read_text(), n_ctx=4096, harmony=harmony
        )
        out[name] = Family(library.add_local(path, model_id=f"weather-{name}").id, {"reasoning_effort": "none"})
    return out


@pytest.mark.parametrize("family", sorted(OWN_SYNTAX))
def test_calls_in_a_models_own_syntax_stream_to_the_sdk_and_go_back_through_its_template(
    live: LiveServer, own_syntax: dict[str, Family], family: str
) -> None:
    client, model, options = live.openai(), own_syntax[family].model, own_syntax[family].end
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[QUESTION],
            tools=OPENAI_TOOLS,
            tool_choice=FORCE_WEATHER,
            parallel_tool_calls=False,
            max_tokens=CALL_TOKENS,
            seed=5,
            stream=True,
            **options,
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert not "".join(d.content or "" for d in deltas), "no text around a forced call"
    head, *rest = [p for d in deltas for p in d.tool_calls or ()]
    assert head.id and head.function is not None and head.function.name == "get_weather"
    arguments = "".join(p.function.arguments or "" for p in (head, *rest) if p.function)
    check_arguments(arguments)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]

    call = {"id": head.id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    history: list[Any] = [
        QUESTION,
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": head.id, "content": RESULT},
    ]
    final = client.chat.completions.create(
        model=model, messages=history, tools=OPENAI_TOOLS, tool_choice="none", max_tokens=4, **options
    )
    assert final.choices[0].finish_reason == "length"
    prompt = live.http().post("/apply-template", json={"model": model, "messages": history, "tools": OPENAI_TOOLS})
    text = prompt.json()["prompt"]
    assert OWN_SYNTAX[family] in text and "sky" in text  # the call in the model's own syntax, then its result


# `not` cannot be enforced by a grammar: left out of a tool's schema (as of a response format's) unless strict.
NOT_SCHEMA: Any = {
    **WEATHER_SCHEMA,
    "properties": {**WEATHER_SCHEMA["properties"], "city": {"type": "string", "maxLength": 12, "not": {"const": ""}}},
    "not": {"type": "null"},
}


@pytest.mark.parametrize(
    ("api", "mode"),
    [(api, mode) for api in ("chat", "responses", "anthropic") for mode in ("forced", "auto", "strict")]
    + [("ollama", "auto")],  # Ollama's API has no tool_choice nor strict tools
)
def test_a_tool_schema_with_not_is_answered(live: LiveServer, families: dict[str, Family], api: str, mode: str) -> None:
    """A tool whose parameters use `not` gets an answer on every API (a forced call's arguments held to the
    schema without it); a strict one is refused naming its tools, as a strict response format is."""
    model, forced, strict = families["hermes"].model, mode == "forced", mode == "strict"
    function = {"name": "get_weather", "description": "Weather", "parameters": NOT_SCHEMA, "strict": strict}
    if api == "chat":
        path, body = (
            "/v1/chat/completions",
            {
                "messages": [QUESTION],
                "tools": [{"type": "function", "function": function}],
                "tool_choice": FORCE_WEATHER if forced else "auto",
                "max_tokens": CALL_TOKENS,
                "parallel_tool_calls": False,
            },
        )
    elif api == "responses":
        path, body = (
            "/v1/responses",
            {
                "input": [QUESTION],
                "tools": [{"type": "function", **function}],
                "tool_choice": {"type": "function", "name": "get_weather"} if forced else "auto",
                "max_output_tokens": CALL_TOKENS,
                "parallel_tool_calls": False,
            },
        )
    elif api == "anthropic":
        tool = {"name": "get_weather", "description": "Weather", "input_schema": NOT_SCHEMA, "strict": strict}
        path, body = (
            "/v1/messages",
            {
                "messages": [QUESTION],
                "tools": [tool],
                "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
                if forced
                else {"type": "auto"},
                "max_tokens": CALL_TOKENS,
            },
        )
    else:
        path, body = (
            "/ollama/api/chat",
            {
                "messages": [QUESTION],
                "tools": [{"type": "function", "function": function}],
                "stream": False,
                "options": {"num_predict": 8},
            },
        )
    answer = live.http().post(path, json={"model": model, **body, "seed": 3})
    if strict:
        assert answer.status_code == 400 and "'not'" in answer.text, answer.text
        assert "tools" in json.dumps(answer.json()), answer.text
        return
    assert answer.status_code == 200, answer.text
    if forced:
        text = answer.text
        arguments = {
            "chat": lambda: json.loads(
                answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
            ),
            "responses": lambda: json.loads(answer.json()["output"][0]["arguments"]),
            "anthropic": lambda: answer.json()["content"][0]["input"],
        }[api]()
        assert set(arguments) <= {"city", "unit", "days"} and {"city", "unit"} <= set(arguments), text
