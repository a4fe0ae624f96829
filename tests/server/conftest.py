"""A real Spark server on a free port of 127.0.0.1, with the tiny models and an API key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tiny_gguf
from fakehub import fake_hub, hub_files  # noqa: F401  (fixtures)
from server.helpers import (
    MAX_BODY,
    MAX_TOKENS_LIMIT,
    LiveServer,
    Models,
    add_models,
    live_server,
    server_settings,
)
from spark.library import Library


@pytest.fixture(scope="package")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_llama: Path,
    tiny_bert: Path,
    slow_llama: Path,
    tiny_llama_tools: Path,
) -> Iterator[tuple[LiveServer, Models]]:
    settings = server_settings(
        tmp_path_factory.mktemp("server-home"),
        SPARK_MAX_BODY_SIZE=str(MAX_BODY),
        SPARK_MAX_TOKENS_LIMIT=str(MAX_TOKENS_LIMIT),
    )
    models = add_models(settings, tiny_llama, tiny_bert, slow_llama, tiny_llama_tools)
    with live_server(settings) as live:
        yield live, models


@pytest.fixture
def live(served: tuple[LiveServer, Models]) -> LiveServer:
    """The shared server (body limit 256 KiB, max_tokens limit 100000, CORS off)."""
    return served[0]


@pytest.fixture
def models(served: tuple[LiveServer, Models]) -> Models:
    return served[1]


@pytest.fixture(scope="package")
def fim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    """A server with one model that has fill-in-the-middle tokens."""
    home = tmp_path_factory.mktemp("fim-home")
    path = tiny_gguf.write_tiny_llama(home / "tiny-fim.gguf", fim=True)
    settings = server_settings(home)
    with Library(settings) as library:
        model = library.add_local(path).id
    with live_server(settings) as live:
        yield live, model
