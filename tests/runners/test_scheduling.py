"""Scheduling with real runner processes: placement by memory, eviction, waiting for busy
models, keep-alive, the queue bound, reloads on changed settings, measured memory."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from time import monotonic

import gguf
import msgspec
import numpy as np
import pytest

from runners.helpers import (
    SLOW_CONTEXT,
    collect,
    control_token_bias,
    final,
    is_gone,
    long_chat,
    run,
    runner_children,
    short_chat,
    wait_until,
)
from spark.errors import InvalidRequest, ModelNotFound, Overloaded, PlacementRefused
from spark.library import Library, ModelSettings
from spark.library.metadata import read_gguf_info
from spark.placement import MemoryEstimate, estimate_load, model_shape
from spark.placement.estimate import MIB, RUNNER_BYTES
from spark.runners.options import load_options
from spark.runners.protocol import HEARTBEAT_SECONDS
from spark.runners.scheduler import RunnerState, Scheduler
from spark.runners.supervisor import RunnerProcess
from spark.settings import Settings, load_settings
from spark.types import ChatRequest, Done, Event, Failed, Message, SamplingParams, TextDelta


@pytest.fixture
def library() -> Iterator[Library]:
    with Library(load_settings()) as lib:
        yield lib


@pytest.fixture
def slow_model(library: Library, slow_llama: Path) -> str:
    """The slow model with one slot, its whole context, and no end of its own (control tokens banned)."""
    model = library.add_local(slow_llama).id
    library.update_settings(
        model,
        ModelSettings(
            context_length=SLOW_CONTEXT, parallel=1, sampling=SamplingParams(logit_bias=control_token_bias(slow_llama))
        ),
    )
    return model


def estimate_for(library: Library, model: str, settings: Settings) -> MemoryEstimate:
    """The estimate the scheduler makes before loading `model` with `settings`."""
    entry = library.get(model)
    return estimate_load(model_shape(read_gguf_info(entry.path)), load_options(entry, settings))


def with_keep_alive(request: ChatRequest, seconds: float) -> ChatRequest:
    return msgspec.structs.replace(request, keep_alive=seconds)


async def first_text(events: AsyncGenerator[Event, None]) -> None:
    """Read `events` until the model has produced text (so its request is certainly running)."""
    async for event in events:
        if isinstance(event, TextDelta):
            return
        assert not isinstance(event, Done), "the long request ended early"
    raise AssertionError("the stream ended without text")


def state_of(scheduler: Scheduler, model: str) -> RunnerState:
    [state] = [s for s in scheduler.loaded() if s.model == model]
    return state


# --- refusal ------------------------------------------------------------------


def test_a_model_too_large_is_refused_with_the_arithmetic(library: Library, tiny_llama: Path) -> None:
    model = library.add_local(tiny_llama).id
    settings = load_settings(max_ram="1MiB")
    estimate = estimate_for(library, model, settings)
    assert estimate.total_bytes > MIB

    async def scenario() -> None:
        scheduler = Scheduler(settings, library)
        try:
            with pytest.raises(PlacementRefused) as e:
                await collect(scheduler.stream(short_chat(model)))
            text = e.value.message
            assert text.startswith(estimate.describe() + "; cpu: ")
            assert "free of 1.0 MiB" in text
            assert text.endswith("cpu memory is limited by max_ram 1MiB (SPARK_MAX_RAM)")
            assert e.value.status == 507
            with pytest.raises(PlacementRefused):
                await scheduler.count_tokens(short_chat(model))
            assert scheduler.loaded() == []
            assert not runner_children(), "nothing was started for a model that cannot fit"
        finally:
            await scheduler.close()

    run(scenario())


def test_spark_run_shows_the_refusal_as_one_line(library: Library, tiny_llama: Path) -> None:
    model = library.add_local(tiny_llama).id
    estimate = estimate_for(library, model, load_settings(max_ram="1MiB"))
    env = dict(os.environ, SPARK_MAX_RAM="1MiB", COLUMNS="1000")  # wide, so the line is not wrapped
    out = subprocess.run(
        [sys.executable, "-m", "spark", "run", model, "hello"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1
    assert out.stdout.strip() == ""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [f"Error: {estimate.describe()}; " + lines[0].split("; ", 1)[1]], out.stderr
    assert "cpu: " in lines[0] and "max_ram 1MiB" in lines[0]


def test_the_http_api_answers_a_refusal_with_its_own_status(tmp_path: Path, tiny_llama: Path) -> None:
    from server.helpers import live_server, openai_error, server_settings

    settings = server_settings(tmp_path / "home", SPARK_MAX_RAM="1MiB")
    with Library(settings) as lib:
        model = lib.add_local(tiny_llama).id
        estimate = estimate_for(lib, model, settings)
    with live_server(settings) as live, live.http() as http:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        error = openai_error(http.post("/v1/chat/completions", json=body), 507)
        assert error["code"] == "placement_refused"
        assert error["message"].startswith(estimate.describe() + "; cpu: ")
        assert live.runners() == []


# --- eviction and waiting -------------------------------------------------------


def test_memory_for_one_model_alternates_between_two(
    library: Library, tiny_llama: Path, tiny_llama_tools: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = library.add_local(tiny_llama).id
    b = library.add_local(tiny_llama_tools, model_id="tiny-b").id
    base = load_settings()
    larger = max(estimate_for(library, m, base).total_bytes for m in (a, b))
    settings = load_settings(max_ram=str(larger * 3 // 2))  # one fits, two do not
    caplog.set_level(logging.INFO, logger="spark.runners")

    async def scenario() -> None:
        scheduler = Scheduler(settings, library)
        try:
            pids = {}
            for model, other in ((a, None), (b, a), (a, b)):
                assert isinstance(final(await collect(scheduler.stream(short_chat(model)))), Done)
                assert [s.model for s in scheduler.loaded()] == [model]
                pids[model] = state_of(scheduler, model).pid
                if other is not None:
                    assert is_gone(pids[other]), f"{other} was unloaded to make room for {model}"
            assert f"evicted to make room for {b}" in caplog.text
        finally:
            await scheduler.close()

    run(scenario())


def test_max_loaded_models_unloads_the_least_recently_used(
    library: Library, tiny_llama: Path, tiny_llama_tools: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="spark.runners")
    a = library.add_local(tiny_llama).id
    b = library.add_local(tiny_llama_tools, model_id="tiny-b").id

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(max_loaded_models=1), library)
        try:
            await collect(scheduler.stream(short_chat(a)))
            pid_a = state_of(scheduler, a).pid
            await collect(scheduler.stream(short_chat(b)))
            assert [s.model for s in scheduler.loaded()] == [b]
            assert pid_a is not None and is_gone(pid_a)
            assert f"evicted to make room for {b}" in caplog.text and "max_loaded_models is 1" in caplog.text
            await collect(scheduler.stream(short_chat(a)))
            assert [s.model for s in scheduler.loaded()] == [a]
        finally:
            await scheduler.close()

    run(scenario())


def test_a_busy_model_is_never_unloaded_the_other_waits_for_it(
    library: Library, slow_model: str, slow_llama: Path, tiny_llama: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="spark.runners")
    tiny = library.add_local(tiny_llama).id
    base = load_settings()
    slow_bytes = estimate_for(library, slow_model, base).total_bytes
    tiny_bytes = estimate_for(library, tiny, base).total_bytes
    settings = load_settings(max_ram=str(slow_bytes + tiny_bytes // 2), load_wait="2s")

    async def scenario() -> None:
        scheduler = Scheduler(settings, library)
        long_stream = scheduler.stream(long_chat(slow_llama, slow_model))
        try:
            await first_text(long_stream)
            slow_state = state_of(scheduler, slow_model)
            assert slow_state.slots_busy == 1 and slow_state.unloads_in is None
            # the premise: next to the busy model there is no room for the other one
            assert settings.max_ram_bytes is not None
            assert settings.max_ram_bytes - slow_state.device_bytes["cpu"] < tiny_bytes

            # waits for the busy model up to load_wait, then is refused as overloaded (a client tries
            # again later), with the arithmetic
            started = monotonic()
            with pytest.raises(Overloaded) as e:
                await collect(scheduler.stream(short_chat(tiny)))
            assert monotonic() - started >= 2.0
            assert f"({slow_model} busy)" in e.value.message
            assert "waited 2 s for busy models (SPARK_LOAD_WAIT)" in e.value.message
            assert e.value.message.startswith(estimate_for(library, tiny, settings).describe())
            # the busy model was left alone and is still generating
            await first_text(long_stream)
            assert state_of(scheduler, slow_model).pid == slow_state.pid

            # a load nobody waits for any more gives up (and lets other loads go ahead)
            gone = asyncio.create_task(collect(scheduler.stream(short_chat(tiny))))
            await wait_until(lambda: caplog.text.count(f"{tiny} waits up to 2 s") == 2, what="the wait")
            gone.cancel()
            await wait_until(lambda: "every request for it went away" in caplog.text, what="the load to give up")

            # a request that comes while the model is busy is served once it is done
            waiting = asyncio.create_task(collect(scheduler.stream(short_chat(tiny))))
            await wait_until(lambda: caplog.text.count(f"{tiny} waits up to 2 s") == 3, what="it to wait")
            assert not waiting.done()
            await long_stream.aclose()  # the long request ends (as when its client goes away)
            assert isinstance(final(await waiting), Done)
            assert [s.model for s in scheduler.loaded()] == [tiny]
            assert slow_state.pid is not None and is_gone(slow_state.pid)
        finally:
            await long_stream.aclose()
            await scheduler.close()

    run(scenario())


# --- keep-alive and queue -------------------------------------------------------


def test_keep_alive_from_the_request_or_the_settings(library: Library, tiny_llama: Path) -> None:
    model = library.add_local(tiny_llama).id

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(keep_alive="1s"), library)
        try:
            # negative: kept loaded, well past the server's keep_alive
            await collect(scheduler.stream(with_keep_alive(short_chat(model), -1)))
            state = state_of(scheduler, model)
            assert state.keep_alive == -1 and state.unloads_in is None and state.idle_seconds is not None
            await asyncio.sleep(2.5)
            assert state_of(scheduler, model).pid == state.pid

            # a later request's keep_alive wins: 2 s, then it is unloaded
            await collect(scheduler.stream(with_keep_alive(short_chat(model), 2)))
            unloads_in = state_of(scheduler, model).unloads_in
            assert unloads_in is not None and 0 < unloads_in <= 2
            await wait_until(lambda: not scheduler.loaded(), timeout=10, what="the 2 s keep-alive")
            assert state.pid is not None
            await wait_until(lambda: is_gone(state.pid), what="the runner process to end")

            # 0: unloaded right after the request
            await collect(scheduler.stream(with_keep_alive(short_chat(model), 0)))
            await wait_until(lambda: not scheduler.loaded(), timeout=3, what="keep_alive 0")

            # none given: the server's keep_alive (1 s)
            await collect(scheduler.stream(short_chat(model)))
            assert state_of(scheduler, model).keep_alive == 1.0
            await wait_until(lambda: not scheduler.loaded(), timeout=10, what="the server's keep-alive")

            with pytest.raises(InvalidRequest) as e:
                await collect(scheduler.stream(with_keep_alive(short_chat(model), float("nan"))))
            assert e.value.param == "keep_alive"
        finally:
            await scheduler.close()

    run(scenario())


def test_a_new_keep_alive_setting_applies_to_the_models_that_kept_the_old_one(
    library: Library, tiny_llama: Path
) -> None:
    model, other = library.add_local(tiny_llama).id, library.add_local(tiny_llama, model_id="other").id

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(keep_alive="1h"), library)
        try:
            await collect(scheduler.stream(short_chat(model)))  # the server's keep_alive
            await collect(scheduler.stream(with_keep_alive(short_chat(other), 7200)))  # its own
            scheduler.use_settings(load_settings(keep_alive="1s"))  # an admin lowers it to free memory
            await wait_until(lambda: model not in {s.model for s in scheduler.loaded()}, 10, "the new keep-alive")
            assert state_of(scheduler, other).keep_alive == 7200, "a request's own keep-alive stays"
        finally:
            await scheduler.close()

    run(scenario())


def test_past_the_queue_bound_a_request_is_refused_at_once(library: Library, slow_model: str, slow_llama: Path) -> None:
    async def scenario() -> None:
        scheduler = Scheduler(load_settings(max_queue=1), library)
        first = scheduler.stream(long_chat(slow_llama, slow_model))
        second = asyncio.create_task(collect(scheduler.stream(long_chat(slow_llama, slow_model))))
        try:
            await first_text(first)
            await wait_until(lambda: state_of(scheduler, slow_model).queued == 1, what="the second request to queue")
            state = state_of(scheduler, slow_model)
            assert (state.slots_busy, state.n_parallel, state.queued) == (1, 1, 1)

            started = monotonic()
            with pytest.raises(Overloaded) as e:
                await collect(scheduler.stream(short_chat(slow_model)))
            assert monotonic() - started < 1.0, "refused at once, not after waiting"
            assert e.value.message.startswith(f"The model {slow_model} has 1 requests waiting (SPARK_MAX_QUEUE=1)")
            with pytest.raises(Overloaded):  # the same refusal, without starting the request
                scheduler.check(short_chat(slow_model))
            with pytest.raises(ModelNotFound):
                scheduler.check(short_chat("no-such-model"))
            assert not second.done(), "the queued request still waits"
        finally:
            await first.aclose()
            second.cancel()
            await asyncio.gather(second, return_exceptions=True)
            await scheduler.close()

    run(scenario())


# --- settings changes -----------------------------------------------------------


def test_changed_settings_reload_the_model_once(
    library: Library, tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = library.add_local(tiny_llama).id
    starts: list[tuple[int, int]] = []
    real_start = RunnerProcess.start

    async def counting_start(self: RunnerProcess) -> None:
        starts.append((self.options.n_ctx, self.options.n_parallel))
        await real_start(self)

    monkeypatch.setattr(RunnerProcess, "start", counting_start)

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(parallel=1), library)
        try:
            await collect(scheduler.stream(short_chat(model)))
            old_pid = state_of(scheduler, model).pid
            assert state_of(scheduler, model).reason == "first request"

            library.update_settings(model, ModelSettings(context_length=256, parallel=2))
            results = await asyncio.gather(*(collect(scheduler.stream(short_chat(model, n=3))) for _ in range(3)))
            assert all(isinstance(final(events), Done) for events in results)
            assert starts == [(512, 1), (256, 2)], "one reload for three requests"
            state = state_of(scheduler, model)
            assert (state.n_ctx, state.n_parallel) == (256, 2)
            assert state.reason == "settings changed: n_ctx 512 -> 256, n_parallel 1 -> 2"
            assert old_pid is not None and is_gone(old_pid)

            await collect(scheduler.stream(short_chat(model)))
            assert len(starts) == 2, "unchanged settings: no reload"
        finally:
            await scheduler.close()

    run(scenario())


def test_a_reload_lets_running_requests_finish_on_the_old_runner(
    library: Library, slow_model: str, slow_llama: Path
) -> None:
    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        long_stream = scheduler.stream(long_chat(slow_llama, slow_model))
        try:
            await first_text(long_stream)
            old = state_of(scheduler, slow_model)
            sampling = library.get(slow_model).settings.sampling
            library.update_settings(
                slow_model, ModelSettings(context_length=SLOW_CONTEXT, parallel=2, sampling=sampling)
            )

            # the new request is served by a new runner ...
            assert isinstance(final(await collect(scheduler.stream(short_chat(slow_model)))), Done)
            states = {s.pid: s for s in scheduler.loaded()}
            assert len(states) == 2 and old.pid in states
            assert states[old.pid].reason == "stopping after its requests: settings changed: n_parallel 1 -> 2"
            [new] = [s for pid, s in states.items() if pid != old.pid]
            assert new.n_parallel == 2 and new.reason == "settings changed: n_parallel 1 -> 2"
            # ... while the old one goes on with the request it had
            await first_text(long_stream)
            assert old.pid is not None and not is_gone(old.pid)

            await long_stream.aclose()
            await wait_until(lambda: is_gone(old.pid), what="the old runner to stop")  # type: ignore[arg-type]
            assert [s.pid for s in scheduler.loaded()] == [new.pid]
        finally:
            await long_stream.aclose()
            await scheduler.close()

    run(scenario())


# --- measured memory ------------------------------------------------------------


def test_measured_memory_is_close_to_the_estimate_and_trusted(library: Library, slow_llama: Path) -> None:
    """Same margin as tests/placement/test_measured.py: 20 % or 8 MiB, whichever is larger."""
    model = library.add_local(slow_llama).id
    # a prompt longer than a micro-batch touches all of the compute buffer, as the estimate assumes
    prompt = ChatRequest(
        model=model,
        messages=[Message(role="user", content="the quick brown fox " * 150)],
        sampling=SamplingParams(max_tokens=2),
    )

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        try:
            assert await scheduler.count_tokens(prompt) > 512
            await collect(scheduler.stream(prompt))
            await asyncio.sleep(3 * HEARTBEAT_SECONDS)  # a heartbeat after the request
            await wait_until(lambda: state_of(scheduler, model).measured_bytes is not None, what="a measurement")
            state = state_of(scheduler, model)
            measured = state.measured_bytes
            assert measured is not None and measured > 0
            assert state.estimate_bytes > 16 * MIB, "large enough for the comparison to mean something"
            assert abs(state.estimate_bytes - measured) <= max(0.20 * measured, 8 * MIB), state
            # placement counts the measurement from now on, plus the runner process's allowance
            assert state.device_bytes == {"cpu": measured + RUNNER_BYTES}
            assert state.devices == ["cpu"] and state.placement.startswith("cpu, ")
        finally:
            await scheduler.close()

    run(scenario())


@pytest.fixture
def grown_rss(monkeypatch: pytest.MonkeyPatch) -> int:
    """Runners report 300 MiB more resident memory than they use (a model that outgrew its
    estimate); the extra bytes."""
    grown = 300 * MIB
    reported = RunnerProcess.rss_bytes.fget
    assert reported is not None
    monkeypatch.setattr(RunnerProcess, "rss_bytes", property(lambda p: reported(p) + grown))
    return grown


def test_a_runner_killed_for_memory_mid_answer_names_memory_and_stays_counted_at_its_peak(
    library: Library, slow_model: str, slow_llama: Path, grown_rss: int
) -> None:
    """SIGKILL during decode, as the OOM killer sends it: the answer ends with an error naming memory,
    the next request is answered by a fresh runner, and placement keeps counting the memory the
    killed one reached (so other loads are planned around it)."""
    grown = grown_rss

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        try:
            stream = scheduler.stream(long_chat(slow_llama, slow_model))
            await first_text(stream)
            await wait_until(
                lambda: (state_of(scheduler, slow_model).measured_bytes or 0) > grown, what="a measurement"
            )
            killed = state_of(scheduler, slow_model).pid
            assert killed is not None
            os.kill(killed, signal.SIGKILL)
            failed = final(await collect(stream))
            assert isinstance(failed, Failed) and "out-of-memory killer" in failed.error.message, failed

            assert isinstance(final(await collect(scheduler.stream(short_chat(slow_model)))), Done)
            state = state_of(scheduler, slow_model)
            assert state.pid not in (None, killed) and is_gone(killed)
            assert (state.measured_bytes or 0) > grown, "the peak before the kill is still counted"
            assert state.device_bytes["cpu"] > state.estimate_bytes + grown // 2
        finally:
            await scheduler.close()

    run(scenario())


def test_a_model_that_outgrew_its_estimate_is_planned_at_its_measured_size_next_time(
    library: Library, tiny_llama: Path, grown_rss: int
) -> None:
    """A runner that grew past its estimate (the case of one the OOM killer ends) teaches the planner:
    the model's next load counts what it measured, so a limit it no longer fits refuses it at once,
    with the measurement in the arithmetic, instead of starting a runner to be killed again."""
    model = library.add_local(tiny_llama).id
    estimate = estimate_for(library, model, load_settings())
    grown = grown_rss

    async def scenario() -> None:
        scheduler = Scheduler(load_settings(), library)
        try:
            await collect(scheduler.stream(short_chat(model)))
            await wait_until(
                lambda: (state_of(scheduler, model).measured_bytes or 0) > grown, what="a measurement", timeout=20
            )
            measured = state_of(scheduler, model).measured_bytes
            assert measured is not None
            assert await scheduler.unload(model)

            # with room for the estimate but not for what it measured, the next load is refused
            scheduler.use_settings(load_settings(max_ram=str(estimate.total_bytes + grown // 2)))
            with pytest.raises(PlacementRefused) as e:
                await collect(scheduler.stream(short_chat(model)))
            assert "more measured when it last ran" in e.value.message, e.value.message
            assert not runner_children(), "no runner was started to be killed again"

            # with room, it loads, planned at the measured size
            scheduler.use_settings(load_settings())
            assert isinstance(final(await collect(scheduler.stream(short_chat(model)))), Done)
            assert state_of(scheduler, model).estimate_bytes >= measured
        finally:
            await scheduler.close()

    run(scenario())


def test_estimate_reads_ff_width_and_swa_keys_from_the_file(tmp_path: Path) -> None:
    def write(name: str, **keys: object) -> Path:
        path = tmp_path / name
        w = gguf.GGUFWriter(str(path), "gemma2")
        w.add_block_count(4)
        w.add_embedding_length(64)
        w.add_feed_forward_length(96)
        for key, value in keys.items():
            if isinstance(value, list):
                w.add_array(f"gemma2.{key}", value)
            else:
                w.add_uint32(f"gemma2.{key}", value)  # type: ignore[arg-type]
        w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    plain = read_gguf_info(write("plain.gguf"))
    assert plain.n_ff == 96 and plain.sliding_window is None and plain.sliding_window_pattern is None
    assert model_shape(plain).n_ff == 96
    assert model_shape(plain).sliding_window == 4096, "gemma2's default window when the file names none"

    moe = read_gguf_info(
        write("moe.gguf", expert_feed_forward_length=32, expert_used_count=4, expert_shared_feed_forward_length=48)
    )
    assert moe.n_ff == 32 * 4 + 48

    swa = read_gguf_info(
        write(
            "swa.gguf",
            **{"attention.sliding_window": 0, "attention.sliding_window_pattern": [True, True, False, False]},
        )
    )
    assert swa.sliding_window == 0 and swa.sliding_window_pattern == [True, True, False, False]
    assert model_shape(swa).swa_layers == [True, True, False, False]
    period = read_gguf_info(
        write("period.gguf", **{"attention.sliding_window": 128, "attention.sliding_window_pattern": 4})
    )
    assert period.sliding_window_pattern == 4
    assert model_shape(period).swa_layers == [True, True, True, False]
