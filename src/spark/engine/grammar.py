"""Grammars: JSON schema to GBNF, GBNF checks, and llama.cpp grammar samplers.

A response format or a forced tool call becomes a GBNF grammar that the
slot's sampler chain applies before sampling, so the output always parses.
The converter is ours: it enforces what it accepts (numeric bounds, string
formats, lengths, patterns) and refuses what it cannot guarantee with
`InvalidRequest`, because a grammar that silently ignores a keyword produces
output that fails the client's validation.

Two llama.cpp facts shape this module. A grammar it cannot parse makes
`llama_sampler_init_grammar` return NULL (using it would crash the process),
so every grammar passes `check_gbnf` first and the pointer is checked too.
And a repetition bound above 2000 is silently turned into "unbounded", so
no grammar here ever writes one.
"""

from __future__ import annotations

import ctypes
import json
import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from llama_cpp import llama_cpp as lc

from spark.engine.native import Model
from spark.errors import InvalidRequest

MAX_REPEAT = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD

# Whitespace between JSON tokens, bounded so that a small model cannot loop on it.
WS = '| " " | "\\n" [ \\t]{0,20}'
# JSON string characters: raw ones, or escapes that decode to exactly one code point
# (no surrogate escapes, so minLength/maxLength count what a validator counts).
_HEX = "[0-9a-fA-F]"
CHAR = (
    '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" '
    f"( [0-9a-cA-Ce-fE-F] {_HEX}{{3}} | [dD] [0-7] {_HEX}{{2}} ) )"
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


# --- writing GBNF -------------------------------------------------------------


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


# --- checking GBNF ---------------------------------------------------------------


class GrammarError(ValueError):
    """A GBNF text that llama.cpp would refuse (or misread)."""


# An item of a parsed sequence: what it is, and whether it may match nothing.
_Item = tuple[str, Any, bool]  # ("ref", name, nullable) | ("term", None, nullable) | ("group", alts, nullable)


class _GbnfParser:
    """A checker following llama.cpp's GBNF parser (llama-grammar.cpp), rule by rule."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.rules: dict[str, list[list[_Item]]] = {}
        self.refs: set[str] = set()
        self.symbols = 0  # rules llama.cpp creates (names, groups, repetitions): bounds nested repeats

    def fail(self, why: str) -> GrammarError:
        line = self.src.count("\n", 0, self.pos) + 1
        return GrammarError(f"{why} (line {line})")

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.src[i] if i < len(self.src) else ""

    def space(self, newline_ok: bool) -> None:
        while True:
            c = self.peek()
            if c in (" ", "\t") or (newline_ok and c in ("\r", "\n")):
                self.pos += 1
            elif c == "#":
                while self.peek() not in ("", "\r", "\n"):
                    self.pos += 1
            else:
                return

    def name(self) -> str:
        m = re.compile(r"[a-zA-Z0-9-]+").match(self.src, self.pos)
        if not m:
            raise self.fail("expecting a rule name")
        self.pos = m.end()
        if m.group() not in self.rules and m.group() not in self.refs:
            self.symbols += 1
        return m.group()

    def char(self) -> str:
        c = self.peek()
        if c == "":
            raise self.fail("unexpected end of input")
        if c != "\\":
            self.pos += 1
            return c
        e = self.peek(1)
        sizes = {"x": 2, "u": 4, "U": 8}
        if e in sizes:
            digits = self.src[self.pos + 2 : self.pos + 2 + sizes[e]]
            if len(digits) != sizes[e] or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"expecting {sizes[e]} hex digits after \\{e}")
            self.pos += 2 + sizes[e]
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise self.fail("code point out of range")
            return chr(code)
        if e in ("t", "r", "n", "\\", '"', "[", "]", "-"):
            self.pos += 2
            return {"t": "\t", "r": "\r", "n": "\n"}.get(e, e)
        raise self.fail(f"unknown escape \\{e}")

    def parse(self) -> None:
        self.space(True)
        while self.pos < len(self.src):
            name = self.name()
            self.space(False)
            if not self.src.startswith("::=", self.pos):
                raise self.fail(f"expecting ::= after {name}")
            self.pos += 3
            self.space(True)
            alts = self.alternates(nested=False)
            if name in self.rules:
                raise self.fail(f"rule {name} is defined twice")
            self.rules[name] = alts
            c = self.peek()
            if c == "\r":
                self.pos += 2 if self.peek(1) == "\n" else 1
            elif c == "\n":
                self.pos += 1
            elif c:
                raise self.fail(f"expecting newline or end, found {c!r}")
            self.space(True)

    def alternates(self, nested: bool) -> list[list[_Item]]:
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested: bool) -> list[_Item]:
        items: list[_Item] = []
        n_prev = 1  # rules behind the last item, as llama.cpp counts them for a repetition
        while True:
            c = self.peek()
            if c not in ("*", "+", "?", "{"):
                n_prev = 1
            if c == '"':
                self.pos += 1
                n = 0
                while self.peek() != '"':
                    self.char()
                    n += 1
                self.pos += 1
                items.append(("term", None, n == 0))
            elif c == "[":
                self.pos += 1
                if self.peek() == "^":
                    self.pos += 1
                n = 0
                while self.peek() != "]":
                    first = self.char()
                    if self.peek() == "-" and self.peek(1) not in ("]", ""):
                        self.pos += 1
                        last = self.char()
                        if last < first:
                            raise self.fail(f"bad character range {first!r}-{last!r}")
                    n += 1
                if n == 0:
                    raise self.fail("empty character class")
                self.pos += 1
                items.append(("term", None, False))
            elif c in ("<", "!"):
                raise self.fail("token references are not allowed")
            elif c and (c.isascii() and (c.isalnum() or c == "-")):
                ref = self.name()
                self.refs.add(ref)
                items.append(("ref", ref, False))
            elif c == "(":
                self.pos += 1
                self.space(True)
                before = self.symbols
                self.symbols += 1
                alts = self.alternates(nested=True)
                n_prev = max(1, self.symbols - before)
                if self.peek() != ")":
                    raise self.fail("expecting ')'")
                self.pos += 1
                items.append(("group", alts, False))
            elif c == ".":
                self.pos += 1
                items.append(("term", None, False))
            elif c in ("*", "+", "?", "{"):
                if not items:
                    raise self.fail(f"nothing to repeat before {c!r}")
                lo, hi = self.repetition()
                total = hi if hi else (lo or 1)
                if n_prev * total > MAX_REPEAT:
                    raise self.fail(f"a repetition expands to more than {MAX_REPEAT} rules")
                n_prev *= total
                self.symbols += 1 if hi is None else hi - lo
                if lo == 0:
                    kind, what, _ = items[-1]
                    items[-1] = (kind, what, True)
            else:
                break
            self.space(nested)
        return items

    def repetition(self) -> tuple[int, int | None]:
        c = self.peek()
        self.pos += 1
        if c != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        self.space(False)
        m = re.compile(r"(\d+)\s*(?:(,)\s*(\d+)?\s*)?\}").match(self.src, self.pos)
        if not m:
            raise self.fail("bad repetition {m,n}")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise self.fail(f"repetition count above {MAX_REPEAT}")
        if hi is not None and hi < lo:
            raise self.fail(f"repetition {{{lo},{hi}}} has its maximum below its minimum")
        self.pos = m.end()
        return lo, hi


def check_gbnf(text: str, root: str = "root") -> None:
    """Raise `GrammarError` unless llama.cpp will parse `text` as we mean it.

    Checks the syntax, that every referenced rule and `root` exist, repetition
    bounds, and that no rule is left-recursive (llama.cpp refuses those).
    """
    p = _GbnfParser(text)
    p.parse()
    if root not in p.rules:
        raise GrammarError(f"the grammar has no '{root}' rule")
    missing = sorted(p.refs - p.rules.keys())
    if missing:
        raise GrammarError(f"undefined rule '{missing[0]}'")

    nullable: dict[str, bool] = dict.fromkeys(p.rules, False)

    def item_nullable(item: _Item) -> bool:
        kind, what, rep_nullable = item
        if rep_nullable:
            return True
        if kind == "ref":
            return nullable[what]
        if kind == "group":
            return any(all(item_nullable(i) for i in alt) for alt in what)
        return False

    changed = True
    while changed:
        changed = False
        for name, alts in p.rules.items():
            if not nullable[name] and any(all(item_nullable(i) for i in alt) for alt in alts):
                nullable[name] = changed = True

    def leftmost(alts: list[list[_Item]], out: set[str]) -> None:
        for alt in alts:
            for item in alt:
                kind, what, _ = item
                if kind == "ref":
                    out.add(what)
                elif kind == "group":
                    leftmost(what, out)
                if not item_nullable(item):
                    break

    edges = {}
    for name, alts in p.rules.items():
        out: set[str] = set()
        leftmost(alts, out)
        edges[name] = out
    state: dict[str, int] = {}

    def visit(name: str) -> None:
        state[name] = 1
        for nxt in edges[name]:
            if state.get(nxt) == 1:
                raise GrammarError(f"rule '{nxt}' is left-recursive")
            if nxt not in state:
                visit(nxt)
        state[name] = 2

    for name in p.rules:
        if name not in state:
            visit(name)


# --- samplers -------------------------------------------------------------------


def regex_escape(text: str) -> str:
    """`text` as a literal in an ECMAScript regular expression (llama.cpp uses std::regex)."""
    return re.sub(r"([\\^$.|?*+()\[\]{}/-])", r"\\\1", text)


def create_sampler(model: Model, grammar: Grammar) -> ctypes.c_void_p:
    """A llama.cpp grammar sampler; raises `InvalidRequest` when llama.cpp refuses the grammar.

    A lazy grammar's trigger words that are one token in this vocabulary
    trigger on that token; the others become patterns that only match when
    the word ends the text so far (plus a little whitespace), so the text the
    grammar is started with is always the word itself.
    """
    try:
        check_gbnf(grammar.text, grammar.root)
    except GrammarError as e:
        raise InvalidRequest(f"the grammar for this request is invalid: {e}", param=grammar.param) from None
    text, root = grammar.text.encode(), grammar.root.encode()
    if not grammar.lazy:
        ptr = lc.llama_sampler_init_grammar(model.vocab, text, root)
    else:
        tokens: list[int] = []
        patterns = list(grammar.trigger_patterns)
        for word in grammar.trigger_words:
            ids = model.tokenize(word, add_special=False, parse_special=True)
            if len(ids) == 1:
                tokens.append(ids[0])
            else:
                patterns.append(f"({regex_escape(word)})[ \\t\\r\\n]{{0,4}}$")
        c_patterns = (ctypes.c_char_p * max(1, len(patterns)))(*(p.encode() for p in patterns))
        c_tokens = (lc.llama_token * max(1, len(tokens)))(*tokens)
        ptr = lc.llama_sampler_init_grammar_lazy_patterns(
            model.vocab, text, root, c_patterns, len(patterns), c_tokens, len(tokens)
        )
    if not ptr:
        raise InvalidRequest("llama.cpp refused the grammar for this request", param=grammar.param)
    return ptr


# --- JSON schema to GBNF -------------------------------------------------------------

# Keywords that constrain values but that this converter cannot enforce.
_UNSUPPORTED = {
    "not": "'not'",
    "if": "'if'/'then'/'else'",
    "then": "'if'/'then'/'else'",
    "else": "'if'/'then'/'else'",
    "dependentSchemas": "'dependentSchemas'",
    "dependentRequired": "'dependentRequired'",
    "dependencies": "'dependencies'",
    "patternProperties": "'patternProperties'",
    "propertyNames": "'propertyNames'",
    "contains": "'contains'",
    "minContains": "'minContains'",
    "maxContains": "'maxContains'",
    "$dynamicRef": "'$dynamicRef'",
    "$recursiveRef": "'$recursiveRef'",
}
# Keywords that say nothing about which values are valid.
_ANNOTATIONS = {
    "title",
    "description",
    "default",
    "examples",
    "example",
    "$schema",
    "$id",
    "$anchor",
    "$comment",
    "$defs",
    "definitions",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "discriminator",
    "nullable",
}
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_BOUND_LIMIT = 10**9  # fractions are only written next to bounds smaller than this (float rounding)

# Dates with days every month has, so no calendar knowledge is needed (29 February is left
# out), in years 1000-9999 (year 0 is no date to Python).
_DATE = (
    '[1-9] [0-9]{3} "-" ( ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] )'
    ' | ( "0" [13-9] | "1" [0-2] ) "-" ( "29" | "30" )'
    ' | ( "0" [13578] | "1" [02] ) "-31" )'
)
_TIME = (
    '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )?'
    ' ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )'
)
_LABEL = "[a-z0-9] ( [a-z0-9-]{0,20} [a-z0-9] )?"
_HOSTNAME = f'( {_LABEL} "." ){{0,3}} [a-z]{{2,10}}'
_SEGMENT = "[a-zA-Z0-9._~-]{1,30}"
_URI = f'( "https" | "http" ) "://" {_HOSTNAME} ( "/" {_SEGMENT} ){{0,8}} "/"? ( "?" {_SEGMENT} "=" {_SEGMENT} )?'
_IPV4_OCTET = '( "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9] )'
_POINTER = '( "/" ( [a-zA-Z0-9._ -] | "~" [01] ){0,20} ){0,8}'
# Grammars for string formats; each is the string's content, without the quotes.
# Every one produces only valid values, and the (min, max) length of what it produces.
_FORMATS: dict[str, tuple[str, int, int | None]] = {
    "date": (_DATE, 10, 10),
    "time": (_TIME, 9, 21),
    "date-time": (f'{_DATE} "T" {_TIME}', 20, 32),
    "duration": ('"P" ( [0-9]{1,4} "D" ( "T" [0-9]{1,2} "H" )? | "T" [0-9]{1,2} [HMS] )', 3, 12),
    "uuid": (f'{_HEX}{{8}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{12}}', 36, 36),
    "email": (f'[a-zA-Z0-9_+-]{{1,30}} ( "." [a-zA-Z0-9_+-]{{1,30}} ){{0,2}} "@" {_HOSTNAME}', 6, None),
    "hostname": (_HOSTNAME, 2, None),
    "ipv4": (f'{_IPV4_OCTET} "." {_IPV4_OCTET} "." {_IPV4_OCTET} "." {_IPV4_OCTET}', 7, 15),
    "ipv6": (f'{_HEX}{{1,4}} ( ":" {_HEX}{{1,4}} ){{7}}', 15, 39),
    "uri": (_URI, 10, None),
    "json-pointer": (_POINTER, 0, None),
    # No digit after a 0: jsonschema's checker reads any such digit as a leading zero.
    "relative-json-pointer": (f'( "0" | [1-9]{{1,3}} "0"? ) ( "#" | {_POINTER} )', 1, None),
    "regex": ("[a-zA-Z0-9 ]{0,40}", 0, 40),
}
for _alias, _same in (
    ("idn-email", "email"),
    ("idn-hostname", "hostname"),
    ("uri-reference", "uri"),
    ("iri", "uri"),
    ("iri-reference", "uri"),
    ("uri-template", "uri"),
):
    _FORMATS[_alias] = _FORMATS[_same]


class SchemaError(InvalidRequest):
    """A JSON schema that is invalid, or that this server cannot enforce."""


def schema_grammar(schema: dict[str, Any] | None, *, param: str = "response_format", prefix: str = "") -> Grammar:
    """The grammar of JSON output matching `schema` (None: any JSON object).

    `prefix` is GBNF put before the JSON (e.g. an optional reasoning block).
    Raises `InvalidRequest(param)` for an invalid schema or one with keywords
    the grammar cannot enforce.
    """
    rules = Rules()
    value = rules.primitive("object") if schema is None else SchemaConverter(rules, schema, param).rule(schema, "json")
    return finish(rules, f"{prefix} {value}".strip(), param)


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


@dataclass(slots=True)
class SchemaConverter:
    """Writes GBNF rules for JSON schemas into `rules` (one converter per document)."""

    rules: Rules
    document: dict[str, Any] | bool
    param: str
    _refs: dict[str, str] = field(default_factory=dict)

    def error(self, why: str) -> SchemaError:
        return SchemaError(f"unsupported JSON schema in {self.param}: {why}", param=self.param)

    def rule(self, schema: Any, hint: str) -> str:
        """The name of a rule matching exactly values valid under `schema` (or a subset of them)."""
        if schema is True or schema == {}:
            return self.rules.primitive("value")
        if schema is False:
            raise self.error(f"'{hint}' allows no value at all (schema false)")
        if not isinstance(schema, dict):
            raise self.error(f"'{hint}' is not a schema (expected an object, got {type(schema).__name__})")
        for key in schema:
            if key in _UNSUPPORTED:
                raise self.error(f"the keyword {_UNSUPPORTED[key]} (at '{hint}') cannot be enforced")
        if "$ref" in schema:
            return self._ref(schema, hint)
        if "allOf" in schema:
            return self.rule(self._merge_all(schema, hint), hint)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self._any_of(schema, key, hint)
        if "const" in schema or "enum" in schema:
            return self._enum(schema, hint)
        types = schema.get("type")
        if isinstance(types, list):
            if not types:
                raise self.error(f"'{hint}' has an empty type list")
            alts = [self.rule({**schema, "type": t}, f"{hint}-{t}") for t in dict.fromkeys(types)]
            return self.rules.add(hint, " | ".join(alts))
        if types is None:
            types = _implied_type(schema)
            if types is None:
                return self.rules.primitive("value")
        if types not in _TYPES:
            raise self.error(f"'{hint}' has an unknown type {types!r}")
        build = getattr(self, f"_{types}")
        return build(schema, hint)

    # --- references and combinations ---

    def _resolve(self, ref: Any, hint: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise self.error(f"'{hint}' has $ref {ref!r}; only references inside the schema (#/...) work")
        node: Any = self.document
        for escaped in ref[1:].split("/")[1:] if ref != "#" else []:
            part = escaped.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise self.error(f"'{hint}' has $ref {ref!r}, which points at nothing")
        return node

    def _ref(self, schema: dict[str, Any], hint: str) -> str:
        ref = schema["$ref"]
        rest = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
        if rest:
            return self.rule({"allOf": [{"$ref": ref}, rest]}, hint)
        if ref in self._refs:
            return self._refs[ref]
        target = self._resolve(ref, hint)
        name = self.rules.reserve(ref.rsplit("/", 1)[-1] or "root")
        self._refs[ref] = name  # recursive schemas refer to the rule being defined
        self.rules.define(name, self.rule(target, name))
        return name

    def _deref(self, schema: Any, hint: str, seen: frozenset[str] = frozenset()) -> Any:
        """`schema` with a top-level $ref replaced by its target (for merging)."""
        while isinstance(schema, dict) and "$ref" in schema:
            ref = schema["$ref"]
            if ref in seen:
                raise self.error(f"'{hint}' combines a recursive $ref with allOf")
            seen = seen | {ref}
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            target = self._resolve(ref, hint)
            schema = self._merge([target, rest], hint) if rest else target
        return schema

    def _merge_all(self, schema: dict[str, Any], hint: str) -> dict[str, Any]:
        parts = schema["allOf"]
        if not isinstance(parts, list) or not parts:
            raise self.error(f"'{hint}' has an allOf that is not a non-empty list")
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return self._merge([*parts, rest], hint)

    def _merge(self, parts: Sequence[Any], hint: str) -> dict[str, Any]:
        """One schema equivalent to all of `parts` together, or an error when that is beyond us."""
        out: dict[str, Any] = {}
        resolved: list[dict[str, Any]] = []
        for raw in parts:
            part = self._deref(raw, hint)
            if part is True:
                continue
            if part is False or not isinstance(part, dict):
                raise self.error(f"'{hint}' has an allOf member that allows nothing or is not a schema")
            if "allOf" in part:
                part = self._merge_all(part, hint)
            resolved.append(part)
            for key, value in part.items():
                if key in _ANNOTATIONS:
                    continue
                if key not in out:
                    out[key] = value
                elif key == "properties":
                    merged = dict(out[key])
                    for name, sub in value.items():
                        merged[name] = {"allOf": [merged[name], sub]} if name in merged else sub
                    out[key] = merged
                elif key == "required":
                    out[key] = list(dict.fromkeys([*out[key], *value]))
                elif key == "type":
                    a = set(out[key] if isinstance(out[key], list) else [out[key]])
                    b = set(value if isinstance(value, list) else [value])
                    both = a & b | ({"integer"} if "number" in a | b and "integer" in a | b else set())
                    if not both:
                        raise self.error(f"'{hint}' combines incompatible types {sorted(a)} and {sorted(b)}")
                    out[key] = sorted(both) if len(both) > 1 else both.pop()
                elif key in _LOWER_BOUNDS and _is_number(value) and _is_number(out[key]):
                    out[key] = max(out[key], value)
                elif key in _UPPER_BOUNDS and _is_number(value) and _is_number(out[key]):
                    out[key] = min(out[key], value)
                elif key == "enum":
                    out[key] = [v for v in out[key] if any(_same_json(v, w) for w in value)]
                elif key == "items":
                    out[key] = {"allOf": [out[key], value]}
                elif not _same_json(out[key], value):
                    raise self.error(f"'{hint}' combines two different '{key}' values in allOf")
        closed = [p for p in resolved if p.get("additionalProperties") is False]
        for p in closed:
            allowed = set(p.get("properties", {}))
            for other in resolved:
                if set(other.get("properties", {})) - allowed:
                    raise self.error(
                        f"'{hint}' combines additionalProperties false with properties of another allOf member"
                    )
        return out

    def _any_of(self, schema: dict[str, Any], key: str, hint: str) -> str:
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise self.error(f"'{hint}' has a {key} that is not a non-empty list")
        rest = {k: v for k, v in schema.items() if k != key and k not in _ANNOTATIONS}
        if rest:  # keywords beside anyOf apply to every branch
            branches = [self._merge([rest, b], hint) for b in branches]
        if key == "oneOf":
            resolved = [self._deref(b, hint) for b in branches]
            for i, a in enumerate(resolved):
                for b in resolved[i + 1 :]:
                    if not _disjoint(a, b):
                        raise self.error(f"'{hint}' has oneOf branches that can match the same value; use anyOf")
        alts = [self.rule(b, f"{hint}-{i}") for i, b in enumerate(branches)]
        return self.rules.add(hint, " | ".join(alts))

    def _enum(self, schema: dict[str, Any], hint: str) -> str:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise self.error(f"'{hint}' has an enum that is not a list")
        rest = {k: v for k, v in schema.items() if k not in ("const", "enum")}
        kept = [v for v in values if _plain_valid(v, rest)]
        if not kept:
            raise self.error(f"'{hint}' allows no value: no enum/const value matches its other keywords")
        alts = [literal(json.dumps(v, ensure_ascii=False, separators=(",", ":"))) for v in kept]
        return self.rules.add(hint, " | ".join(dict.fromkeys(alts)))

    # --- types ---

    def _null(self, schema: dict[str, Any], hint: str) -> str:
        return self.rules.primitive("null")

    def _boolean(self, schema: dict[str, Any], hint: str) -> str:
        return self.rules.primitive("boolean")

    def _integer(self, schema: dict[str, Any], hint: str) -> str:
        self._no_multiple_of(schema, hint, integer=True)
        lo, lo_x, hi, hi_x = self._bounds(schema, hint)
        if lo is None and hi is None:
            return self.rules.primitive("integer")
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
        if ilo is not None and ihi is not None and ilo > ihi:
            raise self.error(f"'{hint}' allows no integer (range {lo}..{hi})")
        return self.rules.add(hint, int_range(ilo, ihi))

    def _number(self, schema: dict[str, Any], hint: str) -> str:
        self._no_multiple_of(schema, hint, integer=False)
        lo, lo_x, hi, hi_x = self._bounds(schema, hint)
        if lo is None and hi is None:
            return self.rules.primitive("number")
        alts = number_range(lo, lo_x, hi, hi_x)
        if not alts:
            raise self.error(
                f"'{hint}' has the range {lo}..{hi}, too narrow for this server to generate (it writes "
                "integers and decimals whose integer part stays inside the range)"
            )
        return self.rules.add(hint, " | ".join(alts))

    def _no_multiple_of(self, schema: dict[str, Any], hint: str, *, integer: bool) -> None:
        m = schema.get("multipleOf")
        if m is not None and not (integer and m == 1):
            raise self.error(f"'multipleOf' (at '{hint}') cannot be enforced")

    def _bounds(self, schema: dict[str, Any], hint: str) -> tuple[Fraction | None, bool, Fraction | None, bool]:
        """(low, low exclusive, high, high exclusive) as exact fractions, the tighter bound winning."""

        def num(key: str) -> Fraction | None:
            v = schema.get(key)
            if v is None or isinstance(v, bool):
                return None
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise self.error(f"'{key}' (at '{hint}') must be a finite number")
            return Fraction(str(v)) if isinstance(v, float) else Fraction(v)

        lo, lo_x = num("minimum"), schema.get("exclusiveMinimum") is True  # draft 4 form
        hi, hi_x = num("maximum"), schema.get("exclusiveMaximum") is True
        xlo, xhi = num("exclusiveMinimum"), num("exclusiveMaximum")
        if xlo is not None and (lo is None or xlo >= lo):
            lo, lo_x = xlo, True
        if xhi is not None and (hi is None or xhi <= hi):
            hi, hi_x = xhi, True
        if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_x or hi_x))):
            raise self.error(f"'{hint}' allows no number (range {float(lo)}..{float(hi)})")
        return lo, lo_x, hi, hi_x

    def _string(self, schema: dict[str, Any], hint: str) -> str:
        lo = schema.get("minLength", 0)
        hi = schema.get("maxLength")
        for key, v in (("minLength", lo), ("maxLength", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise self.error(f"'{key}' (at '{hint}') must be a non-negative integer")
        if hi is not None and hi < lo:
            raise self.error(f"'{hint}' has maxLength below minLength")
        quote = literal('"')
        fmt = schema.get("format")
        if fmt in _FORMATS:
            if "pattern" in schema:
                raise self.error(f"'{hint}' combines 'format' and 'pattern'")
            body, flo, fhi = _FORMATS[fmt]
            if flo < lo or (hi is not None and (fhi is None or fhi > hi)):
                raise self.error(f"'{hint}' combines format '{fmt}' with length limits it cannot guarantee")
            return self.rules.add(f"{hint}-{fmt}", f"{quote} {body} {quote}")
        if "pattern" in schema:
            if "minLength" in schema or hi is not None:
                raise self.error(f"'{hint}' combines 'pattern' with length limits")
            body = RegexConverter(self.param, hint).convert(schema["pattern"])
            return self.rules.add(hint, f"{quote} {body} {quote}")
        if lo == 0 and hi is None:
            return self.rules.primitive("string")
        char = self.rules.primitive("char")
        return self.rules.add(hint, f"{quote} {repeat(char, lo, hi, param=self.param)} {quote}")

    def _array(self, schema: dict[str, Any], hint: str) -> str:
        if schema.get("uniqueItems") is True and schema.get("maxItems", 2) > 1:
            raise self.error(f"'uniqueItems' (at '{hint}') cannot be enforced")
        self.rules.primitive("ws")
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems")
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # draft 7 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        if schema.get("unevaluatedItems") is False and "items" not in schema:
            items = False
        prefix = prefix or []
        if items is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and hi < lo:
            raise self.error(f"'{hint}' allows no array (minItems {lo} > maxItems {hi})")
        elems = [self.rule(p, f"{hint}-{i}") for i, p in enumerate(prefix)]
        rest = self.rule(items, f"{hint}-item") if items is not False else None

        def tail(i: int) -> str:
            """Elements i, i+1, ... each after a comma."""
            if hi is not None and i >= hi:
                return ""
            if i < len(elems):
                seq = f'ws "," ws {elems[i]} {tail(i + 1)}'.strip()
                return f"( {seq} )" + ("?" if i >= lo else "")
            assert rest is not None
            more = self.rules.add(f"{hint}-more", f'ws "," ws {rest}')
            return repeat(more, max(0, lo - i), None if hi is None else hi - i, param=self.param)

        if hi == 0:
            body = '"[" ws "]"'
        else:
            first = elems[0] if elems else rest
            seq = f"{first} {tail(1)}".strip()
            body = f'"[" ws ( {seq} ){"" if lo > 0 else "?"} ws "]"'
        return self.rules.add(hint, body)

    def _object(self, schema: dict[str, Any], hint: str) -> str:
        self.rules.primitive("ws")
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(props, dict) or not isinstance(required, list):
            raise self.error(f"'{hint}' has properties that is not an object or required that is not a list")
        extra = schema.get("additionalProperties", True)
        if schema.get("unevaluatedProperties") is False and "additionalProperties" not in schema:
            extra = False
        names = [n for n in props if props[n] is not False]
        for name in required:
            if name not in props and extra is False:
                raise self.error(f"'{hint}' requires '{name}', which additionalProperties forbids")
            if props.get(name) is False:
                raise self.error(f"'{hint}' requires '{name}', whose schema is false")
        n_min = schema.get("minProperties", 0)
        n_max = schema.get("maxProperties")
        if not names and not required and extra is not False:
            # A free-form map: any keys, values matching additionalProperties. Keys may repeat
            # (the last one wins when parsed), so only an upper bound on their number holds.
            if n_min > 1 or (n_max is not None and n_max < n_min):
                raise self.error(f"'minProperties' (at '{hint}') cannot be enforced for free-form keys")
            value = self.rule(extra, f"{hint}-value")
            pair = self.rules.add(f"{hint}-kv", f'{self.rules.primitive("string")} ws ":" ws {value}')
            if n_max == 0:
                return self.rules.add(hint, '"{" ws "}"')
            more = self.rules.add(f"{hint}-more", f'ws "," ws {pair}')
            rest = repeat(more, 0, None if n_max is None else n_max - 1, param=self.param)
            return self.rules.add(hint, f'"{{" ws ( {pair} {rest} ws ){"" if n_min else "?"} "}}"')
        req = list(dict.fromkeys(required))
        opt = [n for n in names if n not in req]
        if n_min > len(req) or (n_max is not None and n_max < len(req) + len(opt)):
            raise self.error(f"'minProperties'/'maxProperties' (at '{hint}') cannot be enforced here")

        def kv(name: str) -> str:
            sub = props.get(name, extra if extra is not True else {})
            value = self.rule(sub, f"{hint}-{name}")
            key = literal(json.dumps(name, ensure_ascii=False))
            return self.rules.add(f"{hint}-{name}-kv", f'{key} ws ":" ws {value}')

        parts = [kv(n) for n in req]
        body = ' ws "," ws '.join(parts)
        opt_rules = [kv(n) for n in opt]
        if opt_rules and parts:
            body += "".join(f' ( ws "," ws {r} )?' for r in opt_rules)
        elif opt_rules:
            # Any ordered subset of the optional properties, the first without a comma.
            names_from: list[str] = [""] * len(opt_rules)
            for i in range(len(opt_rules) - 1, -1, -1):
                later = "".join(f' ( ws "," ws {r} )?' for r in opt_rules[i + 1 :])
                alt = f"{opt_rules[i]}{later}"
                if i + 1 < len(opt_rules):
                    alt += f" | {names_from[i + 1]}"
                names_from[i] = self.rules.add(f"{hint}-from-{i}", alt)
            body = f"{names_from[0]}?"
        return self.rules.add(hint, f'"{{" ws {body} ws "}}"' if body else '"{" ws "}"')


def _implied_type(schema: dict[str, Any]) -> str | None:
    """The type a typeless schema's keywords talk about (None: they constrain nothing)."""
    keys = schema.keys()
    if keys & {"properties", "required", "additionalProperties", "minProperties", "maxProperties"}:
        return "object"
    if keys & {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}:
        return "array"
    if keys & {"minLength", "maxLength", "pattern", "format"}:
        return "string"
    if keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
        return "number"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and _json_type(a) == _json_type(b)


def _plain_valid(value: Any, schema: dict[str, Any]) -> bool:
    """Whether an enum/const value also passes the simple keywords beside it."""
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        vt = _json_type(value)
        if vt not in types and not (vt == "integer" and "number" in types):
            return False
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            return False
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return False
    if _is_number(value):
        checks = (
            ("minimum", operator.ge),
            ("maximum", operator.le),
            ("exclusiveMinimum", operator.gt),
            ("exclusiveMaximum", operator.lt),
        )
        for key, holds in checks:
            bound = schema.get(key)
            if bound is not None and _is_number(bound) and not holds(value, bound):
                return False
    return True


def _value_types(schema: Any) -> set[str] | None:
    """The JSON types a schema can accept, when its keywords say so (None: unknown)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return {_json_type(schema["const"])}
    if "enum" in schema and isinstance(schema["enum"], list):
        return {_json_type(v) for v in schema["enum"]}
    t = schema.get("type")
    if t is None:
        return None
    types = set(t if isinstance(t, list) else [t])
    return types | {"integer"} if "number" in types else types


def _enum_values(schema: Any) -> list[Any] | None:
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return values if isinstance(values, list) else None


def _disjoint(a: Any, b: Any) -> bool:
    """Whether no value can match both schemas (proved from types, consts or a tag property)."""
    ta, tb = _value_types(a), _value_types(b)
    if ta is not None and tb is not None and not ta & tb:
        return True
    va, vb = _enum_values(a), _enum_values(b)
    if va is not None and vb is not None:
        return not any(_same_json(x, y) for x in va for y in vb)
    if isinstance(a, dict) and isinstance(b, dict):
        pa, pb = a.get("properties", {}), b.get("properties", {})
        for name in set(a.get("required", [])) & set(b.get("required", [])):
            ea, eb = _enum_values(pa.get(name)), _enum_values(pb.get(name))
            if ea is not None and eb is not None and not any(_same_json(x, y) for x in ea for y in eb):
                return True
    return False


# --- numbers -----------------------------------------------------------------------


def _digits(a: str, b: str) -> list[str]:
    """GBNF sequences for the digit strings of equal length between a and b (inclusive)."""
    if not a:
        return [""]
    if a == b:
        return [literal(a)]
    if a[0] == b[0]:
        return [f"{literal(a[0])} {s}".strip() for s in _digits(a[1:], b[1:])]
    n = len(a) - 1
    low_full = a[1:] == "0" * n
    high_full = b[1:] == "9" * n
    out = []
    if not low_full:
        out += [f"{literal(a[0])} {s}".strip() for s in _digits(a[1:], "9" * n)]
    first = int(a[0]) + (0 if low_full else 1)
    last = int(b[0]) - (0 if high_full else 1)
    if first <= last:
        d = literal(str(first)) if first == last else f"[{first}-{last}]"
        out.append(f"{d} [0-9]{{{n}}}" if n > 1 else (f"{d} [0-9]" if n == 1 else d))
    if not high_full:
        out += [f"{literal(b[0])} {s}".strip() for s in _digits("0" * n, b[1:])]
    return out


def _natural(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the decimal integers lo..hi (lo >= 0; hi None: no limit), no leading zeros."""
    out: list[str] = []
    top = len(str(hi)) if hi is not None else len(str(lo))
    for width in range(len(str(lo)), top + 1):
        a = max(lo, 10 ** (width - 1) if width > 1 else 0)
        b = 10**width - 1 if hi is None else min(hi, 10**width - 1)
        if a <= b:
            out += _digits(str(a), str(b))
    if hi is None and top < 16:
        out.append(f"[1-9] [0-9]{{{top},15}}")
    return out


def int_range(lo: int | None, hi: int | None) -> str:
    """GBNF for the JSON integers lo..hi (None: unbounded on that side)."""
    alts: list[str] = []
    if lo is None or lo < 0:  # negative part: -m for m in max(1, -hi)..-lo
        m_lo = max(1, -hi) if hi is not None else 1
        m_hi = -lo if lo is not None else None
        if m_hi is None or m_lo <= m_hi:
            alts.append(f'"-" ( {" | ".join(_natural(m_lo, m_hi))} )')
    if hi is None or hi >= 0:
        alts += _natural(max(0, lo) if lo is not None else 0, hi)
    return " | ".join(alts)


def number_range(lo: Fraction | None, lo_x: bool, hi: Fraction | None, hi_x: bool) -> list[str]:
    """Alternatives for JSON numbers inside the bounds (a subset of them).

    Integers inside the range, plus decimals `m.ddd` whose whole unit interval
    [m, m+1) lies inside it (and `-m.ddd` for (-(m+1), -m]), so every decimal
    written is in range whatever its digits. Fractions have at most 6 digits
    and only appear next to bounds below 1e9, so that float parsing can never
    round a value onto an excluded bound.
    """
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
    alts = []
    if ilo is None or ihi is None or ilo <= ihi:
        alts.append(f"( {int_range(ilo, ihi)} )")
    if any(b is not None and abs(b) >= _BOUND_LIMIT for b in (lo, hi)):
        return alts
    frac = '"." [0-9]{1,6}'
    nonzero = '"." [0-9]{0,5} [1-9]'  # strictly above the integer part

    def span(a: int, b: int | None) -> str | None:
        return " | ".join(_natural(a, b)) if b is None or a <= b else None

    # m.ddd in [m, m+1): m >= lo (m > lo when exclusive, or m == lo with nonzero digits), m + 1 <= hi.
    p_lo = 0 if lo is None else max(0, math.floor(lo) + 1 if lo_x else math.ceil(lo))
    p_hi = None if hi is None else math.floor(hi) - 1
    if (s := span(p_lo, p_hi)) is not None:
        alts.append(f"( {s} ) {frac}")
    if lo is not None and lo_x and lo.denominator == 1 and lo >= 0 and (hi is None or lo + 1 <= hi):
        alts.append(f"{literal(str(lo.numerator))} {nonzero}")
    # -m.ddd in (-(m+1), -m]: -m <= hi (-m < hi when exclusive, or -m == hi with nonzero digits), -(m+1) >= lo.
    n_lo = 0 if hi is None else max(0, math.floor(-hi) + 1 if hi_x else math.ceil(-hi))
    n_hi = None if lo is None else math.floor(-lo) - 1
    if (s := span(n_lo, n_hi)) is not None:
        alts.append(f'"-" ( {s} ) {frac}')
    if hi is not None and hi_x and hi.denominator == 1 and hi <= 0 and (lo is None or hi - 1 >= lo):
        alts.append(f'"-" {literal(str(-hi.numerator))} {nonzero}')
    return alts


# --- regular expressions ------------------------------------------------------------

# What a JSON string may hold raw; everything else needs an escape.
_UNSAFE = [("\x00", "\x1f"), ('"', '"'), ("\\", "\\"), ("\x7f", "\x7f")]
_PRINTABLE = [(" ", "~")]
_SPACES = [
    ("\t", "\r"),
    (" ", " "),
    ("\xa0", "\xa0"),
    ("\u1680", "\u1680"),
    ("\u2000", "\u200a"),
    ("\u2028", "\u2029"),
    ("\u202f", "\u202f"),
    ("\u205f", "\u205f"),
    ("\u3000", "\u3000"),
    ("\ufeff", "\ufeff"),
]


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
    """

    def __init__(self, param: str, hint: str) -> None:
        self.param = param
        self.hint = hint
        self.src = ""
        self.pos = 0

    def error(self, why: str) -> SchemaError:
        return SchemaError(f"unsupported pattern at '{self.hint}': {why}", param=self.param)

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
            return char_class(_minus([("\x00", "\U0010ffff")], [*_UNSAFE, ("\u2028", "\u2029")]))
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
            ranges = _minus([("\x00", "\U0010ffff")], ranges)
        return self.ranges_gbnf(ranges)

    def ranges_gbnf(self, ranges: list[tuple[str, str]]) -> str:
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
        """One character of the string's value, as its JSON text."""
        return literal(json.dumps(ch, ensure_ascii=False)[1:-1])
