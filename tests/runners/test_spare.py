"""The warm spare runner with real processes: taken by a cold start, replaced, dead, stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from runners.helpers import collect, final, is_gone, run, runner_children, short_chat, wait_until
from spark.runners import spare as spare_module
from spark.runners.spare import SpareRunner
from spark.runners.supervisor import RunnerProcess
from spark.settings import Settings, load_settings
from spark.types import Done, LoadOptions

pytestmark = pytest.mark.slow  # a spare and a runner, each a process


def tiny_options(path: Path) -> LoadOptions:
    return LoadOptions(model_id="tiny", path=str(path), n_ctx=256, n_parallel=1, n_threads=1)


def _policies(pid: int) -> dict[int, int]:
    """The scheduling policy of each thread of `pid` (0: SCHED_OTHER, 5: SCHED_IDLE)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = int(fields[38])  # field 41 of stat, counted after the command name
    return out


async def _ready_spare(spares: SpareRunner) -> int:
    await wait_until(lambda: spares.pid is not None, 30, "the spare runner to be warm")
    assert spares.pid is not None
    return spares.pid


@pytest.mark.skipif(sys.platform != "linux", reason="/proc and per-thread scheduling are Linux's")
def test_a_cold_start_takes_the_warm_spare_and_a_new_one_replaces_it(tiny_llama: Path) -> None:
    settings = load_settings()

    async def scenario() -> None:
        spares = SpareRunner(settings)
        spares.enable(True)
        first = await _ready_spare(spares)
        maps = Path(f"/proc/{first}/maps").read_text()
        assert "libllama" in maps, "the spare has llama.cpp loaded before any model is asked for"
        assert spares.warm_rss_bytes is not None and spares.warm_rss_bytes > 10_000_000
        # the idle-priority warm-up thread ends just after the spare connects
        await wait_until(lambda: set(_policies(first).values()) == {0}, 5, "only normal-priority threads")

        runner = RunnerProcess(tiny_options(tiny_llama), settings, spare=spares)
        await runner.start()
        assert runner.pid == first, "the load went to the spare"
        done = final(await collect(runner.stream(short_chat("tiny", n=4))))
        assert isinstance(done, Done) and done.usage.completion_tokens == 4
        assert set(_policies(first).values()) == {0}, "every thread running the model has normal priority"

        second = await _ready_spare(spares)
        assert second != first, "a new spare was started once the first was taken"

        await runner.stop()
        await spares.close()
        assert spares.pid is None
        assert is_gone(first) and is_gone(second)
        assert not runner_children()

    run(scenario())


def test_a_dead_spare_is_not_used_and_the_load_starts_afresh(tiny_llama: Path) -> None:
    settings = load_settings()

    async def scenario() -> None:
        spares = SpareRunner(settings)
        spares.enable(True)
        dead = await _ready_spare(spares)
        os.kill(dead, signal.SIGKILL)
        await wait_until(lambda: not psutil.pid_exists(dead) or is_gone(dead) or _zombie(dead), 10, "the kill")

        runner = RunnerProcess(tiny_options(tiny_llama), settings, spare=spares)
        await runner.start()
        assert runner.pid is not None and runner.pid != dead
        done = final(await collect(runner.stream(short_chat("tiny", n=3))))
        assert isinstance(done, Done) and done.usage.completion_tokens == 3
        await wait_until(lambda: is_gone(dead), 10, "the dead spare to be reaped")

        replacement = await _ready_spare(spares)
        assert replacement not in (dead, runner.pid)
        await runner.stop()
        await spares.close()
        assert not runner_children()

    run(scenario())


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_turning_spares_off_stops_the_spare_and_loads_start_their_own_process(tiny_llama: Path) -> None:
    settings = load_settings()

    async def scenario() -> None:
        spares = SpareRunner(settings)
        spares.enable(True)
        pid = await _ready_spare(spares)
        spares.enable(False)
        assert spares.pid is None
        await wait_until(lambda: is_gone(pid), 10, "the spare to stop")

        runner = RunnerProcess(tiny_options(tiny_llama), settings, spare=spares)
        await runner.start()
        assert runner.pid != pid
        await asyncio.sleep(0.3)
        assert spares.pid is None and len(runner_children()) == 1, "no new spare while they are off"
        await runner.stop()
        await spares.close()
        assert not runner_children()

    run(scenario())


def test_a_spare_that_cannot_start_is_logged_and_loads_still_work(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="spark.runners")

    async def broken(socket_path: Path, *, spare: bool = False) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys; print('no llama.cpp here'); sys.exit(3)",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )

    monkeypatch.setattr(spare_module, "start_runner_process", broken)
    settings: Settings = load_settings()

    async def scenario() -> None:
        spares = SpareRunner(settings)
        spares.enable(True)
        await wait_until(lambda: "could not start" in caplog.text, 10, "the spare's failure")
        assert "exit 3" in caplog.text and "no llama.cpp here" in caplog.text
        assert spares.pid is None

        runner = RunnerProcess(tiny_options(tiny_llama), settings, spare=spares)
        await runner.start()
        done = final(await collect(runner.stream(short_chat("tiny", n=2))))
        assert isinstance(done, Done)
        await runner.stop()
        await spares.close()
        assert not runner_children()

    run(scenario())
