"""The admin API's Hugging Face search (docs/admin-api.md, "Library and pulls").

`GET /api/hub/search?q=...` answers what `spark search` finds, and for the first
`files` repositories (default 3, at most 10) their GGUF models with a verdict
each: fits on this machine now (where), fits once idle models are unloaded
(which), or does not fit, with the arithmetic. Listing a repository costs a
Hub call and reading one header a Range request or two, so the others are
left to `GET /api/hub/repos/{org}/{name}`, which answers the same for one
repository.
"""

from __future__ import annotations

import asyncio
from pathlib import PurePosixPath
from typing import Any

import msgspec
from litestar import Request, Response, get
from litestar.params import FromPath

from spark.errors import InvalidRequest, SparkError
from spark.library import Hub, HubModel
from spark.library.hubfiles import RepoModels, read_repo, variant_info
from spark.library.naming import model_id_from_filename
from spark.library.spec import HubSpec, parse_pull_spec
from spark.placement import LoadedModel
from spark.placement.fit import Fit
from spark.server.fitting import loaded_models, remote_fit
from spark.server.responses import json_response
from spark.server.state import ServerState, state_of

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
DEFAULT_FILES = 3  # repositories whose files a search lists
MAX_FILES = 10

_encode = msgspec.json.Encoder().encode


class HubFileFit(msgspec.Struct, frozen=True, kw_only=True):
    """One downloadable model of a repository (a file, or a set of shards) and whether it fits."""

    name: str  # its (first) file
    spec: str  # what POST /api/pulls (or `spark pull`) takes to pull just this one
    model_id: str  # the id it gets once pulled
    files: list[str]
    size_bytes: int | None
    quant: str | None
    default: bool  # what `spark pull org/repo` picks
    fit: Fit | None  # None when no estimate could be made (`note` says why)
    note: str | None = None


class RepoFiles(msgspec.Struct, frozen=True, kw_only=True):
    repo: str
    models: list[HubFileFit]
    projector: str | None  # the vision projector a pull attaches
    estimated_from: str | None  # the file whose header was read; the others are scaled from it
    note: str | None = None


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    repo: HubModel  # as `spark search` shows it
    files: RepoFiles | None  # for the first `files` hits
    error: str | None = None  # why its files could not be listed


class SearchResult(msgspec.Struct, frozen=True, kw_only=True):
    query: str
    results: list[SearchHit]


def _int_param(request: Request[Any, Any, Any], name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text in (None, ""):
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidRequest(f"{name} must be a whole number, not '{text}'", param=name) from None
    if not low <= value <= high:
        raise InvalidRequest(f"{name} must be between {low} and {high}, not {value}", param=name)
    return value


def _repo_files(state: ServerState, models: RepoModels, loaded: list[LoadedModel]) -> RepoFiles:
    """Every model of the repository with its verdict (blocking: run in a thread)."""
    projector_bytes = models.projector.size or 0 if models.projector else 0
    out = []
    for variant in models.variants:
        info = variant_info(models, variant)
        fit: Fit | None = None
        note = models.note if info is None else None
        if info is not None:
            try:
                fit = remote_fit(state.settings, info, projector_bytes, loaded)
            except SparkError as e:  # metadata an estimate cannot use
                note = f"no estimate: {e.message}"
        elif note is None:
            note = "the Hub gives no size for this file"
        out.append(
            HubFileFit(
                name=variant.name,
                spec=f"{models.repo}/{variant.name}",
                model_id=model_id_from_filename(PurePosixPath(variant.name).name),
                files=[f.path for f in variant.files],
                size_bytes=variant.size,
                quant=variant.quant,
                default=variant.name == models.default,
                fit=fit,
                note=note,
            )
        )
    return RepoFiles(
        repo=models.repo,
        models=out,
        projector=models.projector.path if models.projector else None,
        estimated_from=models.reference_name,
        note=models.note,
    )


def _loaded(state: ServerState) -> list[LoadedModel]:
    return loaded_models(state.scheduler.loaded())


def _files_for(state: ServerState, repo: str, loaded: list[LoadedModel]) -> RepoFiles:
    return _repo_files(state, read_repo(Hub(state.settings), repo), loaded)


@get("/hub/search")
async def search_hub(request: Request[Any, Any, Any]) -> Response[bytes]:
    query = (request.query_params.get("q") or "").strip()
    limit = _int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    files = _int_param(request, "files", DEFAULT_FILES, 0, MAX_FILES)
    state = state_of(request)
    found = await asyncio.to_thread(Hub(state.settings).search, query, limit=limit)
    loaded = _loaded(state)

    async def hit(model: HubModel, with_files: bool) -> SearchHit:
        if not with_files:
            return SearchHit(repo=model, files=None)
        try:
            return SearchHit(repo=model, files=await asyncio.to_thread(_files_for, state, model.id, loaded))
        except SparkError as e:
            return SearchHit(repo=model, files=None, error=e.message)

    hits = await asyncio.gather(*(hit(m, i < files) for i, m in enumerate(found)))
    return json_response(_encode(SearchResult(query=query, results=list(hits))))


@get("/hub/repos/{org:str}/{name:str}")
async def repo_files(request: Request[Any, Any, Any], org: FromPath[str], name: FromPath[str]) -> Response[bytes]:
    try:
        spec = parse_pull_spec(f"{org}/{name}")
    except SparkError as e:
        raise InvalidRequest(e.message, param="repo") from None  # the message quotes the id (cut short when long)
    if not isinstance(spec, HubSpec) or spec.filename or spec.quant:
        raise InvalidRequest(f"'{org}/{name}' is not a Hugging Face repository id", param="repo")
    state = state_of(request)
    return json_response(_encode(await asyncio.to_thread(_files_for, state, spec.repo, _loaded(state))))


HUB_ROUTES = [search_hub, repo_files]
