"""Tool-call syntax: each template family's markers, recognised from the chat template's text,
and the prompt side of tools for templates that cannot render them."""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from spark.types import Message, Tool

Family = Literal["hermes", "xml", "glm", "llama3", "mistral", "gemma", "lfm2", "harmony", "template", "generic"]

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


@dataclass(frozen=True, slots=True)
class ParameterTags:
    """How a family writes a call's arguments as tags: for each, `key_open` key `key_close`, then
    `value_open` value `value_close`; `end` ends them (and the call)."""

    key_open: str
    key_close: str
    value_open: str
    value_close: str
    end: str


_TAG_OR_WORD = re.compile(r"<[^<>\s]*>|<?[^<\s]+")


@dataclass(frozen=True, slots=True)
class CallShape:
    """How a chat template writes calls that no family describes, learned by rendering probe calls
    through it (`spark.engine.toolcalls.learned`). With `json_calls`, each call is a JSON object naming
    its tool under `name_key` (in a JSON array with `array`) between `open` and `close`. Otherwise
    each is written `open` NAME `name_close` ARGUMENTS `end`, the next after `next`, the last followed
    by `close`; the arguments a JSON object, or tags (`params`); with `numbered`, each name is followed by
    `:N`, a number the model counts its calls with (Kimi K2's `functions.name:0`). Whitespace is as the
    template writes it."""

    open: str
    close: str
    name_close: str = ""
    end: str = ""
    next: str = ""
    params: ParameterTags | None = None
    json_calls: bool = False
    array: bool = False
    name_key: str = "name"
    args_key: str = "arguments"
    numbered: bool = False

    @property
    def opener(self) -> str:
        """The word that starts a group of calls."""
        return self.open.split()[0]

    @property
    def words(self) -> tuple[str, ...]:
        """Every tag and word of the syntax (the special tokens among them are rendered from their text):
        `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function` is three."""
        tags = self.params
        parts: tuple[str, ...] = (self.open, self.name_close, self.end, self.next, self.close)
        if tags is not None:
            parts += (tags.key_open, tags.key_close, tags.value_open, tags.value_close)
        return tuple(dict.fromkeys(word for part in parts for word in _TAG_OR_WORD.findall(part)))


# Qwen3-Coder, Qwen3.5: `<function=name>\n<parameter=city>\nParis\n</parameter>\n</function>`.
XML_PARAMETERS = ParameterTags("<parameter=", ">", "", "</parameter>", "</function>")
# GLM 4.5+: `<tool_call>name<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>`.
GLM_PARAMETERS = ParameterTags("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", HERMES_CLOSE)
# Gemma 4: `<|tool_call>call:name{key:<|"|>text<|"|>,n:2}<tool_call|>`, strings between <|"|> quotes.
GEMMA_CALL, GEMMA_CALL_END, GEMMA_QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
# LFM2: `<|tool_call_start|>[name(key="text", n=2), ...]<|tool_call_end|>`, calls written as Python.
LFM2_CALLS, LFM2_CALLS_END = "<|tool_call_start|>", "<|tool_call_end|>"
# OpenAI's harmony format (gpt-oss), whose calls are messages to a function: see spark.engine.harmony.
HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>")
# Tags and fences that models of any family put around a JSON call (llama.cpp's Hermes 2 Pro
# parser knows the same set); what they wrap counts only when it names one of the tools.
# Granite 3 and Phi-4-mini write `<|tool_call|>[...]` (Phi-4-mini closes it with `<|/tool_call|>`).
WRAPPER_TAGS = (HERMES_OPEN, "<function_call>", "<tools>", "<tool>", "<response>", "<json>", "<JSON>", "<|tool_call|>")
FENCE = "```"
# A lazy grammar for answers that are bare JSON calls starts at an opening brace that
# begins the output; what may follow it in the same token is what the grammar allows there.
JSON_START = '^[ \\t\\r\\n]*(\\{)( |\\n[ \\t]{0,20})?"?$'
_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class ToolSyntax:
    """How a model writes tool calls."""

    family: Family
    renders_tools: bool  # the template writes the tool list itself
    mistral_args: bool = False  # [TOOL_CALLS]name[ARGS]{...} rather than a JSON list
    shape: CallShape | None = None  # the "template" family's syntax, learned from its template

    @property
    def markers(self) -> tuple[str, ...]:
        """The marker texts of this family (often special tokens)."""
        return {
            "hermes": (HERMES_OPEN, HERMES_CLOSE),
            "xml": (HERMES_OPEN, HERMES_CLOSE),
            "glm": (HERMES_OPEN, HERMES_CLOSE),
            "llama3": (PYTHON_TAG,),
            "mistral": (MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID),
            "gemma": (GEMMA_CALL, GEMMA_CALL_END, GEMMA_QUOTE),
            "lfm2": (LFM2_CALLS, LFM2_CALLS_END),
            "harmony": HARMONY_MARKERS,
            "template": self.shape.words if self.shape else (),
            "generic": (),
        }[self.family]

    @property
    def name_key(self) -> str:
        return self.shape.name_key if self.shape else "name"

    @property
    def args_key(self) -> str:
        if self.shape:
            return self.shape.args_key
        return "parameters" if self.family == "llama3" else "arguments"


def tool_syntax(template: str | None, learned: Callable[[], CallShape | None] | None = None) -> ToolSyntax:
    """The tool-call syntax of a chat template (None: the fallback template). A template of no known
    family whose `learned` shape is found writes calls in that shape (the "template" family)."""
    src = template or ""
    renders = "tools" in src
    if HARMONY_MARKERS[1] in src:  # <|channel|>, as llama.cpp recognises the format
        return ToolSyntax("harmony", renders)
    if LFM2_CALLS in src or "List of tools: " in src:  # LFM2.5-Instruct's template lists tools, writes no call
        return ToolSyntax("lfm2", renders)
    if GEMMA_CALL + "call:" in src:
        return ToolSyntax("gemma", renders)
    if MISTRAL_CALLS in src:
        return ToolSyntax("mistral", renders, mistral_args=MISTRAL_ARGS in src)
    if HERMES_OPEN in src and GLM_PARAMETERS.key_open in src:
        return ToolSyntax("glm", renders)
    if HERMES_OPEN in src and XML_PARAMETERS.key_open in src:
        return ToolSyntax("xml", renders)
    if HERMES_OPEN in src:
        return ToolSyntax("hermes", renders)
    if PYTHON_TAG in src:
        return ToolSyntax("llama3", renders)
    shape = learned() if learned else None
    return ToolSyntax("template", renders, shape=shape) if shape else ToolSyntax("generic", renders)


def new_call_id(family: Family) -> str:
    """An id for a call; Mistral templates only accept 9 letters or digits when it comes back."""
    if family == "mistral":
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "call_" + secrets.token_hex(12)


def describe_tools(messages: list[Message], tools: list[Tool], default_system: str | None = None) -> list[Message]:
    """The conversation for a template that cannot render tools.

    The tools and the call format go into the system message; earlier calls
    become the JSON text the model is asked to write. Without a system message,
    they follow the model's `default_system` prompt, which still applies: the
    client sent none of its own.
    """
    listing = "\n".join(
        json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters}, ensure_ascii=False)
        for t in tools
    )
    guide = (
        "You can call these tools (their parameters are JSON Schemas):\n"
        f"{listing}\n"
        'To call a tool, answer with only a JSON object: {"name": "<tool name>", "arguments": {<arguments>}}. '
        "Otherwise, answer normally."
    )
    out = calls_as_text(messages)
    if out and out[0].role in ("system", "developer"):
        out[0] = Message(out[0].role, f"{out[0].text()}\n\n{guide}")
    else:
        out.insert(0, Message("system", f"{default_system}\n\n{guide}" if default_system else guide))
    return out


def calls_as_text(messages: list[Message], family: Family = "generic") -> list[Message]:
    """The conversation for a template that cannot render calls: earlier calls become the text the
    model writes for them, JSON unless its family writes them another way (LFM2's Python list), with
    or without tools in this request, so that the history reads the same when tool_choice is "none"."""
    out: list[Message] = []
    for m in messages:
        if not m.tool_calls:
            out.append(m)
            continue
        if family == "lfm2":
            listed = ", ".join(
                f"{c.name}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in _keywords(c.arguments))})"
                for c in m.tool_calls
            )
            calls = f"{LFM2_CALLS}[{listed}]{LFM2_CALLS_END}"
        else:
            calls = "\n".join(
                json.dumps({"name": c.name, "arguments": _json_or_text(c.arguments)}, ensure_ascii=False)
                for c in m.tool_calls
            )
        text = f"{m.text()}\n{calls}" if m.text() else calls
        out.append(Message(m.role, text, name=m.name, reasoning_content=m.reasoning_content))
    return out


def _keywords(arguments: str) -> list[tuple[str, Any]]:
    value = _json_or_text(arguments)
    return list(value.items()) if isinstance(value, dict) else []


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
