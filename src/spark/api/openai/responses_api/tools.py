"""The Responses API's `tools` -> spark.types tools.

The model sees function tools: those at the top level, and those of each `namespace` tool under
their own names (so names must not clash), calls to which name their namespace again on the
way out (`namespace_of`). Tools that OpenAI (or the client, from item types of its own) runs, such
as web search or a shell, have nothing to run them here: they are left out of what the model sees,
so that a client that always sends them (Codex sends `web_search`) is still answered.

A `custom` tool (free-text input; Codex sends `apply_patch` as one to some models) is seen as a
function of one string parameter, `input`, as OpenAI's own models see it: its call's arguments
(`{"input": "..."}`) come back as the raw text (`custom_input`, or `InputDecoder` as they stream).
A `regex` format is held to by the grammar (a JSON-schema `pattern`); a `lark` grammar cannot be
enforced here, so the model is shown it and the input is free text.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import msgspec

from spark.api.common import OPENAI_TOOL_NAME, check_tools, refuse
from spark.errors import InvalidRequest
from spark.types import Tool


class CustomFormat(msgspec.Struct, frozen=True, kw_only=True):
    """A custom tool's `format`: free `text`, or a `grammar` (`lark` or `regex`) its input follows."""

    type: Literal["text", "grammar"]
    syntax: Literal["lark", "regex"] | None = None
    definition: str | None = None


class ToolDef(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of `tools` (or of a namespace's `tools`): its `type` is checked by `read_tools`."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    tools: list[ToolDef] | None = None  # a namespace's
    format: CustomFormat | None = None  # a custom tool's


# OpenAI's tool types that no local model can be given (see the module's docstring)
LEFT_OUT = frozenset(
    {
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer",
        "computer_use",
        "computer_use_preview",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
        "programmatic_tool_calling",
    }
)
CUSTOM_INPUT = "input"  # the one parameter a custom tool is seen with


def read_tools(wire: list[ToolDef]) -> list[Tool]:
    """The function tools the model sees (a namespace's in its place); bad ones, and names used
    twice (across namespaces too), raise `InvalidRequest` naming where."""
    named: dict[str, str] = {}  # name -> where it is given
    tools: list[Tool] = []
    for i, tool in enumerate(wire):
        where = f"tools[{i}]"
        if tool.type == "namespace":
            refuse(not tool.name, f"{where}.name", f"Missing required parameter: '{where}.name'.")
            members = [(f"{where}.tools[{j}]", member) for j, member in enumerate(tool.tools or ())]
            for inner, member in members:
                refuse(
                    member.type not in ("function", "custom"),
                    f"{inner}.type",
                    f"A namespace holds 'function' and 'custom' tools, not '{member.type}'.",
                )
        else:
            refuse(
                tool.type not in ("function", "custom") and tool.type not in LEFT_OUT,
                f"{where}.type",
                f"Tool type '{tool.type}' is not supported by this server: send 'function', 'custom' and "
                "'namespace' tools (OpenAI's hosted tools are left out of what the model sees).",
            )
            members = [(where, tool)]
        for inner, member in members:
            if member.type not in ("function", "custom"):
                continue
            refuse(not member.name, f"{inner}.name", f"Missing required parameter: '{inner}.name'.")
            if member.type == "custom":
                function = Tool(member.name or "", member.description or "", _custom_parameters(member.format, inner))
            else:
                function = Tool(
                    member.name or "", member.description or "", member.parameters or {}, strict=bool(member.strict)
                )
            check_tools([function], f"{inner}.name", f"{inner}.parameters", names=OPENAI_TOOL_NAME)
            if function.name in named:
                raise InvalidRequest(
                    f"Tool name '{function.name}' is used twice ({named[function.name]}.name and {inner}.name): "
                    "the model sees a namespace's tools by their own names.",
                    param=f"{inner}.name",
                )
            named[function.name] = inner
            tools.append(function)
    return tools


def echoed_tools(sent: list[Any]) -> list[Any]:
    """The request's `tools` as the response object repeats them: as sent, each function with
    all of its fields (the SDKs read them back)."""
    return [_echoed(tool) for tool in sent]


def _echoed(tool: dict[str, Any]) -> dict[str, Any]:
    if tool["type"] == "function":
        fields = ("name", "description", "parameters", "strict")
        return {"type": "function", **{field: tool.get(field) for field in fields}}
    if tool["type"] == "namespace":
        return {**tool, "tools": [_echoed(member) for member in tool.get("tools") or ()]}
    return tool


def namespace_of(echoed: list[Any], name: str) -> str | None:
    """The namespace of the tool `name` among the `echoed` tools, if it is in one."""
    for tool in echoed:
        if tool["type"] == "namespace" and any(_seen(m) and m["name"] == name for m in tool["tools"]):
            return str(tool["name"])
    return None


def is_custom(echoed: list[Any], name: str) -> bool:
    """Whether `name` is a custom tool among the `echoed` tools (a namespace's too): its calls are
    `custom_tool_call` items."""
    members = [m for t in echoed if t["type"] == "namespace" for m in t["tools"]]
    return any(t["type"] == "custom" and t.get("name") == name for t in [*echoed, *members])


def _seen(tool: dict[str, Any]) -> bool:
    return tool["type"] in ("function", "custom")


def custom_input(arguments: str) -> str:
    """A custom tool call's raw input from the arguments the model wrote: their `input` (as far as
    it got, where the answer cut them short); arguments of another shape as written, or the one
    string they hold."""
    try:
        value = json.loads(arguments)
    except ValueError:
        decoder = InputDecoder()
        text = decoder.feed(arguments)
        return text if decoder.started else arguments
    if isinstance(value, dict):
        if isinstance(value.get(CUSTOM_INPUT), str):
            return str(value[CUSTOM_INPUT])
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:  # a model that named the parameter its own way
            return strings[0]
    return arguments


_OPENING = re.compile(r'\s*\{\s*"' + CUSTOM_INPUT + r'"\s*:\s*"')
_HIGH_SURROGATE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")


class InputDecoder:
    """A custom tool call's input as its arguments stream: `feed` each piece of their JSON text,
    get the text of `input` it adds (an escape split across pieces waits for its end)."""

    def __init__(self) -> None:
        self._text = ""
        self._at: int | None = None  # where the undecoded rest of the string starts, once it opened
        self._over = False  # the string ended (or could not be read)
        self.decoded = ""  # the text of `input` so far

    @property
    def started(self) -> bool:
        """Whether the arguments opened as `{"input": "`."""
        return self._at is not None

    def feed(self, piece: str) -> str:
        """The text of `input` that `piece` of the arguments adds."""
        self._text += piece
        if self._at is None:
            opening = _OPENING.match(self._text)
            if opening is None:
                return ""
            self._at = opening.end()
        if self._over:
            return ""
        start, end = self._at, self._safe_end(self._at)
        self._at = end
        try:
            text = str(json.loads('"' + self._text[start:end] + '"', strict=False))
        except ValueError:  # an escape JSON has not: what follows is left to the call's whole arguments
            self._over = True
            return ""
        self.decoded += text
        return text

    def _safe_end(self, i: int) -> int:
        """Where the decodable text from `i` ends: before the string's closing quote, or before an
        escape (a surrogate pair) that has not all come yet."""
        text = self._text
        while i < len(text):
            if text[i] == '"':
                self._over = True
                return i
            if text[i] != "\\":
                i += 1
                continue
            if i + 1 >= len(text):
                return i
            if text[i + 1] != "u":
                i += 2
                continue
            width = 12 if _HIGH_SURROGATE.match(text, i) else 6
            if i + width > len(text):
                return i
            i += width
        return i


def _custom_parameters(form: CustomFormat | None, where: str) -> dict[str, Any]:
    """The parameters schema a custom tool is seen with: one string, `input`, held to a `regex`
    format's pattern; a `lark` grammar is shown to the model, which the grammar cannot enforce."""
    text: dict[str, Any] = {"type": "string"}
    if form is not None and form.type == "grammar":
        param = f"{where}.format"
        refuse(form.syntax is None, f"{param}.syntax", f"Missing required parameter: '{param}.syntax'.")
        refuse(form.definition is None, f"{param}.definition", f"Missing required parameter: '{param}.definition'.")
        definition = form.definition or ""
        if form.syntax == "regex":
            text["description"] = f"Text matching this regular expression: {definition}"
            if _compiles(definition):  # one Python cannot read (Rust's own syntax) leaves the text free
                text["pattern"] = definition
        else:
            text["description"] = f"Text in this Lark grammar:\n{definition}"
    return {
        "type": "object",
        "properties": {CUSTOM_INPUT: text},
        "required": [CUSTOM_INPUT],
        "additionalProperties": False,
    }


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True
