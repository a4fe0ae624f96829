"""KV snapshots through a real server: a chat comes back from disk after an unload, a runner
crash and a server restart, and its timeline says so; a zero-retention key's chat is never written."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.helpers import LiveServer, live_server, server_settings, wait_for
from server.test_log import logged_request
from spark import trace as steps
from spark.cli.log import describe_step
from spark.engine.snapshot_disk import SUFFIX
from spark.library import Library
from spark.server.admin_auth import read_admin_token
from spark.settings import Settings
from spark.store.db import Database
from spark.store.keys import KeyTable
from spark.trace import Step

pytestmark = pytest.mark.slow  # several runner processes, one after another

TURN_1 = [
    {"role": "system", "content": "You answer briefly and you never forget what was said."},
    {"role": "user", "content": "My favourite numbers are 4 8 15 16 23 42. Remember them."},
]


def chat(live: LiveServer, model: str, messages: list[dict[str, str]], key: str | None = None) -> httpx.Response:
    body = {"model": model, "messages": messages, "max_tokens": 6, "temperature": 0}
    http = live.http() if key is None else live.http(key=key)
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response


def next_turn(messages: list[dict[str, str]], response: httpx.Response, text: str) -> list[dict[str, str]]:
    answer = response.json()["choices"][0]["message"]["content"]
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": text}]


def slot_step(live: LiveServer, response: httpx.Response) -> Step:
    return next(s for s in logged_request(live, response).timeline if s.name == steps.SLOT)


def snapshot_files(settings: Settings) -> list[Path]:
    return sorted(settings.snapshots_dir.glob(f"*/*{SUFFIX}"))


def unload(live: LiveServer, model: str) -> None:
    response = live.http(key=read_admin_token(live.settings)).delete(f"/api/runners/{model}")
    assert response.json() == {"model": model, "stopped": True}


def cached_tokens(response: httpx.Response) -> Any:
    return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture
def setup(tmp_path: Path, tiny_llama: Path) -> tuple[Settings, str]:
    settings = server_settings(tmp_path / "home")
    with Library(settings) as library:
        return settings, library.add_local(tiny_llama).id


def test_a_chat_comes_back_from_disk_after_an_unload_and_a_restart(setup: tuple[Settings, str]) -> None:
    settings, model = setup
    with live_server(settings) as live:
        first = chat(live, model, TURN_1)
        turn_2 = next_turn(TURN_1, first, "Which one is the largest?")
        unload(live, model)  # the runner writes its slot's conversation as it stops
        assert snapshot_files(settings)
        second = chat(live, model, turn_2)
        step = slot_step(live, second)
        assert step.details["cache"] == "disk" and step.details["restore_seconds"] > 0
        assert step.details["cached_tokens"] == cached_tokens(second) > first.json()["usage"]["prompt_tokens"] // 2
        label, details = describe_step(step)
        assert label == "slot assigned" and "from a KV snapshot on disk (restored in" in details
        again = chat(live, model, turn_2)  # the same turn again: from the slot itself
        assert slot_step(live, again).details["cache"] == "slot"
    with live_server(
        settings, key_name="again"
    ) as restarted:  # the server stopped; its runner wrote the chat on the way out
        third = chat(restarted, model, next_turn(turn_2, again, "And the smallest?"))
        step = slot_step(restarted, third)
        assert step.details["cache"] == "disk" and step.details["cached_tokens"] >= cached_tokens(second)


def test_after_a_crash_the_chat_comes_back_but_never_a_zero_retention_one(setup: tuple[Settings, str]) -> None:
    settings, model = setup
    private_key = KeyTable(Database(settings.db_path)).create("private", zero_retention=True)[1]
    with live_server(settings) as live:
        chat(live, model, TURN_1, key=private_key)
        unload(live, model)
        assert snapshot_files(settings) == []  # not even the KV cache of it is kept

        first = chat(live, model, TURN_1)
        # idle for a second, the runner writes the chat: a crash after that loses nothing
        wait_for(lambda: len(snapshot_files(settings)) == 1, 30, "the chat's snapshot on disk")
        os.kill(live.runner(model).pid or 0, signal.SIGKILL)
        second = chat(live, model, next_turn(TURN_1, first, "Which one is the largest?"))
        step = slot_step(live, second)
        assert step.details["cache"] == "disk" and step.details["cached_tokens"] > 0
