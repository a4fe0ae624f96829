"""Real traffic against a real `spark serve`: many concurrent clients, or a long mix with faults.

Shared by the load and soak tests (few clients, short) and by bench/load.py and bench/soak.py
(200 clients, 30 minutes), so that the figures printed and the behaviour asserted come from one
driver. A client's outcome is ok (the answer came and ended normally), refused (the API's
overloaded status) or failed (anything else).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import psutil

HEALTH_EVERY_SECONDS = 0.005  # often enough that a 99th percentile is more than the one worst probe
REFUSED_STATUS = {"openai": 429, "anthropic": 529}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(proc: subprocess.Popen[str], url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited: {proc.communicate()[0]}"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the server did not answer /health")


@dataclass
class Served:
    """A running `spark serve` process."""

    proc: subprocess.Popen[str]
    url: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def runner_pids(self) -> list[int]:
        """The runner processes (the server's child processes)."""
        try:
            return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def rss_bytes(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)

    def open_fds(self) -> int:
        return int(psutil.Process(self.pid).num_fds())


@contextmanager
def spark_serve(home: Path, **env: str) -> Iterator[Served]:
    """`spark serve` on a free port with SPARK_HOME=`home` and `env` (SPARK_* settings), stopped with
    SIGTERM when the block ends; its output is printed when the block fails.

    The output goes to a file: a pipe read only at the end fills up during a long run."""
    port = free_port()
    environ = {**os.environ, "SPARK_HOME": str(home), "SPARK_THREADS": "1", "SPARK_PORT": str(port), **env}
    with tempfile.TemporaryFile("w+") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spark", "serve"], stdout=output, stderr=subprocess.STDOUT, text=True, env=environ
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(proc, url)
            yield Served(proc, url)
        except BaseException:
            stop_server(proc)
            output.seek(0)
            print(output.read()[-20_000:])  # what the server said, for the failure's report
            raise
        stop_server(proc)


def stop_server(proc: subprocess.Popen[str], sig: signal.Signals | None = signal.SIGTERM, timeout: float = 60) -> str:
    """Send `sig` (None: it was sent already) unless the server has exited, wait for it to exit
    (killed past `timeout`), and return its output."""
    if sig is not None and proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)[0] or ""
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0] or ""


def percentile(values: list[float], p: float) -> float | None:
    """The p-th percentile (0-100) of `values`, None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# --- one client ----------------------------------------------------------------------

Kind = Literal["ok", "refused", "failed"]


@dataclass
class Outcome:
    kind: Kind
    status: int
    latency: float
    ttft: float | None = None
    retry_after: str | None = None
    detail: str = ""


def chat_body(api: str, model: str, max_tokens: int, content: str = "Say something.") -> dict[str, object]:
    return {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "messages": [{"role": "user", "content": content}],
    }


PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


class _Events:
    """Reads one stream's SSE `data:` lines into its outcome."""

    def __init__(self, start: float, cancel_after: int | None) -> None:
        self.start, self.cancel_after = start, cancel_after
        self.ttft: float | None = None
        self.events = 0

    def line(self, line: str) -> Outcome | None:
        """The outcome once `line` ends the stream, else None."""
        if not line.startswith("data: "):
            return None
        data = line[6:]
        self.events += 1
        now = time.perf_counter() - self.start
        if '"error"' in data:
            return Outcome("failed", 200, now, self.ttft, None, data[:300])
        if self.ttft is None and ('"content":"' in data or '"text_delta"' in data):
            self.ttft = now
        if data == "[DONE]" or '"message_stop"' in data:
            return Outcome("ok", 200, now, self.ttft)
        if self.cancel_after is not None and self.events >= self.cancel_after:
            return Outcome("ok", 200, now, self.ttft, None, "cancelled")
        return None

    def ended_early(self) -> Outcome:
        return Outcome("failed", 200, time.perf_counter() - self.start, self.ttft, None, "the stream ended early")


def _refusal_or_failure(api: str, status: int, start: float, retry_after: str | None, text: str) -> Outcome:
    kind: Kind = "refused" if status == REFUSED_STATUS[api] else "failed"
    return Outcome(kind, status, time.perf_counter() - start, None, retry_after, text)


async def stream_once(
    client: httpx.AsyncClient, api: str, body: dict[str, object], *, cancel_after: int | None = None
) -> Outcome:
    """One streamed chat on `api` ("openai" or "anthropic"); with `cancel_after`, the client goes away
    after that many events (an ok outcome)."""
    start = time.perf_counter()
    try:
        async with client.stream("POST", PATHS[api], json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                return _refusal_or_failure(api, r.status_code, start, r.headers.get("retry-after"), text)
            events = _Events(start, cancel_after)
            async for line in r.aiter_lines():
                if (outcome := events.line(line)) is not None:
                    return outcome
            return events.ended_early()
    except httpx.HTTPError as e:
        return Outcome("failed", 0, time.perf_counter() - start, None, None, f"{type(e).__name__}: {e}")


async def stream_raw(url: str, key: str, api: str, body: dict[str, object]) -> Outcome:
    """`stream_once` over a bare HTTP/1.1 connection: hundreds of these cost the client little, so a
    load test on one machine measures the server rather than its client library."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    payload = json.dumps(body).encode()
    head = (
        f"POST {PATHS[api]} HTTP/1.1\r\nhost: {host}:{port}\r\nauthorization: Bearer {key}\r\n"
        f"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
        f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n"
    )
    start = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except OSError as e:
        return Outcome("failed", 0, time.perf_counter() - start, None, None, f"connect: {e}")
    try:
        writer.write(head.encode() + payload)
        status = int((await reader.readline()).split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        if status != 200:
            text = (await reader.read()).decode(errors="replace")  # the server closes after it
            return _refusal_or_failure(api, status, start, headers.get("retry-after"), text)
        events, pending = _Events(start, None), b""
        while size := int((await reader.readline()).strip() or b"0", 16):  # chunked: size line, data, CRLF
            pending += (await reader.readexactly(size + 2))[:-2]
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                if (outcome := events.line(raw.decode().rstrip("\r"))) is not None:
                    return outcome
        return events.ended_early()
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as e:
        return Outcome("failed", 0, time.perf_counter() - start, None, None, f"{type(e).__name__}: {e}")
    finally:
        writer.close()


def _probe_health(url: str, stop: Any, out: Any) -> None:
    """In its own process: GET /health every HEALTH_EVERY_SECONDS until `stop`, then send
    (latencies, failures) to `out`."""
    latencies: list[float] = []
    failures: list[str] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                r = client.get("/health")
                if r.status_code != 200:
                    failures.append(f"HTTP {r.status_code}")
            except httpx.HTTPError as e:
                failures.append(type(e).__name__)
            latencies.append(time.perf_counter() - start)
            stop.wait(HEALTH_EVERY_SECONDS)
    out.send((latencies, failures))


@contextmanager
def health_probe(url: str) -> Iterator[tuple[list[float], list[str]]]:
    """/health probed from a separate process while the block runs (the clients' own event loop,
    busy with hundreds of streams, would delay the probe itself); the lists fill when it ends."""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_probe_health, args=(url, stop, send), daemon=True)
    proc.start()
    latencies: list[float] = []
    failures: list[str] = []
    try:
        yield latencies, failures
    finally:
        stop.set()
        got_latencies, got_failures = receive.recv()
        proc.join(10)
        latencies.extend(got_latencies)
        failures.extend(got_failures)


# --- load: many clients at once ---------------------------------------------------------


@dataclass
class LoadReport:
    outcomes: list[Outcome]
    health: list[float]
    health_failures: list[str]
    rss_before: int
    rss_after: int
    runner_rss: int
    seconds: float

    def count(self, kind: Kind) -> int:
        return sum(o.kind == kind for o in self.outcomes)

    def table(self) -> str:
        ok = [o for o in self.outcomes if o.kind == "ok"]
        refused = [o for o in self.outcomes if o.kind == "refused"]

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v * 1000:.0f} ms"

        rows = [
            ("clients", str(len(self.outcomes))),
            ("ok / refused / failed", f"{len(ok)} / {len(refused)} / {self.count('failed')}"),
            ("refused with Retry-After", f"{sum(o.retry_after is not None for o in refused)} of {len(refused)}"),
            ("refusal latency p50 / p99", f"{ms(percentile([o.latency for o in refused], 50))} / "
             f"{ms(percentile([o.latency for o in refused], 99))}"),
            ("TTFT p50 / p99 (ok)", f"{ms(percentile([o.ttft for o in ok if o.ttft], 50))} / "
             f"{ms(percentile([o.ttft for o in ok if o.ttft], 99))}"),
            ("latency p50 / p99 (ok)", f"{ms(percentile([o.latency for o in ok], 50))} / "
             f"{ms(percentile([o.latency for o in ok], 99))}"),
            ("/health p50 / p99 / max", f"{ms(percentile(self.health, 50))} / {ms(percentile(self.health, 99))} / "
             f"{ms(max(self.health, default=None))} ({len(self.health)} probes, {len(self.health_failures)} failed)"),
            ("server RSS before / after", f"{self.rss_before / 2**20:.0f} MiB / {self.rss_after / 2**20:.0f} MiB"),
            ("runner RSS after", f"{self.runner_rss / 2**20:.0f} MiB"),
            ("wall time", f"{self.seconds:.1f} s"),
        ]  # fmt: skip
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run_load(served: Served, key: str, model: str, clients: int, *, max_tokens: int = 16) -> LoadReport:
    """`clients` streamed chats at once (half OpenAI, half Anthropic), with /health probed throughout."""

    async def main() -> tuple[list[Outcome], float]:
        start = time.perf_counter()
        apis = ["openai" if i % 2 == 0 else "anthropic" for i in range(clients)]
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(stream_raw(served.url, key, api, chat_body(api, model, max_tokens)) for api in apis)),
            300,
        )
        return list(outcomes), time.perf_counter() - start

    rss_before = served.rss_bytes()
    with health_probe(served.url) as (health, failures):
        outcomes, seconds = asyncio.run(main())
    runner_rss = sum(psutil.Process(p).memory_info().rss for p in served.runner_pids())
    return LoadReport(outcomes, health, failures, rss_before, served.rss_bytes(), runner_rss, seconds)


# --- soak: a long mix of traffic, with a runner killed now and then -----------------------


@dataclass
class SoakReport:
    requests: dict[str, int] = field(default_factory=dict)  # by kind of request
    server_errors: list[str] = field(default_factory=list)  # 5xx (or a failed stream) not explained by a kill
    killed_failures: int = 0  # requests that failed because their runner was killed under them
    kills: int = 0
    fds: list[int] = field(default_factory=list)  # the server's open file descriptors, sampled
    rss: list[int] = field(default_factory=list)  # the server's RSS, sampled
    runners_left: int = 0
    seconds: float = 0.0

    def table(self) -> str:
        def span(values: list[int], scale: float = 1, unit: str = "") -> str:
            """The first sample, one at each quarter of the run and the last: flat, or still growing."""
            if not values:
                return "-"
            quarters = [values[min(len(values) - 1, q * len(values) // 4)] for q in range(5)]
            return " -> ".join(f"{v / scale:.0f}{unit}" for v in quarters) + f" (max {max(values) / scale:.0f}{unit})"

        rows = [
            ("duration", f"{self.seconds:.0f} s"),
            ("requests", ", ".join(f"{k} {v}" for k, v in sorted(self.requests.items()))),
            ("total requests", str(sum(self.requests.values()))),
            ("runners killed", str(self.kills)),
            ("requests failed by a kill", str(self.killed_failures)),
            ("other 5xx / failed streams", str(len(self.server_errors))),
            ("server fds by quarter", span(self.fds)),
            ("server RSS by quarter", span(self.rss, 2**20, " MiB")),
            ("runner processes after stop", str(self.runners_left)),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def run_soak(
    served: Served,
    key: str,
    chat_model: str,
    embed_model: str,
    seconds: float,
    *,
    kill_every: float,
    workers: int = 4,
) -> SoakReport:
    """Mixed traffic from `workers` clients for `seconds`: chats, streams (some cancelled), tool calls,
    embeddings and bad requests, with a runner killed every `kill_every` seconds. A 5xx or failed stream
    counts against the server unless it came while a kill was being recovered from."""
    report = SoakReport()
    kill_times: list[float] = []

    def after_kill(start: float) -> bool:
        # a request that was running when a runner was killed, or began while it restarted
        return any(start - 10 <= t for t in kill_times)

    async def worker(client: httpx.AsyncClient, n: int, deadline: float) -> None:
        i = n
        while time.monotonic() < deadline:
            i += workers
            kind = ("chat", "stream", "anthropic", "cancel", "tools", "embed", "bad")[i % 7]
            report.requests[kind] = report.requests.get(kind, 0) + 1
            start = time.monotonic()
            problem = await one_mixed(client, kind, chat_model, embed_model)
            if problem is not None:
                if after_kill(start):
                    report.killed_failures += 1
                else:
                    report.server_errors.append(f"{kind}: {problem}")

    async def killer(deadline: float) -> None:
        while time.monotonic() + kill_every < deadline:
            await asyncio.sleep(kill_every)
            pids = served.runner_pids()
            if pids:
                kill_times.append(time.monotonic())
                with suppress(ProcessLookupError):
                    os.kill(pids[report.kills % len(pids)], signal.SIGKILL)
                report.kills += 1

    async def sampler(deadline: float) -> None:
        while time.monotonic() < deadline:
            report.fds.append(served.open_fds())
            report.rss.append(served.rss_bytes())
            await asyncio.sleep(min(5.0, max(0.5, seconds / 20)))

    async def main() -> None:
        headers = {"authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"}
        async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=120) as client:
            # both models loaded and a connection per worker open before the first sample: the baseline
            kinds = ("chat", "embed") * (workers // 2 + 1)
            await asyncio.gather(*(one_mixed(client, kind, chat_model, embed_model) for kind in kinds[:workers]))
            start = time.monotonic()
            deadline = start + seconds
            await asyncio.gather(
                *(worker(client, n, deadline) for n in range(workers)), killer(deadline), sampler(deadline)
            )
            report.seconds = time.monotonic() - start
        # settle: file descriptors and memory measured once the traffic is over
        await asyncio.sleep(1.0)
        report.fds.append(served.open_fds())
        report.rss.append(served.rss_bytes())

    asyncio.run(main())
    return report


async def one_mixed(client: httpx.AsyncClient, kind: str, chat_model: str, embed_model: str) -> str | None:
    """One request of `kind`; what went wrong on the server's side, or None."""
    user = [{"role": "user", "content": "Tell me about the weather in Paris."}]
    if kind in ("stream", "anthropic", "cancel"):
        api = "anthropic" if kind == "anthropic" else "openai"
        outcome = await stream_once(
            client, api, chat_body(api, chat_model, 24), cancel_after=3 if kind == "cancel" else None
        )
        return None if outcome.kind != "failed" else f"{outcome.status} {outcome.detail[:200]}"
    if kind == "embed":
        r = await client.post("/v1/embeddings", json={"model": embed_model, "input": ["a sentence", "another"]})
    elif kind == "bad":
        r = await client.post("/v1/chat/completions", json={"model": chat_model, "messages": "not a list"})
        return None if r.status_code == 400 else f"bad request answered {r.status_code}"
    else:
        body: dict[str, object] = {"model": chat_model, "max_tokens": 16, "messages": user}
        if kind == "tools":
            body["tools"] = TOOLS
        r = await client.post("/v1/chat/completions", json=body)
    return None if r.status_code == 200 else f"{r.status_code} {r.text[:200]}"


def prepare_home(home: Path, *models: Path) -> tuple[str, list[str]]:
    """A SPARK_HOME with `models` installed and an API key: (the key, the model ids)."""
    from spark.library import Library
    from spark.settings import load_settings
    from spark.store.db import Database
    from spark.store.keys import KeyTable

    settings = load_settings(env={"SPARK_HOME": str(home)})
    with Library(settings) as library:
        ids = [library.add_local(path).id for path in models]
    return KeyTable(Database(settings.db_path)).create("traffic")[1], ids


def runners_gone(pids: list[int], timeout: float = 10) -> int:
    """How many of `pids` are still alive after `timeout` seconds."""
    procs = []
    for pid in pids:
        with suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return len(alive)
