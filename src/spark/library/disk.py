"""Free disk space checks before Spark writes model files."""

from __future__ import annotations

import shutil
from pathlib import Path

from spark.errors import DownloadError, SparkError

# Left free on top of what a write needs, so the disk is never filled to the last byte.
HEADROOM_BYTES = 64 * 1024 * 1024


def free_bytes(folder: Path) -> int:
    """Bytes free for new files on the file system holding `folder` (or its nearest existing parent)."""
    path = folder
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def format_bytes(n: float) -> str:
    """Human-readable size with binary units (`1.5 GiB`)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while abs(n) >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{n:.0f} {units[i]}" if i == 0 else f"{n:.1f} {units[i]}"


def ensure_free_space(folder: Path, needed: int, what: str, error: type[SparkError] = DownloadError) -> None:
    """Raise `error` when writing `needed` bytes to `folder` would (nearly) fill the disk."""
    free = free_bytes(folder)
    if needed + HEADROOM_BYTES > free:
        raise error(
            f"not enough disk space for {what}: it needs {format_bytes(needed)} "
            f"(plus {format_bytes(HEADROOM_BYTES)} headroom) but only {format_bytes(free)} is free in {folder}"
        )
