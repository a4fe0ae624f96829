"""llama-server's token routes: /tokenize, /detokenize and /apply-template, on a real server."""

from __future__ import annotations

import pytest

from server.helpers import LiveServer, Models
from spark.errors import RequestNotFound


def post(live: LiveServer, path: str, body: dict[str, object], key: str | None = "default") -> dict[str, object]:
    response = live.http(key=key).post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_text_goes_to_tokens_and_back(live: LiveServer, models: Models) -> None:
    text = "Hello wörld, 2 + 2 = 4 🙂"
    tokens = post(live, "/tokenize", {"model": models.chat, "content": text})["tokens"]
    assert isinstance(tokens, list) and len(tokens) > 3 and all(isinstance(t, int) for t in tokens)
    assert post(live, "/detokenize", {"model": models.chat, "tokens": tokens}) == {"content": text}
    assert post(live, "/detokenize", {"model": models.chat, "tokens": []}) == {"content": ""}
    # each token's piece: the text where it is whole UTF-8, else its bytes; together, the text again
    pieces = post(live, "/tokenize", {"model": models.chat, "content": text, "with_pieces": True})["tokens"]
    assert isinstance(pieces, list) and [p["id"] for p in pieces] == tokens
    raw = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert raw.decode() == text and any(isinstance(p["piece"], list) for p in pieces)  # the emoji's bytes split


def test_special_tokens_are_read_as_such_unless_told_not_to(live: LiveServer, models: Models) -> None:
    body = {"model": models.chat, "content": "<|im_end|>", "with_pieces": True}
    special = post(live, "/tokenize", body)["tokens"]
    assert isinstance(special, list) and len(special) == 1 and special[0]["piece"] == "<|im_end|>"
    plain = post(live, "/tokenize", {**body, "parse_special": False})["tokens"]
    assert isinstance(plain, list) and len(plain) > 1
    # and back as their text, as llama-server's /detokenize writes them
    around = post(live, "/tokenize", {"model": models.chat, "content": "Hi<|im_end|>there"})["tokens"]
    assert post(live, "/detokenize", {"model": models.chat, "tokens": around}) == {"content": "Hi<|im_end|>there"}


def test_apply_template_answers_the_prompt_a_chat_renders_to(live: LiveServer, models: Models) -> None:
    chat = {
        "model": models.chat,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    }
    prompt = post(live, "/apply-template", chat)["prompt"]
    assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    # its tokens are the prompt the model is given: the count Anthropic's count_tokens route answers
    tokens = post(live, "/tokenize", {"model": models.chat, "content": prompt})["tokens"]
    counted = live.http().post(
        "/v1/messages/count_tokens",
        json={"model": models.chat, "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert isinstance(tokens, list) and counted.json()["input_tokens"] == len(tokens)


def test_an_embedding_model_tokenizes_too(live: LiveServer, models: Models) -> None:
    tokens = post(live, "/tokenize", {"model": models.embed, "content": "hello world"})["tokens"]
    assert isinstance(tokens, list) and tokens


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {"content": 5}, 400, "content"),
        ("/tokenize", {}, 400, "content"),
        ("/detokenize", {"tokens": [1, 10**9]}, 400, "tokens"),
        ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
        ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
        ("/apply-template", {"messages": "hi"}, 400, "messages"),
        ("/tokenize", {"content": "x", "model": "no-such-model"}, 404, "model"),
    ],
)
def test_bad_bodies_get_openai_errors_naming_the_parameter(
    live: LiveServer, models: Models, path: str, body: dict[str, object], status: int, param: str
) -> None:
    body = {"model": models.chat, **body}
    response = live.http().post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"]


def test_without_a_model_the_default_model_is_asked(live: LiveServer) -> None:
    # the bundled SmolLM2, as llama-server's clients name no model
    text = "The capital of France"
    named = post(live, "/tokenize", {"model": live.settings.default_model, "content": text})
    assert post(live, "/tokenize", {"content": text}) == named
    assert post(live, "/apply-template", {"messages": [{"role": "user", "content": text}]})["prompt"]


def test_the_routes_need_a_key_and_are_not_logged(live: LiveServer, models: Models) -> None:
    for path in ("/tokenize", "/detokenize", "/apply-template"):
        assert live.http(key=None).post(path, json={}).status_code == 401
        assert live.http(key="sk-spark-wrong").post(path, json={}).status_code == 401
    response = live.http().post("/tokenize", json={"model": models.chat, "content": "x"})
    assert response.status_code == 200
    log = live.state.request_log
    assert log is not None
    log.flush(5)
    with pytest.raises(RequestNotFound):
        live.state.requests.get(response.headers["x-request-id"])


def test_props_tell_of_a_model_as_llama_server_does(live: LiveServer, models: Models) -> None:
    props = live.http().get("/props", params={"model": models.chat}).json()
    listed = live.http().get(f"/v1/models/{models.chat}").json()
    assert props["model_alias"] == models.chat
    assert props["default_generation_settings"]["n_ctx"] == listed["spark"]["context_window"]
    assert props["total_slots"] == live.settings.parallel and props["modalities"] == {"vision": False, "audio": False}
    assert props["chat_template"].startswith("{%") and props["build_info"].startswith("spark ")
    assert "path" not in str(props)  # the file's place stays on the server
    # the default model, with its own sampling defaults
    default = live.http().get("/props").json()
    assert default["model_alias"] == live.settings.default_model
    params = default["default_generation_settings"]["params"]
    assert params["temperature"] == 0  # the model's own
    assert (params["top_k"], params["mirostat"], params["samplers"][0]) == (40, 0, "penalties")  # Spark's
    missing = live.http().get("/props", params={"model": "no-such-model"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"
    assert live.http(key=None).get("/props").status_code == 401
