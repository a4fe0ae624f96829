"""The server's HTTP/1.1 protocol: a request head has a size bound (httptools has none of its own),
and nothing else is mistaken for a head: big bodies and keep-alive requests pass."""

from __future__ import annotations

import re
import select
import socket
import time

import pytest

from server.helpers import LiveServer
from spark.server.protocol import MAX_HEAD_BYTES


def connect(live: LiveServer) -> socket.socket:
    port = int(live.url.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:  # it closed with some of what was sent unread: what came before is here
        pass
    return data


def send_in_pieces(sock: socket.socket, data: bytes, *, until_answered: bool = True, piece: int = 4096) -> None:
    """Send `data` in pieces, as a slow client would (`until_answered`: stop once the server answers)."""
    for i in range(0, len(data), piece):
        if until_answered and select.select([sock], [], [], 0)[0]:
            return
        try:
            sock.sendall(data[i : i + piece])
        except (BrokenPipeError, ConnectionResetError):
            return
        time.sleep(0.001)


@pytest.mark.parametrize("shape", ["many headers", "one endless header", "endless request line"])
def test_a_head_past_the_bound_gets_431_and_the_server_goes_on(live: LiveServer, shape: str) -> None:
    if shape == "many headers":
        head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(
            b"X-Pad-%d: %s\r\n" % (i, b"a" * 100) for i in range(2000)
        )
    elif shape == "one endless header":
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (4 * MAX_HEAD_BYTES)
    else:
        head = b"GET /health?" + b"a" * (4 * MAX_HEAD_BYTES)
    with connect(live) as sock:
        send_in_pieces(sock, head)
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"at most 64 KiB" in answer
    assert live.http().get("/health").status_code == 200


def test_a_big_head_under_the_bound_is_served(live: LiveServer) -> None:
    pad = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 100) for i in range(400))  # about 43 KiB
    assert len(pad) < MAX_HEAD_BYTES
    with connect(live) as sock:
        send_in_pieces(sock, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + pad + b"\r\n")
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_bodies_and_keep_alive_requests_are_no_head(live: LiveServer) -> None:
    """A body several times the bound, then more requests on the same connection, sent slowly."""
    body = b'{"model": "none", "messages": [], "pad": "' + b"a" * (3 * MAX_HEAD_BYTES) + b'"}'
    head = [
        "POST /v1/chat/completions HTTP/1.1",
        "Host: x",
        f"Authorization: Bearer {live.key}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    post = ("\r\n".join(head) + "\r\n\r\n").encode()
    health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with connect(live) as sock:
        send_in_pieces(sock, post + body + health * 20 + last, until_answered=False)
        answer = read_all(sock)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert statuses[0] in (b"400", b"404"), answer[:300]  # the API's own answer to the body
    assert statuses[1:] == [b"200"] * 21, answer[:1500]
