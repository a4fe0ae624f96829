"""Calls and values written in a syntax other than JSON, read whole: Python calls (Llama's built-in
tools, LFM2's lists), Gemma 4's calls, and the values of parameter tags (read by the tool's schema)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from spark.engine.toolcalls.jsonscan import WS
from spark.engine.toolcalls.syntax import GEMMA_QUOTE

_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def loads(text: str) -> Any:
    """The JSON value of `text`, or None where it holds none."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def _python(text: str) -> ast.expr | None:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def python_call(text: str) -> tuple[str, str] | None:
    """(name, arguments JSON) of a Llama built-in tool call like `brave_search.call(query="x")`."""
    node = _python(text)
    return _call_of(node) if node is not None else None


def python_calls(text: str) -> list[tuple[str, str]] | None:
    """(name, arguments JSON) of each call in a Python list of them, as LFM2 writes them:
    `[get_weather(city="Paris"), add(a=1, b=2)]` (JSON's true, false and null read too)."""
    node = _python(text)
    if not isinstance(node, ast.List):
        return None
    calls = [_call_of(item) for item in node.elts]
    return None if None in calls else [c for c in calls if c is not None]


_JSON_WORDS = {"true": True, "false": False, "null": None}


def _call_of(node: ast.expr) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "call" and isinstance(func.value, ast.Name):
        name = func.value.id
    elif isinstance(func, ast.Name):
        name = func.id
    else:
        return None
    try:
        args = {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return name, json.dumps(args, ensure_ascii=False)


def _literal(node: ast.expr) -> Any:
    """A Python literal, where JSON's words count as Python's."""
    if isinstance(node, ast.Name) and node.id in _JSON_WORDS:
        return _JSON_WORDS[node.id]
    if isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    return ast.literal_eval(node)


def gemma_call(text: str) -> tuple[str, str] | None:
    """(name, arguments JSON) of a Gemma 4 call: `call:name{key:<|"|>text<|"|>,n:2}` (None if it is none)."""
    found = re.fullmatch(r"\s*call:([A-Za-z0-9_.:-]{1,64})\s*(\{.*\})\s*", text, re.DOTALL)
    if found is None:
        return None
    try:
        value, end = _gemma_value(found.group(2), 0)
    except (ValueError, IndexError, RecursionError):
        return None
    if found.group(2)[end:].strip() or not isinstance(value, dict):
        return None
    return found.group(1), json.dumps(value, ensure_ascii=False)


def _gemma_value(text: str, i: int) -> tuple[Any, int]:
    """The value that starts at `text[i]` (after spaces) in Gemma's call syntax, and where it ends."""
    while text[i] in WS:
        i += 1
    if text.startswith(GEMMA_QUOTE, i):
        end = text.index(GEMMA_QUOTE, i + len(GEMMA_QUOTE))
        return text[i + len(GEMMA_QUOTE) : end], end + len(GEMMA_QUOTE)
    if text[i] in "{[":
        closer = "}]"[text[i] == "["]
        out_list: list[Any] = []
        out_map: dict[str, Any] = {}
        i += 1
        while True:
            while text[i] in WS or text[i] == ",":
                i += 1
            if text[i] == closer:
                return (out_list if closer == "]" else out_map), i + 1
            if closer == "]":
                item, i = _gemma_value(text, i)
                out_list.append(item)
                continue
            if text.startswith(GEMMA_QUOTE, i):  # a quoted key
                key, i = _gemma_value(text, i)
                colon = text.index(":", i)
                bad = bool(text[i:colon].strip())
            else:
                colon = text.index(":", i)
                key = text[i:colon].strip()
                bad = not _KEY.fullmatch(key)
            if bad:
                raise ValueError("not a key and its colon")
            out_map[key], i = _gemma_value(text, colon + 1)
    end = i
    while end < len(text) and text[end] not in ",}]":
        end += 1
    word = text[i:end].strip()
    value = loads(word)
    return (word if value is None and word != "null" else value), end


def _kinds(schema: Any) -> list[str]:
    """The types a parameter's schema names (`"type": "string"` or `"type": ["string", "null"]`)."""
    kinds = schema.get("type") if isinstance(schema, Mapping) else None
    return [kinds] if isinstance(kinds, str) else kinds or []


def is_text(schema: Any) -> bool:
    """Whether a parameter of this schema may be a string: its value is then the text as written."""
    return "string" in _kinds(schema)


def parameter(text: str, schema: Any) -> Any:
    """A parameter's value from its text: the text itself where the schema says string, else the JSON
    it holds (a number, an object...), else the text."""
    if is_text(schema):
        return text
    if "boolean" in _kinds(schema) and text.strip() in ("True", "False"):  # as a Python-minded template writes it
        return text.strip() == "True"
    value = loads(text)
    return text if value is None and text.strip() != "null" else value
