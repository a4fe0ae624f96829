"""Tool calls through the engine, with the tiny models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from engine.helpers import Collector
from engine.toolcalls.templates import content_and_calls
from spark.engine import Engine
from spark.types import (
    ChatRequest,
    Done,
    Failed,
    LoadOptions,
    Message,
    Reasoning,
    SamplingParams,
    TextDelta,
    Tool,
    ToolCall,
    ToolChoice,
)


@pytest.fixture(scope="module")
def engine(tiny_llama_tools: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="tools", path=str(tiny_llama_tools), n_threads=1, n_ctx=512)) as e:
        yield e


# Small tools: the tiny model's context is 512 tokens.
SMALL_TOOLS = [
    Tool(
        "add",
        "",
        {
            "type": "object",
            "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    Tool(
        "city", "", {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"]}
    ),
]
SMALL_SCHEMAS = {t.name: t.parameters for t in SMALL_TOOLS}


def request(choice: ToolChoice | None, seed: int, **sampling: object) -> ChatRequest:
    return ChatRequest(
        model="tools",
        messages=[Message("user", "What is the weather in Paris?")],
        tools=SMALL_TOOLS,
        tool_choice=choice,
        sampling=SamplingParams(**{"temperature": 1.0, "seed": seed, "max_tokens": 200, **sampling}),  # type: ignore[arg-type]
    )


def run(engine: Engine, req: ChatRequest) -> Collector:
    c = Collector()
    engine.submit("r", req, c)
    c.wait()
    return c


def eos_bias(engine: Engine) -> dict[int, float]:
    # The tiny model never ends on its own; with EOS pushed up it ends wherever the grammar allows.
    return {engine._model.eos: 200.0}


@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("required", "add")])
def test_forced_calls_parse_and_match_the_schema(engine: Engine, choice: ToolChoice) -> None:
    for seed in range(3):
        c = run(engine, request(choice, seed, logit_bias=eos_bias(engine)))
        assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls"
        content, calls = content_and_calls(c.events)
        assert content == "" and calls
        for name, args in calls:
            assert choice.name in (None, name)
            jsonschema.validate(args, SMALL_SCHEMAS[name])


def test_tool_choice_none_neither_renders_nor_parses_tools(engine: Engine) -> None:
    plain = ChatRequest(model="tools", messages=[Message("user", "What is the weather in Paris?")])
    assert engine.count_tokens(request(ToolChoice("none"), 0)) == engine.count_tokens(plain)
    assert engine.count_tokens(request(None, 0)) > engine.count_tokens(plain)
    c = run(engine, request(ToolChoice("none"), 1, max_tokens=30))
    assert all(isinstance(e, TextDelta) for e in c.events[2:-1])
    assert isinstance(c.final, Done) and c.final.finish_reason == "length"


def test_auto_with_bare_json_calls_on_a_template_without_tools(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="chatml", path=str(tiny_llama), n_threads=1, n_ctx=512)) as e:
        brace = e._model.tokenize("{", add_special=False, parse_special=False)[0]
        made = 0
        for seed in range(4):
            bias = {brace: 60.0, e._model.eos: 100.0}
            c = run(e, request(None, seed, logit_bias=bias))
            assert isinstance(c.final, Done)
            content, calls = content_and_calls(c.events)
            if calls:
                made += 1
                assert c.final.finish_reason == "tool_calls" and content == ""
                jsonschema.validate(calls[0][1], SMALL_SCHEMAS[calls[0][0]])
        assert made >= 2


def test_a_forced_call_naming_an_unknown_tool_is_refused_by_the_api_layer_not_here(engine: Engine) -> None:
    # The api layer checks tool_choice names; the engine must still not crash on one.
    c = run(engine, request(ToolChoice("required", "nope"), 0, logit_bias=eos_bias(engine)))
    assert isinstance(c.final, Failed) and c.final.error.param == "tool_choice"
    assert "'nope', which is not among the tools" in c.final.error.message


WEATHER_TOOLS = [
    Tool(
        "get_weather",
        "Weather in a city",
        {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]},
    ),
    Tool("get_time", "Local time in a city", {"type": "object", "properties": {"city": {"type": "string"}}}),
]


def test_a_forced_call_ends_when_its_json_is_whole(engine: Engine) -> None:
    # Issue 18: these went on after the call to max_tokens and said "length" with 60 tokens.
    ends: dict[bool, list[int]] = {}
    for parallel in (True, False):
        for seed in range(4):
            req = ChatRequest(
                model="tools",
                messages=[Message("user", "What is the weather in Paris?")],
                tools=WEATHER_TOOLS,
                tool_choice=ToolChoice("required", "get_weather"),
                parallel_tool_calls=parallel,
                sampling=SamplingParams(seed=seed, max_tokens=60),
            )
            c = run(engine, req)
            assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls", c.final
            content, calls = content_and_calls(c.events)
            assert content == "" and [name for name, _ in calls] == ["get_weather"]
            jsonschema.validate(calls[0][1], WEATHER_TOOLS[0].parameters)
            ends.setdefault(parallel, []).append(c.final.usage.completion_tokens)
    assert max(ends[True]) < 60, "only the tokens generated up to the call's end are counted"
    # The same tokens either way: with parallel calls allowed the answer still ends with the
    # call's last token, since the model's own next token would not start another.
    assert ends[True] == ends[False]


def test_calls_reach_a_template_that_lists_tools_but_renders_no_calls_as_text(tmp_path: Path) -> None:
    import tiny_gguf

    # the tools in the system turn, then each message's content only
    src = (
        "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    path = tiny_gguf.write_tiny_llama(tmp_path / "contents.gguf", template=src)
    conversation = [
        Message("user", "1 + 2?"),
        Message("assistant", None, tool_calls=[ToolCall("c1", "add", '{"a": 1, "b": 2}')]),
        Message("tool", "3", tool_call_id="c1"),
    ]
    with Engine(LoadOptions(model_id="contents", path=str(path), n_threads=1, n_ctx=512)) as e:
        text = e._prep.prompt(ChatRequest(model="contents", messages=conversation, tools=SMALL_TOOLS))[2]
    assert 'Tools: [{"type": "function"' in text
    assert '<|im_start|>assistant\n{"name": "add", "arguments": {"a": 1, "b": 2}}<|im_end|>' in text


# A tool whose parameters are a string, a bounded integer, an enum and an object: the parameter-tag
# families (Qwen3.5, GLM) write a string as it is and any other value as JSON, LFM2 every value as JSON.
FORM = Tool(
    "book",
    "",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 8},
            "nights": {"type": "integer", "minimum": 1, "maximum": 9},
            "room": {"type": "string", "enum": ["single", "double"]},
            "extras": {"type": "object", "properties": {"late": {"type": "boolean"}}, "required": ["late"]},
        },
        "required": ["nights", "room", "extras"],
    },
)
# Gemma 4 writes its own syntax for objects, which its grammar leaves free: no object here.
BOOK = Tool(
    "book",
    "",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 8},
            "nights": {"type": "integer", "minimum": 1, "maximum": 9},
            "room": {"type": "string", "enum": ["single", "double"]},
            "late": {"type": "boolean"},
        },
        "required": ["nights", "room"],
    },
)


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize(
    ("template", "tool"),
    [("qwen3.5", FORM), ("glm-4.7-flash", FORM), ("lfm2.5-instruct", FORM), ("gemma-4", BOOK)],
)
def test_forced_calls_in_a_syntax_of_their_own_parse_and_match_the_schema(
    tmp_path: Path, template: str, tool: Tool, parallel: bool
) -> None:
    import tiny_gguf

    src = (Path(__file__).parents[1] / "templates" / f"{template}.jinja").read_text()
    path = tiny_gguf.write_tiny_llama(tmp_path / f"{template}.gguf", template=src, n_ctx=2048)
    with Engine(LoadOptions(model_id="m", path=str(path), n_threads=1, n_ctx=2048)) as e:
        # the tiny model would go on listing calls: the end of a list, like EOS, is made likely
        bias = {e._model.eos: 200.0, e._model.tokenize("]", add_special=False, parse_special=False)[0]: 20.0}
        for seed in range(3):
            req = ChatRequest(
                model="m",
                messages=[Message("user", "Book a room in Oslo.")],
                tools=[tool, *SMALL_TOOLS],
                tool_choice=ToolChoice("required", "book"),
                parallel_tool_calls=parallel,
                reasoning=Reasoning(enabled=False),  # Qwen's and GLM's would think first, for ever
                sampling=SamplingParams(temperature=1.0, seed=seed, max_tokens=300, logit_bias=bias),
            )
            c = run(e, req)
            assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls", c.final
            content, calls = content_and_calls(c.events)
            assert content == "" and calls and all(name == "book" for name, _ in calls)
            for _, args in calls:
                jsonschema.validate(args, tool.parameters)


def test_calls_reach_lfm2_instruct_as_it_writes_them(tmp_path: Path) -> None:
    import tiny_gguf

    src = (Path(__file__).parents[1] / "templates" / "lfm2.5-instruct.jinja").read_text()
    path = tiny_gguf.write_tiny_llama(tmp_path / "lfm.gguf", template=src, n_ctx=2048)
    conversation = [
        Message("user", "1 + 2?"),
        Message("assistant", "Adding.", tool_calls=[ToolCall("c1", "add", '{"a": 1, "b": 2}')]),
        Message("tool", "3", tool_call_id="c1"),
    ]
    with Engine(LoadOptions(model_id="lfm", path=str(path), n_threads=1, n_ctx=2048)) as e:
        text = e._prep.prompt(ChatRequest(model="lfm", messages=conversation, tools=SMALL_TOOLS))[2]
    assert "<|im_start|>assistant\nAdding.\n<|tool_call_start|>[add(a=1, b=2)]<|tool_call_end|><|im_end|>" in text
