"""Faults around a running server: a full disk under the request log, a corrupt model file, a model
whose context cannot fit in memory (refused by the planner, or failing in the runner when memory
runs out). Each ends in a clear error for the request concerned, and the server goes on answering."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

import tiny_gguf
from server.helpers import anthropic_error, live_server, openai_error, server_settings
from small_disk import fill, small_disk
from spark.library import Library, ModelSettings
from spark.store.db import Database
from spark.store.keys import KeyTable
from traffic import free_port, stop_server, wait_healthy

CHAT = [{"role": "user", "content": "hi"}]


def test_a_full_disk_under_the_request_log_does_not_stop_requests(tmp_path: Path, tiny_llama: Path) -> None:
    home = tmp_path / "home"
    with small_disk(home, "16m"):
        settings = server_settings(home)
        with Library(settings) as library:
            model = library.add_local(tiny_llama).id
        with live_server(settings) as live, live.http() as http:
            body = {"model": model, "max_tokens": 2, "messages": CHAT}
            assert http.post("/v1/chat/completions", json=body).status_code == 200
            fill(home)
            for _ in range(5):
                answer = http.post("/v1/chat/completions", json=body)
                assert answer.status_code == 200, answer.text
                assert http.post("/v1/chat/completions", json={**body, "stream": True}).status_code == 200
            assert http.get("/v1/models").status_code == 200
            writer = live.state.request_log
            assert writer is not None
            live.state.request_log.flush(10)
            assert writer.dropped > 0, "the log could not be written (the disk is full)"
            (home / "filler").unlink()
            assert http.post("/v1/chat/completions", json=body).status_code == 200


@pytest.mark.parametrize("damage", ["half", "tail-missing", "offset-past-the-end", "offset-misaligned"])
def test_a_corrupt_model_file_is_a_clear_load_error(
    tmp_path: Path, tiny_llama: Path, tiny_bert: Path, damage: str
) -> None:
    """A file whose header is valid but whose tensor data is cut short (as a broken copy leaves it),
    or whose header says a tensor's data lies past the end of the file or off its alignment."""
    broken = tmp_path / "broken.gguf"
    shutil.copyfile(tiny_llama, broken)
    settings = server_settings(tmp_path / "home")
    with Library(settings) as library:
        model = library.add_local(broken, model_id="broken").id
        embed = library.add_local(tiny_bert).id
    # damaged after it was added
    if damage.startswith("offset"):
        tiny_gguf.move_tensor_offset(broken, None if damage == "offset-past-the-end" else 3)
    else:
        data = broken.read_bytes()
        broken.write_bytes(data[: int(len(data) * (0.5 if damage == "half" else 0.9))])
    with live_server(settings) as live, live.http() as http:
        for _ in range(2):  # the same clear error again, not a crash loop
            error = openai_error(http.post("/v1/chat/completions", json={"model": model, "messages": CHAT}), 400)
            assert error["code"] == "model_file_error" and "broken" in error["message"], error
        error = anthropic_error(
            http.post("/v1/messages", json={"model": model, "max_tokens": 2, "messages": CHAT}), 400
        )
        assert "broken" in error["message"]
        assert http.get("/health").status_code == 200
        assert http.post("/v1/embeddings", json={"model": embed, "input": "still fine"}).status_code == 200


def test_a_context_too_large_for_memory_is_refused_with_the_arithmetic(
    tmp_path: Path, tiny_llama: Path, slow_llama: Path
) -> None:
    settings = server_settings(tmp_path / "home", SPARK_MAX_RAM="1GiB")
    with Library(settings) as library:
        huge = library.add_local(slow_llama, model_id="huge-context").id
        library.update_settings(huge, ModelSettings(context_length=16384, parallel=64))  # KV: 4 GiB
        fine = library.add_local(tiny_llama, model_id="fine").id
    with live_server(settings) as live, live.http() as http:
        refused = http.post("/v1/chat/completions", json={"model": huge, "max_tokens": 2, "messages": CHAT})
        error = openai_error(refused, 507)
        assert error["code"] == "placement_refused" and "KV" in error["message"] and "free" in error["message"]
        answer = http.post("/v1/chat/completions", json={"model": fine, "max_tokens": 2, "messages": CHAT})
        assert answer.status_code == 200, answer.text
        assert [r.model for r in live.runners()] == [fine]


ADDRESS_SPACE = 1536 << 20  # the server's and its runners' limit: a runner needs about 450 MiB
# `spark serve` started by a Python that first limits its own address space (inherited by the runners)
LIMITED_SERVE = (
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE}, resource.getrlimit(resource.RLIMIT_AS)[1])); "
    "os.execv(sys.executable, [sys.executable, '-m', 'spark', 'serve', '--port', sys.argv[1]])"
)


@pytest.mark.slow  # a server process of its own
def test_a_context_memory_cannot_hold_fails_its_load_naming_memory(tmp_path: Path, tiny_llama: Path) -> None:
    """The planner lets a 2 GiB KV cache through (the machine has the memory), but the runner's
    allocation fails (its address space is limited): the client hears why, the planner remembers the
    failure (the same load is refused at once), the server goes on."""
    home = tmp_path / "home"
    settings = server_settings(home)
    long_context = 1 << 23  # 8M tokens, one slot: 2 GiB of f16 KV for the tiny model
    path = tiny_gguf.write_tiny_llama(tmp_path / "long.gguf", n_ctx=long_context)
    with Library(settings) as library:
        long = library.add_local(path, model_id="long").id
        library.update_settings(long, ModelSettings(context_length=long_context, parallel=1))
        fine = library.add_local(tiny_llama, model_id="fine").id
    key = KeyTable(Database(settings.db_path)).create("faults")[1]
    port = free_port()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_THREADS": "1", "SPARK_SPARE_RUNNER": "false"}
    command = [sys.executable, "-c", LIMITED_SERVE, str(port)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url)
        with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=120) as http:
            body = {"model": long, "max_tokens": 2, "messages": CHAT}
            error = openai_error(http.post("/v1/chat/completions", json=body), 502)
            assert error["code"] == "runner_failed"
            assert "not enough memory for a context of 8388608 tokens" in error["message"]
            assert "2.0 GiB" in error["message"] and "context_length" in error["message"]
            # the planner learned: the same load with no more memory free is refused at once, saying why
            children = psutil.Process(proc.pid).children(recursive=True)
            error = anthropic_error(
                http.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}), 507
            )
            assert "failed to load for lack of memory with the same settings" in error["message"]
            assert "not enough memory for a context of 8388608 tokens" in error["message"]
            assert psutil.Process(proc.pid).children(recursive=True) == children, "no runner was started for it"
            assert http.get("/health").status_code == 200
            answer = http.post("/v1/chat/completions", json=body | {"model": fine})
            assert answer.status_code == 200, answer.text
        children = psutil.Process(proc.pid).children(recursive=True)
    finally:
        output = stop_server(proc)
    assert "Traceback" not in output and "loading long failed: not enough memory" in output
    _gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, "no runner outlives the server"
