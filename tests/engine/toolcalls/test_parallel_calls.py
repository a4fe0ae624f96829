"""`ChatRequest.parallel_tool_calls`: with it off, an answer holds one call and ends with it.

Grammars are checked with llama.cpp's own grammar sampler (after the one call a
forced grammar is complete, and llama.cpp then allows only end-of-generation
tokens); parsers with the call texts of each family; the engine with the tiny
random models, which never pick their end token by themselves.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from llama_cpp import llama_cpp as lc

import tiny_gguf
from engine.grammar.driver import Driver
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.grammar import Grammar, create_sampler
from spark.engine.native import Model
from spark.engine.output import parser_for, plan_output
from spark.engine.toolcalls import ToolCallParser, ToolSyntax, tool_syntax
from spark.types import (
    ChatRequest,
    Done,
    Event,
    LoadOptions,
    Message,
    SamplingParams,
    TextDelta,
    Tool,
    ToolCallDelta,
    ToolChoice,
)

ADD = Tool(
    "add",
    "",
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 99},
            "b": {"type": "integer", "minimum": 0, "maximum": 99},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)
CITY = Tool(
    "city", "", {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"]}
)
TOOLS = [ADD, CITY]
SCHEMAS = {t.name: t.parameters for t in TOOLS}

HERMES = tool_syntax(tiny_gguf.TOOLS_TEMPLATE)
MISTRAL_LIST = ToolSyntax("mistral", True)
MISTRAL_ARGS = ToolSyntax("mistral", True, mistral_args=True)
GENERIC = tool_syntax(None)

ADD_JSON = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
CITY_JSON = '{"name": "city", "arguments": {"name": "Oslo"}}'
# Two calls in each family's syntax, then text; the first call is `add`.
TWO_CALLS = {
    "hermes": (HERMES, f"<tool_call>\n{ADD_JSON}\n</tool_call>\n<tool_call>\n{CITY_JSON}\n</tool_call> Done."),
    "mistral-list": (MISTRAL_LIST, f"[TOOL_CALLS] [{ADD_JSON}, {CITY_JSON}] Done."),
    "mistral-args": (MISTRAL_ARGS, '[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}[TOOL_CALLS]city[ARGS]{"name": "Oslo"} Done.'),
    "generic": (GENERIC, f"{ADD_JSON}\n{CITY_JSON}"),
}
ONE_CALL = {
    "hermes": f"<tool_call>\n{ADD_JSON}\n</tool_call>",
    "mistral-list": f"[TOOL_CALLS] [{ADD_JSON}]",
    "mistral-args": '[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}',
    "generic": ADD_JSON,
}


def chat(**kw: object) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "1+2?")], tools=TOOLS, **kw)  # type: ignore[arg-type]


def calls(events: list[Event]) -> list[tuple[str, str]]:
    """(name, arguments) of each call in `events`."""
    out: list[tuple[str, str]] = []
    for e in events:
        if isinstance(e, ToolCallDelta):
            if e.name is not None:
                out.append((e.name, ""))
            out[-1] = (out[-1][0], out[-1][1] + e.arguments)
    return out


# --- grammars, with llama.cpp's grammar sampler ------------------------------------------


@pytest.fixture(scope="module")
def driver(tiny_llama: Path) -> Iterator[Driver]:
    model = Model(str(tiny_llama))
    yield Driver(model)
    model.close()


def allowed_after(driver: Driver, grammar: Grammar, text: str) -> set[int]:
    """The tokens llama.cpp's grammar sampler allows after `text` (fed byte by byte)."""
    sampler = create_sampler(driver.model, grammar)
    try:
        for byte in text.encode():
            lc.llama_sampler_accept(sampler, byte)
        n = driver.model.n_vocab
        arr = driver._apply(sampler, np.arange(n), np.zeros(n))
        return {int(t) for t in arr["id"][np.isfinite(arr["logit"])]}
    finally:
        lc.llama_sampler_free(sampler)


@pytest.mark.parametrize("family", ["hermes", "mistral-list", "mistral-args"])
def test_forced_grammar_without_parallel_calls_ends_after_one_call(driver: Driver, family: str) -> None:
    syntax, two = TWO_CALLS[family]
    one = ONE_CALL[family]
    two = two.removesuffix(" Done.")
    single = plan_output(chat(tool_choice=ToolChoice("required"), parallel_tool_calls=False), "p", None, syntax)
    several = plan_output(chat(tool_choice=ToolChoice("required")), "p", None, syntax)
    assert single.grammar is not None and several.grammar is not None
    assert driver.accepts(single.grammar, one) and driver.accepts(several.grammar, one)
    assert driver.accepts(several.grammar, two)
    assert not driver.accepts(single.grammar, two, complete=False)
    # After the call only the end may come: llama.cpp allows the end-of-generation tokens and nothing else.
    after = allowed_after(driver, single.grammar, one)
    assert driver.eos in after and all(driver.model.is_eog(t) for t in after)


def test_lazy_grammar_without_parallel_calls_allows_one_call(driver: Driver) -> None:
    single = plan_output(chat(parallel_tool_calls=False), "p", None, HERMES).grammar
    several = plan_output(chat(), "p", None, HERMES).grammar
    assert single is not None and single.lazy and several is not None and several.lazy
    one = "Sure. " + ONE_CALL["hermes"]
    two = "Sure. " + TWO_CALLS["hermes"][1].removesuffix(" Done.")
    assert driver.accepts(single, one) and driver.accepts(several, two)
    assert not driver.accepts(single, two, complete=False)
    after = allowed_after(driver, single, one)
    assert after and all(driver.model.is_eog(t) for t in after)


# --- parsers --------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 3, 1000])
@pytest.mark.parametrize("family", sorted(TWO_CALLS))
def test_parser_with_one_call_allowed_is_complete_after_it(family: str, step: int) -> None:
    syntax, text = TWO_CALLS[family]
    parser = ToolCallParser(syntax, SCHEMAS, max_calls=1)
    events: list[Event] = []
    fed = 0
    while not parser.complete:
        assert fed < len(text), "complete after the first call"
        events += parser.feed(text[fed : fed + step])
        fed += step
    if step == 1:  # complete on the character that ends the arguments
        assert text[:fed].endswith('"b": 2}') or text[:fed].endswith('"b": 2}}')
    events += parser.feed(" more text") + parser.finish()
    ((name, arguments),) = calls(events)
    assert name == "add" and json.loads(arguments) == {"a": 1, "b": 2}
    assert not [e for e in events if isinstance(e, TextDelta)], "nothing after the call is output"


@pytest.mark.parametrize("family", sorted(TWO_CALLS))
def test_parser_with_parallel_calls_reads_them_all(family: str) -> None:
    syntax, text = TWO_CALLS[family]
    parser = ToolCallParser(syntax, SCHEMAS)
    events = parser.feed(text) + parser.finish()
    assert not parser.complete
    assert [name for name, _ in calls(events)] == ["add", "city"]


def test_structured_output_is_complete_with_its_tool_parser() -> None:
    text = TWO_CALLS["hermes"][1]
    single = parser_for(plan_output(chat(parallel_tool_calls=False), "p", None, HERMES))
    several = parser_for(plan_output(chat(), "p", None, HERMES))
    single.feed(text)
    several.feed(text)
    assert single.complete and single.made_tool_calls
    assert not several.complete and several.made_tool_calls


# --- through the engine ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def hermes_engine(tiny_llama_tools: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="tools", path=str(tiny_llama_tools), n_threads=1, n_ctx=512)) as e:
        yield e


def run(engine: Engine, request: ChatRequest, seed: int, max_tokens: int, **sampling: object) -> Collector:
    params = SamplingParams(**{"temperature": 1.0, "seed": seed, "max_tokens": max_tokens, **sampling})  # type: ignore[arg-type]
    c = Collector()
    engine.submit(
        "r", ChatRequest(**{**{f: getattr(request, f) for f in request.__struct_fields__}, "sampling": params}), c
    )
    c.wait()
    return c


@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("required", "add")])
def test_a_forced_call_without_parallel_calls_ends_the_answer(hermes_engine: Engine, choice: ToolChoice) -> None:
    # No end-token bias: the random model would go on calling until max_tokens.
    for seed in range(3):
        c = run(hermes_engine, chat(tool_choice=choice, parallel_tool_calls=False), seed, max_tokens=300)
        assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls", c.events[-3:]
        assert c.text == ""
        ((name, arguments),) = calls(c.events)
        assert choice.name in (None, name)
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])
        assert c.final.usage.completion_tokens < 100, "ended with the call, well before max_tokens"


def test_a_forced_call_with_parallel_calls_ends_where_the_model_would_not_go_on(hermes_engine: Engine) -> None:
    # After a whole call the grammar allows another one or the end; the random model's own
    # choice is neither, so the answer ends with the call instead of running to max_tokens.
    request = chat(tool_choice=ToolChoice("required", "add"))
    for seed in range(3):
        c = run(hermes_engine, request, seed, max_tokens=300)
        assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls"
        single = run(
            hermes_engine, chat(tool_choice=ToolChoice("required", "add"), parallel_tool_calls=False), seed, 300
        )
        assert calls(c.events) == calls(single.events) and len(calls(c.events)) == 1
        assert isinstance(single.final, Done)
        # ended on the same token (how much was drafted depends on the step costs measured meanwhile)
        assert c.final.usage.completion_tokens == single.final.usage.completion_tokens
    # A model that writes its end token after a call ends cleanly, with all its calls.
    c = run(hermes_engine, request, 0, max_tokens=300, logit_bias={hermes_engine._model.eos: 200.0})
    assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls"
    assert calls(c.events) and c.final.usage.completion_tokens < 300
    for name, arguments in calls(c.events):
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_with_parallel_calls_the_model_goes_on_while_its_own_choice_may_follow_a_call(hermes_engine: Engine) -> None:
    # With "<" pushed up (it cannot appear in add's integer arguments), the model's own next
    # token after the call is "<", which may start the closing tag: the answer goes on for it.
    # Then it would write "<" again where only "/" may come, and ends there.
    lt = hermes_engine._model.tokenize("<", add_special=False, parse_special=False)
    assert len(lt) == 1
    for seed in range(2):
        req = {"tool_choice": ToolChoice("required", "add")}
        several = run(hermes_engine, chat(**req), seed, 300, logit_bias={lt[0]: 40.0})
        single = run(hermes_engine, chat(**req, parallel_tool_calls=False), seed, 300, logit_bias={lt[0]: 40.0})
        assert isinstance(several.final, Done) and isinstance(single.final, Done)
        assert several.final.finish_reason == single.final.finish_reason == "tool_calls"
        assert calls(several.events) == calls(single.events)
        assert several.final.usage.completion_tokens == single.final.usage.completion_tokens + 1


def test_auto_without_parallel_calls_ends_with_the_first_whole_call(tiny_llama: Path) -> None:
    # The generic family: a call is an answer that is a JSON object (the brace is pushed up).
    # Its grammar ends with the object; either way the answer ends on the object's last token
    # (with parallel calls, because the grammar then allows only the end, which the random
    # model would not choose).
    with Engine(LoadOptions(model_id="chatml", path=str(tiny_llama), n_threads=1, n_ctx=512)) as e:
        brace = e._model.tokenize("{", add_special=False, parse_special=False)[0]
        ends = {}
        for parallel in (False, True):
            c = run(e, chat(parallel_tool_calls=parallel), 0, max_tokens=300, logit_bias={brace: 60.0}, temperature=0.0)
            assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls"
            ((name, arguments),) = calls(c.events)
            jsonschema.validate(json.loads(arguments), SCHEMAS[name])
            ends[parallel] = (name, arguments, c.final.usage.completion_tokens)
        assert ends[False] == ends[True]
