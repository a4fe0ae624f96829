"""KV snapshots: conversations pushed out of their slot, kept in a RAM budget for a later return.

A snapshot is one sequence's KV state (`llama_state_seq_get_data`) together
with the tokens it holds. The store keeps them least recently used first and
pushes the oldest out when the budget is exceeded (to the disk store,
`snapshot_disk`, unless private); the engine restores one
(`llama_state_seq_set_data`) when a new prompt extends it further than any
free slot's cache does.
"""

from __future__ import annotations

import collections
import ctypes
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spark.engine.native import Context
from spark.engine.slots import common_prefix

log = logging.getLogger(__name__)

# Whether a snapshot holding these tokens can serve a prompt that shares this many of them.
Serves = Callable[[Sequence[int], int], bool]


@dataclass(slots=True, eq=False)
class Snapshot:
    """The KV state of one sequence and the tokens it holds, in order.

    A `private` snapshot holds a zero-retention conversation: it stays in RAM,
    never on disk. `on_disk` says the disk store holds it or was offered it already.
    """

    tokens: list[int]
    data: ctypes.Array[ctypes.c_uint8]
    private: bool = False
    on_disk: bool = False

    @property
    def nbytes(self) -> int:
        return len(self.data)


def extends(longer: Sequence[int], shorter: Sequence[int]) -> bool:
    """Whether `shorter` is a prefix of `longer` (then `longer` answers every prompt `shorter` could)."""
    return len(shorter) <= len(longer) and common_prefix(shorter, longer) == len(shorter)


class SnapshotStore:
    """Snapshots within `budget` bytes, the least recently stored dropped first."""

    def __init__(self, budget: int) -> None:
        self.budget = max(0, budget)
        self.used = 0
        self._items: collections.OrderedDict[int, Snapshot] = collections.OrderedDict()  # oldest first
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, snapshot: Snapshot) -> list[Snapshot]:
        """Keep `snapshot` as the most recent; returns what the budget pushed out, oldest first
        (`snapshot` itself when it alone exceeds the budget), for the disk to take.

        Snapshots it extends (their tokens are a prefix of its tokens) are
        dropped: it answers every prompt they could. A private snapshot does
        not replace one that is not: that one may still go to disk.
        """
        if snapshot.nbytes > self.budget:
            return [snapshot]
        for key, old in list(self._items.items()):
            if (old.private or not snapshot.private) and extends(snapshot.tokens, old.tokens):
                self._drop(key)
        self._items[self._next_key] = snapshot
        self._next_key += 1
        self.used += snapshot.nbytes
        out: list[Snapshot] = []
        while self.used > self.budget:
            out.append(self._drop(next(iter(self._items))))
        return out

    def items(self) -> list[Snapshot]:
        """Every snapshot kept, oldest first."""
        return list(self._items.values())

    def best(self, prompt: Sequence[int], serves: Serves | None = None) -> tuple[Snapshot | None, int]:
        """The snapshot sharing the longest prefix with `prompt`, and that length (None, 0 if none);
        only among those `serves` accepts with that length, when given."""
        best: Snapshot | None = None
        best_len = 0
        for snapshot in self._items.values():
            n = common_prefix(snapshot.tokens, prompt)
            if n > best_len and (serves is None or serves(snapshot.tokens, n)):
                best, best_len = snapshot, n
        return best, best_len

    def take(self, snapshot: Snapshot) -> None:
        """Remove `snapshot` from the store (it now lives in a slot again)."""
        for key, item in self._items.items():
            if item is snapshot:
                self._drop(key)
                return

    def _drop(self, key: int) -> Snapshot:
        snapshot = self._items.pop(key)
        self.used -= snapshot.nbytes
        return snapshot


def save(ctx: Context, seq: int, tokens: Sequence[int], *, private: bool) -> Snapshot | None:
    """The KV state of sequence `seq` holding `tokens`, or None when llama.cpp gives none."""
    data = ctx.save(seq)
    return Snapshot(list(tokens), data, private=private) if data is not None else None


def restore(ctx: Context, snapshot: Snapshot, seq: int) -> bool:
    """Replace sequence `seq` with `snapshot`'s state; on failure the sequence is left empty."""
    ctx.forget(seq)
    # The slot's token list is taken from the snapshot: the cache must hold exactly those positions.
    if not ctx.restore(seq, snapshot.data) or ctx.last_position(seq) != len(snapshot.tokens) - 1:
        log.warning("restoring a KV snapshot into slot %d failed; evaluating the prompt instead", seq)
        ctx.forget(seq)
        return False
    return True
