"""Speculative decoding: the n-gram drafter, and exact output from the engine with and without it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.native import Context
from spark.engine.output import merged
from spark.engine.speculative import (
    EXPLORE_EVERY,
    EXPLORE_SMOOTHING,
    MAX_DRAFT,
    PRIOR_TOKEN_COST,
    SHAPE_SMOOTHING,
    SPEED_SMOOTHING,
    DecodeCosts,
    NgramDrafter,
)
from spark.engine.vision import IMAGE_TOKEN
from spark.types import (
    ChatRequest,
    CompletionRequest,
    Done,
    Failed,
    LoadOptions,
    Message,
    Reasoning,
    ReasoningDelta,
    ResponseFormat,
    SamplingParams,
    SlotInfo,
    TextDelta,
    Tool,
    ToolCallDelta,
    ToolChoice,
)

# --- the drafter -------------------------------------------------------------------


def costs(seconds: Callable[[int], float], up_to: int = 64) -> DecodeCosts:
    """Step costs measured for every batch size up to `up_to`."""
    c = DecodeCosts()
    for n in range(1, up_to + 1):
        c.observe(n, seconds(n))
    return c


FLAT = costs(lambda n: 0.01)  # verifying costs nothing: every guess is drafted whole


def test_drafts_what_followed_the_latest_earlier_occurrence() -> None:
    d = NgramDrafter([1, 2, 3, 4, 5, 9, 9, 1, 2, 3, 7, 8, 1, 2])
    # "1 2" last came before "3 7 8": the latest occurrence wins over the first
    assert d.draft(3, FLAT) == [3, 7, 8]


def test_the_longest_ngram_that_matches_decides() -> None:
    # "2 3" is followed by 9 last, but "1 2 3" only ever by 4
    d = NgramDrafter([1, 2, 3, 4, 5, 6, 2, 3, 9, 9, 0, 1, 2, 3])
    assert d.draft(2, FLAT) == [4, 5]


def test_output_tokens_join_the_history() -> None:
    d = NgramDrafter([5, 6, 7])
    assert d.draft(4, FLAT) == []  # nothing repeats yet
    for token in (8, 5, 6):
        d.push(token)
    assert d.draft(4, FLAT) == [7, 8, 5, 6]
    d.push(7)
    assert d.draft(2, FLAT) == [8, 5]


def test_no_guess_without_a_match_nor_past_the_limit() -> None:
    d = NgramDrafter(list(range(100)))
    assert d.draft(8, FLAT) == []
    d = NgramDrafter([1, 2, 3, 1, 2])
    assert d.draft(0, FLAT) == []
    assert d.draft(8, FLAT) == [3, 1, 2, 3, 1, 2, 3, 1]  # a repeating history goes on repeating
    assert len(d.draft(100, FLAT)) == MAX_DRAFT


def test_image_positions_are_never_drafted() -> None:
    d = NgramDrafter([1, 2, 3, IMAGE_TOKEN, IMAGE_TOKEN, 4, 1, 2])
    assert d.draft(4, FLAT) == [3]


def test_a_predicted_answer_is_guessed_from_its_start_and_never_past_its_end() -> None:
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    d = NgramDrafter(prompt, prediction=[20, 21, 22])
    assert d.draft(8, FLAT) == [20, 21, 22]  # the answer is guessed to start as predicted
    d.push(20)
    assert d.draft(8, FLAT) == [21, 22]  # and to end where the prediction does: no prompt after it
    assert NgramDrafter(prompt).draft(8, FLAT) == []


def test_a_prediction_wins_over_the_prompt() -> None:
    # "1 2" is followed by 3 in the prompt, by 9 in the prediction: the prediction's guess is drafted
    prompt = [1, 2, 3, 0, 7, 7, 7, 7, 7, 7]
    with_prediction, without = NgramDrafter(prompt, prediction=[5, 1, 2, 9]), NgramDrafter(prompt)
    for d in (with_prediction, without):
        for token in (8, 1, 2):
            d.push(token)
    assert with_prediction.draft(1, FLAT) == [9]
    assert without.draft(1, FLAT) == [3]


def test_nothing_is_drafted_where_verifying_costs_as_much_as_decoding() -> None:
    d = NgramDrafter([1, 2, 3, 4] * 20)  # a long match: guesses that almost always hold
    assert d.draft(8, costs(lambda n: 0.01 * n)) == []


def test_a_long_match_is_drafted_where_a_short_one_does_not_pay() -> None:
    dear = costs(lambda n: 0.01 * (1 + 0.6 * (n - 1)))  # each verified token: 60 % of a step
    short = NgramDrafter([7, 1, 2, 9, 8, 1, 2])  # "1 2" seen once before: a two-token match
    assert short.draft(8, dear) == []
    copy = NgramDrafter(list(range(30)) + list(range(25)))  # the last 25 tokens repeat earlier text
    guess = copy.draft(8, dear)
    assert len(guess) >= 3 and guess == [25, 26, 27, 28, 29, 0, 1, 2][: len(guess)]


def test_drafting_stops_where_guesses_keep_failing_and_comes_back_where_they_hold() -> None:
    some = costs(lambda n: 0.01 * (1 + 0.3 * (n - 1)))
    d = NgramDrafter([3, 1, 2, 5, 1, 2])  # short matches
    guess = d.draft(4, some)
    assert guess
    while guess:  # the model rejects every guess
        d.verified(len(guess), 0)
        guess = d.draft(4, some)
    again = NgramDrafter([3, 1, 2, 5, 1, 2])
    for _ in range(20):  # the model confirms every guess
        guess = again.draft(4, some)
        again.verified(len(guess), len(guess))
    assert len(again.draft(4, some)) == 4


def test_more_slots_in_the_batch_make_a_draft_worth_less() -> None:
    # the batch's cost doubles past 4 tokens; one slot alone drafts, but with 4 slots generating
    # the draft would double the cost of a step that already gives 4 tokens
    step = costs(lambda n: 0.01 if n <= 4 else 0.02)
    d = NgramDrafter(list(range(30)) + list(range(25)))
    assert len(d.draft(3, step, in_batch=1, outputs=1)) == 3
    assert d.draft(3, step, in_batch=4, outputs=4) == []


def test_step_costs_are_measured_interpolated_and_extrapolated() -> None:
    c = DecodeCosts()
    assert c.seconds(1) == 1.0 and c.seconds(5) == 1 + 4 * PRIOR_TOKEN_COST  # nothing measured yet
    c.observe(1, 0.010)
    c.observe(9, 0.050)
    assert c.seconds(1) == pytest.approx(0.010) and c.seconds(9) == pytest.approx(0.050)
    assert c.seconds(5) == pytest.approx(0.030)  # between two measured sizes
    assert c.seconds(11) == pytest.approx(0.050 + 2 * PRIOR_TOKEN_COST * 0.010)  # past the largest
    c.observe(9, 0.050 * 32)  # one step 32 times slower (something else had the CPU)
    moved = 32 ** (SPEED_SMOOTHING + SHAPE_SMOOTHING)  # by a ratio, and little
    assert c.seconds(9) == pytest.approx(0.050 * moved, rel=1e-3)


def test_every_size_follows_the_speed_its_shape_stays() -> None:
    """Steps of one token at a shallower depth (twice as fast) reprice a size measured deeper:
    a verify batch measured long ago is not left at its old cost, which would stop drafting."""
    c = DecodeCosts()
    c.observe(1, 0.020)
    c.observe(8, 0.080)
    for _ in range(40):
        c.observe(1, 0.010)
    assert c.seconds(1) == pytest.approx(0.010, rel=0.01)
    assert 0.040 < c.seconds(8) < 0.055  # most of the way with it (it stayed at 0.080 before)


def test_a_size_measured_on_a_busy_machine_is_tried_again() -> None:
    """A verify batch first measured while something else had the CPU looks far too dear, and would
    never be drafted (so never measured) again: after EXPLORE_EVERY steps without one, the prior's
    price is tried, and the next measurement of that size counts for half."""
    c = DecodeCosts()
    c.observe(1, 0.010)
    c.observe(9, 0.020 * 30)  # truly 0.020, measured in a spike
    drafter = NgramDrafter(list(range(40)) + list(range(32)))  # a long match: its guesses hold
    assert drafter.draft(8, c) == []  # nine tokens look 60 times dearer than one
    for _ in range(EXPLORE_EVERY - 1):
        c.observe(1, 0.010)
    assert not c.exploring and drafter.draft(8, c) == []
    c.observe(1, 0.010)
    assert c.exploring and c.seconds(9) == pytest.approx(0.010 * (1 + 8 * PRIOR_TOKEN_COST), rel=0.01)
    assert len(drafter.draft(8, c)) == 8  # tried again
    c.observe(9, 0.020)
    assert not c.exploring
    assert c.seconds(9) == pytest.approx(0.020 * 30**EXPLORE_SMOOTHING, rel=0.05)  # halfway back, by ratio
    c.observe(1, 0.010)
    assert c.seconds(9) < 0.2  # no longer sixty one-token steps


# --- the engine: the same output with and without speculation -----------------------


def options(path: Path, *, speculative: bool, n_parallel: int = 1, n_ctx: int = 512) -> LoadOptions:
    return LoadOptions(
        model_id="m", path=str(path), n_threads=1, n_ctx=n_ctx, n_parallel=n_parallel, speculative=speculative
    )


def run_all(engine: Engine, requests: list[ChatRequest | CompletionRequest]) -> list[Collector]:
    """Submit all at once (they share batches), wait for all."""
    collectors = [Collector(f"r{i}") for i in range(len(requests))]
    for i, (request, collector) in enumerate(zip(requests, collectors, strict=True)):
        engine.submit(f"r{i}", request, collector)
    for collector in collectors:
        collector.wait()
    return collectors


def outcome(c: Collector) -> tuple[object, ...]:
    done = c.final
    assert isinstance(done, Done), done
    return c.text, done.finish_reason, done.usage.completion_tokens, done.stop_sequence


@pytest.fixture
def verifying_is_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step costs the same whatever its size, so the engine drafts wherever it has a guess:
    the tests on tiny models are about exact output under drafts, not about when drafts pay (the
    SmolLM2 tests below keep the measured costs)."""
    monkeypatch.setattr(DecodeCosts, "seconds", lambda self, n_tokens: 1.0)


drafting_everywhere = pytest.mark.usefixtures("verifying_is_free")


# A prompt that repeats itself: random weights copy it, or fall into loops, which n-grams predict.
COPY = "one two three four five six seven eight nine ten " * 6


def completions(**sampling: object) -> list[ChatRequest | CompletionRequest]:
    prompts = [COPY, "alpha beta gamma delta " * 10, "a b c d e f g h i j k l m n o p", "tic tac toe " * 12]
    return [
        CompletionRequest(model="m", prompt=p, sampling=SamplingParams(max_tokens=60, **sampling))  # type: ignore[arg-type]
        for p in prompts
    ]


@pytest.fixture(scope="module")
def plain(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(options(tiny_llama, speculative=False, n_parallel=4)) as e:
        yield e


@pytest.fixture(scope="module")
def spec(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(options(tiny_llama, speculative=True, n_parallel=4)) as e:
        yield e


@drafting_everywhere
@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 0},
        {"temperature": 0, "stop": ["seven", "t"]},
        {"temperature": 0, "repeat_penalty": 1.3, "logit_bias": {5: 2.0}},
    ],
    ids=["greedy", "stop", "penalties"],
)
def test_output_is_the_same_with_and_without_speculation(plain: Engine, spec: Engine, sampling: dict) -> None:
    requests = completions(**sampling)
    expected = [outcome(c) for c in run_all(plain, requests)]
    batched = run_all(spec, requests)  # four slots drafting in the same batches
    assert [outcome(c) for c in batched] == expected
    one_by_one = [outcome(run_all(spec, [r])[0]) for r in requests]
    assert one_by_one == expected
    usage = [c.final.usage for c in batched]  # type: ignore[union-attr]
    assert sum(u.drafted_tokens for u in usage) > 0
    assert all(u.accepted_tokens <= u.drafted_tokens for u in usage)
    assert sum(u.accepted_tokens for u in usage) > 0


@drafting_everywhere
def test_a_prediction_drafts_the_answer_and_counts_what_it_kept(plain: Engine, spec: Engine, tiny_llama: Path) -> None:
    def request(prediction: str | None) -> ChatRequest:
        return ChatRequest(
            model="m",
            messages=[Message("user", "count on: one two three")],
            sampling=SamplingParams(max_tokens=40, temperature=0),
            prediction=prediction,
        )

    expected = run_all(plain, [request(None)])[0]
    answer = expected.text
    assert expected.final.usage.accepted_prediction_tokens == 0  # type: ignore[union-attr]
    for prediction in (answer, answer[: len(answer) // 2] + " zebra quartz " + answer[len(answer) // 2 :]):
        got = run_all(spec, [request(prediction)])[0]
        assert outcome(got) == outcome(expected)  # the model's own answer, whatever was predicted
        usage = got.final.usage  # type: ignore[union-attr]
        assert usage.accepted_tokens >= usage.completion_tokens // 2  # most of it came from the prediction
        assert usage.accepted_prediction_tokens > 0 and usage.rejected_prediction_tokens >= 0
    # the exact answer predicted: every predicted token kept (the answer may end with an end token)
    exact = run_all(spec, [request(answer)])[0].final.usage  # type: ignore[union-attr]
    assert exact.rejected_prediction_tokens == 0
    # without speculation the prediction drafts nothing, and is still counted
    counted = run_all(plain, [request(answer)])[0].final.usage  # type: ignore[union-attr]
    assert counted.drafted_tokens == 0 and counted.accepted_prediction_tokens == exact.accepted_prediction_tokens


def test_a_prediction_longer_than_the_context_is_refused(plain: Engine) -> None:
    request = ChatRequest(model="m", messages=[Message("user", "hi")], prediction="word " * 600)
    failed = run_all(plain, [request])[0].final
    assert isinstance(failed, Failed) and failed.error.param == "prediction"


@drafting_everywhere
def test_kv_cache_holds_exactly_the_cached_tokens(spec: Engine, plain: Engine) -> None:
    request = completions(temperature=0)[0]
    first = run_all(spec, [request])[0]
    assert first.final.usage.drafted_tokens > first.final.usage.accepted_tokens  # type: ignore[union-attr]
    for slot in spec._slots:
        assert spec._ctx.last_position(slot.id) == len(slot.cached) - 1
    # the next turn reuses the slot's cache, drafted tokens included, and answers as a fresh engine does
    follow = CompletionRequest(
        model="m", prompt=COPY + first.text + " again", sampling=SamplingParams(max_tokens=30, temperature=0)
    )
    again = run_all(spec, [follow])[0]
    assert again.final.usage.cached_tokens > len(COPY) // 2  # type: ignore[union-attr]
    assert outcome(again) == outcome(run_all(plain, [follow])[0])


@drafting_everywhere
def test_max_tokens_and_context_end_as_without_speculation(tiny_llama: Path) -> None:
    request = CompletionRequest(model="m", prompt=COPY, sampling=SamplingParams(max_tokens=500, temperature=0))
    results = []
    for speculative in (False, True):
        with Engine(options(tiny_llama, speculative=speculative, n_ctx=300)) as e:
            results.append(outcome(run_all(e, [request])[0]))  # ends where the context does
            seven = msgspec.structs.replace(request, sampling=SamplingParams(max_tokens=7, temperature=0))
            results.append(outcome(run_all(e, [seven])[0]))
    assert results[:2] == results[2:]
    assert results[0][1] == "length" and 0 < results[0][2] < 500  # type: ignore[operator]
    assert results[1][1:3] == ("length", 7)


def words_in_json() -> ChatRequest:
    """A chat whose answer a JSON schema leads (a grammar sampler in the chain)."""
    schema = {
        "type": "object",
        "properties": {"words": {"type": "array", "items": {"enum": ["one", "two", "three"]}}},
        "required": ["words"],
    }
    return ChatRequest(
        model="m",
        messages=[Message("user", 'Say {"words": ["one", "two", "one", "two", "three"]} ' * 4)],
        sampling=SamplingParams(max_tokens=80, temperature=0),
        response_format=ResponseFormat(type="json_schema", schema=schema),
    )


@drafting_everywhere
def test_json_schema_output_is_the_same(plain: Engine, spec: Engine) -> None:
    request = words_in_json()
    assert outcome(run_all(spec, [request])[0]) == outcome(run_all(plain, [request])[0])


@drafting_everywhere
def test_a_cache_that_cannot_drop_a_draft_fails_only_that_request(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Engine(options(tiny_llama, speculative=True)) as e:
        request = completions(temperature=0)[0]
        monkeypatch.setattr(Context, "keep", lambda self, seq, n: False)
        failed = run_all(e, [request])[0].final
        assert isinstance(failed, Failed) and "draft" in failed.error.message
        assert e._slots[0].cached == [] and e._ctx.last_position(0) == -1  # nothing stale is reused
        monkeypatch.undo()
        assert isinstance(run_all(e, [request])[0].final, Done)


def test_speculation_off_drafts_nothing(plain: Engine) -> None:
    done = run_all(plain, completions(temperature=0)[:1])[0].final
    assert isinstance(done, Done) and done.usage.drafted_tokens == 0


def stream_of(c: Collector) -> list[object]:
    """What the client sees, call ids aside (they are random), each run of text, reasoning or one
    call's arguments as one piece (a verified draft's tokens arrive as one event)."""
    done = c.final
    assert isinstance(done, Done), done
    out: list[object] = [
        msgspec.structs.replace(e, id=None) if isinstance(e, ToolCallDelta) else e
        for e in merged([e for e in c.events if isinstance(e, (TextDelta, ReasoningDelta, ToolCallDelta))])
    ]
    return [*out, done.finish_reason, done.usage.completion_tokens]


def both(path: Path, requests: list[ChatRequest]) -> tuple[list[list[object]], list[Collector]]:
    """Each request's stream without speculation, and its collectors with it (all at once)."""
    with Engine(options(path, speculative=False, n_parallel=len(requests))) as e:
        expected = [stream_of(c) for c in run_all(e, requests)]  # type: ignore[arg-type]
    with Engine(options(path, speculative=True, n_parallel=len(requests))) as e:
        got = run_all(e, requests)  # type: ignore[arg-type]
    assert sum(c.final.usage.accepted_tokens for c in got) > 0  # type: ignore[union-attr]
    return expected, got


@drafting_everywhere
def test_tool_calls_are_the_same(tiny_llama_tools: Path) -> None:
    tool = Tool("add", "", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    requests = [
        ChatRequest(
            model="m",
            messages=[Message("user", "Add 1 and 1 and 1 and 1 and 1 and 1 and 1 and 1.")],
            tools=[tool],
            tool_choice=choice,
            sampling=SamplingParams(temperature=0, max_tokens=120, logit_bias=bias),
        )
        for choice in (ToolChoice("required"), ToolChoice("auto"))
        for bias in (None, {2: 5.0})
    ]
    expected, got = both(tiny_llama_tools, requests)
    assert [stream_of(c) for c in got] == expected
    assert any(isinstance(e, ToolCallDelta) for c in got for e in c.events)


@drafting_everywhere
def test_reasoning_and_its_budget_are_the_same(tmp_path: Path) -> None:
    path = tiny_gguf.write_tiny_llama(tmp_path / "think.gguf", template=tiny_gguf.THINK_TEMPLATE)
    requests = [
        ChatRequest(
            model="m",
            messages=[Message("user", "Think think think, then answer answer answer.")],
            sampling=SamplingParams(temperature=0, max_tokens=60),
            reasoning=reasoning,
        )
        for reasoning in (None, Reasoning(budget_tokens=8), Reasoning(budget_tokens=20))
    ]
    expected, got = both(path, requests)
    assert [stream_of(c) for c in got] == expected
    assert all(any(isinstance(e, ReasoningDelta) for e in c.events) for c in got)


# --- a real model ---------------------------------------------------------------------

CODE = """def total(items):
    result = 0
    for item in items:
        if item.price > 0:
            result += item.price * item.quantity
    return result


def average(items):
    if not items:
        return 0
    return total(items) / len(items)
"""


def chat(text: str, *, system: str | None = None, **sampling: object) -> ChatRequest:
    return ChatRequest(
        model="m",
        messages=[*([Message("system", system)] if system else []), Message("user", text)],
        sampling=SamplingParams(**{"temperature": 0, "max_tokens": 120, **sampling}),  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def smol_pair(smollm2: Path) -> Iterator[tuple[Engine, Engine]]:
    with (
        Engine(options(smollm2, speculative=False, n_parallel=2, n_ctx=1024)) as off,
        Engine(options(smollm2, speculative=True, n_parallel=2, n_ctx=1024)) as on,
    ):
        yield off, on


@pytest.mark.slow
def test_copying_code_is_exact_and_mostly_drafted(
    smol_pair: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    # each verified token at half a step's cost (a CPU between Q4_0's and Q4_1's): the drafts then
    # depend on the model's output alone, not on how busy the machine is while the suite runs
    monkeypatch.setattr(DecodeCosts, "seconds", lambda self, n_tokens: 1 + 0.5 * (n_tokens - 1))
    off, on = smol_pair
    request = chat(f"Copy this code exactly, in one code block:\n\n```python\n{CODE}```", max_tokens=160)
    expected = stream_of(run_all(off, [request])[0])
    got = run_all(on, [request])[0]
    assert stream_of(got) == expected
    usage = got.final.usage  # type: ignore[union-attr]
    assert usage.accepted_tokens >= usage.completion_tokens // 3  # a third of the answer came from drafts
    # a verified draft's text goes out as one event: far fewer events than tokens
    deltas = [e for e in got.events if isinstance(e, TextDelta)]
    assert len(deltas) <= usage.completion_tokens - usage.accepted_tokens + 1
    assert len([e for e in run_all(off, [request])[0].events if isinstance(e, TextDelta)]) > len(deltas)


@pytest.mark.slow
def test_a_real_model_answers_the_same_with_and_without_speculation(smol_pair: tuple[Engine, Engine]) -> None:
    off, on = smol_pair
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    requests = [
        chat(f"Repeat exactly: {CODE}", stop=["average"]),
        chat("What is the capital of France? Answer in JSON.", max_tokens=40),
        msgspec.structs.replace(
            chat("Name a city in France.", max_tokens=40), response_format=ResponseFormat("json_schema", schema)
        ),
        # seeded sampling: the same random draw for each output token with or without drafts
        chat(f"Summarise this code:\n{CODE}", temperature=1.0, seed=3, max_tokens=60),
    ]
    # One at a time: which other slots share a batch changes the float rounding of attention (also
    # without speculation), and so a near tie; the slot's own drafts leave this model's logits bit-exact.
    expected = [stream_of(run_all(off, [r])[0]) for r in requests]
    assert [stream_of(run_all(on, [r])[0]) for r in requests] == expected
    assert expected[0][-2] == "stop"  # the stop string ended the copy


@drafting_everywhere
@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
def test_with_a_q8_0_cache_an_answer_never_depends_on_the_batch_at_any_thread_count(
    tmp_path: Path, kv_type: str
) -> None:
    # With an f16 cache and more than one thread, llama.cpp attends a lone token to 512 or more cached
    # positions by splitting the cache between threads, in another summation order than a batch's: an
    # answer then depends on whether drafts or other slots shared its batches. A q8_0 cache takes the
    # same path for every token. 32-wide heads (q8_0's block); a prompt past that threshold.
    path = tiny_gguf.write_tiny_llama(tmp_path / "m.gguf", n_embd=128, n_ff=256, n_ctx=4096, weight_type="q8_0")
    load = msgspec.structs.replace(
        options(path, speculative=True, n_parallel=2, n_ctx=4096), n_threads=2, kv_type=kv_type
    )
    # with each token's log probability: the logits themselves, to the last bit, not only their argmax
    request = msgspec.structs.replace(chat(COPY * 8, max_tokens=60), logprobs=0)
    other = chat(COPY[::-1] * 8, max_tokens=60)
    with Engine(msgspec.structs.replace(load, speculative=False)) as plain, Engine(load) as speculating:
        alone = stream_of(run_all(plain, [request])[0])
        beside = stream_of(run_all(plain, [request, other])[0])  # another slot in its batches
        with_drafts = run_all(speculating, [request])[0]
    assert with_drafts.final.usage.accepted_tokens > 0  # type: ignore[union-attr]
    same = beside == alone and stream_of(with_drafts) == alone
    assert same is (kv_type == "q8_0")


@drafting_everywhere
def test_drafts_are_verified_and_dropped_in_a_sliding_window_conversation_put_back(tiny_swa: Path) -> None:
    # Put back from a snapshot, the slot holds only the last window before its end: rejected
    # draft tokens, always past that end, still leave the cache, and the answer is the model's own.
    def chat(messages: list[Message], max_tokens: int = 40, prediction: str | None = None) -> ChatRequest:
        sampling = SamplingParams(max_tokens=max_tokens, temperature=0)
        return ChatRequest(model="m", messages=messages, sampling=sampling, prediction=prediction)

    turn1 = [Message("user", COPY)]
    turn2 = [*turn1, Message("assistant", "one two"), Message("user", "count on: one two three")]
    with Engine(options(tiny_swa, speculative=False)) as e:
        expected = run_all(e, [chat(turn2)])[0]
    answer = expected.text
    wrong = answer[: len(answer) // 2] + " zebra quartz " + answer[len(answer) // 2 :]
    with Engine(options(tiny_swa, speculative=True)) as e:
        run_all(e, [chat(turn1, max_tokens=1)])  # the slot holds exactly its prompt, which turn 2 extends
        run_all(e, completions(temperature=0)[3:])  # the first conversation leaves the only slot for RAM
        got = run_all(e, [chat(turn2, prediction=wrong)])[0]
    info = got.events[0]
    assert isinstance(info, SlotInfo) and info.cache == "ram" and info.cached_tokens > tiny_gguf.TINY_WINDOW
    assert outcome(got) == outcome(expected)
    usage = got.final.usage  # type: ignore[union-attr]
    assert 0 < usage.accepted_tokens < usage.drafted_tokens  # drafts kept, and drafts dropped


@drafting_everywhere
def test_drafts_with_a_small_sliding_window_cache_leave_the_answers_as_they_are(tiny_swa: Path) -> None:
    # Micro-batches of 32: the sliding-window layers keep 256 cells per slot, not the 512 of the
    # context. A rejected draft is sure to leave them only while its slot's tokens share no
    # micro-batch with another slot's: drafts are made only while one request runs.
    load = msgspec.structs.replace(options(tiny_swa, speculative=True, n_parallel=2), n_batch=32)
    sampling = SamplingParams(max_tokens=300, temperature=0)
    requests = [msgspec.structs.replace(r, sampling=sampling) for r in completions()[:2]]
    with Engine(msgspec.structs.replace(load, speculative=False)) as plain:
        expected = [outcome(c) for c in run_all(plain, requests)]
    with Engine(load) as e:
        alone = [run_all(e, [r])[0] for r in requests]
        together = run_all(e, requests)
    assert [outcome(c) for c in alone] == [outcome(c) for c in together] == expected
    for c in alone:
        usage = c.final.usage  # type: ignore[union-attr]
        assert 0 < usage.accepted_tokens < usage.drafted_tokens
    # the first to end ran beside the other all along, but for the steps before the engine took the
    # second in (it may run a step or two between the two submissions)
    drafted_together = min(c.final.usage.drafted_tokens for c in together)  # type: ignore[union-attr]
    assert drafted_together < min(c.final.usage.drafted_tokens for c in alone) / 2  # type: ignore[union-attr]
