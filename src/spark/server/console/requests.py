"""The request log in the console: the list with filters and paging, new rows live, one request's page.

The list reads the same log as `GET /api/requests` with the same filters
(model, key, status, since). New rows arrive over `GET /requests/live`, a
server-sent event stream for htmx's SSE extension: each `request.finished`
event makes it read the rows written since the last one it sent that the
page's filters select, and send each as a rendered table row.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import urlencode

import msgspec
from litestar import MediaType, Request, Response, get
from litestar.params import FromPath
from litestar.response import Stream

from spark.errors import InvalidRequest, RequestNotFound
from spark.events import REQUEST_FINISHED, Subscription
from spark.server.console.charts import waterfall
from spark.server.console.render import render, render_fragment
from spark.server.console.signin import require_session
from spark.server.generation import SSE_HEADERS
from spark.server.state import ServerState, state_of
from spark.store.requests import RequestFilter, check_filter, parse_since
from spark.trace import describe_step

PAGE_SIZE = 50
SINCE_CHOICES = [
    ("", "any time"),
    ("15m", "last 15 min"),
    ("1h", "last hour"),
    ("24h", "last day"),
    ("7d", "last week"),
]
STATUS_CHOICES = [("", "any status"), ("ok", "succeeded"), ("error", "failed")]
LIVE_IDLE_SECONDS = 15.0
FILTERS = ("model", "key", "status", "since")


def _filters(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The page's filters as given in the query (empty ones left out)."""
    return {name: value for name in FILTERS if (value := (request.query_params.get(name) or "").strip())}


def _request_filter(filters: dict[str, str], *, offset: int = 0, after: int | None = None) -> RequestFilter:
    since = filters.get("since")
    return check_filter(
        RequestFilter(
            model=filters.get("model"),
            key=filters.get("key"),
            status=filters.get("status"),
            since=parse_since(since) if since else None,
            limit=PAGE_SIZE,
            offset=offset,
            after_seq=after,
        )
    )


def _whole(request: Request[Any, Any, Any], name: str) -> int:
    text = request.query_params.get(name) or "0"
    if not text.isdigit():
        raise InvalidRequest(f"{name} must be a whole number, not '{text}'", param=name)
    return int(text)


@get("/requests", media_type=MediaType.HTML)
async def requests_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """The newest requests the filters select, a page at a time; new ones arrive live on the first page."""
    session = require_session(request)
    state = state_of(request)
    filters = _filters(request)
    models = sorted(m.id for m in await asyncio.to_thread(state.library.list))
    keys = sorted(k.name for k in await asyncio.to_thread(state.keys.list))
    context: dict[str, Any] = {
        "filters": filters,
        "models": models,
        "keys": keys,
        "since_choices": SINCE_CHOICES,
        "status_choices": STATUS_CHOICES,
    }
    try:
        offset = _whole(request, "offset")
        query = _request_filter(filters, offset=offset)
    except InvalidRequest as error:
        return render(
            request,
            "requests.html",
            session=session,
            active="requests",
            status_code=400,
            error=error,
            page=None,
            **context,
        )
    await state.flush_log()
    page = await asyncio.to_thread(state.requests.page, query)
    link = urlencode(filters)
    typed = filters.get("model", "").lower()
    # the filter takes a whole name: an empty log for part of one links to the installed models it fits
    near = [(m, urlencode({**filters, "model": m})) for m in models if typed and typed in m.lower() and m != typed]
    return render(
        request,
        "requests.html",
        session=session,
        active="requests",
        error=None,
        page=page,
        offset=offset,
        page_size=PAGE_SIZE,
        query=link,
        near_models=near if not page.total else [],
        live_url=f"/requests/live?{urlencode({**filters, 'after': page.last_seq})}" if offset == 0 else None,
        **context,
    )


@get("/requests/live", media_type="text/event-stream")
async def live_rows(request: Request[Any, Any, Any]) -> Stream:
    """New rows for the list (event `request`, data: one `<tr>`), as the log writes them."""
    require_session(request)
    state = state_of(request)
    filters = _filters(request)
    after = _whole(request, "after")
    _request_filter(filters)  # refuse bad filters now, not in the stream
    subscription = state.events.subscribe(frozenset({REQUEST_FINISHED}))
    return Stream(_rows(state, filters, after, subscription), media_type="text/event-stream", headers=SSE_HEADERS)


async def _rows(
    state: ServerState, filters: dict[str, str], after: int, subscription: Subscription
) -> AsyncGenerator[bytes, None]:
    try:
        yield b": connected\n\n"
        while True:
            try:
                event = await subscription.next(LIVE_IDLE_SECONDS)
            except TimeoutError:
                yield b": idle\n\n"
                continue
            if event is None:
                return
            await state.flush_log()
            rows = await asyncio.to_thread(state.requests.list, _request_filter(filters, after=after))
            for row in rows:
                after = max(after, row.seq)
                html = render_fragment("request_row.html", r=row).replace("\n", "")
                yield b"event: request\ndata: " + html.encode() + b"\n\n"
    finally:
        subscription.close()


def _messages(content: dict[str, Any] | None) -> list[dict[str, str]]:
    """The request's messages as role and text (an image shown as such), for the page."""
    if not content:
        return []
    shown = []
    for message in content.get("messages") or []:
        body = message.get("content")
        if isinstance(body, list):
            body = "\n".join(p.get("text", "[image]") for p in body if isinstance(p, dict))
        if message.get("tool_calls"):
            body = (body or "") + "\n" + msgspec.json.encode(message["tool_calls"]).decode()
        shown.append({"role": str(message.get("role", "?")), "text": str(body or "")})
    if not shown and content.get("prompt") is not None:  # the completions route
        shown.append({"role": "prompt", "text": str(content["prompt"])})
    return shown


def _parameters(content: dict[str, Any] | None) -> str:
    """What the request asked besides its messages (sampling, format, tools), as indented JSON."""
    rest = {k: v for k, v in (content or {}).items() if k not in ("messages", "prompt", "model", "type")}
    return msgspec.json.format(msgspec.json.encode(rest)).decode() if rest else ""


@get("/requests/{request_id:str}", media_type=MediaType.HTML)
async def request_page(request: Request[Any, Any, Any], request_id: FromPath[str]) -> Response[Any]:
    """One request: its numbers, its timeline as a waterfall, its content where kept, its error."""
    session = require_session(request)
    state = state_of(request)
    await state.flush_log()
    try:
        record = await asyncio.to_thread(state.requests.get, request_id)
    except RequestNotFound:
        return render(
            request,
            "missing.html",
            session=session,
            active="requests",
            status_code=404,
            what=f"logged request '{request_id}'",
        )
    content = record.content
    return render(
        request,
        "request.html",
        session=session,
        active="requests",
        r=record,
        steps=[describe_step(step) for step in record.timeline],  # in words, as the TUI and `spark log` say them
        bars=waterfall(record.timeline),
        messages=_messages(content.request if content else None),
        parameters=_parameters(content.request if content else None),
    )


REQUEST_ROUTES = [requests_page, live_rows, request_page]
