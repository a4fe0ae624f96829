"""What each decode step drafts: n-gram guesses or a draft model's, as many tokens as pay.

The engine asks `Drafting` once per step for the guesses of every generating
slot (`propose`: the draft model drafts for all of them in one go) and then,
slot by slot, how many tokens to put in the batch after the slot's next token
(`draft`). Both sources give chances with their tokens, so one rule
(`speculative.best_length`, with the step costs the engine measures) decides
for both; the engine then verifies what it drafted.
"""

from __future__ import annotations

from spark.engine.draft_model import DraftModel, Proposal
from spark.engine.slots import Generation, Slot
from spark.engine.speculative import MAX_DRAFT, DecodeCosts, NgramDrafter, best_length

FIRST_PRIOR = 0.7  # the chance assumed for a draft model's first token before any is verified
FIRST_PRIOR_WEIGHT = 4.0
# A draft model drafts only where its guesses promise this much more output per second than none:
# its costs are estimates, and a draft that only breaks even still costs catching up with prompts.
MODEL_GAIN = 1.15


class Drafting:
    """Speculative decoding for one engine: by n-gram lookup, or with `draft_model` when given."""

    def __init__(self, draft_model: DraftModel | None, n_ctx: int) -> None:
        self.costs = DecodeCosts()  # what steps cost by batch size: whether a draft pays
        self._model = draft_model
        self._n_ctx = n_ctx  # tokens per slot
        # how often a draft model's first token held, the prior counted as FIRST_PRIOR_WEIGHT drafts
        self._first_held, self._first_tried = FIRST_PRIOR * FIRST_PRIOR_WEIGHT, FIRST_PRIOR_WEIGHT

    def drafter(self, prompt: list[int], prediction: list[int] | None = None) -> NgramDrafter | None:
        """The n-gram drafter of a new generation, guessing from its prompt and its predicted
        answer if it has one (None when the draft model drafts)."""
        return NgramDrafter(prompt, prediction) if self._model is None else None

    def propose(self, generating: list[Slot], spare: int) -> dict[int, Proposal]:
        """The draft model's guesses for the generating slots that may draft, by slot id; `spare`
        tokens are free in this step's batch. Each draft goes on while one more token, as likely
        as the last (the first: as often as first tokens held), is expected to pay for its draft
        step and its place in the batch; none is made where even the first would not."""
        model = self._model
        if model is None:
            return {}
        n = len(generating)
        per_token = self._token_seconds()

        def pays(chances: list[float]) -> bool:
            guess = [*chances, chances[-1] if chances else self._first_held / self._first_tried]
            return best_length(guess, self.costs, n, n, per_token, MODEL_GAIN) == len(guess)

        if not pays([]):
            return {}
        wants = {}
        for slot in generating:
            gen = slot.work
            assert gen is not None
            room = self._room(gen, len(slot.cached), min(spare // n, MAX_DRAFT))
            if room > 0 and not gen.forced and gen.media is None:  # the draft model sees no images
                wants[slot.id] = ([*slot.cached, gen.token], room)
        if not wants:
            return {}
        proposals = model.propose(wants, pays)
        misses = sum(not tokens for tokens, _ in proposals.values())  # a draft step spent for no guess
        self._first_tried += misses
        return proposals

    def draft(
        self, gen: Generation, pos: int, spare: int, generating: int, drafted: int, proposal: Proposal | None
    ) -> list[int]:
        """Tokens to verify after `gen.token` (fed at `pos`): the draft model's `proposal` or the
        n-gram drafter's guess, as many as pay in a batch of `generating` slots' tokens and `drafted`
        others, and none past the context, max_tokens or `spare`."""
        if gen.forced:
            return []
        room = self._room(gen, pos, spare)
        if proposal is not None:
            tokens, chances = proposal
            n = best_length(
                chances[:room], self.costs, generating + drafted, generating, self._token_seconds(), MODEL_GAIN
            )
            return tokens[:n]
        if gen.drafter is None:
            return []
        return gen.drafter.draft(room, self.costs, generating + drafted, generating)

    def _token_seconds(self) -> float:
        """What a draft model's token costs: measured, else a one-token step of the model it drafts
        for scaled by their sizes (decoding reads every weight once)."""
        assert self._model is not None
        return self._model.token_seconds or self.costs.seconds(1) * self._model.size_ratio

    def verified(self, gen: Generation, n_drafted: int, n_accepted: int) -> None:
        """Learn from how much of the draft the model confirmed."""
        if gen.drafter is not None:
            gen.drafter.verified(n_drafted, n_accepted)
        elif n_drafted:
            self._first_tried += 1
            self._first_held += n_accepted > 0

    def _room(self, gen: Generation, pos: int, spare: int) -> int:
        """How many tokens may follow `gen.token` (fed at `pos`) in one step: within `spare`, the
        context and max_tokens."""
        room = min(spare, self._n_ctx - 2 - pos)
        if gen.max_tokens is not None:
            room = min(room, gen.max_tokens - gen.n_generated - 1)
        return room

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
