"""What every route shares: settings, the model library, the scheduler, the API keys, the request log."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from litestar.connection import ASGIConnection

from spark.events import EventBus
from spark.fleet.forward import new_client, new_hop_pool
from spark.fleet.member import Membership
from spark.fleet.registry import Registry
from spark.fleet.report import Capacity, Checksums, DecodeRates, capacity
from spark.library import Library
from spark.library.jobs import PullJobs
from spark.runners.scheduler import Scheduler
from spark.server.answering import Answering
from spark.server.background import STOPPED_MESSAGE, BackgroundRuns
from spark.server.batches import BatchRunner
from spark.server.draining import Drain
from spark.server.metrics import Metrics
from spark.settings import Settings, setting_sources
from spark.store.batches import BatchTable
from spark.store.chats import ChatCompletionTable
from spark.store.conversations import ConversationTable
from spark.store.db import Database
from spark.store.files import FileTable
from spark.store.keys import KeyTable
from spark.store.nodes import NodeTable
from spark.store.requests import RequestTable
from spark.store.responses import ResponseTable
from spark.store.writer import LogWriter

if TYPE_CHECKING:
    import httpx

FLUSH_WAIT_SECONDS = 1.0  # how long a read of the request log waits for the writer


class ServerState:
    """The server's long-lived objects, made once by `create_app`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.settings_lock = asyncio.Lock()  # one settings change at a time, file and state alike
        # where each value came from at the start (a value no layer gives is an argument, `--port`): a
        # setting that applies at restart keeps its running value, and so its source, until then
        self.sources_at_start = setting_sources(settings)
        self.events = EventBus()  # live events for /api/events
        self.db = Database(settings.db_path)  # one connection pool for the library, keys and request log
        self.library = Library(settings, db=self.db)
        self.keys = KeyTable(self.db)
        self.pulls = PullJobs(self.library, self.events)  # resumes the pulls a previous run left unfinished
        self.scheduler = Scheduler(settings, self.library, self.events)
        self.max_tokens_limit = settings.max_tokens_limit or None
        self.timeout = settings.request_timeout_seconds
        self.drain = Drain()  # the generations in flight, ended by a graceful stop
        self.metrics = Metrics()
        # the fleet: this server as a central (its nodes), and as a node of another (with `central`)
        self.fleet = Registry(NodeTable(self.db), self.events, settings.node_report_seconds)
        self._fleet_client: httpx.AsyncClient | None = None  # made on first use: see `fleet_client`
        self.hop_pool = new_hop_pool()  # routed requests
        self.member = Membership(settings, self.events, self._node_capacity) if settings.central else None
        self._checksums = Checksums()
        self.requests = RequestTable(self.db)
        self.responses = ResponseTable(self.db)  # stored Responses API answers
        self.chats = ChatCompletionTable(self.db)  # chat completions made with `store`
        self.conversations = ConversationTable(self.db)  # Conversations API
        self.files = FileTable(self.db)  # Files API uploads
        self.batches = BatchTable(self.db)  # Batch APIs
        self.batch_runner = BatchRunner(
            self.batches, self.files, lambda: self.settings.parallel, lambda: self.drain.stopping
        )
        self.background = BackgroundRuns()  # background Responses API answers, running or just ended
        self.answering = Answering()  # streamed Responses API answers, until they are stored
        self.responses.end_unfinished(STOPPED_MESSAGE)  # those a previous run of the server left running
        # retention 0 keeps no request log: nothing is written at all
        self.request_log = (
            LogWriter(
                self.requests,
                retention_seconds=settings.log_retention_days * 86400,
                max_bytes=settings.log_max_mb * 1024 * 1024 or None,
            )
            if settings.log_retention_days
            else None
        )

    def fleet_client(self) -> httpx.AsyncClient:
        """The client of the central's health checks and admin calls to its nodes (made on first use)."""
        if self._fleet_client is None:
            self._fleet_client = new_client()
        return self._fleet_client

    def _node_capacity(self, rates: DecodeRates) -> Capacity:
        """What this server reports to its central."""
        return capacity(self.settings, self.library, self.scheduler, checksums=self._checksums, rates=rates)

    def apply_settings(self, settings: Settings) -> None:
        """Use `settings` from now on; only values that can apply while the server runs may differ
        from the current ones (the caller keeps the others for the next start)."""
        self.settings = settings
        self.max_tokens_limit = settings.max_tokens_limit or None
        self.timeout = settings.request_timeout_seconds
        self.scheduler.use_settings(settings)
        logging.getLogger("spark").setLevel(settings.log_level.upper())

    async def flush_log(self) -> None:
        """Wait (briefly) until the request log has written what it was given, so reads see it."""
        if self.request_log is not None:
            await asyncio.to_thread(self.request_log.flush, FLUSH_WAIT_SECONDS)

    async def close(self) -> None:
        """Stop every runner, write the pending request log and key uses, close the database."""
        try:
            await asyncio.to_thread(self.pulls.close)
            if self._fleet_client is not None:
                await self._fleet_client.aclose()
            await self.hop_pool.aclose()
            await self.background.close()
            await self.batch_runner.close()
            await self.scheduler.close()
        finally:
            self.events.close()
            if self.request_log is not None:
                self.request_log.close()
            self.keys.flush_uses()
            self.db.close()


def state_of(connection: ASGIConnection[Any, Any, Any, Any]) -> ServerState:
    return cast(ServerState, connection.app.state.spark)
