"""llama-server's limits for code completion in an editor (`n_indent`, `t_max_predict_ms`): the
answer ends, as at max_tokens, where a code block ends or once it has taken long enough."""

from __future__ import annotations

import time
from collections.abc import Callable

from spark.types import CompletionRequest, Event, Request, TextDelta


class LineLimits:
    """Ends the answer when a line after the first starts less indented than `min_indent` (spaces
    and tabs), its text cut before that line's first other character; or, once `seconds` have gone
    by since the first token, at the next token that writes a line break (kept)."""

    def __init__(self, min_indent: int, seconds: float | None, clock: Callable[[], float] = time.perf_counter) -> None:
        self._min_indent = min_indent
        self._seconds = seconds
        self._clock = clock
        self._deadline: float | None = None  # set at the first token
        self._indent: int | None = None  # the current line's indentation so far; None: not measured
        self._line_break = False
        self.ended = False

    def filter(self, events: list[Event]) -> list[Event]:
        """The events up to where the answer ends; none once it has."""
        if self._deadline is None and self._seconds is not None:
            self._deadline = self._clock() + self._seconds
        self._line_break = False  # in these events' text
        out: list[Event] = []
        for event in events:
            if self.ended:
                break
            if not isinstance(event, TextDelta):
                out.append(event)
            elif text := self._cut(event.text):
                out.append(TextDelta(text))
        if self._line_break and self._deadline is not None and self._clock() >= self._deadline:
            self.ended = True
        return out

    def _cut(self, text: str) -> str:
        for i, char in enumerate(text):
            if char == "\n":
                self._line_break = True
                self._indent = 0 if self._min_indent else None
            elif self._indent is not None:
                if char in " \t":
                    self._indent += 1
                    continue
                if self._indent < self._min_indent:
                    self.ended = True
                    return text[:i]
                self._indent = None  # indented enough: the rest of the line is not looked at
        return text


def line_limits(request: Request) -> LineLimits | None:
    """The limits `request` asks for, if any (a completion's `min_indent` and `time_limit`)."""
    if not isinstance(request, CompletionRequest) or not (request.min_indent or request.time_limit):
        return None
    return LineLimits(request.min_indent, request.time_limit)
