"""The central's client for the hop to its nodes, against a scripted HTTP server on a real port."""

from __future__ import annotations

import asyncio
import socket

import pytest

from fleet.helpers import CLOSE, STREAM_HEAD, chunk, node, ok
from spark.errors import ShuttingDown
from spark.fleet import hop
from spark.fleet.hop import HopError, HopPool, Waits

pytestmark = pytest.mark.anyio


async def test_a_whole_answer_and_the_request_the_node_got() -> None:
    async with node([ok(b'{"a": 1}', "x-spark-node-request-id: n-1")]) as served:
        pool = HopPool(1.0)
        response = await pool.post(served.url + "/v1/chat/completions?x=1", b'{"q": 2}', {"x-request-id": "r-1"})
        assert response.status_code == 200
        assert response.headers["x-spark-node-request-id"] == "n-1"
        assert await response.read() == b'{"a": 1}'
        await pool.aclose()
    request = served.requests[0]
    assert request.startswith(b"POST /v1/chat/completions?x=1 HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{served.url.rsplit(':', 1)[1]}".encode() in request
    assert b"x-request-id: r-1\r\n" in request and b"content-length: 8\r\n" in request
    assert request.endswith(b'{"q": 2}')


async def test_a_chunked_stream_comes_as_the_node_sends_it_and_the_connection_is_reused() -> None:
    frames = [b"data: one\n\n", b"data: two\n\n"]
    answer = [STREAM_HEAD, chunk(frames[0]), chunk(frames[1]) + b"0\r\n\r\n"]
    async with node([answer, ok(b"{}")]) as served:
        pool = HopPool(1.0)
        response = await pool.post(served.url + "/v1/x", b"{}", {})
        assert [c async for c in response.chunks()] == frames
        second = await pool.post(served.url + "/v1/x", b"{}", {})
        assert await second.read() == b"{}"
        await pool.aclose()
    assert served.connections == 1


async def test_an_answer_left_unread_closes_its_connection() -> None:
    answer = [STREAM_HEAD, chunk(b"data: one\n\n")]  # and never ends
    async with node([answer, ok(b"{}")]) as served:
        pool = HopPool(1.0)
        response = await pool.post(served.url + "/v1/x", b"{}", {})
        chunks = aiter(response.chunks())
        assert await anext(chunks) == b"data: one\n\n"
        await response.aclose()
        second = await pool.post(served.url + "/v1/x", b"{}", {})
        assert await second.read() == b"{}"
        await pool.aclose()
    assert served.connections == 2


async def test_an_idle_connection_the_node_closed_is_replaced_without_a_failure() -> None:
    async with node([ok(b"{}"), None]) as first:
        pool = HopPool(1.0)
        assert await (await pool.post(first.url + "/v1/x", b"{}", {})).read() == b"{}"
        first.answers.append(ok(b'"again"'))  # the node closes the kept connection at the next request
        response = await pool.post(first.url + "/v1/x", b"{}", {})
        assert await response.read() == b'"again"'
        await pool.aclose()
    assert first.connections == 2


async def test_connections_idle_too_long_are_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hop, "IDLE_SECONDS", 0.0)
    async with node([ok(b"{}"), ok(b"{}")]) as served:
        pool = HopPool(1.0)
        for _ in range(2):
            await (await pool.post(served.url + "/v1/x", b"{}", {})).read()
        await pool.aclose()
    assert served.connections == 2


async def test_a_node_that_is_not_listening_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HopError, match="cannot connect") as caught:
        await HopPool(1.0).post(f"http://127.0.0.1:{port}/v1/x", b"{}", {})
    assert caught.value.unreachable


async def test_a_fresh_connection_closed_without_an_answer_is_a_failure_not_a_retry() -> None:
    async with node([None, ok(b"{}")]) as served:
        with pytest.raises(HopError, match="closed the connection without answering") as caught:
            await HopPool(1.0).post(served.url + "/v1/x", b"{}", {})
    assert not caught.value.unreachable and served.connections == 1


async def test_a_stream_that_breaks_off_raises() -> None:
    async with node([[STREAM_HEAD, chunk(b"data: one\n\n"), b"5\r\nda", CLOSE]]) as served:
        response = await HopPool(1.0).post(served.url + "/v1/x", b"{}", {})
        chunks = aiter(response.chunks())
        assert await anext(chunks) == b"data: one\n\n"
        with pytest.raises(HopError, match="broke off"):
            await anext(chunks)


async def test_an_answer_that_is_not_http_is_refused() -> None:
    async with node([b"SSH-2.0-OpenSSH\r\n\r\n"]) as served:
        with pytest.raises(HopError, match="not an HTTP answer"):
            await HopPool(1.0).post(served.url + "/v1/x", b"{}", {})


async def test_an_answer_without_length_is_read_to_the_end_of_the_connection() -> None:
    async with node([[b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\n\r\n", b"gone", CLOSE]]) as served:
        pool = HopPool(1.0)
        response = await pool.post(served.url + "/v1/x", b"{}", {})
        assert response.status_code == 502
        assert await response.read() == b"gone"
        assert not pool._idle[("http", "127.0.0.1", int(served.url.rsplit(":", 1)[1]))]


async def test_not_a_node_url() -> None:
    with pytest.raises(HopError, match="not a node URL"):
        await HopPool(1.0).post("unix:///tmp/x", b"", {})


async def test_a_wait_on_a_node_that_never_answers_ends_when_the_request_is_aborted() -> None:
    async with node([[], None]) as served:  # it reads the request and answers nothing
        waits = Waits(None)
        pool = HopPool(1.0)

        async def post() -> None:
            async with waits.wait():
                await pool.post(served.url + "/v1/x", b"{}", {})

        task = asyncio.create_task(post())
        await asyncio.sleep(0.2)
        assert not task.done()
        waits.abort(ShuttingDown("stopping"))
        with pytest.raises(ShuttingDown, match="stopping"):
            await asyncio.wait_for(task, 1)
        with pytest.raises(ShuttingDown):  # and every later wait
            async with waits.wait():
                pass
        assert not pool._idle  # the connection was closed, not kept


async def test_a_lost_node_ends_the_waits_on_it_until_the_next_node() -> None:
    waits = Waits(None)
    with pytest.raises(HopError, match="gone"):
        async with waits.wait():
            asyncio.get_running_loop().call_later(0.05, waits.lost, HopError("gone"))
            await asyncio.sleep(5)
    with pytest.raises(HopError, match="gone"):
        async with waits.wait():
            pass
    waits.lost_error = None
    async with waits.wait():
        await asyncio.sleep(0)


async def test_a_wait_ends_at_the_deadline_or_after_a_silence() -> None:
    loop = asyncio.get_running_loop()
    waits = Waits(loop.time() + 0.3)
    with pytest.raises(TimeoutError):
        async with waits.wait(idle=0.05):
            await asyncio.sleep(5)
    assert not waits.expired()  # the silence ended it
    with pytest.raises(TimeoutError):
        async with waits.wait():
            await asyncio.sleep(5)
    assert waits.expired()
