"""Pull jobs over the admin API: start, progress, cancel, errors, and resuming after a server restart."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakehub import FakeHub
from server.helpers import LiveServer, live_server, openai_error, server_settings, wait_for
from spark.events import PULL_FINISHED, PULL_PROGRESS
from spark.library import BUNDLED_ID, Library
from spark.settings import Settings

PASSWORD = "pull-admin-password"
Q8 = "TinyLlama-Q8_0.gguf"


@pytest.fixture
def settings(tmp_path: Path, fake_hub: FakeHub) -> Settings:
    return server_settings(tmp_path / "home", SPARK_ADMIN_PASSWORD=PASSWORD, SPARK_HF_ENDPOINT=fake_hub.url)


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    with live_server(settings, key_name=None) as server:
        yield server


def admin(live: LiveServer) -> httpx.Client:
    return live.http(key=PASSWORD)


def start(client: httpx.Client, spec: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/api/pulls", json={"spec": spec, **extra})
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    assert job["id"].startswith("pull_") and job["state"] in ("queued", "downloading")
    return job


def finished(client: httpx.Client, job_id: str, timeout: float = 60) -> dict[str, Any]:
    def done() -> bool:
        return client.get(f"/api/pulls/{job_id}").json()["state"] in ("done", "failed", "cancelled")

    wait_for(done, timeout, f"pull job {job_id} to finish")
    job: dict[str, Any] = client.get(f"/api/pulls/{job_id}").json()
    return job


def model_files(settings: Settings) -> list[str]:
    return sorted(str(p.relative_to(settings.models_dir)) for p in settings.models_dir.rglob("*") if p.is_file())


def test_a_pull_job_downloads_and_registers_the_model(
    live: LiveServer, settings: Settings, hub_files: dict[str, bytes]
) -> None:
    sub = live.state.events
    seen: list[tuple[str, dict[str, Any]]] = []
    original = sub.publish

    def spy(kind: str, **data: Any) -> Any:
        seen.append((kind, data))
        return original(kind, **data)

    sub.publish = spy  # type: ignore[method-assign]
    try:
        with admin(live) as client:
            job = start(client, "tiny/TinyLlama-GGUF:Q8_0")
            done = finished(client, job["id"])
            assert done["state"] == "done", done
            assert done["model"] == "tinyllama-q8_0"
            assert done["repo"] == "tiny/TinyLlama-GGUF" and done["files"] == [Q8]
            assert done["bytes_done"] == done["bytes_total"] == len(hub_files["q8_0"])
            assert done["error"] is None and done["finished_at"] >= done["created_at"]
            listed = client.get("/api/pulls").json()
            assert [j["id"] for j in listed] == [job["id"]]

            again = finished(client, start(client, "tiny/TinyLlama-GGUF:Q8_0")["id"])
            assert again["state"] == "done" and again["already_installed"]
            assert [j["id"] for j in client.get("/api/pulls").json()] == [again["id"], job["id"]]  # newest first
    finally:
        sub.publish = original  # type: ignore[method-assign]
    with Library(settings) as lib:
        entry = lib.get("tinyllama-q8_0")
    assert Path(entry.path).read_bytes() == hub_files["q8_0"]
    ends = [d for k, d in seen if k == PULL_FINISHED and d["id"] == job["id"]]
    assert ends == [
        {
            "id": job["id"],
            "model": "tinyllama-q8_0",
            "state": "done",
            "bytes_done": len(hub_files["q8_0"]),
            "bytes_total": len(hub_files["q8_0"]),
            "error": None,
        }
    ]
    progress = [d for k, d in seen if k == PULL_PROGRESS and d["id"] == job["id"]]
    assert progress and all(
        set(d) == {"id", "model", "bytes_done", "bytes_total", "rate", "eta_seconds"} for d in progress
    )


def test_a_pull_job_survives_a_server_restart_mid_download(
    settings: Settings, fake_hub: FakeHub, hub_files: dict[str, bytes]
) -> None:
    data = hub_files["f32"]
    name = "TinyLlama-Q4_K_M.gguf"  # the repository's default pick
    fake_hub.throttle[name] = len(data) // 4  # four seconds for the whole file
    with live_server(settings, key_name=None) as live, admin(live) as client:
        job = start(client, "tiny/TinyLlama-GGUF")

        def halfway() -> bool:
            now = client.get(f"/api/pulls/{job['id']}").json()
            return bool(now["bytes_done"] >= len(data) // 4)

        wait_for(halfway, 30, "a quarter of the download")
        running = client.get(f"/api/pulls/{job['id']}").json()
        assert running["state"] == "downloading"
        assert running["bytes_total"] == len(data)
        assert running["rate"] > 0 and running["eta_seconds"] > 0
    # the server stopped mid-download: the partial file stays, nothing is registered
    part = settings.models_dir / "tinyllama-q4_k_m" / (name + ".part")
    kept = part.stat().st_size
    assert 0 < kept < len(data)
    with Library(settings) as lib:
        assert not lib.exists("tinyllama-q4_k_m")

    del fake_hub.throttle[name]
    with live_server(settings, key_name=None) as live, admin(live) as client:
        done = finished(client, job["id"])
        assert done["state"] == "done", done
        assert done["bytes_done"] == len(data)
    # it continued where it stopped rather than starting over
    assert fake_hub.file_requests(name)[-1]["range"] == f"bytes={kept}-"
    with Library(settings) as lib:
        entry = lib.get("tinyllama-q4_k_m")
    assert hashlib.sha256(Path(entry.path).read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    assert model_files(settings) == ["tinyllama-q4_k_m/" + name]


def test_cancelling_a_pull_leaves_nothing_registered(
    live: LiveServer, settings: Settings, fake_hub: FakeHub, hub_files: dict[str, bytes]
) -> None:
    fake_hub.throttle[Q8] = len(hub_files["q8_0"]) // 10
    with admin(live) as client:
        job = start(client, "tiny/TinyLlama-GGUF:Q8_0")
        wait_for(lambda: client.get(f"/api/pulls/{job['id']}").json()["bytes_done"] > 0, 30, "the download")
        assert client.post("/api/pulls", json={"spec": "tiny/TinyLlama-GGUF:Q8_0"}).json()["id"] == job["id"]
        cancelled = client.delete(f"/api/pulls/{job['id']}")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
        assert 0 < cancelled.json()["bytes_done"] < len(hub_files["q8_0"])
        # cancelling again changes nothing
        assert client.delete(f"/api/pulls/{job['id']}").json()["state"] == "cancelled"
    with Library(settings) as lib:
        assert not lib.exists("tinyllama-q8_0")
    assert model_files(settings) == []  # no partial file left either


LORA = "TinyLlama-SQL-LoRA-F32.gguf"


def test_a_lora_adapter_job_downloads_into_the_models_folder_and_attaches_it(
    live: LiveServer, settings: Settings, fake_hub: FakeHub, hub_files: dict[str, bytes]
) -> None:
    with admin(live) as client:
        model = finished(client, start(client, "tiny/TinyLlama-GGUF:Q8_0")["id"])["model"]
        job = start(client, "tiny/TinyLlama-SQL-LoRA-GGUF", attach_to=model.upper(), scale=0.5)
        assert job["attach_to"] == model and job["scale"] == 0.5
        done = finished(client, job["id"])
        assert done["state"] == "done", done
        assert done["model"] == model and done["files"] == [LORA]
        assert done["bytes_done"] == done["bytes_total"] == len(hub_files["lora"])
        shown = client.get(f"/api/models/{model}").json()["model"]
        assert shown["lora"] == [{"path": str(settings.models_dir / model / LORA), "scale": 0.5}]
        assert model_files(settings) == [f"{model}/{Q8}", f"{model}/{LORA}"]

        # a model is refused from its header; an adapter for another model once downloaded
        failed = finished(client, start(client, "tiny/TinyLlama-GGUF:F16", attach_to=model)["id"])
        assert failed["state"] == "failed" and "is not a LoRA adapter" in failed["error"]
        failed = finished(client, start(client, "tiny/Wide-LoRA-GGUF", attach_to=model)["id"])
        assert failed["state"] == "failed" and "does not fit" in failed["error"]

        detached = client.delete(f"/api/models/{model}/lora")
        assert detached.status_code == 200, detached.text
        assert detached.json()["lora"] == []
    assert model_files(settings) == [f"{model}/{Q8}"]


def test_a_cancelled_lora_adapter_job_leaves_the_model_as_it_was(
    live: LiveServer, settings: Settings, fake_hub: FakeHub, hub_files: dict[str, bytes]
) -> None:
    fake_hub.throttle[LORA] = len(hub_files["lora"]) // 3  # about three seconds
    with admin(live) as client:
        model = finished(client, start(client, "tiny/TinyLlama-GGUF:Q8_0")["id"])["model"]
        job = start(client, "tiny/TinyLlama-SQL-LoRA-GGUF", attach_to=model)
        wait_for(lambda: client.get(f"/api/pulls/{job['id']}").json()["bytes_done"] > 0, 30, "the download")
        assert client.delete(f"/api/pulls/{job['id']}").json()["state"] == "cancelled"
        assert client.get(f"/api/models/{model}").json()["model"]["lora"] == []
    assert model_files(settings) == [f"{model}/{Q8}"]


def test_progress_events_are_throttled(live: LiveServer, fake_hub: FakeHub, hub_files: dict[str, bytes]) -> None:
    fake_hub.throttle[Q8] = len(hub_files["q8_0"]) // 2  # two seconds, about forty chunks
    sub = live.state.events
    seen: list[tuple[float, str, dict[str, Any]]] = []
    original = sub.publish

    def spy(kind: str, **data: Any) -> Any:
        event = original(kind, **data)
        seen.append((event.at, kind, data))
        return event

    sub.publish = spy  # type: ignore[method-assign]
    try:
        with admin(live) as client:
            job = finished(client, start(client, "tiny/TinyLlama-GGUF:Q8_0")["id"])
    finally:
        sub.publish = original  # type: ignore[method-assign]
    assert job["state"] == "done"
    times = [at for at, kind, data in seen if kind == PULL_PROGRESS and data["id"] == job["id"]]
    span = times[-1] - times[0]
    assert len(times) >= 4  # it does report while downloading
    assert len(times) <= 4 * span + 3, (len(times), span)  # at most 4 a second (and one per state change)
    fractions = [d["bytes_done"] / d["bytes_total"] for _, k, d in seen if k == PULL_PROGRESS]
    assert fractions == sorted(fractions)


def test_a_queued_pull_can_be_cancelled_before_it_starts(live: LiveServer, fake_hub: FakeHub) -> None:
    fake_hub.throttle["TinyLlama-F16.gguf"] = 20_000
    fake_hub.throttle["Tiny-Split-F16.gguf"] = 20_000
    with admin(live) as client:
        busy = [start(client, "tiny/TinyLlama-GGUF:F16"), start(client, "tiny/Split-GGUF:F16")]
        waiting = start(client, "tiny/TinyTools-GGUF")  # two downloads at once: this one waits
        assert client.get(f"/api/pulls/{waiting['id']}").json()["state"] == "queued"
        assert client.delete(f"/api/pulls/{waiting['id']}").json()["state"] == "cancelled"
        for job in busy:
            assert client.delete(f"/api/pulls/{job['id']}").json()["state"] == "cancelled"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("tiny/Nope-GGUF", "repository 'tiny/Nope-GGUF' not found"),
        ("tiny/TinyLlama-GGUF/Missing-Q2_K.gguf", "file 'Missing-Q2_K.gguf' not found"),
        ("tiny/NoGGUF", "has no GGUF files"),
        ("tiny/Gated-GGUF", "access to Gated-Q8_0.gguf was denied (403)"),
        ("tiny/TinyLlama-GGUF:Q8_0", "checksum mismatch"),
        ("tiny/Broken-GGUF", "not a usable model"),
    ],
)
def test_a_failed_pull_says_why_and_leaves_nothing_registered(
    live: LiveServer, settings: Settings, fake_hub: FakeHub, hub_files: dict[str, bytes], spec: str, says: str
) -> None:
    fake_hub.add_repo("tiny/Gated-GGUF", {"Gated-Q8_0.gguf": hub_files["q8_0"]}, token="hf_gate", gated=True)
    fake_hub.wrong_sha.add(Q8)
    with admin(live) as client:
        job = finished(client, start(client, spec)["id"])
    assert job["state"] == "failed"
    assert says in job["error"]
    with Library(settings) as lib:
        assert [m.source for m in lib.list() if m.source.startswith("hf:")] == []
    assert not [f for f in model_files(settings) if not f.endswith(".part")]


def test_a_pull_without_disk_space_fails_before_downloading(
    live: LiveServer, settings: Settings, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("spark.library.disk.free_bytes", lambda folder: 1024)  # a full disk
    with admin(live) as client:
        job = finished(client, start(client, "tiny/TinyLlama-GGUF:Q8_0")["id"])
    assert job["state"] == "failed"
    assert "not enough disk space" in job["error"]
    assert fake_hub.file_requests(Q8) == []
    assert model_files(settings) == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "spec"),
        ({"spec": 7}, "spec"),
        ({"spec": ""}, "spec"),
        ({"spec": "just-a-word"}, "spec"),
        ({"spec": "/srv/models/model.gguf"}, "spec"),
        ({"spec": "https://example.com/org/repo"}, "spec"),
        ({"spec": "a" * 300}, "spec"),  # once an OSError (a 500): the name was looked for in the server's folder
        ({"spec": "a" * 300 + ".gguf"}, "spec"),
        ({"spec": "org/" + "a" * 5000}, "spec"),
        ({"spec": "org/repo/" + "b" * 300 + ".gguf"}, "spec"),
        ({"spec": "org/repo", "quant": "Q4 K M"}, "quant"),
        ({"spec": "org/repo:Q8_0", "quant": "Q4_0"}, "quant"),
        ({"spec": "org/repo", "extra": 1}, "extra"),
        ({"spec": "org/repo", "attach_to": "no-such-model"}, "attach_to"),
        ({"spec": "org/repo", "attach_to": 3}, "attach_to"),
        ({"spec": "org/repo", "attach_to": BUNDLED_ID, "scale": 1000}, "scale"),
    ],
)
def test_bad_pull_requests_are_refused_naming_the_field(live: LiveServer, body: dict[str, Any], param: str) -> None:
    with admin(live) as client:
        error = openai_error(client.post("/api/pulls", json=body), 400)
        assert error["param"] == param
        assert client.get("/api/pulls").json() == []


def test_unknown_pull_ids_are_404(live: LiveServer) -> None:
    with admin(live) as client:
        for response in (client.get("/api/pulls/pull_nope"), client.delete("/api/pulls/pull_nope")):
            error = openai_error(response, 404)
            assert error["code"] == "pull_not_found"


def test_pull_routes_need_the_admin_credential(live: LiveServer) -> None:
    with live.http(key=None) as anonymous:
        for method, path in [
            ("POST", "/api/pulls"),
            ("GET", "/api/pulls"),
            ("GET", "/api/pulls/pull_x"),
            ("DELETE", "/api/pulls/pull_x"),
        ]:
            response = anonymous.request(
                method, path, json={"spec": "tiny/TinyLlama-GGUF"} if method == "POST" else None
            )
            assert response.status_code == 401, (method, path, response.text)
