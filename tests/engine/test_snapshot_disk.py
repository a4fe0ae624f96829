"""KV snapshots on disk: past the RAM budget, across engines, never for another layout or a private chat."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.slots import common_prefix
from spark.engine.snapshot_disk import SUFFIX, DiskSnapshots, file_name, read_entry
from spark.engine.snapshots import Snapshot
from spark.types import CompletionRequest, Done, LoadOptions, LoraAdapter, SamplingParams, SlotInfo

P_A = "Numbers 0 1 2 3 4 5 6 7 8 9 and some words about a first topic"
P_B = "Completely different text that pushes the other one out"
P_C = P_A + " and then a lot more words follow"
DISK = 64 * 1024 * 1024


def options(path: Path, folder: Path, **extra: object) -> LoadOptions:
    values: dict[str, object] = {
        "n_threads": 1,
        "n_ctx": 512,
        "n_parallel": 1,
        "snapshot_disk_bytes": DISK,
        "snapshot_dir": str(folder),
        **extra,
    }
    return LoadOptions(model_id="tiny", path=str(path), **values)  # type: ignore[arg-type]


def complete(prompt: str, max_tokens: int, *, private: bool = False) -> CompletionRequest:
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    return CompletionRequest(model="tiny", prompt=prompt, sampling=sampling, zero_retention=private)


def run(engine: Engine, request: CompletionRequest, name: str = "r") -> Collector:
    c = Collector(name)
    engine.submit(name, request, c)
    assert isinstance(c.wait(), Done), c.events[-1]
    return c


def slot_info(c: Collector) -> SlotInfo:
    info = c.events[0]
    assert isinstance(info, SlotInfo)
    return info


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*/*{SUFFIX}"))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "snapshots"


@pytest.fixture(scope="module")
def cold_c(tiny_llama: Path) -> str:
    """What the model answers to P_C from an empty cache."""
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=512)) as e:
        return run(e, complete(P_C, 12)).text


def leave_a_on_disk(model: Path, folder: Path, **extra: object) -> int:
    """Run A in an engine that then unloads (its slot is written at close); A's prompt length."""
    with Engine(options(model, folder, **extra)) as e:
        run(e, complete(P_A, 1), "a")
        n_a = e.count_tokens(complete(P_A, 1))
    assert len(files(folder)) == 1
    return n_a


def test_past_the_ram_budget_a_conversation_spills_to_disk(tiny_llama: Path, folder: Path, cold_c: str) -> None:
    with Engine(options(tiny_llama, folder, snapshot_ram_bytes=1024)) as e:
        run(e, complete(P_A, 1), "a")
        n_a = e.count_tokens(complete(P_A, 1))
        run(e, complete(P_B, 4), "b")  # A leaves the slot; too large for RAM, it goes to disk
        disk = e._snapshots.disk
        assert disk is not None and disk.flush(30) and len(e._snapshots.ram) == 0
        (written,) = files(folder)
        assert read_entry(written, disk.identity).tokens[:n_a] == e._prep.prompt(complete(P_A, 1))[0]
        c = run(e, complete(P_C, 12), "c")
    info = slot_info(c)
    assert info.cache == "disk" and info.cached_tokens == n_a
    assert info.restore_seconds is not None and info.restore_seconds > 0
    assert c.text == cold_c


def test_a_reloaded_model_restores_from_disk(tiny_llama: Path, folder: Path, cold_c: str) -> None:
    n_a = leave_a_on_disk(tiny_llama, folder)
    with Engine(options(tiny_llama, folder)) as e:
        c = run(e, complete(P_C, 12), "c")
        again = run(e, complete(P_C, 12), "again")  # now in its slot
    assert slot_info(c).cache == "disk" and slot_info(c).cached_tokens == n_a
    assert c.text == cold_c
    assert slot_info(again).cache == "slot" and again.text == cold_c


def test_a_sliding_window_models_conversation_restores_from_disk(tiny_swa: Path, folder: Path) -> None:
    # Only the last window of it is on disk: a prompt that extends it whole can use it.
    n_a = leave_a_on_disk(tiny_swa, folder)
    with Engine(options(tiny_swa, folder)) as e:
        c = run(e, complete(P_C, 12), "c")
    with Engine(options(tiny_swa, folder, snapshot_disk_bytes=0)) as e:
        cold = run(e, complete(P_C, 12), "cold")
    assert slot_info(c).cache == "disk" and slot_info(c).cached_tokens == n_a
    assert slot_info(cold).cached_tokens == 0 and c.text == cold.text


@pytest.mark.parametrize(
    "change",
    ["kv_type", "n_ctx", "flash_attention", "lora", "model file"],
    ids=[
        "kv type",
        "context per slot",
        "flash attention (V transposed without it)",
        "a LoRA adapter",
        "changed model file",
    ],
)
def test_another_layout_never_restores(folder: Path, tmp_path: Path, change: str) -> None:
    model = tiny_gguf.write_tiny_llama(tmp_path / "model.gguf", n_head=2)  # heads of 32: a q8_0 cache fits
    leave_a_on_disk(model, folder)
    extra: dict[str, object] = {}
    if change == "kv_type":
        extra["kv_type"] = "q8_0"
    elif change == "n_ctx":
        extra["n_ctx"] = 256
    elif change == "flash_attention":
        extra["flash_attention"] = "off"
    elif change == "lora":
        extra["lora"] = [LoraAdapter(path=str(tiny_gguf.write_tiny_lora(tmp_path / "lora.gguf", n_head=2)))]
    else:
        st = model.stat()
        os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # rewritten, say
    with Engine(options(model, folder, **extra)) as e:
        assert e._snapshots.disk is not None and len(e._snapshots.disk) == 0
        c = run(e, complete(P_C, 12), "c")
    assert slot_info(c).cache == "none" and slot_info(c).cached_tokens == 0
    assert len({f.parent for f in files(folder)}) == 2  # each layout its own folder


def test_a_conversation_of_a_model_with_a_lora_adapter_restores_until_the_adapter_changes(
    folder: Path, tmp_path: Path
) -> None:
    model = tiny_gguf.write_tiny_llama(tmp_path / "model.gguf", n_head=2)
    adapter = tiny_gguf.write_tiny_lora(tmp_path / "lora.gguf", n_head=2)
    lora = [LoraAdapter(path=str(adapter))]
    n_a = leave_a_on_disk(model, folder, lora=lora)
    with Engine(options(model, folder, lora=lora)) as e:
        c = run(e, complete(P_C, 12), "c")
    assert slot_info(c).cache == "disk" and slot_info(c).cached_tokens == n_a
    st = adapter.stat()
    os.utime(adapter, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # another adapter in its place
    with Engine(options(model, folder, lora=lora)) as e:
        again = run(e, complete(P_C, 12), "again")
    assert slot_info(again).cache == "none"


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_a_corrupt_snapshot_is_ignored_and_removed(tiny_llama: Path, folder: Path, cold_c: str, damage: str) -> None:
    leave_a_on_disk(tiny_llama, folder)
    (path,) = files(folder)
    size = path.stat().st_size
    with path.open("r+b") as f:
        if damage == "truncate":
            f.truncate(size - 100)
        else:
            f.seek(size // 2)
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0xFF]))
    with Engine(options(tiny_llama, folder)) as e:
        c = run(e, complete(P_C, 12), "c")
        assert not path.exists()  # found at load (truncated) or when read back (garbled)
    assert slot_info(c).cache == "none" and c.text == cold_c


def test_a_zero_retention_conversation_is_never_written(tiny_llama: Path, folder: Path) -> None:
    with Engine(options(tiny_llama, folder, snapshot_ram_bytes=1024)) as e:
        run(e, complete(P_A, 1), "a")
        disk = e._snapshots.disk
        assert disk is not None
        e._snapshots.persist(e._ctx, e._slots)  # as after a second idle: A is written
        assert disk.flush(30) and len(files(folder)) == 1
        private = run(e, complete(P_C, 4, private=True), "private")  # extends A
        assert slot_info(private).cache == "slot"
        run(e, complete(P_B, 4), "b")  # pushes the private chat out of the slot and out of RAM
        shared = run(e, complete(P_A, 2), "shared")  # A again: from disk, the private chat is gone
        assert slot_info(shared).cache == "disk"
        prompt_c = e._prep.prompt(complete(P_C, 1))[0]
    written = [read_entry(f, disk.identity).tokens for f in files(folder)]
    assert len(written) == 2  # A (with its second answer) and B went to disk; the private chat did not
    assert all(common_prefix(tokens, prompt_c) < len(prompt_c) for tokens in written)


def test_an_unwritable_folder_only_costs_the_snapshot(tiny_llama: Path, tmp_path: Path, cold_c: str) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the snapshots folder should be")
    with Engine(options(tiny_llama, blocker / "snapshots", snapshot_ram_bytes=1024)) as e:
        run(e, complete(P_A, 1), "a")
        run(e, complete(P_B, 4), "b")
        assert e._snapshots.disk is not None and e._snapshots.disk.flush(30)
        c = run(e, complete(P_C, 12), "c")
    assert slot_info(c).cache == "none" and c.text == cold_c


def pattern(nbytes: int) -> bytes:
    return bytes(i * 7 % 256 for i in range(nbytes))


def fake(tokens: list[int], nbytes: int) -> Snapshot:
    return Snapshot(tokens, (ctypes.c_uint8 * nbytes).from_buffer_copy(pattern(nbytes)))


@pytest.fixture
def store(folder: Path) -> Iterator[DiskSnapshots]:
    disk = DiskSnapshots(folder, '{"layout": "test"}', budget=2500)
    yield disk
    disk.close(10)


def write(store: DiskSnapshots, snapshot: Snapshot) -> Path:
    assert store.write(snapshot) and store.flush(10)
    return store.folder / file_name(snapshot.tokens)


def test_the_disk_budget_drops_the_least_recently_used(store: DiskSnapshots, folder: Path) -> None:
    a = write(store, fake([1, 2], 900))
    b = write(store, fake([3, 4], 900))
    os.utime(a, (1_000, 1_000))
    os.utime(b, (2_000, 2_000))
    entry, n = store.best([1, 2, 5])
    assert entry is not None and n == 2
    loaded = store.load(entry)  # a use: A is now the most recent
    assert loaded is not None and loaded.tokens == [1, 2] and bytes(loaded.data) == pattern(900)
    other = DiskSnapshots(folder, '{"layout": "other"}', budget=2500)
    try:
        c = write(other, fake([7], 900))
        os.utime(c, (500, 500))  # the oldest of all, in another layout's folder
        d = write(store, fake([5, 6], 900))  # over the budget (2 files fit): B went with C, now C
    finally:
        other.close(10)
    assert a.exists() and d.exists() and not b.exists() and not c.exists() and not c.parent.exists()
    stale, _ = store.best([3, 4])  # removed by the other store's writer: found missing when read
    assert stale is not None and store.load(stale) is None
    assert store.best([3, 4]) == (None, 0) and len(store) == 2


def test_a_longer_snapshot_replaces_what_it_extends(store: DiskSnapshots) -> None:
    short = write(store, fake([1, 2], 100))
    longer = write(store, fake([1, 2, 3], 100))
    assert not short.exists() and longer.exists() and len(store) == 1
    assert store.write(fake([1, 2], 100)) and store.flush(10)  # already held by the longer one
    assert not short.exists()
    private = fake([9], 100)
    private.private = True
    assert not store.write(private) and not store.write(fake([8], 4000))  # never written; over the budget


def test_leftovers_of_dead_writers_and_foreign_files_go_at_load(folder: Path) -> None:
    first = DiskSnapshots(folder, '{"layout": "test"}', budget=2500)
    kept = write(first, fake([1], 100))
    first.close(10)
    dead = first.folder / f".{kept.name}.999999999.tmp"
    dead.write_bytes(b"half a file")
    foreign = first.folder / ("0" * 40 + SUFFIX)
    foreign.write_bytes(b"SPARK-KV but not really")
    again = DiskSnapshots(folder, '{"layout": "test"}', budget=2500)
    try:
        assert kept.exists() and not dead.exists() and not foreign.exists() and len(again) == 1
    finally:
        again.close(10)
