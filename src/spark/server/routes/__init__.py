"""HTTP routes: OpenAI's and Anthropic's APIs under /v1, the model list, health."""

from spark.server.routes.anthropic import ANTHROPIC_ROUTES
from spark.server.routes.health import health
from spark.server.routes.models import MODEL_ROUTES
from spark.server.routes.openai import OPENAI_ROUTES

__all__ = ["ANTHROPIC_ROUTES", "MODEL_ROUTES", "OPENAI_ROUTES", "health"]
