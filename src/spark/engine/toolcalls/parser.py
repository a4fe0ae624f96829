"""Parsing tool calls from streamed output, for every family (see `spark.engine.toolcalls`).

The parser streams text before a call as it comes, holding back only what
could still be the start of a call marker, and streams each call as a
`ToolCallDelta` with its id and name, then argument fragments.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from typing import Any, Literal

from spark.engine.text import partial_marker
from spark.engine.toolcalls.jsonscan import WS, JsonScanner
from spark.engine.toolcalls.syntax import (
    HERMES_CLOSE,
    HERMES_OPEN,
    MISTRAL_ARGS,
    MISTRAL_CALL_ID,
    MISTRAL_CALLS,
    PYTHON_TAG,
    ToolSyntax,
    new_call_id,
)
from spark.types import Event, TextDelta, ToolCallDelta

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

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
        if self.scanner.depth == 0 and ch not in WS and ch != "{":
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
        head = self._buf.lstrip(WS + ";")
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
            if ch in WS and scanner.depth == 0:
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
