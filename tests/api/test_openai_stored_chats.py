"""OpenAI's stored chat completions on the wire: the page query, and the completion a stream adds up to."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from spark.api.openai.stored_chats import ChunkAssembler, parse_page_query
from spark.errors import InvalidRequest


def test_chunks_add_up_to_the_completion_they_stream() -> None:
    """What a fleet central keeps of a node's streamed chat: every choice, tool calls and reasoning."""
    assembler = ChunkAssembler()
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}
    deltas: list[dict[str, Any]] = [
        {"index": 0, "delta": {"role": "assistant", "content": ""}},
        {"index": 1, "delta": {"reasoning_content": "hm"}},
        {"index": 0, "delta": {"content": "Hel"}},
        {"index": 1, "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{"}}]}},
        {"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"},
        {"index": 1, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}},
    ]
    for delta in deltas:
        assembler.feed({**head, "choices": [delta]})
    assert assembler.completion() is None  # choice 1 has not finished
    assembler.feed({**head, "choices": [{"index": 1, "delta": {}, "finish_reason": "tool_calls"}]})
    assembler.feed({**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}})
    assembler.feed({"object": "something else"})
    done = assembler.completion()
    assert done is not None and (done["id"], done["object"], done["created"]) == ("chatcmpl-1", "chat.completion", 7)
    first, second = done["choices"]
    assert first["message"] == {"role": "assistant", "content": "Hello"} and first["finish_reason"] == "stop"
    assert second["message"]["content"] is None and second["message"]["reasoning_content"] == "hm"
    assert second["message"]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    assert done["usage"]["total_tokens"] == 7
    assert openai.types.chat.ChatCompletion.model_validate(done).choices[1].finish_reason == "tool_calls"


def test_the_page_query_reads_metadata_pairs() -> None:
    query = parse_page_query({"limit": "5", "order": "desc", "metadata[team]": "x", "metadata[env]": "prod"})
    assert (query.limit, query.order, query.metadata) == (5, "desc", {"team": "x", "env": "prod"})
    with pytest.raises(InvalidRequest) as bad:
        parse_page_query({"metadata[]": "x"})
    assert bad.value.param == "metadata"
