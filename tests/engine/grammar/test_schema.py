"""JSON schema to GBNF: what the grammars accept (checked by llama.cpp itself), what they
generate (validated with jsonschema), and what is refused before llama.cpp sees it."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

from engine.grammar.driver import FORMATS, Driver, generated
from spark.engine.grammar import SchemaError, schema_grammar
from spark.errors import InvalidRequest


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date", ["2024-01-31", "1999-12-30", "2023-02-28"], ["2023-02-30", "2024-04-31", "2024-13-01", "2024-1-01"]),
        ("time", ["23:59:59Z", "08:00:00.5+02:00"], ["24:00:00Z", "12:00:00", "12:60:00Z"]),
        ("date-time", ["2024-06-01T12:30:00Z"], ["2024-06-01 12:30:00Z"]),
        ("uuid", ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000"]),
        ("ipv4", ["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "01.2.3.4"]),
    ],
)
def test_formats_accept_valid_and_refuse_invalid_text(
    driver: Driver, fmt: str, good: list[str], bad: list[str]
) -> None:
    grammar = schema_grammar({"type": "string", "format": fmt})
    for text in good:
        assert driver.accepts(grammar, json.dumps(text)), text
    for text in bad:
        assert not driver.accepts(grammar, json.dumps(text)), text


# --- what they generate ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt",
    [
        "date",
        "time",
        "date-time",
        "duration",
        "uuid",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "json-pointer",
        "relative-json-pointer",
        "regex",
        "uri-template",
    ],
)
def test_every_supported_format_generates_valid_strings(driver: Driver, fmt: str) -> None:
    assert FORMATS.checkers.get(fmt), f"jsonschema cannot check {fmt} here"
    generated(driver, {"type": "string", "format": fmt}, range(8))


def test_nested_schema_with_refs_combinations_and_limits(driver: Driver) -> None:
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer", "minimum": 0, "maximum": 9},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                },
                "required": ["v"],
            },
            "pet": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "maximum": 9}},
                        "required": ["kind", "lives"],
                        "additionalProperties": False,
                    },
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
                        "required": ["kind"],
                        "additionalProperties": False,
                    },
                ]
            },
        },
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 8},
            "tree": {"$ref": "#/$defs/node"},
            "pet": {"$ref": "#/$defs/pet"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", 3, None]}, "minItems": 1, "maxItems": 3},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "string", "maxLength": 3}, {"type": "boolean"}],
                "items": False,
                "minItems": 2,
            },
            "either": {"anyOf": [{"type": "null"}, {"type": "number", "minimum": 10, "maximum": 20}]},
            "counts": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "maxProperties": 3},
            "merged": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "string", "maxLength": 2}}, "required": ["b"]},
                ]
            },
            "level": {"type": ["integer", "string"], "minimum": 1, "maximum": 3, "maxLength": 1},
        },
        "required": ["name", "tree", "pet", "tags", "pair", "merged"],
        "additionalProperties": False,
    }
    values = generated(driver, schema, range(10))
    assert {v["pet"]["kind"] for v in values} == {"cat", "dog"}


def test_json_object_mode_generates_objects(driver: Driver) -> None:
    grammar = schema_grammar(None)
    for seed in range(10):
        assert isinstance(json.loads(driver.walk(grammar, seed)), dict)


# --- what is refused ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"not": {"type": "string"}}, "'not'"),
        ({"if": {"type": "string"}, "then": {"minLength": 2}}, "'if'/'then'/'else'"),
        ({"type": "object", "patternProperties": {"^x": {}}}, "'patternProperties'"),
        ({"type": "array", "uniqueItems": True}, "'uniqueItems'"),
        ({"type": "number", "multipleOf": 0.5}, "'multipleOf'"),
        ({"$ref": "https://example.com/schema.json"}, "only references inside the schema"),
        ({"$ref": "#/$defs/missing"}, "points at nothing"),
        ({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}, "use anyOf"),
        ({"type": "frobnicate"}, "names no JSON Schema type"),
        ({"type": "array", "prefixItems": {"type": "string"}}, "'prefixItems' must be a list of schemas"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "maxLength below minLength"),
        ({"type": "string", "pattern": "^(?=a)b$"}, "lookarounds"),
        ({"type": "string", "pattern": "(a"}, "invalid regular expression"),
        ({"type": "number", "minimum": 0.2, "maximum": 0.4}, "too narrow"),
        ({"type": "integer", "minimum": 5, "maximum": 4}, "allows no"),
        ({"type": "object", "required": ["x"], "additionalProperties": False}, "requires 'x'"),
        ({"type": "string", "format": "date", "maxLength": 5}, "length limits"),
        ({"anyOf": [{"$ref": "#"}, {"type": "null"}]}, "left-recursive"),
        (False, "allows no value"),
        ([1, 2], "must be a schema"),
    ],
)
def test_unsupported_or_invalid_schemas_are_refused_naming_the_param(schema: Any, why: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(why)) as e:
        schema_grammar(schema)
    assert e.value.param == "response_format"


def test_annotations_and_unknown_keywords_are_ignored(driver: Driver) -> None:
    schema = {
        "title": "T",
        "description": "d",
        "x-vendor": 1,
        "type": "object",
        "examples": [{}],
        "properties": {"id": {"type": "string", "format": "password", "default": "x", "maxLength": 4}},
    }
    generated(driver, schema, range(4))


def test_schema_errors_are_invalid_requests() -> None:
    assert issubclass(SchemaError, InvalidRequest)


def test_schemas_nested_too_deep_are_refused_not_a_recursion_error() -> None:
    from spark.engine.grammar.schema import MAX_SCHEMA_DEPTH

    def nested(depth: int) -> dict[str, object]:
        schema: dict[str, object] = {"type": "string"}
        for _ in range(depth):
            schema = {"type": "array", "items": schema}
        return schema

    schema_grammar(nested(MAX_SCHEMA_DEPTH - 1))  # deep, but within the bound
    with pytest.raises(InvalidRequest, match=f"nested more than {MAX_SCHEMA_DEPTH} levels") as e:
        schema_grammar(nested(5000))
    assert e.value.param == "response_format"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": [{}]}}},
        {"type": "object", "required": [["a"]], "properties": {"a": {"type": "string"}}},
        {"type": "string", "minLength": None, "maxLength": 3},
        {"oneOf": [{"type": [[]]}, {"type": "string"}]},
        {"type": "string", "format": ["date"]},
        {"type": "object", "properties": {"a": {"$ref": {"x": 1}}}},
    ],
)
def test_malformed_schemas_are_invalid_requests_naming_where(schema: dict[str, object]) -> None:
    # each of these once reached the conversion and failed there with a TypeError (a 500)
    with pytest.raises(InvalidRequest, match="invalid JSON schema in json_schema: '") as e:
        schema_grammar(schema, param="json_schema")
    assert e.value.param == "json_schema"


@pytest.mark.parametrize(
    ("schema", "looser"),
    [
        (
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            {"type": "array", "items": {"type": "string"}},
        ),
        ({"type": "number", "multipleOf": 0.5}, {"type": "number"}),
        ({"type": "string", "not": {"const": "a"}}, {"type": "string"}),
        ({"type": "integer", "if": {"minimum": 2}, "then": {"maximum": 3}}, {"type": "integer"}),
        ({"type": "object", "patternProperties": {"^x": {}}, "maxProperties": 0}, {"type": "object"}),
        ({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}, {"type": "string"}),
        ({"type": "string", "pattern": "^(?=a)b$"}, {"type": "string"}),
        ({"type": "string", "pattern": "^[a-c]{2}$", "format": "date"}, {"type": "string", "pattern": "^[a-c]{2}$"}),
        ({"type": "string", "pattern": "^[a-c]+$", "maxLength": 9}, {"type": "string", "pattern": "^[a-c]+$"}),
        ({"type": "string", "format": "date", "maxLength": 5}, {"type": "string", "format": "date"}),
        ({"type": "number", "minimum": 0.2, "maximum": 0.4}, {"type": "number"}),
        ({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2}, {"type": "object"}),
        ({"type": "object", "properties": {"a": {"type": "null"}}, "minProperties": 1}, {"type": "object"}),
    ],
)
def test_not_strict_a_keyword_that_cannot_be_enforced_is_left_out(
    driver: Driver, schema: dict[str, Any], looser: dict[str, Any]
) -> None:
    # As llama.cpp's json-schema-to-grammar: the answer holds to the schema without the keyword.
    with pytest.raises(SchemaError, match="cannot|oneOf|unsupported pattern|combines|too narrow"):
        schema_grammar(schema)
    grammar = schema_grammar(schema, strict=False)
    for seed in range(6):
        jsonschema.validate(json.loads(driver.walk(grammar, seed)), looser, format_checker=FORMATS)


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"$ref": "#/$defs/missing"}, "points at nothing"),
        ({"type": "frobnicate"}, "names no JSON Schema type"),
        ({"type": "string", "pattern": "(a"}, "invalid regular expression"),
        ({"type": "integer", "minimum": 5, "maximum": 4}, "allows no"),
        (False, "allows no value"),
    ],
)
def test_not_strict_an_invalid_or_unsatisfiable_schema_is_still_refused(schema: Any, why: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(why)) as e:
        schema_grammar(schema, param="json_schema", strict=False)
    assert e.value.param == "json_schema"
