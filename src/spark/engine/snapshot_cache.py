"""Which slot or KV snapshot serves a prompt, and where each snapshot lives: a slot, RAM, disk.

`SnapshotCache` is the engine's policy over the RAM store (`snapshots`) and
the disk store (`snapshot_disk`), called from the decode loop:

- a slot about to lose its conversation to another prompt is saved to RAM;
  what the RAM budget pushes out goes to disk;
- a prompt that a snapshot in RAM or on disk extends further than any free
  slot's cache is served from that snapshot, if it can serve that much (a
  sliding-window model's snapshot holds only its last window);
- once the engine has been idle for `PERSIST_IDLE_SECONDS`, slot caches that
  changed and RAM snapshots not yet on disk are handed to the disk writer, so
  a runner that crashes later still leaves them behind; at close, the rest.

Zero-retention conversations (`private`) never reach the disk store. Caches under a request's
own LoRA scales (`Slot.lora`) are never saved: every snapshot holds the attached scales' cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from spark.engine import snapshots
from spark.engine.checkpoints import Checkpoints
from spark.engine.native import Context
from spark.engine.slots import Scales, Slot, pick_slot, shared
from spark.engine.snapshot_disk import DiskEntry, DiskSnapshots
from spark.engine.snapshots import Snapshot, SnapshotStore
from spark.types import CacheSource

PERSIST_IDLE_SECONDS = 1.0  # idle this long, the engine writes what a crash would lose
CLOSE_FLUSH_SECONDS = 4.0  # writing at close, within the supervisor's grace before it kills

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reuse:
    """A snapshot put back into a slot: how many prompt tokens it serves, from where, how fast."""

    n_tokens: int
    source: CacheSource
    seconds: float


class SnapshotCache:
    """The RAM and disk snapshots of one engine (the disk store is None when there is none)."""

    def __init__(self, ram: SnapshotStore, disk: DiskSnapshots | None, checkpoints: Checkpoints) -> None:
        self.ram = ram
        self.disk = disk
        self.checkpoints = checkpoints  # each slot's, to go back further than a small window holds

    @property
    def enabled(self) -> bool:
        return self.ram.budget > 0 or self.disk is not None

    def place(
        self, ctx: Context, free: list[Slot], prompt: Sequence[int], limit: int, lora: Scales | None = None
    ) -> tuple[Slot, int, Reuse | None]:
        """The free slot for `prompt` (under LoRA scales `lora`) and how many of its first tokens
        that slot's KV cache now holds, cut to those: its own, or a snapshot's put back (the
        `Reuse`). The rest of the prompt is evaluated, its last token always (for its logits).

        `limit`: how much of the prompt a cache may serve (up to its first image; 0 for none).
        A slot's cache that a small sliding window no longer holds that far back goes back to
        its newest checkpoint that serves, if any.
        """
        slot, n_keep = pick_slot(free, prompt, lora)
        reuse = self.use(ctx, slot, free, prompt, limit, lora)
        n_keep = min(n_keep if reuse is None else reuse.n_tokens, limit, len(prompt) - 1)
        if reuse is not None:
            self.checkpoints.cut(slot.id, 0)  # they were of the conversation the snapshot replaced
        if not ctx.keep(slot.id, n_keep):
            back = 0 if reuse is not None else self.checkpoints.rollback(ctx, slot.id, prompt, n_keep)
            if back == 0:  # then the prompt is evaluated from scratch
                if reuse is not None:
                    log.warning(
                        "the KV snapshot put back into slot %d cannot serve %d tokens (llama.cpp kept less "
                        "of it than expected); evaluating the prompt instead",
                        slot.id,
                        n_keep,
                    )
                ctx.forget(slot.id)
            n_keep = back
        if n_keep == 0:
            slot.floor = 0
        del slot.cached[n_keep:]
        self.checkpoints.cut(slot.id, n_keep)
        return slot, n_keep, reuse

    def use(
        self, ctx: Context, slot: Slot, free: list[Slot], prompt: Sequence[int], limit: int, lora: Scales | None = None
    ) -> Reuse | None:
        """Save what `slot` would lose to `prompt`, and restore a snapshot that serves it better.

        `limit`: how much of the prompt a snapshot may serve (up to its first
        image); none serves a prompt under LoRA scales `lora`. Only a snapshot
        that can serve what the prompt shares with it is chosen: one of a
        sliding-window model, longer than its window, serves only a prompt that
        reuses it whole (`Context.restored_floor`). Returns None when nothing was
        restored (the slot is then as it was). A failed save, load or restore
        only costs the reuse.
        """
        if not self.enabled:
            return None

        def serves(tokens: Sequence[int], n: int) -> bool:
            return min(n, len(prompt) - 1) >= ctx.restored_floor(len(tokens))  # the last token is evaluated

        prefix = prompt[:limit] if lora is None else []
        in_ram, n_ram = self.ram.best(prefix, serves)
        on_disk, n_disk = self.disk.best(prefix, serves) if self.disk is not None else (None, 0)
        n_free = max(shared(s, prompt) for s in free)
        chosen: Snapshot | DiskEntry | None = None
        n_snap = 0
        if in_ram is not None and n_ram >= n_disk and n_ram > n_free:
            chosen, n_snap = in_ram, n_ram
        elif on_disk is not None and n_disk > n_free:
            chosen, n_snap = on_disk, n_disk
        if chosen is not None:
            # The slot's cache is replaced whole: keep it unless the snapshot already holds it.
            loses = len(slot.cached) > 0 and not snapshots.extends(chosen.tokens, slot.cached)
        else:
            # A prompt the cache holds whole is a retry: only the answer it replaces is lost.
            held = shared(slot, prompt, lora)
            loses = held < len(slot.cached) and held < len(prompt)
        if loses and slot.lora is None:  # a cache under other LoRA scales serves no snapshot's request
            saved = snapshots.save(ctx, slot.id, slot.cached, private=slot.private)
            if saved is not None:
                saved.on_disk = slot.persisted == slot.cached
                self.keep(saved)
        if chosen is None:
            return None
        started = time.perf_counter()
        source: CacheSource
        if isinstance(chosen, Snapshot):
            self.ram.take(chosen)
            snapshot, source = chosen, "ram"
        else:
            assert self.disk is not None
            loaded = self.disk.load(chosen)
            if loaded is None:
                return None
            snapshot, source = loaded, "disk"
        slot.cached.clear()
        slot.persisted = []
        slot.private = False
        if not snapshots.restore(ctx, snapshot, slot.id):
            return Reuse(0, source, time.perf_counter() - started)
        slot.cached.extend(snapshot.tokens)
        slot.floor = ctx.restored_floor(len(snapshot.tokens))
        slot.private = snapshot.private
        if snapshot.on_disk:
            slot.persisted = list(snapshot.tokens)
        return Reuse(n_snap, source, time.perf_counter() - started)

    def keep(self, snapshot: Snapshot) -> None:
        """Keep `snapshot` in RAM; what that pushes out goes to disk (unless private or there already)."""
        for out in self.ram.put(snapshot):
            if self.disk is not None and not out.on_disk:
                self.disk.write(out)
                out.on_disk = True

    def unsaved(self, slots: Sequence[Slot]) -> bool:
        """Whether anything would be lost if the runner died now (what `persist` would write)."""
        if self.disk is None:
            return False
        return any(_slot_unsaved(s) for s in slots) or any(not s.on_disk and not s.private for s in self.ram.items())

    def persist(self, ctx: Context, slots: Sequence[Slot]) -> None:
        """Hand the disk writer every idle slot's cache that changed and every RAM snapshot not there yet."""
        if self.disk is None:
            return
        for slot in slots:
            if not _slot_unsaved(slot):
                continue
            saved = snapshots.save(ctx, slot.id, slot.cached, private=False)
            slot.persisted = list(slot.cached)  # tried: a state llama.cpp cannot give is not asked again
            if saved is not None:
                self.disk.write(saved)
        for snapshot in self.ram.items():
            if not snapshot.on_disk and not snapshot.private:
                self.disk.write(snapshot)
                snapshot.on_disk = True  # offered: one the disk refuses (too large, no room) is not offered again

    def close(self, ctx: Context, slots: Sequence[Slot]) -> None:
        """Write what is not on disk yet (within `CLOSE_FLUSH_SECONDS`) and stop the writer."""
        if self.disk is None:
            return
        self.persist(ctx, slots)
        self.disk.close(CLOSE_FLUSH_SECONDS)


def _slot_unsaved(slot: Slot) -> bool:
    return (
        slot.work is None
        and not slot.private
        and slot.lora is None
        and bool(slot.cached)
        and slot.cached != slot.persisted
    )
