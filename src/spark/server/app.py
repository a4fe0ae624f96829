"""The Litestar application: routes, API keys, request ids, limits, error shapes, lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from litestar import Litestar, Router
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.openapi.config import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin

import spark
from spark.server.admin_auth import AdminAuth, write_admin_token
from spark.server.auth import require_key
from spark.server.console import ConsoleAuth, console_routes
from spark.server.csrf import same_origin_guard
from spark.server.errors import EXCEPTION_HANDLERS
from spark.server.family import OLLAMA_PREFIX
from spark.server.memory_history import MemorySampler, sample_memory
from spark.server.recorder import log_requests
from spark.server.request_ids import REQUEST_ID_HEADER, add_request_id_headers
from spark.server.routes import (
    ANTHROPIC_ROUTES,
    BATCHES_ROUTES,
    FILES_ROUTES,
    HEALTH_ROUTES,
    LLAMA_ROUTES,
    MESSAGE_BATCHES_ROUTES,
    MODEL_ROUTES,
    OPENAI_ROUTES,
    RERANK_ROUTES,
    TOKEN_ROUTES,
)
from spark.server.routes.admin import ADMIN_ROUTES
from spark.server.routes.events import EVENT_ROUTES
from spark.server.routes.fleet import FLEET_ROUTES
from spark.server.routes.keys import KEY_ROUTES
from spark.server.routes.library import LIBRARY_ROUTES
from spark.server.routes.memory import MEMORY_ROUTES
from spark.server.routes.metrics import metrics_route
from spark.server.routes.nodes import NODE_ROUTES
from spark.server.routes.ollama import OLLAMA_ROUTES
from spark.server.routes.runners import RUNNER_ROUTES
from spark.server.routes.settings import SETTINGS_ROUTES
from spark.server.routes.stored import STORED_ROUTES
from spark.server.state import ServerState
from spark.settings import Settings

log = logging.getLogger("spark.server")

KEY_USE_FLUSH_SECONDS = 60.0  # how stale `spark keys list`'s "last used" may be
ADMIN_API_ROUTES = [
    *RUNNER_ROUTES,
    *ADMIN_ROUTES,
    *STORED_ROUTES,
    *KEY_ROUTES,
    *SETTINGS_ROUTES,
    *EVENT_ROUTES,
    *LIBRARY_ROUTES,
    *MEMORY_ROUTES,
    *NODE_ROUTES,
]


class _App(Litestar):
    """Litestar with the msgspec plugin alone.

    Spark's wire types are msgspec Structs. Litestar adds its pydantic and attrs
    plugins whenever those packages are installed (other tools' dependencies
    here, typer's and jsonschema's), which costs the server 9 MiB for nothing.
    """

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        return [*plugins, MsgspecDIPlugin()]


def create_app(settings: Settings) -> Litestar:
    """The server for `settings`; its runners stop when the app shuts down."""
    state = ServerState(settings)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        tasks = [
            asyncio.create_task(_flush_key_uses(state), name="flush key uses"),
            asyncio.create_task(_sweep_nodes(state), name="fleet health"),
        ]
        if state.member is not None:
            tasks.append(asyncio.create_task(_join_central(state), name="fleet membership"))
        state.scheduler.start()
        state.batch_runner.attach(app)  # and goes on with the batches a previous run left
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with suppress(asyncio.CancelledError):
                    await task
            await state.close()

    api = Router(
        "/v1",
        route_handlers=[
            *OPENAI_ROUTES,
            *ANTHROPIC_ROUTES,
            *MODEL_ROUTES,
            *FILES_ROUTES,
            *BATCHES_ROUTES,
            *MESSAGE_BATCHES_ROUTES,
        ],
        guards=[require_key],
        middleware=[log_requests],
        include_in_schema=False,  # OpenAI's and Anthropic's references describe them
    )
    # the same under /ollama/v1, where Ollama serves OpenAI's API (Open WebUI and users point
    # OpenAI clients at an Ollama server's /v1)
    ollama_v1 = Router(OLLAMA_PREFIX, route_handlers=[api], include_in_schema=False)
    # Ollama's native API, beside Spark's own admin API (which holds /api/), with the same key
    ollama = Router(
        f"{OLLAMA_PREFIX}/api",
        route_handlers=OLLAMA_ROUTES,
        guards=[require_key],
        middleware=[log_requests],
        include_in_schema=False,
    )
    # llama-server's token routes, at its paths (not /v1), with the same key
    tokens = Router("/", route_handlers=TOKEN_ROUTES, guards=[require_key], include_in_schema=False)
    # llama-server's own completion routes, and reranking (at /v1/rerank and llama-server's /rerank),
    # logged as the APIs' routes are
    llama = Router(
        "/",
        route_handlers=[*LLAMA_ROUTES, *RERANK_ROUTES],
        guards=[require_key],
        middleware=[log_requests],
        include_in_schema=False,
    )
    # node <-> central calls: each handler checks the fleet's own credentials (spark.server.routes.fleet)
    fleet = Router("/fleet", route_handlers=FLEET_ROUTES, include_in_schema=False)
    admin = AdminAuth(settings, write_admin_token(settings))  # for spark commands on this machine to read
    admin_api = Router("/api", route_handlers=ADMIN_API_ROUTES, guards=[admin.guard, same_origin_guard])
    # the OpenAPI schema of /api/ only, for the admin API's users (same guard)
    openapi = OpenAPIConfig(
        title="Spark admin API",
        version=spark.__version__,
        description="Everything a person manages on a Spark server: see docs/admin-api.md.",
        render_plugins=[JsonRenderPlugin()],
        openapi_router=Router("/api/schema", route_handlers=[], guards=[admin.guard], include_in_schema=False),
        use_handler_docstrings=True,
    )
    origins = settings.cors_origin_list
    cors = (
        CORSConfig(
            allow_origins=origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["*"],
            expose_headers=[REQUEST_ID_HEADER, "request-id"],
        )
        if origins
        else None
    )
    return _App(
        route_handlers=[
            *HEALTH_ROUTES,
            api,
            ollama_v1,
            ollama,
            tokens,
            llama,
            admin_api,
            fleet,
            metrics_route(settings, admin),
            *console_routes(),
        ],
        state=State(
            {
                "spark": state,
                "admin": admin,
                "console": ConsoleAuth(settings, state.db),
                "memory": MemorySampler(state.scheduler),
            }
        ),
        lifespan=[lifespan, sample_memory],
        exception_handlers=EXCEPTION_HANDLERS,
        before_send=[add_request_id_headers],
        request_max_body_size=settings.max_body_bytes,
        cors_config=cors,
        openapi_config=openapi,
        logging_config=None,  # the server's entry point configures logging
    )


async def _flush_key_uses(state: ServerState) -> None:
    while True:
        await asyncio.sleep(KEY_USE_FLUSH_SECONDS)
        try:
            await asyncio.to_thread(state.keys.flush_uses)
        except Exception:
            log.exception("could not record API key uses")


async def _sweep_nodes(state: ServerState) -> None:
    """The fleet's health checks, at the nodes' report pace."""
    while True:
        await asyncio.sleep(state.settings.node_report_seconds)
        try:
            await state.fleet.sweep(state.fleet_client)
        except Exception:
            log.exception("could not check the fleet's nodes")


async def _join_central(state: ServerState) -> None:
    assert state.member is not None
    url = state.settings.advertise_url
    if not url:
        log.error("fleet: cannot join %s: advertise_url is not set", state.member.central)
        return
    await state.member.run(url)
