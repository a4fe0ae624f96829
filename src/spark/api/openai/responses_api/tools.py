"""The Responses API's `tools` -> spark.types tools.

The model sees function tools: those at the top level, and those of each `namespace` tool under
their own names (so names must not clash), calls to which name their namespace again on the
way out (`namespace_of`). Tools that OpenAI (or the client, from item types of its own) runs, such
as web search or a shell, have nothing to run them here: they are left out of what the model sees,
so that a client that always sends them (Codex sends `web_search`) is still answered. `custom`
tools (free-text input) are left out the same way.
"""

from __future__ import annotations

from typing import Any

import msgspec

from spark.api.common import OPENAI_TOOL_NAME, check_tools, refuse
from spark.errors import InvalidRequest
from spark.types import Tool


class ToolDef(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of `tools` (or of a namespace's `tools`): its `type` is checked by `read_tools`."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    tools: list[ToolDef] | None = None  # a namespace's


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
        "custom",
    }
)


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
                tool.type != "function" and tool.type not in LEFT_OUT,
                f"{where}.type",
                f"Tool type '{tool.type}' is not supported by this server: send 'function' and 'namespace' tools "
                "(OpenAI's hosted tools are left out of what the model sees).",
            )
            members = [(where, tool)]
        for inner, member in members:
            if member.type != "function":
                continue
            refuse(not member.name, f"{inner}.name", f"Missing required parameter: '{inner}.name'.")
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
    """The namespace of the function `name` among the `echoed` tools, if it is in one."""
    for tool in echoed:
        if tool["type"] == "namespace" and any(m["type"] == "function" and m["name"] == name for m in tool["tools"]):
            return str(tool["name"])
    return None
