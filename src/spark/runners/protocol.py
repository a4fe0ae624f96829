"""The runner socket protocol: length-prefixed msgpack frames, multiplexed by request id.

Each frame is a 4-byte big-endian payload length followed by one msgspec-msgpack
encoded `Frame`. Frames are array-like tagged Structs, so the per-token `EventFrame`
costs a few bytes of framing around the event itself.

Server -> runner: `Load` (first frame), `Submit`, `Cancel`, `Ask`, `Shutdown`.
Runner -> server: `Ready` or `LoadFailed` (answer to `Load`), `EventFrame`,
`Answered`, `Heartbeat`.
"""

from __future__ import annotations

import struct

import msgspec

from spark.engine.info import EngineInfo
from spark.errors import ErrorInfo, InvalidRequest, RunnerFailed
from spark.types import Answer, Event, LoadOptions, Question, Request

MAX_FRAME_BYTES = 1 << 30  # a sanity bound: a larger length means a corrupt stream
_LENGTH = struct.Struct(">I")
HEADER_BYTES = _LENGTH.size


class Load(msgspec.Struct, tag="load", array_like=True, frozen=True):
    """What to load; the first frame the server sends."""

    options: LoadOptions
    verbose: bool = False  # pass llama.cpp's info/debug log through to stderr


class Ready(msgspec.Struct, tag="ready", array_like=True, frozen=True):
    """The model is loaded."""

    info: EngineInfo


class LoadFailed(msgspec.Struct, tag="load_failed", array_like=True, frozen=True):
    error: ErrorInfo


class Submit(msgspec.Struct, tag="s", array_like=True, frozen=True):
    id: str
    request: Request


class Cancel(msgspec.Struct, tag="c", array_like=True, frozen=True):
    id: str


class EventFrame(msgspec.Struct, tag="e", array_like=True, frozen=True):
    """One event of request `id` (the hot path: one per generated piece of text)."""

    id: str
    event: Event


class Ask(msgspec.Struct, tag="ask", array_like=True, frozen=True):
    """A question about tokens (a prompt's count, a text's tokens, ...), answered at once."""

    id: str
    question: Question


class Answered(msgspec.Struct, tag="answered", array_like=True, frozen=True):
    """Answer to `Ask`, or the error."""

    id: str
    answer: Answer = Answer()
    error: ErrorInfo | None = None


class Heartbeat(msgspec.Struct, tag="h", array_like=True, frozen=True):
    """Sent about every `HEARTBEAT_SECONDS`; `progress` grows with every decode step."""

    progress: int
    busy: int
    rss_bytes: int


class Shutdown(msgspec.Struct, tag="shutdown", array_like=True, frozen=True):
    pass


Frame = Load | Ready | LoadFailed | Submit | Cancel | EventFrame | Ask | Answered | Heartbeat | Shutdown

HEARTBEAT_SECONDS = 0.5


class ProtocolError(RunnerFailed):
    """The byte stream on a runner socket is not a sequence of valid frames."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Frame)


def encode_frame(frame: Frame, buffer: bytearray | None = None) -> bytearray:
    """`frame` with its length prefix, written into `buffer` (reused) or a new bytearray.

    Reuse a buffer only where the bytes are fully sent before the next call.

    Raises `InvalidRequest` for a frame that holds an integer msgpack cannot carry (beyond 64 bits):
    the APIs refuse such numbers, and this keeps one that slipped through from reaching the socket.
    """
    out = bytearray() if buffer is None else buffer
    try:
        _encoder.encode_into(frame, out, HEADER_BYTES)
    except OverflowError as e:
        raise InvalidRequest(f"A number in this request cannot be sent to the model's runner ({e}).") from None
    _LENGTH.pack_into(out, 0, len(out) - HEADER_BYTES)
    return out


class FrameDecoder:
    """Turns a byte stream, fed in chunks of any size, into frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """The frames completed by `data`, in order; raises `ProtocolError` on garbage."""
        buf = self._buffer
        buf += data
        frames: list[Frame] = []
        pos = 0
        end_of_data = len(buf)
        with memoryview(buf) as view:
            while end_of_data - pos >= HEADER_BYTES:
                (length,) = _LENGTH.unpack_from(buf, pos)
                if length > MAX_FRAME_BYTES:
                    raise ProtocolError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
                end = pos + HEADER_BYTES + length
                if end > end_of_data:
                    break
                try:
                    frames.append(_decoder.decode(view[pos + HEADER_BYTES : end]))
                except msgspec.DecodeError as e:
                    raise ProtocolError(f"undecodable frame: {e}") from None
                pos = end
        if pos:
            del buf[:pos]
        return frames

    @property
    def pending_bytes(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer)
