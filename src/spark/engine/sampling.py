"""Sampling: validate a request's sampling parameters and build its llama.cpp sampler chain.

Each generating slot owns one chain, seeded on its own, so what a request
samples never depends on the other requests batched with it.
"""

from __future__ import annotations

import ctypes
import math
import secrets

from llama_cpp import llama_cpp as lc

from spark.engine.native import SamplerPointer
from spark.errors import InvalidRequest
from spark.types import DEFAULT_SAMPLING, SamplingParams

# Tokens the repetition penalties look back over (llama.cpp's default).
PENALTY_LAST_N = 64

# llama.cpp reads this seed value as "pick a random seed".
_RANDOM_SEED = lc.LLAMA_DEFAULT_SEED


def resolve(request: SamplingParams, model_defaults: SamplingParams, n_vocab: int) -> SamplingParams:
    """The request's parameters over the model's defaults over Spark's, validated.

    Raises `InvalidRequest` naming the parameter. A missing seed becomes a random one.
    """
    p = request.merged_over(model_defaults).merged_over(DEFAULT_SAMPLING)

    def bad(param: str, why: str) -> InvalidRequest:
        return InvalidRequest(f"{param} {why}", param=param)

    def finite(param: str, value: float | None) -> float:
        if value is None or not math.isfinite(value):
            raise bad(param, f"must be a finite number, not {value}")
        return value

    if finite("temperature", p.temperature) < 0:
        raise bad("temperature", f"must not be negative, not {p.temperature}")
    if not 0 <= finite("top_p", p.top_p) <= 1:
        raise bad("top_p", f"must be between 0 and 1, not {p.top_p}")
    if not 0 <= finite("min_p", p.min_p) <= 1:
        raise bad("min_p", f"must be between 0 and 1, not {p.min_p}")
    if p.top_k is None or p.top_k < 0:
        raise bad("top_k", f"must be 0 (off) or more, not {p.top_k}")
    finite("presence_penalty", p.presence_penalty)
    finite("frequency_penalty", p.frequency_penalty)
    if finite("repeat_penalty", p.repeat_penalty) <= 0:
        raise bad("repeat_penalty", f"must be greater than 0, not {p.repeat_penalty}")
    if p.max_tokens is not None and p.max_tokens < 1:
        raise bad("max_tokens", f"must be at least 1, not {p.max_tokens}")
    for token, bias in (p.logit_bias or {}).items():
        if not 0 <= token < n_vocab:
            raise bad("logit_bias", f"names token {token}, but the vocabulary has tokens 0..{n_vocab - 1}")
        finite("logit_bias", bias)
    seed = p.seed if p.seed is not None else secrets.randbits(32)
    # Seeds are taken modulo 2**32-1 so that no seed means "random" to llama.cpp.
    return SamplingParams(
        **{f: getattr(p, f) for f in p.__struct_fields__ if f != "seed"},
        seed=seed % _RANDOM_SEED,
    )


def uses_penalties(p: SamplingParams) -> bool:
    """Whether the chain looks at earlier tokens (and so must see the prompt's tail)."""
    return p.repeat_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0


class SamplerChain:
    """A llama.cpp sampler chain built from resolved `SamplingParams`; free it with `close()`."""

    def __init__(self, p: SamplingParams, n_vocab: int, grammar: SamplerPointer | None = None) -> None:
        """`grammar` (a grammar sampler, owned by the chain from here on) runs first:
        the other samplers only see the tokens it allows."""
        params = lc.llama_sampler_chain_default_params()
        params.no_perf = True
        self._chain = lc.llama_sampler_chain_init(params)
        if not self._chain:
            if grammar:
                lc.llama_sampler_free(grammar)
            raise MemoryError("llama.cpp could not allocate a sampler chain")
        samplers = [grammar] if grammar else []
        self._grammar = grammar
        self._penalties = None
        if p.logit_bias:
            arr = (lc.llama_logit_bias * len(p.logit_bias))(
                *(lc.llama_logit_bias(token=t, bias=b) for t, b in p.logit_bias.items())
            )
            samplers.append(lc.llama_sampler_init_logit_bias(n_vocab, len(p.logit_bias), arr))
        if uses_penalties(p):
            self._penalties = lc.llama_sampler_init_penalties(
                n_vocab, PENALTY_LAST_N, p.repeat_penalty, p.frequency_penalty, p.presence_penalty
            )
            samplers.append(self._penalties)
        temperature = p.temperature or 0.0
        if temperature <= 0:
            samplers.append(lc.llama_sampler_init_greedy())
        else:
            # The order of llama-server's default chain.
            if p.top_k:
                samplers.append(lc.llama_sampler_init_top_k(p.top_k))
            if p.top_p is not None and p.top_p < 1:
                samplers.append(lc.llama_sampler_init_top_p(p.top_p, 1))
            if p.min_p:
                samplers.append(lc.llama_sampler_init_min_p(p.min_p, 1))
            samplers.append(lc.llama_sampler_init_temp(temperature))
            samplers.append(lc.llama_sampler_init_dist(p.seed or 0))
        for s in samplers:  # the chain owns (and frees) them from here on
            lc.llama_sampler_chain_add(self._chain, s)

    def sample(self, ctx: ctypes.c_void_p, index: int) -> int:
        """Sample (and accept) a token from output row `index` of the last decode."""
        return int(lc.llama_sampler_sample(self._chain, ctx, index))

    def accept(self, token: int) -> None:
        """Let the penalties see a token of the prompt's tail (a grammar must not)."""
        if self._penalties:
            lc.llama_sampler_accept(self._penalties, token)

    def allows(self, token: int) -> bool:
        """Whether the grammar (if any) lets `token` come next: accepting one it does not aborts."""
        if not self._grammar:
            return True
        data = (lc.llama_token_data * 1)(lc.llama_token_data(id=token, logit=0.0, p=0.0))
        candidates = lc.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
        lc.llama_sampler_apply(self._grammar, ctypes.byref(candidates))
        return math.isfinite(data[0].logit)

    def force(self, token: int) -> None:
        """Accept an output token the engine chose instead of sampling (check `allows` first)."""
        lc.llama_sampler_accept(self._chain, token)

    def close(self) -> None:
        if self._chain:
            lc.llama_sampler_free(self._chain)
            self._chain = None
