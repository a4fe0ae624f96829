"""OpenAI's harmony format (gpt-oss): its chat template, the parser of its answers, and its grammars
through the engine, with a tiny model that has gpt-oss's special tokens and template."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

import tiny_gguf
from engine.helpers import Collector
from engine.toolcalls.templates import content_and_calls
from spark.engine import Engine
from spark.engine.harmony import FINAL, HarmonyParser, harmony_grammar
from spark.engine.template import ChatTemplate
from spark.engine.toolcalls import tool_syntax
from spark.errors import InvalidRequest
from spark.types import (
    ChatRequest,
    Done,
    Event,
    LoadOptions,
    Message,
    Reasoning,
    ReasoningDelta,
    ResponseFormat,
    SamplingParams,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    template_thinks,
)

GPT_OSS = (Path(__file__).parent / "templates" / "gpt-oss.jinja").read_text()
ADD = Tool(
    "add",
    "Add two integers",
    {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
CITY = Tool(
    "city", "", {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"]}
)
TOOLS = [ADD, CITY]


def parse(text: str, step: int, names: frozenset[str] = frozenset({"add", "city"}), **kw: object) -> list[Event]:
    parser = HarmonyParser(names, **kw)  # type: ignore[arg-type]
    events: list[Event] = []
    for i in range(0, len(text), step):
        events += parser.feed(text[i : i + step])
    return events + parser.finish()


def reasoning_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, ReasoningDelta))


# --- the parser ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_analysis_is_reasoning_and_the_final_message_is_content(step: int) -> None:
    out = (
        "<|channel|>analysis<|message|>User greets. Reply briefly.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?"
    )
    events = parse(out, step)
    assert reasoning_of(events) == "User greets. Reply briefly."
    assert content_and_calls(events) == ("Hello! How can I help?", [])


@pytest.mark.parametrize("step", [1, 5, 1000])
@pytest.mark.parametrize(
    "header",
    [
        "<|channel|>commentary to=functions.add <|constrain|>json",  # recipient in the channel
        " to=functions.add<|channel|>commentary json",  # recipient in the role, as the template renders it
        "<|channel|>commentary to=functions.add",
    ],
)
def test_a_message_to_a_function_is_a_tool_call(header: str, step: int) -> None:
    out = f'<|channel|>analysis<|message|>Need add.<|end|><|start|>assistant{header}<|message|>{{"a": 2, "b": 3}}'
    parser = HarmonyParser(frozenset({"add"}))
    events: list[Event] = []
    for i in range(0, len(out), step):
        events += parser.feed(out[i : i + step])
        if i + step < len(out) - 2:
            assert not parser.call_ended
    assert parser.call_ended  # the arguments are whole: at max_tokens the answer still ends as a call
    events += parser.finish()
    assert reasoning_of(events) == "Need add."
    assert content_and_calls(events) == ("", [("add", {"a": 2, "b": 3})])
    assert parser.made_tool_calls
    start = next(e for e in events if isinstance(e, ToolCallDelta))
    assert start.id and start.id.startswith("call_")


def test_calls_in_a_row_and_a_preamble_before_them() -> None:
    out = (
        "<|channel|>commentary<|message|>Let me add those.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.add json<|message|>{"a": 1, "b": 1}<|end|>'
        '<|start|>assistant<|channel|>commentary to=functions.city json<|message|>{"name": "Oslo"}'
    )
    assert content_and_calls(parse(out, 2)) == (
        "Let me add those.",
        [("add", {"a": 1, "b": 1}), ("city", {"name": "Oslo"})],
    )
    one = HarmonyParser(frozenset({"add", "city"}), max_calls=1)
    events = one.feed(out)
    assert one.complete and content_and_calls(events + one.finish())[1] == [("add", {"a": 1, "b": 1})]


def test_messages_to_anyone_else_are_dropped() -> None:
    # the model's built-in browser, a function the request did not offer, a call with no tools at all
    out = (
        '<|channel|>analysis<|message|>Search.<|end|><|start|>assistant<|channel|>commentary to=browser.search json<|message|>{"query": "x"}<|end|>'
        "<|start|>assistant<|channel|>commentary to=functions.delete_all json<|message|>{}<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done."
    )
    events = parse(out, 4)
    assert content_and_calls(events) == ("Done.", []) and reasoning_of(events) == "Search."
    assert content_and_calls(parse(out, 4, names=frozenset())) == ("Done.", [])


@pytest.mark.parametrize("step", [1, 1000])
def test_text_that_is_not_harmony_is_content(step: int) -> None:
    for text in ("The capital of France is Paris.", "to be or not to be", "<b>bold</b> claim"):
        assert content_and_calls(parse(text, step)) == (text, [])


def test_a_prefilled_answer_continues_as_content() -> None:
    assert content_and_calls(parse('Paris", "country": "France"}', 3, opened=True)) == (
        'Paris", "country": "France"}',
        [],
    )


def test_a_call_cut_short_sends_what_it_has() -> None:
    events = parse("<|channel|>commentary to=functions.add json<|message|>", 1)
    assert content_and_calls(events) == ("", [("add", {})])


# --- the template -------------------------------------------------------------------------------------


def test_a_harmony_template_is_recognised_as_a_thinking_model_with_harmony_calls() -> None:
    assert template_thinks(GPT_OSS) and tool_syntax(GPT_OSS).family == "harmony"


def test_the_template_gets_reasoning_as_thinking_and_one_call_per_turn() -> None:
    t = ChatTemplate(GPT_OSS)
    assert t.takes_system and not t.takes_parallel_calls
    calls = [ToolCall("c1", "add", '{"a": 1, "b": 2}'), ToolCall("c2", "city", '{"name": "Oslo"}')]
    conversation = [
        Message("system", "Be brief."),
        Message("user", "1 + 2, and a city?"),
        # reasoning and text before calls: the template takes one of them there
        Message("assistant", "Calling.", tool_calls=calls, reasoning_content="Two tools needed."),
        Message("tool", "3", tool_call_id="c1"),
        Message("tool", "Oslo is nice", tool_call_id="c2"),
    ]
    out = t.render(conversation, tools=TOOLS)
    assert "# Instructions\n\nBe brief." in out and "namespace functions" in out
    assert "<|channel|>analysis<|message|>Two tools needed.<|end|>" in out
    add, city = out.index("to=functions.add<|channel|>"), out.index("to=functions.city<|channel|>")
    assert add < out.index('"3"') < city < out.index('"Oslo is nice"')  # each result after its own call
    assert out.endswith("<|start|>assistant")


# --- grammars -----------------------------------------------------------------------------------------


def test_a_forced_tool_must_be_offered() -> None:
    with pytest.raises(InvalidRequest) as e:
        harmony_grammar(TOOLS, forced=True, only="nope")
    assert e.value.param == "tool_choice"


def test_grammars_are_lazy_only_where_nothing_is_forced() -> None:
    lazy = harmony_grammar(TOOLS, forced=False)
    assert lazy is not None and lazy.lazy and lazy.text.startswith("root ::= call")
    forced = harmony_grammar(TOOLS, forced=True, only="add")
    assert forced is not None and not forced.lazy and "city" not in forced.text
    assert harmony_grammar(None, forced=False) is None


# --- through the engine ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path = tiny_gguf.write_tiny_llama(
        tmp_path_factory.mktemp("harmony") / "gpt-oss-tiny.gguf", template=GPT_OSS, harmony=True
    )
    with Engine(LoadOptions(model_id="oss", path=str(path), n_threads=1, n_ctx=2048)) as e:
        yield e


def run(engine: Engine, request: ChatRequest) -> Collector:
    c = Collector()
    engine.submit("r", request, c)
    c.wait()
    return c


def chat(**kw: object) -> ChatRequest:
    # The tiny model would think forever: a budget of a few tokens closes its analysis.
    fields: dict[str, object] = {
        "model": "oss",
        "messages": [Message("user", "Add 2 and 2.")],
        "sampling": SamplingParams(temperature=1.0, seed=kw.pop("seed", 0), max_tokens=250),  # type: ignore[arg-type]
        "reasoning": Reasoning(enabled=True, budget_tokens=6),
    }
    return ChatRequest(**{**fields, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("required", "city")])
def test_a_forced_call_is_written_in_harmony_and_read_as_a_call(engine: Engine, choice: ToolChoice) -> None:
    for seed in range(2):
        c = run(engine, chat(tools=TOOLS, tool_choice=choice, seed=seed))
        assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls"
        content, calls = content_and_calls(c.events)
        assert content == "" and len(calls) == 1
        name, args = calls[0]
        assert choice.name in (None, name)
        jsonschema.validate(args, next(t for t in TOOLS if t.name == name).parameters)
        assert reasoning_of(c.events)  # the analysis the budget closed


def test_with_thinking_off_a_forced_call_comes_at_once(engine: Engine) -> None:
    c = run(engine, chat(tools=TOOLS, tool_choice=ToolChoice("required", "add"), reasoning=Reasoning(enabled=False)))
    assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls"
    assert not reasoning_of(c.events) and [name for name, _ in content_and_calls(c.events)[1]] == ["add"]


def test_a_json_schema_answer_is_the_final_message(engine: Engine) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    c = run(engine, chat(response_format=ResponseFormat("json_schema", schema=schema)))
    assert isinstance(c.final, Done) and c.final.finish_reason == "stop"
    content = "".join(e.text for e in c.events if isinstance(e, TextDelta))
    jsonschema.validate(json.loads(content), schema)


def test_the_prompt_asks_for_low_effort_without_reasoning_and_a_prefill_opens_the_final_message(engine: Engine) -> None:
    prep = engine._prep
    assert "Reasoning: low" in prep.prompt(chat(reasoning=Reasoning(enabled=False)))[2]
    assert "Reasoning: high" in prep.prompt(chat(reasoning=Reasoning(effort="high")))[2]
    assert "Reasoning: high" in prep.prompt(chat(reasoning=Reasoning(effort="max")))[2]  # gpt-oss knows three
    assert "Reasoning: medium" in prep.prompt(chat(reasoning=None))[2]
    prefill = chat(messages=[Message("user", "Capital of France as JSON?"), Message("assistant", '{"capital": "')])
    assert prep.prompt(prefill)[2].endswith(f'<|start|>assistant{FINAL}{{"capital": "')
    c = run(engine, prefill)
    assert isinstance(c.final, Done) and not any(isinstance(e, ReasoningDelta) for e in c.events)
    assert content_and_calls(c.events)[0]  # it goes on as content
