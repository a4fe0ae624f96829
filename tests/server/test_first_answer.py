"""The first answer a newcomer sees: the README's own curl request, to the bundled model, with its defaults."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.helpers import LiveServer, live_server, server_settings
from spark.library import BUNDLED_ID

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_curl_body() -> dict[str, object]:
    """The JSON body of the README's chat completion curl example, as written there."""
    match = re.search(r"curl http://127\.0\.0\.1:8080/v1/chat/completions .*?-d '(\{.*?\})'", README.read_text(), re.S)
    assert match, "the README has no chat completion curl example"
    return json.loads(match.group(1))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, smollm2: Path) -> Iterator[LiveServer]:
    # a fresh home: the bundled model with the settings a fresh install gives it
    with live_server(server_settings(tmp_path_factory.mktemp("first-answer-home"))) as live:
        yield live


def test_the_readme_curl_answers_what_the_readme_says(live: LiveServer) -> None:
    body = readme_curl_body()
    assert body["model"] == BUNDLED_ID and "max_tokens" in body
    response = live.http().post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()["choices"][0]
    assert "Paris" in answer["message"]["content"] and answer["finish_reason"] == "stop"
    assert f"Both answer `{answer['message']['content']}`" in README.read_text()


def test_without_max_tokens_the_answer_ends_by_itself(live: LiveServer) -> None:
    body = {k: v for k, v in readme_curl_body().items() if k != "max_tokens"}
    answer = live.http().post("/v1/chat/completions", json=body).json()
    assert "Paris" in answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] < 100 and answer["choices"][0]["finish_reason"] == "stop"


def test_a_ramble_ends_at_the_bundled_models_answer_length(live: LiveServer) -> None:
    # this model tells a story until something stops it ("Max was a big cat with a big head. ...")
    body = {"model": BUNDLED_ID, "messages": [{"role": "user", "content": "Tell me a story about a cat."}]}
    answer = live.http().post("/v1/chat/completions", json=body).json()
    assert answer["usage"]["completion_tokens"] == 200 and answer["choices"][0]["finish_reason"] == "length"
    # (that a request asking for more gets it: tests/server/test_library_api.py, on a tiny model)
