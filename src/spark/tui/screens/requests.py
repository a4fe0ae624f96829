"""Requests: the live request log, newest on top, the ones in flight first and ticking.

`/` filters by model, key and status (`model:NAME key:NAME status:error`, a
bare word is a model); Enter opens a request's timeline.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from spark.trace import ms
from spark.tui import text, wire
from spark.tui.client import AdminAPI
from spark.tui.screens.base import MOVE_KEYS, LiveChanged, View
from spark.tui.screens.request import RequestView
from spark.tui.widgets import Table, set_text

PAGE = 200  # the newest requests listed; the log may hold many more
TICK_SECONDS = 0.5
LIVE = "live:"  # row keys of requests in flight
COLUMNS = ("TIME", "MODEL", "KEY", "STATUS", "TOKENS", "TTFT", "TOOK", "TOK/S")
FILTER_FIELDS = ("model", "key", "status")


def parse_filter(line: str) -> dict[str, str]:
    """`model:x key:y status:error` (a bare word: the model) -> {"model": "x", ...}; ValueError naming
    an unknown field."""
    found: dict[str, str] = {}
    for word in line.split():
        name, sep, value = word.partition(":")
        if not sep:
            name, value = "model", word
        if name not in FILTER_FIELDS:
            raise ValueError(f"unknown filter '{name}': use {', '.join(f + ':' for f in FILTER_FIELDS)}")
        found[name] = value
    return found


class RequestsView(View):
    MODE = "requests"
    FILTER_HINT = "filter: model:NAME key:NAME status:ok|error|400 (Enter applies, empty clears)"
    KEYS_HELP = (*MOVE_KEYS, ("Enter", "The request's timeline and content"))

    def __init__(self) -> None:
        super().__init__()
        self.filters: dict[str, str] = {}
        self._page: wire.RequestPage | None = None
        self._drawn: tuple[object, ...] = ()
        self._live_dirty = False

    def body(self) -> ComposeResult:
        table = Table(*COLUMNS, flex="MODEL", id="requests")
        table.border_title = "Requests"
        yield table
        yield Static(id="summary", classes="hint")

    def on_mount(self) -> None:
        self.set_interval(TICK_SECONDS, self._tick)

    async def reload(self, api: AdminAPI) -> None:
        self._page = await api.requests(limit=PAGE, **self.filters)
        self._draw()

    def apply_filter(self, text_line: str) -> None:
        try:
            self.filters = parse_filter(text_line)
        except ValueError as e:
            self.spark.notify(str(e), severity="error")
            return
        self._drawn = ()

    def on_live_changed(self, _: LiveChanged) -> None:
        self._live_dirty = True  # drawn at the next tick: a burst of events costs one redraw

    def _live(self) -> list[tuple[str, list[str | Text]]]:
        now = self.spark.clock()
        rows: list[tuple[str, list[str | Text]]] = []
        for r in sorted(self.spark.in_flight.values(), key=lambda r: r.started_at, reverse=True):
            if any(self.filters.get(f) not in (None, value) for f, value in (("model", r.model), ("key", r.key))):
                continue
            if self.filters.get("status"):
                continue  # running requests have no status yet
            cells: list[str | Text] = [
                Text(text.clock(r.started_at, now), "bold yellow"),
                text.model_or_route(r.model, r.route),
                r.key or "-",
                Text("▶ live", "bold yellow"),
                "",
                ms(r.ttft_ms) if r.ttft_ms is not None else "…",
                ms((now - r.started_at) * 1000),
                "",
            ]
            rows.append((LIVE + r.id, cells))
        return rows

    def _draw(self) -> None:
        page = self._page
        live_ids = tuple(sorted(self.spark.in_flight))
        key = (page.last_seq if page else None, page.total if page else None, tuple(self.filters.items()), live_ids)
        if key == self._drawn:
            return  # nothing new: a 200-row table is not rebuilt every poll
        self._drawn = key
        now = self.spark.clock()
        logged = page.requests if page is not None else []
        rows = self._live() + [(r.id, _cells(r, now)) for r in logged if r.id not in self.spark.in_flight]
        self.query_one("#requests", Table).replace_rows(rows)
        total = page.total if page is not None else 0
        shown = f"newest {len(logged)} of {total}" if total > len(logged) else f"{total} logged"
        where = " ".join(f"{k}:{v}" for k, v in self.filters.items())
        set_text(
            self.query_one("#summary", Static),
            f"{len(live_ids)} in flight · {shown}" + (f" · filter {where}" if where else "") + " · Enter: timeline",
        )

    def _tick(self) -> None:
        """Draw what the events changed, else advance the clock of the requests in flight (only their cells)."""
        if not self.is_current:
            return
        if self._live_dirty:
            self._live_dirty = False
            self._draw()
            return
        if not self.spark.in_flight:
            return
        table = self.query_one("#requests", Table)
        now = self.spark.clock()
        for r in self.spark.in_flight.values():
            row = LIVE + r.id
            if row in table.rows:
                table.update_cell(row, "TOOK", ms((now - r.started_at) * 1000))
                table.update_cell(row, "TTFT", ms(r.ttft_ms) if r.ttft_ms is not None else "…")

    def open_row(self, table: Table, key: str) -> None:
        if key.startswith(LIVE):
            self.spark.notify("Still running: its timeline is written when it ends.")
            return
        self.spark.push_screen(RequestView(key))


def _cells(r: wire.RequestRow, now: float) -> list[str | Text]:
    return [
        text.clock(r.started_at, now),
        text.model_or_route(r.model, r.route),
        r.key_name or "-",
        text.short_status(r),
        text.tokens(r),
        ms(r.ttft_ms),
        ms(r.duration_ms),
        text.speed(r.tokens_per_second),
    ]
