"""Scheduler: resolves models through the library, loads each once, unloads, closes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runners.helpers import collect, final, is_gone, run, runner_children, short_chat, text_of, wait_until
from spark.errors import InvalidRequest, ModelNotFound, PlacementRefused, RunnerFailed, ShuttingDown, from_info
from spark.library import GGUFInfo, Library, ModelEntry, ModelSettings
from spark.runners.options import load_options
from spark.runners.scheduler import Scheduler
from spark.runners.supervisor import RunnerProcess
from spark.settings import load_settings
from spark.types import Done, EmbeddingRequest, Embeddings, Failed, SamplingParams


@pytest.fixture
def library() -> Library:
    with Library(load_settings()) as lib:
        yield lib


def test_concurrent_first_requests_load_the_model_once(
    library: Library, tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = library.add_local(tiny_llama).id
    starts: list[str] = []
    real_start = RunnerProcess.start

    async def counting_start(self: RunnerProcess) -> None:
        starts.append(self.model_id)
        await real_start(self)

    monkeypatch.setattr(RunnerProcess, "start", counting_start)

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(parallel=2), library)
        try:
            results = await asyncio.gather(
                *(collect(scheduler.stream(short_chat(model.upper() if i % 2 else model, n=3 + i))) for i in range(6))
            )
            for i, events in enumerate(results):
                done = final(events)
                assert isinstance(done, Done) and done.usage.completion_tokens == 3 + i
                assert text_of(events)
            assert starts == [model], "one load for six concurrent requests (ids are case-insensitive)"

            [state] = scheduler.loaded()
            assert state.model == model and state.status == "ready" and state.pid is not None
            assert state.n_parallel == 2 and state.n_ctx == 512  # capped at the tiny model's training context
            assert state.in_flight == 0 and state.restarts == 0

            assert await scheduler.count_tokens(short_chat(model)) > 0
            assert starts == [model], "a loaded model is reused"
        finally:
            await scheduler.close()
        assert not runner_children()

    run(scenario())


def test_unknown_model_is_model_not_found(library: Library) -> None:
    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        with pytest.raises(ModelNotFound, match="no-such-model"):
            await collect(scheduler.stream(short_chat("no-such-model")))
        with pytest.raises(ModelNotFound):
            await scheduler.count_tokens(short_chat("no-such-model"))
        assert await scheduler.unload("no-such-model") is False
        assert scheduler.loaded() == []
        await scheduler.close()

    run(scenario())


def test_unload_stops_the_runner_and_the_next_request_reloads(
    library: Library, tiny_llama: Path, tiny_bert: Path
) -> None:
    chat_model = library.add_local(tiny_llama).id
    embed_model = library.add_local(tiny_bert).id

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        assert isinstance(final(await collect(scheduler.stream(short_chat(chat_model)))), Done)
        embedded = final(await collect(scheduler.stream(EmbeddingRequest(model=embed_model, input=["a b", "c"]))))
        assert isinstance(embedded, Embeddings) and len(embedded.vectors) == 2
        by_model = {s.model: s for s in scheduler.loaded()}
        assert set(by_model) == {chat_model, embed_model}
        old_pid = by_model[chat_model].pid
        assert old_pid is not None

        assert await scheduler.unload(chat_model.upper()) is True
        assert is_gone(old_pid)
        assert [s.model for s in scheduler.loaded()] == [embed_model]
        assert await scheduler.unload(chat_model) is False

        assert isinstance(final(await collect(scheduler.stream(short_chat(chat_model)))), Done)
        new_pid = next(s.pid for s in scheduler.loaded() if s.model == chat_model)
        assert new_pid not in (None, old_pid)

        pids = [s.pid for s in scheduler.loaded()]
        await scheduler.close()
        assert scheduler.loaded() == []
        assert all(is_gone(pid) for pid in pids if pid is not None)
        assert not runner_children()
        with pytest.raises(ShuttingDown, match="shutting down"):
            await collect(scheduler.stream(short_chat(chat_model)))

    run(scenario())


def test_close_during_a_load_leaves_no_process(library: Library, tiny_llama: Path) -> None:
    model = library.add_local(tiny_llama).id

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        waiting = asyncio.create_task(collect(scheduler.stream(short_chat(model))))
        await wait_until(lambda: [r.status for r in scheduler.runners()] == ["loading"], what="the load to start")
        await scheduler.close()
        with pytest.raises(RunnerFailed, match="shutting down"):
            await waiting
        assert not runner_children()

    run(scenario())


def test_an_unload_during_a_load_comes_after_the_requests_before_it(library: Library, tiny_llama: Path) -> None:
    """Requests that waited for the load before the unload get the runner (and lose it to the unload
    unless they end first); one that came after the unload began loads the model again, as a request
    after it would."""
    model = library.add_local(tiny_llama).id

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        try:
            before = [asyncio.create_task(collect(scheduler.stream(short_chat(model)))) for _ in range(2)]
            warmed = asyncio.create_task(scheduler.warm(model))
            await wait_until(lambda: [r.status for r in scheduler.runners()] == ["loading"], what="the load to start")
            unloading = asyncio.create_task(scheduler.unload(model))
            await asyncio.sleep(0)
            after = asyncio.create_task(collect(scheduler.stream(short_chat(model))))
            assert await unloading is True
            first_pid = (await warmed).pid
            for task in before:  # ended by the unload, unless their few tokens came first
                ended = final(await task)
                assert isinstance(ended, Done) or (isinstance(ended, Failed) and "unloaded" in ended.error.message)
            assert isinstance(final(await after), Done)
            [state] = scheduler.loaded()
            assert state.pid not in (None, first_pid)
        finally:
            await scheduler.close()
        assert not runner_children()

    run(scenario())


def _entry(context_length: int, settings: ModelSettings) -> ModelEntry:
    info = GGUFInfo(
        architecture="llama", quantization="F32", parameter_count=1, file_size=1, context_length=context_length
    )
    return ModelEntry(
        id="m",
        path="/m.gguf",
        shards=["/m.gguf"],
        mmproj_path="/p.gguf",
        size_bytes=1,
        info=info,
        settings=settings,
        source="local:/m.gguf",
        owned=False,
        added_at=0.0,
    )


def test_load_options_from_model_and_server_settings() -> None:
    server = load_settings(context_length=8192, parallel=3, threads=2, kv_type="q8_0")
    sampling = SamplingParams(temperature=0.2)

    opts = load_options(_entry(32768, ModelSettings(system_prompt="be kind", sampling=sampling)), server)
    assert (opts.n_ctx, opts.n_parallel, opts.n_threads, opts.kv_type) == (8192, 3, 2, "q8_0")
    assert opts.system_prompt == "be kind" and opts.mmproj_path == "/p.gguf"
    assert opts.sampling == SamplingParams(temperature=0.2, max_tokens=2048)  # the server's default_max_tokens
    assert opts.model_id == "m" and opts.path == "/m.gguf" and not opts.embedding

    own = load_options(_entry(32768, ModelSettings(context_length=2048, parallel=1)), server)
    assert (own.n_ctx, own.n_parallel) == (2048, 1), "the model's own settings win"
    assert load_options(_entry(4096, ModelSettings()), server).n_ctx == 4096, "capped at the training context"
    trained = load_options(_entry(32768, ModelSettings()), load_settings(context_length=0))
    assert trained.n_ctx == 32768, "0 means the training context"
    assert load_options(_entry(0, ModelSettings()), load_settings(context_length=0)).n_ctx == 4096


def test_flash_attention_from_model_then_server() -> None:
    server = load_settings(flash_attention="on")
    assert load_options(_entry(4096, ModelSettings()), server).flash_attention == "on"
    assert load_options(_entry(4096, ModelSettings(flash_attention="off")), server).flash_attention == "off"
    assert load_options(_entry(4096, ModelSettings()), load_settings()).flash_attention == "auto"
    # the server's quantized cache with the model's flash attention off: llama.cpp could not load it
    with pytest.raises(InvalidRequest, match="flash_attention off cannot go with kv_type q8_0") as e:
        load_options(_entry(4096, ModelSettings(flash_attention="off")), load_settings(kv_type="q8_0"))
    assert e.value.param == "flash_attention"


def test_default_answer_length_from_model_then_server_within_the_limit() -> None:
    def max_tokens(model: int | None, **server: int) -> int | None:
        settings = ModelSettings(sampling=SamplingParams(max_tokens=model))
        return load_options(_entry(4096, settings), load_settings(**server)).sampling.max_tokens  # type: ignore[arg-type]

    assert max_tokens(None) == 2048
    assert max_tokens(None, default_max_tokens=300) == 300
    assert max_tokens(None, default_max_tokens=0) is None  # up to the context's end
    assert max_tokens(500, default_max_tokens=300) == 500, "the model's own setting wins"
    assert max_tokens(None, max_tokens_limit=1000) == 1000, "never past the server's limit"
    assert max_tokens(5000, max_tokens_limit=1000) == 1000


def test_speculative_decoding_from_model_and_server_settings() -> None:
    on, off = load_settings(), load_settings(speculative=False)
    assert load_options(_entry(4096, ModelSettings()), on).speculative, "on by default"
    assert not load_options(_entry(4096, ModelSettings()), off).speculative
    assert not load_options(_entry(4096, ModelSettings(speculative=False)), on).speculative, "the model's own wins"
    assert load_options(_entry(4096, ModelSettings(speculative=True)), off).speculative


def test_runner_state_changes_are_published(library: Library, tiny_llama: Path) -> None:
    import os
    import signal

    from spark.events import EventBus

    model = library.add_local(tiny_llama).id

    async def scenario() -> list[dict[str, object]]:
        bus = EventBus()
        subscription = bus.subscribe(frozenset({"runner"}))
        scheduler = Scheduler(load_settings(), library, bus)
        try:
            state = await scheduler.warm(model, keep_alive=30)
            assert state.status == "ready" and state.keep_alive == 30 and state.pid is not None
            assert state.reason == "first request"
            os.kill(state.pid, signal.SIGKILL)
            assert isinstance(final(await collect(scheduler.stream(short_chat(model)))), Done)
            (restarted,) = scheduler.runners()  # why it runs, as `spark ps` and the console show it
            assert restarted.reason.startswith("restarted after it was killed (signal 9")
            assert await scheduler.unload(model) is True
        finally:
            await scheduler.close()
        seen = []
        while True:
            try:
                event = await subscription.next(timeout=0.2)
            except TimeoutError:
                return seen
            assert event is not None and event.kind == "runner.state"
            seen.append(event.data)

    events = run(scenario())
    assert [e["state"] for e in events] == ["loading", "ready", "restarting", "ready", "unloaded"]
    assert all(e["model"] == model for e in events)
    assert "SIGKILL" in str(events[3]["reason"]) and events[3]["restarts"] == 1
    assert events[4]["reason"] == "unloaded on request"


def test_a_load_memory_failed_is_refused_until_its_settings_change(
    library: Library, tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner whose context memory could not hold (see tests/server/test_faults.py for the real
    one) fails its load; the same load with no more memory free is then refused without starting a
    runner, and a change of the model's settings lets it be tried again."""
    model = library.add_local(tiny_llama).id
    starts: list[int] = []
    real_start = RunnerProcess.start

    async def start(self: RunnerProcess) -> None:
        starts.append(self.options.n_ctx)
        if self.options.n_ctx > 256:
            raise RunnerFailed("not enough memory for a context of 512 tokens", out_of_memory=True)
        await real_start(self)

    monkeypatch.setattr(RunnerProcess, "start", start)
    library.update_settings(model, ModelSettings(context_length=512))

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        try:
            with pytest.raises(RunnerFailed, match="not enough memory"):
                await collect(scheduler.stream(short_chat(model)))
            with pytest.raises(PlacementRefused) as refused:
                await collect(scheduler.stream(short_chat(model)))
            assert "failed to load for lack of memory with the same settings" in refused.value.message
            assert "not enough memory for a context of 512 tokens" in refused.value.message
            assert starts == [512], "no runner was started for the refused load"

            library.update_settings(model, ModelSettings(context_length=256))
            assert isinstance(final(await collect(scheduler.stream(short_chat(model)))), Done)
            assert starts == [512, 256]
        finally:
            await scheduler.close()

    run(scenario())


def test_runner_failed_keeps_out_of_memory_across_the_runner_socket() -> None:
    error = RunnerFailed("not enough memory", out_of_memory=True)
    rebuilt = from_info(error.info())
    assert isinstance(rebuilt, RunnerFailed) and rebuilt.out_of_memory and rebuilt.message == "not enough memory"
    crashed = from_info(RunnerFailed("crashed").info())
    assert isinstance(crashed, RunnerFailed) and not crashed.out_of_memory
