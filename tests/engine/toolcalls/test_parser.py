"""Tool-call parsers fed with real template output, and the prompt side of tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tiny_gguf
from engine.toolcalls.templates import (
    CALLS,
    FAMILIES,
    LLAMA31,
    MISTRAL_NEMO,
    MISTRAL_SMALL_32,
    QWEN3_CODER,
    QWEN25,
    QWEN35,
    SCHEMAS,
    TOOLS,
    assistant_output,
    content_and_calls,
    parse,
)
from spark.engine.template import ChatTemplate
from spark.engine.toolcalls import (
    ToolCallParser,
    ToolSyntax,
    describe_tools,
    gemma_call,
    new_call_id,
    python_calls,
    tool_syntax,
)
from spark.types import (
    Message,
    TextDelta,
    ToolCall,
    ToolCallDelta,
)


def test_families_are_recognised_from_templates() -> None:
    assert tool_syntax(tiny_gguf.TOOLS_TEMPLATE).family == "hermes"
    assert tool_syntax(QWEN25) == ToolSyntax("hermes", True)
    assert tool_syntax(QWEN3_CODER) == tool_syntax(QWEN35) == ToolSyntax("xml", True)
    assert tool_syntax(LLAMA31) == ToolSyntax("llama3", True)
    assert tool_syntax(MISTRAL_NEMO) == ToolSyntax("mistral", True, mistral_args=False)
    assert tool_syntax(MISTRAL_SMALL_32) == ToolSyntax("mistral", True, mistral_args=True)
    assert tool_syntax(tiny_gguf.CHATML_TEMPLATE) == ToolSyntax("generic", False)
    assert tool_syntax(None) == ToolSyntax("generic", False)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_real_template_output_parses_back_into_the_calls(family: str, step: int) -> None:
    src = FAMILIES[family]
    calls = CALLS[:1] if family == "llama3.1" else CALLS  # Llama 3.1 renders one call per turn
    text = assistant_output(src, calls, enable_thinking=False)  # Qwen3.5's answer then starts after thinking
    content, parsed = content_and_calls(parse(tool_syntax(src), text, step, schemas=SCHEMAS))
    assert content == ""
    assert parsed == [(c.name, json.loads(c.arguments)) for c in calls]


def test_a_string_parameter_streams_as_it_is_written() -> None:
    # Qwen3-Coder writing a file: its text reaches the client before the parameter's closing tag
    parser = ToolCallParser(tool_syntax(QWEN3_CODER), ["write_file"], schemas={"write_file": FILE_SCHEMA})
    head = "<tool_call>\n<function=write_file>\n<parameter=path>\nmain.py\n</parameter>\n<parameter=content>\n"
    events = parser.feed(head + 'print("hi")\n')  # the newline may be the template's: held back
    sent = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    assert sent == '{"path": "main.py", "content": "print(\\"hi\\")'
    events = parser.feed('print("bye")\n</para')
    assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == '\\nprint(\\"bye\\")'
    events = parser.feed("meter>\n<parameter=mode>\n420\n</parameter>\n</function>\n</tool_call>")
    assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == '", "mode": 420}'
    # cut short inside a value: the text so far, the object closed
    parser = ToolCallParser(tool_syntax(QWEN3_CODER), ["write_file"], schemas={"write_file": FILE_SCHEMA})
    events = parser.feed(head + "x = 1\n</param") + parser.finish()
    args = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    assert json.loads(args) == {"path": "main.py", "content": "x = 1"}


FILE_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"}},
}


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_text_before_calls_streams_as_text(step: int) -> None:
    text = assistant_output(QWEN25, CALLS, content="Let me check.")
    events = parse(tool_syntax(QWEN25), text, step)
    content, parsed = content_and_calls(events)
    assert content.strip() == "Let me check." and [n for n, _ in parsed] == ["get_weather", "add"]
    first_call = next(i for i, e in enumerate(events) if isinstance(e, ToolCallDelta))
    assert all(isinstance(e, TextDelta) for e in events[:first_call])


def test_llama_builtin_tool_call_after_python_tag() -> None:
    text = assistant_output(
        LLAMA31, [ToolCall("x", "brave_search", '{"query": "weather Paris"}')], builtin_tools=["brave_search"]
    )
    assert text.startswith("<|python_tag|>brave_search.call(")
    for step in (1, 4, 10_000):
        assert content_and_calls(parse(tool_syntax(LLAMA31), text, step)) == (
            "",
            [("brave_search", {"query": "weather Paris"})],
        )


def test_only_a_possible_marker_start_is_held_back() -> None:
    parser = ToolCallParser(tool_syntax(QWEN25), ["add"])
    assert parser.feed("Hello <tool") == [TextDelta("Hello ")]
    assert parser.feed("box> and <") == [TextDelta("<toolbox> and ")]
    assert parser.feed("b>") == [TextDelta("<b>")]
    assert parser.finish() == []


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_marker_like_text_and_malformed_calls_stay_text(step: int) -> None:
    syntax = tool_syntax(QWEN25)
    text = "Use <tool_call> like this: <tool_call>not json</tool_call> or <tool_call>[1]</tool_call>."
    assert content_and_calls(parse(syntax, text, step)) == (text, [])
    # A bare JSON answer is an answer unless it names a tool and has arguments.
    llama = tool_syntax(LLAMA31)
    for answer in ('{"answer": 42}', '{"name": "Bob", "parameters": {}}', ' {"name": "add"} trailing'):
        assert content_and_calls(parse(llama, answer, step)) == (answer, [])


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_bare_json_calls_one_after_another(step: int) -> None:
    text = ' {"name": "add", "arguments": {"a": 1, "b": 2}}\n{"name": "get_weather", "arguments": {"city": "X", "days": 1}}\n'
    assert content_and_calls(parse(tool_syntax(None), text, step)) == (
        "",
        [("add", {"a": 1, "b": 2}), ("get_weather", {"city": "X", "days": 1})],
    )


def test_a_call_that_breaks_after_it_started_ends_and_the_rest_is_text() -> None:
    events = parse(tool_syntax(QWEN25), '<tool_call>{"name": "add", "arguments": {"a": 1, "b": ]}', 2)
    starts = [e for e in events if isinstance(e, ToolCallDelta) and e.id]
    assert [e.name for e in starts] == ["add"]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "]}"


def test_arguments_sent_as_a_json_string_are_unwrapped() -> None:
    text = '<tool_call>{"arguments": "{\\"a\\": 1, \\"b\\": 2}", "name": "add"}</tool_call>'
    assert content_and_calls(parse(tool_syntax(QWEN25), text, 1)) == ("", [("add", {"a": 1, "b": 2})])


def test_call_ids() -> None:
    assert new_call_id("hermes").startswith("call_") and len(new_call_id("hermes")) == 29
    mistral_id = new_call_id("mistral")
    assert len(mistral_id) == 9 and mistral_id.isalnum()
    # the ids Spark gives Mistral calls are accepted by the template on the next turn
    events = parse(tool_syntax(MISTRAL_SMALL_32), assistant_output(MISTRAL_SMALL_32, CALLS), 5)
    ids = [e.id for e in events if isinstance(e, ToolCallDelta) and e.id]
    calls = [ToolCall(i, c.name, c.arguments) for i, c in zip(ids, CALLS, strict=True)]
    assert assistant_output(MISTRAL_SMALL_32, calls)


def test_templates_without_tools_get_them_in_the_system_message() -> None:
    chat = [
        Message("user", "weather?"),
        Message("assistant", None, tool_calls=CALLS[:1]),
        Message("tool", "sunny", tool_call_id="abcDEF123"),
    ]
    out = ChatTemplate(tiny_gguf.CHATML_TEMPLATE).render(describe_tools(chat, TOOLS))
    assert out.startswith("<|im_start|>system\nYou can call these tools")
    assert '"name": "add"' in out and '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}' in out
    assert "<|im_start|>tool\nsunny" in out
    # the model's own system prompt still applies when the client sent none; the client's replaces it
    default = ChatTemplate(tiny_gguf.CHATML_TEMPLATE).render(describe_tools(chat, TOOLS, "Answer briefly."))
    assert default.startswith("<|im_start|>system\nAnswer briefly.\n\nYou can call these tools")
    own = describe_tools([Message("system", "Be a pirate."), *chat], TOOLS, "Answer briefly.")
    assert own[0].text().startswith("Be a pirate.\n\nYou can call these tools") and "briefly" not in own[0].text()


GEMMA4 = (Path(__file__).parents[1] / "templates" / "gemma-4.jinja").read_text()


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_gemma4_calls_as_its_template_writes_them_parse_back(step: int) -> None:
    assert tool_syntax(GEMMA4) == ToolSyntax("gemma", True)
    full = ChatTemplate(GEMMA4).render(
        [Message("user", "Weather in Paris, and 1 + -2?"), Message("assistant", None, tool_calls=CALLS)],
        tools=TOOLS,
        add_generation_prompt=False,
    )
    out = full[full.rindex("<|turn>model\n") + len("<|turn>model\n") :].removesuffix("<|tool_response>")
    assert out.startswith("<|tool_call>call:get_weather{") and out.endswith("<tool_call|>")
    content, parsed = content_and_calls(parse(tool_syntax(GEMMA4), out, step))
    assert content == ""
    assert parsed == [(c.name, json.loads(c.arguments)) for c in CALLS]


def test_gemma4_values_read_as_json() -> None:
    call = gemma_call('call:book{city:<|"|>Oslo, "NO"<|"|>,nights:2,opts:{late:true,tags:[<|"|>a<|"|>,3]},note:null}')
    assert call is not None and call[0] == "book"
    assert json.loads(call[1]) == {
        "city": 'Oslo, "NO"',
        "nights": 2,
        "opts": {"late": True, "tags": ["a", 3]},
        "note": None,
    }
    for broken in ('call:book{city:<|"|>Oslo}', "call:book{ :1}", "book{a:1}", "call:book{a:1} more"):
        assert gemma_call(broken) is None, broken
    # a call to no tool of the request, or one cut short, is text
    text = "<|tool_call>call:delete_all{}<tool_call|>"
    assert content_and_calls(parse(ToolSyntax("gemma", True), text, 5)) == (text, [])
    cut = "<|tool_call>call:add{a:1"
    assert content_and_calls(parse(ToolSyntax("gemma", True), cut, 5)) == (cut, [])


def test_lfm2_calls_are_a_python_list() -> None:
    lfm25_instruct = (Path(__file__).parents[1] / "templates" / "lfm2.5-instruct.jinja").read_text()
    assert tool_syntax(lfm25_instruct) == ToolSyntax("lfm2", True)  # it lists tools and writes calls as content
    calls = python_calls(
        '[get_weather(city="Paris", days=2, opts={"late": true, "tags": ["a", None]}), add(a=1, b=-2)]'
    )
    assert calls == [
        ("get_weather", '{"city": "Paris", "days": 2, "opts": {"late": true, "tags": ["a", null]}}'),
        ("add", '{"a": 1, "b": -2}'),
    ]
    for broken in ("get_weather(city='x')", "[get_weather('x')]", "[os.system('x')]", "[a(b=c)]", "[a(b=1"):
        assert python_calls(broken) is None, broken
    text = "<|tool_call_start|>[delete_all()]<|tool_call_end|>"
    assert content_and_calls(parse(ToolSyntax("lfm2", True), text, 4)) == (text, [])


@pytest.mark.parametrize(
    ("text", "required", "call"),
    [
        ('{\n  "name": "get_', {"get_weather"}, "get_weather"),  # cut in the name: the one it can be
        ('{"name": "get_weather", "argu', {"get_weather", "add"}, "get_weather"),  # the name whole
        ('{"name": "a', {"get_weather", "add"}, "add"),
        ("<tool_call>\n", {"add"}, "add"),  # the call's syntax only
        ('{"name": "', {"get_weather", "add"}, None),  # either: the text as it is
        ('{\n  "name": "get_', set(), None),  # no call required: the text as it is
    ],
)
def test_a_required_call_cut_short_is_still_a_call(text: str, required: set[str], call: str | None) -> None:
    parser = ToolCallParser(tool_syntax(QWEN25), [t.name for t in TOOLS], required=frozenset(required))
    events = parser.feed(text) + parser.finish()
    if call is None:
        assert events == [TextDelta(text)]
    else:
        # the arguments as far as they got (none here), never made-up `{}` that looks whole
        assert [(e.name, e.arguments) for e in events if isinstance(e, ToolCallDelta)] == [(call, "")]
        assert not any(isinstance(e, TextDelta) for e in events)
