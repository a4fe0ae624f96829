"""Reasoning: models that think in a `<think>...</think>` block before they answer.

`think_syntax` recognises such a model from its chat template. `ThinkSplitter`
separates the thinking from the answer as text streams in, holding back only
text that could still be the start of a tag. `think_prefix` writes the GBNF
for an optional (or already opened) thinking block, so that a grammar for
the answer lets the model think first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spark.engine.grammar import Rules, char_class, literal
from spark.engine.text import partial_marker
from spark.types import template_thinks

Part = tuple[Literal["reasoning", "content"], str]


@dataclass(frozen=True, slots=True)
class ThinkSyntax:
    """The tags around a model's thinking."""

    open: str = "<think>"
    close: str = "</think>"

    @property
    def markers(self) -> tuple[str, ...]:
        """The tags, and a tag's first part where it is a special token and a word (Gemma 4's `<|channel>`)."""
        head = self.open.split(">", 1)[0] + ">" if self.open.startswith("<|") else self.open
        return (self.open, self.close, head) if head != self.open else (self.open, self.close)

    def opened_by(self, prompt: str) -> bool:
        """Whether the rendered prompt ends inside a thinking block (the template opened it)."""
        return prompt.rstrip().endswith(self.open)


# Tags other than <think> that thinking models use, recognised by their opening tag in the template.
_OTHER_TAGS = (
    ThinkSyntax("[THINK]", "[/THINK]"),  # Magistral, Ministral 3 reasoning
    ThinkSyntax("<seed:think>", "</seed:think>"),  # Seed-OSS
    ThinkSyntax("<mm:think>", "</mm:think>"),  # MiniMax M3
    ThinkSyntax("<|channel>thought", "<channel|>"),  # Gemma 4
)


def think_syntax(template: str | None) -> ThinkSyntax | None:
    """The thinking syntax of a chat template, or None for a model that does not think."""
    if not template_thinks(template):
        return None
    assert template is not None
    return next((syntax for syntax in _OTHER_TAGS if syntax.open in template), ThinkSyntax())


class ThinkSplitter:
    """Splits streamed text into reasoning and content.

    A thinking block counts only at the very start of the output (after
    whitespace), or from the first character when the prompt opened it.
    Whitespace right after the tags is dropped.
    """

    def __init__(self, syntax: ThinkSyntax, *, opened: bool) -> None:
        self._syntax = syntax
        self._state: Literal["start", "reasoning", "content"] = "reasoning" if opened else "start"
        self._buf = ""
        self._strip = opened  # drop whitespace at the start of the current part

    @property
    def in_reasoning(self) -> bool:
        return self._state == "reasoning"

    def feed(self, text: str) -> list[Part]:
        """The parts `text` completes (content may still hold back a partial tag)."""
        self._buf += text
        out: list[Part] = []
        if self._state == "start":
            head = self._buf.lstrip()
            if head.startswith(self._syntax.open):
                self._buf = head[len(self._syntax.open) :]
                self._state, self._strip = "reasoning", True
            elif not head or self._syntax.open.startswith(head):
                return out  # still undecided
            else:
                self._state = "content"
        if self._state == "reasoning":
            if self._strip:
                self._buf = self._buf.lstrip()
                if not self._buf:
                    return out
                self._strip = False
            end = self._buf.find(self._syntax.close)
            if end < 0:
                keep = partial_marker(self._buf, [self._syntax.close])
                emit, self._buf = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
                if emit:
                    out.append(("reasoning", emit))
                return out
            if end:
                out.append(("reasoning", self._buf[:end]))
            self._buf = self._buf[end + len(self._syntax.close) :]
            self._state, self._strip = "content", True
        if self._strip:
            self._buf = self._buf.lstrip()
            if not self._buf:
                return out
            self._strip = False
        if self._buf:
            out.append(("content", self._buf))
            self._buf = ""
        return out

    def finish(self) -> list[Part]:
        """Whatever is still held back, at the end of generation."""
        buf, self._buf = self._buf, ""
        if not buf or (self._strip and not buf.strip()):
            return []
        return [("reasoning" if self._state == "reasoning" else "content", buf)]


def not_containing(rules: Rules, word: str, hint: str) -> str:
    """A rule matching any text that does not contain `word` (a KMP automaton in GBNF)."""
    chars = sorted(set(word))
    n = len(word)

    def step(k: int, c: str) -> int:
        s = word[:k] + c
        for m in range(min(len(s), n), 0, -1):
            if s.endswith(word[:m]):
                return m
        return 0

    names = [rules.reserve(f"{hint}-{k}") for k in range(n)]
    other = char_class([(c, c) for c in chars], negated=True)
    for k in range(n):
        alts = [f"{other} {names[0]}"]
        for c in chars:
            nxt = step(k, c)
            if nxt < n:
                alts.append(f"{literal(c)} {names[nxt]}")
        rules.define(names[k], " | ".join(["", *alts]))
    return names[0]


def think_prefix(rules: Rules, syntax: ThinkSyntax, *, opened: bool) -> str:
    """GBNF for the thinking before an answer: the rest of an opened block, or an optional block."""
    body = not_containing(rules, syntax.close, "think")
    lead = rules.add("think-end", "[ \\t\\r\\n]{0,4}")
    block = f"{body} {literal(syntax.close)} {lead}"
    if opened:
        return block
    return f"( {literal(syntax.open)} {block} )?"


class ThinkBudget:
    """Counts thinking tokens; past the limit, says which tokens close the block.

    The closing tokens are only written between whole characters, so that a
    grammar reading the output never sees a broken UTF-8 sequence.
    """

    def __init__(self, limit: int, close_tokens: list[int]) -> None:
        self._limit = limit
        self._close = close_tokens
        self._used = 0
        self._pending = 0  # continuation bytes the last character still needs
        self._closed = False

    def after(self, piece: bytes, *, in_reasoning: bool) -> list[int]:
        """The tokens to force after a generated token (its bytes `piece`), usually none."""
        for byte in piece:
            if self._pending and byte & 0xC0 == 0x80:
                self._pending -= 1
            else:
                self._pending = 3 if byte >= 0xF0 else 2 if byte >= 0xE0 else 1 if byte >= 0xC0 else 0
        if not in_reasoning or self._closed:
            return []
        self._used += 1
        if self._used < self._limit or self._pending:
            return []
        self._closed = True
        return list(self._close)
