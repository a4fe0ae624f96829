"""The Files API on the wire, in OpenAI's shape and in Anthropic's (one route serves both:
the `anthropic-version` header that Anthropic's SDKs send decides).

An upload is a multipart form: `file` and, for OpenAI, `purpose`. The file's
media type is the part's, else guessed from its name (a PDF by its first bytes
too). File names are only ever shown back: never used as paths.
"""

from __future__ import annotations

import mimetypes
import secrets
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, Protocol

import msgspec

from spark.api.common import invalid_from_validation, page_body, page_of, rfc3339
from spark.errors import InvalidRequest

# OpenAI's purposes; any is kept, and any uploaded file can be read by a request of its key
PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
MAX_FILENAME = 255
_GENERIC_TYPES = ("", "application/octet-stream")


class NewFile(msgspec.Struct, frozen=True):
    """A checked upload."""

    id: str
    filename: str
    purpose: str
    media_type: str


class FileRecord(Protocol):
    """An uploaded file as both shapes describe it (the store's record is one)."""

    @property
    def id(self) -> str: ...
    @property
    def filename(self) -> str: ...
    @property
    def purpose(self) -> str: ...
    @property
    def media_type(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def created_at(self) -> float: ...


def parse_upload(
    filename: str | None, content_type: str | None, data: bytes | None, purpose: str | None, *, anthropic: bool
) -> NewFile:
    """Check an upload's `file` part (its name, type and bytes; None: absent) and `purpose`
    (required by OpenAI's shape, absent from Anthropic's)."""
    if data is None:
        raise InvalidRequest("Missing required parameter: 'file' (a multipart form field with the file).", param="file")
    if not data:
        raise InvalidRequest("'file' is empty.", param="file")
    if not anthropic:
        if purpose is None:
            raise InvalidRequest("Missing required parameter: 'purpose'.", param="purpose")
        if purpose not in PURPOSES:
            raise InvalidRequest(f"'purpose' must be one of {', '.join(PURPOSES)}, not '{purpose}'.", param="purpose")
    name = (filename or "upload").replace("\\", "/").rsplit("/", 1)[-1].strip() or "upload"
    return NewFile(
        id=f"file-{secrets.token_hex(12)}",
        filename=name[:MAX_FILENAME],
        purpose=purpose or "",
        media_type=_media_type(name, content_type, data),
    )


def _media_type(filename: str, content_type: str | None, data: bytes) -> str:
    given = (content_type or "").split(";")[0].strip().lower()
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    if given not in _GENERIC_TYPES:
        return given
    guessed, _ = mimetypes.guess_type(filename)
    return guessed or "application/octet-stream"


# --- OpenAI's shape ---------------------------------------------------------------


class _OpenAIFile(msgspec.Struct, frozen=True):
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    object: str = "file"
    status: str = "processed"
    expires_at: None = None
    status_details: None = None


class ListQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A file list's query, in either shape: OpenAI's `purpose`, `order` and `after`, Anthropic's
    `before_id` and `after_id`, or its `page` cursor (a `next_page` it was given) and `ids`; `limit`
    in both."""

    purpose: str | None = None
    order: Literal["asc", "desc"] = "desc"
    after: str | None = None
    after_id: str | None = None
    before_id: str | None = None
    page: str | None = None
    ids: Annotated[tuple[str, ...], msgspec.Meta(max_length=100)] = ()
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] | None = None


def parse_list_query(query: Mapping[str, str], ids: Sequence[str] = ()) -> ListQuery:
    """The page asked for (bad values raise `InvalidRequest` naming the parameter); `ids` are the
    query's repeated `ids[]` (Anthropic's SDKs send a list so)."""
    known: dict[str, object] = {k: v for k, v in query.items() if k in ListQuery.__struct_fields__ and k != "ids"}
    try:
        return msgspec.convert({**known, "ids": list(dict.fromkeys(ids))}, ListQuery, strict=False)
    except msgspec.ValidationError as e:
        raise invalid_from_validation(e) from None


def openai_file_body(file: FileRecord) -> bytes:
    return msgspec.json.encode(_openai(file))


def _openai(file: FileRecord) -> _OpenAIFile:
    return _OpenAIFile(file.id, file.size, int(file.created_at), file.filename, file.purpose)


def openai_list_body(files: Sequence[FileRecord], query: ListQuery) -> bytes:
    """A page of `files` (oldest first), newest first unless `order=asc`, after the file `after`."""
    ordered = list(files) if query.order == "asc" else list(files)[::-1]
    page, more = page_of(ordered, [f.id for f in ordered], after=query.after, limit=query.limit or 10_000)
    return page_body([msgspec.to_builtins(_openai(f)) for f in page], more)


def openai_deleted_body(file_id: str) -> bytes:
    return msgspec.json.encode({"id": file_id, "object": "file", "deleted": True})


# --- Anthropic's shape ------------------------------------------------------------


class _AnthropicFile(msgspec.Struct, frozen=True):
    id: str
    filename: str
    mime_type: str
    size_bytes: int
    created_at: str  # RFC 3339
    downloadable: bool = True
    type: str = "file"


def anthropic_file_body(file: FileRecord) -> bytes:
    return msgspec.json.encode(_anthropic(file))


def _anthropic(file: FileRecord) -> _AnthropicFile:
    return _AnthropicFile(file.id, file.filename, file.media_type, file.size, rfc3339(file.created_at))


def anthropic_list_body(files: Sequence[FileRecord], query: ListQuery) -> bytes:
    """A page of `files` (oldest first), newest first as Anthropic lists them: after `after_id` or the
    `page` cursor, or the page before `before_id`; with `ids`, those of them that exist, in one page.
    `next_page` is the cursor of the page after it (null at the end)."""
    newest = list(files)[::-1]
    if query.ids:
        page, more = [f for f in newest if f.id in query.ids], False
    else:
        after = query.after_id or (query.page.removeprefix(_CURSOR) if query.page else None)
        ids = [f.id for f in newest]
        page, more = page_of(newest, ids, after=after, before=query.before_id, limit=query.limit or 20)
    cursor = _CURSOR + page[-1].id if more and page else None
    return page_body([msgspec.to_builtins(_anthropic(f)) for f in page], more, openai=False, next_page=cursor)


_CURSOR = "page_"  # Anthropic's page cursors begin so; Spark's is the last file's id


def anthropic_deleted_body(file_id: str) -> bytes:
    return msgspec.json.encode({"id": file_id, "type": "file_deleted"})
