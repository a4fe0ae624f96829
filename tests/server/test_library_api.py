"""The library over the admin API: list, show (with where the model would go), settings, remove."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.helpers import LiveServer, live_server, openai_error, server_settings
from spark.library import Library

PASSWORD = "library-admin-password"
CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path, tiny_mmproj: Path, tiny_lora: Path
) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    home = tmp_path_factory.mktemp("library-home")
    settings = server_settings(home, SPARK_ADMIN_PASSWORD=PASSWORD)
    dotted = home / "Qwen2.5-Tiny.Q8_0.gguf"
    shutil.copyfile(tiny_llama, dotted)
    with Library(settings) as lib:
        models = {
            "chat": lib.add_local(tiny_llama).id,
            "vision": lib.add_local(tiny_llama, model_id="tiny-vision", mmproj=tiny_mmproj).id,
            "dotted": lib.add_local(dotted).id,
            "spare": lib.add_local(dotted, model_id="spare", copy=True).id,
            "tuned": lib.add_local(tiny_llama, model_id="tuned").id,
            "guarded": lib.add_local(tiny_llama, model_id="guarded").id,
            "adapted": lib.add_local(tiny_llama, model_id="adapted").id,
        }
        lib.attach("adapted", tiny_lora)
    with live_server(settings) as live:
        yield live, models


@pytest.fixture
def live(served: tuple[LiveServer, dict[str, str]]) -> LiveServer:
    return served[0]


@pytest.fixture
def models(served: tuple[LiveServer, dict[str, str]]) -> dict[str, str]:
    return served[1]


def admin(live: LiveServer) -> httpx.Client:
    return live.http(key=PASSWORD)


def estimate(memory: dict[str, Any]) -> dict[str, Any]:
    """A model's memory figures without the arithmetic's free memory (which moves as the machine runs)."""
    return {k: v for k, v in memory.items() if k != "arithmetic"}


def chat(live: LiveServer, model: str) -> None:
    response = live.http().post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 2})
    assert response.status_code == 200, response.text


def test_list_shows_every_installed_model_and_which_are_loaded(live: LiveServer, models: dict[str, str]) -> None:
    chat(live, models["chat"])
    listed = {m["id"]: m for m in admin(live).get("/api/models").json()}
    assert set(models.values()) <= set(listed)
    chat_model = listed[models["chat"]]
    assert chat_model["loaded"] is True and listed[models["dotted"]]["loaded"] is False
    assert chat_model["architecture"] == "llama" and chat_model["quantization"] == "F32"
    assert chat_model["size_bytes"] > 0 and chat_model["parameters"] > 0 and chat_model["context_length"] > 0
    assert listed["tiny-vision"]["vision"] is True and listed["tiny-vision"]["mmproj_path"].endswith("mmproj-mlp.gguf")
    assert chat_model["vision"] is False and chat_model["embedding"] is False
    assert models["dotted"] == "qwen2.5-tiny.q8_0"  # dots kept in ids


def greedy(live: LiveServer, model: str, **extra: Any) -> str:
    body = {"model": model, "prompt": "Hello there", "max_tokens": 8, "temperature": 0, **extra}
    response = live.http().post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["text"])


def test_a_model_with_a_lora_adapter_answers_with_it(live: LiveServer, models: dict[str, str], tiny_lora: Path) -> None:
    """The adapter reaches the runner: the adapted model answers otherwise than the plain one, the
    admin API shows it with its memory, and one attached while the model is loaded (by the CLI, on
    the same library) applies from the next request, which loads the model again."""
    plain, adapted = greedy(live, models["chat"]), greedy(live, models["adapted"])
    assert adapted != plain
    listed = {m["id"]: m for m in admin(live).get("/api/models").json()}
    assert listed["adapted"]["lora"] == [{"path": str(tiny_lora), "scale": 1.0}]
    assert listed[models["chat"]]["lora"] == []
    shown = admin(live).get("/api/models/adapted").json()
    assert shown["model"]["lora"] == [{"path": str(tiny_lora), "scale": 1.0}]
    assert shown["memory"]["adapter_bytes"] == tiny_lora.stat().st_size
    assert "LoRA adapters" in shown["memory"]["arithmetic"]

    with Library(live.settings) as lib:
        lib.attach("guarded", tiny_lora)
    try:
        assert greedy(live, "guarded") == adapted
    finally:
        with Library(live.settings) as lib:
            lib.detach_adapters("guarded")
    assert greedy(live, "guarded") == plain


def test_a_request_s_lora_scales_apply_to_it_alone(live: LiveServer, models: dict[str, str], tiny_lora: Path) -> None:
    """llama-server's per-request `lora` on its routes and OpenAI's: the adapter at 0 answers as
    the plain model, at its attached scale as the adapted one; `GET /lora-adapters` names the ids."""
    plain, adapted = greedy(live, models["chat"]), greedy(live, models["adapted"])
    assert greedy(live, "adapted", lora=[{"id": 0, "scale": 0.0}]) == plain
    assert greedy(live, "adapted", lora=[{"id": 0, "scale": 1.0}]) == adapted
    assert greedy(live, "adapted", lora=[]) == plain  # an adapter not named applies at 0
    half = greedy(live, "adapted", lora=[{"id": 0, "scale": 0.5}])
    assert half not in (plain, adapted)
    body = {"model": "adapted", "prompt": "Hello there", "n_predict": 8, "temperature": 0}
    assert live.http().post("/completion", json={**body, "lora": [{"id": 0, "scale": 0.5}]}).json()["content"] == half
    chat = {"model": "adapted", "messages": CHAT, "max_tokens": 8, "temperature": 0}
    answers = [
        live.http().post("/v1/chat/completions", json={**chat, **lora}).json()["choices"][0]["message"]["content"]
        for lora in ({}, {"lora": [{"id": 0, "scale": 0}]})
    ]
    assert answers[0] != answers[1]

    listed = live.http().get("/lora-adapters", params={"model": "adapted"})
    assert listed.json() == [{"id": 0, "path": tiny_lora.name, "scale": 1.0}]  # the file's name, never its path
    assert live.http().get("/lora-adapters", params={"model": models["chat"]}).json() == []
    refused = openai_error(live.http().post("/lora-adapters", json=[{"id": 0, "scale": 0.5}]), 403)
    assert "spark attach" in refused["message"] and "'lora'" in refused["message"]


@pytest.mark.parametrize(
    ("lora", "param", "says"),
    [
        ([{"id": 1, "scale": 1.0}], "lora", "adapter id 1, but this model has adapters 0 to 0"),
        ([{"id": -1, "scale": 1.0}], "lora[0].id", ">= 0"),
        ([{"id": 0, "scale": 101}], "lora[0].scale", "<= 100.0"),
        ([{"id": 0}], "lora[0].scale", "Missing"),
        ("0:1", "lora", "array"),
    ],
)
def test_bad_lora_is_a_400_naming_it(live: LiveServer, lora: Any, param: str, says: str) -> None:
    for path, body in (
        ("/v1/completions", {"prompt": "Hello", "max_tokens": 2}),
        ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2}),
        ("/completion", {"prompt": "Hello", "n_predict": 2}),
    ):
        error = openai_error(live.http().post(path, json={**body, "model": "adapted", "lora": lora}), 400)
        assert error["param"] == param and says in error["message"], (path, error)


def test_show_has_files_settings_and_where_it_would_go(live: LiveServer, models: dict[str, str]) -> None:
    body = admin(live).get(f"/api/models/{models['vision']}").json()
    assert body["model"]["id"] == "tiny-vision"
    assert body["model"]["shards"] == [body["model"]["path"]] and body["model"]["mmproj_path"]
    assert body["model"]["info"]["architecture"] == "llama"
    memory = body["memory"]
    assert memory["verdict"] == "fits" and memory["devices"] == ["cpu"] and memory["unload"] == []
    assert memory["projector_bytes"] > 0
    assert memory["total_bytes"] == (
        memory["weights_bytes"]
        + memory["kv_bytes"]
        + memory["buffers_bytes"]
        + memory["grammar_bytes"]
        + memory["projector_bytes"]
    )
    assert memory["grammar_bytes"] > 0 and "grammar sampler" in memory["arithmetic"]
    assert memory["arithmetic"].startswith("needs ") and "; cpu, " in memory["arithmetic"]
    assert body["memory_error"] is None


def test_show_finds_a_model_by_the_id_an_older_spark_gave_it(live: LiveServer, models: dict[str, str]) -> None:
    body = admin(live).get("/api/models/qwen2-5-tiny-q8_0").json()  # dots read as dashes
    assert body["model"]["id"] == models["dotted"]
    chat(live, "qwen2-5-tiny-q8_0")  # and so does /v1
    assert any(r.model == models["dotted"] for r in live.runners())


def test_detaching_the_projector(live: LiveServer, tiny_llama: Path, tiny_mmproj: Path) -> None:
    with Library(live.settings) as lib:
        model = lib.add_local(tiny_llama, model_id="seeing", mmproj=tiny_mmproj).id
    detached = admin(live).delete(f"/api/models/{model}/mmproj")
    assert detached.status_code == 200, detached.text
    assert detached.json()["vision"] is False and detached.json()["mmproj_path"] is None
    assert admin(live).get(f"/api/models/{model}").json()["model"]["mmproj_path"] is None
    assert admin(live).delete(f"/api/models/{model}/mmproj").status_code == 200  # nothing left: the model as it is
    assert tiny_mmproj.is_file()
    assert admin(live).delete("/api/models/nope/mmproj").status_code == 404


def test_settings_change_says_when_a_reload_is_needed(live: LiveServer, models: dict[str, str]) -> None:
    model = models["tuned"]
    client = admin(live)
    changed = client.patch(
        f"/api/models/{model}/settings",
        json={"context_length": 256, "keep_alive": "5m", "kv_type": "f16", "sampling": {"temperature": 0.2}},
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    settings = body["model"]["settings"]
    assert settings == {"context_length": 256, "keep_alive": 300.0, "kv_type": "f16", "sampling": {"temperature": 0.2}}
    assert body["loaded"] is False and body["reload_needed"] is False  # the next load uses them anyway
    assert client.get(f"/api/models/{model}").json()["memory"]["n_ctx"] == 256

    chat(live, model)
    assert live.runner(model).n_ctx == 256
    assert live.runner(model).keep_alive == 300  # its own keep-alive, not the server's
    # sampling fields merge; keep_alive alone needs no reload
    kept = client.patch(f"/api/models/{model}/settings", json={"keep_alive": 60, "sampling": {"top_k": 5}}).json()
    assert kept["model"]["settings"]["sampling"] == {"temperature": 0.2, "top_k": 5}
    assert kept["loaded"] is True and kept["reload_needed"] is True and kept["changes"] == "sampling changed"
    # a null clears one field (back to Spark's default), the others are kept
    cleared = client.patch(f"/api/models/{model}/settings", json={"sampling": {"top_k": None, "min_p": 0.1}}).json()
    assert cleared["model"]["settings"]["sampling"] == {"temperature": 0.2, "min_p": 0.1}
    client.patch(f"/api/models/{model}/settings", json={"sampling": {"min_p": None, "top_k": 5}})
    # token ids as JSON object keys, which are text
    biased = client.patch(f"/api/models/{model}/settings", json={"sampling": {"logit_bias": {"11": -100}}})
    assert biased.json()["model"]["settings"]["sampling"]["logit_bias"] == {"11": -100.0}, biased.text
    client.patch(f"/api/models/{model}/settings", json={"sampling": {"logit_bias": None}})
    reload = client.patch(f"/api/models/{model}/settings", json={"context_length": 128}).json()
    assert reload["reload_needed"] is True and reload["changes"] == "n_ctx 256 -> 128"
    chat(live, model)  # the next request reloads it
    assert live.runner(model).n_ctx == 128
    assert client.patch(f"/api/models/{model}/settings", json={"keep_alive": 30}).json()["reload_needed"] is False

    reset = client.patch(
        f"/api/models/{model}/settings",
        json={"context_length": None, "kv_type": None, "keep_alive": None, "sampling": None},
    ).json()
    assert reset["model"]["settings"] == {}


@pytest.mark.parametrize(
    ("change", "message", "param"),
    [
        ({"context_length": "abc"}, "context_length must be a whole number, not 'abc'", "context_length"),
        ({"system_prompt": 5}, "system_prompt must be text, not 5", "system_prompt"),
        ({"sampling": {"top_k": 2.5}}, "sampling.top_k must be a whole number, not 2.5", "sampling.top_k"),
        ({"sampling": {"stop": 7}}, "sampling.stop must be a list, not 7", "sampling.stop"),
    ],
)
def test_a_setting_of_the_wrong_type_is_named_in_words(
    live: LiveServer, models: dict[str, str], change: dict[str, Any], message: str, param: str
) -> None:
    """Said as a person filling in the console's form reads it, not in msgspec's type names."""
    error = openai_error(admin(live).patch(f"/api/models/{models['tuned']}/settings", json=change), 400)
    assert (error["message"], error["param"]) == (message, param)


def test_repetition_guard_and_answer_length_are_model_settings(live: LiveServer, models: dict[str, str]) -> None:
    model, client = models["guarded"], admin(live)
    guard = {"dry_multiplier": 0.8, "dry_allowed_length": 3, "repeat_penalty": 1.1, "max_tokens": 3}
    changed = client.patch(f"/api/models/{model}/settings", json={"sampling": guard})
    assert changed.status_code == 200, changed.text
    assert client.get(f"/api/models/{model}").json()["model"]["settings"]["sampling"] == guard
    # a request that sets no max_tokens stops at the model's; one that asks for more gets it
    unset = live.http().post("/v1/chat/completions", json={"model": model, "messages": CHAT, "temperature": 0})
    assert unset.status_code == 200, unset.text
    assert unset.json()["usage"]["completion_tokens"] == 3  # the tiny model never ends by itself
    more = live.http().post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 12})
    assert more.json()["usage"]["completion_tokens"] == 12
    client.patch(f"/api/models/{model}/settings", json={"sampling": None})


def test_speculative_decoding_can_be_turned_off_per_model(live: LiveServer, models: dict[str, str]) -> None:
    model = models["dotted"]
    client = admin(live)
    chat(live, model)  # loaded with the server's setting: on
    off = client.patch(f"/api/models/{model}/settings", json={"speculative": False}).json()
    assert off["model"]["settings"] == {"speculative": False}
    assert off["reload_needed"] is True and off["changes"] == "speculative True -> False"
    reset = client.patch(f"/api/models/{model}/settings", json={"speculative": None}).json()
    assert reset["model"]["settings"] == {} and reset["changes"] == "speculative False -> True"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"context_length": 0}, "context_length"),
        ({"context_length": "long"}, "context_length"),
        ({"parallel": 1000}, "parallel"),
        ({"system_prompt": 3}, "system_prompt"),
        ({"sampling": {"temperature": -1}}, "sampling.temperature"),
        ({"sampling": {"top_p": "high"}}, "sampling.top_p"),
        ({"sampling": {"dry_multiplier": -1}}, "sampling.dry_multiplier"),
        ({"sampling": {"dry_base": 0.5}}, "sampling.dry_base"),
        ({"sampling": {"typical_p": 2}}, "sampling.typical_p"),
        ({"sampling": {"dry_penalty_last_n": -3}}, "sampling.dry_penalty_last_n"),
        ({"kv_type": "q5_1"}, "kv_type"),
        ({"kv_type": "q8_0"}, "kv_type"),  # the tiny model's heads (16) are too small for its blocks
        ({"speculative": "maybe"}, "speculative"),
        ({"flash_attention": "sometimes"}, "flash_attention"),
        ({"flash_attention": True}, "flash_attention"),
        ({"draft_model": "nope"}, "draft_model"),
        ({"draft_model": 5}, "draft_model"),
        ({"draft_model": "smollm2-135m-instruct-q4_1"}, "draft_model"),  # another vocabulary
        ({"draft_model": ""}, "draft_model"),
        ({"keep_alive": "soon"}, "keep_alive"),
        ({"keep_alive": [5]}, "keep_alive"),
        ({"n_gpu_layers": 3}, "n_gpu_layers"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(
    live: LiveServer, models: dict[str, str], body: dict[str, Any], param: str | None
) -> None:
    client = admin(live)
    before = client.get(f"/api/models/{models['chat']}").json()["model"]["settings"]
    error = openai_error(client.patch(f"/api/models/{models['chat']}/settings", json=body), 400)
    assert error["param"] == param
    assert client.get(f"/api/models/{models['chat']}").json()["model"]["settings"] == before


def test_unknown_models_are_404(live: LiveServer) -> None:
    client = admin(live)
    for response in (
        client.get("/api/models/nope"),
        client.get("/api/models/a..b"),
        client.delete("/api/models/nope"),
        client.patch("/api/models/nope/settings", json={"parallel": 2}),
        client.post("/api/models/nope/copy", json={"id": "other"}),
    ):
        assert openai_error(response, 404)["code"] == "model_not_found"
    assert openai_error(client.get("/api/models/..%2F..%2Fetc"), 404)  # no such route, nor a file read


def test_remove_unloads_a_loaded_model_first(live: LiveServer, models: dict[str, str]) -> None:
    model = models["spare"]
    owned_file = Path(admin(live).get(f"/api/models/{model}").json()["model"]["path"])
    chat(live, model)
    assert any(r.model == model for r in live.runners())
    removed = admin(live).delete(f"/api/models/{model}")
    assert removed.status_code == 200, removed.text
    assert removed.json() == {"model": model, "unloaded": True, "files_deleted": True, "shared_with": []}
    assert not any(r.model == model and r.status not in ("failed", "stopped") for r in live.runners())
    assert not owned_file.exists()
    assert openai_error(admin(live).get(f"/api/models/{model}"), 404)["code"] == "model_not_found"
    assert openai_error(live.http().post("/v1/chat/completions", json={"model": model, "messages": CHAT}), 404)


def test_library_routes_need_the_admin_credential(live: LiveServer, models: dict[str, str]) -> None:
    model = models["chat"]
    for key in (None, live.key):  # an API key is no admin credential
        client = live.http(key=key)
        for method, path in [
            ("GET", "/api/models"),
            ("GET", f"/api/models/{model}"),
            ("DELETE", f"/api/models/{model}"),
            ("PATCH", f"/api/models/{model}/settings"),
            ("POST", f"/api/models/{model}/copy"),
        ]:
            response = client.request(
                method, path, json={"parallel": 2, "id": "x"} if method in ("PATCH", "POST") else None
            )
            assert response.status_code == 401, (method, path, response.text)
    assert admin(live).get(f"/api/models/{model}").status_code == 200  # still there


def test_a_quantized_kv_cache_shows_in_the_estimate(live: LiveServer) -> None:
    client = admin(live)
    model = "smollm2-135m-instruct-q4_1"  # heads of 64: q8_0 blocks fit
    before = client.get(f"/api/models/{model}").json()["memory"]
    changed = client.patch(f"/api/models/{model}/settings", json={"kv_type": "q8_0"})
    assert changed.status_code == 200, changed.text
    after = client.get(f"/api/models/{model}").json()["memory"]
    assert (before["kv_type"], after["kv_type"]) == ("f16", "q8_0")
    assert after["kv_bytes"] == before["kv_bytes"] * 34 // 64  # 34 bytes per 32 values instead of 64
    # a quantized cache needs flash attention: turning it off is refused, and nothing changes
    error = openai_error(client.patch(f"/api/models/{model}/settings", json={"flash_attention": "off"}), 400)
    assert error["param"] == "flash_attention" and "q8_0" in error["message"]
    kept = client.get(f"/api/models/{model}").json()["model"]["settings"]
    assert kept["kv_type"] == "q8_0" and "flash_attention" not in kept
    client.patch(f"/api/models/{model}/settings", json={"kv_type": None})


def test_flash_attention_is_a_model_setting_the_estimate_follows(live: LiveServer) -> None:
    """Off, the compute buffer holds the attention scores; with auto (on, on the CPU) it does not."""
    client = admin(live)
    model = "smollm2-135m-instruct-q4_1"
    auto = client.get(f"/api/models/{model}").json()["memory"]
    changed = client.patch(f"/api/models/{model}/settings", json={"flash_attention": "off"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["model"]["settings"]["flash_attention"] == "off"
    off = client.get(f"/api/models/{model}").json()["memory"]
    # 9 query heads x 512 micro-batch tokens x the context's cells, f32
    assert off["buffers_bytes"] - auto["buffers_bytes"] == 4 * 9 * 512 * auto["n_ctx"]
    client.patch(f"/api/models/{model}/settings", json={"flash_attention": None})
    assert estimate(client.get(f"/api/models/{model}").json()["memory"]) == estimate(auto)


def test_a_draft_model_is_a_model_setting_counted_in_its_memory(live: LiveServer, models: dict[str, str]) -> None:
    client = admin(live)
    model, draft = models["tuned"], models["guarded"]  # the same vocabulary
    before = client.get(f"/api/models/{model}").json()["memory"]
    changed = client.patch(f"/api/models/{model}/settings", json={"draft_model": draft.upper()})
    assert changed.status_code == 200, changed.text
    assert changed.json()["model"]["settings"]["draft_model"] == draft  # the id as installed
    assert changed.json()["changes"].startswith("draft_path None -> ")
    after = client.get(f"/api/models/{model}").json()["memory"]
    assert after["draft_bytes"] > 0 and after["total_bytes"] == before["total_bytes"] + after["draft_bytes"]
    assert "draft model" in after["arithmetic"]
    chat(live, model)  # loaded with its draft model beside it
    # a model that drafts for another stays until that one's setting changes
    error = openai_error(client.delete(f"/api/models/{draft}"), 400)
    assert error["param"] == "model" and model in error["message"]
    assert client.get(f"/api/models/{draft}").status_code == 200
    # speculative decoding off: no draft model loaded, nor counted
    off = client.patch(f"/api/models/{model}/settings", json={"speculative": False}).json()
    assert "draft_path" in off["changes"]
    assert client.get(f"/api/models/{model}").json()["memory"]["draft_bytes"] == 0
    client.patch(f"/api/models/{model}/settings", json={"speculative": None, "draft_model": None})
    assert estimate(client.get(f"/api/models/{model}").json()["memory"]) == estimate(before)


def test_a_model_cannot_draft_for_itself_nor_with_an_embedding_model(
    live: LiveServer, models: dict[str, str], tiny_bert: Path
) -> None:
    client = admin(live)
    model = models["tuned"]
    error = openai_error(client.patch(f"/api/models/{model}/settings", json={"draft_model": model}), 400)
    assert error["param"] == "draft_model" and "itself" in error["message"]
    with Library(live.settings) as library:
        embed = library.add_local(tiny_bert).id
    error = openai_error(client.patch(f"/api/models/{model}/settings", json={"draft_model": embed}), 400)
    assert error["param"] == "draft_model" and "embedding" in error["message"]
    assert "draft_model" not in client.get(f"/api/models/{model}").json()["model"]["settings"]


def test_a_copy_answers_by_its_own_name_with_its_own_settings(live: LiveServer, models: dict[str, str]) -> None:
    client = admin(live)
    copied = client.post(f"/api/models/{models['chat']}/copy", json={"id": "gpt-4o-mini"})
    assert copied.status_code == 200, copied.text
    assert copied.json()["id"] == "gpt-4o-mini" and copied.json()["source"] == f"copy:{models['chat']}"
    changed = client.patch("/api/models/gpt-4o-mini/settings", json={"system_prompt": "Be brief."})
    assert changed.status_code == 200
    assert client.get(f"/api/models/{models['chat']}").json()["model"]["settings"].get("system_prompt") is None
    answer = live.http().post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": CHAT, "max_tokens": 2})
    assert answer.status_code == 200 and answer.json()["model"] == "gpt-4o-mini"
    for body, param in (({"id": models["chat"]}, "id"), ({"id": "a/b"}, "id"), ({}, "id"), ({"id": "x", "y": 1}, "y")):
        assert openai_error(client.post("/api/models/gpt-4o-mini/copy", json=body), 400)["param"] == param
    assert models["chat"] in client.get("/api/models/gpt-4o-mini").json()["shared_with"]
    assert "gpt-4o-mini" in client.get(f"/api/models/{models['chat']}").json()["shared_with"]
    removed = client.delete("/api/models/gpt-4o-mini").json()
    assert removed["files_deleted"] is False and models["chat"] in removed["shared_with"]  # the original keeps them
    assert "gpt-4o-mini" not in client.get(f"/api/models/{models['chat']}").json()["shared_with"]
    assert client.get(f"/api/models/{models['chat']}").status_code == 200
