"""The Settings page: every setting with its value and source, changed through `PATCH /api/settings`.

A setting's form sends its one value; the admin API writes it to config.toml
and applies it at once, or says it waits for a restart (or that an environment
variable overrides it). A value given on the command line (`spark serve --port`)
wins over config.toml too, at every start that gives it: the page says so.
Secrets say only whether they are set, and are not changed here.
"""

from __future__ import annotations

from typing import Any

from litestar import MediaType, Request, Response, get, post

from spark.server.console.inprocess import call_api
from spark.server.console.render import render
from spark.server.console.signin import require_change, require_session


def _waiting(setting: dict[str, Any]) -> dict[str, Any]:
    """`setting` with `waits`: when the value config.toml holds (`saved`) and the server does not run
    with would apply; empty when none waits."""
    waits = ""
    if setting.get("saved") is not None:
        argument = setting["source"] == "argument"
        waits = "applies when the server starts without the argument" if argument else "applies at restart"
    return {**setting, "waits": waits}


def _outcome(change: dict[str, Any], setting: dict[str, Any]) -> str:
    """What a saved change did, in words."""
    if setting["source"] == "argument":
        return f"Saved to config.toml, but {change['name']} was given as a command-line argument, which wins over it."
    if change.get("overridden_by"):
        return f"Saved to config.toml, but {change['overridden_by']} is set and wins over it."
    if change.get("restart_required"):
        return "Saved to config.toml: it takes effect when the server restarts."
    return "Saved to config.toml, and in effect now."


@get("/settings", media_type=MediaType.HTML)
async def settings_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """Every setting (`GET /api/settings`), each changeable one with its own form."""
    session = require_session(request)
    answer = await call_api(request, "GET", "/api/settings")
    return render(
        request,
        "settings.html",
        session=session,
        active="settings",
        config_file=answer.body["config_file"] if answer.ok else "",
        settings=[_waiting(setting) for setting in answer.body["settings"]] if answer.ok else [],
        error=answer.problem,
    )


@post("/settings", media_type=MediaType.HTML, status_code=200)
async def change_setting(request: Request[Any, Any, Any]) -> Response[Any]:
    """Change one setting (`PATCH /api/settings`); the answer is that setting's form, with what happened
    and, when the value saved is not the one in effect, that value and when it applies."""
    session, form = await require_change(request)
    name = form.get("name", "")
    value: str | bool = form.get("value", "")
    changed = await call_api(request, "PATCH", "/api/settings", body={name: value})
    current = await call_api(request, "GET", "/api/settings")
    found = [s for s in current.body["settings"] if s["name"] == name] if current.ok else []
    if not found:
        return render(request, "setting.html", session=session, status_code=changed.status, s=None, error=changed.error)
    setting = _waiting(found[0])
    change = changed.body["changed"][0] if changed.ok else {}
    if change.get("overridden_by"):  # config.toml holds it, and the environment wins over it
        setting |= {"saved": str(value).strip(), "waits": f"applies when {change['overridden_by']} is not set"}
    return render(
        request,
        "setting.html",
        session=session,
        status_code=changed.status,
        s=setting,
        message=_outcome(change, setting) if changed.ok else "",
        error=changed.problem,
        typed=value if not changed.ok else None,
    )


SETTINGS_PAGE_ROUTES = [settings_page, change_setting]
