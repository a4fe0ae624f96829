"""Rendering the console's pages: one sandboxed, autoescaping Jinja environment over templates/."""

from __future__ import annotations

import datetime
from typing import Any

from jinja2 import PackageLoader, StrictUndefined
from jinja2.sandbox import SandboxedEnvironment
from litestar import MediaType, Request, Response

import spark
from spark.server.console.sessions import Session
from spark.units import format_bytes

# Pages show only what Spark itself serves: no inline script, no other origin.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

# The pages, in the order of the navigation bar.
NAV = [
    ("models", "Models", "/models"),
    ("discover", "Discover", "/discover"),
    ("runners", "Runners", "/runners"),
    ("keys", "Keys", "/keys"),
    ("playground", "Playground", "/playground"),
    ("requests", "Requests", "/requests"),
    ("batches", "Batches", "/batches"),
    ("files", "Files", "/files"),
    ("activity", "Activity", "/activity"),
    ("settings", "Settings", "/settings"),
    ("nodes", "Nodes", "/nodes"),
]


def _when(timestamp: float | None) -> str:
    if not timestamp:
        return "never"
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


def _clock(timestamp: float) -> str:
    """The time of day, with the date unless it is today."""
    moment = datetime.datetime.fromtimestamp(timestamp)
    same_day = moment.date() == datetime.date.today()
    return moment.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def parameter_count(count: int) -> str:
    """A model's parameter count as people write it: 135 M, 7.2 B."""
    if count >= 10**9:
        return f"{count / 10**9:.1f} B"
    if count >= 10**6:
        return f"{count / 10**6:.0f} M"
    return f"{count / 10**3:.0f} K"


def _duration(seconds: float | None) -> str:
    """A wait as people read it: 45 s, 4 min 12 s, 2 h 5 min."""
    if seconds is None:
        return "–"
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


_env = SandboxedEnvironment(
    loader=PackageLoader("spark.server.console", "templates"),
    autoescape=True,  # model names, prompts and outputs are shown, never run
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["bytes"] = format_bytes
_env.filters["when"] = _when
_env.filters["clock"] = _clock
_env.filters["ms"] = _ms
_env.filters["duration"] = _duration
_env.globals["params"] = parameter_count


def render(
    request: Request[Any, Any, Any],
    template: str,
    *,
    session: Session | None,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Response[str]:
    """The page `template` for this request, with the layout's context and the console's security headers."""
    html = _env.get_template(template).render(
        nav=NAV,
        path=request.url.path,
        csrf=session.csrf if session else "",
        signed_in=session is not None,
        version=spark.__version__,
        **context,
    )
    return Response(
        html, media_type=MediaType.HTML, status_code=status_code, headers={**SECURITY_HEADERS, **(headers or {})}
    )


def render_fragment(template: str, **context: Any) -> str:
    """A piece of a page (e.g. one table row for a live update), rendered with the same environment."""
    return _env.get_template(template).render(**context)
