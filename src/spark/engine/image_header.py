"""An image's format and dimensions from its first bytes, without decoding it.

libmtmd decodes a whole image into RGB memory (width x height x 3 bytes) before
anything else; a small file can declare enormous dimensions (a decompression
bomb), so the engine reads the header first and refuses such an image.
"""

from __future__ import annotations

import struct

MAX_IMAGE_PIXELS = 40_000_000  # about 115 MiB decoded; far beyond what a vision projector uses
MAX_IMAGE_SIDE = 16_384

# Formats libmtmd decodes itself (stb_image), and WebP, which it decodes with ffmpeg when
# that is installed; anything else is refused before libmtmd tries ffmpeg on it.
_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "PNG",
    b"\xff\xd8\xff": "JPEG",
    b"GIF87a": "GIF",
    b"GIF89a": "GIF",
    b"BM": "BMP",
}
# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic...): they carry the size
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def image_format(data: bytes) -> str | None:
    """The name of an image format libmtmd can decode, from its first bytes."""
    for magic, name in _MAGIC.items():
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) that the image's header declares; None when it cannot be read."""
    try:
        match image_format(data):
            case "PNG" if data[12:16] == b"IHDR":
                return struct.unpack(">II", data[16:24])
            case "GIF":
                return struct.unpack("<HH", data[6:10])
            case "BMP":
                width, height = struct.unpack("<ii", data[18:26])
                return abs(width), abs(height)  # a negative height means top-down rows
            case "JPEG":
                return _jpeg_size(data)
            case "WebP":
                return _webp_size(data)
    except struct.error:  # too short for its own header
        return None
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        pos += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def too_large(size: tuple[int, int]) -> bool:
    """Whether an image of `size` would take more memory to decode than Spark allows."""
    width, height = size
    return width > MAX_IMAGE_SIDE or height > MAX_IMAGE_SIDE or width * height > MAX_IMAGE_PIXELS
