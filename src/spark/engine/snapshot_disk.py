"""KV snapshots on disk: conversations that outlive their runner (unloads, crashes, restarts).

One folder per KV layout under the snapshots folder: its name is a hash of
the layout's identity (the model file's path, size and modification time,
the KV type, the context per slot, llama.cpp's version), so a changed file
or setting never finds the snapshots of another. One file per snapshot,
named by a hash of its tokens:

    magic, format version, identity (JSON), token count, tokens (int32),
    state length, state (`llama_state_seq_get_data`), CRC-32 of all before it

Files are written by one background thread (the decode loop only hands them
over), to a temporary name and then renamed, so a reader never sees half a
file. A file that does not read back whole and intact is removed. The
budget covers the whole snapshots folder, every model together: past it the
least recently used files go (a restore counts as a use).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from spark.engine.native import runtime_version
from spark.engine.slots import common_prefix
from spark.engine.snapshots import Serves, Snapshot, extends
from spark.types import LoadOptions, LoraAdapter

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MAGIC = b"SPARK-KV"
SUFFIX = ".kv"
TEMP_SUFFIX = ".tmp"
_HEAD = struct.Struct("<8sII")  # magic, version, identity length
_COUNT = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MAX_IDENTITY = 64 * 1024
_MAX_TOKENS = 1 << 24
# Snapshots waiting for the writer may hold this much memory; past it new ones are not written
# (one is always accepted, however large, when none waits).
MAX_PENDING_BYTES = 1 << 30


def layout_identity(
    model_path: str,
    *,
    kv_type: str,
    n_ctx_per_slot: int,
    flash_attention: str,
    runtime: str,
    lora: Sequence[LoraAdapter] = (),
) -> str:
    """What a KV state depends on besides its tokens, as JSON text.

    `runtime` names the llama.cpp build (its state format may change between versions);
    without flash attention (`flash_attention`: auto, on, off) llama.cpp stores the V cache transposed;
    `lora` adapters change every key and value they touch.
    """
    path = Path(model_path).resolve()
    size, mtime_ns = _file_version(path)
    identity: dict[str, object] = {
        "format": FORMAT_VERSION,
        "runtime": runtime,
        "model": str(path),
        "size": size,
        "mtime_ns": mtime_ns,
        "kv_type": kv_type,
        "n_ctx_per_slot": n_ctx_per_slot,
    }
    if flash_attention != "auto":  # named only when set, so that snapshots from before the setting still match
        identity["flash_attention"] = flash_attention
    if lora:  # likewise named only when there are some, each as the model file is
        identity["lora"] = [[str(Path(a.path).resolve()), a.scale, *_file_version(a.path)] for a in lora]
    return json.dumps(identity, sort_keys=True)


def _file_version(path: str | Path) -> tuple[int, int]:
    """A file's size and modification time: another file written in its place differs."""
    st = Path(path).stat()
    return st.st_size, st.st_mtime_ns


@dataclass(slots=True, eq=False)
class DiskEntry:
    """A snapshot file of this layout and the tokens it holds."""

    path: Path
    tokens: list[int]


def _tokens_bytes(tokens: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(tokens)}i", *tokens)


def file_name(tokens: Sequence[int]) -> str:
    """The file of a snapshot holding `tokens` (the same tokens, the same file)."""
    return hashlib.sha256(_tokens_bytes(tokens)).hexdigest()[:40] + SUFFIX


class CorruptSnapshot(Exception):
    """A snapshot file that is not one whole, intact snapshot of this layout."""


def _read_exactly(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise CorruptSnapshot("the file ends early")
    return data


def _read_header(f: BinaryIO, identity: str) -> tuple[list[int], int, int]:
    """The tokens, the state's length and the CRC of the header; raises `CorruptSnapshot`."""
    head = _read_exactly(f, _HEAD.size)
    magic, version, n_identity = _HEAD.unpack(head)
    if magic != MAGIC or version != FORMAT_VERSION or n_identity > _MAX_IDENTITY:
        raise CorruptSnapshot("not a snapshot file of this format")
    raw_identity = _read_exactly(f, n_identity)
    if raw_identity != identity.encode():
        raise CorruptSnapshot("a snapshot of another layout")
    raw_count = _read_exactly(f, _COUNT.size)
    (n_tokens,) = _COUNT.unpack(raw_count)
    if n_tokens == 0 or n_tokens > _MAX_TOKENS:
        raise CorruptSnapshot(f"an impossible token count ({n_tokens})")
    raw_tokens = _read_exactly(f, 4 * n_tokens)
    raw_length = _read_exactly(f, _LENGTH.size)
    (n_data,) = _LENGTH.unpack(raw_length)
    crc = zlib.crc32(head)
    for part in (raw_identity, raw_count, raw_tokens, raw_length):
        crc = zlib.crc32(part, crc)
    return list(struct.unpack(f"<{n_tokens}i", raw_tokens)), n_data, crc


def read_entry(path: Path, identity: str) -> DiskEntry:
    """The tokens of a snapshot file, checked for its length (not its CRC); raises `CorruptSnapshot`."""
    with path.open("rb") as f:
        tokens, n_data, _ = _read_header(f, identity)
        if os.fstat(f.fileno()).st_size != f.tell() + n_data + _CRC.size:
            raise CorruptSnapshot("the file is not as long as its header says")
    return DiskEntry(path, tokens)


def read_snapshot(path: Path, identity: str) -> Snapshot:
    """The whole snapshot in a file, its CRC checked; raises `CorruptSnapshot` (or OSError)."""
    with path.open("rb") as f:
        tokens, n_data, crc = _read_header(f, identity)
        if os.fstat(f.fileno()).st_size != f.tell() + n_data + _CRC.size:
            raise CorruptSnapshot("the file is not as long as its header says")
        data = (ctypes.c_uint8 * n_data)()
        if f.readinto(memoryview(data).cast("B")) != n_data:
            raise CorruptSnapshot("the file ends early")
        (stored,) = _CRC.unpack(_read_exactly(f, _CRC.size))
    if zlib.crc32(memoryview(data).cast("B"), crc) != stored:
        raise CorruptSnapshot("its checksum does not match")
    return Snapshot(tokens, data, on_disk=True)


def write_snapshot(path: Path, identity: str, snapshot: Snapshot) -> None:
    """Write `snapshot` to `path` whole, or not at all (a temporary file renamed; OSError on failure)."""
    raw_identity = identity.encode()
    view = memoryview(snapshot.data).cast("B")
    header = b"".join(
        (
            _HEAD.pack(MAGIC, FORMAT_VERSION, len(raw_identity)),
            raw_identity,
            _COUNT.pack(len(snapshot.tokens)),
            _tokens_bytes(snapshot.tokens),
            _LENGTH.pack(len(view)),
        )
    )
    crc = zlib.crc32(view, zlib.crc32(header))
    temp = path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")
    try:
        with temp.open("wb") as f:
            f.write(header)
            f.write(view)
            f.write(_CRC.pack(crc))
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


class DiskSnapshots:
    """The snapshot files of one KV layout, and the thread that writes them.

    Thread-safe: the decode loop looks up, loads and hands over snapshots; the
    writer thread adds and removes files. Every disk error only costs the
    snapshot concerned (it is logged, never raised).
    """

    def __init__(self, root: Path, identity: str, budget: int) -> None:
        self.root = root
        self.identity = identity
        self.budget = budget
        self.folder = root / hashlib.sha256(identity.encode()).hexdigest()[:32]
        self._lock = threading.Lock()
        self._entries: dict[str, DiskEntry] = {}  # by file name
        self._pending: collections.deque[Snapshot] = collections.deque()
        self._pending_bytes = 0
        self._writing = False
        self._closed = False
        self._cv = threading.Condition(self._lock)
        self._warned = False
        self._scan()
        self._thread = threading.Thread(target=self._run, name="spark-snapshot-writer", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # --- the decode loop's side -------------------------------------------------

    def best(self, prompt: Sequence[int], serves: Serves | None = None) -> tuple[DiskEntry | None, int]:
        """The file sharing the longest prefix with `prompt`, and that length (None, 0 if none);
        only among those `serves` accepts with that length, when given."""
        best: DiskEntry | None = None
        best_len = 0
        with self._lock:
            for entry in self._entries.values():
                n = common_prefix(entry.tokens, prompt)
                if n > best_len and (serves is None or serves(entry.tokens, n)):
                    best, best_len = entry, n
        return best, best_len

    def load(self, entry: DiskEntry) -> Snapshot | None:
        """The snapshot in `entry`'s file, or None when it is gone or corrupt (a corrupt file is removed)."""
        try:
            snapshot = read_snapshot(entry.path, self.identity)
            if snapshot.tokens != entry.tokens:
                raise CorruptSnapshot("its tokens changed")
            os.utime(entry.path)  # used now: the last to go when the folder is over its budget
        except (OSError, CorruptSnapshot) as e:
            if isinstance(e, CorruptSnapshot):
                log.warning("removing the corrupt KV snapshot %s: %s", entry.path, e)
                _remove(entry.path)
            elif not isinstance(e, FileNotFoundError):
                log.warning("cannot read the KV snapshot %s: %s", entry.path, e)
            with self._lock:
                self._entries.pop(entry.path.name, None)
            return None
        return snapshot

    def write(self, snapshot: Snapshot) -> bool:
        """Hand `snapshot` to the writer (returns at once); False when it will not be written."""
        if snapshot.private or snapshot.nbytes > self.budget or not snapshot.tokens:
            return False
        with self._cv:
            if self._closed or (self._pending and self._pending_bytes + snapshot.nbytes > MAX_PENDING_BYTES):
                return False
            self._pending.append(snapshot)
            self._pending_bytes += snapshot.nbytes
            self._cv.notify()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every snapshot handed over is written; False when `timeout` ran out first."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending and not self._writing, timeout)

    def close(self, timeout: float) -> None:
        """Write what is pending (for at most `timeout` seconds), then stop the writer."""
        self.flush(timeout)
        with self._cv:
            self._closed = True
            self._pending.clear()
            self._cv.notify_all()
        self._thread.join(timeout)

    # --- the writer thread --------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                snapshot = self._pending.popleft()
                self._pending_bytes -= snapshot.nbytes
                self._writing = True
            try:
                self._store(snapshot)
            except Exception:
                log.exception("writing a KV snapshot failed")
            finally:
                with self._cv:
                    self._writing = False
                    self._cv.notify_all()

    def _store(self, snapshot: Snapshot) -> None:
        with self._lock:
            entries = list(self._entries.values())
        if any(extends(e.tokens, snapshot.tokens) for e in entries):
            return  # a file on disk already holds all of it
        path = self.folder / file_name(snapshot.tokens)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_snapshot(path, self.identity, snapshot)
        except OSError as e:
            # A full or read-only disk: no snapshot, said once per runner.
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            log.log(level, "cannot write a KV snapshot to %s: %s", self.folder, e)
            return
        superseded = [e for e in entries if extends(snapshot.tokens, e.tokens)]
        with self._lock:
            self._entries[path.name] = DiskEntry(path, list(snapshot.tokens))
            for old in superseded:
                self._entries.pop(old.path.name, None)
        for old in superseded:
            _remove(old.path)
        self._within_budget()

    def _within_budget(self) -> None:
        """Remove the least recently used files of the whole snapshots folder until it fits its budget."""
        files: list[tuple[float, int, Path]] = []
        with contextlib.suppress(OSError):
            for layout in os.scandir(self.root):
                if not layout.is_dir(follow_symlinks=False):
                    continue
                with contextlib.suppress(OSError):
                    for item in os.scandir(layout.path):
                        if item.name.endswith(SUFFIX) and item.is_file(follow_symlinks=False):
                            st = item.stat(follow_symlinks=False)
                            files.append((st.st_mtime, st.st_size, Path(item.path)))
        used = sum(size for _, size, _ in files)
        for _, size, path in sorted(files, key=lambda f: f[0]):
            if used <= self.budget:
                break
            _remove(path)
            used -= size
            if path.parent == self.folder:
                with self._lock:
                    self._entries.pop(path.name, None)
            else:
                with contextlib.suppress(OSError):
                    path.parent.rmdir()  # only once empty: another layout's last file

    def _scan(self) -> None:
        """Index this layout's files; remove corrupt ones and temporary files left by dead runners."""
        try:
            items = list(os.scandir(self.folder))
        except FileNotFoundError:
            return
        except OSError as e:
            log.warning("cannot read the KV snapshots in %s: %s", self.folder, e)
            return
        for item in items:
            path = Path(item.path)
            if item.name.endswith(TEMP_SUFFIX):
                pid = item.name.removesuffix(TEMP_SUFFIX).rpartition(".")[2]
                if not (pid.isdigit() and _pid_alive(int(pid))):
                    _remove(path)
                continue
            if not item.name.endswith(SUFFIX):
                continue
            try:
                entry = read_entry(path, self.identity)
            except CorruptSnapshot as e:
                log.warning("removing the corrupt KV snapshot %s: %s", path, e)
                _remove(path)
                continue
            except OSError as e:
                log.warning("cannot read the KV snapshot %s: %s", path, e)
                continue
            self._entries[item.name] = entry


def disk_store(options: LoadOptions, n_ctx_per_slot: int) -> DiskSnapshots | None:
    """The disk store of a loaded model's KV layout, or None when its snapshots stay off disk."""
    if options.embedding or options.snapshot_disk_bytes <= 0 or not options.snapshot_dir:
        return None
    identity = layout_identity(
        options.path,
        kv_type=options.kv_type,
        n_ctx_per_slot=n_ctx_per_slot,
        flash_attention=options.flash_attention,
        runtime=runtime_version(),
        lora=options.lora,
    )
    return DiskSnapshots(Path(options.snapshot_dir), identity, options.snapshot_disk_bytes)
