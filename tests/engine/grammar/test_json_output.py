"""JSON mode and JSON schemas through the engine, with the tiny model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from engine.grammar.driver import FORMATS
from engine.helpers import Collector
from spark.engine import Engine
from spark.types import (
    ChatRequest,
    Done,
    Failed,
    LoadOptions,
    Message,
    ResponseFormat,
    SamplingParams,
)

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


# What may end a cut JSON text: the token it stopped in (a string, an escape, a literal, a number),
# then what a member or an element still lacks; `_closers` adds the open brackets' ends.
_TOKEN_ENDS = ("", '"', "0", '0"', '00"', '000"', '0000"', 'n"', "e", "ue", "rue", "lse", "se", "ll", "l")
_MEMBER_ENDS = ("", "0", ":0", '"":0')


def _closers(text: str) -> str:
    """The brackets still open in `text` (outside strings), closed innermost first."""
    stack, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            escaped, in_string = (not escaped and ch == "\\"), in_string and (escaped or ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            stack.pop()
    return "".join(reversed(stack))


def is_json_prefix(text: str) -> bool:
    """True when some ending makes `text` a complete JSON text, i.e. it is a cut JSON document."""
    for token in _TOKEN_ENDS:
        for member in _MEMBER_ENDS:
            candidate = text + token + member
            try:
                json.loads(candidate + _closers(candidate))
                return True
            except (json.JSONDecodeError, IndexError):
                continue
    return False


@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        ('{"a": [1, 2', True),
        ('{"a": "x\\', True),
        ('{"a": tr', True),
        ('{"a": 1, "b', True),
        ('{"a": -', True),
        ('{"a" 1', False),
        ('{"a": 1}}', False),
        ("{]", False),
        ('{"a": [1,, 2', False),
        ("{x", False),
    ],
)
def test_is_json_prefix_tells_cut_json_from_broken(text: str, prefix: bool) -> None:
    assert is_json_prefix(text) is prefix


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
            assert c.text.lstrip().startswith("{") and is_json_prefix(c.text), c.text


def test_a_refused_schema_fails_at_once_and_the_engine_keeps_serving(engine: Engine) -> None:
    c = Collector()
    engine.submit(
        "bad", chat(ResponseFormat("json_schema", {"type": "string", "pattern": "(?<=x)y"}, strict=True), 1), c
    )
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
