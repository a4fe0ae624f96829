"""Batches against a real server, with OpenAI's and Anthropic's SDKs: every request answered as the
same request sent alone is (same answer, a log record of its own), errors kept per request,
cancelled in the runner, and every refusal named."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from server.helpers import (
    LiveServer,
    Models,
    add_slow_model,
    anthropic_error,
    live_server,
    openai_error,
    server_settings,
    wait_for,
)
from spark.errors import ShuttingDown
from spark.library import Library
from spark.server.admin_auth import read_admin_token
from spark.server.batches import BatchRunner
from spark.server.draining import Drain
from spark.settings import load_settings
from spark.store.batches import Batch, BatchTable
from spark.store.db import Database
from spark.store.files import FileTable
from spark.store.keys import KeyTable
from spark.store.requests import RequestTable
from spark.store.responses import owner_of
from traffic import spark_serve

LONG = 12_000  # tokens: many seconds on the slow model


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def _ended(get: Any, batch_id: str, timeout: float = 60) -> Any:
    """The batch once it has ended (OpenAI's or Anthropic's)."""
    deadline = time.monotonic() + timeout
    while getattr(batch := get(batch_id), "status", None) == "in_progress" or getattr(
        batch, "processing_status", None
    ) in ("in_progress", "canceling"):
        assert time.monotonic() < deadline, f"batch {batch_id} still running"
        time.sleep(0.1)
    return batch


def test_an_openai_batch_answers_each_request_as_alone(live: LiveServer, models: Models) -> None:
    client = live.openai()
    ask: Any = {
        "model": models.chat,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "temperature": 0,
    }
    alone = client.chat.completions.create(**ask).choices[0].message.content
    lines = [
        {"custom_id": "first", "method": "POST", "url": "/v1/chat/completions", "body": ask},
        {"custom_id": "second", "method": "POST", "url": "/v1/chat/completions", "body": {**ask, "max_tokens": 2}},
        {
            "custom_id": "bad",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {**ask, "model": "no-such-model"},
        },
    ]
    uploaded = client.files.create(file=("batch.jsonl", io.BytesIO(_jsonl(lines))), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"job": "1"}
    )
    assert batch.status == "in_progress" and batch.request_counts is not None and batch.request_counts.total == 3
    ended = _ended(client.batches.retrieve, batch.id)
    assert ended.request_counts.completed == 2 and ended.request_counts.failed == 1 and ended.metadata == {"job": "1"}
    assert ended.output_file_id and ended.error_file_id
    output = [json.loads(line) for line in client.files.content(ended.output_file_id).text.splitlines()]
    assert [o["custom_id"] for o in output] == ["first", "second"]
    assert output[0]["response"]["status_code"] == 200
    assert output[0]["response"]["body"]["choices"][0]["message"]["content"] == alone
    assert output[1]["response"]["body"]["usage"]["completion_tokens"] == 2
    assert output[1]["response"]["body"]["timings"]["predicted_n"] == 2  # as the same request alone
    # each request has its own log record, under the batch's key
    assert output[0]["response"]["request_id"] == f"{batch.id}:0"  # its place in the batch
    record = live.state.requests.get(f"{batch.id}:0")
    assert record.key_name == "tests" and record.route == "/v1/chat/completions"
    [error] = [json.loads(line) for line in client.files.content(ended.error_file_id).text.splitlines()]
    assert error["custom_id"] == "bad" and error["response"]["status_code"] == 404
    assert error["response"]["body"]["error"]["code"] == "model_not_found"
    assert batch.id in [b.id for b in client.batches.list()]


def test_an_anthropic_batch_answers_each_request_and_keeps_its_errors(live: LiveServer, models: Models) -> None:
    client = live.anthropic()
    params: Any = {
        "model": models.chat,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0,
    }
    sent = {k: v for k, v in params.items() if k != "temperature"}
    alone = client.messages.create(**sent, extra_body={"temperature": 0}).content[0].text  # type: ignore[union-attr]
    batch = client.messages.batches.create(
        requests=[
            {"custom_id": "one", "params": params},
            {"custom_id": "broken", "params": {**params, "max_tokens": -1}},
        ]
    )
    assert batch.type == "message_batch" and batch.processing_status == "in_progress"
    ended = _ended(client.messages.batches.retrieve, batch.id)
    assert (ended.request_counts.succeeded, ended.request_counts.errored) == (1, 1) and ended.results_url
    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert results["one"].type == "succeeded" and results["one"].message.content[0].text == alone  # type: ignore[union-attr]
    assert results["broken"].type == "errored"
    assert results["broken"].error.error.type == "invalid_request_error"  # type: ignore[union-attr]
    assert batch.id in [b.id for b in client.messages.batches.list()]
    assert client.messages.batches.delete(batch.id).type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)


def test_cancelling_a_batch_stops_it_in_the_runner(live: LiveServer, models: Models) -> None:
    client = live.anthropic()
    params: Any = {"model": models.slow, "max_tokens": LONG, "messages": [{"role": "user", "content": "hi"}]}
    batch = client.messages.batches.create(requests=[{"custom_id": f"r{i}", "params": params} for i in range(3)])
    busy = lambda: any(r.model == models.slow and r.busy >= 1 for r in live.runners())  # noqa: E731
    wait_for(busy, 30, "the runner to answer the first request")
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.delete(batch.id)  # not ended
    early = live.http().get(f"/v1/messages/batches/{batch.id}/results", headers={"anthropic-version": "2023-06-01"})
    assert "still being answered" in anthropic_error(early, 400)["message"]
    cancelling = client.messages.batches.cancel(batch.id)
    assert cancelling.cancel_initiated_at is not None
    ended = _ended(client.messages.batches.retrieve, batch.id)
    assert ended.request_counts.canceled == 3 and ended.request_counts.succeeded == 0
    wait_for(lambda: not busy(), 5, "the runner to drop the request")
    assert {r.result.type for r in client.messages.batches.results(batch.id)} == {"canceled"}
    # the request it hung up on is logged as the batch's cancel, not as a client's disconnect
    log = live.state.request_log
    assert log is not None
    log.flush(5)
    stopped = [r for r in live.state.requests.list() if r.request_id.startswith(batch.id) and r.status == 499]
    assert stopped and {r.error_message for r in stopped} == {
        "The batch was cancelled before this answer was complete."
    }


def test_the_admin_sees_every_batch_and_can_cancel_one(live: LiveServer, models: Models) -> None:
    client = live.anthropic()
    params: Any = {"model": models.slow, "max_tokens": LONG, "messages": [{"role": "user", "content": "hi"}]}
    batch = client.messages.batches.create(requests=[{"custom_id": f"r{i}", "params": params} for i in range(2)])
    admin = live.http(key=read_admin_token(live.settings))
    busy = lambda: any(r.model == models.slow and r.busy >= 1 for r in live.runners())  # noqa: E731
    wait_for(busy, 30, "the runner to answer the first request")
    rows = admin.get("/api/batches").json()
    assert rows[0]["id"] == batch.id  # newest first
    row = rows[0]
    assert (row["key"], row["api"], row["endpoint"], row["status"]) == (
        "tests",
        "anthropic",
        "/v1/messages",
        "in_progress",
    )
    assert row["key_prefix"].startswith("sk-spark-") and (row["total"], row["processing"]) == (2, 2)

    cancelling = admin.post(f"/api/batches/{batch.id}/cancel").json()
    assert cancelling["status"] == "cancelling" and cancelling["cancelled_at"] >= row["created_at"]
    ended = _ended(client.messages.batches.retrieve, batch.id)  # the key sees the admin's cancel
    assert ended.request_counts.canceled == 2 and ended.cancel_initiated_at is not None
    wait_for(lambda: not busy(), 5, "the runner to drop the request")
    row = admin.get(f"/api/batches/{batch.id}").json()
    assert (row["status"], row["cancelled"], row["processing"]) == ("cancelled", 2, 0) and row["ended_at"]
    assert row["cut"] >= 1  # the one running was cut short (the log has it); a queued one may have been too
    again = admin.post(f"/api/batches/{batch.id}/cancel").json()
    assert again["status"] == "cancelled" and again["cancelled_at"] == cancelling["cancelled_at"]  # as it ended

    assert "No batch found with id 'nope'" in openai_error(admin.get("/api/batches/nope"), 404)["message"]
    assert openai_error(admin.post("/api/batches/nope/cancel"), 404)["param"] == "batch_id"
    for limit in ("0", "1001", "many"):
        assert openai_error(admin.get("/api/batches", params={"limit": limit}), 400)["param"] == "limit"
    assert len(admin.get("/api/batches", params={"limit": 1}).json()) == 1
    assert live.http().get("/api/batches").status_code == 401  # an API key never opens /api


def test_batch_refusals_are_named(live: LiveServer, models: Models) -> None:
    http = live.http()

    def upload(data: bytes) -> str:
        return http.post("/v1/files", files={"file": ("b.jsonl", data)}, data={"purpose": "batch"}).json()["id"]

    good = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": models.chat}}
    create = {"endpoint": "/v1/chat/completions", "completion_window": "24h"}
    for body, param in (
        ({**create, "input_file_id": "file-nope"}, "input_file_id"),
        ({**create, "input_file_id": upload(b"not json\n")}, "input_file_id"),
        ({**create, "input_file_id": upload(_jsonl([good, good]))}, "input_file_id"),  # custom_id twice
        ({**create, "input_file_id": upload(_jsonl([{**good, "url": "/v1/embeddings"}]))}, "input_file_id"),
        ({**create, "endpoint": "/v1/moderations", "input_file_id": "f"}, "endpoint"),
        ({**create, "completion_window": "1h", "input_file_id": "f"}, "completion_window"),
    ):
        assert openai_error(http.post("/v1/batches", json=body), 400)["param"] == param
    assert openai_error(http.get("/v1/batches/batch_nope"), 404)["code"] == "batch_not_found"
    assert openai_error(http.get("/v1/batches?limit=0"), 400)["param"] == "limit"
    anthropic_headers = {"anthropic-version": "2023-06-01"}
    for body in ({"requests": []}, {"requests": [{"custom_id": "a b", "params": {}}]}):
        assert anthropic_error(http.post("/v1/messages/batches", json=body, headers=anthropic_headers), 400)
    assert anthropic_error(http.get("/v1/messages/batches/msgbatch_nope", headers=anthropic_headers), 404)
    streamed = {"requests": [{"custom_id": "a", "params": {"stream": True}}]}
    assert anthropic_error(http.post("/v1/messages/batches", json=streamed, headers=anthropic_headers), 400)
    streamed_line = upload(_jsonl([{**good, "body": {**good["body"], "stream": True}}]))
    assert openai_error(http.post("/v1/batches", json={**create, "input_file_id": streamed_line}), 400)["param"] == (
        "input_file_id"
    )
    private = KeyTable(Database(live.settings.db_path)).create("batch-private", zero_retention=True)[1]
    zero = http.post(
        "/v1/messages/batches",
        json={"requests": [{"custom_id": "a", "params": {}}]},
        headers={**anthropic_headers, "x-api-key": private, "authorization": ""},
    )
    assert anthropic_error(zero, 403)


def test_a_batch_left_unfinished_goes_on_when_the_server_starts(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path
) -> None:
    settings = server_settings(tmp_path_factory.mktemp("resume"))
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    record, key = KeyTable(Database(settings.db_path)).create("tests")
    owner = owner_of(record.name, record.prefix)
    table = BatchTable(Database(settings.db_path))
    batch = Batch(
        id="msgbatch_left",
        owner=owner,
        api="anthropic",
        endpoint="/v1/messages",
        status="in_progress",
        created_at=time.time(),
    )
    body = json.dumps({"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).encode()
    table.create(batch, [("done", body), ("left", body)])
    table.answered(batch.id, 0, 200, "req_earlier", b'{"earlier": true}')  # answered before the stop
    cancelling = Batch(
        id="msgbatch_cancelling", owner=owner, api="anthropic", endpoint="/v1/messages", status="cancelling",
        created_at=time.time(), cancelled_at=time.time(),
    )  # fmt: skip
    table.create(cancelling, [("never", body)])
    with live_server(settings, key_name=None) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)
        ended = _ended(client.messages.batches.retrieve, batch.id)
        assert ended.request_counts.succeeded == 2
        results = {r.custom_id: r for r in client.messages.batches.results(batch.id)}
        assert results["left"].result.type == "succeeded"
        stopped = _ended(client.messages.batches.retrieve, cancelling.id)  # its cancel was asked: none is sent
        assert (stopped.request_counts.canceled, stopped.request_counts.succeeded) == (1, 0)


def test_a_stopping_server_sends_no_more_of_a_batch_and_goes_on_with_it_at_the_next_start(
    slow_llama: Path, spark_home: Path
) -> None:
    """SIGTERM while an OpenAI and an Anthropic batch run: the requests running are cut short when
    the grace period ends, the others are not sent; neither is kept as an answer and the batches do not end.
    The next start answers every request."""
    settings = load_settings()
    with Library(settings) as library:
        model = add_slow_model(library, slow_llama)  # one slot: the two batches take turns
    key = KeyTable(Database(settings.db_path)).create("tests")[1]
    short: Any = {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    bodies = [{**short, "max_tokens": 1000}, short, short]  # the first runs for about a second
    # one request of each batch at a time; those running at the stop are cut short at once
    env = {"SPARK_PARALLEL": "1", "SPARK_SHUTDOWN_GRACE": "0s"}
    with spark_serve(spark_home, **env) as served:
        client = openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0)
        lines = [
            {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": b}
            for i, b in enumerate(bodies)
        ]
        upload = client.files.create(file=("in.jsonl", io.BytesIO(_jsonl(lines))), purpose="batch")
        openai_batch = client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id
        messages = anthropic.Anthropic(base_url=served.url, api_key=key, max_retries=0).messages
        requests: Any = [{"custom_id": f"r{i}", "params": b} for i, b in enumerate(bodies)]
        anthropic_batch = messages.batches.create(requests=requests).id
        admin = httpx.Client(base_url=served.url, headers={"authorization": f"Bearer {read_admin_token(settings)}"})
        busy = lambda: any(r["slots_busy"] for r in admin.get("/api/runners").json())  # noqa: E731
        wait_for(busy, 60, "the runner to answer the first request")
        served.proc.terminate()
        served.proc.wait(30)
    db = Database(settings.db_path)
    cut = [r for r in RequestTable(db).list() if r.error_type == "shutting_down"]
    assert cut and all(r.request_id.startswith((openai_batch, anthropic_batch)) for r in cut)
    table = BatchTable(db)
    for batch_id in (openai_batch, anthropic_batch):
        stopped = table.get(batch_id, None)
        assert stopped is not None and stopped.status == "in_progress" and stopped.ended_at is None
        assert [i.status for i in table.items(batch_id)] == [None] * len(bodies), "the stop's errors were kept"
    with spark_serve(spark_home, **env) as served:
        client = openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0)
        done = _ended(client.batches.retrieve, openai_batch)
        assert done.status == "completed" and done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (len(bodies), 0)
        messages = anthropic.Anthropic(base_url=served.url, api_key=key, max_retries=0).messages
        ended = _ended(messages.batches.retrieve, anthropic_batch)
        assert (ended.request_counts.succeeded, ended.request_counts.errored) == (len(bodies), 0)


def test_closing_after_a_stop_lets_the_request_it_ended_answer_and_keeps_the_batch(tmp_path: Path) -> None:
    """The drain ended the running request, whose route takes a moment to answer with the error:
    closing waits for that answer (so the log says why it ended) instead of cutting it short; the
    answer is not kept, the next request is not sent, and the batch is left to the next start."""
    db = Database(tmp_path / "spark.db")
    table = BatchTable(db)
    batch = Batch(
        id="batch_stopped", owner="o", api="openai", endpoint="/v1/chat/completions", status="in_progress",
        created_at=time.time(),
    )  # fmt: skip
    table.create(batch, [("running", b"{}"), ("waiting", b"{}")])
    answered: list[str] = []

    async def scenario() -> None:
        drain, running, aborted = Drain(), asyncio.Event(), asyncio.Event()

        class Generation:
            def abort(self, error: ShuttingDown) -> None:
                aborted.set()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            drain.add(Generation())
            running.set()
            await aborted.wait()
            await asyncio.sleep(0.2)  # the route's way from the abort to its error response
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            answered.append(dict(scope["headers"])[b"x-request-id"].decode())

        runner = BatchRunner(table, FileTable(db), lambda: 1, lambda: drain.stopping)
        runner.attach(app)
        await running.wait()
        await drain.drain(0)
        await runner.close()

    asyncio.run(scenario())
    assert answered == [f"{batch.id}:0"], "the request the drain ended was cut short, or the next one was sent"
    stopped = table.get(batch.id, None)
    assert stopped is not None and stopped.status == "in_progress"
    assert [i.status for i in table.items(batch.id)] == [None, None]


def test_the_requests_of_a_batch_whose_key_is_revoked_are_refused(live: LiveServer, models: Models) -> None:
    keys = KeyTable(Database(live.settings.db_path))
    secret = keys.create("batch-revoked")[1]
    client = anthropic.Anthropic(base_url=live.url, api_key=secret, max_retries=0)
    params: Any = {"model": models.slow, "max_tokens": LONG, "messages": [{"role": "user", "content": "hi"}]}
    batch = client.messages.batches.create(requests=[{"custom_id": f"r{i}", "params": params} for i in range(8)])
    busy = lambda: any(r.model == models.slow and r.busy >= 1 for r in live.runners())  # noqa: E731
    wait_for(busy, 30, "the runner to answer the first requests")
    keys.remove("batch-revoked")  # the batch goes with its key
    wait_for(lambda: live.state.batches.get(batch.id, None) is None, 5, "the batch to go")
    wait_for(lambda: not busy(), 60, "the requests to end")
