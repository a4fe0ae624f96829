"""Structured output end to end: JSON schema and JSON mode through the official SDKs.

The tiny random model writes whatever the grammar allows, so every answer
checked here is as random as the schema lets it be: that each one parses and
validates is the grammar's doing, not the model's.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any, Literal

import anthropic
import jsonschema
import ollama
import openai
import pytest
from pydantic import BaseModel, Field

from server.helpers import LiveServer, Models, openai_error
from spark.library import BUNDLED_ID

BOOKING: dict[str, Any] = {
    "type": "object",
    "properties": {
        "guests": {"type": "integer", "minimum": 1, "maximum": 8},
        "date": {"type": "string", "format": "date"},
        "room": {"type": "string", "enum": ["single", "double", "suite"]},
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "breakfast": {"type": "boolean"},
    },
    "required": ["guests", "date", "room"],
    "additionalProperties": False,
}
VALIDATOR = jsonschema.Draft202012Validator(BOOKING, format_checker=jsonschema.FormatChecker())
MESSAGES: Any = [{"role": "user", "content": "Book a room for two in Paris next Friday."}]
# Enough for any answer the grammar allows: its strings are bounded, so it ends by itself.
JSON_TOKENS = 300


def booking_format(schema: dict[str, Any], *, strict: bool = True) -> Any:
    return {"type": "json_schema", "json_schema": {"name": "booking", "schema": schema, "strict": strict}}


def test_formats_are_checked() -> None:
    # Without a format checker "date" would be an annotation: a date no calendar has must fail.
    good = {"guests": 2, "date": "2025-06-13", "room": "double"}
    assert VALIDATOR.is_valid(good)
    assert not VALIDATOR.is_valid({**good, "date": "2025-02-30"})
    assert not VALIDATOR.is_valid({**good, "guests": 9})


def test_json_schema_answers_validate(live: LiveServer, models: Models) -> None:
    client = live.openai()
    answers = []
    for seed in range(5):
        completion = client.chat.completions.create(
            model=models.chat,
            messages=MESSAGES,
            seed=seed,
            max_tokens=JSON_TOKENS,
            response_format=booking_format(BOOKING),
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        answer = json.loads(choice.message.content or "")
        VALIDATOR.validate(answer)
        answers.append(answer)
    assert len({json.dumps(a, sort_keys=True) for a in answers}) > 1, "different seeds, different answers"


def test_streamed_json_schema_answer(live: LiveServer, models: Models) -> None:
    chunks = list(
        live.openai().chat.completions.create(
            model=models.chat,
            messages=MESSAGES,
            seed=11,
            max_tokens=JSON_TOKENS,
            stream=True,
            response_format=booking_format(BOOKING),
        )
    )
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1
    VALIDATOR.validate(json.loads("".join(pieces)))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


class Booking(BaseModel):
    guests: int = Field(ge=1, le=8)
    date: datetime.date
    room: Literal["single", "double", "suite"]


def test_sdk_parse_helper_with_a_pydantic_model(live: LiveServer, models: Models) -> None:
    # The SDK turns the class into a strict json_schema and parses the answer back into it.
    completion = live.openai().chat.completions.parse(
        model=models.chat, messages=MESSAGES, seed=2, max_tokens=JSON_TOKENS, response_format=Booking
    )
    booking = completion.choices[0].message.parsed
    assert isinstance(booking, Booking) and 1 <= booking.guests <= 8


@pytest.mark.parametrize(
    ("keyword", "schema"),
    [
        ("not", {"type": "object", "properties": {"room": {"type": "string", "not": {"const": "suite"}}}}),
        ("uniqueItems", {"type": "object", "properties": {"rooms": {"type": "array", "uniqueItems": True}}}),
        # malformed, not merely unenforceable: once a TypeError inside the runner (a 500)
        ("'properties.rooms.type' must be", {"type": "object", "properties": {"rooms": {"type": [{}]}}}),
    ],
)
def test_unenforceable_schema_is_refused(
    live: LiveServer, models: Models, keyword: str, schema: dict[str, Any]
) -> None:
    client = live.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=models.chat, messages=MESSAGES, max_tokens=5, response_format=booking_format(schema)
        )
    assert refused.value.status_code == 400 and refused.value.param == "response_format"
    assert keyword in refused.value.message
    # The server (and the model's runner) go on serving.
    after = client.chat.completions.create(
        model=models.chat, messages=MESSAGES, max_tokens=5, response_format=booking_format(BOOKING)
    )
    assert after.choices[0].finish_reason == "length" and after.choices[0].message.content


@pytest.mark.slow
def test_json_object_mode(live: LiveServer, smollm2: Path) -> None:
    # A JSON-mode grammar leaves keys and strings unbounded, and the random model would fill
    # them forever: a real model closes its object by itself.
    completion = live.openai().chat.completions.create(
        model=BUNDLED_ID,
        temperature=0,
        max_tokens=JSON_TOKENS,
        response_format={"type": "json_object"},
        messages=[
            {
                "role": "user",
                "content": 'What is the capital of France? Answer with a JSON object like {"capital": "..."}.',
            }
        ],
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    assert isinstance(json.loads(choice.message.content or ""), dict)


def test_anthropic_output_format(live: LiveServer, models: Models) -> None:
    message = live.anthropic().messages.create(
        model=models.chat,
        max_tokens=JSON_TOKENS,
        messages=MESSAGES,
        output_config={"format": {"type": "json_schema", "schema": BOOKING}},
    )
    assert message.stop_reason == "end_turn"
    assert [b.type for b in message.content] == ["text"]
    VALIDATOR.validate(json.loads(message.content[0].text))  # type: ignore[union-attr]


def test_a_grammar_wider_than_the_sampler_can_check_is_refused_by_name(live: LiveServer, models: Models) -> None:
    # 100,000 values (1 MB) once took 40 s of the runner's one decode thread for each token of the answer
    huge = {"type": "string", "enum": [f"v{i}" for i in range(20_000)]}
    wide = {"type": "string", "enum": [f"v{i}" for i in range(5_000)]}
    alternatives = " | ".join(f'"v{i}"' for i in range(5_000))
    tool = {
        "type": "function",
        "function": {"name": "pick", "parameters": {"type": "object", "properties": {"v": wide}}},
    }
    with live.http() as http:
        for path, body, param in [
            (
                "/v1/chat/completions",
                {"messages": MESSAGES, "response_format": booking_format(huge)},
                "response_format",
            ),
            ("/v1/chat/completions", {"messages": MESSAGES, "tools": [tool]}, "tools[0].function.parameters"),
            (
                "/v1/responses",
                {"input": "hi", "text": {"format": {"type": "json_schema", "name": "v", "schema": wide}}},
                "text.format",
            ),
            ("/completion", {"prompt": "hi", "json_schema": wide}, "json_schema"),
            ("/completion", {"prompt": "hi", "grammar": f"root ::= {alternatives}\n"}, "grammar"),
        ]:
            error = openai_error(http.post(path, json={"model": models.chat, "max_tokens": 2, **body}), 400)
            assert error["param"] == param and "grammar limit of 1000" in error["message"], (path, error)
        # a real enum of a few hundred values answers with one of them
        countries = [f"country-{i}" for i in range(300)]
        answer = http.post(
            "/v1/chat/completions",
            json={
                "model": models.chat,
                "messages": MESSAGES,
                "max_tokens": 20,
                "response_format": booking_format({"type": "string", "enum": countries}),
            },
        )
        assert answer.status_code == 200, answer.text
        assert json.loads(answer.json()["choices"][0]["message"]["content"]) in countries


# A pydantic set: "uniqueItems", which no grammar can enforce.
TAGS: dict[str, Any] = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3, "uniqueItems": True}},
    "required": ["tags"],
}
LOOSER_TAGS = jsonschema.Draft202012Validator(
    {**TAGS, "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}}
)


def test_a_keyword_that_cannot_be_enforced_is_left_out_unless_strict(live: LiveServer, models: Models) -> None:
    # OpenAI's default (strict false), llama-server's and Ollama's fields: answered, as llama.cpp does
    client = live.openai()
    asked: Any = {"model": models.chat, "messages": MESSAGES, "max_tokens": 60}
    loose = client.chat.completions.create(**asked, response_format=booking_format(TAGS, strict=False))
    LOOSER_TAGS.validate(json.loads(loose.choices[0].message.content or ""))
    answers = [
        client.chat.completions.create(**asked, extra_body={"json_schema": TAGS}).choices[0].message.content,
        client.responses.create(
            model=models.chat,
            input="tags?",
            max_output_tokens=60,
            text={"format": {"type": "json_schema", "name": "t", "schema": TAGS}},
        ).output_text,
        live.http().post("/completion", json={"prompt": "x", "json_schema": TAGS, "n_predict": 60}).json()["content"],
        ollama.Client(host=live.url + "/ollama", headers={"authorization": f"Bearer {live.key}"})
        .generate(model=models.chat, prompt="x", format=TAGS, options={"num_predict": 60})
        .response,
    ]
    for answer in answers:
        LOOSER_TAGS.validate(json.loads(answer or ""))
    # strict true, a strict function, Anthropic's structured outputs: refused naming the keyword
    tool = {"type": "function", "function": {"name": "tag", "parameters": TAGS, "strict": True}}
    for sent, param in [
        ({"response_format": booking_format(TAGS)}, "response_format"),
        ({"tools": [tool], "tool_choice": "required"}, "tools"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**asked, **sent)
        assert refused.value.param == param and "'uniqueItems'" in refused.value.message
    with pytest.raises(anthropic.BadRequestError) as strict:
        live.anthropic().messages.create(
            model=models.chat,
            max_tokens=60,
            messages=MESSAGES,
            output_config={"format": {"type": "json_schema", "schema": TAGS}},
        )
    assert "'uniqueItems'" in strict.value.message


@pytest.mark.slow
def test_vllm_and_sglang_constraints_through_the_sdk(live: LiveServer, smollm2: Path) -> None:
    # As outlines' vLLM and SGLang clients send them, in extra_body: the answer holds to each.
    client = live.openai()
    asked: Any = {
        "model": BUNDLED_ID,
        "temperature": 0,
        "max_tokens": 40,
        "messages": [{"role": "user", "content": "Is Paris the capital of France? Then give its postcode."}],
    }

    def answer(extra: dict[str, Any]) -> str:
        return client.chat.completions.create(**asked, extra_body=extra).choices[0].message.content or ""

    for extra in ({"structured_outputs": {"choice": ["yes", "no"]}}, {"guided_choice": ["yes", "no"]}):
        assert answer(extra) in ("yes", "no")
    for extra in ({"structured_outputs": {"regex": "[0-9]{5}"}}, {"guided_regex": "[0-9]{5}"}, {"regex": "[0-9]{5}"}):
        assert re.fullmatch("[0-9]{5}", answer(extra))
    city = {"type": "object", "properties": {"postcode": {"type": "integer"}}, "required": ["postcode"]}
    for extra in ({"structured_outputs": {"json": city}}, {"guided_json": city}, {"json_schema": json.dumps(city)}):
        jsonschema.validate(json.loads(answer(extra)), city)
    for extra in ({"structured_outputs": {"grammar": 'root ::= "oui" | "non"'}}, {"ebnf": 'root ::= "oui" | "non"'}):
        assert answer(extra) in ("oui", "non")
    text = client.completions.create(
        model=BUNDLED_ID, prompt="Paris:", max_tokens=10, extra_body={"guided_regex": "[A-Z][a-z]+"}
    )
    assert re.fullmatch("[A-Z][a-z]+", text.choices[0].text)
    with pytest.raises(openai.BadRequestError) as lark:  # outlines' CFG is Lark, not llama.cpp's GBNF
        answer({"structured_outputs": {"grammar": '?start: "a"'}})
    assert lark.value.param == "structured_outputs.grammar"
