"""What the TUI writes about a request: the route of one without a model, counts in words."""

from __future__ import annotations

import msgspec
from rich.text import Text

from spark import trace
from spark.tui import text, wire
from tui.fixed import REQUESTS, detail


def test_a_request_without_a_model_shows_its_route() -> None:
    upload = next(r for r in REQUESTS if r["model"] is None)
    cell = text.model_or_route(upload["model"], upload["route"])
    assert isinstance(cell, Text) and cell.plain == "/v1/files" and cell.style == "dim"
    assert text.model_or_route("qwen", "/v1/messages") == "qwen"
    assert text.model_or_route(None, "/v1/messages") == Text("messages", "dim")  # a route's short name


def test_one_token_is_singular() -> None:
    record = msgspec.convert(detail({**REQUESTS[1], "prompt_tokens": 1, "completion_tokens": 1}), wire.RequestDetail)
    assert "prompt 1 token (" in text.totals(record) and "output 1 token at" in text.totals(record)
    prompt = trace.describe_step(trace.Step("prompt", 2.0, {"tokens": 1, "seconds": 0.001}))
    assert prompt == ("prompt evaluated", "1 token in 1.0 ms")


def test_openai_routes_served_under_ollama_read_as_their_v1_names() -> None:
    """Open WebUI's OpenAI connection to an Ollama asks /ollama/v1: the log names the route, and where."""
    assert text.route_name("/ollama/v1/chat/completions") == "chat (/ollama)"
    assert text.route_name("/ollama/v1/models") == "/v1/models (/ollama)"
    assert text.route_name("/ollama/api/chat") == "ollama chat"
