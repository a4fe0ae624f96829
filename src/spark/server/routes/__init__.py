"""HTTP routes: OpenAI's and Anthropic's APIs under /v1, the model list, uploaded files,
batches, llama-server's token routes, reranking, health (and Ollama's liveness check)."""

from spark.server.routes.anthropic import ANTHROPIC_ROUTES
from spark.server.routes.batches import BATCHES_ROUTES, MESSAGE_BATCHES_ROUTES
from spark.server.routes.files import FILES_ROUTES
from spark.server.routes.health import HEALTH_ROUTES
from spark.server.routes.llama import LLAMA_ROUTES, TOKEN_ROUTES
from spark.server.routes.models import MODEL_ROUTES
from spark.server.routes.openai import OPENAI_ROUTES
from spark.server.routes.rerank import RERANK_ROUTES

__all__ = [
    "ANTHROPIC_ROUTES",
    "BATCHES_ROUTES",
    "FILES_ROUTES",
    "HEALTH_ROUTES",
    "LLAMA_ROUTES",
    "MESSAGE_BATCHES_ROUTES",
    "MODEL_ROUTES",
    "OPENAI_ROUTES",
    "RERANK_ROUTES",
    "TOKEN_ROUTES",
]
