"""The web console at `/`: server-rendered pages (Jinja, htmx) behind the admin password.

    auth.py       sessions, the sign-in throttle, the one-time sign-in link
    sessions.py   the session and throttle bookkeeping
    signin.py     /login, /logout, and the session every page needs
    inprocess.py  how the console calls the admin API's own routes (and /v1) in process
    pages.py      Models: the library, one model (memory estimate, settings, remove)
    discover.py   Discover: Hugging Face search, a repository's files with the fit verdict, downloads
    runners.py    Runners: the loaded models, live; load, unload
    keys.py       Keys: create (the secret shown once), revoke, use
    settings.py   Settings: every setting, its value and source; change one
    nodes.py      Nodes: the fleet's nodes, or that this server is standalone
    batches.py    Batches: every key's batches, how far each got; cancel one
    files.py      Files: every key's uploaded files; delete one
    live.py       page parts kept live over server-sent events
    playground.py the playground, and its forwarding of chats to /v1 with the console's own key
    requests.py   the request log: list, filters, live rows, one request's timeline
    activity.py   requests, tokens, TTFT, queue and memory over time
    charts.py     line charts and the waterfall as inline SVG
    render.py     the sandboxed template environment and the security headers
    templates/    the pages' Jinja templates
    static/       every script and stylesheet, vendored (nothing comes from another host)

The console changes nothing itself: its forms post to console routes, which
check the session and its CSRF token and call the admin API's own routes
under /api/ in process (inprocess.py).
"""

from __future__ import annotations

from pathlib import Path

from litestar import Router
from litestar.datastructures import CacheControlHeader
from litestar.static_files import create_static_files_router

from spark.server.console.activity import ACTIVITY_ROUTES
from spark.server.console.auth import ConsoleAuth
from spark.server.console.batches import BATCH_PAGE_ROUTES
from spark.server.console.discover import DISCOVER_ROUTES
from spark.server.console.files import FILE_PAGE_ROUTES
from spark.server.console.keys import KEY_PAGE_ROUTES
from spark.server.console.nodes import NODE_PAGE_ROUTES
from spark.server.console.pages import PAGE_ROUTES
from spark.server.console.playground import PLAYGROUND_ROUTES
from spark.server.console.requests import REQUEST_ROUTES
from spark.server.console.runners import RUNNER_PAGE_ROUTES
from spark.server.console.settings import SETTINGS_PAGE_ROUTES
from spark.server.console.signin import SignInNeeded, login, login_page, logout, sign_in_needed

STATIC = Path(__file__).parent / "static"

__all__ = ["ConsoleAuth", "console_routes"]


def console_routes() -> list[Router]:
    """The console's pages and its static files (mounted at the root of the app)."""
    pages = Router(
        "/",
        route_handlers=[
            login_page,
            login,
            logout,
            *PAGE_ROUTES,
            *DISCOVER_ROUTES,
            *RUNNER_PAGE_ROUTES,
            *KEY_PAGE_ROUTES,
            *PLAYGROUND_ROUTES,
            *REQUEST_ROUTES,
            *ACTIVITY_ROUTES,
            *SETTINGS_PAGE_ROUTES,
            *NODE_PAGE_ROUTES,
            *BATCH_PAGE_ROUTES,
            *FILE_PAGE_ROUTES,
        ],
        exception_handlers={SignInNeeded: sign_in_needed},
        include_in_schema=False,
    )
    static = create_static_files_router(
        "/static", directories=[STATIC], cache_control=CacheControlHeader(max_age=3600), include_in_schema=False
    )
    return [pages, static]
