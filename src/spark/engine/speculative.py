"""Speculative decoding by n-gram lookup: guess a slot's next tokens from its own history.

Much real output copies from its prompt (edited code, quoted paragraphs,
reformatted lists). `NgramDrafter` keeps, for a few n-gram sizes, where each
n-gram of the prompt and the output so far last occurred; the tokens that
followed the latest earlier occurrence of the history's last n tokens are the
draft. The engine puts the draft in the same batch as the slot's next token,
with logits for every drafted position, and verifies it there.

Why the output stays exact. At each drafted position the engine samples from
the target model's logits with the slot's own sampler chain (grammar,
penalties, logit bias, temperature, its seeded RNG), exactly as it would
without a draft, and keeps going while the sampled token equals the drafted
one; the first token that differs is kept too, and the rest of the draft is
dropped from the KV cache. This is llama-server's
`common_sampler_sample_and_accept_n`. Each output token is drawn from the
target distribution given the true preceding tokens, and rejected draft
tokens never reach the sampler chain, so for a deterministic drafter (this
one: a function of the history alone) the output has exactly the target's
distribution; greedy output is token for token the same, and so is seeded
sampled output (the RNG is drawn once per output token either way), up to
the floating-point differences of batched evaluation.

Why it never costs much. The draft length adapts to acceptance (doubling
after a draft accepted whole, down to what was accepted otherwise), and a
slot whose drafts keep failing pauses drafting for ever longer stretches
(16, 32, 64, ... tokens), which turns speculation off for answers that copy
nothing while it comes back for ones that start copying.
"""

from __future__ import annotations

from collections.abc import Sequence

from spark.engine.vision import IMAGE_TOKEN

# n-gram sizes looked up, longest first: a longer match predicts better.
NGRAM_SIZES = (6, 4, 3, 2)
FIRST_DRAFT = 4  # tokens drafted at first
MAX_DRAFT = 16  # most tokens one slot drafts in one step
MISSES_TO_PAUSE = 3  # drafts in a row with nothing accepted before a slot pauses
FIRST_PAUSE = 16  # tokens of the first pause; each next pause is twice as long
MAX_PAUSE = 4096


class NgramDrafter:
    """Drafts the next tokens of one generation from its prompt and output so far.

    `push` every output token, `draft` before a step; after it add the confirmed
    tokens to `accepted` and call `adapt`.
    """

    def __init__(self, prompt: Sequence[int]) -> None:
        self._tokens = list(prompt)
        t = self._tokens
        # index[n][ngram] = the position right after the latest occurrence of `ngram` that has a
        # successor; the history's own last n-gram is not indexed until its successor arrives.
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        for n in NGRAM_SIZES:
            ngrams = zip(*(t[i:] for i in range(n)), strict=False)  # each n-gram, by where it starts
            self._index[n] = dict(zip(ngrams, range(n, len(t)), strict=False))  # later ones overwrite earlier
        self.limit = FIRST_DRAFT
        self.drafted = 0  # tokens drafted over the whole generation
        self.accepted = 0  # of which the model confirmed
        self._misses = 0
        self._pause = 0  # steps left without drafting
        self._next_pause = FIRST_PAUSE

    def push(self, token: int) -> None:
        """Add an output token to the history."""
        t = self._tokens
        t.append(token)
        end = len(t) - 1
        for n, index in self._index.items():
            if end >= n:
                index[tuple(t[end - n : end])] = end

    def draft(self, n_max: int) -> list[int]:
        """Up to `min(n_max, limit)` tokens guessed to follow the history; [] for no guess."""
        if self._pause > 0:
            self._pause -= 1
            return []
        n_max = min(n_max, self.limit)
        if n_max <= 0:
            return []
        t = self._tokens
        for n, index in self._index.items():
            if len(t) <= n:
                continue
            start = index.get(tuple(t[-n:]))
            if start is not None:
                guess = t[start : start + n_max]
                period = len(t) - start
                while len(guess) < n_max:  # a match close to the end repeats: the guess goes on repeating
                    guess.append(guess[len(guess) - period])
                if IMAGE_TOKEN in guess:  # an image position is no token to draft
                    guess = guess[: guess.index(IMAGE_TOKEN)]
                self.drafted += len(guess)
                return guess
        return []

    def adapt(self, n_drafted: int, n_accepted: int) -> None:
        """Adapt to how much of an `n_drafted`-token draft the model confirmed (counted in `accepted`)."""
        if n_accepted == n_drafted:
            self.limit = min(MAX_DRAFT, 2 * self.limit)
        else:
            self.limit = max(1, n_accepted + 1)
        if n_accepted:
            self._misses = 0
            return
        self._misses += 1
        if self._misses >= MISSES_TO_PAUSE:
            self._misses = 0
            self._pause = self._next_pause
            self._next_pause = min(MAX_PAUSE, 2 * self._next_pause)
