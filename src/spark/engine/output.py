"""The shape of a request's output, and the parsers that turn its text into events.

`plan_output` decides, for one chat request on one model, whether the
output may hold thinking and tool calls and which grammar (if any)
constrains it: JSON mode or a JSON schema, a forced tool call, or a lazy
grammar that only takes over once a call starts. `parser_for` builds the
matching incremental parser: thinking becomes `ReasoningDelta`, calls become
`ToolCallDelta`, the rest `TextDelta`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from spark.engine.grammar import (
    Grammar,
    GrammarError,
    RegexConverter,
    Rules,
    SchemaConverter,
    check_gbnf,
    finish,
    schema_grammar,
)
from spark.engine.harmony import HarmonyParser, harmony_grammar, opened_final
from spark.engine.reasoning import Part, ThinkSplitter, ThinkSyntax, think_prefix
from spark.engine.text import StopStrings
from spark.engine.toolcalls import ToolCallParser, ToolSyntax, call_rule, lazy_grammar
from spark.errors import InvalidRequest
from spark.types import ChatRequest, CompletionRequest, Event, ReasoningDelta, TextDelta, ToolCallDelta


class OutputParser(Protocol):
    """Consumes generated text piece by piece and yields events."""

    def feed(self, text: str) -> list[Event]:
        """Events for a new piece of text (already free of stop strings and partial UTF-8)."""
        ...

    def finish(self) -> list[Event]:
        """Events for anything still buffered when generation ends."""
        ...

    @property
    def in_reasoning(self) -> bool:
        """Whether the text so far ends inside a thinking block."""
        ...

    @property
    def made_tool_calls(self) -> bool:
        """Whether a tool call was emitted."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the output is whole (the one call allowed is made): generation ends here."""
        ...

    @property
    def call_ended(self) -> bool:
        """Whether the output so far ends with a whole tool call (it may end here)."""
        ...


class PlainText:
    """Every piece of text becomes one `TextDelta`."""

    in_reasoning = False
    made_tool_calls = False
    complete = False
    call_ended = False

    def feed(self, text: str) -> list[Event]:
        return [TextDelta(text)] if text else []

    def finish(self) -> list[Event]:
        return []


class StopAtStrings:
    """Ends the output at the first stop string in its text or its reasoning.

    Applied to the parsers' events, not to the raw text: a tool call's markup and
    arguments are never matched, so a call is always whole and valid. A stop string
    does not span text and reasoning, or text on both sides of a call.
    """

    def __init__(self, stop: Sequence[str] | None, *, turn_ends: Sequence[str] = ()) -> None:
        self._stop = [s for s in (stop or []) if s]
        self._turn_ends = turn_ends
        self._run: StopStrings | None = None  # the text run being matched
        self._kind: type[TextDelta] | type[ReasoningDelta] = TextDelta
        self.found: str | None = None  # the stop string found, once found

    @property
    def stopped(self) -> bool:
        return self.found is not None

    @property
    def stop_sequence(self) -> str | None:
        """The client's stop string that ended the output. None for one of `turn_ends`, the template's
        turn end matched as text (a vocabulary without it as a token): the model's own end, not a stop."""
        return None if self.found in self._turn_ends else self.found

    def filter(self, events: list[Event]) -> list[Event]:
        """The events up to a stop string, the text cut right before it; none once stopped."""
        if not self._stop:
            return events
        out: list[Event] = []
        for event in events:
            if self.stopped:
                break
            if not isinstance(event, (TextDelta, ReasoningDelta)):
                out += self.flush()  # a call ends the text run: what was held back was no stop
                out.append(event)
                continue
            if self._run is None or type(event) is not self._kind:
                out += self.flush()
                self._run, self._kind = StopStrings(self._stop), type(event)
            text = self._run.push(event.text)
            if text:
                out.append(self._kind(text))
            self.found = self._run.stop_sequence
        return out

    def flush(self) -> list[Event]:
        """The text held back as a possible stop string's start, at the end of a run."""
        held = self._run.flush() if self._run is not None else ""
        self._run = None
        return [self._kind(held)] if held else []


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """What one request's output may hold and how it is constrained."""

    think: ThinkSyntax | None = None
    think_opened: bool = False  # the prompt ends inside a thinking block
    tools: ToolSyntax | None = None  # None: calls are neither asked for nor parsed
    tool_names: frozenset[str] = frozenset()
    tool_schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # each tool's parameters
    parallel_calls: bool = True  # False: the output ends with its first whole call
    required_calls: frozenset[str] = frozenset()  # the tools a grammar makes the answer call (tool_choice)
    grammar: Grammar | None = None
    reasoning_budget: int | None = None  # thinking tokens before the block is closed for the model
    harmony: bool = False  # the model writes OpenAI's harmony format (gpt-oss)


PLAIN = OutputPlan()


def tools_enabled(request: ChatRequest) -> bool:
    """Whether the request's tools are offered to the model (not when tool_choice is "none")."""
    return bool(request.tools) and (request.tool_choice is None or request.tool_choice.mode != "none")


def client_grammar(request: ChatRequest | CompletionRequest) -> Grammar | None:
    """The client's own GBNF grammar or regular expression, which holds the whole answer, checked:
    `InvalidRequest` naming its field for one llama.cpp would refuse or a regex beyond the converter."""
    param = request.grammar_param
    if request.regex is not None:
        return finish(Rules(), RegexConverter(param, "regex", raw=True).convert(request.regex), param)
    if request.grammar is None:
        return None
    try:
        check_gbnf(request.grammar)
    except GrammarError as e:
        raise InvalidRequest(f"invalid grammar (llama.cpp's GBNF, root rule 'root'): {e}", param=param) from None
    return Grammar(request.grammar, param)


def completion_plan(request: CompletionRequest) -> OutputPlan:
    """The plan for a raw completion: free text, or the client's GBNF grammar, regex or JSON schema
    (not strict). Raises `InvalidRequest` naming the field for a grammar llama.cpp would refuse or a
    schema no grammar can hold."""
    held = request.grammar is not None or request.regex is not None
    if held and request.json_schema is not None:
        raise InvalidRequest(
            f"'{request.grammar_param}' and '{request.json_schema_param}' both constrain the answer: send one of them",
            param=request.grammar_param,
        )
    if held:
        return OutputPlan(grammar=client_grammar(request))
    if request.json_schema is not None:
        return OutputPlan(
            grammar=schema_grammar(request.json_schema or None, param=request.json_schema_param, strict=False)
        )
    return PLAIN


def plan_output(request: ChatRequest, prompt: str, think: ThinkSyntax | None, tools: ToolSyntax) -> OutputPlan:
    """The plan for `request`, whose rendered prompt is `prompt`.

    Raises `InvalidRequest` for a response format or tool schema the grammar
    cannot enforce, before anything reaches llama.cpp.
    """
    opened = think is not None and think.opened_by(prompt)
    offered = tools_enabled(request) and request.tools is not None
    choice = request.tool_choice
    forced = offered and choice is not None and choice.mode == "required"
    parallel = request.parallel_tool_calls
    fmt = request.response_format
    json_out = fmt is not None and fmt.type in ("json_object", "json_schema")

    harmony = tools.family == "harmony"
    thinking = request.reasoning is None or request.reasoning.enabled
    grammar: Grammar | None = None
    if request.grammar is not None or request.regex is not None:
        if offered or json_out:
            raise InvalidRequest(
                f"'{request.grammar_param}' holds the whole answer: it cannot go with tools or a JSON response_format",
                param=request.grammar_param,
            )
        grammar = client_grammar(request)
    elif harmony:
        opened = opened_final(prompt)
        if not opened:
            grammar = harmony_grammar(
                request.tools if offered else None,
                forced=forced,
                only=choice.name if forced and choice else None,
                schema=fmt.schema if fmt is not None and fmt.type == "json_schema" else None,
                json_out=json_out,
                think=thinking,
                format_param=fmt.param if fmt is not None else "response_format",
                strict=fmt is not None and fmt.strict,
            )
    elif forced or json_out:
        rules = Rules()
        # thinking turned off: no block may open before the answer (one the prompt opened is closed)
        prefix = think_prefix(rules, think, opened=opened) if think is not None and (opened or thinking) else ""
        alts = []
        if offered and request.tools is not None:
            alts.append(
                call_rule(rules, tools, request.tools, choice.name if forced and choice else None, parallel=parallel)
            )
        if json_out and not forced:
            assert fmt is not None
            schema = fmt.schema if fmt.type == "json_schema" else None
            alts.append(
                SchemaConverter(rules, schema, fmt.param, strict=fmt.strict).rule(schema, "json")
                if schema is not None
                else rules.primitive("object")
            )
        body = alts[0] if len(alts) == 1 else f"( {' | '.join(alts)} )"
        param = "tool_choice" if forced else fmt.param if fmt is not None else "response_format"
        grammar = finish(rules, f"{prefix} {body}".strip(), param)
    elif offered and request.tools is not None:
        grammar = lazy_grammar(tools, request.tools, parallel=parallel)

    reasoning = request.reasoning
    budget = None
    if think is not None and reasoning is not None and reasoning.enabled:
        budget = reasoning.budget_tokens
    return OutputPlan(
        think=think,
        think_opened=opened,
        tools=tools if offered else None,
        tool_names=frozenset(t.name for t in request.tools or ()) if offered else frozenset(),
        tool_schemas={t.name: t.parameters or {} for t in request.tools or ()} if offered else {},
        parallel_calls=parallel,
        required_calls=(
            frozenset({choice.name} if choice.name else (t.name for t in request.tools or ()))
            if forced and choice
            else frozenset()
        ),
        grammar=grammar,
        reasoning_budget=budget,
        harmony=harmony,
    )


class StructuredOutput:
    """Thinking first (if the model thinks), then content that may hold tool calls."""

    def __init__(self, plan: OutputPlan) -> None:
        self._think = ThinkSplitter(plan.think, opened=plan.think_opened) if plan.think else None
        self._tools = (
            ToolCallParser(
                plan.tools,
                plan.tool_names,
                max_calls=None if plan.parallel_calls else 1,
                schemas=plan.tool_schemas,
                required=plan.required_calls,
            )
            if plan.tools
            else None
        )

    @property
    def in_reasoning(self) -> bool:
        return self._think is not None and self._think.in_reasoning

    @property
    def made_tool_calls(self) -> bool:
        return self._tools is not None and self._tools.made_calls

    @property
    def complete(self) -> bool:
        return self._tools is not None and self._tools.complete

    @property
    def call_ended(self) -> bool:
        return self._tools is not None and self._tools.call_ended

    def feed(self, text: str) -> list[Event]:
        parts: Sequence[Part] = self._think.feed(text) if self._think else [("content", text)]
        return self._events(parts)

    def finish(self) -> list[Event]:
        events = self._events(self._think.finish()) if self._think else []
        if self._tools is not None:
            events += self._tools.finish()
        return events

    def _events(self, parts: Sequence[Part]) -> list[Event]:
        out: list[Event] = []
        for kind, text in parts:
            if kind == "reasoning":
                out.append(ReasoningDelta(text))
            elif self._tools is not None:
                out += self._tools.feed(text)
            else:
                out.append(TextDelta(text))
        return out


def parser_for(plan: OutputPlan) -> OutputParser:
    """The parser for one request's output."""
    if plan.harmony:
        return HarmonyParser(plan.tool_names, max_calls=None if plan.parallel_calls else 1, opened=plan.think_opened)
    if plan.think is None and plan.tools is None:
        return PlainText()
    return StructuredOutput(plan)


def merged(events: Sequence[Event]) -> list[Event]:
    """`events` with each run of text (or reasoning, or one call's arguments) as one event.

    The tokens of a verified draft arrive together: sent as one frame, not one per token, they
    cost the server and the client one message to handle instead of up to a draft's length,
    CPU the decoding threads would otherwise lose on a small machine."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, TextDelta) and isinstance(last, TextDelta):
            logprobs = [*(last.logprobs or ()), *(event.logprobs or ())]
            out[-1] = TextDelta(last.text + event.text, logprobs if last.logprobs or event.logprobs else None)
        elif isinstance(event, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(last.text + event.text)
        elif (
            isinstance(event, ToolCallDelta)
            and isinstance(last, ToolCallDelta)
            and event.index == last.index
            and event.name is None
        ):
            out[-1] = ToolCallDelta(last.index, last.id, last.name, last.arguments + event.arguments)
        else:
            out.append(event)
    return out
