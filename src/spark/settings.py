"""Spark's settings: defaults < config.toml < SPARK_* environment variables.

`Settings` is the one definition. Each field's description feeds
docs/settings.md (`spark.settings.settings_markdown`). Paths come from
platformdirs and all move under `SPARK_HOME` when it is set.
"""

from __future__ import annotations

import enum
import os
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import platformdirs

from spark.errors import SettingsError
from spark.units import parse_duration, parse_size

ENV_PREFIX = "SPARK_"
CONFIG_FILE = "config.toml"


class Trait(enum.Enum):
    """What a setting is, beyond its type: markers in its `Annotated` metadata."""

    DURATION = "duration"  # text such as 30s or 5m (a plain number is seconds)
    SIZE = "size"  # text such as 512MiB (a plain number is bytes)
    SECRET = "secret"  # never shown by the admin API, which says only whether it is set
    RESTART = "restart"  # a change takes effect when the server restarts
    FIXED = "fixed"  # not a config.toml key, so not changeable through the admin API


DURATION, SIZE, SECRET, RESTART, FIXED = Trait.DURATION, Trait.SIZE, Trait.SECRET, Trait.RESTART, Trait.FIXED

Source = Literal["default", "config.toml", "env", "argument"]
KVType = Literal["f16", "q8_0", "q4_0"]
FlashAttention = Literal["auto", "on", "off"]
LogLevel = Literal["debug", "info", "warning", "error"]
MetricsAuth = Literal["key", "admin", "none"]


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


# bounds of whole-number settings, checked by load_settings: each has an upper one, so that every value
# fits the runner protocol's 64 bits (and means something)
PORT = msgspec.Meta(ge=1, le=65535)
TOKENS = msgspec.Meta(ge=0, le=10_000_000)  # as a model's own context_length and max_tokens
SLOTS = msgspec.Meta(ge=1, le=256)  # as a model's own parallel
THREADS = msgspec.Meta(ge=0, le=1024)
MODELS = msgspec.Meta(ge=0, le=10_000)
QUEUE = msgspec.Meta(ge=1, le=1_000_000)
DAYS = msgspec.Meta(ge=0, le=36_500)  # a hundred years
MEBIBYTES = msgspec.Meta(ge=0, le=1 << 30)  # a pebibyte
MAX_SIZE_BYTES = 1 << 60  # sizes (an exbibyte)
MAX_DURATION_SECONDS = 100 * 365 * 86400  # durations, either way (a negative one may mean "forever")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """All of Spark's settings. Read them with `load_settings()`."""

    home: Annotated[
        str, _doc("Folder that holds Spark's config, data and cache. Empty: the platform's usual folders."), FIXED
    ] = ""
    host: Annotated[
        str,
        _doc(
            "Address the server listens on. Loopback by default, so nothing is exposed until you "
            "choose to; use 0.0.0.0 to serve the network (API keys are required either way)."
        ),
        RESTART,
    ] = "127.0.0.1"
    port: Annotated[int, PORT, _doc("Port of the HTTP server (APIs and web console)."), RESTART] = 8080
    max_body_size: Annotated[
        str,
        _doc("Largest request body the API accepts (e.g. 32MiB); a larger one is refused with 413. 0: no limit."),
        SIZE,
        RESTART,
    ] = "32MiB"
    max_tokens_limit: Annotated[
        int,
        TOKENS,
        _doc(
            "Most tokens one API request may ask to generate (max_tokens); more is refused with 400. "
            "0: no limit beyond the context length."
        ),
    ] = 0
    default_max_tokens: Annotated[
        int,
        TOKENS,
        _doc(
            "Most tokens a chat answer runs to when the request sets no max_tokens and the model's own "
            "settings set none: a generation caught in a loop stops here instead of at the context's end "
            "(finish reason length). A request that asks for more gets it. 0: up to the context's end."
        ),
    ] = 2048
    request_timeout: Annotated[
        str,
        _doc(
            "Longest one API request may run (e.g. 10m); a generation still running then ends with "
            "a timeout error. 0: no limit."
        ),
        DURATION,
    ] = "10m"
    allow_remote_images: Annotated[
        bool,
        _doc(
            "Fetch http(s) image URLs sent in requests. Off: nothing leaves the machine, and such "
            "requests are refused with 400 (send images inline as base64)."
        ),
    ] = False
    allow_private_image_hosts: Annotated[
        bool,
        _doc(
            "With allow_remote_images, also fetch from hosts on loopback, private and link-local "
            "addresses (e.g. an image server on your network). Off: such URLs, and redirects to them, "
            "are refused, so that a request cannot make the server reach its own network."
        ),
    ] = False
    max_image_size: Annotated[
        str, _doc("Largest image one request may carry or fetch (e.g. 20MiB); a larger one is refused with 400."), SIZE
    ] = "20MiB"
    cors_origins: Annotated[
        str,
        _doc(
            "Web origins allowed to call the API from a browser, comma-separated "
            "(e.g. https://app.example.com; * for any). Empty: CORS off."
        ),
        RESTART,
    ] = ""
    context_length: Annotated[
        int,
        TOKENS,
        _doc(
            "Context tokens per request slot, unless a model's own settings say otherwise. "
            "0 uses the model's training context, which also caps any larger value (a model's own "
            "`context_length` above it is refused)."
        ),
    ] = 4096
    parallel: Annotated[int, SLOTS, _doc("Requests one loaded model generates at once (slots in its context).")] = 4
    threads: Annotated[int, THREADS, _doc("CPU threads per runner. 0: the number of physical cores.")] = 0
    kv_type: Annotated[
        KVType,
        _doc(
            "KV cache type: f16, q8_0 or q4_0. A quantized cache takes half (q8_0) or a quarter (q4_0) of "
            "the memory, and llama.cpp attends every token the same way, so an answer does not depend on what "
            "shared its batches (drafts, other requests), at any thread count, for weights with no batched "
            "kernel (Q4_1; with Q4_0, Q4_K, Q8_0 or F16 weights a batch is multiplied in another order than a "
            "lone token, so a near tie can still go either way); long prompts are evaluated "
            "more slowly (no tiled kernel). With f16 and more than one thread, llama.cpp attends a lone "
            "token to a long cache in another order than a batch, so a near tie can go either way."
        ),
    ] = "f16"
    snapshot_ram: Annotated[
        str,
        _doc(
            "RAM each loaded model keeps for KV snapshots of conversations pushed out of their slot "
            "(e.g. 256MiB); past it the least recently used spill to disk. 0: none in RAM."
        ),
        SIZE,
    ] = "256MiB"
    snapshot_disk: Annotated[
        str,
        _doc(
            "Disk space for KV snapshots (the snapshots folder under the cache folder, all models together), "
            "least recently used dropped first: a conversation comes back without re-evaluating its prompt "
            "after an unload or a restart. Zero-retention requests are never written. 0: none on disk."
        ),
        SIZE,
    ] = "4GiB"
    speculative: Annotated[
        bool,
        _doc(
            "Speculative decoding: guess the next tokens from the prompt and the output so far "
            "(n-gram lookup) and verify them in one batch. Every token is chosen as it would be without a "
            "draft (where llama.cpp has a batched kernel for the weights' type, Q4_0, Q4_K, Q8_0 or F16, a batch "
            "rounds differently from one token, so a near tie can go the other way); answers that copy "
            "from their prompt come faster. It drafts only where that pays, by what longer batches are "
            "measured to cost on this machine and how often its guesses hold, so answers that copy nothing "
            "run as they would without it. A model's own setting overrides it (models loaded from then on)."
        ),
    ] = True
    flash_attention: Annotated[
        FlashAttention,
        _doc(
            "Flash attention (llama.cpp's kernel): auto (llama.cpp decides: on for the CPU and CUDA, as "
            "llama-server), on or off. On the CPU which is faster depends on the processor: off may decode "
            "and verify speculative drafts faster deep in a conversation (thousands of tokens) and read "
            "prompts slower, for a larger compute buffer (the attention scores) and slightly different "
            "numerics; try both on your own work. A quantized KV cache needs it on. "
            "A model's own setting overrides it (models loaded from then on)."
        ),
    ] = "auto"
    keep_alive: Annotated[
        str,
        _doc(
            "How long an idle model stays loaded (e.g. 30s, 5m, 1h; 0 unloads at once; "
            "a negative value keeps it loaded)."
        ),
        DURATION,
    ] = "5m"
    max_loaded_models: Annotated[int, MODELS, _doc("Most models loaded at once. 0: as many as fit.")] = 0
    max_queue: Annotated[
        int, QUEUE, _doc("Requests that may wait for one model; past it new ones are refused as overloaded.")
    ] = 64
    load_wait: Annotated[
        str,
        _doc(
            "Longest a request waits for busy models to finish when its model only fits once they "
            "are unloaded; then it is refused as overloaded (with Retry-After, which clients retry), giving "
            "the memory arithmetic. 0: refuse at once."
        ),
        DURATION,
    ] = "5m"
    max_ram: Annotated[str, _doc("Most RAM models may use (e.g. 8GiB). Empty or 0: the memory available."), SIZE] = ""
    gpu_reserve: Annotated[str, _doc("Memory kept free on each GPU."), SIZE] = "512MiB"
    hang_timeout: Annotated[
        str,
        _doc("A runner with work in flight and no progress for this long is restarted (runners started from then on)."),
        DURATION,
    ] = "60s"
    load_timeout: Annotated[str, _doc("Longest a runner may take to load its model."), DURATION] = "5m"
    spare_runner: Annotated[
        bool,
        _doc(
            "Keep one runner process started ahead of time, with llama.cpp imported, so that a request "
            "for a model that is not loaded waits only for the model load. Off: one process less while idle."
        ),
    ] = True
    shutdown_grace: Annotated[
        str,
        _doc(
            "When the server is told to stop (SIGTERM, SIGINT), how long open requests and streams may "
            "go on; then they end with a shutting-down error (an error event in a stream). 0: at once."
        ),
        DURATION,
    ] = "15s"
    hf_endpoint: Annotated[str, _doc("Hugging Face Hub address used by pull and search."), RESTART] = (
        "https://huggingface.co"
    )
    hf_token: Annotated[str, _doc("Hugging Face token for gated or private repositories."), SECRET, RESTART] = ""
    default_model: Annotated[str, _doc("Model used when none is named.")] = "smollm2-135m-instruct-q4_1"
    log_level: Annotated[LogLevel, _doc("Server log level: debug, info, warning or error.")] = "info"
    log_retention_days: Annotated[
        int,
        DAYS,
        _doc("Days the request log keeps a request (`spark log`, the console's log). 0: keep no request log."),
        RESTART,
    ] = 30
    response_retention_days: Annotated[
        int,
        DAYS,
        _doc(
            "Days a Responses API answer made with `store` (OpenAI's default) is kept, for "
            "`previous_response_id` and `GET /v1/responses/{id}`, and a chat completion made with "
            "`store: true`, for `GET /v1/chat/completions/{id}`; only the key that made it can read it. "
            "Zero-retention keys store nothing. 0: store neither."
        ),
    ] = 30
    log_max_mb: Annotated[
        int,
        MEBIBYTES,
        _doc(
            "Most megabytes (MiB) the request log may take; past it the oldest requests are pruned. 0: no size limit."
        ),
        RESTART,
    ] = 512
    admin_password: Annotated[
        str,
        _doc(
            "Password of the admin API under /api/ and the web console (`Authorization: Bearer PASSWORD` "
            "or HTTP Basic). Empty: only commands run on the server's machine (with its local admin token) "
            "may use the admin API."
        ),
        SECRET,
        RESTART,
    ] = ""
    metrics_auth: Annotated[
        MetricsAuth,
        _doc(
            "Who may read GET /metrics: key (any API key), admin (the admin password or local admin token) "
            "or none (anyone who can connect)."
        ),
        RESTART,
    ] = "key"
    central: Annotated[
        str,
        _doc(
            "URL of the central Spark server this one joins as a fleet node (e.g. http://central:8080), "
            "with node_token. Empty: not a node."
        ),
        RESTART,
    ] = ""
    node_token: Annotated[
        str,
        _doc("Join token this node presents to its central (from `spark nodes add NAME` on the central)."),
        SECRET,
        RESTART,
    ] = ""
    advertise_url: Annotated[
        str,
        _doc(
            "URL the central reaches this node at (e.g. http://gpu-box:8080 or an https reverse proxy). "
            "Empty: this machine's address toward the central and the port it listens on."
        ),
        RESTART,
    ] = ""
    fleet_affinity: Annotated[
        bool,
        _doc(
            "On a fleet central: send a conversation's next turn to the place that served it last, "
            "where its KV cache is. Off: every request goes to the best place by load alone."
        ),
    ] = True
    node_report_interval: Annotated[
        str,
        _doc(
            "How often a node reports its models and load to its central; the central marks a node "
            "not ready after 3 missed reports."
        ),
        DURATION,
        RESTART,
    ] = "2s"

    # --- derived paths ------------------------------------------------------
    @property
    def config_dir(self) -> Path:
        return Path(self.home) if self.home else Path(platformdirs.user_config_dir("spark"))

    @property
    def config_file(self) -> Path:
        return self.config_dir / CONFIG_FILE

    @property
    def data_dir(self) -> Path:
        return Path(self.home) / "data" if self.home else Path(platformdirs.user_data_dir("spark"))

    @property
    def cache_dir(self) -> Path:
        return Path(self.home) / "cache" if self.home else Path(platformdirs.user_cache_dir("spark"))

    @property
    def snapshots_dir(self) -> Path:
        """KV snapshots on disk, one folder per model file and KV layout."""
        return self.cache_dir / "snapshots"

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
    def shutdown_grace_seconds(self) -> float:
        return parse_duration(self.shutdown_grace, "shutdown_grace")

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
    def node_report_seconds(self) -> float:
        return max(0.1, parse_duration(self.node_report_interval, "node_report_interval"))

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
    def snapshot_ram_bytes(self) -> int:
        return parse_size(self.snapshot_ram, "snapshot_ram")

    @property
    def snapshot_disk_bytes(self) -> int:
        return parse_size(self.snapshot_disk, "snapshot_disk")

    @property
    def gpu_reserve_bytes(self) -> int:
        return parse_size(self.gpu_reserve, "gpu_reserve")


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_NOT_NEGATIVE_DURATIONS = ("request_timeout", "load_wait", "shutdown_grace")


class Field(msgspec.Struct, frozen=True):
    """One setting as the `Settings` definition describes it."""

    name: str
    type: Any  # bool, int, str or a Literal of the values allowed
    description: str
    default: Any
    traits: frozenset[Trait]
    ge: float | None = None  # the least value allowed, for a whole number
    le: float | None = None  # the greatest

    @property
    def choices(self) -> tuple[str, ...]:
        """The values allowed, for a setting whose values are a fixed set; else ()."""
        return typing.get_args(self.type) if typing.get_origin(self.type) is Literal else ()


def fields() -> dict[str, Field]:
    """Every setting by name, in definition order, derived from `Settings`."""
    global _FIELDS
    if _FIELDS is None:
        hints = typing.get_type_hints(Settings, include_extras=True)
        defaults = Settings()
        _FIELDS = {}
        for name in Settings.__struct_fields__:
            base, *extras = typing.get_args(hints[name])
            description = next(m.description for m in extras if isinstance(m, msgspec.Meta) and m.description)
            traits = frozenset(m for m in extras if isinstance(m, Trait))
            ge = next((m.ge for m in extras if isinstance(m, msgspec.Meta) and m.ge is not None), None)
            le = next((m.le for m in extras if isinstance(m, msgspec.Meta) and m.le is not None), None)
            _FIELDS[name] = Field(name, base, description, getattr(defaults, name), traits, ge, le)
    return _FIELDS


_FIELDS: dict[str, Field] | None = None


def _where(source: str, text: str) -> str:
    """`text` after where the value was set (a file, a variable); a default or an option the user just
    typed needs no saying."""
    return f"{source}: {text}" if source and source not in ("default", "argument") else text


def convert(field: Field, raw: Any, source: str = "") -> Any:
    """`raw` (from TOML, an environment variable or JSON) as `field`'s type; `SettingsError` naming
    the key (after `source`, e.g. the file) when it is not one."""
    name = field.name

    def fail(why: str) -> SettingsError:
        return SettingsError(_where(source, f"{name} {why}, not {raw!r}"), param=name)

    if field.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise fail("must be true or false")
    if field.type is int:
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise fail("must be a whole number")
        try:
            return int(raw)
        except ValueError:
            raise fail("must be a whole number") from None
    if field.traits & {DURATION, SIZE} and isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return str(raw)  # durations and sizes may be written as plain numbers
    if not isinstance(raw, str):
        raise fail("must be text")
    if field.choices and raw not in field.choices:
        raise fail(f"must be one of {', '.join(field.choices)}")
    return raw


def _validate(s: Settings, source_of: typing.Mapping[str, str], fallback: str = "default") -> None:
    """Check the ranges and the durations and sizes of `s`; errors name the key after its source."""

    def fail(key: str, why: str) -> None:
        raise SettingsError(_where(source_of.get(key, fallback), f"{key} {why}"), param=key)

    for field in fields().values():
        value = getattr(s, field.name)
        if field.ge is not None and field.le is not None and not field.ge <= value <= field.le:
            fail(field.name, f"must be between {field.ge} and {field.le}, not {value}")
    for field in fields().values():
        if not field.traits & {DURATION, SIZE}:
            continue
        parse = parse_duration if DURATION in field.traits else parse_size
        try:
            amount = parse(getattr(s, field.name), field.name)
        except SettingsError as e:
            raise SettingsError(_where(source_of.get(field.name, fallback), e.message), param=field.name) from None
        most, unit = (MAX_DURATION_SECONDS, "seconds") if DURATION in field.traits else (MAX_SIZE_BYTES, "bytes")
        if not abs(amount) <= most:  # a very long number is infinite as a float
            fail(field.name, f"must be at most {most} {unit}, not {getattr(s, field.name)!r}")
    for key in _NOT_NEGATIVE_DURATIONS:
        if parse_duration(getattr(s, key), key) < 0:
            fail(key, f"must not be negative, not {getattr(s, key)!r}")
    for key in ("central", "advertise_url"):
        if getattr(s, key) and not getattr(s, key).startswith(("http://", "https://")):
            fail(key, f"must be an http:// or https:// URL, not {getattr(s, key)!r}")
    if s.central and not s.node_token:
        fail("node_token", "must be set with central: the join token from `spark nodes add NAME` on the central")
    if s.flash_attention == "off" and s.kv_type != "f16":
        fail("flash_attention", f"cannot be off with kv_type {s.kv_type}: llama.cpp needs it for a quantized KV cache")


def config_path(env: typing.Mapping[str, str] | None = None) -> Path:
    """Where config.toml is read from (honours SPARK_HOME)."""
    env = os.environ if env is None else env
    home = env.get(ENV_PREFIX + "HOME", "")
    return Settings(home=home).config_dir / CONFIG_FILE


def env_var(name: str) -> str:
    """The environment variable of setting `name`, e.g. SPARK_PORT."""
    return ENV_PREFIX + name.upper()


def read_config(path: Path) -> dict[str, Any]:
    """The settings in config.toml at `path` (converted, checked by key), or {} when there is none."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SettingsError(f"{path} is not valid TOML: {e}", param=str(path)) from None
    known = fields()
    values = {}
    for key, raw in data.items():
        if key not in known or FIXED in known[key].traits:
            raise SettingsError(f"{path}: unknown setting '{key}'", param=key)
        values[key] = convert(known[key], raw, str(path))
    return values


def _layers(env: typing.Mapping[str, str], path: Path) -> tuple[dict[str, Any], dict[str, Source], dict[str, str]]:
    """Values from config.toml at `path` and the environment, each value's source, and where it came from."""
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    where: dict[str, str] = {}
    for key, value in read_config(path).items():
        values[key], sources[key], where[key] = value, "config.toml", str(path)
    for key, field in fields().items():
        var = env_var(key)
        if var in env:
            values[key], sources[key], where[key] = convert(field, env[var], var), "env", var
    return values, sources, where


def load_settings(env: typing.Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from defaults, then config.toml, then SPARK_* variables, then `overrides`.

    Raises `SettingsError` naming the key for a malformed file or a bad value.
    """
    env = os.environ if env is None else env
    values, _, where = _layers(env, config_path(env))
    for key, raw in overrides.items():
        if key not in fields():
            raise SettingsError(f"unknown setting '{key}'", param=key)
        values[key], where[key] = raw, "argument"
    settings = Settings(**values)
    _validate(settings, where)
    return settings


def setting_sources(settings: Settings, env: typing.Mapping[str, str] | None = None) -> dict[str, Source]:
    """Where each value of `settings` came from: the default, its config.toml, the environment `env`,
    or an argument (a value none of those gives now, e.g. `spark serve --port`)."""
    values, sources, _ = _layers(os.environ if env is None else env, settings.config_file)
    out: dict[str, Source] = {}
    for key, field in fields().items():
        layered = values.get(key, field.default)
        out[key] = sources.get(key, "default") if getattr(settings, key) == layered else "argument"
    return out


def changed_settings(current: Settings, changes: typing.Mapping[str, Any]) -> Settings:
    """`current` with `changes` (raw values by key, e.g. from JSON) applied and checked.

    Raises `SettingsError` naming the key for an unknown or fixed key or a bad value.
    """
    known = fields()
    values = {}
    for key, raw in changes.items():
        field = known.get(key)
        if field is None:
            raise SettingsError(f"unknown setting '{key}'", param=key)
        if FIXED in field.traits:
            raise SettingsError(f"{key} cannot be changed here (set {env_var(key)} instead)", param=key)
        values[key] = convert(field, raw)
    settings = msgspec.structs.replace(current, **values)
    _validate(settings, {}, fallback="")
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
        "The admin API changes settings at run time (`PATCH /api/settings`, see admin-api.md): a setting",
        "marked *restart* takes effect when the server restarts, the others at once (those that shape a",
        "loaded model, such as `context_length`, reload it on its next request).",
        "",
        "| variable | config.toml key | default | change | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, field in fields().items():
        default = field.default
        value = ("true" if default else "false") if isinstance(default, bool) else default
        shown = f"`{value}`" if value != "" else "(empty)"
        key = "—" if FIXED in field.traits else f"`{name}`"
        change = "—" if FIXED in field.traits else "restart" if RESTART in field.traits else "live"
        bounds = f" From {field.ge:,} to {field.le:,}." if field.ge is not None and field.le is not None else ""
        lines.append(f"| `{env_var(name)}` | {key} | {shown} | {change} | {field.description}{bounds} |")
    return "\n".join(lines + _MODEL_SETTINGS) + "\n"


_MODEL_SETTINGS = [
    "",
    "## Per-model settings",
    "",
    "Each installed model has its own settings besides these (`spark show MODEL`, `GET /api/models/{id}`,",
    "`PATCH /api/models/{id}/settings`): `system_prompt`, `context_length`, `parallel`, `keep_alive`,",
    "`kv_type`, `speculative`, `flash_attention`, `draft_model` (another installed model of the same",
    "vocabulary that drafts for it, instead of n-gram lookup), and sampling defaults: `temperature`, `top_p`,",
    "`top_k`, `min_p`, `presence_penalty`, `frequency_penalty`, `repeat_penalty`, `repeat_last_n`,",
    "`dry_multiplier`, `dry_base`, `dry_allowed_length`, `dry_penalty_last_n`, `typical_p`, `top_n_sigma`,",
    "`xtc_probability`, `xtc_threshold`, `dynatemp_range`, `dynatemp_exponent`, `mirostat`, `mirostat_tau`,",
    "`mirostat_eta`, `samplers`, `dry_sequence_breakers`, `seed`, `stop`, `logit_bias` and `max_tokens`.",
    "A request's own value wins over the model's, the model's over Spark's built-in defaults",
    "(llama-server's: temperature 0.8, top_p 0.95, top_k 40, min_p 0.05, no penalties, DRY off).",
    "",
    "**No runaway answers.** A chat request that sets no `max_tokens` generates at most the model's",
    "`max_tokens` setting, else `default_max_tokens` (2048) tokens, then ends with finish reason",
    "`length`; a request that sets `max_tokens` gets what it asks for (up to `max_tokens_limit` and",
    "the context). A repetition guard (DRY, a repeat penalty) is a per-model choice, off by default.",
    "The bundled SmolLM2 comes with settings chosen by measurement (`bench/first_answers.py`): a",
    "system prompt asking for brief English answers, temperature 0, DRY from 4 repeated tokens on",
    "(`dry_multiplier` 0.8, `dry_allowed_length` 4) and `max_tokens` 200.",
]
