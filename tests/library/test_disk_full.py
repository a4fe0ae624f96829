"""A disk that fills up during a pull (a real small tmpfs): the pull ends with a clear error, the
library is unchanged, the partial file is kept and the next pull resumes it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fakehub import FakeHub
from small_disk import fill, small_disk
from spark.errors import DownloadError
from spark.library import Library, pull
from spark.settings import load_settings

FILE = "TinyLlama-Q4_K_M.gguf"  # what `pull tiny/TinyLlama-GGUF` picks


def _fill_once_started(folder: Path, filled: threading.Event) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = list(folder.rglob("*.part"))
        if parts and parts[0].stat().st_size > 0:
            fill(folder)
            filled.set()
            return
        time.sleep(0.01)


def test_disk_full_during_a_pull(
    fake_hub: FakeHub, hub_files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings()
    monkeypatch.setattr("spark.library.disk.HEADROOM_BYTES", 0)  # the disk is tiny: only the file must fit
    with small_disk(settings.models_dir, "2m") as models, Library(settings) as library:
        fake_hub.throttle[FILE] = 200_000  # bytes per second: the disk fills while it downloads
        filled = threading.Event()
        filler = threading.Thread(target=_fill_once_started, args=(models, filled))
        filler.start()
        with pytest.raises(DownloadError) as e:
            pull(library, "tiny/TinyLlama-GGUF")
        filler.join()
        assert filled.is_set()
        assert "No space left on device" in e.value.message and "run the same pull again to resume" in e.value.message
        assert not library.exists("tinyllama-q4_k_m"), "nothing was registered"
        (part,) = models.rglob("*.part")
        kept = part.stat().st_size
        assert 0 < kept < len(hub_files["f32"])

        (models / "filler").unlink()  # space again: the same pull resumes where it stopped
        del fake_hub.throttle[FILE]
        entry = pull(library, "tiny/TinyLlama-GGUF").entry
        assert Path(entry.path).read_bytes() == hub_files["f32"]
        ranges = [r.get("range") for r in fake_hub.file_requests(FILE)]
        assert f"bytes={kept}-" in ranges
