"""Output parsers: turn a generation's safe text into events.

This is where template-family parsers (tool calls, reasoning blocks) plug in:
each one consumes text incrementally and returns the events to stream. For
now every model gets `PlainText`, which passes text through unchanged.
"""

from __future__ import annotations

from typing import Protocol

from spark.types import Event, GenerationRequest, TextDelta


class OutputParser(Protocol):
    """Consumes generated text piece by piece and yields events."""

    def feed(self, text: str) -> list[Event]:
        """Events for a new piece of text (already free of stop strings and partial UTF-8)."""
        ...

    def finish(self) -> list[Event]:
        """Events for anything still buffered when generation ends."""
        ...


class PlainText:
    """Every piece of text becomes one `TextDelta`."""

    def feed(self, text: str) -> list[Event]:
        return [TextDelta(text)] if text else []

    def finish(self) -> list[Event]:
        return []


def parser_for(request: GenerationRequest) -> OutputParser:
    """The parser for one request's output."""
    return PlainText()
