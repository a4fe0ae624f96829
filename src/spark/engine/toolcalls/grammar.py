"""Grammars for tool calls: a forced call, or a lazy grammar that takes over once a call starts."""

from __future__ import annotations

import json
import logging
from typing import Any

from spark.engine.grammar import Grammar, Rules, SchemaConverter, SchemaError, finish, literal
from spark.engine.toolcalls.syntax import (
    HERMES_CLOSE,
    HERMES_OPEN,
    JSON_START,
    MISTRAL_ARGS,
    MISTRAL_CALLS,
    PYTHON_TAG,
    ToolSyntax,
)
from spark.errors import InvalidRequest
from spark.types import Tool

log = logging.getLogger("spark.engine.toolcalls")


def args_rule(rules: Rules, tool: Tool, hint: str) -> str:
    """The arguments of `tool`, from its JSON schema; any object when we cannot enforce it."""
    schema: dict[str, Any] = dict(tool.parameters or {})
    if "type" not in schema and not ({"$ref", "anyOf", "oneOf", "allOf", "enum", "const"} & schema.keys()):
        schema["type"] = "object"
    try:
        return SchemaConverter(rules, schema, "tools").rule(schema, hint)
    except SchemaError as e:
        log.info("tool %s: arguments not constrained by its schema: %s", tool.name, e.message)
        return rules.primitive("object")


def _object_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool]) -> str:
    """`{"name": "<tool>", "<args key>": <its arguments>}` for any of `tools`."""
    rules.primitive("ws")
    key = literal(json.dumps(syntax.args_key))
    alts = []
    for i, t in enumerate(tools):
        name = literal(json.dumps(t.name, ensure_ascii=False))
        alts.append(f'{name} ws "," ws {key} ws ":" ws {args_rule(rules, t, f"args-{i}")}')
    fns = rules.add("call-fn", " | ".join(alts))
    return rules.add("call-object", f'"{{" ws "\\"name\\"" ws ":" ws {fns} ws "}}"')


def _calls_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool], *, lazy: bool, parallel: bool) -> str:
    """The calls in the family's syntax (the first starting with its marker, if any): one or
    more, or with `parallel` off exactly one, after which the grammar is complete (llama.cpp
    then allows only end-of-generation tokens)."""
    lead = rules.add("lead", "[ \\t\\r\\n]{0,4}")
    if syntax.family == "hermes":
        obj = _object_rule(rules, syntax, tools)
        call = rules.add("call", f"{literal(HERMES_OPEN)} {lead} {obj} {lead} {literal(HERMES_CLOSE)}")
        return rules.add("calls", f"{call} ( {lead} {call} )*") if parallel else call
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


def call_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool], only: str | None, *, parallel: bool = True) -> str:
    """The rule for the calls a forced (or combined) grammar allows; `only` names the one tool,
    and with `parallel` off the grammar ends after one call."""
    chosen = [t for t in tools if t.name == only] if only else tools
    if not chosen:
        raise InvalidRequest(f"tool_choice names '{only}', which is not among the tools", param="tool_choice")
    return _calls_rule(rules, syntax, chosen, lazy=False, parallel=parallel)


def lazy_grammar(syntax: ToolSyntax, tools: list[Tool], *, parallel: bool = True) -> Grammar:
    """A grammar that leaves the output free until a call starts, then constrains the call
    (with `parallel` off, the one call).

    A call starts at the family's marker, or, in every family, at an opening brace that
    begins the answer: small models often answer with a bare JSON call whatever their
    template says, and the parser reads it as a call.
    """
    rules = Rules()
    calls = _calls_rule(rules, syntax, tools, lazy=True, parallel=parallel)
    if syntax.family in ("hermes", "mistral"):
        calls = rules.add("calls-or-bare", f"{calls} | {_object_rule(rules, syntax, tools)}")
    words = tuple(m for m in syntax.markers if m in (HERMES_OPEN, PYTHON_TAG, MISTRAL_CALLS))
    return finish(rules, calls, "tools", trigger_words=words, trigger_patterns=(JSON_START,))
