"""The HTTP/1.1 protocol the server speaks: uvicorn's httptools one, with a bound on request heads.

httptools (llhttp, in C) parses requests at a fraction of h11's cost, which is
what keeps `/health` quick under a burst of clients. Unlike h11, it puts no
limit on a request's line and headers: a client could send headers for ever
and the server would keep them all. `BoundedHttpToolsProtocol` counts the bytes
of a head still being read and answers 431 past `MAX_HEAD_BYTES`.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024  # request line and headers; h11 allows 16 KiB, nginx 32 KiB by default
REFUSAL = f"Request line and headers too large: at most {MAX_HEAD_BYTES // 1024} KiB.".encode()


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; a request head longer than `MAX_HEAD_BYTES` gets 431 and a closed connection."""

    _head_bytes: int | None = None  # bytes of the head being read; None between heads

    def data_received(self, data: bytes) -> None:
        in_head = self._head_bytes is not None
        super().data_received(data)
        # only data that arrived wholly inside one head is counted: what a head can hold is then
        # bounded by the limit and one read (the parser keeps the partial head in between)
        if in_head and self._head_bytes is not None:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._head_bytes = None
                self.logger.warning("Request head over %d bytes refused.", MAX_HEAD_BYTES)
                self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        super().on_headers_complete()

    def _refuse_head(self) -> None:
        headers = b"".join(name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers)
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            + headers
            + b"content-type: text/plain; charset=utf-8\r\n"
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(REFUSAL)
            + REFUSAL
        )
        self.transport.close()
