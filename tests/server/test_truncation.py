"""The Responses API's `truncation: "auto"` against a real server: a conversation longer than the
tiny model's 512-token context loses its oldest turns, never a call's result or the instructions."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from server.helpers import LiveServer, Models
from server.test_log import logged_request
from spark import trace as steps

INSTRUCTIONS = "You are terse."
MAX_OUTPUT = 3
ROOM = 512 - MAX_OUTPUT  # the prompt must leave the answer its max_output_tokens


def _conversation(turns: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(turns):
        items += [
            {"role": "user", "content": f"Note {i}: " + "lorem ipsum dolor " * 12},
            {"type": "function_call", "call_id": f"call_{i}", "name": "save", "arguments": '{"note": 1}'},
            {"type": "function_call_output", "call_id": f"call_{i}", "output": "saved"},
            {"role": "assistant", "content": "Noted."},
        ]
    return [*items, {"role": "user", "content": "Say OK."}]


def _counted(client: openai.OpenAI, model: str, items: list[dict[str, Any]]) -> int:
    return client.responses.input_tokens.count(model=model, instructions=INSTRUCTIONS, input=items).input_tokens  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
def test_the_oldest_turns_go_until_the_conversation_fits(live: LiveServer, models: Models, stream: bool) -> None:
    client = live.openai()
    items = _conversation(12)
    asked: Any = {"model": models.chat, "instructions": INSTRUCTIONS, "input": items, "max_output_tokens": MAX_OUTPUT}
    assert _counted(client, models.chat, items) > 512
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**asked)  # truncation is "disabled" by default, as at OpenAI
    assert (refused.value.code, refused.value.param) == ("context_length_exceeded", "input")  # type: ignore[attr-defined]
    # the kept conversation starts at a user message: the fewest turns dropped that fit
    cuts = [i for i, item in enumerate(items) if item.get("role") == "user" and i > 0]
    kept = next(cut for cut in cuts if _counted(client, models.chat, items[cut:]) <= ROOM)
    http = live.http()
    response = http.post("/v1/responses", json={**asked, "truncation": "auto", "stream": stream})
    assert response.status_code == 200
    if stream:
        last = [line for line in response.text.splitlines() if line.startswith("data: ")][-1]
        answer = openai.types.responses.ResponseIncompleteEvent.model_validate_json(
            last.removeprefix("data: ")
        ).response
    else:
        answer = openai.types.responses.Response.model_validate_json(response.content)
    assert answer.truncation == "auto" and answer.status == "incomplete"  # cut by max_output_tokens
    assert answer.usage is not None and answer.usage.input_tokens == _counted(client, models.chat, items[kept:])
    record = logged_request(live, response)
    assert (record.status, record.error_type, record.prompt_tokens) == (200, None, answer.usage.input_tokens)
    truncated = next(s for s in record.timeline if s.name == steps.TRUNCATED)
    assert truncated.details["dropped_messages"] > 0 and truncated.details["context"] == 512
    assert steps.FAILED not in [s.name for s in record.timeline]


def test_a_last_turn_too_long_by_itself_is_refused(live: LiveServer, models: Models) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        live.openai().responses.create(
            model=models.chat,
            input=[{"role": "user", "content": "hi"}, {"role": "user", "content": "word " * 600}],
            truncation="auto",
        )
    assert (refused.value.code, refused.value.param) == ("context_length_exceeded", "input")  # type: ignore[attr-defined]
