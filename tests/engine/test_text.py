"""TextStream and StopStrings: UTF-8 holdback and stop strings across arbitrary token splits; StopAtStrings on events."""

from __future__ import annotations

import pytest

from spark.engine.output import StopAtStrings
from spark.engine.text import StopStrings, TextStream
from spark.types import Event, ReasoningDelta, TextDelta, ToolCallDelta


def run(pieces: list[bytes], stop: list[str] | None = None) -> tuple[list[str], str, bool]:
    """The pieces through `TextStream` then `StopStrings`, as the engine decodes a token's bytes."""
    s, stops = TextStream(), StopStrings(stop)
    out = [stops.push(s.push(p)) for p in pieces]
    s.flush()
    return out, stops.flush(), stops.stopped


def splits(data: bytes) -> list[list[bytes]]:
    """Every way to cut `data` into two or three pieces, plus one byte per piece."""
    out = [[data[i : i + 1] for i in range(len(data))]]
    for i in range(len(data) + 1):
        out.append([data[:i], data[i:]])
        for j in range(i, len(data) + 1):
            out.append([data[:i], data[i:j], data[j:]])
    return out


def test_plain_text_passes_through() -> None:
    out, tail, stopped = run([b"Hello", b" world"])
    assert out == ["Hello", " world"] and tail == "" and not stopped


def test_multibyte_character_is_never_split() -> None:
    text = "añ€😀z"
    for pieces in splits(text.encode()):
        out, tail, _ = run(pieces)
        for chunk in out:
            assert "\ufffd" not in chunk
        assert "".join(out) + tail == text


def test_incomplete_character_at_the_end_is_dropped() -> None:
    euro = "€".encode()
    out, tail, _ = run([b"ab", euro[:2]])
    assert out == ["ab", ""] and tail == ""


def test_invalid_bytes_become_replacement_characters() -> None:
    out, tail, _ = run([b"a\xffb"])
    assert "".join(out) + tail == "a\ufffdb"


@pytest.mark.parametrize("stop", [["STOP"], ["xx", "STOP"], ["S", "STOP"], ["TOP", "STOP"]])
def test_stop_string_across_every_split(stop: list[str]) -> None:
    data = b"abc STOP def"
    for pieces in splits(data):
        out, tail, stopped = run(pieces, stop)
        assert stopped
        assert "".join(out) + tail == "abc "
        # nothing of the stop string was ever emitted
        assert "S" not in "".join(out)


def test_stop_string_prefix_is_held_then_released() -> None:
    s = StopStrings(["</end>"])
    assert s.push("a </") == "a "
    assert s.push("en") == ""
    assert s.push("X") == "</enX"
    assert not s.stopped
    assert s.push(" </e") == " "
    assert s.flush() == "</e"


def test_earliest_stop_string_wins() -> None:
    s = StopStrings(["three", "two"])
    assert s.push("one two three") == "one "
    assert s.stop_sequence == "two" and s.flush() == ""


def test_after_stop_more_pieces_are_ignored() -> None:
    s = StopStrings(["!"])
    assert s.push("hi!there") == "hi"
    assert s.push("more") == "" and s.flush() == ""


def test_stop_string_with_multibyte_characters() -> None:
    data = "price: 5€ — done".encode()
    for pieces in splits(data):
        out, tail, stopped = run(pieces, ["€ —"])
        assert stopped and "".join(out) + tail == "price: 5"


def test_empty_stop_strings_are_ignored() -> None:
    out, _, stopped = run([b"abc"], [""])
    assert out == ["abc"] and not stopped


MULTIBYTE = "añ€ 日本語 cafe\u0301 😀👍🏽 end"


@pytest.mark.parametrize("stop", ["本語", "😀", "👍🏽", "e\u0301", "€ 日"])
def test_multibyte_stop_string_across_every_split(stop: str) -> None:
    data = MULTIBYTE.encode()
    for pieces in splits(data):
        out, tail, stopped = run(pieces, [stop])
        assert stopped, (stop, pieces)
        assert "".join(out) + tail == MULTIBYTE[: MULTIBYTE.index(stop)]
        assert all("\ufffd" not in chunk for chunk in out)


# --- StopAtStrings: stop strings on the parsers' events ------------------------------------------


def test_a_stop_string_across_text_events_cuts_the_text() -> None:
    stops = StopAtStrings(["END"])
    assert stops.filter([TextDelta("abc E"), TextDelta("N")]) == [TextDelta("abc ")]
    assert stops.filter([TextDelta("D and more"), TextDelta("ignored")]) == []
    assert stops.stop_sequence == "END" and stops.flush() == []


def test_the_templates_turn_end_stops_the_text_as_the_models_end_not_as_a_stop_sequence() -> None:
    """ChatML's `<|im_end|>` matched as text (a base model's vocabulary has no such token): the answer
    ends there, reported as the model's end (Anthropic's end_turn), not as a stop string the client sent."""
    stops = StopAtStrings(["END", "<|im_end|>"], turn_ends=("<|im_end|>",))
    assert stops.filter([TextDelta("Paris.<|im_"), TextDelta("end|>\n<|im_start|>user")]) == [TextDelta("Paris.")]
    assert stops.stopped and stops.stop_sequence is None
    stops = StopAtStrings(["END", "<|im_end|>"], turn_ends=("<|im_end|>",))
    assert stops.filter([TextDelta("Paris. END")]) == [TextDelta("Paris. ")] and stops.stop_sequence == "END"


def test_a_stop_string_in_the_reasoning_ends_it_and_does_not_span_into_the_text() -> None:
    stops = StopAtStrings(["END"])
    assert stops.filter([ReasoningDelta("thinking E")]) == [ReasoningDelta("thinking ")]
    # the reasoning ended with "E": it is released, and "ND" in the text is only text
    assert stops.filter([TextDelta("ND ok")]) == [ReasoningDelta("E"), TextDelta("ND ok")]
    assert not stops.stopped
    assert stops.filter([ReasoningDelta("xEND")]) == [ReasoningDelta("x")] and stops.stopped


def test_tool_calls_pass_whole_and_release_held_text() -> None:
    stops = StopAtStrings(["</tool_call>", '"', "add"])
    call = [ToolCallDelta(0, "call_1", "add"), ToolCallDelta(0, arguments='{"a": 1}')]
    assert stops.filter([TextDelta("Let me a"), *call]) == [TextDelta("Let me "), TextDelta("a"), *call]
    assert not stops.stopped
    assert stops.filter([TextDelta("then add")]) == [TextDelta("then ")] and stops.stop_sequence == "add"


def test_without_stop_strings_events_pass_unchanged() -> None:
    events: list[Event] = [TextDelta("a"), ReasoningDelta("b"), ToolCallDelta(0, "c", "d")]
    stops = StopAtStrings(None)
    assert stops.filter(events) is events and stops.flush() == []
