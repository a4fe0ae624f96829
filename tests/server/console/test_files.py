"""The Files page: every key's uploaded files listed with their key and size, one deleted from the page
(and gone for its key); rows drawn from records (hostile names shown, never run); an unknown file answered."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from server.console.helpers import HOSTILE_NAME, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer
from spark.server.console.render import render_fragment

ROWS = [
    {
        "id": "file-1",
        "filename": HOSTILE_NAME,
        "purpose": "user_data",
        "media_type": "text/plain",
        "size": 2048,
        "created_at": 1_800_000_000.0,
        "key": "laptop",
        "key_prefix": "sk-spark-AbC1",
    },
    {
        "id": "file_2",
        "filename": "report.pdf",
        "purpose": "",
        "media_type": "application/pdf",
        "size": 3 * 1024 * 1024,
        "created_at": 1_799_000_000.0,
        "key": "ci",
        "key_prefix": "sk-spark-x9Qe",
    },
]


def test_a_file_is_listed_and_deleted_from_the_page(page: Any, console: LiveServer) -> None:
    client = console.openai()
    notes = client.files.create(file=("notes.txt", b"Invoice 7\nTotal: 42 EUR\n", "text/plain"), purpose="user_data")
    sign_in(page, console, "/files")
    row = page.locator(f"tr[data-file='{notes.id}']")
    assert "notes.txt" in row.inner_text() and "tests" in row.inner_text() and "user data" in row.inner_text()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Delete notes.txt ({notes.id})").click()
    page.locator("#files-table .notice", has_text=f"Deleted {notes.id}").wait_for()
    assert page.locator(f"tr[data-file='{notes.id}']").count() == 0
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(notes.id)  # gone for its key too


def test_the_action_cell_lines_up_with_its_row(page: Any, console: LiveServer) -> None:
    client = console.openai()
    for name in ("one.txt", "two.txt"):
        client.files.create(file=(name, b"text", "text/plain"), purpose="user_data")
    sign_in(page, console, "/files")
    boxes = (
        page.locator("#files-table tbody tr")
        .first.locator("td")
        .evaluate_all(
            "cells => cells.map(c => { const b = c.getBoundingClientRect();"
            " return {top: b.top, bottom: b.bottom, display: getComputedStyle(c).display}; })"
        )
    )
    assert {b["display"] for b in boxes} == {"table-cell"}  # as Batches' and Nodes' action cells (same rule)
    assert len({(round(b["top"], 1), round(b["bottom"], 1)) for b in boxes}) == 1, boxes  # one line per row


def test_rows_are_drawn_with_their_size_and_names_escaped() -> None:
    html = render_fragment(
        "files_table.html", csrf="t", files=ROWS, total_bytes=2048 + 3 * 1024 * 1024, listed=1000, message="", error=""
    )
    assert "2 files, 3.0 MiB in all." in html and "user data" in html and "report.pdf" in html
    assert 'aria-label="Delete report.pdf (file_2)"' in html
    assert HOSTILE_NAME not in html and "&lt;script&gt;" in html  # a file's name is shown, never run
    capped = render_fragment("files_table.html", csrf="t", files=ROWS, total_bytes=5, listed=2, message="", error="")
    assert "The newest 2 files, 5 B together (the server keeps more)." in capped  # no claim about the rest
    empty = render_fragment("files_table.html", csrf="t", files=[], total_bytes=0, listed=1000, message="", error="")
    assert "No file yet" in empty


def test_deleting_an_unknown_file_is_answered_not_failed(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        csrf = client.get("/files").text.split('name="csrf" value="')[1].split('"')[0]
        r = client.post("/files/no-such-file/delete", data={"csrf": csrf}, headers={"HX-Request": "true"})
        assert r.status_code == 404 and "No such file: &#39;no-such-file&#39;" in r.text


def test_screenshots_of_the_files_page(browser: Any, console: LiveServer) -> None:
    console.openai().files.create(file=("kept.txt", b"kept", "text/plain"), purpose="user_data")
    for shot in screenshot(browser, console, "/files", "files"):
        assert shot.stat().st_size > 5_000
