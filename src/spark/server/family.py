"""Which API a request speaks (OpenAI, Anthropic or Ollama), for error shapes and headers."""

from __future__ import annotations

from typing import Literal

from litestar.types import Scope

Family = Literal["openai", "anthropic", "ollama"]

OLLAMA_PREFIX = "/ollama"  # Ollama's own paths follow it: /ollama/api/chat
OLLAMA_V1 = OLLAMA_PREFIX + "/v1"  # and OpenAI's API again, as Ollama serves it: /ollama/v1/chat/completions
_ANTHROPIC_PATHS = ("/v1/messages",)
_OPENAI_PATHS = (
    "/v1/chat/",
    "/v1/responses",
    "/v1/conversations",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/batches",
    "/v1/rerank",
    "/v2/rerank",
    # llama-server's own routes answer in OpenAI's error shape
    "/rerank",
    "/completion",
    "/infill",
    "/embedding",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/props",
    "/lora-adapters",
)


def api_family(scope: Scope) -> Family:
    """Anthropic for the Messages routes, OpenAI for the completion routes (llama-server's too), Ollama for everything
    else under /ollama/ but its /ollama/v1 (the /v1 routes again, as Ollama serves OpenAI's API
    under its own); on shared routes (models, unknown paths) the `anthropic-version` header that
    Anthropic clients send decides."""
    path: str = scope["path"]
    if path.startswith(OLLAMA_V1 + "/"):
        path = path.removeprefix(OLLAMA_PREFIX)
    elif path.startswith(OLLAMA_PREFIX + "/"):
        return "ollama"
    if path.startswith(_ANTHROPIC_PATHS):
        return "anthropic"
    if path.startswith(_OPENAI_PATHS):
        return "openai"
    for name, _ in scope.get("headers", ()):
        if name == b"anthropic-version":
            return "anthropic"
    return "openai"
