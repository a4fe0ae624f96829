"""`merged`: the events of a verified draft, each run of one kind as one event."""

from __future__ import annotations

from spark.engine.output import merged
from spark.types import Done, ReasoningDelta, TextDelta, ToolCallDelta, Usage


def test_runs_of_one_kind_become_one_event_in_order() -> None:
    done = Done("tool_calls", Usage())
    events = [
        ReasoningDelta("Let "),
        ReasoningDelta("me."),
        TextDelta("Sure"),
        TextDelta(", "),
        TextDelta("here."),
        ToolCallDelta(0, id="c0", name="f"),
        ToolCallDelta(0, arguments='{"a":'),
        ToolCallDelta(0, arguments="1}"),
        ToolCallDelta(1, id="c1", name="g"),  # a new call starts its own event
        ToolCallDelta(1, arguments="{}"),
        TextDelta("after"),
        done,
    ]
    assert merged(events) == [
        ReasoningDelta("Let me."),
        TextDelta("Sure, here."),
        ToolCallDelta(0, id="c0", name="f", arguments='{"a":1}'),
        ToolCallDelta(1, id="c1", name="g", arguments="{}"),
        TextDelta("after"),
        done,
    ]
    assert merged([]) == []
