"""JSON schema to GBNF: what the grammars accept (checked by llama.cpp itself), what they
generate (validated with jsonschema), and what is refused before llama.cpp sees it."""

from __future__ import annotations

import ctypes
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from llama_cpp import llama_cpp as lc

from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.grammar import (
    Grammar,
    GrammarError,
    SchemaError,
    check_gbnf,
    create_sampler,
    schema_grammar,
)
from spark.engine.native import Model
from spark.errors import InvalidRequest
from spark.types import (
    ChatRequest,
    Done,
    Failed,
    LoadOptions,
    Message,
    ResponseFormat,
    SamplingParams,
)

FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


class Driver:
    """Runs llama.cpp's grammar sampler over the tiny model's vocabulary, without decoding.

    The tiny vocabulary has one token per byte (token id == byte), so any text
    can be fed character by character: `accepts` asks llama.cpp whether a
    grammar allows a text; `walk` samples a random text the grammar allows,
    from the tokens that are whole UTF-8 text (llama.cpp's grammar does not
    check UTF-8, and a real model's text is UTF-8).
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.eos = model.eos
        self.text_tokens = {t for t in range(model.n_vocab) if _utf8(model.piece(t)) and not model.is_eog(t)}

    def _apply(self, sampler: Any, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        arr = np.zeros(len(ids), dtype=_TOKEN_DATA)
        arr["id"], arr["logit"] = ids, logits
        data = lc.llama_token_data_array(
            data=arr.ctypes.data_as(lc.llama_token_data_p), size=len(ids), selected=-1, sorted=False
        )
        lc.llama_sampler_apply(sampler, ctypes.byref(data))
        return arr

    def accepts(self, grammar: Grammar, text: str, *, complete: bool = True) -> bool:
        sampler = create_sampler(self.model, grammar)
        try:
            for byte in text.encode():
                arr = self._apply(sampler, np.array([byte]), np.zeros(1))
                if not np.isfinite(arr["logit"][0]):
                    return False
                lc.llama_sampler_accept(sampler, byte)
            if not complete:
                return True
            arr = self._apply(sampler, np.array([self.eos]), np.zeros(1))
            return bool(np.isfinite(arr["logit"][0]))
        finally:
            lc.llama_sampler_free(sampler)

    def walk(self, grammar: Grammar, seed: int, *, prefix: str = "", stop: float = 0.4, max_steps: int = 600) -> str:
        """A random text the grammar allows, after feeding `prefix`; where it may end, it does so
        with probability `stop`."""
        rng = np.random.default_rng(seed)
        sampler = create_sampler(self.model, grammar)
        n = self.model.n_vocab
        out = b""
        try:
            for byte in prefix.encode():
                lc.llama_sampler_accept(sampler, byte)
            for _ in range(max_steps):
                arr = self._apply(sampler, np.arange(n), rng.standard_normal(n))
                ok = [int(t) for t in arr["id"][np.isfinite(arr["logit"])]]
                text_tokens = [t for t in ok if t in self.text_tokens]
                if self.eos in ok and (not text_tokens or rng.random() < stop):
                    return out.decode()
                token = int(rng.choice(text_tokens))
                lc.llama_sampler_accept(sampler, token)
                out += self.model.piece(token)
            raise AssertionError(f"no end after {max_steps} tokens: {out[:200]!r}")
        finally:
            lc.llama_sampler_free(sampler)


def _utf8(piece: bytes) -> bool:
    try:
        return bool(piece.decode())
    except UnicodeDecodeError:
        return False


@pytest.fixture(scope="module")
def driver(tiny_llama: Path) -> Iterator[Driver]:
    model = Model(str(tiny_llama))
    yield Driver(model)
    model.close()


def generated(driver: Driver, schema: dict[str, Any], seeds: range = range(12)) -> list[Any]:
    """Values sampled from the schema's grammar, each validated against the schema."""
    grammar = schema_grammar(schema)
    values = []
    for seed in seeds:
        value = json.loads(driver.walk(grammar, seed))
        jsonschema.validate(value, schema, format_checker=FORMATS)
        values.append(value)
    return values


# --- checking GBNF ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('root ::= "a" b\n', "undefined rule 'b'"),
        ('start ::= "a"\n', "no 'root' rule"),
        ('root ::= root "a" | "b"\n', "left-recursive"),
        ('root ::= x\nx ::= "a"? root\n', "left-recursive"),
        ('root ::= "a"{0,2001}\n', "above 2000"),
        ('root ::= "a"{3,2}\n', "maximum below its minimum"),
        ('root ::= "\\q"\n', "unknown escape"),
        ("root ::= []\n", "empty character class"),
        ("root ::= [z-a]\n", "bad character range"),
        ('root ::= ( "a"\n', "expecting ')'"),
        ('root ::= "a"\nroot ::= "b"\n', "defined twice"),
        ("root ::= <think>\n", "token references"),
        ("root ::= ( [a-z]{0,50} ){0,50}\n", "more than 2000 rules"),
    ],
)
def test_check_gbnf_refuses_what_llama_cpp_would_refuse_or_misread(text: str, why: str) -> None:
    with pytest.raises(GrammarError, match=re.escape(why)):
        check_gbnf(text)


def test_check_gbnf_accepts_comments_groups_and_nullable_recursion() -> None:
    check_gbnf('# c\nroot ::= x ( "," x )* # trailing\nx ::= "[" x? "]" | [^\\x00-\\x1F"]+\n')


def test_a_refused_grammar_never_reaches_llama_cpp(driver: Driver) -> None:
    with pytest.raises(InvalidRequest) as e:
        create_sampler(driver.model, Grammar('root ::= root "a"\n', "response_format"))
    assert e.value.param == "response_format" and "left-recursive" in e.value.message


# --- what the grammars accept -------------------------------------------------------------


@pytest.mark.parametrize(("lo", "hi"), [(-15, 130), (0, None), (None, -7), (1000, 1234), (5, 5), (-1, 1)])
def test_integer_ranges_accept_exactly_the_integers_inside(driver: Driver, lo: int | None, hi: int | None) -> None:
    schema: dict[str, Any] = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    grammar = schema_grammar(schema)
    for n in [*range(-40, 160), *range(990, 1250, 7), -1000, 100000]:
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert driver.accepts(grammar, str(n)) == inside, n
    assert not driver.accepts(grammar, "007")
    assert not driver.accepts(grammar, "-0" if lo is not None and lo >= 0 else "1.5")


def test_exclusive_bounds_and_float_bounds_on_integers(driver: Driver) -> None:
    grammar = schema_grammar({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 6.5})
    assert [n for n in range(-3, 10) if driver.accepts(grammar, str(n))] == [3, 4, 5, 6]


def test_bounded_numbers_only_write_values_inside(driver: Driver) -> None:
    schema = {"type": "number", "minimum": -2, "exclusiveMaximum": 1}
    grammar = schema_grammar(schema)
    for text, ok in [
        ("-2", True),
        ("-1.5", True),
        ("0.999", True),
        ("1", False),
        ("1.0", False),
        ("-2.5", False),
        ("0", True),
        ("-0.25", True),
        ("1e0", False),
    ]:
        assert driver.accepts(grammar, text) == ok, text
    values = generated(driver, schema, range(30))
    assert any(isinstance(v, float) for v in values)


def test_exclusive_integer_bound_allows_decimals_just_above_it(driver: Driver) -> None:
    grammar = schema_grammar({"type": "number", "exclusiveMinimum": 0, "maximum": 1})
    assert driver.accepts(grammar, "0.5") and driver.accepts(grammar, "1")
    assert not driver.accepts(grammar, "0") and not driver.accepts(grammar, "0.000")


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


@pytest.mark.parametrize(
    "pattern",
    [
        r"^[A-Z]{3}-\d{2,4}$",
        r"^(red|green|blue)$",
        r"^\w{1,8}@\w{1,8}\.(com|org)$",
        r'^a"b\\c[^x]?$',
        r"colou?r",
        r"^\S+ \D*$",
    ],
)
def test_patterns_generate_matching_strings(driver: Driver, pattern: str) -> None:
    for value in generated(driver, {"type": "string", "pattern": pattern}, range(8)):
        assert re.search(pattern, value)


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
        ({"type": "frobnicate"}, "unknown type"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "maxLength below minLength"),
        ({"type": "string", "pattern": "^(?=a)b$"}, "lookarounds"),
        ({"type": "string", "pattern": "(a"}, "invalid regular expression"),
        ({"type": "number", "minimum": 0.2, "maximum": 0.4}, "too narrow"),
        ({"type": "integer", "minimum": 5, "maximum": 4}, "allows no"),
        ({"type": "object", "required": ["x"], "additionalProperties": False}, "requires 'x'"),
        ({"type": "string", "format": "date", "maxLength": 5}, "length limits"),
        ({"anyOf": [{"$ref": "#"}, {"type": "null"}]}, "left-recursive"),
        (False, "allows no value"),
        ([1, 2], "is not a schema"),
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


# --- through the engine, with the tiny model --------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "born": {"type": "string", "format": "date"},
        "id": {"type": "string", "format": "uuid"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["name", "age", "born", "id"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=512)) as e:
        yield e


def chat(fmt: ResponseFormat, seed: int, max_tokens: int = 300) -> ChatRequest:
    return ChatRequest(
        model="tiny",
        messages=[Message("user", "Describe a person as JSON.")],
        response_format=fmt,
        sampling=SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens),
    )


def run(engine: Engine, request: ChatRequest) -> Collector:
    c = Collector()
    engine.submit("r", request, c)
    c.wait()
    return c


def test_generation_with_a_json_schema_always_validates(engine: Engine) -> None:
    for seed in range(4):
        c = run(engine, chat(ResponseFormat("json_schema", PERSON), seed))
        assert isinstance(c.final, Done) and c.final.finish_reason == "stop", c.text
        jsonschema.validate(json.loads(c.text), PERSON, format_checker=FORMATS)


def test_json_mode_output_is_an_object(engine: Engine) -> None:
    for fmt in (ResponseFormat("json_object"), ResponseFormat("json_schema")):  # no schema: JSON mode
        c = run(engine, chat(fmt, seed=5, max_tokens=400))
        if c.final.finish_reason == "stop":  # type: ignore[union-attr]
            assert isinstance(json.loads(c.text), dict)
        else:  # cut by max_tokens: still a prefix of an object
            assert c.text.startswith("{")


def test_a_refused_schema_fails_at_once_and_the_engine_keeps_serving(engine: Engine) -> None:
    c = Collector()
    engine.submit("bad", chat(ResponseFormat("json_schema", {"type": "string", "pattern": "(?<=x)y"}), 1), c)
    # refused on the caller's thread, before the request was queued
    assert c.finished.is_set()
    assert isinstance(c.final, Failed) and c.final.error.param == "response_format"
    ok = run(
        engine,
        chat(
            ResponseFormat(
                "json_schema", {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}
            ),
            2,
        ),
    )
    assert isinstance(ok.final, Done) and json.loads(ok.text)["a"] in (True, False)
