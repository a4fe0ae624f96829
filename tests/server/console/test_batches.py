"""The Batches page: a real batch listed live with its key and progress, cancelled from the page;
rows drawn from records (hostile names shown, never run), and a cancel of an unknown batch answered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.console.helpers import HOSTILE_NAME, PASSWORD, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer, add_slow_model, live_server, server_settings, wait_for
from spark.library import Library
from spark.server.admin_auth import read_admin_token
from spark.server.console.render import render_fragment

LONG = 12_000  # tokens: many seconds on the slow model

ROWS = [
    {
        "id": "msgbatch_1",
        "api": "anthropic",
        "endpoint": "/v1/messages",
        "key": HOSTILE_NAME,
        "key_prefix": "sk-spark-AbC1",
        "status": "in_progress",
        "created_at": 1_800_000_000.0,
        "ended_at": None,
        "cancelled_at": None,
        "total": 40,
        "succeeded": 12,
        "errored": 1,
        "cancelled": 0,
        "cut": 0,
        "processing": 27,
    },
    {
        "id": "batch_2",
        "api": "openai",
        "endpoint": "/v1/chat/completions",
        "key": "ci",
        "key_prefix": "sk-spark-x9Qe",
        "status": "cancelled",
        "created_at": 1_799_000_000.0,
        "ended_at": 1_799_000_100.0,
        "cancelled_at": 1_799_000_090.0,
        "total": 5,
        "succeeded": 2,
        "errored": 0,
        "cancelled": 3,
        "cut": 1,
        "processing": 0,
    },
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, slow_llama: Path) -> Iterator[tuple[LiveServer, str]]:
    """A server with the admin password and the slow model (a batch on it runs long enough to cancel)."""
    settings = server_settings(tmp_path_factory.mktemp("batches-home"), SPARK_ADMIN_PASSWORD=PASSWORD)
    with Library(settings) as library:
        model = add_slow_model(library, slow_llama)
    with live_server(settings) as live:
        yield live, model


def test_a_batch_is_listed_live_and_cancelled_from_the_page(page: Any, served: tuple[LiveServer, str]) -> None:
    live, model = served
    sign_in(page, live, "/batches")
    assert "No batch yet" in page.locator("#batches-table").inner_text()
    params: Any = {"model": model, "max_tokens": LONG, "messages": [{"role": "user", "content": "hi"}]}
    batch = live.anthropic().messages.batches.create(
        requests=[{"custom_id": f"r{i}", "params": params} for i in range(2)]
    )
    row = page.locator(f"tr[data-batch='{batch.id}']")
    row.wait_for(timeout=15_000)  # drawn by the live table, without a reload
    assert "tests" in row.inner_text() and "in progress" in row.inner_text() and "0 of 2 answered" in row.inner_text()
    wait_for(lambda: any(r.busy for r in live.runners()), 30, "the runner to answer the first request")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Cancel {batch.id}").click()
    assert "Cancelling" in page.locator("#batch-outcome .notice").inner_text()
    row.locator(".badge", has_text="cancelled").wait_for(timeout=15_000)
    assert row.get_by_role("button").count() == 0
    # the request running when the cancel came was cut short: it is in the log, unlike one never sent
    cut = live.http(read_admin_token(live.settings)).get("/api/batches").json()[0]["cut"]
    assert cut >= 1 and f"{cut} cut short by the cancel" in row.inner_text()
    assert ("never sent" in row.inner_text()) == (cut < 2)
    ended = live.anthropic().messages.batches.retrieve(batch.id)  # the key sees the admin's cancel
    assert ended.processing_status == "ended" and ended.request_counts.canceled == 2


def test_rows_are_drawn_with_their_progress_and_names_escaped() -> None:
    html = render_fragment("batches_table.html", csrf="t", batches=ROWS, error="", message="")
    assert "13 of 40 answered, 1 with an error" in html and 'value="13"' in html
    assert "2 of 5 answered, 1 cut short by the cancel, 2 never sent" in html and "OpenAI, /v1/chat/completions" in html
    assert 'aria-label="Cancel msgbatch_1"' in html and 'aria-label="Cancel batch_2"' not in html  # it ended
    assert HOSTILE_NAME not in html and "&lt;script&gt;" in html  # a key's name is shown, never run


def test_cancelling_an_unknown_batch_is_answered_not_failed(served: tuple[LiveServer, str]) -> None:
    with signed_in_client(served[0]) as client:
        csrf = client.get("/batches").text.split('name="csrf" value="')[1].split('"')[0]
        r = client.post("/batches/no-such-batch/cancel", data={"csrf": csrf}, headers={"HX-Request": "true"})
        assert r.status_code == 404 and "No batch found with id &#39;no-such-batch&#39;" in r.text
        refused = client.post("/batches/no-such-batch/cancel", data={"csrf": "wrong"}, headers={"HX-Request": "true"})
        assert refused.status_code == 401  # a forged form changes nothing


def test_screenshots_of_the_batches_page(browser: Any, served: tuple[LiveServer, str]) -> None:
    for shot in screenshot(browser, served[0], "/batches", "batches"):
        assert shot.stat().st_size > 5_000
