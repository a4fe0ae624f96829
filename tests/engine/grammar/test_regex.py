"""Patterns: the strings a pattern's grammar generates match the pattern."""

from __future__ import annotations

import re

import pytest

from engine.grammar.driver import Driver, generated


@pytest.mark.parametrize(
    "pattern",
    [
        r"^[A-Z]{3}-\d{2,4}$",
        r"^(red|green|blue)$",
        r"^\w{1,8}@\w{1,8}\.(com|org)$",
        r'^a"b\\c[^x]?$',
        r"colou?r",
        r"^\S+ \D*$",
    ],
)
def test_patterns_generate_matching_strings(driver: Driver, pattern: str) -> None:
    for value in generated(driver, {"type": "string", "pattern": pattern}, range(8)):
        assert re.search(pattern, value)
