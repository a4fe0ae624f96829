"""llama-server's `/completion` on the wire: the body read, and the answer written from events."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from spark.api.llama_completion import NEVER, LlamaCompletionStream, parse_completion
from spark.errors import InvalidRequest, Overloaded
from spark.types import Done, PromptDone, SlotInfo, TextDelta, TokenChoice, TokenLogprob, Usage


def _call(**body: Any) -> Any:
    return parse_completion(json.dumps({"prompt": "Hi", **body}).encode(), "default-model", max_tokens_limit=1000)


def test_the_body_becomes_a_raw_completion() -> None:
    call = _call(n_predict=5, stop=["\n"], temperature=0.5, seed=-1, logit_bias=[[3, False], [4, 2]], n_probs=3)
    request = call.request
    assert (request.model, request.prompt, request.logprobs, call.prompts) == ("default-model", "Hi", 3, ["Hi"])
    sampling = request.sampling
    assert (sampling.max_tokens, sampling.stop, sampling.temperature, sampling.seed) == (5, ["\n"], 0.5, None)
    assert sampling.logit_bias == {3: NEVER, 4: 2.0}
    assert _call(logit_bias={"3": 1}).request.sampling.logit_bias == {3: 1.0}
    for huge in ({"1180591620717411303424": 5}, [[1180591620717411303424, 5]]):  # the runner carries 64 bits
        with pytest.raises(InvalidRequest) as beyond:
            _call(logit_bias=huge)
        assert beyond.value.param is not None and beyond.value.param.startswith("logit_bias")
    assert _call().request.sampling.max_tokens is None  # -1: Spark's cap applies
    assert _call(n_predict=-2).request.sampling.max_tokens is None
    assert _call(n_predict=0).request.sampling.max_tokens == 0
    # llama-server's aliases, read when n_predict is not sent
    assert _call(max_tokens=7).request.sampling.max_tokens == 7
    assert _call(max_completion_tokens=8).request.sampling.max_tokens == 8
    assert _call(n_predict=3, max_tokens=7).request.sampling.max_tokens == 3
    with pytest.raises(InvalidRequest) as aliased:
        _call(max_tokens=1001)
    assert aliased.value.param == "max_tokens"
    tokens = _call(prompt=[1, 2, 3], model="m")
    assert (tokens.request.prompt, tokens.request.model, tokens.prompts) == ([1, 2, 3], "m", [[1, 2, 3]])
    # ids and texts mixed are one prompt (the request holds its ids until the route tokenizes the rest);
    # a list of texts or of lists holds several
    assert _call(prompt=[1, "a", 2]).prompts == [[1, "a", 2]] and _call(prompt=[1, "a", 2]).request.prompt == [1, 2]
    assert _call(prompt=["a", "b"]).prompts == ["a", "b"] and _call(prompt=["a", "b"]).request.prompt == "a"
    assert _call(prompt=[[1], "b", ["c", 2]]).prompts == [[1], "b", ["c", 2]]
    with pytest.raises(InvalidRequest) as too_many:
        _call(n_predict=1001)
    assert too_many.value.param == "n_predict"


def _events(stop_sequence: str | None = None, finish: str = "stop") -> list[Any]:
    usage = Usage(prompt_tokens=10, completion_tokens=2, cached_tokens=4)
    return [
        SlotInfo(slot=1, prompt_tokens=10, cached_tokens=4),
        PromptDone(evaluated_tokens=6, seconds=0.03),
        TextDelta("Hel"),
        TextDelta("lo\n"),
        Done(finish, usage, stop_sequence),  # type: ignore[arg-type]
    ]


def _written(stream: bool, events: list[Any]) -> list[bytes]:
    ticks = iter([0.0, 0.01, 0.05, 0.25])  # made, slot taken, prompt done, done
    writer = LlamaCompletionStream(_call(stream=stream), clock=lambda: next(ticks))
    return [frame for frame in (writer.feed(e) for e in events) if frame]


def test_a_whole_answer_with_its_counts_and_timings() -> None:
    (body,) = _written(False, _events())
    answer = json.loads(body)
    assert (answer["content"], answer["stop"], answer["stop_type"], answer["stopping_word"]) == (
        "Hello\n",
        True,
        "eos",
        "",
    )
    assert (answer["id_slot"], answer["tokens_predicted"], answer["tokens_evaluated"], answer["tokens_cached"]) == (
        1,
        2,
        10,
        12,
    )
    assert answer["has_new_line"] is True and answer["prompt"] == "Hi"
    timings = answer["timings"]
    assert (timings["cache_n"], timings["prompt_n"], timings["predicted_n"]) == (4, 6, 2)
    assert timings["prompt_ms"] == pytest.approx(30) and timings["prompt_per_second"] == pytest.approx(200)
    assert timings["predicted_ms"] == pytest.approx(200) and timings["predicted_per_token_ms"] == pytest.approx(100)
    word = json.loads(_written(False, _events("lo"))[0])
    assert (word["stop_type"], word["stopping_word"]) == ("word", "lo")
    assert json.loads(_written(False, _events(finish="length"))[0])["stop_type"] == "limit"


def test_a_stream_sends_each_piece_then_the_counts() -> None:
    frames = _written(True, _events())
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    pieces = [json.loads(f.removeprefix(b"data: ")) for f in frames]
    assert [p["content"] for p in pieces] == ["Hel", "lo\n", ""]
    assert [p.get("stop", False) for p in pieces] == [False, False, True]
    assert pieces[0]["id_slot"] == 1 and pieces[0]["tokens_evaluated"] == 10 and pieces[1]["tokens_predicted"] == 2


def test_an_error_after_the_start_is_a_last_frame_in_openais_shape() -> None:
    writer = LlamaCompletionStream(_call(stream=True))
    frame = writer.fail(Overloaded("busy"))
    assert writer.finished and json.loads(frame.removeprefix(b"data: "))["error"]["message"] == "busy"
    assert writer.feed(TextDelta("late")) == b""


@pytest.mark.parametrize("post_sampling", [False, True])
def test_token_probabilities_as_llama_server_writes_them(post_sampling: bool) -> None:
    top = [TokenChoice(b"Hi", -0.5, 7), TokenChoice(b"\xc3", -1.5, 9)]  # a piece may end inside a character
    event = TextDelta("Hi", [TokenLogprob(b"Hi", -0.5, top, 7)])
    call = _call(n_probs=2, post_sampling_probs=post_sampling)
    assert call.request.post_sampling_probs is post_sampling
    writer = LlamaCompletionStream(call)
    writer.feed(event)
    (entry,) = json.loads(writer.feed(Done("stop", Usage(prompt_tokens=1, completion_tokens=1))))[
        "completion_probabilities"
    ]
    if post_sampling:  # probabilities, as the sampler chain drew from them
        assert list(entry) == ["id", "token", "bytes", "prob", "top_probs"]
        assert entry["prob"] == pytest.approx(math.exp(-0.5))
        assert entry["top_probs"][1] == {
            "id": 9,
            "token": "\ufffd",
            "bytes": [195],
            "prob": pytest.approx(math.exp(-1.5)),
        }
    else:
        assert list(entry) == ["id", "token", "bytes", "logprob", "top_logprobs"]
        assert (entry["id"], entry["token"], entry["logprob"]) == (7, "Hi", -0.5)
        assert entry["top_logprobs"][1] == {"id": 9, "token": "\ufffd", "bytes": [195], "logprob": -1.5}
