"""Images through libmtmd: the tiny LLaMA with the tiny CLIP projector."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.errors import ModelFileError
from spark.types import (
    ChatRequest,
    Done,
    Failed,
    ImagePart,
    LoadOptions,
    Message,
    SamplingParams,
    SlotInfo,
    TextDelta,
    TextPart,
)

PNG = tiny_gguf.tiny_png()
IMAGE_TOKENS = 16  # (32 / 8) ** 2 patches


@pytest.fixture(scope="module")
def engine(tiny_llama: Path, tiny_mmproj: Path) -> Iterator[Engine]:
    options = LoadOptions(
        model_id="tiny-vision", path=str(tiny_llama), n_threads=1, n_ctx=512, mmproj_path=str(tiny_mmproj)
    )
    with Engine(options) as e:
        yield e


def ask(*parts: TextPart | ImagePart, seed: int = 1) -> ChatRequest:
    return ChatRequest(
        model="tiny-vision",
        messages=[Message("user", list(parts))],
        sampling=SamplingParams(max_tokens=12, seed=seed, temperature=1.0),
    )


def run(engine: Engine, request: ChatRequest) -> Collector:
    c = Collector()
    engine.submit("r", request, c)
    c.wait()
    return c


def test_a_chat_with_an_image_generates(engine: Engine) -> None:
    text_only = engine.count_tokens(ask(TextPart("What is in this picture?")))
    request = ask(TextPart("What is in this picture?"), ImagePart(PNG))
    c = run(engine, request)
    slot = c.events[0]
    assert isinstance(slot, SlotInfo) and slot.prompt_tokens == engine.count_tokens(request)
    # the image fills its patches' positions (plus whatever the projector wraps it in)
    assert slot.prompt_tokens >= text_only + IMAGE_TOKENS
    assert isinstance(c.final, Done) and c.final.usage.completion_tokens == 12
    assert "".join(e.text for e in c.events if isinstance(e, TextDelta))


def test_the_image_changes_the_answer_and_the_same_image_gives_the_same_one(engine: Engine) -> None:
    other = tiny_gguf.tiny_png(seed=5)
    a = run(engine, ask(TextPart("Describe:"), ImagePart(PNG), seed=3))
    b = run(engine, ask(TextPart("Describe:"), ImagePart(other), seed=3))
    again = run(engine, ask(TextPart("Describe:"), ImagePart(PNG), seed=3))
    text = [("".join(e.text for e in c.events if isinstance(e, TextDelta))) for c in (a, b, again)]
    assert text[0] == text[2] and text[0] != text[1]


def test_reuse_stops_at_the_first_image(engine: Engine) -> None:
    run(engine, ask(TextPart("Look at this one:"), ImagePart(PNG), TextPart("and say something.")))
    request = ask(TextPart("Look at this one:"), ImagePart(tiny_gguf.tiny_png(seed=9)), TextPart("and say something."))
    c = run(engine, request)
    _, media, _ = engine._prep.prompt(request)
    assert media is not None
    first_image = media.first_image
    media.close()
    info = c.events[0]
    # Same text before the image, a different image: only the text before it is reused.
    assert isinstance(info, SlotInfo) and 0 < info.cached_tokens == first_image


def test_two_images_in_one_message(engine: Engine) -> None:
    c = run(engine, ask(ImagePart(PNG), TextPart("versus"), ImagePart(tiny_gguf.tiny_png(seed=2))))
    assert isinstance(c.final, Done)
    assert c.events[0].prompt_tokens >= 2 * IMAGE_TOKENS  # type: ignore[union-attr]


def test_an_undecodable_image_is_refused(engine: Engine) -> None:
    for data in (b"not an image at all", PNG[:40]):
        c = run(engine, ask(TextPart("What is this?"), ImagePart(data)))
        assert isinstance(c.final, Failed)
        assert c.final.error.code == "invalid_request" and c.final.error.param == "messages"
    assert isinstance(run(engine, ask(TextPart("still fine"), ImagePart(PNG))).final, Done)


def test_the_marker_text_in_a_message_is_refused(engine: Engine) -> None:
    c = run(engine, ask(TextPart("sneaky <__media__> text"), ImagePart(PNG)))
    assert isinstance(c.final, Failed) and "image markers" in c.final.error.message


def test_a_model_without_projector_refuses_images(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="blind", path=str(tiny_llama), n_threads=1, n_ctx=256)) as e:
        c = run(e, ask(TextPart("What is this?"), ImagePart(PNG)))
        assert isinstance(c.final, Failed) and c.final.error.param == "messages"
        assert c.final.error.message == "model blind cannot read images (no vision projector attached)"


def test_a_bad_projector_file_fails_the_load(tiny_llama: Path, tiny_bert: Path) -> None:
    with pytest.raises(ModelFileError) as e:
        Engine(LoadOptions(model_id="x", path=str(tiny_llama), n_threads=1, n_ctx=256, mmproj_path=str(tiny_bert)))
    assert e.value.param == "mmproj_path"
