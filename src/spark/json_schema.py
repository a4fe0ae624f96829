"""Whether a JSON schema is well formed: each keyword Spark reads holds a value of the right JSON type.

A client's schema (a response format, a tool's parameters) is checked before anything reads it,
at the API boundary and again before it becomes a grammar, so `"type": [{}]` or `"required": "a"`
is a clear 400 naming where it is wrong, never an error deep inside a conversion.
"""

from __future__ import annotations

from typing import Any

MAX_SCHEMA_DEPTH = 64  # nested schemas past this are refused (checking and conversion recurse per level)
MAX_ALTERNATIVES = 1000
"""Values of one enum, branches of one anyOf/oneOf, alternatives a grammar keeps open at once:
llama.cpp's grammar sampler checks every token of the vocabulary against each open alternative at
every step, in the thread that decodes for all of the model's requests. Measured with SmolLM2
(49k tokens) on 2 CPU cores: about 0.15 s a token with 1,000 open, 0.5 s with 5,000, 2 s with
20,000."""
MAX_SCHEMA_ALTERNATIVES = 10 * MAX_ALTERNATIVES
"""Enum values and anyOf/oneOf branches in one schema, all together: each becomes grammar text."""

_SUBSCHEMA = (
    "additionalProperties",
    "additionalItems",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_NUMBERS = ("minimum", "maximum", "multipleOf")
_STRINGS = ("pattern", "format", "$ref")
_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")


def schema_problem(schema: Any) -> str | None:
    """What makes `schema` malformed or larger than a grammar may be, naming the keyword's path
    (`properties.a.type`), or None."""
    counted = [0]  # enum values and anyOf/oneOf branches so far
    found = _problem(schema, "", 0, counted)
    if found is None and counted[0] > MAX_SCHEMA_ALTERNATIVES:
        return (
            f"the schema has {counted[0]} enum values and anyOf/oneOf branches in all, more than this "
            f"server's grammar limit of {MAX_SCHEMA_ALTERNATIVES}"
        )
    return found


def _problem(schema: Any, path: str, depth: int, counted: list[int]) -> str | None:
    if isinstance(schema, bool):
        return None
    where = path or "the schema"
    if not isinstance(schema, dict):
        return f"'{where}' must be a schema (an object or a boolean), not {_kind(schema)}"
    if depth >= MAX_SCHEMA_DEPTH:
        return f"'…{where[-60:]}' is nested more than {MAX_SCHEMA_DEPTH} levels deep"
    at = f"{path}." if path else ""
    own = _keyword_problem(schema, at) or _size_problem(schema, at, counted)
    if own is not None:
        return own
    for key, sub in _subschemas(schema, at):
        found = _problem(sub, key, depth + 1, counted)
        if found is not None:
            return found
    return None


def _size_problem(schema: dict[str, Any], at: str, counted: list[int]) -> str | None:
    """An enum or anyOf/oneOf with more alternatives than a grammar may open at once; counts them."""
    for key, what in (("enum", "values"), ("anyOf", "branches"), ("oneOf", "branches")):
        n = len(schema.get(key, ()))
        if n > MAX_ALTERNATIVES:
            return f"'{at}{key}' has {n} {what}, more than this server's grammar limit of {MAX_ALTERNATIVES}"
        counted[0] += n
    return None


def _keyword_problem(schema: dict[str, Any], at: str) -> str | None:
    """The first keyword of `schema` itself (not its subschemas) whose value has the wrong type."""
    kinds = schema.get("type")
    names = kinds if isinstance(kinds, list) else [kinds]
    if "type" in schema and (not names or not all(isinstance(n, str) for n in names)):
        return f'\'{at}type\' must be a type name ("string", "object", ...) or a non-empty list of them'
    unknown = next((n for n in names if "type" in schema and n not in _TYPES), None)
    if unknown is not None:
        return f"'{at}type' names no JSON Schema type: '{unknown}' (the types are {', '.join(_TYPES)})"
    for key in _COUNTS:
        v = schema.get(key)
        if key in schema and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            return f"'{at}{key}' must be a non-negative integer, not {_kind(v)}"
    for key in (*_NUMBERS, "exclusiveMinimum", "exclusiveMaximum"):
        v = schema.get(key)
        draft4 = key.startswith("exclusive") and isinstance(v, bool)  # draft 4's flag form
        if key in schema and not draft4 and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"'{at}{key}' must be a number, not {_kind(v)}"
    for key in _STRINGS:
        if key in schema and not isinstance(schema[key], str):
            return f"'{at}{key}' must be a string, not {_kind(schema[key])}"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
        return f"'{at}required' must be a list of property names"
    if not isinstance(schema.get("enum", []), list):
        return f"'{at}enum' must be a list of values"
    if not isinstance(schema.get("uniqueItems", False), bool):
        return f"'{at}uniqueItems' must be true or false"
    for key in (*_SUBSCHEMA_LISTS, *_SUBSCHEMA_MAPS):
        expected = list if key in _SUBSCHEMA_LISTS else dict
        if key in schema and not isinstance(schema[key], expected):
            return f"'{at}{key}' must be {'a list of schemas' if expected is list else 'an object of schemas'}"
    return None


def _subschemas(schema: dict[str, Any], at: str) -> list[tuple[str, Any]]:
    """Each schema directly inside `schema`, with its path."""
    found: list[tuple[str, Any]] = [(f"{at}{key}", schema[key]) for key in _SUBSCHEMA if key in schema]
    items = schema.get("items")
    if isinstance(items, list):  # the tuple form of drafts 4 to 7
        found += [(f"{at}items[{i}]", sub) for i, sub in enumerate(items)]
    elif "items" in schema:
        found.append((f"{at}items", items))
    for key in _SUBSCHEMA_LISTS:
        found += [(f"{at}{key}[{i}]", sub) for i, sub in enumerate(schema.get(key, ()))]
    for key in _SUBSCHEMA_MAPS:
        found += [(f"{at}{key}.{name}", sub) for name, sub in schema.get(key, {}).items()]
    return found


def _kind(value: Any) -> str:
    """A JSON value's kind, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"
