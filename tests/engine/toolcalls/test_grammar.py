"""Forced and lazy tool-call grammars, run by llama.cpp's grammar sampler."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from llama_cpp import llama_cpp as lc

from engine.grammar.driver import Driver
from engine.toolcalls.templates import FAMILIES, MISTRAL_NEMO, QWEN25, SCHEMAS, TOOLS, content_and_calls, parse
from spark.engine.grammar import Grammar, Rules, create_sampler, finish, literal
from spark.engine.native import Model
from spark.engine.toolcalls import (
    JSON_START,
    call_rule,
    lazy_grammar,
    tool_syntax,
)
from spark.types import Tool


@pytest.fixture(scope="module")
def driver(tiny_llama: Path) -> Iterator[Driver]:
    model = Model(str(tiny_llama))
    yield Driver(model)
    model.close()


def test_lazy_grammar_is_free_until_the_marker_then_constrains_the_call(driver: Driver) -> None:
    syntax = tool_syntax(QWEN25)
    grammar = lazy_grammar(syntax, TOOLS)
    assert driver.accepts(grammar, "Any text at all, even { or <tool", complete=False)
    assert not driver.accepts(grammar, "Sure! <tool_call>\nnot a call", complete=False)
    for seed in range(8):
        text = "Sure! <tool_call>\n" + driver.walk(grammar, seed, prefix="Sure! <tool_call>\n", stop=0.8)
        content, calls = content_and_calls(parse(syntax, text, 7))
        assert content == "Sure! " and calls
        for name, args in calls:
            jsonschema.validate(args, SCHEMAS[name])


# As many tools as Claude Code sends, each with a choice of values and a string of up to 524,288 characters.
MANY_TOOLS = [
    Tool(
        f"tool_{i}",
        "",
        {
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": [f"mode-{j}" for j in range(30)]},
                "script": {"type": "string", "maxLength": 524288},
                "notes": {"type": "string", "minLength": 1, "maxLength": 200},
                "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}}},
            },
            "required": ["mode"],
        },
    )
    for i in range(24)
]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_long_tool_list_gets_a_grammar_in_every_family(driver: Driver, family: str) -> None:
    """A call names one tool, so its grammar keeps open the alternatives of one tool at a time, not
    of all of them (24 tools of 30 values each once counted 1,440, over the limit of 1,000, and every
    request of Claude Code's was refused); a string bound too long to write is left out."""
    grammar = lazy_grammar(tool_syntax(FAMILIES[family]), MANY_TOOLS)
    assert driver.accepts(grammar, "Any text at all", complete=False)  # llama.cpp takes it


def test_lazy_grammar_for_bare_json_calls_starts_at_an_opening_brace(driver: Driver) -> None:
    syntax = tool_syntax(None)
    grammar = lazy_grammar(syntax, TOOLS)
    assert grammar.trigger_patterns == (JSON_START,)
    assert driver.accepts(grammar, "Hello {", complete=False)  # a brace inside text is text
    assert not driver.accepts(grammar, ' {"nam": 1', complete=False)
    for seed in range(6):
        text = driver.walk(grammar, seed, prefix="{")
        content, calls = content_and_calls(parse(syntax, "{" + text, 3))
        assert content == "" and len(calls) == 1
        jsonschema.validate(calls[0][1], SCHEMAS[calls[0][0]])


def test_a_trigger_fires_only_where_a_token_ends_it(driver: Driver) -> None:
    # llama.cpp starts a lazy grammar with the text from the trigger to the end of the token
    # that completed it; text the grammar does not allow there would abort the process. So
    # a trigger fires only when it ends a token (plus whitespace).
    model = driver.model
    tokens = model.tokenize("Sure! <tool_call>", add_special=False, parse_special=False)
    assert [model.piece(t) for t in tokens][-4:] == [b"c", b"a", b"ll", b">"]

    def state_after(word: str, rest: str) -> tuple[bool, bool]:
        grammar = Grammar(f"root ::= {literal(word)} {literal(rest)}\n", "tools", trigger_words=(word,))
        sampler = create_sampler(model, grammar)
        try:
            for t in tokens:
                lc.llama_sampler_accept(sampler, t)
            x, brace = (model.tokenize(c, add_special=False, parse_special=False)[0] for c in "x{")
            arr = driver._apply(sampler, np.array([x, brace]), np.zeros(2))
            return tuple(bool(v) for v in np.isfinite(arr["logit"]))  # type: ignore[return-value]
        finally:
            lc.llama_sampler_free(sampler)

    assert state_after("<tool_", "call>{") == (False, True)  # triggered: only "{" may follow
    assert state_after("<tool_cal", "X") == (True, True)  # ends inside "ll": never triggers, text stays free


@pytest.mark.parametrize("template", ["hermes", "mistral"])
def test_lazy_grammars_of_tagged_families_also_constrain_a_bare_json_call(driver: Driver, template: str) -> None:
    syntax = tool_syntax(QWEN25 if template == "hermes" else MISTRAL_NEMO)
    grammar = lazy_grammar(syntax, TOOLS)
    assert grammar.trigger_patterns == (JSON_START,) and grammar.trigger_words == syntax.markers[:1]
    assert not driver.accepts(grammar, '{"answer": 42}', complete=False)
    for seed in range(4):
        text = "{" + driver.walk(grammar, seed, prefix="{")
        content, calls = content_and_calls(parse(syntax, text, 3))
        assert content == "" and len(calls) == 1, text
        jsonschema.validate(calls[0][1], SCHEMAS[calls[0][0]])


def test_a_forced_call_cannot_wander_through_whitespace(driver: Driver) -> None:
    # As llama.cpp's grammars: between JSON tokens one space, or one newline and at most 20
    # spaces or tabs; never a run that lets a model spend its tokens on nothing.
    rules = Rules()
    grammar = finish(rules, call_rule(rules, tool_syntax(QWEN25), TOOLS, "add"), "tool_choice")
    head = '<tool_call>{"name": "add", "arguments": {"a":'
    assert driver.accepts(grammar, head + ' 1, "b":\n' + " " * 20 + "2}}</tool_call>")
    assert not driver.accepts(grammar, head + "\n" + " " * 21, complete=False)
    assert not driver.accepts(grammar, head + "\n\n", complete=False)
    assert not driver.accepts(grammar, head + "  ", complete=False)
    assert not driver.accepts(grammar, '<tool_call>      {"name"', complete=False)
