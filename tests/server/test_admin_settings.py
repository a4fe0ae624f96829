"""`GET/PATCH /api/settings` over a real port: sources, secrets, config.toml edited in place, live values."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from server.helpers import live_server, openai_error, server_settings
from spark.settings import fields

PASSWORD = "settings-password"
CONFIG = """# Spark on this laptop
port = 8080  # the usual port

# models stay a while
keep_alive = "5m"
"""


def test_a_change_is_written_in_place_applied_and_read_back_by_a_new_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.toml"
    config.write_text(CONFIG)
    mode = config.stat().st_mode & 0o777
    monkeypatch.setenv("SPARK_MAX_LOADED_MODELS", "3")
    settings = server_settings(home, SPARK_ADMIN_PASSWORD=PASSWORD, SPARK_MAX_LOADED_MODELS="3")
    with live_server(settings) as live, live.http(key=PASSWORD) as http:
        view = http.get("/api/settings").json()
        assert view["config_file"] == str(config)
        by_name = {s["name"]: s for s in view["settings"]}
        assert list(by_name) == list(fields()), "every setting, in definition order"
        assert by_name["keep_alive"] | {"description": ""} == by_name["keep_alive"] | {
            "value": "5m",
            "default": "5m",
            "source": "config.toml",
            "env_var": "SPARK_KEEP_ALIVE",
            "kind": "duration",
            "changeable": True,
            "restart_required": False,
            "secret": False,
            "is_set": True,
            "pending_restart": False,
            "description": "",
        }
        assert by_name["max_loaded_models"]["source"] == "env" and by_name["max_loaded_models"]["value"] == 3
        assert by_name["parallel"]["source"] == "default" and by_name["port"]["restart_required"] is True
        assert by_name["kv_type"]["kind"] == "choice" and by_name["kv_type"]["choices"] == ["f16", "q8_0", "q4_0"]
        assert by_name["home"]["changeable"] is False
        password = by_name["admin_password"]
        assert password["secret"] and password["is_set"] and password["value"] is None and password["default"] is None
        assert by_name["hf_token"]["is_set"] is False
        assert PASSWORD not in http.get("/api/settings").text

        try:
            changed = http.patch(
                "/api/settings",
                json={
                    "keep_alive": "10m",
                    "max_queue": 9,
                    "port": 9123,
                    "log_level": "debug",
                    "hf_token": "hf_very_secret",
                    "max_loaded_models": 2,
                },
            )
            assert changed.status_code == 200, changed.text
            result = {c["name"]: c for c in changed.json()["changed"]}
            assert result["keep_alive"] == {
                "name": "keep_alive",
                "applied": True,
                "restart_required": False,
                "overridden_by": None,
            }
            assert result["max_queue"]["applied"] and result["log_level"]["applied"]
            assert result["port"]["restart_required"] and not result["port"]["applied"]
            assert result["max_loaded_models"]["overridden_by"] == "SPARK_MAX_LOADED_MODELS"
            assert not result["max_loaded_models"]["applied"]
            assert sorted(changed.json()["restart_required"]) == ["hf_token", "port"]

            # applied live: the server uses the new values now
            state = live.state
            assert state.settings.keep_alive == "10m" and state.settings.max_queue == 9
            assert state.settings.port == settings.port and state.settings.max_loaded_models == 3
            assert logging.getLogger("spark").level == logging.DEBUG
            after = {s["name"]: s for s in http.get("/api/settings").json()["settings"]}
            assert after["keep_alive"]["value"] == "10m" and after["keep_alive"]["source"] == "config.toml"
            assert after["port"]["pending_restart"] is True and after["port"]["value"] == settings.port
            # the value waiting for the restart, and the running one's source: still config.toml, as at the start
            assert (
                after["port"]["saved"] == 9123 and after["port"]["source"] == by_name["port"]["source"] == "config.toml"
            )
            assert after["hf_token"]["saved"] is None and after["keep_alive"]["saved"] is None  # a secret; applied
            assert after["hf_token"]["value"] is None and "hf_very_secret" not in http.get("/api/settings").text
        finally:
            http.patch("/api/settings", json={"log_level": "info"})

    text = config.read_text()
    assert text.startswith("# Spark on this laptop\nport = 9123  # the usual port\n\n# models stay a while\n")
    assert 'keep_alive = "10m"\n' in text and "max_queue = 9\n" in text and 'hf_token = "hf_very_secret"' in text
    assert config.stat().st_mode & 0o777 == mode, "the file keeps its permissions"
    assert not [p for p in home.iterdir() if p.name.endswith(".tmp")], "no temporary file is left"

    again = server_settings(home, SPARK_ADMIN_PASSWORD=PASSWORD)
    assert (again.keep_alive, again.max_queue, again.port, again.hf_token) == ("10m", 9, 9123, "hf_very_secret")
    with live_server(again, key_name=None) as live, live.http(key=PASSWORD) as http:
        read_back = {s["name"]: s for s in http.get("/api/settings").json()["settings"]}
        assert read_back["keep_alive"]["value"] == "10m" and read_back["keep_alive"]["source"] == "config.toml"
        assert read_back["max_queue"]["value"] == 9 and read_back["hf_token"]["is_set"] is True


BAD_CHANGES = [
    ({"port": "x"}, "port"),
    ({"port": 70000}, "port"),
    ({"parallel": 0}, "parallel"),
    ({"kv_type": "q2"}, "kv_type"),
    ({"keep_alive": "soon"}, "keep_alive"),
    ({"max_ram": "lots"}, "max_ram"),
    ({"allow_remote_images": "maybe"}, "allow_remote_images"),
    ({"max_queue": 3, "no_such_setting": 1}, "no_such_setting"),
    ({"home": "/elsewhere"}, "home"),
    ({}, "body"),
    # every number within its bound: one beyond 64 bits failed every model load after it was applied
    ({"default_max_tokens": 2**70}, "default_max_tokens"),
    ({"default_max_tokens": 2**63}, "default_max_tokens"),
    ({"parallel": 100_000}, "parallel"),
    ({"parallel": 257}, "parallel"),
    ({"max_queue": 2**70}, "max_queue"),
    ({"context_length": 2**63}, "context_length"),
    ({"max_tokens_limit": 2**63 - 1}, "max_tokens_limit"),
    ({"max_loaded_models": 2**63}, "max_loaded_models"),
    ({"request_timeout": 2**63}, "request_timeout"),
    ({"keep_alive": "9" * 400}, "keep_alive"),  # infinite as a float
    ({"snapshot_ram": 2**63}, "snapshot_ram"),
    # a value of the wrong JSON type is named as any other bad value
    ({"keep_alive": {"a": 1}}, "keep_alive"),
    ({"max_queue": None}, "max_queue"),
    ({"parallel": [1]}, "parallel"),
    ({"allow_remote_images": [True]}, "allow_remote_images"),
]


def test_bad_changes_are_refused_naming_the_setting_and_nothing_is_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)
    settings = server_settings(home, SPARK_ADMIN_PASSWORD=PASSWORD)
    with live_server(settings, key_name=None) as live, live.http(key=PASSWORD) as http:
        for body, param in BAD_CHANGES:
            error = openai_error(http.patch("/api/settings", json=body), 400)
            assert error["param"] == param, (body, error)
        assert openai_error(http.patch("/api/settings", json={"port": [1]}), 400)["type"] == "invalid_request_error"
        too_many = openai_error(http.patch("/api/settings", json={"parallel": 100_000}), 400)
        assert too_many["message"] == "parallel must be between 1 and 256, not 100000"
        assert openai_error(http.patch("/api/settings", content=b"[1, 2]"), 400)
        assert live.state.settings == settings
        (home / "config.toml").write_text("port = = 1\n")  # broken by hand while the server runs
        for response in (http.get("/api/settings"), http.patch("/api/settings", json={"max_queue": 3})):
            error = openai_error(response, 400)
            assert error["param"] == "config.toml" and "not valid TOML" in error["message"]
        assert (home / "config.toml").read_text() == "port = = 1\n", "a broken file is not written over"
        (home / "config.toml").write_text(CONFIG)
        assert openai_error(live.http(key=None).get("/api/settings"), 401)
        assert openai_error(live.http(key=None).patch("/api/settings", json={"max_queue": 3}), 401)
    assert (home / "config.toml").read_text() == CONFIG
