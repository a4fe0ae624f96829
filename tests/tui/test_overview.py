"""The Overview against a real server's log: the activity's current minute, and the last errors without
the cancellations a user asked for."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from server.helpers import live_server, server_settings
from spark.store.db import Database
from spark.store.requests import RequestRecord, RequestTable
from spark.tui.app import SparkApp
from spark.tui.client import AdminAPI, Endpoint
from tui.helpers import PASSWORD, connected, keys, shown, until

pytestmark = pytest.mark.anyio


def logged(row_id: str, started_at: float, status: int, error_type: str) -> RequestRecord:
    return RequestRecord(
        id=row_id,
        request_id=f"req_{row_id}",
        started_at=started_at,
        route="/v1/chat/completions",
        status=status,
        duration_ms=5.0,
        model="tiny",
        error_type=error_type,
        error_message=f"{error_type} (test)",
    )


async def test_the_current_minute_counts_and_cancellations_are_not_errors(tmp_path: Path) -> None:
    settings = server_settings(tmp_path / "home", SPARK_ADMIN_PASSWORD=PASSWORD)
    minute = (int(time.time() // 60) - 10) * 60.0  # a whole minute in the activity's last half hour
    # a real error, then a cancelled batch's four requests (newer: they would push the error out)
    rows = [logged("failed", minute + 1, 404, "model_not_found")]
    rows += [logged(f"cancelled{i}", minute + 2 + i, 499, "cancelled") for i in range(4)]
    with live_server(settings) as live:
        RequestTable(Database(settings.db_path)).insert_many(rows)
        endpoint = Endpoint(live.url, PASSWORD, live.url)
        # the TUI's clock in that minute: it is the current one, and /api/activity has its bucket
        app = SparkApp(AdminAPI(lambda: endpoint), clock=lambda: minute + 30, poll_seconds=0.5)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: connected(app) and bool(keys(app, "errors")), "the last errors")
            assert keys(app, "errors") == ["failed"]
            await until(pilot, lambda: "now" in shown(app, "#requests-label"), "the activity")
            assert "requests/min 5 now · 5 in 30 min" in shown(app, "#requests-label")
