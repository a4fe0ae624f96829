"""Output plans: which grammar and parsers a request gets, and the combinations end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.grammar import Grammar, create_sampler, schema_grammar
from spark.engine.native import Model
from spark.engine.output import (
    PLAIN,
    OutputPlan,
    PlainText,
    StructuredOutput,
    completion_plan,
    parser_for,
    plan_output,
)
from spark.engine.reasoning import ThinkSyntax
from spark.engine.sampling import SamplerChain, resolve
from spark.engine.toolcalls import HERMES_OPEN, tool_syntax
from spark.errors import InvalidRequest
from spark.types import (
    ChatRequest,
    CompletionRequest,
    Done,
    LoadOptions,
    Message,
    Reasoning,
    ReasoningDelta,
    ResponseFormat,
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
            "a": {"type": "integer", "minimum": 0, "maximum": 9},
            "b": {"type": "integer", "minimum": 0, "maximum": 9},
        },
        "required": ["a", "b"],
    },
)
ANSWER = {
    "type": "object",
    "properties": {"sum": {"type": "integer", "minimum": 0, "maximum": 18}},
    "required": ["sum"],
}
HERMES = tool_syntax(tiny_gguf.TOOLS_TEMPLATE)


def chat(**kw: object) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "1+2?")], **kw)  # type: ignore[arg-type]


def test_plain_requests_get_no_grammar_and_plain_text() -> None:
    plan = plan_output(chat(), "prompt", None, HERMES)
    assert plan.grammar is None and plan.tools is None and plan.think is None
    assert isinstance(parser_for(plan), PlainText)


def test_tools_with_auto_get_a_lazy_grammar_and_the_call_parser() -> None:
    plan = plan_output(chat(tools=[ADD]), "prompt", None, HERMES)
    assert plan.grammar is not None and plan.grammar.trigger_words == (HERMES_OPEN,)
    assert plan.tools == HERMES and plan.tool_names == {"add"}
    assert isinstance(parser_for(plan), StructuredOutput)


def test_tool_choice_none_turns_tools_off() -> None:
    plan = plan_output(chat(tools=[ADD], tool_choice=ToolChoice("none")), "prompt", None, HERMES)
    assert plan.grammar is None and plan.tools is None


def test_forced_calls_and_json_formats_get_a_grammar_from_the_start() -> None:
    forced = plan_output(chat(tools=[ADD], tool_choice=ToolChoice("required")), "p", None, HERMES)
    assert forced.grammar is not None and not forced.grammar.lazy and forced.grammar.param == "tool_choice"
    fmt = plan_output(chat(response_format=ResponseFormat("json_object")), "p", None, HERMES)
    assert fmt.grammar is not None and not fmt.grammar.lazy and fmt.grammar.param == "response_format"
    both = plan_output(chat(tools=[ADD], response_format=ResponseFormat("json_schema", ANSWER)), "p", None, HERMES)
    assert both.grammar is not None and not both.grammar.lazy and "call-object" in both.grammar.text
    assert both.tools == HERMES


def test_reasoning_budget_and_opened_blocks_follow_the_template() -> None:
    think = ThinkSyntax()
    plan = plan_output(chat(reasoning=Reasoning(budget_tokens=5)), "...assistant\n<think>\n", think, HERMES)
    assert plan.think_opened and plan.reasoning_budget == 5
    assert (
        plan_output(chat(reasoning=Reasoning(enabled=False, budget_tokens=5)), "x", think, HERMES).reasoning_budget
        is None
    )
    assert plan_output(chat(reasoning=Reasoning(budget_tokens=5)), "x", None, HERMES).reasoning_budget is None


# --- end to end with the tiny models --------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    # The Hermes tools template, opening a thinking block for the answer.
    template = tiny_gguf.TOOLS_TEMPLATE.replace(
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}",
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n<think>\n' -}}{%- endif -%}",
    )
    assert template not in (tiny_gguf.TOOLS_TEMPLATE, tiny_gguf.THINK_TEMPLATE)
    path = tiny_gguf.write_tiny_llama(tmp_path_factory.mktemp("m") / "think-tools.gguf", template=template)
    with Engine(LoadOptions(model_id="m", path=str(path), n_threads=1, n_ctx=512)) as e:
        yield e


def run(engine: Engine, request: ChatRequest, seed: int, prefer: str | None = None) -> Collector:
    """Generate with EOS pushed up (the tiny model ends where the grammar allows), and `prefer`'s token."""
    model = engine._model
    bias = {model.eos: 200.0}
    if prefer is not None:
        bias[model.tokenize(prefer, add_special=False, parse_special=False)[0]] = 30.0
    sampling = SamplingParams(temperature=1.0, seed=seed, max_tokens=200, logit_bias=bias)
    c = Collector()
    engine.submit(
        "r", ChatRequest(**{**{f: getattr(request, f) for f in request.__struct_fields__}, "sampling": sampling}), c
    )
    c.wait()
    return c


def test_thinking_then_a_forced_call(engine: Engine) -> None:
    request = chat(tools=[ADD], tool_choice=ToolChoice("required", "add"), reasoning=Reasoning(budget_tokens=10))
    for seed in range(3):
        c = run(engine, request, seed)
        assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls"
        kinds = [type(e) for e in c.events if isinstance(e, (ReasoningDelta, TextDelta, ToolCallDelta))]
        assert kinds[0] is ReasoningDelta and TextDelta not in kinds
        assert kinds.index(ToolCallDelta) > max(i for i, k in enumerate(kinds) if k is ReasoningDelta)
        start, *fragments = [e for e in c.events if isinstance(e, ToolCallDelta)]
        assert start.id and start.id.startswith("call_") and start.name == "add"
        jsonschema.validate(json.loads("".join(f.arguments for f in fragments)), ADD.parameters)


def test_a_json_answer_or_a_call(engine: Engine) -> None:
    request = chat(
        tools=[ADD], response_format=ResponseFormat("json_schema", ANSWER), reasoning=Reasoning(budget_tokens=4)
    )
    outcomes = set()
    for seed in range(4):
        c = run(engine, request, seed, prefer="{<"[seed % 2])  # after the thinking: an answer, or a call
        assert isinstance(c.final, Done)
        calls = [e for e in c.events if isinstance(e, ToolCallDelta)]
        text = "".join(e.text for e in c.events if isinstance(e, TextDelta))
        if calls:
            assert c.final.finish_reason == "tool_calls" and text == ""
            jsonschema.validate(json.loads("".join(f.arguments for f in calls[1:])), ADD.parameters)
        else:
            assert c.final.finish_reason == "stop"
            jsonschema.validate(json.loads(text), ANSWER)
        outcomes.add(bool(calls))
    assert outcomes == {True, False}


def test_completions_are_never_parsed(engine: Engine) -> None:
    c = Collector()
    engine.submit(
        "r", CompletionRequest(model="m", prompt="<think> <tool_call>", sampling=SamplingParams(max_tokens=5)), c
    )
    c.wait()
    assert all(isinstance(e, TextDelta) for e in c.events[2:-1])


def test_a_completion_takes_the_clients_grammar_or_schema() -> None:
    def plan(**fields: object) -> OutputPlan:
        return completion_plan(CompletionRequest(model="m", prompt="p", **fields))  # type: ignore[arg-type]

    assert plan() == PLAIN
    assert plan(grammar='root ::= "a"').grammar == Grammar('root ::= "a"', "grammar")
    schema = plan(json_schema={"type": "boolean"}).grammar
    assert schema is not None and schema.param == "json_schema" and "true" in schema.text
    for bad in ('root ::= ( "a"', "root ::= x", 'main ::= "a"', "root ::= root"):  # llama.cpp refuses each
        with pytest.raises(InvalidRequest) as info:
            plan(grammar=bad)
        assert info.value.param == "grammar"
    with pytest.raises(InvalidRequest) as refused:
        plan(json_schema={"type": "text"})
    assert refused.value.param == "json_schema"


def test_tiny_fixture_models_are_the_families_we_think(tiny_llama_tools: Path, tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="t", path=str(tiny_llama_tools), n_threads=1, n_ctx=128)) as e:
        assert e._prep.tools.family == "hermes" and e._prep.think is None
    with Engine(LoadOptions(model_id="c", path=str(tiny_llama), n_threads=1, n_ctx=128)) as e:
        assert e._prep.tools.family == "generic" and not e._prep.tools.renders_tools


def test_forced_tokens_are_checked_against_the_grammar(tiny_llama: Path) -> None:
    # Accepting a token the grammar refuses aborts llama.cpp: the engine asks `allows` first.
    model = Model(str(tiny_llama))
    try:
        params = resolve(SamplingParams(), SamplingParams(), model.n_vocab, 4096)
        chain = SamplerChain(params, model, create_sampler(model, schema_grammar(None)))
        x, brace, quote = (model.tokenize(c, add_special=False, parse_special=False)[0] for c in 'x{"')
        assert not chain.allows(x) and chain.allows(brace)
        chain.force(brace)
        assert not chain.allows(brace) and chain.allows(quote)
        chain.close()
        assert SamplerChain(params, model).allows(x)  # no grammar: anything goes
    finally:
        model.close()


def test_a_tools_schema_is_strict_only_when_the_tool_says_so() -> None:
    tags = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    schema = {"type": "object", "properties": {"tags": tags}, "required": ["tags"]}
    for forced in (None, ToolChoice("required")):
        loose = plan_output(chat(tools=[Tool("tag", "", schema)], tool_choice=forced), "p", None, HERMES)
        # the keyword left out, the rest held: the arguments are an object with a list of strings
        assert loose.grammar is not None and '"\\"tags\\""' in loose.grammar.text
        with pytest.raises(InvalidRequest, match="'uniqueItems'") as refused:
            plan_output(chat(tools=[Tool("tag", "", schema, strict=True)], tool_choice=forced), "p", None, HERMES)
        assert refused.value.param == "tools"


def test_a_response_format_is_strict_only_when_it_says_so() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 3}}, "required": ["n"]}
    loose = plan_output(chat(response_format=ResponseFormat("json_schema", schema)), "p", None, HERMES)
    assert loose.grammar is not None and '"\\"n\\""' in loose.grammar.text
    with pytest.raises(InvalidRequest, match="'multipleOf'") as refused:
        plan_output(chat(response_format=ResponseFormat("json_schema", schema, strict=True)), "p", None, HERMES)
    assert refused.value.param == "response_format"


def test_a_regex_or_grammar_holds_the_answer_and_errors_name_its_field() -> None:
    held = plan_output(chat(regex="(yes|no)!", grammar_param="guided_regex"), "p", None, HERMES).grammar
    assert held is not None and held.param == "guided_regex"
    done = completion_plan(CompletionRequest(model="m", prompt="p", regex="[0-9]+", grammar_param="regex"))
    assert done.grammar is not None and done.grammar.param == "regex"
    bad: list[dict[str, object]] = [
        {"regex": "(?=a)b", "grammar_param": "structured_outputs.regex"},
        {"grammar": "?start: 'a'", "grammar_param": "ebnf"},  # Lark, not GBNF
        {"regex": "a", "grammar_param": "guided_regex", "tools": [ADD]},
    ]
    for fields in bad:
        with pytest.raises(InvalidRequest) as info:
            plan_output(chat(**fields), "p", None, HERMES)
        assert info.value.param == fields["grammar_param"]
    with pytest.raises(InvalidRequest) as info:
        completion_plan(CompletionRequest(model="m", prompt="p", regex="a", grammar_param="regex", json_schema={}))
    assert info.value.param == "regex"
