"""How the TUI writes values in its cells: bars, speeds, times, statuses."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple, Protocol

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from spark import trace
from spark.trace import ms
from spark.tui import wire
from spark.units import format_bytes, format_duration

_ROUTE_NAMES = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/completions": "completion",
    "/v1/embeddings": "embed",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "count",
    "/ollama/api/chat": "ollama chat",
    "/ollama/api/generate": "ollama generate",
    "/ollama/api/embed": "ollama embed",
    "/ollama/api/embeddings": "ollama embed",
    "/completion": "llama completion",
    "/completions": "llama completion",
    "/infill": "llama infill",
    "/v1/rerank": "rerank",
    "/v2/rerank": "rerank",
    "/rerank": "rerank",
}
STATE_STYLES = {
    "ready": "green",
    "loading": "yellow",
    "restarting": "yellow",
    "failed": "red",
    "draining": "yellow",
    "not_ready": "yellow",
    "unreachable": "red",
    "pending": "dim",
    "done": "green",
    "downloading": "cyan",
    "verifying": "cyan",
    "queued": "dim",
    "cancelled": "yellow",
    # a batch's
    "in_progress": "cyan",
    "cancelling": "yellow",
    "completed": "green",
}


def route_name(route: str) -> str:
    """A logged route's short name (`chat`, `ollama generate`), or the path itself; OpenAI's routes as
    Ollama serves them again (for Open WebUI) by their name under /v1 and where they came from."""
    if route.startswith("/ollama/v1/"):
        return f"{route_name(route.removeprefix('/ollama'))} (/ollama)"
    return _ROUTE_NAMES.get(route, route)


def model_or_route(model: str | None, route: str) -> str | Text:
    """A request's model, or where it names none (a file upload, a batch created), its route, dim: such
    requests are told apart by what they did."""
    return model or Text(route_name(route), "dim")


def bar(fraction: float, width: int, style: str = "cyan") -> Text:
    """`█████░░░`: `fraction` (0 to 1) of `width` cells."""
    fraction = min(1.0, max(0.0, fraction))
    full = round(fraction * width)
    return Text.assemble(("█" * full, style), ("░" * (width - full), "dim"))


def size(n: int | None) -> str:
    """`98.1 MiB` without the space, to fit narrow columns: `98.1M`."""
    if n is None:
        return "-"
    number, _, unit = format_bytes(n).partition(" ")
    return number + unit[0] if unit != "B" else number + "B"


def count(n: int) -> str:
    """`812`, `12.4k`, `3.1M`: a count that fits a narrow column."""
    for limit, unit in ((1_000_000, "M"), (1_000, "k")):
        if n >= limit:
            return f"{n / limit:.1f}".removesuffix(".0") + unit
    return str(n)


def speed(tokens_per_second: float | None) -> str:
    return "-" if tokens_per_second is None else f"{tokens_per_second:.1f}"


def state(value: str) -> Text:
    return Text(value, style=STATE_STYLES.get(value, ""))


def clock(timestamp: float, now: float) -> str:
    """`14:03:05` today, `11-29 14:03` before."""
    moment = datetime.fromtimestamp(timestamp)
    return moment.strftime("%H:%M:%S" if moment.date() == datetime.fromtimestamp(now).date() else "%m-%d %H:%M")


def ago(timestamp: float | None, now: float) -> str:
    """`3s ago`, `5m ago`, `2h ago`, `12d ago`: how long ago, to the unit that matters."""
    if timestamp is None:
        return "never"
    seconds = max(0, round(now - timestamp))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def memory_cell(runner: wire.Runner, width: int = 6) -> Text:
    """Measured memory as a bar against the estimate (the estimate alone, dimmed, until measured)."""
    if runner.measured_bytes is None:
        return Text.assemble(("~" + size(runner.estimate_bytes), "dim"))
    scale = max(runner.estimate_bytes, runner.measured_bytes) or 1
    return bar(runner.measured_bytes / scale, width) + Text(" " + size(runner.measured_bytes))


def unloads(runner: wire.Runner) -> str:
    """When it unloads: `in 4m 10s`, `when idle`, `never`, or what it is doing."""
    if runner.reason.startswith("stopping"):
        return "stopping"
    if runner.status != "ready":
        return runner.status
    if runner.unloads_in is not None:
        return format_duration(runner.unloads_in)
    return "never" if runner.keep_alive < 0 else "when idle"


def status(row: wire.RequestRow) -> Text:
    """The HTTP status, coloured: green ok, yellow cancelled or refused, red an error."""
    if row.error_type is not None:
        return Text(f"{row.status} {row.error_type}", style="red")
    if row.finish_reason == "cancelled" or row.status >= 400:
        return Text(f"{row.status} {row.finish_reason or ''}".strip(), style="yellow")
    return Text(str(row.status), style="green")


def short_status(row: wire.RequestRow) -> Text:
    """The HTTP status alone, coloured as `status` (the error's code is on the request's page)."""
    if row.finish_reason == "cancelled":
        return Text("cancel", style="yellow")
    return Text(str(row.status), style="red" if row.error_type is not None else status(row).style)


def tokens(row: wire.RequestRow) -> str:
    return f"{row.prompt_tokens}→{row.completion_tokens}"


def pull_progress(job: wire.PullJob, width: int = 12) -> Text:
    """A pull's bar and percentage (the state alone before its size is known)."""
    if job.state == "done":
        return bar(1.0, width, "green") + Text(" 100%")
    if not job.bytes_total:
        return Text("-" if job.state in ("failed", "cancelled") else "waiting", style="dim")
    fraction = job.bytes_done / job.bytes_total
    return bar(fraction, width) + Text(f" {fraction:4.0%}")


def batch_progress(batch: wire.Batch) -> Text:
    """`12/40`: a batch's requests answered of all, then its errors in red (`12/40 1 err`).
    No bar: with the id, key, route, status and times it would not fit 80 columns."""
    cell = Text(f"{batch.succeeded + batch.errored}/{batch.total}")
    if batch.errored:
        cell.append(f" {batch.errored} err", "red")
    return cell


class Counted(Protocol):
    """What `totals` reads: a logged request, as the admin API or the database gives it."""

    @property
    def duration_ms(self) -> float: ...
    @property
    def ttft_ms(self) -> float | None: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def tokens_per_second(self) -> float | None: ...


def totals(row: Counted) -> str:
    """A logged request's numbers in one line: total, time to first token, prompt and output tokens."""
    parts = [
        f"total {ms(row.duration_ms)}",
        f"time to first token {ms(row.ttft_ms)}",
        f"prompt {trace.tokens(row.prompt_tokens)} ({row.cached_tokens} cached)",
        f"output {trace.tokens(row.completion_tokens)}",
    ]
    if row.tokens_per_second is not None:
        parts[-1] += f" at {row.tokens_per_second:.1f} tokens/s"
    return " · ".join(parts)


class TimelineRow(NamedTuple):
    """One step of a request's timeline: its words, when it happened, how long it took to happen (since the
    step before it; the first: since the request arrived), and its bar's columns [start, end)."""

    label: str
    details: str
    at_ms: float
    took_ms: float
    start: int
    end: int
    failed: bool


def timeline_rows(timeline: list[trace.Step], width: int) -> list[TimelineRow]:
    """The steps on one scale of `width` columns, from the request's arrival to its last step, each bar
    running from the step before to this one: the web console's waterfall (`server/console/charts.py`),
    so "prompt evaluated" carries the prompt's time and "finished" the decoding's. An instant step still
    gets one cell."""
    total = max((s.at_ms for s in timeline), default=0.0) or 1.0
    rows = []
    previous = 0.0
    for step in timeline:
        start = min(round(previous / total * width), width - 1)
        end = min(max(round(step.at_ms / total * width), start + 1), width)
        label, details = trace.describe_step(step)
        took = step.at_ms - previous
        rows.append(TimelineRow(label, details, step.at_ms, took, start, end, step.name == trace.FAILED))
        previous = step.at_ms
    return rows


TIMELINE_BAR = 24  # the bars' width beside a details column
TIMELINE_BAR_ALONE = 40  # at most, with the details on lines of their own
DETAILS_ROOM = 48  # the least room for a details column beside the bars; less: details under each step


class Timeline:
    """A request's timeline as a waterfall (`timeline_rows`), laid out for the width it is drawn at: the
    details in a column of their own where it can be `DETAILS_ROOM` wide, else each under its step on a
    line of its own (at 80 columns); long details wrap there, never cut."""

    def __init__(self, steps: list[trace.Step]) -> None:
        self.steps = steps

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(options.max_width, 40), options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        sample = timeline_rows(self.steps, 1)
        step_w = max([4, *(len(r.label) for r in sample)])
        at_w = max([2, *(len(ms(r.at_ms)) for r in sample)])
        took_w = max([4, *(len(ms(r.took_ms)) for r in sample)])
        fixed = step_w + at_w + took_w + 3 * 2  # and two spaces after each column
        if width - fixed - TIMELINE_BAR - 2 >= DETAILS_ROOM:
            yield self._table(TIMELINE_BAR)
            return
        bar_width = max(8, min(TIMELINE_BAR_ALONE, width - fixed))
        header = ("STEP".ljust(step_w), "  ", "AT".rjust(at_w), "  ", "TOOK".rjust(took_w))
        yield Text.assemble(*header, style="bold", no_wrap=True, overflow="crop")
        for row in timeline_rows(self.steps, bar_width):
            line = Text.assemble(
                row.label.ljust(step_w),
                "  ",
                ms(row.at_ms).rjust(at_w),
                "  ",
                ms(row.took_ms).rjust(took_w),
                "  ",
                _timeline_bar(row),
                no_wrap=True,
                overflow="crop",
            )
            yield line
            if row.details:
                yield Padding(Text(row.details, "dim", overflow="fold"), (0, 0, 0, 2))

    def _table(self, bar_width: int) -> Table:
        table = Table(box=None, pad_edge=False)
        table.add_column("STEP", no_wrap=True)
        table.add_column("AT", no_wrap=True, justify="right")
        table.add_column("TOOK", no_wrap=True, justify="right")
        table.add_column("", no_wrap=True, width=bar_width)
        table.add_column("DETAILS", overflow="fold")  # a long model id is one word: folded, never cut
        for row in timeline_rows(self.steps, bar_width):
            table.add_row(row.label, ms(row.at_ms), ms(row.took_ms), _timeline_bar(row), row.details)
        return table


def timeline(steps: list[trace.Step]) -> Timeline:
    """A request's timeline as the TUI and `spark log ID` draw it (see `Timeline`)."""
    return Timeline(steps)


def _timeline_bar(row: TimelineRow) -> Text:
    return Text(" " * row.start) + Text("█" * (row.end - row.start), "red" if row.failed else "cyan")


def content(zero_retention: bool, kept: dict[str, Any] | None) -> RenderableType:
    """What a logged request asked and answered (`content` of `GET /api/requests/{id}`), or why there is none."""
    if zero_retention:
        return Text("Content not kept: the request used a zero-retention key.", style="dim")
    if kept is None:
        return Text("No content was kept.", style="dim")
    lines: list[Text] = []
    request: dict[str, Any] = kept.get("request") or {}
    for message in request.get("messages", []):
        lines.append(Text.assemble((f"{message.get('role')}: ", "bold"), _message_text(message.get("content"))))
    if "prompt" in request:
        lines.append(Text.assemble(("prompt: ", "bold"), str(request["prompt"])))
    for value in request.get("input", []):
        lines.append(Text.assemble(("input: ", "bold"), str(value)))
    if kept.get("body") is not None:
        lines.append(Text.assemble(("body (not decoded): ", "bold"), str(kept["body"])))
    for name, style in (("reasoning", "bold magenta"), ("output", "bold green")):
        if kept.get(name):
            lines.append(Text.assemble((f"{name}: ", style), str(kept[name])))
    for call in kept.get("tool_calls", []):
        lines.append(Text.assemble(("tool call: ", "bold green"), f"{call.get('name')}({call.get('arguments')})"))
    return Text("\n").join(lines)


def _message_text(value: object) -> str:
    if isinstance(value, list):
        return "".join(p.get("text", "[image]") if isinstance(p, dict) else str(p) for p in value)
    return "" if value is None else str(value)
