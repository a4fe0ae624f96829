"""Hostile request bodies and headers on both APIs: every answer is the API's error shape (or a real
answer), never a 5xx, and the model's runner never crashes.

The cases run against the app in this process (Litestar's test client, real runner processes for the
tiny models); most fail validation before a model is touched. SPARK_FUZZ_CASES sets the cases per
API (1,000 by default: 2,000 in all).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from server.helpers import server_settings
from spark.library import Library
from spark.server.app import create_app
from spark.server.state import ServerState
from spark.store.db import Database
from spark.store.keys import KeyTable

CASES = int(os.environ.get("SPARK_FUZZ_CASES", "1000"))
MAX_TOKENS_LIMIT = 8  # requests that are valid generate a few tokens at most


@dataclass
class Target:
    client: TestClient[Any]
    state: ServerState
    key: str
    chat: str
    embed: str
    sent: dict[str, int] = field(default_factory=dict)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path, tiny_bert: Path) -> Iterator[Target]:
    settings = server_settings(
        tmp_path_factory.mktemp("fuzz"),
        SPARK_MAX_TOKENS_LIMIT=str(MAX_TOKENS_LIMIT),
        SPARK_CONTEXT_LENGTH="512",
        SPARK_PARALLEL="2",
        SPARK_MAX_BODY_SIZE="4MiB",
        SPARK_LOG_LEVEL="error",
    )
    with Library(settings) as library:
        chat, embed = library.add_local(tiny_llama).id, library.add_local(tiny_bert).id
    key = KeyTable(Database(settings.db_path)).create("fuzz")[1]
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False, timeout=60) as client:
        yield Target(client, app.state.spark, key, chat, embed)


# --- values -------------------------------------------------------------------

# every code point, lone surrogates and NUL included
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=24)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, any_text)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)


def nested(depth: int, leaf: Any, key: str | None) -> Any:
    """`leaf` inside `depth` levels of arrays (key None) or of objects under `key`."""
    value = leaf
    for _ in range(depth):
        value = [value] if key is None else {key: value}
    return value


def deep_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


depths = st.sampled_from([3, 30, 60, 70, 300])  # JSON nesting up to 600 (and 100,000 in raw bodies)
# JSON schema keywords holding any values (`"type": [{}]`, `"required": "a"`), nested as schemas nest
SCHEMA_KEYWORDS = [
    "type", "properties", "required", "items", "prefixItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
    "$defs", "minLength", "maxLength", "minimum", "exclusiveMaximum", "pattern", "format", "additionalProperties",
    "minItems", "maxItems", "minProperties", "uniqueItems",
]  # fmt: skip
keyword_values = json_values | st.sampled_from([[{}], [[]], ["string", {}], "a", None, -1, 1.5, True, {}, []])
schema_like = st.recursive(
    st.dictionaries(st.sampled_from(SCHEMA_KEYWORDS), keyword_values, max_size=4),
    lambda inner: st.dictionaries(
        st.sampled_from(SCHEMA_KEYWORDS),
        inner | st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
        max_size=4,
    ),
    max_leaves=10,
)
schemas = st.builds(deep_schema, depths) | json_values | schema_like
hostile_values = st.one_of(
    json_values,
    st.builds(nested, depths, scalars, st.sampled_from([None, "a", "type"])),
    st.builds(deep_schema, depths),
)


# --- bodies -------------------------------------------------------------------

USER = {"role": "user", "content": "hi"}


def openai_bases(t: Target) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("/v1/chat/completions", {"model": t.chat, "messages": [USER], "max_tokens": 2}),
        ("/v1/chat/completions", {"model": t.chat, "messages": [USER], "max_tokens": 2, "stream": True}),
        ("/v1/chat/completions", {"model": t.chat, "messages": [USER], "max_tokens": 2, "store": True, "n": 2}),
        ("/v1/chat/completions/chatcmpl-fuzz", {"metadata": {"topic": "fuzz"}}),
        ("/completion", {"model": t.chat, "prompt": "hi", "n_predict": 2, "n_probs": 1}),
        ("/completion", {"model": t.chat, "prompt": [1, 2], "n_predict": 2, "stream": True}),
        ("/infill", {"model": t.chat, "input_prefix": "a", "input_suffix": "b", "n_predict": 2}),
        ("/completion", {"model": t.chat, "prompt": ["a", [1, "b"]], "n_predict": 2, "grammar": 'root ::= "x"'}),
        ("/embedding", {"model": t.embed, "content": ["a", "b"]}),
        ("/v1/rerank", {"model": t.embed, "query": "q", "documents": ["d", {"text": "e"}], "top_n": 1}),
        ("/v1/responses", {"model": t.chat, "input": [USER], "max_output_tokens": 2}),
        ("/v1/responses", {"model": t.chat, "input": "hi", "max_output_tokens": 2, "stream": True}),
        ("/v1/completions", {"model": t.chat, "prompt": "hi", "max_tokens": 2}),
        ("/v1/embeddings", {"model": t.embed, "input": "hi"}),
        ("/v1/responses", {"model": t.chat, "input": "hi", "max_output_tokens": 2, "background": True}),
        ("/v1/batches", {"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h"}),
    ]


def anthropic_bases(t: Target) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("/v1/messages", {"model": t.chat, "messages": [USER], "max_tokens": 2}),
        ("/v1/messages", {"model": t.chat, "messages": [USER], "max_tokens": 2, "stream": True}),
        ("/v1/messages/count_tokens", {"model": t.chat, "messages": [USER]}),
        (
            "/v1/messages/batches",
            {"requests": [{"custom_id": "a", "params": {"model": t.chat, "messages": [USER], "max_tokens": 2}}]},
        ),
    ]


FIELDS = [
    "model", "messages", "max_tokens", "max_completion_tokens", "stream", "stop", "stop_sequences", "temperature",
    "top_p", "top_k", "seed", "logit_bias", "tools", "tool_choice", "response_format", "system", "thinking",
    "prompt", "input", "n", "keep_alive", "stream_options", "output_config", "reasoning_effort", "dimensions",
    "instructions", "max_output_tokens", "text", "reasoning", "parallel_tool_calls", "background", "requests",
    "input_file_id", "endpoint",
]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """`base` with a few hostile changes, or something that is not a request at all."""
    body = dict(base)
    for _ in range(draw(st.integers(1, 3))):  # at least one change: most cases never reach a model
        kind = draw(st.sampled_from(["set", "drop", "unknown", "message", "many", "schema", "tool"]))
        name = draw(st.sampled_from(FIELDS))
        if kind == "set":
            body[name] = draw(hostile_values)
        elif kind == "drop":
            body.pop(name, None)
        elif kind == "unknown":
            body[draw(any_text)] = draw(json_values)
        elif kind == "message":
            message = {"role": draw(st.sampled_from(["user", "assistant", "system", "tool", "x"]))}
            message[draw(st.sampled_from(["content", "tool_calls", "name", "tool_call_id"]))] = draw(hostile_values)
            if draw(st.booleans()):  # a Responses API item
                message["type"] = draw(
                    st.sampled_from(["message", "function_call", "function_call_output", "reasoning"])
                )
                message[draw(st.sampled_from(["call_id", "arguments", "output", "summary"]))] = draw(hostile_values)
            field = "input" if isinstance(base.get("input"), list) else "messages"
            body[field] = [*([USER] if draw(st.booleans()) else []), message]
        elif kind == "many":  # huge lists: messages, stop strings
            n = draw(st.sampled_from([17, 1000, 10_000]))
            body[draw(st.sampled_from(["messages", "stop", "stop_sequences", "tools", "input"]))] = (
                [USER] * n if draw(st.booleans()) else [draw(any_text) or "x"] * n
            )
        elif kind == "schema":
            schema = draw(schemas)
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
            body["text"] = {"format": {"type": "json_schema", "name": "x", "schema": schema}}
        else:
            parameters = draw(schemas)
            tool = draw(st.just("f") | any_text)
            body["tools"] = [
                {"type": "function", "function": {"name": tool, "parameters": parameters}},
                {"type": "function", "name": tool, "parameters": parameters},  # the Responses API's
                {"name": tool, "input_schema": parameters},
            ][draw(st.integers(0, 2)) :]
    return body


def encoded(value: Any) -> bytes:
    """JSON text of `value` (lone surrogates as escapes, NaN as NaN: both as hostile clients send them)."""
    return json.dumps(value).encode()


raw_bodies = st.one_of(
    st.binary(max_size=64),
    st.just(b"{" * 100_000),
    st.just(b"[" * 100_000 + b"]" * 100_000),
    st.just(b'{"model": "\\ud800", "messages": [{"role": "user", "content": "\\udfff\\u0000"}]}'),
    st.just(b'{"model": 1e999999, "max_tokens": 1e999999}'),
)

header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=40).map(
    lambda t: t.encode("latin-1")
)
hostile_headers = st.dictionaries(
    st.sampled_from(
        ["content-type", "anthropic-version", "anthropic-beta", "x-request-id", "accept", "openai-beta", "x-api-key"]
    ),
    header_text,
    max_size=3,
)


def check(t: Target, path: str, body: bytes, headers: dict[str, Any], shape: str) -> None:
    auth = {"x-api-key": t.key} if shape == "anthropic" else {"authorization": f"Bearer {t.key}"}
    response = t.client.post(path, content=body, headers={**auth, **headers})
    t.sent[shape] = t.sent.get(shape, 0) + 1
    assert response.status_code < 500, (response.status_code, response.text[:500], body[:300], headers)
    if response.status_code >= 400:
        error = response.json()
        if shape == "openai":
            assert set(error["error"]) == {"message", "type", "param", "code"}, error
        else:
            assert error["type"] == "error" and set(error["error"]) == {"type", "message"}, error
    elif response.headers.get("content-type", "").startswith("text/event-stream"):
        # an accepted stream runs to its end: no error event after the 200 (the case was valid)
        for line in response.text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                assert "error" not in event and event.get("type") != "error", (event, body[:300])


FUZZ = settings(
    max_examples=CASES,
    deadline=None,
    derandomize=True,  # the same cases on every run: a failure is reproducible
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_hostile_requests_never_get_a_5xx(target: Target, shape: str) -> None:
    bases = openai_bases(target) if shape == "openai" else anthropic_bases(target)

    @FUZZ
    @given(
        data=st.data(),
        base=st.sampled_from(bases),
        raw=st.none() | raw_bodies,
        headers=hostile_headers,
    )
    def case(data: st.DataObject, base: tuple[str, dict[str, Any]], raw: bytes | None, headers: dict[str, Any]) -> None:
        path, body = base
        if shape == "anthropic":
            headers = {"anthropic-version": "2023-06-01", **headers}
        content = raw if raw is not None and data.draw(st.booleans()) else encoded(data.draw(mutated(body)))
        check(target, path, content, headers, shape)

    case()
    assert target.sent[shape] >= CASES


def test_no_runner_crashed_under_the_fuzz(target: Target) -> None:
    assert sum(target.sent.values()) >= 2 * CASES
    runners = target.state.scheduler.runners()
    assert runners, "valid cases reached a model"
    for runner in runners:
        assert runner.status == "ready" and runner.restarts == 0, runner
