"""What every route shares: settings, the model library, the scheduler and the API keys."""

from __future__ import annotations

from typing import Any, cast

from litestar.connection import ASGIConnection

from spark.library import Library
from spark.runners.scheduler import Scheduler
from spark.settings import Settings
from spark.store.keys import KeyTable


class ServerState:
    """The server's long-lived objects, made once by `create_app`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.library = Library(settings)
        self.keys = KeyTable(self.library.db)
        self.scheduler = Scheduler(settings, self.library)
        self.max_tokens_limit = settings.max_tokens_limit or None
        self.timeout = settings.request_timeout_seconds

    async def close(self) -> None:
        """Stop every runner, write pending key uses, close the database."""
        try:
            await self.scheduler.close()
        finally:
            self.keys.flush_uses()
            self.library.close()


def state_of(connection: ASGIConnection[Any, Any, Any, Any]) -> ServerState:
    return cast(ServerState, connection.app.state.spark)
