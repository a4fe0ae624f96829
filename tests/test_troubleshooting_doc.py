"""docs/troubleshooting.md quotes Spark's real messages: every quoted line is found in the source."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "troubleshooting.md"
PLACEHOLDER = "…"  # stands for the parts of a message that change


def quoted_messages() -> list[str]:
    return [line[2:].strip() for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("> ")]


# Run in a fresh interpreter: CPython 3.11.7's ast failed ("AST constructor recursion depth mismatch")
# in a test worker that had run other files first.
_CONSTANTS = """
import ast, json, pathlib, sys
texts = []
for path in pathlib.Path(sys.argv[1]).rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
print(json.dumps(texts))
"""


def _source_texts() -> list[str]:
    """Every string Spark can print: the constant parts of its string literals, and the installer's text."""
    found = subprocess.run(
        [sys.executable, "-c", _CONSTANTS, str(ROOT / "src" / "spark")], capture_output=True, text=True, check=True
    )
    texts: list[str] = json.loads(found.stdout)
    texts.append((ROOT / "install.sh").read_text(encoding="utf-8"))
    return texts


def test_the_doc_quotes_messages() -> None:
    assert len(quoted_messages()) >= 15


def test_every_quoted_message_is_in_the_source() -> None:
    texts = _source_texts()
    missing = []
    for message in quoted_messages():
        for piece in (p.strip() for p in message.split(PLACEHOLDER)):
            if piece and not any(piece in t for t in texts):
                missing.append(f"{piece!r} (from: {message})")
    assert not missing, "quoted in docs/troubleshooting.md but not printed by Spark:\n" + "\n".join(missing)


def test_the_readme_links_the_doc() -> None:
    assert re.search(r"\(docs/troubleshooting\.md\)", (ROOT / "README.md").read_text(encoding="utf-8"))
