"""Typed errors survive the runner socket: every class is rebuilt from its serialized form."""

from __future__ import annotations

import msgspec
import pytest

from spark import errors
from spark.errors import ContextLengthExceeded, ErrorInfo, ModelNotFound, SparkError, from_info


def _all_error_classes() -> list[type[SparkError]]:
    found: list[type[SparkError]] = []
    pending: list[type[SparkError]] = [SparkError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize("cls", _all_error_classes(), ids=lambda c: c.__name__)
def test_every_error_is_rebuilt_from_its_info(cls: type[SparkError]) -> None:
    if cls is ModelNotFound:
        error: SparkError = ModelNotFound("m")
    elif cls is ContextLengthExceeded:
        error = ContextLengthExceeded(5000, 4096, "prompt", trained=8192, tools=(28, 4000))
    else:
        error = cls("went wrong", param="p")
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(error.info()), type=ErrorInfo)
    back = from_info(wire)
    owner = next(
        c for c in cls.__mro__ if "code" in c.__dict__
    )  # a subclass without its own code is sent as its parent
    assert type(back) is owner
    assert (back.message, back.param, back.data()) == (error.message, error.param, error.data())


def test_an_unknown_code_becomes_a_plain_error() -> None:
    back = from_info(ErrorInfo(code="from_the_future", message="new"))
    assert type(back) is SparkError and back.message == "new"


def test_two_classes_cannot_share_a_code() -> None:
    with pytest.raises(TypeError, match="invalid_request"):
        type("Again", (errors.SparkError,), {"code": "invalid_request"})


def test_a_context_overflow_says_whether_the_context_can_grow() -> None:
    """Raising the context is advice only below the model's training context, past which it is capped."""
    below = ContextLengthExceeded(5000, 4096, trained=32768).message
    assert below.endswith(
        "Shorten 'messages' or raise the model's context_length (up to 32768, what the model was trained for) "
        "on its page in Spark's console or with PATCH /api/models/MODEL/settings."
    )
    at_most = ContextLengthExceeded(600, 512, "input", trained=512).message
    assert at_most.endswith("Shorten 'input': 512 tokens is as long as this model's context goes.")
    assert ContextLengthExceeded(600, 512).message.endswith(
        "Shorten 'messages' or raise the model's context_length on its page in Spark's console or with "
        "PATCH /api/models/MODEL/settings."
    )
    # a client's built-in tools (Open WebUI sends 28 with every chat): where the length comes from
    tools = ContextLengthExceeded(5399, 4096, trained=8192, tools=(28, 5100)).message
    assert tools.endswith(
        "Shorten 'messages' or send fewer tools (the definitions of its 28 tools take 5100 of them), "
        "or raise the model's context_length (up to 8192, what the model was trained for) on its page in Spark's "
        "console or with PATCH /api/models/MODEL/settings."
    )
    assert "tools" not in ContextLengthExceeded(5399, 4096, tools=(1, 200)).message  # a few: not the point
