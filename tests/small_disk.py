"""A real full disk for tests: a small tmpfs mounted on a folder (needs root; the test skips without)."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(folder: Path, size: str = "4m") -> Iterator[Path]:
    """`folder` as a tmpfs of `size` until the block ends (pytest skips the test where mount is refused)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path, leave: int = 0) -> Path:
    """Write a file in `folder` until the disk is full (leaving about `leave` bytes); returns it."""
    filler = folder / "filler"
    block = b"\0" * 4096
    with filler.open("ab", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    if leave:
        with filler.open("r+b") as f:
            f.truncate(max(0, filler.stat().st_size - leave))
    return filler
