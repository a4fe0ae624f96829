"""Every family's parser over a corpus of tool-call outputs as real models write them.

`corpus.json` holds each output with the content and calls a parser must give
(written from the families' documented formats and from llama.cpp's and
vLLM's parser tests). Each parser reads every output whole and streamed in
small random pieces: both must give the same calls and the same text, and
the families a case names must give exactly what it expects.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from engine.toolcalls.templates import content_and_calls
from spark.engine.toolcalls import ToolCallParser, ToolSyntax
from spark.types import Event, TextDelta, ToolCallDelta

CORPUS: dict[str, Any] = json.loads((Path(__file__).parent / "corpus.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = CORPUS["cases"]
SYNTAXES = {
    "hermes": ToolSyntax("hermes", True),
    "llama3": ToolSyntax("llama3", True),
    "mistral": ToolSyntax("mistral", True),
    "generic": ToolSyntax("generic", False),
}


def run(family: str, output: str, pieces: list[int], names: list[str]) -> list[Event]:
    parser = ToolCallParser(SYNTAXES[family], names)
    events: list[Event] = []
    at = 0
    for n in pieces:
        events += parser.feed(output[at : at + n])
        at += n
    return events + parser.finish()


def random_pieces(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    pieces = []
    while sum(pieces) < length:
        pieces.append(rng.randint(1, 5))
    return pieces


def test_the_corpus_is_well_formed() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 100
    for c in CASES:
        assert set(c["families"]) <= SYNTAXES.keys() and c["families"], c["id"]
        if not c["calls"]:
            assert c["content"] == c["output"], f"{c['id']}: an output without calls stays text as written"


@pytest.mark.parametrize("family", sorted(SYNTAXES))
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_whole_and_streamed_give_the_same_calls_and_text(case: dict[str, Any], family: str) -> None:
    output, names = case["output"], case.get("tools", CORPUS["tools"])
    whole = content_and_calls(run(family, output, [len(output)], names))
    for seed in range(4):
        assert content_and_calls(run(family, output, random_pieces(len(output), seed), names)) == whole, seed
    one_by_one = run(family, output, [1] * len(output), names)
    assert content_and_calls(one_by_one) == whole
    if family in case["families"]:
        assert whole == (case["content"], [(c["name"], c["arguments"]) for c in case["calls"]])
    if not whole[1]:
        assert whole[0] == output, "no call: the text comes out exactly as written"


@pytest.mark.parametrize("case", [c for c in CASES if not c["calls"]], ids=lambda c: c["id"])
def test_text_streams_without_waiting_for_the_end(case: dict[str, Any]) -> None:
    """Streamed text that is no call comes out in order, holding back only what could still
    be one: once the text is fed, at most a short tail waits for the end."""
    for family in case["families"]:
        parser = ToolCallParser(SYNTAXES[family], CORPUS["tools"])
        out = ""
        for ch in case["output"]:
            out += "".join(e.text for e in parser.feed(ch) if isinstance(e, TextDelta))
            assert case["output"].startswith(out)
        rest = [e for e in parser.finish() if isinstance(e, TextDelta)]
        assert out + "".join(e.text for e in rest) == case["output"]
        assert len(case["output"]) - len(out) <= 24, (family, out)


def test_a_call_streams_its_arguments_before_the_call_ends() -> None:
    output = '```json\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n```'
    for syntax in SYNTAXES.values():
        parser = ToolCallParser(syntax, ["get_weather"])
        events = parser.feed(output[: output.index("celsius")])
        assert [(e.name, e.arguments) for e in events if isinstance(e, ToolCallDelta)][:1] == [("get_weather", "")]
        assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == '{"city": "Paris", "unit": "'
        assert not parser.call_ended
        parser.feed('celsius"}}\n')
        assert parser.call_ended, "whole once the object closes, before the fence does"
        parser.feed("```\n")
        assert parser.call_ended and parser.finish() == []
