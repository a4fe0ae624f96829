"""OpenAI request bodies -> spark.types, and the 400s with their params."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import openai
import pytest

from spark.api import openai as api
from spark.api.common import Fetch, choice_requests
from spark.errors import InvalidRequest
from spark.types import (
    ImagePart,
    Message,
    Reasoning,
    ResponseFormat,
    SamplingParams,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
)
from tiny_pdf import make_pdf

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
USER = [{"role": "user", "content": "hi"}]


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "m", **fields}).encode()


def chat(**fields: Any) -> api.ChatCall:
    fields.setdefault("messages", USER)
    return api.parse_chat(body(**fields))


def chat_error(**fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        chat(**fields)
    assert info.value.status == 400
    return info.value


# --- chat: what the SDK sends -----------------------------------------------------


def test_sdk_request_with_every_parameter(openai_client) -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(400, json={"error": {"message": "stop here", "type": "x"}})

    client = openai_client(handler)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="smollm2",
            messages=[
                {"role": "developer", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look:"},
                        {"type": "image_url", "image_url": {"url": PNG_URL}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
            ],
            temperature=0.5,
            top_p=0.9,
            presence_penalty=0.1,
            frequency_penalty=-0.1,
            seed=7,
            stop=["\n\n", "END"],
            max_completion_tokens=64,
            logit_bias={"50256": -100},
            n=1,
            stream=True,
            stream_options={"include_usage": True},
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "weather",
                        "description": "Weather now",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                    },
                }
            ],
            tool_choice={"type": "function", "function": {"name": "weather"}},
            response_format={"type": "json_object"},
            reasoning_effort="low",
            parallel_tool_calls=False,
            user="u1",
            store=False,
            extra_body={"top_k": 20, "min_p": 0.1, "repetition_penalty": 1.1, "keep_alive": "5m"},
        )
    call = api.parse_chat(seen[0])
    request = call.request
    assert call.include_usage is True
    assert request.model == "smollm2" and request.stream is True
    assert request.messages == [
        Message("developer", "Be brief."),
        Message("user", [TextPart("Look:"), ImagePart(PNG, "image/png")]),
        Message("assistant", None, tool_calls=[ToolCall("call_1", "weather", '{"city": "Oslo"}')]),
        Message("tool", "Sunny", tool_call_id="call_1"),
    ]
    assert request.sampling == SamplingParams(
        temperature=0.5,
        top_p=0.9,
        top_k=20,
        min_p=0.1,
        presence_penalty=0.1,
        frequency_penalty=-0.1,
        repeat_penalty=1.1,
        seed=7,
        max_tokens=64,
        stop=["\n\n", "END"],
        logit_bias={50256: -100.0},
    )
    assert request.tools == [
        Tool("weather", "Weather now", {"type": "object", "properties": {"city": {"type": "string"}}})
    ]
    assert request.tool_choice == ToolChoice("required", "weather")
    assert request.parallel_tool_calls is False
    assert request.response_format == ResponseFormat("json_object")
    assert request.reasoning == Reasoning(effort="low")
    assert request.keep_alive == 300


def test_llama_server_sampling_extensions() -> None:
    fields = {
        "min_p": 0.1,
        "repeat_penalty": 1.1,
        "repeat_last_n": -1,
        "dry_multiplier": 0.8,
        "dry_base": 1.75,
        "dry_allowed_length": 2,
        "dry_penalty_last_n": 128,
        "typical_p": 0.9,
        "top_n_sigma": 1.5,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.2,
        "dynatemp_range": 0.3,
        "dynatemp_exponent": 1.2,
        "mirostat": 2,
        "mirostat_tau": 4.0,
        "mirostat_eta": 0.2,
        "samplers": ["penalties", "top_k", "temperature"],
        "dry_sequence_breakers": ["\n", "User:"],
    }
    assert chat(**fields).request.sampling == SamplingParams(**fields)  # type: ignore[arg-type]
    completion = api.parse_completion(body(prompt="x", **fields)).request.sampling
    assert completion == SamplingParams(max_tokens=16, **fields)  # type: ignore[arg-type]


def test_minimal_request_leaves_everything_to_the_model() -> None:
    call = chat()
    assert call.request.messages == [Message("user", "hi")]
    assert call.request.sampling == SamplingParams()
    assert call.request.stream is False and call.include_usage is False
    assert call.request.tools is None and call.request.keep_alive is None


def test_roles_names_and_text_parts() -> None:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
        {"role": "user", "name": "ann", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "yes"}, {"type": "refusal", "refusal": "no"}],
            "reasoning_content": "thinking",
        },
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "42"}]},
    ]
    assert chat(messages=messages).request.messages == [
        Message("system", "A\nB"),
        Message("user", "hi", name="ann"),
        Message("assistant", "yes\nno", reasoning_content="thinking"),
        Message("tool", "42", tool_call_id="c"),
    ]


def test_image_url_given_bare() -> None:
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": PNG_URL}]}]
    assert chat(messages=messages).request.messages[0].content == [ImagePart(PNG, "image/png")]


def test_remote_image_refused_unless_fetched() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is it"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ],
        }
    ]
    assert chat_error(messages=messages).param == "messages[0].content[1].image_url.url"
    call = api.parse_chat(body(messages=messages), fetch=Fetch(image=lambda url, param: ImagePart(PNG)))
    assert call.request.messages[0].content == [TextPart("what is it"), ImagePart(PNG)]


def test_a_prediction_is_read_as_its_text() -> None:
    assert chat().request.prediction is None
    assert chat(prediction={"type": "content", "content": "def f(): pass"}).request.prediction == "def f(): pass"
    parts = [{"type": "text", "text": "def f():"}, {"type": "text", "text": " pass"}]
    assert chat(prediction={"type": "content", "content": parts}).request.prediction == "def f(): pass"
    assert chat(prediction={"type": "content", "content": ""}).request.prediction is None
    assert chat_error(prediction={"type": "audio", "content": "x"}).param == "prediction.type"
    assert chat_error(prediction={"type": "content", "content": 3}).param == "prediction.content"


@pytest.mark.parametrize(
    ("part", "param", "words"),
    [
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "", "Audio input"),
        ({"type": "file", "file": {"file_id": "file-abc"}}, ".file.file_id", "send the file inline"),
        ({"type": "file", "file": {"filename": "a.pdf"}}, ".file.file_data", "sent inline or uploaded"),
        ({"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0x"}}, ".file.file_data", "PDF"),
    ],
)
def test_audio_and_unreadable_file_parts_are_refused(part: dict, param: str, words: str) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "x"}, part]}]
    error = chat_error(messages=messages)
    assert error.param == "messages[0].content[1]" + param
    assert words in error.message


def test_file_parts_are_read_as_their_name_and_text() -> None:
    pdf = base64.b64encode(make_pdf("Invoice 7\nTotal: 42 EUR")).decode()
    file = {"type": "file", "file": {"filename": "invoice.pdf", "file_data": f"data:application/pdf;base64,{pdf}"}}
    messages = [{"role": "user", "content": [file, {"type": "text", "text": "What is the total?"}]}]
    call = api.parse_chat(body(messages=messages))
    assert call.request.messages[0].content == "invoice.pdf\nInvoice 7\nTotal: 42 EUR\nWhat is the total?"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "function", "content": "x", "name": "f"}]}, "messages[0].role"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        (
            {"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": PNG_URL}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [*USER, {"role": "tool", "content": "x"}]}, "messages[1].tool_call_id"),
        ({"model": ""}, "model"),
        ({"model": None}, "model"),  # no default model given to the parser
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -1}, "max_tokens"),  # llama-server's "no limit": OpenAI's routes keep OpenAI's bounds
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"n": 17}, "n"),
        ({"n": 0}, "n"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": -1}, "min_p"),
        ({"top_k": -1}, "top_k"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"repeat_penalty": 0}, "repeat_penalty"),
        ({"repeat_penalty": 1.1, "repetition_penalty": 1.2}, "repeat_penalty"),
        ({"repeat_last_n": -2}, "repeat_last_n"),
        ({"dry_multiplier": -0.1}, "dry_multiplier"),
        ({"dry_base": 0.5}, "dry_base"),
        ({"dry_allowed_length": -1}, "dry_allowed_length"),
        ({"dry_allowed_length": 1.5}, "dry_allowed_length"),
        ({"dry_penalty_last_n": -5}, "dry_penalty_last_n"),
        ({"dry_multiplier": "lots"}, "dry_multiplier"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"stop": ""}, "stop"),
        ({"stop": ["a", ""]}, "stop[1]"),
        ({"stop": [str(i) for i in range(17)]}, "stop"),
        ({"logit_bias": {"abc": 1}}, "logit_bias"),
        ({"logit_bias": {"1": 200}}, "logit_bias"),
        ({"logit_bias": {"1180591620717411303424": 5}}, "logit_bias"),  # a key beyond 64 bits
        ({"logit_bias": {"-9223372036854775809": 5}}, "logit_bias"),
        ({"seed": "x"}, "seed"),
        ({"stream": "yes"}, "stream"),
        ({"logprobs": "yes"}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"function_call": "auto"}, "function_call"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
        ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools[0].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "a" * 65}}]}, "tools[0].function.name"),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "a"}},
                    {"type": "function", "function": {"name": "a"}},
                ]
            },
            "tools[1].function.name",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": [{}]}}}]},
            "tools[0].function.parameters",
        ),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "a"}}],
                "tool_choice": {"type": "function", "function": {"name": "b"}},
            },
            "tool_choice",
        ),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"mirostat": 5}, "mirostat"),
        ({"xtc_probability": 2}, "xtc_probability"),
        ({"dynatemp_range": -1}, "dynatemp_range"),
        ({"keep_alive": "a while"}, "keep_alive"),
    ],
)
def test_bad_chat_requests_name_the_param(fields: dict, param: str) -> None:
    assert chat_error(**fields).param == param


@pytest.mark.parametrize(
    ("sent", "wanted"),
    [({}, None), ({"logprobs": False}, None), ({"logprobs": True}, 0), ({"logprobs": True, "top_logprobs": 5}, 5)],
)
def test_logprobs_and_how_many_alternatives(sent: dict, wanted: int | None) -> None:
    assert chat(**sent).request.logprobs == wanted
    legacy = api.parse_completion(body(prompt="x", **({"logprobs": wanted} if wanted is not None else {})))
    assert legacy.request.logprobs == wanted


@pytest.mark.parametrize(("sent", "suffix"), [({}, None), ({"suffix": ""}, None), ({"suffix": "\n}"}, "\n}")])
def test_a_completions_suffix_asks_to_fill_in_the_middle(sent: dict, suffix: str | None) -> None:
    assert api.parse_completion(body(prompt="def f():", **sent)).request.suffix == suffix


def test_n_choices_and_their_seeds() -> None:
    assert chat_error(n=17).message == "'n' must be between 1 and 16."
    call = chat(n=3, seed=7)
    assert call.n == 3
    requests = choice_requests(call.request, call.n)
    assert [r.sampling.seed for r in requests] == [7, 8, 9]  # distinct, each reproducible
    assert all(r.messages == call.request.messages for r in requests)
    unseeded = chat(n=2)
    assert choice_requests(unseeded.request, 2) == [unseeded.request] * 2  # each draws its own seed
    assert api.parse_completion(body(prompt="x", n=2)).n == 2
    batch = api.parse_completion(body(prompt=["a", [1, 2]], n=2, seed=1))
    assert batch.request.prompt == "a" and batch.prompts == ["a", [1, 2]]
    # choice p * n + i is prompt p's i-th
    assert [(r.prompt, r.sampling.seed) for r in choice_requests(batch.request, batch.n, batch.prompts)] == [
        ("a", 1),
        ("a", 2),
        ([1, 2], 1),
        ([1, 2], 2),
    ]


def test_invalid_json_body() -> None:
    with pytest.raises(InvalidRequest, match="^body is not valid JSON: "):
        api.parse_chat(b'{"model": "m", "messages": [')


def test_max_tokens_limit_and_precedence() -> None:
    assert chat(max_tokens=10, max_completion_tokens=20).request.sampling.max_tokens == 20
    assert api.parse_chat(body(messages=USER, max_tokens=100), max_tokens_limit=100).request
    for field in ("max_tokens", "max_completion_tokens"):
        with pytest.raises(InvalidRequest) as info:
            api.parse_chat(body(messages=USER, **{field: 101}), max_tokens_limit=100)
        assert info.value.param == field


def test_stop_and_penalty_aliases() -> None:
    assert chat(stop="###").request.sampling.stop == ["###"]
    assert chat(stop=[]).request.sampling.stop is None
    assert chat(stop=[str(i) for i in range(16)]).request.sampling.stop[-1] == "15"
    assert chat(repetition_penalty=1.3).request.sampling.repeat_penalty == 1.3
    assert chat(repeat_penalty=1.3, repetition_penalty=1.3).request.sampling.repeat_penalty == 1.3


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("auto", ToolChoice("auto")), ("none", ToolChoice("none")), ("required", ToolChoice("required"))],
)
def test_tool_choice_modes(choice: str, expected: ToolChoice) -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert chat(tools=tools, tool_choice=choice).request.tool_choice == expected


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_allowed_tools_offer_only_those_tools(mode: str) -> None:
    tools = [{"type": "function", "function": {"name": name}} for name in ("a", "b", "c")]
    allowed = {"mode": mode, "tools": [{"type": "function", "function": {"name": n}} for n in ("c", "a")]}
    request = chat(tools=tools, tool_choice={"type": "allowed_tools", "allowed_tools": allowed}).request
    assert [t.name for t in request.tools or ()] == ["a", "c"] and request.tool_choice == ToolChoice(mode)
    allowed["tools"] = [{"type": "function", "function": {"name": "d"}}]
    with pytest.raises(InvalidRequest) as unknown:
        chat(tools=tools, tool_choice={"type": "allowed_tools", "allowed_tools": allowed})
    assert unknown.value.param == "tool_choice.allowed_tools.tools[0]"


@pytest.mark.parametrize(
    ("sent", "parallel"),
    [
        ({}, True),
        ({"parallel_tool_calls": None}, True),
        ({"parallel_tool_calls": True}, True),
        ({"parallel_tool_calls": False}, False),
    ],
)
def test_parallel_tool_calls_default_to_true_as_openai(sent: dict, parallel: bool) -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert chat(tools=tools, **sent).request.parallel_tool_calls is parallel


def test_llama_server_clients_may_leave_out_the_model() -> None:
    # llama.vim's and llama.vscode's chat requests name no model
    call = api.parse_chat(body(messages=USER, model=None), default_model="the-default", max_tokens_limit=500)
    assert call.request.model == "the-default"
    assert api.parse_chat(body(messages=USER, model="named"), default_model="d").request.model == "named"
    assert api.parse_completion(body(prompt="x", model=None), default_model="d").request.model == "d"


def test_response_formats_and_reasoning() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert chat(
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    ).request.response_format == ResponseFormat("json_schema", schema)
    assert chat(
        response_format={"type": "json_schema", "json_schema": {"name": "x"}}
    ).request.response_format == ResponseFormat("json_object")
    assert chat(response_format={"type": "text"}).request.response_format is None
    # llama-server's `json_schema` extension ({}: any object), named in errors about it
    assert chat(json_schema=schema).request.response_format == ResponseFormat("json_schema", schema, "json_schema")
    assert chat(json_schema={}).request.response_format == ResponseFormat("json_object", param="json_schema")
    with pytest.raises(InvalidRequest) as both:
        chat(json_schema=schema, response_format={"type": "json_object"})
    assert both.value.param == "json_schema"
    assert chat(grammar='root ::= "a"').request.grammar == 'root ::= "a"'
    assert chat(reasoning_effort="none").request.reasoning == Reasoning(enabled=False)
    assert chat(reasoning_effort="high").request.reasoning == Reasoning(effort="high")


@pytest.mark.parametrize(
    ("sent", "reasoning"),
    [
        ({}, None),
        ({"reasoning_effort": "minimal"}, Reasoning(enabled=False)),
        ({"reasoning_effort": "medium"}, Reasoning(effort="medium")),
        ({"reasoning": {"effort": "low"}}, Reasoning(effort="low")),
        ({"reasoning": {"effort": "high"}, "reasoning_effort": "none"}, Reasoning(effort="high")),
        ({"think": True}, Reasoning(enabled=True)),
        ({"think": False, "reasoning_effort": "high"}, Reasoning(enabled=False)),
        ({"chat_template_kwargs": {"enable_thinking": True}}, Reasoning(enabled=True)),
        ({"chat_template_kwargs": {"enable_thinking": False}, "think": True}, Reasoning(enabled=False)),
        ({"chat_template_kwargs": {"other": 1}}, None),
    ],
)
def test_every_thinking_switch(sent: dict[str, object], reasoning: Reasoning | None) -> None:
    assert chat(**sent).request.reasoning == reasoning


def test_enable_thinking_must_be_a_switch() -> None:
    with pytest.raises(InvalidRequest) as info:
        chat(chat_template_kwargs={"enable_thinking": "yes"})
    assert info.value.param == "chat_template_kwargs.enable_thinking"


def test_keep_alive_forms() -> None:
    assert chat(keep_alive=30).request.keep_alive == 30
    assert chat(keep_alive=-1).request.keep_alive == -1
    assert chat(keep_alive="1h").request.keep_alive == 3600


def test_unknown_fields_are_ignored() -> None:
    assert (
        chat(metadata={"a": "b"}, prediction={"type": "content", "content": "x"}, web_search_options={}).request.model
        == "m"
    )


def test_empty_assistant_tool_arguments_mean_none() -> None:
    messages = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}],
        }
    ]
    assert chat(messages=messages).request.messages[0].tool_calls == [ToolCall("c", "f", "{}")]


# --- completions -----------------------------------------------------------------------


def completion(**fields: Any) -> api.CompletionCall:
    return api.parse_completion(body(**fields))


def test_completion_prompt_forms_and_defaults() -> None:
    call = completion(prompt="Once upon")
    assert call.request.prompt == "Once upon"
    assert call.request.sampling == SamplingParams(max_tokens=16)
    assert completion(prompt=["one"]).request.prompt == "one"
    assert completion(prompt=[1, 2, 3]).request.prompt == [1, 2, 3]  # token ids, as llama-server and vLLM take
    assert completion(prompt=[[1, 2, 3]]).request.prompt == [1, 2, 3]  # a batch of one (lm-evaluation-harness)
    assert completion(prompt="x", echo=True, logprobs=1).request.echo
    assert completion(prompt="x", echo=True, max_tokens=0).request.sampling.max_tokens == 0  # scoring alone
    full = completion(
        prompt="x",
        max_tokens=5,
        temperature=0,
        stop="\n",
        stream=True,
        stream_options={"include_usage": True},
        echo=False,
        best_of=1,
        suffix="",
    )
    assert full.request.sampling == SamplingParams(temperature=0, max_tokens=5, stop=["\n"])
    assert full.request.stream and full.include_usage


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"prompt": [1, "a"]}, "prompt", "mixes token ids"),
        ({"prompt": ["x"] * 33, "n": 2}, "prompt", "at most 64 answers"),
        ({"prompt": []}, "prompt", "empty"),
        ({"prompt": "x", "n": 17}, "n", "between 1 and 16"),
        ({"prompt": "x", "best_of": 3}, "best_of", "1"),
        ({"prompt": "x", "suffix": 3}, "suffix", "str"),
        ({"prompt": "x", "logprobs": 21}, "logprobs", "20"),
        ({"prompt": "x", "logprobs": True}, "logprobs", "int"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens", "max_tokens"),
        ({"prompt": "x", "logit_bias": {"1180591620717411303424": 5}}, "logit_bias", "9223372036854775807"),
        ({}, "prompt", "prompt"),
    ],
)
def test_bad_completion_requests(fields: dict, param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        completion(**fields)
    assert info.value.param == param
    assert words in info.value.message


def test_completion_max_tokens_limit() -> None:
    with pytest.raises(InvalidRequest) as info:
        api.parse_completion(body(prompt="x"), max_tokens_limit=8)  # the default 16 is too many
    assert info.value.param == "max_tokens"


# --- embeddings --------------------------------------------------------------------------


def test_embedding_inputs() -> None:
    call = api.parse_embeddings(body(input="hello"))
    assert call.request.input == ["hello"] and call.encoding_format == "float"
    assert api.parse_embeddings(body(input="hi", encoding_format=None)).encoding_format == "float"  # null: the default
    call = api.parse_embeddings(body(input=["a", "b"], encoding_format="base64", dimensions=32, keep_alive="10s"))
    assert call.request.input == ["a", "b"] and call.request.dimensions == 32
    assert call.encoding_format == "base64" and call.request.keep_alive == 10
    # token ids: one array, or a list of arrays and texts (checked against the vocabulary in the runner)
    assert api.parse_embeddings(body(input=[1, 2, 3])).request.input == [[1, 2, 3]]
    assert api.parse_embeddings(body(input=[[1, 2], "b"])).request.input == [[1, 2], "b"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": []}, "input"),
        ({"input": ""}, "input"),
        ({"input": ["a", ""]}, "input[1]"),
        ({"input": [[1, 2], []]}, "input[1]"),
        ({"input": [[1, 2], 3]}, "input"),
        ({"input": ["x"] * 2049}, "input"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({}, "input"),
    ],
)
def test_bad_embedding_requests(fields: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        api.parse_embeddings(body(**fields))
    assert info.value.param == param


def test_strict_is_read_from_response_format_and_tools() -> None:
    schema = {"type": "object"}
    sent = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    assert chat(response_format=sent).request.response_format == ResponseFormat("json_schema", schema, strict=True)
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": schema, "strict": True}},
        {"type": "function", "function": {"name": "b", "parameters": schema}},
    ]
    assert [t.strict for t in chat(tools=tools).request.tools or ()] == [True, False]


SCHEMA_X = {"type": "object", "properties": {"x": {"type": "integer"}}}


@pytest.mark.parametrize(
    ("extra", "fields"),
    [
        # vLLM 0.10 on
        (
            {"structured_outputs": {"json": SCHEMA_X}},
            {"response_format": ResponseFormat("json_schema", SCHEMA_X, "structured_outputs.json")},
        ),
        (
            {"structured_outputs": {"json": json.dumps(SCHEMA_X)}},
            {"response_format": ResponseFormat("json_schema", SCHEMA_X, "structured_outputs.json")},
        ),
        (
            {"structured_outputs": {"regex": "[a-z]+", "disable_fallback": True}},
            {"regex": "[a-z]+", "grammar_param": "structured_outputs.regex"},
        ),
        (
            {"structured_outputs": {"choice": ["yes", "no."]}},
            {"regex": "yes|no\\.", "grammar_param": "structured_outputs.choice"},
        ),
        (
            {"structured_outputs": {"grammar": 'root ::= "a"'}},
            {"grammar": 'root ::= "a"', "grammar_param": "structured_outputs.grammar"},
        ),
        (
            {"structured_outputs": {"json_object": True}},
            {"response_format": ResponseFormat("json_object", param="structured_outputs.json_object")},
        ),
        # older vLLM
        ({"guided_json": SCHEMA_X}, {"response_format": ResponseFormat("json_schema", SCHEMA_X, "guided_json")}),
        ({"guided_regex": "\\d+"}, {"regex": "\\d+", "grammar_param": "guided_regex"}),
        ({"guided_choice": ["a b"]}, {"regex": "a\\ b", "grammar_param": "guided_choice"}),
        ({"guided_grammar": 'root ::= "a"'}, {"grammar": 'root ::= "a"', "grammar_param": "guided_grammar"}),
        # SGLang (its json_schema is the schema's JSON text)
        (
            {"json_schema": json.dumps(SCHEMA_X)},
            {"response_format": ResponseFormat("json_schema", SCHEMA_X, "json_schema")},
        ),
        ({"regex": "a+"}, {"regex": "a+", "grammar_param": "regex"}),
        ({"ebnf": 'root ::= "a"'}, {"grammar": 'root ::= "a"', "grammar_param": "ebnf"}),
    ],
)
def test_vllm_and_sglang_constraints_are_read(extra: dict[str, Any], fields: dict[str, Any]) -> None:
    request = chat(**extra).request
    for name, value in fields.items():
        assert getattr(request, name) == value, name
    assert request.response_format is None or not request.response_format.strict  # as those servers: never strict
    done = api.parse_completion(body(prompt="x", **extra)).request
    held = fields.get("response_format")
    if held is not None:
        assert (done.json_schema, done.json_schema_param) == (held.schema or {}, held.param)
    else:
        assert (done.grammar, done.regex, done.grammar_param) == (
            fields.get("grammar"),
            fields.get("regex"),
            fields["grammar_param"],
        )


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"response_format": {"type": "json_object"}, "guided_json": SCHEMA_X}, "guided_json"),
        ({"json_schema": SCHEMA_X, "response_format": {"type": "json_object"}}, "json_schema"),
        ({"grammar": 'root ::= "a"', "structured_outputs": {"regex": "a"}}, "structured_outputs.regex"),
        ({"structured_outputs": {"json": SCHEMA_X, "choice": ["a"]}}, "structured_outputs.choice"),
        ({"guided_choice": ["a"], "regex": "a"}, "regex"),
        ({"guided_regex": "a", "ebnf": 'root ::= "a"'}, "ebnf"),
        ({"guided_choice": []}, "guided_choice"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"json_schema": "[1]"}, "json_schema"),
        ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag"),
    ],
)
def test_a_second_constraint_or_a_bad_one_is_refused_naming_it(extra: dict[str, Any], param: str) -> None:
    assert chat_error(**extra).param == param
