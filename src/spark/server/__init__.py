"""The HTTP server: OpenAI- and Anthropic-compatible APIs on one port."""

from spark.server.app import create_app

__all__ = ["create_app"]
