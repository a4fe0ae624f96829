"""Chat template rendering in the sandbox."""

from __future__ import annotations

import json

import pytest

from spark.engine.template import FALLBACK_TEMPLATE, ChatTemplate
from spark.errors import InvalidRequest
from spark.types import Message, Tool, ToolCall

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_renders_messages_with_generation_prompt() -> None:
    t = ChatTemplate(CHATML)
    out = t.render([Message("user", "Hi")])
    assert out == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert not t.is_fallback


def test_developer_role_is_rendered_as_system() -> None:
    out = ChatTemplate(CHATML).render([Message("developer", "Be brief."), Message("user", "Hi")])
    assert out.startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_default_system_prompt_only_without_a_system_message() -> None:
    t = ChatTemplate(CHATML)
    out = t.render([Message("user", "Hi")], system_prompt="You are Spark.")
    assert out.startswith("<|im_start|>system\nYou are Spark.<|im_end|>\n<|im_start|>user")
    out = t.render([Message("system", "Mine."), Message("user", "Hi")], system_prompt="You are Spark.")
    assert "Spark" not in out and "Mine." in out


def test_sandbox_blocks_attribute_access() -> None:
    t = ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(InvalidRequest) as e:
        t.render([Message("user", "x")])
    assert e.value.param == "messages"
    assert "unsafe" in e.value.message


def test_what_a_template_changes_is_its_own_copy() -> None:
    # Kimi K2's template keeps a queue of call ids (`ids.append`, `ids.pop(0)`), as llama.cpp's renderer
    # allows; the conversation, tools and variables it is given are copies made for that rendering
    tools = [Tool("look", "", {"type": "object", "properties": {}})]
    variables = {"flags": ["a"]}
    t = ChatTemplate(
        "{% set q = namespace(ids=[]) %}{% set _ = q.ids.append(1) %}{% set _ = messages.append({'role': 'x'}) %}"
        "{% set _ = tools[0].function.parameters.update({'type': 'string'}) %}{% set _ = flags.append('b') %}"
        "{{ q.ids | length }} {{ messages | length }} {{ tools[0].function.parameters.type }} {{ flags | length }}"
    )
    chat = [Message("user", "x")]
    assert t.render(chat, tools=tools, variables=variables) == "1 2 string 2"
    assert len(chat) == 1 and tools[0].parameters["type"] == "object" and variables == {"flags": ["a"]}


def test_raise_exception_becomes_invalid_request_with_its_message() -> None:
    t = ChatTemplate("{% if messages[-1]['content'] == 'x' %}{{ raise_exception('no x please') }}{% endif %}ok")
    assert t.render([Message("user", "y")]) == "ok"
    with pytest.raises(InvalidRequest, match="no x please"):
        t.render([Message("user", "x")])


def test_fallback_is_chatml_when_the_model_has_no_template() -> None:
    t = ChatTemplate(None)
    assert t.is_fallback and t.source == FALLBACK_TEMPLATE
    assert t.render([Message("user", "Hi")]) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_template_that_does_not_compile_falls_back() -> None:
    t = ChatTemplate("{% for %}")
    assert t.is_fallback


def test_tojson_keeps_unicode_and_supports_indent() -> None:
    t = ChatTemplate("{{ messages[0]['content'] | tojson }}|{{ {'a': '<é>'} | tojson(indent=2) }}")
    assert t.render([Message("user", "ünï <b>")]) == '"ünï <b>"|{\n  "a": "<é>"\n}'


def test_globals_bos_eos_and_strftime() -> None:
    t = ChatTemplate(
        "{{ bos_token }}{{ strftime_now('%Y') | length }}{{ eos_token }}", bos_token="<s>", eos_token="</s>"
    )
    assert t.render([Message("user", "x")]) == "<s>4</s>"


def test_tools_and_tool_calls_are_passed_like_hugging_face() -> None:
    src = (
        "{% for t in tools %}{{ t['type'] }}:{{ t['function']['name'] }};{% endfor %}"
        "{% for m in messages %}{% if m.tool_calls is defined %}"
        "{% for c in m.tool_calls %}{{ c['function']['arguments']['city'] }}{% endfor %}"
        "{% endif %}{% if m.tool_call_id is defined %}[{{ m.tool_call_id }}:{{ m.content }}]{% endif %}{% endfor %}"
    )
    msgs = [
        Message("user", "weather?"),
        Message("assistant", None, tool_calls=[ToolCall("c1", "get_weather", '{"city": "Paris"}')]),
        Message("tool", "sunny", tool_call_id="c1"),
    ]
    out = ChatTemplate(src).render(msgs, tools=[Tool("get_weather", "", {"type": "object"})])
    assert out == "function:get_weather;Paris[c1:sunny]"


def test_trim_blocks_like_hugging_face() -> None:
    t = ChatTemplate("{% for m in messages %}\n  {{ m['content'] }}\n{% endfor %}")
    assert t.render([Message("user", "a"), Message("user", "b")]) == "  a\n  b\n"


# Gemma 2's own template: no system role, and turns must alternate.
GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


def test_a_template_without_a_system_role_gets_the_system_text_in_the_next_user_turn() -> None:
    t = ChatTemplate(GEMMA2, bos_token="<bos>")
    assert not t.takes_system and ChatTemplate(CHATML).takes_system
    out = t.render([Message("system", "Be brief."), Message("user", "Hi")])
    assert out == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    # the model's configured system prompt, a developer message, and one with no user turn after it
    assert "Be kind.\n\nHi" in t.render([Message("user", "Hi")], system_prompt="Be kind.")
    turns = [Message("user", "Hi"), Message("assistant", "Hello"), Message("developer", "Now in French.")]
    assert t.render(turns).endswith("<start_of_turn>user\nNow in French.<end_of_turn>\n<start_of_turn>model\n")


def test_a_template_that_drops_the_system_message_gets_it_in_the_user_turn() -> None:
    users_only = "{% for m in messages %}{% if m['role'] != 'system' %}[{{ m['role'] }}] {{ m['content'] }}\n{% endif %}{% endfor %}"
    t = ChatTemplate(users_only)
    assert t.render([Message("system", "Be brief."), Message("user", "Hi")]) == "[user] Be brief.\n\nHi\n"


def test_a_template_that_fails_anyway_is_not_rewritten() -> None:
    # it needs a variable that is never set: the probe learns nothing and messages stay as they are
    t = ChatTemplate("{{ messages[0]['content'] + undefined_thing.x }}")
    assert t.takes_system
    with pytest.raises(InvalidRequest):
        t.render([Message("system", "x"), Message("user", "Hi")])


def test_turns_that_do_not_alternate_are_made_to_where_the_template_insists() -> None:
    t = ChatTemplate(GEMMA2)
    two_users = [Message("user", "Hello."), Message("user", "Add 2 and 2.")]
    assert t.render(two_users) == "<start_of_turn>user\nHello.\n\nAdd 2 and 2.<end_of_turn>\n<start_of_turn>model\n"
    with_tool = [
        Message("user", "Add 2 and 2."),
        Message("assistant", '{"name": "add", "arguments": {"a": 2, "b": 2}}'),
        Message("tool", "4", tool_call_id="c1"),
        Message("system", "Answer in words."),
    ]
    assert "<start_of_turn>user\nTool result:\n4\n\nAnswer in words.<end_of_turn>" in t.render(with_tool)
    # a template that takes them as they are gets them as they are
    assert t.render(two_users) != ChatTemplate(CHATML).render(two_users)
    assert ChatTemplate(CHATML).render(two_users).count("<|im_start|>user") == 2


def test_a_conversation_that_opens_with_the_assistant_gets_an_empty_user_turn_first_where_the_template_insists() -> (
    None
):
    greeting = [Message("assistant", "Hi! How can I help?"), Message("user", "Name a colour.")]
    assert ChatTemplate(GEMMA2).render(greeting) == (
        "<start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\nHi! How can I help?<end_of_turn>\n"
        "<start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n"
    )
    # the system text still opens a user turn; a template that takes the greeting first gets it first
    out = ChatTemplate(GEMMA2).render([Message("system", "Be brief."), *greeting])
    assert "<start_of_turn>user\nBe brief.\n\nName a colour.<end_of_turn>" in out
    assert ChatTemplate(CHATML).render(greeting).startswith("<|im_start|>assistant\nHi!")


def test_a_refusal_that_alternating_turns_do_not_cure_is_the_templates_own() -> None:
    t = ChatTemplate("{% if messages | length > 1 %}{{ raise_exception('one message only') }}{% endif %}x")
    with pytest.raises(InvalidRequest, match="one message only"):
        t.render([Message("user", "a"), Message("assistant", "b")])


def test_parallel_calls_go_one_per_turn_where_the_template_takes_one() -> None:
    from engine.toolcalls.templates import LLAMA31, TOOLS

    t = ChatTemplate(LLAMA31, bos_token="<|begin_of_text|>")
    calls = [ToolCall("a", "get_weather", '{"city": "Paris"}'), ToolCall("b", "add", '{"a": 2, "b": 2}')]
    conversation = [
        Message("user", "Weather in Paris, and 2 + 2?"),
        Message("assistant", None, tool_calls=calls),
        Message("tool", "4", tool_call_id="b"),  # results may come back in any order
        Message("tool", "Sunny", tool_call_id="a"),
    ]
    full = t.render(conversation, tools=TOOLS)
    out = full[full.index("Weather in Paris, and") :]  # after the tools' listing
    weather, add = out.index('"get_weather"'), out.index('"add"')
    assert weather < out.index('"Sunny"') < add < out.index('"4"')  # each result right after its call
    assert out.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_call_ids_of_another_shape_are_given_as_nine_characters_where_the_template_takes_no_other() -> None:
    from engine.toolcalls.templates import MISTRAL_NEMO, TOOLS

    t = ChatTemplate(MISTRAL_NEMO, eos_token="</s>")
    conversation = [
        Message("user", "Weather in Paris?"),
        Message("assistant", None, tool_calls=[ToolCall("toolu_01AbCdEf", "get_weather", '{"city": "Paris"}')]),
        Message("tool", "Sunny", tool_call_id="toolu_01AbCdEf"),
    ]
    out = t.render(conversation, tools=TOOLS)
    call_id = out.split('"id": "')[1][:9]
    assert call_id.isalnum() and f'"call_id": "{call_id}"' in out  # the result names its call
    nine = [Message("user", "Hi"), Message("assistant", None, tool_calls=[ToolCall("AbCdE1234", "add", "{}")])]
    assert '"id": "AbCdE1234"' in t.render([*nine, Message("tool", "4", tool_call_id="AbCdE1234")], tools=TOOLS)


# Templates as published, in the shapes they take their input (llama.cpp's models/templates holds them).
CALLS = [ToolCall("call_1", "get_weather", '{"city": "Paris"}'), ToolCall("call_2", "get_weather", '{"city": "Oslo"}')]
WITH_CALLS = [
    Message("user", "Weather in Paris and Oslo?"),
    Message("assistant", None, tool_calls=CALLS),
    Message("tool", "Sunny", tool_call_id="call_1"),
    Message("tool", "Rain", tool_call_id="call_2"),
]
WEATHER = Tool("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}})


def test_the_generation_tag_of_hugging_face_templates_renders_its_content() -> None:
    # LFM2.5's templates mark the assistant's text for training masks
    src = "{% for m in messages %}{% generation %}[{{ m['content'] }}]{% endgeneration %}{% endfor %}"
    t = ChatTemplate(src)
    assert not t.is_fallback and t.render([Message("user", "Hi")]) == "[Hi]"


def test_tools_and_arguments_printed_as_they_are_read_as_json() -> None:
    # Apriel's template prints each tool; functionary's joins the arguments to a string
    printed = "{% for t in tools %}{{ t }}{% endfor %}|{% for c in messages[1].tool_calls %}{{ c.function.arguments }}{% endfor %}"
    out = ChatTemplate(printed).render(WITH_CALLS[:2], tools=[WEATHER])
    tool, args = out.split("|")
    assert json.loads(tool)["function"]["name"] == "get_weather" and args == '{"city": "Paris"}{"city": "Oslo"}'
    joined = "{% for c in messages[1].tool_calls %}{{ '<call>' + c.function.arguments + '</call>' }}{% endfor %}"
    assert ChatTemplate(joined).render(WITH_CALLS[:2]) == '<call>{"city": "Paris"}</call><call>{"city": "Oslo"}</call>'
    # and what a filter chain leaves goes to JSON as a list (DeepSeek-R1's template as llama.cpp ships it)
    mapped = "{{ messages[1].tool_calls | map(attribute='id') | tojson }}"
    assert ChatTemplate(mapped).render(WITH_CALLS[:2]) == '["call_1", "call_2"]'


def test_a_template_without_a_tool_role_gets_results_as_the_users_text() -> None:
    # Phi-3.5's renders system, user and assistant turns only: results would vanish
    roles = "{% for m in messages %}{% if m['role'] in ('user', 'assistant') %}<|{{ m['role'] }}|>{{ m['content'] }}{% endif %}{% endfor %}"
    out = ChatTemplate(roles).render(WITH_CALLS)
    assert "<|user|>Tool result:\nSunny<|user|>Tool result:\nRain" in out
    assert "Tool result" not in ChatTemplate(CHATML).render(WITH_CALLS)


def test_what_a_template_renders_of_calls_is_probed() -> None:
    contents = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # LFM2.5-Instruct's: calls are content
    assert not ChatTemplate(contents).renders_calls
    first = "{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.name }}{% endif %}{% endfor %}"
    assert ChatTemplate(first).renders_calls and not ChatTemplate(first).takes_parallel_calls
    assert ChatTemplate(CHATML).takes_parallel_calls
