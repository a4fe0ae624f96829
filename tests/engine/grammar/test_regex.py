"""Patterns: the strings a pattern's grammar generates match the pattern."""

from __future__ import annotations

import re

import pytest

from engine.grammar.driver import Driver, generated
from spark.engine.grammar import RegexConverter, Rules, finish


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


@pytest.mark.parametrize("pattern", [r"(yes|no)", r"[A-Z][a-z]{2,5} \d{1,3}", r'a"b\\c.', r"^(x|y)+$", r"c\.d|a\ b"])
def test_a_raw_regex_holds_the_whole_text(driver: Driver, pattern: str) -> None:
    # vLLM's and SGLang's `regex`: the answer itself matches, not a JSON string of it
    grammar = finish(Rules(), RegexConverter("regex", "regex", raw=True).convert(pattern), "regex")
    for seed in range(6):
        assert re.fullmatch(pattern, driver.walk(grammar, seed)), pattern
