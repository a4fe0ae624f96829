"""RunnerProcess with real runner processes: streaming, heartbeats, crashes, hangs, disconnects."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import psutil
import pytest

import tiny_gguf
from runners.helpers import (
    collect,
    control_token_bias,
    final,
    is_gone,
    long_chat,
    run,
    runner_children,
    short_chat,
    slow_options,
    text_of,
    wait_until,
)
from spark.errors import InvalidRequest, ModelFileError, RunnerFailed
from spark.runners.retries import Retry
from spark.runners.supervisor import RunnerProcess
from spark.settings import load_settings
from spark.types import ChatRequest, Done, Event, Failed, LoadOptions, Message, SamplingParams, SlotInfo, TextDelta


def tiny_options(path: Path, **overrides: object) -> LoadOptions:
    values: dict[str, object] = {"model_id": "tiny", "path": str(path), "n_ctx": 256, "n_parallel": 1, "n_threads": 1}
    values.update(overrides)
    return LoadOptions(**values)  # type: ignore[arg-type]


def test_streams_a_chat_heartbeats_and_stops_cleanly(tiny_llama: Path) -> None:
    settings = load_settings()

    async def scenario() -> None:
        runner = RunnerProcess(tiny_options(tiny_llama, n_parallel=2), settings)
        await runner.start()
        pid = runner.pid
        assert pid is not None and runner.status == "ready"
        assert runner.info is not None and runner.info.n_slots == 2 and runner.info.n_ctx_per_slot == 256

        events = await collect(runner.stream(short_chat("tiny", n=8)))
        done = final(events)
        assert isinstance(done, Done) and done.finish_reason == "length"
        assert done.usage.completion_tokens == 8
        slot = next(e for e in events if isinstance(e, SlotInfo))
        assert text_of(events)
        assert await runner.count_tokens(short_chat("tiny")) == slot.prompt_tokens == done.usage.prompt_tokens

        # two at once share the context (two slots), each stream gets only its own events
        a, b = await asyncio.gather(
            collect(runner.stream(short_chat("tiny", n=5, text="one"))),
            collect(runner.stream(short_chat("tiny", n=9, text="two"))),
        )
        assert final(a).usage.completion_tokens == 5  # type: ignore[union-attr]
        assert final(b).usage.completion_tokens == 9  # type: ignore[union-attr]

        # heartbeats report the runner's measured memory and that it is idle
        await wait_until(lambda: runner.rss_bytes > 10_000_000 and runner.busy == 0, 15, "a heartbeat")
        assert runner.in_flight == 0

        await runner.stop()
        assert runner.status == "stopped" and runner.pid is None
        assert is_gone(pid), "the runner was reaped (no zombie)"
        assert not runner_children()
        run_dir = settings.run_dir
        assert not run_dir.exists() or not list(run_dir.iterdir()), "no socket left behind"
        with pytest.raises(RunnerFailed, match="unloaded"):
            await collect(runner.stream(short_chat("tiny")))

    run(scenario())


def test_unreadable_model_file_is_a_clear_error_not_a_hang(tmp_path: Path, tiny_llama: Path) -> None:
    settings = load_settings()
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"this is not a GGUF file at all" * 100)
    truncated = tiny_gguf.write_truncated(tiny_llama, tmp_path / "truncated.gguf")

    async def scenario() -> None:
        for path in (garbage, truncated, tmp_path / "missing.gguf"):
            runner = RunnerProcess(tiny_options(path), settings)
            with pytest.raises(ModelFileError) as caught:
                await runner.start()
            assert path.name in caught.value.message
            assert runner.status == "failed" and runner.pid is None
        assert not runner_children()

    run(scenario(), timeout=30)


def test_runner_killed_while_loading_reports_it(tiny_llama: Path) -> None:
    async def scenario() -> None:
        runner = RunnerProcess(tiny_options(tiny_llama), load_settings())
        start = asyncio.create_task(runner.start())
        await wait_until(lambda: runner.pid is not None, 10, "the runner to spawn")
        os.kill(runner.pid, signal.SIGKILL)  # type: ignore[arg-type]
        with pytest.raises(RunnerFailed, match=r"killed \(signal 9, SIGKILL\).*while loading"):
            await start
        assert not runner_children()

    run(scenario())


def test_load_timeout(tiny_llama: Path) -> None:
    async def scenario() -> None:
        runner = RunnerProcess(tiny_options(tiny_llama), load_settings(load_timeout="50ms"))
        with pytest.raises(RunnerFailed, match=r"did not load the model within 0\.05 s"):
            await runner.start()
        assert not runner_children()

    run(scenario())


async def _stream_until_output(runner: RunnerProcess, request: object) -> tuple[asyncio.Task[list[Event]], list[Event]]:
    """Start streaming `request` in a task; return once it has received text."""
    events: list[Event] = []
    got_text = asyncio.Event()

    async def consume() -> list[Event]:
        async for event in runner.stream(request):  # type: ignore[arg-type]
            events.append(event)
            if isinstance(event, TextDelta):
                got_text.set()
        return events

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_text.wait(), 20)
    return task, events


async def _queue_behind(runner: RunnerProcess, request: object, in_flight: int) -> asyncio.Task[list[Event]]:
    """Submit `request` and wait until the runner has it (parallel=1: it waits for the slot)."""
    task = asyncio.create_task(collect(runner.stream(request)))  # type: ignore[arg-type]
    await wait_until(lambda: runner.in_flight == in_flight, 5, "the request to be submitted")
    # the runner's own heartbeat counts it: it reached the engine's queue
    await wait_until(lambda: runner.busy == in_flight, 5, "the runner to report the queued request")
    return task


def test_kill_9_fails_streamed_requests_retries_the_rest_and_restarts(slow_llama: Path) -> None:
    async def scenario() -> None:
        runner = RunnerProcess(slow_options(slow_llama), load_settings())
        await runner.start()
        old_pid = runner.pid
        assert old_pid is not None

        streaming, _ = await _stream_until_output(runner, long_chat(slow_llama))
        queued = await _queue_behind(runner, short_chat("slow", n=4), in_flight=2)
        os.kill(old_pid, signal.SIGKILL)

        streamed = await streaming
        failed = final(streamed)
        assert text_of(streamed), "the client got output before the crash"
        assert isinstance(failed, Failed) and failed.error.code == "runner_failed"
        assert "was killed (signal 9, SIGKILL" in failed.error.message
        # a SIGKILL nobody here sent: most likely memory, unless an operator sent it
        assert "unless someone sent it, the system's out-of-memory killer did" in failed.error.message
        assert "not retried, so that no output comes twice" in failed.error.message

        retried = final(await queued)
        assert isinstance(retried, Done) and retried.usage.completion_tokens == 4, "retried on the new runner"

        assert runner.status == "ready" and runner.restarts == 1
        assert runner.pid is not None and runner.pid != old_pid
        assert is_gone(old_pid), "the killed runner was reaped"
        after = final(await collect(runner.stream(short_chat("slow", n=3))))
        assert isinstance(after, Done) and after.usage.completion_tokens == 3
        await runner.stop()
        assert not runner_children()

    run(scenario())


def test_kill_9_retries_a_whole_answer_that_had_output(slow_llama: Path) -> None:
    """A whole answer's consumer sends nothing before the end: killed after it made output, it runs
    again, and the consumer hears of the retry between the two attempts' events."""

    async def scenario() -> None:
        # no drafts: they follow measured timings, and a batch of drafts rounds differently from one token
        runner = RunnerProcess(slow_options(slow_llama, speculative=False), load_settings())
        await runner.start()
        old_pid = runner.pid
        assert old_pid is not None
        request = ChatRequest(
            model="slow",
            messages=[Message(role="user", content="go on")],
            sampling=SamplingParams(max_tokens=1000, temperature=0.0, logit_bias=control_token_bias(slow_llama)),
        )
        uninterrupted = await collect(runner.stream(request))

        seen: list[Event | Retry] = []
        got_text = asyncio.Event()

        async def consume() -> None:
            async for event in runner.stream(request, whole=True, on_retry=seen.append):
                seen.append(event)
                if isinstance(event, TextDelta):
                    got_text.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(got_text.wait(), 20)
        os.kill(old_pid, signal.SIGKILL)
        await task

        retries = [i for i, e in enumerate(seen) if isinstance(e, Retry)]
        assert len(retries) == 1, "retried once"
        retry = seen[retries[0]]
        assert isinstance(retry, Retry) and retry.attempt == 2 and "was killed (signal 9, SIGKILL" in retry.reason
        before = [e for e in seen[: retries[0]] if not isinstance(e, Retry)]
        after = [e for e in seen[retries[0] + 1 :] if not isinstance(e, Retry)]
        assert 0 < retry.discarded == sum(isinstance(e, TextDelta) for e in before) < 1000, "killed mid-answer"
        done = final(after)
        assert isinstance(done, Done) and done.usage.completion_tokens == 1000
        assert text_of(after) == text_of(uninterrupted), "the greedy answer is the same as one never interrupted"
        assert runner.status == "ready" and runner.restarts == 1 and runner.pid != old_pid
        await runner.stop()

    run(scenario())


def test_hung_runner_is_killed_and_restarted(slow_llama: Path, tiny_llama: Path) -> None:
    async def scenario() -> None:
        settings = load_settings(hang_timeout="2s")
        runner = RunnerProcess(slow_options(slow_llama), settings)
        other = RunnerProcess(tiny_options(tiny_llama), settings)
        await asyncio.gather(runner.start(), other.start())
        old_pid = runner.pid
        assert old_pid is not None

        streaming, _ = await _stream_until_output(runner, long_chat(slow_llama))
        queued = await _queue_behind(runner, short_chat("slow", n=4), in_flight=2)
        os.kill(old_pid, signal.SIGSTOP)  # alive, holding its socket, making no progress

        # another model keeps answering while this one hangs and restarts
        while not streaming.done():
            assert isinstance(final(await collect(other.stream(short_chat("tiny", n=2)))), Done)
        assert other.restarts == 0
        await other.stop()

        failed = final(await streaming)
        assert isinstance(failed, Failed) and failed.error.code == "runner_failed"
        # the stall as the watchdog saw it: the 2 s limit, or a little more on a busy machine
        stalled = re.search(r"hung \(no progress for (\d+) s with work in flight\)", failed.error.message)
        assert stalled is not None and 2 <= int(stalled.group(1)) <= 5
        retried = final(await queued)
        assert isinstance(retried, Done) and retried.usage.completion_tokens == 4

        assert runner.pid not in (None, old_pid) and runner.restarts == 1
        assert is_gone(old_pid)
        after = final(await collect(runner.stream(short_chat("slow", n=3))))
        assert isinstance(after, Done)
        await runner.stop()
        assert not runner_children()

    run(scenario())


def _unsendable(model_id: str) -> ChatRequest:
    """A request whose frame msgpack cannot encode: a token id beyond 64 bits (the APIs refuse one)."""
    request = short_chat(model_id)
    return msgspec.structs.replace(request, sampling=msgspec.structs.replace(request.sampling, logit_bias={2**70: 1.0}))


def test_a_request_that_cannot_be_sent_is_refused_and_leaves_nothing_behind(tiny_llama: Path) -> None:
    async def scenario() -> None:
        runner = RunnerProcess(tiny_options(tiny_llama), load_settings(hang_timeout="1s"))
        await runner.start()
        with pytest.raises(InvalidRequest, match="cannot be sent to the model's runner"):
            await collect(runner.stream(_unsendable("tiny")))
        with pytest.raises(InvalidRequest, match="cannot be sent to the model's runner"):
            await runner.count_tokens(_unsendable("tiny"))
        assert runner.in_flight == 0, "nothing waits on an answer that never comes"
        await asyncio.sleep(2)  # past the hang timeout: nothing in flight, so no restart
        assert runner.restarts == 0 and runner.status == "ready"
        assert isinstance(final(await collect(runner.stream(short_chat("tiny", n=2)))), Done)
        await runner.stop()

    run(scenario())


def test_a_request_that_cannot_be_sent_again_after_a_crash_fails_alone(slow_llama: Path) -> None:
    async def scenario() -> None:
        runner = RunnerProcess(slow_options(slow_llama), load_settings())
        await runner.start()
        old_pid = runner.pid
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)
        await wait_until(lambda: runner.status == "restarting", 5, "the crash to be noticed")
        # sent while the runner restarts: both wait for the new process
        bad = asyncio.create_task(collect(runner.stream(_unsendable("slow"))))
        good = asyncio.create_task(collect(runner.stream(short_chat("slow", n=3))))
        refused = final(await bad)
        assert isinstance(refused, Failed) and refused.error.code == "invalid_request"
        assert "cannot be sent to the model's runner" in refused.error.message
        done = final(await good)
        assert isinstance(done, Done) and done.usage.completion_tokens == 3, "the other request went on"
        assert runner.status == "ready" and runner.restarts == 1 and runner.in_flight == 0
        await runner.stop()

    run(scenario())


def test_closing_or_cancelling_a_stream_cancels_it_in_the_runner(slow_llama: Path) -> None:
    async def scenario() -> None:
        runner = RunnerProcess(slow_options(slow_llama), load_settings())
        await runner.start()
        await wait_until(lambda: runner.rss_bytes > 0, 5, "the first heartbeat")

        # the consumer stops iterating (aclose): the runner frees the only slot
        stream = runner.stream(long_chat(slow_llama))
        async for event in stream:
            if isinstance(event, TextDelta):
                break
        await wait_until(lambda: runner.busy == 1, 5, "the runner to report the request")
        await stream.aclose()
        assert runner.in_flight == 0
        await wait_until(lambda: runner.busy == 0, 5, "the runner to drop the cancelled request")
        done = final(await collect(runner.stream(short_chat("slow", n=4))))
        assert isinstance(done, Done) and done.usage.completion_tokens == 4

        # the consuming task is cancelled (an HTTP client went away): same outcome
        task, _ = await _stream_until_output(runner, long_chat(slow_llama))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert runner.in_flight == 0
        done = final(await collect(runner.stream(short_chat("slow", n=4))))
        assert isinstance(done, Done) and done.usage.completion_tokens == 4
        await wait_until(lambda: runner.busy == 0, 5, "the runner to be idle")
        assert runner.restarts == 0
        await runner.stop()

    run(scenario())


def test_gives_up_after_repeated_crashes(tiny_llama: Path) -> None:
    async def scenario() -> None:
        runner = RunnerProcess(tiny_options(tiny_llama), load_settings())
        await runner.start()
        for crash in range(1, 4):
            pid = runner.pid
            assert pid is not None
            if crash == 3:
                await wait_until(lambda: runner.rss_bytes > 0, 10, "a heartbeat measuring the process")
            os.kill(pid, signal.SIGKILL)
            if crash < 3:
                restarted = lambda old=pid: runner.status == "ready" and runner.pid not in (None, old)  # noqa: E731
                await wait_until(restarted, 20, "a restart")
                assert runner.restarts == crash
        await wait_until(lambda: runner.status == "failed", 10, "the supervisor to give up")
        assert runner.pid is None and (runner.busy, runner.rss_bytes) == (0, 0), "no process: nothing to show"
        with pytest.raises(RunnerFailed, match="failed 3 times within"):
            await collect(runner.stream(short_chat("tiny")))
        with pytest.raises(RunnerFailed, match="failed 3 times within"):
            await runner.count_tokens(short_chat("tiny"))
        await runner.stop()
        assert not runner_children()

    run(scenario())


def test_stop_ends_running_requests_and_the_process_exits_cleanly(slow_llama: Path) -> None:
    async def scenario() -> None:
        runner = RunnerProcess(slow_options(slow_llama), load_settings())
        await runner.start()
        streaming, _ = await _stream_until_output(runner, long_chat(slow_llama))
        await runner.stop()
        failed = final(await streaming)
        assert isinstance(failed, Failed) and failed.error.code == "runner_failed"
        assert "unloaded" in failed.error.message
        assert runner.returncode == 0, "the runner shut down by itself, it was not killed"
        assert not runner_children()

    run(scenario())


def test_long_run_dir_falls_back_to_a_short_socket_path_and_stale_sockets_go(
    tmp_path: Path, tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    short_tmp = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    long_home = tmp_path / ("h" * 110)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)

    async def scenario() -> None:
        for settings in (load_settings(home=str(long_home)), load_settings()):
            stale = settings.run_dir / f"runner-{dead_pid}-0.sock"
            if len(os.fsencode(stale)) < 100:
                settings.run_dir.mkdir(parents=True, exist_ok=True)
                with socket.socket(socket.AF_UNIX) as s:
                    s.bind(str(stale))  # left behind by a server that died
            runner = RunnerProcess(tiny_options(tiny_llama), settings)
            await runner.start()
            assert isinstance(final(await collect(runner.stream(short_chat("tiny")))), Done)
            await runner.stop()
            assert not stale.exists()
        assert not list(short_tmp.iterdir()), "the fallback socket folder was removed"

    try:
        run(scenario())
    finally:
        shutil.rmtree(short_tmp, ignore_errors=True)


SERVER_SCRIPT = """
import asyncio, sys
from spark.runners.retries import Retry
from spark.runners.supervisor import RunnerProcess
from spark.settings import load_settings
from spark.types import LoadOptions

async def main():
    runner = RunnerProcess(LoadOptions(model_id="tiny", path=sys.argv[1], n_ctx=256, n_threads=1), load_settings())
    start = asyncio.create_task(runner.start())
    while runner.pid is None:
        await asyncio.sleep(0.01)
    if sys.argv[2] == "ready":
        await start
    print(runner.pid, flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


@pytest.mark.parametrize("when", ["loading", "ready"])
def test_runner_exits_when_its_server_dies(tmp_path: Path, tiny_llama: Path, when: str) -> None:
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    command = [sys.executable, str(script), str(tiny_llama), when]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            runner_pid = int(server.stdout.readline())
        finally:
            server.kill()  # SIGKILL: the server gets no chance to stop its runner
    deadline = time.monotonic() + 15
    while not _exited(runner_pid):
        if time.monotonic() > deadline:
            os.kill(runner_pid, signal.SIGKILL)
            pytest.fail(f"the runner outlived its server ({when})")
        time.sleep(0.05)


def _exited(pid: int) -> bool:
    """Gone, or a zombie waiting for an init process that may not reap orphans."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True
