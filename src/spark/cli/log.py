"""`spark log`: the request log. A list of recent requests, one request's timeline as a
waterfall (`spark log ID`), or new requests as they come (`spark log -f`).

It asks the server this machine runs through its admin API (with the local
admin token), or reads the database itself when no server runs.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Protocol
from urllib.parse import quote

import msgspec
import typer
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from spark.cli.columns import add_row, fitting_table
from spark.server.local_admin import AdminClient, connect
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.requests import (
    MAX_LIMIT,
    RequestFilter,
    RequestPage,
    RequestRecord,
    RequestSummary,
    RequestTable,
    check_filter,
    parse_since,
)
from spark.trace import describe_step, ms
from spark.tui import text

FOLLOW_POLL_SECONDS = 1.0


class LogSource(Protocol):
    """Where the log is read from: the running server, or the database."""

    def page(self, f: RequestFilter) -> RequestPage: ...

    def get(self, request_id: str) -> RequestRecord: ...


class LocalLog:
    """The database on this machine, read directly (no server is running)."""

    def __init__(self, table: RequestTable) -> None:
        self._table = table

    def page(self, f: RequestFilter) -> RequestPage:
        return self._table.page(f)

    def get(self, request_id: str) -> RequestRecord:
        return self._table.get(request_id)


class ServerLog:
    """The running server's admin API."""

    def __init__(self, client: AdminClient) -> None:
        self._client = client

    def page(self, f: RequestFilter) -> RequestPage:
        params: dict[str, str | int | float] = {"limit": f.limit, "offset": f.offset}
        for name, value in (
            ("model", f.model),
            ("key", f.key),
            ("status", f.status),
            ("since", f.since),
            ("after", f.after_seq),
        ):
            if value is not None:
                params[name] = value
        return msgspec.json.decode(self._client.get("/api/requests", params), type=RequestPage)

    def get(self, request_id: str) -> RequestRecord:
        path = f"/api/requests/{quote(request_id, safe='')}"
        return msgspec.json.decode(self._client.get(path), type=RequestRecord)


def open_log() -> LogSource:
    """The running server's log when one runs, else the database's."""
    settings = load_settings()
    client = connect(settings)
    if client is not None:
        return ServerLog(client)
    return LocalLog(RequestTable(Database(settings.db_path)))


# --- formatting ------------------------------------------------------------------


def _when(timestamp: float) -> str:
    moment = datetime.fromtimestamp(timestamp)
    same_day = moment.date() == datetime.now().date()
    return moment.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")


def _status(r: RequestSummary) -> Text:
    if r.error_type is not None:
        return Text(f"{r.status} {r.error_type}", style="red")
    if r.finish_reason == "cancelled" or r.status >= 400:
        return Text(f"{r.status} {r.finish_reason or ''}".strip(), style="yellow")
    return Text(str(r.status), style="green")


def _tokens(r: RequestSummary) -> str:
    cached = f" ({r.cached_tokens} cached)" if r.cached_tokens else ""
    return f"{r.prompt_tokens}{cached} -> {r.completion_tokens}"


def requests_table(rows: list[RequestSummary], width: int, *, header: bool = True) -> Table:
    """One line per request, with the columns that fit `width` (the fixed widths keep the columns
    of `spark log -f`'s later pages under the first page's header)."""
    # The whole id must show, as `spark log ID` needs it: other columns shrink or go first.
    id_width = max((len(r.request_id) for r in rows), default=20)
    columns = (
        ("TIME", 8, 19),  # 19: another day's date too
        ("ID", id_width, id_width),
        ("MODEL", 16, 28),
        ("KEY", 8, 12),
        ("ROUTE", 10, 16),
        ("STATUS", 12, 24),
        ("TOKENS", 12, 20),
        ("TTFT", 8, 8),
        ("DURATION", 8, 8),
        ("TOK/S", 6, 6),
    )
    dropped = ("KEY", "TOK/S", "TTFT", "ROUTE", "DURATION", "TOKENS")
    table = fitting_table(columns, dropped, width, grow_first=("MODEL", "STATUS"), header=header)
    for r in rows:
        add_row(
            table,
            {
                "TIME": _when(r.started_at),
                "ID": r.request_id,
                "MODEL": r.model or "-",
                "KEY": r.key_name or "-",
                "ROUTE": text.route_name(r.route),
                "STATUS": _status(r),
                "TOKENS": _tokens(r),
                "TTFT": ms(r.ttft_ms),
                "DURATION": ms(r.duration_ms),
                "TOK/S": f"{r.tokens_per_second:.1f}" if r.tokens_per_second is not None else "-",
            },
        )
    return table


def _slowest(record: RequestRecord) -> str | None:
    gaps = [
        (b.at_ms - a.at_ms, describe_step(a)[0], describe_step(b)[0])
        for a, b in zip(record.timeline, record.timeline[1:], strict=False)
    ]
    if not gaps or record.duration_ms <= 0:
        return None
    took, start, end = max(gaps)
    return f"{start} -> {end}: {ms(took)} ({took / record.duration_ms:.0%} of the request)"


def request_view(record: RequestRecord) -> Group:
    """`spark log ID`: what the request was, its waterfall, its totals, its content."""
    head = Text.assemble(
        (record.request_id, "bold"),
        f"  {_when(record.started_at)}  {record.route}  model {record.model or '-'}  "
        f"key {record.key_name or '-'}  node {record.node}  ",
        _status(record),
    )
    parts: list[RenderableType] = [head]
    if record.error_message:
        parts.append(Text(f"error: {record.error_message}", style="red"))
    parts += [Text(""), text.timeline(record.timeline), Text("")]
    parts.append(Text(text.totals(record)))
    if (slowest := _slowest(record)) is not None:
        parts.append(Text(f"longest step: {slowest}"))
    kept = msgspec.to_builtins(record.content) if record.content is not None else None
    parts += [Text(""), text.content(record.zero_retention, kept)]
    return Group(*parts)


# --- the command -------------------------------------------------------------------


def log_command(
    request_id: str | None = typer.Argument(None, help="Show this request (its x-request-id) with its timeline."),
    model: str | None = typer.Option(None, "--model", help="Only requests for this model."),
    key: str | None = typer.Option(None, "--key", help="Only requests made with this key (name or prefix)."),
    status: str | None = typer.Option(
        None, "--status", help="ok, error, failed (an error, not a cancellation), or an HTTP status code (e.g. 400)."
    ),
    since: str | None = typer.Option(None, "--since", help="Only requests since then: 30m, 2h, 1d, or a date."),
    limit: int = typer.Option(20, "--limit", "-n", help="How many requests to list."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new requests as they finish."),
) -> None:
    """List recent API requests, show one with its timeline, or follow new ones (-f).

    Reads the running server's log through its admin API, or the local database when no server runs.
    """
    console = Console()
    source = open_log()
    if request_id is not None:
        console.print(request_view(source.get(request_id)), highlight=False)
        return
    query = check_filter(
        RequestFilter(
            model=model, key=key, status=status, limit=limit, since=parse_since(since) if since is not None else None
        )
    )
    page = source.page(query)
    rows = list(reversed(page.requests))  # oldest first, so the newest is next to the prompt
    if rows:
        console.print(requests_table(rows, console.width), highlight=False)
    elif not follow:
        console.print(
            "No requests logged yet."
            if page.total == 0 and query == RequestFilter(limit=limit)
            else "No request matches.",
            highlight=False,
        )
    if follow:
        _follow(console, source, query, page.last_seq, header=not rows)


def _follow(console: Console, source: LogSource, query: RequestFilter, last_seq: int, *, header: bool) -> None:
    query = msgspec.structs.replace(query, limit=MAX_LIMIT, offset=0)
    try:
        while True:
            time.sleep(FOLLOW_POLL_SECONDS)
            page = source.page(msgspec.structs.replace(query, after_seq=last_seq))
            if page.requests:
                console.print(requests_table(page.requests, console.width, header=header), highlight=False)
                header = False
                last_seq = max(r.seq for r in page.requests)
    except KeyboardInterrupt:
        return
