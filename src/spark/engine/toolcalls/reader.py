"""Reads one streamed JSON call object (`{"name": ..., "arguments": {...}}`) a character at a time."""

from __future__ import annotations

from typing import Literal

from spark.engine.toolcalls.jsonscan import WS, JsonScanner
from spark.engine.toolcalls.written import loads

_NAME_KEYS = ("name", "tool_name")  # Cohere's templates write "tool_name"
_ARGS_KEYS = ("arguments", "parameters")
_CALL_KEYS = frozenset({*_NAME_KEYS, *_ARGS_KEYS, "id", "type"})

Action = tuple[Literal["start"], str, str | None] | tuple[Literal["args"], str]


class CallReader:
    """Reads one streamed call object: `{"name": ..., "arguments": {...}, "id": ...}`.

    Eager readers announce the call as soon as its name is read (a marker
    already said it is a call). The others read a bare JSON value that may be
    just an answer: they give up as soon as a key no call has appears or the
    name is none of the request's tools, and announce the call once its
    arguments begin. Arguments stream when they come after the name as an
    object; otherwise they are sent whole at the end. `raw` holds every
    character accepted, to give back as text when it turns out not to be a call.
    """

    def __init__(self, *, eager: bool, names: frozenset[str]) -> None:
        self.scanner = JsonScanner()
        self.raw: list[str] = []
        self.name: str | None = None
        self.call_id: str | None = None
        self.eager = eager
        self.started = False
        self.streamed = False
        self.failed = False
        self._names = names
        self._members: dict[str, list[str]] = {}

    @property
    def done(self) -> bool:
        return self.scanner.done

    def name_so_far(self) -> str:
        """The call's name as far as it is read (all of it once `name` is set)."""
        if self.name is not None:
            return self.name
        chars = next((self._members[k] for k in _NAME_KEYS if k in self._members), [])
        return "".join(chars).lstrip(WS).removeprefix('"')

    def args_text(self) -> str:
        """The arguments as read so far (the first arguments key present)."""
        return "".join(next((self._members[k] for k in _ARGS_KEYS if k in self._members), []))

    def push(self, ch: str) -> list[Action]:
        """Read one character (`failed` is set when it cannot belong to a call)."""
        if self.scanner.depth == 0 and ch not in WS and ch != "{":
            self.failed = True
            return []
        owner = self.scanner.push(ch)
        if self.scanner.failed:
            self.failed = True
            return []
        self.raw.append(ch)
        out: list[Action] = []
        if isinstance(owner, str):
            if not self.eager and owner not in _CALL_KEYS:
                self.failed = True  # a key no call has: an answer in JSON
                return []
            chars = self._members.setdefault(owner, [])
            if owner in _ARGS_KEYS and not chars and self.name is not None and ch == "{":
                self.streamed = self._start(out)
            chars.append(ch)
            if owner in _ARGS_KEYS and self.streamed:
                out.append(("args", ch))
            if self.scanner.owner != owner and owner in (*_NAME_KEYS, "id"):  # that value just ended
                value = loads("".join(chars))
                if isinstance(value, str) and owner in _NAME_KEYS:
                    self.name = value
                    if self.eager:
                        self._start(out)
                    elif value not in self._names:
                        self.failed = True
                        return []
                elif isinstance(value, str):
                    self.call_id = value
        if self.scanner.done:
            self._complete(out)
        return out

    def _start(self, out: list[Action]) -> bool:
        """Announce the call if it may be; whether it is announced."""
        if not self.started and self.name is not None and (self.eager or self.name in self._names):
            self.started = True
            out.append(("start", self.name, self.call_id))
        return self.started

    def _complete(self, out: list[Action]) -> None:
        has_args = any(k in self._members for k in _ARGS_KEYS)
        if not (self.eager or has_args) or not self._start(out):
            self.failed = True
            return
        if self.streamed:
            return
        raw = self.args_text()
        value = loads(raw)
        if isinstance(value, str) and isinstance(loads(value), dict):
            raw = value  # arguments sent as a JSON string holding the object
        out.append(("args", raw or "{}"))
