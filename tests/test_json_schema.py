"""Well-formed JSON schemas: each keyword Spark reads holds a value of the right JSON type."""

from __future__ import annotations

from typing import Any

import pytest

from spark.json_schema import MAX_ALTERNATIVES, MAX_SCHEMA_ALTERNATIVES, MAX_SCHEMA_DEPTH, schema_problem

PYDANTIC_LIKE: dict[str, Any] = {
    "$defs": {"Pet": {"properties": {"name": {"title": "Name", "type": "string"}}, "required": ["name"]}},
    "properties": {
        "pets": {"items": {"$ref": "#/$defs/Pet"}, "type": "array", "maxItems": 3},
        "age": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}], "default": None},
        "kind": {"enum": ["a", "b"], "type": "string"},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1.5},
        "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
        "old": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$", "minLength": 3},
    },
    "required": ["pets"],
    "additionalProperties": False,
    "title": "Owner",
    "type": "object",
}


@pytest.mark.parametrize("schema", [PYDANTIC_LIKE, {}, True, False, {"type": ["string", "null"]}])
def test_well_formed_schemas_pass(schema: Any) -> None:
    assert schema_problem(schema) is None


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": [{}]}, "'type'"),
        ({"properties": {"a": {"type": "banana"}}}, "'properties.a.type'"),  # no JSON Schema type
        ({"type": ["string", "str"]}, "'type'"),
        ({"type": []}, "'type'"),
        ({"type": 5}, "'type'"),
        ({"properties": {"a": {"type": [[]]}}}, "'properties.a.type'"),
        ({"properties": []}, "'properties'"),
        ({"properties": {"a": "string"}}, "'properties.a'"),
        ({"required": "a"}, "'required'"),
        ({"required": [["a"]]}, "'required'"),
        ({"minLength": None}, "'minLength'"),
        ({"maxItems": -1}, "'maxItems'"),
        ({"maxLength": True}, "'maxLength'"),
        ({"minimum": "0"}, "'minimum'"),
        ({"exclusiveMaximum": [1]}, "'exclusiveMaximum'"),
        ({"pattern": 5}, "'pattern'"),
        ({"format": ["date"]}, "'format'"),
        ({"$ref": {"x": 1}}, "'$ref'"),
        ({"enum": "a"}, "'enum'"),
        ({"uniqueItems": "yes"}, "'uniqueItems'"),
        ({"anyOf": {"type": "string"}}, "'anyOf'"),
        ({"oneOf": [{"type": "string"}, {"type": [[]]}]}, "'oneOf[1].type'"),
        ({"items": [{"type": "string"}, 5]}, "'items[1]'"),
        ({"$defs": {"d": {"required": 1}}}, "'$defs.d.required'"),
        ({"additionalProperties": {"minItems": 1.5}}, "'additionalProperties.minItems'"),
        ([], "'the schema'"),
    ],
)
def test_malformed_schemas_name_where(schema: Any, where: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None and problem.startswith(where), problem


def test_nesting_is_bounded_not_a_recursion_error() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(5000):
        schema = {"properties": {"a": schema}}
    problem = schema_problem(schema) or ""
    assert problem.endswith(f".properties.a' is nested more than {MAX_SCHEMA_DEPTH} levels deep")
    assert len(problem) < 120  # the path's end only, not 64 levels of it


def test_alternatives_are_bounded_as_a_grammar_can_take_them() -> None:
    values = [f"v{i}" for i in range(MAX_ALTERNATIVES)]
    assert schema_problem({"type": "string", "enum": values}) is None  # a long real enum stays fine
    assert schema_problem({"properties": {"a": {"enum": [*values, "one more"]}}}) == (
        "'properties.a.enum' has 1001 values, more than this server's grammar limit of 1000"
    )
    branches = [{"const": v} for v in values]
    assert schema_problem({"anyOf": branches}) is None
    assert (schema_problem({"oneOf": [*branches, {"const": 1}]}) or "").startswith("'oneOf' has 1001 branches")
    # each list within its bound, too many in all: each becomes grammar text
    wide = {"properties": {f"p{i}": {"enum": values} for i in range(MAX_SCHEMA_ALTERNATIVES // MAX_ALTERNATIVES + 1)}}
    assert schema_problem(wide) == (
        "the schema has 11000 enum values and anyOf/oneOf branches in all, more than this server's grammar limit "
        "of 10000"
    )
