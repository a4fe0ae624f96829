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
