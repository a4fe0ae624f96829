"""The admin API's library (docs/admin-api.md, "Library and pulls"): installed models and their settings.

`GET /api/models` lists the installed models; `GET /api/models/{id}` shows one
with its files, settings and where it would go on this machine now (the
planner's arithmetic); `DELETE /api/models/{id}` unloads it if loaded, then
removes it; `POST /api/models/{id}/copy` installs it again under another id;
`PATCH /api/models/{id}/settings` changes its own settings and says
whether the loaded runner must reload (the next request does it). The Hub
search and the pull jobs are in `hub.py` and `pulls.py`; every route of the
three is in `LIBRARY_ROUTES`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import msgspec
from litestar import Request, Response, delete, get, patch, post
from litestar.params import FromPath

from spark.api.common import decode_body, invalid_from_validation
from spark.errors import InvalidRequest, SettingsError, SparkError
from spark.library import ModelEntry, ModelSettings
from spark.placement.fit import Fit
from spark.runners.options import load_options, settings_changes
from spark.runners.scheduler import RunnerState
from spark.server.fitting import installed_fit, loaded_models
from spark.server.responses import json_response
from spark.server.routes.hub import HUB_ROUTES
from spark.server.routes.pulls import PULL_ROUTES
from spark.server.state import ServerState, state_of
from spark.types import FlashAttention, LoraAdapter, SamplingParams
from spark.units import parse_duration

_encode = msgspec.json.Encoder().encode


class ModelSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One installed model in the list."""

    id: str
    architecture: str
    parameters: int
    quantization: str
    size_bytes: int  # model files plus projector and LoRA adapters
    context_length: int  # training context (0: the file does not say)
    embedding: bool
    rerank: bool  # an embedding model that scores query-document pairs (POST /v1/rerank)
    vision: bool  # a projector is attached
    mmproj_path: str | None
    lora: list[LoraAdapter]  # adapters applied to its weights, in order
    loaded: bool
    source: str
    owned: bool  # its files are Spark's own and go with it
    added_at: float
    settings: ModelSettings


class ModelDetail(msgspec.Struct, frozen=True, kw_only=True):
    """One model: metadata, files, projector, settings, runners, and where it would go now."""

    model: ModelEntry
    loaded: bool
    runners: list[RunnerState]
    memory: Fit | None  # None when the estimate cannot be made (then `memory_error` says why)
    memory_error: str | None = None
    shared_with: list[str] = []  # the other models that use its files (its copies, its original)


class RemoveResult(msgspec.Struct, frozen=True):
    model: str
    unloaded: bool  # it was loaded and was unloaded first
    files_deleted: bool  # Spark's own files were deleted (a user's own file is kept, as are shared ones)
    shared_with: list[str] = []  # the models whose use of its files kept them


class SettingsPatch(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A change to a model's own settings: a field left out is kept, null goes back to the server's setting."""

    context_length: int | msgspec.UnsetType | None = msgspec.UNSET
    parallel: int | msgspec.UnsetType | None = msgspec.UNSET
    system_prompt: str | msgspec.UnsetType | None = msgspec.UNSET
    # the fields given replace the model's (null: back to Spark's default), the others are kept
    sampling: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    keep_alive: float | str | msgspec.UnsetType | None = msgspec.UNSET  # seconds or a duration (5m, 1h)
    kv_type: Literal["f16", "q8_0", "q4_0"] | msgspec.UnsetType | None = msgspec.UNSET
    speculative: bool | msgspec.UnsetType | None = msgspec.UNSET
    flash_attention: FlashAttention | msgspec.UnsetType | None = msgspec.UNSET
    draft_model: str | msgspec.UnsetType | None = msgspec.UNSET  # an installed model's id


class SettingsResult(msgspec.Struct, frozen=True, kw_only=True):
    model: ModelEntry
    loaded: bool
    reload_needed: bool  # loaded with other settings: the next request loads it again
    changes: str  # what differs for the runner, e.g. "n_ctx 2048 -> 4096" (empty: nothing)


_patch_decoder = msgspec.json.Decoder(SettingsPatch)


class _SamplingChange(msgspec.Struct, frozen=True):
    """What a patch's `sampling` is checked as, so that a bad value is named `sampling.FIELD`."""

    sampling: SamplingParams


def _summary(entry: ModelEntry, loaded: set[str]) -> ModelSummary:
    info = entry.info
    return ModelSummary(
        id=entry.id,
        architecture=info.architecture,
        parameters=info.parameter_count,
        quantization=info.quantization,
        size_bytes=entry.size_bytes,
        context_length=info.context_length,
        embedding=info.is_embedding,
        rerank=info.is_reranker,
        vision=entry.mmproj_path is not None,
        mmproj_path=entry.mmproj_path,
        lora=entry.lora,
        loaded=entry.id in loaded,
        source=entry.source,
        owned=entry.owned,
        added_at=entry.added_at,
        settings=entry.settings,
    )


def _loaded_ids(state: ServerState) -> set[str]:
    return {s.model for s in state.scheduler.loaded() if s.status not in ("failed", "stopped")}


@get("/models")
async def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
    state = state_of(request)
    entries = await asyncio.to_thread(state.library.list)
    loaded = _loaded_ids(state)
    return json_response(_encode([_summary(e, loaded) for e in entries]))


@get("/models/{model_id:str}")
async def show_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
    state = state_of(request)
    entry = await asyncio.to_thread(state.library.get, model_id)
    states = state.scheduler.loaded()
    runners = [s for s in states if s.model == entry.id]
    # as if loading it now: its own runner's memory would be given back first
    others = loaded_models(states, leave_out=entry.id)
    memory: Fit | None = None
    error: str | None = None
    try:
        memory = await asyncio.to_thread(installed_fit, state.settings, state.library, entry, others)
    except SparkError as e:  # its file is gone or damaged: the rest is still worth showing
        error = e.message
    loaded = any(s.status not in ("failed", "stopped") for s in runners)
    shared = list(await asyncio.to_thread(state.library.sharing, entry.id))
    detail = ModelDetail(
        model=entry, loaded=loaded, runners=runners, memory=memory, memory_error=error, shared_with=shared
    )
    return json_response(_encode(detail))


@delete("/models/{model_id:str}", status_code=200)
async def remove_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
    """Unload the model if it is loaded (requests still running on it end with an error), then remove it."""
    state = state_of(request)
    entry = await asyncio.to_thread(state.library.get, model_id)
    shared = list(await asyncio.to_thread(state.library.sharing, entry.id))
    unloaded = await state.scheduler.unload(entry.id)
    await asyncio.to_thread(state.library.remove, entry.id)
    await state.scheduler.unload(entry.id)  # a request that loaded it meanwhile
    removed = RemoveResult(
        model=entry.id, unloaded=unloaded, files_deleted=entry.owned and not shared, shared_with=shared
    )
    return json_response(_encode(removed))


class CopyRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str  # the copy's model id


_copy_decoder = msgspec.json.Decoder(CopyRequest)


@post("/models/{model_id:str}/copy", status_code=200)
async def copy_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
    """Install the model again under another id (Ollama's `cp`): the same files, its own settings."""
    state = state_of(request)
    wanted = decode_body(_copy_decoder, await request.body())
    copied = await asyncio.to_thread(state.library.copy, model_id, wanted.id)
    return json_response(_encode(_summary(copied, _loaded_ids(state))))


@delete("/models/{model_id:str}/lora", status_code=200)
async def detach_adapters(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
    """Take the model's LoRA adapters off (the files Spark downloaded for it go); the model as it is then."""
    state = state_of(request)
    entry, _ = await asyncio.to_thread(state.library.detach_adapters, model_id)
    return json_response(_encode(_summary(entry, _loaded_ids(state))))


@delete("/models/{model_id:str}/mmproj", status_code=200)
async def detach_projector(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
    """Take the model's vision projector off (the file Spark downloaded for it goes); the model as it is then."""
    state = state_of(request)
    entry, _ = await asyncio.to_thread(state.library.detach_projector, model_id)
    return json_response(_encode(_summary(entry, _loaded_ids(state))))


@patch("/models/{model_id:str}/settings")
async def change_settings(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
    state = state_of(request)
    change = decode_body(_patch_decoder, await request.body(), plain=True)
    entry = await asyncio.to_thread(state.library.get, model_id)
    updated = await asyncio.to_thread(state.library.update_settings, entry.id, _apply(entry.settings, change))
    changes = await asyncio.to_thread(_changes, state, entry, updated)
    loaded = entry.id in _loaded_ids(state)
    result = SettingsResult(model=updated, loaded=loaded, reload_needed=loaded and bool(changes), changes=changes)
    return json_response(_encode(result))


def _changes(state: ServerState, before: ModelEntry, after: ModelEntry) -> str:
    """What the runner would load differently after the change (reads the draft models' entries)."""
    library, settings = state.library, state.settings
    old = load_options(before, settings, library.draft_for(before))
    return settings_changes(old, load_options(after, settings, library.draft_for(after)))


def _apply(current: ModelSettings, change: SettingsPatch) -> ModelSettings:
    """`current` with the fields `change` gives (checked by `Library.update_settings`)."""
    fields: dict[str, Any] = {}
    for name in SettingsPatch.__struct_fields__:
        if name in ("sampling", "keep_alive"):  # merged and parsed below
            continue
        value = getattr(change, name)
        if value is not msgspec.UNSET:
            fields[name] = value
    if change.sampling is None:
        fields["sampling"] = ModelSettings().sampling  # the default itself, so that it is left out when stored
    elif change.sampling is not msgspec.UNSET:
        values = {k: v for k, v in change.sampling.items() if v is not None}
        given_json = msgspec.json.encode({"sampling": values})
        try:  # decoded as JSON, whose object keys are text: logit_bias's token ids come as "511"
            given = msgspec.json.decode(given_json, type=_SamplingChange).sampling
        except msgspec.ValidationError as e:
            raise invalid_from_validation(e, given_json) from None
        named = [k for k in change.sampling if k in SamplingParams.__struct_fields__]  # unknown ones are ignored
        fields["sampling"] = msgspec.structs.replace(current.sampling, **{k: getattr(given, k) for k in named})
    if change.keep_alive is not msgspec.UNSET:
        fields["keep_alive"] = _seconds(change.keep_alive)
    return msgspec.structs.replace(current, **fields)


def _seconds(value: float | str | None) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        return parse_duration(value, "keep_alive")
    except SettingsError:
        raise InvalidRequest(
            f"keep_alive must be seconds or a duration (30s, 5m, 1h; negative: keep loaded), not '{value}'",
            param="keep_alive",
        ) from None


LIBRARY_ROUTES = [
    list_models,
    show_model,
    remove_model,
    copy_model,
    detach_adapters,
    detach_projector,
    change_settings,
    *HUB_ROUTES,
    *PULL_ROUTES,
]
