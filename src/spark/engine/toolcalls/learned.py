"""A chat template's own call syntax, learned by rendering probe calls through it.

Many templates write calls in a syntax no family describes: DeepSeek's
`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name```json{...}```...`, MiniMax's
`<minimax:tool_call><invoke name="..."><parameter name="...">...`, Seed-OSS's `<seed:tool_call>`,
Nemotron 2's `<TOOLCALL>[...]</TOOLCALL>`, Cohere's `<|START_ACTION|>`, Kimi K2's numbered
`functions.name:0`... Rendering an assistant turn with two probe calls shows where a call's name and
arguments go and what text surrounds them (llama.cpp learns formats from templates the same way).
What is learned is kept only when the parser reads a second rendering, with other names and values,
back as the same calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from spark.engine.toolcalls.parser import ToolCallParser
from spark.engine.toolcalls.syntax import CallShape, ParameterTags, ToolSyntax
from spark.types import ToolCallDelta

# messages, tools, add_generation_prompt -> the template's text
Render = Callable[[list[dict[str, Any]], list[dict[str, Any]], bool], str]

_PROBE = (("spark_probe_one", "spark_probe_two"), ("spark_key_a", "spark_key_b"), ("spark_value_a", "spark_value_b"))
_CHECK = (("get_check_first", "get_check_second"), ("city", "unit"), ("Paris, France", "celsius"))
_TEXT, _USER = "spark_probe_text", "spark_probe_user"
_TAG = re.compile(r"<[^<>\s]+>")
_CLOSING_TAGS = re.compile(r"^\s*(</[^<>\s]+>\s*)+")
_EMPTY_BLOCK = re.compile(r"^\s*<([^<>\s/]+)>\s*</\1>\s*")  # Kimi K2 Thinking's `<think></think>`
_NUMBER = re.compile(r"^:\d+")
_NAME_KEY = re.compile(r'"(name|tool_name)"\s*:\s*"$')
_ARGS_KEYS = ("arguments", "parameters")
_DECODER = json.JSONDecoder()


def learn_shape(render: Render) -> CallShape | None:
    """How the template behind `render` writes calls, or None where it cannot be learned (no calls
    rendered, a name written twice, ids between calls, a shape the parser misreads)."""
    try:
        shape = _shape(render, *_PROBE)
        return shape if shape is not None and _reads_back(render, shape) else None
    except Exception:  # the template is untrusted code; a probe it refuses teaches nothing
        return None


def _probe(names: tuple[str, str], keys: tuple[str, str], values: tuple[str, str]) -> tuple[list[Any], list[Any]]:
    """Two calls of the same arguments, and the tools they name (string parameters)."""
    args = dict(zip(keys, values, strict=True))
    calls = [
        {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": args}} for name in names
    ]
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in keys}, "required": list(keys)}
    tools = [{"type": "function", "function": {"name": n, "description": "", "parameters": schema}} for n in names]
    return calls, tools


def _turn(render: Render, names: tuple[str, str], keys: tuple[str, str], values: tuple[str, str]) -> str:
    """The text of an assistant turn making two calls, as the model writes it (without the text that
    ends a turn)."""
    calls, tools = _probe(names, keys, values)
    user = {"role": "user", "content": _USER}
    turn = render([user, {"role": "assistant", "content": "", "tool_calls": calls}], tools, False)
    prompt = render([user], tools, True)
    text = render([user, {"role": "assistant", "content": _TEXT}, user], tools, False)
    # the turn starts where it parts from the prompt, at a tag's start (`<｜Assistant｜><`: `<think>` or a call)
    start = _common_prefix(prompt, turn)
    while start > 0 and not (turn[start - 1] in ">]" or turn[start - 1].isspace()):
        start -= 1
    # the end of a thinking block the prompt opened, or an empty one the turn writes
    seg = _EMPTY_BLOCK.sub("", _CLOSING_TAGS.sub("", turn[start:], count=1), count=1)
    # the turn ends where a turn of text ends: at the first word after its text, or any tag up to the next turn
    after_text = text[text.find(_TEXT) + len(_TEXT) : text.rfind(_USER)] if _TEXT in text else ""
    enders = {*_TAG.findall(after_text), *after_text.split()[:1]}
    ends = [at for at in (seg.find(e, seg.rfind(names[1])) for e in enders) if at != -1]
    return seg[: min(ends, default=len(seg))].rstrip()


def _shape(render: Render, names: tuple[str, str], keys: tuple[str, str], values: tuple[str, str]) -> CallShape | None:
    seg = _turn(render, names, keys, values)
    if any(seg.count(n) != 1 for n in names) or seg.find(names[0]) > seg.find(names[1]):
        return None
    a = seg.find(names[0])
    json_call = _NAME_KEY.search(seg[:a])
    if json_call:
        return _json_shape(seg, seg.rfind("{", 0, a), json_call.group(1), names, dict(zip(keys, values, strict=True)))
    return _named_shape(seg, names, keys, values)


def _json_shape(seg: str, brace: int, name_key: str, names: tuple[str, str], args: dict[str, str]) -> CallShape | None:
    """Calls as JSON objects naming their tool (in an array or one after another), between two texts."""
    before = seg[:brace].rstrip()
    array = before.endswith("[")
    at = len(before) - 1 if array else brace
    if array:
        value, end = _DECODER.raw_decode(seg, at)
        objects = value if isinstance(value, list) else []
    else:
        objects, end = [], at
        for _ in names:
            end = len(seg) - len(seg[end:].lstrip())
            value, end = _DECODER.raw_decode(seg, end)
            objects.append(value)
    if len(objects) != len(names) or any(
        not isinstance(o, dict) or o.get(name_key) != n for o, n in zip(objects, names, strict=True)
    ):
        return None
    args_key = next((k for k in _ARGS_KEYS if objects[0].get(k) == args), None)
    open_ = seg[:at]
    if args_key is None or not open_.strip():
        return None  # a bare JSON call: the generic family reads it
    return CallShape(open_, seg[end:], json_calls=True, array=array, name_key=name_key, args_key=args_key)


def _named_shape(seg: str, names: tuple[str, str], keys: tuple[str, str], values: tuple[str, str]) -> CallShape | None:
    """Calls written as a name, then its arguments (JSON, or tags), between texts of their own."""
    a, b = seg.find(names[0]), seg.find(names[1])
    first = _arguments(seg, a + len(names[0]), b, keys, values)
    second = _arguments(seg, b + len(names[1]), len(seg), keys, values)
    if first is None or second is None or first[2] != second[2]:
        return None
    # Kimi K2 numbers its calls after their names (`functions.name:0`, `functions.add:1`)
    numbered = first[0] != second[0] and _NUMBER.match(first[0]) is not None
    name_close, after_first, params = first
    if numbered:
        name_close = _NUMBER.sub("", name_close, count=1)
    if name_close != (_NUMBER.sub("", second[0], count=1) if numbered else second[0]):
        return None
    between, close_all = seg[after_first:b], seg[second[1] :]
    end = _shared_start(between, close_all)
    open_ = seg[:a]
    if not open_.strip():
        return None
    tags = params and ParameterTags(*params, end=end.strip())
    return CallShape(open_, close_all[len(end) :], name_close, end, between[len(end) :], tags, numbered=numbered)


def _arguments(
    seg: str, start: int, stop: int, keys: tuple[str, str], values: tuple[str, str]
) -> tuple[str, int, tuple[str, str, str, str] | None] | None:
    """The text between a call's name and its arguments, where they end, and (for arguments written
    as tags) the four tags around each key and value."""
    args = dict(zip(keys, values, strict=True))
    brace = seg.find("{", start, stop)
    while brace != -1:
        try:
            value, end = _DECODER.raw_decode(seg, brace)
        except ValueError:
            value = None
        if value == args:
            return seg[start:brace], end, None
        brace = seg.find("{", brace + 1, stop)
    at = [seg.find(t, start, stop) for t in (keys[0], values[0], keys[1], values[1])]
    if -1 in at or at != sorted(at):
        return None
    ka, va, kb, vb = at
    gaps = (seg[start:ka], seg[ka + len(keys[0]) : va], seg[va + len(values[0]) : kb], seg[kb + len(keys[1]) : vb])
    if gaps[1] != gaps[3]:
        return None
    shared = _common_suffix(gaps[0], gaps[2])
    key_open = shared[max(shared.rfind("<"), shared.rfind("["), 0) :].strip()
    value_close = gaps[2][: len(gaps[2]) - len(key_open)].strip() if gaps[2].endswith(key_open) else ""
    after_value = seg[vb + len(values[1]) : stop].lstrip()
    if not key_open or not value_close or not after_value.startswith(value_close):
        return None
    between = gaps[1].strip()
    split = between.rfind("<")
    key_close, value_open = (between[:split].strip(), between[split:]) if split > 0 else (between, "")
    name_close = gaps[0][: len(gaps[0]) - len(key_open)]
    return name_close, stop - len(after_value) + len(value_close), (key_open, key_close, value_open, value_close)


def _reads_back(render: Render, shape: CallShape) -> bool:
    """Whether the parser reads the template's rendering of two other calls as those calls."""
    names, keys, values = _CHECK
    calls, tools = _probe(names, keys, values)
    parser = ToolCallParser(
        ToolSyntax("template", True, shape=shape),
        names,
        schemas={t["function"]["name"]: t["function"]["parameters"] for t in tools},
    )
    seg = _turn(render, names, keys, values)
    events = [*parser.feed(seg), *parser.finish()]
    read: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, ToolCallDelta):
            read.setdefault(e.index, ["", ""])
            read[e.index][0] += e.name or ""
            read[e.index][1] += e.arguments
    expected = [[c["function"]["name"], c["function"]["arguments"]] for c in calls]
    try:
        return [[n, json.loads(a)] for n, a in read.values()] == expected
    except ValueError:
        return False


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _common_suffix(a: str, b: str) -> str:
    n = _common_prefix(a[::-1], b[::-1])
    return a[len(a) - n :]


def _shared_start(a: str, b: str) -> str:
    """The text both start with, up to the end of a whole tag or word (`</invoke>`, not `</invoke><`)."""
    n = _common_prefix(a, b)
    if n < min(len(a), len(b)):
        while n > 0 and not (a[n - 1] in ">]|`" or a[n - 1].isspace()):
            n -= 1
        opened = a.rfind("<", 0, n)
        if opened > a.rfind(">", 0, n):  # not inside a tag: `<|tool_call_end|><|` ends before its `<|`
            n = opened
    return a[:n]
