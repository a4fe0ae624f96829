"""The central's HTTP/1.1 client for the hop to its nodes: one POST, its answer read as it comes.

Every routed request pays this hop, so it is kept to what the hop needs:
keep-alive connections per node, a Content-Length body out, an answer read
by Content-Length, chunks, or to the end of the connection. Through httpx,
routing added 5.2 ms to a streamed answer's first token; with this client 3.7 ms.

An idle connection is dropped before the node's own keep-alive timeout
(uvicorn's 5 s) would close it; one that the node closed anyway while it was
idle, and that answers nothing, is tried once more on a new connection (the
node never read the request).

Every wait of a routed request on its node goes through its `Waits`, which
ends it at the request's deadline, after a silence, or when someone else
gives up on it: the central's registry (the node became unreachable), the
server's drain (shutdown), the client (gone).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final
from urllib.parse import urlsplit

IDLE_SECONDS: Final = 4.0
MAX_IDLE_PER_NODE: Final = 32
MAX_HEAD_BYTES: Final = 64 * 1024

_Key = tuple[str, str, int]  # scheme, host, port


class HopError(Exception):
    """The node could not be reached, or its answer broke off.

    `unreachable`: no connection was made. `unanswered`: the connection closed before one byte
    of an answer came.
    """

    def __init__(self, message: str, *, unreachable: bool = False, unanswered: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.unanswered = unanswered


class Waits:
    """One routed request's waits on its node, each ended early when the request is cut.

    `abort` ends the request's waits for good (the server stops, the client left); `lost` ends
    those on the node now waited on (it became unreachable: another node may take the request,
    and `lost_error` is cleared for it). A wait in progress raises the error at once; later ones
    raise it as they start.
    """

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline  # loop time at which the request's time is up
        self.error: Exception | None = None
        self.lost_error: HopError | None = None
        self._scope: asyncio.Timeout | None = None

    def abort(self, error: Exception) -> None:
        """End this wait and every later one with `error` (the first one given is kept)."""
        if self.error is None:
            self.error = error
        self._wake()

    def lost(self, error: HopError) -> None:
        """The node waited on is gone: end the waits on it with `error`."""
        self.lost_error = error
        self._wake()

    def expired(self) -> bool:
        """Whether the request's deadline has passed."""
        return self.deadline is not None and asyncio.get_running_loop().time() >= self.deadline

    @asynccontextmanager
    async def wait(self, idle: float | None = None) -> AsyncIterator[None]:
        """A wait on the node: raises the error it was cut with, or `TimeoutError` at the deadline or
        after `idle` seconds (`expired` tells which)."""
        self._raise_cut()
        when = self.deadline
        if idle:
            until = asyncio.get_running_loop().time() + idle
            when = until if when is None else min(when, until)
        try:
            async with asyncio.timeout_at(when) as self._scope:
                yield
        except TimeoutError:
            self._raise_cut()
            raise
        finally:
            self._scope = None

    def _raise_cut(self) -> None:
        if self.error is not None:
            raise self.error
        if self.lost_error is not None:
            raise self.lost_error

    def _wake(self) -> None:
        if self._scope is not None and not self._scope.expired():  # a wait in progress ends now
            self._scope.reschedule(asyncio.get_running_loop().time())


class _Connection:
    def __init__(self, key: _Key, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.key = key
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class HopResponse:
    """A node's answer: status and headers at once, the body to read (once) with `read` or `chunks`."""

    def __init__(self, pool: HopPool, connection: _Connection, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers
        self._pool = pool
        self._connection: _Connection | None = connection
        self._reusable = headers.get("connection", "").lower() != "close"

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as the node sends them (chunked framing removed)."""
        connection = self._connection
        if connection is None:
            return
        reader = connection.reader
        finished = False
        try:
            if "chunked" in self.headers.get("transfer-encoding", "").lower():
                while size := int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16):
                    data = await reader.readexactly(size + 2)
                    yield data[:-2]
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, if any
                    pass
            elif (length := self.headers.get("content-length")) is not None:
                if int(length):
                    yield await reader.readexactly(int(length))
            else:
                self._reusable = False
                while data := await reader.read(65536):
                    yield data
            finished = True
        except (OSError, EOFError, ValueError, asyncio.LimitOverrunError) as e:
            raise HopError(f"the answer broke off ({_reason(e)})") from e
        finally:
            self._release(done=finished)  # only a body read to its end leaves the connection reusable

    async def aclose(self) -> None:
        """Done with the answer (a connection whose body was not read to its end is closed)."""
        self._release(done=False)

    def _release(self, *, done: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if done and self._reusable:
            self._pool.put_back(connection)
        else:
            connection.close()


class HopPool:
    """Keep-alive connections to the nodes, and the one call the central makes on them."""

    def __init__(self, connect_seconds: float) -> None:
        self.connect_seconds = connect_seconds
        self._idle: defaultdict[_Key, deque[_Connection]] = defaultdict(deque)
        self._tls: ssl.SSLContext | None = None

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> HopResponse:
        """POST `body` to `url`; the answer once its status line and headers have come."""
        key, target = _split(url)
        connection = self._take_idle(key)
        if connection is not None:
            try:
                return await self._exchange(connection, target, body, headers)
            except HopError as e:
                if not e.unanswered:
                    raise
                # the node had closed this idle connection: it never read the request
        return await self._exchange(await self._connect(key), target, body, headers)

    def put_back(self, connection: _Connection) -> None:
        idle = self._idle[connection.key]
        now = time.monotonic()
        while idle and now - idle[0].idle_since >= IDLE_SECONDS:  # the oldest, which reuse never reaches
            idle.popleft().close()
        if len(idle) >= MAX_IDLE_PER_NODE or not connection.usable():
            connection.close()
            return
        connection.idle_since = now
        idle.append(connection)

    async def aclose(self) -> None:
        """Close every idle connection."""
        for idle in self._idle.values():
            while idle:
                idle.pop().close()

    def _take_idle(self, key: _Key) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: least likely to have timed out
            if connection.usable() and now - connection.idle_since < IDLE_SECONDS:
                return connection
            connection.close()
        return None

    async def _connect(self, key: _Key) -> _Connection:
        scheme, host, port = key
        tls = self._tls_context() if scheme == "https" else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=tls, limit=MAX_HEAD_BYTES), self.connect_seconds
            )
        except TimeoutError as e:
            raise HopError(f"cannot connect: no answer in {self.connect_seconds:g} s", unreachable=True) from e
        except (OSError, ssl.SSLError) as e:
            raise HopError(f"cannot connect: {_reason(e)}", unreachable=True) from e
        return _Connection(key, reader, writer)

    async def _exchange(
        self, connection: _Connection, target: str, body: bytes, headers: dict[str, str]
    ) -> HopResponse:
        scheme, host, port = connection.key
        head = [f"POST {target} HTTP/1.1", f"host: {_host_header(scheme, host, port)}"]
        head += [f"{name}: {value}" for name, value in headers.items() if name.lower() not in _OWN_HEADERS]
        head.append(f"content-length: {len(body)}")
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        try:
            connection.writer.write(request)
            await connection.writer.drain()
            raw = await connection.reader.readuntil(b"\r\n\r\n")
        except (OSError, EOFError, asyncio.LimitOverrunError) as e:
            connection.close()
            if isinstance(e, (ConnectionResetError, BrokenPipeError)) or (
                isinstance(e, asyncio.IncompleteReadError) and not e.partial
            ):
                raise HopError("the node closed the connection without answering", unanswered=True) from e
            raise HopError(f"no answer ({_reason(e)})") from e
        except BaseException:
            connection.close()
            raise
        try:
            status, response_headers = _parse_head(raw)
        except ValueError as e:
            connection.close()
            raise HopError(f"not an HTTP answer ({e})") from e
        return HopResponse(self, connection, status, response_headers)

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls


# set by the pool itself, never copied from the caller's headers
_OWN_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def _split(url: str) -> tuple[_Key, str]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise HopError(f"not a node URL: {url!r}", unreachable=True)
    port = parts.port or (443 if scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (scheme, parts.hostname, port), target


def _host_header(scheme: str, host: str, port: int) -> str:
    name = f"[{host}]" if ":" in host else host
    return name if port == (443 if scheme == "https" else 80) else f"{name}:{port}"


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"status line {lines[0][:80]!r}")
    status = int(rest.split(" ", 1)[0])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
    if version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
        headers["connection"] = "close"
    return status, headers


def _reason(error: BaseException) -> str:
    if isinstance(error, asyncio.IncompleteReadError):
        return "the node closed the connection"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
