"""Helpers for server tests: a real server in a thread, clients, test models."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from litestar import Litestar

from runners.helpers import control_token_bias
from spark.library import Library, ModelSettings
from spark.runners.scheduler import RunnerState
from spark.server.admin_auth import read_admin_token
from spark.server.app import create_app
from spark.server.run import bind, make_server
from spark.server.state import ServerState
from spark.settings import Settings, load_settings
from spark.store.db import Database
from spark.store.keys import KeyTable
from spark.types import SamplingParams
from tiny_gguf import SLOW_CONTEXT


@dataclass
class LiveServer:
    """A server running in a thread of the test process (its scheduler can be inspected)."""

    url: str
    settings: Settings
    app: Litestar
    key: str | None

    @property
    def state(self) -> ServerState:
        return self.app.state.spark  # type: ignore[no-any-return]

    def runners(self) -> list[RunnerState]:
        return self.state.scheduler.loaded()

    def runner(self, model: str) -> RunnerState:
        return next(r for r in self.runners() if r.model == model)

    def unload(self, model: str) -> None:
        """Stop the model's runner, if one is loaded, and wait until it is gone."""
        self.http(key=read_admin_token(self.settings)).delete(f"/api/runners/{model}").raise_for_status()
        wait_for(lambda: model not in {r.model for r in self.runners()}, 10, f"{model} to unload")

    def http(self, key: str | None = "default") -> httpx.Client:
        """A plain HTTP client, sending the server's key as a bearer token unless told otherwise."""
        key = self.key if key == "default" else key
        headers = {"authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.key, max_retries=0, timeout=60)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=self.key, max_retries=0, timeout=60)


@contextmanager
def live_server(settings: Settings, *, key_name: str | None = "tests", port: int = 0) -> Iterator[LiveServer]:
    """Run the app with uvicorn on `port` (0: a free one) until the block ends; runners stop with it."""
    key = KeyTable(Database(settings.db_path)).create(key_name)[1] if key_name else None
    sock = bind("127.0.0.1", port)
    app = create_app(settings)
    server = make_server(settings, app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="spark-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield LiveServer(f"http://127.0.0.1:{sock.getsockname()[1]}", settings, app, key)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        assert not thread.is_alive(), "the server did not stop"


def server_settings(home: Path, **env: str) -> Settings:
    """Settings for a test server in `home`, independent of the test's own environment
    (no spare runner unless the test asks for one)."""
    return load_settings(env={"SPARK_HOME": str(home), "SPARK_THREADS": "1", "SPARK_SPARE_RUNNER": "false", **env})


@dataclass
class Models:
    chat: str
    embed: str
    slow: str
    tools: str  # loaded by no test but the one that watches a load


def add_slow_model(library: Library, path: Path, *, speculative: bool | None = None) -> str:
    """Add the slow model with one slot, its whole context, and no way to end by itself
    (its control tokens are banned), so that a long generation really runs long. `speculative` False:
    no drafts, so that greedy answers are evaluated in the same batches each time (drafting follows
    measured timings, and a batch of drafts rounds differently from one token)."""
    model = library.add_local(path).id
    library.update_settings(
        model,
        ModelSettings(
            context_length=SLOW_CONTEXT,
            parallel=1,
            sampling=SamplingParams(logit_bias=control_token_bias(path)),
            speculative=speculative,
        ),
    )
    return model


def add_models(
    settings: Settings, tiny_llama: Path, tiny_bert: Path, slow_llama: Path, tiny_llama_tools: Path
) -> Models:
    with Library(settings) as library:
        slow = add_slow_model(library, slow_llama)
        return Models(
            chat=library.add_local(tiny_llama).id,
            embed=library.add_local(tiny_bert).id,
            slow=slow,
            tools=library.add_local(tiny_llama_tools).id,
        )


MAX_BODY = 256 * 1024
MAX_TOKENS_LIMIT = 100_000


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


def openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error  # type: ignore[no-any-return]


def anthropic_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert response.headers["request-id"] == response.headers["x-request-id"]
    return body["error"]  # type: ignore[no-any-return]
