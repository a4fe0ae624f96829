"""Checking GBNF before llama.cpp sees it.

A grammar llama.cpp cannot parse makes `llama_sampler_init_grammar` return
NULL (using it would crash the process), and some it parses it misreads, so
every grammar passes `check_gbnf` first: a checker that follows llama.cpp's
own parser (llama-grammar.cpp) rule by rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from spark.engine.grammar.errors import GrammarError
from spark.json_schema import MAX_ALTERNATIVES

MAX_REPEAT = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD
MAX_NESTING = 64  # groups within groups: a client's grammar is checked by recursion, as llama.cpp parses it
MAX_GRAMMAR_CHARS = 512 * 1024
"""A grammar's length: it is checked here and parsed by llama.cpp for each request, in the runner."""

# An item of a parsed sequence: what it is, and whether it may match nothing.
_Item = tuple[
    str, Any, bool
]  # ("ref", name, nullable) | ("term", literal or None, nullable) | ("group", alts, nullable)


class _GbnfParser:
    """A checker following llama.cpp's GBNF parser (llama-grammar.cpp), rule by rule."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.rules: dict[str, list[list[_Item]]] = {}
        self.refs: set[str] = set()
        self.symbols = 0  # rules llama.cpp creates (names, groups, repetitions): bounds nested repeats
        self.depth = 0  # groups open at the current position

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
                chars = []
                while self.peek() != '"':
                    chars.append(self.char())
                self.pos += 1
                items.append(("term", "".join(chars), not chars))
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
                self.depth += 1
                if self.depth > MAX_NESTING:
                    raise self.fail(f"groups nested more than {MAX_NESTING} deep")
                alts = self.alternates(nested=True)
                self.depth -= 1
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
    bounds, that no rule is left-recursive (llama.cpp refuses those), and the
    size: its length, and how many alternatives it may keep open at once
    (llama.cpp's sampler checks each against the whole vocabulary at every step).
    """
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarError(
            f"the grammar is {len(text)} characters long, more than this server's limit of {MAX_GRAMMAR_CHARS}"
        )
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

    try:
        for name in p.rules:
            if name not in state:
                visit(name)
    except RecursionError:  # a chain of thousands of rules, each the next one's first item
        raise GrammarError("the grammar's rules refer to each other too deeply") from None
    _check_alternatives(p.rules, item_nullable)


def _check_alternatives(rules: dict[str, list[list[_Item]]], nullable: Callable[[_Item], bool]) -> None:
    """`GrammarError` when llama.cpp may keep more than `MAX_ALTERNATIVES` stacks alive at once.

    A bound, rule by rule: each alternative of a rule (or group) may be alive at the same time, and
    inside one alternative the stacks stand at one item, or at a run of items that may match
    nothing. So 1,000 values open 1,000 at once, and 100 alternatives `"a" s "1" | "a" s "2" | ...`
    with a 100-way `s` 10,000 (they all match "a", then each opens `s`). But alternatives that open
    with literals none of which begins another (`"\"get_weather\"" args-0 | "\"bash\"" args-1`, a
    tool call's name) part at the literal: past it only one of them lives, so they count as the
    largest, not the sum (a list of tools is a choice of one). A reference back to a rule being
    measured counts once: recursion in a grammar (JSON's values) nests, it does not multiply.
    """
    alive: dict[str, int] = {}
    leads: dict[str, str | None] = {}  # a rule of one alternative: the literal it opens with

    def item(it: _Item) -> int:
        kind, what, _ = it
        return alive.get(what, 1) if kind == "ref" else alternates(what) if kind == "group" else 1

    def lead(alt: list[_Item]) -> str | None:
        if not alt or alt[0][2]:  # nothing, or a first item that may match nothing
            return None
        kind, what, _ = alt[0]
        return cast(str | None, what if kind == "term" else leads.get(what) if kind == "ref" else None)

    def most(alt: list[_Item]) -> int:
        top = run = 0  # a run of items ends at (starts after, going backwards) one that must match
        for it in reversed(alt):
            run = item(it) + (run if nullable(it) else 0)
            top = max(top, run)
        return top

    def alternates(alts: list[list[_Item]]) -> int:
        free, parting = 0, []  # alternatives with no literal to part at, and those with one
        for alt in alts:
            opening = lead(alt)
            if opening is None:
                free += most(alt)
            else:
                parting.append((opening, most(alt)))
        # alternatives whose literals begin one another stay together (one class); classes part
        classes: list[tuple[list[str], int]] = []
        for opening, count in parting:
            joined = [c for c in classes if any(o.startswith(opening) or opening.startswith(o) for o in c[0])]
            merged = ([opening, *(o for c in joined for o in c[0])], count + sum(c[1] for c in joined))
            classes = [c for c in classes if c not in joined] + [merged]
        return free + max([len(parting), *(c[1] for c in classes)])

    for name in _post_order(rules):  # the rules a rule refers to come first, but for references back
        alive[name] = alternates(rules[name])
        leads[name] = lead(rules[name][0]) if len(rules[name]) == 1 else None
        if alive[name] > MAX_ALTERNATIVES:
            raise GrammarError(
                f"rule '{name}' may keep {alive[name]} alternatives open at once, more than this server's "
                f"grammar limit of {MAX_ALTERNATIVES}"
            )


def _post_order(rules: dict[str, list[list[_Item]]]) -> list[str]:
    """The rules, each after those it refers to (depth first; a reference back to a rule still being
    visited is left out), without recursion: a grammar may chain thousands of rules."""

    def refs(alts: list[list[_Item]], out: list[str]) -> list[str]:
        for alt in alts:
            for kind, what, _ in alt:
                if kind == "ref":
                    out.append(what)
                elif kind == "group":
                    refs(what, out)
        return out

    order: list[str] = []
    seen: set[str] = set()
    for first, alts in rules.items():
        if first in seen:
            continue
        seen.add(first)
        path = [(first, iter(refs(alts, [])))]
        while path:
            name, pending = path[-1]
            nxt = next(pending, None)
            if nxt is None:
                path.pop()
                order.append(name)
            elif nxt not in seen:
                seen.add(nxt)
                path.append((nxt, iter(refs(rules[nxt], []))))
    return order
