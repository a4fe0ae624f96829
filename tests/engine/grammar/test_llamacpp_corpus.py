"""llama.cpp's own JSON-schema-to-grammar cases, run through our converter.

Each case of llamacpp_schema_cases.json (see its `origin` and `license`) ends in
one class:

- "agree": we refuse what llama.cpp refuses, or we both accept the schema and
  a sampled cross-check finds no difference: values written by llama.cpp's
  expected grammar are valid JSON for the schema and our grammar accepts them
  and llama.cpp's grammar accepts what ours writes (both compacted: how
  much whitespace goes where is no difference);
- "differ": we both accept it but the grammars differ, on purpose: each such
  case is listed in DIFFER with the reason;
- "refused": llama.cpp accepts it and we refuse it with a 400 naming
  `response_format` (listed in REFUSED with the reason).

The test fails when a case changes class. Whatever the class, every value our
grammar writes must validate against the schema, and every expected grammar
of llama.cpp's must pass our GBNF checker (llama.cpp's test checks that its
own parser reads them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from engine.grammar.driver import FORMATS, Driver
from spark.engine.grammar import Grammar, check_gbnf, schema_grammar
from spark.errors import InvalidRequest

CASES: list[dict[str, Any]] = json.loads(Path(__file__).with_name("llamacpp_schema_cases.json").read_text())["cases"]
SEEDS = range(10)  # values sampled from each grammar

_NAMED_ONLY = (
    "where a schema names properties we write only those (additional ones are valid, never written); "
    "llama.cpp also writes additional keys"
)

# Cases both converters accept, whose grammars differ on purpose.
DIFFER = {
    "max -5": "llama.cpp's grammar writes leading zeros (-007), which is not JSON",
    "exotic formats": "tuple items are optional: we allow shorter arrays, llama.cpp requires all; its dates also "
    "allow 31 days in every month",
    "tuple1": "prefixItems does not require its items: we allow shorter arrays, llama.cpp requires them all",
    "tuple2": "prefixItems does not require its items: we allow shorter arrays, llama.cpp requires them all",
    "min + maxItems": "llama.cpp's exponents are unbounded (1e818 overflows to infinity); ours have 2 digits",
    "regexp quote": "llama.cpp writes a pattern's \" raw inside the JSON string (invalid JSON); we escape it",
    "regexp": "llama.cpp's . writes control characters raw in the JSON string (invalid JSON); ours leaves them out",
    "required props in original order": "we write required properties in 'required' order, llama.cpp in "
    "'properties' order",
    "required + optional props each in original order": "we write required properties in 'required' order, "
    "llama.cpp in 'properties' order",
    "required + additional props": _NAMED_ONLY,
    "optional + additional props": _NAMED_ONLY,
    "required + optional + additional props": _NAMED_ONLY,
    "optional props with empty name": "llama.cpp's expected grammar names the empty property's rule 'root', so "
    "its root is an integer, not the object",
    "optional props with nested names": _NAMED_ONLY,
    "optional props with common prefix": _NAMED_ONLY,
    "mix of allOf, anyOf and $ref (similar to https://json.schemastore.org/tsconfig.json)": "properties that are "
    "not required are optional: we may leave out a and b, llama.cpp requires them",
    "unanchored regexp": "llama.cpp drops an unanchored pattern (any string); ours writes strings the pattern "
    "matches whole",
    "regexp with unsupported shorthand": "llama.cpp drops a pattern with \\w (any string); ours enforces it",
}
# Cases llama.cpp accepts and we refuse with a clear 400 naming the parameter.
REFUSED = {
    "string array": "prefixItems is an object, not a list of schemas: an invalid schema",
    "nullable string array": "prefixItems is an object, not a list of schemas: an invalid schema",
    "array with empty items and prefixItems": "prefixItems is an object, not a list of schemas: an invalid schema",
    "unsupported regexp in a property": "a lookahead cannot be enforced; llama.cpp drops the pattern",
}


def validator(schema: Any) -> jsonschema.protocols.Validator:
    """A validator for the draft the schema is written in (a list for `items` is draft 7)."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:
        return jsonschema.Draft7Validator(schema, format_checker=FORMATS)
    return jsonschema.Draft202012Validator(schema, format_checker=FORMATS)


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def samples(driver: Driver, grammar: Grammar) -> Iterator[str]:
    """Texts the grammar allows, one per seed (none for a seed that writes past the step limit)."""
    for seed in SEEDS:
        try:
            yield driver.walk(grammar, seed, max_steps=400)
        except AssertionError:
            continue


def classify(driver: Driver, case: dict[str, Any]) -> str:
    """The class of one case (see the module's docstring), checking what holds for every class."""
    schema = case["schema"]
    if case["grammar"]:
        check_gbnf(case["grammar"])
    try:
        ours = schema_grammar(schema)
    except InvalidRequest as e:
        assert e.param == "response_format" and e.message
        return "agree" if case["status"] == "failure" else "refused"
    if case["status"] == "failure":
        return "accepted what llama.cpp refuses"
    check = validator(schema)
    for text in samples(driver, ours):
        check.validate(json.loads(text))
    if not case["grammar"]:
        return "agree"
    theirs = Grammar(case["grammar"], "response_format")
    for text in samples(driver, ours):
        if not driver.accepts(theirs, compact(json.loads(text))):
            return "differ"
    for text in samples(driver, theirs):
        try:
            value = json.loads(text)
        except ValueError:
            return "differ"
        if not check.is_valid(value) or not driver.accepts(ours, compact(value)):
            return "differ"
    return "agree"


def expected(name: str) -> str:
    return "differ" if name in DIFFER else "refused" if name in REFUSED else "agree"


def test_the_corpus_is_whole_and_every_listed_case_is_in_it() -> None:
    names = {c["name"] for c in CASES}
    assert len(CASES) == len(names) == 82
    assert not (DIFFER.keys() | REFUSED.keys()) - names
    assert all(c["status"] in ("success", "failure") for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_case_keeps_its_class(driver: Driver, case: dict[str, Any]) -> None:
    assert classify(driver, case) == expected(case["name"])
