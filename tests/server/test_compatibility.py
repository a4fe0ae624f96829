"""docs/compatibility.md matches the server: every parameter it lists as refused is refused.

The refused rows are read from the document itself; each must have an example
request here (so a new row without a test fails), and each example must get a
400 in its API's shape naming the parameter.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from server.helpers import LiveServer, Models

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"

PNG_URL = "https://example.com/cat.png"

# (route, first cell of the refused row) -> (body changes, the param the 400 names)
EXAMPLES: dict[tuple[str, str], tuple[dict[str, Any], str]] = {
    ("/v1/chat/completions", "`messages[].content` `input_audio` parts"): (
        {
            "messages": [
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]}
            ]
        },
        "messages[0].content[0]",
    ),
    ("/v1/chat/completions", "role `function`"): (
        {"messages": [{"role": "function", "name": "f", "content": "x"}]},
        "messages[0].role",
    ),
    ("/v1/chat/completions", "`n` above 16"): ({"n": 17}, "n"),
    ("/v1/chat/completions", '`audio`, `modalities` with `"audio"`'): ({"modalities": ["text", "audio"]}, "modalities"),
    ("/v1/chat/completions", "`functions`, `function_call`"): (
        {"functions": [{"name": "f", "parameters": {"type": "object"}}]},
        "functions",
    ),
    ("/v1/completions", "more than 64 answers (prompts x `n`)"): ({"prompt": ["x"] * 65}, "prompt"),
    ("/v1/completions", "`best_of`"): ({"best_of": 2}, "best_of"),
    ("/v1/embeddings", "`input` as an empty list, an empty string or an empty token array"): ({"input": []}, "input"),
    ("/v1/messages", "`image` blocks, `url` source"): (
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": PNG_URL}}]}]},
        "messages[0].content[0]",
    ),
    ("/v1/messages", "`document` blocks, `url` source"): (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}],
                }
            ]
        },
        "messages[0].content[0].source.type",
    ),
    ("/v1/messages", "other block types (`search_result`, server tool results, …)"): (
        {
            "messages": [
                {"role": "user", "content": [{"type": "search_result", "source": "s", "title": "t", "content": []}]}
            ]
        },
        "messages[0].content[0]",
    ),
    ("/v1/messages", "`thread`"): ({"thread": {"type": "create"}}, "thread"),
    ("/v1/responses", "`input[]` other item types"): (
        {"input": [{"type": "web_search_call", "id": "ws_1"}]},
        "input[0].type",
    ),
    ("/v1/responses", "`input_file` with `file_url`, `input_audio`"): (
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "https://example.com/a.pdf"}]}]},
        "input[0].content[0].file_data",
    ),
    ("/v1/responses", "`prompt` (stored prompt templates)"): ({"prompt": {"id": "pmpt_1"}}, "prompt"),
}


def refused_rows() -> list[tuple[str, str]]:
    """(route, first cell) of every row whose status starts with "refused"."""
    rows, route = [], None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## `(?:POST|GET) (/v1/[a-z/_]+)`", line)
        if heading:
            route = heading.group(1)
        elif line.startswith("## "):
            route = None
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if route and len(cells) >= 2 and cells[1].startswith("refused"):
            rows.append((route, cells[0]))
    return rows


def test_every_refused_row_has_an_example() -> None:
    assert sorted(refused_rows()) == sorted(EXAMPLES), "docs/compatibility.md and this test list the same refusals"


def _body(route: str, models: Models, changes: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "/v1/chat/completions": {
            "model": models.chat,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        },
        "/v1/completions": {"model": models.chat, "prompt": "hi", "max_tokens": 2},
        "/v1/embeddings": {"model": models.embed, "input": "hi"},
        "/v1/messages": {"model": models.chat, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
        "/v1/responses": {"model": models.chat, "input": "hi", "max_output_tokens": 2},
    }[route]
    return {**base, **changes}


@pytest.mark.parametrize(("route", "row"), sorted(EXAMPLES), ids=lambda v: v if v.startswith("/") else None)
def test_refused_as_documented(live: LiveServer, models: Models, route: str, row: str) -> None:
    changes, param = EXAMPLES[(route, row)]
    with live.http() as client:
        r = client.post(route, json=_body(route, models, changes))
    assert r.status_code == 400, r.text
    body = r.json()
    if route == "/v1/messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert param in body["error"]["message"]
    else:
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["param"] == param, body
