"""Stop strings over HTTP, on both APIs: inside the reasoning they end it (cut before the
string), and they never cut a tool call, whose markup and arguments they do not match."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

import tiny_gguf
from server.helpers import LiveServer, Models

ASK = [{"role": "user", "content": "Think, then answer."}]
ANTHROPIC = {"anthropic-version": "2023-06-01"}
ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}
ADD = {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": ADD_SCHEMA}}
# Every piece of a Hermes call's text: its tags, the JSON's punctuation, the keys, the tool's name.
CALL_PIECES = ["<tool_call>", "</tool_call>", "{", '"', ":", ",", "name", "arguments", "add", '"a"']


@pytest.fixture(scope="module")
def think(served: tuple[LiveServer, Models], tmp_path_factory: pytest.TempPathFactory) -> str:
    """A model whose answers open with a thinking block that the random model never closes."""
    path = tiny_gguf.write_tiny_llama(tmp_path_factory.mktemp("think") / "think.gguf", template="think")
    return served[0].state.library.add_local(path, model_id="stop-think").id


def _free_reasoning(live: LiveServer, model: str) -> str:
    with live.http() as http:
        body = {"model": model, "messages": ASK, "max_tokens": 40, "temperature": 0}
        message = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert message["content"] == "" and len(message["reasoning_content"]) > 30, message
    return str(message["reasoning_content"])


def test_a_stop_string_in_the_reasoning_ends_the_answer_openai(live: LiveServer, think: str) -> None:
    free = _free_reasoning(live, think)
    stop = free[20:24]
    cut = free[: free.index(stop)]
    body = {"model": think, "messages": ASK, "max_tokens": 40, "temperature": 0, "stop": [stop]}
    with live.http() as http:
        choice = http.post("/v1/chat/completions", json=body).json()["choices"][0]
        assert choice["finish_reason"] == "stop"
        assert choice["message"]["reasoning_content"] == cut and not choice["message"]["content"]
        with http.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as response:
            chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == cut
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"


def test_a_stop_string_in_the_thinking_ends_the_answer_anthropic(live: LiveServer, think: str) -> None:
    free = _free_reasoning(live, think)
    stop = free[20:24]
    body = {
        "model": think,
        "messages": ASK,
        "max_tokens": 1100,
        "temperature": 0,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stop_sequences": [stop],
    }
    with live.http() as http:
        message = http.post("/v1/messages", headers=ANTHROPIC, json=body).json()
    assert message["stop_reason"] == "stop_sequence" and message["stop_sequence"] == stop, message
    thinking = [b["thinking"] for b in message["content"] if b["type"] == "thinking"]
    assert thinking == [free[: free.index(stop)]]
    assert not [b for b in message["content"] if b["type"] == "text" and b["text"]]


def test_anthropic_thinks_only_when_asked(live: LiveServer, think: str) -> None:
    """As Anthropic's models: without `thinking` the answer is text (`content[0].text`), no thinking block."""
    _free_reasoning(live, think)  # the model thinks on OpenAI's API, where thinking models think by default
    body = {"model": think, "messages": ASK, "max_tokens": 20, "temperature": 0}
    with live.http() as http:
        message = http.post("/v1/messages", headers=ANTHROPIC, json=body).json()
    assert [b["type"] for b in message["content"]] == ["text"] and message["content"][0]["text"], message


@pytest.mark.parametrize("seed", [1, 2])
def test_stop_strings_never_cut_a_tool_call_openai(live: LiveServer, models: Models, seed: int) -> None:
    body: dict[str, Any] = {
        "model": models.tools,
        "messages": [{"role": "user", "content": "Add 2 and 3."}],
        "tools": [ADD],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": 200,
        "seed": seed,
        "stop": CALL_PIECES[:4],  # OpenAI takes up to four
    }
    with live.http() as http:
        for stops in (CALL_PIECES[:4], CALL_PIECES[4:8], CALL_PIECES[8:]):
            choice = http.post("/v1/chat/completions", json=body | {"stop": stops}).json()["choices"][0]
            assert choice["finish_reason"] == "tool_calls", (stops, choice)
            (call,) = choice["message"]["tool_calls"]
            assert call["function"]["name"] == "add"
            jsonschema.validate(json.loads(call["function"]["arguments"]), ADD_SCHEMA)


def test_stop_sequences_never_cut_a_tool_use_anthropic(live: LiveServer, models: Models) -> None:
    body = {
        "model": models.tools,
        "messages": [{"role": "user", "content": "Add 2 and 3."}],
        "tools": [{"name": "add", "description": "Add two numbers", "input_schema": ADD_SCHEMA}],
        "tool_choice": {"type": "tool", "name": "add", "disable_parallel_tool_use": True},
        "max_tokens": 200,
        "stop_sequences": CALL_PIECES,
    }
    with live.http() as http:
        message = http.post("/v1/messages", headers=ANTHROPIC, json=body).json()
    assert message["stop_reason"] == "tool_use" and message["stop_sequence"] is None, message
    (use,) = [b for b in message["content"] if b["type"] == "tool_use"]
    assert use["name"] == "add"
    jsonschema.validate(use["input"], ADD_SCHEMA)


def test_a_stop_string_in_the_text_still_ends_it_when_tools_are_offered(live: LiveServer, models: Models) -> None:
    body: dict[str, Any] = {"model": models.chat, "messages": ASK, "tools": [ADD], "max_tokens": 30, "temperature": 0}
    with live.http() as http:
        free = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
        stop = free[10:13]
        choice = http.post("/v1/chat/completions", json=body | {"stop": [stop]}).json()["choices"][0]
    assert "tool_calls" not in choice["message"], "the random model answers in text"
    assert choice["finish_reason"] == "stop" and choice["message"]["content"] == free[: free.index(stop)]
