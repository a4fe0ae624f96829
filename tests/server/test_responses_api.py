"""OpenAI's Responses API (`POST /v1/responses`), driven by the official `openai` SDK against a real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from server.helpers import LiveServer, Models, openai_error
from spark.library.bundled import BUNDLED_SETTINGS
from spark.server.admin_auth import read_admin_token

SMOLLM2 = "smollm2-135m-instruct-q4_1"


def test_response_object(live: LiveServer, models: Models) -> None:
    raw = live.openai().responses.with_raw_response.create(
        model=models.chat, input="hi", max_output_tokens=6, extra_body={"seed": 4}, metadata={"run": "1"}
    )
    response = raw.parse()
    assert response.id == "resp_" + raw.headers["x-request-id"].removeprefix("req_")
    assert response.object == "response" and response.model == models.chat
    # six tokens and no end: cut short by max_output_tokens
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    [item] = response.output
    assert item.type == "message" and item.role == "assistant" and item.id.startswith("msg_")
    assert item.content[0].type == "output_text" and response.output_text
    assert response.usage is not None and response.usage.output_tokens == 6
    assert response.usage.total_tokens == response.usage.input_tokens + 6
    # what the request asked is echoed, as OpenAI's SDKs read it back
    assert response.max_output_tokens == 6 and response.metadata == {"run": "1"}
    assert response.tool_choice == "auto" and response.tools == [] and response.store is True


# What the Open Responses specification requires of a response object (its ResponseResource),
# each with the JSON types it allows.
REQUIRED_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "object": (str,),
    "created_at": (int,),
    "completed_at": (int, type(None)),
    "status": (str,),
    "incomplete_details": (dict, type(None)),
    "model": (str,),
    "previous_response_id": (str, type(None)),
    "instructions": (str, list, type(None)),
    "output": (list,),
    "error": (dict, type(None)),
    "tools": (list,),
    "tool_choice": (str, dict),
    "truncation": (str,),
    "parallel_tool_calls": (bool,),
    "text": (dict,),
    "top_p": (int, float),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "top_logprobs": (int,),
    "temperature": (int, float),
    "reasoning": (dict, type(None)),
    "user": (str, type(None)),
    "usage": (dict, type(None)),
    "max_output_tokens": (int, type(None)),
    "max_tool_calls": (int, type(None)),
    "store": (bool,),
    "background": (bool,),
    "service_tier": (str,),
    "metadata": (dict,),
    "safety_identifier": (str, type(None)),
    "prompt_cache_key": (str, type(None)),
}


def check_response_object(response: dict[str, Any]) -> None:
    wrong = {
        k: response.get(k, "missing")
        for k, types in REQUIRED_FIELDS.items()
        if not isinstance(response.get(k, ...), types)
    }
    assert not wrong, wrong


def test_the_response_object_has_every_field_the_open_responses_spec_requires(live: LiveServer, models: Models) -> None:
    """Sampling parameters are the ones the answer was made with (the request's, the model's own
    defaults, Spark's): numbers, never null; what a local server has no use for is echoed."""
    body = {"model": SMOLLM2, "input": "Say hello.", "user": "u1", "prompt_cache_key": "k", "max_tool_calls": 2}
    made = live.http().post("/v1/responses", json=body).json()
    check_response_object(made)
    assert made["completed_at"] >= made["created_at"] and made["service_tier"] == "default"
    assert (made["temperature"], made["top_p"]) == (BUNDLED_SETTINGS.sampling.temperature, 0.95)
    assert (made["presence_penalty"], made["frequency_penalty"], made["top_logprobs"]) == (0.0, 0.0, 0)
    assert (made["user"], made["prompt_cache_key"], made["max_tool_calls"]) == ("u1", "k", 2)
    # the most output tokens the answer may have: the model's own (an answer cut there says by what)
    assert made["max_output_tokens"] == BUNDLED_SETTINGS.sampling.max_tokens
    asked = {**body, "temperature": 0.5, "top_p": 0.5, "presence_penalty": 0.25, "stream": True}
    with live.http() as http, http.stream("POST", "/v1/responses", json=asked) as stream:
        events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
    for event in events:
        if "response" in event:
            check_response_object(event["response"])
    final = events[-1]["response"]
    assert (final["temperature"], final["top_p"], final["presence_penalty"]) == (0.5, 0.5, 0.25)
    tiny = live.http().post("/v1/responses", json={**body, "model": models.chat}).json()  # no length of its own
    assert tiny["max_output_tokens"] == live.settings.default_max_tokens
    assert events[0]["response"]["completed_at"] is None and final["completed_at"] is not None


def test_input_tokens_counts_what_a_response_reads(live: LiveServer, models: Models) -> None:
    client = live.openai()
    asked = {
        "model": models.chat,
        "instructions": "You count.",
        "input": [{"role": "user", "content": "one two three"}, {"role": "assistant", "content": "four"}],
    }
    counted = client.responses.input_tokens.count(**asked)  # type: ignore[arg-type]
    assert counted.object == "response.input_tokens"
    response = client.responses.create(max_output_tokens=2, **asked)  # type: ignore[arg-type]
    assert response.usage is not None and counted.input_tokens == response.usage.input_tokens > 5
    with pytest.raises(openai.NotFoundError):
        client.responses.input_tokens.count(model="no-such-model", input="hi")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.input_tokens.count(model=models.chat, input="hi", previous_response_id="resp_1")
    assert refused.value.param == "previous_response_id"  # type: ignore[attr-defined]


def test_stream_events_build_the_same_response(live: LiveServer, models: Models) -> None:
    client = live.openai()
    ask: Any = {"model": models.chat, "input": [{"role": "user", "content": "hi"}], "max_output_tokens": 8}
    whole = client.responses.create(**ask, temperature=0)
    with client.responses.stream(**ask, temperature=0) as stream:
        events = list(stream)
    # cut short, it ends as OpenAI's do, with `response.incomplete` (the SDK's
    # get_final_response() waits for `response.completed`: see the real model's test)
    final = events[-1].response  # type: ignore[union-attr]
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == whole.output_text != ""
    assert final.usage is not None and final.usage.output_tokens == 8
    assert final.status == "incomplete" and final.id.startswith("resp_")


@pytest.mark.slow
def test_real_model_answers_paris(live: LiveServer, smollm2: Path) -> None:
    client = live.openai()
    asked: Any = {
        "model": SMOLLM2,
        "instructions": BUNDLED_SETTINGS.system_prompt,
        "temperature": 0,
        "max_output_tokens": 30,
    }
    response = client.responses.create(**asked, input="What is the capital of France?")
    assert response.status == "completed" and "Paris" in response.output_text
    with client.responses.stream(**asked, input="What is the capital of France?") as stream:
        streamed = stream.get_final_response()
    assert streamed.output_text == response.output_text and streamed.status == "completed"
    # an earlier turn sent back as items (the answer as an output_text part)
    follow = client.responses.create(
        **asked,
        input=[
            {"role": "user", "content": "What is the capital of France?"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": response.output_text}],
            },
            {"role": "user", "content": [{"type": "input_text", "text": "And what is the capital of Italy?"}]},
        ],
    )
    assert follow.status == "completed" and "Rome" in follow.output_text
    # the same turn, continuing the stored first answer instead of sending it back
    continued = client.responses.create(
        **asked, previous_response_id=response.id, input="And what is the capital of Italy?"
    )
    assert continued.previous_response_id == response.id and "Rome" in continued.output_text
    assert continued.usage is not None and continued.usage.input_tokens == follow.usage.input_tokens  # type: ignore[union-attr]
    assert follow.usage is not None and follow.usage.input_tokens > response.usage.input_tokens  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1", "previous_response_id": "resp_1"}, "conversation"),
        ({"background": True, "store": False}, "background"),
        ({"input": []}, "input"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].id"),  # no such item
        ({"input": [{"type": "item_reference"}]}, "input[0].id"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
        ({"input": [{"content": "no role"}]}, "input[0].role"),
        ({"input": [{"type": "function_call_output", "call_id": "call_1"}]}, "input[0].output"),
        ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input[0].name"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].file_id",  # never uploaded
        ),
        ({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}, "input[0].content[0].file_data"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].file_id",
        ),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0].content[0].image_url"),
        ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text"),
        ({"tools": [{"type": "websearch"}]}, "tools[0].type"),
        ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice"),  # left out: no tools
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_bad_input_names_the_param(live: LiveServer, models: Models, body: dict[str, Any], param: str) -> None:
    request = {"model": models.chat, "input": "hi", "max_output_tokens": 4, **body}
    for stream in (False, True):
        error = openai_error(live.http().post("/v1/responses", json={**request, "stream": stream}), 400)
        assert error["param"] == param and error["type"] == "invalid_request_error", error


def test_logprobs_when_included(live: LiveServer, models: Models) -> None:
    client = live.openai()
    asked: Any = {"model": models.chat, "input": "hi", "max_output_tokens": 6, "temperature": 0}
    wanted = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}
    response = client.responses.create(**asked, **wanted)
    text = response.output[0].content[0]  # type: ignore[union-attr]
    assert len(text.logprobs) == 6 and "".join(t.token for t in text.logprobs) == text.text  # type: ignore[union-attr]
    assert all(len(t.top_logprobs) == 2 for t in text.logprobs)  # type: ignore[union-attr]
    events = list(client.responses.create(**asked, **wanted, stream=True))
    deltas = [t.token for e in events if e.type == "response.output_text.delta" for t in e.logprobs]
    final = events[-1].response  # response.incomplete: cut at max_output_tokens  # type: ignore[union-attr]
    assert deltas == [t.token for t in final.output[0].content[0].logprobs] == [t.token for t in text.logprobs]  # type: ignore[union-attr]
    # only the include entry: the chosen tokens without alternatives; neither: none
    only = client.responses.create(**asked, include=["message.output_text.logprobs"])
    assert [t.top_logprobs for t in only.output[0].content[0].logprobs] == [[]] * 6  # type: ignore[union-attr]
    assert client.responses.create(**asked).output[0].content[0].logprobs == []  # type: ignore[union-attr]


def test_unknown_model_is_openais_404(live: LiveServer) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        live.openai().responses.create(model="no-such-model", input="hi")
    assert e.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_json_schema_format(live: LiveServer, models: Models) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["n"],
        "additionalProperties": False,
    }
    response = live.openai().responses.create(
        model=models.chat,
        input="a number",
        max_output_tokens=40,
        text={"format": {"type": "json_schema", "name": "number", "schema": schema, "strict": True}},
        extra_body={"seed": 1},
    )
    value = json.loads(response.output_text)
    assert set(value) == {"n"} and 0 <= value["n"] <= 9
    assert response.text is not None and response.text.format.type == "json_schema"  # type: ignore[union-attr]


def test_compact_sums_a_stored_conversation_up_into_one_item(live: LiveServer, models: Models) -> None:
    """`client.responses.compact` on a stored conversation: its user messages, then one compaction
    item; a later request that sends them reads the item as the model's summary; the request is logged."""
    client = live.openai()
    first = client.responses.create(model=models.chat, input="My name is Ada.", max_output_tokens=4)
    raw = client.responses.with_raw_response.compact(
        model=models.chat, previous_response_id=first.id, input=[{"role": "user", "content": "I like tea."}]
    )
    compacted = raw.parse()
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    *users, item = [i.model_dump(exclude_none=True, warnings=False) for i in compacted.output]
    assert [u["content"][0]["text"] for u in users] == ["My name is Ada.", "I like tea."]
    assert item["type"] == "compaction" and item["encrypted_content"]
    assert (
        0 < compacted.usage.output_tokens <= 512 // 4 and compacted.usage.input_tokens > 0
    )  # a quarter of the context

    summary = client.responses.create(model=models.chat, input=[*users, item, {"role": "user", "content": "Go on."}])
    assert summary.status in ("completed", "incomplete")
    # what the model read in place of the item: a message saying it is the earlier conversation's summary
    counted = client.responses.input_tokens.count(model=models.chat, input=[*users, item]).input_tokens
    assert counted > client.responses.input_tokens.count(model=models.chat, input=users).input_tokens
    logged = live.http(key=read_admin_token(live.settings)).get(f"/api/requests/{raw.headers['x-request-id']}")
    assert logged.status_code == 200, logged.text
    assert logged.json()["route"] == "/v1/responses/compact" and logged.json()["completion_tokens"] > 0


def test_compact_sums_up_what_fits_of_a_conversation_longer_than_the_context(live: LiveServer, models: Models) -> None:
    turns = [{"role": "user", "content": f"Fact {i}: " + "tea and biscuits " * 20} for i in range(12)]
    compacted = live.openai().responses.compact(model=models.chat, input=turns)  # type: ignore[arg-type]
    assert len(compacted.output) == 13 and compacted.output[-1].type == "compaction"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": "hi"}, 400, "model"),
        ({"model": "chat"}, 400, "input"),
        (
            {"model": "chat", "input": [{"type": "compaction", "encrypted_content": "x"}]},
            400,
            "input[0].encrypted_content",
        ),
        ({"model": "chat", "previous_response_id": "resp_nope"}, 400, "previous_response_id"),
        ({"model": "nope", "input": "hi"}, 404, "model"),
    ],
)
def test_a_bad_compact_request_is_an_openai_error(
    live: LiveServer, models: Models, body: dict[str, Any], status: int, param: str
) -> None:
    if body.get("model") == "chat":
        body = {**body, "model": models.chat}
    error = openai_error(live.http().post("/v1/responses/compact", json=body), status)
    assert error["param"] == param


def test_server_side_compaction_past_the_threshold(live: LiveServer, models: Models) -> None:
    """`context_management` compaction: past `compact_threshold` prompt tokens the earlier turns are
    summed up into a compaction item that comes first in the output, and the answer reads the
    summary and the last turn only; below it, or with no earlier turn, nothing is compacted."""
    client = live.openai()
    long = "tea and biscuits " * 22
    turns: Any = [
        {"role": "user", "content": "Remember: " + long},
        {"role": "assistant", "content": "Noted: " + long},
        {"role": "user", "content": "What did I say?"},
    ]
    whole = client.responses.input_tokens.count(model=models.chat, input=turns).input_tokens
    asked: dict[str, Any] = {"model": models.chat, "input": turns, "max_output_tokens": 4}
    compacting = [{"type": "compaction", "compact_threshold": whole - 1}]

    below = [{"type": "compaction", "compact_threshold": whole}]
    plain = client.responses.create(**asked, extra_body={"context_management": below})
    assert [i.type for i in plain.output] == ["message"]
    assert 512 * 3 // 4 < whole < 500  # no threshold: three quarters of the context
    default = client.responses.create(**asked, extra_body={"context_management": [{"type": "compaction"}]})
    assert [i.type for i in default.output] == ["compaction", "message"]
    made = client.responses.create(**asked, extra_body={"context_management": compacting})
    assert [i.type for i in made.output] == ["compaction", "message"]
    assert made.output[0].id.startswith("cmp_")  # type: ignore[union-attr]
    assert made.usage is not None and made.usage.input_tokens < whole - 200  # the summary, then the last turn

    with (
        live.http() as http,
        http.stream(
            "POST", "/v1/responses", json={**asked, "context_management": compacting, "stream": True}
        ) as stream,
    ):
        events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
    types = [e["type"] for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert events[2]["item"]["type"] == "compaction" and events[2]["output_index"] == 0
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["compaction", "message"]
    check_response_object(events[-1]["response"])
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added[1]["output_index"] == 1 and added[1]["item"]["type"] == "message"

    # the next turn goes on from the compaction item: what came before it may be left out
    after = [
        *[i.model_dump(exclude_none=True, warnings=False) for i in made.output],
        {"role": "user", "content": "And?"},
    ]
    assert client.responses.create(model=models.chat, input=after, max_output_tokens=2).status == "incomplete"
    single: Any = [{"role": "user", "content": long}]
    lone = client.responses.create(
        model=models.chat, input=single, max_output_tokens=2, extra_body={"context_management": compacting}
    )
    assert [i.type for i in lone.output] == ["message"]  # one turn: nothing before it to compact


def test_a_stream_shows_life_while_it_waits_for_its_first_token(
    live: LiveServer, models: Models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codex drops a stream after a while without an event: a model loading or a long prompt read before
    the first token sends `response.in_progress` again at the ping's pace (here made short; the server
    runs in this process), and the SDK's stream takes it in its stride."""
    from spark.server import generation

    monkeypatch.setattr(generation, "PING_SECONDS", 0.01)
    live.unload(models.chat)  # its load, a fraction of a second, is then long enough to be pinged through
    long = "Read this slowly and remember every word of it. " * 8  # within the tiny model's 512 tokens
    with live.openai().responses.stream(model=models.chat, input=long, max_output_tokens=3) as stream:
        kinds = [event.type for event in stream]
    first_output = kinds.index("response.output_item.added")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:first_output].count("response.in_progress") >= 1  # while the model loaded
    assert kinds[-1] == "response.incomplete"  # cut at max_output_tokens: the tiny model never stops
