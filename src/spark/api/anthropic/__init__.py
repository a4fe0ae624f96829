"""Anthropic-compatible wire format: Messages API bodies -> spark.types, events -> JSON / SSE.

Routes served with these functions:

- `POST /v1/messages`: `parse_messages`, then `message_body` or `MessageStream`
- `POST /v1/messages/count_tokens`: `parse_count_tokens`, then `count_tokens_body`
- `GET /v1/models` (with an `anthropic-version` header): `model_list_body`, `model_body`
- any error: `error_body`

`requests` reads bodies (everything raises `spark.errors.InvalidRequest` with
`param` set for bad input); `responses` writes them. docs/compatibility.md
lists which parameters are read, ignored and refused.
"""

from spark.api.anthropic.requests import parse_count_tokens, parse_messages
from spark.api.anthropic.responses import (
    MessageStream,
    count_tokens_body,
    error_body,
    message_body,
    model_body,
    model_list_body,
)

__all__ = [
    "MessageStream",
    "count_tokens_body",
    "error_body",
    "message_body",
    "model_body",
    "model_list_body",
    "parse_count_tokens",
    "parse_messages",
]
