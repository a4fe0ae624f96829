"""The checked-in derived files (settings docs, shell completions) match the code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _generated() -> dict[Path, str]:
    spec = importlib.util.spec_from_file_location("generate", ROOT / "scripts" / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generated()


@pytest.mark.parametrize("rel", sorted(_generated(), key=str), ids=str)
def test_derived_file_is_current(rel: Path) -> None:
    expected = _generated()[rel]
    actual = (ROOT / rel).read_text(encoding="utf-8") if (ROOT / rel).exists() else None
    assert actual == expected, f"{rel} is stale: run `python scripts/generate.py`"


def test_completions_cover_every_command() -> None:
    from spark.cli import app
    from spark.cli.completions import _commands

    leaves, top = _commands(app)
    bash = _generated()[Path("completions/spark.bash")]
    for name, _ in top:
        assert name in bash
    assert any(c.takes_model for c in leaves), "model-taking commands complete model names"
