"""Ollama's native API under /ollama/api, driven by Ollama's own Python client against a real server."""

from __future__ import annotations

import json
import time

import anthropic
import msgspec
import ollama
import openai
import pytest

import spark
import tiny_gguf
from server.helpers import LiveServer, Models
from server.test_log import logged_request
from spark import trace as steps
from spark.api import ollama as ollama_api
from spark.api.common import ModelEntry
from spark.runners.scheduler import RunnerState
from spark.server.routes.ollama import loaded_model


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


@pytest.fixture(scope="module")
def bos_model(served: tuple[LiveServer, Models], tmp_path_factory: pytest.TempPathFactory) -> str:
    """A chat model whose prompts start with BOS, which llama.cpp adds."""
    path = tiny_gguf.write_tiny_llama(tmp_path_factory.mktemp("bos") / "bos.gguf", template="chatml", add_bos=True)
    return served[0].state.library.add_local(path, model_id="tiny-bos").id


@pytest.mark.parametrize("bos", [False, True])
def test_generate_context_carries_the_conversation_on(
    live: LiveServer, models: Models, bos_model: str, bos: bool
) -> None:
    """A templated generate's answer carries `context`, the tokens of its prompt and answer (streamed,
    in its last line); sent back, the next prompt goes on from there, as Ollama's older clients do."""
    c, model, options = client(live), bos_model if bos else models.chat, {"num_predict": 4, "temperature": 0, "seed": 1}
    first = c.generate(model=model, prompt="Hi", system="Be brief.", options=options)
    assert first.context and len(first.context) > (first.prompt_eval_count or 0)
    shown = live.http().post("/detokenize", json={"model": model, "tokens": first.context}).json()["content"]
    assert "Be brief." in shown and shown.endswith(first.response)
    streamed = list(c.generate(model=model, prompt="Hi", system="Be brief.", options=options, stream=True))
    assert streamed[-1].context == first.context and not any(chunk.context for chunk in streamed[:-1])

    second = c.generate(model=model, prompt="And then?", context=first.context, options=options)
    assert second.prompt_eval_count is not None and second.prompt_eval_count > len(first.context) + 3
    assert second.context and second.context[: len(first.context)] == first.context
    # the new turn's tokens follow the context's, as the turn alone is templated, without a second BOS
    alone = c.generate(model=model, prompt="And then?", options=options)
    assert (
        alone.context
        and second.context[len(first.context) : second.prompt_eval_count]
        == (alone.context[int(bos) : alone.prompt_eval_count])
    )
    assert second.context.count(first.context[0]) == 1 or not bos
    # a raw generate has no context, as Ollama's
    assert not c.generate(model=model, prompt="Hi", raw=True, options=options).context


def test_generate_context_keeps_the_answers_keep_alive(live: LiveServer, bos_model: str) -> None:
    """Asking the model for the context leaves the request's keep-alive as it set it; with keep_alive 0
    the model unloads after the answer, which carries no context then (it is not loaded again to count it)."""
    c = client(live)
    kept = c.generate(model=bos_model, prompt="Hi", keep_alive=3600, options={"num_predict": 2})
    [shown] = [m for m in c.ps().models if m.model and m.model.startswith("tiny-bos")]
    assert kept.context and shown.expires_at and shown.expires_at.timestamp() > time.time() + 1800
    gone = c.generate(model=bos_model, prompt="Hi", keep_alive=0, options={"num_predict": 2})
    assert gone.done and not gone.context
    deadline = time.monotonic() + 30
    while any(m.model and m.model.startswith("tiny-bos") for m in c.ps().models):
        assert time.monotonic() < deadline, "the model unloads"
        time.sleep(0.2)


def test_json_schema_format_constrains_the_answer(live: LiveServer, models: Models) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    answer = client(live).chat(
        model=models.chat, messages=[{"role": "user", "content": "n?"}], format=schema, options={"num_predict": 200}
    )
    assert isinstance(json.loads(answer.message.content or "")["n"], int)


def test_raw_generate_with_a_format(live: LiveServer, models: Models) -> None:
    """As Ollama, `raw` takes `format`: the prompt as it is, the answer JSON (matching the schema)."""
    c = client(live)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    answer = c.generate(model=models.chat, prompt="n=", raw=True, format=schema, options={"num_predict": 200})
    assert isinstance(json.loads(answer.response)["n"], int)
    anything = c.generate(model=models.chat, prompt="x", raw=True, format="json", options={"num_predict": 20})
    assert anything.response.startswith("{")  # a JSON object (the tiny model may not close it in 20 tokens)
    with pytest.raises(ollama.ResponseError) as refused:
        c.generate(model=models.chat, prompt="x", raw=True, format={"type": "text"})
    assert (
        refused.value.status_code == 400
        and "format" in refused.value.error
        and "json_schema" not in refused.value.error
    )


def test_load_and_unload_with_an_empty_body(live: LiveServer, models: Models) -> None:
    c = client(live)
    assert c.generate(model=models.chat).done_reason == "load"
    assert any(m.model == models.chat + ":latest" for m in c.ps().models)
    assert c.chat(model=models.chat, messages=[], keep_alive=0).done_reason == "unload"
    assert all(r.model != models.chat for r in live.runners())


def test_models_listed_shown_and_version(live: LiveServer, models: Models) -> None:
    c = client(live)
    listed = {m.model: m for m in c.list().models}
    assert models.chat + ":latest" in listed and models.embed + ":latest" in listed
    details = listed[models.chat + ":latest"].details
    assert details is not None and details.format == "gguf"
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
        heartbeat = http.head(path)
        assert heartbeat.status_code == 200 and heartbeat.content == b""
        for header in ("content-type", "content-length"):  # GET's headers, as HTTP has HEAD answer
            assert heartbeat.headers[header] == running.headers[header]
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
    assert refused.value.status_code == 400 and f"maximum context length is {context} tokens" in refused.value.error


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
        (
            "/ollama/api/generate",
            {"model": "{chat}", "prompt": "x", "raw": True, "context": [1, 2]},
            400,
            "raw mode does not support template, system, or context",
        ),
        ("/ollama/api/generate", {"model": "{chat}", "prompt": "x", "context": [10**9]}, 400, "10000000"),
        ("/ollama/api/generate", {"model": "{chat}", "prompt": "x", "context": [1], "images": ["aGk="]}, 400, "images"),
        ("/ollama/api/generate", {"model": "{chat}", "prompt": "x", "raw": True, "images": ["aGk="]}, 400, "images"),
        # as Ollama: a model whose template does not think refuses `think` (false is fine)
        (
            "/ollama/api/chat",
            {"model": "{chat}", "messages": [{"role": "user", "content": "x"}], "think": True},
            400,
            "does not support thinking",
        ),
        ("/ollama/api/generate", {"model": "{chat}", "prompt": "x", "think": "high"}, 400, "does not support thinking"),
        ("/ollama/api/show", {}, 400, "model"),
        # Ollama's words, which its clients look for
        ("/ollama/api/chat", {"model": "nope:latest", "messages": []}, 404, "model 'nope' not found"),
        ("/ollama/api/embed", {"model": "nope", "input": "x"}, 404, "model 'nope' not found"),
        ("/ollama/api/show", {"model": "nope"}, 404, "model 'nope' not found"),
        (
            "/ollama/api/generate",
            {"model": "{chat}", "prompt": "x", "raw": True, "system": "Be brief."},
            400,
            "raw mode does not support template, system, or context",
        ),
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


def test_model_names_are_listed_with_a_tag_and_echoed_as_sent(live: LiveServer, models: Models) -> None:
    """Ollama lists `name:tag`; LangChain's ChatOllama(validate_model_on_init=True) accepts a
    model whose listed name is the one asked for or starts with it and a colon."""
    http, c = live.http(), client(live)
    c.generate(model=models.chat)  # loaded, for /api/ps
    for path in ("/ollama/api/tags", "/ollama/api/ps"):
        listed = http.get(path).json()["models"]
        assert {(m["name"], m["model"]) for m in listed if m["model"].startswith(models.chat)} == {
            (models.chat + ":latest", models.chat + ":latest")
        }
        names = [m["model"] for m in listed]
        for asked in (models.chat, models.chat + ":latest"):
            assert any(asked == name or name.startswith(asked + ":") for name in names)
    # each model its own digest, the same in both lists (llm-ollama takes models with one digest for one)
    tags, ps = (
        {m["name"]: m["digest"] for m in http.get(path).json()["models"]}
        for path in ("/ollama/api/tags", "/ollama/api/ps")
    )
    assert len(set(tags.values())) == len(tags) >= 2 and all(len(d) == 64 and int(d, 16) >= 0 for d in tags.values())
    assert ps[models.chat + ":latest"] == tags[models.chat + ":latest"]
    messages = [{"role": "user", "content": "Hi"}]
    for asked in (models.chat, models.chat + ":latest"):
        assert c.chat(model=asked, messages=messages, options={"num_predict": 1}).model == asked
        assert c.generate(model=asked, prompt="Hi", options={"num_predict": 1}).model == asked
        streamed = list(c.chat(model=asked, messages=messages, stream=True, options={"num_predict": 1}))
        assert {chunk.model for chunk in streamed} == {asked}
        assert c.embed(model=asked.replace(models.chat, models.embed), input="a").model == asked.replace(
            models.chat, models.embed
        )
    assert c.generate(model=models.chat + ":latest").model == models.chat + ":latest"  # a load echoes it too


def _long_chat(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"Note {i}: " + "lorem ipsum dolor " * 12},
            {"role": "assistant", "content": "Noted."},
        ]
    return [*messages, {"role": "user", "content": "Say OK."}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_longer_than_the_context_loses_its_oldest_turns(live: LiveServer, models: Models, stream: bool) -> None:
    """As Ollama: the system message and the latest turns that fit the tiny model's 512 tokens stay,
    unless the body says `"truncate": false`."""
    http = live.http()
    asked = {"model": models.chat, "messages": _long_chat(12), "options": {"num_predict": 3}, "stream": stream}
    refused = http.post("/ollama/api/chat", json={**asked, "truncate": False})
    assert refused.status_code == 400 and "context" in refused.json()["error"]
    # a client that sized num_ctx for the whole conversation (aider) is told, not answered without its turns
    sized = http.post("/ollama/api/chat", json={**asked, "options": {"num_predict": 3, "num_ctx": 9000}})
    assert sized.status_code == 400 and "options.num_ctx is 9000" in sized.json()["error"]
    assert "serves 512 tokens per request" in sized.json()["error"]
    for num_ctx in (None, 512, 256):  # no more than is served: truncated as before
        options = {"num_predict": 3} if num_ctx is None else {"num_predict": 3, "num_ctx": num_ctx}
        answered = http.post("/ollama/api/chat", json={**asked, "options": options})
        assert answered.status_code == 200, answered.text
    last = json.loads(answered.text.splitlines()[-1])
    assert last["done"] and last["eval_count"] == 3 and last["prompt_eval_count"] <= 512 - 3
    record = logged_request(live, answered)
    truncated = next(s for s in record.timeline if s.name == steps.TRUNCATED)
    assert truncated.details["dropped_messages"] > 0 and truncated.details["context"] == 512
    # what is kept opens with the system message and starts at a user turn: a prompt that fits as it is
    kept = _long_chat(12)[:1] + _long_chat(12)[1 + truncated.details["dropped_messages"] :]
    assert kept[1]["role"] == "user"
    again = client(live).chat(model=models.chat, messages=kept, options={"num_predict": 3})
    assert again.prompt_eval_count == last["prompt_eval_count"]
    generated = http.post("/ollama/api/generate", json={"model": models.chat, "prompt": "word " * 600, "stream": False})
    assert generated.status_code == 400  # one turn too long by itself: nothing to leave out


def test_ollamas_openai_api_under_its_v1(live: LiveServer, models: Models) -> None:
    """Open WebUI and users point OpenAI's SDK at an Ollama server's /v1: here /ollama/v1."""
    sdk = openai.OpenAI(base_url=live.url + "/ollama/v1", api_key=live.key, max_retries=0, timeout=60)
    assert {models.chat, models.embed} <= {m.id for m in sdk.models.list()}
    assert sdk.models.retrieve(models.chat).id == models.chat
    chat = sdk.chat.completions.create(model=models.chat, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert chat.choices[0].finish_reason == "length" and chat.usage is not None and chat.usage.completion_tokens == 2
    # by its Ollama name, with the tag /api/tags lists
    tagged = [{"role": "user", "content": "Hi"}]
    assert sdk.chat.completions.create(model=f"{models.chat}:latest", messages=tagged, max_tokens=1).choices  # type: ignore[arg-type]
    streamed = sdk.chat.completions.create(
        model=models.chat, messages=[{"role": "user", "content": "Hi"}], max_tokens=2, stream=True
    )
    assert [c.choices[0].finish_reason for c in streamed if c.choices][-1] == "length"
    assert sdk.completions.create(model=models.chat, prompt="Hi", max_tokens=2).usage.completion_tokens == 2  # type: ignore[union-attr]
    assert len(sdk.embeddings.create(model=models.embed, input=["a cat"]).data[0].embedding) > 10
    # errors in OpenAI's shape, with the same key
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.chat.completions.create(model="nope", messages=[{"role": "user", "content": "Hi"}])
    assert missing.value.code == "model_not_found"  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError) as no_route:
        sdk.post("/nope", cast_to=dict, body={})
    assert no_route.value.code == "not_found" and "POST /ollama/v1/nope" in no_route.value.message  # type: ignore[attr-defined]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=live.url + "/ollama/v1", api_key="sk-spark-wrong", max_retries=0).models.list()
    # Anthropic's Messages too, as Ollama serves them there
    claude = anthropic.Anthropic(base_url=live.url + "/ollama", api_key=live.key, max_retries=0, timeout=60)
    message = claude.messages.create(model=models.chat, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
    assert message.stop_reason == "max_tokens"
    with pytest.raises(anthropic.NotFoundError) as unknown:
        claude.messages.create(model="nope", max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
    assert unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_empty_texts_are_embedded_and_a_lone_one_only_loads(live: LiveServer, models: Models) -> None:
    """As Ollama's /api/embed: each text of a list is embedded, an empty one too (the model's
    vector for its empty tokenization, BERT's [CLS] [SEP]); a lone "" asks for nothing."""
    c = client(live)
    for model in (models.embed, models.chat):
        both = c.embed(model=model, input=["", "a cat"])
        assert len(both.embeddings) == 2 and len(both.embeddings[0]) == len(both.embeddings[1]) > 10
        assert both.embeddings[0] != both.embeddings[1]
        assert c.embed(model=model, input=[""]).embeddings == [both.embeddings[0]]
        assert c.embed(model=model, input="").embeddings == []
    with pytest.raises(openai.BadRequestError):  # OpenAI's refuses them, as OpenAI does
        live.openai().embeddings.create(model=models.embed, input=["a", ""])


@pytest.mark.parametrize(
    ("method", "path", "words"),
    [
        ("POST", "/ollama/api/pull", "spark pull"),
        ("POST", "/ollama/api/push", "does not push"),
        ("POST", "/ollama/api/create", "spark pull PATH"),
        ("POST", "/ollama/api/copy", "spark cp"),
        ("DELETE", "/ollama/api/delete", "spark rm"),
        ("POST", "/ollama/api/blobs/sha256:abc", "spark pull PATH"),
    ],
)
def test_model_management_is_501_saying_what_to_use(live: LiveServer, method: str, path: str, words: str) -> None:
    """Not a 404, which Ollama's clients read as a missing model (or a blob to upload)."""
    response = live.http().request(method, path, json={"model": "x", "source": "x", "destination": "y"})
    assert response.status_code == 501 and words in response.json()["error"]
    assert response.json()["error"].startswith("Spark does not manage models through Ollama's API")


def test_model_management_through_ollamas_client(live: LiveServer, models: Models) -> None:
    c = client(live)
    for call in (lambda: c.pull("x"), lambda: c.delete(models.chat), lambda: c.copy(models.chat, "y")):
        with pytest.raises(ollama.ResponseError) as refused:
            call()
        assert refused.value.status_code == 501
    assert live.http().head("/ollama/api/blobs/sha256:abc").status_code == 501
    assert models.chat + ":latest" in {m.model for m in c.list().models}  # nothing was deleted


def test_ps_counts_gpu_memory_as_size_vram() -> None:
    entry = ModelEntry("m", 0)
    on_cpu = RunnerState("m", "ready", 1, 0, 0, 0, 0.0, 0, 512, 1, estimate_bytes=100, device_bytes={"cpu": 150})
    assert loaded_model(entry, on_cpu, 0.0) == ollama_api.LoadedModel(entry, 100, 0, 0.0, 512)
    offloaded = msgspec.structs.replace(
        on_cpu, measured_bytes=40, device_bytes={"cpu": 90, "cuda:0": 3000, "cuda:1": 1000}, keep_alive=-1
    )
    assert loaded_model(entry, offloaded, 0.0) == ollama_api.LoadedModel(entry, 4040, 4000, None, 512)
