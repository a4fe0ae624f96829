"""How the TUI writes values in its cells: bars, speeds, times, statuses."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from rich.console import RenderableType
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
    """A logged route's short name (`chat`, `ollama generate`), or the path itself."""
    return _ROUTE_NAMES.get(route, route)


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
        f"prompt {row.prompt_tokens} tokens ({row.cached_tokens} cached)",
        f"output {row.completion_tokens} tokens",
    ]
    if row.tokens_per_second is not None:
        parts[-1] += f" at {row.tokens_per_second:.1f} tokens/s"
    return " · ".join(parts)


def waterfall(timeline: list[trace.Step], duration_ms: float, width: int) -> Table:
    """A request's timeline, one row per step, each with a bar from it to the next step, on one time scale."""
    table = Table(box=None, pad_edge=False)
    for column in ("STEP", "AT", "TOOK", "", "DETAILS"):
        table.add_column(column, no_wrap=column != "DETAILS")
    for row in trace.waterfall(timeline, duration_ms, width):
        style = "red" if row.label == "failed" else "cyan"
        bar = Text(" " * row.start) + Text("█" * (row.end - row.start), style)
        took = "" if row.took_ms is None else ms(row.took_ms)
        table.add_row(row.label, ms(row.at_ms), took, bar, row.details)
    return table


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
