"""The Anthropic routes, driven by the official `anthropic` SDK against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx2
import pytest
from anthropic.types import ThreadUnsupportedRequestError

from server.helpers import LiveServer, Models
from spark.server import generation

MESSAGES = [{"role": "user", "content": "hello there"}]


def test_message(live: LiveServer, models: Models) -> None:
    raw = live.anthropic().messages.with_raw_response.create(
        model=models.chat, max_tokens=7, messages=MESSAGES, system="Be brief."
    )  # type: ignore[arg-type]
    message = raw.parse()
    assert raw.headers["request-id"] == raw.headers["x-request-id"]
    assert message.type == "message" and message.role == "assistant" and message.model == models.chat
    assert message.id == "msg_" + raw.headers["x-request-id"].removeprefix("req_")
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 7
    assert message.content[0].type == "text" and message.content[0].text


def test_stream_event_order(live: LiveServer, models: Models) -> None:
    client = live.anthropic()
    events = list(
        client.messages.create(
            model=models.chat,
            max_tokens=6,
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
        )
    )
    kinds = [e.type for e in events if e.type != "ping"]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    delta = events[-2]
    assert delta.type == "message_delta" and delta.delta.stop_reason == "max_tokens"
    assert delta.usage.output_tokens == 6

    with client.messages.stream(model=models.chat, max_tokens=6, messages=MESSAGES) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text  # type: ignore[union-attr]


def test_a_thread_is_refused_so_that_the_sdk_sends_the_whole_conversation(live: LiveServer, models: Models) -> None:
    sent: list[dict] = []
    client = anthropic.Anthropic(
        base_url=live.url,
        api_key=live.key,
        max_retries=0,
        timeout=60,
        http_client=httpx2.Client(event_hooks={"request": [lambda r: sent.append(json.loads(r.content))]}),
    )

    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: the city
        """
        return f"Sunny in {city}"

    runner = client.beta.messages.tool_runner(  # threads by default, and goes on without where refused
        model=models.chat,
        max_tokens=100,
        system="Be brief.",
        tools=[get_weather],
        tool_choice={"type": "tool", "name": "get_weather"},
        max_iterations=2,
        messages=MESSAGES,  # type: ignore[arg-type]
    )
    replies = list(runner)
    assert replies[0].stop_reason == "tool_use", replies[0]
    assert sent[0]["thread"] == {"type": "create"} and all("thread" not in body for body in sent[1:])
    last = sent[-1]  # the whole conversation, with the system prompt and tools, as without threads
    assert last["system"] == "Be brief." and last["tools"][0]["name"] == "get_weather"
    assert [m["role"] for m in last["messages"]] == ["user", "assistant", "user"]
    assert last["messages"][2]["content"][0]["type"] == "tool_result"
    # the SDK's thread helper raises Anthropic's typed error, which says why
    thread = client.beta.messages.thread(model=models.chat, max_tokens=3)
    with pytest.raises(ThreadUnsupportedRequestError, match="'thread' is not supported"):
        thread.send({"role": "user", "content": "hello"})


def test_max_tokens_0_caches_the_prompt_without_an_answer(live: LiveServer, models: Models) -> None:
    """As Anthropic's SDKs document it: the prompt is read into the cache, and no answer is written."""
    client = live.anthropic()
    question = {"type": "text", "text": "A long question a client warms the cache for, ahead of time."}
    messages = [{"role": "user", "content": [{**question, "cache_control": {"type": "ephemeral"}}]}]
    warmed = client.messages.create(model=models.chat, max_tokens=0, messages=messages)  # type: ignore[arg-type]
    assert warmed.content == [] and warmed.stop_reason == "max_tokens" and warmed.usage.output_tokens == 0
    assert warmed.usage.input_tokens > 0
    asked = client.messages.create(model=models.chat, max_tokens=2, messages=messages)  # type: ignore[arg-type]
    assert asked.usage.cache_read_input_tokens and asked.usage.cache_read_input_tokens >= warmed.usage.input_tokens - 1
    with client.messages.stream(model=models.chat, max_tokens=0, messages=messages) as stream:  # type: ignore[arg-type]
        assert stream.get_final_message().content == []


def test_cache_reads_are_reported_to_requests_that_mark_cache_control(live: LiveServer, models: Models) -> None:
    """As Anthropic: without `cache_control` a request's `input_tokens` is its whole prompt (AutoGen's
    budgets read it alone); with it, the tokens reused from the cache are `cache_read_input_tokens`."""
    client = live.anthropic()
    text = "Tell me about the sea, in the manner of an old sailor who has seen every ocean. " * 3
    plain = [{"role": "user", "content": text}]
    marked = [{"role": "user", "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]}]
    first = client.messages.create(model=models.chat, max_tokens=1, messages=plain)  # type: ignore[arg-type]
    again = client.messages.create(model=models.chat, max_tokens=1, messages=plain)  # type: ignore[arg-type]
    assert again.usage.input_tokens == first.usage.input_tokens > 20 and not again.usage.cache_read_input_tokens
    cached = client.messages.create(model=models.chat, max_tokens=1, messages=marked)  # type: ignore[arg-type]
    assert cached.usage.cache_read_input_tokens and cached.usage.cache_read_input_tokens > 20
    assert cached.usage.input_tokens + cached.usage.cache_read_input_tokens == first.usage.input_tokens
    with client.messages.stream(model=models.chat, max_tokens=1, messages=plain) as stream:  # type: ignore[arg-type]
        usage = stream.get_final_message().usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (first.usage.input_tokens, 0)


def test_count_tokens_matches_the_prompt_really_used(live: LiveServer, models: Models) -> None:
    client = live.anthropic()
    body = {
        "model": models.chat,
        "system": "You count.",
        "messages": [
            {"role": "user", "content": "one two three"},
            {"role": "assistant", "content": "four"},
            {"role": "user", "content": "five six"},
        ],
    }
    counted = client.messages.count_tokens(**body)  # type: ignore[arg-type]
    message = client.messages.create(max_tokens=2, **body)  # type: ignore[arg-type]
    used = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens == used > 10


@pytest.mark.slow
def test_a_prefilled_answer_is_continued(live: LiveServer, smollm2: Path) -> None:
    question = {"role": "user", "content": "What is the capital of France? Answer in JSON."}
    body = {"model": "smollm2-135m-instruct-q4_1", "max_tokens": 30}  # greedy (bundled settings)
    prefill = {"role": "assistant", "content": '{"capital": "'}
    message = live.anthropic().messages.create(messages=[question, prefill], **body)  # type: ignore[arg-type]
    text = message.content[0].text  # type: ignore[union-attr]
    assert text.startswith("Paris") and json.loads(prefill["content"] + text)["capital"] == "Paris"
    # OpenAI's route continues it too, as llama-server and Ollama do
    chat = live.openai().chat.completions.create(messages=[question, prefill], **body)  # type: ignore[arg-type]
    assert chat.choices[0].message.content == text


@pytest.mark.slow
def test_a_text_document_is_read(live: LiveServer, smollm2: Path) -> None:
    memo = "The meeting is on Tuesday in room 12. Bring the blue folder."
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": memo},
        "title": "Memo",
    }
    question = {"type": "text", "text": "Which room is the meeting in?"}
    client = live.anthropic()
    asked = {"model": "smollm2-135m-instruct-q4_1", "messages": [{"role": "user", "content": [document, question]}]}
    message = client.messages.create(max_tokens=40, **asked)  # type: ignore[arg-type]  # greedy (bundled settings)
    assert "12" in message.content[0].text  # type: ignore[union-attr]
    without = {**asked, "messages": [{"role": "user", "content": [question]}]}
    assert (
        client.messages.count_tokens(**asked).input_tokens > client.messages.count_tokens(**without).input_tokens + 10
    )  # type: ignore[arg-type]
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
    with pytest.raises(anthropic.BadRequestError, match="could not be read"):  # "%PDF-" and nothing more
        client.messages.create(
            max_tokens=4, model="smollm2-135m-instruct-q4_1", messages=[{"role": "user", "content": [pdf]}]
        )  # type: ignore[arg-type]


def test_claude_codes_requests_are_answered_and_reuse_the_cache_across_sessions(
    live: LiveServer, models: Models
) -> None:
    """Claude Code sends a system turn among the messages and opens its system prompt with a billing
    block whose hash changes every session: answered, and a new session reuses the cached prompt."""
    instructions = {"type": "text", "text": "You are a coding assistant. " * 20, "cache_control": {"type": "ephemeral"}}
    client = live.anthropic()
    usages = []
    for session in ("a1b", "c2d"):
        billing = {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197.{session};"}
        message = client.messages.create(
            model=models.chat,
            max_tokens=2,
            system=[billing, instructions],  # type: ignore[list-item]
            messages=[*MESSAGES, {"role": "system", "content": "Reminder: be brief."}],  # type: ignore[list-item]
            extra_headers={"anthropic-beta": "mid-conversation-system-2026-04-07"},
        )
        usages.append(message.usage)
    assert (usages[1].cache_read_input_tokens or 0) > usages[0].input_tokens // 2, usages


def test_a_base_url_with_v1_is_told_so(live: LiveServer, models: Models) -> None:
    """Anthropic's SDKs add /v1 themselves: given OpenAI's base URL, every call is a 404 saying why."""
    client = anthropic.Anthropic(base_url=live.url + "/v1", api_key=live.key, max_retries=0)
    with pytest.raises(anthropic.NotFoundError, match="Anthropic's SDKs add /v1 themselves"):
        client.messages.create(model=models.chat, max_tokens=2, messages=[{"role": "user", "content": "hi"}])


def test_models_in_anthropic_shape(live: LiveServer, models: Models) -> None:
    client = live.anthropic()
    ids = [m.id for m in client.models.list()]
    assert models.chat in ids and models.embed not in ids, "only models that answer Messages"
    first = client.models.list(limit=1)
    assert len(first.data) == 1 and first.has_more, "paged as Anthropic's"
    assert [m.id for m in client.models.list(limit=1, after_id=first.data[0].id)] == ids[1:], "the SDK pages on"
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        client.models.list(limit=0)
    one = client.models.retrieve(models.chat)
    assert one.type == "model" and one.display_name == models.chat
    assert one.max_input_tokens == one.max_tokens == 512  # the tiny model's training context caps the window
    assert one.capabilities is not None and one.capabilities.pdf_input.supported
    assert not one.capabilities.thinking.supported and not one.capabilities.image_input.supported
    with pytest.raises(anthropic.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert e.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_pings_while_the_model_loads(live: LiveServer, models: Models, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server runs in this process: a short ping interval makes the load of a model that
    # is not loaded (a fraction of a second) long enough to be pinged through.
    monkeypatch.setattr(generation, "PING_SECONDS", 0.01)
    live.unload(models.tools)
    with (
        live.http() as http,
        http.stream(
            "POST", "/v1/messages", json={"model": models.tools, "max_tokens": 3, "messages": MESSAGES, "stream": True}
        ) as response,
    ):
        assert response.status_code == 200
        names = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[1] == "ping"
    content = [n for n in names if n != "ping"]
    assert content[1] == "content_block_start" and content[-1] == "message_stop"
