"""The GBNF checker refuses what llama.cpp would refuse or misread, before llama.cpp sees it."""

from __future__ import annotations

import re

import pytest

from engine.grammar.driver import Driver
from spark.engine.grammar import Grammar, GrammarError, check_gbnf, create_sampler
from spark.errors import InvalidRequest


def alternatives(n: int) -> str:
    """`n` string literals as the alternatives of a GBNF rule."""
    return " | ".join(f'"v{i}"' for i in range(n))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('root ::= "a" b\n', "undefined rule 'b'"),
        ('start ::= "a"\n', "no 'root' rule"),
        ('root ::= root "a" | "b"\n', "left-recursive"),
        ('root ::= x\nx ::= "a"? root\n', "left-recursive"),
        ('root ::= "a"{0,2001}\n', "above 2000"),
        ('root ::= "a"{3,2}\n', "maximum below its minimum"),
        ('root ::= "\\q"\n', "unknown escape"),
        ("root ::= []\n", "empty character class"),
        ("root ::= [z-a]\n", "bad character range"),
        ('root ::= ( "a"\n', "expecting ')'"),
        ('root ::= "a"\nroot ::= "b"\n', "defined twice"),
        ("root ::= <think>\n", "token references"),
        ("root ::= ( [a-z]{0,50} ){0,50}\n", "more than 2000 rules"),
        # a client's own grammar (raw completions' `grammar`) may be built to exhaust a recursive checker
        ("root ::= " + "(" * 65 + '"a"' + ")" * 65 + "\n", "nested more than 64 deep"),
        ("".join(f'r{i} ::= r{i + 1} "a"\n' for i in range(5000)) + 'r5000 ::= "a"\nroot ::= r0\n', "too deeply"),
    ],
)
def test_check_gbnf_refuses_what_llama_cpp_would_refuse_or_misread(text: str, why: str) -> None:
    with pytest.raises(GrammarError, match=re.escape(why)):
        check_gbnf(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (f"root ::= {alternatives(1001)}\n", "rule 'root' may keep 1001 alternatives open at once"),
        (f'root ::= "x" ( "y" | {alternatives(1000)} )\n', "rule 'root' may keep 1001"),
        (f"root ::= a | b\na ::= {alternatives(600)}\nb ::= {alternatives(600)}\n", "rule 'root' may keep 1200"),
        (f'root ::= "x" a? b\na ::= {alternatives(600)}\nb ::= {alternatives(600)}\n', "rule 'root' may keep 1200"),
        (f'root ::= "x"\nb ::= c\nc ::= {alternatives(1001)}\n', "rule 'c' may keep 1001"),
        # each alternative matches "a", then opens s: 10,000 stacks at once, though no point opens 1,000
        (
            "root ::= " + " | ".join(f'"a" s "{i}"' for i in range(100)) + f"\ns ::= {alternatives(100)}\n",
            "rule 'root' may keep 10000",
        ),
        ('root ::= "' + "a" * 600_000 + '"\n', "characters long, more than this server's limit of 524288"),
    ],
    ids=[
        "one-rule",
        "a-group",
        "two-rules-it-starts-with",
        "after-an-optional-one",
        "unused-rule",
        "ambiguous",
        "long",
    ],
)
def test_check_gbnf_bounds_what_each_step_of_llama_cpp_checks(text: str, why: str) -> None:
    # llama.cpp's sampler checks every token against each alternative open at a point, at every step
    with pytest.raises(GrammarError, match=re.escape(why)):
        check_gbnf(text)


def test_check_gbnf_accepts_comments_groups_and_nullable_recursion() -> None:
    check_gbnf('# c\nroot ::= x ( "," x )* # trailing\nx ::= "[" x? "]" | [^\\x00-\\x1F"]+\n')


def test_alternatives_that_part_at_their_first_literal_count_as_the_largest() -> None:
    # a tool call's name: past "\"t1\"" only the first tool's 600 values are alive, not 30 x 600
    tools = " | ".join(f'"\\"t{i}\\"" ":" v' for i in range(30))
    check_gbnf(f"root ::= {tools}\nv ::= {alternatives(600)}\n")
    check_gbnf(f'root ::= call | "<call>" call\ncall ::= "{{" ( {tools} ) "}}"\nv ::= {alternatives(600)}\n')
    # literals that begin one another ("a" and "ab") do not part: both may be alive past "a"
    with pytest.raises(GrammarError, match="may keep 1200"):
        check_gbnf(f'root ::= "a" v | "ab" v\nv ::= {alternatives(600)}\n')


def test_alternatives_one_after_another_are_not_open_at_once() -> None:
    check_gbnf(f"root ::= {alternatives(1000)}\n")
    check_gbnf(f'root ::= "x" a b\na ::= {alternatives(1000)}\nb ::= {alternatives(1000)}\n')
    check_gbnf(f"root ::= a ( {alternatives(999)} )\na ::= {alternatives(999)}\n")
    check_gbnf(
        "".join(f'r{i} ::= "a" r{i + 1}\n' for i in range(5000)) + 'r5000 ::= "a"\nroot ::= r0\n'
    )  # deep, not wide


def test_a_refused_grammar_never_reaches_llama_cpp(driver: Driver) -> None:
    with pytest.raises(InvalidRequest) as e:
        create_sampler(driver.model, Grammar('root ::= root "a"\n', "response_format"))
    assert e.value.param == "response_format" and "left-recursive" in e.value.message
