"""Drive llama.cpp's grammar sampler over the tiny model's vocabulary, without decoding."""

from __future__ import annotations

import ctypes
import json
from typing import Any

import jsonschema
import numpy as np
from llama_cpp import llama_cpp as lc

from spark.engine.grammar import Grammar, create_sampler, schema_grammar
from spark.engine.native import Model

FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


class Driver:
    """Runs llama.cpp's grammar sampler over the tiny model's vocabulary, without decoding.

    The tiny vocabulary has one token per byte (token id == byte), so any text
    can be fed character by character: `accepts` asks llama.cpp whether a
    grammar allows a text; `walk` samples a random text the grammar allows,
    from the tokens that are whole UTF-8 text (llama.cpp's grammar does not
    check UTF-8, and a real model's text is UTF-8).
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.eos = model.eos
        self.text_tokens = {t for t in range(model.n_vocab) if _utf8(model.piece(t)) and not model.is_eog(t)}

    def _apply(self, sampler: Any, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        arr = np.zeros(len(ids), dtype=_TOKEN_DATA)
        arr["id"], arr["logit"] = ids, logits
        data = lc.llama_token_data_array(
            data=arr.ctypes.data_as(lc.llama_token_data_p), size=len(ids), selected=-1, sorted=False
        )
        lc.llama_sampler_apply(sampler, ctypes.byref(data))
        return arr

    def accepts(self, grammar: Grammar, text: str, *, complete: bool = True) -> bool:
        sampler = create_sampler(self.model, grammar)
        try:
            for byte in text.encode():
                arr = self._apply(sampler, np.array([byte]), np.zeros(1))
                if not np.isfinite(arr["logit"][0]):
                    return False
                lc.llama_sampler_accept(sampler, byte)
            if not complete:
                return True
            arr = self._apply(sampler, np.array([self.eos]), np.zeros(1))
            return bool(np.isfinite(arr["logit"][0]))
        finally:
            lc.llama_sampler_free(sampler)

    def walk(self, grammar: Grammar, seed: int, *, prefix: str = "", stop: float = 0.4, max_steps: int = 600) -> str:
        """A random text the grammar allows, after feeding `prefix`; where it may end, it does so
        with probability `stop`."""
        rng = np.random.default_rng(seed)
        sampler = create_sampler(self.model, grammar)
        n = self.model.n_vocab
        out = b""
        try:
            for byte in prefix.encode():
                lc.llama_sampler_accept(sampler, byte)
            for _ in range(max_steps):
                arr = self._apply(sampler, np.arange(n), rng.standard_normal(n))
                ok = [int(t) for t in arr["id"][np.isfinite(arr["logit"])]]
                text_tokens = [t for t in ok if t in self.text_tokens]
                if self.eos in ok and (not text_tokens or rng.random() < stop):
                    return out.decode()
                token = int(rng.choice(text_tokens))
                lc.llama_sampler_accept(sampler, token)
                out += self.model.piece(token)
            raise AssertionError(f"no end after {max_steps} tokens: {out[:200]!r}")
        finally:
            lc.llama_sampler_free(sampler)


def _utf8(piece: bytes) -> bool:
    try:
        return bool(piece.decode())
    except UnicodeDecodeError:
        return False


def generated(driver: Driver, schema: dict[str, Any], seeds: range = range(12)) -> list[Any]:
    """Values sampled from the schema's grammar, each validated against the schema."""
    grammar = schema_grammar(schema)
    values = []
    for seed in seeds:
        value = json.loads(driver.walk(grammar, seed))
        jsonschema.validate(value, schema, format_checker=FORMATS)
        values.append(value)
    return values
