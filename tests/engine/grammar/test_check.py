"""The GBNF checker refuses what llama.cpp would refuse or misread, before llama.cpp sees it."""

from __future__ import annotations

import re

import pytest

from engine.grammar.driver import Driver
from spark.engine.grammar import Grammar, GrammarError, check_gbnf, create_sampler
from spark.errors import InvalidRequest


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


def test_check_gbnf_accepts_comments_groups_and_nullable_recursion() -> None:
    check_gbnf('# c\nroot ::= x ( "," x )* # trailing\nx ::= "[" x? "]" | [^\\x00-\\x1F"]+\n')


def test_a_refused_grammar_never_reaches_llama_cpp(driver: Driver) -> None:
    with pytest.raises(InvalidRequest) as e:
        create_sampler(driver.model, Grammar('root ::= root "a"\n', "response_format"))
    assert e.value.param == "response_format" and "left-recursive" in e.value.message
