"""Settings: defaults < config.toml < SPARK_* variables, with clear errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark.errors import SettingsError
from spark.settings import load_settings
from spark.units import parse_duration, parse_size


def test_defaults_and_paths_under_spark_home(spark_home: Path) -> None:
    s = load_settings()
    assert s.host == "127.0.0.1" and s.port == 8080
    assert s.config_dir == spark_home
    assert s.data_dir == spark_home / "data"
    assert s.models_dir == spark_home / "data" / "models"
    assert s.keep_alive_seconds == 300


def test_config_file_then_environment_take_precedence(spark_home: Path, monkeypatch) -> None:
    (spark_home / "config.toml").write_text('port = 9000\nkeep_alive = "10m"\nparallel = 2\n')
    s = load_settings()
    assert (s.port, s.keep_alive_seconds, s.parallel) == (9000, 600, 2)
    monkeypatch.setenv("SPARK_PORT", "9100")
    s = load_settings()
    assert s.port == 9100 and s.parallel == 2


def test_malformed_config_names_the_file(spark_home: Path) -> None:
    (spark_home / "config.toml").write_text("port = = 3\n")
    with pytest.raises(SettingsError, match="config.toml is not valid TOML"):
        load_settings()


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("prot = 1\n", "prot", "unknown setting 'prot'"),
        ('port = "eighty"\n', "port", "port must be a whole number"),
        ("port = 70000\n", "port", "port must be between 1 and 65535"),
        ('kv_type = "q2"\n', "kv_type", "kv_type must be one of f16, q8_0, q4_0"),
        ('keep_alive = "soon"\n', "keep_alive", "keep_alive: 'soon' is not a duration"),
        ('max_ram = "lots"\n', "max_ram", "max_ram: 'lots' is not a size"),
        ("host = 3\n", "host", "host must be text"),
    ],
)
def test_bad_config_value_names_the_key(spark_home: Path, text: str, key: str, message: str) -> None:
    (spark_home / "config.toml").write_text(text)
    with pytest.raises(SettingsError, match=message) as info:
        load_settings()
    assert info.value.param == key
    assert "config.toml" in info.value.message


def test_bad_environment_value_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("SPARK_PARALLEL", "many")
    with pytest.raises(SettingsError, match="SPARK_PARALLEL: parallel must be a whole number"):
        load_settings()
    monkeypatch.setenv("SPARK_PARALLEL", "0")
    with pytest.raises(SettingsError, match="SPARK_PARALLEL: parallel must be between 1 and 256, not 0"):
        load_settings()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SPARK_PARALLEL", "100000", "parallel must be between 1 and 256, not 100000"),
        ("SPARK_DEFAULT_MAX_TOKENS", str(2**70), "default_max_tokens must be between 0 and 10000000"),
        ("SPARK_MAX_QUEUE", str(2**63), "max_queue must be between 1 and 1000000"),
        ("SPARK_THREADS", "5000", "threads must be between 0 and 1024"),
        ("SPARK_LOG_RETENTION_DAYS", str(2**64), "log_retention_days must be between 0 and 36500"),
        ("SPARK_REQUEST_TIMEOUT", str(2**70), "request_timeout must be at most 3153600000 seconds"),
        ("SPARK_KEEP_ALIVE", "-" + "9" * 400, "keep_alive must be at most 3153600000 seconds"),
        ("SPARK_SNAPSHOT_DISK", "2000000TiB", "snapshot_disk must be at most 1152921504606846976 bytes"),
    ],
)
def test_every_number_has_an_upper_bound(monkeypatch, variable: str, value: str, message: str) -> None:
    # a value beyond 64 bits reached the runner protocol: every model load failed with a 500
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=f"{variable}: {message}") as info:
        load_settings()
    assert info.value.param == variable.removeprefix("SPARK_").lower()


def test_the_settings_file_is_bounded_too(spark_home: Path) -> None:
    (spark_home / "config.toml").write_text(f"default_max_tokens = {2**63 - 1}\n")
    with pytest.raises(SettingsError, match="config.toml: default_max_tokens must be between 0 and 10000000"):
        load_settings()


def test_cli_reports_a_bad_setting_as_one_line(monkeypatch) -> None:
    import subprocess
    import sys

    monkeypatch.setenv("SPARK_PORT", "x")
    out = subprocess.run([sys.executable, "-m", "spark", "ls"], capture_output=True, text=True)
    assert out.returncode == 1
    assert "SPARK_PORT: port must be a whole number" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("1.5", 1.5), ("30s", 30), ("5m", 300), ("1h30m", 5400), ("-1", -1), ("250ms", 0.25)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text, "k") == seconds


@pytest.mark.parametrize(
    ("text", "size"), [("", 0), ("1024", 1024), ("512MiB", 512 * 2**20), ("8GB", 8 * 10**9), ("2g", 2 * 10**9)]
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text, "k") == size


@pytest.mark.parametrize(("text", "value"), [("true", True), ("1", True), ("off", False), ("No", False)])
def test_switches_read_the_usual_words(monkeypatch, text: str, value: bool) -> None:
    monkeypatch.setenv("SPARK_ALLOW_REMOTE_IMAGES", text)
    assert load_settings().allow_remote_images is value


def test_bad_switch_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("SPARK_ALLOW_REMOTE_IMAGES", "maybe")
    with pytest.raises(SettingsError, match="SPARK_ALLOW_REMOTE_IMAGES: allow_remote_images must be true or false"):
        load_settings()


def test_fixed_sets_and_traits_come_from_the_definition() -> None:
    from spark.settings import DURATION, RESTART, SECRET, SIZE, fields

    f = fields()
    assert all(x.description for x in f.values())
    assert f["kv_type"].choices == ("f16", "q8_0", "q4_0")
    assert f["log_level"].choices == ("debug", "info", "warning", "error")
    assert f["metrics_auth"].choices == ("key", "admin", "none")
    assert {n for n, x in f.items() if DURATION in x.traits} == {
        "request_timeout",
        "keep_alive",
        "load_wait",
        "hang_timeout",
        "load_timeout",
        "node_report_interval",
        "shutdown_grace",
    }
    assert {n for n, x in f.items() if SIZE in x.traits} == {
        "max_body_size",
        "max_image_size",
        "max_ram",
        "gpu_reserve",
        "snapshot_ram",
        "snapshot_disk",
    }
    assert {n for n, x in f.items() if SECRET in x.traits} == {"admin_password", "hf_token", "node_token"}
    assert RESTART in f["port"].traits and RESTART not in f["keep_alive"].traits
    assert (f["port"].ge, f["port"].le, f["parallel"].ge, f["threads"].ge, f["host"].ge) == (1, 65535, 1, 0, None)


def test_flash_attention_is_auto_on_or_off_and_a_quantized_cache_needs_it() -> None:
    assert load_settings(env={}).flash_attention == "auto"
    assert load_settings(env={"SPARK_FLASH_ATTENTION": "off"}).flash_attention == "off"
    with pytest.raises(SettingsError, match="flash_attention must be one of auto, on, off") as e:
        load_settings(env={"SPARK_FLASH_ATTENTION": "yes"})
    assert e.value.param == "flash_attention"
    with pytest.raises(SettingsError, match="flash_attention cannot be off with kv_type q8_0") as e:
        load_settings(env={"SPARK_FLASH_ATTENTION": "off", "SPARK_KV_TYPE": "q8_0"})
    assert e.value.param == "flash_attention"
    assert load_settings(env={"SPARK_FLASH_ATTENTION": "on", "SPARK_KV_TYPE": "q4_0"}).kv_type == "q4_0"


def test_a_fleet_node_needs_an_http_central_and_a_token() -> None:
    with pytest.raises(SettingsError, match="node_token must be set with central") as e:
        load_settings(env={"SPARK_CENTRAL": "http://127.0.0.1:8080"})
    assert e.value.param == "node_token"
    with pytest.raises(SettingsError, match="central must be an http") as e:
        load_settings(env={"SPARK_CENTRAL": "central:8080", "SPARK_NODE_TOKEN": "t"})
    assert e.value.param == "central"
    with pytest.raises(SettingsError, match="advertise_url must be an http"):
        load_settings(env={"SPARK_ADVERTISE_URL": "gpu-box"})
    ok = load_settings(env={"SPARK_CENTRAL": "http://127.0.0.1:8080", "SPARK_NODE_TOKEN": "t"})
    assert ok.central == "http://127.0.0.1:8080" and ok.node_report_seconds == 2.0


def test_durations_and_sizes_may_be_plain_numbers(spark_home: Path) -> None:
    (spark_home / "config.toml").write_text("keep_alive = 90\nmax_ram = 1073741824\n")
    s = load_settings()
    assert s.keep_alive_seconds == 90 and s.max_ram_bytes == 2**30


def test_changed_settings_are_checked_and_name_the_key() -> None:
    from spark.settings import changed_settings

    s = changed_settings(load_settings(), {"keep_alive": "1h", "parallel": "2", "allow_remote_images": "on"})
    assert (s.keep_alive_seconds, s.parallel, s.allow_remote_images) == (3600, 2, True)
    for changes, key in (({"parallel": 0}, "parallel"), ({"home": "/x"}, "home"), ({"nope": 1}, "nope")):
        with pytest.raises(SettingsError) as info:
            changed_settings(load_settings(), changes)
        assert info.value.param == key and not info.value.message.startswith(":")


CONFIG = """# Spark's settings
port = 9000  # the port, with a # in the comment
name_like = "a # b"   # a value with a hash
arr = [
  1,
  2,
]

[table]
keep_alive = "1m"  # not a top-level key: left alone
"""


def test_config_edits_are_in_place(tmp_path: Path) -> None:
    import tomllib

    from spark.config_file import update_config

    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    update_config(path, {"port": 9100, "name_like": "c # d", "arr": [3], "keep_alive": "10m", "flag": True})
    text = path.read_text()
    assert text.startswith("# Spark's settings\nport = 9100  # the port, with a # in the comment\n")
    assert 'name_like = "c # d"  # a value with a hash\n' in text
    assert "arr = [\n    3,\n]\n" in text or "arr = [3]\n" in text
    data = tomllib.loads(text)
    assert data["table"] == {"keep_alive": "1m"}, "tables and unknown keys are kept"
    assert (data["keep_alive"], data["flag"], data["port"], data["arr"]) == ("10m", True, 9100, [3])
    assert text.index('keep_alive = "10m"') < text.index("[table]"), "new keys go before the first table"
    assert text.endswith('flag = true\n\n[table]\nkeep_alive = "1m"  # not a top-level key: left alone\n')
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")], "no temporary file is left"

    fresh = tmp_path / "new" / "config.toml"
    update_config(fresh, {"port": 1234})
    assert fresh.read_text() == "port = 1234\n" and fresh.stat().st_mode & 0o777 == 0o600
