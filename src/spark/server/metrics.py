"""The server's metrics in Prometheus' text exposition format (version 0.0.4).

Request counters and latency histograms are updated from each finished
request's log record (`Metrics.observe`); queue lengths, loaded models, their
memory and runner restarts are read from the scheduler when scraped.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable
from typing import Final

from spark.runners.scheduler import RunnerState
from spark.store.requests import RequestRecord

# Seconds; fine at the low end, where a small model's first token and short requests land.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
UNKNOWN_MODEL: Final = "unknown"  # the label of requests whose model was not found (keeps labels bounded)

Labels = tuple[tuple[str, str], ...]


class Histogram:
    """Cumulative-bucket histogram of seconds."""

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def lines(self, name: str, labels: Labels) -> list[str]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            out.append(f"{name}_bucket{_labels((*labels, ('le', _number(bound))))} {running}")
        out.append(f"{name}_sum{_labels(labels)} {_number(self.sum)}")
        out.append(f"{name}_count{_labels(labels)} {running}")
        return out


class Metrics:
    """Counters and histograms of the requests this server answered since it started."""

    def __init__(self) -> None:
        self.requests: defaultdict[Labels, int] = defaultdict(int)
        self.prompt_tokens: defaultdict[Labels, int] = defaultdict(int)
        self.completion_tokens: defaultdict[Labels, int] = defaultdict(int)
        self.cached_tokens: defaultdict[Labels, int] = defaultdict(int)
        self.ttft: defaultdict[Labels, Histogram] = defaultdict(Histogram)
        self.duration: defaultdict[Labels, Histogram] = defaultdict(Histogram)

    def observe(self, record: RequestRecord, route: str) -> None:
        """Count one finished request of `route` (its template: ids are not labels, each would be a series)."""
        # a name no model answered to (not found, or in a body refused before it was read) is no label
        model = record.model
        if model is None or record.error_type in ("model_not_found", "invalid_request"):
            model = UNKNOWN_MODEL
        self.requests[(("route", route), ("model", model), ("status", str(record.status)))] += 1
        by_model = (("model", model),)
        self.prompt_tokens[by_model] += record.prompt_tokens
        self.completion_tokens[by_model] += record.completion_tokens
        self.cached_tokens[by_model] += record.cached_tokens
        if record.ttft_ms is not None:
            self.ttft[by_model].observe(record.ttft_ms / 1000.0)
        self.duration[(("route", route), ("model", model))].observe(record.duration_ms / 1000.0)

    def exposition(self, runners: list[RunnerState], *, log_dropped: int = 0) -> str:
        """Every metric as Prometheus text, with the runners' current state."""
        out: list[str] = []

        def family(name: str, kind: str, help_text: str, samples: dict[Labels, int | float]) -> None:
            out.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"))
            out.extend(f"{name}{_labels(labels)} {_number(value)}" for labels, value in sorted(samples.items()))

        def histograms(name: str, help_text: str, series: dict[Labels, Histogram]) -> None:
            out.extend((f"# HELP {name} {help_text}", f"# TYPE {name} histogram"))
            for labels, histogram in sorted(series.items()):
                out.extend(histogram.lines(name, labels))

        family(
            "spark_requests_total",
            "counter",
            "API requests answered, by route, model and HTTP status.",
            dict(self.requests),
        )
        family("spark_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", dict(self.prompt_tokens))
        family("spark_completion_tokens_total", "counter", "Tokens generated.", dict(self.completion_tokens))
        family(
            "spark_cached_prompt_tokens_total",
            "counter",
            "Prompt tokens reused from a slot's cache.",
            dict(self.cached_tokens),
        )
        histograms(
            "spark_time_to_first_token_seconds",
            "Time from a request's arrival to its first output token.",
            dict(self.ttft),
        )
        histograms(
            "spark_request_duration_seconds",
            "Time from a request's arrival to the end of its response.",
            dict(self.duration),
        )

        def per_model(value: Callable[[RunnerState], int | float]) -> dict[Labels, int | float]:
            samples: defaultdict[Labels, int | float] = defaultdict(int)
            for r in runners:  # a model may have two runners: a new one and one finishing its requests
                samples[(("model", r.model),)] += value(r)
            return samples

        loaded: defaultdict[Labels, int | float] = defaultdict(int)
        for r in runners:
            loaded[(("model", r.model), ("status", r.status))] += 1
        family("spark_model_loaded", "gauge", "Runners by model and status (loading, ready, ...).", loaded)
        family(
            "spark_model_memory_bytes",
            "gauge",
            "Host memory a loaded model uses (measured once known, else estimated).",
            per_model(lambda r: r.measured_bytes if r.measured_bytes is not None else r.estimate_bytes),
        )
        family("spark_queue_length", "gauge", "Requests waiting for a slot, by model.", per_model(lambda r: r.queued))
        family("spark_slots_busy", "gauge", "Requests generating now, by model.", per_model(lambda r: r.slots_busy))
        family(
            "spark_runner_restarts_total",
            "counter",
            "Restarts of a model's runner after a crash or hang.",
            per_model(lambda r: r.restarts),
        )
        family(
            "spark_request_log_dropped_total",
            "counter",
            "Request log records lost because the disk could not keep up.",
            {(): log_dropped},
        )
        return "\n".join(out) + "\n"


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))
