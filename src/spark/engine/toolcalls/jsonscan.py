"""Incremental JSON: text checked one character at a time, with the top-level member it belongs to."""

from __future__ import annotations

import json
import re
import string

_NUM_PREFIX = re.compile(r"-?(?:(?:0|[1-9]\d*)(?:\.\d*|(?:\.\d+)?[eE][+-]?\d*)?)?")
_NUM_FULL = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
WS = " \t\r\n"  # JSON whitespace


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
        elif ch in WS:
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
