"""Ollama-compatible wire format: Ollama's native API bodies -> spark.types, events -> NDJSON.

Served under `/ollama/api/` (Spark's own admin API holds `/api/`), so an Ollama client is
pointed at `http://host:8080/ollama` with a Spark API key:

- `POST /api/chat`, `/api/generate`: `parse_chat`, `parse_generate`, then `OllamaStream`
  (or `state_change_body` for a body that only loads or unloads the model); a templated generate's
  `context` (`continued`, `with_context`)
- `POST /api/embed`, `/api/embeddings`: `parse_embed`, `parse_embeddings`, then `embed_body`,
  `embedding_body`
- `GET /api/tags`, `/api/ps`, `/api/version`, `POST /api/show`: `tags_body`, `ps_body`,
  `version_body`, `show_body`
- any error: `error_body` (`error_line` inside a stream)

Models are listed as Ollama lists them, `name:tag` (`listed_name`); a name a client sends loses
its `:latest` (`model_name`), and answers echo the name as sent.

docs/compatibility.md lists which fields are read, ignored and refused.
"""

from spark.api.ollama.requests import (
    OllamaCall,
    continued,
    model_name,
    parse_chat,
    parse_embed,
    parse_embeddings,
    parse_generate,
    parse_model_name,
)
from spark.api.ollama.responses import (
    NDJSON,
    LoadedModel,
    OllamaStream,
    capabilities,
    embed_body,
    embedding_body,
    error_body,
    error_line,
    listed_name,
    ps_body,
    show_body,
    state_change_body,
    tags_body,
    version_body,
    with_context,
)

__all__ = [
    "NDJSON",
    "LoadedModel",
    "OllamaCall",
    "OllamaStream",
    "capabilities",
    "continued",
    "embed_body",
    "embedding_body",
    "error_body",
    "error_line",
    "listed_name",
    "model_name",
    "parse_chat",
    "parse_embed",
    "parse_embeddings",
    "parse_generate",
    "parse_model_name",
    "ps_body",
    "show_body",
    "state_change_body",
    "tags_body",
    "version_body",
    "with_context",
]
