"""Checkpoints of a small sliding-window cache, so that a slot can go back past its window.

A context whose sliding-window layers keep only their window (`Context.small_window`,
llama-server's default) cannot cut a sequence back further than that window still
holds: a regenerated long answer, or a prompt that parts from the cache before its
last answer, would evaluate the whole conversation again. As llama-server does, a
checkpoint (the window layers' state alone, `Context.save_window`) is taken while a
prompt is evaluated: where its last chunk starts, which for the next turn of a
conversation is where the cached part ended. A later prompt that shares at least
that much goes back to the newest such checkpoint and evaluates only the rest, in the
same chunk as before. (llama-server splits a prompt to checkpoint 4 tokens before its
end; a chunk of another size is evaluated by other kernels, to other last bits, and
would change greedy answers.) The other layers keep every position, so a checkpoint
is the size of a window.

At most `PER_SLOT` checkpoints are kept per slot (the oldest goes first), in RAM;
those past a cut of the slot's cache, or of a conversation it no longer holds, are
dropped. `spark.placement.estimate` counts their memory.

Rejected draft tokens need no checkpoint: a micro-batch overwrites only cells that
its first token no longer sees, so cutting back to any token of it keeps the window.
That holds while a slot's tokens go into one micro-batch, which llama.cpp's split
(equal counts per sequence) guarantees only for a batch of one sequence: the engine
drafts with a small window only while it serves one request.
"""

from __future__ import annotations

import array
import ctypes
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from spark.engine.native import Context

PER_SLOT = 3  # checkpoints kept per slot (llama-server keeps 8)

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Checkpoint:
    """The window layers' state of a slot holding `tokens`."""

    tokens: array.array[int]
    data: ctypes.Array[ctypes.c_uint8]


class Checkpoints:
    """The checkpoints of each slot of a context (none unless `ctx.small_window`)."""

    def __init__(self, ctx: Context, n_slots: int) -> None:
        self.enabled = ctx.small_window
        self._slots: list[list[Checkpoint]] = [[] for _ in range(n_slots)]  # oldest first

    def before_last_chunk(self, ctx: Context, seq: int, prompt: Sequence[int], start: int) -> None:
        """Slot `seq`, holding `prompt[:start]`, is about to evaluate the rest of `prompt`: take
        its checkpoint there. None within the first window: so few tokens are soon evaluated
        again, and the checkpoint would push out one worth more."""
        kept = self._slots[seq]
        if not self.enabled or start <= ctx.n_swa or (kept and len(kept[-1].tokens) == start):
            return
        data = ctx.save_window(seq)
        if data is not None:
            kept.append(Checkpoint(array.array("i", prompt[:start]), data))
            del kept[:-PER_SLOT]

    def rollback(self, ctx: Context, seq: int, prompt: Sequence[int], n: int) -> int:
        """After `ctx.keep(seq, n)` failed for lack of window: put back the newest checkpoint of
        slot `seq` that holds no more than the first `n` tokens of `prompt` and return how many
        it holds (0, the sequence to be forgotten, when none serves)."""
        for checkpoint in reversed(self._slots[seq]):
            size = len(checkpoint.tokens)
            if 0 < size <= n and checkpoint.tokens == array.array("i", prompt[:size]):
                if ctx.restore_window(seq, checkpoint.data, size):
                    return size
                log.warning("putting back a checkpoint of slot %d failed; evaluating the prompt instead", seq)
                return 0
        return 0

    def cut(self, seq: int, n: int) -> None:
        """Slot `seq` now holds only its first `n` tokens: drop the checkpoints past them (all
        for 0: a cache evaluated again or replaced)."""
        self._slots[seq] = [c for c in self._slots[seq] if len(c.tokens) <= n] if n > 0 else []
