"""Image formats and declared dimensions read from headers, so that bombs are refused before decoding."""

from __future__ import annotations

import struct

import pytest

import tiny_gguf
from spark.engine.image_header import MAX_IMAGE_PIXELS, image_format, image_size, too_large

PNG = tiny_gguf.tiny_png(width=40, height=24)


def test_image_formats_are_recognised_by_their_magic() -> None:
    assert image_format(PNG) == "PNG"
    assert image_format(b"\xff\xd8\xff\xe0rest") == "JPEG"
    assert image_format(b"GIF89a...") == "GIF"
    assert image_format(b"RIFF\x10\x00\x00\x00WEBPVP8 ") == "WebP"
    assert image_format(b"RIFF....WAVEfmt ") is None
    assert image_format(b"<svg>") is None


JPEG = (
    b"\xff\xd8"  # start of image
    + b"\xff\xe0"
    + struct.pack(">H", 16)
    + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"  # APP0, skipped
    + b"\xff\xc2"
    + struct.pack(">HBHHB", 11, 8, 3000, 5000, 1)  # progressive frame: 5000 wide, 3000 high
    + b"\x01\x11\x00"
)


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (PNG, (40, 24)),
        (tiny_gguf.png_declaring(100_000, 100_000), (100_000, 100_000)),
        (b"GIF89a" + struct.pack("<HH", 640, 480) + b"\x00" * 8, (640, 480)),
        (b"BM" + b"\x00" * 16 + struct.pack("<ii", 800, -600) + b"\x00" * 8, (800, 600)),
        (JPEG, (5000, 3000)),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8X" + b"\x00" * 8 + (1999).to_bytes(3, "little") + (999).to_bytes(3, "little"),
            (2000, 1000),
        ),
        (b"RIFF\x00\x00\x00\x00WEBPVP8L\x00\x00\x00\x00\x2f" + (99 | (49 << 14)).to_bytes(4, "little"), (100, 50)),
    ],
    ids=["png", "png-bomb", "gif", "bmp-top-down", "jpeg-progressive", "webp-extended", "webp-lossless"],
)
def test_declared_dimensions_are_read_without_decoding(data: bytes, size: tuple[int, int]) -> None:
    assert image_size(data) == size


@pytest.mark.parametrize("data", [PNG[:20], b"\xff\xd8\xff\xe0\x00", b"GIF89a\x01", b"<svg>", b""])
def test_unreadable_headers_have_no_size(data: bytes) -> None:
    assert image_size(data) is None


def test_the_limit_counts_pixels_and_sides() -> None:
    assert not too_large((4096, 4096))
    assert too_large((100_000, 100_000))
    assert too_large((20_000, 10))  # one side too long
    assert too_large((6400, 6400)) and MAX_IMAGE_PIXELS < 6400 * 6400
