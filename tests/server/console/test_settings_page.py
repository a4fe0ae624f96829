"""The Settings page in a real browser: every setting with its source; a change lands in config.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from server.console.helpers import PASSWORD, capture, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer, live_server
from spark.settings import fields, load_settings


def _config(live: LiveServer) -> dict[str, Any]:
    path = live.settings.config_file
    return tomllib.loads(path.read_text()) if path.exists() else {}


def _save(page: Any, name: str, value: str, says: str) -> None:
    """Type `value` into the setting `name`, save it, and wait for the page to say `says` under it."""
    form = page.locator(f"#setting-{name}")
    form.get_by_label(name, exact=True).fill(value)
    form.get_by_role("button", name=f"Save {name}").click()
    page.locator(f"#setting-{name}").get_by_text(says).wait_for()


def test_every_setting_is_listed_with_its_source_and_restart_mark(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/settings")
    forms = page.locator("form.setting")
    assert forms.count() == len(fields())
    port = page.locator("#setting-port")
    assert "restart" in port.inner_text() and "SPARK_PORT" in port.inner_text()
    assert "default" in page.locator("#setting-parallel .setting-head").inner_text()
    # secrets say only whether they are set, and have no field
    password = page.locator("#setting-admin_password")
    assert "set" in password.inner_text() and "console-pw" not in page.content()
    assert password.locator("input[name=value]").count() == 0


def test_a_live_setting_changes_now_and_is_written_to_config_toml(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/settings")
    _save(page, "max_image_size", "19MiB", "in effect now")
    assert _config(console)["max_image_size"] == "19MiB"
    assert console.state.settings.max_image_bytes == 19 * 1024 * 1024
    assert "config.toml" in page.locator("#setting-max_image_size .setting-head").inner_text()


def test_a_restart_setting_is_saved_for_the_next_start(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/settings")
    _save(page, "log_max_mb", "600", "when the server restarts")
    assert _config(console)["log_max_mb"] == 600
    form = page.locator("#setting-log_max_mb")
    assert "saved: 600, applies at restart" in form.inner_text()  # the value waiting, and when it applies
    capture(form, "setting-pending-light.png")
    assert form.get_by_label("log_max_mb", exact=True).input_value() == "512"  # the one in effect
    # the running value still comes from the default (not from an argument, as the admin API guesses)
    assert form.locator(".setting-head .badge").first.inner_text() == "default"
    page.reload()
    assert "restart to apply" in form.inner_text()
    assert form.locator(".setting-head .badge").first.inner_text() == "default"


def test_a_command_line_argument_is_said_to_win_over_a_saved_value(
    page: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_LOG_MAX_MB", "300")
    env = {"SPARK_HOME": str(tmp_path), "SPARK_THREADS": "1", "SPARK_SPARE_RUNNER": "false"}
    env |= {"SPARK_ADMIN_PASSWORD": PASSWORD, "SPARK_LOG_MAX_MB": "300"}
    with live_server(load_settings(env=env, port=8103)) as live:  # as `spark serve --port 8103`
        sign_in(page, live, "/settings")
        form = page.locator("#setting-port")
        source = form.locator(".setting-head .badge").first
        assert source.inner_text() == "argument"
        _save(page, "port", "8105", "given as a command-line argument")
        assert "takes effect when the server restarts" not in form.inner_text()
        assert "saved: 8105, applies when the server starts without the argument" in form.inner_text()
        assert "the argument wins" in form.inner_text() and source.inner_text() == "argument"
        assert _config(live)["port"] == 8105
        capture(form, "setting-argument-light.png")
        # the argument's own value saved: the argument still gives it
        _save(page, "port", "8103", "given as a command-line argument")
        form.locator(".setting-saved").wait_for(state="detached")  # the answer to this save: nothing waits now
        assert _config(live)["port"] == 8103 and source.inner_text() == "argument"
        page.reload()
        assert source.inner_text() == "argument"
        # an environment variable wins too: the value saved is shown, with when it would apply
        _save(page, "log_max_mb", "600", "SPARK_LOG_MAX_MB is set and wins over it")
        assert (
            "saved: 600, applies when SPARK_LOG_MAX_MB is not set" in page.locator("#setting-log_max_mb").inner_text()
        )


def test_a_bad_value_is_refused_naming_the_setting(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        csrf = client.get("/settings").text.split('name="csrf" value="')[1].split('"')[0]
        r = client.post(
            "/settings", data={"name": "parallel", "value": "many", "csrf": csrf}, headers={"HX-Request": "true"}
        )
        assert r.status_code == 400 and 'role="alert"' in r.text and "parallel" in r.text
        assert 'value="many"' in r.text  # what was typed stays in the field
        assert "parallel" not in _config(console)
        r = client.post("/settings", data={"name": "nonsense", "value": "1", "csrf": csrf})
        assert r.status_code == 400 and "nonsense" in r.text


def test_screenshots_of_the_settings_page(browser: Any, console: LiveServer) -> None:
    for shot in screenshot(browser, console, "/settings", "settings"):
        assert shot.stat().st_size > 5_000
