"""Writing GBNF: literals, character classes, bounded repetitions, and a grammar's rules.

`Rules` collects the rules of one grammar (unique names, identical bodies
shared, the shared JSON rules added on first use); `finish` turns them into
a checked `Grammar`. A repetition bound above llama.cpp's limit is silently
read as "unbounded" by llama.cpp, so `repeat` never writes one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from spark.engine.grammar.check import MAX_REPEAT, check_gbnf
from spark.engine.grammar.errors import GrammarError
from spark.errors import InvalidRequest

HEX = "[0-9a-fA-F]"
# Whitespace between JSON tokens, bounded so that a small model cannot loop on it.
WS = '| " " | "\\n" [ \\t]{0,20}'
# JSON string characters: raw ones, or escapes that decode to exactly one code point
# (no surrogate escapes, so minLength/maxLength count what a validator counts).
CHAR = (
    '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" '
    f"( [0-9a-cA-Ce-fE-F] {HEX}{{3}} | [dD] [0-7] {HEX}{{2}} ) )"
)
_PRIMITIVES: dict[str, str] = {
    "ws": WS,
    "char": CHAR,
    "string": '"\\"" char* "\\""',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "integer": '"-"? ( "0" | [1-9] [0-9]{0,15} )',
    "number": '"-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* ws )? "}"',
    "array": '"[" ws ( value ( ws "," ws value )* ws )? "]"',
}
_PRIMITIVE_DEPS: dict[str, tuple[str, ...]] = {
    "string": ("char",),
    "value": ("object", "array", "string", "number", "boolean", "null"),
    "object": ("ws", "string", "value"),
    "array": ("ws", "value"),
}


@dataclass(frozen=True, slots=True)
class Grammar:
    """A GBNF grammar for one request.

    With `trigger_words` or `trigger_patterns` it is lazy: output is free until
    a trigger appears, and the grammar constrains everything from the trigger on
    (its root must start with the trigger text). Patterns follow llama.cpp:
    the grammar starts at the first capture group.
    """

    text: str
    param: str  # the request field the grammar comes from, for errors
    root: str = "root"
    trigger_words: tuple[str, ...] = ()
    trigger_patterns: tuple[str, ...] = ()

    @property
    def lazy(self) -> bool:
        return bool(self.trigger_words or self.trigger_patterns)


def literal(text: str) -> str:
    """A GBNF string literal matching exactly `text`."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def class_char(ch: str) -> str:
    """One character for use inside a GBNF character class (escaped unless alphanumeric)."""
    code = ord(ch)
    if ch.isascii() and ch.isalnum():
        return ch
    if code < 0x100:
        return f"\\x{code:02X}"
    if code < 0x10000:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"


def char_class(ranges: Iterable[tuple[str, str]], *, negated: bool = False) -> str:
    """A GBNF class from (first, last) character ranges."""
    body = "".join(class_char(a) if a == b else f"{class_char(a)}-{class_char(b)}" for a, b in ranges)
    return f"[{'^' if negated else ''}{body}]"


def repeat(item: str, lo: int, hi: int | None, *, param: str) -> str:
    """`item` repeated lo..hi times (hi None: unbounded), within llama.cpp's limits.

    An upper bound above the limit is lowered to it: fewer repetitions than
    allowed is still valid output.
    """
    if lo > MAX_REPEAT:
        raise InvalidRequest(
            f"a minimum of {lo} repetitions is more than this server's grammar limit of {MAX_REPEAT}",
            param=param,
        )
    if hi is not None:
        hi = min(hi, MAX_REPEAT)
        if hi == lo:
            return f"{item}{{{lo}}}" if lo != 1 else item
        return f"{item}{{{lo},{hi}}}"
    return {0: f"{item}*", 1: f"{item}+"}.get(lo, f"{item}{{{lo},}}")


class Rules:
    """The rules of a grammar being written; names are made unique, equal bodies shared."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {"root": ""}  # defined last, by `text`
        self._by_body: dict[str, str] = {}

    def add(self, hint: str, body: str) -> str:
        """Add a rule (or find an identical one) and return its name."""
        if body in self._by_body:
            return self._by_body[body]
        name = self.reserve(hint)
        self.define(name, body)
        return name

    def reserve(self, hint: str) -> str:
        """A fresh rule name to define later (for recursive rules)."""
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-") or "r"
        name, n = base, 1
        while name in self._rules:
            n += 1
            name = f"{base}-{n}"
        self._rules[name] = ""
        return name

    def define(self, name: str, body: str) -> None:
        self._rules[name] = body
        self._by_body.setdefault(body, name)

    def primitive(self, name: str) -> str:
        """One of the shared JSON rules (`ws`, `string`, `value`, ...), added on first use."""
        if name not in self._rules:
            self._rules[name] = _PRIMITIVES[name]
            for dep in _PRIMITIVE_DEPS.get(name, ()):
                self.primitive(dep)
        return name

    def text(self, root_body: str) -> str:
        """The whole grammar, with `root ::= root_body` first."""
        lines = [f"root ::= {root_body}"]
        lines += [f"{name} ::= {body}" for name, body in self._rules.items() if name != "root"]
        return "\n".join(lines) + "\n"


def finish(
    rules: Rules,
    root_body: str,
    param: str,
    *,
    trigger_words: tuple[str, ...] = (),
    trigger_patterns: tuple[str, ...] = (),
) -> Grammar:
    """The grammar with `root ::= root_body`, checked (triggers make it lazy, see `Grammar`)."""
    text = rules.text(root_body)
    try:
        check_gbnf(text)
    except GrammarError as e:
        raise InvalidRequest(f"could not build a valid grammar for this request: {e}", param=param) from None
    return Grammar(text, param, trigger_words=trigger_words, trigger_patterns=trigger_patterns)
