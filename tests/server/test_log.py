"""The request log of a real server: one row per API request with its timeline, content and errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from server.helpers import (
    LiveServer,
    add_slow_model,
    live_server,
    server_settings,
    wait_for,
)
from spark import trace as steps
from spark.errors import RequestNotFound
from spark.library import Library
from spark.store.db import Database
from spark.store.keys import KeyTable
from spark.store.requests import RequestRecord, RequestTable

CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def logged(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path, tiny_bert: Path, slow_llama: Path
) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """A fresh server of its own (no model loaded yet) with a chat, an embedding and a slow model."""
    settings = server_settings(tmp_path_factory.mktemp("log-home"))
    with Library(settings) as library:
        models = {
            "chat": library.add_local(tiny_llama).id,
            "embed": library.add_local(tiny_bert).id,
            "slow": add_slow_model(library, slow_llama),
        }
    with live_server(settings) as live:
        yield live, models


@pytest.fixture
def live(logged: tuple[LiveServer, dict[str, str]]) -> LiveServer:
    return logged[0]


@pytest.fixture
def models(logged: tuple[LiveServer, dict[str, str]]) -> dict[str, str]:
    return logged[1]


def logged_request(live: LiveServer, response: httpx.Response) -> RequestRecord:
    """The log record of `response`'s request (written once the response is sent)."""
    request_id = response.headers["x-request-id"]
    log = live.state.request_log
    assert log is not None

    def written() -> bool:
        log.flush(5)
        try:
            live.state.requests.get(request_id)
        except RequestNotFound:
            return False
        return True

    wait_for(written, 10, f"request {request_id} in the log")
    return live.state.requests.get(request_id)


def names(record: RequestRecord) -> list[str]:
    return [s.name for s in record.timeline]


def test_first_request_shows_the_load_then_reuses_the_prefix(live: LiveServer, models: dict[str, str]) -> None:
    http = live.http()
    first = http.post("/v1/chat/completions", json={"model": models["chat"], "messages": CHAT, "max_tokens": 6})
    assert first.status_code == 200
    record = logged_request(live, first)
    assert names(record) == [
        steps.RECEIVED,
        steps.AUTHENTICATED,
        steps.QUEUED,
        steps.PLACEMENT,
        steps.LOAD_STARTED,
        steps.LOAD_FINISHED,
        steps.SLOT,
        steps.PROMPT,
        steps.FIRST_TOKEN,
        steps.FINISHED,
    ]
    times = [s.at_ms for s in record.timeline]
    assert times == sorted(times) and times[-1] <= record.duration_ms
    by_name = {s.name: s for s in record.timeline}
    assert by_name[steps.PLACEMENT].details["devices"] == ["cpu"]
    assert "needs" in by_name[steps.PLACEMENT].details["estimate"]
    assert by_name[steps.LOAD_STARTED].details == {"reason": "first request"}
    load = by_name[steps.LOAD_FINISHED].details
    assert load["seconds"] > 0 and load["pid"] == live.runner(models["chat"]).pid
    assert by_name[steps.QUEUED].details["position"] == 0

    usage = first.json()["usage"]
    assert record.status == 200 and record.route == "/v1/chat/completions" and record.model == models["chat"]
    assert record.key_name == "tests" and live.key is not None and live.key.startswith(record.key_prefix or "?")
    assert record.node == "local" and not record.stream and not record.zero_retention
    assert (record.prompt_tokens, record.completion_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert record.finish_reason == "length" and record.error_type is None
    assert record.ttft_ms is not None and by_name[steps.LOAD_FINISHED].at_ms < record.ttft_ms <= record.duration_ms
    assert record.tokens_per_second is not None and record.tokens_per_second > 0
    assert by_name[steps.SLOT].details["prompt_tokens"] == usage["prompt_tokens"]
    assert record.content is not None and record.content.request is not None
    assert record.content.request["messages"] == CHAT
    assert record.content.output == first.json()["choices"][0]["message"]["content"]

    # the same conversation again: no load, and the slot reuses the cached prefix
    again = http.post("/v1/chat/completions", json={"model": models["chat"], "messages": CHAT, "max_tokens": 6})
    second = logged_request(live, again)
    assert steps.LOAD_STARTED not in names(second) and steps.PLACEMENT not in names(second)
    slot = next(s for s in second.timeline if s.name == steps.SLOT)
    cached = again.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and slot.details["cached_tokens"] == cached == second.cached_tokens
    prompt = next(s for s in second.timeline if s.name == steps.PROMPT)
    assert prompt.details["tokens"] == second.prompt_tokens - cached


def test_speculative_decoding_shows_drafted_and_accepted_tokens(live: LiveServer, models: dict[str, str]) -> None:
    prompt = "one two three four five six seven eight nine ten " * 6  # the tiny model copies it, or loops
    # The engine drafts where its measured step costs say it pays; on a machine busy with other tests a
    # measurement can say otherwise for a while, so several attempts (the suite's other workers come
    # and go; each attempt takes a fraction of a second).
    for attempt in range(20):
        response = live.http().post(
            "/v1/completions",
            json={"model": models["chat"], "prompt": f"{attempt} {prompt}", "max_tokens": 60, "temperature": 0},
        )
        assert response.status_code == 200, response.text
        finished = next(s for s in logged_request(live, response).timeline if s.name == steps.FINISHED)
        if "drafted_tokens" in finished.details:
            break
    drafted, accepted = finished.details["drafted_tokens"], finished.details["accepted_tokens"]
    assert 0 < accepted <= drafted


def test_a_predictions_kept_and_dropped_tokens_are_logged(live: LiveServer, models: dict[str, str]) -> None:
    body = {"model": models["chat"], "messages": CHAT, "max_tokens": 12, "temperature": 0}
    answer = live.http().post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    predicted = {**body, "prediction": {"type": "content", "content": answer + " and more words"}}
    response = live.http().post("/v1/chat/completions", json=predicted)
    details = response.json()["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] > 0 and details["rejected_prediction_tokens"] > 0
    finished = next(s for s in logged_request(live, response).timeline if s.name == steps.FINISHED)
    assert finished.details["prediction_tokens_kept"] == details["accepted_prediction_tokens"]
    assert finished.details["prediction_tokens_dropped"] == details["rejected_prediction_tokens"]


def test_streams_record_their_output(live: LiveServer, models: dict[str, str]) -> None:
    text = []
    with (
        live.http() as http,
        http.stream(
            "POST",
            "/v1/completions",
            json={"model": models["chat"], "prompt": "Once upon", "max_tokens": 5, "stream": True},
        ) as response,
    ):
        for line in response.iter_lines():
            if line.startswith("data: {"):
                text.append(json.loads(line[6:])["choices"][0]["text"])
    record = logged_request(live, response)
    assert record.stream and record.route == "/v1/completions" and record.completion_tokens == 5
    assert record.content is not None and record.content.request is not None
    assert record.content.request["prompt"] == "Once upon" and record.content.output == "".join(text)
    assert names(record)[-2:] == [steps.FIRST_TOKEN, steps.FINISHED]


def test_embeddings_and_messages_are_logged(live: LiveServer, models: dict[str, str]) -> None:
    http = live.http()
    embedded = http.post("/v1/embeddings", json={"model": models["embed"], "input": ["one", "two"]})
    record = logged_request(live, embedded)
    assert record.status == 200 and record.route == "/v1/embeddings" and record.ttft_ms is None
    assert record.prompt_tokens == embedded.json()["usage"]["prompt_tokens"] > 0
    assert record.content is not None and record.content.request is not None
    assert record.content.request["input"] == ["one", "two"]
    assert next(s for s in record.timeline if s.name == steps.FINISHED).details == {"vectors": 2}

    message = http.post(
        "/v1/messages", json={"model": models["chat"], "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    )
    record = logged_request(live, message)
    assert record.route == "/v1/messages" and record.completion_tokens == 4
    assert record.request_id == message.headers["request-id"]

    counted = http.post(
        "/v1/messages/count_tokens", json={"model": models["chat"], "messages": [{"role": "user", "content": "hi"}]}
    )
    record = logged_request(live, counted)
    assert record.prompt_tokens == counted.json()["input_tokens"] and names(record)[-1] == steps.FINISHED


def test_errors_are_logged_with_their_type(live: LiveServer, models: dict[str, str]) -> None:
    http = live.http()
    body = b'{"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}'
    bad = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    record = logged_request(live, bad)
    assert (record.status, record.error_type) == (400, "invalid_request") and record.model == "x"  # as named
    assert record.error_message is not None and "max_tokens" in record.error_message
    assert names(record)[-1] == steps.FAILED
    # a body that could not be decoded is kept as it came, so the log shows what was wrong
    assert record.content is not None and record.content.body is not None and '"many"' in record.content.body

    for unnamed in ({"model": 5}, {"model": "m" * 300}, {"messages": CHAT}):  # no model name to log
        record = logged_request(live, http.post("/v1/chat/completions", json={**unnamed, "temperature": 5}))
        assert (record.status, record.model) == (400, None)

    missing = http.post("/v1/chat/completions", json={"model": "no-such-model", "messages": CHAT})
    record = logged_request(live, missing)
    assert (record.status, record.error_type, record.model) == (404, "model_not_found", "no-such-model")

    long_prompt = [{"role": "user", "content": "word " * 3000}]
    too_long = http.post("/v1/chat/completions", json={"model": models["chat"], "messages": long_prompt})
    record = logged_request(live, too_long)
    assert (record.status, record.error_type) == (400, "context_length_exceeded")

    anonymous = live.http(key=None).post("/v1/chat/completions", json={"model": models["chat"], "messages": CHAT})
    record = logged_request(live, anonymous)
    assert (record.status, record.error_type, record.key_name) == (401, "unauthorized", None)
    assert record.content is None and steps.AUTHENTICATED not in names(record)


def test_a_client_request_id_finds_its_request(live: LiveServer, models: dict[str, str]) -> None:
    response = live.http().post(
        "/v1/chat/completions",
        headers={"x-request-id": "trace-me-42"},
        json={"model": models["chat"], "messages": CHAT, "max_tokens": 2},
    )
    assert response.headers["x-request-id"] == "trace-me-42"
    record = logged_request(live, response)
    assert record.request_id == "trace-me-42" and record.id != "trace-me-42"


@contextmanager
def long_stream(live: LiveServer, model: str) -> Iterator[tuple[httpx.Response, Iterator[str]]]:
    """A streamed answer that runs long, its first 4 lines read: the response and its lines to come."""
    body = {"model": model, "messages": CHAT, "max_tokens": 10_000, "stream": True}
    with live.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = (line for line in response.iter_lines() if line)
        for _ in range(4):
            next(lines)
        yield response, lines


def test_a_client_that_goes_away_is_logged_as_cancelled(live: LiveServer, models: dict[str, str]) -> None:
    with long_stream(live, models["slow"]) as (response, _):
        pass
    record = logged_request(live, response)
    # logged as it ended, cancelled (499, as a batch's cancelled request), though its stream had begun with 200
    assert record.status == 499 and record.error_type == "cancelled" and record.finish_reason == "cancelled"
    assert names(record)[-2:] == [steps.FIRST_TOKEN, steps.CANCELLED]
    assert record.timeline[-1].details == {"reason": "the client went away"}
    slot = next(step for step in record.timeline if step.name == steps.SLOT).details
    assert (record.prompt_tokens, record.cached_tokens) == (slot["prompt_tokens"], slot["cached_tokens"]) != (0, 0)
    assert record.content is not None and record.content.request is not None
    assert record.content.output and record.completion_tokens >= 3  # what it had written: 3 chunks were read


def test_a_stream_that_fails_is_logged_with_what_it_had_made(live: LiveServer, models: dict[str, str]) -> None:
    with long_stream(live, models["slow"]) as (response, lines):
        live.unload(models["slow"])  # the runner goes while the answer runs
        assert any("runner_failed" in line for line in lines)
    record = logged_request(live, response)
    # logged as it ended (the error's status, though its stream had begun with 200), with its prompt and output
    assert (record.status, record.error_type, record.finish_reason) == (502, "runner_failed", None)
    slot = next(step for step in record.timeline if step.name == steps.SLOT).details
    assert record.prompt_tokens == slot["prompt_tokens"] > 0
    assert record.content is not None and record.content.output and record.completion_tokens >= 3


def test_a_clean_shutdown_writes_every_request(tmp_path: Path, tiny_llama: Path) -> None:
    settings = server_settings(tmp_path / "home")
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    with live_server(settings) as live:
        http = live.http()
        ids = [
            http.post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 1}).headers[
                "x-request-id"
            ]
            for _ in range(5)
        ]
    table = RequestTable(Database(settings.db_path))  # read after the server stopped
    assert {table.get(i).request_id for i in ids} == set(ids)


def test_retention_zero_keeps_no_log(tmp_path: Path, tiny_llama: Path) -> None:
    settings = server_settings(tmp_path / "home", SPARK_LOG_RETENTION_DAYS="0")
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    with live_server(settings) as live:
        assert live.state.request_log is None
        response = live.http().post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 1})
        assert response.status_code == 200
        wait_for(lambda: "spark_requests_total{" in live.http().get("/metrics").text, 5, "the metrics")
    assert RequestTable(Database(settings.db_path)).count() == 0
    assert KeyTable(Database(settings.db_path)).count() == 1
