"""The server's warm spare runner over a real port: a cold request uses it, and shutdown stops it."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.helpers import is_gone, runner_children
from server.helpers import live_server, server_settings, wait_for
from spark.library import Library


@pytest.mark.slow  # three runner processes
def test_a_cold_request_runs_on_the_spare_a_new_one_follows_and_shutdown_stops_both(
    tmp_path: Path, tiny_llama: Path, tiny_llama_tools: Path
) -> None:
    settings = server_settings(tmp_path / "home", SPARK_SPARE_RUNNER="true", SPARK_CONTEXT_LENGTH="256")
    with Library(settings) as library:
        chat = library.add_local(tiny_llama).id
        tools = library.add_local(tiny_llama_tools).id
    others = {p.pid for p in runner_children()}  # the package's shared server keeps its runners

    def ours() -> set[int]:
        return {p.pid for p in runner_children()} - others

    with live_server(settings) as live, live.http() as http:
        scheduler = live.state.scheduler
        wait_for(lambda: scheduler.spare_pid is not None, 30, "the spare runner")
        spare = scheduler.spare_pid
        body = {"model": chat, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        r = http.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert live.runner(chat).pid == spare, "the model was loaded by the spare"

        wait_for(lambda: scheduler.spare_pid not in (None, spare), 30, "the next spare runner")
        second = scheduler.spare_pid
        r = http.post("/v1/chat/completions", json=body | {"model": tools})
        assert r.status_code == 200, r.text
        assert live.runner(tools).pid == second, "the next cold model used the next spare"
        wait_for(lambda: scheduler.spare_pid not in (None, second), 30, "a third spare runner")
        third = scheduler.spare_pid
        assert ours() == {live.runner(chat).pid, live.runner(tools).pid, third}  # two models and a spare
    assert third is not None and is_gone(third), "the spare stopped with the server"
    assert not ours(), "no runner outlives the server"
