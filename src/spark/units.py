"""Sizes and durations as people write them (`512MiB`, `5m`) and as Spark prints them (`1.5 GiB`)."""

from __future__ import annotations

import re

from spark.errors import SettingsError

_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: str | float, key: str) -> float:
    """Seconds from `90`, `1.5`, `30s`, `5m`, `1h30m` or `-1` (forever, as negative)."""
    if isinstance(value, (int, float)):
        return float(value)
    text = value.strip().lower().replace(" ", "")
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("-")
    pos, total = 0, 0.0
    while pos < len(text):
        m = _DURATION.match(text, pos)
        if not m or m.end() == pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise SettingsError(f"{key}: '{value}' is not a duration (use seconds or e.g. 30s, 5m, 1h)", param=key)
    return sign * total


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}


def parse_size(value: str | int, key: str) -> int:
    """Bytes from `1024`, `512MiB`, `8GB`, `8g`; empty means 0."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if not text:
        return 0
    m = _SIZE.fullmatch(text)
    if not m or (m.group(2) or "").lower() not in _SIZE_UNITS:
        raise SettingsError(f"{key}: '{value}' is not a size (use bytes or e.g. 512MiB, 8GiB)", param=key)
    return int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()])


def format_bytes(n: float) -> str:
    """Human-readable size with binary units (`1.5 GiB`)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while abs(n) >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{n:.0f} {units[i]}" if i == 0 else f"{n:.1f} {units[i]}"


def format_duration(seconds: float) -> str:
    """`45s`, `4m 10s`, `2h 5m`: a short duration for tables."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s % 60 else f"{s // 60}m"
    return f"{s // 3600}h {(s % 3600) // 60}m"
