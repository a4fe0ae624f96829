"""Chat and completion generation on the tiny LLaMA: events, sampling, stops, batching, reuse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from engine.helpers import Collector, wait_until
from spark.engine import Engine
from spark.engine.native import Model
from spark.types import (
    ChatRequest,
    CompletionRequest,
    Done,
    EmbeddingRequest,
    Embeddings,
    Event,
    Failed,
    LoadOptions,
    Message,
    PromptDone,
    Reasoning,
    ReasoningDelta,
    SamplingParams,
    SlotInfo,
    TextDelta,
    Tool,
    ToolCall,
)


@pytest.fixture(scope="module")
def engine(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=512, n_parallel=2)) as e:
        yield e


def chat(text: str = "Hello there", **sampling: object) -> ChatRequest:
    return ChatRequest(model="tiny", messages=[Message("user", text)], sampling=SamplingParams(**sampling))  # type: ignore[arg-type]


def run(engine: Engine, request: ChatRequest | CompletionRequest | EmbeddingRequest, name: str = "r") -> Collector:
    c = Collector(name)
    engine.submit(name, request, c)
    c.wait()
    return c


def test_chat_streams_slot_prompt_text_then_done(engine: Engine) -> None:
    c = run(engine, chat(max_tokens=12, seed=3))
    slot, prompt_done, *deltas, done = c.events
    n_prompt = engine.count_tokens(chat())
    assert isinstance(slot, SlotInfo) and slot.prompt_tokens == n_prompt
    assert isinstance(prompt_done, PromptDone)
    assert prompt_done.evaluated_tokens == n_prompt - slot.cached_tokens
    assert deltas and all(isinstance(d, TextDelta) and d.text for d in deltas)
    assert isinstance(done, Done) and done.finish_reason == "length"
    assert done.usage.prompt_tokens == n_prompt and done.usage.completion_tokens == 12
    assert done.usage.cached_tokens == slot.cached_tokens
    assert c.text.isprintable() or "\n" in c.text


def test_completion_uses_the_raw_prompt_and_16_tokens_by_default(engine: Engine) -> None:
    req = CompletionRequest(model="tiny", prompt="The quick brown fox")
    # no template: the prompt is just the text's tokens (this vocab adds no BOS)
    assert engine.count_tokens(req) < engine.count_tokens(chat("The quick brown fox"))
    done = run(engine, req).final
    assert isinstance(done, Done) and done.usage.completion_tokens == 16


def test_a_completion_prompt_of_token_ids_is_used_as_given(engine: Engine, tiny_llama: Path) -> None:
    model = Model(str(tiny_llama))
    try:
        tokens = model.tokenize("The quick brown fox", add_special=False, parse_special=True)
    finally:
        model.close()
    as_text = CompletionRequest(model="tiny", prompt="The quick brown fox", sampling=SamplingParams(temperature=0))
    as_ids = CompletionRequest(model="tiny", prompt=tokens, sampling=SamplingParams(temperature=0))
    assert engine.count_tokens(as_ids) == len(tokens) == engine.count_tokens(as_text)
    assert run(engine, as_ids).text == run(engine, as_text).text


@pytest.mark.parametrize(
    ("prompt", "suffix", "param", "words"),
    [
        ([], None, "prompt", "no tokens"),
        ([5, -1], None, "prompt", "token id -1 (at 1)"),
        ([5, 10**6], None, "prompt", "outside this model's vocabulary"),
        ([5, 6], "x", "suffix", "text prompt"),
    ],
)
def test_bad_token_prompts(engine: Engine, prompt: list[int], suffix: str | None, param: str, words: str) -> None:
    done = run(engine, CompletionRequest(model="tiny", prompt=prompt, suffix=suffix)).final
    assert isinstance(done, Failed) and done.error.param == param and words in done.error.message
    assert isinstance(run(engine, chat(max_tokens=2)).final, Done)  # the runner goes on


def test_same_seed_same_text_other_seed_other_text(engine: Engine) -> None:
    a = run(engine, chat(max_tokens=24, seed=42, temperature=1.0)).text
    b = run(engine, chat(max_tokens=24, seed=42, temperature=1.0)).text
    c = run(engine, chat(max_tokens=24, seed=43, temperature=1.0)).text
    assert a == b and a != c


def test_greedy_needs_no_seed(engine: Engine) -> None:
    a = run(engine, chat(max_tokens=24, temperature=0.0)).text
    b = run(engine, chat(max_tokens=24, temperature=0.0, top_k=3)).text
    assert a == b


def test_no_seed_means_a_random_seed(engine: Engine) -> None:
    texts = {run(engine, chat(max_tokens=24, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)).text for _ in range(3)}
    assert len(texts) > 1


def test_requests_joining_mid_decode_match_their_solo_runs(tiny_llama: Path) -> None:
    """Continuous batching: a request that joins while others decode, with other lengths and
    prompts no slot has seen, gets exactly the text it gets alone."""
    requests = {
        # long enough that b and c join well before the others end, even on a busy machine
        "a": chat("Tell me a story", max_tokens=240, seed=1, temperature=1.0),
        "b": chat("Something else entirely", max_tokens=160, seed=2, temperature=1.0),
        "c": chat("A third, longer prompt about the sea and ships", max_tokens=60, seed=3, temperature=1.0),
    }
    # One event per token: with speculation a verified draft's tokens arrive as one event, and a
    # request could run to its end before the test sees the events it waits for.
    options = LoadOptions(
        model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=512, n_parallel=3, speculative=False
    )
    with Engine(options) as alone:
        solo = {name: run(alone, r).text for name, r in requests.items()}

    log: list[tuple[str, Event]] = []
    got = {name: Collector(name, log) for name in requests}

    def texts(name: str) -> int:
        return sum(1 for e in got[name].events if isinstance(e, TextDelta))

    with Engine(options) as e:  # a fresh engine: nothing cached
        e.submit("a", requests["a"], got["a"])
        wait_until(lambda: texts("a") >= 10)
        e.submit("b", requests["b"], got["b"])
        wait_until(lambda: texts("b") >= 2)
        e.submit("c", requests["c"], got["c"])
        for c in got.values():
            c.wait()
    assert {name: c.text for name, c in got.items()} == solo
    slots = [next(e for e in c.events if isinstance(e, SlotInfo)) for c in got.values()]
    assert [s.cached_tokens for s in slots] == [0, 0, 0] and len({s.slot for s in slots}) == 3

    def at(name: str, kind: type) -> int:
        return next(i for i, (n, e) in enumerate(log) if n == name and isinstance(e, kind))

    # b and c joined while a (and then b) were decoding, and each finished at its own length
    assert at("a", TextDelta) < at("b", SlotInfo) < at("a", Done)
    assert at("b", TextDelta) < at("c", SlotInfo) < at("b", Done)
    assert [got[n].final.usage.completion_tokens for n in "abc"] == [240, 160, 60]  # type: ignore[attr-defined]


def test_stop_string_across_tokens_cuts_the_text(engine: Engine) -> None:
    base = run(engine, chat(max_tokens=40, temperature=0.0))
    full = base.text
    deltas = [e.text for e in base.events if isinstance(e, TextDelta)]
    # a stop string made of the end of one token and the start of the next
    boundary = len(deltas[3]) + len(deltas[2]) + len(deltas[1]) + len(deltas[0])
    stop = full[boundary - 2 : boundary + 2]
    assert len(stop) == 4
    cut = full.index(stop)
    c = run(engine, chat(max_tokens=40, temperature=0.0, stop=[stop, "never-there"]))
    done = c.final
    assert isinstance(done, Done) and done.finish_reason == "stop" and done.stop_sequence == stop
    assert c.text == full[:cut]
    assert done.usage.completion_tokens < 40


def test_eos_ends_with_stop(engine: Engine, tiny_llama: Path) -> None:
    # The tiny model never picks EOS (<|im_end|>, id 511) unless pushed to, and its output
    # head holds control tokens far down: a large bias and greedy sampling make it certain.
    c = run(engine, chat(max_tokens=20, temperature=0.0, logit_bias={511: 1000.0}))
    done = c.final
    assert isinstance(done, Done) and done.finish_reason == "stop" and done.stop_sequence is None
    assert done.usage.completion_tokens == 1 and c.text == ""


def test_second_chat_turn_reuses_the_history(engine: Engine) -> None:
    turn1 = [Message("system", "You answer briefly."), Message("user", "Name a colour and a fruit please")]
    first = run(engine, ChatRequest(model="tiny", messages=turn1, sampling=SamplingParams(max_tokens=10, seed=5)))
    turn2 = [*turn1, Message("assistant", first.text), Message("user", "And another one?")]
    req2 = ChatRequest(model="tiny", messages=turn2, sampling=SamplingParams(max_tokens=4, seed=5))
    second = run(engine, req2)
    slot = second.events[0]
    assert isinstance(slot, SlotInfo)
    n1 = engine.count_tokens(ChatRequest(model="tiny", messages=turn1))
    assert n1 <= slot.cached_tokens < engine.count_tokens(req2)
    prompt_done = second.events[1]
    assert isinstance(prompt_done, PromptDone)
    assert prompt_done.evaluated_tokens == slot.prompt_tokens - slot.cached_tokens
    done = second.final
    assert isinstance(done, Done) and done.usage.cached_tokens == slot.cached_tokens


def test_cached_tokens_equal_the_shared_prefix(engine: Engine) -> None:
    p1 = "Numbers 0 1 2 3 4 5 6 7 8 9 and some words"
    p2 = p1 + " and then a lot more words follow"
    n1 = engine.count_tokens(CompletionRequest(model="tiny", prompt=p1))
    run(engine, CompletionRequest(model="tiny", prompt=p1, sampling=SamplingParams(max_tokens=1)))
    second = run(engine, CompletionRequest(model="tiny", prompt=p2, sampling=SamplingParams(max_tokens=1)))
    slot = second.events[0]
    assert isinstance(slot, SlotInfo) and slot.cached_tokens == n1
    # the same prompt again: everything but the last token is reused
    again = run(engine, CompletionRequest(model="tiny", prompt=p2, sampling=SamplingParams(max_tokens=1)))
    slot = again.events[0]
    assert isinstance(slot, SlotInfo) and slot.cached_tokens == slot.prompt_tokens - 1


def test_prompt_longer_than_the_context_fails(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=64)) as e:
        assert e.info().n_ctx_per_slot == 64
        c = Collector()
        e.submit("long", chat("word " * 200), c)
        failed = c.wait(5)
        assert isinstance(failed, Failed) and failed.error.code == "context_length_exceeded"
        assert failed.error.data["n_ctx"] == 64 and failed.error.data["n_prompt"] > 64
        # and a generation that fills the context ends with "length"
        done = run(e, chat("hi")).final
        assert isinstance(done, Done) and done.finish_reason == "length"
        assert done.usage.total_tokens == 64


def test_context_is_capped_at_the_training_context(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=100_000)) as e:
        assert e.info().n_ctx_per_slot == 512 == e.info().n_ctx_train
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=0)) as e:
        assert e.info().n_ctx_per_slot == 512


def test_cancel_frees_the_slot_for_the_next_request(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_parallel=1)) as e:
        long = Collector("long")
        e.submit("long", chat(), long)  # runs until the context is full
        assert long.first_text.wait(30)
        e.cancel("long")
        done = long.wait()
        assert isinstance(done, Done) and done.finish_reason == "cancelled"
        assert 0 < done.usage.completion_tokens < 400
        nxt = run(e, chat(max_tokens=3), "next")
        assert isinstance(nxt.events[0], SlotInfo) and nxt.events[0].slot == 0
        assert isinstance(nxt.final, Done) and nxt.final.finish_reason == "length"
        wait_until(lambda: e.busy == 0)


def test_requests_beyond_the_slots_queue_in_order(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_parallel=1)) as e:
        log: list[tuple[str, Event]] = []
        cs = [Collector(n, log) for n in "abc"]
        for c in cs:
            e.submit(c.name, chat(max_tokens=8, seed=1), c)
        assert e.busy >= 1
        for c in cs:
            c.wait()
            assert isinstance(c.final, Done) and c.final.usage.completion_tokens == 8
        order = [n for n, ev in log if isinstance(ev, (SlotInfo, Done))]
        assert order == ["a", "a", "b", "b", "c", "c"]  # FIFO, one at a time
        assert e.busy == 0


def test_cancel_a_queued_request(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_parallel=1)) as e:
        running, queued = Collector("running"), Collector("queued")
        e.submit("running", chat(), running)
        e.submit("queued", chat(), queued)
        assert running.first_text.wait(30)
        e.cancel("queued")
        done = queued.wait()
        assert isinstance(done, Done) and done.finish_reason == "cancelled"
        assert queued.events == [done] and done.usage.completion_tokens == 0
        e.cancel("running")
        assert isinstance(running.wait(), Done)


@pytest.mark.parametrize(
    ("sampling", "param"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"logit_bias": {99999: 1.0}}, "logit_bias"),
        ({"repeat_penalty": 0.0}, "repeat_penalty"),
    ],
)
def test_bad_sampling_fails_at_once_naming_the_param(engine: Engine, sampling: dict, param: str) -> None:
    c = Collector()
    engine.submit("bad", chat(**sampling), c)
    assert c.finished.is_set()  # emitted from submit itself
    failed = c.final
    assert isinstance(failed, Failed) and failed.error.code == "invalid_request" and failed.error.param == param


def test_penalties_change_the_output(engine: Engine) -> None:
    plain = run(engine, chat(max_tokens=40, temperature=0.0)).text
    penalized = run(engine, chat(max_tokens=40, temperature=0.0, repeat_penalty=1.5, presence_penalty=1.0)).text
    assert plain != penalized


def test_a_chat_model_embeds_too(engine: Engine) -> None:
    c = Collector()
    engine.submit("emb", EmbeddingRequest(model="tiny", input=["x", "a longer text"]), c)
    done = c.wait()
    assert isinstance(done, Embeddings) and len(done.vectors) == 2
    assert len(done.vectors[0]) == engine.info().n_embd and done.vectors[0] != done.vectors[1]


def test_default_system_prompt_is_used_without_a_system_message(tiny_llama: Path) -> None:
    opts = LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, system_prompt="You are a pirate.")
    with Engine(opts) as e:

        def n(*messages: Message) -> int:
            return e.count_tokens(ChatRequest(model="tiny", messages=list(messages)))

        hi = Message("user", "hi")
        assert n(hi) == n(Message("system", "You are a pirate."), hi) > n(Message("system", ""), hi)
        # a developer message is a system message: the default one is not added
        assert n(Message("developer", "Hello world and more!"), hi) == n(Message("system", "Hello world and more!"), hi)
        assert n(Message("developer", "Hello world and more!"), hi) != n(hi)
        # tools described in the system message (the template renders none) keep the default prompt
        with_tools = e._prep.prompt(ChatRequest(model="tiny", messages=[hi], tools=[Tool("get_weather")]))[2]
        assert with_tools.startswith("<|im_start|>system\nYou are a pirate.\n\nYou can call these tools")


def test_a_last_assistant_message_is_the_start_of_the_answer(engine: Engine) -> None:
    def prompt(*messages: Message) -> str:
        return engine._prep.prompt(ChatRequest(model="tiny", messages=list(messages)))[2]

    question = Message("user", "Capital of France?")
    # prefilled: the assistant's turn opens and the answer goes on from its text, unclosed
    assert prompt(question, Message("assistant", "It is")) == prompt(question) + "It is"
    # a call the client made earlier is a turn of its own, as is an assistant message alone
    call = Message("assistant", tool_calls=[ToolCall("c1", "f", "{}")])
    assert prompt(question, call).endswith("<|im_start|>assistant\n")
    assert prompt(Message("assistant", "Hi")) == "<|im_start|>assistant\nHi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("how", ["prefill", "thinking off"])
def test_a_block_the_template_always_opens_is_closed_for_a_prefill_or_with_thinking_off(
    tmp_path: Path, how: str
) -> None:
    import tiny_gguf

    # DeepSeek-R1's distills: the generation prompt opens a thinking block whatever it is told
    src = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}"
    )
    path = tiny_gguf.write_tiny_llama(tmp_path / "r1-like.gguf", template=src)
    question = Message("user", "Capital of France?")
    request = ChatRequest(model="r1", messages=[question], sampling=SamplingParams(max_tokens=5, temperature=0))
    with Engine(LoadOptions(model_id="r1", path=str(path), n_threads=1)) as e:
        assert e._prep.prompt(request)[2].endswith("<|assistant|><think>\n")  # thinking, as the model likes
        if how == "prefill":
            request = msgspec.structs.replace(request, messages=[question, Message("assistant", "It is")])
        else:
            request = msgspec.structs.replace(request, reasoning=Reasoning(enabled=False))
        closed = "<|assistant|><think>\n\n</think>\n\n"
        assert e._prep.prompt(request)[2].endswith(closed + ("It is" if how == "prefill" else ""))
        c = run(e, request)
        assert isinstance(c.final, Done) and c.text  # the answer (or the continuation) is text, not reasoning
        assert not [ev for ev in c.events if isinstance(ev, ReasoningDelta)]


def test_model_without_template_uses_chatml(tmp_path: Path) -> None:
    import tiny_gguf

    path = tiny_gguf.write_tiny_llama(tmp_path / "no-template.gguf", template=None)
    with Engine(LoadOptions(model_id="bare", path=str(path), n_threads=1)) as e:
        info = e.info()
        assert info.chat_template_source == "fallback" and "<|im_start|>" in info.chat_template
        c = run(e, chat(max_tokens=5))
        assert isinstance(c.final, Done) and c.final.usage.completion_tokens == 5 and c.text


@pytest.mark.parametrize("ends_turn", [True, False])
def test_chatml_fallback_stops_at_its_turn_end_where_that_is_only_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ends_turn: bool
) -> None:
    """A base model with no template (Gemma 3 270M): `<|im_end|>` is text in its vocabulary, not an end
    token, so the fallback's answers stop at that text instead of writing the next turns."""
    import tiny_gguf

    path = tiny_gguf.write_tiny_llama(tmp_path / "no-template.gguf", template=None)
    if not ends_turn:  # as in a vocabulary whose end tokens are others
        monkeypatch.setattr(Model, "is_eog", lambda self, token: False)
    with Engine(LoadOptions(model_id="bare", path=str(path), n_threads=1)) as e:
        job = e._prep.prepare("r", chat(stop=["END"]), lambda event: None)
        assert job.params.stop == (["END"] if ends_turn else ["END", "<|im_end|>"])  # type: ignore[union-attr]
        assert job.turn_ends == (() if ends_turn else ("<|im_end|>",))  # type: ignore[union-attr]
        # the client's own stop string is its own: reported when it matches, and not added twice
        job = e._prep.prepare("o", chat(stop=["<|im_end|>"]), lambda event: None)
        assert job.params.stop == ["<|im_end|>"] and job.turn_ends == ()  # type: ignore[union-attr]
        completion = e._prep.prepare("c", CompletionRequest(model="bare", prompt="a"), lambda event: None)
        assert not completion.params.stop  # type: ignore[union-attr]  # a raw prompt has no turns


def test_template_error_fails_the_request(tmp_path: Path) -> None:
    import tiny_gguf

    src = "{% if messages | length > 1 %}{{ raise_exception('only one message, please') }}{% endif %}{{ messages[0]['content'] }}"
    path = tiny_gguf.write_tiny_llama(tmp_path / "strict.gguf", template=src)
    with Engine(LoadOptions(model_id="strict", path=str(path), n_threads=1)) as e:
        c = Collector()
        e.submit(
            "t",
            ChatRequest(
                model="strict", messages=[Message("user", "a"), Message("assistant", "b"), Message("user", "c")]
            ),
            c,
        )
        failed = c.wait(1)
        assert isinstance(failed, Failed) and failed.error.code == "invalid_request"
        assert failed.error.message.endswith("only one message, please") and failed.error.param == "messages"


def test_a_model_whose_template_refuses_system_messages_still_gets_them(tmp_path: Path) -> None:
    import tiny_gguf
    from engine.test_template import GEMMA2

    path = tiny_gguf.write_tiny_llama(tmp_path / "gemma2-like.gguf", template=GEMMA2)
    opts = LoadOptions(model_id="g", path=str(path), n_threads=1, system_prompt="Answer briefly.")
    with Engine(opts) as e:
        request = ChatRequest(model="g", messages=[Message("system", "Be kind."), Message("user", "Hi")])
        assert isinstance(run(e, request).final, Done)
        assert "<start_of_turn>user\nBe kind.\n\nHi<end_of_turn>" in e._prep.prompt(request)[2]
        assert "Answer briefly.\n\nHi" in e._prep.prompt(chat("Hi"))[2]  # the model's own system prompt


def test_progress_and_busy(engine: Engine) -> None:
    before = engine.progress
    run(engine, chat(max_tokens=5))
    assert engine.progress >= before + 5
    assert engine.busy == 0


def test_closed_engine_fails_requests(tiny_llama: Path) -> None:
    e = Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1))
    running = Collector()
    e.submit("r", chat(), running)
    assert running.first_text.wait(30)
    e.close()
    failed = running.wait(1)
    assert isinstance(failed, Failed) and failed.error.code == "runner_failed"
    late = Collector()
    e.submit("late", chat(), late)
    assert isinstance(late.wait(1), Failed)
    e.close()  # twice is fine
