"""llama-server's `POST /embedding` (and `/embeddings`) on a real server."""

from __future__ import annotations

from typing import Any

import pytest

from server.helpers import LiveServer, Models, openai_error


def embedding(live: LiveServer, body: dict[str, Any], path: str = "/embedding") -> list[dict[str, Any]]:
    response = live.http().post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_vectors_come_as_llama_server_gives_them(live: LiveServer, models: Models) -> None:
    (one,) = embedding(live, {"model": models.embed, "content": "hello world"})
    assert one["index"] == 0 and len(one["embedding"]) == 1  # one pooled vector, in a list
    vector = one["embedding"][0]
    same = live.openai().embeddings.create(model=models.embed, input="hello world").data[0].embedding
    assert vector == pytest.approx(same, abs=1e-6) and sum(v * v for v in vector) == pytest.approx(1, abs=1e-4)
    # `input` as well, a list of texts or token ids, and the plural path
    ids = live.http().post("/tokenize", json={"model": models.embed, "content": "hello world"}).json()["tokens"]
    both = embedding(live, {"model": models.embed, "input": ["other text", ids]}, "/embeddings")
    assert [b["index"] for b in both] == [0, 1] and both[0]["embedding"][0] != vector
    # a chat model embeds too, as llama-server started with --embeddings does
    (chat,) = embedding(live, {"model": models.chat, "content": "hi"})
    assert len(chat["embedding"][0]) > 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"input": ["a", ""]}, "input"),
        ({"content": [1, "a"]}, "content"),
        ({"content": "a", "embd_normalize": 0}, "embd_normalize"),
        ({"content": 5}, "content"),
        ({"content": [[10**9]]}, "content"),  # the engine's error, named as the client sent it
        ({"input": [[10**9]]}, "input"),
    ],
)
def test_bad_bodies_are_a_400_naming_the_field(
    live: LiveServer, models: Models, body: dict[str, Any], param: str
) -> None:
    error = openai_error(live.http().post("/embedding", json={"model": models.embed, **body}), 400)
    assert error["param"] == param
    assert live.http(key=None).post("/embedding", json={"content": "x"}).status_code == 401
