"""spark.types results and events -> OpenAI bodies and SSE, checked with the openai SDK's models."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from spark.api import openai as api
from spark.api.common import ModelEntry
from spark.errors import (
    Cancelled,
    ContextLengthExceeded,
    DownloadError,
    ErrorInfo,
    InvalidRequest,
    ModelFileError,
    ModelNotFound,
    Overloaded,
    PlacementRefused,
    RunnerFailed,
    SettingsError,
    SparkError,
    Unauthorized,
)
from spark.types import (
    ChatResult,
    Done,
    EmbeddingResult,
    Failed,
    PromptDone,
    ReasoningDelta,
    SlotInfo,
    TextDelta,
    Timing,
    TokenChoice,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    Usage,
)

USAGE = Usage(prompt_tokens=12, completion_tokens=5, cached_tokens=8)
SSE = {"content-type": "text/event-stream"}


def frames(stream: bytes) -> list[bytes]:
    """The data payloads of an SSE byte stream, in order."""
    assert stream.endswith(b"\n\n")
    out = []
    for frame in stream.split(b"\n\n")[:-1]:
        assert frame.startswith(b"data: "), frame
        out.append(frame.removeprefix(b"data: "))
    return out


# --- non-streamed bodies -------------------------------------------------------------


def test_chat_completion_body() -> None:
    raw = api.chat_completion_body(
        "r1", "smollm2", 1700000000, ChatResult("Hello!", "stop", USAGE), system_fingerprint="spark-0.1"
    )
    parsed = ChatCompletion.model_validate_json(raw)
    assert parsed.id == "chatcmpl-r1" and parsed.object == "chat.completion"
    assert parsed.model == "smollm2" and parsed.created == 1700000000
    assert parsed.system_fingerprint == "spark-0.1"
    choice = parsed.choices[0]
    assert choice.message.content == "Hello!" and choice.message.role == "assistant"
    assert choice.finish_reason == "stop" and choice.index == 0
    assert parsed.usage.prompt_tokens == 12 and parsed.usage.completion_tokens == 5
    assert parsed.usage.total_tokens == 17
    assert parsed.usage.prompt_tokens_details.cached_tokens == 8
    details = parsed.usage.completion_tokens_details  # sent always, as OpenAI's (cost trackers read them)
    assert details is not None and (details.reasoning_tokens, details.accepted_prediction_tokens) == (0, 0)
    assert parsed.choices[0].message.annotations == [] and parsed.choices[0].message.refusal is None


def test_a_predictions_and_the_thinkings_tokens_are_in_the_usage_details() -> None:
    usage = Usage(12, 5, accepted_prediction_tokens=4, rejected_prediction_tokens=2, reasoning_tokens=3)
    raw = api.chat_completion_body("r1", "smollm2", 1700000000, ChatResult("Hello!", "stop", usage))
    details = ChatCompletion.model_validate_json(raw).usage.completion_tokens_details  # type: ignore[union-attr]
    assert details is not None and details.reasoning_tokens == 3
    assert details.accepted_prediction_tokens == 4 and details.rejected_prediction_tokens == 2


def test_chat_completion_body_with_tool_calls_and_reasoning() -> None:
    result = ChatResult(
        "",
        "tool_calls",
        USAGE,
        reasoning="Need weather.",
        tool_calls=[ToolCall("call_a", "weather", '{"city":"Oslo"}')],
    )
    raw = api.chat_completion_body("r1", "m", 1, result)
    message = ChatCompletion.model_validate_json(raw).choices[0].message
    assert message.content is None
    assert message.tool_calls[0].id == "call_a"
    assert message.tool_calls[0].function.name == "weather"
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    assert json.loads(raw)["choices"][0]["message"]["reasoning_content"] == "Need weather."
    assert json.loads(raw)["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("finish", "wire"), [("stop", "stop"), ("length", "length"), ("cancelled", "stop"), ("error", "stop")]
)
def test_finish_reasons(finish: str, wire: str) -> None:
    raw = api.chat_completion_body("r", "m", 1, ChatResult("x", finish, USAGE))  # type: ignore[arg-type]
    assert ChatCompletion.model_validate_json(raw).choices[0].finish_reason == wire


def test_completion_body() -> None:
    raw = api.completion_body("r2", "m", 5, ChatResult(" there", "length", USAGE))
    parsed = Completion.model_validate_json(raw)
    assert parsed.id == "cmpl-r2" and parsed.object == "text_completion"
    assert parsed.choices[0].text == " there" and parsed.choices[0].finish_reason == "length"
    assert parsed.usage.total_tokens == 17


# "Héllo": the second token holds the first byte of "é", the third the second; both show the
# replacement character as text and their own bytes, as OpenAI's entries do.
LOGPROBS = [
    TokenLogprob(b"H", -0.25, [TokenChoice(b"H", -0.25), TokenChoice(b"J", -1.5)]),
    TokenLogprob(b"\xc3", -0.5, [TokenChoice(b"\xc3", -0.5), TokenChoice(b"e", -2.0)]),
    TokenLogprob(b"\xa9llo", -0.125, [TokenChoice(b"\xa9llo", -0.125), TokenChoice(b"\xa8", -3.0)]),
]


def test_chat_completion_body_with_logprobs() -> None:
    raw = api.chat_completion_body("r", "m", 1, ChatResult("Héllo", "stop", USAGE, logprobs=LOGPROBS))
    content = ChatCompletion.model_validate_json(raw).choices[0].logprobs.content  # type: ignore[union-attr]
    assert [(c.token, c.logprob, c.bytes) for c in content] == [
        ("H", -0.25, [72]),
        ("\ufffd", -0.5, [0xC3]),
        ("\ufffdllo", -0.125, [0xA9, 108, 108, 111]),
    ]
    assert bytes(b for c in content for b in c.bytes or []).decode() == "Héllo"
    assert [(t.token, t.logprob) for t in content[0].top_logprobs] == [("H", -0.25), ("J", -1.5)]
    assert json.loads(raw)["choices"][0]["logprobs"]["refusal"] is None
    # not asked: null, as OpenAI
    plain = api.chat_completion_body("r", "m", 1, ChatResult("Héllo", "stop", USAGE))
    assert json.loads(plain)["choices"][0]["logprobs"] is None


def test_completion_body_with_logprobs_counts_offsets_from_the_prompt() -> None:
    raw = api.completion_body("r", "m", 1, ChatResult("Héllo", "stop", USAGE, logprobs=LOGPROBS), prompt_chars=4)
    logprobs = Completion.model_validate_json(raw).choices[0].logprobs
    assert logprobs is not None
    assert logprobs.tokens == ["H", "\ufffd", "\ufffdllo"] and logprobs.token_logprobs == [-0.25, -0.5, -0.125]
    assert logprobs.top_logprobs == [
        {"H": -0.25, "J": -1.5},
        {"\ufffd": -0.5, "e": -2.0},
        {"\ufffdllo": -0.125, "\ufffd": -3.0},
    ]
    assert logprobs.text_offset == [4, 5, 6]


def test_streams_carry_each_chunks_logprobs(openai_client) -> None:
    events = [TextDelta("H", LOGPROBS[:1]), TextDelta("éllo", LOGPROBS[1:]), Done("stop", USAGE)]
    chunks = [ChatCompletionChunk.model_validate_json(f) for f in frames(run(api.ChatStream("r", "m", 1), events))[:-1]]
    per_chunk = [
        [c.token for c in chunk.choices[0].logprobs.content] if chunk.choices[0].logprobs else None for chunk in chunks
    ]
    assert per_chunk == [None, ["H"], ["\ufffd", "\ufffdllo"], None]  # the role chunk and the finish carry none
    raw = run(api.CompletionStream("r", "m", 1, prompt_chars=2), events)
    client = openai_client(lambda request: httpx.Response(200, headers=SSE, content=raw))
    pieces = [c.choices[0].logprobs for c in client.completions.create(model="m", prompt="hi", stream=True)]
    assert [(p.tokens, p.text_offset) for p in pieces if p] == [(["H"], [2]), (["\ufffd", "\ufffdllo"], [3, 4])]


def test_embeddings_float_and_base64_round_trip() -> None:
    vectors = [[0.25, -1.5, 3.0], [1e-3, 2.0, -0.0]]
    result = EmbeddingResult(vectors, Usage(prompt_tokens=6))
    parsed = CreateEmbeddingResponse.model_validate_json(api.embeddings_body("bert", result))
    assert [d.embedding for d in parsed.data] == vectors
    assert [d.index for d in parsed.data] == [0, 1]
    assert parsed.usage.prompt_tokens == 6 and parsed.usage.total_tokens == 6

    raw = json.loads(api.embeddings_body("bert", result, "base64"))
    for item, vector in zip(raw["data"], vectors, strict=True):
        decoded = base64.b64decode(item["embedding"])
        assert list(struct.unpack(f"<{len(vector)}f", decoded)) == pytest.approx(vector)


def test_models_bodies() -> None:
    entries = [
        ModelEntry("smollm2", 1700000000, loaded=True, info={"size": 98_000_000}),
        ModelEntry("bert", 1700000001),
    ]
    listed = json.loads(api.model_list_body(entries))
    assert listed["object"] == "list"
    models = [Model.model_validate(m) for m in listed["data"]]
    assert [(m.id, m.owned_by, m.object) for m in models] == [("smollm2", "spark", "model"), ("bert", "spark", "model")]
    assert listed["data"][0]["loaded"] is True and listed["data"][0]["spark"] == {"size": 98_000_000}
    assert listed["data"][1]["loaded"] is False
    assert Model.model_validate_json(api.model_body(entries[1])).created == 1700000001


# --- streams ----------------------------------------------------------------------------

EVENTS = [
    SlotInfo(slot=0, prompt_tokens=12, cached_tokens=8),
    PromptDone(evaluated_tokens=4, seconds=0.01),
    ReasoningDelta("Think."),
    TextDelta("Hel"),
    TextDelta(""),
    TextDelta('lo "you"'),
    Done("stop", USAGE),
]


def run(stream: api.ChatStream | api.CompletionStream, events: list) -> bytes:
    return b"".join(stream.feed(e) for e in events)


def test_chat_stream_order_and_content() -> None:
    out = frames(run(api.ChatStream("r3", "m", 9), EVENTS))
    assert out[-1] == b"[DONE]"
    chunks = [ChatCompletionChunk.model_validate_json(f) for f in out[:-1]]
    assert all(c.id == "chatcmpl-r3" and c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta for c in chunks]
    assert "".join(d.content or "" for d in deltas) == 'Hello "you"'
    assert json.loads(out[1])["choices"][0]["delta"] == {"reasoning_content": "Think."}
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, None, None, "stop"]
    assert all(c.usage is None for c in chunks)  # no usage chunk without include_usage


def test_chat_stream_usage_chunk_only_when_asked() -> None:
    out = frames(run(api.ChatStream("r", "m", 1, include_usage=True), EVENTS))
    assert out[-1] == b"[DONE]"
    usage_chunk = ChatCompletionChunk.model_validate_json(out[-2])
    assert usage_chunk.choices == []
    assert usage_chunk.usage.prompt_tokens == 12 and usage_chunk.usage.completion_tokens == 5
    assert usage_chunk.usage.prompt_tokens_details.cached_tokens == 8
    assert ChatCompletionChunk.model_validate_json(out[-3]).choices[0].finish_reason == "stop"


def test_chat_stream_tool_calls() -> None:
    events = [
        ToolCallDelta(0, id="call_x", name="weather", arguments='{"ci'),
        ToolCallDelta(0, arguments='ty": "Oslo"}'),
        ToolCallDelta(1, name="time"),  # no id from the engine: one is made
        Done("tool_calls", USAGE),
    ]
    chunks = [ChatCompletionChunk.model_validate_json(f) for f in frames(run(api.ChatStream("r", "m", 1), events))[:-1]]
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].id == "call_x" and calls[0].function.name == "weather" and calls[0].type == "function"
    assert calls[1].id is None and calls[1].function.name is None
    assert calls[0].function.arguments + calls[1].function.arguments == '{"city": "Oslo"}'
    assert calls[2].index == 1 and calls[2].function.name == "time" and calls[2].id.startswith("call_")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # no text: content is null from the first chunk on, as in the whole answer, and the SDK's own
    # stream helper ends with content None too (not "")
    assert chunks[0].model_dump(exclude_unset=True)["choices"][0]["delta"] == {"role": "assistant", "content": None}
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    final = state.get_final_completion().choices[0]
    assert final.message.content is None and [c.function.name for c in final.message.tool_calls or []] == [
        "weather",
        "time",
    ]


def test_chat_stream_text_starts_with_empty_content() -> None:
    out = frames(run(api.ChatStream("r", "m", 1), [TextDelta("Hi"), Done("stop", USAGE)]))
    assert json.loads(out[0])["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_chat_stream_empty_output_still_has_role_and_finish() -> None:
    out = frames(run(api.ChatStream("r", "m", 1), [Done("length", USAGE)]))
    assert [ChatCompletionChunk.model_validate_json(f).choices[0].finish_reason for f in out[:-1]] == [None, "length"]
    assert out[-1] == b"[DONE]"


def test_chat_stream_error_after_partial_output() -> None:
    stream = api.ChatStream("r", "m", 1, include_usage=True)
    failure = Failed(RunnerFailed("the runner for 'm' crashed (exit code -9)").info())
    out = frames(run(stream, [TextDelta("Par"), TextDelta("tial"), failure, TextDelta("late")]))
    assert out[-1] == b"[DONE]"
    assert json.loads(out[-2]) == {
        "error": {
            "message": "the runner for 'm' crashed (exit code -9)",
            "type": "server_error",
            "param": None,
            "code": "runner_failed",
        }
    }
    assert b"late" not in b"".join(out) and stream.finished
    assert stream.feed(Done("stop", USAGE)) == b""


def test_stream_fail_for_errors_outside_the_runner() -> None:
    stream = api.ChatStream("r", "m", 1)
    out = frames(stream.fail(ContextLengthExceeded(5000, 4096)))
    assert json.loads(out[0])["error"]["code"] == "context_length_exceeded"
    assert out[1] == b"[DONE]" and stream.fail(Overloaded("busy")) == b""


def test_choices_stream_interleaves_choices_and_ends_once(openai_client) -> None:
    """n = 2: each choice's chunks carry its index, in whatever order they come; one usage chunk
    (the prompt once, every choice's tokens) and one [DONE] after the last choice ends."""
    streams = [api.ChatStream("r", "m", 1, include_usage=True, index=i, part=True) for i in range(2)]
    choices = api.ChoicesStream(streams)
    second = Usage(prompt_tokens=12, completion_tokens=3, cached_tokens=8)
    events = [
        (1, TextDelta("B")),
        (0, TextDelta("A")),
        (0, Done("stop", USAGE)),
        (1, TextDelta("b")),
        (1, Done("stop", second)),
    ]
    raw = b"".join(choices.feed(item) for item in events)
    assert choices.finished and choices.feed((1, TextDelta("late"))) == b""
    out = frames(raw)
    assert out.count(b"[DONE]") == 1 and out[-1] == b"[DONE]"
    client = openai_client(lambda request: httpx.Response(200, headers=SSE, content=raw))
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            n=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    final = state.get_final_completion()
    assert [(c.index, c.message.content, c.finish_reason) for c in final.choices] == [
        (0, "A", "stop"),
        (1, "Bb", "stop"),
    ]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.prompt_tokens == 12 and usage.completion_tokens == 5 + 3


def test_a_failing_choice_ends_the_stream() -> None:
    choices = api.ChoicesStream([api.ChatStream("r", "m", 1, index=i, part=True) for i in range(2)])
    raw = choices.feed((0, TextDelta("A"))) + choices.feed((1, Failed(RunnerFailed("gone").info())))
    out = frames(raw)
    assert json.loads(out[-2])["error"]["code"] == "runner_failed" and out[-1] == b"[DONE]"
    assert choices.finished and choices.feed((0, Done("stop", USAGE))) == b""


def test_completion_stream(openai_client) -> None:
    events = [SlotInfo(0, 3, 0), TextDelta("a"), ReasoningDelta("ignored"), TextDelta("b"), Done("length", USAGE)]
    raw = run(api.CompletionStream("r", "m", 1, include_usage=True), events)
    out = frames(raw)
    assert out[-1] == b"[DONE]"
    # OpenAI streams finish_reason null until the end, which the SDK's strict model rejects;
    # the SDK reads stream chunks leniently, so the stream is checked through the SDK itself.
    assert [json.loads(f)["choices"][0]["finish_reason"] for f in out[:-2]] == [None, None, "length"]
    client = openai_client(lambda request: httpx.Response(200, headers=SSE, content=raw))
    chunks = list(client.completions.create(model="m", prompt="x", stream=True, stream_options={"include_usage": True}))
    assert all(c.id == "cmpl-r" and c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "ab"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_the_sdk_reads_a_stream_and_raises_on_its_error(openai_client) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        call = api.parse_chat(request.content)
        stream = api.ChatStream("r", call.request.model, 1, include_usage=call.include_usage)
        events = [TextDelta("Hi"), ToolCallDelta(0, "c", "f", "{}"), Done("tool_calls", USAGE)]
        return httpx.Response(200, headers=SSE, content=run(stream, events))

    client = openai_client(handler)
    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi"
    assert chunks[-1].usage.total_tokens == 17

    def failing(request: httpx.Request) -> httpx.Response:
        stream = api.ChatStream("r", "m", 1)
        events = [TextDelta("Hi"), Failed(Overloaded("queue full").info())]
        return httpx.Response(200, headers=SSE, content=run(stream, events))

    with pytest.raises(openai.APIError, match="queue full"):
        list(
            openai_client(failing).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )


def test_the_sdk_reads_bodies(openai_client) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, content=api.model_list_body([ModelEntry("m", 1)]))
        if request.url.path == "/v1/embeddings":
            call = api.parse_embeddings(request.content)
            result = EmbeddingResult([[0.5, -0.25]] * len(call.request.input), Usage(4))
            return httpx.Response(200, content=api.embeddings_body("m", result, call.encoding_format))
        call = api.parse_chat(request.content)
        return httpx.Response(
            200,
            content=api.chat_completion_body(
                "r", call.request.model, 1, ChatResult(call.request.messages[-1].text(), "stop", USAGE)
            ),
        )

    client = openai_client(handler)
    assert [m.id for m in client.models.list()] == ["m"]
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "echo"}])
    assert reply.choices[0].message.content == "echo"
    for fmt in ("float", "base64"):
        embedded = client.embeddings.create(model="m", input=["a", "b"], encoding_format=fmt)
        vector = embedded.data[1].embedding
        if fmt == "base64":
            vector = list(struct.unpack("<2f", base64.b64decode(vector)))
        assert vector == [0.5, -0.25]


# --- llama-server's timings ----------------------------------------------------------------

TIMINGS = [
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
]


def test_a_timed_whole_answer_carries_llama_servers_timings() -> None:
    """Open WebUI shows tokens per second from them; the SDK keeps them as an extra field."""
    raw = api.chat_completion_body("r", "m", 1, ChatResult("Hi", "stop", USAGE, timing=Timing(0.1, 0.03, 0.25, 0.4)))
    timings = json.loads(raw)["timings"]
    assert list(timings) == TIMINGS  # no draft counts without speculative decoding
    assert (timings["cache_n"], timings["prompt_n"], timings["predicted_n"]) == (8, 4, 5)
    assert timings["prompt_ms"] == pytest.approx(30) and timings["predicted_ms"] == pytest.approx(250)
    assert timings["predicted_per_second"] == pytest.approx(20)
    assert ChatCompletion.model_validate_json(raw).model_extra == {"timings": timings}
    untimed = api.chat_completion_body("r", "m", 1, ChatResult("Hi", "stop", USAGE))  # a streamed answer kept
    assert "timings" not in json.loads(untimed)


def test_the_timings_of_several_choices_count_as_the_usage_does() -> None:
    """n = 2: the prompt once, every choice's tokens, in the time of the longest choice."""
    second = Usage(prompt_tokens=12, completion_tokens=3, cached_tokens=8)
    results = [
        ChatResult("a", "stop", USAGE, timing=Timing(0, 0.03, 0.25, 0.3)),
        ChatResult("b", "stop", second, timing=Timing(0, 0.02, 0.4, 0.45)),
    ]
    raw = api.completion_body("r", "m", 1, results, prompt_chars=[0, 0], per_prompt=2)
    body = Completion.model_validate_json(raw).model_dump()
    assert body["timings"]["predicted_n"] == body["usage"]["completion_tokens"] == 8
    assert body["timings"]["prompt_n"] + body["timings"]["cache_n"] == body["usage"]["prompt_tokens"] == 12
    assert body["timings"]["prompt_ms"] == pytest.approx(30) and body["timings"]["predicted_ms"] == pytest.approx(400)
    assert body["timings"]["predicted_per_second"] == pytest.approx(20)


def ticking() -> Callable[[], float]:
    """A clock that reads 0, 1, 2, ... seconds."""
    now = iter(range(100))
    return lambda: float(next(now))


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_a_streams_last_chunk_carries_the_timings(kind: str) -> None:
    """As llama-server: on the usage chunk with `include_usage`, else on the finish chunk."""
    writer = api.ChatStream if kind == "chat" else api.CompletionStream
    # made at 0, slot at 1, prompt done at 2 (10 ms of it evaluating), done at 3
    plain = frames(run(writer("r", "m", 1, clock=ticking()), EVENTS))
    finish = json.loads(plain[-2])
    assert finish["choices"][0]["finish_reason"] == "stop" and list(finish["timings"]) == TIMINGS
    assert (finish["timings"]["predicted_n"], finish["timings"]["predicted_ms"]) == (5, 1000)
    assert (finish["timings"]["prompt_n"], finish["timings"]["prompt_ms"]) == (4, 10)
    assert all("timings" not in json.loads(f) for f in plain[:-2])
    with_usage = frames(run(writer("r", "m", 1, include_usage=True, clock=ticking()), EVENTS))
    assert json.loads(with_usage[-2])["timings"] == finish["timings"] and with_usage[-1] == b"[DONE]"
    assert all("timings" not in json.loads(f) for f in with_usage[:-2])
    chunk_type = ChatCompletionChunk if kind == "chat" else Completion
    assert chunk_type.model_validate_json(with_usage[-2]).model_extra == {"timings": finish["timings"]}


def test_several_choices_streamed_carry_each_ones_timings_or_the_requests_at_the_end() -> None:
    def streamed(include_usage: bool) -> list[dict[str, Any]]:
        streams = [
            api.ChatStream("r", "m", 1, include_usage=include_usage, index=i, part=True, clock=ticking())
            for i in range(2)
        ]
        choices = api.ChoicesStream(streams)
        events = [(0, PromptDone(4, 0.01)), (1, PromptDone(4, 0.02)), (0, TextDelta("A"))]
        events += [(1, TextDelta("B")), (1, Done("stop", second)), (0, Done("stop", USAGE))]
        return [json.loads(f) for f in frames(b"".join(choices.feed(e) for e in events))[:-1]]

    second = Usage(prompt_tokens=12, completion_tokens=3, cached_tokens=8)
    timed = [c for c in streamed(False) if "timings" in c]
    assert [(c["choices"][0]["index"], c["timings"]["predicted_n"]) for c in timed] == [(1, 3), (0, 5)]
    assert [c["timings"]["prompt_ms"] for c in timed] == [pytest.approx(20), pytest.approx(10)]
    *chunks, last = streamed(True)
    assert all("timings" not in c for c in chunks) and last["choices"] == []
    assert last["timings"]["predicted_n"] == last["usage"]["completion_tokens"] == 8
    assert last["timings"]["prompt_ms"] == pytest.approx(20) and last["timings"]["predicted_ms"] == 1000


# --- errors -----------------------------------------------------------------------------

ERRORS: list[tuple[SparkError, int, str, str]] = [
    (InvalidRequest("bad", param="temperature"), 400, "invalid_request_error", "invalid_request"),
    (Unauthorized("no key"), 401, "invalid_request_error", "invalid_api_key"),
    (ModelNotFound("nope"), 404, "invalid_request_error", "model_not_found"),
    (ContextLengthExceeded(5000, 4096), 400, "invalid_request_error", "context_length_exceeded"),
    (ModelFileError("truncated"), 400, "invalid_request_error", "model_file_error"),
    (Cancelled("cancelled"), 499, "invalid_request_error", "cancelled"),
    (Overloaded("busy"), 429, "server_error", "overloaded"),
    (RunnerFailed("crashed"), 502, "server_error", "runner_failed"),
    (DownloadError("gone"), 502, "server_error", "download_error"),
    (PlacementRefused("needs 5 GiB"), 507, "server_error", "placement_refused"),
    (SettingsError("bad port", param="port"), 500, "server_error", "settings_error"),
    (SparkError("boom"), 500, "server_error", "internal_error"),
]


@pytest.mark.parametrize(("error", "status", "kind", "code"), ERRORS)
def test_error_bodies(error: SparkError, status: int, kind: str, code: str) -> None:
    got_status, raw = api.error_body(error)
    assert got_status == status
    assert json.loads(raw) == {"error": {"message": error.message, "type": kind, "param": error.param, "code": code}}


def test_unknown_model_message_and_sdk_exceptions(openai_client) -> None:
    _status, raw = api.error_body(ModelNotFound("nope"))
    assert json.loads(raw)["error"]["message"] == (
        "The model 'nope' does not exist on this server (see GET /v1/models)."
    )
    assert json.loads(raw)["error"]["param"] == "model"

    def handler(request: httpx.Request) -> httpx.Response:
        try:
            api.parse_chat(request.content)
        except InvalidRequest as e:
            code, body = api.error_body(e)
            return httpx.Response(code, content=body)
        code, body = api.error_body(
            ModelNotFound("nope") if b"nope" in request.content else Unauthorized("Invalid API key.")
        )
        return httpx.Response(code, content=body)

    client = openai_client(handler)
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], n=17)
    assert bad.value.param == "n"


def test_error_info_round_trip_keeps_the_mapping() -> None:
    info = ErrorInfo(code="model_not_found", message="", data={"model": "nope"})
    frame = frames(api.ChatStream("r", "m", 1).feed(Failed(info)))[0]
    assert json.loads(frame)["error"]["message"].startswith("The model 'nope' does not exist")
