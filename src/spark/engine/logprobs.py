"""Log probabilities of answer tokens (OpenAI's `logprobs`), read from the logits llama.cpp computed.

They are the model's own (a log-softmax of its raw logits), before temperature, penalties or a
grammar shape the choice, as llama-server and OpenAI report them. A token's entry goes out with
the text it made: held while that text is (an incomplete character, a possible stop string), and
dropped when it made reasoning or a tool call instead (OpenAI's `logprobs.content` is the content's).
"""

from __future__ import annotations

from collections.abc import Sequence

from spark.engine.native import Context, Model
from spark.types import Event, TextDelta, TokenChoice, TokenLogprob


class Logprobs:
    """The log probabilities of one request's tokens, with `n_top` alternatives each."""

    def __init__(self, model: Model, n_top: int) -> None:
        self._model = model
        self._n_top = n_top
        self._pending: list[TokenLogprob] = []

    def add(self, ctx: Context, row: int, token: int) -> None:
        """Record `token`, chosen from output `row` of the last decode (an end of generation is no
        answer token: it is left out)."""
        if not self._model.is_eog(token):
            self._pending.append(self.entry(ctx, row, token))

    def entry(self, ctx: Context, row: int, token: int) -> TokenLogprob:
        """`token`'s entry, read from output `row` of the last decode."""
        import numpy as np

        logits = ctx.logits_array(row, self._model.n_vocab)
        peak = float(logits.max())
        log_total = peak + float(np.log(np.exp(logits - peak).sum()))
        top: list[TokenChoice] = []
        if self._n_top:
            best = np.argpartition(logits, -self._n_top)[-self._n_top :]
            best = best[np.argsort(logits[best])[::-1]]
            top = [TokenChoice(self.piece(int(t)), float(logits[t]) - log_total) for t in best]
        return TokenLogprob(self.piece(token), float(logits[token]) - log_total, top)

    def piece(self, token: int) -> bytes:
        """The bytes `token` stands for."""
        return self._model.piece(token)

    def attach(self, events: Sequence[Event]) -> Sequence[Event]:
        """`events` (the output of the tokens added so far) with those tokens' entries on the first
        text among them; entries whose tokens made only reasoning or a call are dropped."""
        if not events or not self._pending:
            return events
        pending, self._pending = self._pending, []
        out = list(events)
        for i, event in enumerate(out):
            if isinstance(event, TextDelta):
                out[i] = TextDelta(event.text, pending)
                break
        return out
