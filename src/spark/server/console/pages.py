"""The Models pages: the library, and one model with its memory estimate, its settings, LoRA adapters,
copy and removal.

They draw `GET /api/models` and `GET /api/models/{id}`, and change a model
with `PATCH /api/models/{id}/settings`, `POST /api/pulls` (an adapter, `attach_to`),
`DELETE /api/models/{id}/lora`, `POST /api/models/{id}/copy` and
`DELETE /api/models/{id}`, called in process (spark.server.console.inprocess).
"""

from __future__ import annotations

import math
from typing import Any, get_args
from urllib.parse import quote

from litestar import HttpMethod, MediaType, Request, Response, get, post, route
from litestar.params import FromPath
from litestar.response import Redirect

from spark.server.console.inprocess import ApiAnswer, call_api
from spark.server.console.render import SECURITY_HEADERS, render
from spark.server.console.signin import require_change, require_session
from spark.types import DEFAULT_SAMPLING, FlashAttention

KV_TYPES = ("f16", "q8_0", "q4_0")
FLASH_MODES = get_args(FlashAttention)
# the model's own settings the form edits: an empty field goes back to the server's setting
NUMBERS = ("context_length", "parallel")
_CHOICES = ("kv_type", "flash_attention", "draft_model")
# the sampling defaults the form edits (name, label): an empty field goes back to Spark's default
SAMPLING_FIELDS = (
    ("temperature", "Temperature"),
    ("top_k", "Top-k"),
    ("top_p", "Top-p"),
    ("min_p", "Min-p"),
    ("max_tokens", "Most tokens an answer"),
    ("repeat_penalty", "Repeat penalty"),
    ("presence_penalty", "Presence penalty"),
    ("frequency_penalty", "Frequency penalty"),
    ("dry_multiplier", "DRY multiplier"),
    ("dry_allowed_length", "DRY allowed length"),
    ("typical_p", "Typical-p"),
    ("xtc_probability", "XTC probability"),
    ("mirostat", "Mirostat (0, 1, 2)"),
    ("mirostat_tau", "Mirostat target"),
    ("seed", "Seed"),
)
_SAMPLING_SHOWN = [
    (name, label, {"max_tokens": "server default", "seed": "random"}.get(name, getattr(DEFAULT_SAMPLING, name)))
    for name, label in SAMPLING_FIELDS
]
_SAMPLING_NAMES = (*(name for name, _ in SAMPLING_FIELDS), "stop")
_FORM_FIELDS = (*NUMBERS, "system_prompt", "keep_alive", *_CHOICES, *_SAMPLING_NAMES)


# Uptime monitors and `curl -I` probe the root with HEAD: the same status and location as GET.
@route("/", http_method=[HttpMethod.GET, HttpMethod.HEAD], media_type=MediaType.HTML)
async def index(request: Request[Any, Any, Any]) -> Response[Any]:
    require_session(request)
    return Redirect("/models", status_code=303)


@get("/models", media_type=MediaType.HTML)
async def models_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """The library: every installed model, and whether it is loaded."""
    session = require_session(request)
    models = await call_api(request, "GET", "/api/models")
    return render(
        request,
        "models.html",
        session=session,
        active="models",
        models=models.items,
        error=models.problem,
    )


async def _model(
    request: Request[Any, Any, Any],
    model_id: str,
    *,
    at: str = "",
    message: str = "",
    error: str = "",
    param: str = "",
    status_code: int = 200,
    typed: dict[str, str] | None = None,
) -> Response[Any]:
    """The model's page; after a change, its outcome (`message` or `error`) by the form `at` that made it
    (settings, lora, adapters, copy, remove), and after a refused change the values `typed` in that form
    (the settings form's field the error's `param` names marked, with the error by it)."""
    session = require_session(request)
    detail = await call_api(request, "GET", f"/api/models/{model_id}")
    if detail.status == 404:
        return render(
            request, "missing.html", session=session, active="models", status_code=404, what=f"model '{model_id}'"
        )
    body = detail.body
    runner = next((r for r in body["runners"] if r["status"] not in ("failed", "stopped")), None)
    listed = await call_api(request, "GET", "/api/models")
    # the models that could draft for this one (the API checks their vocabulary when one is chosen)
    drafts = (
        [s["id"] for s in listed.body if not s["embedding"] and s["id"] != body["model"]["id"]] if listed.ok else []
    )
    typed = typed or {}
    values = typed if at == "settings" and error else _settings_values(body["model"]["settings"])
    bad_field = _field_of(param) if at == "settings" and error else ""
    sampling_open = bool(bad_field in _SAMPLING_NAMES or any(values.get(name) for name in _SAMPLING_NAMES))
    return render(
        request,
        "model.html",
        session=session,
        active="models",
        status_code=status_code,
        m=body["model"],
        runner=runner,
        memory=body["memory"],
        memory_error=body.get("memory_error"),
        shared_with=body["shared_with"],
        kv_types=KV_TYPES,
        flash_modes=FLASH_MODES,
        draft_models=drafts,
        sampling_fields=_SAMPLING_SHOWN,
        values=values,
        sampling_open=sampling_open,
        bad_field=bad_field,
        at=at,
        message=message,
        error=error,
        typed=typed,
    )


def _settings_values(settings: dict[str, Any]) -> dict[str, str]:
    """The settings form's fields for the model's stored `settings` (as `GET /api/models/{id}` has them)."""
    sampling = settings.get("sampling") or {}
    values = {name: _text(settings.get(name)) for name in (*NUMBERS, "system_prompt", *_CHOICES)}
    values["keep_alive"] = _duration(settings.get("keep_alive"))
    values.update((name, _text(sampling.get(name))) for name, _ in SAMPLING_FIELDS)
    values["stop"] = "\n".join(sampling.get("stop") or [])
    return values


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _duration(seconds: float | None) -> str:
    """Seconds as a person writes them, which the form takes back as they are: 5m, 1h30m, 1d, 45, -1, 0."""
    if seconds is None:
        return ""
    sign, left = ("-" if seconds < 0 else ""), abs(seconds)
    if not float(left).is_integer():
        return sign + f"{left:.3f}".rstrip("0").rstrip(".")
    whole, parts = int(left), []
    if whole < 60:
        return f"{sign}{whole}"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return sign + "".join(parts)


def _field_of(param: str) -> str:
    """The settings form's field an error's parameter names (`sampling.top_p`: top_p), or empty."""
    name = param.removeprefix("sampling.")
    return name if name in _FORM_FIELDS else ""


@get("/models/{model_id:str}", media_type=MediaType.HTML)
async def model_page(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    """One model: metadata, files, the memory it would take here now, its settings, copy, remove."""
    return await _model(request, model_id)


def _settings_change(form: dict[str, str]) -> dict[str, Any]:
    """The form's fields as the admin API's settings change; an empty field: the server's setting."""
    change: dict[str, Any] = {}
    for name in NUMBERS:
        change[name] = _number(form.get(name, ""))  # the API names a bad value (-5: out of range, a word: no number)
    prompt = form.get("system_prompt", "")
    change["system_prompt"] = prompt if prompt.strip() else None
    keep_alive = form.get("keep_alive", "").strip()
    change["keep_alive"] = keep_alive or None
    change["kv_type"] = form.get("kv_type") or None
    change["flash_attention"] = form.get("flash_attention") or None
    change["draft_model"] = form.get("draft_model") or None
    sampling: dict[str, Any] = {name: _number(form[name]) for name, _ in SAMPLING_FIELDS if name in form}
    if "stop" in form:
        sampling["stop"] = [line for line in form["stop"].replace("\r", "").split("\n") if line] or None
    if sampling:
        change["sampling"] = sampling
    return change


def _number(text: str) -> int | float | str | None:
    """A form's number (None when empty); text that is none stays text, for the API to name."""
    text = text.strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        return text
    if not math.isfinite(number):  # JSON has no such number: it would arrive as null
        return text
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number


@post("/models/{model_id:str}/settings", media_type=MediaType.HTML, status_code=200)
async def change_model_settings(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    """Save the model's own settings (`PATCH /api/models/{id}/settings`); the page again, with the outcome
    by the Save button (or the error by the field it names, with what was typed kept)."""
    _, form = await require_change(request)
    changed = await call_api(request, "PATCH", f"/api/models/{model_id}/settings", body=_settings_change(form))
    message = "Saved."
    if changed.ok and changed.body["reload_needed"]:
        message += f" The loaded runner reloads on its next request ({changed.body['changes']})."
    typed = {name: form.get(name, "").replace("\r", "") for name in _FORM_FIELDS}
    return await _outcome(request, model_id, changed, message, "settings", typed)


@post("/models/{model_id:str}/copy", media_type=MediaType.HTML, status_code=200)
async def copy_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    """Install the model again under the id given (`POST /api/models/{id}/copy`); then the copy's page."""
    _, form = await require_change(request)
    copied = await call_api(request, "POST", f"/api/models/{model_id}/copy", body={"id": form.get("id", "")})
    if not copied.ok:
        return await _outcome(request, model_id, copied, "", "copy", {"id": form.get("id", "")})
    return _go_to(request, f"/models/{quote(copied.body['id'], safe='')}")


@post("/models/{model_id:str}/lora", media_type=MediaType.HTML, status_code=200)
async def attach_adapter(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    """Download a LoRA adapter from the Hub and attach it (`POST /api/pulls` with `attach_to`)."""
    _, form = await require_change(request)
    spec, scale = form.get("spec", "").strip(), form.get("scale", "").strip()
    typed = {"spec": spec, "scale": scale}
    body: dict[str, Any] = {"spec": spec, "attach_to": model_id}
    if scale:
        try:
            body["scale"] = float(scale)
        except ValueError:
            body["scale"] = math.nan
        if not math.isfinite(body["scale"]):  # JSON has no such number: it would arrive as null
            problem = f"scale must be a number, not {scale!r}"
            return await _model(request, model_id, at="lora", error=problem, status_code=400, typed=typed)
    started = await call_api(request, "POST", "/api/pulls", body=body)
    done = f"Downloading {spec}: it is attached once complete (see Discover)."
    return await _outcome(request, model_id, started, done, "lora", typed)


@post("/models/{model_id:str}/lora/remove", media_type=MediaType.HTML, status_code=200)
async def detach_adapters(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    """Take the model's LoRA adapters off (`DELETE /api/models/{id}/lora`)."""
    _, _ = await require_change(request)
    detached = await call_api(request, "DELETE", f"/api/models/{model_id}/lora")
    done = "The adapters are off: it answers with its own weights."
    return await _outcome(request, model_id, detached, done, "adapters")


async def _outcome(
    request: Request[Any, Any, Any],
    model_id: str,
    answer: ApiAnswer,
    message: str,
    at: str,
    typed: dict[str, str] | None = None,
) -> Response[Any]:
    """The model's page again after a change made by the form `at`: with the API's error (and what was
    `typed`, to be fixed), else with `message`; either shown by that form."""
    if not answer.ok:
        error = answer.body.get("error") if isinstance(answer.body, dict) else None
        param = error.get("param") if isinstance(error, dict) else None
        return await _model(
            request,
            model_id,
            at=at,
            error=answer.error,
            param=str(param or ""),
            status_code=answer.status,
            typed=typed,
        )
    return await _model(request, model_id, at=at, message=message)


def _go_to(request: Request[Any, Any, Any], url: str) -> Response[Any]:
    """After a change: htmx follows HX-Redirect, a plain form a 303."""
    if request.headers.get("hx-request"):
        return Response("", status_code=200, headers={"HX-Redirect": url, **SECURITY_HEADERS})
    return Redirect(url, status_code=303, headers=SECURITY_HEADERS)


@post("/models/{model_id:str}/remove", media_type=MediaType.HTML, status_code=200)
async def remove_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    """Remove the model (`DELETE /api/models/{id}`), unloading it first; then back to the library."""
    _, _ = await require_change(request)
    removed = await call_api(request, "DELETE", f"/api/models/{model_id}")
    if not removed.ok:
        return await _outcome(request, model_id, removed, "", "remove")
    return _go_to(request, "/models")


PAGE_ROUTES = [
    index,
    models_page,
    model_page,
    change_model_settings,
    attach_adapter,
    detach_adapters,
    copy_model,
    remove_model,
]
