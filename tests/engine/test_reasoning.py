"""Reasoning: <think> blocks split from the answer as they stream, templates that take
enable_thinking, and the thinking budget enforced by writing the closing tag."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

import tiny_gguf
from engine.grammar.driver import Driver
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.grammar import Rules, finish
from spark.engine.native import Model
from spark.engine.reasoning import (
    ThinkSplitter,
    ThinkSyntax,
    not_containing,
    think_syntax,
)
from spark.engine.template import ChatTemplate
from spark.types import (
    ChatRequest,
    Done,
    LoadOptions,
    Message,
    Reasoning,
    ReasoningDelta,
    ResponseFormat,
    SamplingParams,
    TextDelta,
)

# Qwen-Qwen3-0.6B.jinja (llama.cpp models/templates)
QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""


# ChatML that opens a thinking block for the answer, unless enable_thinking is false.
def split(text: str, step: int, *, opened: bool = False, syntax: ThinkSyntax | None = None) -> tuple[str, str]:
    splitter = ThinkSplitter(syntax or ThinkSyntax(), opened=opened)
    parts = []
    for i in range(0, len(text), step):
        parts += splitter.feed(text[i : i + step])
    parts += splitter.finish()
    reasoning = "".join(t for kind, t in parts if kind == "reasoning")
    content = "".join(t for kind, t in parts if kind == "content")
    return reasoning, content


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_thinking_is_split_from_the_answer(step: int) -> None:
    assert split("<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.", step) == ("Let me see: 2+2.\n", "It is 4.")
    assert split("  <think>a</think>b", step) == ("a", "b")
    assert split("Still thinking</think>\nDone", step, opened=True) == ("Still thinking", "Done")
    assert split("Plain answer, <think> later is text", step) == ("", "Plain answer, <think> later is text")
    assert split("<thin", step) == ("", "<thin")
    assert split("<think>never closed", step) == ("never closed", "")


def test_only_a_possible_closing_tag_is_held_back() -> None:
    splitter = ThinkSplitter(ThinkSyntax(), opened=True)
    assert splitter.feed("abc </th") == [("reasoning", "abc ")]
    assert splitter.in_reasoning
    assert splitter.feed("ink>\nok") == [("content", "ok")]
    assert not splitter.in_reasoning


def test_thinking_templates_are_recognised() -> None:
    assert think_syntax(QWEN3) == ThinkSyntax()
    assert think_syntax(tiny_gguf.THINK_TEMPLATE) == ThinkSyntax()
    assert think_syntax(tiny_gguf.CHATML_TEMPLATE) is None
    assert think_syntax(None) is None


GEMMA4 = (Path(__file__).parent / "templates" / "gemma-4.jinja").read_text()


def test_other_thinking_tags_are_recognised_and_split() -> None:
    assert think_syntax("{{ '[THINK]' + m.thinking + '[/THINK]' }}") == ThinkSyntax("[THINK]", "[/THINK]")
    assert think_syntax("{%- set think_begin_token = '<seed:think>' -%}") == ThinkSyntax(
        "<seed:think>", "</seed:think>"
    )
    gemma = think_syntax(GEMMA4)
    assert gemma == ThinkSyntax("<|channel>thought", "<channel|>") and "<|channel>" in gemma.markers
    assert split("<|channel>thought\nTwo and two.<channel|>It is 4.", 2, syntax=gemma) == ("Two and two.", "It is 4.")
    # Gemma 4 thinks only when asked: otherwise its prompt closes an empty thought
    t = ChatTemplate(GEMMA4, bos_token="<bos>")
    off = t.render([Message("user", "2+2?")])
    assert off.endswith("<|turn>model\n<|channel>thought\n<channel|>") and not gemma.opened_by(off)
    on = t.render([Message("user", "2+2?")], variables={"enable_thinking": True})
    assert "<|think|>" in on and on.endswith("<|turn>model\n")


def test_qwen3_template_takes_enable_thinking_and_earlier_reasoning() -> None:
    t = ChatTemplate(QWEN3)
    chat = [Message("user", "2+2?")]
    off = t.render(chat, variables={"enable_thinking": False})
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not ThinkSyntax().opened_by(off)
    assert t.render(chat).endswith("<|im_start|>assistant\n")
    earlier = t.render([*chat, Message("assistant", "4", reasoning_content="two and two")], add_generation_prompt=False)
    assert "<think>\ntwo and two\n</think>\n\n4" in earlier


def test_not_containing_matches_exactly_the_texts_without_the_word(tiny_llama: Path) -> None:
    model = Model(str(tiny_llama))
    try:
        driver = Driver(model)
        rules = Rules()
        grammar = finish(rules, f'{not_containing(rules, "</think>", "t")} "</think>" "!"', "test")
        for text, ok in [
            ("abc</think>!", True),
            ("</think>!", True),
            ("<</think>!", True),
            ("</thin</think>!", True),
            ("a</think>b</think>!", False),
            ("</think></think>!", False),
            ("<<//think>></think>!", True),
        ]:
            assert driver.accepts(grammar, text) == ok, text
    finally:
        model.close()


# --- through the engine -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path = tiny_gguf.write_tiny_llama(
        tmp_path_factory.mktemp("think") / "think.gguf", template=tiny_gguf.THINK_TEMPLATE
    )
    with Engine(LoadOptions(model_id="think", path=str(path), n_threads=1, n_ctx=512)) as e:
        yield e


def run(engine: Engine, reasoning: Reasoning | None, **kw: object) -> Collector:
    sampling = SamplingParams(**{"temperature": 1.0, "seed": 7, "max_tokens": 40, **kw.pop("sampling", {})})  # type: ignore[arg-type, dict-item]
    request = ChatRequest(
        model="think", messages=[Message("user", "Think, then answer.")], sampling=sampling, reasoning=reasoning, **kw
    )  # type: ignore[arg-type]
    c = Collector()
    engine.submit("r", request, c)
    c.wait()
    return c


def texts(c: Collector) -> tuple[str, str]:
    return (
        "".join(e.text for e in c.events if isinstance(e, ReasoningDelta)),
        "".join(e.text for e in c.events if isinstance(e, TextDelta)),
    )


def test_an_opened_block_streams_as_reasoning(engine: Engine) -> None:
    c = run(engine, None)
    reasoning, content = texts(c)
    assert reasoning and content == ""  # the tiny model never closes the block itself
    assert isinstance(c.final, Done) and c.final.finish_reason == "length"
    assert c.final.usage.reasoning_tokens == c.final.usage.completion_tokens == 40  # every token thought


def test_the_budget_closes_the_block_and_the_answer_follows(engine: Engine) -> None:
    free, _ = texts(run(engine, None))
    c = run(engine, Reasoning(budget_tokens=8))
    reasoning, content = texts(c)
    # the same first tokens, then </think> written for the model, then the answer
    assert reasoning and free.startswith(reasoning) and len(reasoning) < len(free)
    assert content and "</think>" not in content + reasoning
    kinds = [type(e) for e in c.events if isinstance(e, (ReasoningDelta, TextDelta))]
    assert kinds == sorted(kinds, key=lambda k: k is TextDelta)  # all reasoning, then all text
    assert isinstance(c.final, Done) and c.final.usage.completion_tokens == 40
    assert 8 < c.final.usage.reasoning_tokens < 40  # the budget's 8 and the closing tag written for it


def test_thinking_off_reaches_the_template(engine: Engine) -> None:
    c = run(engine, Reasoning(enabled=False))
    reasoning, content = texts(c)
    assert reasoning == "" and content
    assert isinstance(c.final, Done) and c.final.usage.reasoning_tokens == 0


def test_budget_then_json_schema_answer(engine: Engine) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}}, "required": ["n"]}
    for seed in range(3):
        c = run(
            engine,
            Reasoning(budget_tokens=6),
            response_format=ResponseFormat("json_schema", schema),
            sampling={"seed": seed, "max_tokens": 120, "logit_bias": {engine._model.eos: 200.0}},
        )
        reasoning, content = texts(c)
        assert reasoning and isinstance(c.final, Done) and c.final.finish_reason == "stop"
        jsonschema.validate(json.loads(content), schema)
