"""Grammars: a response format or a forced tool call becomes a GBNF grammar that the
slot's sampler chain applies before sampling, so the output always parses.

- `gbnf`: writing GBNF (literals, classes, repetitions, a grammar's rules), `finish`
- `check`: the checker every grammar passes before llama.cpp sees it
- `schema`: JSON schema to GBNF (with `numeric` for bounded numbers, `regex` for patterns)
- `sampler`: llama.cpp grammar samplers, lazy ones included
"""

from spark.engine.grammar.check import check_gbnf
from spark.engine.grammar.errors import GrammarError, SchemaError
from spark.engine.grammar.gbnf import Grammar, Rules, char_class, finish, literal
from spark.engine.grammar.regex import RegexConverter
from spark.engine.grammar.sampler import create_sampler
from spark.engine.grammar.schema import SchemaConverter, schema_grammar

__all__ = [
    "Grammar",
    "GrammarError",
    "RegexConverter",
    "Rules",
    "SchemaConverter",
    "SchemaError",
    "char_class",
    "check_gbnf",
    "create_sampler",
    "finish",
    "literal",
    "schema_grammar",
]
