"""Image input end to end: the official SDKs against a real server, with and without a projector."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import tiny_gguf
from server.helpers import LiveServer, Models

PNG = tiny_gguf.tiny_png()
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
QUESTION = "What is in this picture?"
IMAGE_TOKENS = 16  # the tiny projector's 32x32 image in 8x8 patches


def openai_chat(image_url: str | None) -> list[Any]:
    """A user turn with a question and, unless None, an image URL part."""
    parts: list[Any] = [{"type": "text", "text": QUESTION}]
    if image_url is not None:
        parts.append({"type": "image_url", "image_url": {"url": image_url}})
    return [{"role": "user", "content": parts}]


@pytest.fixture(scope="module")
def vision_model(served: tuple[LiveServer, Models], tiny_llama: Path, tiny_mmproj: Path) -> str:
    """The tiny LLaMA with the tiny CLIP projector attached, added to the running server's library."""
    return served[0].state.library.add_local(tiny_llama, model_id="tiny-vision", mmproj=tiny_mmproj).id


def test_model_without_projector_refuses_images(live: LiveServer, models: Models) -> None:
    client = live.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=models.chat, messages=openai_chat(PNG_URL), max_tokens=3)
    assert "cannot read images" in refused.value.message and refused.value.param == "messages"
    with pytest.raises(anthropic.BadRequestError) as refused_too:
        live.anthropic().messages.create(
            model=models.chat,
            max_tokens=3,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": base64.b64encode(PNG).decode(),
                            },
                        }
                    ],
                }
            ],
        )
    assert "cannot read images" in refused_too.value.message
    text_only = client.chat.completions.create(model=models.chat, messages=openai_chat(None), max_tokens=3)
    assert text_only.choices[0].message.content


def test_remote_image_urls_are_refused(live: LiveServer, vision_model: str) -> None:
    # Refused before any fetch is tried (test_image_policy.py watches a local host for that);
    # the network is closed here, so a fetch would fail with another message.
    client = live.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=vision_model, messages=openai_chat("https://images.example.com/cat.png"), max_tokens=3
        )
    assert "does not fetch remote images" in refused.value.message
    assert refused.value.param == "messages[0].content[1].image_url.url"
    with pytest.raises(anthropic.BadRequestError) as refused_too:
        live.anthropic().messages.create(
            model=vision_model,
            max_tokens=3,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "url", "url": "https://images.example.com/dog.png"}}
                    ],
                }
            ],
        )
    assert "does not fetch remote images" in refused_too.value.message


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("data:image/png;base64,@@not base64@@", "not valid base64"),
        ("data:image/png;base64," + base64.b64encode(b"plain text, not a picture").decode(), "not a PNG, JPEG"),
        ("data:image/png;base64," + base64.b64encode(PNG[: len(PNG) // 2]).decode(), "(PNG) could not be decoded"),
        ("data:text/plain;base64,aGk=", "expected an image/* type"),
        (
            "data:image/png;base64," + base64.b64encode(tiny_gguf.png_declaring(60_000, 60_000)).decode(),
            "larger than this",
        ),
    ],
    ids=["not-base64", "not-an-image", "truncated-png", "not-an-image-type", "decompression-bomb"],
)
def test_undecodable_images_are_refused(live: LiveServer, vision_model: str, url: str, why: str) -> None:
    client = live.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=vision_model, messages=openai_chat(url), max_tokens=3)
    assert why in refused.value.message
    # The model's runner is unharmed: the next image request is answered.
    after = client.chat.completions.create(model=vision_model, messages=openai_chat(PNG_URL), max_tokens=3)
    assert after.choices[0].message.content


def test_openai_chat_with_an_image(live: LiveServer, vision_model: str) -> None:
    client = live.openai()
    with_image = client.chat.completions.create(model=vision_model, messages=openai_chat(PNG_URL), max_tokens=6, seed=1)
    without = client.chat.completions.create(model=vision_model, messages=openai_chat(None), max_tokens=6, seed=1)
    assert with_image.choices[0].finish_reason == "length" and with_image.choices[0].message.content
    assert with_image.usage is not None and without.usage is not None
    assert with_image.usage.completion_tokens == 6
    assert with_image.usage.prompt_tokens >= without.usage.prompt_tokens + IMAGE_TOKENS
    # The image is read, not just counted: another picture changes what the model writes.
    other = client.chat.completions.create(
        model=vision_model,
        max_tokens=6,
        seed=1,
        messages=openai_chat("data:image/png;base64," + base64.b64encode(tiny_gguf.tiny_png(seed=7)).decode()),
    )
    assert other.usage is not None and other.usage.prompt_tokens == with_image.usage.prompt_tokens
    assert other.choices[0].message.content != with_image.choices[0].message.content


def test_anthropic_message_with_an_image(live: LiveServer, vision_model: str) -> None:
    client = live.anthropic()
    image: Any = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()},
    }
    message = client.messages.create(
        model=vision_model,
        max_tokens=6,
        messages=[{"role": "user", "content": [image, {"type": "text", "text": QUESTION}]}],
    )
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 6
    assert message.content[0].type == "text" and message.content[0].text
    counted = client.messages.count_tokens(model=vision_model, messages=[{"role": "user", "content": QUESTION}])
    prompt = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert prompt >= counted.input_tokens + IMAGE_TOKENS
