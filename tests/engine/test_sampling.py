"""Sampling parameters: validation, defaults, and the llama.cpp sampler chain they build."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.native import Model
from spark.engine.sampling import SamplerChain, lookback, resolve
from spark.errors import InvalidRequest
from spark.types import (
    ChatRequest,
    CompletionRequest,
    Done,
    Failed,
    LoadOptions,
    Message,
    SamplingParams,
    TextDelta,
    TokenLogprob,
)

N_VOCAB, N_CTX = 1000, 512


def resolved(**fields: object) -> SamplingParams:
    return resolve(SamplingParams(**fields), SamplingParams(), N_VOCAB, N_CTX)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"dry_multiplier": -0.5}, "dry_multiplier"),
        ({"dry_multiplier": float("nan")}, "dry_multiplier"),
        ({"dry_base": 0.9}, "dry_base"),
        ({"dry_base": float("inf")}, "dry_base"),
        ({"dry_allowed_length": -1}, "dry_allowed_length"),
        ({"dry_penalty_last_n": -2}, "dry_penalty_last_n"),
        ({"repeat_last_n": -2}, "repeat_last_n"),
        ({"min_p": 1.5}, "min_p"),
        ({"repeat_penalty": -1.0}, "repeat_penalty"),
        ({"typical_p": 1.5}, "typical_p"),
        ({"xtc_probability": -0.1}, "xtc_probability"),
        ({"xtc_threshold": 2.0}, "xtc_threshold"),
        ({"top_n_sigma": float("nan")}, "top_n_sigma"),
        ({"dynatemp_range": -1.0}, "dynatemp_range"),
        ({"dynatemp_exponent": -0.5}, "dynatemp_exponent"),
        ({"mirostat": 3}, "mirostat"),
        ({"mirostat_tau": -1.0}, "mirostat_tau"),
        ({"mirostat_eta": float("inf")}, "mirostat_eta"),
        ({"samplers": ["top_k", "tfs_z"]}, "samplers"),
        ({"dry_sequence_breakers": []}, "dry_sequence_breakers"),
        ({"dry_sequence_breakers": ["x" * 65]}, "dry_sequence_breakers"),
        ({"dry_sequence_breakers": ["\n"] * 33}, "dry_sequence_breakers"),
    ],
)
def test_bad_values_are_refused_naming_the_param(fields: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        resolved(**fields)
    assert e.value.param == param and param in e.value.message


def test_defaults_are_llama_servers_and_windows_fit_the_context() -> None:
    p = resolved()
    assert (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n) == (0.0, 1.75, 2, 64)
    assert p.repeat_last_n == 64 and p.repeat_penalty == 1.0
    assert lookback(p) == 0  # nothing looks back: penalties and DRY are off
    whole = resolved(repeat_last_n=-1, dry_penalty_last_n=-1)
    assert (whole.repeat_last_n, whole.dry_penalty_last_n) == (N_CTX, N_CTX)
    assert resolved(dry_penalty_last_n=10**6).dry_penalty_last_n == N_CTX
    assert lookback(resolved(dry_multiplier=0.8, dry_penalty_last_n=100, repeat_penalty=1.1)) == 100
    assert lookback(resolved(repeat_penalty=1.1, repeat_last_n=0)) == 0  # a window of 0 turns them off


def test_model_defaults_fill_what_the_request_leaves_out() -> None:
    model = SamplingParams(dry_multiplier=0.8, repeat_penalty=1.1, max_tokens=300)
    p = resolve(SamplingParams(repeat_penalty=1.0), model, N_VOCAB, N_CTX)
    assert (p.dry_multiplier, p.repeat_penalty, p.max_tokens) == (0.8, 1.0, 300)


@pytest.fixture(scope="module")
def model(tiny_llama: Path) -> Iterator[Model]:
    m = Model(str(tiny_llama), n_gpu_layers=0)
    yield m
    m.close()


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"temperature": 0}, ["greedy"]),
        ({"temperature": 0, "dry_multiplier": 0.8}, ["dry", "greedy"]),
        ({"temperature": 0.5, "top_p": 1.0, "min_p": 0}, ["top-k", "temp", "dist"]),
        (
            {"temperature": 0.5, "repeat_penalty": 1.1, "dry_multiplier": 0.8, "top_p": 0.9, "min_p": 0.1},
            ["penalties", "dry", "top-k", "top-p", "min-p", "temp", "dist"],
        ),
        ({"temperature": 0, "dry_multiplier": 0.8, "dry_penalty_last_n": 0}, ["greedy"]),  # window 0: DRY off
        # llama-server's other samplers, in its order: top n-sigma, top-k, typical, top-p, min-p, XTC, temperature
        (
            {"temperature": 0.7, "top_n_sigma": 1.5, "typical_p": 0.9, "xtc_probability": 0.5, "dynatemp_range": 0.3},
            ["top-n-sigma", "top-k", "typical", "top-p", "min-p", "xtc", "temp-ext", "dist"],
        ),
        (
            {"temperature": 0.7, "xtc_probability": 0.5, "xtc_threshold": 0.6, "top_n_sigma": 0},
            ["top-k", "top-p", "min-p", "temp", "dist"],
        ),
        # mirostat picks the token alone, without penalties or DRY (as in llama-server), and not at temperature 0
        ({"temperature": 0.7, "mirostat": 1, "repeat_penalty": 1.1}, ["temp", "mirostat"]),
        ({"temperature": 0.7, "mirostat": 2, "dry_multiplier": 0.8}, ["temp", "mirostat-v2"]),
        ({"temperature": 0, "mirostat": 2}, ["greedy"]),
        # llama-server's `samplers`: these, in this order; none at all leaves the draw
        ({"temperature": 0.7, "samplers": ["temperature", "min_p", "top_k"]}, ["temp", "min-p", "top-k", "dist"]),
        ({"temperature": 0.7, "samplers": []}, ["dist"]),
        (
            {"temperature": 0.7, "repeat_penalty": 1.1, "samplers": ["top_k", "penalties"]},
            ["top-k", "penalties", "dist"],
        ),
        ({"temperature": 0, "repeat_penalty": 1.1, "samplers": ["top_k"]}, ["greedy"]),  # no penalties named
    ],
)
def test_the_chain_holds_the_samplers_asked_for(model: Model, fields: dict[str, object], names: list[str]) -> None:
    chain = SamplerChain(resolve(SamplingParams(**fields), SamplingParams(), model.n_vocab, N_CTX), model)  # type: ignore[arg-type]
    try:
        assert chain.names() == names
    finally:
        chain.close()


def test_what_the_samplers_look_back_over_follows_their_order() -> None:
    assert lookback(resolved(repeat_penalty=1.1, repeat_last_n=32)) == 32
    assert lookback(resolved(repeat_penalty=1.1, repeat_last_n=32, samplers=["top_k"])) == 0
    assert lookback(resolved(repeat_penalty=1.1, repeat_last_n=32, mirostat=2)) == 0  # mirostat goes without


def test_dry_uses_the_requests_sequence_breakers(model: Model) -> None:
    fields = {"temperature": 0, "dry_multiplier": 0.8, "dry_sequence_breakers": ["\n", "Alice:"]}
    chain = SamplerChain(resolve(SamplingParams(**fields), SamplingParams(), model.n_vocab, N_CTX), model)  # type: ignore[arg-type]
    try:
        assert chain.names() == ["dry", "greedy"]
        assert any(key[-1] == ("\n", "Alice:") for key in model._dry)  # the DRY sampler built for them
    finally:
        chain.close()


def test_dry_samplers_are_cloned_from_one_per_parameter_set(model: Model) -> None:
    import ctypes

    from llama_cpp import llama_cpp as lc

    from spark.engine import native

    made = [model.dry_sampler(0.8, 1.75, 2, 64, ("\n",)) for _ in range(2)]
    for n in range(native._DRY_PROTOTYPES + 2):  # more parameter sets than are kept
        made.append(model.dry_sampler(0.8, 1.75, 2, 64 + n, ("\n",)))
    assert len(model._dry) == native._DRY_PROTOTYPES
    assert len({ctypes.cast(s, ctypes.c_void_p).value for s in made}) == len(made)  # each its own sampler
    for s in made:
        assert lc.llama_sampler_name(s) == b"dry"
        lc.llama_sampler_free(s)


@pytest.fixture(scope="module")
def engine(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=512)) as e:
        yield e


def answer(engine: Engine, **sampling: object) -> Collector:
    request = ChatRequest(
        model="tiny",
        messages=[Message("user", "Hello there")],
        sampling=SamplingParams(**{"temperature": 0.0, "max_tokens": 60, **sampling}),  # type: ignore[arg-type]
    )
    c = Collector()
    engine.submit("r", request, c)
    c.wait()
    return c


def repeats(text: str, n: int = 8) -> int:
    """How many times an n-character sequence recurs in `text`."""
    seen = [text[i : i + n] for i in range(len(text) - n + 1)]
    return len(seen) - len(set(seen))


def test_dry_breaks_the_greedy_loop_of_a_random_model(engine: Engine) -> None:
    plain, dry = answer(engine), answer(engine, dry_multiplier=2.0, dry_allowed_length=1)
    assert isinstance(plain.final, Done) and isinstance(dry.final, Done)
    assert plain.text != dry.text
    loops = repeats(plain.text)
    assert loops > 0  # the random model loops at temperature 0 ...
    assert repeats(dry.text) < loops  # ... less with DRY


@pytest.mark.parametrize(
    "narrowing",
    [
        {"mirostat": 2, "mirostat_tau": 0.01},  # a target surprise near 0: only the likeliest token is left
        {"mirostat": 1, "mirostat_tau": 0.01},
        {"top_n_sigma": 0.0001},  # only tokens within a hair of the top logit
    ],
)
def test_samplers_that_leave_one_token_answer_greedily_whatever_the_seed(
    engine: Engine, narrowing: dict[str, object]
) -> None:
    greedy = answer(engine).text
    for seed in (1, 2):
        assert answer(engine, temperature=1.0, seed=seed, **narrowing).text == greedy
    assert answer(engine, temperature=1.0, seed=1).text != greedy  # the seed's draw, without them


def test_xtc_excludes_the_top_choices(engine: Engine) -> None:
    # With certainty and a threshold of 0, XTC leaves only the least likely of the candidates
    # (those top-k and min-p kept): one token, whatever the seed, never the greedy one.
    fields = {"temperature": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.0}
    first, second = answer(engine, seed=1, **fields), answer(engine, seed=2, **fields)
    assert isinstance(first.final, Done) and first.text == second.text != answer(engine).text


def test_a_bad_dry_value_fails_the_request_naming_it(engine: Engine) -> None:
    c = answer(engine, dry_base=0.5)
    assert isinstance(c.final, Failed) and c.final.error.param == "dry_base"


def drawn_answer(engine: Engine, post_sampling: bool, **sampling: object) -> tuple[str, list[TokenLogprob]]:
    """A completion's text and its tokens' entries (3 alternatives each)."""
    request = CompletionRequest(
        model="tiny",
        prompt="Hello there",
        sampling=SamplingParams(**{"max_tokens": 12, **sampling}),  # type: ignore[arg-type]
        logprobs=3,
        post_sampling_probs=post_sampling,
    )
    c = Collector()
    engine.submit("p", request, c)
    assert isinstance(c.wait(), Done)
    return c.text, [t for e in c.events if isinstance(e, TextDelta) for t in e.logprobs or ()]


def test_post_sampling_probabilities_are_those_the_chain_drew_from(engine: Engine) -> None:
    _, greedy = drawn_answer(engine, True, temperature=0.0)
    assert greedy and all(t.logprob == 0.0 and [c.token for c in t.top] == [t.token] for t in greedy)  # certain
    fields = {"temperature": 1.0, "top_k": 2, "seed": 5}
    text, model_own = drawn_answer(engine, False, **fields)
    drawn_text, drawn = drawn_answer(engine, True, **fields)
    assert drawn_text == text  # the chain run from Python draws what llama.cpp's own call draws
    assert [t.token for t in drawn] == [t.token for t in model_own]
    for t in drawn:  # top-k left two tokens (or one, where min-p dropped the other): their chances sum to 1
        assert 1 <= len(t.top) <= 2 and math.isclose(sum(math.exp(c.logprob) for c in t.top), 1.0, rel_tol=1e-4)
        assert t.logprob == next(c.logprob for c in t.top if c.token == t.token)
    assert any(len(t.top) == 2 for t in drawn)
    # the model's own log probabilities spread over its whole vocabulary: lower than among two
    assert all(own.logprob < d.logprob for own, d in zip(model_own, drawn, strict=True))
