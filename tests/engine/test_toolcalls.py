"""Tool calls: template families, streaming parsers fed with real template output,
and forced and lazy grammars with the tiny models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from llama_cpp import llama_cpp as lc

import tiny_gguf
from engine.grammar.driver import Driver
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.grammar import Grammar, create_sampler, literal
from spark.engine.native import Model
from spark.engine.template import ChatTemplate
from spark.engine.toolcalls import (
    JSON_START,
    ToolCallParser,
    ToolSyntax,
    describe_tools,
    lazy_grammar,
    new_call_id,
    tool_syntax,
)
from spark.types import (
    ChatRequest,
    Done,
    Event,
    Failed,
    LoadOptions,
    Message,
    SamplingParams,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
)

# Qwen-Qwen2.5-7B-Instruct.jinja (llama.cpp models/templates)
QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# meta-llama-Llama-3.1-8B-Instruct.jinja (llama.cpp models/templates)
LLAMA31 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# mistralai-Mistral-Nemo-Instruct-2407.jinja (llama.cpp models/templates)
MISTRAL_NEMO = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS][" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST]" + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST]" + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif (message.tool_calls is defined and message.tool_calls is not none) %}
        {{- "[TOOL_CALLS][" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- message["content"] + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS]{"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

# Mistral-Small-3.2-24B-Instruct-2506.jinja (llama.cpp models/templates)
MISTRAL_SMALL_32 = r"""{%- set today = strftime_now("%Y-%m-%d") %}
{%- set default_system_message = "You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered in Paris.\nYour knowledge base was last updated on 2023-10-01. The current date is " + today + ".\n\nWhen you're not sure about some information or when the user's request requires up-to-date or specific data, you must use the available tools to fetch the information. Do not hesitate to use tools whenever they can provide a more accurate or complete response. If no relevant tools are available, then clearly state that you don't have the information and avoid making up anything.

If the user's question is not clear, ambiguous, or does not provide enough context for you to accurately answer the question, you do not try to answer it right away and you rather ask the user to clarify their request (e.g. \"What are some good restaurants around me?\" => \"Where are you?\" or \"When is the next flight to Tokyo\" => \"Where do you travel from?\").
You are always very attentive to dates, and when asked about information at specific dates, you discard information that is at another date.
You follow these instructions in all languages, and always respond to the user in the language they use or request.
Next sections describe the capabilities that you have.

# WEB BROWSING INSTRUCTIONS

You cannot perform any web search or access internet to open URLs, links etc. If it seems like the user is expecting you to do so, you clarify the situation and ask the user to copy paste the text directly in the chat.

# MULTI-MODAL INSTRUCTIONS

You have the ability to read images, but you cannot generate images. You also cannot transcribe audio files or videos.
You cannot read nor transcribe audio files or videos.

# TOOL CALLING INSTRUCTIONS

You may have access to tools that you can use to fetch information or perform actions. You must use these tools in the following situations:

1. When the request requires up-to-date information.
2. When the request requires specific data that you do not have in your knowledge base.
3. When the request involves actions that you cannot perform without tools.

Always prioritize using tools to provide the most accurate and helpful response. If tools are not available, inform the user that you cannot perform the requested action at the moment." %}

{{- bos_token }}

{%- set system_prompt = default_system_message %}
{%- set loop_messages = messages %}

{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{%- if messages|length > 0 and messages[0]['role'] == 'system' %}
    {%- if messages[0]['content'] is string %}
        {%- set system_prompt = messages[0]['content'] %}
    {%- else %}
        {%- set system_prompt = messages[0]['content'][0]['text'] %}
    {%- endif %}
    {%- set loop_messages = messages[1:] %}
{%- endif %}

{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{%- set ns = namespace(index=0) %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or (message.get('tool_calls'))) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- '[SYSTEM_PROMPT]' + system_prompt + '[/SYSTEM_PROMPT]' }}

{%- for message in loop_messages %}
    {%- if message['role'] == 'system' %}
        {%- if message['content'] is string %}
            {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}
        {%- else %}
            {{- '[SYSTEM_PROMPT]' + message['content'][0]['text'] + '[/SYSTEM_PROMPT]' }}
        {%- endif %}
    {%- elif message['role'] == 'user' %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- '[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}
        {%- endif %}
        {{- '[INST]' }}
        {%- if message['content'] is string %}
            {{- message['content'] }}
        {%- else %}
            {%- for block in message['content'] %}
                {%- if block['type'] == 'text' %}
                    {{- block['text'] }}
                {%- elif block['type'] in ['image', 'image_url'] %}
                    {{- '[IMG]' }}
                {%- else %}
                    {{- raise_exception('Only text and image blocks are supported in message content!') }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '[/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {%- if message.get('tool_calls') %}
            {%- for tool_call in message.tool_calls %}
                {{- '[TOOL_CALLS]' + tool_call.function.name }}
                {%- if not tool_call.id is defined or tool_call.id is not string or tool_call.id|length != 9 %}
                    {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
                {%- endif %}
                {{- '[CALL_ID]' + tool_call.id }}
                {{- '[ARGS]' + tool_call['function']['arguments']|tojson }}
            {%- endfor %}
            {{- eos_token }}
        {%- elif message['content'] is string %}
            {{- message['content'] + eos_token }}
        {%- else %}
            {%- for block in message['content'] %}
                {%- if block['type'] == 'text' %}
                    {{- block['text'] }}
                {%- elif block['type'] in ['image', 'image_url'] %}
                    {{- '[IMG]' }}
                {%- else %}
                    {{- raise_exception('Only text and image blocks are supported in assistant content!') }}
                {%- endif %}
            {%- endfor %}
            {{- eos_token }}
        {%- endif %}
    {%- elif message['role'] == 'tool_results' or message['role'] == 'tool' %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {%- if not message.tool_call_id is defined or message.tool_call_id is not string or message['tool_call_id']|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '[TOOL_RESULTS]' + message.tool_call_id + '[TOOL_CONTENT]' + content|string + '[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception('Only system, user, assistant, and tool roles are supported!') }}
    {%- endif %}
{%- endfor %}
"""

WEATHER = Tool(
    "get_weather",
    "Current weather in a city",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"enum": ["c", "f"]},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    },
)
ADD = Tool(
    "add",
    "Add two integers",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
)
TOOLS = [WEATHER, ADD]
SCHEMAS = {t.name: t.parameters for t in TOOLS}
CALLS = [
    ToolCall("abcDEF123", "get_weather", '{"city": "Paris", "days": 2}'),
    ToolCall("ghiJKL456", "add", '{"a": 1, "b": -2}'),
]
FAMILIES = {
    "hermes-tiny": tiny_gguf.TOOLS_TEMPLATE,
    "qwen2.5": QWEN25,
    "llama3.1": LLAMA31,
    "mistral-nemo": MISTRAL_NEMO,
    "mistral-small-3.2": MISTRAL_SMALL_32,
}
END_OF_TURN = ("<|im_end|>\n", "<|eot_id|>", "<|eom_id|>", "</s>")


def assistant_output(src: str, calls: list[ToolCall], content: str | None = None, **variables: object) -> str:
    """What a model following the template writes for a turn with these calls."""
    t = ChatTemplate(src, bos_token="<s>", eos_token="</s>")
    chat = [Message("user", "Weather in Paris, and 1 + -2?")]
    prompt = t.render(chat, tools=TOOLS, variables=variables)
    full = t.render(
        [*chat, Message("assistant", content, tool_calls=calls)],
        tools=TOOLS,
        add_generation_prompt=False,
        variables=variables,
    )
    assert full.startswith(prompt)
    out = full[len(prompt) :]
    for end in END_OF_TURN:
        out = out.removesuffix(end)
    return out


def parse(syntax: ToolSyntax, text: str, step: int, names: list[str] | None = None) -> list[Event]:
    parser = ToolCallParser(syntax, names if names is not None else [t.name for t in TOOLS])
    events: list[Event] = []
    for i in range(0, len(text), step):
        events += parser.feed(text[i : i + step])
    return events + parser.finish()


def content_and_calls(events: list[Event]) -> tuple[str, list[tuple[str, dict[str, object]]]]:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, ToolCallDelta):
            if e.id is not None:
                assert e.index == len(calls) and e.name and not e.arguments  # id and name come first, alone
                calls[e.index] = [e.name, ""]
            else:
                calls[e.index][1] += e.arguments
    return text, [(name, json.loads(args)) for name, args in calls.values()]


# --- families and parsers ----------------------------------------------------------------


def test_families_are_recognised_from_templates() -> None:
    assert tool_syntax(tiny_gguf.TOOLS_TEMPLATE).family == "hermes"
    assert tool_syntax(QWEN25) == ToolSyntax("hermes", True)
    assert tool_syntax(LLAMA31) == ToolSyntax("llama3", True)
    assert tool_syntax(MISTRAL_NEMO) == ToolSyntax("mistral", True, mistral_args=False)
    assert tool_syntax(MISTRAL_SMALL_32) == ToolSyntax("mistral", True, mistral_args=True)
    assert tool_syntax(tiny_gguf.CHATML_TEMPLATE) == ToolSyntax("generic", False)
    assert tool_syntax(None) == ToolSyntax("generic", False)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_real_template_output_parses_back_into_the_calls(family: str, step: int) -> None:
    src = FAMILIES[family]
    calls = CALLS[:1] if family == "llama3.1" else CALLS  # Llama 3.1 renders one call per turn
    text = assistant_output(src, calls)
    content, parsed = content_and_calls(parse(tool_syntax(src), text, step))
    assert content == ""
    assert parsed == [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_text_before_calls_streams_as_text(step: int) -> None:
    text = assistant_output(QWEN25, CALLS, content="Let me check.")
    events = parse(tool_syntax(QWEN25), text, step)
    content, parsed = content_and_calls(events)
    assert content.strip() == "Let me check." and [n for n, _ in parsed] == ["get_weather", "add"]
    first_call = next(i for i, e in enumerate(events) if isinstance(e, ToolCallDelta))
    assert all(isinstance(e, TextDelta) for e in events[:first_call])


def test_llama_builtin_tool_call_after_python_tag() -> None:
    text = assistant_output(
        LLAMA31, [ToolCall("x", "brave_search", '{"query": "weather Paris"}')], builtin_tools=["brave_search"]
    )
    assert text.startswith("<|python_tag|>brave_search.call(")
    for step in (1, 4, 10_000):
        assert content_and_calls(parse(tool_syntax(LLAMA31), text, step)) == (
            "",
            [("brave_search", {"query": "weather Paris"})],
        )


def test_only_a_possible_marker_start_is_held_back() -> None:
    parser = ToolCallParser(tool_syntax(QWEN25), ["add"])
    assert parser.feed("Hello <tool") == [TextDelta("Hello ")]
    assert parser.feed("box> and <") == [TextDelta("<toolbox> and ")]
    assert parser.feed("b>") == [TextDelta("<b>")]
    assert parser.finish() == []


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_marker_like_text_and_malformed_calls_stay_text(step: int) -> None:
    syntax = tool_syntax(QWEN25)
    text = "Use <tool_call> like this: <tool_call>not json</tool_call> or <tool_call>[1]</tool_call>."
    assert content_and_calls(parse(syntax, text, step)) == (text, [])
    # A bare JSON answer is an answer unless it names a tool and has arguments.
    llama = tool_syntax(LLAMA31)
    for answer in ('{"answer": 42}', '{"name": "Bob", "parameters": {}}', ' {"name": "add"} trailing'):
        assert content_and_calls(parse(llama, answer, step)) == (answer, [])


@pytest.mark.parametrize("step", [1, 3, 10_000])
def test_bare_json_calls_one_after_another(step: int) -> None:
    text = ' {"name": "add", "arguments": {"a": 1, "b": 2}}\n{"name": "get_weather", "arguments": {"city": "X", "days": 1}}\n'
    assert content_and_calls(parse(tool_syntax(None), text, step)) == (
        "",
        [("add", {"a": 1, "b": 2}), ("get_weather", {"city": "X", "days": 1})],
    )


def test_a_call_that_breaks_after_it_started_ends_and_the_rest_is_text() -> None:
    events = parse(tool_syntax(QWEN25), '<tool_call>{"name": "add", "arguments": {"a": 1, "b": ]}', 2)
    starts = [e for e in events if isinstance(e, ToolCallDelta) and e.id]
    assert [e.name for e in starts] == ["add"]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "]}"


def test_arguments_sent_as_a_json_string_are_unwrapped() -> None:
    text = '<tool_call>{"arguments": "{\\"a\\": 1, \\"b\\": 2}", "name": "add"}</tool_call>'
    assert content_and_calls(parse(tool_syntax(QWEN25), text, 1)) == ("", [("add", {"a": 1, "b": 2})])


def test_call_ids() -> None:
    assert new_call_id("hermes").startswith("call_") and len(new_call_id("hermes")) == 29
    mistral_id = new_call_id("mistral")
    assert len(mistral_id) == 9 and mistral_id.isalnum()
    # the ids Spark gives Mistral calls are accepted by the template on the next turn
    events = parse(tool_syntax(MISTRAL_SMALL_32), assistant_output(MISTRAL_SMALL_32, CALLS), 5)
    ids = [e.id for e in events if isinstance(e, ToolCallDelta) and e.id]
    calls = [ToolCall(i, c.name, c.arguments) for i, c in zip(ids, CALLS, strict=True)]
    assert assistant_output(MISTRAL_SMALL_32, calls)


def test_templates_without_tools_get_them_in_the_system_message() -> None:
    chat = [
        Message("user", "weather?"),
        Message("assistant", None, tool_calls=CALLS[:1]),
        Message("tool", "sunny", tool_call_id="abcDEF123"),
    ]
    out = ChatTemplate(tiny_gguf.CHATML_TEMPLATE).render(describe_tools(chat, TOOLS))
    assert out.startswith("<|im_start|>system\nYou can call these tools")
    assert '"name": "add"' in out and '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}' in out
    assert "<|im_start|>tool\nsunny" in out


# --- grammars with llama.cpp ---------------------------------------------------------------


@pytest.fixture(scope="module")
def driver(tiny_llama: Path) -> Iterator[Driver]:
    model = Model(str(tiny_llama))
    yield Driver(model)
    model.close()


def test_lazy_grammar_is_free_until_the_marker_then_constrains_the_call(driver: Driver) -> None:
    syntax = tool_syntax(QWEN25)
    grammar = lazy_grammar(syntax, TOOLS)
    assert driver.accepts(grammar, "Any text at all, even { or <tool", complete=False)
    assert not driver.accepts(grammar, "Sure! <tool_call>\nnot a call", complete=False)
    for seed in range(8):
        text = "Sure! <tool_call>\n" + driver.walk(grammar, seed, prefix="Sure! <tool_call>\n", stop=0.8)
        content, calls = content_and_calls(parse(syntax, text, 7))
        assert content == "Sure! " and calls
        for name, args in calls:
            jsonschema.validate(args, SCHEMAS[name])


def test_lazy_grammar_for_bare_json_calls_starts_at_an_opening_brace(driver: Driver) -> None:
    syntax = tool_syntax(None)
    grammar = lazy_grammar(syntax, TOOLS)
    assert grammar.trigger_patterns == (JSON_START,)
    assert driver.accepts(grammar, "Hello {", complete=False)  # a brace inside text is text
    assert not driver.accepts(grammar, ' {"nam": 1', complete=False)
    for seed in range(6):
        text = driver.walk(grammar, seed, prefix="{")
        content, calls = content_and_calls(parse(syntax, "{" + text, 3))
        assert content == "" and len(calls) == 1
        jsonschema.validate(calls[0][1], SCHEMAS[calls[0][0]])


def test_a_trigger_fires_only_where_a_token_ends_it(driver: Driver) -> None:
    # llama.cpp starts a lazy grammar with the text from the trigger to the end of the token
    # that completed it; text the grammar does not allow there would abort the process. So
    # a trigger fires only when it ends a token (plus whitespace).
    model = driver.model
    tokens = model.tokenize("Sure! <tool_call>", add_special=False, parse_special=False)
    assert [model.piece(t) for t in tokens][-4:] == [b"c", b"a", b"ll", b">"]

    def state_after(word: str, rest: str) -> tuple[bool, bool]:
        grammar = Grammar(f"root ::= {literal(word)} {literal(rest)}\n", "tools", trigger_words=(word,))
        sampler = create_sampler(model, grammar)
        try:
            for t in tokens:
                lc.llama_sampler_accept(sampler, t)
            x, brace = (model.tokenize(c, add_special=False, parse_special=False)[0] for c in "x{")
            arr = driver._apply(sampler, np.array([x, brace]), np.zeros(2))
            return tuple(bool(v) for v in np.isfinite(arr["logit"]))  # type: ignore[return-value]
        finally:
            lc.llama_sampler_free(sampler)

    assert state_after("<tool_", "call>{") == (False, True)  # triggered: only "{" may follow
    assert state_after("<tool_cal", "X") == (True, True)  # ends inside "ll": never triggers, text stays free


# --- through the engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tiny_llama_tools: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="tools", path=str(tiny_llama_tools), n_threads=1, n_ctx=512)) as e:
        yield e


# Small tools: the tiny model's context is 512 tokens.
SMALL_TOOLS = [
    Tool(
        "add",
        "",
        {
            "type": "object",
            "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    Tool(
        "city", "", {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"]}
    ),
]
SMALL_SCHEMAS = {t.name: t.parameters for t in SMALL_TOOLS}


def request(choice: ToolChoice | None, seed: int, **sampling: object) -> ChatRequest:
    return ChatRequest(
        model="tools",
        messages=[Message("user", "What is the weather in Paris?")],
        tools=SMALL_TOOLS,
        tool_choice=choice,
        sampling=SamplingParams(**{"temperature": 1.0, "seed": seed, "max_tokens": 200, **sampling}),  # type: ignore[arg-type]
    )


def run(engine: Engine, req: ChatRequest) -> Collector:
    c = Collector()
    engine.submit("r", req, c)
    c.wait()
    return c


def eos_bias(engine: Engine) -> dict[int, float]:
    # The tiny model never ends on its own; with EOS pushed up it ends wherever the grammar allows.
    return {engine._model.eos: 200.0}


@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("required", "add")])
def test_forced_calls_parse_and_match_the_schema(engine: Engine, choice: ToolChoice) -> None:
    for seed in range(3):
        c = run(engine, request(choice, seed, logit_bias=eos_bias(engine)))
        assert isinstance(c.final, Done) and c.final.finish_reason == "tool_calls"
        content, calls = content_and_calls(c.events)
        assert content == "" and calls
        for name, args in calls:
            assert choice.name in (None, name)
            jsonschema.validate(args, SMALL_SCHEMAS[name])


def test_tool_choice_none_neither_renders_nor_parses_tools(engine: Engine) -> None:
    plain = ChatRequest(model="tools", messages=[Message("user", "What is the weather in Paris?")])
    assert engine.count_tokens(request(ToolChoice("none"), 0)) == engine.count_tokens(plain)
    assert engine.count_tokens(request(None, 0)) > engine.count_tokens(plain)
    c = run(engine, request(ToolChoice("none"), 1, max_tokens=30))
    assert all(isinstance(e, TextDelta) for e in c.events[2:-1])
    assert isinstance(c.final, Done) and c.final.finish_reason == "length"


def test_auto_with_bare_json_calls_on_a_template_without_tools(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="chatml", path=str(tiny_llama), n_threads=1, n_ctx=512)) as e:
        brace = e._model.tokenize("{", add_special=False, parse_special=False)[0]
        made = 0
        for seed in range(4):
            bias = {brace: 60.0, e._model.eos: 100.0}
            c = run(e, request(None, seed, logit_bias=bias))
            assert isinstance(c.final, Done)
            content, calls = content_and_calls(c.events)
            if calls:
                made += 1
                assert c.final.finish_reason == "tool_calls" and content == ""
                jsonschema.validate(calls[0][1], SMALL_SCHEMAS[calls[0][0]])
        assert made >= 2


def test_a_forced_call_naming_an_unknown_tool_is_refused_by_the_api_layer_not_here(engine: Engine) -> None:
    # The api layer checks tool_choice names; the engine must still not crash on one.
    c = run(engine, request(ToolChoice("required", "nope"), 0, logit_bias=eos_bias(engine)))
    assert isinstance(c.final, Failed) and c.final.error.param == "tool_choice"
    assert "'nope', which is not among the tools" in c.final.error.message
