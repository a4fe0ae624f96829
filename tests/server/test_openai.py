"""The OpenAI routes, driven by the official `openai` SDK against a real server."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from server.helpers import LiveServer, Models, openai_error
from spark.engine.native import Model
from spark.library.bundled import BUNDLED_SETTINGS
from tiny_gguf import SLOW_CONTEXT

CHAT = [{"role": "user", "content": "hi"}]


def test_models_list_and_get(live: LiveServer, models: Models) -> None:
    client = live.openai()
    listed = {m.id: m for m in client.models.list()}
    assert {models.chat, models.embed, models.slow, "smollm2-135m-instruct-q4_1"} <= set(listed)
    model = listed[models.chat]
    assert model.object == "model" and model.owned_by == "spark"
    extra = model.model_extra or {}
    assert extra["spark"]["architecture"] == "llama" and extra["spark"]["context_length"] == 512
    assert extra["spark"]["context_window"] == 512 and extra["spark"]["thinking"] is False
    assert listed[models.slow].model_extra["spark"]["context_window"] == SLOW_CONTEXT  # type: ignore[index]  # its own
    assert listed[models.embed].model_extra["spark"]["embedding"] is True  # type: ignore[index]

    one = client.models.retrieve(models.chat.upper())  # ids are case-insensitive
    assert one.id == models.chat
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert e.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_chat_completion(live: LiveServer, models: Models) -> None:
    raw = live.openai().chat.completions.with_raw_response.create(
        model=models.chat, messages=CHAT, max_tokens=6, seed=4
    )  # type: ignore[arg-type]
    completion = raw.parse()
    assert raw.headers["x-request-id"].startswith("req_")
    assert completion.id == "chatcmpl-" + raw.headers["x-request-id"].removeprefix("req_")
    assert completion.object == "chat.completion" and completion.model == models.chat
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    assert choice.message.content
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 6 and completion.usage.prompt_tokens > 0


def test_logprobs_through_the_sdk(live: LiveServer, models: Models) -> None:
    """Chat and legacy completions, whole and streamed: an entry per answer token, the same both ways."""
    client = live.openai()
    asked = {"model": models.chat, "max_tokens": 8, "temperature": 0}
    whole = client.chat.completions.create(messages=CHAT, logprobs=True, top_logprobs=2, **asked)  # type: ignore[call-overload]
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens == 8
    assert "".join(c.token for c in content) == whole.choices[0].message.content
    assert all(len(c.top_logprobs) == 2 and c.top_logprobs[0].token == c.token for c in content)
    streamed = client.chat.completions.create(messages=CHAT, logprobs=True, top_logprobs=2, stream=True, **asked)  # type: ignore[call-overload]
    pieces = [
        e
        for chunk in streamed
        if chunk.choices and chunk.choices[0].logprobs
        for e in chunk.choices[0].logprobs.content
    ]
    assert [p.token for p in pieces] == [c.token for c in content]
    # (the second request reads its prompt from the cache: the last prompt token's batch differs)
    assert [p.logprob for p in pieces] == pytest.approx([c.logprob for c in content], abs=1e-3)
    assert whole.choices[0].logprobs is not None
    assert client.chat.completions.create(messages=CHAT, **asked).choices[0].logprobs is None  # type: ignore[call-overload]
    # asked for but no text (stopped at its first character): an empty list, not null
    stopped = client.chat.completions.create(
        messages=CHAT, logprobs=True, stop=[whole.choices[0].message.content[0]], **asked
    )  # type: ignore[call-overload,index]
    assert stopped.choices[0].message.content == "" and stopped.choices[0].logprobs.content == []

    legacy = client.completions.create(prompt="Once upon", logprobs=1, **asked)  # type: ignore[call-overload]
    columns = legacy.choices[0].logprobs
    assert columns is not None and len(columns.tokens) == len(columns.token_logprobs) == 8
    assert columns.text_offset[0] == len("Once upon") and "".join(columns.tokens) == legacy.choices[0].text
    assert all(
        top[token] == lp and len(top) == 1
        for token, lp, top in zip(columns.tokens, columns.token_logprobs, columns.top_logprobs, strict=True)
    )  # greedy: the likeliest
    sampled = client.completions.create(prompt="Once upon", logprobs=1, **{**asked, "temperature": 2.0, "seed": 7})  # type: ignore[call-overload]
    columns = sampled.choices[0].logprobs
    assert all(
        top[token] == lp
        for token, lp, top in zip(columns.tokens, columns.token_logprobs, columns.top_logprobs, strict=True)
    )
    assert any(len(top) == 2 for top in columns.top_logprobs)  # a token drawn beside the likeliest, as OpenAI's


def test_completions_take_llama_servers_grammar_and_json_schema(live: LiveServer, models: Models) -> None:
    client = live.openai()
    asked: Any = {"model": models.chat, "prompt": "Answer:", "max_tokens": 30, "temperature": 0}
    constrained = client.completions.create(**asked, extra_body={"grammar": 'root ::= ("yes" | "no") "!"'})
    assert constrained.choices[0].text in ("yes!", "no!") and constrained.choices[0].finish_reason == "stop"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    as_json = client.completions.create(**asked, extra_body={"json_schema": schema})
    assert isinstance(json.loads(as_json.choices[0].text)["ok"], bool)
    for extra, param in (({"grammar": "root ::= ("}, "grammar"), ({"json_schema": {"type": "text"}}, "json_schema")):
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(**asked, extra_body=extra)
        assert info.value.body["param"] == param  # type: ignore[index]
    both = {"grammar": 'root ::= "a"', "json_schema": {}}
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(**asked, extra_body=both)
    assert info.value.body["param"] == "grammar"  # type: ignore[index]


def test_chat_takes_llama_servers_grammar_and_json_schema(live: LiveServer, models: Models) -> None:
    client = live.openai()
    asked: Any = {"model": models.chat, "messages": CHAT, "max_tokens": 30, "temperature": 0}
    held = client.chat.completions.create(**asked, extra_body={"grammar": 'root ::= "maybe" "!"?'})
    assert held.choices[0].message.content in ("maybe", "maybe!")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    as_json = client.chat.completions.create(**asked, extra_body={"json_schema": schema})
    assert isinstance(json.loads(as_json.choices[0].message.content or "")["ok"], bool)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for extra, param in (
        ({"grammar": "root ::= ("}, "grammar"),
        ({"grammar": 'root ::= "a"', "tools": tools}, "grammar"),
        ({"json_schema": {"type": "text"}}, "json_schema"),  # named as the client sent it
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"not": {}}, "strict": True},
                }
            },
            "response_format",
        ),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(**asked, extra_body=extra)
        assert info.value.body["param"] == param  # type: ignore[index]


def test_a_chat_naming_no_model_is_answered_by_the_default_model(live: LiveServer) -> None:
    # as llama.vscode sends its chat request to llama-server, which serves one model: no model named
    sent = {
        "messages": [{"role": "system", "content": "You are an expert coder."}, {"role": "user", "content": "x = 1"}],
        "stream": False,
        "temperature": 0.8,
        "max_tokens": 8,
    }
    response = live.http().post("/v1/chat/completions", json=sent)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model"] == live.state.settings.default_model and answer["choices"][0]["message"]["content"]
    # llama-server's "no limit" is not OpenAI's: a 400 naming the field
    error = openai_error(live.http().post("/v1/chat/completions", json={**sent, "max_tokens": -1}), 400)
    assert error["param"] == "max_tokens"


def test_a_suffix_fills_in_the_middle(fim_server: tuple[LiveServer, str], live: LiveServer, models: Models) -> None:
    fim, model = fim_server
    asked = {"prompt": "def add(a, b):\n    return ", "max_tokens": 6, "seed": 2}
    middle = fim.openai().completions.create(model=model, suffix="\n\nprint(add(1, 2))", **asked)  # type: ignore[call-overload]
    plain = fim.openai().completions.create(model=model, **asked)  # type: ignore[call-overload]
    assert middle.usage.prompt_tokens > plain.usage.prompt_tokens + 3  # the suffix and the three FIM tokens
    assert middle.choices[0].text and middle.usage.completion_tokens == 6
    streamed = fim.openai().completions.create(model=model, suffix="\n\nprint(add(1, 2))", stream=True, **asked)  # type: ignore[call-overload]
    assert "".join(c.choices[0].text for c in streamed if c.choices) == middle.choices[0].text
    # a model without FIM tokens: OpenAI's 400, naming the parameter
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().completions.create(model=models.chat, suffix="}", **asked)  # type: ignore[call-overload]
    assert e.value.body["param"] == "suffix" and "fill-in-the-middle" in e.value.body["message"]  # type: ignore[index]


def test_chat_stream_with_usage(live: LiveServer, models: Models) -> None:
    client = live.openai()
    same = client.chat.completions.create(
        model=models.chat,
        messages=CHAT,
        max_tokens=8,
        seed=9,  # type: ignore[arg-type]
        temperature=0,
    )
    chunks = list(
        client.chat.completions.create(
            model=models.chat,
            messages=CHAT,
            max_tokens=8,
            seed=9,
            temperature=0,
            stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == same.choices[0].message.content, "streamed and whole answers agree"
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == "length"
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == 8

    with (
        live.http() as http,
        http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": models.chat, "messages": CHAT, "max_tokens": 3, "stream": True},
        ) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = [line for line in response.iter_lines() if line]
    assert frames[-1] == "data: [DONE]" and all(f.startswith("data: ") for f in frames)


def test_completions(live: LiveServer, models: Models) -> None:
    client = live.openai()
    completion = client.completions.create(model=models.chat, prompt="Once upon a time", seed=1)
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    assert completion.usage is not None and completion.usage.completion_tokens == 16, "16 tokens by default"
    assert completion.choices[0].finish_reason == "length"

    chunks = list(
        client.completions.create(
            model=models.chat,
            prompt="Once upon a time",
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert "".join(c.choices[0].text for c in chunks if c.choices)


def test_answers_carry_llama_servers_timings(live: LiveServer, models: Models) -> None:
    """As llama-server's, which Open WebUI shows tokens per second from: a whole answer's, and a
    stream's last chunk's (the finish chunk, or with include_usage the usage chunk)."""
    ask = {"model": models.chat, "max_tokens": 5, "temperature": 0}
    with live.http() as http:
        whole = http.post("/v1/chat/completions", json={**ask, "messages": CHAT}).json()
        timings, usage = whole["timings"], whole["usage"]
        assert timings["predicted_n"] == usage["completion_tokens"] == 5
        assert timings["cache_n"] == usage["prompt_tokens_details"]["cached_tokens"]
        assert timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"]
        assert timings["predicted_ms"] > 0 and timings["predicted_per_second"] > 0 and timings["prompt_ms"] >= 0
        for route, body in (("/v1/chat/completions", {"messages": CHAT}), ("/v1/completions", {"prompt": "Once"})):
            for include_usage in (False, True):
                asked = {**ask, **body, "stream": True, "stream_options": {"include_usage": include_usage}}
                with http.stream("POST", route, json=asked) as response:
                    lines = [line.removeprefix("data: ") for line in response.iter_lines() if line]
                *chunks, last = [json.loads(line) for line in lines[:-1]]
                assert lines[-1] == "[DONE]" and all("timings" not in c for c in chunks)
                assert (last["choices"] == []) is include_usage and last["timings"]["predicted_n"] == 5
    completion = live.openai().completions.create(model=models.chat, prompt="Once", max_tokens=3)
    assert (completion.model_extra or {})["timings"]["predicted_n"] == 3  # the SDK keeps it


def test_several_choices(live: LiveServer, models: Models) -> None:
    """n: the choices are generated side by side, each from its own seed (seed + i), so seeded
    choices differ and each is reproducible; usage counts the prompt once."""
    client = live.openai()
    ask = {"model": models.chat, "messages": CHAT, "max_tokens": 6, "temperature": 1.0, "seed": 3}
    three = client.chat.completions.create(n=3, **ask)  # type: ignore[call-overload]
    assert [c.index for c in three.choices] == [0, 1, 2]
    texts = [c.message.content for c in three.choices]
    assert len(set(texts)) == 3
    alone = [client.chat.completions.create(**{**ask, "seed": 3 + i}).choices[0].message.content for i in range(3)]
    assert texts == alone
    assert three.usage is not None and three.usage.completion_tokens == 18
    assert three.usage.prompt_tokens == client.chat.completions.create(**ask).usage.prompt_tokens  # type: ignore[union-attr]

    streamed: dict[int, str] = {}
    for chunk in client.chat.completions.create(n=2, stream=True, **ask):  # type: ignore[call-overload]
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + (choice.delta.content or "")
    assert list(streamed) == [0, 1] and list(streamed.values()) == texts[:2]  # choices open in index order

    completions = client.completions.create(model=models.chat, prompt="Once upon", n=2, max_tokens=4, temperature=0)
    assert [c.index for c in completions.choices] == [0, 1]
    assert completions.choices[0].text == completions.choices[1].text  # greedy: the same answer
    chunks = list(
        client.completions.create(
            model=models.chat,
            prompt="Once upon",
            n=2,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert {c.choices[0].index for c in chunks if c.choices} == {0, 1}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=models.chat, messages=CHAT, n=17)  # type: ignore[arg-type]
    assert e.value.body["param"] == "n"  # type: ignore[index]


def token_ids(path: Path, text: str, *, add_special: bool) -> list[int]:
    model = Model(str(path))
    try:
        return model.tokenize(text, add_special=add_special, parse_special=False)
    finally:
        model.close()


def test_token_id_prompts(live: LiveServer, models: Models, tiny_llama: Path, tiny_bert: Path) -> None:
    """Token ids instead of text (lm-evaluation-harness sends them, a batch of one): the same answer
    and the same vector; an id outside the vocabulary is a 400 naming the parameter."""
    client = live.openai()
    ids = token_ids(tiny_llama, "Once upon a time", add_special=False)
    as_text = client.completions.create(model=models.chat, prompt="Once upon a time", max_tokens=6, temperature=0)
    for prompt in (ids, [ids]):
        as_ids = client.completions.create(model=models.chat, prompt=prompt, max_tokens=6, temperature=0, logprobs=0)
        assert as_ids.choices[0].text == as_text.choices[0].text
        assert as_ids.usage is not None and as_ids.usage.prompt_tokens == len(ids)
        logprobs = as_ids.choices[0].logprobs
        assert logprobs is not None and logprobs.text_offset is not None
        assert logprobs.text_offset[0] == 0  # no prompt text to count from
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=models.chat, prompt=[*ids, 10**6], max_tokens=2)
    assert e.value.body["param"] == "prompt" and "vocabulary" in e.value.body["message"]  # type: ignore[index]

    bert_ids = token_ids(tiny_bert, "hello world", add_special=True)
    vectors = client.embeddings.create(model=models.embed, input=[bert_ids, "hello world"], encoding_format="float")
    assert vectors.data[0].embedding == pytest.approx(vectors.data[1].embedding, abs=1e-5)
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=models.embed, input=[[1, 2], [10**6]])
    assert e.value.body["param"] == "input[1]"  # type: ignore[index]


def test_echo_scores_a_continuation(live: LiveServer, models: Models, tiny_llama: Path) -> None:
    """lm-evaluation-harness's loglikelihood request: token ids, echo, logprobs, one new token; the
    prompt's tokens come first with their log probabilities, the first null, as OpenAI's."""
    client = live.openai()
    ids = token_ids(tiny_llama, "Once upon a time there was", add_special=False)
    scored = client.completions.create(
        model=models.chat, prompt=[ids], echo=True, logprobs=1, max_tokens=1, temperature=0, seed=1234
    )
    choice = scored.choices[0]
    assert choice.text.startswith("Once upon a time there was") and len(choice.text) > len("Once upon a time there was")
    logprobs = choice.logprobs
    assert logprobs is not None and logprobs.tokens is not None and logprobs.token_logprobs is not None
    assert logprobs.top_logprobs is not None and logprobs.text_offset is not None
    assert len(logprobs.tokens) == len(ids) + 1
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(lp is not None and lp <= 0 for lp in logprobs.token_logprobs[1:])
    # the likeliest token, and the token itself where another was likelier (OpenAI's up to logprobs + 1)
    for token, lp, top in zip(logprobs.tokens[1:], logprobs.token_logprobs[1:], logprobs.top_logprobs[1:], strict=True):
        assert top is not None and top[token] == lp and len(top) == (1 if lp == max(top.values()) else 2)
    assert logprobs.text_offset == [sum(map(len, logprobs.tokens[:i])) for i in range(len(ids) + 1)]
    assert scored.usage is not None and scored.usage.completion_tokens == 1

    alone = client.completions.create(model=models.chat, prompt="Once upon a time", echo=True, logprobs=0, max_tokens=0)
    assert alone.choices[0].text == "Once upon a time" and alone.choices[0].finish_reason == "length"
    assert alone.usage is not None and alone.usage.completion_tokens == 0
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=models.chat, prompt="Once upon a time", max_tokens=0)
    assert e.value.body["param"] == "max_tokens"  # type: ignore[index]

    chunks = list(
        client.completions.create(model=models.chat, prompt="Once upon a time", echo=True, max_tokens=3, stream=True)
    )
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts[0] == "Once upon a time" and len("".join(texts)) > len(texts[0])


def test_a_batch_of_prompts(live: LiveServer, models: Models, tiny_llama: Path) -> None:
    """lm-evaluation-harness with --batch_size: several prompts (texts and token ids) in one request,
    one choice each in order, each as its own request would answer; usage counts every prompt."""
    client = live.openai()
    ids = token_ids(tiny_llama, "Once upon a time there was", add_special=False)
    prompts: list[str | list[int]] = ["Once upon a time", ids, "The quick brown fox"]
    batch = client.completions.create(
        model=models.chat, prompt=prompts, echo=True, logprobs=1, max_tokens=2, temperature=0
    )  # type: ignore[arg-type]
    singles = [
        client.completions.create(model=models.chat, prompt=[p], echo=True, logprobs=1, max_tokens=2, temperature=0)  # type: ignore[list-item]
        for p in prompts
    ]
    assert [c.index for c in batch.choices] == [0, 1, 2]
    assert [c.text for c in batch.choices] == [s.choices[0].text for s in singles]
    for choice, single in zip(batch.choices, singles, strict=True):
        assert choice.logprobs is not None and single.choices[0].logprobs is not None
        assert choice.logprobs.text_offset == single.choices[0].logprobs.text_offset  # each from its own prompt
    assert batch.usage is not None
    assert batch.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles if s.usage)
    assert batch.usage.completion_tokens == 6

    two_each = client.completions.create(model=models.chat, prompt=["a b", "c d"], n=2, max_tokens=3, seed=4)
    assert [c.index for c in two_each.choices] == [0, 1, 2, 3]
    assert two_each.usage is not None and two_each.usage.completion_tokens == 12


def test_embeddings_float_and_base64(live: LiveServer, models: Models) -> None:
    client = live.openai()
    texts = ["hello world", "the cat sat"]
    floats = client.embeddings.create(model=models.embed, input=texts, encoding_format="float")
    # Without encoding_format the SDK asks for base64 and decodes it itself.
    decoded = client.embeddings.create(model=models.embed, input=texts)
    assert [d.index for d in floats.data] == [0, 1]
    assert len(floats.data[0].embedding) == 64
    for a, b in zip(floats.data, decoded.data, strict=True):
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)
        assert math.isclose(math.fsum(x * x for x in a.embedding), 1.0, rel_tol=1e-4)
    assert floats.usage.prompt_tokens > 0

    with live.http() as http:
        body = http.post(
            "/v1/embeddings", json={"model": models.embed, "input": "hi", "encoding_format": "base64"}
        ).json()
    assert isinstance(body["data"][0]["embedding"], str)


@pytest.mark.slow
def test_real_model_answers_paris(live: LiveServer, smollm2: Path) -> None:
    client = live.openai()
    completion = client.chat.completions.create(
        model="smollm2-135m-instruct-q4_1",
        temperature=0,
        max_tokens=30,
        # this small model answers off topic under its template's default system prompt
        messages=[
            {"role": "system", "content": BUNDLED_SETTINGS.system_prompt or ""},
            {"role": "user", "content": "What is the capital of France?"},
        ],
    )
    assert "Paris" in (completion.choices[0].message.content or "")


PREDICTED_CODE = """def total(items):
    return sum(items)


def average(items):
    if not items:
        return 0
    return total(items) / len(items)
"""


@pytest.mark.slow
def test_predicted_outputs_through_the_sdk(live: LiveServer, smollm2: Path) -> None:
    """OpenAI's Predicted Outputs: the code being edited drafts the answer, which stays the model's own."""
    client, model = live.openai(), "smollm2-135m-instruct-q4_1"
    messages = [
        {"role": "user", "content": f"Copy this code exactly, in one code block:\n\n```python\n{PREDICTED_CODE}```"}
    ]
    plain = client.chat.completions.create(model=model, temperature=0, max_tokens=120, messages=messages)  # type: ignore[arg-type]
    details = plain.usage.completion_tokens_details if plain.usage else None
    assert details is not None and details.accepted_prediction_tokens == details.rejected_prediction_tokens == 0
    predicted = client.chat.completions.create(
        model=model,
        temperature=0,
        max_tokens=120,
        messages=messages,  # type: ignore[arg-type]
        prediction={"type": "content", "content": PREDICTED_CODE},
    )
    # (the same answer as without the prediction is the engine tests' to show: here the second request
    # reuses the first one's cached prompt, whose last token then rounds differently, alone in its batch)
    assert "def average(items):" in (predicted.choices[0].message.content or "")
    details = predicted.usage.completion_tokens_details  # type: ignore[union-attr]
    assert details is not None and details.accepted_prediction_tokens
    assert details.accepted_prediction_tokens > 20  # the answer holds the code


@pytest.mark.slow
def test_ignore_eos_writes_on_to_max_tokens_on_both_apis(live: LiveServer, smollm2: Path) -> None:
    """llama-server's `ignore_eos` (benchmark tools send it): an answer that ends after a few tokens
    goes on to max_tokens; it must be a boolean."""
    model, count = "smollm2-135m-instruct-q4_1", "30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41,"
    body = {"model": model, "max_tokens": 64, "temperature": 0, "messages": [{"role": "user", "content": count}]}
    http = live.http()
    ended = http.post("/v1/chat/completions", json=body).json()
    assert ended["choices"][0]["finish_reason"] == "stop" and ended["usage"]["completion_tokens"] < 64
    forced = http.post("/v1/chat/completions", json={**body, "ignore_eos": True}).json()
    assert forced["choices"][0]["finish_reason"] == "length" and forced["usage"]["completion_tokens"] == 64
    message = http.post("/v1/messages", json={**body, "ignore_eos": True}).json()
    assert message["stop_reason"] == "max_tokens" and message["usage"]["output_tokens"] == 64
    error = openai_error(http.post("/v1/chat/completions", json={**body, "ignore_eos": "yes"}), 400)
    assert error["param"] == "ignore_eos"


def test_request_ids(live: LiveServer, models: Models) -> None:
    with live.http() as http:
        first, second = http.get("/v1/models"), http.get("/v1/models")
        assert first.headers["x-request-id"] != second.headers["x-request-id"]
        assert "request-id" not in first.headers, "request-id is Anthropic's header"
        mine = http.get("/v1/models", headers={"x-request-id": "trace-42.a"})
        assert mine.headers["x-request-id"] == "trace-42.a"
        odd = http.get("/v1/models", headers={"x-request-id": "no spaces <please>"})
        assert odd.headers["x-request-id"].startswith("req_"), "an unsafe id is not echoed"
        for response in (
            http.get("/health"),
            http.get("/v1/nothing-here"),
            http.post("/v1/chat/completions", content=b"{"),
            httpx.get(live.url + "/v1/models"),
        ):
            assert response.headers["x-request-id"].startswith("req_"), response.text


def test_health_needs_no_key(live: LiveServer) -> None:
    with live.http(key=None) as http:
        response = http.get("/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
