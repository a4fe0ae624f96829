"""The TUI against a real server (admin password, tiny models, a fake Hub)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehub import FakeHub, hub_files, serve, standard_repos  # noqa: F401  (hub_files: the fixture)
from server.helpers import add_slow_model, live_server, server_settings
from spark.library import Library
from tui.helpers import PASSWORD, Served


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_llama: Path,
    slow_llama: Path,
    hub_files: dict[str, bytes],  # noqa: F811  (the fixture imported above)
) -> Iterator[Served]:
    """A real server with the tiny chat model and the slow one, an API key, and the fake Hub."""
    hub = FakeHub()
    standard_repos(hub, hub_files)
    with serve(hub):
        settings = server_settings(
            tmp_path_factory.mktemp("tui-home"), SPARK_ADMIN_PASSWORD=PASSWORD, SPARK_HF_ENDPOINT=hub.url
        )
        with Library(settings) as library:
            chat = library.add_local(tiny_llama).id
            slow = add_slow_model(library, slow_llama)
        with live_server(settings) as live:
            yield Served(live, chat, slow, hub)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC, so that drawn times do not depend on the machine."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
