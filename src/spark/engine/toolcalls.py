"""Tool calls: each template family's call syntax, parsed from the output as it streams,
and the grammars that force or constrain calls.

Families, recognised from the chat template's text:

- hermes (Hermes 2/3, Qwen 2.5/3, ...): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
- llama3 (Llama 3.1+): an answer that is `{"name": ..., "parameters": {...}}`, or
  `<|python_tag|>` followed by such JSON or by `tool.call(key=value, ...)`
- mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}]`, or the newer
  `[TOOL_CALLS]name[ARGS]{...}` (optionally `[CALL_ID]id` before `[ARGS]`)
- generic: any other template; an answer that is `{"name": ..., "arguments": {...}}`.
  A template that does not render tools at all gets them described in the system message.

The parser streams text before a call as it comes, holding back only what
could still be the start of a call marker, and streams each call as a
`ToolCallDelta` with its id and name, then argument fragments.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from spark.engine.grammar import (
    Grammar,
    Rules,
    SchemaConverter,
    SchemaError,
    finish,
    literal,
)
from spark.engine.text import partial_marker
from spark.errors import InvalidRequest
from spark.types import Event, Message, TextDelta, Tool, ToolCallDelta

log = logging.getLogger(__name__)

Family = Literal["hermes", "llama3", "mistral", "generic"]

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
# A lazy grammar for answers that are bare JSON calls starts at an opening brace that
# begins the output; what may follow it in the same token is what the grammar allows there.
JSON_START = '^[ \\t\\r\\n]*(\\{)( |\\n[ \\t]{0,20})?"?$'
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class ToolSyntax:
    """How a model writes tool calls."""

    family: Family
    renders_tools: bool  # the template writes the tool list itself
    mistral_args: bool = False  # [TOOL_CALLS]name[ARGS]{...} rather than a JSON list

    @property
    def markers(self) -> tuple[str, ...]:
        """The marker texts of this family (often special tokens)."""
        return {
            "hermes": (HERMES_OPEN, HERMES_CLOSE),
            "llama3": (PYTHON_TAG,),
            "mistral": (MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID),
            "generic": (),
        }[self.family]

    @property
    def args_key(self) -> str:
        return "parameters" if self.family == "llama3" else "arguments"


def tool_syntax(template: str | None) -> ToolSyntax:
    """The tool-call syntax of a chat template (None: the fallback template)."""
    src = template or ""
    renders = "tools" in src
    if MISTRAL_CALLS in src:
        return ToolSyntax("mistral", renders, mistral_args=MISTRAL_ARGS in src)
    if HERMES_OPEN in src:
        return ToolSyntax("hermes", renders)
    if PYTHON_TAG in src:
        return ToolSyntax("llama3", renders)
    return ToolSyntax("generic", renders)


def new_call_id(family: Family) -> str:
    """An id for a call; Mistral templates only accept 9 letters or digits when it comes back."""
    if family == "mistral":
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "call_" + secrets.token_hex(12)


def describe_tools(messages: list[Message], tools: list[Tool]) -> list[Message]:
    """The conversation for a template that cannot render tools.

    The tools and the call format go into the system message; earlier calls
    become the JSON text the model is asked to write.
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
        out.insert(0, Message("system", guide))
    return out


def calls_as_text(messages: list[Message]) -> list[Message]:
    """The conversation for a template that cannot render tools: earlier calls become the
    JSON text the model is asked to write (with or without tools in this request, so that
    the history reads the same when tool_choice is "none")."""
    out: list[Message] = []
    for m in messages:
        if not m.tool_calls:
            out.append(m)
            continue
        calls = "\n".join(
            json.dumps({"name": c.name, "arguments": _json_or_text(c.arguments)}, ensure_ascii=False)
            for c in m.tool_calls
        )
        text = f"{m.text()}\n{calls}" if m.text() else calls
        out.append(Message(m.role, text, name=m.name, reasoning_content=m.reasoning_content))
    return out


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- incremental JSON -------------------------------------------------------------

_NUM_PREFIX = re.compile(r"-?(?:(?:0|[1-9]\d*)(?:\.\d*|(?:\.\d+)?[eE][+-]?\d*)?)?")
_NUM_FULL = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WS = " \t\r\n"


class JsonScanner:
    """Checks JSON text one character at a time.

    `push` also says which top-level member a character belongs to: the key
    of a top-level object member whose value it is part of, or the index of
    a top-level array element (None for the punctuation between them).
    """

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._state = "value"
        self._num = ""
        self._lit = ""
        self._hex = 0
        self._in_key = False  # the string being read is an object key
        self._key: list[str] | None = None  # raw text of a top-level key being read
        self._last_key = ""
        self._index = 0
        self._owner: str | int | None = None
        self.failed = False
        self.done = False

    def push(self, ch: str) -> str | int | None:
        """Feed one character; returns the member it belongs to (see the class)."""
        if self.failed:
            return None
        if self._state == "number":
            if _NUM_PREFIX.fullmatch(self._num + ch):
                self._num += ch
                return self._owner
            if not _NUM_FULL.fullmatch(self._num):
                self.failed = True
                return None
            self._value_done()
        before = self._owner
        self._step(ch)
        return None if self.failed else self._owner if self._owner is not None else before

    @property
    def owner(self) -> str | int | None:
        """The member whose value is being read now."""
        return self._owner

    @property
    def depth(self) -> int:
        """How many objects and arrays are open."""
        return len(self._stack)

    def _value_start(self) -> None:
        if len(self._stack) == 1:
            self._owner = self._last_key if self._stack[0] == "{" else self._index

    def _value_done(self) -> None:
        if not self._stack:
            self._state, self.done = "done", True
            return
        self._state = "after"
        if len(self._stack) == 1:
            self._owner = None

    def _string_char(self, ch: str) -> None:
        if self._key is not None:
            self._key.append(ch)

    def _step(self, ch: str) -> None:
        st = self._state
        if st == "string":
            if ch == '"':
                if not self._in_key:
                    self._value_done()
                    return
                if self._key is not None:
                    self._last_key = json.loads('"' + "".join(self._key) + '"')
                    self._key = None
                self._in_key, self._state = False, "colon"
            elif ord(ch) < 0x20:
                self.failed = True
            else:
                self._state = "escape" if ch == "\\" else "string"
                self._string_char(ch)
        elif st == "escape":
            if ch not in '"\\/bfnrtu':
                self.failed = True
                return
            self._string_char(ch)
            self._state, self._hex = ("unicode", 4) if ch == "u" else ("string", 0)
        elif st == "unicode":
            if ch not in string.hexdigits:
                self.failed = True
                return
            self._string_char(ch)
            self._hex -= 1
            if not self._hex:
                self._state = "string"
        elif st == "literal":
            if ch != self._lit[0]:
                self.failed = True
                return
            self._lit = self._lit[1:]
            if not self._lit:
                self._value_done()
        elif ch in _WS:
            return
        elif st in ("value", "value_or_close"):
            if st == "value_or_close" and ch == "]":
                self._close("[")
                return
            self._value_start()
            if ch in "{[":
                self._stack.append(ch)
                self._state = "key_or_close" if ch == "{" else "value_or_close"
            elif ch == '"':
                self._state = "string"
            elif ch == "-" or ch.isdigit():
                self._state, self._num = "number", ch
            elif ch in "tfn":
                self._state = "literal"
                self._lit = {"t": "rue", "f": "alse", "n": "ull"}[ch]
            else:
                self.failed = True
        elif st in ("key", "key_or_close"):
            if st == "key_or_close" and ch == "}":
                self._close("{")
            elif ch == '"':
                self._state, self._in_key = "string", True
                self._key = [] if len(self._stack) == 1 else None
            else:
                self.failed = True
        elif st == "colon":
            self._state = "value"
            self.failed = ch != ":"
        elif st == "after":
            top = self._stack[-1]
            if ch == ",":
                self._state = "key" if top == "{" else "value"
                if len(self._stack) == 1 and top == "[":
                    self._index += 1
            elif ch == ("}" if top == "{" else "]"):
                self._close(top)
            else:
                self.failed = True
        else:  # "done": nothing may follow
            self.failed = True

    def _close(self, kind: str) -> None:
        self._stack.pop()
        self._value_done()


# --- parsing calls ------------------------------------------------------------------

_Action = tuple[Literal["start"], str, str | None] | tuple[Literal["args"], str]


class _CallReader:
    """Reads one streamed call object: `{"name": ..., "arguments": {...}, "id": ...}`.

    Eager readers announce the call as soon as its name is read (a marker
    already said it is a call); the others wait until the arguments begin and
    the name is one of the request's tools, since a bare JSON answer may be
    just an answer. Arguments stream when they come after the name as an
    object; otherwise they are sent whole at the end. `raw` holds every
    character accepted, to give back as text when it turns out not to be a call.
    """

    def __init__(self, args_keys: tuple[str, ...], *, eager: bool, names: frozenset[str]) -> None:
        self.scanner = JsonScanner()
        self.raw: list[str] = []
        self.name: str | None = None
        self.call_id: str | None = None
        self.eager = eager
        self.started = False
        self.streamed = False
        self.failed = False
        self._args_keys = args_keys
        self._names = names
        self._members: dict[str, list[str]] = {}

    @property
    def done(self) -> bool:
        return self.scanner.done

    def args_text(self) -> str:
        """The arguments as read so far (the first arguments key present)."""
        return "".join(next((self._members[k] for k in self._args_keys if k in self._members), []))

    def push(self, ch: str) -> list[_Action]:
        """Read one character (`failed` is set when it cannot belong to a call)."""
        if self.scanner.depth == 0 and ch not in _WS and ch != "{":
            self.failed = True
            return []
        owner = self.scanner.push(ch)
        if self.scanner.failed:
            self.failed = True
            return []
        self.raw.append(ch)
        out: list[_Action] = []
        if isinstance(owner, str):
            chars = self._members.setdefault(owner, [])
            if owner in self._args_keys and not chars and self.name is not None and ch == "{":
                self.streamed = self._start(out)
            chars.append(ch)
            if owner in self._args_keys and self.streamed:
                out.append(("args", ch))
            if self.scanner.owner != owner and owner in ("name", "id"):  # that value just ended
                value = _loads("".join(chars))
                if isinstance(value, str) and owner == "name":
                    self.name = value
                    if self.eager:
                        self._start(out)
                elif isinstance(value, str):
                    self.call_id = value
        if self.scanner.done:
            self._complete(out)
        return out

    def _start(self, out: list[_Action]) -> bool:
        """Announce the call if it may be; whether it is announced."""
        if not self.started and self.name is not None and (self.eager or self.name in self._names):
            self.started = True
            out.append(("start", self.name, self.call_id))
        return self.started

    def _complete(self, out: list[_Action]) -> None:
        has_args = any(k in self._members for k in self._args_keys)
        if not (self.eager or has_args) or not self._start(out):
            self.failed = True
            return
        if self.streamed:
            return
        raw = self.args_text()
        value = _loads(raw)
        if isinstance(value, str) and isinstance(_loads(value), dict):
            raw = value  # arguments sent as a JSON string holding the object
        out.append(("args", raw or "{}"))


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def python_call(text: str) -> tuple[str, str] | None:
    """(name, arguments JSON) of a Llama built-in tool call like `brave_search.call(query="x")`."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
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
        args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return name, json.dumps(args, ensure_ascii=False)


class ToolCallParser:
    """Turns streamed content into `TextDelta`s and `ToolCallDelta`s for one family.

    With `max_calls`, the parser is `complete` once that many calls are whole
    (their arguments read to the end) and drops anything fed after that.
    """

    def __init__(self, syntax: ToolSyntax, names: Iterable[str], *, max_calls: int | None = None) -> None:
        self._syntax = syntax
        self._max_calls = max_calls
        self._n_whole = 0
        self._names = frozenset(names)
        self._buf = ""
        self._mode = "start" if syntax.family in ("llama3", "generic") else "text"
        self._opens = {"hermes": (HERMES_OPEN,), "llama3": (PYTHON_TAG,), "mistral": (MISTRAL_CALLS,)}.get(
            syntax.family, ()
        )
        self._reader: _CallReader | None = None
        self._eager = False  # whether the last call object followed a marker
        self._fallback = ""  # the marker to give back as text if what follows is no call
        self._scanner: JsonScanner | None = None  # Mistral arguments or list of calls
        self._readers: dict[int, _CallReader] = {}
        self._mistral_name = ""
        self._mistral_id: str | None = None
        self._args_sent = False
        self._n_calls = 0
        self._events: list[Event] = []

    @property
    def made_calls(self) -> bool:
        return self._n_calls > 0

    @property
    def complete(self) -> bool:
        """Whether `max_calls` calls are whole: the output should end here."""
        return self._mode == "done"

    # --- events ---

    def _text(self, text: str) -> None:
        if not text:
            return
        last = self._events[-1] if self._events else None
        if isinstance(last, TextDelta):
            self._events[-1] = TextDelta(last.text + text)
        else:
            self._events.append(TextDelta(text))

    def _call_start(self, name: str, call_id: str | None) -> None:
        self._n_calls += 1
        self._args_sent = False
        cid = call_id if call_id and self._syntax.family == "mistral" else new_call_id(self._syntax.family)
        self._events.append(ToolCallDelta(self._n_calls - 1, id=cid, name=name))

    def _args(self, text: str) -> None:
        self._args_sent = True
        last = self._events[-1] if self._events else None
        if isinstance(last, ToolCallDelta) and last.index == self._n_calls - 1 and last.id is None:
            self._events[-1] = ToolCallDelta(last.index, arguments=last.arguments + text)
        else:
            self._events.append(ToolCallDelta(self._n_calls - 1, arguments=text))

    def _apply(self, actions: list[_Action]) -> None:
        for action in actions:
            if action[0] == "start":
                self._call_start(action[1], action[2])
            else:
                self._args(action[1])

    def _call_whole(self) -> bool:
        """The current call's arguments are complete; with `max_calls` of them, stop reading
        (True)."""
        self._n_whole += 1
        if self._max_calls is not None and self._n_whole >= self._max_calls:
            self._buf, self._mode = "", "done"
        return self.complete

    # --- feeding ---

    def feed(self, text: str) -> list[Event]:
        """Events for more content."""
        self._buf += text
        while self._buf and getattr(self, f"_on_{self._mode}")():
            pass
        events, self._events = self._events, []
        return events

    def finish(self) -> list[Event]:
        """Events for what is still held back when generation ends."""
        mode, buf = self._mode, self._buf
        self._buf = ""
        reader = self._reader
        if mode in ("start", "text"):
            self._text(buf)
        elif mode == "object" and reader is not None and reader.started:
            if not reader.streamed:  # cut short: send what there is
                self._args(reader.args_text() or "{}")
        elif mode in ("object", "tag"):
            self._text(self._fallback + "".join(reader.raw if reader else []) + buf)
        elif mode == "python":
            call = python_call(buf)
            if call is None:
                self._text(PYTHON_TAG + buf)
            else:
                self._call_start(call[0], None)
                self._args(call[1])
        elif mode in ("mistral", "mistral_name", "mistral_id"):
            self._mistral_fail()
            self._text(buf)
        elif mode == "mistral_args" and not self._args_sent:
            self._args("{}")
        events, self._events = self._events, []
        return events

    # Each `_on_<mode>` reads from the start of `_buf`; True means "call again".

    def _on_start(self) -> bool:
        head = self._buf.lstrip()
        if not head:
            return False
        if head[0] == "{":
            lead = self._buf[: len(self._buf) - len(head)]
            self._buf = head
            self._begin_object(eager=False, fallback=lead)
        else:
            self._mode = "text"
        return True

    def _on_text(self) -> bool:
        found = [(self._buf.find(m), m) for m in self._opens if m in self._buf]
        if not found:
            keep = partial_marker(self._buf, self._opens)
            self._text(self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :]
            return False
        at, marker = min(found)
        self._text(self._buf[:at])
        self._buf = self._buf[at + len(marker) :]
        if marker == HERMES_OPEN:
            self._begin_object(eager=True, fallback=marker)
        else:
            self._fallback = marker
            self._mistral_name, self._mistral_id = "", None
            self._mode = "tag" if marker == PYTHON_TAG else "mistral"
        return True

    def _begin_object(self, *, eager: bool, fallback: str) -> None:
        self._reader = _CallReader(("arguments", "parameters"), eager=eager, names=self._names)
        self._eager = eager
        self._fallback = fallback
        self._mode = "object"

    def _on_object(self) -> bool:
        reader = self._reader
        assert reader is not None
        for i, ch in enumerate(self._buf):
            n = len(reader.raw)
            self._apply(reader.push(ch))
            rest = self._buf[i + (len(reader.raw) > n) :]
            if reader.failed:
                if not reader.started:
                    self._text(self._fallback + "".join(reader.raw))
                self._buf, self._reader, self._mode = rest, None, "text"
                return True
            if reader.done:
                self._buf, self._reader, self._mode = rest, None, "after"
                self._call_whole()
                return True
        self._buf = ""
        return False

    def _on_done(self) -> bool:
        self._buf = ""  # nothing after the last call allowed is output
        return False

    def _on_after(self) -> bool:
        if self._syntax.family == "hermes":
            head = self._buf.lstrip()
            if not head or (HERMES_CLOSE.startswith(head) and head != HERMES_CLOSE):
                return False
            if head.startswith(HERMES_CLOSE):
                self._buf = head[len(HERMES_CLOSE) :]
                self._mode = "gap"
            else:
                self._mode = "text"
            return True
        head = self._buf.lstrip(_WS + ";")
        if not head:
            return False
        if head[0] == "{" and self._syntax.family in ("llama3", "generic"):
            self._buf = head
            self._begin_object(eager=self._eager, fallback="")
        else:
            self._mode = "text"
        return True

    def _on_gap(self) -> bool:
        """Whitespace after a call is not content."""
        head = self._buf.lstrip()
        if not head:
            return False
        self._buf, self._mode = head, "text"
        return True

    def _on_tag(self) -> bool:
        head = self._buf.lstrip()
        if not head:
            return False
        self._buf = head
        if head[0] == "{":
            self._begin_object(eager=True, fallback=PYTHON_TAG)
        else:
            self._mode = "python"
        return True

    def _on_python(self) -> bool:
        return False  # the call is read whole when generation ends

    def _on_mistral(self) -> bool:
        head = self._buf.lstrip()
        if not head:
            return False
        self._buf = head
        if head[0] == "[":
            self._scanner, self._readers = JsonScanner(), {}
            self._mode = "mistral_array"
        else:
            self._mode = "mistral_name"
        return True

    def _on_mistral_name(self) -> bool:
        return self._mistral_until((MISTRAL_ARGS, MISTRAL_CALL_ID))

    def _on_mistral_id(self) -> bool:
        return self._mistral_until((MISTRAL_ARGS,))

    def _mistral_until(self, ends: tuple[str, ...]) -> bool:
        """Read a call's name (or its id) up to the marker that ends it."""
        found = [(self._buf.find(m), m) for m in ends if m in self._buf]
        if not found:
            keep = partial_marker(self._buf, ends)
            if _NAME.fullmatch(self._buf[: len(self._buf) - keep].strip() or "x"):
                return False
            self._mistral_fail()
            return True
        at, marker = min(found)
        value = self._buf[:at].strip()
        if not _NAME.fullmatch(value):
            self._mistral_fail()
            return True
        self._buf = self._buf[at + len(marker) :]
        if self._mode == "mistral_name":
            self._mistral_name = value
        else:
            self._mistral_id = value
        if marker == MISTRAL_CALL_ID:
            self._mode = "mistral_id"
        else:
            self._call_start(self._mistral_name, self._mistral_id)
            self._scanner, self._mode = JsonScanner(), "mistral_args"
        return True

    def _mistral_fail(self) -> None:
        """What followed [TOOL_CALLS] is no call: give the text back."""
        parts = [MISTRAL_CALLS, self._mistral_name]
        if self._mode == "mistral_id" or self._mistral_id is not None:
            parts += [MISTRAL_CALL_ID, self._mistral_id or ""]
        self._text("".join(parts))
        self._mode = "text"

    def _on_mistral_args(self) -> bool:
        scanner = self._scanner
        assert scanner is not None
        for i, ch in enumerate(self._buf):
            if ch in _WS and scanner.depth == 0:
                continue
            scanner.push(ch)
            if scanner.failed:
                if not self._args_sent:
                    self._args("{}")
                self._buf, self._mode = self._buf[i:], "text"
                return True
            self._args(ch)
            if scanner.done:
                self._buf, self._mode = self._buf[i + 1 :], "gap"
                self._call_whole()
                return True
        self._buf = ""
        return False

    def _on_mistral_array(self) -> bool:
        outer = self._scanner
        assert outer is not None
        for i, ch in enumerate(self._buf):
            owner = outer.push(ch)
            if outer.failed:
                self._buf, self._mode = self._buf[i:], "text"
                return True
            if isinstance(owner, int):
                reader = self._readers.setdefault(owner, _CallReader(("arguments",), eager=True, names=self._names))
                if not reader.failed:
                    self._apply(reader.push(ch))
                    if reader.done and not reader.failed and self._call_whole():
                        return True
            if outer.done:
                self._buf, self._mode = self._buf[i + 1 :], "gap"
                return True
        self._buf = ""
        return False


# --- grammars ------------------------------------------------------------------------


def _args_rule(rules: Rules, tool: Tool, hint: str) -> str:
    """The arguments of `tool`, from its JSON schema; any object when we cannot enforce it."""
    schema: dict[str, Any] = dict(tool.parameters or {})
    if "type" not in schema and not ({"$ref", "anyOf", "oneOf", "allOf", "enum", "const"} & schema.keys()):
        schema["type"] = "object"
    try:
        return SchemaConverter(rules, schema, "tools").rule(schema, hint)
    except SchemaError as e:
        log.info("tool %s: arguments not constrained by its schema: %s", tool.name, e.message)
        return rules.primitive("object")


def _object_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool]) -> str:
    """`{"name": "<tool>", "<args key>": <its arguments>}` for any of `tools`."""
    rules.primitive("ws")
    key = literal(json.dumps(syntax.args_key))
    alts = []
    for i, t in enumerate(tools):
        name = literal(json.dumps(t.name, ensure_ascii=False))
        alts.append(f'{name} ws "," ws {key} ws ":" ws {_args_rule(rules, t, f"args-{i}")}')
    fns = rules.add("call-fn", " | ".join(alts))
    return rules.add("call-object", f'"{{" ws "\\"name\\"" ws ":" ws {fns} ws "}}"')


def _calls_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool], *, lazy: bool, parallel: bool) -> str:
    """The calls in the family's syntax (the first starting with its marker, if any): one or
    more, or with `parallel` off exactly one, after which the grammar is complete (llama.cpp
    then allows only end-of-generation tokens)."""
    lead = rules.add("lead", "[ \\t\\r\\n]{0,4}")
    if syntax.family == "hermes":
        obj = _object_rule(rules, syntax, tools)
        call = rules.add("call", f"{literal(HERMES_OPEN)} {lead} {obj} {lead} {literal(HERMES_CLOSE)}")
        return rules.add("calls", f"{call} ( {lead} {call} )*") if parallel else call
    if syntax.family == "mistral":
        if syntax.mistral_args:
            alts = [
                f"{literal(t.name)} {literal(MISTRAL_ARGS)} {_args_rule(rules, t, f'args-{i}')}"
                for i, t in enumerate(tools)
            ]
            call = rules.add("call", f"{literal(MISTRAL_CALLS)} ( {' | '.join(alts)} )")
            return rules.add("calls", f"{call}+") if parallel else call
        obj = _object_rule(rules, syntax, tools)
        more = f'( ws "," ws {obj} )* ' if parallel else ""
        return rules.add("calls", f'{literal(MISTRAL_CALLS)} {lead} "[" ws {obj} {more}ws "]"')
    # A bare JSON answer holds one call either way.
    obj = _object_rule(rules, syntax, tools)
    if syntax.family == "llama3" and lazy:
        return rules.add("calls", f"( {literal(PYTHON_TAG)} {lead} )? {obj}")
    return obj


def call_rule(rules: Rules, syntax: ToolSyntax, tools: list[Tool], only: str | None, *, parallel: bool = True) -> str:
    """The rule for the calls a forced (or combined) grammar allows; `only` names the one tool,
    and with `parallel` off the grammar ends after one call."""
    chosen = [t for t in tools if t.name == only] if only else tools
    if not chosen:
        raise InvalidRequest(f"tool_choice names '{only}', which is not among the tools", param="tool_choice")
    return _calls_rule(rules, syntax, chosen, lazy=False, parallel=parallel)


def lazy_grammar(syntax: ToolSyntax, tools: list[Tool], *, parallel: bool = True) -> Grammar:
    """A grammar that leaves the output free until a call starts, then constrains the call
    (with `parallel` off, the one call)."""
    rules = Rules()
    calls = _calls_rule(rules, syntax, tools, lazy=True, parallel=parallel)
    words = tuple(m for m in syntax.markers if m in (HERMES_OPEN, PYTHON_TAG, MISTRAL_CALLS))
    patterns = (JSON_START,) if syntax.family in ("llama3", "generic") else ()
    return finish(rules, calls, "tools", trigger_words=words, trigger_patterns=patterns)
