"""Every error comes back in its API's shape, with the right status and param; never a traceback."""

from __future__ import annotations

import gzip
import json

import anthropic
import openai
import pytest

from server.helpers import (
    MAX_BODY,
    MAX_TOKENS_LIMIT,
    LiveServer,
    Models,
    anthropic_error,
    openai_error,
)

CHAT = [{"role": "user", "content": "hi"}]
UNKNOWN = "The model 'no-such-model' does not exist on this server (see GET /v1/models)."


def test_unknown_model(live: LiveServer) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        live.openai().chat.completions.create(model="no-such-model", messages=CHAT)  # type: ignore[arg-type]
    assert e.value.status_code == 404
    assert e.value.body == {
        "message": UNKNOWN,
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    with pytest.raises(anthropic.NotFoundError) as a:
        live.anthropic().messages.create(model="no-such-model", max_tokens=5, messages=CHAT)  # type: ignore[arg-type]
    assert a.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": f"model: no-such-model. {UNKNOWN}"},
    }
    with live.http() as http:
        streamed = http.post("/v1/chat/completions", json={"model": "no-such-model", "messages": CHAT, "stream": True})
        assert openai_error(streamed, 404)["code"] == "model_not_found", "a stream fails before it starts"
        embedded = http.post("/v1/embeddings", json={"model": "no-such-model", "input": "x"})
        assert openai_error(embedded, 404)["message"] == UNKNOWN


def test_invalid_bodies(live: LiveServer, models: Models) -> None:
    with live.http() as http:
        error = openai_error(http.post("/v1/chat/completions", content=b'{"model": '), 400)
        assert error["type"] == "invalid_request_error" and "not valid JSON" in error["message"]
        error = anthropic_error(http.post("/v1/messages", content=b'{"model": "x", '), 400)
        assert error["type"] == "invalid_request_error" and "not valid JSON" in error["message"]

        wrong_type = {"model": models.chat, "messages": [{"role": "user", "content": 42}]}
        assert openai_error(http.post("/v1/chat/completions", json=wrong_type), 400)["param"] == "messages[0].content"
        error = openai_error(http.post("/v1/chat/completions", json={"model": models.chat}), 400)
        assert error["param"] == "messages" and error["message"] == "Missing required parameter: 'messages'."
        error = openai_error(
            http.post("/v1/chat/completions", json={"model": models.chat, "messages": CHAT, "n": 17}), 400
        )
        assert error["param"] == "n"
        error = anthropic_error(http.post("/v1/messages", json={"model": models.chat, "messages": CHAT}), 400)
        assert "max_tokens" in error["message"]
        error = anthropic_error(
            http.post("/v1/messages", json={"model": models.chat, "max_tokens": "x", "messages": CHAT}), 400
        )
        assert "max_tokens" in error["message"]
        error = openai_error(http.post("/v1/embeddings", json={"model": models.embed, "input": []}), 400)
        assert error["param"] == "input"
        # each model does its own kind of work on OpenAI's routes (Ollama's embed with a chat model too)
        error = openai_error(http.post("/v1/embeddings", json={"model": models.chat, "input": "hi"}), 400)
        assert error["param"] == "model" and "/v1/embeddings takes an embedding model" in error["message"]
        error = openai_error(http.post("/v1/chat/completions", json={"model": models.embed, "messages": CHAT}), 400)
        assert error["param"] == "model" and "cannot generate text" in error["message"]
        error = anthropic_error(
            http.post("/v1/messages", json={"model": models.embed, "max_tokens": 5, "messages": CHAT}), 400
        )
        assert "cannot generate text" in error["message"]

        # Python reads any integer; the runner's protocol carries 64 bits (found by tests/server/test_fuzz.py)
        schema = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"x": -(2**63) - 1}}}
        huge = {"model": models.chat, "messages": CHAT, "response_format": schema}
        error = openai_error(http.post("/v1/chat/completions", json=huge), 400)
        assert error["param"] == "response_format.json_schema.schema.x"
        huge = {"model": models.chat, "max_tokens": 5, "messages": CHAT, "output_config": {"format": schema}}
        assert "does not fit in 64 bits" in anthropic_error(http.post("/v1/messages", json=huge), 400)["message"]
        # a token id beyond 64 bits as logit_bias's key: once a 500 that left the request in the runner's
        # table for ever, until the hang watchdog restarted the runner and the model failed
        bias = {"logit_bias": {str(2**70): 5}, "max_tokens": 2}
        for path, body in (
            ("/v1/chat/completions", {"model": models.chat, "messages": CHAT, **bias}),
            ("/v1/completions", {"model": models.chat, "prompt": "hi", **bias}),
            ("/completion", {"model": models.chat, "prompt": "hi", **bias}),
        ):
            assert openai_error(http.post(path, json=body), 400)["param"] == "logit_bias", path
        assert all(r.in_flight == 0 for r in live.runners())

        # bytes that are not UTF-8 in a key no field reads, and a compressed body, are named as such
        keyed = b'{"\xff\xfemodel": "x", "model": "%s", "messages": [{"role": "user", "content": "hi"}]}'
        error = openai_error(http.post("/v1/chat/completions", content=keyed % models.chat.encode()), 400)
        assert "invalid UTF-8" in error["message"]
        packed = gzip.compress(json.dumps({"model": models.chat, "max_tokens": 5, "messages": CHAT}).encode())
        error = anthropic_error(http.post("/v1/messages", content=packed, headers={"content-encoding": "gzip"}), 400)
        assert error["message"].startswith("body is gzip-compressed")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dry_multiplier", -1),
        ("dry_base", 0.5),
        ("dry_allowed_length", -1),
        ("dry_penalty_last_n", -2),
        ("repeat_last_n", "all"),
        ("repeat_penalty", 0),
        ("min_p", 1.5),
    ],
)
def test_bad_sampling_extensions(live: LiveServer, models: Models, field: str, value: object) -> None:
    with live.http() as http:
        body = {"model": models.chat, "messages": CHAT, "max_tokens": 2, field: value}
        assert openai_error(http.post("/v1/chat/completions", json=body), 400)["param"] == field
        assert field in anthropic_error(http.post("/v1/messages", json=body), 400)["message"]


def test_sampling_extensions_from_the_sdks(live: LiveServer, models: Models) -> None:
    guard = {"dry_multiplier": 0.8, "dry_penalty_last_n": -1, "repeat_penalty": 1.1, "repeat_last_n": 32, "min_p": 0.1}
    answer = live.openai().chat.completions.create(
        model=models.chat,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=4,
        extra_body=guard,
    )
    assert answer.usage is not None and answer.usage.completion_tokens == 4
    message = live.anthropic().messages.create(
        model=models.chat,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=4,
        extra_body=guard,
    )
    assert message.usage.output_tokens == 4


def test_max_tokens_over_the_limit(live: LiveServer, models: Models) -> None:
    too_many = MAX_TOKENS_LIMIT + 1
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().chat.completions.create(model=models.chat, messages=CHAT, max_tokens=too_many)  # type: ignore[arg-type]
    assert e.value.body["param"] == "max_tokens"  # type: ignore[index]
    assert str(MAX_TOKENS_LIMIT) in e.value.body["message"]  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as a:
        live.anthropic().messages.create(model=models.chat, messages=CHAT, max_tokens=too_many)  # type: ignore[arg-type]
    assert "max_tokens" in a.value.body["error"]["message"]  # type: ignore[index]


def test_context_length_exceeded(live: LiveServer, models: Models) -> None:
    long = [{"role": "user", "content": "word " * 2000}]  # the tiny model's context holds 512 tokens
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            result = live.openai().chat.completions.create(model=models.chat, messages=long, stream=stream)  # type: ignore[call-overload]
            list(result) if stream else None
        assert e.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
        assert e.value.body["message"].startswith("This model's maximum context length is 512 tokens")  # type: ignore[index]
        # 512 is all the tiny model was trained for: no advice to raise it
        assert e.value.body["message"].endswith("512 tokens is as long as this model's context goes.")  # type: ignore[index]
        assert e.value.param == "messages"  # type: ignore[attr-defined]
    with pytest.raises(anthropic.BadRequestError) as a:
        live.anthropic().messages.create(model=models.chat, max_tokens=5, messages=long)  # type: ignore[arg-type]
    # each API in its own words, which clients recognise an overflow by (to trim or compact)
    assert a.value.body["error"]["message"].startswith("prompt is too long: ")  # type: ignore[index]
    assert "tokens > 512 maximum" in a.value.body["error"]["message"]  # type: ignore[index]
    # each API names what holds its prompt, the Responses API streamed or not
    client = live.openai()
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            result = client.responses.create(model=models.chat, input=long[0]["content"], stream=stream)
            list(result) if stream else None  # type: ignore[call-overload]
        assert (e.value.code, e.value.param) == ("context_length_exceeded", "input")  # type: ignore[attr-defined]
        assert "Shorten 'input'" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=models.chat, prompt=long[0]["content"], max_tokens=1)
    assert (e.value.code, e.value.param) == ("context_length_exceeded", "prompt")  # type: ignore[attr-defined]
    # a short chat with many tools says what takes the room
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing " * 10, "parameters": {}}}
        for i in range(12)
    ]
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().chat.completions.create(model=models.chat, messages=CHAT, tools=tools)  # type: ignore[arg-type]
    assert "or send fewer tools (the definitions of its 12 tools take " in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=models.embed, input=["hi", "word " * 3000])
    assert (e.value.code, e.value.param) == ("context_length_exceeded", "input[1]")  # type: ignore[attr-defined]


def test_body_too_large(live: LiveServer, models: Models) -> None:
    big = {"model": models.chat, "messages": [{"role": "user", "content": "x" * MAX_BODY}]}
    with live.http() as http:
        error = openai_error(http.post("/v1/chat/completions", json=big), 413)
        assert error["code"] == "request_too_large"
        assert "(256.0 KiB, the max_body_size setting)" in error["message"]
        error = anthropic_error(http.post("/v1/messages", json={**big, "max_tokens": 4}), 413)
        assert error["type"] == "request_too_large"


def test_routes_and_methods_that_do_not_exist(live: LiveServer) -> None:
    with live.http() as http:
        error = openai_error(http.get("/v1/nothing"), 404)
        assert error["code"] == "not_found" and "/v1/nothing" in error["message"]
        assert "docs/compatibility.md lists the routes" in error["message"]
        assert "APIs are under /v1" in openai_error(http.get("/chat/completions"), 404)["message"]
        error = openai_error(http.put("/v1/chat/completions"), 405)
        assert error["code"] == "method_not_allowed"
        error = anthropic_error(http.delete("/v1/messages"), 405)
        assert error["type"] == "invalid_request_error"


def test_a_bug_is_a_generic_500_in_the_api_shape(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(live.state.library, "list", broken)
    with live.http() as http:
        response = http.get("/v1/models")
        error = openai_error(response, 500)
        assert error["type"] == "server_error" and "secret internals" not in response.text
        assert response.headers["x-request-id"] in error["message"], "the id to find it in the log"
        error = anthropic_error(http.get("/v1/models", headers={"anthropic-version": "2023-06-01"}), 500)
        assert error["type"] == "api_error"
    assert any(
        "secret internals" in (r.exc_text or "") or r.exc_info for r in caplog.records if r.name == "spark.server"
    )
