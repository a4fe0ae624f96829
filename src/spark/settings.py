"""Spark's settings: defaults < config.toml < SPARK_* environment variables.

`Settings` is the one definition. Each field's description feeds
docs/settings.md (`spark.settings.settings_markdown`). Paths come from
platformdirs and all move under `SPARK_HOME` when it is set.
"""

from __future__ import annotations

import os
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any

import msgspec
import platformdirs

from spark.errors import SettingsError
from spark.units import parse_duration, parse_size

ENV_PREFIX = "SPARK_"
CONFIG_FILE = "config.toml"


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """All of Spark's settings. Read them with `load_settings()`."""

    home: Annotated[
        str, _doc("Folder that holds Spark's config, data and cache. Empty: the platform's usual folders.")
    ] = ""
    host: Annotated[
        str,
        _doc(
            "Address the server listens on. Loopback by default, so nothing is exposed until you "
            "choose to; use 0.0.0.0 to serve the network (API keys are required either way)."
        ),
    ] = "127.0.0.1"
    port: Annotated[int, _doc("Port of the HTTP server (APIs and web console).")] = 8080
    max_body_size: Annotated[
        str, _doc("Largest request body the API accepts (e.g. 32MiB); a larger one is refused with 413. 0: no limit.")
    ] = "32MiB"
    max_tokens_limit: Annotated[
        int,
        _doc(
            "Most tokens one API request may ask to generate (max_tokens); more is refused with 400. "
            "0: no limit beyond the context length."
        ),
    ] = 0
    request_timeout: Annotated[
        str,
        _doc(
            "Longest one API request may run (e.g. 10m); a generation still running then ends with "
            "a timeout error. 0: no limit."
        ),
    ] = "10m"
    allow_remote_images: Annotated[
        bool,
        _doc(
            "Fetch http(s) image URLs sent in requests. Off: nothing leaves the machine, and such "
            "requests are refused with 400 (send images inline as base64)."
        ),
    ] = False
    max_image_size: Annotated[
        str, _doc("Largest image one request may carry or fetch (e.g. 20MiB); a larger one is refused with 400.")
    ] = "20MiB"
    cors_origins: Annotated[
        str,
        _doc(
            "Web origins allowed to call the API from a browser, comma-separated "
            "(e.g. https://app.example.com; * for any). Empty: CORS off."
        ),
    ] = ""
    context_length: Annotated[
        int,
        _doc(
            "Context tokens per request slot, unless a model's own settings say otherwise. "
            "0 uses the model's training context."
        ),
    ] = 4096
    parallel: Annotated[int, _doc("Requests one loaded model generates at once (slots in its context).")] = 4
    threads: Annotated[int, _doc("CPU threads per runner. 0: the number of physical cores.")] = 0
    kv_type: Annotated[str, _doc("KV cache type: f16, q8_0 or q4_0.")] = "f16"
    keep_alive: Annotated[
        str,
        _doc(
            "How long an idle model stays loaded (e.g. 30s, 5m, 1h; 0 unloads at once; "
            "a negative value keeps it loaded)."
        ),
    ] = "5m"
    max_loaded_models: Annotated[int, _doc("Most models loaded at once. 0: as many as fit.")] = 0
    max_queue: Annotated[
        int, _doc("Requests that may wait for one model; past it new ones are refused as overloaded.")
    ] = 64
    load_wait: Annotated[
        str,
        _doc(
            "Longest a request waits for busy models to finish when its model only fits once they "
            "are unloaded; then it is refused with the memory arithmetic. 0: refuse at once."
        ),
    ] = "5m"
    max_ram: Annotated[str, _doc("Most RAM models may use (e.g. 8GiB). Empty or 0: the memory available.")] = ""
    gpu_reserve: Annotated[str, _doc("Memory kept free on each GPU.")] = "512MiB"
    hang_timeout: Annotated[str, _doc("A runner with work in flight and no progress for this long is restarted.")] = (
        "60s"
    )
    load_timeout: Annotated[str, _doc("Longest a runner may take to load its model.")] = "5m"
    hf_endpoint: Annotated[str, _doc("Hugging Face Hub address used by pull and search.")] = "https://huggingface.co"
    hf_token: Annotated[str, _doc("Hugging Face token for gated or private repositories.")] = ""
    default_model: Annotated[str, _doc("Model used when none is named.")] = "smollm2-135m-instruct-q4_1"
    log_level: Annotated[str, _doc("Server log level: debug, info, warning or error.")] = "info"
    log_retention_days: Annotated[
        int, _doc("Days the request log keeps a request (`spark log`, the console's log). 0: keep no request log.")
    ] = 30
    log_max_mb: Annotated[
        int,
        _doc(
            "Most megabytes (MiB) the request log may take; past it the oldest requests are pruned. 0: no size limit."
        ),
    ] = 512
    admin_password: Annotated[
        str,
        _doc(
            "Password of the admin API under /api/ and the web console (`Authorization: Bearer PASSWORD` "
            "or HTTP Basic). Empty: only commands run on the server's machine (with its local admin token) "
            "may use the admin API."
        ),
    ] = ""
    metrics_auth: Annotated[
        str,
        _doc(
            "Who may read GET /metrics: key (any API key), admin (the admin password or local admin token) "
            "or none (anyone who can connect)."
        ),
    ] = "key"

    # --- derived paths ------------------------------------------------------
    @property
    def config_dir(self) -> Path:
        return Path(self.home) if self.home else Path(platformdirs.user_config_dir("spark"))

    @property
    def data_dir(self) -> Path:
        return Path(self.home) / "data" if self.home else Path(platformdirs.user_data_dir("spark"))

    @property
    def cache_dir(self) -> Path:
        return Path(self.home) / "cache" if self.home else Path(platformdirs.user_cache_dir("spark"))

    @property
    def run_dir(self) -> Path:
        """Runner sockets and the server's pid file."""
        return self.data_dir / "run"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "spark.db"

    # --- parsed values ------------------------------------------------------
    @property
    def keep_alive_seconds(self) -> float:
        return parse_duration(self.keep_alive, "keep_alive")

    @property
    def hang_timeout_seconds(self) -> float:
        return parse_duration(self.hang_timeout, "hang_timeout")

    @property
    def load_timeout_seconds(self) -> float:
        return parse_duration(self.load_timeout, "load_timeout")

    @property
    def load_wait_seconds(self) -> float:
        return parse_duration(self.load_wait, "load_wait")

    @property
    def max_body_bytes(self) -> int | None:
        """The request body limit in bytes; None when there is none."""
        return parse_size(self.max_body_size, "max_body_size") or None

    @property
    def request_timeout_seconds(self) -> float | None:
        """The request time limit; None when there is none."""
        return parse_duration(self.request_timeout, "request_timeout") or None

    @property
    def max_image_bytes(self) -> int:
        return parse_size(self.max_image_size, "max_image_size")

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    @property
    def max_ram_bytes(self) -> int | None:
        return parse_size(self.max_ram, "max_ram") or None

    @property
    def gpu_reserve_bytes(self) -> int:
        return parse_size(self.gpu_reserve, "gpu_reserve")


_KV_TYPES = ("f16", "q8_0", "q4_0")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_NUMBER_AS_TEXT = (
    "keep_alive",
    "hang_timeout",
    "load_timeout",
    "load_wait",
    "max_ram",
    "gpu_reserve",
    "max_body_size",
    "request_timeout",
    "max_image_size",
)
_LOG_LEVELS = ("debug", "info", "warning", "error")
_METRICS_AUTH = ("key", "admin", "none")


def _fields() -> dict[str, tuple[type, str, Any]]:
    """name -> (type, description, default) for every setting."""
    hints = typing.get_type_hints(Settings, include_extras=True)
    defaults = Settings()
    out = {}
    for name in Settings.__struct_fields__:
        hint = hints[name]
        base, meta = typing.get_args(hint)[0], typing.get_args(hint)[1]
        out[name] = (base, meta.description, getattr(defaults, name))
    return out


def _convert(name: str, base: type, raw: Any, source: str) -> Any:
    if base is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise SettingsError(f"{source}: {name} must be true or false, not {raw!r}", param=name)
    if base is int:
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise SettingsError(f"{source}: {name} must be a whole number, not {raw!r}", param=name)
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{source}: {name} must be a whole number, not {raw!r}", param=name) from None
    if name in _NUMBER_AS_TEXT and isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return str(raw)  # durations and sizes may be written as plain numbers in TOML
    if not isinstance(raw, str):
        raise SettingsError(f"{source}: {name} must be text, not {raw!r}", param=name)
    return raw


def _validate(s: Settings, source_of: dict[str, str]) -> None:
    def fail(key: str, why: str) -> None:
        raise SettingsError(f"{source_of.get(key, 'default')}: {key} {why}", param=key)

    if not 0 < s.port < 65536:
        fail("port", f"must be between 1 and 65535, not {s.port}")
    if s.parallel < 1:
        fail("parallel", f"must be at least 1, not {s.parallel}")
    for key in (
        "context_length",
        "threads",
        "max_loaded_models",
        "max_tokens_limit",
        "log_retention_days",
        "log_max_mb",
    ):
        if getattr(s, key) < 0:
            fail(key, f"must not be negative, not {getattr(s, key)}")
    if s.max_queue < 1:
        fail("max_queue", f"must be at least 1, not {s.max_queue}")
    if s.kv_type not in _KV_TYPES:
        fail("kv_type", f"must be one of {', '.join(_KV_TYPES)}, not {s.kv_type!r}")
    if s.log_level not in _LOG_LEVELS:
        fail("log_level", f"must be one of {', '.join(_LOG_LEVELS)}, not {s.log_level!r}")
    if s.metrics_auth not in _METRICS_AUTH:
        fail("metrics_auth", f"must be one of {', '.join(_METRICS_AUTH)}, not {s.metrics_auth!r}")
    for key, parse in (
        ("keep_alive", parse_duration),
        ("hang_timeout", parse_duration),
        ("load_timeout", parse_duration),
        ("load_wait", parse_duration),
        ("max_ram", parse_size),
        ("gpu_reserve", parse_size),
        ("max_body_size", parse_size),
        ("request_timeout", parse_duration),
        ("max_image_size", parse_size),
    ):
        try:
            parse(getattr(s, key), key)
        except SettingsError as e:
            raise SettingsError(f"{source_of.get(key, 'default')}: {e.message}", param=key) from None
    for key in ("request_timeout", "load_wait"):
        if parse_duration(getattr(s, key), key) < 0:
            fail(key, f"must not be negative, not {getattr(s, key)!r}")


def config_path(env: typing.Mapping[str, str] | None = None) -> Path:
    """Where config.toml is read from (honours SPARK_HOME)."""
    env = os.environ if env is None else env
    home = env.get(ENV_PREFIX + "HOME", "")
    return Settings(home=home).config_dir / CONFIG_FILE


def load_settings(env: typing.Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from defaults, then config.toml, then SPARK_* variables, then `overrides`.

    Raises `SettingsError` naming the key for a malformed file or a bad value.
    """
    env = os.environ if env is None else env
    fields = _fields()
    values: dict[str, Any] = {}
    source_of: dict[str, str] = {}

    path = config_path(env)
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise SettingsError(f"{path} is not valid TOML: {e}", param=str(path)) from None
        for key, raw in data.items():
            if key not in fields or key == "home":
                raise SettingsError(f"{path}: unknown setting '{key}'", param=key)
            values[key] = _convert(key, fields[key][0], raw, str(path))
            source_of[key] = str(path)

    for key, (base, _, _) in fields.items():
        var = ENV_PREFIX + key.upper()
        if var in env:
            values[key] = _convert(key, base, env[var], var)
            source_of[key] = var

    for key, raw in overrides.items():
        if key not in fields:
            raise SettingsError(f"unknown setting '{key}'", param=key)
        values[key] = raw
        source_of[key] = "argument"

    settings = Settings(**values)
    _validate(settings, source_of)
    return settings


def settings_markdown() -> str:
    """docs/settings.md, generated from the `Settings` definition."""
    lines = [
        "# Settings",
        "",
        "Spark reads its settings from, in rising order of precedence: the defaults below,",
        "`config.toml` in the config folder (keys as in the first column, e.g. `port = 9000`),",
        "and `SPARK_*` environment variables. The config folder is `$SPARK_HOME` when set,",
        "otherwise the platform's (`~/.config/spark` on Linux).",
        "",
        "This file is generated from `spark/settings.py`; `tests/test_settings.py` fails when it is stale.",
        "",
        "| variable | config.toml key | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, (_, description, default) in _fields().items():
        value = ("true" if default else "false") if isinstance(default, bool) else default
        shown = f"`{value}`" if value != "" else "(empty)"
        lines.append(f"| `{ENV_PREFIX}{name.upper()}` | `{name}` | {shown} | {description} |")
    return "\n".join(lines) + "\n"
