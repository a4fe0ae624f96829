"""Bounded integers and numbers: the grammars accept exactly the values inside the bounds."""

from __future__ import annotations

from typing import Any

import pytest

from engine.grammar.driver import Driver, generated
from spark.engine.grammar import schema_grammar


@pytest.mark.parametrize(("lo", "hi"), [(-15, 130), (0, None), (None, -7), (1000, 1234), (5, 5), (-1, 1)])
def test_integer_ranges_accept_exactly_the_integers_inside(driver: Driver, lo: int | None, hi: int | None) -> None:
    schema: dict[str, Any] = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    grammar = schema_grammar(schema)
    for n in [*range(-40, 160), *range(990, 1250, 7), -1000, 100000]:
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert driver.accepts(grammar, str(n)) == inside, n
    assert not driver.accepts(grammar, "007")
    assert not driver.accepts(grammar, "-0" if lo is not None and lo >= 0 else "1.5")


def test_exclusive_bounds_and_float_bounds_on_integers(driver: Driver) -> None:
    grammar = schema_grammar({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 6.5})
    assert [n for n in range(-3, 10) if driver.accepts(grammar, str(n))] == [3, 4, 5, 6]


def test_bounded_numbers_only_write_values_inside(driver: Driver) -> None:
    schema = {"type": "number", "minimum": -2, "exclusiveMaximum": 1}
    grammar = schema_grammar(schema)
    for text, ok in [
        ("-2", True),
        ("-1.5", True),
        ("0.999", True),
        ("1", False),
        ("1.0", False),
        ("-2.5", False),
        ("0", True),
        ("-0.25", True),
        ("1e0", False),
    ]:
        assert driver.accepts(grammar, text) == ok, text
    values = generated(driver, schema, range(30))
    assert any(isinstance(v, float) for v in values)


def test_exclusive_integer_bound_allows_decimals_just_above_it(driver: Driver) -> None:
    grammar = schema_grammar({"type": "number", "exclusiveMinimum": 0, "maximum": 1})
    assert driver.accepts(grammar, "0.5") and driver.accepts(grammar, "1")
    assert not driver.accepts(grammar, "0") and not driver.accepts(grammar, "0.000")
