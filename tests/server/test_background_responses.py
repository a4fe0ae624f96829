"""Background responses (`background: true`), driven by the official `openai` SDK against a real
server: queued at once and polled, streamed and followed again from any event, cancelled in the
runner, failed with the error kept, and every refusal named."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import openai
import pytest

from server.helpers import LiveServer, Models, add_slow_model, live_server, openai_error, server_settings, wait_for
from server.test_log import logged_request
from spark import trace as steps
from spark.library import Library
from spark.server import background
from spark.store.db import Database
from spark.store.keys import KeyTable
from spark.store.responses import ResponseTable, owner_of

UNFINISHED = ("queued", "in_progress")
LONG = 12_000  # tokens: many seconds on the slow model


def _ended(client: openai.OpenAI, response_id: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while (response := client.responses.retrieve(response_id)).status in UNFINISHED:
        assert time.monotonic() < deadline, f"{response_id} still {response.status}"
        time.sleep(0.05)
    return response


def test_a_background_response_is_queued_then_polled_to_the_answer_a_foreground_one_gives(
    live: LiveServer, models: Models
) -> None:
    client = live.openai()
    asked: Any = {"model": models.chat, "input": "hi", "max_output_tokens": 6, "temperature": 0}
    foreground = client.responses.create(**asked)
    raw = client.responses.with_raw_response.create(**asked, background=True, metadata={"job": "7"})
    queued = raw.parse()
    assert queued.background is True and queued.status in UNFINISHED and queued.metadata == {"job": "7"}
    ended = _ended(client, queued.id)
    assert ended.background is True and ended.status == "incomplete"  # six tokens, cut by max_output_tokens
    assert ended.output_text == foreground.output_text
    assert ended.usage is not None and ended.usage.output_tokens == 6
    assert client.responses.cancel(queued.id).status == "incomplete"  # it had ended: as it ended
    # the log record is written when the answer ends, not when the request returned
    record = logged_request(live, raw.http_response)  # type: ignore[arg-type]
    assert (record.status, record.completion_tokens, record.error_type) == (200, 6, None)
    assert steps.FINISHED in [s.name for s in record.timeline]
    # it continues like any stored response
    then = client.responses.create(model=models.chat, previous_response_id=queued.id, input="and?", max_output_tokens=2)
    assert then.usage is not None and then.usage.input_tokens > ended.usage.input_tokens


def test_a_background_answer_to_a_conversation_adds_to_it_once_it_ends(live: LiveServer, models: Models) -> None:
    client = live.openai()
    conversation = client.conversations.create()
    queued = client.responses.create(
        model=models.chat, input="hi", max_output_tokens=3, conversation=conversation.id, background=True
    )
    ended = _ended(client, queued.id)
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in items] == ["message", "message"]
    assert items[1].id == ended.output[0].id


def test_a_background_stream_is_followed_again_from_any_event(live: LiveServer, models: Models) -> None:
    client = live.openai()
    with client.responses.create(
        model=models.chat, input="hi", max_output_tokens=8, background=True, stream=True
    ) as stream:
        events = list(stream)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.incomplete"
    response_id = events[-1].response.id  # type: ignore[union-attr]
    assert events[-1].response.background is True  # type: ignore[union-attr]
    again = list(client.responses.retrieve(response_id, stream=True, starting_after=3))
    assert [e.model_dump() for e in again] == [e.model_dump() for e in events[4:]]
    assert len(list(client.responses.retrieve(response_id, stream=True))) == len(events)
    assert client.responses.retrieve(response_id).output_text == events[-1].response.output_text  # type: ignore[union-attr]


def test_cancel_stops_a_background_answer_in_its_runner(live: LiveServer, models: Models) -> None:
    client = live.openai()
    raw = client.responses.with_raw_response.create(
        model=models.slow, input="hi", max_output_tokens=LONG, background=True
    )
    queued = raw.parse()
    runner = lambda: live.runner(models.slow)  # noqa: E731
    busy = lambda: any(r.model == models.slow and r.busy == 1 for r in live.runners())  # noqa: E731
    wait_for(busy, 30, "the runner to generate the answer")
    wait_for(lambda: client.responses.retrieve(queued.id).output_text, 10, "some output")
    so_far = client.responses.retrieve(queued.id)
    assert so_far.status == "in_progress" and so_far.output[0].status == "in_progress"  # the answer as it stands
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled" and cancelled.output_text.startswith(so_far.output_text)
    assert cancelled.output[0].status == "incomplete"
    wait_for(lambda: runner().busy == 0 and runner().in_flight == 0, 5, "the runner to drop the request")
    assert client.responses.retrieve(queued.id).status == "cancelled"
    assert client.responses.cancel(queued.id).status == "cancelled"  # again: as it is
    record = logged_request(live, raw.http_response)  # type: ignore[arg-type]
    assert record.error_type == "cancelled" and steps.CANCELLED in [s.name for s in record.timeline]


def test_a_background_answer_that_fails_keeps_its_error(live: LiveServer, models: Models) -> None:
    client = live.openai()
    queued = client.responses.create(model=models.chat, input="word " * 600, background=True)  # over 512 tokens
    assert queued.status == "queued"
    failed = _ended(client, queued.id)
    assert failed.status == "failed" and failed.error is not None
    # the code clients compact on (Codex: "ran out of room"), the prompt named as this API names it
    assert failed.error.code == "context_length_exceeded" and "'input'" in failed.error.message
    # with truncation "auto" a conversation too long loses its oldest turns instead
    turns: Any = [{"role": "user", "content": "word " * 300}, {"role": "user", "content": "Say OK."}] * 2
    fitted = client.responses.create(
        model=models.chat, input=turns, max_output_tokens=2, truncation="auto", background=True
    )
    assert _ended(client, fitted.id).status == "incomplete"


def test_background_refusals_are_named(live: LiveServer, models: Models) -> None:
    http = live.http()
    asked = {"model": models.chat, "input": "hi", "max_output_tokens": 2}
    foreground = http.post("/v1/responses", json=asked).json()["id"]
    for path, param in (
        (f"/v1/responses/{foreground}/cancel", "response_id"),
        (f"/v1/responses/{foreground}?stream=true", "stream"),
    ):
        call = http.post if path.endswith("/cancel") else http.get
        assert openai_error(call(path), 400)["param"] == param
    background = http.post("/v1/responses", json={**asked, "background": True}).json()["id"]
    assert openai_error(http.get(f"/v1/responses/{background}?stream=true&starting_after=-5"), 400)["param"] == (
        "starting_after"
    )
    assert openai_error(http.post("/v1/responses/resp_nope/cancel"), 404)["code"] == "response_not_found"
    refused = http.post("/v1/responses", json={**asked, "background": True, "store": False})
    assert openai_error(refused, 400)["param"] == "background"
    unknown = http.post("/v1/responses", json={**asked, "model": "no-such-model", "background": True})
    assert openai_error(unknown, 404)["code"] == "model_not_found"  # refused at once, not in the background
    private = KeyTable(Database(live.settings.db_path)).create("private-background", zero_retention=True)[1]
    zero = http.post(
        "/v1/responses", json={**asked, "background": True}, headers={"authorization": f"Bearer {private}"}
    )
    assert openai_error(zero, 400)["param"] == "background"


def test_a_background_response_still_running_cannot_be_continued_yet(live: LiveServer, models: Models) -> None:
    client = live.openai()
    queued = client.responses.create(model=models.slow, input="hi", max_output_tokens=LONG, background=True)
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model=models.slow, previous_response_id=queued.id, input="and?")
        assert refused.value.param == "previous_response_id" and "in progress" in refused.value.message  # type: ignore[attr-defined]
    finally:
        client.responses.cancel(queued.id)


def test_a_background_answer_running_when_the_server_stops_ends_failed(
    tmp_path_factory: pytest.TempPathFactory, slow_llama: Path
) -> None:
    settings = server_settings(tmp_path_factory.mktemp("stopping"), SPARK_SHUTDOWN_GRACE="0s")
    with Library(settings) as library:
        slow = add_slow_model(library, slow_llama)
    with live_server(settings) as server:
        client = server.openai()
        queued = client.responses.create(model=slow, input="hi", max_output_tokens=LONG, background=True)
        wait_for(lambda: any(r.busy == 1 for r in server.runners()), 30, "the runner to generate the answer")
    owner = KeyTable(Database(settings.db_path)).get("tests")
    stored = ResponseTable(Database(settings.db_path)).get(queued.id, owner_of(owner.name, owner.prefix))
    assert stored is not None and stored.response["status"] == "failed"
    assert stored.response["error"]["code"] == "server_error"


def test_the_events_of_a_background_response_are_kept_a_while_after_it_ends(
    live: LiveServer, models: Models, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = live.openai()
    queued = client.responses.create(model=models.chat, input="hi", max_output_tokens=2, background=True)
    ended = _ended(client, queued.id)
    monkeypatch.setattr(background, "KEPT_SECONDS", 0.0)  # as if ten minutes had passed
    time.sleep(0.01)
    refused = live.http().get(f"/v1/responses/{queued.id}?stream=true")
    assert openai_error(refused, 400)["param"] == "stream" and "no longer kept" in refused.json()["error"]["message"]
    assert client.responses.retrieve(queued.id).output_text == ended.output_text  # the response itself stays
