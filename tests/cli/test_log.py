"""`spark log`: listing, filters, one request's waterfall, following, from the database or a running server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pexpect
import pytest
from typer.testing import CliRunner

from server.helpers import LiveServer, live_server
from spark.cli import app
from spark.cli.log import LocalLog, ServerLog, describe_step, ms, open_log
from spark.errors import SparkError
from spark.library import Library
from spark.server.discovery import remove_server_info, write_server_info
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.requests import (
    RequestContent,
    RequestFilter,
    RequestRecord,
    RequestTable,
)
from spark.trace import Step

WIDE = {"COLUMNS": "200"}


def invoke(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args), env=WIDE)
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


def record(n: int, **changes: object) -> RequestRecord:
    values: dict[str, object] = {
        "id": f"own{n}",
        "request_id": f"req_{n:04d}",
        "started_at": time.time() - 600 + n,
        "route": "/v1/messages",
        "status": 200,
        "duration_ms": 250.0,
        "model": "tiny",
        "key_name": "laptop",
        "key_prefix": "sk-spark-AbCd",
        "finish_reason": "stop",
        "prompt_tokens": 30,
        "completion_tokens": 12,
        "cached_tokens": 20,
        "ttft_ms": 40.0,
        "tokens_per_second": 52.5,
        "content": RequestContent(
            request={"messages": [{"role": "user", "content": "What is the capital?"}]}, output="Paris."
        ),
        "timeline": [
            Step("received", 0.0),
            Step("queued", 0.4, {"position": 2, "slots": 1, "model": "tiny"}),
            Step("slot", 30.0, {"slot": 0, "prompt_tokens": 30, "cached_tokens": 20}),
            Step("prompt", 38.5, {"tokens": 10, "seconds": 0.0085, "tokens_per_second": 1176.5}),
            Step("first_token", 40.0),
            Step("finished", 250.0, {"finish_reason": "stop"}),
        ],
    }
    values.update(changes)
    return RequestRecord(**values)  # type: ignore[arg-type]


@pytest.fixture
def table() -> RequestTable:
    return RequestTable(Database(load_settings().db_path))


def test_an_empty_log() -> None:
    assert invoke("log").strip() == "No requests logged yet."
    assert invoke("log", "--model", "x").strip() == "No request matches."


def test_list_and_filters(table: RequestTable) -> None:
    table.insert_many(
        [
            record(1),
            record(2, model="other", key_name="ci", route="/ollama/api/generate"),
            record(3, status=404, error_type="model_not_found"),
            record(4, zero_retention=True, content=None, started_at=time.time() - 3 * 3600),
        ]
    )
    out = invoke("log")
    assert isinstance(open_log(), LocalLog)  # no server runs: the database itself
    rows = [line for line in out.splitlines() if "req_" in line]
    assert [re.search(r"req_\d+", r).group() for r in rows] == ["req_0004", "req_0001", "req_0002", "req_0003"]  # type: ignore[union-attr]
    first = rows[1]
    assert "tiny" in first and "laptop" in first and "messages" in first and "30 (20 cached) -> 12" in first
    assert "40.0 ms" in first and "250 ms" in first and "52.5" in first
    assert "404 model_not_found" in rows[3]
    assert "ollama generate" in rows[2]  # a route's short name, Ollama's included
    # An 80-column terminal keeps the status and the whole id; the key, speeds and route go first.
    narrow = CliRunner().invoke(app, ["log"], env={"COLUMNS": "80"}).output.splitlines()
    assert narrow[0].split() == ["TIME", "ID", "MODEL", "STATUS", "TOKENS", "DURATION"]
    assert "404 model_n" in narrow[-1] and "req_0003" in narrow[-1]
    assert all(len(line) <= 80 for line in narrow)

    def listed(*args: str) -> list[str]:
        return re.findall(r"req_\d+", invoke("log", *args))

    assert listed("--model", "other") == ["req_0002"]
    assert listed("--key", "ci") == ["req_0002"]
    assert listed("--status", "error") == listed("--status", "404") == ["req_0003"]
    assert listed("--since", "1h") == ["req_0001", "req_0002", "req_0003"]
    assert listed("--limit", "2") == ["req_0002", "req_0003"]  # the newest two, newest last


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--status", "bad"], "status: 'bad' is not ok, error, failed or an HTTP status code"),
        (["--since", "someday"], "since: 'someday' is neither a duration"),
        (["--limit", "0"], "limit must be between 1 and 1000"),
        (["nope"], "No logged request has the id 'nope'"),
    ],
)
def test_bad_input_is_a_typed_error(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["log", *args], env=WIDE)
    assert result.exit_code == 1 and isinstance(result.exception, SparkError)
    assert message in result.exception.message


def test_bad_input_is_one_line_from_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spark", "log", "--status", "bad"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **WIDE},
        check=False,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == "Error: status: 'bad' is not ok, error, failed or an HTTP status code\n"


def test_one_request_as_a_waterfall(table: RequestTable) -> None:
    table.insert_many([record(1), record(2, zero_retention=True, content=None)])
    out = invoke("log", "req_0001")
    assert "req_0001" in out and "/v1/messages" in out and "model tiny" in out and "key laptop" in out
    lines = out.splitlines()
    # each step with the time it took since the one before, as the console and the TUI draw it
    queued = next(line for line in lines if line.startswith("queued"))
    assert "0.4 ms   0.4 ms" in queued and "position 2 in the queue" in queued
    slot = next(line for line in lines if line.startswith("slot assigned"))
    assert "30.0 ms  29.6 ms" in slot and "20 of 30 prompt tokens reused" in slot
    finished = next(line for line in lines if line.startswith("finished"))
    assert "210 ms" in finished and "█" * 12 in finished  # the longest step draws the longest bar
    assert any(line.startswith("prompt evaluated") and "10 tokens in 8.5 ms, 1176 tokens/s" in line for line in lines)
    assert "total 250 ms · time to first token 40.0 ms · prompt 30 tokens (20 cached)" in out
    assert "output 12 tokens at 52.5 tokens/s" in out
    assert "longest step: first token -> finished: 210 ms (84% of the request)" in out
    assert "user: What is the capital?" in out and "output: Paris." in out

    private = invoke("log", "req_0002")
    assert "Content not kept: the request used a zero-retention key." in private and "capital" not in private


@pytest.mark.parametrize(
    ("details", "says"),
    [
        ({"cache": "slot"}, "12 of 40 prompt tokens reused from the slot's cache"),
        (
            {"cache": "ram", "restore_seconds": 0.0042},
            "12 of 40 prompt tokens reused from a KV snapshot in RAM (restored in 4.2 ms)",
        ),
        (
            {"cache": "disk", "restore_seconds": 0.0381},
            "12 of 40 prompt tokens reused from a KV snapshot on disk (restored in 38.1 ms)",
        ),
        ({}, "12 of 40 prompt tokens reused from the slot's cache"),  # logged before the source was
    ],
)
def test_the_slot_step_says_where_the_cache_came_from(details: dict[str, object], says: str) -> None:
    label, text = describe_step(Step("slot", 3.0, {"slot": 1, "prompt_tokens": 40, "cached_tokens": 12, **details}))
    assert label == "slot assigned" and text == f"slot 1: {says}"


def test_the_truncated_step_says_what_was_left_out() -> None:
    label, text = describe_step(Step("truncated", 3.0, {"dropped_messages": 6, "prompt_tokens": 900, "context": 512}))
    assert (label, text) == ("truncated", "900 prompt tokens for a context of 512: the 6 oldest messages left out")


def test_the_routed_step_names_the_place_and_each_try() -> None:
    tries = [{"node": "a", "outcome": "connection refused", "ms": 2.5}, {"node": "b", "outcome": "ok", "ms": 945.7}]
    label, text = describe_step(Step("routed", 3.0, {"node": "b", "reason": "least loaded", "tries": tries}))
    assert (label, text) == ("routed", "to b: least loaded; tries: a connection refused (2.5 ms), b ok (946 ms)")


def test_drafted_tokens_show_in_the_finished_step(table: RequestTable) -> None:
    timeline = [
        Step("received", 0.0),
        Step("finished", 90.0, {"finish_reason": "stop", "drafted_tokens": 40, "accepted_tokens": 31}),
    ]
    table.insert_many([record(1, timeline=timeline)])
    finished = next(line for line in invoke("log", "req_0001").splitlines() if line.startswith("finished"))
    assert "finish reason stop" in finished
    assert "speculative decoding: 31 of 40 drafted tokens accepted" in finished


def test_follow_prints_new_requests(table: RequestTable) -> None:
    table.insert_many([record(1)])
    child = pexpect.spawn(
        sys.executable,
        ["-m", "spark", "log", "-f", "--model", "tiny"],
        encoding="utf-8",
        env={**os.environ, **WIDE},
        timeout=30,
    )
    try:
        child.expect("req_0001")
        table.insert_many([record(2, model="other"), record(3)])
        table.insert_many([record(0, request_id="req_late", started_at=time.time() - 3600)])  # finished last
        child.expect("req_0003")
        child.expect("req_late")
        assert "req_0002" not in child.before  # the filter holds while following
    finally:
        child.terminate(force=True)


@pytest.fixture
def server(tiny_llama: Path) -> Iterator[tuple[LiveServer, str]]:
    """A server of this test's SPARK_HOME, found by `spark log` through its server file."""
    settings = load_settings()
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    with live_server(settings) as live:
        write_server_info(settings, "127.0.0.1", int(live.url.rsplit(":", 1)[1]))
        try:
            yield live, model
        finally:
            remove_server_info(settings)


def test_a_first_request_shows_its_model_load(server: tuple[LiveServer, str]) -> None:
    live, model = server
    response = live.http().post(
        "/v1/chat/completions",
        json={"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "why so slow?"}]},
    )
    request_id = response.headers["x-request-id"]
    source = open_log()
    assert isinstance(source, ServerLog)  # through the running server's admin API
    assert [r.request_id for r in source.page(RequestFilter(limit=1)).requests] == [request_id]
    logged = source.get(request_id)

    out = invoke("log", request_id)
    rows = {line.split("  ")[0]: line for line in out.splitlines() if line and not line.startswith(" ")}
    load = next(s for s in logged.timeline if s.name == "load_started")
    loaded = next(s for s in logged.timeline if s.name == "load_finished")
    # the load's time is the step that ends it ("model loaded"), since the one before ("model load")
    assert ms(load.at_ms) in rows["model load"] and "first request" in rows["model load"]
    assert ms(loaded.at_ms) in rows["model loaded"] and ms(loaded.at_ms - load.at_ms) in rows["model loaded"]
    assert f"took {ms(loaded.details['seconds'] * 1000)}" in rows["model loaded"]
    for label in (
        "received",
        "authenticated",
        "queued",
        "placement",
        "slot assigned",
        "prompt evaluated",
        "first token",
        "finished",
    ):
        assert label in rows, label
    # the answer to "why was it slow?": the load, unless a busy machine made another step longer
    gaps = {(a.name, b.name): b.at_ms - a.at_ms for a, b in pairwise(logged.timeline)}
    if max(gaps, key=lambda pair: gaps[pair]) == ("load_started", "load_finished"):
        assert "longest step: model load -> model loaded" in out
    else:
        assert f": {ms(max(gaps.values()))} (" in out.split("longest step: ")[1]
    assert "user: why so slow?" in out
    listed = invoke("log")
    assert request_id in listed and "chat" in listed
