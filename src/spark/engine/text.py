"""Incremental detokenized text: whole UTF-8 characters (`TextStream`) and stop strings (`StopStrings`).

Tokens arrive as byte pieces. A piece may end in the middle of a UTF-8
character, and the text may end in the first characters of a stop string
that the next token completes (or disproves). Both only release text that
can never be retracted: incomplete bytes and a possible stop-string start
are held back until the next piece decides them.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class StopStrings:
    """Cuts text at the first stop string, holding back what may be the start of one."""

    def __init__(self, stop: Sequence[str] | None = None) -> None:
        self._stops = [s for s in (stop or []) if s]
        self._held = ""  # text that may be the start of a stop string
        self.stop_sequence: str | None = None  # the stop string found, once found

    @property
    def stopped(self) -> bool:
        return self.stop_sequence is not None

    def push(self, text: str) -> str:
        """Add text; return what is now safe to emit (ending right before a stop string found)."""
        if self.stopped or not text:
            return ""
        if not self._stops:
            return text
        buf = self._held + text
        cut, stop = _first_stop(buf, self._stops)
        if stop is not None:
            self.stop_sequence = stop
            self._held = ""
            return buf[:cut]
        keep = partial_marker(buf, self._stops)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """The text still held back: no stop string followed it."""
        out, self._held = ("" if self.stopped else self._held), ""
        return out


class TextStream:
    """Turns token pieces into text with whole UTF-8 characters only."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the characters they complete."""
        return self._decoder.decode(piece)

    def flush(self) -> None:
        """End of generation: bytes of a character never finished are dropped rather than
        shown as a replacement character."""
        self._decoder.reset()


def _first_stop(text: str, stops: list[str]) -> tuple[int, str | None]:
    """Index and text of the earliest occurrence of any stop string, or (-1, None)."""
    best, found = -1, None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (found is None or i < best):
            best, found = i, s
    return best, found


def partial_marker(text: str, markers: Sequence[str]) -> int:
    """Length of the longest end of `text` that is the start (not the whole) of a marker:
    text that must be held back because a stop string or a tag may be beginning there."""
    best = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:k]):
                best = k
                break
    return best


def may_start(text: str, marker: str) -> bool:
    """Whether `text` starts with `marker`, or may (it is a start of it)."""
    return text.startswith(marker) or marker.startswith(text)


def skim(text: str, marker: str) -> int | None:
    """How much of `text` `marker` takes, whitespace before and between its words taken loosely: the
    length matched, -1 when `text` may still become it, None when it cannot."""
    at = 0
    for word in marker.split():
        at = len(text) - len(text[at:].lstrip())
        if at == len(text):
            return -1
        piece = text[at : at + len(word)]
        if not word.startswith(piece):
            return None
        if len(piece) < len(word):
            return -1
        at += len(word)
    return at
