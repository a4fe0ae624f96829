"""The HTTP server: OpenAI- and Anthropic-compatible APIs on one port.

`create_app` is imported on first use, so the CLI's commands that only read the server file
(`spark.server.discovery`) start without loading Litestar and every route.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark.server.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from spark.server.app import create_app

        return create_app
    raise AttributeError(f"module 'spark.server' has no attribute {name!r}")
