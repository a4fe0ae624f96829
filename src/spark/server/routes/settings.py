"""The admin API's settings: read them all with their sources, change those a person may change.

`GET /api/settings`: every setting with its value, where the value comes from
(default, config.toml, env, argument) and whether a change needs a restart;
secrets (the admin password, the Hugging Face token) say only whether they
are set. `PATCH /api/settings` with `{"key": value, ...}` writes the values
to config.toml in place (spark.config_file) and applies at once those that
can apply while the server runs; the answer says which wait for a restart.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Literal

import msgspec
from litestar import Request, get, patch
from litestar.params import JSONBody

from spark.config_file import update_config
from spark.errors import InvalidRequest, SettingsError
from spark.server.bodies import checked_body
from spark.server.state import state_of
from spark.settings import (
    DURATION,
    FIXED,
    RESTART,
    SECRET,
    SIZE,
    Field,
    Settings,
    Source,
    changed_settings,
    env_var,
    fields,
    read_config,
    setting_sources,
)

Value = bool | int | float | str
Kind = Literal["bool", "int", "text", "duration", "size", "choice"]


class SettingView(msgspec.Struct, frozen=True, kw_only=True):
    """One setting as the server runs with it."""

    name: str
    value: Value | None  # None for a secret
    default: Value | None  # None for a secret
    source: Source
    env_var: str  # e.g. SPARK_PORT
    kind: Kind
    choices: list[str] = []  # the values allowed, for kind "choice"
    description: str
    changeable: bool  # through PATCH /api/settings
    restart_required: bool  # a change takes effect when the server restarts
    secret: bool
    is_set: bool  # not empty
    pending_restart: bool  # config.toml holds another value, which takes effect at the next start
    saved: Value | None = None  # that value, when pending_restart (None for a secret)


class SettingsView(msgspec.Struct, frozen=True):
    config_file: str
    settings: list[SettingView]


class ChangedSetting(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    applied: bool  # in effect now
    restart_required: bool  # written, in effect at the next start
    overridden_by: str | None = None  # the environment variable that wins over config.toml


class SettingsChange(msgspec.Struct, frozen=True):
    config_file: str
    changed: list[ChangedSetting]
    restart_required: list[str]  # the names of those that wait for a restart


def _kind(field: Field) -> Kind:
    if field.choices:
        return "choice"
    if DURATION in field.traits:
        return "duration"
    if SIZE in field.traits:
        return "size"
    return "bool" if field.type is bool else "int" if field.type is int else "text"


def _view(field: Field, settings: Settings, source: Source, saved: dict[str, Any]) -> SettingView:
    value = getattr(settings, field.name)
    secret = SECRET in field.traits
    pending = source != "env" and field.name in saved and saved[field.name] != value
    return SettingView(
        name=field.name,
        value=None if secret else value,
        default=None if secret else field.default,
        source=source,
        env_var=env_var(field.name),
        kind=_kind(field),
        choices=list(field.choices),
        description=field.description,
        changeable=FIXED not in field.traits,
        restart_required=RESTART in field.traits,
        secret=secret,
        is_set=value not in ("", None),
        pending_restart=pending,
        saved=saved[field.name] if pending and not secret else None,
    )


@get("/settings")
async def get_settings(request: Request[Any, Any, Any]) -> SettingsView:
    """Every setting with its value and source; secrets say only whether they are set."""
    state = state_of(request)
    settings = state.settings
    sources, saved = await asyncio.to_thread(_read_sources, settings, state.sources_at_start)
    return SettingsView(
        str(settings.config_file), [_view(f, settings, sources[name], saved) for name, f in fields().items()]
    )


def _read_sources(settings: Settings, at_start: dict[str, Source]) -> tuple[dict[str, Source], dict[str, Any]]:
    """Each setting's source (a setting that applies at restart: its source at the start, as its
    value is still that one), and what config.toml holds now (`InvalidRequest` naming the file when
    it was broken by hand since the server started: it is not written over)."""
    try:
        now, known = setting_sources(settings), fields()
        sources = {name: at_start[name] if RESTART in known[name].traits else source for name, source in now.items()}
        return sources, read_config(settings.config_file)
    except SettingsError as e:
        raise InvalidRequest(f"{e.message}; fix or remove it first", param="config.toml") from None


@patch("/settings", before_request=checked_body)
async def change_settings(request: Request[Any, Any, Any], data: JSONBody[dict[str, Any]]) -> SettingsChange:
    """Write `data`'s settings to config.toml; those that can apply at run time apply at once. Each value
    is checked as the settings file's (a wrong type or range is refused naming the setting)."""
    if not data:
        raise InvalidRequest('Send the settings to change, e.g. {"keep_alive": "10m"}.', param="body")
    state = state_of(request)
    async with state.settings_lock:
        current = state.settings
        try:
            wanted = changed_settings(current, data)
        except SettingsError as e:
            raise InvalidRequest(e.message, param=e.param) from None
        values = {name: getattr(wanted, name) for name in data}
        await asyncio.to_thread(_read_sources, current, state.sources_at_start)
        await asyncio.to_thread(update_config, current.config_file, values)
        changed, live = [], {}
        for name in data:
            overridden = env_var(name) if env_var(name) in os.environ else None
            restart = RESTART in fields()[name].traits
            applies = not restart and overridden is None
            if applies:
                live[name] = values[name]
            changed.append(
                ChangedSetting(name=name, applied=applies, restart_required=restart, overridden_by=overridden)
            )
        if live:
            state.apply_settings(msgspec.structs.replace(current, **live))
    return SettingsChange(
        str(current.config_file), changed, [c.name for c in changed if c.restart_required and c.overridden_by is None]
    )


SETTINGS_ROUTES = [get_settings, change_settings]
