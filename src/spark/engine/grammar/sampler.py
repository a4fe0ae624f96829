"""llama.cpp grammar samplers for checked grammars, lazy ones included."""

from __future__ import annotations

import re

from spark.engine.grammar.check import check_gbnf
from spark.engine.grammar.errors import GrammarError
from spark.engine.grammar.gbnf import Grammar
from spark.engine.native import Model, SamplerPointer
from spark.errors import InvalidRequest


def regex_escape(text: str) -> str:
    """`text` as a literal in an ECMAScript regular expression (llama.cpp uses std::regex)."""
    return re.sub(r"([\\^$.|?*+()\[\]{}/-])", r"\\\1", text)


def create_sampler(model: Model, grammar: Grammar) -> SamplerPointer:
    """A llama.cpp grammar sampler; raises `InvalidRequest` when llama.cpp refuses the grammar.

    A lazy grammar's trigger words that are one token in this vocabulary
    trigger on that token; the others become patterns that only match when
    the word ends the text so far (plus a little whitespace), so the text the
    grammar is started with is always the word itself.
    """
    try:
        check_gbnf(grammar.text, grammar.root)
    except GrammarError as e:
        raise InvalidRequest(f"the grammar for this request is invalid: {e}", param=grammar.param) from None
    tokens: list[int] = []
    patterns = list(grammar.trigger_patterns)
    for word in grammar.trigger_words:
        ids = model.tokenize(word, add_special=False, parse_special=True)
        if len(ids) == 1:
            tokens.append(ids[0])
        else:
            patterns.append(f"({regex_escape(word)})[ \\t\\r\\n]{{0,4}}$")
    ptr = model.grammar_sampler(grammar.text, grammar.root, trigger_patterns=patterns, trigger_tokens=tokens)
    if not ptr:
        raise InvalidRequest("llama.cpp refused the grammar for this request", param=grammar.param)
    return ptr
