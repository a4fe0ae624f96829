"""A runner killed while it answers: a whole (unstreamed) answer is retried, a stream that had
output ends with a clear error, and the request log says which happened."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from server.helpers import LiveServer, add_slow_model, live_server, server_settings, wait_for
from server.test_log import logged_request, names
from spark import trace as steps
from spark.library import Library
from spark.server.admin_auth import read_admin_token

CHAT = [{"role": "user", "content": "go on"}]
N = 1000  # tokens: a second or so on the slow model, whose control tokens are banned (it never stops early)


@pytest.fixture(scope="module")
def crashing(tmp_path_factory: pytest.TempPathFactory, slow_llama: Path) -> Iterator[tuple[LiveServer, str]]:
    """A server of its own with the slow model: the tests kill its runner."""
    # no KV snapshots on disk for a restarted runner, no drafts: a retry evaluates what an answer did
    settings = server_settings(tmp_path_factory.mktemp("crash-home"), SPARK_SNAPSHOT_DISK="0")
    with Library(settings) as library:
        slow = add_slow_model(library, slow_llama, speculative=False)
    with live_server(settings) as server:
        yield server, slow


class _FirstTokens:
    """Listens on `/api/events` for `request.first_token`: the server has output of a request."""

    def __init__(self, live: LiveServer) -> None:
        self.seen = threading.Event()
        self._connected = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, args=(live,), daemon=True)
        self._thread.start()
        assert self._connected.wait(10), "the events stream did not start"

    def _listen(self, live: LiveServer) -> None:
        headers = {"authorization": f"Bearer {read_admin_token(live.settings)}"}
        with (
            httpx.Client(base_url=live.url, headers=headers, timeout=None) as http,
            http.stream("GET", "/api/events", params={"kinds": "request"}) as response,
        ):
            for line in response.iter_lines():
                if line.startswith(": connected"):
                    self._connected.set()
                elif line.startswith("data: ") and json.loads(line[6:])["kind"] == "request.first_token":
                    self.seen.set()
                if self._stop.is_set():
                    return

    def close(self) -> None:
        self._stop.set()  # the thread ends at the next line the server sends (a keep-alive at worst)


def _openai(http: httpx.Client, model: str) -> tuple[httpx.Response, str, int]:
    body = {"model": model, "messages": CHAT, "max_tokens": N, "temperature": 0}
    response = http.post("/v1/chat/completions", json=body)
    answer = response.json()
    assert answer["choices"][0]["finish_reason"] == "length"
    return response, answer["choices"][0]["message"]["content"], answer["usage"]["completion_tokens"]


def _anthropic(http: httpx.Client, model: str) -> tuple[httpx.Response, str, int]:
    body = {"model": model, "messages": CHAT, "max_tokens": N, "temperature": 0}
    response = http.post("/v1/messages", json=body)
    answer = response.json()
    assert answer["stop_reason"] == "max_tokens" and len(answer["content"]) == 1
    return response, answer["content"][0]["text"], answer["usage"]["output_tokens"]


def _ollama(http: httpx.Client, model: str) -> tuple[httpx.Response, str, int]:
    body = {"model": model, "messages": CHAT, "stream": False, "options": {"num_predict": N, "temperature": 0}}
    response = http.post("/ollama/api/chat", json=body)
    answer = response.json()
    # its durations are the final attempt's: the answer's decoding, within the whole request
    assert 0 < answer["eval_duration"] < answer["total_duration"] and answer["done_reason"] == "length"
    return response, answer["message"]["content"], answer["eval_count"]


Ask = Callable[[httpx.Client, str], tuple[httpx.Response, str, int]]


@pytest.mark.parametrize("ask", [_openai, _anthropic, _ollama], ids=["openai", "anthropic", "ollama"])
def test_a_whole_answer_survives_a_runner_killed_mid_answer(crashing: tuple[LiveServer, str], ask: Ask) -> None:
    live, model = crashing
    with live.http() as http:
        _, uninterrupted, tokens = ask(http, model)
        assert tokens == N
        old_pid = live.runner(model).pid
        assert old_pid is not None

        first_tokens = _FirstTokens(live)
        try:
            with ThreadPoolExecutor(1) as pool:
                answering = pool.submit(ask, http, model)
                assert first_tokens.seen.wait(20), "the runner made no output"
                os.kill(old_pid, signal.SIGKILL)
                response, text, tokens = answering.result(60)
        finally:
            first_tokens.close()
        assert response.status_code == 200
        assert (text, tokens) == (uninterrupted, N), "one whole answer, the same as one never interrupted"

        record = logged_request(live, response)
        assert record.status == 200 and record.error_type is None and record.completion_tokens == N
        assert record.content is not None and record.content.output == uninterrupted, "the log keeps the answer once"
        retried = [s for s in record.timeline if s.name == steps.RETRIED]
        assert len(retried) == 1 and retried[0].details["attempt"] == 2
        assert "was killed (signal 9, SIGKILL" in retried[0].details["reason"]
        assert 0 < retried[0].details["discarded_outputs"] < N, "killed mid-answer"
        label, details = steps.describe_step(retried[0])
        assert label == "runner failed; retried" and details.startswith("the runner was killed (signal 9")
        assert "; attempt 2; dropped what it had made (" in details
        later = names(record)[names(record).index(steps.RETRIED) :]
        assert later[-3:] == [steps.PROMPT, steps.FIRST_TOKEN, steps.FINISHED], "the new attempt's steps follow"

        runner = live.runner(model)
        assert runner.status == "ready" and runner.pid != old_pid and runner.restarts == 1
        _, _, tokens = ask(http, model)
        assert tokens == N, "the next request is served"
    live.unload(model)  # the next test starts with no crashes counted


def test_a_stream_with_output_fails_clearly_and_one_without_is_retried(crashing: tuple[LiveServer, str]) -> None:
    live, model = crashing
    client = live.openai()
    client.chat.completions.create(model=model, messages=CHAT, max_tokens=1)  # type: ignore[arg-type]  # loads it
    old_pid = live.runner(model).pid
    assert old_pid is not None
    streaming = client.chat.completions.with_raw_response.create(
        model=model,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=12 * N,  # many seconds
        stream=True,
    )
    chunks = iter(streaming.parse())
    for _ in range(3):
        next(chunks)

    def queued() -> tuple[str, str]:
        """A stream that waits for the only slot: it has made nothing when the runner dies."""
        raw = client.chat.completions.with_raw_response.create(
            model=model,
            messages=CHAT,  # type: ignore[arg-type]
            max_tokens=5,
            temperature=0,
            stream=True,
        )
        return raw.headers["x-request-id"], "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(queued)
        wait_for(lambda: live.runner(model).in_flight == 2, 10, "the second stream to wait for the slot")
        os.kill(old_pid, signal.SIGKILL)
        with pytest.raises(openai.APIError) as e:
            for _ in chunks:
                pass
        assert "was killed (signal 9, SIGKILL" in e.value.message and "no output comes twice" in e.value.message
        retried_id, retried_text = waiting.result(60)
    assert retried_text, "the stream that had no output was answered in full"

    failed = logged_request(live, streaming.http_response)
    assert failed.error_type == "runner_failed" and steps.RETRIED not in names(failed)
    retried = logged_request(live, httpx.Response(200, headers={"x-request-id": retried_id}))
    assert retried.status == 200 and retried.completion_tokens == 5
    (step,) = [s for s in retried.timeline if s.name == steps.RETRIED]
    assert step.details["discarded_outputs"] == 0 and step.details["attempt"] == 2
    live.unload(model)
