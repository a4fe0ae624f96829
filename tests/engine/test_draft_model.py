"""Speculative decoding with a draft model: the same output as without it, drafts verified in batches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tiny_gguf
from engine.test_speculative import CODE, chat, completions, outcome, run_all, stream_of, words_in_json
from spark.engine import Engine, draft_model, drafting
from spark.engine.draft_model import vocabulary_mismatch
from spark.engine.drafting import Drafting
from spark.engine.native import Model
from spark.engine.speculative import DecodeCosts
from spark.errors import ModelFileError
from spark.library.bundled import BUNDLED_SETTINGS
from spark.types import LoadOptions


def options(
    path: Path, draft: Path | None, *, n_parallel: int = 4, speculative: bool = True, n_ctx: int = 512
) -> LoadOptions:
    return LoadOptions(
        model_id="m",
        path=str(path),
        n_threads=1,
        n_ctx=n_ctx,
        n_parallel=n_parallel,
        speculative=speculative,
        draft_path=str(draft) if draft else None,
    )


@pytest.fixture
def drafting_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Verifying and drafting cost nothing, and the draft model drafts whatever its chances (a random
    model is seldom sure): the tests are about exact output under drafts, not about when drafts pay."""
    monkeypatch.setattr(DecodeCosts, "seconds", lambda self, n_tokens: 1.0)
    monkeypatch.setattr(Drafting, "_token_seconds", lambda self: 0.0)
    monkeypatch.setattr(drafting, "MODEL_GAIN", 0.0)  # and however often the first guesses failed
    monkeypatch.setattr(draft_model, "MIN_CHANCE", 0.0)


@pytest.fixture(scope="module")
def other_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LLaMA's vocabulary with other random weights: a draft model that is often wrong."""
    return tiny_gguf.write_tiny_llama(tmp_path_factory.mktemp("draft") / "other.gguf", seed=1)


@pytest.fixture(scope="module")
def plain(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(options(tiny_llama, None, speculative=False)) as e:
        yield e


@pytest.fixture(scope="module")
def engines(tiny_llama: Path, other_llama: Path) -> Iterator[dict[str, Engine]]:
    """Engines whose draft model is the model itself ("same") or the other weights ("other")."""
    with Engine(options(tiny_llama, tiny_llama)) as same, Engine(options(tiny_llama, other_llama)) as other:
        yield {"same": same, "other": other}


@pytest.mark.usefixtures("drafting_everywhere")
@pytest.mark.parametrize(
    ("draft", "sampling"),
    [
        ("same", {"temperature": 0}),
        ("same", {"temperature": 0.9, "seed": 7}),
        ("other", {"temperature": 0}),
        ("other", {"temperature": 0, "stop": ["seven", "t"]}),
        ("other", {"temperature": 0, "repeat_penalty": 1.3, "logit_bias": {5: 2.0}}),
        ("other", {"temperature": 0.9, "seed": 7}),
    ],
    ids=["same-greedy", "same-seeded", "other-greedy", "other-stop", "other-penalties", "other-seeded"],
)
def test_output_is_the_same_as_without_a_draft_model(
    plain: Engine, engines: dict[str, Engine], draft: str, sampling: dict
) -> None:
    requests = completions(**sampling)
    expected = [outcome(c) for c in run_all(plain, requests)]
    spec = engines[draft]
    batched = run_all(spec, requests)  # four slots drafting in the same batches
    assert [outcome(c) for c in batched] == expected
    assert [outcome(run_all(spec, [r])[0]) for r in requests] == expected
    # the draft model's cache holds exactly what it says, slot by slot
    drafter = spec._drafting._model  # type: ignore[union-attr]
    assert drafter is not None
    for slot, cached in enumerate(drafter._cached):
        assert drafter._ctx.last_position(slot) == len(cached) - 1
    usage = [c.final.usage for c in batched]  # type: ignore[union-attr]
    drafted, accepted = sum(u.drafted_tokens for u in usage), sum(u.accepted_tokens for u in usage)
    assert drafted > 0 and 0 < accepted <= drafted
    if draft == "other":
        assert accepted < drafted
    elif sampling == {"temperature": 0}:  # the model drafting for itself guesses its own greedy choices
        assert accepted > 0.8 * drafted


@pytest.mark.usefixtures("drafting_everywhere")
def test_a_grammar_leads_as_without_a_draft_model(plain: Engine, tiny_llama: Path, other_llama: Path) -> None:
    request = words_in_json()
    with Engine(options(tiny_llama, other_llama, n_parallel=1)) as spec:
        got = run_all(spec, [request])[0]
    assert outcome(got) == outcome(run_all(plain, [request])[0])
    assert got.final.usage.drafted_tokens > 0  # type: ignore[union-attr]


def test_without_speculation_the_draft_model_is_not_loaded(tiny_llama: Path, other_llama: Path) -> None:
    with Engine(options(tiny_llama, other_llama, n_parallel=1, speculative=False)) as e:
        assert e._drafting is None
        done = run_all(e, completions(temperature=0)[:1])[0].final
        assert done.usage.drafted_tokens == 0  # type: ignore[union-attr]


def test_a_model_of_another_vocabulary_cannot_draft(tmp_path: Path, tiny_llama: Path, tiny_bert: Path) -> None:
    smaller = tiny_gguf.write_tiny_llama(tmp_path / "small-vocab.gguf", vocab_size=300)
    for draft, why in ((smaller, "its vocabulary has 300 tokens"), (tiny_bert, "tokenizer is of another kind")):
        with pytest.raises(ModelFileError) as refused:
            Engine(options(tiny_llama, draft, n_parallel=1))
        assert refused.value.param == "draft_model" and why in refused.value.message, refused.value.message


def test_token_texts_must_match(tiny_llama: Path) -> None:
    """Same size, same special tokens, one token spelled otherwise: refused, naming the token."""
    target, draft = Model(str(tiny_llama)), Model(str(tiny_llama))
    try:
        assert vocabulary_mismatch(draft, target) is None
        real = draft.token_text
        draft.token_text = lambda token: real(token) + ("x" if token == 100 else "")  # type: ignore[method-assign]
        why = vocabulary_mismatch(draft, target)
        assert why is not None and why.startswith("token 100 is"), why
    finally:
        draft.close()
        target.close()


def test_a_sure_draft_that_would_not_pay_is_not_made(tiny_llama: Path) -> None:
    """Where verifying a token costs as much as decoding one, the draft model is not even asked."""
    with Engine(options(tiny_llama, tiny_llama, n_parallel=1)) as e:
        assert e._drafting is not None
        for n in range(1, 40):
            e._drafting.costs.observe(n, 0.01 * n)
        done = run_all(e, completions(temperature=0)[:1])[0].final
        assert e._drafting._model is not None and e._drafting._model._cached == [[]]  # never caught up
    assert done.usage.drafted_tokens == 0  # type: ignore[union-attr]


def test_the_draft_model_drafts_while_it_pays_and_catches_up_with_what_it_lacks(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(draft_model, "MIN_CHANCE", 0.0)
    target = Model(str(tiny_llama))
    drafter = draft_model.DraftModel(
        str(tiny_llama), target, n_ctx=256, n_slots=2, n_threads=1, n_gpu_layers=0, main_gpu=0,
        kv_type="f16", flash_attention="auto",
    )  # fmt: skip
    try:
        history = target.tokenize("one two three four five", add_special=True, parse_special=False)
        three = drafter.propose({1: (history, 16)}, lambda chances: len(chances) < 3)
        tokens, chances = three[1]
        assert len(tokens) == len(chances) == 3 and all(0 < c <= 1 for c in chances)
        assert drafter._cached[1] == history + tokens[:2]  # the last guess was never fed
        assert drafter._cached[0] == []  # the other slot untouched
        # two guesses held and the target wrote another token: only that one is fed (the cache holds both)
        longer = [*history, *tokens[:2], 7]
        drafter.propose({1: (longer, 1)}, lambda chances: True)
        assert drafter._cached[1] == longer and drafter._ctx.last_position(1) == len(longer) - 1
        # a history that differs earlier: the cache is cut back to what they share
        other = [*history[:3], 9, 9]
        drafter.propose({1: (other, 1)}, lambda chances: True)
        assert drafter._cached[1] == other and drafter._ctx.last_position(1) == len(other) - 1
        assert drafter.token_seconds > 0  # measured on the steps that drafted
    finally:
        drafter.close()
        target.close()


@pytest.mark.usefixtures("drafting_everywhere")
def test_a_real_model_drafting_for_itself_answers_the_same(smollm2: Path) -> None:
    """SmolLM2's own vocabulary passes the token-by-token check, and its answers do not change."""
    requests = [
        chat(f"Repeat exactly: {CODE}"),
        chat("What is the capital of France?", system=BUNDLED_SETTINGS.system_prompt, max_tokens=30),
    ]
    with Engine(options(smollm2, None, n_parallel=1, speculative=False, n_ctx=1024)) as plain:
        expected = [stream_of(run_all(plain, [r])[0]) for r in requests]
    with Engine(options(smollm2, smollm2, n_parallel=1, n_ctx=1024)) as spec:
        got = [run_all(spec, [r])[0] for r in requests]
    assert [stream_of(c) for c in got] == expected
    assert "Paris" in "".join(e.text for e in got[1].events if hasattr(e, "text"))
    copy = got[0].final.usage  # type: ignore[union-attr]
    assert copy.drafted_tokens > 0.6 * copy.completion_tokens and copy.accepted_tokens > 0.8 * copy.drafted_tokens


def test_a_draft_model_whose_first_guesses_fail_stops_drafting(
    tiny_llama: Path, other_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Free to verify and to draft, but a first guess holds one time in ten: no gain of 15 % is in
    sight, so the draft model is not asked; the model drafting for itself learns that it holds."""
    monkeypatch.setattr(DecodeCosts, "seconds", lambda self, n_tokens: 1.0)
    monkeypatch.setattr(Drafting, "_token_seconds", lambda self: 0.0)
    monkeypatch.setattr(draft_model, "MIN_CHANCE", 0.0)
    request = completions(temperature=0)[:1]
    with Engine(options(tiny_llama, other_llama, n_parallel=1)) as e:
        assert e._drafting is not None
        e._drafting._first_held, e._drafting._first_tried = 1.0, 10.0
        assert run_all(e, request)[0].final.usage.drafted_tokens == 0  # type: ignore[union-attr]
    with Engine(options(tiny_llama, tiny_llama, n_parallel=1)) as e:
        assert e._drafting is not None
        assert run_all(e, request)[0].final.usage.accepted_tokens > 0  # type: ignore[union-attr]
        assert e._drafting._first_held / e._drafting._first_tried > drafting.FIRST_PRIOR  # learnt from the drafts
