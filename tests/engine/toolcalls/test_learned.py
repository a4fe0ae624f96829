"""Call syntaxes learned from chat templates as their models publish them (`spark.engine.toolcalls.learned`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from engine.grammar.driver import Driver
from engine.toolcalls.templates import CALLS, FAMILIES, SCHEMAS, TOOLS, content_and_calls, parse
from spark.engine.grammar import Rules, finish
from spark.engine.native import Model
from spark.engine.template import ChatTemplate
from spark.engine.toolcalls import ToolSyntax, call_rule, lazy_grammar, tool_syntax
from spark.types import Message

PUBLISHED = Path(__file__).parents[1] / "templates"

# What each model writes for CALLS, exactly as its published template renders them.
WRITTEN = {
    "deepseek-r1": (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Paris", "days": 2}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n'
        '```json\n{"a": 1, "b": -2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    ),
    "deepseek-v3.1": (
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 2}'
        '<｜tool▁call▁end｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{"a": 1, "b": -2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    ),
    "minimax-m2": (
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
        '<parameter name="days">2</parameter>\n</invoke>\n<invoke name="add">\n<parameter name="a">1</parameter>\n'
        '<parameter name="b">-2</parameter>\n</invoke>\n</minimax:tool_call>'
    ),
    "nemotron-nano-v2": (
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "add", "arguments": {"a": 1, "b": -2}}]</TOOLCALL>'
    ),
    "command-r7b": (
        '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", '
        '"days": 2}},\n    {"tool_call_id": "1", "tool_name": "add", "parameters": {"a": 1, "b": -2}}\n]<|END_ACTION|>'
    ),
    "apertus": (
        '<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 2}}, {"add": {"a": 1, "b": -2}}]<|tools_suffix|>'
    ),
    "kimi-k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris", "days": 2}<|tool_call_end|><|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>'
        '{"a": 1, "b": -2}<|tool_call_end|><|tool_calls_section_end|>'
    ),
    "kimi-k2-thinking": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris", "days": 2}<|tool_call_end|><|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>'
        '{"a": 1, "b": -2}<|tool_call_end|><|tool_calls_section_end|>'
    ),
    "seed-oss": (
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>2</parameter>\n"
        "</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=add>\n<parameter=a>1</parameter>\n"
        "<parameter=b>-2</parameter>\n</function>\n</seed:tool_call>"
    ),
}
EXPECTED = [(c.name, json.loads(c.arguments)) for c in CALLS]


def syntax_of(src: str) -> ToolSyntax:
    """The syntax Spark reads a model of this template by, as a runner works it out."""
    template = ChatTemplate(src, bos_token="<s>", eos_token="</s>")
    return tool_syntax(src, lambda: template.call_shape)


@pytest.fixture(scope="module")
def driver(tiny_llama: Path) -> Iterator[Driver]:
    model = Model(str(tiny_llama))
    yield Driver(model)
    model.close()


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_the_templates_write_calls_as_the_tests_say(name: str) -> None:
    template = ChatTemplate((PUBLISHED / f"{name}.jinja").read_text())
    chat = [Message("user", "Weather in Paris, and 1 + -2?"), Message("assistant", None, tool_calls=CALLS)]
    assert WRITTEN[name] in template.render(chat, tools=TOOLS, add_generation_prompt=False)


@pytest.mark.parametrize("name", sorted(WRITTEN))
@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_calls_in_a_learned_syntax_stream_back_as_the_calls(name: str, step: int) -> None:
    syntax = syntax_of((PUBLISHED / f"{name}.jinja").read_text())
    assert syntax.family == "template" and syntax.shape is not None
    text = "Let me check both.\n" + WRITTEN[name]
    content, calls = content_and_calls(parse(syntax, text, step, schemas=SCHEMAS))
    assert content.strip() == "Let me check both." and calls == EXPECTED


def test_learned_markers_are_read_whatever_whitespace_the_model_puts_around_them() -> None:
    syntax = syntax_of((PUBLISHED / "deepseek-r1.jinja").read_text())
    # where the template puts a newline, any whitespace (or none)
    text = (
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add ```json {"a": 1, "b": -2}\n\n```'
        "<｜tool▁call▁end｜>  <｜tool▁calls▁end｜>"
    )
    assert content_and_calls(parse(syntax, text, 1)) == ("", [EXPECTED[1]])


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_a_parameter_tag_with_attributes_ends_after_them(step: int) -> None:
    # DeepSeek V3.2 marks each value as a string or JSON: string="true" or string="false"
    syntax = syntax_of((PUBLISHED / "deepseek-v3.2.jinja").read_text())
    text = (
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">'
        'Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
    )
    assert content_and_calls(parse(syntax, text, step, schemas=SCHEMAS)) == ("", [EXPECTED[0]])


def test_each_tag_of_a_learned_syntax_is_a_marker_rendered_from_its_text() -> None:
    # DeepSeek's tags are control tokens, which llama.cpp renders as nothing unless asked for their text
    shape = syntax_of((PUBLISHED / "deepseek-r1.jinja").read_text()).shape
    assert shape is not None
    assert {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁calls▁end｜>"} <= set(
        shape.words
    )


@pytest.mark.parametrize("step", [1, 10_000])
def test_text_that_only_starts_like_a_learned_call_stays_text(step: int) -> None:
    syntax = syntax_of((PUBLISHED / "minimax-m2.jinja").read_text())
    for text in (
        '<minimax:tool_call>\n<invoke name="unknown_tool">\n</invoke>',  # names no tool of the request
        "<minimax:tool_call> and then prose",
        '<minimax:tool_call>\n<invoke nam="add">',
    ):
        assert content_and_calls(parse(syntax, text, step)) == (text, [])


@pytest.mark.parametrize(
    "name", ["deepseek-r1", "minimax-m2", "nemotron-nano-v2", "command-r7b", "apertus", "seed-oss", "kimi-k2"]
)
def test_forced_and_lazy_grammars_write_the_learned_syntax(driver: Driver, name: str) -> None:
    syntax = syntax_of((PUBLISHED / f"{name}.jinja").read_text())
    assert syntax.renders_tools and syntax.shape is not None
    rules = Rules()
    forced = finish(rules, call_rule(rules, syntax, TOOLS, None), "tool_choice")
    # Cohere's calls are written without the ids the template numbers them with
    written = WRITTEN[name].replace('"tool_call_id": "0", ', "").replace('"tool_call_id": "1", ', "")
    assert driver.accepts(forced, written)
    assert not driver.accepts(forced, written.replace("Paris", "Paris is a long name"))  # maxLength 12
    lazy = lazy_grammar(syntax, TOOLS)
    assert lazy.trigger_words == (syntax.shape.opener,)
    assert driver.accepts(lazy, "Sure. " + written)
    if not syntax.shape.open.isascii():
        return  # the test's tiny vocabulary spells DeepSeek's markers only by byte pieces a walk cannot take
    for seed in range(3):
        text = driver.walk(forced, seed)
        content, calls = content_and_calls(parse(syntax, text, 3, schemas=SCHEMAS))
        assert content.strip() == "" and calls, text
        for tool, args in calls:
            jsonschema.validate(args, SCHEMAS[tool])


def test_a_template_that_does_not_render_tools_gets_json_calls_forced_but_its_own_read() -> None:
    # DeepSeek V3.1's template renders calls but no tool list: the tools are described in the system
    # message with a JSON call to answer, which a forced call then writes.
    syntax = syntax_of((PUBLISHED / "deepseek-v3.1.jinja").read_text())
    assert syntax.family == "template" and not syntax.renders_tools
    rules = Rules()
    assert call_rule(rules, syntax, TOOLS, "add") == "call-object"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_templates_of_known_families_are_not_learned(name: str) -> None:
    assert syntax_of(FAMILIES[name]).family not in ("template", "generic")


CALLS_WITH_IDS = (  # Solar Open: each call's id before its name, which the model makes up
    "{% for m in messages %}{% if m.tool_calls %}<|calls|>{% for c in m.tool_calls %}<|call|>{{ c.id }}<|name|>"
    "{{ c.function.name }}<|args|>{{ c.function.arguments | tojson }}{% endfor %}"
    "{% else %}<|{{ m.role }}|>{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
NO_CALLS = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
REFUSES_CALLS = (
    "{% for m in messages %}{% if m.tool_calls %}{{ raise_exception('no calls') }}{% endif %}"
    "<|{{ m.role }}|>{{ m.content }}{% endfor %}"
)
BARE_JSON = (
    "{% for m in messages %}<|{{ m.role }}|>{% if m.tool_calls %}{% for c in m.tool_calls %}"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}{% endfor %}'
    "{% else %}{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.mark.parametrize("src", [CALLS_WITH_IDS, NO_CALLS, REFUSES_CALLS, BARE_JSON])
def test_no_syntax_is_learned_where_calls_carry_ids_or_none_are_rendered(src: str) -> None:
    # ids the model makes up cannot be told from the syntax; a bare JSON call is the generic family's
    # already
    assert syntax_of(src) == ToolSyntax("generic", False)


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_numbered_calls_are_read_whatever_their_number(step: int) -> None:
    # Kimi K2's template counts calls over the whole conversation: a later turn's first call is not `:0`
    syntax = syntax_of((PUBLISHED / "kimi-k2.jinja").read_text())
    assert syntax.shape is not None and syntax.shape.numbered
    text = WRITTEN["kimi-k2"].replace(":0<", ":12<").replace(":1<", ":13<")
    assert content_and_calls(parse(syntax, text, step, schemas=SCHEMAS)) == ("", EXPECTED)
    for unnumbered in (text.replace(":12<", "<"), text.replace(":12<", ":x<")):
        content, calls = content_and_calls(parse(syntax, unnumbered, step, schemas=SCHEMAS))
        assert calls == [] and content == unnumbered
