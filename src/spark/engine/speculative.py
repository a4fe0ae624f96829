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

Why it never costs much. A draft is worth its place in the batch only when
the tokens it is expected to add outweigh what the longer batch costs, and
both depend on the machine and the model: on a GPU, or with a quantization
that has batched kernels, verifying 8 tokens costs little more than
decoding one; with others (Q4_1 on AVX2) each verified token costs almost a
whole decode step. So the engine measures what its batches cost by size
(`DecodeCosts`: a speed every step updates, times a shape by size, so that a
size measured at another depth of the context is priced at today's speed),
the drafter measures how often its guesses hold by how long the match behind
them is (a guess after 20 tokens that repeat earlier text holds far more
often than one after 2), and each step drafts the number of tokens that gives
the most expected tokens per second, which is none where guessing does not
pay: free chat then runs as without speculation, while copied stretches are
drafted whole. Every EXPLORE_EVERY steps without a draft, the hopeful prices are tried once more, so a
size measured while the machine was busy is measured again.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from spark.engine.vision import IMAGE_TOKEN

# n-gram sizes looked up, longest first: a longer match predicts better.
NGRAM_SIZES = (6, 4, 3, 2)
MAX_DRAFT = 16  # most tokens one slot drafts in one step
SEPARATOR = -2  # between a predicted answer and the prompt in the history: neither a token nor an image
# How often a drafted token is confirmed, by how many tokens before it repeat the earlier text (the
# match length, from 2): buckets start at these lengths, with the rate assumed before any is measured.
MATCH_BUCKETS = (2, 3, 4, 6, 10, 20)
PRIOR_RATES = (0.5, 0.55, 0.65, 0.75, 0.85, 0.95)
PRIOR_WEIGHT = 2.0  # the prior counts as this many drafted tokens
# Until a batch size has been measured, each token past the first is assumed to cost this share
# of a one-token step: hopeful, so that drafting is tried and the true cost gets measured.
PRIOR_TOKEN_COST = 0.25
SPEED_SMOOTHING = 0.2  # how far every size's cost follows one measured step
SHAPE_SMOOTHING = 0.1  # how far the measured size's own share follows it
# Every this many steps without one of several tokens, the prior's hopeful prices are tried again until
# such a step is measured, and its size follows that measurement by EXPLORE_SMOOTHING: a size first
# measured while something else had the CPU would otherwise stop drafting for the runner's life.
EXPLORE_EVERY = 256
EXPLORE_SMOOTHING = 0.5


class DecodeCosts:
    """What a decode step costs by the number of tokens in its batch, measured as the engine runs.

    A cost is a speed (seconds per unit, which follows every measured step: the context's depth,
    other work on the machine) times the shape of the size (its cost relative to the others, learnt
    where that size is measured), so a size measured long ago is still priced at today's speed."""

    def __init__(self) -> None:
        self._speed = 0.0  # seconds per unit of shape; 0 until a step is measured
        self._shape: dict[int, float] = {}  # batch size -> relative cost
        self._quiet = 0  # steps since the last one of several tokens (see EXPLORE_EVERY)

    @property
    def exploring(self) -> bool:
        """Whether several tokens' steps are priced at the prior's hopeful costs for now (when they
        are not already cheaper), to be measured again."""
        return self._quiet >= EXPLORE_EVERY

    def observe(self, n_tokens: int, seconds: float) -> None:
        """Record a step that decoded `n_tokens` tokens of generation (no prompt) in `seconds`."""
        if seconds <= 0:
            return
        exploring = self.exploring
        self._quiet = 0 if n_tokens > 1 else self._quiet + 1
        if not self._speed:
            self._speed = seconds / self._relative(n_tokens)
        old = self._shape.get(n_tokens)
        if old is None:  # a size first measured: its shape, not the speed, was unknown
            self._shape[n_tokens] = seconds / self._speed
            return
        # by ratio, not difference: a step slowed by something else moves the costs little; a size
        # tried again after long (exploring) was likely measured wrong, not the speed
        miss = seconds / (self._speed * old)
        if exploring and n_tokens > 1:
            self._shape[n_tokens] = old * miss**EXPLORE_SMOOTHING
            return
        self._speed *= miss**SPEED_SMOOTHING
        self._shape[n_tokens] = old * miss**SHAPE_SMOOTHING

    def seconds(self, n_tokens: int) -> float:
        """The expected cost of a batch of `n_tokens` (in units of one token's step when nothing
        is measured yet)."""
        relative = self._relative(n_tokens)
        if n_tokens > 1 and self.exploring:
            relative = min(relative, self._one() * (1 + PRIOR_TOKEN_COST * (n_tokens - 1)))
        return (self._speed or 1.0) * relative

    def _one(self) -> float:
        """The shape of a one-token step: measured, else implied by the smallest size measured."""
        smallest = min(self._shape, default=1)
        return self._shape.get(smallest, 1.0) / (1 + PRIOR_TOKEN_COST * (smallest - 1))

    def _relative(self, n_tokens: int) -> float:
        """The shape of `n_tokens`: measured, else interpolated between the nearest measured sizes,
        else extrapolated with `PRIOR_TOKEN_COST`."""
        measured = self._shape
        if (exact := measured.get(n_tokens)) is not None:
            return exact
        one = self._one()
        below = max((n for n in measured if n < n_tokens), default=None)
        if below is None:
            return one * (1 + PRIOR_TOKEN_COST * (n_tokens - 1))
        above = min((n for n in measured if n > n_tokens), default=None)
        if above is None:
            return measured[below] + one * PRIOR_TOKEN_COST * (n_tokens - below)
        share = (n_tokens - below) / (above - below)
        return measured[below] + share * (measured[above] - measured[below])


def best_length(
    chances: Sequence[float],
    costs: DecodeCosts,
    in_batch: int,
    outputs: int,
    per_token: float = 0.0,
    gain: float = 1.0,
) -> int:
    """How many tokens of a draft to verify: the k that gives the step the most expected output per
    second, 0 when none promises `gain` times the output per second without a draft. `chances[k]`
    is the chance that draft token k holds once those before it have; the batch holds `in_batch`
    tokens already and gives `outputs` tokens without the draft; making each draft token costs
    `per_token` seconds (a draft model's step)."""
    best, best_rate = 0, gain * outputs / costs.seconds(in_batch)
    expected, chain = 0.0, 1.0  # tokens expected from a draft of k, chance all k hold
    for k, chance in enumerate(chances, 1):
        chain *= chance
        expected += chain
        rate = (outputs + expected) / (costs.seconds(in_batch + k) + k * per_token)
        if rate > best_rate:
            best, best_rate = k, rate
    return best


class NgramDrafter:
    """Drafts the next tokens of one generation from its prompt and output so far.

    `push` every output token, `draft` before a step, and `verified` after it.
    """

    def __init__(self, prompt: Sequence[int], prediction: Sequence[int] | None = None) -> None:
        # A predicted answer goes first, after the prompt's last tokens (so that the answer's start
        # is guessed to be the prediction's) and before a separator that no token matches.
        lead = [*prompt[-NGRAM_SIZES[0] :], *prediction, SEPARATOR] if prediction else []
        self._tokens = [*lead, *prompt]
        # index[n][ngram] = the position right after the latest occurrence of `ngram` that has a
        # successor; the history's own last n-gram is not indexed until its successor arrives.
        # The prediction's n-grams win over the prompt's: it is what the answer is expected to be.
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        for n in NGRAM_SIZES:
            index = self._index[n] = _ngram_ends(self._tokens, n)
            index.update(_ngram_ends(lead, n))
        # confirmed and drafted tokens by match bucket, the prior included
        self._confirmed = [rate * PRIOR_WEIGHT for rate in PRIOR_RATES]
        self._tried = [PRIOR_WEIGHT] * len(PRIOR_RATES)
        self._match = 0  # match length behind the last draft

    def push(self, token: int) -> None:
        """Add an output token to the history."""
        t = self._tokens
        t.append(token)
        end = len(t) - 1
        for n, index in self._index.items():
            if end >= n:
                index[tuple(t[end - n : end])] = end

    def draft(self, n_max: int, costs: DecodeCosts, in_batch: int = 1, outputs: int = 1) -> list[int]:
        """The tokens guessed to follow the history, as many (up to `n_max` and `MAX_DRAFT`) as give
        the step the most expected output per second (`best_length`); [] when no guess pays."""
        n_max = min(n_max, MAX_DRAFT)
        if n_max <= 0 or (found := self._lookup()) is None:
            return []
        start, match = found
        best = best_length([self._rate(match + k) for k in range(n_max)], costs, in_batch, outputs)
        if best == 0:
            return []
        t = self._tokens
        guess = t[start : start + best]
        period = len(t) - start
        while len(guess) < best:  # a match close to the end repeats: the guess goes on repeating
            guess.append(guess[len(guess) - period])
        for i, token in enumerate(guess):
            if token in (IMAGE_TOKEN, SEPARATOR):  # an image position, or past a prediction's end
                guess = guess[:i]
                break
        self._match = match
        return guess

    def verified(self, n_drafted: int, n_accepted: int) -> None:
        """Learn from how much of the last draft (`n_drafted` tokens) the model confirmed."""
        for k in range(min(n_accepted + 1, n_drafted)):
            bucket = _bucket(self._match + k)
            self._tried[bucket] += 1
            self._confirmed[bucket] += k < n_accepted

    def _rate(self, match: int) -> float:
        bucket = _bucket(match)
        return self._confirmed[bucket] / self._tried[bucket]

    def _lookup(self) -> tuple[int, int] | None:
        """Where the guess starts in the history and the match length behind it, for the longest
        n-gram whose earlier occurrence matches the history's end."""
        t = self._tokens
        for n, index in self._index.items():
            if len(t) <= n:
                continue
            start = index.get(tuple(t[-n:]))
            if start is not None:
                match, longest = n, min(start, MATCH_BUCKETS[-1])
                while match < longest and t[start - 1 - match] == t[-1 - match]:
                    match += 1
                return start, match
        return None


def _ngram_ends(tokens: list[int], n: int) -> dict[tuple[int, ...], int]:
    """Each n-gram of `tokens` that has a successor, and the position right after its latest occurrence."""
    ngrams = zip(*(tokens[i:] for i in range(n)), strict=False)  # each n-gram, by where it starts
    return dict(zip(ngrams, range(n, len(tokens)), strict=False))  # later ones overwrite earlier


def _bucket(match: int) -> int:
    return bisect_right(MATCH_BUCKETS, match) - 1
