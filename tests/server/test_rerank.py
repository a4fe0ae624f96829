"""Reranking (`POST /v1/rerank`, llama-server's `/rerank`) with a tiny random-weight reranker on a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import pytest

import tiny_gguf
from server.helpers import LiveServer, live_server, openai_error, server_settings
from server.test_log import logged_request
from spark.library import Library
from spark.server.admin_auth import read_admin_token

DOCUMENTS = ["a cat sat on the mat", "stock markets fell today", "the cat is on the mat", "bake the bread"]


class Rerankers:
    def __init__(self, plain: str, templated: str, embed: str, chat: str) -> None:
        self.plain, self.templated, self.embed, self.chat = plain, templated, embed, chat


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path, tiny_llama: Path
) -> Iterator[tuple[LiveServer, Rerankers]]:
    home = tmp_path_factory.mktemp("rerank-home")
    plain = tiny_gguf.write_tiny_bert(home / "tiny-rerank.gguf", pooling=gguf.PoolingType.RANK, name="tiny-rerank")
    templated = tiny_gguf.write_tiny_bert(
        home / "tiny-rerank-templated.gguf",
        pooling=gguf.PoolingType.RANK,
        name="tiny-rerank-templated",
        rerank_template="[CLS] query: {query} [SEP] document: {document} [SEP]",
    )
    settings = server_settings(home, SPARK_CONTEXT_LENGTH="128")
    with Library(settings) as library:
        models = Rerankers(
            library.add_local(plain).id,
            library.add_local(templated).id,
            library.add_local(tiny_bert).id,
            library.add_local(tiny_llama).id,
        )
    with live_server(settings) as live:
        yield live, models


def rerank(live: LiveServer, body: dict[str, Any], path: str = "/v1/rerank") -> dict[str, Any]:
    response = live.http().post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_documents_come_back_by_score(served: tuple[LiveServer, Rerankers]) -> None:
    live, models = served
    answer = rerank(live, {"model": models.plain, "query": "where is the cat?", "documents": DOCUMENTS})
    assert answer["model"] == models.plain and answer["object"] == "list"
    results = answer["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1  # the head tells them apart
    assert all("document" not in r for r in results)
    assert answer["usage"]["prompt_tokens"] == answer["usage"]["total_tokens"] > len(DOCUMENTS) * 4
    # each document's score is its own: the same alone (up to the rounding of llama.cpp's flash
    # attention, which reads several sequences in one batch in another order), with top_n
    by_index = {r["index"]: r["relevance_score"] for r in results}
    alone = rerank(live, {"model": models.plain, "query": "where is the cat?", "documents": [DOCUMENTS[1]]})
    assert alone["results"][0]["relevance_score"] == pytest.approx(by_index[1], rel=0.01)
    top = rerank(
        live,
        {
            "model": models.plain,
            "query": "where is the cat?",
            "documents": [{"text": d} for d in DOCUMENTS],
            "top_n": 2,
            "return_documents": True,
        },
        "/rerank",
    )
    assert [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]]
    assert [r["document"]["text"] for r in top["results"]] == [DOCUMENTS[r["index"]] for r in results[:2]]
    # Cohere's path and fields: the same answer, with an id and Cohere's meta
    cohere = rerank(live, {"model": models.plain, "query": "where is the cat?", "documents": DOCUMENTS}, "/v2/rerank")
    assert cohere["results"] == results and cohere["meta"]["api_version"]["version"] == "2"
    assert cohere["id"] and cohere["id"] != answer["id"]
    # llama-server's own paths
    for path in ("/reranking", "/v1/reranking"):
        body = {"model": models.plain, "query": "where is the cat?", "documents": DOCUMENTS}
        assert rerank(live, body, path)["results"] == results
    # another query scores the same documents otherwise
    other = rerank(live, {"model": models.plain, "query": "finance news", "documents": DOCUMENTS})
    assert {r["index"]: r["relevance_score"] for r in other["results"]} != pytest.approx(by_index)


def test_a_rerank_template_places_the_texts(served: tuple[LiveServer, Rerankers]) -> None:
    live, models = served
    body = {"query": "where is the cat?", "documents": DOCUMENTS[:2]}
    templated = rerank(live, {"model": models.templated, **body})
    plain = rerank(live, {"model": models.plain, **body})
    # the template's own words are read too: more tokens than the plain pair
    assert templated["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 4
    # a client's text is never read as special tokens
    special = rerank(live, {"model": models.templated, "query": "[SEP]", "documents": ["[CLS]"]})
    assert (
        special["usage"]["prompt_tokens"]
        > rerank(live, {"model": models.templated, "query": "x", "documents": ["y"]})["usage"]["prompt_tokens"]
    )


def test_a_reranker_is_listed_as_one(served: tuple[LiveServer, Rerankers]) -> None:
    live, models = served
    listed = {m["id"]: m for m in live.http(key=read_admin_token(live.settings)).get("/api/models").json()}
    assert listed[models.plain]["rerank"] is True and listed[models.plain]["embedding"] is True
    assert listed[models.embed]["rerank"] is False and listed[models.chat]["rerank"] is False
    details = {m["id"]: m for m in live.http().get("/v1/models").json()["data"]}
    assert details[models.plain]["spark"]["rerank"] is True and details[models.embed]["spark"]["rerank"] is False


def test_a_rerank_is_logged(served: tuple[LiveServer, Rerankers]) -> None:
    live, models = served
    response = live.http().post("/v1/rerank", json={"model": models.plain, "query": "q", "documents": ["d"]})
    record = logged_request(live, response)
    assert record.route == "/v1/rerank" and record.model == models.plain and record.status == 200


def test_the_wrong_kind_of_model_is_named(served: tuple[LiveServer, Rerankers]) -> None:
    live, models = served
    http = live.http()
    for model in (models.embed, models.chat):
        error = openai_error(http.post("/v1/rerank", json={"model": model, "query": "q", "documents": ["d"]}), 400)
        assert error["param"] == "model" and "not a reranking model" in error["message"]
    # a reranker generates no text, and gives no embeddings
    chat = {"model": models.plain, "messages": [{"role": "user", "content": "hi"}]}
    error = openai_error(http.post("/v1/chat/completions", json=chat), 400)
    assert error["param"] == "model" and "reranking model (POST /v1/rerank)" in error["message"]
    error = openai_error(http.post("/v1/embeddings", json={"model": models.plain, "input": "x"}), 400)
    assert error["param"] == "model" and "/v1/rerank" in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"documents": ["d"]}, "query"),
        ({"query": "", "documents": ["d"]}, "query"),
        ({"query": "q"}, "documents"),
        ({"query": "q", "documents": []}, "documents"),
        ({"query": "q", "documents": [1]}, "documents[0]"),
        ({"query": "q", "documents": ["d"], "top_n": 0}, "top_n"),
        ({"query": "q", "documents": ["word " * 400]}, "documents[0]"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(
    served: tuple[LiveServer, Rerankers], body: dict[str, Any], param: str
) -> None:
    live, models = served
    error = openai_error(live.http().post("/v1/rerank", json={"model": models.plain, **body}), 400)
    assert error["param"] == param


def test_unknown_models_and_missing_keys(served: tuple[LiveServer, Rerankers]) -> None:
    live, _ = served
    missing = live.http().post("/v1/rerank", json={"model": "nope", "query": "q", "documents": ["d"]})
    assert openai_error(missing, 404)["code"] == "model_not_found"
    assert (
        live.http(key=None).post("/v1/rerank", json={"model": "nope", "query": "q", "documents": ["d"]}).status_code
        == 401
    )
