"""A regular expression (the common subset of Python and ECMAScript regexes) to GBNF: a JSON-schema
`pattern`, written as the JSON text of a string, or a whole answer's regex (vLLM's and SGLang's `regex`)."""

from __future__ import annotations

import json
import re
from typing import Any

from spark.engine.grammar.errors import SchemaError
from spark.engine.grammar.gbnf import char_class, literal, repeat

# What a JSON string may hold raw; everything else needs an escape.
_UNSAFE = [("\x00", "\x1f"), ('"', '"'), ("\\", "\\"), ("\x7f", "\x7f")]
_ANY = [("\x00", "\U0010ffff")]
_PRINTABLE = [(" ", "~")]


def _minus(ranges: list[tuple[str, str]], cut: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Character ranges with the ones in `cut` taken out."""
    out = ranges
    for c0, c1 in cut:
        nxt = []
        for a, b in out:
            if b < c0 or a > c1:
                nxt.append((a, b))
                continue
            if a < c0:
                nxt.append((a, chr(ord(c0) - 1)))
            if b > c1:
                nxt.append((chr(ord(c1) + 1), b))
        out = nxt
    return out


_SHORTHANDS = {
    "d": [("0", "9")],
    "w": [("a", "z"), ("A", "Z"), ("0", "9"), ("_", "_")],
    "s": [(" ", " ")],
    # Negated shorthands stay in printable ASCII: Python's \d, \w, \s also match other scripts.
    "D": _minus(_PRINTABLE, [("0", "9")]),
    "W": _minus(_PRINTABLE, [("a", "z"), ("A", "Z"), ("0", "9"), ("_", "_")]),
    "S": _minus(_PRINTABLE, [(" ", " ")]),
}


class RegexConverter:
    """A JSON-schema `pattern` (the common subset of Python and ECMAScript regexes) to GBNF.

    The GBNF matches the JSON text of strings whose value matches the whole
    pattern; an unanchored pattern is matched as a whole too, which is a
    subset of what a search allows. Characters a JSON string cannot hold raw
    are written as escapes or, inside classes and `.`, left out.
    With `raw`, the GBNF matches the text itself instead (`.` is any character but a newline).
    """

    def __init__(self, param: str, hint: str, *, raw: bool = False) -> None:
        self.param = param
        self.hint = hint
        self.raw = raw
        self.src = ""
        self.pos = 0

    def error(self, why: str) -> SchemaError:
        where = "" if self.raw else f" at '{self.hint}'"
        return SchemaError(
            f"unsupported {'regular expression' if self.raw else 'pattern'}{where}: {why}", param=self.param
        )

    def convert(self, pattern: Any) -> str:
        if not isinstance(pattern, str):
            raise self.error("the pattern is not a string")
        try:
            re.compile(pattern)
        except re.error as e:
            raise self.error(f"invalid regular expression: {e}") from None
        src = pattern.removeprefix("^")
        if src.endswith("$") and not src.endswith("\\$"):
            src = src[:-1]
        self.src, self.pos = src, 0
        out = self.alternation()
        if self.pos != len(self.src):
            raise self.error(f"unexpected {self.src[self.pos]!r}")
        return f"( {out} )"

    def peek(self) -> str:
        return self.src[self.pos] if self.pos < len(self.src) else ""

    def alternation(self) -> str:
        alts = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            alts.append(self.sequence())
        return " | ".join(a or '""' for a in alts)

    def sequence(self) -> str:
        items = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            items.append(self.quantified(atom))
        return " ".join(items)

    def quantified(self, atom: str) -> str:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.pos += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and (m := re.compile(r"\{(\d+)(,(\d*))?\}").match(self.src, self.pos)):
            self.pos = m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        else:
            return atom
        if self.peek() in ("?", "+"):  # lazy or possessive: same language
            self.pos += 1
        return repeat(f"( {atom} )", lo, hi, param=self.param)

    def atom(self) -> str:
        c = self.peek()
        self.pos += 1
        if c == "(":
            if self.src.startswith("?:", self.pos):
                self.pos += 2
            elif self.peek() == "?":
                raise self.error("lookarounds and named or flagged groups are not supported")
            inner = self.alternation()
            if self.peek() != ")":
                raise self.error("unbalanced parenthesis")
            self.pos += 1
            return f"( {inner or chr(34) * 2} )"
        if c == "[":
            return self.char_set()
        if c == ".":
            if self.raw:
                return char_class(_minus(_ANY, [("\n", "\n")]))
            return char_class(_minus(_ANY, [*_UNSAFE, ("\u2028", "\u2029")]))
        if c in ("^", "$"):
            raise self.error("anchors inside the pattern are not supported")
        if c == "\\":
            kind, value = self.escape()
            return self.ranges_gbnf(value) if kind == "set" else self.char_gbnf(value)
        if c in ("*", "+", "?"):
            raise self.error(f"nothing to repeat before {c!r}")
        return self.char_gbnf(c)

    def escape(self) -> tuple[str, Any]:
        """After a backslash: ("set", ranges) or ("char", character)."""
        c = self.peek()
        self.pos += 1
        if c in _SHORTHANDS:
            return "set", _SHORTHANDS[c]
        simple = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
        if c in simple:
            return "char", simple[c]
        if c in ("x", "u"):
            n = 2 if c == "x" else 4
            digits = self.src[self.pos : self.pos + n]
            if len(digits) != n or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"bad \\{c} escape")
            self.pos += n
            return "char", chr(int(digits, 16))
        if c.isalnum():
            raise self.error(f"the escape \\{c} is not supported")
        if not c:
            raise self.error("the pattern ends with a backslash")
        return "char", c

    def char_set(self) -> str:
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[str, str]] = []
        first = True
        while True:
            c = self.peek()
            if not c:
                raise self.error("unterminated character class")
            if c == "]" and not first:
                self.pos += 1
                break
            first = False
            self.pos += 1
            if c == "\\":
                kind, value = self.escape()
                if kind == "set":
                    if negated:  # Python's shorthands are Unicode-wide: their complement is not ours
                        raise self.error("class shorthands (\\d, \\w, \\s, ...) inside [^...] are not supported")
                    ranges += value
                    continue
                c = value
            if self.peek() == "-" and self.src[self.pos + 1 : self.pos + 2] not in ("]", ""):
                self.pos += 1
                end = self.peek()
                self.pos += 1
                if end == "\\":
                    kind, end = self.escape()
                    if kind == "set":
                        raise self.error("a class shorthand cannot end a range")
                if end < c:
                    raise self.error(f"bad range {c}-{end}")
                ranges.append((c, end))
            else:
                ranges.append((c, c))
        if negated:
            ranges = _minus(_ANY, ranges)
        return self.ranges_gbnf(ranges)

    def ranges_gbnf(self, ranges: list[tuple[str, str]]) -> str:
        if self.raw:
            return char_class(ranges)
        safe = _minus(ranges, _UNSAFE)
        alts = [char_class(safe)] if safe else []
        # The few unsafe characters a class names explicitly are written as JSON escapes.
        for ch in ('"', "\\", "\n", "\t"):
            if any(a <= ch <= b for a, b in ranges):
                alts.append(self.char_gbnf(ch))
        if not alts:
            raise self.error("a character class holds only characters a JSON string cannot carry raw")
        return alts[0] if len(alts) == 1 else f"( {' | '.join(alts)} )"

    def char_gbnf(self, ch: str) -> str:
        """One character of the string's value, as its JSON text (itself when raw)."""
        return literal(ch if self.raw else json.dumps(ch, ensure_ascii=False)[1:-1])
