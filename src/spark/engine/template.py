"""Chat templates: render a conversation into the model's prompt text.

The template comes from the GGUF file (`tokenizer.chat_template`), so it is
untrusted input: it runs in Jinja's `SandboxedEnvironment` (no way to Python's
internals) on copies of the conversation and tools made for that rendering, so
what it changes of them (Kimi K2's keeps a queue of call ids, as llama.cpp's
renderer allows) ends with it; it gets the globals and filters Hugging Face's `apply_chat_template` provides
(`raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII text and
does no HTML escaping). A model without a template gets `FALLBACK_TEMPLATE`
(ChatML), which most instruction-tuned models of the last years understand.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import SandboxedEnvironment

from spark.engine.toolcalls.learned import learn_shape
from spark.engine.toolcalls.syntax import CallShape
from spark.errors import InvalidRequest
from spark.types import Message, TextPart, Tool

log = logging.getLogger(__name__)

# ChatML, as used by Qwen, SmolLM, Hermes and many others.
FALLBACK_TURN_END = "<|im_end|>"
FALLBACK_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)


class _TemplateRaised(jinja2.TemplateError):
    """What `raise_exception(...)` inside a template raises."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys, default=_listed
    )


def _listed(value: Any) -> list[Any]:
    """What `tojson` makes of what a filter chain leaves (a `map` gives a generator): its items."""
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable") from None


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`, which Hugging Face's templates use to mark the assistant's
    text for training masks (LFM2.5's, for one): rendered as its content."""

    tags = {"generation"}  # noqa: RUF012 (jinja2 declares it on the base class)

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _environment() -> SandboxedEnvironment:
    # trim_blocks/lstrip_blocks, loopcontrols and the generation tag match Hugging Face, which
    # every published template is written and tested against.
    env = SandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols, _Generation],
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    return env


class ChatTemplate:
    """A compiled chat template plus the special-token strings it may use."""

    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        """Compile `source`; with no source (or one Jinja cannot parse) use `FALLBACK_TEMPLATE`."""
        self.bos_token = bos_token
        self.eos_token = eos_token
        env = _environment()
        self.is_fallback = True
        self.source = FALLBACK_TEMPLATE
        if source:
            try:
                self._template = env.from_string(source)
                self.source = source
                self.is_fallback = False
            except jinja2.TemplateSyntaxError as e:
                log.warning("the model's chat template does not compile (%s); using ChatML", e)
        if self.is_fallback:
            self._template = env.from_string(FALLBACK_TEMPLATE)

    @functools.cached_property
    def takes_system(self) -> bool:
        """Whether the template renders a system message. Gemma 2's and early Mistral templates raise
        on one, others drop it; their system text then goes to the next user turn (llama-server does
        the same). Probed once, with a marker."""
        marker = "spark-system-probe"

        def probe(*messages: dict[str, str]) -> str:
            return self._template.render(
                messages=list(messages), add_generation_prompt=True, bos_token=self.bos_token, eos_token=""
            )

        user = {"role": "user", "content": "hi"}
        try:
            probe(user)
        except Exception:  # fails without a system message too: nothing to learn from a probe
            return True
        try:
            return marker in probe({"role": "system", "content": marker}, user)
        except Exception:
            return False

    @functools.cached_property
    def _tool_turns(self) -> tuple[int, bool]:
        """How many of an assistant turn's two calls the template renders, and whether it renders tool
        results. Probed once, with markers."""
        names = ("spark_probe_first", "spark_probe_second")
        calls = [
            {"id": f"spark_probe_id_{i}", "type": "function", "function": {"name": n, "arguments": _JsonObject()}}
            for i, n in enumerate(names)
        ]
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            *({"role": "tool", "content": "spark_probe_result", "tool_call_id": c["id"]} for c in calls),
        ]
        try:
            text = self._template.render(messages=messages, add_generation_prompt=True, bos_token="", eos_token="")
        except Exception:  # a template that refuses them says so when it meets them: see `render`
            return len(names), True
        return sum(n in text for n in names), "spark_probe_result" in text

    @functools.cached_property
    def call_shape(self) -> CallShape | None:
        """How the template writes calls, where it is learned from probe calls (`toolcalls.learned`)."""

        def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], add_generation_prompt: bool) -> str:
            for m in messages:
                for call in m.get("tool_calls", ()):
                    call["function"]["arguments"] = _JsonObject(call["function"]["arguments"])
            return self._template.render(
                messages=messages,
                tools=[_JsonObject(t) for t in tools],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )

        return learn_shape(render)

    @property
    def renders_calls(self) -> bool:
        """Whether the template renders an assistant turn's calls at all (DeepSeek-R1's distills drop a
        turn of calls whose content is not none); where it does not, they are given to it as text."""
        return self._tool_turns[0] > 0

    @property
    def takes_parallel_calls(self) -> bool:
        """Whether the template renders every call of a turn. gpt-oss's renders only the first (its
        model makes one call per turn); such a template gets a turn per call."""
        return self._tool_turns[0] != 1

    def render(
        self,
        messages: list[Message],
        *,
        tools: list[Tool] | None = None,
        system_prompt: str | None = None,
        add_generation_prompt: bool = True,
        image_marker: str = "",
        variables: dict[str, Any] | None = None,
    ) -> str:
        """The prompt text for `messages`.

        The developer role is rendered as system. When no message is a system
        (or developer) message, `system_prompt` (if given) is prepended as one.
        Image parts become `image_marker` in the text. `variables` are extra
        template variables (e.g. `enable_thinking`). Raises `InvalidRequest`
        when the template fails, with its message.
        """
        rendered = [_message_dict(m, image_marker) for m in messages]
        if system_prompt and not any(m.role in ("system", "developer") for m in messages):
            rendered.insert(0, {"role": "system", "content": system_prompt})
        if not self.takes_system:
            rendered = _system_into_user(rendered)
        if not self.takes_parallel_calls:
            rendered = _one_call_per_turn(rendered)
        if not self._tool_turns[1]:  # Phi-3.5's renders no tool role: results become the user's text
            rendered = [_result_as_user(m) for m in rendered]
        context: dict[str, Any] = {
            **copy.deepcopy(variables or {}),
            "messages": rendered,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        if tools:
            context["tools"] = [
                _JsonObject(
                    type="function",
                    function={"name": t.name, "description": t.description, "parameters": copy.deepcopy(t.parameters)},
                )
                for t in tools
            ]
        try:
            return self._template.render(**context)
        except Exception as e:  # the template is untrusted code: any failure is its own
            refusal = e
        # Some templates refuse what a conversation may hold: Gemma's insist that user and assistant turns
        # alternate, Llama 3.1's take one tool call per turn, Mistral's call ids of 9 letters or digits
        # (another client's ids come back too). Such a template gets the same conversation in the shape
        # it takes, where that is what it refused.
        reshapes = (_thinking_before_calls, _arguments_as_text, _alternating, _one_call_per_turn, _nine_character_ids)
        for reshaped in (reshape(rendered) for reshape in reshapes):
            if reshaped != rendered:
                try:
                    return self._template.render(**{**context, "messages": reshaped})
                except Exception:
                    continue
        raise InvalidRequest(f"The model's chat template rejected these messages: {refusal}", param="messages")


def _alternating(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as alternating user and assistant turns, after a leading system message: a tool
    result or a later system message becomes user text, turns of one role in a row become one, and an
    assistant turn that opens the conversation (a chat app's greeting) follows an empty user turn."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        turn = _result_as_user(message)
        if message["role"] == "system" and i > 0:
            turn = {"role": "user", "content": message["content"]}
        if turn["role"] == "assistant" and (not out or out[-1]["role"] == "system"):  # only a leading system
            out.append({"role": "user", "content": ""})
        last = out[-1] if out else None
        if last is None or last["role"] != turn["role"] or turn["role"] not in ("user", "assistant"):
            out.append(turn)
            continue
        joined = {**last, **turn, "content": "\n\n".join(c for c in (last["content"], turn["content"]) if c)}
        calls = [*last.get("tool_calls", ()), *turn.get("tool_calls", ())]
        out[-1] = {**joined, "tool_calls": calls} if calls else joined
    return out


def _result_as_user(message: dict[str, Any]) -> dict[str, Any]:
    """A tool result as the user's text, for templates that take no tool turns."""
    if message["role"] != "tool":
        return message
    return {"role": "user", "content": f"Tool result:\n{message['content']}"}


def _arguments_as_text(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with call arguments as JSON text, for templates that join them to strings
    (functionary's)."""
    return [
        {
            **m,
            "tool_calls": [
                {**c, "function": {**c["function"], "arguments": str(c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ],
        }
        if m.get("tool_calls")
        else m
        for m in messages
    ]


def _one_call_per_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with an assistant turn per tool call, each call's result right after it (matched by
    id; results that match no call follow the last one)."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        calls = message.get("tool_calls") or []
        i += 1
        if len(calls) < 2:
            out.append(message)
            continue
        results = []
        while i < len(messages) and messages[i]["role"] == "tool":
            results.append(messages[i])
            i += 1
        for n, call in enumerate(calls):
            out.append({**message, "content": message["content"] if n == 0 else "", "tool_calls": [call]})
            out.extend(r for r in results if r.get("tool_call_id") == call["id"])
        ids = {call["id"] for call in calls}
        out.extend(r for r in results if r.get("tool_call_id") not in ids)
    return out


def _nine_character_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with each tool call id as 9 letters or digits (the same id, the same digits)."""

    def short(call_id: str) -> str:
        return call_id if len(call_id) == 9 and call_id.isalnum() else hashlib.sha256(call_id.encode()).hexdigest()[:9]

    out = []
    for message in messages:
        changed = dict(message)
        if "tool_calls" in message:
            changed["tool_calls"] = [{**c, "id": short(c["id"])} for c in message["tool_calls"]]
        if "tool_call_id" in message:
            changed["tool_call_id"] = short(message["tool_call_id"])
        out.append(changed)
    return out


def _thinking_before_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with an assistant turn's reasoning, not its text, before its calls (gpt-oss's
    template takes one or the other there, as llama-server gives it)."""
    return [{**m, "content": ""} if m.get("tool_calls") and m.get("thinking") and m["content"] else m for m in messages]


def _system_into_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template without a system role: each system text opens the next user turn (a
    blank line after it), or becomes a user turn where none follows."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        if message["role"] == "system":
            pending.append(message["content"])
            continue
        if pending and message["role"] == "user":
            out.append({**message, "content": "\n\n".join([*pending, message["content"]])})
            pending = []
        else:
            out.append(message)
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def _message_dict(message: Message, image_marker: str) -> dict[str, Any]:
    """A message as the dict Hugging Face templates expect (unset fields left out)."""
    content = message.content
    if isinstance(content, list):
        text = "".join(p.text if isinstance(p, TextPart) else image_marker for p in content)
    else:
        text = content or ""
    out: dict[str, Any] = {
        "role": "system" if message.role == "developer" else message.role,
        "content": text,
    }
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.name, "arguments": _arguments(tc.arguments)},
            }
            for tc in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.reasoning_content is not None:
        # Qwen3's and DeepSeek's templates read `reasoning_content`; gpt-oss's reads `thinking`.
        out["reasoning_content"] = out["thinking"] = message.reasoning_content
    return out


class _JsonObject(dict[str, Any]):
    """A call's arguments or a tool: a mapping for the templates that apply `tojson` or read its items,
    which prints as its JSON text in those that print it as it is (Apriel's tool list)."""

    def __str__(self) -> str:
        return json.dumps(self, ensure_ascii=False)


def _arguments(text: str) -> Any:
    """Tool-call arguments as a JSON object when they parse (templates apply `tojson`), else the text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return _JsonObject(value) if isinstance(value, dict) else text
