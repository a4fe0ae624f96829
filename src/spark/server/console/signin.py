"""Sign-in, sign-out and the session every console page needs."""

from __future__ import annotations

import logging
import math
from typing import Any, cast

from litestar import MediaType, Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.response import Redirect

from spark.server.console.auth import ConsoleAuth, client_address, is_https, login_url, safe_next
from spark.server.console.render import SECURITY_HEADERS, render
from spark.server.console.sessions import COOKIE, SESSION_SECONDS, Session, csrf_matches
from spark.server.family import OLLAMA_PREFIX

log = logging.getLogger("spark.console")


class SignInNeeded(Exception):
    """A console page or partial asked for without a session."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


def console_auth(request: Request[Any, Any, Any]) -> ConsoleAuth:
    return cast(ConsoleAuth, request.app.state.console)


def require_session(request: Request[Any, Any, Any]) -> Session:
    """The request's session; `SignInNeeded` without one."""
    session = console_auth(request).session_of(request)
    if session is None:
        raise SignInNeeded(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return session


def require_csrf(request: Request[Any, Any, Any], session: Session, form_token: str | None = None) -> None:
    """State changes from the console carry the session's CSRF token (header, or form field for plain forms)."""
    if not csrf_matches(session, request.headers.get("x-csrf-token") or form_token):
        raise SignInNeeded("/")


async def require_change(request: Request[Any, Any, Any]) -> tuple[Session, dict[str, str]]:
    """A console form's post: the session, its CSRF token checked, and the form's fields."""
    session = require_session(request)
    form = await request.form()
    fields = {key: str(value) for key, value in form.items()}
    require_csrf(request, session, fields.pop("csrf", None))
    return session, fields


# where API clients and scripts call: an unknown address there is answered in the API's JSON
_API_PATHS = ("/v1/", "/api/", OLLAMA_PREFIX + "/", "/static/", "/health/", "/metrics/")


def page_not_found(request: Request[Any, Any, Any]) -> Response[Any] | None:
    """A browser's page asked for at an address that is none (a mistyped console address, /admin): a
    small page that leads to the console. None for what API clients call (they get their API's error)."""
    path = request.scope["path"]
    wants_page = request.method in ("GET", "HEAD") and "text/html" in request.headers.get("accept", "")
    if not wants_page or (path + "/").startswith(_API_PATHS):
        return None
    session = console_auth(request).session_of(request)
    return render(request, "missing.html", session=session, active="", status_code=404, what=f"page {path}")


def sign_in_needed(request: Request[Any, Any, Any], exc: SignInNeeded) -> Response[Any]:
    """Full pages go to the sign-in page; htmx partials get 401 and are told where to go."""
    target = login_url(exc.next_path)
    if request.headers.get("hx-request"):
        return Response("", status_code=401, headers={"HX-Redirect": target, **SECURITY_HEADERS})
    return Redirect(target, status_code=303, headers=SECURITY_HEADERS)


def _signed_in(request: Request[Any, Any, Any], target: str) -> Response[Any]:
    session = console_auth(request).sessions.create()
    cookie = Cookie(
        key=COOKIE,
        value=session.token,
        max_age=SESSION_SECONDS,
        path="/",
        httponly=True,
        samesite="strict",
        secure=is_https(request),
    )
    return Redirect(safe_next(target), status_code=303, cookies=[cookie], headers=SECURITY_HEADERS)


@get("/login", media_type=MediaType.HTML)
async def login_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """The sign-in form; `?code=` signs in with a one-time link printed by the server (loopback only)."""
    auth = console_auth(request)
    next_path = safe_next(request.query_params.get("next"))
    code = request.query_params.get("code")
    if code is not None:
        if auth.use_one_time_code(code, client_address(request)):
            log.info("console: signed in with the one-time link from %s", client_address(request))
            return _signed_in(request, next_path)
        return render(
            request,
            "login.html",
            session=None,
            status_code=401,
            next_path=next_path,
            password_set=bool(auth.password),
            error=(
                "This sign-in link is used up or invalid. Restart `spark serve` for a new one, "
                "or sign in with the admin password."
            ),
        )
    if auth.session_of(request) is not None:
        return Redirect(next_path, status_code=303)
    return render(request, "login.html", session=None, next_path=next_path, password_set=bool(auth.password), error="")


@post("/login", media_type=MediaType.HTML)
async def login(request: Request[Any, Any, Any]) -> Response[Any]:
    auth = console_auth(request)
    address = client_address(request)
    form = await request.form()
    next_path = safe_next(form.get("next"))
    wait = auth.throttle.wait_seconds(address)
    if wait > 0:
        return render(
            request,
            "login.html",
            session=None,
            status_code=429,
            headers={"Retry-After": str(math.ceil(wait))},
            next_path=next_path,
            password_set=bool(auth.password),
            error=f"Too many failed sign-ins from {address}: try again in {math.ceil(wait)} s.",
        )
    if auth.password_matches(str(form.get("password") or "")):
        auth.throttle.succeeded(address)
        log.info("console: signed in from %s", address)
        return _signed_in(request, next_path)
    failures = auth.throttle.failed(address)
    log.warning("console: failed sign-in from %s (%d in a row)", address, failures)
    return render(
        request,
        "login.html",
        session=None,
        status_code=401,
        next_path=next_path,
        password_set=bool(auth.password),
        error="Wrong password." if auth.password else "No admin password is set on this server.",
    )


@post("/logout", media_type=MediaType.HTML)
async def logout(request: Request[Any, Any, Any]) -> Response[Any]:
    session = require_session(request)
    form = await request.form()
    require_csrf(request, session, form.get("csrf"))
    console_auth(request).sessions.end(session.token)
    gone = Cookie(key=COOKIE, value="", max_age=0, path="/", httponly=True, samesite="strict", secure=is_https(request))
    return Redirect("/login", status_code=303, cookies=[gone], headers=SECURITY_HEADERS)
