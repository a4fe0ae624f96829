"""The Files API against a real server, with OpenAI's and Anthropic's SDKs: files uploaded, listed,
read back and deleted per key, then read by id in chat, Responses and Messages requests exactly as
the same file sent inline is."""

from __future__ import annotations

import base64
from typing import Any

import anthropic
import openai
import pytest

from server.helpers import LiveServer, Models, anthropic_error, openai_error
from server.test_log import logged_request
from spark.server.admin_auth import read_admin_token
from spark.store.db import Database
from spark.store.keys import KeyTable
from tiny_pdf import make_pdf

NOTES = b"Invoice 7\nTotal: 42 EUR\n"


def test_openai_files_are_uploaded_listed_read_and_deleted(live: LiveServer) -> None:
    client = live.openai()
    raw = client.files.with_raw_response.create(file=("notes.txt", NOTES, "text/plain"), purpose="user_data")
    notes = raw.parse()
    assert notes.id.startswith("file-") and notes.object == "file"
    assert logged_request(live, raw.http_response).content is None  # kept as the file, not in the log
    assert (notes.bytes, notes.filename, notes.purpose, notes.status) == (
        len(NOTES),
        "notes.txt",
        "user_data",
        "processed",
    )
    pdf = client.files.create(
        file=("../../etc/report.pdf", make_pdf("Hello"), "application/octet-stream"), purpose="batch"
    )
    assert pdf.filename == "report.pdf"  # a name, never a path
    assert client.files.retrieve(notes.id).model_dump() == notes.model_dump()
    assert client.files.content(notes.id).read() == NOTES
    listed = [f.id for f in client.files.list()]
    assert listed[:2] == [pdf.id, notes.id]  # newest first
    assert [f.id for f in client.files.list(purpose="user_data")] == [notes.id]
    page = client.files.list(limit=1, order="asc", after=notes.id)  # type: ignore[call-arg]
    assert [f.id for f in page.data] == [pdf.id]
    deleted = client.files.delete(pdf.id)
    assert deleted.deleted is True and deleted.id == pdf.id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(pdf.id)
    # another key has no such file
    other = KeyTable(Database(live.settings.db_path)).create("files-other")[1]
    stranger = openai.OpenAI(base_url=live.url + "/v1", api_key=other, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        stranger.files.content(notes.id)
    assert notes.id not in [f.id for f in stranger.files.list()]


def test_anthropic_files_are_uploaded_listed_read_and_deleted(live: LiveServer) -> None:
    client = live.anthropic()
    uploaded = client.beta.files.upload(file=("notes.txt", NOTES, "text/plain"))
    assert uploaded.type == "file" and uploaded.filename == "notes.txt"
    assert (uploaded.mime_type, uploaded.size_bytes) == ("text/plain", len(NOTES))
    assert client.beta.files.retrieve_metadata(uploaded.id).id == uploaded.id
    assert client.beta.files.download(uploaded.id).read() == NOTES
    assert uploaded.id in [f.id for f in client.beta.files.list()]
    assert client.beta.files.delete(uploaded.id).type == "file_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.retrieve_metadata(uploaded.id)


def test_anthropic_file_lists_page_by_cursor_and_take_ids(live: LiveServer) -> None:
    client = live.anthropic()
    ids = [client.beta.files.upload(file=(f"n{i}.txt", b"x", "text/plain")).id for i in range(25)]
    first = client.beta.files.list()
    assert len(first.data) == 20 and first.next_page == "page_" + first.data[-1].id  # a page of 20, newest first
    listed = [f.id for f in client.beta.files.list()]  # the SDK follows next_page to the end
    assert [i for i in listed if i in ids] == ids[::-1]
    assert client.beta.files.list(page=first.next_page, limit=100).next_page is None
    chosen = client.beta.files.list(ids=[ids[3], ids[7], "file_missing"])
    assert {f.id for f in chosen.data} == {ids[3], ids[7]} and chosen.next_page is None
    for file_id in ids:
        client.beta.files.delete(file_id)


def test_an_uploaded_file_is_read_by_id_as_the_same_file_sent_inline(live: LiveServer, models: Models) -> None:
    client = live.openai()
    pdf = make_pdf("Invoice 7\nTotal: 42 EUR")
    uploaded = client.files.create(file=("invoice.pdf", pdf, "application/pdf"), purpose="user_data")
    inline = f"data:application/pdf;base64,{base64.b64encode(pdf).decode()}"

    def chat(file: dict[str, Any]) -> int:
        content: Any = [{"type": "file", "file": file}, {"type": "text", "text": "What is the total?"}]
        answer = client.chat.completions.create(
            model=models.chat, messages=[{"role": "user", "content": content}], max_tokens=1
        )
        assert answer.usage is not None
        return answer.usage.prompt_tokens

    assert chat({"file_id": uploaded.id}) == chat({"file_data": inline, "filename": "invoice.pdf"})

    def responses(part: dict[str, Any]) -> int:
        items: Any = [
            {"role": "user", "content": [{"type": "input_file", **part}, {"type": "input_text", "text": "Total?"}]}
        ]
        return client.responses.input_tokens.count(model=models.chat, input=items).input_tokens

    assert responses({"file_id": uploaded.id}) == responses({"file_data": inline, "filename": "invoice.pdf"})

    def messages(source: dict[str, Any], **title: str) -> int:
        content: Any = [{"type": "document", "source": source, **title}, {"type": "text", "text": "Total?"}]
        return (
            live.anthropic()
            .messages.count_tokens(model=models.chat, messages=[{"role": "user", "content": content}])
            .input_tokens
        )

    by_id = messages({"type": "file", "file_id": uploaded.id})
    assert by_id == messages(
        {"type": "base64", "media_type": "application/pdf", "data": inline.split(",")[1]}, title="invoice.pdf"
    )


def test_files_refusals_are_named(live: LiveServer, models: Models) -> None:
    http = live.http()
    text = {"file": ("a.txt", b"hello", "text/plain")}
    assert openai_error(http.post("/v1/files", files=text), 400)["param"] == "purpose"
    assert openai_error(http.post("/v1/files", files=text, data={"purpose": "memes"}), 400)["param"] == "purpose"
    assert openai_error(http.post("/v1/files", data={"purpose": "user_data"}), 400)["param"] == "file"
    empty = {"file": ("a.txt", b"", "text/plain")}
    assert openai_error(http.post("/v1/files", files=empty, data={"purpose": "user_data"}), 400)["param"] == "file"
    assert openai_error(http.get("/v1/files?limit=0"), 400)["param"] == "limit"
    assert openai_error(http.delete("/v1/files/file-nope"), 404)["code"] == "file_not_found"
    assert anthropic_error(http.get("/v1/files/file-nope", headers={"anthropic-version": "2023-06-01"}), 404)
    # a request naming a file that is not there, or one that cannot be read as what it names
    archive = http.post(
        "/v1/files", files={"file": ("a.zip", b"PK\x03\x04", "application/zip")}, data={"purpose": "user_data"}
    )
    file_id = archive.json()["id"]
    for part, param in (
        ({"type": "file", "file": {"file_id": "file-nope"}}, "messages[0].content[0].file.file_id"),
        ({"type": "file", "file": {"file_id": file_id}}, "messages[0].content[0].file.file_id"),
    ):
        body = {"model": models.chat, "messages": [{"role": "user", "content": [part]}]}
        assert openai_error(http.post("/v1/chat/completions", json=body), 400)["param"] == param
    image = {"role": "user", "content": [{"type": "input_image", "file_id": file_id}]}
    refused = http.post("/v1/responses", json={"model": models.chat, "input": [image]})
    assert openai_error(refused, 400)["param"] == "input[0].content[0].file_id"
    # a zero-retention key keeps nothing
    private = KeyTable(Database(live.settings.db_path)).create("files-private", zero_retention=True)[1]
    zero = http.post(
        "/v1/files", files=text, data={"purpose": "user_data"}, headers={"authorization": f"Bearer {private}"}
    )
    assert openai_error(zero, 403)["code"] == "forbidden"


def test_a_keys_files_go_when_it_is_revoked(live: LiveServer) -> None:
    keys = KeyTable(Database(live.settings.db_path))
    secret = keys.create("files-revoked")[1]
    client = openai.OpenAI(base_url=live.url + "/v1", api_key=secret, max_retries=0)
    uploaded = client.files.create(file=("a.txt", b"hello", "text/plain"), purpose="user_data")
    keys.remove("files-revoked")
    assert (
        Database(live.settings.db_path).execute("SELECT COUNT(*) FROM files WHERE id = ?", (uploaded.id,)).fetchone()[0]
        == 0
    )


def test_the_admin_lists_every_keys_files_and_deletes_one(live: LiveServer) -> None:
    client = live.openai()
    notes = client.files.create(file=("notes.txt", NOTES, "text/plain"), purpose="user_data")
    other = live.anthropic().beta.files.upload(file=("other.txt", b"other", "text/plain"))
    admin = live.http(key=read_admin_token(live.settings))
    rows = admin.get("/api/files").json()
    assert [r["id"] for r in rows[:2]] == [other.id, notes.id]  # newest first
    row = rows[1]
    assert (row["filename"], row["purpose"], row["media_type"], row["size"]) == (
        "notes.txt",
        "user_data",
        "text/plain",
        len(NOTES),
    )
    assert row["key"] == "tests" and row["key_prefix"].startswith("sk-spark-") and row["created_at"] > 0
    assert [r["id"] for r in admin.get("/api/files", params={"limit": 1}).json()] == [other.id]

    assert admin.delete(f"/api/files/{notes.id}").json() == {"id": notes.id, "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(notes.id)  # gone for its key too
    error = openai_error(admin.delete(f"/api/files/{notes.id}"), 404)
    assert error["param"] == "file_id" and notes.id in error["message"]
    assert openai_error(admin.get("/api/files", params={"limit": "0"}), 400)["param"] == "limit"
    assert live.http().get("/api/files").status_code == 401  # an API key never opens /api
