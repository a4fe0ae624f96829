"""Grammars for tool calls: a forced call, or a lazy grammar that takes over once a call starts."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from spark.engine.grammar import Grammar, Rules, SchemaConverter, SchemaError, finish, literal
from spark.engine.grammar.check import MAX_REPEAT
from spark.engine.reasoning import not_containing
from spark.engine.toolcalls.parser import FUNCTION_TAG
from spark.engine.toolcalls.syntax import (
    GEMMA_CALL,
    GEMMA_CALL_END,
    GEMMA_QUOTE,
    GLM_PARAMETERS,
    HERMES_CLOSE,
    HERMES_OPEN,
    JSON_START,
    LFM2_CALLS,
    LFM2_CALLS_END,
    MISTRAL_ARGS,
    MISTRAL_CALLS,
    PYTHON_TAG,
    XML_PARAMETERS,
    CallShape,
    ParameterTags,
    ToolSyntax,
)
from spark.errors import InvalidRequest
from spark.types import Tool

log = logging.getLogger("spark.engine.toolcalls")
# The longest string bound written into a grammar: each character of such a string is an alternation
# of two symbols, which llama.cpp repeats as rules up to its limit of 2,000 (MAX_REPEAT); a longer
# bound (Claude Code's tools allow 524,288 characters) is left out, the string free.
_COUNTED_TEXT = MAX_REPEAT // 4


def _unconstrained(tool: Tool, e: SchemaError, what: str) -> None:
    """A schema the grammar cannot hold: refused for a strict tool, else `what` is left free (logged)."""
    if tool.strict:
        raise e
    log.info("tool %s: %s not constrained by its schema: %s", tool.name, what, e.message)


def _converter(rules: Rules, tool: Tool, schema: dict[str, Any] | None = None) -> SchemaConverter:
    """A converter for `tool`'s parameters: strict for a strict tool, else leaving out what it cannot enforce."""
    return SchemaConverter(
        rules, dict(tool.parameters or {}) if schema is None else schema, "tools", strict=tool.strict
    )


def args_rule(rules: Rules, tool: Tool, hint: str) -> str:
    """The arguments of `tool`, from its JSON schema; any object when we cannot hold it (a strict tool's:
    `InvalidRequest`)."""
    schema: dict[str, Any] = dict(tool.parameters or {})
    if "type" not in schema and not ({"$ref", "anyOf", "oneOf", "allOf", "enum", "const"} & schema.keys()):
        schema["type"] = "object"
    try:
        return _converter(rules, tool, schema).rule(schema, hint)
    except SchemaError as e:
        _unconstrained(tool, e, "arguments")
        return rules.primitive("object")


def _parameters_rule(rules: Rules, tool: Tool, tags: ParameterTags, hint: str) -> str:
    """The arguments of `tool` as tags (`<parameter=key>value</parameter>`, GLM's `<arg_key>`...): its
    properties in the schema's order, the required ones always; a string's value as written, any
    other value as JSON matching its schema, a value of no type as any text."""
    lead = rules.add("lead", "[ \t\r\n]{0,4}")
    text = not_containing(rules, tags.value_close, f"{hint}-text")
    value_open = f"{lead} {literal(tags.value_open)} " if tags.value_open else ""
    close = literal(tags.value_close)

    def tag(key: str, value: str) -> str:
        # one newline around the value, as the templates write it and the parser drops it
        return f'{key} {literal(tags.key_close)} {value_open}"\\n"? {value} "\\n"? {close} {lead}'

    schema = tool.parameters or {}
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        any_key = f"{literal(tags.key_open)} [A-Za-z0-9_.-]{{1,64}}"
        return rules.add(f"{hint}-any", f"( {tag(any_key, text)} )*")
    required = set(schema.get("required") or ())
    converter = _converter(rules, tool)
    parts = []
    for i, (key, prop) in enumerate(properties.items()):
        kind = prop.get("type") if isinstance(prop, dict) else None
        enum = prop.get("enum") if isinstance(prop, dict) else None
        if kind in ("string", None) and isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            value = "( " + " | ".join(literal(v) for v in enum) + " )"
        elif kind == "string" and isinstance(prop.get("maxLength"), int) and prop["maxLength"] <= _COUNTED_TEXT:
            # at most that many characters, none of them starting a closing tag
            value = f'( [^<] | "<" [^/] ){{0,{prop["maxLength"]}}}'
        elif kind == "string" or kind is None:
            value = text
        else:
            try:
                value = converter.rule(prop, f"{hint}-{i}")
            except SchemaError as e:
                _unconstrained(tool, e, f"parameter {key}")
                value = text
        part = tag(literal(tags.key_open + key), value)
        parts.append(part if key in required else f"( {part} )?")
    return rules.add(hint, " ".join(parts))


def _members_rule(
    rules: Rules, tool: Tool, hint: str, *, sep: str, comma: str, value: Callable[[str, dict[str, Any]], str]
) -> str | None:
    """The arguments of `tool` as `key<sep>value` members joined by `comma`, for the families that write
    them in a syntax of their own: the required ones first, then any of the others, in the schema's order
    (as the JSON grammar writes objects); `value` writes a property's value. None when the schema names
    no properties."""
    schema = tool.parameters or {}
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return None
    required = [n for n in dict.fromkeys(schema.get("required") or ()) if n in properties]
    optional = [n for n in properties if n not in required]

    def member(name: str) -> str:
        prop = properties[name] if isinstance(properties[name], dict) else {}
        return rules.add(f"{hint}-{name}", f"{literal(name + sep)} {value(name, prop)}")

    more = "".join(f" ( {literal(comma)} {member(n)} )?" for n in optional)
    if required:
        return f" {literal(comma)} ".join(member(n) for n in required) + more
    # any ordered subset of the optional members, the first without a comma
    start = ""
    for i in range(len(optional) - 1, -1, -1):
        later = "".join(f" ( {literal(comma)} {member(n)} )?" for n in optional[i + 1 :])
        start = rules.add(f"{hint}-from-{i}", f"{member(optional[i])}{later}" + (f" | {start}" if start else ""))
    return f"{start}?"


def _json_value(rules: Rules, tool: Tool, hint: str) -> Callable[[str, dict[str, Any]], str]:
    """A property's value as JSON matching its schema (any JSON value where the schema cannot be held)."""
    converter = _converter(rules, tool)

    def value(name: str, prop: dict[str, Any]) -> str:
        try:
            return converter.rule(prop, f"{hint}-{name}-value")
        except SchemaError as e:
            _unconstrained(tool, e, f"parameter {name}")
            return rules.primitive("value")

    return value


def _gemma_args_rule(rules: Rules, tool: Tool, hint: str) -> str:
    """The arguments of `tool` in Gemma 4's syntax (`{key:<|"|>text<|"|>,n:2}`, strings between <|"|>
    quotes): numbers and booleans as JSON of their schema, strings (bounded by their lengths, or one
    of their enum), other values in Gemma's syntax."""
    quote = literal(GEMMA_QUOTE)
    string = rules.add("gemma-string", f"{quote} {not_containing(rules, GEMMA_QUOTE, 'gemma-text')} {quote}")
    any_value = rules.reserve("gemma-value")
    key = rules.add("gemma-key", "[A-Za-z0-9_]{1,64}")
    members = f'( {key} ":" {any_value} ( "," {key} ":" {any_value} )* )?'
    array = f'"[" ( {any_value} ( "," {any_value} )* )? "]"'
    rules.define(
        any_value,
        f'{string} | {rules.primitive("number")} | {rules.primitive("boolean")} | "null" '
        f'| "{{" {members} "}}" | {array}',
    )
    as_json = _json_value(rules, tool, hint)

    def value(name: str, prop: dict[str, Any]) -> str:
        kind, enum = prop.get("type"), prop.get("enum")
        if kind == "string" and isinstance(enum, list) and all(isinstance(v, str) for v in enum):
            return "( " + " | ".join(f"{quote} {literal(v)} {quote}" for v in enum) + " )"
        if kind == "string" and ("maxLength" in prop or "minLength" in prop):
            low = int(prop.get("minLength", 0))
            high = int(prop["maxLength"]) if "maxLength" in prop else None  # none: as long as it gets
            if max(low, high or 0) <= _COUNTED_TEXT:
                low = low if high is None else min(low, high)
                repeat = f"{{{low},{'' if high is None else high}}}"
                return f'{quote} ( [^<] | "<" [^|] ){repeat} {quote}'  # no quote starts inside
        if kind == "string":
            return string
        return as_json(name, prop) if kind in ("integer", "number", "boolean") else any_value

    body = _members_rule(rules, tool, hint, sep=":", comma=",", value=value)
    return rules.add(hint, f'"{{" {body if body is not None else members} "}}"')


def _python_args_rule(rules: Rules, tool: Tool, hint: str) -> str:
    """The arguments of `tool` as Python keywords (`(city="Paris", n=2)`, as LFM2 writes them): values
    as JSON of their schema, which Python reads too (the parser takes JSON's true, false and null)."""
    body = _members_rule(rules, tool, hint, sep="=", comma=", ", value=_json_value(rules, tool, hint))
    if body is None:
        keyword = rules.add("python-keyword", f'[A-Za-z_] [A-Za-z0-9_]{{0,63}} "=" {rules.primitive("value")}')
        body = f'( {keyword} ( ", " {keyword} )* )?'
    return rules.add(hint, f'"(" {body} ")"')


def _object_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool]) -> str:
    """`{"name": "<tool>", "<args key>": <its arguments>}` for any of `tools`."""
    rules.primitive("ws")
    key = literal(json.dumps(syntax.args_key))
    alts = []
    for i, t in enumerate(tools):
        name = literal(json.dumps(t.name, ensure_ascii=False))
        alts.append(f'{name} ws "," ws {key} ws ":" ws {args_rule(rules, t, f"args-{i}")}')
    fns = rules.add("call-fn", " | ".join(alts))
    name = literal(json.dumps(syntax.name_key))
    return rules.add("call-object", f'"{{" ws {name} ws ":" ws {fns} ws "}}"')


def _calls_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool], *, lazy: bool, parallel: bool) -> str:
    """The calls in the family's syntax (the first starting with its marker, if any): one or
    more, or with `parallel` off exactly one, after which the grammar is complete (llama.cpp
    then allows only end-of-generation tokens)."""
    lead = rules.add("lead", "[ \\t\\r\\n]{0,4}")
    if syntax.family == "hermes":
        obj = _object_rule(rules, syntax, tools)
        call = rules.add("call", f"{literal(HERMES_OPEN)} {lead} {obj} {lead} {literal(HERMES_CLOSE)}")
        return rules.add("calls", f"{call} ( {lead} {call} )*") if parallel else call
    if syntax.family in ("xml", "glm"):
        if syntax.family == "xml":  # <tool_call><function=name>...</function></tool_call>
            fns = [
                f"{literal(t.name + '>')} {lead} {_parameters_rule(rules, t, XML_PARAMETERS, f'params-{i}')}"
                for i, t in enumerate(tools)
            ]
            body = f"{literal(FUNCTION_TAG + '=')} ( {' | '.join(fns)} ) {literal(XML_PARAMETERS.end)} {lead}"
        else:  # <tool_call>name<arg_key>...</tool_call>
            fns = [
                f"{literal(t.name)} {lead} {_parameters_rule(rules, t, GLM_PARAMETERS, f'params-{i}')}"
                for i, t in enumerate(tools)
            ]
            body = f"( {' | '.join(fns)} )"
        call = rules.add("call", f"{literal(HERMES_OPEN)} {lead} {body} {literal(HERMES_CLOSE)}")
        return rules.add("calls", f"{call} ( {lead} {call} )*") if parallel else call
    if syntax.family == "gemma":
        fns = [f"{literal(t.name)} {_gemma_args_rule(rules, t, f'gemma-args-{i}')}" for i, t in enumerate(tools)]
        call = rules.add("call", f"{literal(GEMMA_CALL + 'call:')} ( {' | '.join(fns)} ) {literal(GEMMA_CALL_END)}")
        return rules.add("calls", f"{call} ( {lead} {call} )*") if parallel else call
    if syntax.family == "lfm2":
        fns = [f"{literal(t.name)} {_python_args_rule(rules, t, f'python-args-{i}')}" for i, t in enumerate(tools)]
        listed = f'( {" | ".join(fns)} ) ( ", " ( {" | ".join(fns)} ) )*' if parallel else f"( {' | '.join(fns)} )"
        return rules.add("calls", f'{literal(LFM2_CALLS)} "[" {listed} "]" {literal(LFM2_CALLS_END)}')
    if (shape := _written_shape(syntax)) is not None:
        return _shaped_calls_rule(rules, syntax, shape, tools, parallel=parallel)
    if syntax.family == "mistral":
        if syntax.mistral_args:
            alts = [
                f"{literal(t.name)} {literal(MISTRAL_ARGS)} {args_rule(rules, t, f'args-{i}')}"
                for i, t in enumerate(tools)
            ]
            call = rules.add("call", f"{literal(MISTRAL_CALLS)} ( {' | '.join(alts)} )")
            return rules.add("calls", f"{call}+") if parallel else call
        obj = _object_rule(rules, syntax, tools)
        more = f'( ws "," ws {obj} )* ' if parallel else ""
        return rules.add("calls", f'{literal(MISTRAL_CALLS)} {lead} "[" ws {obj} {more}ws "]"')
    # A bare JSON answer holds one call either way.
    obj = _object_rule(rules, syntax, tools)
    if syntax.family == "llama3" and lazy:
        return rules.add("calls", f"( {literal(PYTHON_TAG)} {lead} )? {obj}")
    return obj


def _written_shape(syntax: ToolSyntax) -> CallShape | None:
    """The learned shape a grammar writes calls in: where the template lists the tools (where it does
    not, the system message tells the model of JSON calls)."""
    return syntax.shape if syntax.family == "template" and syntax.renders_tools else None


def _shaped_calls_rule(rules: Rules, syntax: ToolSyntax, shape: CallShape, tools: list[Tool], *, parallel: bool) -> str:
    """The calls in the shape a template writes them, with its whitespace (learned from the template);
    a lazy grammar sees them from the word that starts them."""
    lead = rules.add("lead", "[ \\t\\r\\n]{0,4}")
    opening = f"{lead} {literal(shape.open.lstrip())}"
    if shape.json_calls:
        obj = _object_rule(rules, syntax, tools)
        if shape.array:
            more = f'( ws "," ws {obj} )* ' if parallel else ""
            body = f'"[" ws {obj} {more}ws "]"'
        else:
            body = f"{obj} ( ws {obj} )*" if parallel else obj
        return rules.add("calls", f"{opening} {body} {literal(shape.close)}")
    tags = shape.params
    number = '":" [0-9]{1,4} ' if shape.numbered else ""
    fns = [
        f"{literal(t.name)} {number}{literal(shape.name_close)} "
        + (_parameters_rule(rules, t, tags, f"params-{i}") if tags else args_rule(rules, t, f"args-{i}"))
        + f" {literal(shape.end)}"
        for i, t in enumerate(tools)
    ]
    call = rules.add("call", " | ".join(fns))
    more = f"( {literal(shape.next)} {call} )* " if parallel else ""
    return rules.add("calls", f"{opening} {call} {more}{literal(shape.close)}")


def call_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool], only: str | None, *, parallel: bool = True) -> str:
    """The rule for the calls a forced (or combined) grammar allows; `only` names the one tool,
    and with `parallel` off the grammar ends after one call."""
    return _calls_rule(rules, syntax, chosen_tools(tools, only), lazy=False, parallel=parallel)


def chosen_tools(tools: list[Tool], only: str | None) -> list[Tool]:
    """The tools a call may name: the one `only` names (`InvalidRequest` when none has that name), or all."""
    chosen = [t for t in tools if t.name == only] if only else tools
    if not chosen:
        raise InvalidRequest(f"tool_choice names '{only}', which is not among the tools", param="tool_choice")
    return chosen


def lazy_grammar(syntax: ToolSyntax, tools: list[Tool], *, parallel: bool = True) -> Grammar:
    """A grammar that leaves the output free until a call starts, then constrains the call
    (with `parallel` off, the one call).

    A call starts at the family's marker, or, in every family, at an opening brace that
    begins the answer: small models often answer with a bare JSON call whatever their
    template says, and the parser reads it as a call.
    """
    rules = Rules()
    calls = _calls_rule(rules, syntax, tools, lazy=True, parallel=parallel)
    if syntax.family in ("hermes", "xml", "glm", "mistral", "template"):
        calls = rules.add("calls-or-bare", f"{calls} | {_object_rule(rules, syntax, tools)}")
    openers = (HERMES_OPEN, PYTHON_TAG, MISTRAL_CALLS, GEMMA_CALL, LFM2_CALLS)
    words = tuple(m for m in syntax.markers if m in openers)
    if (shape := _written_shape(syntax)) is not None:
        words = (shape.opener,)
    return finish(rules, calls, "tools", trigger_words=words, trigger_patterns=(JSON_START,))
