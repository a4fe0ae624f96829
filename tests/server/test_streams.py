"""Streams that end early: a runner killed mid-stream, a client gone, a request past its time limit."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

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
from spark.library import Library

CHAT = [{"role": "user", "content": "go on"}]
LONG = 12_000  # tokens: many seconds on the slow model


def test_runner_killed_mid_stream(live: LiveServer, models: Models) -> None:
    client = live.openai()
    chunks = iter(
        client.chat.completions.create(
            model=models.slow,
            messages=CHAT,
            max_tokens=LONG,  # type: ignore[arg-type]
            stream=True,
        )
    )
    for _ in range(3):
        next(chunks)
    pid = live.runner(models.slow).pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(openai.APIError) as e:
        for _ in chunks:
            pass
    assert "runner" in e.value.message and "no output comes twice" in e.value.message
    # The runner comes back: the next request is served.
    again = client.chat.completions.create(model=models.slow, messages=CHAT, max_tokens=3)  # type: ignore[arg-type]
    assert again.usage is not None and again.usage.completion_tokens == 3
    assert live.runner(models.slow).restarts >= 1


def _stream_lines(http: httpx.Client, path: str, body: dict[str, object]) -> Iterator[str]:
    with http.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        yield from (line for line in response.iter_lines() if line)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_disconnect_cancels_in_the_runner(live: LiveServer, models: Models, path: str) -> None:
    body = {"model": models.slow, "messages": CHAT, "max_tokens": LONG, "stream": True}
    with live.http() as http:
        lines = _stream_lines(http, path, body)
        for _ in range(6):
            next(lines)
        wait_for(lambda: live.runner(models.slow).busy == 1, 5, "the runner to report the request")
        lines.close()  # closes the response: the connection goes away mid-stream
    runner = lambda: live.runner(models.slow)  # noqa: E731
    wait_for(lambda: runner().busy == 0 and runner().in_flight == 0, 5, "the runner to drop the request")
    # its only slot is free again: a short request is answered at once
    again = live.openai().chat.completions.create(
        model=models.slow,
        messages=CHAT,
        max_tokens=2,  # type: ignore[arg-type]
        timeout=10,
    )
    assert again.choices[0].finish_reason == "length"


def test_disconnect_cancels_a_whole_answer_too(live: LiveServer, models: Models) -> None:
    """A client waiting for a whole (unstreamed) answer hangs up once the runner generates it."""
    body = json.dumps({"model": models.slow, "messages": CHAT, "max_tokens": LONG}).encode()
    host, port = urlsplit(live.url).hostname, urlsplit(live.url).port
    assert host and port
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {live.key}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    runner = lambda: live.runner(models.slow)  # noqa: E731
    with socket.create_connection((host, port)) as client:
        client.sendall(head.encode() + body)
        wait_for(lambda: runner().busy == 1, 5, "the runner to generate the answer")
    wait_for(lambda: runner().busy == 0 and runner().in_flight == 0, 5, "the runner to drop the request")


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, slow_llama: Path) -> Iterator[tuple[LiveServer, str]]:
    """A server whose requests may run 3 seconds."""
    settings = server_settings(tmp_path_factory.mktemp("strict"), SPARK_REQUEST_TIMEOUT="3s")
    with Library(settings) as library:
        slow = add_slow_model(library, slow_llama)
    with live_server(settings) as server:
        yield server, slow


def test_request_timeout(strict: tuple[LiveServer, str]) -> None:
    server, slow = strict
    client = server.openai()
    client.chat.completions.create(model=slow, messages=CHAT, max_tokens=1)  # type: ignore[arg-type]  # loads it

    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model=slow, messages=CHAT, max_tokens=LONG)  # type: ignore[arg-type]
    assert e.value.status_code == 504
    assert e.value.body["code"] == "timeout" and "request_timeout (3 s)" in e.value.body["message"]  # type: ignore[index]

    chunks = client.chat.completions.create(model=slow, messages=CHAT, max_tokens=LONG, stream=True)  # type: ignore[arg-type]
    received = 0
    with pytest.raises(openai.APIError) as s:
        for _ in chunks:
            received += 1
    assert received > 1 and "request_timeout" in s.value.message, "the stream began, then ended in error"
    runner = server.runner(slow)
    wait_for(lambda: server.runner(slow).busy == 0, 5, "the runner to stop generating")
    assert runner.restarts == 0


def test_request_timeout_ends_a_queued_request_too(strict: tuple[LiveServer, str]) -> None:
    """Two whole answers on a one-slot model: one runs, one waits in the queue; at the deadline both
    end with their API's own timeout error."""
    server, slow = strict
    server.openai().chat.completions.create(model=slow, messages=CHAT, max_tokens=1)  # type: ignore[arg-type]  # loads it
    bodies = {
        "/v1/chat/completions": {"model": slow, "messages": CHAT, "max_tokens": LONG},
        "/v1/messages": {"model": slow, "messages": CHAT, "max_tokens": LONG},
    }
    headers = {"anthropic-version": "2023-06-01"}
    with server.http() as http, ThreadPoolExecutor(2) as pool:
        paths = list(bodies)
        answers = dict(
            zip(paths, pool.map(lambda p: http.post(p, json=bodies[p], headers=headers), paths), strict=True)
        )
    assert "request_timeout (3 s)" in openai_error(answers["/v1/chat/completions"], 504)["message"]
    assert "request_timeout (3 s)" in anthropic_error(answers["/v1/messages"], 504)["message"]
    wait_for(lambda: server.runner(slow).busy == 0, 5, "the runner to stop generating")
