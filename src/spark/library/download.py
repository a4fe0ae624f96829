"""Downloading one file over HTTP into `<name>.part`: resumable, retried, checksummed.

A partial file is kept after an interruption and continued with a Range request
the next time. A file is only handed back once its size and SHA-256 match what
the Hub announced; a checksum mismatch deletes the partial file. A disk that fills
up while writing ends the download with a clear error, the partial file kept.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from spark.errors import DownloadError
from spark.units import format_bytes

if TYPE_CHECKING:  # imported where used: a server that never calls out does not load httpx
    import httpx

CHUNK = 1 << 20
RETRIES = 3  # extra attempts after a dropped connection, within one pull
RETRY_DELAY_S = 0.5  # times the attempt number
TIMEOUT_SECONDS = 60.0  # between two reads
CONNECT_SECONDS = 15.0


def open_client(headers: dict[str, str]) -> httpx.Client:
    """The HTTP client of downloads from the Hub (redirects followed, to its file storage)."""
    import httpx

    timeout = httpx.Timeout(TIMEOUT_SECONDS, connect=CONNECT_SECONDS)
    return httpx.Client(headers=headers, follow_redirects=True, timeout=timeout)


class DownloadProgress(msgspec.Struct, frozen=True):
    """Bytes of `filename` on disk so far, out of `total` (None when unknown)."""

    filename: str
    completed: int
    total: int | None


ProgressFn = Callable[[DownloadProgress], None]


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def download_file(
    client: httpx.Client,
    url: str,
    dest: Path,
    *,
    size: int | None,
    sha256: str | None,
    progress: ProgressFn | None = None,
    retries: int | None = None,
) -> Path:
    """Download `url` to `dest.part` and return that path once complete and verified.

    Resumes an existing `.part`; retries a dropped connection `retries` times
    (default `RETRIES`). Raises `DownloadError` when the server refuses,
    the connection keeps dropping (the partial file is kept for the next try),
    or the checksum does not match (the partial file is deleted).
    """
    import httpx

    part = part_path(dest)
    name = dest.name
    report = progress or (lambda _: None)
    last_error = ""
    for attempt in range((RETRIES if retries is None else retries) + 1):
        if attempt:
            time.sleep(RETRY_DELAY_S * attempt)
        have = part.stat().st_size if part.exists() else 0
        if size is not None and have > size:
            part.unlink()  # longer than the real file: not ours to continue
            have = 0
        if size is None or have < size:
            try:
                _fetch(client, url, part, have, size, name, report)
            except httpx.TransportError as e:
                last_error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                continue
            if not part.exists():
                last_error = "the server refused to resume the partial file"
                continue
        have = part.stat().st_size
        if size is not None and have != size:
            last_error = f"the server sent {have} of {size} bytes"
            continue
        report(DownloadProgress(name, have, size))
        if sha256 is not None:
            actual = _sha256(part)
            if actual != sha256.lower():
                part.unlink(missing_ok=True)
                raise DownloadError(
                    f"checksum mismatch for {name}: the Hub lists sha256 {sha256}, the download has "
                    f"{actual}; the partial file was deleted, run the pull again"
                )
        return part
    have = part.stat().st_size if part.exists() else 0
    of = f" of {format_bytes(size)}" if size is not None else ""
    raise DownloadError(
        f"download of {name} was interrupted ({last_error}) after {format_bytes(have)}{of}; "
        "run the same pull again to resume"
    )


def _fetch(
    client: httpx.Client,
    url: str,
    part: Path,
    have: int,
    size: int | None,
    name: str,
    report: ProgressFn,
) -> None:
    headers = {"Range": f"bytes={have}-"} if have else {}
    with client.stream("GET", url, headers=headers) as r:
        if r.status_code == 416 and have:
            part.unlink()  # our partial file does not fit the server's file: start over
            return
        _check_status(r, name, url)
        resumed = r.status_code == 206 and _range_start(r) == have
        offset = have if resumed else 0  # a 200 is the whole file from its first byte
        total = size if size is not None else _total(r, offset)
        done = offset
        try:
            with part.open("ab" if resumed else "wb") as f:
                report(DownloadProgress(name, done, total))
                for chunk in r.iter_bytes():  # as it arrives: a dropped connection loses nothing
                    f.write(chunk)
                    done += len(chunk)
                    report(DownloadProgress(name, done, total))
        except OSError as e:  # the disk filled up (or went away) while the file was being written
            raise DownloadError(
                f"writing {name} to {part.parent} failed after {format_bytes(done)}: {e.strerror or e}; "
                f"free some space and run the same pull again to resume (the partial file {part.name} is kept)"
            ) from None


def read_start(client: httpx.Client, url: str, n: int, name: str) -> bytes:
    """The first `n` bytes of the file at `url` (all of it when shorter), with a Range request."""
    import httpx

    try:
        with client.stream("GET", url, headers={"Range": f"bytes=0-{n - 1}"}) as r:
            _check_status(r, name, url)
            data = bytearray()
            for chunk in r.iter_bytes():  # a server that ignores Range sends everything: stop at n
                data += chunk
                if len(data) >= n:
                    break
            return bytes(data[:n])
    except httpx.TransportError as e:
        raise DownloadError(f"reading the start of {name} failed: {type(e).__name__}: {e}") from None


def _check_status(r: httpx.Response, name: str, url: str) -> None:
    """`DownloadError` in the user's terms for a refused file request."""
    if r.status_code in (401, 403):
        raise DownloadError(
            f"access to {name} was denied ({r.status_code}); for gated or private repositories "
            "set hf_token (SPARK_HF_TOKEN)"
        )
    if r.status_code == 404:
        raise DownloadError(f"{name} was not found on the Hub ({url})")
    if r.status_code >= 400:
        raise DownloadError(f"the Hub answered {r.status_code} for {name}")


def _range_start(r: httpx.Response) -> int | None:
    # "bytes 100-999/1000"
    value = r.headers.get("Content-Range", "")
    try:
        return int(value.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return None


def _total(r: httpx.Response, offset: int) -> int | None:
    length = r.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()
