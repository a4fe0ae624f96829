"""The Activity page in a real browser, its figures from the request log, and memory over time."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import Markup

from server.console.helpers import PASSWORD, screenshot, sign_in, signed_in_client
from server.console.records import made_up, write
from server.helpers import LiveServer, wait_for
from spark.server.console.charts import legend, line_chart, waterfall
from spark.server.memory_history import MemorySampler
from spark.store.db import Database
from spark.store.requests import RequestTable
from spark.trace import Step

HOSTILE = "<script>window.pwned = 1</script>"


def other_totals(console: LiveServer) -> tuple[int, int]:
    """The "(other)" row's requests and errors over the last hour, as the page shows them (0, 0: none)."""
    with signed_in_client(console) as client:
        html = client.get("/activity").text
    row = re.search(
        r'<tr><td>\(other\)</td><td data-label="Requests" class="num">(\d+)</td>'
        r'<td data-label="Errors" class="num">(\d+)</td>',
        html,
    )
    return (int(row[1]), int(row[2])) if row else (0, 0)


@pytest.fixture(scope="module", autouse=True)
def busy_hour(console: LiveServer) -> tuple[int, int]:
    """Two models' requests spread over the last hour (and one of them a day ago), and a real one.
    Returns the "(other)" totals before them: the console's server is shared with other files' tests,
    whose uploads and mistyped models count there too."""
    before = other_totals(console)
    now = time.time()
    records = [made_up(2000 + n, at=now - 60 * n - 30) for n in range(50)]
    records += [made_up(3000 + n, at=now - 90 * n - 45, model="second-model") for n in range(20)]
    records += [made_up(4000 + n, at=now - 6 * 3600 - 600 * n, model="yesterday-model") for n in range(10)]
    # a model without a time to first token: absent from that chart, drawn as in the others all the same
    records += [made_up(5000 + n, at=now - 120 * n - 50, model="a-model", ttft_ms=None) for n in range(3)]
    # no model's: file uploads, and a client's mistyped model (refused, not installed)
    records += [made_up(6000 + n, at=now - 300 * n - 40, model=None, route="/v1/files") for n in range(2)]
    mistyped = {"model": "tiny-chta", "status": 404, "error_type": "model_not_found", "completion_tokens": 0}
    records += [made_up(6100 + n, at=now - 300 * n - 70, **mistyped) for n in range(3)]
    write(console.settings.db_path, records)
    answer = console.openai().chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    assert answer.usage is not None
    return before


def test_the_charts_show_the_last_hour_and_day_per_model(
    page: Any, console: LiveServer, busy_hour: tuple[int, int]
) -> None:
    sign_in(page, console, "/activity")
    titles = page.locator(".chart-card figcaption strong").all_inner_texts()
    assert titles == ["Requests per minute", "Tokens generated per second", "Time to first token", "Queue", "Memory"]
    assert page.locator("svg.chart").count() == 5
    first = page.locator(".chart-card").first
    assert {"tiny-chat", "second-model"} <= set(first.locator(".legend li").all_inner_texts())
    assert first.locator("polyline.series").count() >= 2
    # a model looks the same in every chart, the memory chart (the server's line first) included
    looks: dict[str, set[tuple[str | None, str | None]]] = {}
    for item in page.locator(".legend li").all():
        line = item.locator("line")
        looks.setdefault(item.inner_text(), set()).add(
            (line.get_attribute("class"), line.get_attribute("stroke-dasharray"))
        )
    assert len(looks) >= 3 and all(len(seen) == 1 for seen in looks.values()), looks
    row = page.locator("table.totals tbody tr", has_text="second-model")
    assert row.locator("td[data-label=Requests]").inner_text() == "20"
    # uploads and a mistyped model are no model's series: one "(other)", last, and said what it is
    names = page.locator("table.totals tbody td:first-child").all_inner_texts()
    assert names[-1] == "(other)" and "tiny-chta" not in names and "(no model)" not in names
    other = page.locator("table.totals tbody tr", has_text="(other)")
    requests, errors = busy_hour
    assert other.locator("td[data-label=Requests]").inner_text() == str(requests + 5)
    assert other.locator("td[data-label=Errors]").inner_text() == str(errors + 3)
    assert "a model that is not installed" in page.locator("p.note").first.inner_text()
    assert "tiny-chta" not in first.locator(".legend").inner_text()
    assert "yesterday-model" not in page.locator("table.totals").inner_text()  # not in the last hour
    page.get_by_role("link", name="Last day").click()
    page.wait_for_url("**/activity?window=24h")
    assert "yesterday-model" in page.locator("table.totals").inner_text()
    assert page.get_by_role("link", name="Last day").get_attribute("aria-current") == "page"


def test_memory_over_time_comes_from_the_sampler(console: LiveServer) -> None:
    sampler: MemorySampler = console.app.state.memory
    wait_for(lambda: bool(sampler.since(0).samples), 15, "a first memory sample")
    sample = sampler.sample()
    assert sample.server_bytes > 10 * 2**20 and sample.system_available_bytes > 0
    assert sample.models.get("tiny-chat", 0) > 0  # loaded by the request above
    with httpx.Client(base_url=console.url, timeout=30, headers={"authorization": f"Bearer {PASSWORD}"}) as api:
        history = api.get("/api/memory", params={"window": "5m"}).json()
        assert history["interval_seconds"] == 10 and history["samples"][-1]["at"] >= sample.at
        cpu = history["devices"][0]
        assert cpu["id"] == "cpu" and 0 < cpu["free_bytes"] <= cpu["total_bytes"]
        bad = api.get("/api/memory", params={"window": "soon"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "window"
        assert httpx.get(f"{console.url}/api/memory").status_code == 401
    with signed_in_client(console) as client:
        assert "tiny-chat" in client.get("/activity").text.split("<strong>Memory</strong>")[1]


def test_activity_buckets_carry_ttft_speed_and_queue(tmp_path: Path) -> None:
    db = Database(tmp_path / "spark.db")
    table = RequestTable(db)
    at = 1_800_000_000.0
    table.insert_many([made_up(n, at=at + n) for n in (0, 1, 2)] + [made_up(5, at=at + 3, ttft_ms=None)])
    (bucket,) = table.activity(at - 1, 60).buckets
    assert bucket.requests == 4 and bucket.ttft_ms == 41.0  # the mean of 40, 41 and 42; the one without is left out
    assert bucket.tokens_per_second == pytest.approx((80 + 81 + 82 + 85) / 4)
    assert bucket.max_queue == 2  # made_up(n) found n % 3 requests ahead of it
    db.close()


def test_charts_escape_their_text_and_break_lines_where_data_is_missing() -> None:
    svg = line_chart(HOSTILE, {HOSTILE: [(0, 1), (60, 2), (600, 3)]}, 0, 660, "<b>", gap=90)
    assert isinstance(svg, Markup) and "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 1  # 0–60 joined; 600 alone
    assert "<script>" not in legend([HOSTILE])
    bars = waterfall([Step("received", 0.0), Step("slot", 10.0), Step("failed", 40.0)])
    assert len(bars) == 3 and 'class="bad"' in bars[2] and 'width="750.0"' in bars[2]


def test_the_activity_page_needs_a_session_and_a_known_window(console: LiveServer) -> None:
    with httpx.Client(base_url=console.url, timeout=30) as client:
        r = client.get("/activity")
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/activity"
        assert client.get("/activity", headers={"HX-Request": "true"}).status_code == 401
    with signed_in_client(console) as client:
        r = client.get("/activity?window=2h")
        assert r.status_code == 400 and "activity window &#39;2h&#39;" in r.text


def test_screenshots_of_activity(browser: Any, console: LiveServer) -> None:
    for window, name in (("1h", "activity"), ("24h", "activity-day")):
        for shot in screenshot(browser, console, f"/activity?window={window}", name):
            assert shot.stat().st_size > 5_000
