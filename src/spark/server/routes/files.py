"""The Files API: `/v1/files`, in OpenAI's shape or Anthropic's (the `anthropic-version` header
decides, as on the model list).

An uploaded file is kept in the database for the key that uploaded it
(`spark.store.files`) until it is deleted. Requests of that key name it by id
where a file or an image is read: chat's `file` parts, the Responses API's
`input_file` and `input_image`, Anthropic's `document` and `image` blocks
(`spark.server.images`). A zero-retention key keeps nothing, so it cannot
upload; another key's file is not there for a key, as for one never uploaded.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from litestar import Request, Response, delete, get, post
from litestar.datastructures import UploadFile
from litestar.params import FromPath

from spark.api.files import (
    anthropic_deleted_body,
    anthropic_file_body,
    anthropic_list_body,
    openai_deleted_body,
    openai_file_body,
    openai_list_body,
    parse_list_query,
    parse_upload,
)
from spark.errors import FileNotFound
from spark.server.auth import owner, require_retention
from spark.server.family import api_family
from spark.server.responses import json_response
from spark.server.state import state_of
from spark.store.files import StoredFile


@post("/files", status_code=200)
async def upload_file(request: Request[Any, Any, Any]) -> Response[Any]:
    """Keep an uploaded file (a multipart form: `file`, and for OpenAI `purpose`)."""
    require_retention(request, "upload files")
    anthropic = _anthropic(request)
    form = await request.form()
    part = form.get("file")
    upload = part if isinstance(part, UploadFile) else None
    data = await upload.read() if upload is not None else None
    purpose = form.get("purpose")
    new = parse_upload(
        upload.filename if upload else None,
        upload.content_type if upload else None,
        data,
        purpose if isinstance(purpose, str) else None,
        anthropic=anthropic,
    )
    assert data is not None  # checked by the parse
    stored = StoredFile(
        id=new.id,
        owner=owner(request),
        filename=new.filename,
        purpose=new.purpose,
        media_type=new.media_type,
        size=len(data),
        created_at=time.time(),
    )
    await asyncio.to_thread(state_of(request).files.put, stored, data)
    return json_response(anthropic_file_body(stored) if anthropic else openai_file_body(stored))


@get("/files")
async def list_files(request: Request[Any, Any, Any]) -> Response[Any]:
    """The key's files, newest first, a page at a time."""
    params = request.query_params
    query = parse_list_query(params, [*params.getall("ids[]", []), *params.getall("ids", [])])
    files = await asyncio.to_thread(state_of(request).files.list, owner(request), query.purpose)
    return json_response(anthropic_list_body(files, query) if _anthropic(request) else openai_list_body(files, query))


@get("/files/{file_id:str}")
async def get_file(request: Request[Any, Any, Any], file_id: FromPath[str]) -> Response[Any]:
    stored = await asyncio.to_thread(state_of(request).files.get, file_id, owner(request))
    if stored is None:
        raise _not_found(file_id)
    return json_response(anthropic_file_body(stored) if _anthropic(request) else openai_file_body(stored))


@get("/files/{file_id:str}/content")
async def file_content(request: Request[Any, Any, Any], file_id: FromPath[str]) -> Response[bytes]:
    """The file's bytes, as uploaded."""
    found = await asyncio.to_thread(state_of(request).files.content, file_id, owner(request))
    if found is None:
        raise _not_found(file_id)
    stored, data = found
    return Response(data, media_type=stored.media_type)


@delete("/files/{file_id:str}", status_code=200)
async def delete_file(request: Request[Any, Any, Any], file_id: FromPath[str]) -> Response[Any]:
    if not await asyncio.to_thread(state_of(request).files.delete, file_id, owner(request)):
        raise _not_found(file_id)
    return json_response(anthropic_deleted_body(file_id) if _anthropic(request) else openai_deleted_body(file_id))


FILES_ROUTES = [upload_file, list_files, get_file, file_content, delete_file]


def _anthropic(request: Request[Any, Any, Any]) -> bool:
    return api_family(request.scope) == "anthropic"


def _not_found(file_id: str) -> FileNotFound:
    return FileNotFound(f"No such file: '{file_id}'.", param="file_id")
