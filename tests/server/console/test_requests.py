"""The request log in a real browser: filters, paging, live rows, a request's waterfall, content and error."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from server.console.helpers import screenshot, sign_in, signed_in_client
from server.console.records import made_up, write
from server.helpers import LiveServer
from spark.server.console.render import render_fragment
from spark.store.requests import RequestContent
from spark.trace import Step

HOSTILE = "<script>window.pwned = 1</script>"


@pytest.fixture(scope="module", autouse=True)
def logged(console: LiveServer) -> None:
    """Sixty requests of the key `laptop`, and a few special ones, an hour ago at most."""
    base = time.time() - 600
    records = [made_up(n, at=base - n) for n in range(60)]
    records += [
        made_up(
            900,
            at=base + 1,
            model="other-model",
            key_name="ci",
            status=400,
            error_type="context_length_exceeded",
            error_message=f"the prompt {HOSTILE} has 9000 tokens; the context holds 2048",
            completion_tokens=0,
            ttft_ms=None,
            tokens_per_second=None,
            timeline=[Step("received", 0.0), Step("failed", 3.0, {"error": "context_length_exceeded"})],
        ),
        made_up(901, at=base + 2, key_name="private", zero_retention=True, content=None),
        made_up(
            902,
            at=base + 3,
            content=RequestContent(
                request={"messages": [{"role": "user", "content": f"say {HOSTILE}"}]}, output=f"sure: {HOSTILE}"
            ),
        ),
    ]
    write(console.settings.db_path, records)


def _wait_live(page: Any) -> None:
    """Until the list's event stream is open (the server subscribes before it answers)."""
    page.wait_for_function(
        "() => { const d = document.querySelector('#rows')['htmx-internal-data'];"
        " return !!d && !!d.sseEventSource && d.sseEventSource.readyState === EventSource.OPEN; }"
    )


def _ids(page: Any) -> list[str]:
    hrefs = page.locator("#rows tr td:first-child a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    return [h.rsplit("/", 1)[1] for h in hrefs]


def test_the_log_filters_by_model_key_status_and_time(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/requests")
    assert len(_ids(page)) == 50  # a page
    page.get_by_label("Status").select_option("error")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/requests?**status=error**")
    assert "made00900" in _ids(page)
    assert all(b != "200" for b in page.locator("#rows td[data-label=Status]").all_inner_texts())
    page.get_by_label("Status").select_option("")
    page.get_by_label("Key").fill("private")
    page.get_by_role("button", name="Filter").click()
    assert _ids(page) == ["made00901"]
    page.goto(f"{console.url}/requests?model=other-model&since=1h")
    assert _ids(page) == ["made00900"] and page.get_by_label("Time").input_value() == "1h"
    page.goto(f"{console.url}/requests?model=nobody")
    assert page.locator("#empty").inner_text() == "No request for model 'nobody'."
    page.goto(f"{console.url}/requests?key=laptop&model=Chat")  # part of a name: the installed ones it fits
    empty = page.locator("#empty").inner_text()
    assert empty.startswith("No request for model 'Chat' (the filter takes a model's whole name): requests for ")
    page.locator("#empty").get_by_role("link", name="tiny-chat").click()
    page.wait_for_url("**/requests?model=tiny-chat&key=laptop")
    assert len(_ids(page)) == 50
    page.goto(f"{console.url}/requests?key=ci")
    assert _ids(page) == ["made00900"]
    page.goto(f"{console.url}/requests?key=nobody")
    assert page.locator("#empty").inner_text() == "No request matches."


def test_paging_goes_to_older_requests(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/requests?key=laptop")
    first = _ids(page)
    page.get_by_role("link", name="Older →").click()
    page.wait_for_url("**offset=50**")
    older = _ids(page)
    assert older and not set(first) & set(older)
    assert "key=laptop" in page.url and page.get_by_label("Key").input_value() == "laptop"
    page.get_by_role("link", name="← Newer").click()
    assert _ids(page) == first


def test_a_new_request_appears_live(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/requests")
    before = _ids(page)
    _wait_live(page)
    answer = console.openai().chat.completions.with_raw_response.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hello"}], max_tokens=3
    )
    request_id = answer.headers["x-request-id"].removeprefix("req_")  # the page links by Spark's own id
    page.locator(f"#rows a[href='/requests/{request_id}']").wait_for(timeout=20_000)
    assert _ids(page)[0] == request_id and _ids(page)[1:] == before[: len(_ids(page)) - 1]
    assert "tests" in page.locator("#rows tr").first.inner_text()  # the test server's key


def _count(total: int, shown: int) -> str:
    """The count line of a live list, as the page draws it."""
    figures = f"{total} request{'' if total == 1 else 's'}" + (f", 1–{shown} shown" if total > shown else "")
    return figures + "; new ones appear as they finish."


def test_the_count_follows_the_live_rows(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/requests")
    for path in ("/requests", "/requests?key=tests&since=15m"):  # a full page, and a filtered list
        page.goto(f"{console.url}{path}")
        rows = page.locator("#rows > tr")
        total, shown = int(page.locator("#count").inner_text().split()[0]), rows.count()
        assert page.locator("#count").inner_text() == _count(total, shown)
        _wait_live(page)
        console.openai().chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "count me"}], max_tokens=2
        )
        page.wait_for_function(f"() => document.querySelectorAll('#rows > tr').length > {shown}", timeout=20_000)
        assert page.locator("#count").inner_text() == _count(total + 1, shown + 1)
        assert page.locator("#empty").count() == 0 or page.locator("#empty").is_hidden()


def test_live_rows_follow_the_filters(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/requests?status=error")
    _wait_live(page)
    ok = console.openai().chat.completions.with_raw_response.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    with console.http() as client:
        bad = client.post("/v1/chat/completions", json={"model": "tiny-chat", "messages": []})
    assert bad.status_code == 400
    page.locator(f"#rows a[href='/requests/{bad.headers['x-request-id'][4:]}']").wait_for(timeout=20_000)
    assert page.locator(f"#rows a[href='/requests/{ok.headers['x-request-id'][4:]}']").count() == 0


def test_a_request_page_draws_the_timeline_and_shows_content_as_text(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/requests/made00902")
    assert page.locator("table.timeline svg.bar rect").count() == 7
    labels = page.locator("table.timeline tbody td:first-child").all_inner_texts()
    # in words, as the TUI says them
    assert labels == [
        "received",
        "authenticated",
        "queued",
        "slot assigned",
        "prompt evaluated",
        "first token",
        "finished",
    ]
    details = page.locator("table.timeline tbody td:last-child").all_inner_texts()
    assert details[2] == "position 2 in the queue (1 slot on tiny-chat)"
    assert details[3] == "slot 0: 2 of 32 prompt tokens reused from the slot's cache"
    assert details[4] == "30 tokens in 28.0 ms" and not any("=" in d for d in details)
    assert page.locator("#output").inner_text() == f"sure: {HOSTILE}"
    assert f"say {HOSTILE}" in page.locator(".content").inner_text()
    assert page.evaluate("typeof window.pwned") == "undefined"


def test_an_error_and_a_zero_retention_request(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/requests/made00900")
    error = page.get_by_role("alert").inner_text()
    assert "context_length_exceeded" in error and HOSTILE in error
    assert page.locator("table.timeline svg.bar rect.bad").count() == 1
    assert page.evaluate("typeof window.pwned") == "undefined"
    page.goto(f"{console.url}/requests/made00901")
    assert "zero-retention key" in page.locator(".content").inner_text()
    assert page.locator(".content .turn").count() == 0


def test_bad_filters_and_unknown_requests(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        r = client.get("/requests?status=maybe")
        assert r.status_code == 400 and "status: &#39;maybe&#39; is not ok, error" in r.text
        r = client.get("/requests?since=yesterday")
        assert r.status_code == 400 and "since: &#39;yesterday&#39;" in r.text
        assert client.get("/requests?offset=-1").status_code == 400
        assert client.get("/requests/live?status=maybe").status_code == 400
        r = client.get("/requests/no-such-request")
        assert r.status_code == 404 and "no logged request &#39;no-such-request&#39;" in r.text


def test_the_log_pages_need_a_session(console: LiveServer) -> None:
    with httpx.Client(base_url=console.url, timeout=30) as client:
        for path in ("/requests", "/requests/made00001", "/requests/live", "/requests?status=error"):
            r = client.get(path)
            assert r.status_code == 303 and r.headers["location"].startswith("/login?next=/requests"), path
            r = client.get(path, headers={"HX-Request": "true"})
            assert r.status_code == 401 and r.headers["hx-redirect"].startswith("/login"), path


def test_screenshots_of_the_log(browser: Any, console: LiveServer) -> None:
    for path, name in (
        ("/requests", "requests"),
        ("/requests/made00902", "request"),
        ("/requests/made00900", "request-error"),
    ):
        for shot in screenshot(browser, console, path, name):
            assert shot.stat().st_size > 5_000


def test_a_request_that_names_no_model_shows_its_route() -> None:
    upload = render_fragment("request_row.html", r=made_up(7000, model=None, route="/v1/files"))
    assert "<code>/v1/files</code>" in upload  # a file upload, a batch's creation: not a bare "–"
    chat = render_fragment("request_row.html", r=made_up(7001))
    assert "tiny-chat" in chat and "/v1/chat/completions" not in chat
