"""A real answer from a real model: SmolLM2-135M-Instruct (Q4_1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.helpers import Collector
from spark.engine import Engine
from spark.library.bundled import BUNDLED_SETTINGS
from spark.types import (
    ChatRequest,
    Done,
    LoadOptions,
    Message,
    SamplingParams,
    SlotInfo,
)

pytestmark = pytest.mark.slow


def test_capital_of_france(smollm2: Path) -> None:
    with Engine(LoadOptions(model_id="smollm2", path=str(smollm2), n_threads=1, n_ctx=1024, n_parallel=2)) as e:
        assert e.info().chat_template_source == "gguf"
        # (With the template's own default system prompt this small model's greedy
        # answer to exactly this question is off topic, in llama-cpp-python too; the
        # bundled one holds on every CPU, tests/library/test_bundled.py.)
        question = [
            Message("system", BUNDLED_SETTINGS.system_prompt or ""),
            Message("user", "What is the capital of France?"),
        ]
        req = ChatRequest(model="smollm2", messages=question, sampling=SamplingParams(temperature=0, max_tokens=48))
        first = Collector()
        e.submit("q", req, first)
        done = first.wait()
        assert isinstance(done, Done) and "Paris" in first.text
        assert done.finish_reason == "stop"  # the model ends its answer with <|im_end|>

        # the follow-up turn reuses the whole first exchange's prompt
        follow = ChatRequest(
            model="smollm2",
            messages=[*question, Message("assistant", first.text), Message("user", "And of Italy?")],
            sampling=SamplingParams(temperature=0, max_tokens=48),
        )
        second = Collector()
        e.submit("q2", follow, second)
        assert isinstance(second.wait(), Done)
        slot = second.events[0]
        assert isinstance(slot, SlotInfo)
        assert slot.cached_tokens >= e.count_tokens(req)
        assert "Rome" in second.text
