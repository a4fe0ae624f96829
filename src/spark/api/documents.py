"""Documents in requests (PDFs and text files): their text, which is what a local model reads.

Anthropic's `document` blocks, OpenAI's chat `file` parts and the Responses
API's `input_file` parts all carry a file inline as base64. A PDF's text
layer is extracted page by page (pypdf, imported on the first PDF so that a
server that never sees one does not load it); a text file is decoded as
UTF-8. Anything unreadable is an `InvalidRequest` naming the parameter: a PDF
is untrusted input, and a malformed one must never become a 500.
"""

from __future__ import annotations

import io
import logging

from spark.api.common import Fetch, decode_base64, split_data_url, uploaded_file
from spark.errors import InvalidRequest
from spark.types import TextPart

MAX_PDF_PAGES = 100  # Anthropic's own limit per document
MAX_TEXT_CHARS = 4_000_000  # about a million tokens: more than any model's context, so reading stops there
PDF_MAGIC = b"%PDF-"


def document_text(data: bytes, media_type: str, param: str) -> str:
    """The text of a file of `media_type` (a PDF or any text/* type)."""
    if media_type == "application/pdf":
        return pdf_text(data, param)
    if media_type.startswith("text/"):
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidRequest(f"'{param}' is not UTF-8 text.", param=param) from None
    raise InvalidRequest(
        f"'{param}' has media type '{media_type or '(none)'}'; this server reads PDFs (application/pdf) "
        "and text files (text/*).",
        param=param,
    )


def document_from_data(file_data: str, param: str) -> str:
    """The text of a file sent as OpenAI's `file_data`: a `data:<type>;base64,` URL, or bare base64
    of a PDF (as some clients send it)."""
    if not file_data.startswith("data:"):
        data = decode_base64(file_data, param)
        if not data.startswith(PDF_MAGIC):
            raise InvalidRequest(f"'{param}' must be a base64 data URL (data:application/pdf;base64,...).", param=param)
        return pdf_text(data, param)
    media_type, payload = split_data_url(file_data, param, "application/pdf")
    return document_text(decode_base64(payload, param), media_type.strip().lower(), param)


def pdf_text(data: bytes, param: str) -> str:
    """The text of a PDF's pages, a blank line between pages."""
    if not data.startswith(PDF_MAGIC):
        raise InvalidRequest(f"'{param}' is not a PDF (it does not start with %PDF-).", param=param)
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # a sloppy PDF's warnings are not the server's
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):  # most "protected" PDFs open with no password
            raise InvalidRequest(f"'{param}': the PDF is encrypted with a password; send it unprotected.", param=param)
        pages = reader.pages
        if len(pages) > MAX_PDF_PAGES:
            raise InvalidRequest(
                f"'{param}': the PDF has {len(pages)} pages; this server reads at most {MAX_PDF_PAGES} per document.",
                param=param,
            )
        texts, size = [], 0
        for page in pages:
            texts.append(page.extract_text().strip())
            size += len(texts[-1])
            if size > MAX_TEXT_CHARS:
                raise InvalidRequest(
                    f"'{param}': the PDF holds more than {MAX_TEXT_CHARS:,} characters of text, more than "
                    "a model's context holds.",
                    param=param,
                )
    except InvalidRequest:
        raise
    except Exception as e:  # pypdf raises many kinds on malformed files: every one is bad input here
        raise InvalidRequest(f"'{param}': the PDF could not be read ({type(e).__name__}).", param=param) from None
    text = "\n\n".join(t for t in texts if t)
    if not text:
        raise InvalidRequest(
            f"'{param}': the PDF has no text layer (scanned pages?); this server reads a PDF's text only.",
            param=param,
        )
    return text


def file_parts(
    file_data: str | None, file_id: str | None, filename: str | None, where: str, fetch: Fetch
) -> list[TextPart]:
    """An OpenAI file part (chat's `file`, the Responses API's `input_file`, at `where`) as text: its
    file name, then its text. The file is inline (`file_data`) or uploaded (`file_id`); a URL is
    not fetched."""
    if file_data is not None:
        heading = [TextPart(filename)] if filename else []
        return [*heading, TextPart(document_from_data(file_data, f"{where}.file_data"))]
    if file_id is None:
        raise InvalidRequest(
            f"'{where}.file_data' is required: this server reads files sent inline or uploaded ('file_id'), "
            "and fetches no URLs.",
            param=f"{where}.file_data",
        )
    return uploaded_text(file_id, f"{where}.file_id", fetch, filename)


def uploaded_text(file_id: str, param: str, fetch: Fetch, title: str | None = None) -> list[TextPart]:
    """An uploaded file (a PDF or a text file) as text, after its `title` (by default its file name)."""
    file = uploaded_file(file_id, param, fetch)
    return [TextPart(title or file.filename), TextPart(document_text(file.data, file.media_type, param))]
