"""Ollama's native API under /ollama/api, driven by Ollama's own Python client against a real server."""

from __future__ import annotations

import json

import ollama
import pytest

import spark
from server.helpers import LiveServer, Models


def client(live: LiveServer, key: str | None = "default") -> ollama.Client:
    key = live.key if key == "default" else key
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return ollama.Client(host=live.url + "/ollama", headers=headers, timeout=60)


def test_chat_whole_and_streamed_with_counts(live: LiveServer, models: Models) -> None:
    c = client(live)
    messages = [{"role": "user", "content": "Hello"}]
    whole = c.chat(model=models.chat, messages=messages, options={"num_predict": 6, "temperature": 0, "seed": 1})
    assert whole.done and whole.done_reason == "length" and whole.message.role == "assistant"
    assert whole.eval_count == 6 and whole.prompt_eval_count and whole.prompt_eval_count > 0
    assert whole.total_duration and whole.eval_duration is not None and whole.total_duration >= whole.eval_duration
    chunks = list(
        c.chat(
            model=models.chat + ":latest",
            messages=messages,
            stream=True,
            options={"num_predict": 6, "temperature": 0, "seed": 1},
        )
    )
    assert [ch.done for ch in chunks][-1] is True and not any(ch.done for ch in chunks[:-1])
    assert "".join(ch.message.content or "" for ch in chunks) == whole.message.content  # same answer, in pieces
    assert chunks[-1].eval_count == 6


def test_generate_templated_and_raw(live: LiveServer, models: Models) -> None:
    c = client(live)
    templated = c.generate(model=models.chat, prompt="Hi", system="Be brief.", options={"num_predict": 4})
    assert templated.done and templated.eval_count == 4 and isinstance(templated.response, str)
    raw = c.generate(model=models.chat, prompt="Hi", raw=True, options={"num_predict": 3})
    assert raw.eval_count == 3 and raw.prompt_eval_count is not None
    assert raw.prompt_eval_count < (templated.prompt_eval_count or 0)  # no chat template around it
    streamed = list(c.generate(model=models.chat, prompt="Hi", stream=True, options={"num_predict": 3}))
    assert streamed[-1].done and streamed[-1].done_reason == "length"


def test_json_schema_format_constrains_the_answer(live: LiveServer, models: Models) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    answer = client(live).chat(
        model=models.chat, messages=[{"role": "user", "content": "n?"}], format=schema, options={"num_predict": 200}
    )
    assert isinstance(json.loads(answer.message.content or "")["n"], int)


def test_load_and_unload_with_an_empty_body(live: LiveServer, models: Models) -> None:
    c = client(live)
    assert c.generate(model=models.chat).done_reason == "load"
    assert any(m.model == models.chat for m in c.ps().models)
    assert c.chat(model=models.chat, messages=[], keep_alive=0).done_reason == "unload"
    assert all(r.model != models.chat for r in live.runners())


def test_models_listed_shown_and_version(live: LiveServer, models: Models) -> None:
    c = client(live)
    listed = {m.model: m for m in c.list().models}
    assert models.chat in listed and models.embed in listed
    assert listed[models.chat].details is not None and listed[models.chat].details.format == "gguf"
    shown = c.show(models.embed)
    assert shown.capabilities == ["embedding"]
    assert shown.modelinfo is not None and shown.modelinfo["general.parameter_count"] > 0
    assert (c.show(models.chat).capabilities or [])[:2] == [
        "completion",
        "tools",
    ]  # tools are served for every chat model
    version = live.http().get("/ollama/api/version").json()
    # the Ollama release whose API Spark follows: clients refuse a server older than 0.6.5 or so
    assert tuple(int(n) for n in version["version"].split(".")) >= (0, 6, 5)
    assert version["spark_version"] == spark.__version__


def test_the_ollama_root_answers_like_ollama_without_a_key(live: LiveServer) -> None:
    """Ollama's CLI and clients check that the server runs with GET or HEAD at its root."""
    http = live.http(key=None)
    for path in ("/ollama", "/ollama/"):
        running = http.get(path)
        assert (running.status_code, running.text) == (200, "Ollama is running")
        assert running.headers["content-type"].startswith("text/plain")
        assert http.head(path).status_code == 200
    assert http.get("/ollama/api/version").status_code == 401  # the API itself needs a key


def test_embed_and_the_older_embeddings(live: LiveServer, models: Models) -> None:
    c = client(live)
    both = c.embed(model=models.embed, input=["a cat", "a dog"])
    assert len(both.embeddings) == 2 and len(both.embeddings[0]) > 10 and both.prompt_eval_count
    one = c.embeddings(model=models.embed, prompt="a cat")
    assert one.embedding == pytest.approx(both.embeddings[0], abs=1e-4)
    assert c.embed(model=models.embed, input=[]).embeddings == []  # only loads the model
    from_chat = c.embed(model=models.chat, input=["a cat", "a dog"])  # any model embeds, as in Ollama
    assert len(from_chat.embeddings) == 2 and len(from_chat.embeddings[0]) > 10


def test_embed_truncates_a_long_input_unless_told_not_to(live: LiveServer, models: Models) -> None:
    c = client(live)
    context = c.show(models.embed).modelinfo["bert.context_length"]  # type: ignore[index]
    long = c.embed(model=models.embed, input="cat " * (2 * context))  # "cat" is one token
    assert long.prompt_eval_count == context
    # the end is cut and the closing [SEP] kept: the same vector as the words that fit
    fitting = c.embed(model=models.embed, input="cat " * (context - 2))
    assert long.embeddings[0] == pytest.approx(fitting.embeddings[0], abs=1e-4)
    with pytest.raises(ollama.ResponseError) as refused:
        c.embed(model=models.embed, input="cat " * (2 * context), truncate=False)
    assert refused.value.status_code == 400 and f"holds {context} tokens" in refused.value.error


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        (
            "/ollama/api/chat",
            {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
            404,
            "no-such-model",
        ),
        (
            "/ollama/api/chat",
            {"model": "{chat}", "messages": [{"role": "robot", "content": "x"}]},
            400,
            "messages[0].role",
        ),
        (
            "/ollama/api/chat",
            {"model": "{chat}", "messages": [{"role": "user", "content": "x"}], "options": {"top_p": 2}},
            400,
            "options.top_p",
        ),
        (
            "/ollama/api/chat",
            {"model": "{chat}", "messages": [{"role": "user", "content": "x"}], "options": {"num_predict": 0}},
            400,
            "options.num_predict",
        ),
        (
            "/ollama/api/chat",
            {"model": "{chat}", "messages": [{"role": "user", "content": "x", "images": ["not base64!"]}]},
            400,
            "messages[0].images[0]",
        ),
        ("/ollama/api/generate", {"model": "{chat}", "prompt": "x", "template": "{{ .Prompt }}"}, 400, "template"),
        ("/ollama/api/generate", {"model": "{chat}", "prompt": "x", "context": [1, 2]}, 400, "context"),
        ("/ollama/api/generate", {"model": "{chat}", "prompt": "x", "raw": True, "images": ["aGk="]}, 400, "images"),
        # as Ollama: a model whose template does not think refuses `think` (false is fine)
        (
            "/ollama/api/chat",
            {"model": "{chat}", "messages": [{"role": "user", "content": "x"}], "think": True},
            400,
            "does not support thinking",
        ),
        ("/ollama/api/generate", {"model": "{chat}", "prompt": "x", "think": "high"}, 400, "does not support thinking"),
        ("/ollama/api/embed", {"model": "{embed}", "input": ["a", ""]}, 400, "input[1]"),
        ("/ollama/api/show", {}, 400, "model"),
        ("/ollama/api/pull", {"model": "x"}, 404, "spark pull"),
    ],
)
def test_bad_input_gets_ollamas_error_shape(
    live: LiveServer, models: Models, path: str, body: dict[str, object], status: int, words: str
) -> None:
    text = json.dumps(body).replace("{chat}", models.chat).replace("{embed}", models.embed)
    response = live.http().post(path, content=text)
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"} and words in response.json()["error"]


def test_think_false_is_fine_on_any_model(live: LiveServer, models: Models) -> None:
    answer = client(live).chat(
        model=models.chat, messages=[{"role": "user", "content": "x"}], think=False, options={"num_predict": 2}
    )
    assert answer.message.thinking is None and answer.done


def test_a_key_is_required(live: LiveServer, models: Models) -> None:
    with pytest.raises(ollama.ResponseError) as refused:
        client(live, key=None).list()
    assert refused.value.status_code == 401
    with pytest.raises(ollama.ResponseError) as wrong:
        client(live, key="sk-spark-wrong").chat(model=models.chat, messages=[{"role": "user", "content": "x"}])
    assert wrong.value.status_code == 401
