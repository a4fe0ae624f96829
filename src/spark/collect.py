"""Folding one request's events into its result (`ChatResult`, `EmbeddingResult`).

One implementation for every front end: the Python API feeds it from a
synchronous iterator, the server from the runner's asynchronous stream.
"""

from __future__ import annotations

from collections.abc import Iterable

from spark.errors import SparkError, from_info
from spark.types import (
    ChatResult,
    Done,
    EmbeddingResult,
    Embeddings,
    Event,
    Failed,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
)


class ChatCollector:
    """Accumulates text, reasoning and tool calls until `Done` completes the result.

    With `logprobs` (the request asked for them) the result has a list of them, empty where no
    text came (an answer that is only a tool call)."""

    def __init__(self, *, logprobs: bool = False) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._logprobs: list[TokenLogprob] | None = [] if logprobs else None

    def add(self, event: Event) -> ChatResult | None:
        """Take one event; returns the result at `Done`, raises the request's error at `Failed`."""
        if isinstance(event, TextDelta):
            self._text.append(event.text)
            if event.logprobs is not None:
                self._logprobs = self._logprobs or []
                self._logprobs.extend(event.logprobs)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = self._calls.setdefault(event.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = event.id or call["id"]
            call["name"] = event.name or call["name"]
            call["arguments"] += event.arguments
        elif isinstance(event, Done):
            return ChatResult(
                text="".join(self._text),
                finish_reason=event.finish_reason,
                usage=event.usage,
                reasoning="".join(self._reasoning),
                stop_sequence=event.stop_sequence,
                tool_calls=[ToolCall(**c) for _, c in sorted(self._calls.items())],
                logprobs=self._logprobs,
            )
        elif isinstance(event, Failed):
            raise from_info(event.error)
        return None


def unfinished() -> SparkError:
    """The error for a stream that ended without its final event."""
    return SparkError("the runner ended the request without finishing it")


def collect_chat(events: Iterable[Event]) -> ChatResult:
    """The result of a chat or completion request from all of its events."""
    collector = ChatCollector()
    for event in events:
        if (result := collector.add(event)) is not None:
            return result
    raise unfinished()


def embedding_result(event: Event) -> EmbeddingResult | None:
    """The result carried by an `Embeddings` event; raises the error of a `Failed` one."""
    if isinstance(event, Embeddings):
        return EmbeddingResult(vectors=event.vectors, usage=event.usage)
    if isinstance(event, Failed):
        raise from_info(event.error)
    return None
