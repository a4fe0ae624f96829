"""Speculative decoding with a draft model: a smaller model of the same vocabulary guesses next tokens.

The draft model runs in the runner beside the model it drafts for, with a
context of the same slots and length. Each step, for every slot that may draft,
it first catches up with the tokens the target holds (what its own cache lacks:
the whole prompt the first time, then the tokens confirmed since), then decodes
greedily, one token per slot and all slots in one batch, while its own most
likely token is likely enough (`MIN_CHANCE`). The engine verifies the guesses
in its batch exactly as it verifies n-gram guesses, weighing the draft model's
probabilities as the chances that they hold (`speculative.best_length`).

A greedy draft is a function of the history alone, so the output keeps the
target's distribution (see `spark.engine.speculative`); the draft model only
changes how fast it comes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from spark.engine.native import Batch, Context, Model
from spark.errors import ModelFileError
from spark.types import DRAFT_VOCAB_SLACK

MIN_CHANCE = 0.5  # a draft stops before a token its own model gives less than this
DRAFT_BATCH = 512  # tokens per decode of the draft model (a prompt it catches up with takes several)
VOCAB_CHECK_FROM = 5  # the first ids are control tokens that sizes of one family may name apart
STEP_SMOOTHING = 0.2  # how far the cost of a draft token follows one measured step

Proposal = tuple[list[int], list[float]]  # drafted tokens, the draft model's probability of each


class DraftModel:
    """A draft model loaded for `target`: `propose` drafts for many slots at once."""

    def __init__(
        self,
        path: str,
        target: Model,
        *,
        n_ctx: int,
        n_slots: int,
        n_threads: int,
        n_gpu_layers: int,
        main_gpu: int,
        kv_type: str,
        flash_attention: str,
    ) -> None:
        """Load `path` with a context of `n_slots` x `n_ctx` tokens; `ModelFileError` naming
        `draft_model` when it is no model of `target`'s vocabulary."""
        model = Model(path, n_gpu_layers=n_gpu_layers, main_gpu=main_gpu)
        try:
            if why := vocabulary_mismatch(model, target):
                raise ModelFileError(
                    f"{Path(path).name} cannot be this model's draft model: {why}", param="draft_model"
                )
            self._ctx = Context(
                model,
                n_ctx=n_ctx * n_slots,
                n_seq_max=n_slots,
                n_batch=DRAFT_BATCH,
                n_ubatch=DRAFT_BATCH,
                n_threads=n_threads,
                kv_type=kv_type,
                flash_attention=flash_attention,
                embedding=False,
                # Drafting one token at a time, a small sliding-window cache could not drop the
                # rejected ones: every miss would evaluate the conversation again.
                swa_full=True,
            )
        except BaseException:
            model.close()
            raise
        self._model = model
        self._n_vocab = min(model.n_vocab, target.n_vocab)  # a guess past the target's vocabulary is none
        self.size_ratio = model.size_bytes / max(target.size_bytes, 1)
        self._batch = Batch(self._ctx.n_batch)
        self._cached: list[list[int]] = [[] for _ in range(n_slots)]  # each slot's tokens in its cache
        self.token_seconds = 0.0  # what one draft token costs: a step of the draft model (0: not measured yet)

    def propose(
        self, wants: dict[int, tuple[list[int], int]], pays: Callable[[list[float]], bool]
    ) -> dict[int, Proposal]:
        """Drafts for several slots at once. `wants[slot]` is (the slot's tokens: those in the
        target's cache, then the one it feeds next; the most tokens to draft); a slot's draft goes
        on while `pays(its chances so far)` says one more token is worth its cost."""
        out: dict[int, Proposal] = {slot: ([], []) for slot in wants}
        feed = {slot: self._catch_up(slot, history) for slot, (history, _) in wants.items()}
        while feed:
            batch = self._batch
            batch.clear()
            rows: dict[int, int] = {}
            drafting = all(len(tokens) == 1 for tokens in feed.values())  # no prompt to catch up with
            started = time.perf_counter()
            for slot, tokens in list(feed.items()):
                if not batch.room:
                    break
                take = tokens[: batch.room]
                cached = self._cached[slot]
                whole = len(take) == len(tokens)
                row = batch.add_run(take, len(cached), slot, "last" if whole else "none")
                cached.extend(take)
                if whole:
                    rows[slot] = row
                    del feed[slot]
                else:
                    feed[slot] = tokens[len(take) :]
            if batch.decode(self._ctx) != 0:  # no drafts this step; the caches start again
                self.reset()
                return {}
            for slot, row in rows.items():
                token, chance = self._ctx.top(row, self._model.n_vocab)
                tokens, chances = out[slot]
                if chance < MIN_CHANCE or token >= self._n_vocab:
                    continue
                tokens.append(token)
                chances.append(chance)
                if len(tokens) < wants[slot][1] and not self._model.is_eog(token) and pays(chances):
                    feed[slot] = [token]
            if drafting:  # a step that makes one draft token per slot: what a draft token costs
                seconds = time.perf_counter() - started
                self.token_seconds += STEP_SMOOTHING * (seconds - self.token_seconds) if self.token_seconds else seconds
        return out

    def _catch_up(self, slot: int, history: list[int]) -> list[int]:
        """Cut the slot's cache to what it shares with `history` (never all of it: the last token
        is fed again for its logits); returns the tokens to feed."""
        cached = self._cached[slot]
        n = min(len(cached), len(history) - 1)
        common = n
        if cached[:n] != history[:n]:
            common = next(i for i, (a, b) in enumerate(zip(cached, history, strict=False)) if a != b)
        if common < len(cached):
            if not self._ctx.keep(slot, common):
                self._ctx.forget(slot)
                common = 0
            del cached[common:]
        return history[common:]

    def reset(self) -> None:
        """Empty every slot's cache (the target's context was cleared, or a decode failed)."""
        self._ctx.clear()
        for cached in self._cached:
            cached.clear()

    def close(self) -> None:
        self._ctx.close()
        self._model.close()


def vocabulary_mismatch(draft: Model, target: Model) -> str | None:
    """Why `draft` cannot draft for `target` (another kind of tokenizer, other special tokens, other
    token texts), or None when its guesses are the target's tokens. llama.cpp's own rule."""
    if draft.vocab_type != target.vocab_type:
        return "its tokenizer is of another kind"
    if abs(draft.n_vocab - target.n_vocab) > DRAFT_VOCAB_SLACK:
        return f"its vocabulary has {draft.n_vocab} tokens, this model's {target.n_vocab}"
    if (draft.bos, draft.eos, draft.add_bos) != (target.bos, target.eos, target.add_bos):
        return "its start and end tokens differ"
    for token in range(VOCAB_CHECK_FROM, min(draft.n_vocab, target.n_vocab)):
        if draft.token_text(token) != target.token_text(token):
            return f"token {token} is {draft.token_text(token)!r} there, {target.token_text(token)!r} here"
    return None
