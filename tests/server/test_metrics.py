"""GET /metrics: Prometheus text with request counts, tokens, latencies and the runners' state."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.helpers import (
    LiveServer,
    live_server,
    openai_error,
    server_settings,
    wait_for,
)
from spark.library import Library
from spark.server.admin_auth import read_admin_token
from spark.server.metrics import Metrics
from spark.store.requests import RequestRecord

CHAT = [{"role": "user", "content": "count me"}]
_SAMPLE = re.compile(r"([a-z_]+)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, by name and labels; asserts each line is well formed."""
    samples = {}
    families: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            families[name] = kind
            continue
        if line.startswith("# HELP "):
            continue
        m = _SAMPLE.fullmatch(line)
        assert m, f"malformed line: {line!r}"
        name, labels, value = m.groups()
        assert re.sub(r"_(bucket|sum|count)$", "", name) in families, f"{name} has no TYPE line"
        samples[(name, frozenset(_LABEL.findall(labels or "")))] = float(value)
    return samples


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path) -> Iterator[tuple[LiveServer, str]]:
    settings = server_settings(tmp_path_factory.mktemp("metrics-home"))
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    with live_server(settings) as live:
        yield live, model


def test_metrics_count_requests_tokens_and_latency(metered: tuple[LiveServer, str]) -> None:
    live, model = metered
    http = live.http()
    before = parse(http.get("/metrics").text)
    usage = [
        http.post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 3}).json()["usage"]
        for _ in range(2)
    ]
    assert http.post("/v1/chat/completions", json={"model": "ghost-model", "messages": CHAT}).status_code == 404

    def scraped() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        response = http.get("/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain; version=0.0.4")
        return parse(response.text)

    chat = {"route": "/v1/chat/completions"}
    wait_for(
        lambda: (
            sample(scraped(), "spark_requests_total", **chat, model=model, status="200")
            - sample(before, "spark_requests_total", **chat, model=model, status="200")
            == 2
        ),
        5,
        "the two requests",
    )
    after = scraped()
    # an unknown model is counted without its name, so clients cannot grow the label set
    assert sample(after, "spark_requests_total", **chat, model="unknown", status="404") >= 1
    assert not any(("model", "ghost-model") in labels for _, labels in after)
    # ids in paths, and names in refused bodies, are no labels: each would be a series for good
    for i in range(3):
        http.post(f"/v1/responses/resp_{i}/cancel")
        http.post("/v1/chat/completions", json={"model": f"made-up-{i}", "messages": CHAT, "temperature": 5})
        live.http(key=None).post(f"/v1/chat/completions/chatcmpl-{i}", json={"model": f"anon-{i}"})
    grown = scraped()
    routes = {dict(labels).get("route") for _, labels in grown}
    assert "/v1/responses/{response_id}/cancel" in routes and not any("resp_" in str(r) for r in routes)
    assert not any("chatcmpl-" in str(r) for r in routes) and not any("made-up-" in str(labels) for _, labels in grown)
    assert not any("anon-" in str(labels) for _, labels in grown)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("spark_prompt_tokens_total", model=model) == sum(u["prompt_tokens"] for u in usage)
    assert grew("spark_completion_tokens_total", model=model) == 6
    assert grew("spark_time_to_first_token_seconds_count", model=model) == 2
    assert grew("spark_request_duration_seconds_count", **chat, model=model) == 2
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in after.items()
        if name == "spark_request_duration_seconds_bucket" and ("model", model) in labels
    )
    counts = [value for _, value in buckets]
    assert buckets[-1][0] == float("inf") and counts == sorted(counts)  # cumulative
    assert counts[-1] == sample(after, "spark_request_duration_seconds_count", **chat, model=model)

    assert sample(after, "spark_model_loaded", model=model, status="ready") == 1
    assert sample(after, "spark_model_memory_bytes", model=model) > 0
    assert sample(after, "spark_queue_length", model=model) == 0
    assert sample(after, "spark_runner_restarts_total", model=model) == 0
    assert sample(after, "spark_request_log_dropped_total") == 0


def test_runner_restarts_are_counted(metered: tuple[LiveServer, str]) -> None:
    live, model = metered
    http = live.http()
    http.post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 1})
    pid = live.runner(model).pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: sample(parse(http.get("/metrics").text), "spark_runner_restarts_total", model=model) == 1,
        30,
        "the restart to be counted",
    )
    assert (
        http.post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 1}).status_code == 200
    )


def test_metrics_need_a_key_by_default(metered: tuple[LiveServer, str]) -> None:
    live, _ = metered
    assert openai_error(live.http(key=None).get("/metrics"), 401)["code"] == "invalid_api_key"
    assert live.http(key="sk-spark-wrong").get("/metrics").status_code == 401


@pytest.mark.parametrize("mode", ["admin", "none"])
def test_metrics_auth_setting(tmp_path: Path, mode: str) -> None:
    settings = server_settings(tmp_path / "home", SPARK_METRICS_AUTH=mode, SPARK_ADMIN_PASSWORD="pw")
    with live_server(settings) as live:
        anonymous = live.http(key=None).get("/metrics")
        with_key = live.http().get("/metrics")
        if mode == "none":
            assert anonymous.status_code == with_key.status_code == 200
            assert "# TYPE spark_requests_total counter" in anonymous.text
        else:
            assert anonymous.status_code == with_key.status_code == 401  # an API key is not enough
            assert live.http(key="pw").get("/metrics").status_code == 200
            assert live.http(key=read_admin_token(settings)).get("/metrics").status_code == 200


def test_label_values_are_escaped() -> None:
    metrics = Metrics()
    odd = 'a "quoted"\\model\nname'
    metrics.observe(
        RequestRecord(
            id="1",
            request_id="r",
            started_at=0.0,
            route="/v1/completions",
            status=200,
            duration_ms=20.0,
            model=odd,
            ttft_ms=7.0,
            prompt_tokens=3,
        ),
        route="/v1/completions",
    )
    text = metrics.exposition([])
    samples = parse(text)
    assert sample(samples, "spark_prompt_tokens_total", model='a \\"quoted\\"\\\\model\\nname') == 3
    assert (
        sample(samples, "spark_time_to_first_token_seconds_bucket", model='a \\"quoted\\"\\\\model\\nname', le="0.005")
        == 0
    )
    assert (
        sample(samples, "spark_time_to_first_token_seconds_bucket", model='a \\"quoted\\"\\\\model\\nname', le="0.01")
        == 1
    )
