"""PDFs through the official SDKs, answered by the bundled model: Anthropic documents, OpenAI file parts."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from server.helpers import LiveServer, live_server, server_settings
from spark.library import BUNDLED_ID
from tiny_pdf import make_pdf

pytestmark = pytest.mark.slow

NOTES = base64.b64encode(make_pdf("Team meeting notes", "The next meeting is in Lisbon on Friday.")).decode()
SCANNED = base64.b64encode(make_pdf("")).decode()  # a page without text, as a scan gives
QUESTION = "Where is the next meeting?"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, smollm2: Path) -> Iterator[LiveServer]:
    with live_server(server_settings(tmp_path_factory.mktemp("documents-home"))) as live:
        yield live


def anthropic_document(data: str) -> list[dict[str, object]]:
    document = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}}
    return [{"role": "user", "content": [document, {"type": "text", "text": QUESTION}]}]


def chat_file(data: str) -> list[dict[str, object]]:
    file = {"type": "file", "file": {"filename": "notes.pdf", "file_data": f"data:application/pdf;base64,{data}"}}
    return [{"role": "user", "content": [file, {"type": "text", "text": QUESTION}]}]


def input_file(data: str) -> list[dict[str, object]]:
    file = {"type": "input_file", "filename": "notes.pdf", "file_data": f"data:application/pdf;base64,{data}"}
    return [{"role": "user", "content": [file, {"type": "input_text", "text": QUESTION}]}]


def test_the_model_answers_from_a_pdf_in_each_api(live: LiveServer) -> None:
    message = live.anthropic().messages.create(model=BUNDLED_ID, max_tokens=40, messages=anthropic_document(NOTES))  # type: ignore[arg-type]
    assert "Lisbon" in message.content[0].text  # type: ignore[union-attr]
    chat = live.openai().chat.completions.create(model=BUNDLED_ID, max_tokens=40, messages=chat_file(NOTES))  # type: ignore[arg-type]
    assert "Lisbon" in (chat.choices[0].message.content or "")
    response = live.openai().responses.create(model=BUNDLED_ID, max_output_tokens=40, input=input_file(NOTES))  # type: ignore[arg-type]
    assert "Lisbon" in response.output_text
    # the file's name and text reach the model: the prompt is longer than the question alone
    alone = live.openai().chat.completions.create(
        model=BUNDLED_ID, max_tokens=1, messages=[{"role": "user", "content": QUESTION}]
    )
    assert chat.usage is not None and alone.usage is not None
    assert chat.usage.prompt_tokens > alone.usage.prompt_tokens + 10


def test_a_pdf_without_text_is_a_400_in_each_apis_shape(live: LiveServer) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        live.anthropic().messages.create(model=BUNDLED_ID, max_tokens=5, messages=anthropic_document(SCANNED))  # type: ignore[arg-type]
    assert "messages[0].content[0].source.data" in refused.value.message
    assert "no text layer" in refused.value.message
    with pytest.raises(openai.BadRequestError) as chat_refused:
        live.openai().chat.completions.create(model=BUNDLED_ID, max_tokens=5, messages=chat_file(SCANNED))  # type: ignore[arg-type]
    assert chat_refused.value.param == "messages[0].content[0].file.file_data"  # type: ignore[attr-defined]
    with pytest.raises(openai.BadRequestError) as responses_refused:
        live.openai().responses.create(model=BUNDLED_ID, max_output_tokens=16, input=input_file(SCANNED))  # type: ignore[arg-type]
    assert responses_refused.value.param == "input[0].content[0].file_data"  # type: ignore[attr-defined]
