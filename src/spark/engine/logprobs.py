"""Log probabilities of answer tokens (OpenAI's `logprobs`), read from the logits llama.cpp computed.

They are the model's own (a log-softmax of its raw logits), before temperature, penalties or a
grammar shape the choice, as llama-server and OpenAI report them; or, where a request asks for
llama-server's `post_sampling_probs`, those of what the sampler chain drew the token from (a token
the engine wrote itself, such as a thinking block's end, is certain). A token's entry goes out with
the text it made: held while that text is (an incomplete character, a possible stop string), and
dropped when it made reasoning or a tool call instead (OpenAI's `logprobs.content` is the content's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark.engine.native import Context, Model
from spark.engine.sampling import SamplerChain
from spark.types import CompletionRequest, Event, GenerationRequest, TextDelta, TokenChoice, TokenLogprob

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


class Logprobs:
    """The log probabilities of one request's tokens, with `n_top` alternatives each."""

    def __init__(self, model: Model, n_top: int, *, post_sampling: bool = False) -> None:
        self._model = model
        self._n_top = n_top
        self.post_sampling = post_sampling  # read from what the sampler drew (`SamplerChain(keep_drawn=True)`)
        self._pending: list[TokenLogprob] = []

    @classmethod
    def of(cls, model: Model, request: GenerationRequest) -> Logprobs | None:
        """What `request` asks for, None when it asks for no log probabilities."""
        if request.logprobs is None:
            return None
        post = isinstance(request, CompletionRequest) and request.post_sampling_probs
        return cls(model, request.logprobs, post_sampling=post)

    def add(self, ctx: Context, row: int, token: int, sampler: SamplerChain) -> None:
        """Record `token`, chosen by `sampler` from output `row` of the last decode (an end of
        generation is no answer token: it is left out)."""
        if self._model.is_eog(token):
            return
        self._pending.append(self._drawn(sampler, token) if self.post_sampling else self.entry(ctx, row, token))

    def entry(self, ctx: Context, row: int, token: int) -> TokenLogprob:
        """`token`'s entry, read from output `row` of the last decode."""
        import numpy as np

        logits = ctx.logits_array(row, self._model.n_vocab)
        peak = float(logits.max())
        log_total = peak + float(np.log(np.exp(logits - peak).sum()))
        top = self._top(logits, shift=-log_total)
        return TokenLogprob(self.piece(token), float(logits[token]) - log_total, top, token)

    def _drawn(self, sampler: SamplerChain, token: int) -> TokenLogprob:
        """`token`'s entry in what `sampler` drew it from: the candidates its chain left."""
        import numpy as np

        drawn = sampler.drawn
        if drawn is None or drawn.token != token:  # written by the engine: certain
            return TokenLogprob(
                self.piece(token), 0.0, [TokenChoice(self.piece(token), 0.0, token)][: self._n_top], token
            )
        logprob = float(drawn.logprobs[np.flatnonzero(drawn.ids == token)[0]])
        return TokenLogprob(self.piece(token), logprob, self._top(drawn.logprobs, drawn.ids), token)

    def _top(
        self, scores: NDArray[np.floating], ids: NDArray[np.integer] | None = None, shift: float = 0.0
    ) -> list[TokenChoice]:
        """The `n_top` tokens with the highest `scores`, best first, each scored `score + shift`; the
        token of `scores[i]` is `ids[i]` (by default `i`: scores over the whole vocabulary)."""
        import numpy as np

        n_top = min(self._n_top, len(scores))
        if not n_top:
            return []
        best = np.argpartition(scores, -n_top)[-n_top:]
        best = best[np.argsort(scores[best])[::-1]]
        tokens = [int(i if ids is None else ids[i]) for i in best]
        return [TokenChoice(self.piece(t), float(scores[i]) + shift, t) for t, i in zip(tokens, best, strict=True)]

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
