#!/usr/bin/env python3
"""Regenerate the files derived from code: docs/settings.md and completions/.

Run after changing a setting or a CLI command; tests/test_generated.py fails
while these files are stale.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generated() -> dict[Path, str]:
    """Every derived file, by path relative to the repository root."""
    from spark.cli import app
    from spark.cli.completions import SCRIPTS
    from spark.settings import settings_markdown

    files = {Path("docs/settings.md"): settings_markdown()}
    for name, make in SCRIPTS.items():
        files[Path("completions") / name] = make(app)
    return files


def main() -> None:
    for rel, text in generated().items():
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {rel}")


if __name__ == "__main__":
    main()
