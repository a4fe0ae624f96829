"""Zero-retention keys: a marker sent through every route never reaches the database or the server's output.

The same requests with a normal key put their marker in the database, so a
log that silently kept nothing would fail this test too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from server.test_serve import free_port, wait_healthy
from spark.library import Library
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.keys import KeyTable
from spark.store.requests import RequestFilter, RequestTable

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def requests_with(marker: str, chat: str, embed: str) -> list[tuple[str, dict[str, Any], int]]:
    """(path, body, expected status): every route, streaming or not, and errors that may echo their input."""
    user = [{"role": "user", "content": f"Please remember {marker} for me."}]
    return [
        ("/v1/chat/completions", {"model": chat, "messages": user, "max_tokens": 4}, 200),
        (
            "/v1/chat/completions",
            {"model": chat, "messages": user, "max_tokens": 4, "stream": True, "stop": [marker]},
            200,
        ),
        ("/v1/completions", {"model": chat, "prompt": marker, "max_tokens": 4}, 200),
        ("/v1/completions", {"model": chat, "prompt": marker, "max_tokens": 4, "stream": True}, 200),
        ("/v1/embeddings", {"model": embed, "input": [marker, f"and {marker} again"]}, 200),
        ("/v1/messages", {"model": chat, "messages": user, "max_tokens": 4}, 200),
        ("/v1/messages", {"model": chat, "messages": user, "max_tokens": 4, "stream": True}, 200),
        ("/v1/messages/count_tokens", {"model": chat, "messages": user}, 200),
        # the prompt does not fit the context
        ("/v1/chat/completions", {"model": chat, "messages": [{"role": "user", "content": f"{marker} " * 400}]}, 400),
        # errors whose message quotes the input
        (
            "/v1/chat/completions",
            {
                "model": chat,
                "messages": user,
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": marker}},
            },
            400,
        ),
        ("/v1/chat/completions", {"model": chat, "messages": user, "max_tokens": marker}, 400),
        (
            "/v1/messages",
            {
                "model": chat,
                "messages": user,
                "max_tokens": 4,
                "tools": [{"name": marker}],
                "tool_choice": {"type": "tool", "name": f"not-{marker}"},
            },
            400,
        ),
    ]


def test_zero_retention_keys_leave_no_content(tmp_path: Path, tiny_llama: Path, tiny_bert: Path) -> None:
    settings = load_settings()
    with Library(settings) as library:
        chat, embed = library.add_local(tiny_llama).id, library.add_local(tiny_bert).id
    keys = KeyTable(Database(settings.db_path))
    private = keys.create("private", zero_retention=True)[1]
    normal = keys.create("normal")[1]
    hidden, kept = f"hidden-{uuid.uuid4().hex}", f"kept-{uuid.uuid4().hex}"

    port = free_port()
    out, err = (tmp_path / "stdout").open("w"), (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "spark", "serve", "--port", str(port)],
        stdout=out,
        stderr=err,
        env={**os.environ, "SPARK_LOG_LEVEL": "debug"},
    )  # the most the server ever prints
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url)
        for key, marker in ((private, hidden), (normal, kept)):
            with httpx.Client(base_url=url, headers={"x-api-key": key}, timeout=60) as http:
                for path, body, status in requests_with(marker, chat, embed):
                    response = http.post(path, json=body)
                    assert response.status_code == status, (path, body, response.text)
                    if status == 200 and body.get("stream"):
                        assert "event: error" not in response.text and '"error"' not in response.text
        proc.send_signal(signal.SIGINT)  # a clean shutdown writes the whole log
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()

    output = (tmp_path / "stdout").read_text() + (tmp_path / "stderr").read_text()
    assert "DEBUG" in output and "Traceback" not in output
    assert hidden not in output
    stored = b"".join(p.read_bytes() for p in settings.db_path.parent.glob(settings.db_path.name + "*"))
    assert kept.encode() in stored  # a normal key's content is kept: the test can fail
    assert hidden.encode() not in stored

    table = RequestTable(Database(settings.db_path))
    logged = table.list(RequestFilter(key="private"))
    sent = requests_with(hidden, chat, embed)
    assert len(logged) == len(sent) and all(r.zero_retention for r in logged)
    errors = sorted(r.error_type or "" for r in logged if r.error_type)
    assert errors == ["context_length_exceeded", "invalid_request", "invalid_request", "invalid_request"]
    for summary in logged:
        record = table.get(summary.id)
        assert record.content is None and record.timeline  # the numbers and the timeline stay
        assert record.error_message in (None, "details withheld: zero-retention key")
    completed = [r for r in logged if r.status == 200 and r.route != "/v1/messages/count_tokens"]
    assert all(r.prompt_tokens > 0 for r in completed)
    normal_errors = list(table.list(RequestFilter(key="normal", status="error")))
    assert any(kept in (r.error_message or "") for r in normal_errors)
