"""A completion's prompt sent back before its answer (OpenAI's `echo`), with log probabilities.

With `logprobs`, each prompt token's log probability is read from the logits of
the position before it, so the prompt is evaluated with logits at every position
(in chunks no longer than a draft's verification, so llama.cpp's output buffer
never grows past what speculation already uses) and none of it comes from the
KV cache, whose positions have no logits. Evaluation tools (lm-evaluation-harness's
loglikelihood tasks) score a continuation this way, with `max_tokens` 1.
"""

from __future__ import annotations

from spark.engine.logprobs import Logprobs
from spark.engine.native import Context
from spark.types import TextDelta, TokenLogprob


class PromptEcho:
    """The echo of one prompt: its text, and its tokens' entries when the request asks.

    `start` is where the echoed tokens begin in the prompt (1 after a BOS token the
    engine added: the client never wrote it); the first prompt token has no
    log probability (nothing precedes it)."""

    def __init__(self, text: str, start: int, *, prompt: list[int], logprobs: Logprobs | None) -> None:
        self._text = text
        self._prompt = prompt
        self._logprobs = logprobs
        self._entries: list[TokenLogprob] = []
        if logprobs is not None and start == 0:
            self._entries.append(TokenLogprob(logprobs.piece(prompt[0]), None))
        self._start = start
        self._chunk = (0, 0, 0)  # the prompt positions in the batch being decoded (see `chunk`)

    @property
    def needs_logits(self) -> bool:
        """Whether every prompt position must give logits (and none may be reused from the cache)."""
        return self._logprobs is not None

    def chunk(self, first: int, last_row: int, n: int) -> None:
        """Prompt positions `first` .. `first + n - 1` go in the batch being built, with logits at
        its rows up to `last_row`."""
        self._chunk = first, last_row, n

    def evaluated(self, ctx: Context) -> None:
        """The batch was decoded: read the entries of the tokens after the chunk's positions."""
        if self._logprobs is None:
            return
        first, last_row, n = self._chunk
        row = last_row - n + 1
        for index in range(max(first + 1, self._start), min(first + n + 1, len(self._prompt))):
            self._entries.append(self._logprobs.entry(ctx, row + index - first - 1, self._prompt[index]))

    def event(self) -> TextDelta:
        """The prompt's text as the answer's first text, with its entries if asked."""
        return TextDelta(self._text, self._entries if self._logprobs is not None else None)
