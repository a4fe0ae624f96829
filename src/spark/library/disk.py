"""Free disk space checks before Spark writes model files."""

from __future__ import annotations

import shutil
from pathlib import Path

from spark.errors import DownloadError, SparkError
from spark.units import format_bytes

# Left free on top of what a write needs, so the disk is never filled to the last byte.
HEADROOM_BYTES = 64 * 1024 * 1024


def free_bytes(folder: Path) -> int:
    """Bytes free for new files on the file system holding `folder` (or its nearest existing parent)."""
    path = folder
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def ensure_free_space(folder: Path, needed: int, what: str, error: type[SparkError] = DownloadError) -> None:
    """Raise `error` when writing `needed` bytes to `folder` would (nearly) fill the disk."""
    free = free_bytes(folder)
    if needed + HEADROOM_BYTES > free:
        raise error(
            f"not enough disk space for {what}: it needs {format_bytes(needed)} "
            f"(plus {format_bytes(HEADROOM_BYTES)} headroom) but only {format_bytes(free)} is free in {folder}"
        )
