"""Hugging Face search over the admin API: the same hits as `spark search`, each repository's
GGUF models, and whether each fits on this machine now."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakehub import FakeHub
from server.helpers import LiveServer, live_server, openai_error, server_settings
from spark.library import Hub, Library, read_gguf_info
from spark.placement import estimate_memory, model_shape
from spark.settings import Settings

PASSWORD = "hub-admin-password"
CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture
def settings(tmp_path: Path, fake_hub: FakeHub) -> Settings:
    # one model at a time, so that a loaded model must make way for another
    return server_settings(
        tmp_path / "home", SPARK_ADMIN_PASSWORD=PASSWORD, SPARK_HF_ENDPOINT=fake_hub.url, SPARK_MAX_LOADED_MODELS="1"
    )


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    with live_server(settings) as server:
        yield server


def admin(live: LiveServer) -> httpx.Client:
    return live.http(key=PASSWORD)


def models_of(files: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in files["models"]}


def test_search_gives_the_cli_hits_and_the_first_repositories_files(
    live: LiveServer, settings: Settings, fake_hub: FakeHub
) -> None:
    body = admin(live).get("/api/hub/search", params={"q": "tiny", "files": 2}).json()
    assert body["query"] == "tiny"
    expected = [m.id for m in Hub(settings).search("tiny")]  # what `spark search tiny` shows
    assert [hit["repo"]["id"] for hit in body["results"]] == expected
    assert body["results"][0]["repo"]["downloads"] == 5000 and body["results"][0]["repo"]["parameters"] == 139584
    with_files = [hit for hit in body["results"] if hit["files"] is not None]
    assert [hit["repo"]["id"] for hit in with_files] == expected[:2]
    # bounded: one listing and at most two reads of one header per repository with files
    header_reads = [p for m, p, _ in fake_hub.requests if m == "GET" and "/resolve/" in p]
    assert len({p.split("/resolve/")[0] for p in header_reads}) <= 2 and len(header_reads) <= 4


def test_each_file_gets_a_verdict_with_the_arithmetic(
    live: LiveServer, settings: Settings, hub_files: dict[str, bytes], tmp_path: Path
) -> None:
    files = admin(live).get("/api/hub/repos/tiny/TinyLlama-GGUF").json()
    assert files["repo"] == "tiny/TinyLlama-GGUF"
    assert files["estimated_from"] == "TinyLlama-Q4_K_M.gguf" and files["projector"] is None
    models = models_of(files)
    assert set(models) == {"TinyLlama-F16.gguf", "TinyLlama-Q4_K_M.gguf", "TinyLlama-Q8_0.gguf"}
    default = models["TinyLlama-Q4_K_M.gguf"]
    assert default["default"] is True and default["quant"] == "Q4_K_M"
    assert default["spec"] == "tiny/TinyLlama-GGUF/TinyLlama-Q4_K_M.gguf" and default["model_id"] == "tinyllama-q4_k_m"
    assert default["size_bytes"] == len(hub_files["f32"])
    fit = default["fit"]
    assert fit["verdict"] == "fits" and fit["devices"] == ["cpu"] and fit["unload"] == []
    assert fit["arithmetic"].startswith("needs ") and "; cpu, " in fit["arithmetic"]
    # the file whose header was read is estimated exactly as it will be once downloaded
    local = tmp_path / "q4.gguf"
    local.write_bytes(hub_files["f32"])
    info = read_gguf_info(local)
    expected = estimate_memory(
        model_shape(info),
        n_ctx=min(settings.context_length or 10**9, info.context_length),
        n_parallel=settings.parallel,
    )
    assert (fit["total_bytes"], fit["kv_bytes"], fit["n_ctx"]) == (
        expected.total_bytes,
        expected.kv_bytes,
        expected.n_ctx,
    )
    # the others are scaled to their own size
    assert models["TinyLlama-Q8_0.gguf"]["fit"]["weights_bytes"] < fit["weights_bytes"]


def test_a_loaded_model_in_the_way_is_named(live: LiveServer, settings: Settings, tiny_llama: Path) -> None:
    with Library(settings) as lib:
        model = lib.add_local(tiny_llama).id
    response = live.http().post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 1})
    assert response.status_code == 200, response.text
    fit = models_of(admin(live).get("/api/hub/repos/tiny/TinyLlama-GGUF").json())["TinyLlama-Q8_0.gguf"]["fit"]
    assert fit["verdict"] == "fits_after_unloading"
    assert fit["unload"] == [model] and f"evicted {model}" in fit["arithmetic"]


def test_a_model_too_big_for_this_machine_does_not_fit(tmp_path: Path, fake_hub: FakeHub) -> None:
    settings = server_settings(
        tmp_path / "small", SPARK_ADMIN_PASSWORD=PASSWORD, SPARK_HF_ENDPOINT=fake_hub.url, SPARK_MAX_RAM="2MiB"
    )
    with live_server(settings, key_name=None) as live:
        fit = models_of(admin(live).get("/api/hub/repos/tiny/TinyLlama-GGUF").json())["TinyLlama-F16.gguf"]["fit"]
    assert fit["verdict"] == "does_not_fit" and fit["devices"] == []
    assert fit["arithmetic"].startswith("needs ") and "cpu: " in fit["arithmetic"]


def test_projectors_split_models_and_repositories_without_models(live: LiveServer, hub_files: dict[str, bytes]) -> None:
    client = admin(live)
    vision = client.get("/api/hub/repos/tiny/Vision-GGUF").json()
    assert vision["projector"] == "mmproj-TinyVision-F16.gguf"
    assert list(models_of(vision)) == ["TinyVision-Q8_0.gguf"]  # projectors are not models
    assert models_of(vision)["TinyVision-Q8_0.gguf"]["fit"]["projector_bytes"] > 0

    split = models_of(client.get("/api/hub/repos/tiny/Split-GGUF").json())
    shards = split["Q8_0/Tiny-Split-Q8_0-00001-of-00003.gguf"]
    assert len(shards["files"]) == 3 and shards["size_bytes"] == sum(len(hub_files[f"shard{i}"]) for i in (1, 2, 3))
    assert shards["fit"]["verdict"] == "fits"

    empty = client.get("/api/hub/repos/tiny/NoGGUF").json()
    assert empty["models"] == [] and "no GGUF" in empty["note"]
    broken = client.get("/api/hub/repos/tiny/Broken-GGUF").json()
    assert models_of(broken)["Broken-Q4_K_M.gguf"]["fit"] is None
    assert "could not read the header" in broken["note"]


def test_unknown_repositories_are_404_and_bad_input_400(live: LiveServer) -> None:
    client = admin(live)
    assert openai_error(client.get("/api/hub/repos/tiny/Nope-GGUF"), 404)["code"] == "repo_not_found"
    assert openai_error(client.get("/api/hub/repos/private/Secret-GGUF"), 404)["code"] == "repo_not_found"
    assert openai_error(client.get("/api/hub/repos/bad..org/x"), 400)["param"] == "repo"
    long_name = openai_error(client.get(f"/api/hub/repos/{'a' * 5000}/{'a' * 5000}"), 400)
    assert long_name["param"] == "repo" and "at most 96" in long_name["message"] and len(long_name["message"]) < 500
    for params, param in [
        ({"q": "tiny", "limit": "many"}, "limit"),
        ({"q": "tiny", "limit": "0"}, "limit"),
        ({"q": "tiny", "files": "11"}, "files"),
    ]:
        assert openai_error(client.get("/api/hub/search", params=params), 400)["param"] == param


def test_hub_routes_need_the_admin_credential(live: LiveServer) -> None:
    for key in (None, live.key):
        client = live.http(key=key)
        for path in ("/api/hub/search?q=tiny", "/api/hub/repos/tiny/TinyLlama-GGUF"):
            assert client.get(path).status_code == 401, path
