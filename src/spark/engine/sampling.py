"""Sampling: validate a request's sampling parameters and build its llama.cpp sampler chain.

Each generating slot owns one chain, seeded on its own, so what a request
samples never depends on the other requests batched with it.
"""

from __future__ import annotations

import ctypes
import math
import secrets
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from spark.engine.bindings import lc
from spark.engine.native import Model, SamplerPointer
from spark.errors import InvalidRequest
from spark.types import DEFAULT_SAMPLING, SamplingParams, list_problem

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# llama.cpp reads this seed value as "pick a random seed".
_RANDOM_SEED = lc.LLAMA_DEFAULT_SEED


def resolve(request: SamplingParams, model_defaults: SamplingParams, n_vocab: int, n_ctx: int) -> SamplingParams:
    """The request's parameters over the model's defaults over Spark's, validated.

    Raises `InvalidRequest` naming the parameter. A missing seed becomes a random one;
    look-back windows of -1 (or past the context) become the context's `n_ctx` tokens.
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
    if finite("dry_multiplier", p.dry_multiplier) < 0:
        raise bad("dry_multiplier", f"must be 0 (off) or more, not {p.dry_multiplier}")
    if finite("dry_base", p.dry_base) < 1:
        raise bad("dry_base", f"must be at least 1, not {p.dry_base}")
    if p.dry_allowed_length is None or p.dry_allowed_length < 0:
        raise bad("dry_allowed_length", f"must be 0 or more, not {p.dry_allowed_length}")
    for param in ("typical_p", "xtc_probability", "xtc_threshold"):
        if not 0 <= finite(param, getattr(p, param)) <= 1:
            raise bad(param, f"must be between 0 and 1, not {getattr(p, param)}")
    finite("top_n_sigma", p.top_n_sigma)
    for param in ("dynatemp_range", "dynatemp_exponent", "mirostat_tau", "mirostat_eta"):
        if finite(param, getattr(p, param)) < 0:
            raise bad(param, f"must not be negative, not {getattr(p, param)}")
    if p.mirostat not in (0, 1, 2):
        raise bad("mirostat", f"must be 0 (off), 1 (mirostat) or 2 (mirostat 2.0), not {p.mirostat}")
    if found := list_problem(p):
        raise bad(*found)

    def window(param: str, value: int | None) -> int:
        if value is None or value < -1:
            raise bad(param, f"must be -1 (the whole context), 0 (off) or more, not {value}")
        return n_ctx if value == -1 else min(value, n_ctx)

    if p.max_tokens is not None and p.max_tokens < 0:  # 0: the prompt alone (cached, or scored)
        raise bad("max_tokens", f"must be at least 0, not {p.max_tokens}")
    for token, bias in (p.logit_bias or {}).items():
        if not 0 <= token < n_vocab:
            raise bad("logit_bias", f"names token {token}, but the vocabulary has tokens 0..{n_vocab - 1}")
        finite("logit_bias", bias)
    seed = p.seed if p.seed is not None else secrets.randbits(32)
    # Seeds are taken modulo 2**32-1 so that no seed means "random" to llama.cpp.
    return msgspec.structs.replace(
        p,
        repeat_last_n=window("repeat_last_n", p.repeat_last_n),
        dry_penalty_last_n=window("dry_penalty_last_n", p.dry_penalty_last_n),
        seed=seed % _RANDOM_SEED,
    )


def uses_penalties(p: SamplingParams) -> bool:
    """Whether the repetition penalties are on (resolved parameters: in `samplers`, and not with
    mirostat, which goes without them as in llama-server)."""
    return (
        bool(p.repeat_last_n)
        and _ordered("penalties", p)
        and (p.repeat_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0)
    )


def uses_dry(p: SamplingParams) -> bool:
    """Whether DRY is on (resolved parameters: in `samplers`, and not with mirostat)."""
    return bool(p.dry_multiplier) and bool(p.dry_penalty_last_n) and _ordered("dry", p)


def _ordered(name: str, p: SamplingParams) -> bool:
    return not p.mirostat and name in (p.samplers or ())


def lookback(p: SamplingParams) -> int:
    """How many of the prompt's last tokens the chain must see: the most its penalties or DRY look back over."""
    return max(
        (p.repeat_last_n or 0) if uses_penalties(p) else 0,
        (p.dry_penalty_last_n or 0) if uses_dry(p) else 0,
    )


def _chooser(name: str, p: SamplingParams) -> SamplerPointer | None:
    """The sampler `samplers` names by `name` that narrows the candidates (None where it is off at
    these values); temperature, dynamic or not, included."""
    sampler: SamplerPointer | None = None
    if name == "top_n_sigma" and p.top_n_sigma is not None and p.top_n_sigma > 0:
        sampler = lc.llama_sampler_init_top_n_sigma(p.top_n_sigma)
    elif name == "top_k" and p.top_k:
        sampler = lc.llama_sampler_init_top_k(p.top_k)
    elif name == "typ_p" and p.typical_p is not None and p.typical_p < 1:
        sampler = lc.llama_sampler_init_typical(p.typical_p, 1)
    elif name == "top_p" and p.top_p is not None and p.top_p < 1:
        sampler = lc.llama_sampler_init_top_p(p.top_p, 1)
    elif name == "min_p" and p.min_p:
        sampler = lc.llama_sampler_init_min_p(p.min_p, 1)
    elif name == "xtc" and p.xtc_probability and p.xtc_threshold is not None and p.xtc_threshold <= 0.5:
        sampler = lc.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, 1, p.seed or 0)  # above 0.5: off
    elif name == "temperature" and p.dynatemp_range:
        assert p.dynatemp_exponent is not None  # resolved
        sampler = lc.llama_sampler_init_temp_ext(p.temperature or 0.0, p.dynatemp_range, p.dynatemp_exponent)
    elif name == "temperature":
        sampler = lc.llama_sampler_init_temp(p.temperature or 0.0)
    return sampler


def _last(p: SamplingParams, n_vocab: int) -> list[SamplerPointer]:
    """What picks the token: greedy at temperature 0, else mirostat (after its own temperature), else a draw."""
    temperature, seed = p.temperature or 0.0, p.seed or 0
    if temperature <= 0:
        return [lc.llama_sampler_init_greedy()]
    if p.mirostat:
        assert p.mirostat_tau is not None and p.mirostat_eta is not None  # resolved
        last = (
            lc.llama_sampler_init_mirostat(n_vocab, seed, p.mirostat_tau, p.mirostat_eta, 100)
            if p.mirostat == 1
            else lc.llama_sampler_init_mirostat_v2(seed, p.mirostat_tau, p.mirostat_eta)
        )
        return [lc.llama_sampler_init_temp(temperature), last]
    return [lc.llama_sampler_init_dist(seed)]


class Drawn(NamedTuple):
    """What a token was drawn from: the candidates the sampler chain left, with their log probabilities."""

    token: int
    ids: NDArray[np.int32]
    logprobs: NDArray[np.float64]


class SamplerChain:
    """A llama.cpp sampler chain built from resolved `SamplingParams`; free it with `close()`."""

    def __init__(
        self, p: SamplingParams, model: Model, grammar: SamplerPointer | None = None, *, keep_drawn: bool = False
    ) -> None:
        """`grammar` (a grammar sampler, owned by the chain from here on) runs first:
        the other samplers only see the tokens it allows. With `keep_drawn`, each sample keeps what
        it drew from (`drawn`), at the cost of running the chain from Python."""
        n_vocab = self._n_vocab = model.n_vocab
        self._greedy = (p.temperature or 0.0) <= 0
        self._keeps = keep_drawn
        self._data: ctypes.Array[lc.llama_token_data] | None = None  # the candidates, when keeping them
        self._ids: NDArray[np.int32] | None = None
        self.drawn: Drawn | None = None  # what the last token was drawn from; None: written, not drawn
        params = lc.llama_sampler_chain_default_params()
        params.no_perf = True
        self._chain = lc.llama_sampler_chain_init(params)
        if not self._chain:
            if grammar:
                lc.llama_sampler_free(grammar)
            raise MemoryError("llama.cpp could not allocate a sampler chain")
        samplers = [grammar] if grammar else []
        self._grammar = grammar
        self._lookback = lookback(p)
        self._history: list[SamplerPointer] = []  # the samplers that look back at earlier tokens
        # ignore_eos as llama-server does it: every end-of-generation token biased to -inf
        biases = {**(p.logit_bias or {}), **dict.fromkeys(model.eog_tokens if p.ignore_eos else (), -math.inf)}
        if biases:
            arr = (lc.llama_logit_bias * len(biases))(
                *(lc.llama_logit_bias(token=t, bias=b) for t, b in biases.items())
            )
            samplers.append(lc.llama_sampler_init_logit_bias(n_vocab, len(biases), arr))
        # The samplers in `samplers`' order (llama-server's by default); only penalties and DRY at
        # temperature 0 (greedy) and with mirostat not even those.
        choosing = (p.temperature or 0.0) > 0 and not p.mirostat
        for name in p.samplers or ():
            if name == "penalties" and uses_penalties(p):
                self._history.append(
                    lc.llama_sampler_init_penalties(
                        n_vocab, p.repeat_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty
                    )
                )
                samplers.append(self._history[-1])
            elif name == "dry" and uses_dry(p):
                assert p.dry_multiplier is not None and p.dry_base is not None  # resolved
                assert p.dry_allowed_length is not None and p.dry_penalty_last_n is not None
                breakers = p.dry_sequence_breakers or ()
                self._history.append(
                    model.dry_sampler(
                        p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, breakers
                    )
                )
                samplers.append(self._history[-1])
            elif choosing and (chooser := _chooser(name, p)) is not None:
                samplers.append(chooser)
        samplers += _last(p, n_vocab)
        for s in samplers:  # the chain owns (and frees) them from here on
            lc.llama_sampler_chain_add(self._chain, s)

    def names(self) -> list[str]:
        """llama.cpp's names of the chain's samplers, in order (e.g. `["dry", "top-k", ..., "dist"]`)."""
        n = lc.llama_sampler_chain_n(self._chain) if self._chain else 0
        return [lc.llama_sampler_name(lc.llama_sampler_chain_get(self._chain, i)).decode() for i in range(n)]

    def see_prompt(self, prompt: list[int]) -> None:
        """Let the samplers that look back see the prompt's tail (a grammar must not)."""
        if not self._lookback:
            return
        for token in prompt[-self._lookback :]:
            for s in self._history:
                lc.llama_sampler_accept(s, token)

    def sample(self, ctx: ctypes.c_void_p, index: int) -> int:
        """Sample (and accept) a token from output row `index` of the last decode."""
        if not self._keeps:
            return int(lc.llama_sampler_sample(self._chain, ctx, index))
        # llama_sampler_sample's own steps, keeping the candidates the chain leaves
        import numpy as np

        n_vocab = self._n_vocab
        if self._data is None:  # one buffer for the chain's life, refilled each token (samplers reorder it)
            self._data = (lc.llama_token_data * n_vocab)()
            self._ids = np.arange(n_vocab, dtype=np.int32)
        table = np.ctypeslib.as_array(self._data)  # a view with fields id, logit and p
        table["id"] = self._ids
        table["logit"] = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, index), shape=(n_vocab,))
        candidates = lc.llama_token_data_array(data=self._data, size=n_vocab, selected=-1, sorted=False)
        lc.llama_sampler_apply(self._chain, ctypes.byref(candidates))
        left = ctypes.cast(candidates.data, ctypes.POINTER(lc.llama_token_data * candidates.size)).contents
        kept = np.ctypeslib.as_array(left).copy()
        token = int(kept["id"][candidates.selected])
        lc.llama_sampler_accept(self._chain, token)
        if self._greedy:  # the chain's end picks the likeliest: certain
            self.drawn = Drawn(token, np.array([token], np.int32), np.zeros(1))
            return token
        logits = kept["logit"].astype(np.float64)
        possible = np.isfinite(logits)  # a grammar, logit bias or XTC rules a token out with -inf
        logits = logits[possible]
        peak = logits.max()
        total = peak + np.log(np.exp(logits - peak).sum())
        self.drawn = Drawn(token, kept["id"][possible], logits - total)
        return token

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
        self.drawn = None

    def close(self) -> None:
        if self._chain:
            lc.llama_sampler_free(self._chain)
            self._chain = None
