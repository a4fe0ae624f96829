"""The runner socket protocol: frames survive encoding, framing and arbitrary read boundaries."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from spark.engine import EngineInfo
from spark.errors import ContextLengthExceeded, ErrorInfo, InvalidRequest
from spark.runners.protocol import (
    Answered,
    Ask,
    Cancel,
    EventFrame,
    FrameDecoder,
    Heartbeat,
    Load,
    LoadFailed,
    ProtocolError,
    Ready,
    Shutdown,
    Submit,
    encode_frame,
)
from spark.types import (
    Answer,
    ChatRequest,
    Detokenize,
    Done,
    EmbeddingRequest,
    Embeddings,
    Failed,
    LoadOptions,
    Message,
    RenderPrompt,
    SamplingParams,
    SlotInfo,
    TextDelta,
    Tokenize,
    ToolCallDelta,
    Usage,
)

CHAT = ChatRequest(
    model="m",
    messages=[Message(role="system", content="be brief"), Message(role="user", content="héllo ✓")],
    sampling=SamplingParams(temperature=0.0, max_tokens=7, stop=["\n"], logit_bias={5: -100.0}),
)

FRAMES = [
    Load(LoadOptions(model_id="m", path="/models/m.gguf", n_ctx=512, n_parallel=2), verbose=True),
    Ready(
        EngineInfo(
            model_id="m",
            n_ctx_per_slot=512,
            n_slots=2,
            n_ctx_train=2048,
            n_vocab=512,
            n_embd=64,
            n_params=10,
            model_bytes=40,
            embedding=False,
            n_threads=1,
            n_batch=512,
            chat_template="{{ x }}",
            chat_template_source="gguf",
            bos_token="<s>",
            eos_token="</s>",
        )
    ),
    LoadFailed(ErrorInfo(code="model_file_error", message="not a GGUF file")),
    Submit("1", CHAT),
    Submit("2", EmbeddingRequest(model="e", input=["a", "b"], dimensions=8)),
    Cancel("1"),
    EventFrame("1", SlotInfo(slot=0, prompt_tokens=12, cached_tokens=4)),
    EventFrame("1", TextDelta("wörld")),
    EventFrame("1", ToolCallDelta(index=0, id="call_1", name="f")),
    EventFrame("1", Done(finish_reason="length", usage=Usage(12, 7, 4))),
    EventFrame("2", Embeddings(vectors=[[0.5, -0.25]], usage=Usage(3, 0, 0))),
    EventFrame("3", Failed(ContextLengthExceeded(900, 512).info())),
    Ask("n4", CHAT),
    Answered("n4", Answer(n_tokens=17)),
    Answered("n5", error=ErrorInfo(code="invalid_request", message="bad", param="messages")),
    Ask("n6", Tokenize(model="m", content="Hello <|im_end|>", add_special=True)),
    Answered("n6", Answer(tokens=[1, 2], pieces=[b"Hello", b"\xe2\x96"])),
    Ask("n7", Detokenize(model="m", tokens=[1, 2])),
    Ask("n8", RenderPrompt(CHAT)),
    Answered("n8", Answer(text="<|im_start|>user\nhi")),
    Heartbeat(progress=123, busy=2, rss_bytes=456_789_012),
    Shutdown(),
]


def test_every_frame_round_trips() -> None:
    decoder = FrameDecoder()
    for frame in FRAMES:
        assert decoder.feed(encode_frame(frame)) == [frame]
    assert decoder.pending_bytes == 0


def test_frames_split_at_every_byte_boundary() -> None:
    stream = b"".join(bytes(encode_frame(f)) for f in FRAMES)
    decoder = FrameDecoder()
    out = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert out == FRAMES
    assert decoder.pending_bytes == 0


def test_several_frames_in_one_read_and_a_partial_tail() -> None:
    stream = b"".join(bytes(encode_frame(f)) for f in FRAMES)
    decoder = FrameDecoder()
    cut = len(stream) - 3
    assert decoder.feed(stream[:cut]) == FRAMES[:-1]
    assert decoder.pending_bytes > 0, "the last frame is incomplete and must wait"
    assert decoder.feed(stream[cut:]) == FRAMES[-1:]


def test_length_prefix_is_big_endian_payload_length() -> None:
    data = bytes(encode_frame(Cancel("abc")))
    (length,) = struct.unpack(">I", data[:4])
    assert length == len(data) - 4


def test_reused_buffer_is_rewritten_per_frame() -> None:
    buffer = bytearray()
    first = bytes(encode_frame(EventFrame("1", TextDelta("a long piece of text")), buffer))
    second = bytes(encode_frame(EventFrame("1", TextDelta("b")), buffer))
    assert FrameDecoder().feed(first + second) == [
        EventFrame("1", TextDelta("a long piece of text")),
        EventFrame("1", TextDelta("b")),
    ]


def test_token_frame_is_small() -> None:
    # the per-token hot path: framing adds a few bytes around the event
    assert len(encode_frame(EventFrame("12", TextDelta("hi")))) < 32


def test_a_number_beyond_64_bits_is_a_typed_error_not_a_half_written_frame() -> None:
    huge = Submit("1", ChatRequest(model="m", messages=[], sampling=SamplingParams(logit_bias={2**70: 1.0})))
    buffer = bytearray()
    with pytest.raises(InvalidRequest, match="cannot be sent to the model's runner"):
        encode_frame(huge, buffer)
    assert FrameDecoder().feed(encode_frame(Cancel("2"), buffer)) == [Cancel("2")], "the buffer is still usable"


def test_garbage_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="undecodable"):
        FrameDecoder().feed(struct.pack(">I", 3) + b"\xc1\xc1\xc1")
    with pytest.raises(ProtocolError, match="exceeds"):
        FrameDecoder().feed(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError, match="undecodable"):
        FrameDecoder().feed(bytes(encode_frame(Cancel("x"))).replace(b"\xa1c", b"\xa1?"))


def test_many_frames_over_a_real_socket() -> None:
    """A writer thread streams frames; the reader sees them whole, in order, whatever recv returns."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    frames = [EventFrame(str(i % 7), TextDelta("x" * (i % 50))) for i in range(5000)]

    def write() -> None:
        buffer = bytearray()
        with a:
            for frame in frames:
                a.sendall(encode_frame(frame, buffer))

    writer = threading.Thread(target=write)
    writer.start()
    decoder = FrameDecoder()
    received = []
    with b:
        while chunk := b.recv(777):
            received += decoder.feed(chunk)
    writer.join()
    assert received == frames
