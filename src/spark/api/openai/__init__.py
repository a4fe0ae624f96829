"""OpenAI-compatible wire format: request bodies -> spark.types, events -> JSON / SSE.

Routes served with these functions:

- `GET /v1/models`, `GET /v1/models/{id}`: `model_list_body`, `model_body`
- `POST /v1/chat/completions`: `parse_chat`, then `chat_completion_body` or `ChatStream`
- `GET /v1/chat/completions[/{id}[/messages]]`, `POST`/`DELETE /v1/chat/completions/{id}`: `stored_chats`
- `POST /v1/responses`: `parse_responses`, then `response_body` or `ResponseStream`
- `POST /v1/responses/input_tokens`: `parse_responses`, then `input_tokens_body`
- `POST /v1/completions`: `parse_completion`, then `completion_body` or `CompletionStream`
- `POST /v1/embeddings`: `parse_embeddings`, then `embeddings_body`
- any error: `error_body`

`requests` reads bodies (everything raises `spark.errors.InvalidRequest` with
`param` set for bad input); `responses` writes them. docs/compatibility.md
lists which parameters are read, ignored and refused.
"""

from spark.api.openai.requests import (
    ChatCall,
    CompletionCall,
    EmbeddingCall,
    parse_chat,
    parse_completion,
    parse_embeddings,
)
from spark.api.openai.responses import (
    ChatStream,
    ChoicesStream,
    CompletionStream,
    chat_completion_body,
    completion_body,
    embeddings_body,
    error_body,
    model_body,
    model_list_body,
)
from spark.api.openai.responses_api import (
    Echo,
    ResponsesCall,
    ResponseStream,
    input_tokens_body,
    parse_responses,
    response_body,
)

__all__ = [
    "ChatCall",
    "ChatStream",
    "ChoicesStream",
    "CompletionCall",
    "CompletionStream",
    "Echo",
    "EmbeddingCall",
    "ResponseStream",
    "ResponsesCall",
    "chat_completion_body",
    "completion_body",
    "embeddings_body",
    "error_body",
    "input_tokens_body",
    "model_body",
    "model_list_body",
    "parse_chat",
    "parse_completion",
    "parse_embeddings",
    "parse_responses",
    "response_body",
]
