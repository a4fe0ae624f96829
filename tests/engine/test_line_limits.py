"""An editor's limits on a completion (`n_indent`, `t_max_predict_ms`): where the answer ends."""

from __future__ import annotations

from spark.engine.line_limits import LineLimits, line_limits
from spark.types import ChatRequest, CompletionRequest, Done, Event, Message, TextDelta, Usage


def text_of(limits: LineLimits, *pieces: str) -> str:
    out: list[Event] = []
    for piece in pieces:
        out += limits.filter([TextDelta(piece)])
    return "".join(e.text for e in out if isinstance(e, TextDelta))


def test_a_line_indented_less_ends_the_answer_before_its_text() -> None:
    limits = LineLimits(4, None)
    # the first line (the cursor's) is never measured; blank lines and deeper ones go on
    assert text_of(limits, "x = 1\n", "    y = 2\n\n", "\t\t  z\n  ", "return y") == "x = 1\n    y = 2\n\n\t\t  z\n  "
    assert limits.ended
    assert limits.filter([TextDelta("more"), Done("length", Usage())]) == []  # nothing once ended


def test_a_dedent_inside_one_piece_cuts_that_piece() -> None:
    limits = LineLimits(2, None)
    assert text_of(limits, "a\n  b\nc\n") == "a\n  b\n"
    assert limits.ended
    assert not_ended(LineLimits(0, None), "a\nb\nc")


def not_ended(limits: LineLimits, *pieces: str) -> bool:
    return text_of(limits, *pieces) == "".join(pieces) and not limits.ended


def test_after_the_time_limit_the_answer_ends_at_a_line_break() -> None:
    now = [0.0]
    limits = LineLimits(0, 0.5, clock=lambda: now[0])
    assert text_of(limits, "a") == "a"  # the clock starts at the first token
    now[0] = 1.0
    assert text_of(limits, "b") == "b" and not limits.ended  # late, but no line break yet
    assert text_of(limits, "c\n") == "c\n" and limits.ended  # the piece with it is kept, as llama-server does
    now[0] = 0.0
    early = LineLimits(0, 0.5, clock=lambda: now[0])
    assert not_ended(early, "a\n", "b\n")  # in time
    now[0] = 1.0
    assert not_ended(early, "c")  # late, after a line break that came in time: on to the next one
    assert text_of(early, "d\ne") == "d\ne" and early.ended


def test_only_completions_that_ask_get_limits() -> None:
    assert line_limits(CompletionRequest(model="m", prompt="p")) is None
    assert line_limits(ChatRequest(model="m", messages=[Message("user", "hi")])) is None
    assert line_limits(CompletionRequest(model="m", prompt="p", min_indent=2)) is not None
    assert line_limits(CompletionRequest(model="m", prompt="p", time_limit=0.1)) is not None
