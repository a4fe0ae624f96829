"""Documents in requests: a PDF's text layer, text files, and every way a file can be unreadable."""

from __future__ import annotations

import base64

import pytest

from spark.api import documents
from spark.api.common import NO_FETCH, Fetch, UploadedFile
from spark.api.documents import document_from_data, document_text, file_parts, pdf_text
from spark.errors import InvalidRequest
from spark.types import TextPart
from tiny_pdf import make_pdf


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def refusal(call: object, *args: object) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value


def test_a_pdfs_pages_are_read_in_order() -> None:
    pdf = make_pdf("The meeting is in Paris.\nIt starts at noon.", "", "Bring (your) badge.")
    assert pdf_text(pdf, "p") == "The meeting is in Paris.\nIt starts at noon.\n\nBring (your) badge."


def test_a_pdf_protected_only_against_editing_opens() -> None:
    assert pdf_text(make_pdf("Open to all.", password=""), "p") == "Open to all."


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"hello", "not a PDF"),
        (b"%PDF-1.7\n this is no PDF at all", "could not be read"),
        (make_pdf("Hello")[:200], "could not be read"),  # cut short
        (make_pdf("Secret", password="hunter2"), "encrypted with a password"),
        (make_pdf(""), "no text layer"),
    ],
    ids=["not-pdf", "garbage", "cut-short", "encrypted", "no-text"],  # encryption is random: no ids from data
)
def test_unreadable_pdfs_are_refused_naming_the_parameter(data: bytes, words: str) -> None:
    error = refusal(pdf_text, data, "messages[0].content[0].source.data")
    assert error.param == "messages[0].content[0].source.data"
    assert words in error.message


def test_a_pdf_over_the_page_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "MAX_PDF_PAGES", 2)
    assert pdf_text(make_pdf("a", "b"), "p") == "a\n\nb"
    assert "has 3 pages" in refusal(pdf_text, make_pdf("a", "b", "c"), "p").message


def test_reading_stops_past_any_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "MAX_TEXT_CHARS", 20)
    assert pdf_text(make_pdf("short", "text"), "p") == "short\n\ntext"
    assert (
        "more than 20 characters" in refusal(pdf_text, make_pdf("a page of more than twenty characters"), "p").message
    )


def test_text_files_are_utf8() -> None:
    assert document_text("\ufeffnaïve café".encode(), "text/markdown", "p") == "naïve café"
    assert "not UTF-8" in refusal(document_text, b"\xff\xfe\x00", "text/plain", "p").message
    error = refusal(document_text, b"PK\x03\x04", "application/zip", "f")
    assert error.param == "f" and "application/zip" in error.message


def test_file_data_is_a_data_url_or_a_bare_pdf() -> None:
    pdf = make_pdf("From a data URL.")
    assert document_from_data(f"data:application/pdf;base64,{b64(pdf)}", "f") == "From a data URL."
    assert document_from_data(b64(pdf), "f") == "From a data URL."  # bare base64, as some clients send
    assert document_from_data(f"data:text/plain;base64,{b64(b'plain words')}", "f") == "plain words"


@pytest.mark.parametrize(
    ("file_data", "words"),
    [
        (b64(b"not a pdf"), "must be a base64 data URL"),
        ("data:application/pdf,%25PDF-1.7", "must be a base64 data URL"),
        ("data:application/pdf;base64,@@@", "not valid base64"),
        (f"data:image/png;base64,{b64(b'png')}", "reads PDFs"),
    ],
)
def test_bad_file_data_is_refused(file_data: str, words: str) -> None:
    error = refusal(document_from_data, file_data, "input[0].content[1].file_data")
    assert error.param == "input[0].content[1].file_data" and words in error.message


def test_a_file_part_is_its_name_then_its_text() -> None:
    data = f"data:application/pdf;base64,{b64(make_pdf('Total: 42 EUR'))}"
    assert file_parts(data, None, "invoice.pdf", "f", NO_FETCH) == [TextPart("invoice.pdf"), TextPart("Total: 42 EUR")]
    assert file_parts(data, None, None, "f", NO_FETCH) == [TextPart("Total: 42 EUR")]
    error = refusal(file_parts, None, None, "invoice.pdf", "messages[0].content[0].file", NO_FETCH)
    assert error.param == "messages[0].content[0].file.file_data" and "inline" in error.message


def test_an_uploaded_file_is_read_by_id_as_its_name_then_its_text() -> None:
    uploads = {
        "file-1": UploadedFile("notes.txt", "text/plain", b"Total: 42 EUR"),
        "file-2": UploadedFile("a.bin", "application/zip", b"PK"),
    }

    def read(file_id: str, param: str) -> UploadedFile:
        if file_id not in uploads:
            raise InvalidRequest(f"no file {file_id}", param=param)
        return uploads[file_id]

    fetch = Fetch(file=read)
    assert file_parts(None, "file-1", None, "f", fetch) == [TextPart("notes.txt"), TextPart("Total: 42 EUR")]
    assert file_parts(None, "file-1", "mine.txt", "f", fetch)[0] == TextPart("mine.txt")
    assert refusal(file_parts, None, "file-9", None, "f", fetch).param == "f.file_id"
    unreadable = refusal(file_parts, None, "file-2", None, "f", fetch)
    assert unreadable.param == "f.file_id" and "application/zip" in unreadable.message
    assert refusal(file_parts, None, "file-1", None, "f", NO_FETCH).param == "f.file_id"
