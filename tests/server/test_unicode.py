"""Unicode end to end with the real SmolLM2: multibyte output (CJK, emoji, combining marks) streamed
over SSE is never split or mangled, and a stop string of multibyte characters works on both APIs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.helpers import LiveServer

MODEL = "smollm2-135m-instruct-q4_1"
ASK = [
    {"role": "system", "content": "You repeat the user's text exactly."},
    {"role": "user", "content": "Repeat exactly: 東京は日本の首都です。🎉 Café naïve — 北京 😀"},
]
pytestmark = pytest.mark.slow


def _openai_stream(live: LiveServer, body: dict[str, object]) -> str:
    with live.http() as http, http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        deltas = []
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:])["choices"]:
                    deltas.append(choice["delta"].get("content") or "")
    assert all("\ufffd" not in d for d in deltas), deltas
    return "".join(deltas)


def _anthropic_stream(live: LiveServer, body: dict[str, object]) -> tuple[str, dict[str, object]]:
    text, stop = "", {}
    with live.http() as http, http.stream("POST", "/v1/messages", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "content_block_delta":
                    assert "\ufffd" not in event["delta"]["text"]
                    text += event["delta"]["text"]
                elif event["type"] == "message_delta":
                    stop = event["delta"]
    return text, stop


def test_multibyte_output_streams_whole_and_multibyte_stop_strings_cut_it(live: LiveServer, smollm2: Path) -> None:
    body = {"model": MODEL, "messages": ASK, "max_tokens": 48, "temperature": 0}
    with live.http() as http:
        whole = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert "\ufffd" not in whole
    wide = [c for c in whole if ord(c) >= 0x800]
    assert wide, f"the model wrote no multibyte text: {whole!r}"
    assert _openai_stream(live, body) == whole, "the stream's deltas join to the same text"

    stop = wide[len(wide) // 2]  # a character of three or four bytes, not at the start
    cut = whole[: whole.index(stop)]
    with live.http() as http:
        stopped = http.post("/v1/chat/completions", json={**body, "stop": [stop]}).json()["choices"][0]
    assert stopped["finish_reason"] == "stop" and stopped["message"]["content"] == cut
    assert _openai_stream(live, {**body, "stop": [stop]}) == cut

    anthropic_body = {"model": MODEL, "max_tokens": 48, "temperature": 0, "system": ASK[0]["content"],
                      "messages": ASK[1:], "stop_sequences": [stop]}  # fmt: skip
    with live.http() as http:
        message = http.post("/v1/messages", json=anthropic_body).json()
    assert message["stop_reason"] == "stop_sequence" and message["stop_sequence"] == stop
    assert "".join(b["text"] for b in message["content"] if b["type"] == "text") == cut
    text, delta = _anthropic_stream(live, anthropic_body)
    assert text == cut and delta["stop_sequence"] == stop


# combining marks (e + acute, n + tilde, a Devanagari conjunct), a ZWJ family, a flag, Hangul
FORCED = "e\u0301 n\u0303 \u0915\u094d\u0937 \U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f1ef\U0001f1f5 한국어"


def test_combining_marks_and_emoji_sequences_stream_intact(live: LiveServer, smollm2: Path) -> None:
    """A JSON schema makes the model write them (tokens that split inside a character or a
    sequence); the stream carries exactly those code points, unnormalised, in valid UTF-8."""
    schema = {"type": "object", "properties": {"text": {"enum": [FORCED]}}, "required": ["text"]}
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": 120,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "text", "schema": schema}},
    }
    streamed = _openai_stream(live, body)
    assert FORCED in streamed and json.loads(streamed) == {"text": FORCED}
    with live.http() as http:
        whole = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert whole == streamed
