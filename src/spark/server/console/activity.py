"""The Activity page: requests per minute, tokens per second, time to first token and queueing per
model over the last hour or day (from the request log, as `GET /api/activity` serves it), and memory
over time (from the sampler behind `GET /api/memory`), drawn as inline SVG (spark.server.console.charts).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, get
from markupsafe import Markup

from spark.library import Library
from spark.server.console.charts import Point, legend, line_chart
from spark.server.console.render import render
from spark.server.console.signin import require_session
from spark.server.memory_history import MemoryHistory, memory_sampler_of
from spark.server.state import state_of
from spark.store.requests import ActivityBucket

# window name -> (seconds, bucket seconds)
WINDOWS = {"1h": (3600, 60), "24h": (86400, 900)}
MAX_MEMORY_POINTS = 360  # a day of 10 s samples is thinned to this many per line
SERVER_LINE = "spark server"
OTHER = "(other)"  # the series of requests that are no model's: see _folded


class Chart(msgspec.Struct, frozen=True):
    title: str
    unit: str
    svg: Markup
    legend: Markup


class ModelTotals(msgspec.Struct, frozen=True):
    model: str
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    ttft_ms: float | None  # mean over the window
    max_queue: int


def _label(model: str | None) -> str:
    return model or OTHER


def _mean(pairs: list[tuple[float | None, int]]) -> float | None:
    """The mean of values each weighted by its count (those without a value left out)."""
    timed = [(value, n) for value, n in pairs if value is not None]
    weight = sum(n for _, n in timed)
    return sum(value * n for value, n in timed) / weight if weight else None


def _folded(buckets: list[ActivityBucket], own: set[str]) -> list[ActivityBucket]:
    """`buckets` with those of models not in `own` made one `OTHER` bucket per time: requests naming no
    model (uploads, batch and file calls, a body that could not be read) and a client's mistyped model
    are no model's own series."""
    kept = [b for b in buckets if b.model in own]
    others: dict[float, list[ActivityBucket]] = defaultdict(list)
    for b in buckets:
        if b.model not in own:
            others[b.start].append(b)
    for start, group in others.items():
        kept.append(
            ActivityBucket(
                start,
                None,
                sum(b.requests for b in group),
                sum(b.errors for b in group),
                sum(b.prompt_tokens for b in group),
                sum(b.completion_tokens for b in group),
                _mean([(b.ttft_ms, b.requests) for b in group]),
                _mean([(b.tokens_per_second, b.requests) for b in group]),
                max(b.max_queue for b in group),
            )
        )
    return sorted(kept, key=lambda b: (b.start, b.model or ""))


def _own_series(buckets: list[ActivityBucket], library: Library) -> set[str]:
    """The models that get a series: installed, or (installed once, or by another name) answered."""
    answered = {b.model for b in buckets if b.model and b.requests > b.errors}
    named = {b.model for b in buckets if b.model} - answered
    return answered | {model for model in named if library.exists(model)}


def _series(buckets: list[ActivityBucket], value: Any) -> dict[str, list[Point]]:
    """One line per model of `value(bucket)` (None: no point there)."""
    lines: dict[str, list[Point]] = defaultdict(list)
    for b in buckets:
        v = value(b)
        if v is not None:
            lines[_label(b.model)].append((b.start, float(v)))
    return dict(sorted(lines.items(), key=_last_other))


def _last_other(item: tuple[str, Any]) -> tuple[bool, str]:
    """Sorts by name, `OTHER` last."""
    return item[0] == OTHER, item[0]


def _zero_filled(series: dict[str, list[Point]], start: float, end: float, step: int) -> dict[str, list[Point]]:
    """Counts are zero where a model had no request: every bucket of the window gets a point."""
    first = int(start // step) * step
    filled = {}
    for name, points in series.items():
        known = dict(points)
        filled[name] = [(float(t), known.get(float(t), 0.0)) for t in range(first, int(end) + 1, step)]
    return filled


def _charts(specs: list[tuple[str, str, dict[str, list[Point]], float]], start: float, end: float) -> list[Chart]:
    """The page's charts (title, unit, series, gap each), a name drawn alike in all of them."""
    names = sorted({name for _, _, series, _ in specs for name in series}, key=lambda n: (n != SERVER_LINE, n))
    styles = {name: i for i, name in enumerate(names)}
    return [
        Chart(title, unit, line_chart(title, series, start, end, unit, gap, styles), legend(list(series), styles))
        for title, unit, series, gap in specs
    ]


def _totals(buckets: list[ActivityBucket]) -> list[ModelTotals]:
    by_model: dict[str, list[ActivityBucket]] = defaultdict(list)
    for b in buckets:
        by_model[_label(b.model)].append(b)
    totals = []
    for model, own in sorted(by_model.items(), key=_last_other):
        totals.append(
            ModelTotals(
                model,
                sum(b.requests for b in own),
                sum(b.errors for b in own),
                sum(b.prompt_tokens for b in own),
                sum(b.completion_tokens for b in own),
                _mean([(b.ttft_ms, b.requests) for b in own]),
                max(b.max_queue for b in own),
            )
        )
    return totals


def _memory_series(history: MemoryHistory) -> dict[str, list[Point]]:
    samples = history.samples
    stride = max(1, len(samples) // MAX_MEMORY_POINTS)
    lines: dict[str, list[Point]] = defaultdict(list)
    for s in samples[::stride]:
        lines[SERVER_LINE].append((s.at, float(s.server_bytes)))
        for model, used in s.models.items():
            lines[model].append((s.at, float(used)))
    return dict(lines)


@get("/activity", media_type=MediaType.HTML)
async def activity_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """Charts of the last hour (per minute) or day (per 15 minutes), per model, and memory over time."""
    session = require_session(request)
    window = request.query_params.get("window") or "1h"
    if window not in WINDOWS:
        return render(
            request,
            "missing.html",
            session=session,
            active="activity",
            status_code=400,
            what=f"activity window '{window}' (use {' or '.join(WINDOWS)})",
        )
    seconds, step = WINDOWS[window]
    state = state_of(request)
    end = time.time()
    start = end - seconds
    await state.flush_log()
    activity = await asyncio.to_thread(state.requests.activity, start, step)
    memory = memory_sampler_of(request.app).since(start)
    buckets = _folded(activity.buckets, await asyncio.to_thread(_own_series, activity.buckets, state.library))
    per_minute = step / 60
    gap = step * 1.5
    charts = _charts(
        [
            (
                "Requests per minute",
                "requests/min",
                _zero_filled(_series(buckets, lambda b: b.requests / per_minute), start, end, step),
                gap,
            ),
            (
                "Tokens generated per second",
                "tokens/s",
                _zero_filled(_series(buckets, lambda b: b.completion_tokens / step), start, end, step),
                gap,
            ),
            ("Time to first token", "ms, mean", _series(buckets, lambda b: b.ttft_ms), gap),
            (
                "Queue",
                "requests waiting, most seen",
                _zero_filled(_series(buckets, lambda b: b.max_queue), start, end, step),
                gap,
            ),
            ("Memory", "bytes resident", _memory_series(memory), memory.interval_seconds * 3),
        ],
        start,
        end,
    )
    return render(
        request,
        "activity.html",
        session=session,
        active="activity",
        window=window,
        windows=list(WINDOWS),
        charts=charts,
        totals=_totals(buckets),
        other=OTHER,
        memory_since=memory.samples[0].at if memory.samples else None,
    )


ACTIVITY_ROUTES = [activity_page]
