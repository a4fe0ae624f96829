"""docs/python.md's examples run as they are and print what the page says they print."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spark.cli import app

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"
MINILM = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "all-MiniLM-L6-v2-q8_0.gguf"


def examples() -> list[tuple[str, str]]:
    """Each ```python block that a ```text block follows at once (what it prints), with that output."""
    blocks: list[tuple[str, int, int, str]] = []  # language, first and last line, text
    lines = DOC.read_text(encoding="utf-8").splitlines(keepends=True)
    start, language = -1, ""
    for i, line in enumerate(lines):
        if line.startswith("```") and start < 0:
            start, language = i, line[3:].strip()
        elif line.startswith("```"):
            blocks.append((language, start, i, "".join(lines[start + 1 : i])))
            start = -1
    found = [
        (code[3], printed[3])
        for code, printed in itertools.pairwise(blocks)
        if (code[0], printed[0]) == ("python", "text") and printed[1] == code[2] + 1
    ]
    assert len(found) >= 8, "the page's examples were not found"
    return found


@pytest.mark.parametrize("code, printed", examples(), ids=lambda text: text.split("\n")[0][:40])
def test_the_example_prints_what_the_page_says(smollm2: Path, code: str, printed: str) -> None:
    pulled = CliRunner().invoke(app, ["pull", str(MINILM)])  # as the page says the embedding model is added
    assert pulled.exit_code == 0 and "all-minilm-l6-v2-q8_0" in pulled.output, pulled.output
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed
