"""Ollama's wire format: bodies to spark.types, events to NDJSON lines."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from spark.api import ollama
from spark.api.common import ModelEntry
from spark.errors import ContextLengthExceeded, InvalidRequest, ModelNotFound, Overloaded
from spark.types import (
    ChatRequest,
    CompletionRequest,
    Done,
    PromptDone,
    ReasoningDelta,
    SlotInfo,
    TextDelta,
    TokenChoice,
    TokenLogprob,
    ToolCallDelta,
    Usage,
)


def ticks() -> Callable[[], float]:
    now = [0.0]

    def clock() -> float:
        now[0] += 1e-6
        return now[0]

    return clock


def lines(data: bytes) -> list[dict[str, object]]:
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.splitlines()]


def test_tool_calls_come_whole_with_object_arguments_in_the_last_line() -> None:
    writer = ollama.OllamaStream("m", "chat", clock=ticks())
    out = writer.feed(SlotInfo(0, 5, 0)) + writer.feed(PromptDone(5, 0.002))
    out += writer.feed(ReasoningDelta("hmm"))
    out += writer.feed(ToolCallDelta(0, "c1", "get_weather", '{"city": '))
    out += writer.feed(ToolCallDelta(0, arguments='"Paris"}'))
    out += writer.feed(ToolCallDelta(1, "c2", "now", ""))
    out += writer.feed(Done("tool_calls", Usage(5, 9)))
    first, last = lines(out)
    assert first["message"] == {"role": "assistant", "content": "", "thinking": "hmm"} and first["done"] is False
    assert last["done"] is True and last["done_reason"] == "stop"
    assert last["message"]["tool_calls"] == [  # type: ignore[index]
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"function": {"name": "now", "arguments": {}}},
    ]
    assert (last["prompt_eval_count"], last["eval_count"], last["prompt_eval_duration"]) == (5, 9, 2_000_000)
    assert last["load_duration"] == 1_000 and last["total_duration"] == 3_000
    assert writer.finished and writer.feed(TextDelta("late")) == b""


def test_a_whole_generate_answer_is_one_object_with_logprobs() -> None:
    writer = ollama.OllamaStream("m", "generate", stream=False)
    logprob = TokenLogprob(b"Hi", -0.5, [TokenChoice(b"Hi", -0.5), TokenChoice(b"Yo", -1.5)])
    assert writer.feed(TextDelta("Hi", [logprob])) == b""
    assert writer.feed(TextDelta(" there")) == b""
    (body,) = lines(writer.feed(Done("length", Usage(3, 2))))
    assert body["response"] == "Hi there" and body["done_reason"] == "length" and "message" not in body
    assert body["logprobs"] == [
        {
            "token": "Hi",
            "logprob": -0.5,
            "bytes": [72, 105],
            "top_logprobs": [
                {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                {"token": "Yo", "logprob": -1.5, "bytes": [89, 111]},
            ],
        }
    ]


def test_errors_name_their_parameter_and_overload_is_503() -> None:
    status, body = ollama.error_body(InvalidRequest("Too hot.", param="options.temperature"))
    assert status == 400 and json.loads(body) == {"error": "Too hot. (parameter 'options.temperature')"}
    assert ollama.error_body(Overloaded("busy"))[0] == 503
    writer = ollama.OllamaStream("m", "chat")
    assert lines(writer.fail(ContextLengthExceeded(10, 5))) == [{"error": ContextLengthExceeded(10, 5).message}]
    assert writer.finished


def test_tool_results_are_matched_to_the_calls_they_answer() -> None:
    body = {
        "model": "m:latest",
        "messages": [
            {"role": "user", "content": "weather and time?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"function": {"name": "time", "arguments": {}}},
                    {"function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
                ],
            },
            {"role": "tool", "tool_name": "weather", "content": "cold"},
            {"role": "tool", "content": "noon"},
        ],
        "think": "high",
        "format": "json",
        "options": {
            "num_predict": -1,
            "stop": "END",
            "min_p": 0.1,
            "num_ctx": 99999,
            "mirostat": 2,
            "mirostat_tau": 3.0,
            "typical_p": 0.9,
        },
    }
    call = ollama.parse_chat(json.dumps(body).encode())
    request = call.request
    assert isinstance(request, ChatRequest) and call.stream and call.model == "m"
    calls = request.messages[1].tool_calls or []
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("time", {}), ("weather", {"city": "Oslo"})]
    assert request.messages[2].tool_call_id == calls[1].id and request.messages[3].tool_call_id == calls[0].id
    assert request.reasoning is not None and request.reasoning.effort == "high"
    assert request.response_format is not None and request.response_format.type == "json_object"
    sampling = request.sampling
    assert (sampling.max_tokens, sampling.stop, sampling.min_p) == (None, ["END"], 0.1)
    assert (sampling.mirostat, sampling.mirostat_tau, sampling.typical_p) == (2, 3.0, 0.9)  # Ollama's options


def test_generate_with_a_suffix_fills_in_the_middle() -> None:
    call = ollama.parse_generate(b'{"model": "m", "prompt": "def f(", "suffix": "\\n", "stream": false}')
    assert isinstance(call.request, CompletionRequest) and call.request.suffix == "\n" and not call.stream
    assert call.request.sampling.max_tokens is None  # not the completions API's 16


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {
                "model": "m",
                "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}],
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            {
                "model": "m",
                "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}],
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
        ({"model": "m", "messages": [{"role": "system", "content": "x", "images": ["aGk="]}]}, "messages[0].images"),
        ({"model": "m", "messages": [{"role": "assistant", "content": "x", "images": ["aGk="]}]}, "messages[0].images"),
        ({"model": "m", "messages": [{"role": "tool", "content": "x", "images": ["aGk="]}]}, "messages[0].images"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "keep_alive": "soon"}, "keep_alive"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "think": "very"}, "think"),
        ({"model": "", "messages": []}, "model"),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"maxLength": "9"}}}],
            },
            "tools[0].function.parameters",
        ),
    ],
)
def test_bad_chat_bodies_name_the_parameter(body: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        ollama.parse_chat(json.dumps(body).encode())
    assert refused.value.param == param


def test_num_predict_above_the_servers_limit_is_refused() -> None:
    with pytest.raises(InvalidRequest) as refused:
        ollama.parse_generate(b'{"model": "m", "prompt": "x", "options": {"num_predict": 500}}', max_tokens_limit=100)
    assert refused.value.param == "options.num_predict"


def test_a_call_keeps_the_name_as_sent_and_truncates_unless_told_not_to() -> None:
    call = ollama.parse_chat(b'{"model": "m:latest", "messages": [{"role": "user", "content": "x"}]}')
    assert (call.model, call.name, call.truncate) == ("m", "m:latest", True)
    assert call.request is not None and call.request.model == "m"
    kept = ollama.parse_chat(b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "truncate": false}')
    assert not kept.truncate
    assert not ollama.parse_generate(b'{"model": "m", "truncate": false}').truncate


@pytest.mark.parametrize(
    ("fmt", "schema"),
    [("json", {}), ({"type": "object", "required": ["n"]}, {"type": "object", "required": ["n"]}), ("", None)],
)
def test_raw_generate_takes_a_format_as_its_json_schema(fmt: object, schema: object) -> None:
    body = {"model": "m", "prompt": "{", "raw": True, "format": fmt}
    request = ollama.parse_generate(json.dumps(body).encode()).request
    assert isinstance(request, CompletionRequest) and request.json_schema == schema  # {}: any JSON object
    assert request.json_schema_param == "format"  # a schema the grammar refuses is named as the client sent it


def test_raw_generate_refuses_a_system_as_ollama_does() -> None:
    with pytest.raises(InvalidRequest) as refused:
        ollama.parse_generate(b'{"model": "m", "prompt": "x", "raw": true, "system": "Be brief."}')
    assert refused.value.param == "system"
    assert refused.value.message == "raw mode does not support template, system, or context"
    assert ollama.parse_generate(b'{"model": "m", "prompt": "x", "raw": true, "system": ""}').request is not None


def test_a_generate_with_context_goes_on_from_its_tokens() -> None:
    """A templated generate's `context` (an earlier answer's tokens) is kept for the route, which puts it
    before the prompt: the request is then a completion of those tokens, with the request's options."""
    body = {"model": "m", "prompt": "x", "context": [5, 6], "format": "json", "options": {"num_predict": 3}}
    call = ollama.parse_generate(json.dumps(body).encode())
    assert isinstance(call.request, ChatRequest) and call.context == [5, 6]
    request = ollama.continued(call, [5, 6, 7])
    assert isinstance(request, CompletionRequest) and request.prompt == [5, 6, 7]
    assert request.sampling.max_tokens == 3 and request.json_schema == {} and request.stream
    # without one, the answer still carries its own
    assert ollama.parse_generate(b'{"model": "m", "prompt": "x"}').context == []
    assert ollama.parse_generate(b'{"model": "m", "prompt": "x", "raw": true}').context is None
    with pytest.raises(InvalidRequest) as refused:
        ollama.parse_generate(b'{"model": "m", "prompt": "x", "raw": true, "context": [1]}')
    assert refused.value.param == "context"
    assert refused.value.message == "raw mode does not support template, system, or context"


def test_the_last_line_carries_the_context_where_ollama_writes_it() -> None:
    writer = ollama.OllamaStream("m", "generate", clock=ticks())
    lines = writer.feed(TextDelta("Hi")) + writer.feed(TextDelta(" there"))
    assert not writer.ended
    last = writer.feed(Done("stop", Usage(prompt_tokens=3, completion_tokens=2)))
    assert writer.ended and writer.answer == "Hi there" and lines
    fields = json.loads(ollama.with_context(last, [1, 2, 3]))
    assert list(fields)[list(fields).index("done_reason") + 1] == "context" and fields["context"] == [1, 2, 3]
    assert ollama.with_context(last, [1]).endswith(b"}\n")


@pytest.mark.parametrize(
    ("given", "embedded"),
    [('""', []), ("[]", []), ('[""]', [""]), ('["a", ""]', ["a", ""]), ('"a"', ["a"])],
)
def test_embed_takes_empty_texts_in_a_list_and_a_lone_one_asks_for_nothing(given: str, embedded: list[str]) -> None:
    request, name = ollama.parse_embed(b'{"model": "e:latest", "input": %s}' % given.encode())
    assert (request.input, request.model, name) == (embedded, "e", "e:latest")


def test_models_are_listed_with_a_tag() -> None:
    entries = [ModelEntry("plain", 0), ModelEntry("qwen3:8b", 0)]
    assert [m["name"] for m in json.loads(ollama.tags_body(entries))["models"]] == ["plain:latest", "qwen3:8b"]
    loaded = [ollama.LoadedModel(entries[0], 300, 200, None, 512)]
    (shown,) = json.loads(ollama.ps_body(loaded))["models"]
    assert (shown["name"], shown["model"], shown["size"], shown["size_vram"]) == ("plain:latest",) * 2 + (300, 200)


def test_an_unknown_model_is_worded_as_ollama_words_it() -> None:
    status, body = ollama.error_body(ModelNotFound("nope"))
    assert status == 404 and json.loads(body)["error"].startswith("model 'nope' not found")
    assert lines(ollama.error_line(ModelNotFound("nope")))[0]["error"].startswith("model 'nope' not found")
