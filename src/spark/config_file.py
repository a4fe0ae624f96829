"""Changing settings in config.toml in place: comments, order and unknown keys stay as they were.

Only the `key = value` lines of the changed keys are rewritten (an inline
comment after the value is kept); keys the file lacks are appended. Values
are written by tomli-w. The new file replaces the old one atomically (a
temporary file in the same folder, then a rename), so a reader never sees
half a file and a crash leaves the old one.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w


def update_config(path: Path, changes: Mapping[str, Any]) -> None:
    """Set the top-level keys `changes` in the TOML file `path` (made when missing)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
    pending = dict(changes)
    out: list[str] = []
    i = 0
    in_table = False  # keys after a [table] header belong to it, not to the top level
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("["):
            in_table = True
        key = None if in_table else _key_of(stripped)
        if key is None or key not in pending:
            out.append(line)
            i += 1
            continue
        end = _value_end(lines, i)
        comment = _inline_comment("".join(lines[i:end]))
        indent = line[: len(line) - len(line.lstrip())]
        out.append(indent + _assignment(key, pending.pop(key), comment))
        i = end
    if pending:
        head = [_assignment(key, value, "") for key, value in pending.items()]
        top = next((n for n, line in enumerate(out) if line.strip().startswith("[")), len(out))
        while top and not out[top - 1].strip():  # before the blank lines that set a table apart
            top -= 1
        if top and not out[top - 1].endswith("\n"):
            out[top - 1] += "\n"
        out[top:top] = head
    _write_atomically(path, "".join(out))


def _key_of(stripped: str) -> str | None:
    """The bare key a `key = value` line sets, or None for anything else."""
    if not stripped or stripped.startswith("#"):
        return None
    name, sep, _ = stripped.partition("=")
    name = name.strip().strip('"').strip("'")
    return name if sep and name else None


def _value_end(lines: list[str], start: int) -> int:
    """The index after the last line of the assignment starting at `start` (values may span lines)."""
    for end in range(start + 1, len(lines) + 1):
        try:
            tomllib.loads("".join(lines[start:end]))
        except tomllib.TOMLDecodeError:
            continue
        return end
    return start + 1  # not valid on its own: replace just this line


def _inline_comment(text: str) -> str:
    """The comment after the value of the assignment `text` ('' when none): the shortest prefix
    that still parses to the same value ends where the comment starts."""
    text = text.rstrip("\n")
    try:
        whole = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return ""
    for at in (n for n, char in enumerate(text) if char == "#"):
        try:
            if tomllib.loads(text[:at]) == whole:
                return text[at:]
        except tomllib.TOMLDecodeError:
            continue
    return ""


def _assignment(key: str, value: Any, comment: str) -> str:
    line = tomli_w.dumps({key: value}).rstrip("\n")
    return f"{line}  {comment}\n" if comment else line + "\n"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600  # it may hold secrets
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
