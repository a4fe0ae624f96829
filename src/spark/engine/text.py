"""Incremental detokenized text: whole UTF-8 characters and stop strings.

Tokens arrive as byte pieces. A piece may end in the middle of a UTF-8
character, and the text may end in the first characters of a stop string
that the next token completes (or disproves). `TextStream` only releases
text that can never be retracted: incomplete bytes and a possible stop-string
start are held back until the next piece decides them.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    """Turns token pieces into text that is safe to show, cutting at stop strings."""

    def __init__(self, stop: list[str] | None = None) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in (stop or []) if s]
        self._held = ""  # text that may be the start of a stop string
        self.stop_sequence: str | None = None  # the stop string found, once found

    @property
    def stopped(self) -> bool:
        return self.stop_sequence is not None

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the text now safe to emit.

        After a stop string is found, `stop_sequence` names it, the returned
        text ends right before it, and further pieces are ignored.
        """
        if self.stopped:
            return ""
        text = self._decoder.decode(piece)
        if not self._stops:
            return text
        if not text:
            return ""
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
        """The text still held at the end of generation.

        Bytes of a character the generation never finished are dropped rather
        than shown as a replacement character.
        """
        if self.stopped:
            return ""
        self._decoder.reset()
        out, self._held = self._held, ""
        return out


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
